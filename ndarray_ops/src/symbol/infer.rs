//! Shape and dtype inference over a graph, forward (each op's inference from its inputs) and
//! backward (each op's rules for its parameter inputs, e.g. a weight from the data shape), until
//! nothing changes. Dimensions of 0 are unknown, as in MXNet's partial shapes (`(64, 0, 3, 3)`).
//! A clash names the node, the input or output, and both shapes.

use std::collections::HashMap;

use super::{IndexedGraph, Symbol};
use crate::error::{some_names, NdError, Result};
use crate::ops::{bounded_product, partial_shapes::same_size, Attrs, OpDef};
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
/// attributes); `dtypes` argument dtypes (over `__dtype__`; float32 otherwise). An entry whose
/// shape cannot be inferred is an error naming it.
pub fn infer(
    sym: &Symbol,
    known: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, DType>,
) -> Result<Inferred> {
    let (g, shapes, types) = fixed_point(sym, known, dtypes)?;
    finish(g, shapes, types, known)
}

/// What can be inferred, as MXNet's `infer_shape_partial`: unknown dimensions are 0 and entries
/// of which nothing is known are empty. Clashes are still errors.
pub fn infer_partial(
    sym: &Symbol,
    known: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, DType>,
) -> Result<Inferred> {
    let (graph, shapes, types) = fixed_point(sym, known, dtypes)?;
    Ok(Inferred {
        shapes: shapes.into_iter().map(Option::unwrap_or_default).collect(),
        dtypes: types.into_iter().map(|t| t.unwrap_or(DType::F32)).collect(),
        graph,
    })
}

type Shapes = Vec<Option<Vec<usize>>>;

/// Dtypes of the variables none was given for, as MXNet infers them for the usual layers: a
/// variable that feeds an op takes the dtype of that op's first input whose dtype is known
/// when it is a floating one (a layer's weights take its data's: `float64` data binds `float64`
/// weights), in graph order, so a chain of layers passes it on; an integer one (indices)
/// passes nothing. What stays unknown is float32.
fn variable_dtypes(g: &IndexedGraph, types: &mut [Option<DType>]) {
    for (i, n) in g.nodes.iter().enumerate() {
        if n.is_variable() {
            continue;
        }
        let known = g.inputs[i].iter().find_map(|&(s, x)| types[g.entry(s, x)]);
        let Some(t) = known.filter(|t| t.is_float()) else {
            continue;
        };
        for &(s, x) in &g.inputs[i] {
            if g.nodes[s].is_variable() {
                types[g.entry(s, x)].get_or_insert(t);
            }
        }
        if n.attrs.get("dtype").is_none() {
            // The node's outputs, for the ops after it; the forward rule sets them for good.
            for k in 0..n.num_outputs() {
                types[g.entry(i, k)].get_or_insert(t);
            }
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        if n.is_variable() {
            types[g.entry(i, 0)].get_or_insert(DType::F32);
        }
    }
}

/// Sizes that stand in for unknown dimensions when an op's own inference is probed: distinct per
/// dimension (so that no two unknowns look equal) and divisible by the small counts that split
/// an axis (SliceChannel, Reshape's -4).
fn stand_in(run: usize, k: usize) -> usize {
    720 * (k + 2) + 5040 * run
}

/// What `def.infer` says of partial inputs (every input's rank known): it runs twice, with
/// different sizes standing in for the unknown dimensions; an output dimension both runs agree
/// on does not depend on them. Also the outputs that are an input's shape in both runs (an
/// elementwise op's): their known dimensions are that input's too. `None` where the op refuses
/// the stand-ins (it needs the unknowns to meet a condition it cannot check) or the runs
/// disagree in rank.
fn probe(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[Vec<usize>],
    types: &[DType],
) -> Option<(Shapes, Vec<(usize, usize)>)> {
    probe_with(def, attrs, ins, types, true).or_else(|| {
        // An op that needs unknowns to agree (batch_dot's two batch sizes, pick's index and
        // data) refuses distinct stand-ins; one stand-in for all of them still tells which
        // output dimensions do not depend on them, though no longer which outputs keep an
        // input's shape (two unknowns that look alike may differ).
        probe_with(def, attrs, ins, types, false).map(|(outs, _)| (outs, vec![]))
    })
}

fn probe_with(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[Vec<usize>],
    types: &[DType],
    distinct: bool,
) -> Option<(Shapes, Vec<(usize, usize)>)> {
    let mut runs = Vec::with_capacity(2);
    for run in 0..2 {
        let mut k = 0;
        let filled: Vec<Vec<usize>> = ins
            .iter()
            .map(|s| {
                s.iter()
                    .map(|&d| match d {
                        0 => {
                            k += usize::from(distinct);
                            stand_in(run, k)
                        }
                        d => d,
                    })
                    .collect()
            })
            .collect();
        let (outs, _) = (def.infer)(def.name, attrs, &filled, types).ok()?;
        runs.push((filled, outs));
    }
    let (a_in, a_out) = &runs[0];
    let (b_in, b_out) = &runs[1];
    if a_out.len() != b_out.len() {
        return None;
    }
    let mut outs = Vec::with_capacity(a_out.len());
    let mut same = vec![];
    for (k, (a, b)) in a_out.iter().zip(b_out).enumerate() {
        if a.len() != b.len() {
            return None;
        }
        let dims = a.iter().zip(b).map(|(&x, &y)| if x == y { x } else { 0 });
        outs.push(Some(dims.collect()));
        for i in 0..ins.len() {
            if *a == a_in[i] && *b == b_in[i] {
                same.push((i, k));
            }
        }
    }
    Some((outs, same))
}

/// Where inference stands: every entry's shape and dtype so far.
struct State<'g> {
    g: &'g IndexedGraph,
    shapes: Shapes,
    types: Vec<Option<DType>>,
}

