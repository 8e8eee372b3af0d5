//! topk, sort and argsort on the GPU, and topk's gradient. Each lane is padded to a power of two
//! and sorted by a bitonic network, one launch per compare-exchange stage (log2(P) (log2(P) + 1)
//! / 2 launches for lanes of P entries, every lane at once): each stage's pairs are independent,
//! so the network needs no barrier inside a kernel, and the emulator runs it as the GPU does.
//! The entries sorted are the values' total-order keys with their positions (see `sort_keys` in
//! kernels/sort.cu), all distinct, so the network's result is the CPU's stable order exactly.

use super::ops::{e2s, fill_with};
use super::{KArgs, Stream};
use crate::ops::sort::plan;
use crate::ops::KResult;
use crate::ops::{Attrs, TensorRef};

/// The op layer's entry for topk, sort, argsort and `_backward_topk`.
pub(crate) fn sort(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    if op == "_backward_topk" {
        // (ograd, positions, data) -> the data's gradient.
        let dx = &outs[0];
        let p = plan(op, attrs, &dx.shape).map_err(e2s)?;
        fill_with(s, dx, 0.0)?;
        if p.outer * p.inner == 0 || p.lane == 0 {
            return Ok(());
        }
        let a = KArgs::new(0)
            .t(0, dx)
            .t(1, &ins[0])
            .t(2, &ins[1])
            .i(1, p.inner)
            .i(2, p.lane)
            .i(3, p.k);
        return super::indexing::add_rows(s, a, (p.outer, p.inner, p.k), true);
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
    let keys = s.scratch(lanes * padded * 8)?.cast::<f32>();
    let args = |n: usize| {
        KArgs::new(n)
            .t(1, x)
            .p(3, keys)
            .i(1, p.inner)
            .i(2, padded)
            .i(3, p.lane)
    };
    let entries = lanes * padded;
    s.launch(
        "sort_keys",
        entries,
        &args(entries).i(4, usize::from(p.descending)),
    )?;
    bitonic(s, keys, entries, padded)?;
    let kept = lanes * p.k;
    let mut a = args(kept).i(4, usize::from(p.mask)).i(5, p.k);
    if p.mask || p.values {
        a = a.t(0, &outs[0]);
    }
    if !p.mask {
        a = a.t(2, &outs[usize::from(p.values)]);
    }
    s.launch("sort_take", kept, &a)
}

/// Sorts the i64 keys at `keys` ascending in lanes of `padded` (a power of two) entries,
/// `entries` in all, with the bitonic network: one `sort_step` launch per stage.
pub(super) fn bitonic(s: &dyn Stream, keys: *mut f32, entries: usize, padded: usize) -> KResult {
    let pairs = entries / 2;
    let mut merge = 2;
    while merge <= padded {
        let mut apart = merge / 2;
        while apart >= 1 {
            let a = KArgs::new(pairs)
                .p(3, keys)
                .i(2, padded)
                .i(5, merge)
                .i(6, apart);
            s.launch("sort_step", pairs, &a)?;
            apart /= 2;
        }
        merge *= 2;
    }
    Ok(())
}
