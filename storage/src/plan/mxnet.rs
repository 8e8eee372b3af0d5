//! Reads MXNet's bound-graph dumps (`*-bound.json`: nodes in execution order with their entry
//! ids, entry shapes, graph outputs, externally bound gradients, MXNet's own plan size) into a
//! [`Problem`] of liveness alone: each entry an op produces lives from its node to its last reader
//! (graph outputs to the end); variables and bound gradients are external. In-place sharing needs
//! each op's rules and is added by the graph side.

use std::collections::HashMap;

use serde::Deserialize;

use super::{Buffer, PlanError, Problem};

#[derive(Deserialize)]
struct Node {
    op: Option<String>,
    #[serde(default)]
    name: String,
    inputs: Vec<u64>,
    outputs: Vec<u64>,
}

#[derive(Deserialize)]
struct Bound {
    nodes: Vec<Node>,
    entry_shapes: HashMap<String, Vec<u64>>,
    outputs: Vec<u64>,
    #[serde(default)]
    gradient_outputs_external: HashMap<String, u64>,
    mxnet_planner_bytes: Option<u64>,
}

/// The liveness problem of a bound graph (float32 entries, 64-byte alignment) and MXNet's own
/// plan size for it. Malformed files are errors naming what is missing.
pub fn liveness_problem(json: &str) -> Result<(Problem, Option<u64>), PlanError> {
    let g: Bound = serde_json::from_str(json)
        .map_err(|e| PlanError::Invalid(format!("not an MXNet bound graph: {e}")))?;
    let external: Vec<u64> = g.gradient_outputs_external.values().copied().collect();
    let last = g.nodes.len().saturating_sub(1) as u32;
    let mut made_at: HashMap<u64, (u32, String)> = HashMap::new();
    let mut last_use: HashMap<u64, u32> = HashMap::new();
    for (step, n) in g.nodes.iter().enumerate() {
        for e in &n.inputs {
            last_use.insert(*e, step as u32);
        }
        if n.op.is_some() {
            for e in &n.outputs {
                made_at.insert(*e, (step as u32, n.name.clone()));
            }
        }
    }
    let mut ids: Vec<u64> = made_at
        .keys()
        .copied()
        .filter(|e| !external.contains(e))
        .collect();
    ids.sort_unstable();
    let mut buffers = Vec::with_capacity(ids.len());
    for e in ids {
        let shape = g
            .entry_shapes
            .get(&e.to_string())
            .ok_or_else(|| PlanError::Invalid(format!("entry {e} has no shape")))?;
        // Float32: four bytes an element, counted in the same checked product.
        let bytes = shape
            .iter()
            .try_fold(4u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| PlanError::Invalid(format!("entry {e}: shape {shape:?} overflows")))?;
        let (start, ref name) = made_at[&e];
        let end = if g.outputs.contains(&e) {
            last
        } else {
            last_use.get(&e).copied().unwrap_or(start).max(start)
        };
        buffers.push(Buffer {
            size: bytes,
            start,
            end,
            align: 64,
            name: format!("{name}:{e}"),
        });
    }
    Ok((
        Problem {
            buffers,
            groups: vec![],
        },
        g.mxnet_planner_bytes,
    ))
}
