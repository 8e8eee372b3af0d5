//! Files MXNet 1.9.1 wrote (`tests/data/mxnet`, made by `tools/mxnet_fixtures.py`): its NDArray
//! file of every element type loads with the values it saved and is written back byte for
//! byte; its checkpoint of a small convolutional net loads, and the net computes here what it
//! computed in MXNet — inference output, training output, every gradient, and the BatchNorm
//! running statistics after the step.
//!
//! With `MXRS_WRITE_FOR_MXNET=DIR`, the tests also write files for the other direction
//! (`tools/mxnet_fixtures.py --check DIR` loads them in MXNet).

use std::collections::HashMap;
use std::sync::Arc;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::ndfile;
use ndarray_ops::{DType, Executor, GradReq, NDArray, Runtime};
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

/// `got` equals `want` within float32 rounding of a different summation order.
fn assert_close(what: &str, got: &NDArray, want: &NDArray) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-3);
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * scale + 1e-5 * b.abs(),
            "{what}[{k}]: ours {a}, MXNet's {b} (largest magnitude {scale})"
        );
    }
}

#[test]
fn mxnets_checkpoint_computes_here_what_it_computed_in_mxnet() {
    let rt = runtime();
    let ck = ndfile::load_checkpoint(&format!("{DIR}/net"), 1, &rt, CPU).unwrap();
    let expected = ndfile::load(format!("{DIR}/net-expected.nd"), &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    let data = &expected["data"];
    let shapes = HashMap::from([("data".to_string(), data.shape().to_vec())]);
    let req: HashMap<String, GradReq> = ck
        .symbol
        .list_arguments()
        .into_iter()
        .map(|n| (n, GradReq::Write))
        .collect();
    let exec = Executor::simple_bind_grad(&rt, CPU, &ck.symbol, &shapes, &req).unwrap();
    assert_eq!(ck.aux_params.len(), 4, "two BatchNorms, mean and var each");
    exec.copy_params_from(&ck.arg_params, &ck.aux_params, false)
        .unwrap();
    data.copy_into(&exec.arg_dict()["data"]).unwrap();

    exec.forward(false).unwrap();
    assert_close(
        "inference output",
        &exec.outputs()[0],
        &expected["infer:prob"],
    );
    exec.forward(true).unwrap();
    assert_close(
        "training output",
        &exec.outputs()[0],
        &expected["train:prob"],
    );
    exec.backward_with(&[expected["head_grad"].clone()])
        .unwrap();
    let grads = exec.grad_dict();
    let mut checked = 0;
    for (key, want) in &expected {
        if let Some(name) = key.strip_prefix("grad:") {
            assert_close(key, &grads[name], want);
            checked += 1;
        } else if let Some(name) = key.strip_prefix("aux_after:") {
            assert_close(key, &exec.aux_dict()[name], want);
            checked += 1;
        }
    }
    // data, conv0 weight+bias, bn0 gamma+beta, conv1 weight, bn1 gamma+beta, fc weight+bias;
    // four running statistics.
    assert_eq!(checked, 10 + 4);

    if let Some(dir) = out_dir() {
        // The other direction: the executor's state after the step (running statistics
        // updated) as a checkpoint, and our inference output with it, for MXNet to check.
        let prefix = dir.join("net-from-rust").to_string_lossy().into_owned();
        let learned = ck.symbol.list_arguments();
        let mut args = exec.arg_dict();
        args.retain(|n, _| n != "data" && learned.contains(n));
        ndfile::save_checkpoint(&prefix, 1, &ck.symbol, &args, &exec.aux_dict()).unwrap();
        exec.forward(false).unwrap();
        let prob = exec.outputs()[0].clone();
        ndfile::save(
            dir.join("net-expected-from-rust.nd"),
            &[("data", data), ("prob", &prob)],
        )
        .unwrap();
    }
}
