//! GPU-against-CPU cases of the ops that read by index: take, the gather family, pick and
//! friends, sort/topk, resampling and the region ops.

use super::*;

/// take (any axis, clip and wrap) and Embedding, and the table's gradient with repeated,
/// negative and out-of-range indices (rows adding up).
pub(super) fn take_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn gather_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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

/// pick (clipped and wrapped indices, fractional ones, NaN, every axis, kept or not) and its
/// gradient, batch_take, gather_nd and the scatters (negative coordinates, repeated blocks),
/// take in mode raise, softmax_cross_entropy and its gradient; arange.
pub(super) fn index_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn sort_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
pub(super) fn resample_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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

/// The output shapes `op` infers for these inputs.
pub(super) fn cpu_shapes(op: &str, attrs: &Attrs, inputs: &[Input]) -> Vec<Vec<usize>> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(s, _)| s.clone()).collect();
    let dtypes = vec![DType::F32; inputs.len()];
    (lookup(op).expect("registered").infer)(op, attrs, &shapes, &dtypes)
        .expect("shapes infer")
        .0
}

pub(super) fn roi_pool_attrs(scale: f64) -> Attrs {
    Attrs::new()
        .with("pooled_size", "(3, 2)")
        .with("spatial_scale", scale)
}

/// ROIPooling (two scales; regions inside, across the border, past the map; ties for the
/// maximum) and ROIAlign (fixed and adaptive sampling, `aligned`, position-sensitive), each
/// forward and through its gradient node.
pub(super) fn roi_cases(rng: &mut StdRng, check: &mut dyn FnMut(&str, Attrs, Vec<Input>)) {
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
