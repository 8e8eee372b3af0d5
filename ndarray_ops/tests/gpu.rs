//! The CUDA back end on a real GPU (`cuda` feature): a small ResNet-like block and the
//! train_digits networks give the CPU's outputs and gradients on `gpu(0)`; data-parallel training
//! over a GPU and a CPU matches the CPU alone; copies round-trip; a GPU over its memory limit
//! fails its bind clearly. Every test skips, saying so, where no GPU can be used (the kernels
//! themselves are checked on every machine by the host emulator in `src/ops/gpu/tests.rs`).

#![cfg(feature = "cuda")]

use std::collections::HashMap;
use std::sync::Arc;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{invoke_on, Attrs, BindOptions, DType, Executor, NDArray, Runtime, Symbol};
use rand::rngs::StdRng;
use rand::SeedableRng;
use storage::{Context, StorageConfig};

mod common;

use common::{random, train_over};

fn gpu() -> Option<Context> {
    if storage::gpu_available() {
        Some(Context::gpu(0))
    } else {
        eprintln!("skipped: no usable GPU on this machine");
        None
    }
}

fn runtime(storage: StorageConfig) -> Arc<Runtime> {
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice).build(),
        storage,
    )
}

fn op(name: &str, node: &str, ins: &[&Symbol], attrs: Attrs) -> Symbol {
    Symbol::op(name, node, ins, attrs).unwrap()
}

/// Convolution, BatchNorm, ReLU, a residual add, max and global average pooling, a dense layer
/// and a softmax loss: every op ResNet uses.
fn resnet_block() -> Symbol {
    let data = Symbol::var("data");
    let conv = |name: &str, x: &Symbol, stride: usize| {
        let w = Symbol::var(&format!("{name}_weight"));
        op(
            "Convolution",
            name,
            &[x, &w],
            Attrs::new()
                .with("kernel", "(3, 3)")
                .with("pad", "(1, 1)")
                .with("stride", format!("({stride}, {stride})"))
                .with("num_filter", 8)
                .with("no_bias", true),
        )
    };
    let bn = |name: &str, x: &Symbol| {
        let vars: Vec<Symbol> = ["gamma", "beta", "moving_mean", "moving_var"]
            .iter()
            .map(|v| Symbol::var(&format!("{name}_{v}")))
            .collect();
        let ins: Vec<&Symbol> = std::iter::once(x).chain(&vars).collect();
        op(
            "BatchNorm",
            name,
            &ins,
            Attrs::new().with("fix_gamma", false),
        )
    };
    let relu = |name: &str, x: &Symbol| {
        op(
            "Activation",
            name,
            &[x],
            Attrs::new().with("act_type", "relu"),
        )
    };
    let stem = relu("relu0", &bn("bn0", &conv("conv0", &data, 1)));
    let pooled = op(
        "Pooling",
        "pool0",
        &[&stem],
        Attrs::new()
            .with("kernel", "(3, 3)")
            .with("stride", "(2, 2)")
            .with("pad", "(1, 1)")
            .with("pool_type", "max"),
    );
    let branch = bn(
        "bn2",
        &conv(
            "conv2",
            &relu("relu1", &bn("bn1", &conv("conv1", &pooled, 1))),
            1,
        ),
    );
    let sum = op("elemwise_add", "add", &[&branch, &pooled], Attrs::new());
    let gap = op(
        "Pooling",
        "gap",
        &[&relu("relu2", &sum)],
        Attrs::new()
            .with("global_pool", true)
            .with("pool_type", "avg")
            .with("kernel", "(1, 1)"),
    );
    let flat = op("Flatten", "flat", &[&gap], Attrs::new());
    let (w, b) = (Symbol::var("fc_weight"), Symbol::var("fc_bias"));
    let fc = op(
        "FullyConnected",
        "fc",
        &[&flat, &w, &b],
        Attrs::new().with("num_hidden", 10),
    );
    op(
        "SoftmaxOutput",
        "softmax",
        &[&fc, &Symbol::var("label")],
        Attrs::new(),
    )
}

/// Binds `sym` on `ctx`, sets seeded arguments (labels in 0..10, variances positive), runs a
/// training forward and backward; returns outputs and gradients by name.
fn forward_backward(
    rt: &Arc<Runtime>,
    ctx: Context,
    sym: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
) -> Vec<(String, Vec<f32>)> {
    forward_backward_from(rt, ctx, sym, shapes, false)
}

