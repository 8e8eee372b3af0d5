//! Imperative automatic differentiation, as MXNet's `autograd`: mark arrays with
//! [`NDArray::attach_grad`], run ops inside [`record`], then [`backward`] from a result writes
//! (or adds) each marked array's gradient into [`NDArray::grad`].
//!
//! ```
//! use ndarray_ops::{autograd, DType, GradReq, Runtime};
//! use storage::Context;
//!
//! let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
//! let mut x = rt.from_vec(vec![1.0f32, 2.0, 3.0], &[3], Context::cpu(0)).unwrap();
//! x.attach_grad(GradReq::Write).unwrap();
//! let y = autograd::record(|| (&x * &x)?.sum(&[], false)).unwrap(); // y = sum(x^2)
//! y.backward().unwrap();
//! assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
//! ```
//!
//! Recording builds the same graph a [`Symbol`] holds, one node per op whose inputs include a
//! recorded array (or an array with a gradient attached), and keeps each node's input and output
//! arrays alive; `backward` runs the symbolic gradient pass ([`crate::symbol::gradient`]) over
//! that graph and invokes only the backward nodes, reading the recorded arrays for the forward
//! ones. So every op with a symbolic gradient rule differentiates imperatively too, by the same
//! rule. Recording is per thread, as in MXNet. A recorded array may not be written in place while
//! recording (its recorded value would change under the graph); such a write is refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use crate::array::tape::{is_recording, is_training, set_recording, set_training};
use crate::array::tape::{leaf, scoped, Entry, Leaf, Mode, Source};
use crate::error::{invalid, Result};
use crate::ops::{GradReq, Node, IS_TRAIN};
use crate::symbol::{gradient, head_grad_names, Symbol};
use crate::NDArray;

/// Runs `f` recording, in training mode (Dropout drops, BatchNorm uses the batch's statistics),
/// as MXNet's `with autograd.record():`. Scopes nest; the mode before is restored on return or
/// unwind.
pub fn record<R>(f: impl FnOnce() -> R) -> R {
    record_with(true, f)
}

/// [`record`] with the mode chosen: `train_mode = false` records inference behaviour.
pub fn record_with<R>(train_mode: bool, f: impl FnOnce() -> R) -> R {
    scoped(
        Mode {
            recording: true,
            training: train_mode,
        },
        f,
    )
}

/// Runs `f` without recording and in inference mode (MXNet's `autograd.pause()`), inside a
/// [`record`] scope.
pub fn pause<R>(f: impl FnOnce() -> R) -> R {
    scoped(
        Mode {
            recording: false,
            training: false,
        },
        f,
    )
}

/// Runs `f` in training mode (`true`) or inference mode, recording or not as before (MXNet's
/// `train_mode()` and `predict_mode()`).
pub fn with_training<R>(training: bool, f: impl FnOnce() -> R) -> R {
    let recording = is_recording();
    scoped(
        Mode {
            recording,
            training,
        },
        f,
    )
}

impl NDArray {
    /// Marks this array (of a float dtype) as one to differentiate by: allocates its gradient
    /// array (zeros, same shape, dtype and context), which [`backward`] writes or adds to as
    /// `req` says. Attaching again starts a new gradient array and leaves the graphs recorded
    /// before.
    pub fn attach_grad(&mut self, req: GradReq) -> Result<()> {
        if !self.dtype().is_float() {
            return Err(invalid(
                "attach_grad",
                format!(
                    "{} arrays have no gradient; attach one to a float array",
                    self.dtype()
                ),
            ));
        }
        let grad = self
            .runtime()
            .zeros(self.shape(), self.dtype(), self.ctx())?;
        self.set_entry(Some(leaf(self, Some((grad, req)))));
        Ok(())
    }

    /// [`NDArray::attach_grad`] with the gradient written into `grad` (MXNet's
    /// `autograd.mark_variables`), which must have this array's shape, dtype and device.
    pub fn attach_grad_into(&mut self, grad: NDArray, req: GradReq) -> Result<()> {
        if grad.shape() != self.shape() || grad.dtype() != self.dtype() || grad.ctx() != self.ctx()
        {
            return Err(invalid(
                "mark_variables",
                format!(
                    "the gradient array is {:?} {} on {}; the variable is {:?} {} on {}",
                    grad.shape(),
                    grad.dtype(),
                    grad.ctx(),
                    self.shape(),
                    self.dtype(),
                    self.ctx()
                ),
            ));
        }
        self.attach_grad(req)?;
        self.set_entry(Some(leaf(self, Some((grad, req)))));
        Ok(())
    }

    /// The gradient array [`NDArray::attach_grad`] made, or `None` without one.
    pub fn grad(&self) -> Option<NDArray> {
        match &self.entry()?.source {
            Source::Leaf(leaf) => leaf.grad.as_ref().map(|(g, _)| g.clone()),
            Source::Op(_) => None,
        }
    }

    /// The same array outside any recorded graph (gradients stop here).
    pub fn detach(&self) -> NDArray {
        let mut a = self.clone();
        a.set_entry(None);
        a
    }

