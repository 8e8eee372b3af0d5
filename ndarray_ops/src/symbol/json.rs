//! MXNet's symbol JSON: `nodes` (`op`, `name`, `attrs` — or the older `param`/`attr` —,
//! `inputs` as `[node, output, version]`), `arg_nodes`, `node_row_ptr`, `heads`, and
//! `attrs.mxnet_version`. Loading checks everything it relies on and names the node at fault.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Node, NodeEntry, Symbol};
use crate::error::{NdError, Result};
use crate::ops::{lookup, Attrs};

fn bad(reason: impl Into<String>) -> NdError {
    NdError::Invalid {
        op: "symbol JSON".into(),
        reason: reason.into(),
    }
}

fn entry(v: &Value, what: &str) -> Result<(usize, usize, u32)> {
    let a = v
        .as_array()
        .ok_or_else(|| bad(format!("{what} is not a list [node, output, version]")))?;
    let num = |i: usize| a.get(i).and_then(Value::as_u64);
    match (num(0), num(1), a.len()) {
        (Some(n), Some(i), 2 | 3) => Ok((n as usize, i as usize, num(2).unwrap_or(0) as u32)),
        _ => Err(bad(format!(
            "{what} is not [node, output, version] of non-negative integers: {v}"
        ))),
    }
}

fn attrs_of(node: &Map<String, Value>, at: &str) -> Result<Attrs> {
    let mut attrs = Attrs::new();
    for key in ["attrs", "param", "attr"] {
        let Some(v) = node.get(key) else { continue };
        let m = v
            .as_object()
            .ok_or_else(|| bad(format!("{at}: {key} is not an object")))?;
        for (k, v) in m {
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            attrs = attrs.with(k, s);
        }
    }
    Ok(attrs)
}

