//! Ops refusing what they cannot do, with errors that say what was asked and found: coordinates,
//! regions and windows out of range, counts and sizes past what can exist, whole-number
//! attributes outside their range, and shape inference that sizes nothing by the shapes asked.

use ndarray::{ArrayD, IxDyn};
use ndarray_ops::{invoke, Attrs, DType, NDArray};

mod common;

use common::{close, data, rt, run1};

#[test]
fn coordinate_indexing_matches_plain_loops() {
    let rt = rt();
    let x = data(&[3, 4, 2], 5);
    let xa = rt.from_array(&x, storage::Context::cpu(0)).unwrap();
    // Two coordinates per position, positions (2, 3); -1 and -4 wrap.
    let coords = [
        [0.0, -1.0, 2.0, 1.0, 0.0, 2.0],
        [3.0, 0.0, -4.0, 1.0, 1.0, 2.0],
    ];
    let flat: Vec<f64> = coords.iter().flatten().copied().collect();
    let idx = rt
        .from_vec(flat, &[2, 2, 3], storage::Context::cpu(0))
        .unwrap();
    let at = |p: usize| {
        let w = |v: f64, n: usize| {
            if v < 0.0 {
                (v + n as f64) as usize
            } else {
                v as usize
            }
        };
        (w(coords[0][p], 3), w(coords[1][p], 4))
    };
    let got = run1("gather_nd", &[&xa, &idx], &Attrs::new());
    let want = ArrayD::from_shape_fn(IxDyn(&[2, 3, 2]), |d| {
        let (i, j) = at(d[0] * 3 + d[1]);
        x[[i, j, d[2]]]
    });
    close(&got, &want, "gather_nd");

    // The gradient adds every position's block back: positions 1 and 2 both name (2, 0).
    let g = data(&[2, 3, 2], 9);
    let ga = rt.from_array(&g, storage::Context::cpu(0)).unwrap();
    let got = run1("_backward_gather_nd", &[&ga, &idx, &xa], &Attrs::new());
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[3, 4, 2]));
    for p in 0..6 {
        let (i, j) = at(p);
        for k in 0..2 {
            want[[i, j, k]] += g[[p / 3, p % 3, k]];
        }
    }
    close(&got, &want, "_backward_gather_nd");
    let by_attr = run1(
        "_backward_gather_nd",
        &[&ga, &idx],
        &Attrs::new().with("shape", "(3, 4, 2)"),
    );
    close(&by_attr, &want, "_backward_gather_nd with shape");

    // scatter_nd writes each block (the positions name distinct blocks here).
    let distinct = rt
        .from_vec(
            vec![0.0, -1.0, 2.0, 3.0, 0.0, -3.0],
            &[2, 3],
            storage::Context::cpu(0),
        )
        .unwrap();
    let s = data(&[3, 2], 3);
    let sa = rt.from_array(&s, storage::Context::cpu(0)).unwrap();
    let got = run1(
        "scatter_nd",
        &[&sa, &distinct],
        &Attrs::new().with("shape", "(3, 4, 2)"),
    );
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[3, 4, 2]));
    for (p, (i, j)) in [(0, 3), (2, 0), (2, 1)].into_iter().enumerate() {
        for k in 0..2 {
            want[[i, j, k]] = s[[p, k]];
        }
    }
    close(&got, &want, "scatter_nd");

    // Outside an axis: the op fails when it runs, naming the coordinate.
    let bad = rt
        .from_vec(vec![1.0, 4.0], &[2, 1], storage::Context::cpu(0))
        .unwrap();
    let e = invoke("gather_nd", &[&xa, &bad], &Attrs::new(), None).unwrap()[0]
        .to_vec::<f64>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("index 4") && e.contains("axis 1 of size 4"),
        "{e}"
    );
    // Shapes that do not fit are refused at the call.
    let too_many = rt
        .zeros(&[4, 2], DType::F64, storage::Context::cpu(0))
        .unwrap();
    let e = invoke("gather_nd", &[&xa, &too_many], &Attrs::new(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 to 3 coordinates"), "{e}");
    let e = invoke(
        "scatter_nd",
        &[&xa, &distinct],
        &Attrs::new().with("shape", "(3, 4, 2)"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[3, 2]"), "{e}");

    // batch_take: one lane per row of the last axis, indices clipped into it.
    let a = data(&[2, 3, 4], 8);
    let aa = rt.from_array(&a, storage::Context::cpu(0)).unwrap();
    let picks = [3.0, -2.0, 9.0, 0.0, 2.0, 1.0];
    let pa = rt
        .from_vec(picks.to_vec(), &[6], storage::Context::cpu(0))
        .unwrap();
    let got = run1("batch_take", &[&aa, &pa], &Attrs::new());
    let want = ArrayD::from_shape_fn(IxDyn(&[6]), |d| {
        let r = d[0];
        a[[r / 3, r % 3, (picks[r] as i64).clamp(0, 3) as usize]]
    });
    close(&got, &want, "batch_take");
}

/// The resampling and region ops refuse what they cannot compute, saying what they expected
/// (their values are checked against MXNet in `mxnet_ops.rs`).
#[test]
fn resampling_and_region_ops_refuse_bad_input_clearly() {
    let rt = rt();
    let cpu = storage::Context::cpu(0);
    let x = rt.zeros(&[2, 3, 8, 8], DType::F32, cpu).unwrap();
    let err = |op: &str, ins: &[&NDArray], attrs: Attrs| {
        invoke(op, ins, &attrs, None).unwrap_err().to_string()
    };
    let flat = rt.zeros(&[3, 8, 8], DType::F32, cpu).unwrap();
    let e = err("_contrib_AdaptiveAvgPooling2D", &[&flat], Attrs::new());
    assert!(e.contains("4 dimensions"), "{e}");
    let e = err(
        "_contrib_BilinearResize2D",
        &[&x],
        Attrs::new().with("mode", "like"),
    );
    assert!(e.contains("2 input"), "{e}");
    let e = err(
        "_contrib_BilinearResize2D",
        &[&x],
        Attrs::new().with("mode", "odd_scale"),
    );
    assert!(e.contains("scale_height"), "{e}");
    let e = err(
        "_contrib_BilinearResize2D",
        &[&x],
        Attrs::new().with("mode", "nearest"),
    );
    assert!(e.contains("to_odd_up"), "{e}");
    let rois4 = rt.zeros(&[2, 4], DType::F32, cpu).unwrap();
    let roi_attrs = || {
        Attrs::new()
            .with("pooled_size", "(2, 2)")
            .with("spatial_scale", 0.5)
    };
    let e = err("ROIPooling", &[&x, &rois4], roi_attrs());
    assert!(e.contains("(R, 5)"), "{e}");
    let e = err(
        "_contrib_ROIAlign",
        &[&x, &rois4],
        roi_attrs().with("position_sensitive", true),
    );
    assert!(e.contains("(R, 5)"), "{e}");
    let rois5 = rt.zeros(&[2, 5], DType::F32, cpu).unwrap();
    let e = err(
        "_contrib_ROIAlign",
        &[&x, &rois5],
        roi_attrs().with("position_sensitive", true),
    );
    assert!(
        e.contains("3 channels are not a multiple of the 4 cells"),
        "{e}"
    );
    let e = err(
        "Crop",
        &[&x],
        Attrs::new().with("h_w", "(4, 4)").with("offset", "(5, 0)"),
    );
    assert!(e.contains("does not fit") && e.contains("(8, 8)"), "{e}");
    // What a region op says when its output is read: it fails when it runs.
    let fails_when_read = |op: &str, rois: &NDArray, attrs: Attrs| {
        invoke(op, &[&x, rois], &attrs, None).unwrap()[0]
            .to_vec::<f32>()
            .unwrap_err()
            .to_string()
    };
    // Rows of (image, x1, y1, x2, y2).
    let regions = |rows: Vec<f32>| {
        let n = rows.len() / 5;
        rt.from_vec(rows, &[n, 5], cpu).unwrap()
    };
    // A region naming an image past the batch fails the op when it runs, naming the region.
    let rois = regions(vec![0.0, 0., 0., 4., 4., 2., 1., 1., 3., 3.]);
    let e = fails_when_read("ROIPooling", &rois, roi_attrs());
    assert!(e.contains("region 1 names image 2"), "{e}");
    let e = fails_when_read("_contrib_ROIAlign", &rois, roi_attrs());
    assert!(e.contains("region 1 names image 2"), "{e}");
    // A sampling grid sized by an attribute or by a region far beyond the map is refused, naming
    // the region, instead of being built in memory (it used to abort the process).
    let far = regions(vec![0.0, 0., 0., 4., 4., 1., 0., 0., 1e9, 1e9]);
    let run = |rois: &NDArray, attrs: Attrs| fails_when_read("_contrib_ROIAlign", rois, attrs);
    let e = run(&far, roi_attrs());
    assert!(
        e.contains("region 1 (0, 0, 1000000000, 1000000000)") && e.contains("at most 65536"),
        "{e}"
    );
    let fine = regions(vec![0.0, 0., 0., 4., 4.]);
    let e = run(&fine, roi_attrs().with("spatial_scale", 1e6));
    assert!(
        e.contains("region 0") && e.contains("samples per cell"),
        "{e}"
    );
    let e = run(&fine, roi_attrs().with("sample_ratio", 1e6));
    assert!(
        e.contains("1000000 x 1000000") && e.contains("(sample_ratio 1000000)"),
        "{e}"
    );
    assert!(
        invoke("_contrib_ROIAlign", &[&x, &fine], &roi_attrs(), None).unwrap()[0]
            .to_vec::<f32>()
            .is_ok()
    );
}

/// Attributes that size something on the host (a node's outputs, an RNN's layers) or that are
/// not numbers where a bound is meant are refused when the node is made or bound, naming the
/// attribute; they used to overflow a list's capacity or panic inside a kernel.
#[test]
fn counts_and_bounds_past_what_can_exist_are_refused() {
    let rt = rt();
    let cpu = storage::Context::cpu(0);
    let x = rt.zeros(&[4, 6], DType::F32, cpu).unwrap();
    let v = ndarray_ops::Symbol::var("x");
    for n in ["99999999999999999999", "65537", "0", "2.5", "nan"] {
        let attrs = Attrs::new().with("num_outputs", n);
        let e = ndarray_ops::Symbol::op("SliceChannel", "split", &[&v], attrs)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("num_outputs") && e.contains("from 1 to 65536"),
            "{n}: {e}"
        );
    }
    let split = Attrs::new().with("num_outputs", 2);
    assert_eq!(
        invoke("SliceChannel", &[&x], &split, None).unwrap().len(),
        2
    );
    for (lo, hi) in [("nan", "1"), ("0", "nan")] {
        let attrs = Attrs::new().with("a_min", lo).with("a_max", hi);
        let e = invoke("clip", &[&x], &attrs, None).unwrap_err().to_string();
        assert!(e.contains("must both be numbers"), "{lo} {hi}: {e}");
    }
    let seq = rt.zeros(&[3, 2, 4], DType::F32, cpu).unwrap();
    let params = rt.zeros(&[10], DType::F32, cpu).unwrap();
    let state = rt.zeros(&[1, 2, 4], DType::F32, cpu).unwrap();
    let rnn = |layers: &str, hidden: &str| {
        let attrs = Attrs::new()
            .with("mode", "rnn_tanh")
            .with("num_layers", layers)
            .with("state_size", hidden);
        invoke("RNN", &[&seq, &params, &state], &attrs, None)
            .unwrap_err()
            .to_string()
    };
    let e = rnn("99999999999999999999", "4");
    assert!(
        e.contains("num_layers") && e.contains("from 1 to 4294967295"),
        "{e}"
    );
    let e = rnn("4294967295", "4294967295");
    assert!(e.contains("more parameters than fit"), "{e}");
}

/// Shape inference of one `op` node over variables of `shapes` with `attrs`: what binding a
/// graph does before anything runs.
fn infer_one(op: &str, shapes: &[&[usize]], attrs: Attrs) -> Result<Vec<Vec<usize>>, String> {
    use std::collections::HashMap;
    let vars: Vec<_> = (0..shapes.len())
        .map(|i| ndarray_ops::Symbol::var(&format!("in{i}")))
        .collect();
    let known: HashMap<String, Vec<usize>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("in{i}"), s.to_vec()))
        .collect();
    let sym = ndarray_ops::Symbol::op(op, "node", &vars.iter().collect::<Vec<_>>(), attrs)
        .map_err(|e| e.to_string())?;
    let inferred =
        ndarray_ops::symbol::infer(&sym, &known, &HashMap::new()).map_err(|e| e.to_string())?;
    Ok(inferred.output_shapes())
}

