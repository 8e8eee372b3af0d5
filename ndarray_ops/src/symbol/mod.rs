//! Symbols: graphs of ops built in code or loaded from MXNet's JSON, listed, composed, and
//! inferred (shapes and dtypes).
//!
//! As in NNVM, a graph is a DAG of shared nodes; a [`Symbol`] is a list of node outputs. The
//! [`IndexedGraph`] of a symbol orders its nodes by a depth-first post-order from the outputs
//! (inputs in order), which is NNVM's and therefore MXNet's order: entry ids here match the ids in
//! MXNet's dumps.

pub mod fuse;
mod gradient;
mod infer;
mod json;
pub mod mirror;
mod place;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::error::{invalid, Result};
use crate::ops::names::op_name;
use crate::ops::{lookup, Attrs};
pub use crate::ops::{Node, NodeEntry};

pub use gradient::{gradient, head_grad_names};
pub use infer::{infer, infer_partial, Inferred};
pub use place::{place, Placed, CTX_GROUP};

/// A list of node outputs.
#[derive(Clone)]
pub struct Symbol {
    outputs: Vec<NodeEntry>,
}

impl Symbol {
    /// A variable.
    pub fn var(name: &str) -> Symbol {
        Symbol::var_with(name, Attrs::new())
    }

    /// A variable with attributes (`__shape__` as `(2, 3)`, `__dtype__` as MXNet's code).
    pub fn var_with(name: &str, attrs: Attrs) -> Symbol {
        let node = Node::variable(name, attrs);
        Symbol {
            outputs: vec![NodeEntry {
                node,
                index: 0,
                version: 0,
            }],
        }
    }

    /// Op `op` applied to `inputs` (each a single-output symbol), named `name`.
    pub fn op(op: &str, name: &str, inputs: &[&Symbol], attrs: Attrs) -> Result<Symbol> {
        let def = lookup(op)?;
        let mut entries = Vec::with_capacity(inputs.len());
        for (i, s) in inputs.iter().enumerate() {
            match s.outputs.as_slice() {
                [e] => entries.push(NodeEntry {
                    version: u32::from(def.mutate_inputs.contains(&i)),
                    ..e.clone()
                }),
                other => {
                    return Err(invalid(
                        def.name,
                        format!(
                            "input {i} of node '{name}' has {} outputs; pick one with get_output",
                            other.len()
                        ),
                    ))
                }
            }
        }
        let node = Node::new(def, name, attrs, entries)?;
        let visible = node.num_visible_outputs();
        Ok(Symbol {
            outputs: (0..visible)
                .map(|index| NodeEntry {
                    node: node.clone(),
                    index,
                    version: 0,
                })
                .collect(),
        })
    }

    /// A symbol of these outputs.
    pub(crate) fn from_outputs(outputs: Vec<NodeEntry>) -> Symbol {
        Symbol { outputs }
    }

    /// The outputs of several symbols, as one.
    pub fn group(symbols: &[Symbol]) -> Symbol {
        Symbol {
            outputs: symbols
                .iter()
                .flat_map(|s| s.outputs.iter().cloned())
                .collect(),
        }
    }

    /// Output `i` alone.
    pub fn get_output(&self, i: usize) -> Result<Symbol> {
        let e = self.outputs.get(i).ok_or_else(|| {
            invalid(
                "get_output",
                format!(
                    "index {i} is out of range for {} outputs",
                    self.outputs.len()
                ),
            )
        })?;
        Ok(Symbol {
            outputs: vec![e.clone()],
        })
    }

    /// The inputs of this symbol's output nodes (each node once, in order), as one symbol
    /// (MXNet's `get_children`); `None` when they have none (the outputs are variables).
    pub fn get_children(&self) -> Option<Symbol> {
        let mut seen: Vec<&Arc<Node>> = Vec::new();
        for e in &self.outputs {
            if !seen.iter().any(|n| Arc::ptr_eq(n, &e.node)) {
                seen.push(&e.node);
            }
        }
        let outputs: Vec<NodeEntry> = seen
            .into_iter()
            .flat_map(|n| n.inputs.iter().cloned())
            .collect();
        (!outputs.is_empty()).then_some(Symbol { outputs })
    }