/// [`forward_backward`], the backward pass starting from seeded head gradients where `heads`
/// says so (a graph without a loss).
fn forward_backward_from(
    rt: &Arc<Runtime>,
    ctx: Context,
    sym: &Symbol,
    shapes: &HashMap<String, Vec<usize>>,
    heads: bool,
) -> Vec<(String, Vec<f32>)> {
    let opts = BindOptions {
        grad_req: common::write_grads(sym, &["data", "label"]),
        ..BindOptions::default()
    };
    let exec = Executor::bind_with_options(rt, ctx, sym, shapes, HashMap::new(), &opts).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut args: Vec<_> = exec.arg_dict().into_iter().chain(exec.aux_dict()).collect();
    args.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, a) in &args {
        let v = random(rt, a.shape(), &mut rng, Context::cpu(0));
        let v = if name == "label" {
            let l: Vec<f32> = (0..a.size()).map(|i| (i * 7 % 10) as f32).collect();
            rt.from_vec(l, a.shape(), Context::cpu(0)).unwrap()
        } else if name == "sequence_length" {
            // Lengths in 0..=12 (the RNN tests' data has 12 steps).
            let l: Vec<f32> = (0..a.size()).map(|i| (i * 5 % 13) as f32).collect();
            rt.from_vec(l, a.shape(), Context::cpu(0)).unwrap()
        } else if name.ends_with("moving_var") {
            rt.full(a.shape(), 1.0, ndarray_ops::DType::F32, Context::cpu(0))
                .unwrap()
        } else {
            v
        };
        v.copy_into(a).unwrap();
    }
    exec.forward(true).unwrap();
    if heads {
        let grads: Vec<NDArray> = exec
            .outputs()
            .iter()
            .map(|o| {
                let g = random(rt, o.shape(), &mut rng, Context::cpu(0));
                let on = rt.empty(o.shape(), DType::F32, ctx).unwrap();
                g.copy_into(&on).unwrap();
                on
            })
            .collect();
        exec.backward_with(&grads).unwrap();
    } else {
        exec.backward().unwrap();
    }
    let mut seen = vec![(
        "output".to_string(),
        exec.outputs()[0].to_vec::<f32>().unwrap(),
    )];
    let mut grads: Vec<_> = exec.grad_dict().into_iter().collect();
    grads.sort_by(|a, b| a.0.cmp(&b.0));
    seen.extend(
        grads
            .into_iter()
            .map(|(k, g)| (k, g.to_vec::<f32>().unwrap())),
    );
    seen
}

fn assert_close(what: &str, a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}");
    for ((name, x), (_, y)) in a.iter().zip(b) {
        for (i, (u, v)) in x.iter().zip(y).enumerate() {
            // An infinite `v` would make any tolerance infinite: those must agree exactly.
            let same = u == v || (u.is_nan() && v.is_nan());
            assert!(
                same || (v.is_finite() && (u - v).abs() <= tol * (1.0 + v.abs())),
                "{what}: {name}[{i}]: GPU {u}, CPU {v}"
            );
        }
    }
}

#[test]
fn a_resnet_block_on_the_gpu_gives_the_cpus_outputs_and_gradients() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let shapes = HashMap::from([
        ("data".to_string(), vec![4, 3, 12, 12]),
        ("label".to_string(), vec![4]),
    ]);
    let sym = resnet_block();
    let on_gpu = forward_backward(&rt, gpu, &sym, &shapes);
    let on_cpu = forward_backward(&rt, Context::cpu(0), &sym, &shapes);
    assert_close("resnet block", &on_gpu, &on_cpu, 1e-3);
}

/// MXNet's transformer encoder block (tests/data/mxnet/block64-symbol.json: LayerNorm, FC without
/// flatten, split, Reshape codes, transpose, batch_dot, softmax, ELU) in float32.
#[test]
fn a_transformer_block_on_the_gpu_gives_the_cpus_outputs_and_gradients() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/mxnet/block64-symbol.json"
    );
    let sym = Symbol::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let shapes = HashMap::from([("data".to_string(), vec![3, 6, 8])]);
    let on_gpu = forward_backward_from(&rt, gpu, &sym, &shapes, true);
    let on_cpu = forward_backward_from(&rt, Context::cpu(0), &sym, &shapes, true);
    // 13 arguments, data among them, which takes no gradient.
    assert_eq!(on_gpu.len(), 1 + 12, "the output and 12 gradients");
    assert_close("transformer block", &on_gpu, &on_cpu, 1e-3);
}

