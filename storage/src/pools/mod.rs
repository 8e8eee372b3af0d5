//! Pooling policies. A policy decides which device blocks serve which requests; the manager
//! around it does locking, statistics, limits and retries.

mod bfc;
mod cache;

use crate::manager::{AllocError, Backing, Block, PoolKind};

pub(crate) use bfc::Bfc;
pub(crate) use cache::{round_size, SizeCache};

/// What every policy does. Sizes reaching a policy are already positive multiples of `ALIGN`.
pub(crate) trait Policy: Send {
    /// The bytes a request of `size` occupies under this policy.
    fn block_size(&self, size: usize) -> usize;

    /// A block for `size` bytes, and whether it came from the cache.
    fn alloc(&mut self, size: usize, back: &mut Backing) -> Result<(Block, bool), AllocError>;

    /// Takes a block back into the pool.
    fn free(&mut self, block: Block, back: &mut Backing);

    /// Takes a block back and returns its memory to the device as far as the policy can.
    fn direct_free(&mut self, block: Block, back: &mut Backing);

    /// Returns every cached byte it can to the device.
    fn release_cached(&mut self, back: &mut Backing);
}

pub(crate) fn new_policy(kind: PoolKind) -> Box<dyn Policy> {
    match kind {
        PoolKind::Unpooled => Box::new(Unpooled),
        PoolKind::PooledRound { cutoff } => {
            Box::new(SizeCache::new(move |s| round_size(s, cutoff)))
        }
        PoolKind::PooledExact => Box::new(SizeCache::new(|s| s)),
        PoolKind::Bfc => Box::new(Bfc::new()),
    }
}

/// Straight to the device and back.
struct Unpooled;

impl Policy for Unpooled {
    fn block_size(&self, size: usize) -> usize {
        size
    }

    fn alloc(&mut self, size: usize, back: &mut Backing) -> Result<(Block, bool), AllocError> {
        Ok((Block::whole(back.reserve(size)?), false))
    }

    fn free(&mut self, block: Block, back: &mut Backing) {
        back.unreserve(block.into_raw());
    }

    fn direct_free(&mut self, block: Block, back: &mut Backing) {
        back.unreserve(block.into_raw());
    }

    fn release_cached(&mut self, _back: &mut Backing) {}
}
