//! GPU-against-CPU cases of the layer, head, elementwise, reduction, transformer and RNN ops.

use super::*;

/// The ops of a transformer block and the other layers with GPU kernels beyond ResNet's:
/// softmax over any axis, the grouped normalizations, transpose, batch_dot, split / concat,
/// LeakyReLU (prelu too), and Dropout where it copies (its masks are checked in
/// `dropout_masks_hold_the_cpus_values_at_the_rate_asked`).
pub(super) fn transformer_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn reduction_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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

/// The fused RNN against the CPU kernel: every mode, one and two layers, one and two
/// directions, with and without state outputs and per-sample sequence lengths (an empty, a
/// partial and a whole sequence), forward and backward (the backward op from head gradients for
/// every output).
pub(super) fn rnn_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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

pub(super) fn rnn_attrs(mode: &str, hidden: usize, layers: usize, dirs: usize) -> Attrs {
    Attrs::new()
        .with("mode", mode)
        .with("state_size", hidden)
        .with("num_layers", layers)
        .with("bidirectional", dirs == 2)
}

/// Random data `(steps, batch, input)`, parameters, initial state and (LSTM) cell for an RNN.
pub(super) fn rnn_inputs(
    rng: &mut StdRng,
    attrs: &Attrs,
    [steps, batch, input]: [usize; 3],
) -> Vec<Input> {
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

/// The unary functions' domains for the tests: where each is defined and tame.
pub(super) fn unary_domain(op: &str) -> (f32, f32) {
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
pub(super) fn unary_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
    use crate::ops::unary::{Deriv, Unary};
    for m in Unary::ALL {
        let op = m.name();
        let (lo, hi) = unary_domain(op);
        let mut x = random(rng, &[3, 7]);
        x.1.iter_mut()
            .for_each(|v| *v = lo + (*v + 1.0) * 0.5 * (hi - lo));
        check(op, Attrs::new(), vec![x.clone()]);
        let at = match m.deriv() {
            Deriv::OfInput(_) => x.1.clone(),
            Deriv::OfOutput(_) => x.1.iter().map(|&v| m.eval(f64::from(v)) as f32).collect(),
            Deriv::Zero => continue,
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

/// Deconvolution forward and backward (strides, padding, dilation, groups, bias, `adj`,
/// `target_shape`, 1x1 windows that skip im2col, a workspace of one image), and bilinear
/// UpSampling, a depthwise Deconvolution.
pub(super) fn deconv_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn head_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
        .with(crate::ops::gpu::nn::SEED, 7);
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
pub(super) fn elementwise_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn layer_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
