//! Trains a classifier on the digits data set with symbolic bind-and-run on the threaded
//! per-device engine: build the graph, infer shapes, derive the backward graph, bind, and run
//! forward/backward with in-place SGD updates.
//!
//! `cargo run --release --example train_digits -- [--json] [--epochs N] [--contexts cpu(0),cpu(1)] [--kvstore device|local] [--save PREFIX]`
//!
//! `--save PREFIX` writes each trained model as an MXNet checkpoint (`PREFIX-mlp-symbol.json`,
//! `PREFIX-mlp-0020.params`, the same for `cnn` and `lstm`), reloads it into fresh executors and reports
//! their held-out accuracy beside the trained ones' (`reloaded_test_accuracy`).
//!
//! With several contexts, each batch is split across them (data parallel: one executor per
//! device, gradients pushed to a KVStore that sums them and updates the weights, which each
//! device pulls back; `--kvstore` picks the store); per-device memory is printed.
//!
//! Three models: an MLP (64-128-64-10), a small CNN (3x3 convolution with 16 filters, ReLU,
//! 2x2 max pooling, a 64-unit layer, 10 classes) and an LSTM reading each image as a sequence of
//! its 8 rows (MXNet's fused `RNN` op, 32 units; its last step feeds a 10-way layer).

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;
#[path = "common/digits.rs"]
mod digits;

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use ndarray_ops::kvstore::{KVStore, Optimizer, Staleness};
use ndarray_ops::{invoke_on, ndfile, Attrs, DataParallel, NDArray, Runtime, Sgd, Symbol};
use storage::Context;

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// 64-128-64-10, ReLU.
    Mlp,
    /// conv 3x3x16 (pad 1) - ReLU - max pool 2x2 - FC 64 - ReLU - FC 10.
    Cnn,
    /// The 8 rows as 8 steps of an LSTM with 32 units; the last step's state - FC 10.
    Lstm,
}

/// The LSTM's units.
const LSTM_UNITS: usize = 32;

/// Rows of 8 pixels, one per step: `(N, 8, 8)` is turned time-first, run through one LSTM
/// layer from a zero state, and the last step classified. Built from ops that have GPU
/// kernels too (the steps split apart, zeros, a concatenation), so it trains on any context.
fn lstm() -> ndarray_ops::Result<Symbol> {
    let data = Symbol::var("data");
    let steps = Symbol::op(
        "transpose",
        "time_first",
        &[&data],
        Attrs::new().with("axes", "(1, 0, 2)"),
    )?;
    let split = |name: &str, x: &Symbol, squeeze: bool| {
        Symbol::op(
            "SliceChannel",
            name,
            &[x],
            Attrs::new()
                .with("axis", 0)
                .with("num_outputs", 8)
                .with("squeeze_axis", squeeze),
        )
    };
    // A zero state (1, N, 32) made from the data, so that it follows the batch each device
    // gets: the first step's 8 pixels, zeroed, four times side by side.
    let first = split("rows", &steps, false)?.get_output(0)?;
    let zeros = Symbol::op("zeros_like", "zero_step", &[&first], Attrs::new())?;
    let copies = LSTM_UNITS / 8;
    let state = Symbol::op(
        "Concat",
        "zero_state",
        &vec![&zeros; copies],
        Attrs::new().with("dim", 2).with("num_args", copies),
    )?;
    let rnn = Symbol::op(
        "RNN",
        "lstm",
        &[&steps, &Symbol::var("lstm_parameters"), &state, &state],
        Attrs::new()
            .with("mode", "lstm")
            .with("state_size", LSTM_UNITS)
            .with("num_layers", 1),
    )?;
    let last = split("outputs", &rnn, true)?.get_output(7)?;
    classifier(last, &[])
}