    /// [`backward`] from this array alone, with a head gradient of ones.
    pub fn backward(&self) -> Result<()> {
        backward(&[self], None)
    }
}

/// What a recorded graph reaches from its heads.
struct Reached {
    /// Every recorded value, by node (its address).
    values: HashMap<usize, Vec<NDArray>>,
    /// Every leaf: arrays with gradients attached and constants.
    leaves: Vec<Arc<Leaf>>,
}

fn reach(heads: &[&Arc<Entry>]) -> Reached {
    let mut values: HashMap<usize, Vec<NDArray>> = HashMap::new();
    let mut leaves: Vec<Arc<Leaf>> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<&Arc<Entry>> = heads.to_vec();
    while let Some(e) = stack.pop() {
        let key = Arc::as_ptr(e.node()) as usize;
        if !seen.insert(key) {
            continue;
        }
        match &e.source {
            Source::Leaf(leaf) => {
                values.insert(key, vec![leaf.value.clone()]);
                leaves.push(leaf.clone());
            }
            Source::Op(record) => {
                values.insert(key, record.outputs.clone());
                stack.extend(&record.inputs);
            }
        }
    }
    Reached { values, leaves }
}

/// The recorded entry of each head, or an error naming the first head outside any graph.
fn recorded_entries<'a>(heads: &[&'a NDArray]) -> Result<Vec<&'a Arc<Entry>>> {
    heads
        .iter()
        .enumerate()
        .map(|(i, h)| {
            h.entry().ok_or_else(|| {
                invalid(
                    "autograd",
                    format!(
                        "head {i} ({:?}) is not in a recorded graph: compute it inside \
                         autograd::record from an array with attach_grad",
                        h.shape()
                    ),
                )
            })
        })
        .collect()
}

/// The graph recorded for `heads` as a symbol whose outputs are the heads, with the array each
/// of its variables stood for (MXNet's `autograd.get_symbol`): bound by the [`crate::Executor`]
/// with those arrays, it runs the recorded program again; saved as JSON, MXNet loads it. Its
/// variables are named `autograd_var<n>` (arrays with gradients attached) and
/// `autograd_const<n>` (arrays read without one).
pub fn get_symbol(heads: &[&NDArray]) -> Result<(Symbol, HashMap<String, NDArray>)> {
    let entries = recorded_entries(heads)?;
    let symbol = Symbol::from_outputs(entries.iter().map(|e| e.node_entry()).collect());
    let arrays = reach(&entries)
        .leaves
        .iter()
        .map(|l| (l.node.name.clone(), l.value.clone()))
        .collect();
    Ok((symbol, arrays))
}

/// Differentiates the recorded `heads`: writes (or adds) into each attached gradient array the
/// gradient of `sum_k <heads[k], head_grads[k]>` (head gradients of ones when `None`; loss ops
/// such as `SoftmaxOutput` start their own gradient and ignore theirs; a head listed twice
/// counts twice). The graph is kept: calling it again differentiates the same values again.
pub fn backward(heads: &[&NDArray], head_grads: Option<&[&NDArray]>) -> Result<()> {
    let (entries, seeds) = seeded_heads(heads, head_grads)?;
    let reached = reach(&entries);
    let leaves: Vec<&Arc<Leaf>> = reached
        .leaves
        .iter()
        .filter(|l| l.grad.as_ref().is_some_and(|(_, r)| *r != GradReq::Null))
        .collect();
    let grads = differentiate(&entries, &seeds, &reached.values, &leaves)?;
    pause(|| {
        // Written into the gradient arrays, so results that are not our own need no copy.
        for (leaf, (value, _)) in leaves.iter().zip(&grads) {
            match &leaf.grad {
                Some((grad, GradReq::Write)) => value.copy_into(grad)?,
                Some((grad, GradReq::Add)) => grad.add_inplace(value)?,
                _ => {}
            }
        }
        Ok(())
    })
}

/// The gradients of the recorded `heads` (as [`backward`] takes them) with respect to
/// `variables`, arrays with a gradient attached, as new arrays (MXNet's `autograd.grad`): the
/// attached gradient arrays are left alone. A variable the heads do not depend on gets zeros.
pub fn grad(
    heads: &[&NDArray],
    variables: &[&NDArray],
    head_grads: Option<&[&NDArray]>,
) -> Result<Vec<NDArray>> {
    let (entries, seeds) = seeded_heads(heads, head_grads)?;
    let mut wrt = Vec::with_capacity(variables.len());
    for (i, v) in variables.iter().enumerate() {
        match v.entry().map(|e| &e.source) {
            Some(Source::Leaf(leaf)) if leaf.grad.is_some() => wrt.push(leaf),
            _ => {
                return Err(invalid(
                    "grad",
                    format!(
                        "variable {i} ({:?}) has no gradient attached (attach_grad marks the \
                         arrays to differentiate by)",
                        v.shape()
                    ),
                ))
            }
        }
    }
    let values = reach(&entries).values;
    let grads = differentiate(&entries, &seeds, &values, &wrt)?;
    // No two results, and nothing the caller holds, may share memory.
    pause(|| {
        grads
            .into_iter()
            .map(|(g, own)| match own {
                true => Ok(g),
                false => g.copy_to(g.ctx()),
            })
            .collect()
    })
}