/// A two-layer bidirectional LSTM and a GRU on the GPU (MXNet's fused RNN op: cuBLAS GEMMs and
/// one kernel per step) against the CPU: the sequence output and the gradients of the data, the
/// parameters and the initial states, from seeded head gradients for every output.
#[test]
fn recurrent_layers_on_the_gpu_give_the_cpus_outputs_and_gradients() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    for (mode, cell) in [("lstm", true), ("gru", false)] {
        let mut ins = vec![
            Symbol::var("data"),
            Symbol::var("parameters"),
            Symbol::var("state"),
        ];
        if cell {
            ins.push(Symbol::var("state_cell"));
        }
        let refs: Vec<&Symbol> = ins.iter().collect();
        let attrs = Attrs::new()
            .with("mode", mode)
            .with("state_size", 16)
            .with("num_layers", 2)
            .with("bidirectional", true)
            .with("state_outputs", true);
        let sym = op("RNN", "rnn", &refs, attrs);
        let shapes = HashMap::from([("data".to_string(), vec![12, 4, 10])]);
        let on_gpu = forward_backward_from(&rt, gpu, &sym, &shapes, true);
        let on_cpu = forward_backward_from(&rt, Context::cpu(0), &sym, &shapes, true);
        assert_eq!(on_gpu.len(), if cell { 4 } else { 3 }, "{mode}");
        assert_close(mode, &on_gpu, &on_cpu, 1e-3);
    }
}

/// The fused RNN's per-sample sequence lengths on the GPU give the CPU's outputs and gradients;
/// with dropout between layers a bound node's backward pass runs there (it needs the masks its
/// forward node kept), replays under a seed and differs from the network without dropout.
#[test]
fn recurrent_layers_with_lengths_and_dropout_train_on_the_gpu() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let shapes = HashMap::from([("data".to_string(), vec![12, 4, 10])]);
    let vars = |names: &[&str]| names.iter().map(|n| Symbol::var(n)).collect::<Vec<_>>();
    let ins = vars(&["data", "parameters", "state", "sequence_length"]);
    let refs: Vec<&Symbol> = ins.iter().collect();
    let attrs = Attrs::new()
        .with("mode", "gru")
        .with("state_size", 16)
        .with("num_layers", 2)
        .with("bidirectional", true)
        .with("state_outputs", true)
        .with("use_sequence_length", true);
    let sym = op("RNN", "rnn", &refs, attrs);
    let on_gpu = forward_backward_from(&rt, gpu, &sym, &shapes, true);
    let on_cpu = forward_backward_from(&rt, Context::cpu(0), &sym, &shapes, true);
    assert_close("lengths", &on_gpu, &on_cpu, 1e-3);

    let ins = vars(&["data", "parameters", "state", "state_cell"]);
    let refs: Vec<&Symbol> = ins.iter().collect();
    let lstm = |p: f64| {
        let attrs = Attrs::new()
            .with("mode", "lstm")
            .with("state_size", 16)
            .with("num_layers", 3)
            .with("p", p);
        op("RNN", "rnn", &refs, attrs)
    };
    let run = |p: f64| {
        rt.seed(5).unwrap();
        forward_backward_from(&rt, gpu, &lstm(p), &shapes, true)
    };
    let (dropped, again, whole) = (run(0.5), run(0.5), run(0.0));
    assert_eq!(dropped, again, "the same seed draws the same masks");
    assert!(dropped.iter().all(|(_, v)| v.iter().all(|x| x.is_finite())));
    assert_ne!(dropped[0], whole[0], "the masks change the output");
}

