//! The GPU op layer and kernels, run on the host emulator, against the CPU kernels: same inputs,
//! same attributes, every output (hidden ones too) and every mutated input compared.

use std::collections::BTreeSet;
use std::sync::Arc;

use engine::EngineKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

use super::emulate::{kernels, HostStream};
use super::ops::{check as gpu_check, kernel_for, run};
use super::KERNEL_NAMES;
use crate::ops::{invoke, invoke_on, lookup, Attrs, IS_TRAIN};
use crate::resources::StateSlot;
use crate::{DType, NDArray, Runtime};

/// An input: its shape and values.
type Input = (Vec<usize>, Vec<f32>);

fn random(rng: &mut StdRng, shape: &[usize]) -> Input {
    let n = shape.iter().product();
    (
        shape.to_vec(),
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect(),
    )
}

fn labels(rng: &mut StdRng, n: usize, classes: usize) -> Input {
    (
        vec![n],
        (0..n).map(|_| rng.gen_range(0..classes) as f32).collect(),
    )
}

fn arrays(rt: &Arc<Runtime>, inputs: &[Input]) -> Vec<NDArray> {
    inputs
        .iter()
        .map(|(s, v)| rt.from_vec(v.clone(), s, Context::cpu(0)).expect("input"))
        .collect()
}

fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // Infinities and NaNs (division by zero, powers of negatives) must agree exactly (an
        // infinite `w` would make any tolerance infinite).
        let same = g == w || (g.is_nan() && w.is_nan());
        assert!(
            same || (w.is_finite() && (g - w).abs() <= tol * (1.0 + w.abs())),
            "{what}[{i}]: emulated GPU {g}, CPU {w}"
        );
    }
}

/// What the emulated GPU path of an op left: every output, every input after it ran, the
/// kernels it launched and how many times it read device memory back.
struct Emulated {
    outs: Vec<Vec<f32>>,
    ins: Vec<Vec<f32>>,
    launched: Vec<&'static str>,
    downloads: usize,
}

/// Runs `op` on the emulated GPU path, with the bound node's kept state where given. Outputs
/// start as NaN, so anything the path leaves unwritten shows.
fn emulate(
    op: &str,
    attrs: &Attrs,
    inputs: &[Input],
    state: Option<&mut StateSlot>,
) -> Result<Emulated, String> {
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let ins = arrays(&rt, inputs);
    let outs: Vec<NDArray> = cpu_shapes(op, attrs, inputs)
        .iter()
        .map(|s| {
            let a = rt.empty(s, DType::F32, Context::cpu(0)).expect("output");
            a.fill(f64::NAN).expect("fill");
            a
        })
        .collect();
    rt.wait_all().expect("inputs ready");
    let def = lookup(op).expect("registered");
    let kernel = kernel_for(def).unwrap_or_else(|| panic!("{op} has no GPU kernel"));
    let stream = HostStream::new(lib);
    run(
        def.name,
        kernel,
        def.alias_safe,
        attrs,
        &mut ins.iter().map(NDArray::tensor).collect::<Vec<_>>(),
        &outs.iter().map(NDArray::tensor).collect::<Vec<_>>(),
        &stream,
        state,
    )?;
    let read = |v: &[NDArray]| v.iter().map(|a| a.to_vec::<f32>().expect("read")).collect();
    Ok(Emulated {
        outs: read(&outs),
        ins: read(&ins),
        launched: stream.launched.into_inner(),
        downloads: stream.downloads.get(),
    })
}

/// Runs `op` on the CPU kernel and on the emulated GPU path; compares everything it writes.
/// Returns the kernels the GPU path launched.
fn check(op: &str, attrs: &Attrs, inputs: &[Input], tol: f32) -> Vec<&'static str> {
    let rt = Runtime::with_engine(EngineKind::Naive);
    let cpu_in = arrays(&rt, inputs);
    let refs: Vec<&NDArray> = cpu_in.iter().collect();
    let cpu_out = invoke_on(&rt, Context::cpu(0), op, &refs, attrs, None)
        .unwrap_or_else(|e| panic!("{op} on CPU: {e}"));
    let gpu = emulate(op, attrs, inputs, None)
        .unwrap_or_else(|e| panic!("{op} on the emulated GPU: {e}"));
    for (k, (g, c)) in gpu.outs.iter().zip(&cpu_out).enumerate() {
        let what = format!("{op} {attrs:?} output {k}");
        close(&what, g, &c.to_vec::<f32>().expect("read"), tol);
    }
    for (k, (g, c)) in gpu.ins.iter().zip(&cpu_in).enumerate() {
        let what = format!("{op} {attrs:?} input {k} (after the op)");
        close(&what, g, &c.to_vec::<f32>().expect("read"), tol);
    }
    gpu.launched
}

/// Runs `op` on the CPU (the forward pass whose outputs a gradient case reads).
fn cpu_outputs(op: &str, attrs: &Attrs, ins: &[Input]) -> Vec<Input> {
    let rt = Runtime::with_engine(EngineKind::Naive);
    let arrays = arrays(&rt, ins);
    let refs: Vec<&NDArray> = arrays.iter().collect();
    invoke(op, &refs, attrs, None)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
        .iter()
        .map(|o| (o.shape().to_vec(), o.to_vec::<f32>().expect("read")))
        .collect()
}

#[test]
fn broadcasts_the_kernel_cannot_walk_are_refused_clearly() {
    // Six dims that alternate which side broadcasts cannot merge into the kernel's four.
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let rng = &mut StdRng::seed_from_u64(3);
    let ins = arrays(
        &rt,
        &[
            random(rng, &[2, 1, 2, 1, 2, 1]),
            random(rng, &[1, 2, 1, 2, 1, 2]),
        ],
    );
    let out = rt
        .empty(&[2; 6], DType::F32, Context::cpu(0))
        .expect("output");
    rt.wait_all().expect("inputs ready");
    let def = lookup("broadcast_add").expect("registered");
    let err = run(
        def.name,
        kernel_for(def).expect("a GPU kernel"),
        def.alias_safe,
        &Attrs::new(),
        &mut ins.iter().map(NDArray::tensor).collect::<Vec<_>>(),
        &[out.tensor()],
        &HostStream::new(lib),
        None,
    )
    .unwrap_err();
    assert!(
        err.contains("broadcast_add")
            && err.contains("6 dims")
            && err.contains("[2, 1, 2, 1, 2, 1]"),
        "{err}"
    );
}

fn conv_attrs(
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    filters: usize,
    groups: usize,
    bias: bool,
) -> Attrs {
    Attrs::new()
        .with("kernel", format!("({k}, {k})"))
        .with("stride", format!("({s}, {s})"))
        .with("pad", format!("({p}, {p})"))
        .with("dilate", format!("({d}, {d})"))
        .with("num_filter", filters)
        .with("num_group", groups)
        .with("no_bias", !bias)
}

