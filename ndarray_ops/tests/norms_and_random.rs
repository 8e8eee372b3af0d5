//! BatchNorm and the norms (training and inference, parameter gradients summed across threads),
//! random ops and dropout reproducible per seed on every engine, LeakyReLU, stack, fill and where, and attributes the
//! kernels do not implement refused rather than ignored.

use std::sync::Arc;

use engine::{EngineBuilder, EngineKind};
use ndarray::{ArrayD, Axis, IxDyn};
use ndarray_ops::ops::IS_TRAIN;
use ndarray_ops::{invoke, invoke_on, Attrs, DType, Runtime, Symbol};
use storage::{Context, StorageConfig};

mod common;

use common::{close, large, nd, rt, run_all, wave};

#[test]
fn batchnorm_trains_and_infers() {
    let rt = rt();
    // The second shape is large enough that BatchNorm splits its channels across threads.
    for shape in [[4, 3, 2, 2], large([2, 8, 64, 62], [2, 4, 3, 3])] {
        let c = shape[1];
        let x = wave(&shape, 10);
        let (gamma, beta) = (wave(&[c], 11), wave(&[c], 12));
        let (mm0, mv0) = (
            ArrayD::<f64>::zeros(IxDyn(&[c])),
            ArrayD::<f64>::ones(IxDyn(&[c])),
        );
        let (mm, mv) = (nd(&rt, &mm0), nd(&rt, &mv0));
        let attrs = Attrs::new()
            .with("eps", 1e-5)
            .with("momentum", 0.8)
            .with("fix_gamma", false);
        let train = attrs.clone().with(IS_TRAIN, true);
        let outs = run_all(
            "BatchNorm",
            &[&nd(&rt, &x), &nd(&rt, &gamma), &nd(&rt, &beta), &mm, &mv],
            &train,
        );
        // MXNet holds `momentum` as a float: 0.8 blends as 0.8f.
        let m = f64::from(0.8f32);
        let mut want = x.clone();
        for c in 0..c {
            let lane = x.index_axis(Axis(1), c);
            let mean = lane.mean().unwrap();
            let var = lane.mapv(|v| (v - mean).powi(2)).mean().unwrap();
            want.index_axis_mut(Axis(1), c)
                .mapv_inplace(|v| (v - mean) / (var + 1e-5).sqrt() * gamma[[c]] + beta[[c]]);
            assert!((outs[1][[c]] - mean).abs() < 1e-12 && (outs[2][[c]] - var).abs() < 1e-12);
            assert!(
                (mm.to_vec::<f64>().unwrap()[c] - (1.0 - m) * mean).abs() < 1e-12,
                "moving mean updated in place"
            );
            assert!(
                (mv.to_vec::<f64>().unwrap()[c] - (m + (1.0 - m) * var)).abs() < 1e-12,
                "moving var updated in place"
            );
        }
        close(&outs[0], &want, "BatchNorm train");
        // Inference uses (and leaves) the moving statistics.
        let before = mm.to_vec::<f64>().unwrap();
        let inf = run_all(
            "BatchNorm",
            &[&nd(&rt, &x), &nd(&rt, &gamma), &nd(&rt, &beta), &mm, &mv],
            &attrs,
        );
        assert_eq!(mm.to_vec::<f64>().unwrap(), before);
        let (m, v) = (before, mv.to_vec::<f64>().unwrap());
        let mut want = x.clone();
        for c in 0..c {
            want.index_axis_mut(Axis(1), c)
                .mapv_inplace(|val| (val - m[c]) / (v[c] + 1e-5).sqrt() * gamma[[c]] + beta[[c]]);
        }
        close(&inf[0], &want, "BatchNorm inference");
    }
    let x = wave(&[4, 3, 2, 2], 10);
    let (gamma, mm, mv) = (wave(&[3], 11), wave(&[3], 13), wave(&[3], 14));
    let (mm, mv) = (nd(&rt, &mm), nd(&rt, &mv));
    let attrs = Attrs::new();
    let e = invoke(
        "BatchNorm",
        &[
            &nd(&rt, &x),
            &nd(&rt, &gamma),
            &nd(&rt, &wave(&[4], 1)),
            &mm,
            &mv,
        ],
        &attrs,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("beta"), "{e}");
}

