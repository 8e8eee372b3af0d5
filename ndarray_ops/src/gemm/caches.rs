//! The data caches of the core the products run on, and the block sizes they give.
//!
//! Two of the blocking's sizes follow from the caches, read once per process:
//!
//! ```text
//! l1_depth = the deepest b strip (depth x NR floats) within 2/3 of the first-level data
//!            cache, in whole cache lines of depth: 48 KiB -> 256, 32 KiB -> 160
//! b_block  = floats of b packed at a time: half the second-level cache (2 MiB -> 2^18,
//!            1 MiB -> 2^17), so the block stays there while the strips of a pass over it
//! ```
//!
//! A 32 x 256 x 1024 LSTM step with 256-deep strips (32 KiB) on a core of 32 KiB L1: the
//! strip of `b` cannot stay in the first-level cache beside the rows of `a`, and keeping
//! `a`'s strip there instead made the two-layer LSTM's forward pass about 2% faster on such
//! a core (Zen 4), where cores of 48 KiB timed 256 best.
//!
//! The sizes come from Linux's `/sys/devices/system/cpu/cpu0/cache`; where it cannot be read,
//! those of the cores the defaults were timed on (48 KiB and 2 MiB).

use std::sync::OnceLock;

use super::NR;

/// First-level data cache assumed where none can be read.
const DEFAULT_L1: usize = 48 << 10;
/// Second-level cache assumed where none can be read.
const DEFAULT_L2: usize = 2 << 20;

/// Block sizes fitted to this machine's caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Blocking {
    /// Deepest block whose `b` strip stays in the first-level cache.
    pub l1_depth: usize,
    /// Floats of `b` packed at a time.
    pub b_block: usize,
}

impl Blocking {
    /// The sizes for caches of `l1` and `l2` bytes.
    pub(super) fn for_caches(l1: usize, l2: usize) -> Blocking {
        let strip_row = NR * std::mem::size_of::<f32>();
        Blocking {
            l1_depth: (l1 * 2 / 3 / strip_row / 16 * 16).max(16),
            b_block: (l2 / 2 / std::mem::size_of::<f32>()).max(NR * 16),
        }
    }
}

/// This machine's block sizes (read once).
pub(super) fn blocking() -> Blocking {
    static SIZES: OnceLock<Blocking> = OnceLock::new();
    *SIZES.get_or_init(|| {
        let (l1, l2) = read_caches().unwrap_or((DEFAULT_L1, DEFAULT_L2));
        Blocking::for_caches(l1, l2)
    })
}

/// The first-level data and second-level cache sizes of cpu0, in bytes.
fn read_caches() -> Option<(usize, usize)> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let (mut l1, mut l2) = (None, None);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let bytes = parse_size(size.trim())?;
        match (level.trim(), kind.trim()) {
            ("1", "Data") => l1 = Some(bytes),
            ("2", "Unified" | "Data") => l2 = Some(bytes),
            _ => {}
        }
    }
    Some((l1?, l2?))
}

/// `"48K"`, `"2048K"`, `"1M"` or a plain number of bytes.
fn parse_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    Some(n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_caches() {
        // The sizes the defaults were timed at on cores of 48 KiB and 2 MiB.
        assert_eq!(
            Blocking::for_caches(48 << 10, 2 << 20),
            Blocking {
                l1_depth: 256,
                b_block: 1 << 18
            }
        );
        assert_eq!(
            Blocking::for_caches(32 << 10, 1 << 20),
            Blocking {
                l1_depth: 160,
                b_block: 1 << 17
            }
        );
        // Tiny or unreadable-looking caches still give usable blocks.
        let tiny = Blocking::for_caches(0, 0);
        assert!(tiny.l1_depth >= 16 && tiny.b_block >= NR);
    }

    #[test]
    fn sizes_parse_as_linux_writes_them() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("32768"), Some(32768));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size("K"), None);
    }

    #[test]
    fn this_machine_has_sizes() {
        let b = blocking();
        assert!(b.l1_depth >= 16 && b.l1_depth.is_multiple_of(16), "{b:?}");
        assert!(b.b_block >= NR * 16, "{b:?}");
    }
}