#[test]
fn every_gpu_op_matches_its_cpu_kernel() {
    let rng = &mut StdRng::seed_from_u64(7);
    let mut launched = BTreeSet::new();
    let mut check = |op: &str, attrs: Attrs, inputs: Vec<Input>| {
        launched.extend(check(op, &attrs, &inputs, 1e-4));
    };
    let x = random(rng, &[4, 6]);

    for act in ["relu", "sigmoid", "tanh", "softrelu", "softsign"] {
        check(
            "Activation",
            Attrs::new().with("act_type", act),
            vec![x.clone()],
        );
    }
    for act in ["relu", "sigmoid", "tanh", "softrelu", "softsign"] {
        let attrs = Attrs::new().with("act_type", act);
        check(
            "_backward_Activation",
            attrs,
            vec![x.clone(), random(rng, &[4, 6])],
        );
    }
    check("relu", Attrs::new(), vec![x.clone()]);
    for op in [
        "elemwise_add",
        "elemwise_sub",
        "elemwise_mul",
        "elemwise_div",
    ] {
        check(op, Attrs::new(), vec![x.clone(), random(rng, &[4, 6])]);
    }
    // Broadcasts the kernel merges to one, two, three and four dims, scalars on either side,
    // and every binary op (power on positive bases, as the CPU's gives NaN for the others).
    let cases: [(&[usize], &[usize]); 7] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[4, 6], &[1, 6]),
        (&[4, 6], &[4, 1]),
        (&[2, 3, 4, 5], &[1, 3, 1, 1]),
        (&[1], &[3, 2]),
        (&[2, 1, 4, 1, 1], &[1, 3, 1, 5, 1]),
        (&[3, 4], &[1]),
    ];
    for op in [
        "broadcast_add",
        "broadcast_sub",
        "broadcast_mul",
        "broadcast_div",
        "broadcast_maximum",
        "broadcast_minimum",
        "broadcast_power",
        "broadcast_equal",
        "broadcast_not_equal",
        "broadcast_greater",
        "broadcast_greater_equal",
        "broadcast_lesser",
        "broadcast_lesser_equal",
    ] {
        for (a, b) in cases {
            let (mut x, mut y) = (random(rng, a), random(rng, b));
            if op == "broadcast_power" {
                x.1.iter_mut().for_each(|v| *v = v.abs() + 0.1);
            }
            if op.contains("equal") {
                // Some equal pairs, so both answers occur.
                y.1.iter_mut().step_by(2).for_each(|v| *v = 0.5);
                x.1.iter_mut().step_by(3).for_each(|v| *v = 0.5);
            }
            check(op, Attrs::new(), vec![x, y]);
        }
    }
    for n in [1, 3, 7, 8, 15] {
        check(
            "add_n",
            Attrs::new(),
            (0..n).map(|_| random(rng, &[3, 5])).collect(),
        );
    }
    check("_copy", Attrs::new(), vec![x.clone()]);
    check("Flatten", Attrs::new(), vec![random(rng, &[2, 3, 4])]);
    check("_zeros", Attrs::new().with("shape", "(3, 4)"), vec![]);
    check("_ones", Attrs::new().with("shape", "(3, 4)"), vec![]);

    for bias in [true, false] {
        let attrs = Attrs::new().with("num_hidden", 5).with("no_bias", !bias);
        let mut ins = vec![random(rng, &[4, 2, 3]), random(rng, &[5, 6])];
        if bias {
            ins.push(random(rng, &[5]));
        }
        check("FullyConnected", attrs.clone(), ins.clone());
        check(
            "_backward_FullyConnected",
            attrs,
            vec![random(rng, &[4, 5]), ins[0].clone(), ins[1].clone()],
        );
    }

    // (kernel, stride, pad, dilate, filters, groups, bias) over images of 4 channels, 7x6: two
    // images in one chunk, and five with a `workspace` that holds one image or two and a half
    // (chunks of 2, 2 and 1), forward and backward. 1x1 windows of stride 1 skip im2col.
    for (k, s, p, d, f, g, bias) in [
        (3, 1, 1, 1, 6, 1, true),
        (3, 2, 1, 2, 4, 2, true),
        (1, 1, 0, 1, 3, 1, false),
        (1, 1, 0, 1, 4, 2, true),
        (1, 2, 0, 1, 3, 1, false),
        (2, 2, 0, 1, 8, 4, true),
    ] {
        let ho = (7 + 2 * p - d * (k - 1) - 1) / s + 1;
        let wo = (6 + 2 * p - d * (k - 1) - 1) / s + 1;
        let (rows, plane, direct) = (4 / g * k * k, ho * wo, k == 1 && s == 1);
        let forward_image = rows * plane * 4;
        let backward_image =
            (rows * plane + f / g * plane + if direct { 0 } else { rows * plane }) * 4;
        let mb = |images: f64, per_image: usize| images * per_image as f64 / (1 << 20) as f64;
        for (n, images) in [(2, None), (5, Some(1.0)), (5, Some(2.5))] {
            let mut attrs = conv_attrs(k, s, p, d, f, g, bias);
            let data = random(rng, &[n, 4, 7, 6]);
            let mut ins = vec![data.clone(), random(rng, &[f, 4 / g, k, k])];
            if bias {
                ins.push(random(rng, &[f]));
            }
            if let Some(images) = images {
                attrs = attrs.with("workspace", mb(images, forward_image));
            }
            check("Convolution", attrs.clone(), ins.clone());
            if let Some(images) = images {
                attrs = attrs.with("workspace", mb(images, backward_image));
            }
            check(
                "_backward_Convolution",
                attrs,
                vec![random(rng, &[n, f, ho, wo]), data, ins[1].clone()],
            );
        }
    }

    // Different settings per axis (a mix-up of height and width would show).
    let attrs = Attrs::new()
        .with("kernel", "(3, 2)")
        .with("stride", "(2, 1)")
        .with("pad", "(1, 0)")
        .with("dilate", "(1, 2)")
        .with("num_filter", 3);
    let data = random(rng, &[2, 2, 7, 6]);
    let weight = random(rng, &[3, 2, 3, 2]);
    let bias = random(rng, &[3]);
    check(
        "Convolution",
        attrs.clone(),
        vec![data.clone(), weight.clone(), bias],
    );
    check(
        "_backward_Convolution",
        attrs,
        vec![random(rng, &[2, 3, 4, 4]), data, weight],
    );

    deconv_cases(rng, &mut check);

    // Pooling: max / avg / sum, overlapping windows, padding, full rounding, global.
    let data = random(rng, &[2, 3, 7, 6]);
    let pools = [
        ("max", "(3, 3)", "(2, 2)", "(1, 1)", "valid", true, false),
        ("max", "(2, 2)", "(2, 2)", "(0, 0)", "full", true, false),
        ("avg", "(3, 3)", "(2, 2)", "(1, 1)", "valid", true, false),
        ("avg", "(3, 3)", "(2, 2)", "(1, 1)", "full", false, false),
        ("sum", "(2, 3)", "(1, 2)", "(0, 1)", "valid", true, false),
        ("avg", "(1, 1)", "(1, 1)", "(0, 0)", "valid", true, true),
        ("max", "(1, 1)", "(1, 1)", "(0, 0)", "valid", true, true),
    ];
    for (kind, k, s, p, conv, count_pad, global) in pools {
        let attrs = Attrs::new()
            .with("pool_type", kind)
            .with("kernel", k)
            .with("stride", s)
            .with("pad", p)
            .with("pooling_convention", conv)
            .with("count_include_pad", count_pad)
            .with("global_pool", global);
        let rt = Runtime::with_engine(EngineKind::Naive);
        let probe = rt
            .from_vec(data.1.clone(), &data.0, Context::cpu(0))
            .expect("data");
        let out = invoke("Pooling", &[&probe], &attrs, None).expect("pooling");
        check("Pooling", attrs.clone(), vec![data.clone()]);
        check(
            "_backward_Pooling",
            attrs,
            vec![random(rng, out[0].shape()), data.clone()],
        );
    }

    // BatchNorm: training and inference, gamma fixed or learned, 4-D and 2-D data; channels of
    // 2,400 and 36,000 elements, whose partial sums are folded once and twice, the first with
    // more partial sums per channel than elements per plane; data a thousand times its spread
    // away from zero, where one-pass sums in float would lose the variance.
    for (shape, train, fix_gamma, global, offset) in [
        (vec![600, 2, 2, 2], true, false, false, 0.0),
        (vec![2, 2, 150, 120], true, false, false, 0.0),
        (vec![3, 4, 5, 2], true, false, false, 0.0),
        (vec![3, 4, 5, 2], true, true, false, 0.0),
        (vec![3, 4, 5, 2], false, false, false, 0.0),
        (vec![6, 5], true, false, false, 0.0),
        (vec![3, 4, 5, 2], true, false, true, 0.0),
        (vec![8, 3, 10, 10], true, false, false, 1000.0),
    ] {
        let c = shape[1];
        let attrs = Attrs::new()
            .with(IS_TRAIN, train)
            .with("fix_gamma", fix_gamma)
            .with("use_global_stats", global)
            .with("eps", 1e-3)
            .with("momentum", 0.8);
        let mut data = random(rng, &shape);
        data.1.iter_mut().for_each(|v| *v += offset);
        let gamma = random(rng, &[c]);
        let mut var = random(rng, &[c]);
        var.1.iter_mut().for_each(|v| *v = v.abs() + 0.5);
        let ins = vec![
            data.clone(),
            gamma.clone(),
            random(rng, &[c]),
            random(rng, &[c]),
            var.clone(),
        ];
        check("BatchNorm", attrs.clone(), ins);
        let mut mean = random(rng, &[c]);
        mean.1.iter_mut().for_each(|v| *v += offset);
        // Gradients with a mean of their own there, so that sum(dy * x) - mean * sum(dy)
        // cancels as well.
        let mut dy = random(rng, &shape);
        dy.1.iter_mut().for_each(|v| *v += offset.signum());
        check(
            "_backward_BatchNorm",
            attrs,
            vec![dy, data, gamma, mean, var],
        );
    }

    // SoftmaxOutput: 2-D and 4-D (softmax over axis 1), and its gradient.
    let mut label = labels(rng, 5, 4);
    label.1[2] = -1.0;
    check(
        "SoftmaxOutput",
        Attrs::new(),
        vec![random(rng, &[5, 4]), label.clone()],
    );
    check(
        "SoftmaxOutput",
        Attrs::new(),
        vec![random(rng, &[3, 4, 2, 2]), labels(rng, 3, 4)],
    );
    check(
        "SoftmaxOutput",
        Attrs::new(),
        vec![random(rng, &[4, 3000]), labels(rng, 4, 3000)],
    );
    // Row 2's label is -1: ignored, as the label no class takes (the kernel passes it no
    // gradient and "valid" does not count it).
    for (norm, scale) in [("null", 1.0), ("batch", 0.5), ("valid", 2.0)] {
        let attrs = Attrs::new()
            .with("normalization", norm)
            .with("grad_scale", scale)
            .with("use_ignore", true)
            .with("ignore_label", -1.0);
        let rt = Runtime::with_engine(EngineKind::Naive);
        let logits = rt
            .from_vec(random(rng, &[5, 4]).1, &[5, 4], Context::cpu(0))
            .expect("x");
        let l = rt
            .from_vec(label.1.clone(), &[5], Context::cpu(0))
            .expect("label");
        let p = invoke("SoftmaxOutput", &[&logits, &l], &Attrs::new(), None).expect("softmax");
        let prob = (vec![5, 4], p[0].to_vec::<f32>().expect("prob"));
        check("_backward_SoftmaxOutput", attrs, vec![prob, label.clone()]);
    }

    let update = Attrs::new()
        .with("lr", 0.1)
        .with("wd", 0.01)
        .with("rescale_grad", 0.5)
        .with("clip_gradient", 0.3);
    check(
        "sgd_update",
        update.clone(),
        vec![x.clone(), random(rng, &[4, 6])],
    );
    check(
        "sgd_mom_update",
        update.with("momentum", 0.9),
        vec![x.clone(), random(rng, &[4, 6]), random(rng, &[4, 6])],
    );

    transformer_cases(rng, &mut check);
    reduction_cases(rng, &mut check);
    rnn_cases(rng, &mut check);
    unary_cases(rng, &mut check);
    take_cases(rng, &mut check);
    gather_cases(rng, &mut check);
    elementwise_cases(rng, &mut check);
    head_cases(rng, &mut check);
    layer_cases(rng, &mut check);
    index_cases(rng, &mut check);
    sort_cases(rng, &mut check);
    resample_cases(rng, &mut check);
    roi_cases(rng, &mut check);

    let unused: Vec<_> = KERNEL_NAMES
        .iter()
        .filter(|k| !launched.contains(*k))
        .collect();
    assert!(unused.is_empty(), "kernels no case launched: {unused:?}");
}

/// The ops of a transformer block and the other layers with GPU kernels beyond ResNet's:
/// softmax over any axis, the grouped normalizations, transpose, batch_dot, split / concat,
/// LeakyReLU (prelu too), and Dropout where it copies (its masks are checked in
/// `dropout_masks_hold_the_cpus_values_at_the_rate_asked`).
fn transformer_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let x = random(rng, &[3, 4, 5]);
    for (op, axis, temp) in [
        ("softmax", -1, 1.0),
        ("softmax", 1, 2.0),
        ("log_softmax", 0, 1.0),
        ("log_softmax", 2, 0.5),
    ] {
        let attrs = Attrs::new().with("axis", axis).with("temperature", temp);
        check(op, attrs.clone(), vec![x.clone()]);
        let grad = random(rng, &[3, 4, 5]);
        check(&format!("_backward_{op}"), attrs, vec![grad, x.clone()]);
    }
    // Few long lanes, which the kernels split into parts (a lane's figures joined from them).
    for (op, axis, temp, shape) in [
        ("softmax", -1, 1.0, vec![3, 2000]),
        ("log_softmax", 1, 0.5, vec![2, 700, 3]),
        ("softmax", 0, 2.0, vec![1500, 2]),
    ] {
        let attrs = Attrs::new().with("axis", axis).with("temperature", temp);
        let mut long = random(rng, &shape);
        long.1.iter_mut().for_each(|v| *v *= 8.0);
        // One logit far above the rest: exp overflows unless every part's maximum is its own.
        long.1[1554] = 3000.0;
        check(op, attrs.clone(), vec![long.clone()]);
        let out = cpu_outputs(op, &attrs, &[long]).remove(0);
        let grad = random(rng, &shape);
        check(&format!("_backward_{op}"), attrs, vec![grad, out]);
    }
    let long = random(rng, &[2, 1500]);
    check("SoftmaxActivation", Attrs::new(), vec![long.clone()]);
    let out = cpu_outputs("SoftmaxActivation", &Attrs::new(), &[long]).remove(0);
    let grad = random(rng, &[2, 1500]);
    check("_backward_SoftmaxActivation", Attrs::new(), vec![grad, out]);

    check("Dropout", Attrs::new().with("p", 0.5), vec![x.clone()]);
    let always = Attrs::new().with("p", 0.0).with("mode", "always");
    check("Dropout", always, vec![x.clone()]);

    // (op, attributes, data shape, gamma's length); the last four have few long groups, which
    // the GPU splits into parts (unequal ones: 100 elements in 3 parts).
    let norms = [
        ("LayerNorm", Attrs::new(), vec![2, 3, 8], 8),
        ("LayerNorm", Attrs::new().with("axis", 1), vec![2, 5, 3], 5),
        ("InstanceNorm", Attrs::new(), vec![2, 3, 4, 4], 3),
        (
            "GroupNorm",
            Attrs::new().with("num_groups", 2),
            vec![2, 4, 3, 3],
            2,
        ),
        ("LayerNorm", Attrs::new(), vec![3, 100], 100),
        (
            "LayerNorm",
            Attrs::new().with("axis", 1),
            vec![2, 300, 3],
            300,
        ),
        ("InstanceNorm", Attrs::new(), vec![1, 2, 16, 16], 2),
        (
            "GroupNorm",
            Attrs::new().with("num_groups", 2),
            vec![2, 4, 8, 8],
            2,
        ),
    ];
    for (op, attrs, shape, c) in norms {
        let stats = {
            let ins = [random(rng, &shape), random(rng, &[c]), random(rng, &[c])];
            let mut outs = cpu_outputs(op, &attrs, &ins).into_iter().skip(1);
            (outs.next().expect("mean"), outs.next().expect("deviation"))
        };
        let (data, gamma) = (random(rng, &shape), random(rng, &[c]));
        check(
            op,
            attrs.clone(),
            vec![data.clone(), gamma.clone(), random(rng, &[c])],
        );
        let backward = format!("_backward_{op}");
        check(
            &backward,
            attrs,
            vec![random(rng, &shape), data, gamma, stats.0, stats.1],
        );
    }
    // The long shape's instance and spatial groups (400 and 100 elements) are split.
    for (mode, shape) in ["instance", "channel", "spatial"]
        .into_iter()
        .flat_map(|m| [(m, vec![2, 3, 4]), (m, vec![2, 4, 100])])
    {
        let attrs = Attrs::new().with("mode", mode);
        let data = random(rng, &shape);
        check("L2Normalization", attrs.clone(), vec![data.clone()]);
        let outs = cpu_outputs("L2Normalization", &attrs, &[data]);
        let ins = vec![random(rng, &shape), outs[0].clone(), outs[1].clone()];
        check("_backward_L2Normalization", attrs, ins);
    }

    // Permutations the kernel merges to fewer dims, and one with a size-1 axis.
    for (shape, axes) in [
        (vec![2, 3, 4], Some("(0, 2, 1)")),
        (vec![2, 3, 4, 5], Some("(3, 1, 0, 2)")),
        (vec![2, 3, 4, 5], Some("(0, 2, 1, 3)")),
        (vec![2, 1, 3, 4], Some("(0, 2, 1, 3)")),
        (vec![3, 4, 5], None),
    ] {
        let attrs = axes.map_or(Attrs::new(), |a| Attrs::new().with("axes", a));
        check("transpose", attrs, vec![random(rng, &shape)]);
    }

    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let attrs = Attrs::new().with("transpose_a", ta).with("transpose_b", tb);
        let a = if ta { [2, 4, 3] } else { [2, 3, 4] };
        let b = if tb { [2, 5, 4] } else { [2, 4, 5] };
        check(
            "batch_dot",
            attrs.clone(),
            vec![random(rng, &a), random(rng, &b)],
        );
        check(
            "dot",
            attrs,
            vec![random(rng, &a[1..]), random(rng, &b[1..])],
        );
    }
    check(
        "dot",
        Attrs::new(),
        vec![random(rng, &[2, 3, 4]), random(rng, &[4, 5])],
    );

    let split = Attrs::new().with("num_outputs", 3).with("axis", -1);
    check("SliceChannel", split, vec![random(rng, &[2, 3, 6])]);
    let squeeze = Attrs::new()
        .with("num_outputs", 3)
        .with("axis", 1)
        .with("squeeze_axis", true);
    check("SliceChannel", squeeze, vec![random(rng, &[2, 3, 4])]);
    let pieces = vec![
        random(rng, &[2, 3, 4]),
        random(rng, &[2, 1, 4]),
        random(rng, &[2, 2, 4]),
    ];
    check("Concat", Attrs::new().with("dim", 1), pieces);
    let rows = vec![random(rng, &[1, 3]), random(rng, &[2, 3])];
    check("Concat", Attrs::new().with("dim", 0), rows);

    for act in ["leaky", "elu", "selu", "gelu"] {
        let attrs = Attrs::new().with("act_type", act).with("slope", 0.3);
        let data = random(rng, &[4, 6]);
        check("LeakyReLU", attrs.clone(), vec![data.clone()]);
        check(
            "_backward_LeakyReLU",
            attrs,
            vec![random(rng, &[4, 6]), data],
        );
    }
    // prelu's slopes per channel, one for all, per element; its gradient gives gamma's too
    // (sums over the larger data split and folded).
    let prelu = Attrs::new().with("act_type", "prelu");
    let (small, large) = (vec![2, 3, 4, 5], vec![2, 3, 40, 50]);
    for (gamma, shape) in [
        (vec![3], &small),
        (vec![1], &small),
        (small.clone(), &small),
        (vec![3], &large),
        (vec![1], &large),
    ] {
        let data = random(rng, shape);
        let gamma = random(rng, &gamma);
        check(
            "LeakyReLU",
            prelu.clone(),
            vec![data.clone(), gamma.clone()],
        );
        let g = random(rng, shape);
        check("_backward_LeakyReLU", prelu.clone(), vec![g, data, gamma]);
    }
}