/// Gamma's and beta's gradients of the affine norms, over shapes whose parameter sums split
/// across threads (by position for LayerNorm, by group for InstanceNorm and GroupNorm), against
/// the sums over the elements each entry scales: `sum og * (x - mean) / std` and `sum og`.
#[test]
fn norm_parameter_gradients_match_their_sums_across_threads() {
    let rt = rt();
    /// An op, its attrs, its data shape, the data as (outer, len, inner) groups and gamma's
    /// entry of the element at (outer o, position k).
    type Case = (
        &'static str,
        Attrs,
        [usize; 4],
        [usize; 3],
        fn(usize, usize) -> usize,
    );
    let cases: [Case; 4] = [
        (
            "LayerNorm",
            Attrs::new(),
            large([4, 8, 8, 160], [1, 2, 3, 5]),
            large([256, 160, 1], [6, 5, 1]),
            |_, k| k,
        ),
        (
            "LayerNorm",
            Attrs::new().with("axis", 1),
            large([16, 64, 8, 5], [2, 6, 2, 3]),
            large([16, 64, 40], [2, 6, 6]),
            |_, k| k,
        ),
        (
            "InstanceNorm",
            Attrs::new(),
            large([4, 16, 32, 32], [2, 3, 4, 5]),
            large([64, 1024, 1], [6, 20, 1]),
            |o, _| o % large([16], [3])[0],
        ),
        (
            "GroupNorm",
            Attrs::new().with("num_groups", 4),
            large([8, 8, 32, 32], [2, 4, 3, 5]),
            large([32, 2048, 1], [8, 15, 1]),
            |o, _| o % 4,
        ),
    ];
    for (op, attrs, shape, [outer, len, inner], entry) in cases {
        let scales = (0..outer)
            .flat_map(|o| (0..len).map(move |k| entry(o, k)))
            .max()
            .unwrap()
            + 1;
        let (x, og) = (wave(&shape, 30), wave(&shape, 31));
        let (gamma, beta) = (wave(&[scales], 32), wave(&[scales], 33));
        let (xn, gn) = (nd(&rt, &x), nd(&rt, &gamma));
        let fwd = run_all(op, &[&xn, &gn, &nd(&rt, &beta)], &attrs);
        let (mean, std) = (&fwd[1], &fwd[2]);
        let grads = run_all(
            &format!("_backward_{op}"),
            &[&nd(&rt, &og), &xn, &gn, &nd(&rt, mean), &nd(&rt, std)],
            &attrs,
        );
        let (xs, ogs) = (x.as_slice().unwrap(), og.as_slice().unwrap());
        let (means, stds) = (mean.as_slice().unwrap(), std.as_slice().unwrap());
        let (mut dgamma, mut dbeta) = (vec![0.0; scales], vec![0.0; scales]);
        for o in 0..outer {
            for k in 0..len {
                for i in 0..inner {
                    let (at, g) = ((o * len + k) * inner + i, o * inner + i);
                    dgamma[entry(o, k)] += ogs[at] * (xs[at] - means[g]) / stds[g];
                    dbeta[entry(o, k)] += ogs[at];
                }
            }
        }
        let what = format!("{op} {attrs:?} over {shape:?}");
        close(
            &grads[1],
            &ArrayD::from_shape_vec(IxDyn(&[scales]), dgamma).unwrap(),
            &format!("{what}: gamma"),
        );
        close(
            &grads[2],
            &ArrayD::from_shape_vec(IxDyn(&[scales]), dbeta).unwrap(),
            &format!("{what}: beta"),
        );
    }
}

fn seeded(kind: EngineKind) -> Arc<Runtime> {
    let rt = Runtime::new(
        EngineBuilder::new(kind).cpu_workers(2).build(),
        StorageConfig::default(),
    );
    rt.seed(1234).unwrap();
    rt
}