/// The recorded entry of each distinct head, with the sum of the head gradients given for it
/// (ones when none are given), the gradients' count and shapes checked.
fn seeded_heads<'a>(
    heads: &[&'a NDArray],
    head_grads: Option<&[&NDArray]>,
) -> Result<(Vec<&'a Arc<Entry>>, Vec<NDArray>)> {
    if heads.is_empty() {
        return Err(invalid("backward", "no head arrays given"));
    }
    if let Some(g) = head_grads {
        if g.len() != heads.len() {
            return Err(invalid(
                "backward",
                format!("{} head gradients given for {} heads", g.len(), heads.len()),
            ));
        }
        for (i, (g, h)) in g.iter().zip(heads).enumerate() {
            if g.shape() != h.shape() || g.dtype() != h.dtype() {
                return Err(invalid(
                    "backward",
                    format!(
                        "head gradient {i} is {:?} {}; its head is {:?} {}",
                        g.shape(),
                        g.dtype(),
                        h.shape(),
                        h.dtype()
                    ),
                ));
            }
        }
    }
    let mut entries: Vec<&Arc<Entry>> = Vec::with_capacity(heads.len());
    let mut seeds: Vec<NDArray> = Vec::with_capacity(heads.len());
    for (i, (h, e)) in heads.iter().zip(recorded_entries(heads)?).enumerate() {
        let seed = match head_grads {
            Some(g) => g[i].clone(),
            None => h.runtime().ones(h.shape(), h.dtype(), h.ctx())?,
        };
        let same = |x: &&Arc<Entry>| Arc::ptr_eq(x.node(), e.node()) && x.index == e.index;
        match entries.iter().position(same) {
            Some(k) => seeds[k] = pause(|| &seeds[k] + &seed)?,
            None => {
                entries.push(e);
                seeds.push(seed);
            }
        }
    }
    Ok((entries, seeds))
}

/// The gradient of the heads, seeded by `seeds`, with respect to each leaf of `wrt`: the
/// symbolic gradient pass over the recorded graph, of which only the backward nodes run (the
/// forward ones are `values`). Each gradient comes with whether it is the caller's own: false
/// for one that is not a backward node's output (a head gradient passed straight through, a
/// recorded value) or was handed out already, which a caller returning it must copy.
fn differentiate(
    entries: &[&Arc<Entry>],
    seeds: &[NDArray],
    values: &HashMap<usize, Vec<NDArray>>,
    wrt: &[&Arc<Leaf>],
) -> Result<Vec<(NDArray, bool)>> {
    let key = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
    // The pass takes each variable once.
    let mut reached: Vec<&Arc<Leaf>> = Vec::new();
    for l in wrt {
        if values.contains_key(&key(&l.node)) && !reached.iter().any(|r| Arc::ptr_eq(r, l)) {
            reached.push(l);
        }
    }
    let sym = Symbol::from_outputs(entries.iter().map(|e| e.node_entry()).collect());
    let names: Vec<String> = reached.iter().map(|l| l.node.name.clone()).collect();
    let head_vars: HashMap<String, NDArray> = head_grad_names(&sym)
        .into_iter()
        .map(|(name, i)| (name, seeds[i].clone()))
        .collect();
    let g = gradient(&sym, &names)?.indexed();
    pause(|| {
        let mut vals: Vec<Vec<NDArray>> = Vec::with_capacity(g.nodes.len());
        for (i, n) in g.nodes.iter().enumerate() {
            let v = match (values.get(&key(n)), n.op) {
                (Some(v), _) => v.clone(),
                (None, None) => vec![head_vars.get(&n.name).cloned().ok_or_else(|| {
                    invalid("backward", format!("no value for variable '{}'", n.name))
                })?],
                (None, Some(def)) => {
                    let ins: Vec<&NDArray> =
                        g.inputs[i].iter().map(|&(s, k)| &vals[s][k]).collect();
                    let attrs = n.attrs.clone().with(IS_TRAIN, true);
                    crate::imperative::invoke(def.name, &ins, &attrs, None)
                        .map_err(|e| invalid("backward", format!("node '{}': {e}", n.name)))?
                }
            };
            vals.push(v);
        }
        let mut handed = HashSet::new();
        wrt.iter()
            .map(|l| match reached.iter().position(|r| Arc::ptr_eq(r, l)) {
                Some(k) => {
                    let (node, index) = g.outputs[entries.len() + k];
                    let made =
                        g.nodes[node].op.is_some() && !values.contains_key(&key(&g.nodes[node]));
                    let own = made && handed.insert((node, index));
                    Ok((vals[node][index].clone(), own))
                }
                None => {
                    let v = &l.value;
                    Ok((v.runtime().zeros(v.shape(), v.dtype(), v.ctx())?, true))
                }
            })
            .collect()
    })
}