#[test]
fn whole_number_attributes_are_refused_at_bind_outside_their_range() {
    // (op, input shapes, other attributes, the attribute, a good value and the output shape
    // it gives, values that are no whole number in the attribute's range).
    type Case<'a> = (
        &'a str,
        &'a [&'a [usize]],
        Attrs,
        &'a str,
        (&'a str, Vec<usize>),
        &'a [&'a str],
    );
    let conv = || Attrs::new().with("kernel", "(3, 3)");
    let cases: Vec<Case> = vec![
        (
            "FullyConnected",
            &[&[2, 3], &[4, 3], &[4]],
            Attrs::new(),
            "num_hidden",
            ("4", vec![2, 4]),
            &["0", "-1", "2.5", "nan", "1e20", "four"],
        ),
        (
            "Convolution",
            &[&[1, 2, 5, 5], &[4, 2, 3, 3], &[4]],
            conv(),
            "num_filter",
            ("4", vec![1, 4, 3, 3]),
            &["0", "-4", "4.5", "inf", "4294967296"],
        ),
        (
            "Convolution",
            &[&[1, 2, 5, 5], &[4, 1, 3, 3], &[4]],
            conv().with("num_filter", 4),
            "num_group",
            ("2", vec![1, 4, 3, 3]),
            &["0", "1.5", "-2"],
        ),
        (
            "Embedding",
            &[&[3], &[5, 2]],
            Attrs::new().with("output_dim", 2),
            "input_dim",
            ("5", vec![3, 2]),
            &["-5", "nan", "5.5", "3000000000"],
        ),
        (
            "one_hot",
            &[&[3]],
            Attrs::new(),
            "depth",
            ("4", vec![3, 4]),
            &["-1", "2.5", "1e20"],
        ),
        (
            "repeat",
            &[&[2, 3]],
            Attrs::new().with("axis", 1),
            "repeats",
            ("2", vec![2, 6]),
            &["-1", "0.5", "nan"],
        ),
        (
            "GroupNorm",
            &[&[2, 4, 3], &[2], &[2]],
            Attrs::new(),
            "num_groups",
            ("2", vec![2, 4, 3]),
            &["0", "2.5", "-2"],
        ),
        (
            "depth_to_space",
            &[&[1, 8, 2, 2]],
            Attrs::new(),
            "block_size",
            ("2", vec![1, 2, 4, 4]),
            &["0", "1.5", "-2"],
        ),
        (
            "topk",
            &[&[2, 5]],
            Attrs::new().with("ret_typ", "value"),
            "k",
            ("3", vec![2, 3]),
            &["2.5", "nan", "1e10"],
        ),
        (
            "_arange",
            &[],
            Attrs::new().with("start", 0).with("stop", 3),
            "repeat",
            ("2", vec![6]),
            &["0", "1.5", "-1"],
        ),
    ];
    for (op, shapes, attrs, key, (good, want), bad) in cases {
        let out = infer_one(op, shapes, attrs.clone().with(key, good))
            .unwrap_or_else(|e| panic!("{op} {key}={good}: {e}"));
        assert_eq!(out[0], want, "{op} {key}={good}");
        for &v in bad {
            let e = infer_one(op, shapes, attrs.clone().with(key, v))
                .err()
                .unwrap_or_else(|| panic!("{op} {key}={v} was accepted"));
            assert!(
                e.contains(&format!(
                    "attribute {key}=\"{v}\" is not a whole number from"
                )),
                "{op} {key}={v}: {e}"
            );
        }
    }
    // Attributes the kernels read are read at bind too, so a bad one fails there.
    let bn: &[&[usize]] = &[&[2, 3], &[3], &[3], &[3], &[3]];
    type BadAtBind<'a> = (&'a str, &'a [&'a [usize]], Attrs, &'a str, &'a str);
    let bad_at_bind: [BadAtBind; 4] = [
        ("BatchNorm", bn, Attrs::new(), "fix_gamma", "maybe"),
        ("BatchNorm", bn, Attrs::new(), "use_global_stats", "2"),
        (
            "one_hot",
            &[&[3]],
            Attrs::new().with("depth", 4),
            "on_value",
            "high",
        ),
        (
            "_contrib_BilinearResize2D",
            &[&[1, 1, 2, 2]],
            Attrs::new().with("height", 4).with("width", 4),
            "align_corners",
            "yes",
        ),
    ];
    for (op, shapes, attrs, key, v) in bad_at_bind {
        infer_one(op, shapes, attrs.clone()).unwrap_or_else(|e| panic!("{op}: {e}"));
        let e = infer_one(op, shapes, attrs.with(key, v))
            .err()
            .unwrap_or_else(|| panic!("{op} {key}={v} was accepted"));
        assert!(e.contains(&format!("attribute {key}=\"{v}\"")), "{op}: {e}");
    }
    // arange's length is bounded before it is multiplied out.
    let e = infer_one(
        "_arange",
        &[],
        Attrs::new()
            .with("start", 0)
            .with("stop", 1e15)
            .with("repeat", 1000),
    )
    .unwrap_err();
    assert!(e.contains("more than 2^48 elements"), "{e}");
    let e = infer_one(
        "_arange",
        &[],
        Attrs::new().with("start", 0).with("stop", "inf"),
    )
    .unwrap_err();
    assert!(e.contains("must be finite"), "{e}");
}

