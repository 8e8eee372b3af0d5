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

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::ndfile;
use ndarray_ops::{BindOptions, DType, Executor, GradReq, NDArray, Runtime};
use storage::{Context, StorageConfig};

const CPU: Context = Context::cpu(0);
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mxnet");

fn runtime() -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .build(),
        StorageConfig::default(),
    )
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
    let as_f64 = |a: &NDArray| -> Vec<f64> {
        match a.dtype() {
            DType::F32 => a
                .to_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
            DType::F64 => a.to_vec::<f64>().unwrap(),
            DType::I32 => a
                .to_vec::<i32>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
            DType::I64 => a
                .to_vec::<i64>()
                .unwrap()
                .into_iter()
                .map(|x| x as f64)
                .collect(),
            DType::U8 => a
                .to_vec::<u8>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        }
    };
    let shapes: [(&[usize], DType); 4] = [
        (&[2, 3, 4], DType::F32),
        (&[5], DType::F64),
        (&[3, 2], DType::I32),
        (&[1, 4], DType::I64),
    ];
    for (arr, (shape, dtype)) in a.iter().zip(shapes) {
        assert_eq!((arr.shape(), arr.dtype()), (shape, dtype));
        assert_eq!(as_f64(arr), expect(arr.size(), dtype), "{dtype}");
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

/// Below this (times the dtype's epsilon over float32's), a result is rounding noise around
/// zero: a bias feeding a training-mode BatchNorm has a gradient of exactly zero in exact
/// arithmetic, about 1e-8 in either framework's float32.
const NOISE: f64 = 1e-6;

fn floats(a: &NDArray) -> Vec<f64> {
    match a.dtype() {
        DType::F64 => a.to_vec::<f64>().unwrap(),
        _ => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// The largest difference between `got` and `want`, relative to the largest magnitude in
/// `want`, and where it is. Where `want` is zero up to noise, `got` must be too (then 0, else
/// infinity).
fn relative_error(got: &NDArray, want: &NDArray) -> (f64, usize) {
    assert_eq!((got.shape(), got.dtype()), (want.shape(), want.dtype()));
    let noise = match want.dtype() {
        DType::F64 => NOISE * f64::EPSILON / f64::from(f32::EPSILON),
        _ => NOISE,
    };
    let (g, w) = (floats(got), floats(want));
    let largest = |v: &[f64]| v.iter().fold(0f64, |m, x| m.max(x.abs()));
    let scale = largest(&w);
    if scale < noise {
        return match largest(&g) < noise {
            true => (0.0, 0),
            false => (f64::INFINITY, 0),
        };
    }
    g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs() / scale)
        .enumerate()
        .fold(
            (0.0, 0),
            |(m, at), (k, e)| if e > m { (e, k) } else { (m, at) },
        )
}

/// Loads the checkpoint `PREFIX-EPOCH.params` MXNet wrote and runs what `PREFIX-expected.nd`
/// holds: the inference output and, where present, one training step (output, every
/// gradient for the saved head gradient, the auxiliary states after it). Each must agree with
/// MXNet's within `tol` of its largest magnitude. Returns how many arrays were compared and
/// the largest relative error seen.
fn check_checkpoint(prefix: &str, epoch: usize, tol: f64) -> (usize, f64) {
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
    // Every array is compared before judging, so that a failure shows the whole picture.
    let mut errors: Vec<(String, f64, usize)> = Vec::new();
    let mut compare = |what: &str, got: &NDArray, want: &NDArray| {
        let (e, at) = relative_error(got, want);
        errors.push((what.to_string(), e, at));
    };
    exec.forward(false).unwrap();
    compare(
        "inference output",
        &exec.outputs()[0],
        &expected["infer:output"],
    );
    if train {
        exec.forward(true).unwrap();
        compare(
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
                compare(key, &grads[name], &expected[key]);
            } else if let Some(name) = key.strip_prefix("aux_after:") {
                compare(key, &aux[name], &expected[key]);
            }
        }
    }

    let compared = errors.len();
    errors.sort_by(|a, b| b.1.total_cmp(&a.1));
    let worst = errors[0].1;
    if std::env::var_os("MXRS_SHOW_ALL").is_some() {
        for (what, e, at) in &errors {
            println!("{prefix}: {what}[{at}]: {e:e}");
        }
    }
    let bad: Vec<String> = errors
        .iter()
        .filter(|e| !(e.1 <= tol))
        .map(|(what, e, at)| format!("{what}[{at}]: {e:e}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{prefix}: {} of {compared} arrays differ from MXNet's by more than {tol:e} of their \
         largest magnitude: {}",
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
    let (compared, worst) = check_checkpoint(&format!("{DIR}/net"), 1, 1e-5);
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
    let (compared, worst) = check_checkpoint(&format!("{DIR}/net64"), 1, 1e-12);
    assert_eq!(compared, 2 + 10 + 4);
    println!("largest relative difference from MXNet: {worst:e}");
}

/// The real graphs of `graphs/`, batch 2, with the random weights MXNet saved
/// (`tools/mxnet_fixtures.py --models graphs DIR`; hundreds of MB, so not committed).
#[test]
#[ignore = "needs MXRS_MXNET_MODELS, a directory tools/mxnet_fixtures.py --models wrote"]
fn mxnets_model_checkpoints_compute_here_what_they_computed_in_mxnet() {
    let dir = std::env::var("MXRS_MXNET_MODELS")
        .expect("set MXRS_MXNET_MODELS to what tools/mxnet_fixtures.py --models wrote");
    for model in ["mlp", "resnet18_v1", "mobilenet1.0", "resnet50_v1", "vgg16"] {
        let (compared, worst) = check_checkpoint(&format!("{dir}/{model}"), 0, 1e-3);
        println!("{model}: {compared} arrays, largest relative difference from MXNet {worst:e}");
    }
}