#[test]
fn random_ops_and_dropout_are_reproducible_per_seed_on_every_engine() {
    let mut runs = Vec::new();
    for kind in EngineKind::ALL {
        let rt = seeded(kind);
        let ctx = Context::cpu(0);
        let u = invoke_on(
            &rt,
            ctx,
            "_random_uniform",
            &[],
            &Attrs::new()
                .with("low", -2)
                .with("high", 3)
                .with("shape", "(1000,)"),
            None,
        )
        .unwrap()
        .remove(0);
        let n = invoke_on(
            &rt,
            ctx,
            "normal",
            &[],
            &Attrs::new()
                .with("loc", 1)
                .with("scale", 2)
                .with("shape", "(100, 100)")
                .with("dtype", "float64"),
            None,
        )
        .unwrap()
        .remove(0);
        let x = rt.ones(&[2000], DType::F32, ctx).unwrap();
        let d = invoke(
            "Dropout",
            &[&x],
            &Attrs::new().with("p", 0.25).with(IS_TRAIN, 1),
            None,
        )
        .unwrap();
        let uv = u.to_vec::<f32>().unwrap();
        assert!(uv.iter().all(|&v| (-2.0..3.0).contains(&v)));
        let nv = n.to_vec::<f64>().unwrap();
        let mean = nv.iter().sum::<f64>() / nv.len() as f64;
        let sd = (nv.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / nv.len() as f64).sqrt();
        assert!(
            (mean - 1.0).abs() < 0.1 && (sd - 2.0).abs() < 0.1,
            "normal: mean {mean}, sd {sd}"
        );
        let dv = d[0].to_vec::<f32>().unwrap();
        let dropped = dv.iter().filter(|&&v| v == 0.0).count() as f64 / dv.len() as f64;
        assert!((dropped - 0.25).abs() < 0.05, "dropped {dropped}");
        assert!(dv
            .iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        // Outside training, dropout is the identity.
        let id = invoke("Dropout", &[&x], &Attrs::new().with("p", 0.25), None).unwrap();
        assert_eq!(id[0].to_vec::<f32>().unwrap(), vec![1.0; 2000]);
        runs.push((uv, nv, dv));
    }
    assert!(
        runs.windows(2).all(|w| w[0] == w[1]),
        "same seed, different numbers across engines"
    );
    // Another seed gives other numbers.
    let rt = seeded(EngineKind::Naive);
    rt.seed(99).unwrap();
    let u = invoke_on(
        &rt,
        Context::cpu(0),
        "uniform",
        &[],
        &Attrs::new()
            .with("shape", "(1000,)")
            .with("low", -2)
            .with("high", 3),
        None,
    )
    .unwrap()
    .remove(0);
    assert_ne!(u.to_vec::<f32>().unwrap(), runs[0].0);
    let e = invoke_on(
        &rt,
        Context::cpu(0),
        "uniform",
        &[],
        &Attrs::new()
            .with("low", 2)
            .with("high", 1)
            .with("shape", "(3,)"),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("above"), "{e}");
}

#[test]
fn leaky_relu_stack_fill_where() {
    let rt = rt();
    let a = wave(&[3, 4], 21);
    let na = nd(&rt, &a);
    close(
        &run_all("LeakyReLU", &[&na], &Attrs::new().with("slope", 0.1))[0],
        // MXNet holds the slope as a float: 0.1 is 0.1f.
        &a.mapv(|x| if x > 0.0 { x } else { f64::from(0.1f32) * x }),
        "leaky",
    );
    close(
        &run_all(
            "LeakyReLU",
            &[&na],
            &Attrs::new().with("act_type", "elu").with("slope", 0.5),
        )[0],
        &a.mapv(|x| if x > 0.0 { x } else { 0.5 * (x.exp() - 1.0) }),
        "elu",
    );
    let b = wave(&[3, 4], 22);
    for axis in [0usize, 1, 2] {
        let got = &run_all(
            "stack",
            &[&na, &nd(&rt, &b)],
            &Attrs::new().with("axis", axis),
        )[0];
        let want = ndarray::stack(Axis(axis), &[a.view(), b.view()]).unwrap();
        close(got, &want, &format!("stack axis {axis}"));
    }
    let z = invoke_on(
        &rt,
        Context::cpu(0),
        "_zeros",
        &[],
        &Attrs::new().with("shape", "(2, 3)").with("dtype", "int32"),
        None,
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        (z.shape(), z.to_vec::<i32>().unwrap()),
        (&[2usize, 3][..], vec![0; 6])
    );
    let o = invoke_on(
        &rt,
        Context::cpu(0),
        "ones",
        &[],
        &Attrs::new().with("shape", "(4,)"),
        None,
    )
    .unwrap()
    .remove(0);
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.0; 4]);
    let cond = rt
        .from_vec(
            vec![
                1.0f64, 0.0, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0,
            ],
            &[3, 4],
            Context::cpu(0),
        )
        .unwrap();
    let got = &run_all("where", &[&cond, &na, &nd(&rt, &b)], &Attrs::new())[0];
    let c = cond.to_vec::<f64>().unwrap();
    let want = ArrayD::from_shape_vec(
        IxDyn(&[3, 4]),
        (0..12)
            .map(|i| {
                if c[i] != 0.0 {
                    a.as_slice().unwrap()[i]
                } else {
                    b.as_slice().unwrap()[i]
                }
            })
            .collect(),
    )
    .unwrap();
    close(got, &want, "where");
    let rowc = rt
        .from_vec(vec![0.0f64, 1.0, 0.0], &[3], Context::cpu(0))
        .unwrap();
    let got = &run_all("where", &[&rowc, &na, &nd(&rt, &b)], &Attrs::new())[0];
    close(
        &got.index_axis(Axis(0), 1).to_owned(),
        &a.index_axis(Axis(0), 1).to_owned(),
        "where by row",
    );
    close(
        &got.index_axis(Axis(0), 0).to_owned(),
        &b.index_axis(Axis(0), 0).to_owned(),
        "where by row",
    );
    assert!(invoke(
        "where",
        &[&na, &na, &nd(&rt, &wave(&[2, 2], 1))],
        &Attrs::new(),
        None
    )
    .is_err());
}