/// Dropout in training on the GPU: the mask holds 0 or 1 / (1 - p) at about the rate p, the
/// output is the data times it, the gradient the output's gradient times it; a reseeded runtime
/// draws the same masks again, and the next call another.
#[test]
fn dropout_on_the_gpu_drops_at_the_rate_asked_and_replays_under_a_seed() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let n = 100_000;
    let x = random(&rt, &[n], &mut StdRng::seed_from_u64(4), Context::cpu(0));
    let on = rt.empty(&[n], DType::F32, gpu).unwrap();
    x.copy_into(&on).unwrap();
    let attrs = Attrs::new().with("p", 0.3).with("__is_train__", true);
    let draw = || {
        let outs = invoke_on(&rt, gpu, "Dropout", &[&on], &attrs, None).unwrap();
        let read = |a: &NDArray| a.to_vec::<f32>().unwrap();
        (read(&outs[0]), read(&outs[1]))
    };
    rt.seed(17).unwrap();
    let (y, mask) = draw();
    let second = draw().1;
    rt.seed(17).unwrap();
    assert_eq!(draw().1, mask, "the same seed replays the mask");
    assert_ne!(second, mask, "the next call draws another mask");
    let keep = (1.0 / (1.0 - f64::from(0.3f32))) as f32;
    let xs = x.to_vec::<f32>().unwrap();
    assert!(mask.iter().all(|&m| m == 0.0 || m == keep));
    assert!(y.iter().zip(&xs).zip(&mask).all(|((y, x), m)| *y == x * m));
    let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / n as f64;
    assert!((dropped - 0.3).abs() < 0.01, "dropped {dropped}");
}

#[test]
fn copies_round_trip_and_arrays_fill_on_the_gpu() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let mut rng = StdRng::seed_from_u64(1);
    let a = random(&rt, &[1000, 37], &mut rng, Context::cpu(0));
    let back = a.copy_to(gpu).unwrap().copy_to(Context::cpu(0)).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
    let z = rt.full(&[5, 3], 2.5, ndarray_ops::DType::F32, gpu).unwrap();
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![2.5; 15]);
    let sum = ndarray_ops::invoke("elemwise_add", &[&z, &z], &Attrs::new(), None).unwrap();
    assert_eq!(sum[0].to_vec::<f32>().unwrap(), vec![5.0; 15]);
    // What the GPU kernels do not take is refused at the call, clearly.
    let f64 = ndarray_ops::DType::F64;
    let fill = rt.full(&[5, 3], 2.5, f64, gpu).unwrap_err().to_string();
    assert!(fill.contains("float32 (the GPU kernels' type)"), "{fill}");
    let wide = rt.empty(&[5, 3], f64, gpu).unwrap();
    let err = ndarray_ops::invoke("elemwise_add", &[&wide, &wide], &Attrs::new(), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU kernels take float32 arrays, got float64"),
        "{err}"
    );
}

/// Three data-parallel steps of the MLP over `contexts` from seeded weights; the final weights.
#[test]
fn data_parallel_over_a_gpu_and_a_cpu_matches_the_cpu_alone() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let cpu = train_over(&rt, &[Context::cpu(0)]);
    assert_close("gpu(0) alone", &train_over(&rt, &[gpu]), &cpu, 1e-4);
    assert_close(
        "gpu(0) + cpu(0)",
        &train_over(&rt, &[gpu, Context::cpu(0)]),
        &cpu,
        1e-4,
    );
}

#[test]
fn a_gpu_over_its_memory_limit_fails_its_bind_clearly() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig {
        limits: HashMap::from([(gpu, 4096)]),
        ..StorageConfig::default()
    });
    let shapes = HashMap::from([
        ("data".to_string(), vec![64, 3, 12, 12]),
        ("label".to_string(), vec![64]),
    ]);
    let err = Executor::simple_bind(&rt, gpu, &resnet_block(), &shapes)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("gpu(0)") && err.contains("limit"), "{err}");
    let exec = Executor::simple_bind(&rt, Context::cpu(0), &resnet_block(), &shapes).unwrap();
    exec.forward(false).unwrap();
    rt.wait_all().unwrap();
}

