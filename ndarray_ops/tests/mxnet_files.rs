//! Files MXNet 1.9.1 wrote (`tests/data/mxnet`, made by `tools/mxnet_fixtures.py`): its NDArray
//! file of every element type loads with the values it saved and is written back byte for
//! byte; its checkpoint of a small convolutional net loads, and the net computes here what it
//! computed in MXNet — inference output, training output, every gradient, and the BatchNorm
//! running statistics after the step.
//!
//! Everything also runs in float64 (`net64`), where the two must agree to rounding.
//!
//! With `MXRS_WRITE_FOR_MXNET=DIR`, the tests also write files for the other direction
//! (`tools/mxnet_fixtures.py --check DIR` loads them in MXNet).

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::{floats, largest, relative_error};
use ndarray_ops::ndfile;
use ndarray_ops::{invoke, Attrs, BindOptions, DType, Executor, GradReq, NDArray, Runtime};
use storage::Context;

const CPU: Context = Context::cpu(0);
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mxnet");

fn runtime() -> Arc<Runtime> {
    common::threaded_runtime(0)
}

fn out_dir() -> Option<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(std::env::var_os("MXRS_WRITE_FOR_MXNET")?);
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

/// The fixture's values: element k is `k * 0.5 - 3`, cast as numpy casts (toward zero).
fn value(k: usize) -> f64 {
    k as f64 * 0.5 - 3.0
}

#[test]
fn mxnets_array_file_loads_with_its_values_and_is_written_back_byte_for_byte() {
    let rt = runtime();
    let path = format!("{DIR}/dtypes.nd");
    let loaded = ndfile::load(&path, &rt, CPU).unwrap();
    assert_eq!(loaded.names, vec!["f32", "f64", "i32", "i64", "u8"]);
    let a = &loaded.arrays;
    let expect = |n: usize, t: DType| -> Vec<f64> {
        (0..n)
            .map(|k| match t {
                DType::F32 => value(k) as f32 as f64,
                DType::F64 => value(k),
                _ => value(k).trunc(),
            })
            .collect()
    };
    let shapes: [(&[usize], DType); 4] = [
        (&[2, 3, 4], DType::F32),
        (&[5], DType::F64),
        (&[3, 2], DType::I32),
        (&[1, 4], DType::I64),
    ];
    for (arr, (shape, dtype)) in a.iter().zip(shapes) {
        assert_eq!((arr.shape(), arr.dtype()), (shape, dtype));
        assert_eq!(floats(arr), expect(arr.size(), dtype), "{dtype}");
    }
    assert_eq!((a[4].shape(), a[4].dtype()), (&[7usize][..], DType::U8));
    assert_eq!(
        a[4].to_vec::<u8>().unwrap(),
        (0..7).map(|k| k * 37).collect::<Vec<u8>>()
    );

    let mut ours = Vec::new();
    let names: Vec<&str> = loaded.names.iter().map(String::as_str).collect();
    ndfile::write_arrays(&mut ours, &a.iter().collect::<Vec<_>>(), &names).unwrap();
    assert_eq!(ours, std::fs::read(&path).unwrap());

    if let Some(dir) = out_dir() {
        let named: Vec<(&str, &NDArray)> = names.iter().copied().zip(a).collect();
        ndfile::save(dir.join("dtypes-from-rust.nd"), &named).unwrap();
    }
}

/// A gradient whose largest magnitude is below this many rounding units of the largest
/// gradient anywhere in the model is zero up to rounding: a bias feeding a training-mode
/// BatchNorm has a gradient of exactly zero in exact arithmetic, and whatever either framework
/// computes for it is the rounding of a sum that cancels. Ours must then be as small.
const NOISE_ULPS: f64 = 1e3;

