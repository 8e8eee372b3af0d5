//! MXNet's NDArray files and checkpoints: the bytes are MXNet's layout (checked against files
//! written out by hand from the format, not by our writer), every element type round-trips,
//! older layouts load, damaged files fail with an error and never a panic, and a checkpoint
//! of a real model reloads into a new executor that computes the same outputs bit for bit.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::uniform;

use ndarray_ops::ndfile::{self, Loaded};
use ndarray_ops::{DType, Executor, NDArray, Runtime, Symbol};
use proptest::prelude::*;
use storage::Context;

fn runtime() -> Arc<Runtime> {
    common::threaded_runtime(11)
}

const CPU: Context = Context::cpu(0);

/// Little-endian bytes, written out field by field as the format describes them.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn f32s(mut self, v: &[f32]) -> Self {
        for x in v {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
        self
    }
    fn text(mut self, s: &str) -> Self {
        self.0.extend_from_slice(&(s.len() as u64).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

/// `mx.nd.save(f, {"w": float32 [[0,1,2],[3,4,5]], "step": int64 [7]})` as MXNet 1.x lays it
/// out: list header, two version-2 dense arrays on cpu(0), two names.
fn two_arrays_v2() -> Vec<u8> {
    Bytes::default()
        .u64(0x112)
        .u64(0)
        .u64(2)
        // "w": magic, storage type 0, ndim 2, dims, cpu = 1, id 0, float32 = 0, data
        .u32(0xF993_FAC9)
        .i32(0)
        .i32(2)
        .i64(2)
        .i64(3)
        .i32(1)
        .i32(0)
        .i32(0)
        .f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        // "step": int64 = 6
        .u32(0xF993_FAC9)
        .i32(0)
        .i32(1)
        .i64(1)
        .i32(1)
        .i32(0)
        .i32(6)
        .i64(7)
        .u64(2)
        .text("w")
        .text("step")
        .0
}

fn read(bytes: &[u8], rt: &Arc<Runtime>) -> ndarray_ops::Result<Loaded> {
    ndfile::read_arrays(&mut &bytes[..], rt, CPU)
}

#[test]
fn writes_and_reads_mxnets_layout_byte_for_byte() {
    let rt = runtime();
    let loaded = read(&two_arrays_v2(), &rt).unwrap();
    assert_eq!(loaded.names, vec!["w", "step"]);
    let (w, step) = (&loaded.arrays[0], &loaded.arrays[1]);
    assert_eq!((w.shape(), w.dtype()), (&[2usize, 3][..], DType::F32));
    assert_eq!(
        w.to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    assert_eq!((step.shape(), step.dtype()), (&[1usize][..], DType::I64));
    assert_eq!(step.to_vec::<i64>().unwrap(), vec![7]);

    let mut out = Vec::new();
    ndfile::write_arrays(&mut out, &[w, step], &["w", "step"]).unwrap();
    assert_eq!(out, two_arrays_v2());
}

#[test]
fn every_element_type_and_list_files_round_trip_through_a_file() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("mxrs-ndfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arrays = [
        rt.from_vec(vec![1.5f32, -2.25, 3.0, 1e-30], &[2, 1, 2], CPU)
            .unwrap(),
        rt.from_vec(vec![std::f64::consts::PI, -0.0], &[2], CPU)
            .unwrap(),
        rt.from_vec(vec![i32::MIN, 0, i32::MAX], &[3], CPU).unwrap(),
        rt.from_vec(vec![i64::MIN, 42], &[1, 2], CPU).unwrap(),
        rt.from_vec(vec![0u8, 255, 7], &[3, 1, 1, 1], CPU).unwrap(),
        rt.zeros(&[0, 4], DType::F32, CPU).unwrap(),
    ];
    let refs: Vec<&NDArray> = arrays.iter().collect();
    let bits = |a: &NDArray| -> Vec<u64> {
        match a.dtype() {
            DType::F32 => a
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits().into())
                .collect(),
            DType::F64 => a
                .to_vec::<f64>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect(),
            DType::I32 => a
                .to_vec::<i32>()
                .unwrap()
                .iter()
                .map(|&x| x as u64)
                .collect(),
            DType::I64 => a
                .to_vec::<i64>()
                .unwrap()
                .iter()
                .map(|&x| x as u64)
                .collect(),
            DType::U8 => a
                .to_vec::<u8>()
                .unwrap()
                .iter()
                .map(|&x| x.into())
                .collect(),
        }
    };

    let list = dir.join("list.nd");
    ndfile::save_list(&list, &refs).unwrap();
    let back = ndfile::load(&list, &rt, CPU).unwrap();
    assert!(back.names.is_empty());
    assert_eq!(back.arrays.len(), arrays.len());
    for (a, b) in arrays.iter().zip(&back.arrays) {
        assert_eq!((a.shape(), a.dtype()), (b.shape(), b.dtype()));
        assert_eq!(bits(a), bits(b));
    }
    let err = back.into_named().unwrap_err().to_string();
    assert!(err.contains("without names"), "{err}");

    let named_path = dir.join("named.nd");
    let names = ["a", "b", "c", "d", "e", "f"];
    let named: Vec<(&str, &NDArray)> = names.iter().copied().zip(refs.iter().copied()).collect();
    ndfile::save(&named_path, &named).unwrap();
    let back = ndfile::load(&named_path, &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    for (n, a) in named {
        assert_eq!(bits(a), bits(&back[n]), "{n}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn older_layouts_load() {
    let rt = runtime();
    // Version 1: no storage type.
    let v1 = Bytes::default()
        .u64(0x112)
        .u64(0)
        .u64(1)
        .u32(0xF993_FAC8)
        .i32(2)
        .i64(1)
        .i64(2)
        .i32(1)
        .i32(0)
        .i32(0)
        .f32s(&[0.5, -0.5])
        .u64(0)
        .0;
    let a = read(&v1, &rt).unwrap().arrays.remove(0);
    assert_eq!(a.shape(), &[1, 2]);
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.5, -0.5]);
    // Before version 1: the first word is ndim, dims are u32; a GPU context loads onto the
    // caller's.
    let v0 = Bytes::default()
        .u64(0x112)
        .u64(0)
        .u64(1)
        .u32(3)
        .u32(1)
        .u32(1)
        .u32(3)
        .i32(2)
        .i32(1)
        .i32(0)
        .f32s(&[1.0, 2.0, 3.0])
        .u64(1)
        .text("old")
        .0;
    let loaded = read(&v0, &rt).unwrap();
    assert_eq!(loaded.names, vec!["old"]);
    assert_eq!(loaded.arrays[0].shape(), &[1, 1, 3]);
    assert_eq!(loaded.arrays[0].ctx(), CPU);
    assert_eq!(
        loaded.arrays[0].to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0]
    );
}

fn err(bytes: &[u8], rt: &Arc<Runtime>) -> String {
    match read(bytes, rt) {
        Ok(l) => panic!("loaded {} arrays from a bad file", l.arrays.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_files_are_reported_with_what_and_where() {
    let rt = runtime();
    let good = two_arrays_v2();
    // Every truncation fails cleanly, and says so.
    for len in 0..good.len() {
        let e = err(&good[..len], &rt);
        assert!(e.contains("ends inside"), "{len}: {e}");
    }
    let patched = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    let e = err(&patched(0, &7u64.to_le_bytes()), &rt);
    assert!(
        e.contains("at byte 8") && e.contains("not MXNet's NDArray list header"),
        "{e}"
    );
    // Array 0 starts at 24: magic, storage type at 28, ndim at 32, first dim at 36; its type
    // flag at 60.
    let e = err(&patched(28, &1i32.to_le_bytes()), &rt);
    assert!(e.contains("array 0") && e.contains("row_sparse"), "{e}");
    let e = err(&patched(32, &1000i32.to_le_bytes()), &rt);
    assert!(e.contains("array 0 claims 1000 dimensions"), "{e}");
    let e = err(&patched(36, &(-1i64).to_le_bytes()), &rt);
    assert!(e.contains("dimension 0 is -1"), "{e}");
    let e = err(&patched(36, &(1i64 << 40).to_le_bytes()), &rt);
    assert!(
        e.contains("array 0's float32 elements") && e.contains("ends inside"),
        "{e}"
    );
    let e = err(&patched(36, &(i64::MAX).to_le_bytes()), &rt);
    assert!(e.contains("too large"), "{e}");
    let e = err(&patched(60, &2i32.to_le_bytes()), &rt);
    assert!(e.contains("array 0") && e.contains("float16"), "{e}");
    // Names: a count that matches no array count, and bytes that are not UTF-8.
    let names_at = good.len() - (8 + 9 + 12);
    let e = err(&patched(names_at, &1u64.to_le_bytes()), &rt);
    assert!(e.contains("1 names for 2 arrays"), "{e}");
    let e = err(&patched(good.len() - 4, &[0xff]), &rt);
    assert!(e.contains("name 1 is not UTF-8"), "{e}");
    // Two arrays under one name.
    let mut dup = good[..names_at].to_vec();
    dup.extend(Bytes::default().u64(2).text("w").text("w").0);
    let e = read(&dup, &rt)
        .unwrap()
        .into_named()
        .unwrap_err()
        .to_string();
    assert!(e.contains("names two arrays \"w\""), "{e}");
    // A 0-dimensional array is refused at save (MXNet would read it back as an empty array).
    let scalar = rt.zeros(&[], DType::F32, CPU).unwrap();
    let e = ndfile::write_arrays(&mut Vec::new(), &[&scalar], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("0-dimensional"), "{e}");
    // A missing file names itself.
    let e = ndfile::load("/nonexistent/x.params", &rt, CPU)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot open /nonexistent/x.params"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Whatever a damaged file holds, loading it returns (an error or arrays) and never panics
    /// or hangs.
    #[test]
    fn damaged_files_never_panic(flips in prop::collection::vec((0usize..1000, any::<u8>()), 1..6)) {
        let rt = runtime();
        let mut b = two_arrays_v2();
        for (at, v) in flips {
            let at = at % b.len();
            b[at] = v;
        }
        let _ = read(&b, &rt);
    }
}

/// The resnet18 graph with shapes for a small input.
fn resnet18() -> (Symbol, HashMap<String, Vec<usize>>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../graphs/resnet18_v1-symbol.json"
    );
    let sym = Symbol::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    (
        sym,
        HashMap::from([("data".to_string(), vec![2, 3, 32, 32])]),
    )
}

#[test]
fn a_checkpoint_reloads_into_a_new_executor_with_the_same_outputs() {
    let rt = runtime();
    let (sym, shapes) = resnet18();
    let exec = Executor::simple_bind(&rt, CPU, &sym, &shapes).unwrap();
    let mut args: HashMap<String, NDArray> = HashMap::new();
    for (name, a) in exec.arg_dict() {
        if name != "data" {
            args.insert(name, uniform(&rt, a.shape(), -0.2, 0.2));
        }
    }
    // Running statistics unlike the bind's defaults, so that aux states must really be restored.
    let aux: HashMap<String, NDArray> = exec
        .aux_dict()
        .into_iter()
        .map(|(name, a)| (name, uniform(&rt, a.shape(), 0.5, 1.5)))
        .collect();
    exec.copy_params_from(&args, &aux, false).unwrap();
    let data = uniform(&rt, &shapes["data"], -1.0, 1.0);
    data.copy_into(&exec.arg_dict()["data"]).unwrap();
    exec.forward(false).unwrap();
    let want = exec.outputs()[0].to_vec::<f32>().unwrap();

    let dir = std::env::temp_dir().join(format!("mxrs-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("resnet18").to_string_lossy().into_owned();
    ndfile::save_checkpoint(&prefix, 3, &sym, &args, &aux).unwrap();
    let (json_path, params_path) = ndfile::checkpoint_paths(&prefix, 3);
    assert!(
        params_path.ends_with("resnet18-0003.params")
            && json_path.ends_with("resnet18-symbol.json")
    );

    let ck = ndfile::load_checkpoint(&prefix, 3, &rt, CPU).unwrap();
    assert_eq!(ck.symbol.to_json(), sym.to_json());
    assert_eq!(ck.arg_params.len(), args.len());
    assert_eq!(ck.aux_params.len(), aux.len());
    let fresh = Executor::simple_bind(&rt, CPU, &ck.symbol, &shapes).unwrap();
    fresh
        .copy_params_from(&ck.arg_params, &ck.aux_params, false)
        .unwrap();
    data.copy_into(&fresh.arg_dict()["data"]).unwrap();
    fresh.forward(false).unwrap();
    let got = fresh.outputs()[0].to_vec::<f32>().unwrap();
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn copy_params_from_checks_everything_before_copying_anything() {
    let rt = runtime();
    let (sym, shapes) = resnet18();
    let exec = Executor::simple_bind(&rt, CPU, &sym, &shapes).unwrap();
    let name = "resnetv10_conv0_weight";
    let before = exec.arg_dict()[name].to_vec::<f32>().unwrap();
    let shape = exec.arg_dict()[name].shape().to_vec();
    let good = uniform(&rt, &shape, 1.0, 2.0);

    // One good value beside one of the wrong shape: an error naming the bad one, nothing copied.
    let bad_name = "resnetv10_dense0_bias";
    let args = HashMap::from([
        (name.to_string(), good.clone()),
        (
            bad_name.to_string(),
            rt.zeros(&[999], DType::F32, CPU).unwrap(),
        ),
    ]);
    let e = exec
        .copy_params_from(&args, &HashMap::new(), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(bad_name) && e.contains("[999]") && e.contains("[1000]"),
        "{e}"
    );
    assert_eq!(exec.arg_dict()[name].to_vec::<f32>().unwrap(), before);

    // A dtype mismatch is reported too.
    let args = HashMap::from([(name.to_string(), rt.zeros(&shape, DType::F64, CPU).unwrap())]);
    let e = exec
        .copy_params_from(&args, &HashMap::new(), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("float64"), "{e}");

    // A name the symbol lacks: an error, unless extras are allowed; an aux state given as an
    // argument is not found among the arguments.
    let extra = HashMap::from([
        (name.to_string(), good.clone()),
        ("fc_extra_weight".to_string(), good.clone()),
    ]);
    let e = exec
        .copy_params_from(&extra, &HashMap::new(), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("argument \"fc_extra_weight\" is not one of the symbol's ('data', ")
            && e.contains("more)"),
        "{e}"
    );
    let aux_as_arg = HashMap::from([(
        "resnetv10_batchnorm0_running_mean".to_string(),
        rt.zeros(&[64], DType::F32, CPU).unwrap(),
    )]);
    assert!(exec
        .copy_params_from(&aux_as_arg, &HashMap::new(), false)
        .is_err());
    exec.copy_params_from(&extra, &HashMap::new(), true)
        .unwrap();
    assert_eq!(
        exec.arg_dict()[name].to_vec::<f32>().unwrap(),
        good.to_vec::<f32>().unwrap()
    );
}

/// Saving over a good file never destroys it: when an array's producing op failed, or the
/// target cannot take the bytes, the error names the file and the previous file still loads
/// with its values, with no temporary file left beside it.
#[test]
fn a_failed_save_leaves_the_previous_file_whole() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("mxrs-ndfile-atomic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("weights.params");
    let good = rt.from_vec(vec![1.0f32, 2.0, 3.0], &[3], CPU).unwrap();
    ndfile::save(&path, &[("w", &good)]).unwrap();

    // An array whose producing op fails (a failure is reported once: one array per save),
    // saved with a good one first over the good file.
    let broken = || {
        let a = rt.zeros(&[1000], DType::F32, CPU).unwrap();
        let fail = engine::Op::sync("sensor", |_| Err("sensor unplugged".into()));
        rt.engine().push(fail.write(a.var())).unwrap();
        a
    };
    let err = ndfile::save(&path, &[("w", &good), ("broken", &broken())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("sensor unplugged"), "{err}");
    let err = ndfile::save_params(
        &path,
        &HashMap::from([("w".to_string(), broken())]),
        &HashMap::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("sensor unplugged"), "{err}");
    let loaded = ndfile::load(&path, &rt, CPU).unwrap().into_named().unwrap();
    assert_eq!(loaded["w"].to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("weights.params")]);

    // A target that cannot take the bytes: the error names it.
    if std::path::Path::new("/dev/full").exists() {
        let err = ndfile::save("/dev/full", &[("w", &good)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("/dev/full"), "{err}");
    }
    // A directory that does not exist: the error names the file asked for.
    let nowhere = dir.join("no-such-dir").join("w.params");
    let err = ndfile::save(&nowhere, &[("w", &good)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no-such-dir"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A save through a symbolic link replaces the file the link points to and keeps the link; a
/// file replaced keeps its permissions.
#[cfg(unix)]
#[test]
fn a_save_follows_links_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("mxrs-ndfile-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("real.params");
    let link = dir.join("link.params");
    let a = rt.from_vec(vec![1.0f32, 2.0], &[2], CPU).unwrap();
    ndfile::save(&real, &[("w", &a)]).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("real.params", &link).unwrap();

    let b = rt.from_vec(vec![5.0f32, 6.0, 7.0], &[3], CPU).unwrap();
    ndfile::save(&link, &[("w", &b)]).unwrap();
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(
        meta.file_type().is_symlink(),
        "the link was replaced by a file"
    );
    let loaded = ndfile::load(&real, &rt, CPU).unwrap().into_named().unwrap();
    assert_eq!(loaded["w"].to_vec::<f32>().unwrap(), vec![5.0, 6.0, 7.0]);
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the saved file's permissions changed");
    // A dangling link: the file it names is made.
    let dangling = dir.join("dangling.params");
    std::os::unix::fs::symlink("made.params", &dangling).unwrap();
    ndfile::save(&dangling, &[("w", &a)]).unwrap();
    assert!(std::fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(dir.join("made.params").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An array past the memory limit is refused from its header, naming the file and the array,
/// before its bytes are read; a smaller one in the same runtime then loads.
#[test]
fn an_array_past_the_memory_limit_is_refused_from_its_header() {
    let dir = std::env::temp_dir().join(format!("mxrs-ndfile-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.params");
    {
        let rt = runtime();
        let big = rt.zeros(&[4 << 20], DType::F32, CPU).unwrap(); // 16 MiB
        let small = rt.from_vec(vec![1.0f32, 2.0], &[2], CPU).unwrap();
        ndfile::save(&path, &[("small", &small), ("big", &big)]).unwrap();
    }
    let storage = storage::StorageConfig {
        kind: storage::PoolKind::Unpooled,
        default_limit: Some(4 << 20),
        ..storage::StorageConfig::default()
    };
    let rt = Runtime::new(
        engine::EngineBuilder::new(engine::EngineKind::ThreadedPerDevice).build(),
        storage,
    );
    let err = ndfile::load(&path, &rt, CPU).unwrap_err().to_string();
    assert!(
        err.contains("big.params") && err.contains("array 1") && err.contains("16777216 bytes"),
        "{err}"
    );
    rt.wait_all().unwrap();
    assert_eq!(
        rt.storage(CPU).stats().in_use,
        0,
        "the small array was given back"
    );
    assert!(
        rt.storage(CPU).stats().peak_in_use < 1 << 20,
        "the big array was allocated"
    );
    let small = rt.from_vec(vec![3.0f32; 4], &[4], CPU).unwrap();
    assert_eq!(small.to_vec::<f32>().unwrap(), vec![3.0; 4]);
    std::fs::remove_dir_all(&dir).unwrap();
}
