//! The GPU op layer and kernels, run on the host emulator, against the CPU kernels: same inputs,
//! same attributes, every output (hidden ones too) and every mutated input compared.

use std::collections::BTreeSet;
use std::sync::Arc;

use engine::EngineKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

use super::emulate::{kernels, HostStream};
use super::ops::{check as gpu_check, run};
use crate::ops::{lookup, Attrs, IS_TRAIN};
use crate::resources::StateSlot;
use crate::{invoke, invoke_on};
use crate::{DType, NDArray, Runtime};

mod cases_index;
mod cases_nn;
mod training;

use cases_index::*;
use cases_nn::*;

/// An input: its shape and values.
pub(super) type Input = (Vec<usize>, Vec<f32>);

pub(super) fn random(rng: &mut StdRng, shape: &[usize]) -> Input {
    let n = shape.iter().product();
    (
        shape.to_vec(),
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect(),
    )
}

pub(super) fn labels(rng: &mut StdRng, n: usize, classes: usize) -> Input {
    (
        vec![n],
        (0..n).map(|_| rng.gen_range(0..classes) as f32).collect(),
    )
}

pub(super) fn arrays(rt: &Arc<Runtime>, inputs: &[Input]) -> Vec<NDArray> {
    inputs
        .iter()
        .map(|(s, v)| rt.from_vec(v.clone(), s, Context::cpu(0)).expect("input"))
        .collect()
}

pub(super) fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
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
pub(super) struct Emulated {
    outs: Vec<Vec<f32>>,
    ins: Vec<Vec<f32>>,
    launched: Vec<&'static str>,
    downloads: usize,
}

/// Runs `op` on the emulated GPU path, with the bound node's kept state where given. Outputs
/// start as NaN, so anything the path leaves unwritten shows.
pub(super) fn emulate(
    op: &str,
    attrs: &Attrs,
    inputs: &[Input],
    state: Option<&mut StateSlot>,
) -> Result<Emulated, String> {
    let lib = kernels().expect("a C++ compiler builds the kernels");
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
    let kernel = def.gpu.unwrap_or_else(|| panic!("{op} has no GPU kernel"));
    let stream = HostStream::new(lib);
    run(
        def,
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
pub(super) fn check(op: &str, attrs: &Attrs, inputs: &[Input], tol: f32) -> Vec<&'static str> {
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
pub(super) fn cpu_outputs(op: &str, attrs: &Attrs, ins: &[Input]) -> Vec<Input> {
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
pub(super) fn broadcasts_the_kernel_cannot_walk_are_refused_clearly() {
    // Six dims that alternate which side broadcasts cannot merge into the kernel's four.
    let lib = kernels().expect("a C++ compiler builds the kernels");
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
        def,
        def.gpu.expect("a GPU kernel"),
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

pub(super) fn conv_attrs(
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
pub(super) fn every_gpu_op_matches_its_cpu_kernel() {
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

    let unused: Vec<_> = super::args::kernel_names()
        .filter(|k| !launched.contains(k))
        .collect();
    assert!(unused.is_empty(), "kernels no case launched: {unused:?}");
}