/// Fully connected layers `fc0`, `fc1`, ... on `h`: one of each `hidden` size followed by a
/// ReLU, then one per class, under a softmax loss.
fn classifier(mut h: Symbol, hidden: &[usize]) -> ndarray_ops::Result<Symbol> {
    let sizes = hidden.iter().copied().chain([digits::CLASSES]);
    for (i, n) in sizes.enumerate() {
        let (w, b) = (
            Symbol::var(&format!("fc{i}_weight")),
            Symbol::var(&format!("fc{i}_bias")),
        );
        h = Symbol::op(
            "FullyConnected",
            &format!("fc{i}"),
            &[&h, &w, &b],
            Attrs::new().with("num_hidden", n),
        )?;
        if i < hidden.len() {
            h = Symbol::op(
                "Activation",
                &format!("fc{i}_relu"),
                &[&h],
                Attrs::new().with("act_type", "relu"),
            )?;
        }
    }
    Symbol::op(
        "SoftmaxOutput",
        "softmax",
        &[&h, &Symbol::var("softmax_label")],
        Attrs::new(),
    )
}

fn cnn() -> ndarray_ops::Result<Symbol> {
    let data = Symbol::var("data");
    let conv = Symbol::op(
        "Convolution",
        "conv0",
        &[
            &data,
            &Symbol::var("conv0_weight"),
            &Symbol::var("conv0_bias"),
        ],
        Attrs::new()
            .with("kernel", "(3, 3)")
            .with("pad", "(1, 1)")
            .with("num_filter", 16),
    )?;
    let relu = Symbol::op(
        "Activation",
        "conv0_relu",
        &[&conv],
        Attrs::new().with("act_type", "relu"),
    )?;
    let pool = Symbol::op(
        "Pooling",
        "pool0",
        &[&relu],
        Attrs::new()
            .with("kernel", "(2, 2)")
            .with("stride", "(2, 2)")
            .with("pool_type", "max"),
    )?;
    let flat = Symbol::op("Flatten", "flat", &[&pool], Attrs::new())?;
    classifier(flat, &[64])
}

fn mlp() -> ndarray_ops::Result<Symbol> {
    classifier(Symbol::var("data"), &[128, 64])
}

/// What a training run measured.
pub struct Report {
    pub test_accuracy: f64,
    /// Mean cross-entropy over the training split at the end.
    pub train_loss: f64,
    pub seconds: f64,
    pub samples_per_second: f64,
    pub planned_bytes: u64,
    pub no_reuse_bytes: u64,
    /// Per device: context, planned and allocated bytes of its internal entries.
    pub devices: Vec<(Context, u64, u64)>,
    /// With a checkpoint prefix: the held-out accuracy of the model reloaded from it.
    pub reloaded_test_accuracy: Option<f64>,
    /// This process's rank and the number of processes (1 but with a `dist_*` store).
    pub rank: usize,
    pub workers: usize,
    /// With a `dist_async` store: how stale the applied gradients were.
    pub staleness: Option<Staleness>,
}

/// Accuracy and mean cross-entropy over whole global batches of a split (the last partial one
/// is left out), in inference mode, `batch` rows at a time (this process's share of a batch).
fn evaluate(
    dp: &DataParallel,
    data: &NDArray,
    x: &digits::Split,
    (batch, global): (usize, usize),
    sample: &[usize],
) -> ndarray_ops::Result<(f64, f64)> {
    let (mut hits, mut seen, mut loss) = (0usize, 0usize, 0f64);
    let shape: Vec<usize> = std::iter::once(batch)
        .chain(sample.iter().copied())
        .collect();
    let usable = x.n / global * global;
    for start in (0..usable).step_by(batch) {
        let chunk = data.slice(start, start + batch)?.reshape(&shape)?;
        let outputs = dp.predict(&[("data", &chunk)])?;
        for (out, rows) in outputs.iter().zip(dp.rows()) {
            let probs = out[0].to_vec::<f32>()?;
            let truth = &x.y[start + rows.start..start + rows.end];
            for (p, &y) in probs.chunks(digits::CLASSES).zip(truth) {
                let best = (0..p.len())
                    .max_by(|&a, &b| p[a].total_cmp(&p[b]))
                    .unwrap_or(0);
                hits += usize::from(best as f32 == y);
                loss -= f64::from(p[y as usize].max(1e-12)).ln();
            }
        }
        seen += batch;
    }
    let seen = seen.max(1) as f64;
    Ok((hits as f64 / seen, loss / seen))
}