    /// Every output of every node (visible ones), in graph order.
    pub fn get_internals(&self) -> Symbol {
        let g = self.indexed();
        let outputs = g
            .nodes
            .iter()
            .flat_map(|n| {
                (0..n.num_visible_outputs()).map(move |index| NodeEntry {
                    node: n.clone(),
                    index,
                    version: 0,
                })
            })
            .collect();
        Symbol { outputs }
    }

    /// The outputs.
    pub fn outputs(&self) -> &[NodeEntry] {
        &self.outputs
    }

    /// Names of the variables that are not auxiliary states, in graph order.
    pub fn list_arguments(&self) -> Vec<String> {
        let (args, _) = self.variables();
        args
    }

    /// Names of the auxiliary states (variables that ops mutate, such as BatchNorm's moving
    /// statistics), in graph order.
    pub fn list_auxiliary_states(&self) -> Vec<String> {
        let (_, aux) = self.variables();
        aux
    }

    fn variables(&self) -> (Vec<String>, Vec<String>) {
        let g = self.indexed();
        let mut mutated = vec![false; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            if let Some(def) = n.op {
                for &m in def.mutate_inputs {
                    if let Some(&(src, _)) = g.inputs[i].get(m) {
                        mutated[src] = true;
                    }
                }
            }
        }
        let (mut args, mut aux) = (vec![], vec![]);
        for (i, n) in g.nodes.iter().enumerate() {
            if n.is_variable() {
                if mutated[i] {
                    aux.push(n.name.clone())
                } else {
                    args.push(n.name.clone())
                }
            }
        }
        (args, aux)
    }

    /// Output names as MXNet gives them: `name_output` (`name_output{i}` for several), or the
    /// variable's own name.
    pub fn list_outputs(&self) -> Vec<String> {
        self.outputs
            .iter()
            .map(|e| {
                if e.node.is_variable() {
                    e.node.name.clone()
                } else if e.node.num_visible_outputs() == 1 {
                    format!("{}_output", e.node.name)
                } else {
                    format!("{}_output{}", e.node.name, e.index)
                }
            })
            .collect()
    }

    /// Replaces variables by name with other single-output symbols (calling a symbol on others).
    pub fn compose(&self, args: &HashMap<String, Symbol>) -> Result<Symbol> {
        for (k, v) in args {
            if v.outputs.len() != 1 {
                return Err(invalid(
                    "compose",
                    format!("argument {k} has {} outputs, expected 1", v.outputs.len()),
                ));
            }
        }
        let g = self.indexed();
        let mut new: Vec<Option<NodeEntry>> = vec![None; g.nodes.len()];
        let mut rebuilt: Vec<Arc<Node>> = Vec::with_capacity(g.nodes.len());
        for (i, n) in g.nodes.iter().enumerate() {
            let node = if n.is_variable() {
                if let Some(s) = args.get(&n.name) {
                    new[i] = Some(s.outputs[0].clone());
                }
                n.clone()
            } else {
                let inputs = g.inputs[i]
                    .iter()
                    .zip(&n.inputs)
                    .map(|(&(src, idx), e)| match &new[src] {
                        Some(sub) if g.nodes[src].is_variable() => sub.clone(),
                        _ => NodeEntry {
                            node: rebuilt[src].clone(),
                            index: idx,
                            version: e.version,
                        },
                    })
                    .collect();
                n.with_inputs(inputs)
            };
            rebuilt.push(node);
        }
        let outputs = self
            .outputs
            .iter()
            .map(|e| {
                let i = g.index_of(&e.node);
                match &new[i] {
                    Some(sub) if e.node.is_variable() => sub.clone(),
                    _ => NodeEntry {
                        node: rebuilt[i].clone(),
                        index: e.index,
                        version: e.version,
                    },
                }
            })
            .collect();
        Ok(Symbol { outputs })
    }

    /// The same symbol where every output has storage of its own: an output that is a variable,
    /// or an entry listed as an output more than once, becomes a `_copy` of it.
    pub fn with_copy_nodes(&self) -> Result<Symbol> {
        let copy = lookup(op_name!("_copy"))?;
        let mut seen: Vec<(usize, usize)> = Vec::new();
        let mut outputs = Vec::with_capacity(self.outputs.len());
        for (k, e) in self.outputs.iter().enumerate() {
            let key = (Arc::as_ptr(&e.node) as usize, e.index);
            if e.node.is_variable() || seen.contains(&key) {
                let node = Node::new(
                    copy,
                    &format!("{}_copy{k}", e.node.name),
                    Attrs::new(),
                    vec![e.clone()],
                )?;
                outputs.push(NodeEntry {
                    node,
                    index: 0,
                    version: 0,
                });
            } else {
                seen.push(key);
                outputs.push(e.clone());
            }
        }
        Ok(Symbol { outputs })
    }