/// sum and mean over axis sets the kernels sum in place (kept axes in one block) and ones they
/// permute first, their gradient, and a broadcast operand's gradient.
fn reduction_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    // (data shape, axis, exclude, the reduced gradient's shape)
    type Case<'a> = (&'a [usize], Option<&'a str>, bool, &'a [usize]);
    let cases: [Case; 7] = [
        (&[3, 4, 5], None, false, &[1]),
        (&[3, 4, 5], Some("1"), false, &[3, 5]),
        (&[3, 4, 5], Some("(0, 2)"), false, &[4]),
        (&[3, 4, 5], Some("-1"), false, &[3, 4]),
        (&[3, 4, 5], Some("1"), true, &[4]),
        (&[2, 1, 3, 4], Some("(0, 2)"), false, &[1, 4]),
        (&[2, 3, 4, 5], Some("(0, 2)"), false, &[3, 5]),
    ];
    for (shape, axis, exclude, reduced) in cases {
        for op in ["sum", "mean"] {
            let mut attrs = Attrs::new().with("exclude", exclude);
            if let Some(a) = axis {
                attrs = attrs.with("axis", a);
            }
            check(op, attrs.clone(), vec![random(rng, shape)]);
            let attrs = attrs.with("__reduce__", op);
            let ins = vec![random(rng, reduced), random(rng, shape)];
            check("_broadcast_backward", attrs, ins);
        }
    }
    for (shape, axis, exclude, _) in cases {
        for (op, ord) in [
            ("max", 0),
            ("min", 0),
            ("prod", 0),
            ("norm", 2),
            ("norm", 1),
        ] {
            let mut attrs = match ord {
                0 => Attrs::new().with("exclude", exclude),
                // norm has no exclude
                _ if exclude => continue,
                _ => Attrs::new().with("ord", ord),
            };
            if let Some(a) = axis {
                attrs = attrs.with("axis", a);
            }
            check(op, attrs.clone(), vec![random(rng, shape)]);
            check(op, attrs.with("keepdims", true), vec![random(rng, shape)]);
        }
    }
    // Ties: the first extremum wins.
    let tied = (vec![2, 4], vec![1.0, 3.0, 3.0, 0.0, -2.0, -2.0, 5.0, -2.0]);
    for op in ["argmax", "argmin"] {
        check(op, Attrs::new(), vec![tied.clone()]);
        check(op, Attrs::new().with("axis", 1), vec![tied.clone()]);
        let keep = Attrs::new().with("axis", 0).with("keepdims", true);
        check(op, keep, vec![tied.clone()]);
        check(
            op,
            Attrs::new().with("axis", -2),
            vec![random(rng, &[3, 4, 5])],
        );
    }
    // Few long lanes, split into parts: ties across parts, NaN (first in a lane, inside one,
    // a whole part's), zeros of both signs, a whole array's extremum and a permuted layout.
    let mut long = random(rng, &[3, 1000]);
    long.1[5] = 7.0;
    long.1[900] = 7.0;
    long.1[1000] = f32::NAN;
    long.1[1500] = 9.0;
    long.1[2000..2100].fill(0.0);
    long.1[2050] = -0.0;
    // Lane 2's part 7 of 31: every element NaN.
    (2007..3000).step_by(31).for_each(|k| long.1[k] = f32::NAN);
    for op in ["argmax", "argmin", "max", "min"] {
        check(op, Attrs::new().with("axis", 1), vec![long.clone()]);
        check(op, Attrs::new(), vec![long.clone()]);
    }
    // Equal zeros: the scan keeps the first. Lane 0's maximum is the -0 at 1 (part 1), though
    // part 0 finds a +0 later; lane 1's minimum the +0 at 1, though part 0 finds a -0.
    let mut zeros = (vec![2, 2000], vec![0.0f32; 4000]);
    zeros.1[0] = -1.0;
    zeros.1[1] = -0.0;
    zeros.1[2000..].fill(-0.0);
    zeros.1[2000] = 1.0;
    zeros.1[2001] = 0.0;
    for op in ["max", "min"] {
        let attrs = Attrs::new().with("axis", 1);
        check(op, attrs.clone(), vec![zeros.clone()]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let gpu = emulate(op, &attrs, &[zeros.clone()], None).expect("emulated");
        let cpu = cpu_outputs(op, &attrs, &[zeros.clone()]);
        assert_eq!(
            bits(&gpu.outs[0]),
            bits(&cpu[0].1),
            "{op}: the zeros' signs"
        );
    }
    // A lane of NaN alone: max and min find nothing (-inf, +inf), argmax and argmin answer 0.
    let mut nan_lane = random(rng, &[2, 1000]);
    nan_lane.1[1000..].fill(f32::NAN);
    for op in ["argmax", "argmin", "max", "min"] {
        check(op, Attrs::new().with("axis", 1), vec![nan_lane.clone()]);
    }
    let mut near_one = random(rng, &[2, 1200]);
    near_one.1.iter_mut().for_each(|v| *v = 1.0 + *v * 0.01);
    check("prod", Attrs::new().with("axis", 1), vec![near_one]);
    let permuted = Attrs::new().with("axis", "(0, 2)");
    check("max", permuted.clone(), vec![random(rng, &[30, 3, 40])]);
    check(
        "argmin",
        Attrs::new().with("axis", 0),
        vec![random(rng, &[900, 4])],
    );
    let like: [(&[usize], &[usize]); 4] = [
        (&[2, 3, 4], &[3, 1]),
        (&[4, 6], &[1, 6]),
        (&[4, 6], &[4, 1]),
        (&[2, 3], &[2, 3]),
    ];
    for (grad, operand) in like {
        let ins = vec![random(rng, grad), random(rng, operand)];
        check("_sum_to_like", Attrs::new(), ins);
    }
}

/// Dropout on the emulated GPU in training: every mask entry is 0 or 1 / (1 - p), the output is
/// the data times the mask, about p of the entries are dropped, and the seed decides the mask.
#[test]
fn dropout_masks_hold_the_cpus_values_at_the_rate_asked() {
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let rng = &mut StdRng::seed_from_u64(5);
    let n = 20_000;
    let data = rt
        .from_vec(random(rng, &[n]).1, &[n], Context::cpu(0))
        .expect("data");
    let run_with = |seed: u64, p: f64| {
        let outs: Vec<NDArray> = (0..2)
            .map(|_| rt.empty(&[n], DType::F32, Context::cpu(0)).expect("out"))
            .collect();
        rt.wait_all().expect("ready");
        let attrs = Attrs::new()
            .with("p", p)
            .with(IS_TRAIN, true)
            .with(super::ops::SEED, seed);
        let def = lookup("Dropout").expect("registered");
        let kernel = kernel_for(def).expect("gpu kernel");
        let stream = HostStream::new(lib);
        let mut ins = vec![data.tensor()];
        let o: Vec<_> = outs.iter().map(NDArray::tensor).collect();
        run(
            def.name,
            kernel,
            def.alias_safe,
            &attrs,
            &mut ins,
            &o,
            &stream,
            None,
        )
        .expect("dropout");
        let read = |a: &NDArray| a.to_vec::<f32>().expect("read");
        (read(&outs[0]), read(&outs[1]))
    };
    let x = data.to_vec::<f32>().expect("read");
    for p in [0.1, 0.5, 0.9] {
        let (y, mask) = run_with(1, p);
        // MXNet's p is a float, as the CPU kernel reads it.
        let keep = (1.0 / (1.0 - f64::from(p as f32))) as f32;
        assert!(
            mask.iter().all(|&m| m == 0.0 || m == keep),
            "p={p}: mask values"
        );
        assert!(y.iter().zip(&x).zip(&mask).all(|((y, x), m)| *y == x * m));
        let dropped = mask.iter().filter(|&&m| m == 0.0).count() as f64 / n as f64;
        // The count is binomial: its standard deviation is at most 0.0036 here.
        assert!((dropped - p).abs() < 0.02, "p={p}: dropped {dropped}");
    }
    assert_eq!(
        run_with(9, 0.5).1,
        run_with(9, 0.5).1,
        "same seed, same mask"
    );
    assert_ne!(
        run_with(9, 0.5).1,
        run_with(10, 0.5).1,
        "another seed, another mask"
    );
}