impl State<'_> {
    fn inputs(&self, node: usize) -> Shapes {
        self.g.inputs[node]
            .iter()
            .map(|&(src, idx)| self.shapes[self.g.entry(src, idx)].clone())
            .collect()
    }

    /// Whether every output of `node` has its dtype (only its forward inference gives one).
    fn types_known(&self, node: usize) -> bool {
        (0..self.g.nodes[node].num_outputs()).all(|k| self.types[self.g.entry(node, k)].is_some())
    }

    fn outputs(&self, node: usize) -> Shapes {
        (0..self.g.nodes[node].num_outputs())
            .map(|k| self.shapes[self.g.entry(node, k)].clone())
            .collect()
    }

    /// Unifies `proposed` shapes with node `node`'s inputs (or outputs); whether any changed.
    fn propose(
        &mut self,
        node: usize,
        outputs: bool,
        proposed: &[Option<Vec<usize>>],
        why: &str,
    ) -> Result<bool> {
        let n = &self.g.nodes[node];
        let op = n.op.map_or("", |d| d.name);
        let mut changed = false;
        for (k, w) in proposed.iter().enumerate() {
            let Some(w) = w else { continue };
            let (e, arg) = match outputs {
                true if k < n.num_outputs() => (self.g.entry(node, k), format!("output {k}")),
                false => match self.g.inputs[node].get(k) {
                    Some(&(src, idx)) => (
                        self.g.entry(src, idx),
                        format!("input {k} ('{}')", self.g.nodes[src].name),
                    ),
                    None => continue,
                },
                true => continue,
            };
            match unify(&self.shapes[e], w) {
                Ok(Some(s)) => {
                    check_size(&s, &format!("node '{}' ({op}): {arg}", n.name))?;
                    self.shapes[e] = Some(s);
                    changed = true;
                }
                Ok(None) => {}
                Err(()) => {
                    return Err(NdError::Shape {
                        op: format!("infer_shape: node '{}' ({op})", n.name),
                        arg,
                        found: self.shapes[e].clone().unwrap_or_default(),
                        expected: format!("{w:?} {why}"),
                    })
                }
            }
        }
        Ok(changed)
    }
}

