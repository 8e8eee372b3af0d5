//! Data-parallel training: one executor per device, each batch split across them by rows.
//!
//! A step pushes, for every device, the copy of its rows of the batch, forward and backward;
//! then, per parameter, from the last layer's to the first's, a push of its gradients from every
//! device to a [`KVStore`] (which sums them and runs the optimizer where it keeps the weight) and
//! a pull of the new weight into every device. Everything is pushed at once and ordered only by
//! the engine's vars, so devices run concurrently, and a parameter's reduction starts as soon as
//! its gradients exist, overlapping the rest of backward; the first layers' pulls carry the
//! highest priority, as the next forward pass needs them first. By default the store
//! is a `device` store on the first device; any store may be given (a `local` one, or one shared
//! with other processes).
//!
//! The summed gradient equals the whole batch's gradient (losses give per-sample gradients and
//! the update rescales by the whole batch), so training matches one device on the whole batch
//! up to the order of float additions.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use storage::Context;

use crate::error::{invalid, shape_error, Result};
use crate::executor::{BindOptions, Executor, MemoryReport};
use crate::kvstore::{KVStore, Optimizer, Sgd};
use crate::ops::GradReq;
use crate::{NDArray, Runtime, Symbol};

/// A parameter: its arrays on every device (its store key is its name).
struct Param {
    name: String,
    weights: Vec<NDArray>,
    grads: Vec<NDArray>,
}

/// Trains one symbol data-parallel over several devices.
pub struct DataParallel {
    rt: Arc<Runtime>,
    contexts: Vec<Context>,
    execs: Vec<Executor>,
    rows: Vec<Range<usize>>,
    data_names: Vec<String>,
    /// The whole batch's shape of each data array.
    data_shapes: HashMap<String, Vec<usize>>,
    /// Per device, its data arrays by name.
    inputs: Vec<HashMap<String, NDArray>>,
    /// In the symbol's argument order (about layer order).
    params: Vec<Param>,
    kv: KVStore,
}

