//! Pools that cache whole device blocks by size: `PooledRound` (sizes rounded to powers of two
//! below a cutoff and to multiples of it above, so that nearby sizes share blocks) and
//! `PooledExact` (sizes kept as asked, aligned).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::Policy;
use crate::device::RawBlock;
use crate::manager::{AllocError, Backing, Block};

/// `PooledRound`'s rounding: the next power of two up to `cutoff`, the next multiple of `cutoff`
/// above it.
pub(crate) fn round_size(size: usize, cutoff: usize) -> usize {
    if size <= cutoff {
        size.next_power_of_two()
    } else {
        size.div_ceil(cutoff).saturating_mul(cutoff)
    }
}

/// Hashes a block size with one multiplication (Fibonacci hashing): sizes are trusted integers,
/// so SipHash's protection is not needed and its cost showed in every alloc and free.
#[derive(Default)]
pub(crate) struct SizeHasher(u64);

impl Hasher for SizeHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Free blocks by block size.
pub(crate) struct SizeCache<R> {
    round: R,
    free: HashMap<usize, Vec<RawBlock>, BuildHasherDefault<SizeHasher>>,
}

impl<R: Fn(usize) -> usize> SizeCache<R> {
    pub(crate) fn new(round: R) -> Self {
        SizeCache {
            round,
            free: HashMap::default(),
        }
    }
}

impl<R: Fn(usize) -> usize + Send> Policy for SizeCache<R> {
    fn block_size(&self, size: usize) -> usize {
        (self.round)(size)
    }

    fn alloc(&mut self, size: usize, back: &mut Backing) -> Result<(Block, bool), AllocError> {
        let block = (self.round)(size);
        if let Some(raw) = self.free.get_mut(&block).and_then(Vec::pop) {
            return Ok((Block::whole(raw), true));
        }
        Ok((Block::whole(back.reserve(block)?), false))
    }

    fn free(&mut self, block: Block, _back: &mut Backing) {
        self.free
            .entry(block.size)
            .or_default()
            .push(block.into_raw());
    }

    fn direct_free(&mut self, block: Block, back: &mut Backing) {
        back.unreserve(block.into_raw());
    }

    fn release_cached(&mut self, back: &mut Backing) {
        for (_, blocks) in self.free.drain() {
            for raw in blocks {
                back.unreserve(raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_size;

    #[test]
    fn rounding_is_powers_of_two_then_multiples_of_the_cutoff() {
        let cut = 1 << 24;
        assert_eq!(round_size(64, cut), 64);
        assert_eq!(round_size(65 * 1024, cut), 128 * 1024);
        assert_eq!(round_size(cut, cut), cut);
        assert_eq!(round_size(cut + 1, cut), 2 * cut);
        assert_eq!(round_size(5 * cut - 3, cut), 5 * cut);
    }
}
