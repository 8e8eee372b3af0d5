//! Shape and dtype inference over a graph, forward (each op's inference from its inputs) and
//! backward (each op's rules for its parameter inputs, e.g. a weight from the data shape), until
//! nothing changes. Dimensions of 0 are unknown, as in MXNet's partial shapes (`(64, 0, 3, 3)`).
//! A clash names the node, the input or output, and both shapes.

use std::collections::HashMap;

use super::{IndexedGraph, Symbol};
use crate::error::{some_names, NdError, Result};
use crate::ops::bounded_product;
use crate::DType;

/// What inference found, per entry id (see [`IndexedGraph::entry`]).
pub struct Inferred {
    /// The graph it ran on.
    pub graph: IndexedGraph,
    /// Shape of every entry.
    pub shapes: Vec<Vec<usize>>,
    /// Dtype of every entry.
    pub dtypes: Vec<DType>,
}

impl std::fmt::Debug for Inferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Inferred({} entries, outputs {:?})",
            self.shapes.len(),
            self.output_shapes()
        )
    }
}

impl Inferred {
    /// Shape of output `index` of the node named `name`.
    pub fn shape_of(&self, name: &str, index: usize) -> Option<&[usize]> {
        let n = self.graph.nodes.iter().position(|n| n.name == name)?;
        self.shapes
            .get(self.graph.entry(n, index))
            .map(Vec::as_slice)
    }

    /// Dtypes of the graph outputs.
    pub fn output_dtypes(&self) -> Vec<DType> {
        self.graph
            .outputs
            .iter()
            .map(|&(n, i)| self.dtypes[self.graph.entry(n, i)])
            .collect()
    }

    /// Shapes of the graph outputs.
    pub fn output_shapes(&self) -> Vec<Vec<usize>> {
        self.graph
            .outputs
            .iter()
            .map(|&(n, i)| self.shapes[self.graph.entry(n, i)].clone())
            .collect()
    }
}

/// MXNet's dtype codes (`__dtype__`).
fn dtype_code(code: &str) -> Option<DType> {
    match code.trim() {
        "0" => Some(DType::F32),
        "1" => Some(DType::F64),
        "3" => Some(DType::U8),
        "4" => Some(DType::I32),
        "6" => Some(DType::I64),
        _ => None,
    }
}

/// Shapes claiming more than [`crate::ops::MAX_ELEMENTS`] are errors, so that no arithmetic on them
/// overflows and nothing is ever allocated for them.
fn check_size(shape: &[usize], at: &str) -> Result<()> {
    // A 0 is an unknown size here, not an empty axis.
    match bounded_product(shape.iter().map(|&d| d.max(1))) {
        Some(_) => Ok(()),
        None => Err(NdError::Invalid {
            op: "infer_shape".into(),
            reason: format!("{at}: shape {shape:?} claims more than 2^48 elements"),
        }),
    }
}

/// A shape or dtype given for a name that is no variable of the graph (a misspelt input) would
/// otherwise be ignored and surface later as an entry that cannot be inferred.
fn check_names<'a>(g: &IndexedGraph, names: impl Iterator<Item = &'a String>) -> Result<()> {
    g.check_unique_variables("infer_shape")?;
    let variables: Vec<&str> = g
        .nodes
        .iter()
        .filter(|n| n.is_variable())
        .map(|n| n.name.as_str())
        .collect();
    for name in names {
        if !variables.contains(&name.as_str()) {
            return Err(NdError::Invalid {
                op: "infer_shape".into(),
                reason: format!(
                    "'{name}' is given a shape or dtype but is no argument or auxiliary state of \
                     the symbol (those are {})",
                    some_names(variables.iter().copied())
                ),
            });
        }
    }
    Ok(())
}

fn complete(s: &Option<Vec<usize>>) -> bool {
    s.as_ref().is_some_and(|s| !s.contains(&0))
}

/// Merges what is known with a new (possibly partial) shape; `Err` on a clash.
fn unify(old: &Option<Vec<usize>>, new: &[usize]) -> std::result::Result<Option<Vec<usize>>, ()> {
    match old {
        None => Ok(Some(new.to_vec())),
        Some(o) if o.len() != new.len() => Err(()),
        Some(o) => {
            let mut out = o.clone();
            for (a, &b) in out.iter_mut().zip(new) {
                match (*a, b) {
                    (_, 0) => {}
                    (0, b) => *a = b,
                    (x, y) if x == y => {}
                    _ => return Err(()),
                }
            }
            Ok((out != *o).then_some(out))
        }
    }
}