impl Symbol {
    /// Loads MXNet's symbol JSON.
    pub fn from_json(text: &str) -> Result<Symbol> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let nodes_v = root
            .get("nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("missing the list \"nodes\""))?;
        let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(nodes_v.len());
        for (i, v) in nodes_v.iter().enumerate() {
            let m = v
                .as_object()
                .ok_or_else(|| bad(format!("node {i} is not an object")))?;
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("node {i} has no name")))?
                .to_string();
            let at = format!("node {i} ('{name}')");
            let op = m
                .get("op")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(format!("{at} has no op")))?;
            let attrs = attrs_of(m, &at)?;
            let mut inputs = Vec::new();
            for (k, inp) in m
                .get("inputs")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                let (src, idx, version) = entry(inp, &format!("{at} input {k}"))?;
                let node = nodes.get(src).ok_or_else(|| bad(format!("{at} input {k} refers to node {src}, which does not come before it (a cycle, or nodes out of order)")))?;
                if idx >= node.num_outputs() {
                    return Err(bad(format!(
                        "{at} input {k} uses output {idx} of node {src} ('{}'), which has {}",
                        node.name,
                        node.num_outputs()
                    )));
                }
                inputs.push(NodeEntry {
                    node: node.clone(),
                    index: idx,
                    version,
                });
            }
            let node = if op == "null" {
                if !inputs.is_empty() {
                    return Err(bad(format!("{at} is a variable but has inputs")));
                }
                Node::variable(&name, attrs)
            } else {
                let def = lookup(op)
                    .map_err(|_| bad(format!("{at} uses op '{op}', which is not registered")))?;
                Node::new(def, &name, attrs, inputs).map_err(|e| bad(format!("{at}: {e}")))?
            };
            nodes.push(node);
        }
        if let Some(ptr) = root.get("node_row_ptr").and_then(Value::as_array) {
            let mut at = 0u64;
            for (i, n) in nodes.iter().enumerate() {
                if ptr.get(i).and_then(Value::as_u64) != Some(at) {
                    return Err(bad(format!("node {i} ('{}', {}): node_row_ptr gives {:?} where {} outputs before it make {at}", n.name, n.op_name(), ptr.get(i), i)));
                }
                at += n.num_outputs() as u64;
            }
            if ptr.len() != nodes.len() + 1 || ptr.last().and_then(Value::as_u64) != Some(at) {
                return Err(bad(format!("node_row_ptr has {} entries ending at {:?}; the {} nodes have {at} outputs in all", ptr.len(), ptr.last(), nodes.len())));
            }
        }
        let heads = root
            .get("heads")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("missing the list \"heads\""))?;
        if heads.is_empty() {
            return Err(bad("\"heads\" is empty: the graph has no outputs"));
        }
        let mut outputs = Vec::with_capacity(heads.len());
        for (k, h) in heads.iter().enumerate() {
            let (src, idx, version) = entry(h, &format!("head {k}"))?;
            let node = nodes.get(src).ok_or_else(|| {
                bad(format!(
                    "head {k} refers to node {src}, but there are {}",
                    nodes.len()
                ))
            })?;
            if idx >= node.num_outputs() {
                return Err(bad(format!(
                    "head {k} uses output {idx} of node '{}', which has {}",
                    node.name,
                    node.num_outputs()
                )));
            }
            outputs.push(NodeEntry {
                node: node.clone(),
                index: idx,
                version,
            });
        }
        let sym = Symbol { outputs };
        sym.indexed()
            .check_unique_variables("load")
            .map_err(|e| bad(e.to_string()))?;
        Ok(sym)
    }

    /// Reads MXNet's symbol JSON from a file (what `HybridBlock.export` and
    /// `mx.model.save_checkpoint` write as `PREFIX-symbol.json`). An error names the file.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<Symbol> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| NdError::Invalid {
            op: "Symbol::load".into(),
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        Symbol::from_json(&text).map_err(|e| NdError::Invalid {
            op: "Symbol::load".into(),
            reason: format!("{}: {e}", path.display()),
        })
    }

    /// Writes the symbol as MXNet's JSON to a file, through a temporary file renamed over
    /// `path`, so a failed save leaves what `path` held.
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let text = self.to_json();
        crate::files::write_atomically("Symbol::save", path.as_ref(), |w| {
            use std::io::Write;
            w.write_all(text.as_bytes()).map_err(|e| NdError::Invalid {
                op: "Symbol::save".into(),
                reason: format!("cannot write {}: {e}", path.as_ref().display()),
            })
        })
    }

    /// Saves as MXNet's symbol JSON (nodes in graph order, MXNet version 1.9.1).
    pub fn to_json(&self) -> String {
        let g = self.indexed();
        let nodes: Vec<Value> = g
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut m = Map::new();
                m.insert("op".into(), json!(n.op_name()));
                m.insert("name".into(), json!(n.name));
                let attrs: Map<String, Value> = n
                    .attrs
                    .iter()
                    .map(|(k, v)| (k.to_string(), json!(v)))
                    .collect();
                if !attrs.is_empty() {
                    m.insert("attrs".into(), Value::Object(attrs));
                }
                let inputs: Vec<Value> = g.inputs[i]
                    .iter()
                    .zip(&n.inputs)
                    .map(|(&(src, idx), e)| json!([src, idx, e.version]))
                    .collect();
                m.insert("inputs".into(), Value::Array(inputs));
                Value::Object(m)
            })
            .collect();
        let arg_nodes: Vec<usize> = (0..g.nodes.len())
            .filter(|&i| g.nodes[i].is_variable())
            .collect();
        let heads: Vec<Value> = g
            .outputs
            .iter()
            .zip(&self.outputs)
            .map(|(&(n, i), e)| json!([n, i, e.version]))
            .collect();
        let doc = json!({
            "nodes": nodes,
            "arg_nodes": arg_nodes,
            "node_row_ptr": g.row_ptr,
            "heads": heads,
            "attrs": {"mxnet_version": ["int", 10901]},
        });
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }
}
