//! Neural-network ops and optimizer updates against plain `ndarray` computations.

use std::sync::Arc;

use engine::EngineKind;
use ndarray::{Array2, ArrayD, Axis, IxDyn};
use ndarray_ops::{invoke, Attrs, DType, NDArray, Runtime};
use storage::Context;

fn rt() -> Arc<Runtime> {
    Runtime::with_engine(EngineKind::ThreadedPerDevice)
}

fn data(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as f64 + 1.0) * 0.731 + seed as f64 * 1.37).sin() * 2.0)
        .collect();
    ArrayD::from_shape_vec(IxDyn(shape), v).unwrap()
}

fn nd(rt: &Arc<Runtime>, a: &ArrayD<f64>) -> NDArray {
    rt.from_array(a, Context::cpu(0)).unwrap()
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-9 * (1.0 + w.abs()),
            "{what}: got {g}, want {w}"
        );
    }
}

fn run(name: &str, inputs: &[&NDArray], attrs: &Attrs) -> ArrayD<f64> {
    invoke(name, inputs, attrs, None).unwrap()[0]
        .to_ndarray()
        .unwrap()
}

#[test]
fn activations_and_clip() {
    let rt = rt();
    let a = data(&[4, 5], 1);
    let na = nd(&rt, &a);
    for (act, f) in [
        ("relu", (|x: f64| x.max(0.0)) as fn(f64) -> f64),
        ("sigmoid", |x| 1.0 / (1.0 + (-x).exp())),
        ("tanh", f64::tanh),
        ("softrelu", |x| (1.0 + x.exp()).ln()),
        ("softsign", |x| x / (1.0 + x.abs())),
    ] {
        close(
            &run("Activation", &[&na], &Attrs::new().with("act_type", act)),
            &a.mapv(f),
            act,
        );
    }
    let e = invoke(
        "Activation",
        &[&na],
        &Attrs::new().with("act_type", "swish"),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("swish"), "{e}");
    close(
        &run(
            "clip",
            &[&na],
            &Attrs::new().with("a_min", -0.5).with("a_max", 1),
        ),
        &a.mapv(|x| x.clamp(-0.5, 1.0)),
        "clip",
    );
}

#[test]
fn softmax_family() {
    let rt = rt();
    let a = data(&[3, 4, 5], 2);
    let na = nd(&rt, &a);
    for axis in [-1i64, 0, 1] {
        let ax = if axis < 0 { 2 } else { axis as usize };
        let mut want = a.clone();
        for mut lane in want.lanes_mut(Axis(ax)) {
            let m = lane.fold(f64::NEG_INFINITY, |m, x| m.max(*x));
            let z: f64 = lane.iter().map(|x| (x - m).exp()).sum();
            lane.mapv_inplace(|x| (x - m).exp() / z);
        }
        let attrs = Attrs::new().with("axis", axis);
        close(
            &run("softmax", &[&na], &attrs),
            &want,
            &format!("softmax axis {axis}"),
        );
        close(
            &run("log_softmax", &[&na], &attrs),
            &want.mapv(f64::ln),
            &format!("log_softmax axis {axis}"),
        );
    }
    let x = data(&[6, 3], 3);
    let label = rt
        .from_vec(vec![0.0f64, 1.0, 2.0, 0.0, 1.0, 2.0], &[6], Context::cpu(0))
        .unwrap();
    let so = run("SoftmaxOutput", &[&nd(&rt, &x), &label], &Attrs::new());
    let sm = run("softmax", &[&nd(&rt, &x)], &Attrs::new().with("axis", 1));
    close(&so, &sm, "SoftmaxOutput forward");
    let bad = rt.zeros(&[5], DType::F64, Context::cpu(0)).unwrap();
    assert!(invoke("SoftmaxOutput", &[&nd(&rt, &x), &bad], &Attrs::new(), None).is_err());
}

#[test]
fn fully_connected() {
    let rt = rt();
    let x = data(&[4, 2, 3], 4);
    let w = data(&[5, 6], 5);
    let b = data(&[5], 6);
    let x2: Array2<f64> = x.clone().into_shape_with_order((4, 6)).unwrap();
    let w2: Array2<f64> = w.clone().into_dimensionality().unwrap();
    let want =
        (x2.dot(&w2.t()) + &b.clone().into_dimensionality::<ndarray::Ix1>().unwrap()).into_dyn();
    let attrs = Attrs::new().with("num_hidden", 5);
    close(
        &run(
            "FullyConnected",
            &[&nd(&rt, &x), &nd(&rt, &w), &nd(&rt, &b)],
            &attrs,
        ),
        &want,
        "fc",
    );
    let nb = Attrs::new().with("num_hidden", 5).with("no_bias", true);
    close(
        &run("FullyConnected", &[&nd(&rt, &x), &nd(&rt, &w)], &nb),
        &x2.dot(&w2.t()).into_dyn(),
        "fc no_bias",
    );
    // flatten=False applies the weight to the last axis.
    let w3 = data(&[5, 3], 7);
    let got = run(
        "FullyConnected",
        &[&nd(&rt, &x), &nd(&rt, &w3)],
        &Attrs::new()
            .with("num_hidden", 5)
            .with("no_bias", 1)
            .with("flatten", false),
    );
    assert_eq!(got.shape(), &[4, 2, 5]);
    let w3t: Array2<f64> = w3.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    let want3 = x
        .clone()
        .into_shape_with_order((8, 3))
        .unwrap()
        .dot(&w3t.t())
        .into_shape_with_order(IxDyn(&[4, 2, 5]))
        .unwrap();
    close(&got, &want3, "fc flatten=false");
    let e = invoke(
        "FullyConnected",
        &[&nd(&rt, &x), &nd(&rt, &w3), &nd(&rt, &b)],
        &attrs,
        None,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("weight") && e.to_string().contains("[5, 6]"),
        "{e}"
    );
}