/// Splits `n` rows into `parts` ranges whose sizes differ by at most one.
fn split_rows(n: usize, parts: usize) -> Vec<Range<usize>> {
    let (base, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|k| {
            let len = base + usize::from(k < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

impl DataParallel {
    /// Binds `symbol` once per context. `shapes` gives the whole batch's shapes; the arrays named
    /// in `data_names` (data and labels) are split by their first axis, every other argument is a
    /// parameter, trained with `sgd`, and replicated on every device. The gradients are summed
    /// and the weights updated on the first device (a `device` store).
    pub fn new(
        rt: &Arc<Runtime>,
        symbol: &Symbol,
        contexts: &[Context],
        shapes: &HashMap<String, Vec<usize>>,
        data_names: &[&str],
        sgd: Sgd,
    ) -> Result<DataParallel> {
        let kv = KVStore::create(rt, "device")?;
        Self::with_kvstore(
            rt,
            symbol,
            contexts,
            shapes,
            data_names,
            Optimizer::sgd(sgd),
            kv,
        )
    }

    /// [`DataParallel::new`] with the optimizer and the store given. The optimizer's gradients
    /// are rescaled by one over the global batch (this batch times the store's workers; this
    /// batch alone for a `dist_async` store, which applies each worker's gradient alone). The
    /// store's keys are the parameters' names, initialized here from the first device's weights
    /// (which a store on that device keeps as its own, so pulls into them cost nothing); the
    /// optimizer is installed in it.
    pub fn with_kvstore(
        rt: &Arc<Runtime>,
        symbol: &Symbol,
        contexts: &[Context],
        shapes: &HashMap<String, Vec<usize>>,
        data_names: &[&str],
        optimizer: Optimizer,
        kv: KVStore,
    ) -> Result<DataParallel> {
        if contexts.is_empty() {
            return Err(invalid("data parallel", "no contexts given"));
        }
        if let Some(c) = contexts
            .iter()
            .enumerate()
            .find_map(|(i, c)| contexts[..i].contains(c).then_some(c))
        {
            return Err(invalid(
                "data parallel",
                format!("context {c} is listed twice"),
            ));
        }
        let mut batch = None;
        for name in data_names {
            let shape = shapes.get(*name).ok_or_else(|| {
                invalid("data parallel", format!("no shape given for data '{name}'"))
            })?;
            let rows = *shape.first().ok_or_else(|| {
                invalid("data parallel", format!("data '{name}' has no batch axis"))
            })?;
            if batch.is_some_and(|b| b != rows) {
                return Err(invalid(
                    "data parallel",
                    format!(
                        "data '{name}' has {rows} rows, the others {}",
                        batch.unwrap_or(0)
                    ),
                ));
            }
            batch = Some(rows);
        }
        let batch = batch.ok_or_else(|| invalid("data parallel", "no data names given"))?;
        if batch < contexts.len() {
            return Err(invalid(
                "data parallel",
                format!(
                    "a batch of {batch} cannot be split over {} devices",
                    contexts.len()
                ),
            ));
        }
        let rows = split_rows(batch, contexts.len());
        let grad_req: HashMap<String, GradReq> = symbol
            .list_arguments()
            .into_iter()
            .filter(|a| !data_names.contains(&a.as_str()))
            .map(|a| (a, GradReq::Write))
            .collect();
        let opts = BindOptions {
            grad_req,
            ..BindOptions::default()
        };
        let mut execs = Vec::with_capacity(contexts.len());
        for (&ctx, r) in contexts.iter().zip(&rows) {
            let mut local = shapes.clone();
            for name in data_names {
                if let Some(s) = local.get_mut(*name) {
                    s[0] = r.len();
                }
            }
            let exec = Executor::bind_with_options(rt, ctx, symbol, &local, HashMap::new(), &opts)
                .map_err(|e| invalid("data parallel", format!("binding on {ctx}: {e}")))?;
            execs.push(exec);
        }
        let args: Vec<_> = execs.iter().map(Executor::arg_dict).collect();
        let inputs = args
            .iter()
            .map(|a| {
                a.iter()
                    .filter(|(k, _)| data_names.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .collect();
        let grads: Vec<_> = execs.iter().map(Executor::grad_dict).collect();
        let names: Vec<String> = symbol
            .list_arguments()
            .into_iter()
            .filter(|a| grads[0].contains_key(a))
            .collect();
        let mut params = Vec::with_capacity(names.len());
        for name in names {
            let weights: Vec<NDArray> = args.iter().map(|a| a[&name].clone()).collect();
            let g: Vec<NDArray> = grads.iter().map(|a| a[&name].clone()).collect();
            kv.init_shared(name.as_str(), &weights[0])?;
            params.push(Param {
                name,
                weights,
                grads: g,
            });
        }
        // A `dist_async` store applies each process's gradient alone: scaled by its own batch.
        let global_batch = match kv.is_async() {
            true => batch,
            false => batch * kv.num_workers(),
        };
        kv.set_optimizer(optimizer.rescale_grad(1.0 / global_batch as f64))?;
        Ok(DataParallel {
            rt: rt.clone(),
            contexts: contexts.to_vec(),
            execs,
            rows,
            data_names: data_names.iter().map(|s| s.to_string()).collect(),
            data_shapes: data_names
                .iter()
                .filter_map(|n| Some((n.to_string(), shapes.get(*n)?.clone())))
                .collect(),
            inputs,
            params,
            kv,
        })
    }

    /// The devices, in order.
    pub fn contexts(&self) -> &[Context] {
        &self.contexts
    }

    /// The executors, one per device.
    pub fn executors(&self) -> &[Executor] {
        &self.execs
    }

    /// The rows of a batch each device takes.
    pub fn rows(&self) -> &[Range<usize>] {
        &self.rows
    }

    /// Parameters (on the first device) by name.
    pub fn params(&self) -> HashMap<String, NDArray> {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.weights[0].clone()))
            .collect()
    }

    /// The store that sums the gradients and keeps the weights and optimizer state.
    pub fn kvstore(&self) -> &KVStore {
        &self.kv
    }

    /// Sets parameters on every device and in the store from arrays on any device (each must
    /// match the parameter's shape and dtype).
    pub fn set_params(&self, values: &HashMap<String, NDArray>) -> Result<()> {
        for (name, v) in values {
            if !self.params.iter().any(|p| &p.name == name) {
                return Err(invalid(
                    "set_params",
                    format!("'{name}' is not a parameter"),
                ));
            }
            // Into the store, then out to every device (a pull skips the array the store keeps).
            self.kv.assign(name.as_str(), v)?;
        }
        self.pull_params()
    }

    /// Pulls every parameter from the store into every device. With a `dist_async` store the
    /// ranks meet at a barrier first, so the weights pulled hold every rank's pushes and
    /// assignments so far (its steps' own pulls see only what rank 0 had applied then).
    pub fn pull_params(&self) -> Result<()> {
        if self.kv.is_async() {
            self.kv.barrier()?;
        }
        for p in &self.params {
            let weights: Vec<&NDArray> = p.weights.iter().collect();
            self.kv.pull(p.name.as_str(), &weights, 0)?;
        }
        Ok(())
    }

    /// Copies each device's rows of `batch` (arrays named as the data names, whole batch) in.
    fn load(&self, batch: &[(&str, &NDArray)]) -> Result<()> {
        // Everything is checked before anything is pushed, so a bad batch changes nothing.
        for (name, data) in batch {
            let Some(want) = self.data_shapes.get(*name) else {
                return Err(invalid(
                    "data parallel",
                    format!(
                        "'{name}' is not one of the data names {:?}",
                        self.data_names
                    ),
                ));
            };
            let elements: usize = want.iter().product();
            if data.shape().first() != want.first() || data.size() != elements {
                return Err(shape_error(
                    "data parallel",
                    format!("data '{name}'"),
                    data.shape(),
                    format!(
                        "the whole batch, shape {want:?} (or that many rows of as many elements)"
                    ),
                ));
            }
        }
        for (name, data) in batch {
            for (inputs, r) in self.inputs.iter().zip(&self.rows) {
                let dst = inputs.get(*name).ok_or_else(|| {
                    invalid(
                        "data parallel",
                        format!("the symbol has no argument '{name}'"),
                    )
                })?;
                let rows = data.slice(r.start, r.end)?;
                rows.reshape(dst.shape())?.copy_into(dst)?;
            }
        }
        Ok(())
    }

    /// One training step on a whole batch: forward and backward on every device, each
    /// parameter's gradients pushed to the store (summed, the update where it keeps the weight)
    /// and the new weight pulled into every device. Returns at once.
    pub fn step(&self, batch: &[(&str, &NDArray)]) -> Result<()> {
        // With `dist_async`, a step starts from the weights the last one pulled: without this
        // wait rank 0, whose updates need no message, would queue steps far ahead of the
        // others, and their pulls would wait behind its queue (measured: gradients hundreds of
        // updates stale).
        if self.kv.is_async() {
            for p in &self.params {
                p.weights[0].wait_to_read()?;
            }
        }
        self.load(batch)?;
        for exec in &self.execs {
            exec.forward(true)?;
            exec.backward()?;
        }
        // The last layers' gradients are ready first: push them first, at the normal priority, so
        // that each sum starts as soon as its gradients exist. The first layers' pulls run first
        // among those ready (priority 0, then -1, -2, ...): the next forward needs them first.
        // Every push before the first pull, so that a store across processes sends the small
        // gradients together (its bucket is sent at the first pull).
        for p in self.params.iter().rev() {
            let grads: Vec<&NDArray> = p.grads.iter().collect();
            self.kv.push(p.name.as_str(), &grads, 0)?;
        }
        for (i, p) in self.params.iter().enumerate() {
            let priority = -i32::try_from(i).unwrap_or(i32::MAX);
            let weights: Vec<&NDArray> = p.weights.iter().collect();
            self.kv.pull(p.name.as_str(), &weights, priority)?;
        }
        Ok(())
    }

    /// Sets the learning rate of the steps pushed from now on (a schedule's step); steps
    /// already pushed keep the rate they were pushed with.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        self.kv.set_learning_rate(lr)
    }

    /// Inference on a whole batch: every device's outputs (its rows), in device order.
    pub fn predict(&self, batch: &[(&str, &NDArray)]) -> Result<Vec<Vec<NDArray>>> {
        self.load(batch)?;
        for exec in &self.execs {
            exec.forward(false)?;
        }
        Ok(self.execs.iter().map(Executor::outputs).collect())
    }

    /// Memory of each device's internal entries.
    pub fn memory_by_device(&self) -> Vec<(Context, MemoryReport)> {
        self.execs
            .iter()
            .flat_map(Executor::memory_by_device)
            .collect()
    }

    /// Waits for everything pushed so far.
    pub fn wait(&self) -> Result<()> {
        self.rt.wait_all()
    }
}

#[cfg(test)]
mod tests {
    use super::split_rows;

    #[test]
    fn rows_split_evenly_with_the_remainder_first() {
        assert_eq!(split_rows(32, 2), vec![0..16, 16..32]);
        assert_eq!(split_rows(10, 4), vec![0..3, 3..6, 6..8, 8..10]);
        assert_eq!(split_rows(3, 3), vec![0..1, 1..2, 2..3]);
    }
}