#[test]
fn shape_inference_of_gather_ops_allocates_nothing_sized_by_the_shapes() {
    // A kernel walks a gather through per-axis index lists; inference only checks. Building
    // those lists for a 2^40-long axis at bind would take 16 TB and abort the process.
    let long = 1usize << 40;
    let cases: [(&str, &[usize], Attrs, Vec<usize>); 4] = [
        (
            "tile",
            &[long],
            Attrs::new().with("reps", "(1,)"),
            vec![long],
        ),
        (
            "broadcast_to",
            &[1],
            Attrs::new().with("shape", format!("({long},)")),
            vec![long],
        ),
        (
            "reverse",
            &[long, 2],
            Attrs::new().with("axis", 0),
            vec![long, 2],
        ),
        (
            "Pad",
            &[1, 1, long, 2],
            Attrs::new()
                .with("mode", "edge")
                .with("pad_width", "(0,0,0,0,1,1,1,1)"),
            vec![1, 1, long + 2, 4],
        ),
    ];
    for (op, x, attrs, want) in cases {
        let out = infer_one(op, &[x], attrs).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(out[0], want, "{op}");
    }
    // What the walks used to catch at bind is still caught there.
    let e = infer_one(
        "broadcast_to",
        &[&[2, 3]],
        Attrs::new().with("shape", "(4, 3)"),
    )
    .unwrap_err();
    assert!(e.contains("size 1 or 4 along axis 0"), "{e}");
}