/// Runs `op` on the emulated GPU with output 0 in input 0's memory, as an in-place plan or an
/// `out=` call makes it; the CPU kernel on separate memory is the reference.
fn check_in_place(op: &str, attrs: &Attrs, inputs: &[Input]) {
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let want = cpu_outputs(op, attrs, inputs);
    let gpu_in = arrays(&rt, inputs);
    // Outputs after the first in fresh memory.
    let rest: Vec<NDArray> = want[1..]
        .iter()
        .map(|(s, _)| rt.empty(s, DType::F32, Context::cpu(0)).expect("output"))
        .collect();
    rt.wait_all().expect("ready");
    let def = lookup(op).expect("registered");
    let mut ins: Vec<_> = gpu_in.iter().map(NDArray::tensor).collect();
    let mut outs = vec![ins[0].clone()];
    outs.extend(rest.iter().map(NDArray::tensor));
    let kernel = kernel_for(def).expect("gpu kernel");
    run(
        def.name,
        kernel,
        def.alias_safe,
        attrs,
        &mut ins,
        &outs,
        &HostStream::new(lib),
        None,
    )
    .expect("run");
    close(
        op,
        &gpu_in[0].to_vec::<f32>().expect("read"),
        &want[0].1,
        1e-5,
    );
    for (k, (got, (_, want))) in rest.iter().zip(&want[1..]).enumerate() {
        let what = format!("{op} output {}", k + 1);
        close(&what, &got.to_vec::<f32>().expect("read"), want, 1e-5);
    }
}

#[test]
fn outputs_in_an_inputs_memory_give_the_same_result() {
    let rng = &mut StdRng::seed_from_u64(11);
    // Kernels that handle an output on their input (each index reads before it writes).
    check_in_place(
        "elemwise_add",
        &Attrs::new(),
        &[random(rng, &[3, 4]), random(rng, &[3, 4])],
    );
    check_in_place(
        "add_n",
        &Attrs::new(),
        &(0..12).map(|_| random(rng, &[3, 4])).collect::<Vec<_>>(),
    );
    // prelu's gradient over its output's gradient: gamma's gradient reads it first.
    check_in_place(
        "_backward_LeakyReLU",
        &Attrs::new().with("act_type", "prelu"),
        &[
            random(rng, &[2, 3, 4]),
            random(rng, &[2, 3, 4]),
            random(rng, &[3]),
        ],
    );
    // A kernel that does not (rows are read after they are written): its input is moved aside.
    check_in_place(
        "SoftmaxOutput",
        &Attrs::new(),
        &[random(rng, &[3, 4]), labels(rng, 3, 4)],
    );
}

#[test]
fn the_model_ops_all_have_gpu_kernels() {
    // Every op of the train_digits networks, ResNet, VGG and a transformer block, forward and
    // backward, and what the trainer and the gradient pass add.
    let ops = [
        "Convolution",
        "_backward_Convolution",
        "BatchNorm",
        "_backward_BatchNorm",
        "Activation",
        "_backward_Activation",
        "Pooling",
        "_backward_Pooling",
        "Flatten",
        "FullyConnected",
        "_backward_FullyConnected",
        "SoftmaxOutput",
        "_backward_SoftmaxOutput",
        "elemwise_add",
        "broadcast_add",
        "add_n",
        "_copy",
        "_CrossDeviceCopy",
        "sgd_mom_update",
        "sgd_update",
        "_zeros",
        // VGG's and a transformer block's.
        "Dropout",
        "softmax",
        "_backward_softmax",
        "LayerNorm",
        "_backward_LayerNorm",
        "transpose",
        "batch_dot",
        "SliceChannel",
        "Concat",
        "LeakyReLU",
        "_backward_LeakyReLU",
    ];
    for op in ops {
        assert!(
            kernel_for(lookup(op).expect("registered")).is_some(),
            "{op}"
        );
    }
    let without: Vec<_> = crate::ops::op_names()
        .into_iter()
        .filter(|op| kernel_for(lookup(op).expect("registered")).is_none())
        .collect();
    assert!(without.is_empty(), "ops without a GPU kernel: {without:?}");
    let add = lookup("elemwise_add").expect("registered");
    let f64_add = gpu_check(add, [DType::F64; 3]);
    assert_eq!(
        f64_add.err().as_deref(),
        Some("elemwise_add: GPU kernels take float32 arrays, got float64")
    );
}

#[test]
fn every_op_of_the_shared_models_and_a_transformer_block_trains_on_the_gpu() {
    // The training graph (outputs and every argument's gradient) of each model in `graphs/`, of
    // MXNet's transformer block fixture and of train_digits' LSTM: each op has a GPU kernel
    // taking its attributes.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let files = ["mlp", "resnet18_v1", "resnet50_v1", "mobilenet1.0", "vgg16"]
        .map(|m| format!("{root}/graphs/{m}-symbol.json"))
        .into_iter()
        .chain([
            format!("{root}/ndarray_ops/tests/data/mxnet/block64-symbol.json"),
            // train_digits' LSTM, as `train_digits --save` writes it.
            format!("{root}/ndarray_ops/tests/data/digits_lstm-symbol.json"),
        ]);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let sym = crate::Symbol::from_json(&text).expect("graph");
        let ops = training_ops_on_the_gpu(&file, &sym);
        assert!(ops.len() > 2, "{file}: {ops:?}");
    }
}

/// The ops of `sym`'s training graph (outputs and every argument's gradient), each checked to
/// have a GPU kernel.
fn training_ops_on_the_gpu(what: &str, sym: &crate::Symbol) -> BTreeSet<&'static str> {
    let args = sym.list_arguments();
    let train = crate::symbol::gradient(sym, &args).expect("gradient graph");
    let mut ops = BTreeSet::new();
    for node in train.indexed().nodes {
        if let Some(def) = node.op {
            if let Err(e) = gpu_check(def, [DType::F32]) {
                panic!("{what}: node {}: {e}", node.name);
            }
            ops.insert(def.name);
        }
    }
    ops
}

/// The GPU's uniform and normal generators: values in range, the moments and the share within
/// one deviation of the mean as the distributions have them, the same seed the same numbers,
/// another seed others.
#[test]
fn random_generators_draw_their_distributions_from_the_seed() {
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let n = 20_000;
    let draw = |op: &str, seed: u64, a: f64, b: f64| -> Vec<f64> {
        let out = rt.empty(&[n], DType::F32, Context::cpu(0)).expect("out");
        rt.wait_all().expect("ready");
        let (ka, kb) = match op {
            "_random_uniform" => ("low", "high"),
            _ => ("loc", "scale"),
        };
        let attrs = Attrs::new()
            .with("shape", format!("({n},)"))
            .with(ka, a)
            .with(kb, b)
            .with(super::ops::SEED, seed);
        let def = lookup(op).expect("registered");
        let kernel = kernel_for(def).expect("gpu kernel");
        let stream = HostStream::new(lib);
        run(
            op,
            kernel,
            def.alias_safe,
            &attrs,
            &mut [],
            &[out.tensor()],
            &stream,
            None,
        )
        .expect(op);
        let v = out.to_vec::<f32>().expect("read");
        v.into_iter().map(f64::from).collect()
    };
    let moments = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    };
    let u = draw("_random_uniform", 3, -2.0, 3.0);
    assert!(u.iter().all(|x| (-2.0..3.0).contains(x)), "uniform range");
    let (mean, var) = moments(&u);
    // Standard errors here: the mean's 0.010, the variance's 0.013.
    assert!((mean - 0.5).abs() < 0.05, "uniform mean {mean}");
    assert!((var - 25.0 / 12.0).abs() < 0.07, "uniform variance {var}");
    let z = draw("_random_normal", 3, 1.0, 2.0);
    let (mean, var) = moments(&z);
    assert!((mean - 1.0).abs() < 0.07, "normal mean {mean}");
    assert!((var - 4.0).abs() < 0.2, "normal variance {var}");
    let within = z.iter().filter(|x| (*x - 1.0).abs() < 2.0).count() as f64 / n as f64;
    assert!(
        (within - 0.6827).abs() < 0.02,
        "normal within one deviation {within}"
    );
    assert_eq!(
        draw("_random_normal", 8, 0.0, 1.0),
        draw("_random_normal", 8, 0.0, 1.0)
    );
    assert_ne!(
        draw("_random_uniform", 8, 0.0, 1.0),
        draw("_random_uniform", 9, 0.0, 1.0)
    );
}

#[test]
fn segmentation_and_sequence_graphs_train_on_the_gpu() {
    // Graphs built of the ops the shared models lack: an encoder-decoder with Deconvolution,
    // bilinear UpSampling, skip connections through Concat and a crop by slice_like, a
    // regression head; and a sequence model masking and picking its last steps, clipped. Every
    // node of their training graphs has a GPU kernel taking its attributes.
    use crate::Symbol;
    let node = |op: &str, name: &str, ins: &[&Symbol], attrs: Attrs| {
        Symbol::op(op, name, ins, attrs).unwrap_or_else(|e| panic!("{op}: {e}"))
    };
    let data = Symbol::var("data");
    let conv = |name: &str, x: &Symbol, k: usize, s: usize| {
        let attrs = conv_attrs(k, s, k / 2, 1, 8, 1, true);
        let (w, b) = (
            Symbol::var(&format!("{name}_weight")),
            Symbol::var(&format!("{name}_bias")),
        );
        node("Convolution", name, &[x, &w, &b], attrs)
    };
    let down = conv("down", &data, 3, 2);
    let deconv_attrs = Attrs::new()
        .with("kernel", "(4, 4)")
        .with("stride", "(2, 2)")
        .with("pad", "(1, 1)")
        .with("num_filter", 8);
    let up = node(
        "Deconvolution",
        "up",
        &[&down, &Symbol::var("up_weight")],
        deconv_attrs,
    );
    let bilinear = Attrs::new()
        .with("sample_type", "bilinear")
        .with("scale", 2)
        .with("num_filter", 8)
        .with("num_args", 2);
    let weight = Symbol::var("up2_weight");
    let up2 = node("UpSampling", "up2", &[&down, &weight], bilinear);
    let skip = conv("skip", &data, 1, 1);
    let crop = node("slice_like", "crop", &[&up2, &skip], Attrs::new());
    let cat = node(
        "Concat",
        "cat",
        &[&up, &skip, &crop],
        Attrs::new().with("num_args", 3),
    );
    let head = conv("head", &cat, 3, 1);
    let clipped = node(
        "clip",
        "clip",
        &[&head],
        Attrs::new().with("a_min", -3).with("a_max", 3),
    );
    let label = Symbol::var("label");
    let seg = node(
        "LinearRegressionOutput",
        "loss",
        &[&clipped, &label],
        Attrs::new(),
    );

    let steps = Symbol::var("steps");
    let lengths = Symbol::var("lengths");
    let on = Attrs::new().with("use_sequence_length", true);
    let masked = node("SequenceMask", "mask", &[&steps, &lengths], on.clone());
    let scores = node(
        "broadcast_mul",
        "scale",
        &[&masked, &Symbol::var("w")],
        Attrs::new(),
    );
    let last = node("SequenceLast", "last", &[&scores, &lengths], on);
    let tail = node(
        "slice_axis",
        "tail",
        &[&last],
        Attrs::new()
            .with("axis", 1)
            .with("begin", 1)
            .with("end", "None"),
    );
    let loss = node(
        "MakeLoss",
        "seq_loss",
        &[&node("norm", "n", &[&tail], Attrs::new())],
        Attrs::new(),
    );
    for (what, sym) in [("encoder-decoder", seg), ("sequence model", loss)] {
        let ops = training_ops_on_the_gpu(what, &sym);
        assert!(ops.len() > 5, "{what}: {ops:?}");
    }
}

