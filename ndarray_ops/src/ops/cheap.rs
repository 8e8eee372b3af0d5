//! Which engine ops are cheap ([`engine::Op::cheap`]): run by the pushing thread when runnable at
//! once, as a hand-over to a worker would cost more than the op.

use engine::Op;

/// Ops touching at most this many elements (inputs and outputs together) are marked cheap
/// ([`engine::Op::cheap`]): a few microseconds at worst (a dot of 18x18 matrices), so when one is
/// runnable at once the pushing thread runs it rather than paying a hand-over to a worker.
pub const CHEAP_ELEMENTS: usize = 1024;

/// Ops that only move memory (copies, fills, writes from the host, reads back) of at most this
/// many bytes are cheap whatever their elements: a `memcpy` of 64 KiB takes a few
/// microseconds, and a hand-over to a worker costs more. A push and pull of a 4 KiB key across
/// two processes, its two copies handed to workers, took 13-22 µs; with them run where they
/// were pushed, 6.6 µs.
pub const CHEAP_COPY_BYTES: usize = 64 << 10;

/// Marks `op` cheap when it touches at most [`CHEAP_ELEMENTS`] elements: the rule for the
/// registry ops the NDArray layer pushes (those that only move memory go by their bytes,
/// [`cheap_copy_if_small`]).
#[inline]
pub(crate) fn cheap_if_small(op: Op<'_>, elements: usize) -> Op<'_> {
    match elements <= CHEAP_ELEMENTS {
        true => op.cheap(),
        false => op,
    }
}

/// Marks an op that moves `bytes` of memory cheap when they are at most [`CHEAP_COPY_BYTES`].
#[inline]
pub(crate) fn cheap_copy_if_small(op: Op<'_>, bytes: usize) -> Op<'_> {
    match bytes <= CHEAP_COPY_BYTES {
        true => op.cheap(),
        false => op,
    }
}