/// GPU ops end once their work is queued on the device's stream (`gpu/cuda.rs`), so the order
/// of the work rests on every op of a device sharing that stream. A program that reads an array
/// and then overwrites it, chains on the result, frees temporaries for the pool to hand out
/// again, and copies to the host along the way gives the CPU's result on every engine,
/// including one whose four GPU workers launch at once; waiting for it waits for the device.
#[test]
fn gpu_ops_queued_without_waiting_keep_their_dependency_order() {
    let Some(gpu) = gpu() else { return };
    let add = |a: &NDArray, b: &NDArray| {
        ndarray_ops::invoke("elemwise_add", &[a, b], &Attrs::new(), None)
            .unwrap()
            .remove(0)
    };
    // Large enough that each kernel takes a while; every value stays exact in float32.
    let program = |rt: &Arc<Runtime>, ctx: Context| -> (Vec<f32>, Vec<Vec<f32>>) {
        let mut x = rt.full(&[1 << 22], 1.0, DType::F32, ctx).unwrap();
        let mut on_host = vec![];
        for round in 0..20 {
            let doubled = add(&x, &x);
            // Overwrites what `doubled` read: must wait for that read on the device.
            x.fill(-1.0).unwrap();
            x = add(&doubled, &doubled);
            drop(doubled);
            if round % 5 == 4 {
                let host = x
                    .slice(0, 1 << 10)
                    .unwrap()
                    .copy_to(Context::cpu(0))
                    .unwrap();
                on_host.push(host);
            }
        }
        x.wait_to_read().unwrap();
        let copies = on_host.iter().map(|h| h.to_vec::<f32>().unwrap()).collect();
        (x.to_vec::<f32>().unwrap(), copies)
    };
    let cpu_rt = runtime(StorageConfig::default());
    let expected = program(&cpu_rt, Context::cpu(0));
    assert_eq!(expected.0[0], 4f32.powi(20));
    let engines = [
        EngineBuilder::new(EngineKind::Naive),
        EngineBuilder::new(EngineKind::ThreadedPooled).pooled_workers(4),
        EngineBuilder::new(EngineKind::ThreadedPerDevice).gpu_workers(4),
    ];
    for builder in engines {
        let kind = builder.config().kind;
        let rt = Runtime::new(builder.build(), StorageConfig::default());
        let got = program(&rt, gpu);
        assert!(got.0 == expected.0, "{kind:?}: the last array differs");
        assert!(got.1 == expected.1, "{kind:?}: a copy to the host differs");
        rt.wait_all().unwrap();
    }
}

/// A convolution to check: data shape, window, filters, groups, bias, further attributes.
type ConvCase = (
    &'static [usize],
    (usize, usize),
    usize,
    usize,
    bool,
    &'static [(&'static str, &'static str)],
);