/// The fused RNN against the CPU kernel: every mode, one and two layers, one and two
/// directions, with and without state outputs and per-sample sequence lengths (an empty, a
/// partial and a whole sequence), forward and backward (the backward op from head gradients for
/// every output).
fn rnn_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let (steps, batch, input, hidden) = (4, 3, 5, 6);
    for mode in ["lstm", "gru", "rnn_tanh", "rnn_relu"] {
        for (layers, dirs, state_outputs, lengths) in [
            (1, 1, true, false),
            (2, 2, true, false),
            (2, 1, false, false),
            (2, 2, true, true),
            (1, 1, false, true),
        ] {
            let attrs = rnn_attrs(mode, hidden, layers, dirs)
                .with("state_outputs", state_outputs)
                .with("use_sequence_length", lengths);
            let mut ins = rnn_inputs(rng, &attrs, [steps, batch, input]);
            if lengths {
                ins.push((vec![batch], vec![2.0, 0.0, 4.0]));
            }
            check("RNN", attrs.clone(), ins.clone());
            let mut heads = vec![random(rng, &[steps, batch, dirs * hidden])];
            if state_outputs {
                heads.push(random(rng, &[layers * dirs, batch, hidden]));
                if mode == "lstm" {
                    heads.push(random(rng, &[layers * dirs, batch, hidden]));
                }
            }
            heads.extend(ins);
            check("_backward_RNN", attrs, heads);
        }
    }
}

fn rnn_attrs(mode: &str, hidden: usize, layers: usize, dirs: usize) -> Attrs {
    Attrs::new()
        .with("mode", mode)
        .with("state_size", hidden)
        .with("num_layers", layers)
        .with("bidirectional", dirs == 2)
}

/// Random data `(steps, batch, input)`, parameters, initial state and (LSTM) cell for an RNN.
fn rnn_inputs(rng: &mut StdRng, attrs: &Attrs, [steps, batch, input]: [usize; 3]) -> Vec<Input> {
    let r = crate::ops::rnn::Rnn::parse("RNN", attrs).expect("attributes");
    let gates = r.gh() / r.hidden;
    let params: usize = (0..r.layers)
        .map(|l| {
            let width = if l == 0 { input } else { r.dirs * r.hidden };
            r.dirs * gates * r.hidden * (width + r.hidden + 2)
        })
        .sum();
    let state = [r.layers * r.dirs, batch, r.hidden];
    let mut ins = vec![
        random(rng, &[steps, batch, input]),
        random(rng, &[params]),
        random(rng, &state),
    ];
    // Smaller weights keep the gates away from saturation, where float32 says little.
    ins[1].1.iter_mut().for_each(|v| *v *= 0.5);
    if r.lstm() {
        ins.push(random(rng, &state));
    }
    ins
}

/// A bound RNN node's kept state on the GPU: the backward pass reads the forward pass's outputs
/// and traces instead of running it again (and matches the CPU), and the sequence lengths the
/// forward pass read back instead of reading them again; with dropout between layers it
/// draws the forward pass's masks again from the kept seed, and matches a reference built from
/// the CPU kernel one layer at a time with those masks (three layers, so two masks). Without
/// the state a backward pass with dropout is refused with the CPU's message.
#[test]
fn rnn_kept_state_serves_the_backward_pass_and_its_dropout_masks() {
    let rng = &mut StdRng::seed_from_u64(31);
    let (steps, batch, input, hidden) = (4, 3, 5, 6);
    for (mode, layers, dirs, p, lengths) in [
        ("lstm", 2, 2, 0.0, false),
        ("gru", 3, 1, 0.0, false),
        ("lstm", 2, 2, 0.0, true),
        ("lstm", 3, 2, 0.5, false),
        ("gru", 3, 1, 0.3, false),
        ("rnn_tanh", 2, 2, 0.6, false),
    ] {
        let attrs = rnn_attrs(mode, hidden, layers, dirs)
            .with("state_outputs", true)
            .with("use_sequence_length", lengths)
            .with("p", p)
            .with(IS_TRAIN, true);
        let mut ins = rnn_inputs(rng, &attrs, [steps, batch, input]);
        if lengths {
            ins.push((vec![batch], vec![3.0, 0.0, 4.0]));
        }
        let mut heads = vec![random(rng, &[steps, batch, dirs * hidden])];
        for _ in 1..crate::ops::rnn::Rnn::parse("RNN", &attrs)
            .expect("ok")
            .outputs()
        {
            heads.push(random(rng, &[layers * dirs, batch, hidden]));
        }
        let bw_ins: Vec<Input> = heads.iter().chain(&ins).cloned().collect();
        let what = format!("{mode} layers {layers} dirs {dirs} p {p} lengths {lengths}");
        // A forward pass with another seed first: the kept state is the last pass's.
        let mut slot: StateSlot = None;
        for seed in [7u64, 8] {
            let seeded = attrs.clone().with(super::ops::SEED, seed);
            emulate("RNN", &seeded, &ins, Some(&mut slot)).expect("forward");
        }
        let fwd_attrs = attrs.clone().with(super::ops::SEED, 8u64);
        let fwd = emulate("RNN", &fwd_attrs, &ins, Some(&mut slot)).expect("forward");
        let bwd = emulate("_backward_RNN", &attrs, &bw_ins, Some(&mut slot)).expect("backward");
        assert!(
            !bwd.launched.contains(&"rnn_step_fwd"),
            "{what}: the backward pass ran the forward pass again"
        );
        assert_eq!(
            (fwd.downloads, bwd.downloads),
            (usize::from(lengths), 0),
            "{what}: reads back (forward, backward)"
        );
        let (want_fwd, want_bwd) = match p > 0.0 {
            false => (
                cpu_outputs("RNN", &attrs, &ins),
                cpu_outputs("_backward_RNN", &attrs, &bw_ins),
            ),
            true => layer_by_layer(&attrs, &ins, &heads, 8),
        };
        for (k, (g, w)) in fwd.outs.iter().zip(&want_fwd).enumerate() {
            close(&format!("{what}: output {k}"), g, &w.1, 1e-4);
        }
        for (k, (g, w)) in bwd.outs.iter().zip(&want_bwd).enumerate() {
            close(&format!("{what}: gradient {k}"), g, &w.1, 1e-4);
        }
        if p > 0.0 {
            let err = emulate("_backward_RNN", &attrs, &bw_ins, None)
                .err()
                .expect("refused without the state");
            let r = crate::ops::rnn::Rnn::parse("_backward_RNN", &attrs).expect("ok");
            assert_eq!(err, crate::ops::rnn::masks_lost("_backward_RNN", &r));
        }
    }
}

/// A multi-layer RNN with dropout between layers, built from single-layer CPU RNNs with the
/// masks the GPU kernels draw from `seed`: its outputs and its backward op's, as the GPU op
/// returns them.
fn layer_by_layer(
    attrs: &Attrs,
    ins: &[Input],
    heads: &[Input],
    seed: u64,
) -> (Vec<Input>, Vec<Input>) {
    use super::Stream;
    use crate::ops::rnn::{Pass, Rnn};
    let r = Rnn::parse("RNN", attrs).expect("attributes");
    let (l_count, dirs, h) = (r.layers, r.dirs, r.hidden);
    let x = &ins[0];
    let full = Pass::new(r, &x.0, &ins[1].1, None);
    let (steps, batch) = (x.0[0], x.0[1]);
    let per_state = dirs * batch * h;
    let mode = attrs.get("mode").expect("mode").to_string();
    let one = rnn_attrs(&mode, h, 1, dirs)
        .with("state_outputs", true)
        .with(IS_TRAIN, true);
    let one_r = Rnn::parse("RNN", &one).expect("attributes");
    let state_part = |v: &Input, l: usize| {
        (
            vec![dirs, batch, h],
            v.1[l * per_state..(l + 1) * per_state].to_vec(),
        )
    };
    // Layer l's parameters as a one-layer RNN's, and back.
    let width = |l: usize| if l == 0 { x.0[2] } else { dirs * h };
    let layer_params = |l: usize| -> (Vec<f32>, Vec<[usize; 3]>) {
        let shape = [steps, batch, width(l)];
        let single = Pass::<f32>::new(one_r, &shape, &[], None);
        let size = single.slot(0, dirs - 1).bh + one_r.gh();
        let mut params = vec![0.0; size];
        let mut moves = Vec::new();
        for d in 0..dirs {
            let (f, o) = (full.slot(l, d), single.slot(0, d));
            let gh = one_r.gh();
            for (from, to, n) in [
                (f.wx, o.wx, gh * width(l)),
                (f.wh, o.wh, gh * h),
                (f.bx, o.bx, gh),
                (f.bh, o.bh, gh),
            ] {
                params[to..to + n].copy_from_slice(&ins[1].1[from..from + n]);
                moves.push([from, to, n]);
            }
        }
        (params, moves)
    };
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let dropout = |l: usize, y: &[f32]| -> (Vec<f32>, Vec<f32>) {
        let (mut dropped, mut mask) = (vec![0f32; y.len()], vec![0f32; y.len()]);
        let a = super::KArgs::new(y.len())
            .p(0, dropped.as_mut_ptr())
            .p(1, mask.as_mut_ptr())
            .p(2, y.as_ptr().cast_mut())
            .i(1, super::rnn::layer_seed(seed, l) as usize)
            .f(0, r.p)
            .f(1, 1.0 / (1.0 - r.p));
        HostStream::new(lib)
            .launch("dropout", y.len(), &a)
            .expect("dropout");
        (dropped, mask)
    };
    let lstm = r.lstm();
    let mut layer_ins: Vec<Vec<Input>> = Vec::new();
    let (mut masks, mut hy, mut cy) = (Vec::new(), Vec::new(), Vec::new());
    let mut below = x.clone();
    let mut top = Vec::new();
    for l in 0..l_count {
        let mut li = vec![
            below.clone(),
            (vec![0], layer_params(l).0),
            state_part(&ins[2], l),
        ];
        li[1].0 = vec![li[1].1.len()];
        if lstm {
            li.push(state_part(&ins[3], l));
        }
        let outs = cpu_outputs("RNN", &one, &li);
        hy.extend_from_slice(&outs[1].1);
        if lstm {
            cy.extend_from_slice(&outs[2].1);
        }
        layer_ins.push(li);
        if l + 1 < l_count {
            let (dropped, mask) = dropout(l, &outs[0].1);
            masks.push(mask);
            below = (outs[0].0.clone(), dropped);
        } else {
            top = outs[0].clone().1;
        }
    }
    let state_shape = vec![l_count * dirs, batch, h];
    let mut forward = vec![
        (vec![steps, batch, dirs * h], top),
        (state_shape.clone(), hy),
    ];
    if lstm {
        forward.push((state_shape.clone(), cy));
    }
    // Backward from the top: each layer's input gradient, through the mask below it, is the
    // gradient of the output of the layer below.
    let mut dparams = vec![0f32; ins[1].1.len()];
    let (mut dh0, mut dc0) = (vec![0f32; ins[2].1.len()], vec![0f32; ins[2].1.len()]);
    let mut dy = heads[0].clone();
    let mut dx = Vec::new();
    for l in (0..l_count).rev() {
        let mut bw = vec![dy.clone(), state_part(&heads[1], l)];
        if lstm {
            bw.push(state_part(&heads[2], l));
        }
        bw.extend(layer_ins[l].iter().cloned());
        let g = cpu_outputs("_backward_RNN", &one, &bw);
        for [from, to, n] in layer_params(l).1 {
            dparams[from..from + n].copy_from_slice(&g[1].1[to..to + n]);
        }
        let part = l * per_state..(l + 1) * per_state;
        dh0[part.clone()].copy_from_slice(&g[2].1);
        if lstm {
            dc0[part].copy_from_slice(&g[3].1);
        }
        match l {
            0 => dx = g[0].1.clone(),
            _ => {
                let through: Vec<f32> = g[0]
                    .1
                    .iter()
                    .zip(&masks[l - 1])
                    .map(|(a, m)| a * m)
                    .collect();
                dy = (g[0].0.clone(), through);
            }
        }
    }
    let mut backward = vec![
        (x.0.clone(), dx),
        (ins[1].0.clone(), dparams),
        (ins[2].0.clone(), dh0),
    ];
    if lstm {
        backward.push((ins[2].0.clone(), dc0));
    }
    (forward, backward)
}

