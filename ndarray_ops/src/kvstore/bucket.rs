//! The bucket: values pushed to a store across processes and not yet summed over the ranks,
//! the small ones packed one after another into one buffer for a single collective.

use std::collections::VecDeque;

use super::Key;
use crate::error::{invalid, Result};
use crate::NDArray;

/// A pushed value waiting in the bucket for its sum across processes, and what its update
/// then needs.
pub(super) struct Pending {
    pub(super) key: Key,
    /// The sum within this process.
    pub(super) merged: NDArray,
    /// Where the sum over the ranks lands.
    pub(super) reduced: NDArray,
    pub(super) stored: NDArray,
    pub(super) priority: i32,
    /// Whether `merged` is a span of the bucket's packed buffer.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(super) packed: bool,
}

/// The values pushed but not yet sent across processes, and their bytes.
#[derive(Default)]
pub(super) struct Bucket {
    pub(super) parts: Vec<Pending>,
    pub(super) bytes: usize,
    /// The values under [`ALONE_BYTES`], copied here one after another at their pushes: the
    /// bucket's sum reads them from here (the caller may write its arrays before the bucket
    /// goes), in one collective. Made at the bucket's first such value, with room for as many as
    /// the bucket can hold and one element more, for the rank's health.
    pub(super) packed: Option<NDArray>,
    /// Elements of `packed` in use.
    pub(super) filled: usize,
    /// The packed buffers of buckets sent before, for later buckets: two, used in turn, so that
    /// a bucket packs its values while the one before it is summed (the engine orders a
    /// buffer's reuse after its sum). Made per bucket instead, a round of one 4 KB key took
    /// longer by the allocation and the buffer's release through the engine.
    pub(super) spare: VecDeque<NDArray>,
}

impl Bucket {
    /// The span of the packed buffer after the values already there, for a copy of `value`;
    /// taken by adding its elements to `filled` once the copy is pushed (a copy refused then
    /// leaves no gap: the sums are copied out in the order of the parts, end to end).
    pub(super) fn slot(&mut self, value: &NDArray) -> Result<NDArray> {
        let n = value.size();
        let buf = match &self.packed {
            Some(buf) => buf.clone(),
            None => {
                let fits = |b: &NDArray| b.dtype() == value.dtype() && b.ctx() == value.ctx();
                if !self.spare.iter().all(fits) {
                    self.spare.clear();
                }
                let buf = match self.spare.len() >= 2 {
                    true => self.spare.pop_front(),
                    false => None,
                };
                let buf = match buf {
                    Some(buf) => buf,
                    None => {
                        let room = (bucket_limit() + ALONE_BYTES) / value.dtype().size() + 1;
                        value.runtime().empty(&[room], value.dtype(), value.ctx())?
                    }
                };
                self.packed = Some(buf.clone());
                buf
            }
        };
        // The bucket is sent before it holds its limit, and a packed value is under
        // ALONE_BYTES: the room above always suffices.
        if self.filled + n + 1 > buf.size() {
            return Err(invalid(
                "kvstore push",
                format!(
                    "the bucket's packed buffer of {} elements has no room for {n} more after {}",
                    buf.size(),
                    self.filled
                ),
            ));
        }
        buf.slice(self.filled, self.filled + n)?
            .reshape(value.shape())
    }
}

/// Values at least this large (bytes) go across processes as soon as they are pushed, each in
/// an allreduce of its own, read where they lie; smaller ones are packed into a bucket's buffer.
/// Packing costs a copy at the push and one out of the sums, as long as the collective itself
/// from about 64 KB on (MPI's 64 KB sum took 17 µs on two processes of one host), while a
/// collective of its own costs microseconds of latency: packed, 64 keys of 1 MB each took three
/// times as long as 64 of MPI's own sums.
pub(super) const ALONE_BYTES: usize = 64 << 10;

/// How many bytes a bucket collects before it is sent (`MXRS_KVSTORE_BUCKET_BYTES`, 4 MiB by
/// default; it must be the same on every rank).
pub(super) fn bucket_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("MXRS_KVSTORE_BUCKET_BYTES")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4 << 20)
    })
}