#[test]
fn one_hot_transpose_flatten() {
    let rt = rt();
    let idx = rt
        .from_vec(vec![1.0f32, 0.0, 3.0, 7.0], &[4], Context::cpu(0))
        .unwrap();
    let oh = invoke(
        "one_hot",
        &[&idx],
        &Attrs::new().with("depth", 4).with("dtype", "float64"),
        None,
    )
    .unwrap()
    .remove(0);
    assert_eq!(oh.shape(), &[4, 4]);
    assert_eq!(
        oh.to_vec::<f64>().unwrap(),
        vec![0., 1., 0., 0., 1., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0.]
    );
    let a = data(&[2, 3, 4], 8);
    let na = nd(&rt, &a);
    close(
        &run("transpose", &[&na], &Attrs::new()),
        &a.clone().reversed_axes(),
        "transpose",
    );
    let got = run("transpose", &[&na], &Attrs::new().with("axes", "(1, 0, 2)"));
    close(
        &got,
        &a.clone()
            .permuted_axes(IxDyn(&[1, 0, 2]))
            .as_standard_layout()
            .to_owned(),
        "transpose axes",
    );
    assert!(invoke(
        "transpose",
        &[&na],
        &Attrs::new().with("axes", "(0, 0, 1)"),
        None
    )
    .is_err());
    let f = run("Flatten", &[&na], &Attrs::new());
    close(
        &f,
        &a.clone().into_shape_with_order(IxDyn(&[2, 12])).unwrap(),
        "Flatten",
    );
    assert!(ndarray_ops::ops::lookup("Flatten").unwrap().identity);
}

#[test]
fn optimizer_updates_write_into_the_weight() {
    let rt = rt();
    let attrs = Attrs::new()
        .with("lr", 0.1)
        .with("wd", 0.01)
        .with("rescale_grad", 0.5)
        .with("clip_gradient", 0.8);
    // MXNet's optimizer parameters are floats (0.1 updates as 0.1f); SGD clips before adding
    // weight decay, Adam after.
    let f = |x: f64| f64::from(x as f32);
    let (lr, wd, clip) = (f(0.1), f(0.01), f(0.8));
    let prep = |g: f64, w: f64| (g * 0.5).clamp(-clip, clip) + wd * w;
    let adam_prep = |g: f64, w: f64| (g * 0.5 + wd * w).clamp(-clip, clip);
    // The second size is large enough that the updates split their elements across threads.
    for n in [10, 40_000] {
        let (w0, g) = (data(&[n], 9), data(&[n], 10));
        let w = nd(&rt, &w0);
        invoke("sgd_update", &[&w, &nd(&rt, &g)], &attrs, Some(&[&w])).unwrap();
        let want: Vec<f64> = w0
            .iter()
            .zip(&g)
            .map(|(&w, &g)| w - lr * prep(g, w))
            .collect();
        close(
            &w.to_ndarray().unwrap(),
            &ArrayD::from_shape_vec(IxDyn(&[n]), want).unwrap(),
            "sgd",
        );

        let (w, m) = (nd(&rt, &w0), nd(&rt, &data(&[n], 11)));
        let m0 = data(&[n], 11);
        let mom = attrs.clone().with("momentum", 0.9);
        invoke(
            "sgd_mom_update",
            &[&w, &nd(&rt, &g), &m],
            &mom,
            Some(&[&w, &m]),
        )
        .unwrap();
        let mw: Vec<f64> = (0..n)
            .map(|i| f(0.9) * m0[i] - lr * prep(g[i], w0[i]))
            .collect();
        let ww: Vec<f64> = (0..n).map(|i| w0[i] + mw[i]).collect();
        close(
            &m.to_ndarray().unwrap(),
            &ArrayD::from_shape_vec(IxDyn(&[n]), mw).unwrap(),
            "sgd_mom state",
        );
        close(
            &w.to_ndarray().unwrap(),
            &ArrayD::from_shape_vec(IxDyn(&[n]), ww).unwrap(),
            "sgd_mom weight",
        );

        let (w, mean, var) = (
            nd(&rt, &w0),
            nd(&rt, &ArrayD::zeros(IxDyn(&[n]))),
            nd(&rt, &ArrayD::zeros(IxDyn(&[n]))),
        );
        invoke(
            "adam_update",
            &[&w, &nd(&rt, &g), &mean, &var],
            &attrs,
            Some(&[&w, &mean, &var]),
        )
        .unwrap();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let gg = adam_prep(g[i], w0[i]);
                let (m, v) = ((1.0 - f(0.9)) * gg, (1.0 - f(0.999)) * gg * gg);
                w0[i] - lr * m / (v.sqrt() + f(1e-8))
            })
            .collect();
        close(
            &w.to_ndarray().unwrap(),
            &ArrayD::from_shape_vec(IxDyn(&[n]), want).unwrap(),
            "adam",
        );
    }
    let w = nd(&rt, &data(&[10], 9));
    let g = data(&[10], 10);
    let e = invoke("sgd_update", &[&w, &nd(&rt, &data(&[3], 1))], &attrs, None).unwrap_err();
    assert!(e.to_string().contains("weight's shape"), "{e}");
    let e = invoke("sgd_update", &[&w, &nd(&rt, &g)], &Attrs::new(), None).unwrap_err();
    assert!(e.to_string().contains("lr is required"), "{e}");
}