/// The unary functions' domains for the tests: where each is defined and tame.
fn unary_domain(op: &str) -> (f32, f32) {
    match op {
        "log" | "sqrt" | "rsqrt" | "reciprocal" | "log2" | "log10" | "rcbrt" => (0.2, 3.0),
        "arcsin" | "arccos" | "arctanh" => (-0.9, 0.9),
        "arccosh" => (1.2, 3.0),
        "log1p" => (-0.5, 2.0),
        _ => (-2.5, 2.5),
    }
}

/// Every unary function inside its domain, and the gradient through each one that has one
/// (`_backward_math`, at the input or the output as the gradient pass reads it); zeros_like
/// and ones_like.
fn unary_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    use crate::ops::math::{find, Deriv};
    for &op in super::ops::UNARY {
        let (lo, hi) = unary_domain(op);
        let mut x = random(rng, &[3, 7]);
        x.1.iter_mut()
            .for_each(|v| *v = lo + (*v + 1.0) * 0.5 * (hi - lo));
        check(op, Attrs::new(), vec![x.clone()]);
        let at = match find(op).map(|m| m.deriv) {
            Some(Deriv::OfInput(_)) => x.1.clone(),
            Some(Deriv::OfOutput(_)) => {
                let f = find(op).expect("listed").f;
                x.1.iter().map(|&v| f(f64::from(v)) as f32).collect()
            }
            _ => continue,
        };
        let g = random(rng, &[3, 7]);
        check(
            "_backward_math",
            Attrs::new().with("fn", op),
            vec![g, (vec![3, 7], at)],
        );
    }
    for op in ["zeros_like", "ones_like"] {
        check(op, Attrs::new(), vec![random(rng, &[2, 5])]);
    }
}

/// take (any axis, clip and wrap) and Embedding, and the table's gradient with repeated,
/// negative and out-of-range indices (rows adding up).
fn take_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let picks = (vec![2, 3], vec![3.0, -1.0, 0.0, 7.0, 3.0, 1.0]);
    for (axis, mode) in [(0, "clip"), (1, "wrap"), (2, "clip"), (-1, "wrap")] {
        let attrs = Attrs::new().with("axis", axis).with("mode", mode);
        let table = random(rng, &[4, 5, 6]);
        let ins = vec![table.clone(), picks.clone()];
        check("take", attrs.clone(), ins.clone());
        let g = random(rng, &cpu_outputs("take", &attrs, &ins)[0].0);
        check("_backward_take", attrs, vec![g, picks.clone(), table]);
    }
    let attrs = Attrs::new().with("input_dim", 10).with("output_dim", 4);
    let words = (vec![2, 4], vec![9.0, 2.0, 2.0, 0.0, 5.0, 2.0, 9.0, 1.0]);
    check(
        "Embedding",
        attrs,
        vec![words.clone(), random(rng, &[10, 4])],
    );
    let (g, w) = (random(rng, &[2, 4, 4]), random(rng, &[10, 4]));
    check("_backward_take", Attrs::new(), vec![g, words, w]);
    // Many indices: the gradient sorts them by row and sums each row's run (runs of one and of
    // dozens, out-of-range and negative indices clipped or wrapped onto the ends).
    for (axis, mode, table) in [(0, "clip", vec![50, 3]), (1, "wrap", vec![2, 7, 3])] {
        let rows = table[usize::from(axis == 1)] as f32;
        let many: Vec<f32> = (0..1100)
            .map(|k| match k % 11 {
                0 => -3.0,
                1 => rows + 2.0,
                _ => rng.gen_range(0.0..rows).floor(),
            })
            .collect();
        let picks = (vec![1100], many);
        let attrs = Attrs::new().with("axis", axis).with("mode", mode);
        let ins = vec![random(rng, &table), picks.clone()];
        let g = random(rng, &cpu_outputs("take", &attrs, &ins)[0].0);
        check("_backward_take", attrs, vec![g, picks, ins[0].clone()]);
    }
}

/// The gather family, slices and their gradients: every op forward, then its gradient node with
/// an output gradient of the output's shape (broadcasts and tiles sum, padding crops, slices
/// scatter into zeros).
fn gather_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let mut both = |op: &str, attrs: Attrs, shapes: &[Vec<usize>], grad: (&str, Attrs)| {
        let ins: Vec<Input> = shapes.iter().map(|s| random(rng, s)).collect();
        check(op, attrs.clone(), ins.clone());
        let g = random(rng, &cpu_outputs(op, &attrs, &ins)[0].0);
        check(grad.0, grad.1, vec![g, ins[0].clone()]);
    };
    let cases: Vec<(&str, Attrs, Vec<Vec<usize>>)> = vec![
        (
            "broadcast_to",
            Attrs::new().with("shape", "(2, 4, 3)"),
            vec![vec![2, 1, 3]],
        ),
        (
            "broadcast_to",
            Attrs::new().with("shape", "(3, 5)"),
            vec![vec![1, 1]],
        ),
        (
            "broadcast_axis",
            Attrs::new().with("axis", 1).with("size", 4),
            vec![vec![3, 1, 2]],
        ),
        ("broadcast_like", Attrs::new(), vec![vec![1, 3], vec![4, 3]]),
        // Few elements each summing many terms: the gradient splits each sum into parts.
        (
            "broadcast_to",
            Attrs::new().with("shape", "(40, 3, 50)"),
            vec![vec![1, 3, 1]],
        ),
        (
            "tile",
            Attrs::new().with("reps", "(37, 1, 29)"),
            vec![vec![2, 3, 1]],
        ),
        (
            "tile",
            Attrs::new().with("reps", "(2, 1, 2)"),
            vec![vec![3, 2]],
        ),
        (
            "repeat",
            Attrs::new().with("repeats", 3).with("axis", 1),
            vec![vec![2, 3, 2]],
        ),
        ("repeat", Attrs::new().with("repeats", 2), vec![vec![2, 3]]),
        (
            "reverse",
            Attrs::new().with("axis", "(0, 2)"),
            vec![vec![3, 2, 4]],
        ),
        (
            "SwapAxis",
            Attrs::new().with("dim1", 0).with("dim2", 2),
            vec![vec![2, 3, 4]],
        ),
        (
            "UpSampling",
            Attrs::new().with("scale", 2).with("sample_type", "nearest"),
            vec![vec![1, 2, 2, 3]],
        ),
        (
            "slice_like",
            Attrs::new().with("axes", "(0, 2)"),
            vec![vec![3, 4, 5], vec![2, 1, 3]],
        ),
    ];
    let cases = cases
        .into_iter()
        .chain(["constant", "edge", "reflect"].map(|mode| {
            let attrs = Attrs::new()
                .with("mode", mode)
                .with("pad_width", "(0, 0, 0, 0, 1, 2, 2, 1)")
                .with("constant_value", 1.5);
            ("Pad", attrs, vec![vec![1, 2, 3, 4]])
        }));
    for (op, attrs, shapes) in cases {
        let grad = attrs.clone().with("__fwd__", op);
        both(op, attrs, &shapes, ("_backward_gather", grad));
    }
    let slices = [
        (
            "slice",
            Attrs::new()
                .with("begin", "(0, 1)")
                .with("end", "(None, 5)")
                .with("step", "(1, 2)"),
        ),
        (
            "slice",
            Attrs::new()
                .with("begin", "(2, -1)")
                .with("end", "(0, None)")
                .with("step", "(-1, -2)"),
        ),
        (
            "slice_axis",
            Attrs::new()
                .with("axis", 1)
                .with("begin", 1)
                .with("end", -1),
        ),
    ];
    for (op, attrs) in slices {
        let grad = attrs.clone().with("__slice_op__", op);
        both(op, attrs, &[vec![3, 6]], ("_backward_slice", grad));
    }
}

/// Deconvolution forward and backward (strides, padding, dilation, groups, bias, `adj`,
/// `target_shape`, 1x1 windows that skip im2col, a workspace of one image), and bilinear
/// UpSampling, a depthwise Deconvolution.
fn deconv_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    // ([kernel, stride, pad, dilate, filters, groups], bias, extra attributes)
    let cases: [([usize; 6], bool, Attrs); 6] = [
        ([3, 1, 1, 1, 5, 1], true, Attrs::new()),
        ([4, 2, 1, 1, 6, 2], false, Attrs::new()),
        ([3, 2, 1, 2, 4, 4], true, Attrs::new().with("adj", "(1, 1)")),
        (
            [3, 2, 0, 1, 3, 1],
            false,
            Attrs::new().with("target_shape", "(10, 8)"),
        ),
        ([1, 1, 0, 1, 3, 1], true, Attrs::new()),
        (
            [2, 2, 0, 1, 4, 2],
            false,
            Attrs::new().with("workspace", 0.0001),
        ),
    ];
    for ([k, st, p, d, f, g], bias, extra) in cases {
        let mut attrs = conv_attrs(k, st, p, d, f, g, bias);
        for (key, v) in extra.iter() {
            attrs = attrs.with(key, v);
        }
        let data = random(rng, &[3, 4, 5, 4]);
        let mut ins = vec![data.clone(), random(rng, &[4, f / g, k, k])];
        if bias {
            ins.push(random(rng, &[f]));
        }
        check("Deconvolution", attrs.clone(), ins.clone());
        let g = random(rng, &cpu_outputs("Deconvolution", &attrs, &ins)[0].0);
        check(
            "_backward_Deconvolution",
            attrs,
            vec![g, data, ins[1].clone()],
        );
    }
    let attrs = Attrs::new()
        .with("sample_type", "bilinear")
        .with("scale", 2)
        .with("num_filter", 3)
        .with("num_args", 2);
    let ins = vec![random(rng, &[2, 3, 4, 5]), random(rng, &[3, 1, 4, 4])];
    check("UpSampling", attrs, ins);
}

/// The regression outputs and MakeLoss (forward and their own gradients), SoftmaxActivation,
/// `_assign`, depth_to_space and space_to_depth.
fn head_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let scaled = Attrs::new().with("grad_scale", 0.5);
    for op in [
        "LinearRegressionOutput",
        "LogisticRegressionOutput",
        "MAERegressionOutput",
    ] {
        let (x, label) = (random(rng, &[4, 3]), random(rng, &[4, 3]));
        check(op, Attrs::new(), vec![x.clone(), label.clone()]);
        let mut pred = random(rng, &[4, 3]);
        pred.1[2] = label.1[2];
        let backward = format!("_backward_{op}");
        check(&backward, scaled.clone(), vec![pred, label]);
        // One output per sample, labels as a vector.
        let ins = vec![random(rng, &[5, 1]), random(rng, &[5])];
        check(&backward, Attrs::new(), ins);
    }
    let out = random(rng, &[4, 3]);
    for norm in ["null", "batch", "valid"] {
        let attrs = scaled
            .clone()
            .with("normalization", norm)
            .with("valid_thresh", 0.1);
        check("_backward_MakeLoss", attrs, vec![out.clone()]);
    }
    let below = (vec![2, 2], vec![-1.0; 4]);
    let valid = Attrs::new().with("normalization", "valid");
    check("_backward_MakeLoss", valid, vec![below]);
    for mode in ["instance", "channel"] {
        let attrs = Attrs::new().with("mode", mode);
        check(
            "SoftmaxActivation",
            attrs.clone(),
            vec![random(rng, &[2, 3, 4])],
        );
        let ins = vec![random(rng, &[2, 3, 4]), random(rng, &[2, 3, 4])];
        check("_backward_SoftmaxActivation", attrs, ins);
    }
    check(
        "_assign",
        Attrs::new(),
        vec![random(rng, &[3, 4]), random(rng, &[3, 4])],
    );
    // Degenerate distributions: every draw is the CPU's value (the distributions are checked
    // in `random_generators_draw_their_distributions_from_the_seed`).
    let seeded = Attrs::new()
        .with("shape", "(3, 4)")
        .with(super::ops::SEED, 7);
    let uniform = seeded.clone().with("low", 0.25).with("high", 0.25);
    check("_random_uniform", uniform, vec![]);
    check(
        "_random_normal",
        seeded.with("loc", -1.5).with("scale", 0.0),
        vec![],
    );
    let block = Attrs::new().with("block_size", 2);
    check(
        "depth_to_space",
        block.clone(),
        vec![random(rng, &[2, 12, 3, 2])],
    );
    check("space_to_depth", block, vec![random(rng, &[2, 3, 4, 6])]);
}