#[test]
fn window_and_size_arithmetic_past_what_can_exist_is_refused_not_wrapped() {
    // Each of these once wrapped around 2^64 in a release build, into a shape that could be
    // small enough to pass every later check.
    let max = i64::MAX;
    let conv = Attrs::new().with("kernel", "(1, 1)").with("num_filter", 1);
    let cases: [(&str, &[&[usize]], Attrs, &str); 6] = [
        (
            "Convolution",
            &[&[1, 1, 4, 4], &[1, 1, 1, 1], &[1]],
            conv.clone().with("pad", format!("({max}, {max})")),
            "outside 0 to 2147483647",
        ),
        (
            "Deconvolution",
            &[&[1, 1, 1 << 40, 1], &[1, 1, 1, 1]],
            conv.clone().with("stride", "(2147483647, 1)"),
            "past 2^48",
        ),
        (
            "tile",
            &[&[1 << 40]],
            Attrs::new().with("reps", "(2147483647,)"),
            "past 2^48",
        ),
        (
            "Pad",
            &[&[1, 1, 2, 2]],
            Attrs::new()
                .with("mode", "constant")
                .with("pad_width", format!("(0,0,0,0,{max},{max},0,0)")),
            "outside 0 to 2147483647",
        ),
        (
            "Crop",
            &[&[1, 1, 4, 4]],
            Attrs::new()
                .with("h_w", "(2, 2)")
                .with("offset", format!("({max}, {max})")),
            "outside",
        ),
        (
            "Reshape",
            &[&[4]],
            Attrs::new().with("shape", "(-4, 4294967296, 4294967296)"),
            "cannot split",
        ),
    ];
    for (op, shapes, attrs, want) in cases {
        let e = infer_one(op, shapes, attrs.clone())
            .err()
            .unwrap_or_else(|| panic!("{op} {attrs:?} was accepted"));
        assert!(e.contains(want), "{op}: {e}");
    }
    // An empty array reshaped to sizes whose product wraps to 0.
    let rt = rt();
    let empty = rt
        .zeros(&[0], DType::F32, storage::Context::cpu(0))
        .unwrap();
    let attrs = Attrs::new().with("shape", "(4294967296, 4294967296)");
    let e = invoke("Reshape", &[&empty], &attrs, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 2^48 elements"), "{e}");
}

/// An attribute is checked against the op's signature even where the op's own code does not
/// read it: a value of the wrong type, or one outside its choices, is refused naming the op and
/// the attribute instead of being ignored.
#[test]
fn attribute_values_are_checked_against_the_signature() {
    let rt = rt();
    let x = rt
        .zeros(&[1, 2, 5, 5], DType::F32, storage::Context::cpu(0))
        .unwrap();
    let w = rt
        .zeros(&[3, 2, 3, 3], DType::F32, storage::Context::cpu(0))
        .unwrap();
    let conv = Attrs::new()
        .with("kernel", "(3, 3)")
        .with("num_filter", 3)
        .with("no_bias", "true");
    assert!(invoke("Convolution", &[&x, &w], &conv, None).is_ok());
    for (key, value, want) in [
        (
            "cudnn_tune",
            "fastest2",
            "not one of fastest, limited_workspace, off, None",
        ),
        ("cudnn_off", "perhaps", "not a boolean"),
        ("workspace", "lots", "not a number"),
    ] {
        let e = invoke(
            "Convolution",
            &[&x, &w],
            &conv.clone().with(key, value),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("Convolution") && e.contains(key) && e.contains(want),
            "{e}"
        );
    }
}