    /// The graph with an index: nodes in order, their inputs as indices, entry ids.
    pub fn indexed(&self) -> IndexedGraph {
        IndexedGraph::new(&self.outputs)
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Symbol({:?})", self.list_outputs())
    }
}

/// A graph with its nodes in dependency order.
pub struct IndexedGraph {
    /// Nodes, each after its inputs.
    pub nodes: Vec<Arc<Node>>,
    /// Per node, its inputs as (node index, output index).
    pub inputs: Vec<Vec<(usize, usize)>>,
    /// Entry id of output 0 of each node (MXNet's `node_row_ptr`), plus the total at the end.
    pub row_ptr: Vec<usize>,
    /// The graph outputs as (node index, output index).
    pub outputs: Vec<(usize, usize)>,
    index: HashMap<usize, usize>,
}

impl IndexedGraph {
    /// Refuses two variable nodes with one name: arguments are bound, saved and loaded by
    /// name, so one of the two would silently take the other's array.
    pub fn check_unique_variables(&self, op: &str) -> Result<()> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.is_variable() {
                continue;
            }
            if let Some(first) = seen.insert(&n.name, i) {
                return Err(invalid(
                    op,
                    format!(
                        "two variables are named '{}' (graph nodes {first} and {i}); arguments \
                         are bound and saved by name, so each variable needs its own",
                        n.name
                    ),
                ));
            }
        }
        Ok(())
    }

    fn new(outputs: &[NodeEntry]) -> IndexedGraph {
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        // Iterative post-order DFS (deep graphs must not overflow the stack).
        for out in outputs {
            let mut stack: Vec<(Arc<Node>, usize)> = vec![(out.node.clone(), 0)];
            while let Some((n, next)) = stack.pop() {
                let key = Arc::as_ptr(&n) as usize;
                if index.contains_key(&key) {
                    continue;
                }
                if next < n.inputs.len() {
                    let child = n.inputs[next].node.clone();
                    stack.push((n, next + 1));
                    if !index.contains_key(&(Arc::as_ptr(&child) as usize)) {
                        stack.push((child, 0));
                    }
                } else {
                    index.insert(key, nodes.len());
                    nodes.push(n);
                }
            }
        }
        let key = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
        let inputs = nodes
            .iter()
            .map(|n| {
                n.inputs
                    .iter()
                    .map(|e| (index[&key(&e.node)], e.index))
                    .collect()
            })
            .collect();
        let mut row_ptr = Vec::with_capacity(nodes.len() + 1);
        let mut at = 0;
        for n in &nodes {
            row_ptr.push(at);
            at += n.num_outputs();
        }
        row_ptr.push(at);
        let outputs = outputs
            .iter()
            .map(|e| (index[&key(&e.node)], e.index))
            .collect();
        IndexedGraph {
            nodes,
            inputs,
            row_ptr,
            outputs,
            index,
        }
    }

    /// Per node, whether the entries `outputs` (node, output) need it: they or their inputs,
    /// transitively (a training graph's forward pass, from its forward outputs).
    pub fn needed_by(&self, outputs: &[(usize, usize)]) -> Vec<bool> {
        let mut needed = vec![false; self.nodes.len()];
        let mut stack: Vec<usize> = outputs.iter().map(|&(n, _)| n).collect();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut needed[n], true) {
                stack.extend(self.inputs[n].iter().map(|&(s, _)| s));
            }
        }
        needed
    }

    /// The index of a node of this graph.
    pub fn index_of(&self, node: &Arc<Node>) -> usize {
        self.index[&(Arc::as_ptr(node) as usize)]
    }

    /// The entry id of output `index` of node `node`.
    pub fn entry(&self, node: usize, index: usize) -> usize {
        self.row_ptr[node] + index
    }

    /// Number of entries.
    pub fn num_entries(&self) -> usize {
        *self.row_ptr.last().unwrap_or(&0)
    }
}