/// Every scalar op, the binary functions beyond arithmetic, clip, hard_sigmoid, where and
/// one_hot; the data holds zeros and equal pairs, so that comparisons, logic and mod by zero
/// count.
fn elementwise_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let with_zeros = |rng: &mut StdRng| {
        let (shape, mut v) = random(rng, &[4, 6]);
        for i in (0..v.len()).step_by(5) {
            v[i] = 0.0;
        }
        v[1] = 0.5;
        (shape, v)
    };
    let (plain, x) = (random(rng, &[4, 6]), with_zeros(rng));
    for op in [
        "_plus_scalar",
        "_minus_scalar",
        "_rminus_scalar",
        "_mul_scalar",
        "_div_scalar",
        "_rdiv_scalar",
        "_maximum_scalar",
        "_minimum_scalar",
        "_power_scalar",
        "_rpower_scalar",
        "_equal_scalar",
        "_not_equal_scalar",
        "_greater_scalar",
        "_greater_equal_scalar",
        "_lesser_scalar",
        "_lesser_equal_scalar",
        "_hypot_scalar",
        "_mod_scalar",
        "smooth_l1",
    ] {
        // Plain data at 0.25, then the data with zeros and equal pairs at 0.5.
        for (data, value) in [(&plain, 0.25), (&x, 0.5)] {
            let scalar = if op == "_power_scalar" { 2.0 } else { value };
            check(op, Attrs::new().with("scalar", scalar), vec![data.clone()]);
        }
    }
    check(
        "_mod_scalar",
        Attrs::new().with("scalar", -0.3),
        vec![x.clone()],
    );
    check(
        "smooth_l1",
        Attrs::new().with("scalar", 2.0),
        vec![x.clone()],
    );
    let y = with_zeros(rng);
    for op in [
        "broadcast_hypot",
        "broadcast_mod",
        "broadcast_logical_and",
        "broadcast_logical_or",
        "broadcast_logical_xor",
        "_mod",
        "_logical_xor",
        "_hypot",
    ] {
        check(op, Attrs::new(), vec![x.clone(), y.clone()]);
    }
    check(
        "broadcast_mod",
        Attrs::new(),
        vec![x.clone(), random(rng, &[1, 6])],
    );
    let clip = Attrs::new().with("a_min", -0.3).with("a_max", 0.6);
    check("clip", clip, vec![x.clone()]);
    let hard = Attrs::new().with("alpha", 0.7).with("beta", 0.4);
    check("hard_sigmoid", hard, vec![x.clone()]);
    check("hard_sigmoid", Attrs::new(), vec![x.clone()]);
    check(
        "where",
        Attrs::new(),
        vec![y.clone(), x.clone(), random(rng, &[4, 6])],
    );
    let rows = (vec![4], vec![1.0, 0.0, 0.0, 2.0]);
    check(
        "where",
        Attrs::new(),
        vec![rows, x.clone(), random(rng, &[4, 6])],
    );
    let idx = (vec![2, 3], vec![0.0, 4.0, 2.7, -1.0, 5.0, 1.0]);
    let hot = Attrs::new()
        .with("depth", 5)
        .with("on_value", 2.5)
        .with("off_value", -1.0);
    check("one_hot", hot, vec![idx]);
    check(
        "Cast",
        Attrs::new().with("dtype", "float32"),
        vec![x.clone()],
    );
}

/// stack, Concat's gradient, Adam, and the sequence ops with lengths past the steps and of 0.
fn layer_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    for axis in [0, 1, -1] {
        let ins = (0..3).map(|_| random(rng, &[2, 3, 4])).collect();
        check("stack", Attrs::new().with("axis", axis), ins);
    }
    for dim in [0, 1, 2] {
        let mut parts = [vec![2, 3, 4], vec![2, 3, 4]];
        parts[1][dim] = 5;
        let mut whole = parts[0].clone();
        whole[dim] = parts[0][dim] + parts[1][dim];
        let ins = vec![
            random(rng, &whole),
            random(rng, &parts[0]),
            random(rng, &parts[1]),
        ];
        let attrs = Attrs::new().with("dim", dim).with("num_args", 2);
        check("_backward_Concat", attrs, ins);
    }
    let adam = Attrs::new()
        .with("lr", 0.01)
        .with("wd", 0.1)
        .with("rescale_grad", 0.5)
        .with("clip_gradient", 0.2)
        .with("beta1", 0.8)
        .with("epsilon", 1e-6);
    let var = {
        let (shape, v) = random(rng, &[4, 6]);
        (shape, v.iter().map(|x| x.abs()).collect())
    };
    let ins = vec![
        random(rng, &[4, 6]),
        random(rng, &[4, 6]),
        random(rng, &[4, 6]),
        var,
    ];
    check("adam_update", adam.clone(), ins.clone());
    check("adam_update", adam.with("clip_gradient", -1.0), ins);

    // Five steps, four sequences: lengths 2, -1 (as 0), 9 (past the end) and 0.
    let lengths = (vec![4], vec![2.0, -1.0, 9.0, 0.0]);
    for axis in [0, 1] {
        let x = if axis == 0 {
            vec![5, 4, 3]
        } else {
            vec![4, 5, 3]
        };
        let on = |attrs: Attrs| attrs.with("axis", axis).with("use_sequence_length", true);
        let mask = on(Attrs::new().with("value", -7.0));
        check(
            "SequenceMask",
            mask.clone(),
            vec![random(rng, &x), lengths.clone()],
        );
        check(
            "_backward_SequenceMask",
            mask,
            vec![random(rng, &x), lengths.clone()],
        );
        check(
            "SequenceLast",
            on(Attrs::new()),
            vec![random(rng, &x), lengths.clone()],
        );
        let g = random(rng, &[4, 3]);
        let ins = vec![g, random(rng, &x), lengths.clone()];
        check("_backward_SequenceLast", on(Attrs::new()), ins);
        let whole = Attrs::new().with("axis", axis);
        check("SequenceLast", whole.clone(), vec![random(rng, &x)]);
        check("SequenceMask", whole, vec![random(rng, &x)]);
    }
    let rev = Attrs::new().with("use_sequence_length", true);
    check(
        "SequenceReverse",
        rev,
        vec![random(rng, &[5, 4, 3]), lengths],
    );
    check(
        "SequenceReverse",
        Attrs::new(),
        vec![random(rng, &[5, 4, 3])],
    );
}

/// Each unary function's training graph (forward and gradient nodes) runs on the GPU.
#[test]
fn unary_gradients_run_on_the_gpu() {
    for &op in super::ops::UNARY {
        let data = crate::Symbol::var("data");
        let sym = crate::Symbol::op(op, "f", &[&data], Attrs::new()).expect("node");
        let train = crate::symbol::gradient(&sym, &["data".to_string()]).expect("gradient");
        for node in train.indexed().nodes {
            if let Some(def) = node.op {
                if let Err(e) = gpu_check(def, [DType::F32]) {
                    panic!("the gradient graph of {op}: node {}: {e}", node.name);
                }
            }
        }
    }
}

/// pick (clipped and wrapped indices, fractional ones, NaN, every axis, kept or not) and its
/// gradient, batch_take, gather_nd and the scatters (negative coordinates, repeated blocks),
/// take in mode raise, softmax_cross_entropy and its gradient; arange.
fn index_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let x = random(rng, &[3, 4, 5]);
    let picks = [2.0, -1.0, 7.0, 0.0, 1.5, -0.5, f32::NAN, 3.0, 12.0, -6.0];
    for (axis, mode, keep) in [
        (1, "clip", false),
        (-1, "wrap", true),
        (0, "wrap", false),
        (2, "clip", true),
    ] {
        let attrs = Attrs::new()
            .with("axis", axis)
            .with("mode", mode)
            .with("keepdims", keep);
        let mut shape = x.0.clone();
        shape[(axis + 3) as usize % 3] = 1;
        let n: usize = shape.iter().product();
        let index = (shape, (0..n).map(|k| picks[k % picks.len()]).collect());
        check("pick", attrs.clone(), vec![x.clone(), index.clone()]);
        let out = &cpu_outputs("pick", &attrs, &[x.clone(), index.clone()])[0];
        let g = random(rng, &out.0);
        check("_backward_pick", attrs, vec![g, index, x.clone()]);
    }
    let rows = (vec![3], vec![1.0, -2.0, 9.0]);
    check("batch_take", Attrs::new(), vec![random(rng, &[3, 4]), rows]);
    // Coordinates (M = 2 rows, 3 x 2 positions), negative ones counting from the end; the
    // scatters name blocks twice (the assign keeps the last, the gradient adds both).
    let coords = (
        vec![2, 3, 2],
        vec![
            0.0, 3.0, -1.0, 3.0, 1.0, -4.0, 2.0, 0.0, 1.0, -3.0, 0.0, 1.0,
        ],
    );
    let x = random(rng, &[4, 3, 5]);
    check("gather_nd", Attrs::new(), vec![x, coords.clone()]);
    let raise = Attrs::new().with("mode", "raise").with("axis", 1);
    let columns = (vec![4], vec![2.0, 0.0, 2.0, 1.0]);
    check("take", raise, vec![random(rng, &[2, 3, 2]), columns]);
    // Short rows (one thread per row finds each row's figures), long ones (split into parts),
    // many (their losses summed in two folds) and none (a zero loss).
    for (rows, k) in [(5, 4), (3, 3000), (2000, 3), (0, 4)] {
        let (mut scores, classes) = (random(rng, &[rows, k]), labels(rng, rows, k));
        scores.1.iter_mut().for_each(|v| *v *= 8.0);
        check(
            "softmax_cross_entropy",
            Attrs::new(),
            vec![scores.clone(), classes.clone()],
        );
        let g = (vec![1], vec![0.7]);
        check(
            "_backward_softmax_cross_entropy",
            Attrs::new(),
            vec![g, scores, classes],
        );
    }
    let shape = Attrs::new().with("shape", "(4, 3, 5)");
    for op in ["scatter_nd", "_backward_gather_nd"] {
        let g = random(rng, &[3, 2, 5]);
        check(op, shape.clone(), vec![g, coords.clone()]);
    }
    let range = Attrs::new()
        .with("start", 2)
        .with("stop", 11)
        .with("step", 0.7)
        .with("repeat", 2);
    check("_arange", range, vec![]);
    check("arange", Attrs::new().with("start", 5), vec![]);
    let down = Attrs::new()
        .with("start", 16_777_219)
        .with("stop", 16_777_200)
        .with("step", -1.5);
    check("_arange", down, vec![]);
}

