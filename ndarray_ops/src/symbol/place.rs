//! Device placement for model parallelism: every node gets a device, and every edge between two
//! devices gets a `_CrossDeviceCopy` node.
//!
//! Nodes annotated with a context group (the `__ctx_group__` attribute, as MXNet's `AttrScope`
//! sets it) take the group's device from the bind's map. The rest are placed by propagation, as
//! TVM's device-annotation pass does: in graph order an op node takes the device of its first
//! placed input (producers first); then, in reverse order, a node still unplaced takes the device
//! of its first placed consumer (so weights live where they are used); anything left gets the
//! default. Backward nodes inherit their forward node's attributes, group included, from most
//! gradient rules, and the rest follow their gradient by propagation.
//!
//! An input an op mutates (BatchNorm's moving statistics) cannot be copied, so it must already
//! be on the op's device; a variable that would have to be on two devices is an error.

use std::collections::HashMap;
use std::sync::Arc;

use storage::Context;

use super::{Node, NodeEntry, Symbol};
use crate::error::{invalid, Result};
use crate::ops::names::op_name;
use crate::ops::{lookup, Attrs};

/// The attribute naming a node's context group.
pub const CTX_GROUP: &str = "__ctx_group__";

/// A symbol with a device for each node.
pub struct Placed {
    /// The symbol, with copy nodes on edges between devices.
    pub symbol: Symbol,
    /// The device of each node, in `symbol.indexed()` order.
    pub devices: Vec<Context>,
}

/// Places `symbol`'s nodes (see the module docs). `output_devices` optionally asks for graph
/// output `k` on a device (a gradient where its argument lives); a copy is added when it is
/// made elsewhere.
pub fn place(
    symbol: &Symbol,
    group2ctx: &HashMap<String, Context>,
    default: Context,
    output_devices: &[Option<Context>],
) -> Result<Placed> {
    let g = symbol.indexed();
    let n = g.nodes.len();
    let mut dev: Vec<Option<Context>> = vec![None; n];
    for (i, node) in g.nodes.iter().enumerate() {
        if let Some(group) = node.attrs.get(CTX_GROUP) {
            let ctx =
                group2ctx.get(group).ok_or_else(|| {
                    let mut known: Vec<&str> = group2ctx.keys().map(String::as_str).collect();
                    known.sort_unstable();
                    invalid(
                        "bind",
                        format!(
                        "node '{}' is in context group '{group}', which the group-to-context map \
                         does not name (it names: {})",
                        node.name,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                    )
                })?;
            dev[i] = Some(*ctx);
        }
    }
    for i in 0..n {
        if dev[i].is_none() && !g.nodes[i].is_variable() {
            dev[i] = g.inputs[i].iter().find_map(|&(s, _)| dev[s]);
        }
    }
    let mut consumers: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, ins) in g.inputs.iter().enumerate() {
        for &(s, _) in ins {
            consumers[s].push(i);
        }
    }
    for i in (0..n).rev() {
        if dev[i].is_none() {
            dev[i] = consumers[i].iter().find_map(|&c| dev[c]);
        }
    }
    let dev: Vec<Context> = dev.into_iter().map(|d| d.unwrap_or(default)).collect();
    // Mutated inputs are written where they live: they must not cross devices.
    for (i, node) in g.nodes.iter().enumerate() {
        for (k, e) in node.inputs.iter().enumerate() {
            let s = g.inputs[i][k].0;
            if e.version > 0 && dev[s] != dev[i] {
                return Err(invalid(
                    "bind",
                    format!(
                        "'{}' would be on two devices: it lives on {} and node '{}' on {} updates it",
                        g.nodes[s].name, dev[s], node.name, dev[i]
                    ),
                ));
            }
        }
    }
    let crosses = (0..n).any(|i| g.inputs[i].iter().any(|&(s, _)| dev[s] != dev[i]))
        || g.outputs
            .iter()
            .zip(output_devices)
            .any(|(&(s, _), want)| want.is_some_and(|w| w != dev[s]));
    if !crosses {
        return Ok(Placed {
            symbol: symbol.clone(),
            devices: dev,
        });
    }
    // Rebuild with copies; each (entry, device) pair is copied once.
    let copy_def = lookup(op_name!("_CrossDeviceCopy"))?;
    let mut rebuilt: Vec<Arc<Node>> = Vec::with_capacity(n);
    let mut device_of: HashMap<usize, Context> = HashMap::new();
    let mut copies: HashMap<(usize, usize, Context), Arc<Node>> = HashMap::new();
    let mut on = |rebuilt: &[Arc<Node>],
                  device_of: &mut HashMap<usize, Context>,
                  (s, k): (usize, usize),
                  version: u32,
                  to: Context|
     -> Result<NodeEntry> {
        if dev[s] == to {
            return Ok(NodeEntry {
                node: rebuilt[s].clone(),
                index: k,
                version,
            });
        }
        let node = match copies.get(&(s, k, to)) {
            Some(c) => c.clone(),
            None => {
                let src = NodeEntry {
                    node: rebuilt[s].clone(),
                    index: k,
                    version: 0,
                };
                let name = format!("{}_{k}_copy_to_{to}", g.nodes[s].name);
                let c = Node::new(copy_def, &name, Attrs::new(), vec![src])?;
                device_of.insert(Arc::as_ptr(&c) as usize, to);
                copies.insert((s, k, to), c.clone());
                c
            }
        };
        Ok(NodeEntry {
            node,
            index: 0,
            version: 0,
        })
    };
    for (i, node) in g.nodes.iter().enumerate() {
        let new = match node.op {
            None => node.clone(),
            Some(def) => {
                let mut inputs = Vec::with_capacity(node.inputs.len());
                for (k, e) in node.inputs.iter().enumerate() {
                    inputs.push(on(
                        &rebuilt,
                        &mut device_of,
                        g.inputs[i][k],
                        e.version,
                        dev[i],
                    )?);
                }
                Node::new(def, &node.name, node.attrs.clone(), inputs)?
            }
        };
        device_of.insert(Arc::as_ptr(&new) as usize, dev[i]);
        rebuilt.push(new);
    }
    let mut outputs = Vec::with_capacity(g.outputs.len());
    for (k, &(s, i)) in g.outputs.iter().enumerate() {
        let to = output_devices.get(k).copied().flatten().unwrap_or(dev[s]);
        outputs.push(on(&rebuilt, &mut device_of, (s, i), 0, to)?);
    }
    let symbol = Symbol { outputs };
    let placed = symbol.indexed();
    let devices = placed
        .nodes
        .iter()
        .map(|nd| device_of[&(Arc::as_ptr(nd) as usize)])
        .collect();
    Ok(Placed { symbol, devices })
}