/// Loads the checkpoint `PREFIX-EPOCH.params` MXNet wrote and runs what `PREFIX-expected.nd`
/// holds: the inference output and, where present, one training step (output, every
/// gradient for the saved head gradient, the auxiliary states after it). Each must agree with
/// MXNet's within `tol` of its largest magnitude (the training step's arrays within
/// `train_tol`; `None`: reported, not judged). Returns how many arrays were compared and the
/// largest relative error seen.
fn check_checkpoint(prefix: &str, epoch: usize, tol: f64, train_tol: Option<f64>) -> (usize, f64) {
    let rt = runtime();
    let ck = ndfile::load_checkpoint(prefix, epoch, &rt, CPU).unwrap();
    let expected = ndfile::load(format!("{prefix}-expected.nd"), &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    let data = &expected["data"];
    let train = expected.contains_key("train:output");
    let req: HashMap<String, GradReq> = match train {
        true => ck
            .symbol
            .list_arguments()
            .into_iter()
            .map(|n| (n, GradReq::Write))
            .collect(),
        false => HashMap::new(),
    };
    // The checkpoint's arrays are bound as they are, so they set the dtypes (float32 or
    // float64) as well as the values.
    let mut given = ck.arg_params.clone();
    given.extend(ck.aux_params.clone());
    given.insert("data".to_string(), data.clone());
    let opts = BindOptions {
        grad_req: req,
        ..BindOptions::default()
    };
    let exec =
        Executor::bind_with_options(&rt, CPU, &ck.symbol, &HashMap::new(), given, &opts).unwrap();
    // Every array is gathered before judging: gradients are judged against the largest
    // gradient, and a failure shows the whole picture.
    let mut pairs: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut gather = |what: &str, got: &NDArray, want: &NDArray| {
        assert_eq!(
            (got.shape(), got.dtype()),
            (want.shape(), want.dtype()),
            "{what}"
        );
        pairs.push((what.to_string(), floats(got), floats(want)));
    };
    exec.forward(false).unwrap();
    gather(
        "inference output",
        &exec.outputs()[0],
        &expected["infer:output"],
    );
    if train {
        exec.forward(true).unwrap();
        gather(
            "training output",
            &exec.outputs()[0],
            &expected["train:output"],
        );
        exec.backward_with(&[expected["head_grad"].clone()])
            .unwrap();
        let (grads, aux) = (exec.grad_dict(), exec.aux_dict());
        let mut keys: Vec<&String> = expected.keys().collect();
        keys.sort();
        for key in keys {
            if let Some(name) = key.strip_prefix("grad:") {
                gather(key, &grads[name], &expected[key]);
            } else if let Some(name) = key.strip_prefix("aux_after:") {
                gather(key, &aux[name], &expected[key]);
            }
        }
    }
    let epsilon = match data.dtype() {
        DType::F64 => f64::EPSILON,
        _ => f64::from(f32::EPSILON),
    };
    let is_grad = |what: &str| what.starts_with("grad:");
    let signal = pairs
        .iter()
        .filter(|p| is_grad(&p.0))
        .fold(0f64, |m, p| m.max(largest(&p.2)));
    let mut errors: Vec<(String, f64, usize)> = pairs
        .iter()
        .map(|(what, got, want)| {
            let noise = match is_grad(what) {
                true => NOISE_ULPS * epsilon * signal,
                false => 0.0,
            };
            let (e, at) = relative_error(got, want, noise);
            (what.clone(), e, at)
        })
        .collect();
    drop(pairs);
    let compared = errors.len();
    errors.sort_by(|a, b| b.1.total_cmp(&a.1));
    let worst = errors[0].1;
    if std::env::var_os("MXRS_SHOW_ALL").is_some() {
        for (what, e, at) in &errors {
            println!("{prefix}: {what}[{at}]: {e:e}");
        }
    }
    let judged = |what: &str| match what {
        "inference output" => Some(tol),
        _ => train_tol,
    };
    let bad: Vec<String> = errors
        .iter()
        .filter(|e| judged(&e.0).is_some_and(|tol| e.1.is_nan() || e.1 > tol))
        .map(|(what, e, at)| format!("{what}[{at}]: {e:e}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{prefix}: {} of {compared} arrays differ from MXNet's by more than {tol:e} \
         ({train_tol:?} in training) of their largest magnitude: {}",
        bad.len(),
        bad.join(", ")
    );

    if let Some(dir) = out_dir() {
        // The other direction: the executor's state after the step (running statistics
        // updated) as a checkpoint, and our inference output with it, for MXNet to check.
        let stem = prefix.rsplit('/').next().unwrap_or(prefix);
        let out = dir
            .join(format!("{stem}-from-rust"))
            .to_string_lossy()
            .into_owned();
        let learned = ck.symbol.list_arguments();
        let mut args = exec.arg_dict();
        args.retain(|n, _| n != "data" && learned.contains(n));
        ndfile::save_checkpoint(&out, 1, &ck.symbol, &args, &exec.aux_dict()).unwrap();
        exec.forward(false).unwrap();
        let output = exec.outputs()[0].clone();
        ndfile::save(
            dir.join(format!("{stem}-expected-from-rust.nd")),
            &[("data", data), ("output", &output)],
        )
        .unwrap();
    }
    (compared, worst)
}

#[test]
fn mxnets_checkpoint_computes_here_what_it_computed_in_mxnet() {
    let (compared, worst) = check_checkpoint(&format!("{DIR}/net"), 1, 1e-5, Some(1e-5));
    // Two outputs; gradients of data, conv0 weight+bias, bn0 gamma+beta, conv1 weight, bn1
    // gamma+beta, fc weight+bias; four running statistics.
    assert_eq!(compared, 2 + 10 + 4);
    println!("largest relative difference from MXNet: {worst:e}");
}

/// The same net in float64, where a difference in what is computed cannot hide in float32
/// rounding: everything agrees to 1e-12 (BatchNorm's running statistics only once `momentum`
/// blends at MXNet's float precision; at double precision they were 1e-7 apart).
#[test]
fn mxnets_float64_checkpoint_agrees_to_rounding() {
    let (compared, worst) = check_checkpoint(&format!("{DIR}/net64"), 1, 1e-12, Some(1e-12));
    assert_eq!(compared, 2 + 10 + 4);
    println!("largest relative difference from MXNet: {worst:e}");
}

/// A transformer encoder block as MXNet builds one (LayerNorm, position-wise FullyConnected,
/// split into two heads through Reshape's special codes and transpose, batch_dot attention with
/// a scaled softmax, residual adds, an ELU feed-forward), from MXNet's checkpoint, in float64:
/// the outputs and every gradient agree to 1e-12.
#[test]
fn mxnets_transformer_block_agrees_in_float64() {
    let (compared, worst) = check_checkpoint(&format!("{DIR}/block64"), 1, 1e-12, Some(1e-12));
    // Two outputs; gradients of data, two LayerNorms' gamma and beta, and the weight and bias
    // of qkv, proj, ff1 and ff2.
    assert_eq!(compared, 2 + 13);
    println!("largest relative difference from MXNet: {worst:e}");
}

/// The real graphs of `graphs/`, batch 2, with the random weights MXNet saved
/// (`tools/mxnet_fixtures.py --models graphs DIR float64`; gigabytes, so not committed).
/// Float64 must agree to 1e-10 throughout. In float32 only the inference output is judged (to
/// 1e-4): a training step of these nets at batch 2 is ill-conditioned (BatchNorm over few
/// values divides by small deviations), and MXNet with and without MKLDNN give gradients up to
/// 17% apart (of a gradient's largest magnitude) on ResNet-50, 12% on MobileNet.
#[test]
#[ignore = "needs MXRS_MXNET_MODELS, a directory tools/mxnet_fixtures.py --models wrote"]
fn mxnets_model_checkpoints_compute_here_what_they_computed_in_mxnet() {
    let dir = std::env::var("MXRS_MXNET_MODELS")
        .expect("set MXRS_MXNET_MODELS to what tools/mxnet_fixtures.py --models wrote");
    for model in ["mlp", "resnet18_v1", "mobilenet1.0", "resnet50_v1", "vgg16"] {
        let params = format!("{dir}/{model}-0000.params");
        let first = ndfile::load(&params, &runtime(), CPU).unwrap().arrays[0].dtype();
        let (tol, train_tol) = match first {
            DType::F64 => (1e-10, Some(1e-10)),
            _ => (1e-4, None),
        };
        let (compared, worst) = check_checkpoint(&format!("{dir}/{model}"), 0, tol, train_tol);
        println!("{model}: {compared} arrays, largest relative difference from MXNet {worst:e}");
    }
}

/// One step of each optimizer update, in float64, against MXNet's (`optim64.nd`): with and
/// without gradient clipping, every output and state to rounding.
#[test]
fn optimizer_updates_match_mxnets_in_float64() {
    let rt = runtime();
    let f = ndfile::load(format!("{DIR}/optim64.nd"), &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    let copy = |name: &str| f[name].copy_to(CPU).unwrap();
    let mut worst = 0f64;
    let mut check = |key: String, got: &NDArray| {
        let (e, at) = relative_error(&floats(got), &floats(&f[&key]), 0.0);
        assert!(
            e <= 1e-15,
            "{key}[{at}]: {e:e} of its largest magnitude from MXNet's"
        );
        worst = worst.max(e);
    };
    for (tag, clip) in [("noclip", -1.0), ("clip", 0.05)] {
        let attrs = Attrs::new()
            .with("lr", 0.1)
            .with("wd", 1e-4)
            .with("rescale_grad", 1.0 / 32.0)
            .with("clip_gradient", clip);
        let (w, g) = (copy("weight"), &f["grad"]);
        invoke("sgd_update", &[&w, g], &attrs, Some(&[&w])).unwrap();
        check(format!("sgd_{tag}:weight"), &w);

        let (w, m) = (copy("weight"), copy("mom"));
        let mom = attrs.clone().with("momentum", 0.9);
        invoke("sgd_mom_update", &[&w, g, &m], &mom, Some(&[&w, &m])).unwrap();
        check(format!("sgd_mom_{tag}:weight"), &w);
        check(format!("sgd_mom_{tag}:mom"), &m);

        let (w, mean, var) = (copy("weight"), copy("mean"), copy("var"));
        let adam = attrs
            .clone()
            .with("beta1", 0.9)
            .with("beta2", 0.999)
            .with("epsilon", 1e-8);
        invoke(
            "adam_update",
            &[&w, g, &mean, &var],
            &adam,
            Some(&[&w, &mean, &var]),
        )
        .unwrap();
        check(format!("adam_{tag}:weight"), &w);
        check(format!("adam_{tag}:mean"), &mean);
        check(format!("adam_{tag}:var"), &var);
    }
    println!("largest relative difference from MXNet: {worst:e}");
}