/// topk, sort and argsort over lanes of 1, 7, 300, 1,100 and the whole array, up and down, every
/// ret_typ, on data with ties, signed zeros, infinities and NaNs of both signs (the CPU's stable
/// total order);
/// `_backward_topk` through each node returning values.
fn sort_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let mut tied = |shape: &[usize]| {
        let (shape, mut v) = random(rng, shape);
        for (k, v) in v.iter_mut().enumerate() {
            *v = match k % 11 {
                3 => f32::INFINITY,
                5 => f32::NEG_INFINITY,
                7 => -0.0,
                8 => 0.0,
                9 => f32::NAN,
                // A negative NaN, every bit set: first up, and last down (beside the padding).
                10 => f32::from_bits(u32::MAX),
                _ => (*v * 4.0).round() / 4.0,
            };
        }
        (shape, v)
    };
    let x = tied(&[3, 7, 5]);
    let long = tied(&[2, 300]);
    let one = tied(&[4, 1]);
    // Lanes long enough that the gradient sorts its positions (across lanes, and along them).
    let across = tied(&[1100, 2]);
    let along = tied(&[2, 1100]);
    let cases = [
        ("sort", Attrs::new().with("axis", 0), &across),
        (
            "topk",
            Attrs::new().with("k", 1030).with("ret_typ", "both"),
            &along,
        ),
        ("sort", Attrs::new(), &x),
        (
            "sort",
            Attrs::new().with("axis", 1).with("is_ascend", false),
            &x,
        ),
        ("sort", Attrs::new(), &long),
        ("argsort", Attrs::new().with("axis", 0), &x),
        (
            "argsort",
            Attrs::new().with("axis", "None").with("is_ascend", 0),
            &x,
        ),
        ("argsort", Attrs::new(), &one),
        ("topk", Attrs::new().with("axis", 1).with("k", 3), &x),
        (
            "topk",
            Attrs::new().with("k", 4).with("ret_typ", "value"),
            &long,
        ),
        (
            "topk",
            Attrs::new()
                .with("axis", 1)
                .with("k", 2)
                .with("ret_typ", "both")
                .with("is_ascend", true),
            &x,
        ),
        (
            "topk",
            Attrs::new().with("k", 0).with("ret_typ", "value"),
            &x,
        ),
        (
            "topk",
            Attrs::new()
                .with("k", 2)
                .with("ret_typ", "mask")
                .with("axis", 0),
            &x,
        ),
    ];
    for (op, attrs, x) in cases {
        check(op, attrs.clone(), vec![x.clone()]);
        if crate::ops::sort::returns_values(op, &attrs) {
            let out = cpu_outputs(op, &attrs, std::slice::from_ref(x));
            let g = random(rng, &out[0].0);
            let attrs = attrs.with("__fwd__", op);
            check("_backward_topk", attrs, vec![g, out[1].clone(), x.clone()]);
        }
    }
    // Positions given directly may repeat (and fall outside the lane): their gradients add.
    let top3 = Attrs::new()
        .with("k", 3)
        .with("ret_typ", "value")
        .with("__fwd__", "topk");
    let positions = (vec![2, 3], vec![1.0, 1.0, 3.0, 0.0, 9.0, 0.0]);
    let ins = vec![random(rng, &[2, 3]), positions, random(rng, &[2, 4])];
    check("_backward_topk", top3, ins);
    // The same over long lists (sorted into runs): runs of one, of several (repeats and
    // positions clamped from either side), in both lanes.
    let top = Attrs::new()
        .with("k", 1030)
        .with("ret_typ", "value")
        .with("__fwd__", "topk");
    let positions = (0..2 * 1030)
        .map(|e| match e % 7 {
            0 => 5000.0,
            1 => -3.0,
            2 => (e % 13) as f32,
            _ => (e % 1100) as f32,
        })
        .collect();
    let ins = vec![
        random(rng, &[2, 1030]),
        (vec![2, 1030], positions),
        random(rng, &[2, 1100]),
    ];
    check("_backward_topk", top, ins);
}

/// Crop (a window, and centred on a second input's size), AdaptiveAvgPooling2D (uneven and
/// global bins) and BilinearResize2D (corners aligned or not, scaled, like a second input),
/// each forward and through its gradient node.
fn resample_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let crop = Attrs::new().with("h_w", "(4, 3)").with("offset", "(2, 1)");
    let centred = Attrs::new().with("num_args", 2).with("center_crop", true);
    let pool = |size: &str| Attrs::new().with("output_size", size);
    let sized = Attrs::new().with("height", 5).with("width", 11);
    let scaled = Attrs::new()
        .with("scale_height", 1.7)
        .with("scale_width", 0.6)
        .with("align_corners", false);
    let like = Attrs::new()
        .with("mode", "like")
        .with("align_corners", false);
    let cases: [(&str, Attrs, Vec<Vec<usize>>); 8] = [
        ("Crop", crop, vec![vec![2, 3, 7, 6]]),
        ("Crop", centred, vec![vec![2, 3, 7, 6], vec![1, 1, 4, 3]]),
        (
            "_contrib_AdaptiveAvgPooling2D",
            pool("(3, 4)"),
            vec![vec![2, 3, 7, 9]],
        ),
        (
            "_contrib_AdaptiveAvgPooling2D",
            pool("1"),
            vec![vec![2, 2, 5, 6]],
        ),
        (
            "_contrib_AdaptiveAvgPooling2D",
            pool("(5, 8)"),
            vec![vec![1, 2, 3, 4]],
        ),
        ("_contrib_BilinearResize2D", sized, vec![vec![2, 2, 4, 6]]),
        ("_contrib_BilinearResize2D", scaled, vec![vec![1, 3, 6, 5]]),
        (
            "_contrib_BilinearResize2D",
            like,
            vec![vec![2, 2, 3, 4], vec![1, 1, 8, 3]],
        ),
    ];
    for (op, attrs, shapes) in cases {
        let ins: Vec<Input> = shapes.iter().map(|s| random(rng, s)).collect();
        check(op, attrs.clone(), ins.clone());
        let out = &cpu_outputs(op, &attrs, &ins)[0];
        let mut grad_ins = vec![random(rng, &out.0)];
        grad_ins.extend(ins);
        let backward = op
            .replace("_contrib_", "_backward_")
            .replace("Crop", "_backward_Crop");
        check(&backward, attrs, grad_ins);
    }
}

/// An index the CPU kernels refuse (a coordinate outside its axis in gather_nd and the scatters,
/// take's mode raise, a label that is no class, in the cross entropy and SoftmaxOutput) fails the GPU path with the CPU's message, before
/// any kernel runs (it reads the indices back and checks them with the CPU's code).
#[test]
fn indices_the_cpu_refuses_are_refused_on_the_gpu_with_its_message() {
    let lib = kernels().expect("a C++ compiler builds kernels.cu");
    let rt = Runtime::with_engine(EngineKind::Naive);
    let mut rng = StdRng::seed_from_u64(3);
    let coords = (vec![2, 2], vec![0.0, 1.0, 2.0, 5.0]);
    let shape = Attrs::new().with("shape", "(2, 3)");
    let outside = "index 5 (coordinate 1 of position 1) is outside axis 1 of size 3";
    let labels = (vec![2], vec![1.0, 3.0]);
    let no_class = "label 3 is not a class index below 3";
    let cases = [
        (
            "gather_nd",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), coords.clone()],
            outside,
        ),
        (
            "scatter_nd",
            shape.clone(),
            vec![random(&mut rng, &[2]), coords.clone()],
            outside,
        ),
        (
            "_backward_gather_nd",
            shape,
            vec![random(&mut rng, &[2]), coords],
            outside,
        ),
        (
            "take",
            Attrs::new().with("mode", "raise"),
            vec![random(&mut rng, &[4, 3]), (vec![2], vec![0.0, 7.0])],
            "index 7 is outside an axis of length 4 (mode raise)",
        ),
        (
            "softmax_cross_entropy",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), labels.clone()],
            no_class,
        ),
        (
            "_backward_softmax_cross_entropy",
            Attrs::new(),
            vec![
                random(&mut rng, &[1]),
                random(&mut rng, &[2, 3]),
                labels.clone(),
            ],
            no_class,
        ),
        (
            "_backward_SoftmaxOutput",
            Attrs::new(),
            vec![random(&mut rng, &[2, 3]), labels],
            "label 3 of row 1 is not a class in [0, 3)",
        ),
        (
            "ROIPooling",
            roi_pool_attrs(1.0),
            vec![
                random(&mut rng, &[2, 1, 4, 4]),
                (vec![1, 5], vec![2.0, 0.0, 0.0, 1.0, 1.0]),
            ],
            "region 0 names image 2, outside the batch of 2",
        ),
        (
            "_contrib_ROIAlign",
            Attrs::new()
                .with("pooled_size", "(2, 2)")
                .with("spatial_scale", 1.0),
            vec![
                random(&mut rng, &[2, 1, 4, 4]),
                (vec![1, 5], vec![0.5, 0.0, 0.0, 1.0, 1.0]),
            ],
            "region 0 names image 0.5, outside the batch of 2",
        ),
    ];
    for (op, attrs, inputs, want) in cases {
        let ins = arrays(&rt, &inputs);
        let refs: Vec<&NDArray> = ins.iter().collect();
        let cpu = invoke_on(&rt, Context::cpu(0), op, &refs, &attrs, None)
            .and_then(|o| rt.wait_all().map(|_| o))
            .expect_err("the CPU refuses the index");
        let outs: Vec<NDArray> = cpu_shapes(op, &attrs, &inputs)
            .iter()
            .map(|s| rt.empty(s, DType::F32, Context::cpu(0)).expect("output"))
            .collect();
        let def = lookup(op).expect("registered");
        let kernel = kernel_for(def).expect("a GPU kernel");
        let stream = HostStream::new(lib);
        let gpu = run(
            def.name,
            kernel,
            def.alias_safe,
            &attrs,
            &mut ins.iter().map(NDArray::tensor).collect::<Vec<_>>(),
            &outs.iter().map(NDArray::tensor).collect::<Vec<_>>(),
            &stream,
            None,
        )
        .expect_err("the GPU path refuses the index");
        assert!(gpu.contains(want), "{op} on the GPU: {gpu}");
        assert!(cpu.to_string().contains(want), "{op} on the CPU: {cpu}");
        assert!(stream.launched.borrow().is_empty(), "{op} ran kernels");
    }
}

/// The output shapes `op` infers for these inputs.
fn cpu_shapes(op: &str, attrs: &Attrs, inputs: &[Input]) -> Vec<Vec<usize>> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(s, _)| s.clone()).collect();
    let dtypes = vec![DType::F32; inputs.len()];
    (lookup(op).expect("registered").infer)(op, attrs, &shapes, &dtypes)
        .expect("shapes infer")
        .0
}

fn roi_pool_attrs(scale: f64) -> Attrs {
    Attrs::new()
        .with("pooled_size", "(3, 2)")
        .with("spatial_scale", scale)
}

/// ROIPooling (two scales; regions inside, across the border, past the map; ties for the
/// maximum) and ROIAlign (fixed and adaptive sampling, `aligned`, position-sensitive), each
/// forward and through its gradient node.
fn roi_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    let rois = (
        vec![5, 5],
        vec![
            0.0, 0.0, 0.0, 6.0, 5.0, //
            1.0, 2.0, 1.0, 4.0, 7.0, //
            0.0, -3.0, -2.0, 1.0, 1.0, //
            1.0, 5.0, 6.0, 40.0, 40.0, //
            1.0, 1.5, 2.5, 5.5, 3.0,
        ],
    );
    let (shape, mut v) = random(rng, &[2, 3, 8, 7]);
    for v in v.iter_mut() {
        *v = (*v * 3.0).round();
    }
    let data = (shape, v);
    for scale in [1.0, 0.5] {
        let attrs = roi_pool_attrs(scale);
        let ins = vec![data.clone(), rois.clone()];
        check("ROIPooling", attrs.clone(), ins.clone());
        let outs = cpu_outputs("ROIPooling", &attrs, &ins);
        let g = random(rng, &outs[0].0);
        let grad_ins = vec![g, rois.clone(), outs[1].clone(), data.clone()];
        check("_backward_ROIPooling", attrs, grad_ins);
    }
    let align = |pooled: &str, scale: f64| {
        Attrs::new()
            .with("pooled_size", pooled)
            .with("spatial_scale", scale)
    };
    let cases = [
        (align("(2, 3)", 0.5).with("sample_ratio", 2), 3),
        (align("(3, 2)", 1.0).with("aligned", true), 3),
        (align("(2, 2)", 0.7).with("position_sensitive", true), 8),
    ];
    for (attrs, channels) in cases {
        let ins = vec![random(rng, &[2, channels, 6, 5]), rois.clone()];
        check("_contrib_ROIAlign", attrs.clone(), ins.clone());
        let out = &cpu_outputs("_contrib_ROIAlign", &attrs, &ins)[0];
        let grad_ins = vec![random(rng, &out.0), rois.clone(), ins[0].clone()];
        check("_backward_ROIAlign", attrs, grad_ins);
    }
}