/// Attributes the kernels do not implement are refused with a message, never ignored: an NHWC
/// layout would otherwise be read as NCHW, and SoftmaxOutput's multi_output as one label per row.
#[test]
fn unimplemented_attributes_are_refused_not_ignored() {
    let rt = rt();
    let x = nd(&rt, &wave(&[1, 2, 4, 4], 40));
    let w = nd(&rt, &wave(&[3, 2, 3, 3], 41));
    let conv = Attrs::new()
        .with("kernel", "(3,3)")
        .with("num_filter", 3)
        .with("no_bias", true);
    assert!(invoke("Convolution", &[&x, &w], &conv, None).is_ok());
    let e = invoke("Convolution", &[&x, &w], &conv.with("layout", "NHWC"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("layout \"NHWC\" is not supported"), "{e}");
    let pool = Attrs::new().with("kernel", "(2,2)").with("layout", "NHWC");
    assert!(invoke("Pooling", &[&x], &pool, None).is_err());
    // A misspelt attribute is refused, with the ones the op takes, imperatively and in a symbol.
    let typo = Attrs::new()
        .with("kernal", "(3,3)")
        .with("num_filter", 3)
        .with("no_bias", true);
    let e = invoke("Convolution", &[&x, &w], &typo, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown attribute \"kernal\"") && e.contains("takes kernel, stride"),
        "{e}"
    );
    let vars = [Symbol::var("x"), Symbol::var("w")];
    let e = Symbol::op("Convolution", "c0", &[&vars[0], &vars[1]], typo)
        .unwrap_err()
        .to_string();
    assert!(e.contains("node 'c0'") && e.contains("kernal"), "{e}");
    let reshape = Attrs::new().with("target_shape", "(2, 16)");
    assert!(invoke("Reshape", &[&x], &reshape, None).is_err());
    let dropout = Attrs::new().with("p", 0.3).with("axes", "(2, 3)");
    let e = invoke("Dropout", &[&x], &dropout, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("axes") && e.contains("not supported"), "{e}");
    let (scores, label) = (nd(&rt, &wave(&[4, 5], 42)), nd(&rt, &wave(&[4], 43)));
    for (key, value) in [("multi_output", "True"), ("smooth_alpha", "0.1")] {
        let attrs = Attrs::new().with(key, value);
        let e = invoke("SoftmaxOutput", &[&scores, &label], &attrs, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains("not supported"), "{e}");
    }
}