/// Trains `model` for `epochs`, data-parallel over `contexts`, and evaluates it on the held-out
/// split.
pub fn train(
    model: Model,
    epochs: usize,
    contexts: &[Context],
    kvstore: &str,
    verbose: bool,
    checkpoint: Option<&str>,
) -> ndarray_ops::Result<Report> {
    let (train, test) = digits::load(42).map_err(|e| ndarray_ops::NdError::Invalid {
        op: "digits".into(),
        reason: e,
    })?;
    let rt = Runtime::from_env(|b| b)?;
    rt.seed(1)?;
    let host = Context::cpu(0);
    // The global batch: with a store across processes, each takes its share of every batch.
    let global = 32;
    let kv = KVStore::create(&rt, kvstore)?;
    let (rank, workers) = (kv.rank(), kv.num_workers());
    if global % workers != 0 {
        return Err(ndarray_ops::NdError::Invalid {
            op: "train_digits".into(),
            reason: format!("a batch of {global} cannot be split over {workers} processes"),
        });
    }
    let batch = global / workers;
    let (sym, sample): (Symbol, Vec<usize>) = match model {
        Model::Mlp => (mlp()?, vec![digits::FEATURES]),
        Model::Cnn => (cnn()?, vec![1, 8, 8]),
        Model::Lstm => (lstm()?, vec![8, 8]),
    };
    let data_shape: Vec<usize> = std::iter::once(batch)
        .chain(sample.iter().copied())
        .collect();
    let shapes = HashMap::from([
        ("data".to_string(), data_shape.clone()),
        ("softmax_label".to_string(), vec![batch]),
    ]);
    // `dist_async` applies each rank's share of a batch as an update of its own (scaled by
    // that share, as MXNet's Module scales it): the rate shrinks by the ranks' number so that a
    // sample moves the weights as far as under `dist_sync` (the linear scaling rule, per update).
    let lr = match kv.is_async() {
        true => 0.1 / workers as f64,
        false => 0.1,
    };
    let sgd = Sgd {
        lr,
        momentum: 0.9,
        wd: 1e-4,
    };
    let inputs = ["data", "softmax_label"];
    let trainer = |sym: &Symbol, kv: KVStore| {
        DataParallel::with_kvstore(
            &rt,
            sym,
            contexts,
            &shapes,
            &inputs,
            Optimizer::sgd(sgd),
            kv,
        )
    };
    let mut dp = trainer(&sym, kv)?;
    // Uniform initialization scaled by fan-in (Xavier-like), drawn on the host in name order;
    // the RNN's flat parameters within 1 / sqrt(units), as PyTorch and Gluon start an LSTM.
    let mut params: Vec<(String, NDArray)> = dp.params().into_iter().collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let mut init = HashMap::new();
    for (name, a) in &params {
        let fan_in: usize = if a.ndim() >= 2 {
            a.shape()[1..].iter().product()
        } else {
            1
        };
        let r = if name.ends_with("bias") {
            0.0
        } else if name.ends_with("_parameters") {
            1.0 / (LSTM_UNITS as f64).sqrt()
        } else {
            (3.0 / fan_in as f64).sqrt()
        };
        let shape = format!("{:?}", a.shape())
            .replace('[', "(")
            .replace(']', ")");
        let value = invoke_on(
            &rt,
            host,
            "_random_uniform",
            &[],
            &Attrs::new()
                .with("low", -r)
                .with("high", r.max(1e-12))
                .with("shape", shape),
            None,
        )?
        .remove(0);
        init.insert(name.clone(), value);
    }
    dp.set_params(&init)?;
    let xtr = rt.from_vec(train.x.clone(), &[train.n, digits::FEATURES], host)?;
    let ytr = rt.from_vec(train.y.clone(), &[train.n], host)?;
    let xte = rt.from_vec(test.x.clone(), &[test.n, digits::FEATURES], host)?;
    let t0 = Instant::now();
    let mut samples = 0usize;
    for epoch in 0..epochs {
        // A step schedule (MXNet's FactorScheduler): a tenth of the rate for the last quarter
        // settles the weights; without it the held-out accuracy of the LSTM, at the rate's
        // noise, spread over 94-97% across initial seeds.
        if epoch == epochs * 3 / 4 {
            dp.set_lr(sgd.lr / 10.0)?;
        }
        for start in (0..train.n).step_by(global) {
            if start + global > train.n {
                break;
            }
            let mine = start + rank * batch..start + (rank + 1) * batch;
            let x = xtr.slice(mine.start, mine.end)?.reshape(&data_shape)?;
            let y = ytr.slice(mine.start, mine.end)?;
            dp.step(&[("data", &x), ("softmax_label", &y)])?;
            samples += global;
        }
        if verbose && rank == 0 {
            dp.wait()?;
            let (_, train_loss) = evaluate(&dp, &xtr, &train, (batch, global), &sample)?;
            let (acc, _) = evaluate(&dp, &xte, &test, (batch, global), &sample)?;
            println!(
                "epoch {:>2}: train loss {train_loss:.4}, test accuracy {:.2}%",
                epoch + 1,
                acc * 100.0
            );
        }
    }
    dp.wait()?;
    // With `dist_async` each rank's last pull saw what rank 0 had applied then: every rank now
    // takes the final weights, which hold every rank's pushes.
    if dp.kvstore().is_async() {
        dp.pull_params()?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let (test_accuracy, _) = evaluate(&dp, &xte, &test, (batch, global), &sample)?;
    let (_, train_loss) = evaluate(&dp, &xtr, &train, (batch, global), &sample)?;
    // The checkpoint round trip: save, load into a new trainer, evaluate again.
    let reloaded_test_accuracy = match checkpoint {
        Some(prefix) => {
            // Every rank holds the same weights: rank 0 writes them, the others wait for the
            // file (the prefix must be on a file system every rank sees).
            if rank == 0 {
                let aux = dp.executors()[0].aux_dict();
                ndfile::save_checkpoint(prefix, epochs, &sym, &dp.params(), &aux)?;
            }
            dp.kvstore().barrier()?;
            let ck = ndfile::load_checkpoint(prefix, epochs, &rt, host)?;
            let fresh = trainer(&ck.symbol, KVStore::create(&rt, kvstore)?)?;
            fresh.set_params(&ck.arg_params)?;
            for exec in fresh.executors() {
                exec.copy_params_from(&HashMap::new(), &ck.aux_params, false)?;
            }
            Some(evaluate(&fresh, &xte, &test, (batch, global), &sample)?.0)
        }
        None => None,
    };
    let mem = dp.memory_by_device();
    Ok(Report {
        reloaded_test_accuracy,
        test_accuracy,
        train_loss,
        seconds,
        samples_per_second: samples as f64 / seconds,
        planned_bytes: mem.iter().map(|(_, m)| m.planned_bytes).sum(),
        no_reuse_bytes: mem.iter().map(|(_, m)| m.no_reuse_bytes).sum(),
        devices: mem
            .iter()
            .map(|(c, m)| (*c, m.planned_bytes, m.allocated_bytes))
            .collect(),
        rank,
        workers,
        staleness: dp.kvstore().staleness(),
    })
}

/// Trains three classifiers (an MLP, a small CNN and an LSTM) on the digits data set with
/// symbolic bind-and-run, and reports their accuracy, speed and memory.
#[derive(Parser)]
#[command(name = "train_digits", allow_negative_numbers = true)]
struct Args {
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Passes over the training set.
    #[arg(long, default_value_t = 20, value_parser = cli::positive)]
    epochs: usize,
    /// The devices each batch is split across (data parallel), such as cpu(0),cpu(1).
    #[arg(long, value_delimiter = ',', default_value = "cpu(0)")]
    contexts: Vec<Context>,
    /// Write each trained model as an MXNet checkpoint (PREFIX-mlp-symbol.json,
    /// PREFIX-mlp-0020.params, ...), reload it and report the reloaded model's accuracy.
    #[arg(long = "save", value_name = "PREFIX")]
    checkpoint: Option<String>,
    /// The store that sums the devices' gradients and updates the weights: `device` (on the
    /// first device), `local` (on the CPU), or `dist_sync` / `dist_device_sync` / `dist_async`
    /// across processes (built with `--features mpi`, launched with `mpiexec -n N`; each
    /// process takes its share of every batch of 32; `dist_async` applies each share's
    /// gradient on rank 0 as it arrives).
    #[arg(long, default_value = "device")]
    kvstore: String,
}

fn main() {
    let Args {
        json,
        epochs,
        contexts,
        checkpoint,
        kvstore,
    } = Args::parse();
    let mut report = serde_json::Map::new();
    // With a store across processes every rank trains the same weights; rank 0 reports.
    let mut rank = 0;
    for (model, key, label) in [
        (Model::Mlp, "mlp", "mlp 64-128-64-10"),
        (Model::Cnn, "cnn", "cnn conv16-pool-64-10"),
        (Model::Lstm, "lstm", "lstm 8 rows-32-10"),
    ] {
        if !json && rank == 0 {
            println!("== {label}");
        }
        let prefix = checkpoint.as_ref().map(|p| format!("{p}-{key}"));
        match train(model, epochs, &contexts, &kvstore, !json, prefix.as_deref()) {
            Ok(r) => {
                rank = r.rank;
                let devices: Vec<_> = r
                    .devices
                    .iter()
                    .map(|(c, planned, allocated)| serde_json::json!({"context": c.to_string(), "planned_bytes": planned, "allocated_bytes": allocated}))
                    .collect();
                let mut entry = serde_json::json!({"test_accuracy": r.test_accuracy, "train_loss": r.train_loss, "seconds": r.seconds, "samples_per_second": r.samples_per_second, "planned_bytes": r.planned_bytes, "no_reuse_bytes": r.no_reuse_bytes, "devices": devices, "workers": r.workers});
                if let Some(acc) = r.reloaded_test_accuracy {
                    entry["reloaded_test_accuracy"] = acc.into();
                }
                if let Some(s) = r.staleness {
                    entry["staleness_mean"] = s.mean().into();
                    entry["staleness_max"] = s.max.into();
                }
                report.insert(key.into(), entry);
                if !json && rank == 0 {
                    println!(
                        "{label}: train loss {:.4}, test accuracy {:.2}% in {:.2} s ({:.0} samples/s); internal entries {} bytes without reuse, {} planned",
                        r.train_loss,
                        r.test_accuracy * 100.0,
                        r.seconds,
                        r.samples_per_second,
                        r.no_reuse_bytes,
                        r.planned_bytes
                    );
                    for (c, planned, allocated) in &r.devices {
                        println!("  {c}: {planned} bytes planned, {allocated} allocated");
                    }
                    if let (Some(acc), Some(p)) = (r.reloaded_test_accuracy, &prefix) {
                        let (json_path, params_path) = ndfile::checkpoint_paths(p, epochs);
                        println!(
                            "  saved {json_path} and {params_path}; reloaded, test accuracy {:.2}%",
                            acc * 100.0
                        );
                    }
                }
            }
            Err(e) => {
                eprintln!("train_digits: {label}: {e}");
                std::process::exit(1);
            }
        }
    }
    if json && rank == 0 {
        println!("{}", serde_json::Value::Object(report));
    }
}
