//! The graph side of memory planning: from a graph in execution order to a `storage::plan`
//! problem, with in-place sharing as NNVM's `PlanMemory` decides it.
//!
//! An output may take over an input's buffer when the op allows that pair (its registry entry's
//! `inplace` pairs, or any pair for identity ops such as Flatten), the input is not externally
//! owned (arguments, weights, bound gradients), this op is the input's last reader and reads it
//! once, the buffer is large enough, and no other output of the op took it already. The shared
//! buffer then lives from the input's producer to the output's last reader. Ops the registry
//! does not know get no in-place sharing.

use std::collections::HashMap;

use serde::Deserialize;
use storage::plan::{Buffer, Problem};

use crate::error::{invalid, Result};
use crate::ops::lookup;

#[derive(Deserialize)]
struct BoundNode {
    op: Option<String>,
    #[serde(default)]
    name: String,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

#[derive(Deserialize)]
struct BoundGraph {
    nodes: Vec<BoundNode>,
    entry_shapes: HashMap<String, Vec<u64>>,
    outputs: Vec<usize>,
    #[serde(default)]
    gradient_outputs_external: HashMap<String, usize>,
    mxnet_planner_bytes: Option<u64>,
}

/// A planning problem and how it was formed.
pub struct GraphProblem {
    /// Buffers after in-place sharing.
    pub problem: Problem,
    /// Internal entries before sharing.
    pub entries: usize,
    /// Entries that took over an input's buffer.
    pub inplace: usize,
    /// MXNet's own plan size for the same graph, when the file gives it.
    pub mxnet_bytes: Option<u64>,
}

/// Reads one of MXNet's bound-graph dumps (`*-bound.json`: MXNet's own graph and execution order)
/// and forms its planning problem with in-place sharing (float32 entries, 64-byte alignment).
pub fn bound_graph_problem(json: &str) -> Result<GraphProblem> {
    let g: BoundGraph = serde_json::from_str(json)
        .map_err(|e| invalid("bound graph", format!("not an MXNet bound graph: {e}")))?;
    let n_entries = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter())
        .map(|&e| e + 1)
        .max()
        .unwrap_or(0);
    let mut external = vec![false; n_entries];
    for n in g.nodes.iter().filter(|n| n.op.is_none()) {
        for &e in &n.outputs {
            external[e] = true;
        }
    }
    for &e in g.gradient_outputs_external.values() {
        if e < n_entries {
            external[e] = true;
        }
    }
    let last_step = g.nodes.len().saturating_sub(1);
    // Reads left per entry; graph outputs are read "after the end".
    let mut reads = vec![0usize; n_entries];
    let mut last_use = vec![None::<usize>; n_entries];
    for (t, n) in g.nodes.iter().enumerate() {
        for &e in &n.inputs {
            let slot = reads.get_mut(e).ok_or_else(|| {
                invalid(
                    "bound graph",
                    format!("node '{}' reads entry {e}, which no node makes", n.name),
                )
            })?;
            *slot += 1;
            last_use[e] = Some(t);
        }
    }
    for &e in &g.outputs {
        if e < n_entries {
            reads[e] += 1;
            last_use[e] = Some(last_step);
        }
    }
    let size = |e: usize| -> Result<u64> {
        let s = g
            .entry_shapes
            .get(&e.to_string())
            .ok_or_else(|| invalid("bound graph", format!("entry {e} has no shape")))?;
        Ok(s.iter().product::<u64>() * 4)
    };
    // Buffers: (size, start, end, name); entry -> buffer.
    let mut buffers: Vec<(u64, usize, usize, String)> = vec![];
    let mut buffer_of: Vec<Option<usize>> = vec![None; n_entries];
    let (mut entries, mut inplace) = (0, 0);
    for (t, n) in g.nodes.iter().enumerate() {
        let def = n.op.as_deref().and_then(|op| lookup(op).ok());
        let mut taken = vec![];
        for (k, &out) in n.outputs.iter().enumerate() {
            if external[out] {
                continue;
            }
            entries += 1;
            let out_size = size(out)?;
            let end_of_out = last_use[out].unwrap_or(t).max(t);
            // Inputs this output may share, by the op's rules.
            let candidates: Vec<usize> = match def {
                Some(d) if d.identity => (0..n.inputs.len()).filter(|_| k == 0).collect(),
                Some(d) => d
                    .inplace
                    .iter()
                    .filter(|&&(_, o)| o == k)
                    .map(|&(i, _)| i)
                    .collect(),
                None => vec![],
            };
            let shared = candidates.into_iter().find_map(|i| {
                let e_in = *n.inputs.get(i)?;
                let b = buffer_of[e_in]?;
                let reads_here = n.inputs.iter().filter(|&&x| x == e_in).count();
                let last_reader = !external[e_in]
                    && reads[e_in] == reads_here
                    && last_use[e_in] == Some(t)
                    && !g.outputs.contains(&e_in);
                (last_reader && buffers[b].0 >= out_size && !taken.contains(&b)).then_some(b)
            });
            match shared {
                Some(b) => {
                    taken.push(b);
                    buffers[b].2 = buffers[b].2.max(end_of_out);
                    buffer_of[out] = Some(b);
                    inplace += 1;
                }
                None => {
                    buffer_of[out] = Some(buffers.len());
                    buffers.push((out_size, t, end_of_out, format!("{}:{k}", n.name)));
                }
            }
        }
        for &e in &n.inputs {
            reads[e] -= 1;
        }
    }
    let problem = Problem {
        buffers: buffers
            .into_iter()
            .map(|(size, start, end, name)| Buffer {
                size,
                start: start as u32,
                end: end as u32,
                align: 64,
                name,
            })
            .collect(),
        groups: vec![],
    };
    Ok(GraphProblem {
        problem,
        entries,
        inplace,
        mxnet_bytes: g.mxnet_planner_bytes,
    })
}
