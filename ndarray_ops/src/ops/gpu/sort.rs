//! topk, sort and argsort on the GPU, and topk's gradient. Each lane is padded to a power of two
//! and sorted by a bitonic network, one launch per compare-exchange stage (log2(P) (log2(P) + 1)
//! / 2 launches for lanes of P entries, every lane at once): each stage's pairs are independent,
//! so the network needs no barrier inside a kernel, and the emulator runs it as the GPU does.
//! The entries sorted are the values' total-order keys with their positions (see `sort_keys` in
//! kernels/sort.cu), all distinct, so the network's result is the CPU's stable order exactly.

use super::args::{int, kernel_args, ptr, Dim};
use super::indexing::Rows;
use super::ops::{e2s, fill_with};
use super::Stream;
use crate::ops::sort::plan;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {
    /// The sort keys of lanes padded to `padded` entries: `keys[l, j]` = the total-order key of
    /// element `j` of lane `l` of `x` (outer, lane, inner), times 2^32, plus `j`.
    struct SortKeys [sort_keys] {
        /// Entries: lanes times `padded`.
        n: i64,
        /// The data.
        x: *mut f32,
        /// The keys written.
        keys: *mut i64,
        /// The data's elements after the sorted axis.
        inner: Dim,
        /// Entries per lane, a power of two.
        padded: Dim,
        /// Elements per lane (the sorted axis).
        lane: i64,
        /// 1: the keys sort descending.
        descending: i64,
    }

    /// One compare-exchange stage of the bitonic network over every lane.
    struct SortStep [sort_step] {
        /// Pairs: entries / 2.
        n: i64,
        /// The keys, sorted in place.
        keys: *mut i64,
        /// Entries per lane.
        padded: i64,
        /// The size of the sequences merged.
        merge: i64,
        /// How far apart partners are.
        apart: Dim,
    }

    /// The first `k` entries of each sorted lane, as values, a mask or positions.
    struct SortTake [sort_take] {
        /// Entries taken: lanes times `k`.
        n: i64,
        /// The values taken (outer, k, inner), or the mask (shaped as `x`, zeroed); null: none.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// The positions taken, as floats (outer, k, inner); null: none.
        positions: *mut f32,
        /// The sorted keys.
        keys: *const i64,
        /// The data's elements after the sorted axis.
        inner: Dim,
        /// Entries per lane.
        padded: i64,
        /// Elements per lane.
        lane: i64,
        /// Entries taken per lane.
        k: Dim,
        /// 1: `out` is a mask.
        mask: i64,
    }
}

/// The op layer's entry for topk, sort, argsort and `_backward_topk`.
pub(crate) fn sort(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    if op == "_backward_topk" {
        // (ograd, positions, data) -> the data's gradient.
        let dx = &outs[0];
        let p = plan(op, attrs, &dx.shape).map_err(e2s)?;
        fill_with(s, dx, 0.0)?;
        if p.outer * p.inner == 0 || p.lane == 0 {
            return Ok(());
        }
        let rows = Rows {
            grad: ptr(dx),
            ograd: ptr(&ins[0]),
            idx: ptr(&ins[1]),
            outer: p.outer,
            inner: p.inner,
            rows: p.lane,
            count: p.k,
            wrap: false,
        };
        return super::indexing::add_rows(s, rows, true);
    }
    let x = &ins[0];
    let p = plan(op, attrs, &x.shape).map_err(e2s)?;
    if p.mask {
        fill_with(s, &outs[0], 0.0)?;
    }
    let lanes = p.outer * p.inner;
    if lanes == 0 || p.lane == 0 {
        return Ok(());
    }
    let padded = p.lane.next_power_of_two();
    let keys = s.scratch(lanes * padded * 8)?.cast::<i64>();
    let entries = lanes * padded;
    let a = SortKeys {
        n: int(entries),
        x: ptr(x),
        keys,
        inner: Dim::new(p.inner),
        padded: Dim::new(padded),
        lane: int(p.lane),
        descending: i64::from(p.descending),
    };
    s.run(k::sort_keys, entries, &a)?;
    bitonic(s, keys, entries, padded)?;
    let kept = lanes * p.k;
    let a = SortTake {
        n: int(kept),
        out: match p.mask || p.values {
            true => ptr(&outs[0]),
            false => std::ptr::null_mut(),
        },
        x: ptr(x),
        positions: match p.mask {
            true => std::ptr::null_mut(),
            false => ptr(&outs[usize::from(p.values)]),
        },
        keys,
        inner: Dim::new(p.inner),
        padded: int(padded),
        lane: int(p.lane),
        k: Dim::new(p.k),
        mask: i64::from(p.mask),
    };
    s.run(k::sort_take, kept, &a)
}

/// Sorts the i64 keys at `keys` ascending in lanes of `padded` (a power of two) entries,
/// `entries` in all, with the bitonic network: one `sort_step` launch per stage.
pub(super) fn bitonic(s: &dyn Stream, keys: *mut i64, entries: usize, padded: usize) -> KResult {
    let pairs = entries / 2;
    let mut merge = 2;
    while merge <= padded {
        let mut apart = merge / 2;
        while apart >= 1 {
            let a = SortStep {
                n: int(pairs),
                keys,
                padded: int(padded),
                merge: int(merge),
                apart: Dim::new(apart),
            };
            s.run(k::sort_step, pairs, &a)?;
            apart /= 2;
        }
        merge *= 2;
    }
    Ok(())
}