/// Runs every op's rules, forward and backward, until nothing changes.
///
/// Per op node and round, while any of its inputs or outputs is incomplete:
/// 1. its partial rule ([`OpDef::infer_partial`]) proposes inputs and outputs;
/// 2. with every input known, its inference gives the outputs; with every input's rank known,
///    probing its inference gives the output dimensions that do not depend on the unknown
///    ones, and ties outputs that keep an input's shape to that input (both ways);
/// 3. an op whose output is its input reinterpreted takes an input's one unknown dimension
///    from the output's size.
///
/// Every step only fills unknowns (a clash is an error naming the node), so each round that
/// changes something fills at least one dimension, and the loop ends.
fn fixed_point(
    sym: &Symbol,
    known: &HashMap<String, Vec<usize>>,
    dtypes: &HashMap<String, DType>,
) -> Result<(IndexedGraph, Shapes, Vec<Option<DType>>)> {
    let g = sym.indexed();
    check_names(&g, known.keys().chain(dtypes.keys()))?;
    let n_entries = g.num_entries();
    let mut shapes: Shapes = vec![None; n_entries];
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
        types[e] = dtypes
            .get(&n.name)
            .copied()
            .or_else(|| n.attrs.get("__dtype__").and_then(dtype_code));
    }
    variable_dtypes(&g, &mut types);
    let mut st = State {
        g: &g,
        shapes,
        types,
    };
    loop {
        let mut changed = false;
        for (i, n) in g.nodes.iter().enumerate() {
            let Some(def) = n.op else { continue };
            let at = |what: String| format!("node '{}' ({}): {what}", n.name, def.name);
            let mut ins = st.inputs(i);
            let mut outs = st.outputs(i);
            if ins.iter().chain(&outs).all(complete) && st.types_known(i) {
                continue;
            }
            if let Some(rule) = def.infer_partial {
                let p = rule(def.name, &n.attrs, &ins, &outs).map_err(|e| NdError::Invalid {
                    op: "infer_shape".into(),
                    reason: at(e.to_string()),
                })?;
                let filled = st.propose(i, false, &p.inputs, "as the op requires")?
                    | st.propose(i, true, &p.outputs, "as the op requires")?;
                if filled {
                    // What was just filled (weights from the data shape) serves this node's
                    // forward rule in the same round, so a deep stack of layers needs one
                    // round, not one per layer.
                    changed = true;
                    ins = st.inputs(i);
                    outs = st.outputs(i);
                }
            }
            let in_types: Vec<DType> = g.inputs[i]
                .iter()
                .map(|&(s, x)| st.types[g.entry(s, x)].unwrap_or(DType::F32))
                .collect();
            if ins.iter().all(complete) {
                if outs.iter().all(complete) && st.types_known(i) {
                    continue;
                }
                let in_shapes: Vec<Vec<usize>> =
                    ins.into_iter().map(|s| s.unwrap_or_default()).collect();
                let (os, ot) =
                    (def.infer)(def.name, &n.attrs, &in_shapes, &in_types).map_err(|e| {
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
                for (k, s) in os.iter().enumerate() {
                    check_size(s, &at(format!("output {k}")))?;
                }
                let os: Shapes = os.into_iter().map(Some).collect();
                changed |= st.propose(i, true, &os, "as inferred from its inputs")?;
                for (k, t) in ot.into_iter().enumerate() {
                    st.types[g.entry(i, k)] = Some(t);
                }
                continue;
            }
            if ins.iter().all(Option::is_some) {
                let partial: Vec<Vec<usize>> = ins.iter().flatten().cloned().collect();
                if let Some((os, same)) = probe(def, &n.attrs, &partial, &in_types) {
                    changed |= st.propose(i, true, &os, "as inferred from its inputs")?;
                    for (inp, out) in same {
                        let mut to_input = vec![None; inp + 1];
                        to_input[inp] = st.outputs(i)[out].clone();
                        changed |= st.propose(i, false, &to_input, "as its output has")?;
                        let mut to_output = vec![None; out + 1];
                        to_output[out] = st.inputs(i)[inp].clone();
                        changed |= st.propose(i, true, &to_output, "as its input has")?;
                    }
                }
            }
            if def.identity {
                if let (Some(Some(x)), Some(Some(y))) =
                    (st.inputs(i).first(), st.outputs(i).first())
                {
                    if let Some(x) = same_size(x, y) {
                        changed |= st.propose(i, false, &[Some(x)], "to hold its output")?;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Dtypes where shapes stayed unknown, so no forward inference ran (MXNet infers dtypes
    // without shapes): an op's outputs take its `dtype` attribute when it names one, else its
    // first input's dtype. After the loop, so that a guess never stands in for a forward rule;
    // nodes are in topological order, so one pass carries dtypes through.
    for (i, n) in g.nodes.iter().enumerate() {
        if n.is_variable() || st.types_known(i) {
            continue;
        }
        let first = g.inputs[i]
            .first()
            .and_then(|&(s, x)| st.types[g.entry(s, x)]);
        let Some(t) = n.attrs.get("dtype").and_then(DType::parse).or(first) else {
            continue;
        };
        for k in 0..n.num_outputs() {
            st.types[g.entry(i, k)].get_or_insert(t);
        }
    }
    let State { shapes, types, .. } = st;
    Ok((g, shapes, types))
}

fn finish(
    g: IndexedGraph,
    shapes: Shapes,
    types: Vec<Option<DType>>,
    known: &HashMap<String, Vec<usize>>,
) -> Result<Inferred> {
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
