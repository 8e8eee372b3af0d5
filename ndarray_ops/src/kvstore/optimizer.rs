//! What a store does with a pushed value: an [`Updater`] (any function of the key, the merged
//! value and the stored one), or an [`Optimizer`] (SGD with momentum, Adam) run on MXNet's fused
//! update ops, with its per-key state kept by the store and saved with it.

use std::collections::BTreeMap;

use super::Key;
use crate::error::{invalid, Result};
use crate::imperative::invoke;
use crate::ops::names::op_name;
use crate::ops::Attrs;
use crate::NDArray;

/// Stochastic gradient descent with momentum and weight decay (MXNet's `sgd_mom_update`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum (0 for plain SGD).
    pub momentum: f64,
    /// Weight decay.
    pub wd: f64,
}

/// A store-side update: `update(key, merged, stored)` changes `stored` from the value pushed for
/// `key` (summed over the devices that pushed it). It runs on the thread that pushed, and should
/// only push engine ops (as the NDArray ops do), so that a push returns at once.
pub trait Updater: Send {
    /// Updates `stored` from `merged`.
    fn update(&mut self, key: &Key, merged: &NDArray, stored: &NDArray) -> Result<()>;

    /// The state it keeps, as named arrays (for `save_optimizer_states`); none by default.
    fn states(&self) -> Vec<(String, NDArray)> {
        Vec::new()
    }

    /// Restores the state [`Updater::states`] gave; an updater without state refuses any.
    fn load_states(&mut self, states: Vec<(String, NDArray)>) -> Result<()> {
        match states.first() {
            None => Ok(()),
            Some((name, _)) => Err(invalid(
                "kvstore",
                format!("the updater keeps no state, but the file holds '{name}'"),
            )),
        }
    }

    /// Sets the learning rate of the updates pushed from now on, where the updater has one.
    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        Err(invalid(
            "kvstore",
            format!("cannot set the learning rate to {lr}: the updater is a plain function"),
        ))
    }
}

impl<F> Updater for F
where
    F: FnMut(&Key, &NDArray, &NDArray) -> Result<()> + Send,
{
    fn update(&mut self, key: &Key, merged: &NDArray, stored: &NDArray) -> Result<()> {
        self(key, merged, stored)
    }
}

/// Which update an [`Optimizer`] applies.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    /// `sgd_update`, or `sgd_mom_update` with a momentum.
    Sgd { momentum: f64 },
    /// `adam_update`.
    Adam {
        beta1: f64,
        beta2: f64,
        epsilon: f64,
    },
}

/// An optimizer as a store's updater: MXNet's fused update ops with the hyper-parameters MXNet's
/// optimizers give them (`lr`, `wd`, `rescale_grad`, `clip_gradient`), and one state per key made
/// on the key's first update, on the stored value's device.
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    rule: Rule,
    lr: f64,
    wd: f64,
    rescale_grad: f64,
    clip_gradient: Option<f64>,
}

impl Optimizer {
    /// Stochastic gradient descent, with momentum when `sgd.momentum` is not 0.
    pub fn sgd(sgd: Sgd) -> Optimizer {
        Optimizer {
            rule: Rule::Sgd {
                momentum: sgd.momentum,
            },
            lr: sgd.lr,
            wd: sgd.wd,
            rescale_grad: 1.0,
            clip_gradient: None,
        }
    }

    /// Adam with MXNet's defaults (beta1 0.9, beta2 0.999, epsilon 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer {
            rule: Rule::Adam {
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
            },
            lr,
            wd: 0.0,
            rescale_grad: 1.0,
            clip_gradient: None,
        }
    }

    /// Scales every gradient by `scale` before the update (MXNet's `rescale_grad`: one over
    /// the batch size, when the loss gives per-sample gradients).
    pub fn rescale_grad(self, scale: f64) -> Optimizer {
        Optimizer {
            rescale_grad: scale,
            ..self
        }
    }

    /// Clips every (rescaled) gradient to `[-bound, bound]`.
    pub fn clip_gradient(self, bound: f64) -> Optimizer {
        Optimizer {
            clip_gradient: Some(bound),
            ..self
        }
    }

    /// Weight decay.
    pub fn wd(self, wd: f64) -> Optimizer {
        Optimizer { wd, ..self }
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    fn attrs(&self) -> Attrs {
        let mut a = Attrs::new()
            .with("lr", self.lr)
            .with("wd", self.wd)
            .with("rescale_grad", self.rescale_grad);
        if let Some(c) = self.clip_gradient {
            a = a.with("clip_gradient", c);
        }
        match self.rule {
            Rule::Sgd { momentum } if momentum != 0.0 => a.with("momentum", momentum),
            Rule::Sgd { .. } => a,
            Rule::Adam {
                beta1,
                beta2,
                epsilon,
            } => a
                .with("beta1", beta1)
                .with("beta2", beta2)
                .with("epsilon", epsilon),
        }
    }

    /// How many state arrays (shaped like the weight, zero at first) one key needs.
    fn state_count(&self) -> usize {
        match self.rule {
            Rule::Sgd { momentum } if momentum != 0.0 => 1,
            Rule::Sgd { .. } => 0,
            Rule::Adam { .. } => 2,
        }
    }

    /// Pushes the update of `weight` from `grad` with `state`, the op's attributes given (made
    /// once by [`Optimizer::attrs`]: a fresh map per call would be parsed again per call).
    fn apply(
        &self,
        attrs: &Attrs,
        weight: &NDArray,
        grad: &NDArray,
        state: &[NDArray],
    ) -> Result<()> {
        let op = match (self.rule, state.len()) {
            (Rule::Sgd { .. }, 0) => op_name!("sgd_update"),
            (Rule::Sgd { .. }, _) => op_name!("sgd_mom_update"),
            (Rule::Adam { .. }, _) => op_name!("adam_update"),
        };
        let mut inputs = vec![weight, grad];
        inputs.extend(state);
        let mut outs = vec![weight];
        outs.extend(state);
        invoke(op, &inputs, attrs, Some(&outs))?;
        Ok(())
    }
}