/// Infers every entry's shape and dtype. `known` gives argument shapes by name (over `__shape__`
/// attributes); `dtypes` argument dtypes (over `__dtype__`; float32 otherwise).
pub fn infer(
    sym: &Symbol,
    known: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, DType>,
) -> Result<Inferred> {
    let g = sym.indexed();
    check_names(&g, known.keys().chain(dtypes.keys()))?;
    let n_entries = g.num_entries();
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; n_entries];
    let mut types: Vec<Option<DType>> = vec![None; n_entries];
    for (i, n) in g.nodes.iter().enumerate() {
        if !n.is_variable() {
            continue;
        }
        let e = g.entry(i, 0);
        let given = match known.get(&n.name) {
            Some(s) => Some(s.clone()),
            None => n
                .attrs
                .ints("infer_shape", "__shape__")?
                .map(|v| v.iter().map(|&d| d.max(0) as usize).collect()),
        };
        if let Some(s) = &given {
            check_size(s, &format!("variable '{}'", n.name))?;
        }
        shapes[e] = given;
        types[e] = Some(
            dtypes
                .get(&n.name)
                .copied()
                .or_else(|| n.attrs.get("__dtype__").and_then(dtype_code))
                .unwrap_or(DType::F32),
        );
    }
    // Forward and backward rules until a fixed point; every round fills at least one entry or stops.
    for _round in 0..=g.nodes.len() {
        let mut changed = false;
        for (i, n) in g.nodes.iter().enumerate() {
            let Some(def) = n.op else { continue };
            let at = |what: String| format!("node '{}' ({}): {what}", n.name, def.name);
            let read = |shapes: &[Option<Vec<usize>>]| -> Vec<Option<Vec<usize>>> {
                g.inputs[i]
                    .iter()
                    .map(|&(src, idx)| shapes[g.entry(src, idx)].clone())
                    .collect()
            };
            let mut ins = read(&shapes);
            if let Some(rule) = def.infer_inputs {
                let mut filled = false;
                let wanted = rule(def.name, &n.attrs, &ins).map_err(|e| NdError::Invalid {
                    op: "infer_shape".into(),
                    reason: at(e.to_string()),
                })?;
                for (k, w) in wanted.into_iter().enumerate() {
                    let (Some(w), Some(&(src, idx))) = (w, g.inputs[i].get(k)) else {
                        continue;
                    };
                    let e = g.entry(src, idx);
                    match unify(&shapes[e], &w) {
                        Ok(Some(s)) => {
                            check_size(&s, &at(format!("input {k}")))?;
                            shapes[e] = Some(s);
                            changed = true;
                            filled = true;
                        }
                        Ok(None) => {}
                        Err(()) => {
                            return Err(NdError::Shape {
                                op: format!("infer_shape: node '{}' ({})", n.name, def.name),
                                arg: format!("input {k} ('{}')", g.nodes[src].name),
                                found: shapes[e].clone().unwrap_or_default(),
                                expected: format!("{w:?} as the op requires"),
                            })
                        }
                    }
                }
                // Inputs just filled (weights from the data shape) serve this node's forward
                // rule in the same round, so a deep stack of layers needs one round, not one per
                // layer.
                if filled {
                    ins = read(&shapes);
                }
            }
            let outs_known = (0..n.num_outputs()).all(|k| complete(&shapes[g.entry(i, k)]));
            if outs_known || !ins.iter().all(complete) {
                continue;
            }
            let in_shapes: Vec<Vec<usize>> =
                ins.into_iter().map(|s| s.unwrap_or_default()).collect();
            let in_types: Vec<DType> = g.inputs[i]
                .iter()
                .map(|&(s, x)| types[g.entry(s, x)].unwrap_or(DType::F32))
                .collect();
            let (os, ot) = (def.infer)(def.name, &n.attrs, &in_shapes, &in_types).map_err(|e| {
                NdError::Invalid {
                    op: "infer_shape".into(),
                    reason: at(e.to_string()),
                }
            })?;
            if os.len() != n.num_outputs() {
                return Err(NdError::Invalid {
                    op: "infer_shape".into(),
                    reason: at(format!(
                        "inference gave {} outputs for a node with {}",
                        os.len(),
                        n.num_outputs()
                    )),
                });
            }
            for (k, (s, t)) in os.into_iter().zip(ot).enumerate() {
                let e = g.entry(i, k);
                check_size(&s, &at(format!("output {k}")))?;
                match unify(&shapes[e], &s) {
                    Ok(Some(new)) => {
                        shapes[e] = Some(new);
                        changed = true;
                    }
                    Ok(None) => {}
                    Err(()) => {
                        return Err(NdError::Shape {
                            op: format!("infer_shape: node '{}' ({})", n.name, def.name),
                            arg: format!("output {k}"),
                            found: shapes[e].clone().unwrap_or_default(),
                            expected: format!("{s:?} as inferred from its inputs"),
                        })
                    }
                }
                types[e] = Some(t);
            }
        }
        if !changed {
            break;
        }
    }
    let missing: Vec<String> = g
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| (0..n.num_outputs()).map(move |k| (i, k, n)))
        .filter(|&(i, k, _)| !complete(&shapes[g.entry(i, k)]))
        .map(|(_, k, n)| {
            if n.is_variable() {
                format!("'{}'", n.name)
            } else {
                format!("output {k} of '{}'", n.name)
            }
        })
        .collect();
    if !missing.is_empty() {
        let shown: Vec<_> = missing.iter().take(8).cloned().collect();
        // MXNet's convention: a 0 dimension is unknown, so a given shape with one is no help.
        let zero_dims: Vec<String> = known
            .iter()
            .filter(|(_, s)| s.contains(&0))
            .map(|(n, s)| format!("'{n}' {s:?}"))
            .collect();
        let hint = match zero_dims.is_empty() {
            true => "give the input shapes".to_string(),
            false => format!(
                "a 0 dimension means unknown, as in MXNet, and {} has one",
                zero_dims.join(", ")
            ),
        };
        return Err(NdError::Invalid {
            op: "infer_shape".into(),
            reason: format!(
                "cannot infer the shapes of {} entries, e.g. {} ({hint})",
                missing.len(),
                shown.join(", ")
            ),
        });
    }
    Ok(Inferred {
        shapes: shapes.into_iter().map(|s| s.unwrap_or_default()).collect(),
        dtypes: types.into_iter().map(|t| t.unwrap_or(DType::F32)).collect(),
        graph: g,
    })
}
