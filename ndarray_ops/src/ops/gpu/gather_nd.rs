//! gather_nd, scatter_nd and gather_nd's gradient on the GPU. The CPU kernels refuse a
//! coordinate outside its axis, naming it; so that the GPU refuses the same calls with the same
//! message, the op reads the indices back (one wait for the device per call) and checks them
//! with the CPU's code, which also gives each position's block start. One kernel, `blocks`,
//! then copies blocks out (gather) or, per distinct target block, sums the blocks listed for it
//! in position order (the gradient's adds; scatter_nd lists only the last position naming a
//! block, which wins on the CPU) — no atomics, the CPU's order.

use crate::ops::Call;
use std::collections::HashMap;

use super::args::{int, kernel_args, ptr, Dim};
use super::ops::fill_with;
use super::Stream;
use crate::ops::gather_nd_starts;
use crate::ops::KResult;

kernel_args! {
    /// gather_nd and its scatters, by blocks (see `kernels/shape.cu`).
    struct Blocks [blocks] {
        /// Elements written.
        n: i64,
        /// The output.
        out: *mut f32,
        /// The data.
        x: *mut f32,
        /// Block starts (mode 0), or the scatter table ([`scatter_table`]).
        table: *const i64,
        /// Elements per block.
        block: Dim,
        /// 0 gather, 1 assign, 2 add.
        mode: i64,
        /// Blocks written (modes 1 and 2).
        targets: i64,
    }
}

/// The op layer's entry for gather_nd, scatter_nd and `_backward_gather_nd`.
pub(crate) fn gather_nd(call: Call, s: &dyn Stream) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (data, indices, y) = (&ins[0], &ins[1], &outs[0]);
    // The indexed array: the data of gather_nd, the output of the scatters.
    let indexed = if op == "gather_nd" { data } else { y };
    let m = indices.shape[0];
    let coords: Vec<f64> = s.download(indices)?.into_iter().map(f64::from).collect();
    let starts = gather_nd_starts(op, m, &coords, &indexed.shape)?;
    let block: usize = indexed.shape[m..].iter().product();
    let args = |n: usize, table: *mut u8, mode: i64, targets: usize| Blocks {
        n: int(n),
        out: ptr(y),
        x: ptr(data),
        table: table.cast(),
        block: Dim::new(block),
        mode,
        targets: int(targets),
    };
    if op == "gather_nd" {
        let n = y.len();
        if n == 0 {
            return Ok(());
        }
        let table: Vec<i64> = starts.iter().map(|&k| k as i64).collect();
        return s.run(k::blocks, n, &args(n, s.upload(&table)?, 0, 0));
    }
    fill_with(s, y, 0.0)?;
    let add = op == "_backward_gather_nd";
    let (targets, table) = scatter_table(&starts, add);
    let n = targets * block;
    if n == 0 {
        return Ok(());
    }
    let a = args(n, s.upload(&table)?, 1 + i64::from(add), targets);
    s.run(k::blocks, n, &a)
}

/// The distinct block starts in order of first appearance, and `[targets..., list starts...,
/// lists...]`: each target's positions in order (`add`), or only its last one.
fn scatter_table(starts: &[usize], add: bool) -> (usize, Vec<i64>) {
    let mut lists: Vec<(usize, Vec<i64>)> = Vec::new();
    let mut slot: HashMap<usize, usize> = HashMap::new();
    for (p, &at) in starts.iter().enumerate() {
        let k = *slot.entry(at).or_insert_with(|| {
            lists.push((at, Vec::new()));
            lists.len() - 1
        });
        let list = &mut lists[k].1;
        if !add {
            list.clear();
        }
        list.push(p as i64);
    }
    let targets = lists.len();
    let mut table: Vec<i64> = lists.iter().map(|(at, _)| *at as i64).collect();
    let mut next = 0;
    table.push(0);
    for (_, list) in &lists {
        next += list.len() as i64;
        table.push(next);
    }
    table.extend(lists.into_iter().flat_map(|(_, list)| list));
    (targets, table)
}