/// Every convolution shape ResNet and VGG use, and the rest of what the op takes (dilation,
/// groups, bias, rectangular windows and strides, a workspace of one byte, cuDNN's heuristics
/// without timing): cuDNN (where it
/// loads) and the im2col path (`cudnn_off`) both give the CPU's outputs and gradients.
/// `MXRS_REQUIRE_CUDNN=1` fails the test where cuDNN is not used.
#[test]
fn convolutions_by_cudnn_and_by_columns_give_the_cpus_results() {
    let Some(gpu) = gpu() else { return };
    match ndarray_ops::cudnn_version() {
        Some(v) => eprintln!("cuDNN {v}"),
        None if std::env::var("MXRS_REQUIRE_CUDNN").is_ok_and(|v| v == "1") => {
            panic!("MXRS_REQUIRE_CUDNN=1, but convolutions do not use cuDNN here")
        }
        None => eprintln!("no cuDNN: both runs take the im2col path"),
    }
    let rt = runtime(StorageConfig::default());
    let mut rng = StdRng::seed_from_u64(11);
    let cases: [ConvCase; 9] = [
        (&[2, 4, 9, 9], (3, 3), 6, 1, false, &[("pad", "(1, 1)")]),
        (
            &[2, 4, 9, 9],
            (3, 3),
            6,
            1,
            true,
            &[("pad", "(1, 1)"), ("stride", "(2, 2)")],
        ),
        (&[2, 4, 9, 9], (1, 1), 6, 1, false, &[]),
        (&[2, 4, 9, 9], (1, 1), 6, 1, false, &[("stride", "(2, 2)")]),
        (
            &[1, 3, 15, 15],
            (7, 7),
            5,
            1,
            false,
            &[("pad", "(3, 3)"), ("stride", "(2, 2)")],
        ),
        (
            &[2, 4, 9, 9],
            (3, 3),
            6,
            1,
            false,
            &[("pad", "(2, 2)"), ("dilate", "(2, 2)")],
        ),
        (&[2, 4, 9, 9], (3, 3), 6, 2, false, &[("pad", "(1, 1)")]),
        (
            &[3, 2, 5, 7],
            (3, 2),
            4,
            1,
            true,
            &[
                ("pad", "(1, 0)"),
                ("stride", "(2, 1)"),
                ("cudnn_tune", "off"),
            ],
        ),
        (
            &[2, 4, 9, 9],
            (3, 3),
            6,
            1,
            false,
            &[("pad", "(1, 1)"), ("workspace", "0.000001")],
        ),
    ];
    for (shape, (kh, kw), filters, groups, bias, extra) in cases {
        let mut attrs = Attrs::new()
            .with("kernel", format!("({kh}, {kw})"))
            .with("num_filter", filters)
            .with("num_group", groups)
            .with("no_bias", !bias);
        for (k, v) in extra {
            attrs = attrs.with(k, v);
        }
        let cpu = Context::cpu(0);
        let mut ins = vec![
            random(&rt, shape, &mut rng, cpu),
            random(&rt, &[filters, shape[1] / groups, kh, kw], &mut rng, cpu),
        ];
        if bias {
            ins.push(random(&rt, &[filters], &mut rng, cpu));
        }
        let run = |ctx: Context, attrs: &Attrs| -> Vec<Vec<f32>> {
            let on: Vec<NDArray> = ins.iter().map(|a| a.copy_to(ctx).unwrap()).collect();
            let refs: Vec<&NDArray> = on.iter().collect();
            let y = invoke_on(&rt, ctx, "Convolution", &refs, attrs, None).unwrap();
            let dy = random(&rt, y[0].shape(), &mut StdRng::seed_from_u64(5), ctx);
            let back = [&dy, refs[0], refs[1]];
            let grads = invoke_on(&rt, ctx, "_backward_Convolution", &back, attrs, None).unwrap();
            y.iter()
                .chain(&grads)
                .map(|a| a.to_vec::<f32>().unwrap())
                .collect()
        };
        let named = |v: Vec<Vec<f32>>| -> Vec<(String, Vec<f32>)> {
            v.into_iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        ["output", "data grad", "weight grad", "bias grad"][i].into(),
                        v,
                    )
                })
                .collect()
        };
        let on_cpu = named(run(Context::cpu(0), &attrs));
        let by_library = named(run(gpu, &attrs));
        let by_columns = named(run(gpu, &attrs.clone().with("cudnn_off", true)));
        assert_close(
            &format!("cuDNN, {shape:?} {attrs:?}"),
            &by_library,
            &on_cpu,
            1e-4,
        );
        assert_close(
            &format!("im2col, {shape:?} {attrs:?}"),
            &by_columns,
            &on_cpu,
            1e-4,
        );
    }
}

/// SoftmaxOutput with ignored rows and the "valid" normalization: the GPU's gradient is the
/// CPU's (the GPU kernel once gave ignored rows a gradient and refused "valid").
#[test]
fn softmax_output_ignores_rows_on_the_gpu_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let rt = runtime(StorageConfig::default());
    let fc = Symbol::op(
        "FullyConnected",
        "fc",
        &[
            &Symbol::var("data"),
            &Symbol::var("fc_weight"),
            &Symbol::var("fc_bias"),
        ],
        Attrs::new().with("num_hidden", 10),
    )
    .unwrap();
    // forward_backward's labels are i * 7 % 10: row 1 is labelled 7, and ignored.
    let sym = Symbol::op(
        "SoftmaxOutput",
        "softmax",
        &[&fc, &Symbol::var("label")],
        Attrs::new()
            .with("use_ignore", true)
            .with("ignore_label", 7.0)
            .with("normalization", "valid"),
    )
    .unwrap();
    let shapes = HashMap::from([
        ("data".to_string(), vec![4, 6]),
        ("label".to_string(), vec![4]),
    ]);
    let on_gpu = forward_backward(&rt, gpu, &sym, &shapes);
    let on_cpu = forward_backward(&rt, Context::cpu(0), &sym, &shapes);
    assert_close("softmax output with ignored rows", &on_gpu, &on_cpu, 1e-4);
}