/// An [`Optimizer`] with its per-key state: what [`super::KVStore::set_optimizer`] installs.
pub(super) struct OptimizerUpdater {
    optimizer: Optimizer,
    /// The update op's attributes, from the optimizer.
    attrs: Attrs,
    states: BTreeMap<Key, Vec<NDArray>>,
}

impl OptimizerUpdater {
    pub(super) fn new(optimizer: Optimizer) -> OptimizerUpdater {
        OptimizerUpdater {
            attrs: optimizer.attrs(),
            optimizer,
            states: BTreeMap::new(),
        }
    }
}

/// The name a state array is saved under: the key (typed, so that the int key 3 and the string
/// key "3" stay apart), then the state's index.
fn state_name(key: &Key, k: usize) -> String {
    match key {
        Key::Int(i) => format!("int:{i}/{k}"),
        Key::Str(s) => format!("str:{s}/{k}"),
    }
}

/// The key and index of a name [`state_name`] made.
fn parse_state_name(name: &str) -> Option<(Key, usize)> {
    let (key, k) = name.rsplit_once('/')?;
    let k = k.parse().ok()?;
    let key = match key.split_once(':')? {
        ("int", i) => Key::Int(i.parse().ok()?),
        ("str", s) => Key::Str(s.to_string()),
        _ => return None,
    };
    Some((key, k))
}

impl Updater for OptimizerUpdater {
    fn update(&mut self, key: &Key, merged: &NDArray, stored: &NDArray) -> Result<()> {
        if !self.states.contains_key(key) {
            let rt = stored.runtime();
            let state = (0..self.optimizer.state_count())
                .map(|_| rt.zeros(stored.shape(), stored.dtype(), stored.ctx()))
                .collect::<Result<Vec<_>>>()?;
            self.states.insert(key.clone(), state);
        }
        self.optimizer
            .apply(&self.attrs, stored, merged, &self.states[key])
    }

    fn states(&self) -> Vec<(String, NDArray)> {
        self.states
            .iter()
            .flat_map(|(key, s)| {
                s.iter()
                    .enumerate()
                    .map(|(k, a)| (state_name(key, k), a.clone()))
            })
            .collect()
    }

    fn load_states(&mut self, states: Vec<(String, NDArray)>) -> Result<()> {
        let mut by_name: BTreeMap<String, NDArray> = states.into_iter().collect();
        // A state for a key this updater has not met yet is kept until the key's first update
        // would make it: restored states are the ones saved, whatever was pushed since.
        let keys: Vec<(Key, usize)> = {
            let mut seen: BTreeMap<Key, usize> = BTreeMap::new();
            for name in by_name.keys() {
                let (key, k) = parse_state_name(name).ok_or_else(|| {
                    invalid(
                        "kvstore",
                        format!("'{name}' is not an optimizer state's name"),
                    )
                })?;
                let count = seen.entry(key).or_default();
                *count = (*count).max(k + 1);
            }
            seen.into_iter().collect()
        };
        for (key, count) in keys {
            if count != self.optimizer.state_count() {
                return Err(invalid(
                    "kvstore",
                    format!(
                        "key {key}: the file holds {count} optimizer states, this optimizer keeps {}",
                        self.optimizer.state_count()
                    ),
                ));
            }
            let mut state = Vec::with_capacity(count);
            for k in 0..count {
                let name = state_name(&key, k);
                let a = by_name.remove(&name).ok_or_else(|| {
                    invalid(
                        "kvstore",
                        format!("key {key}: the file has no state '{name}'"),
                    )
                })?;
                state.push(a);
            }
            match self.states.get(&key) {
                // Copy into the arrays in use, so that updates already pushed keep their order.
                Some(old) => {
                    for (o, n) in old.iter().zip(&state) {
                        if o.shape() != n.shape() {
                            return Err(invalid(
                                "kvstore",
                                format!(
                                    "key {key}: the saved state has shape {:?}, the weight {:?}",
                                    n.shape(),
                                    o.shape()
                                ),
                            ));
                        }
                        n.copy_into(o)?;
                    }
                }
                None => {
                    self.states.insert(key, state);
                }
            }
        }
        Ok(())
    }

    fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        self.optimizer.lr = lr;
        self.attrs = self.optimizer.attrs();
        Ok(())
    }
}
