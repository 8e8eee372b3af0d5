//! Every op against a plain `ndarray` computation of the same thing: broadcasting edge cases,
//! zero-size shapes, views as inputs, in-place forms against out-of-place ones.

use ndarray::{Axis, IxDyn};
use ndarray_ops::{invoke, Attrs, DType, NDArray, NdError};
use storage::Context;

mod common;

use common::{close, data, rt, run1};

/// An elementwise reference: two operands (or an operand and a scalar) to one value.
type Binary = fn(f64, f64) -> f64;
/// An elementwise reference of one operand.
type Unary = fn(f64) -> f64;

#[test]
fn broadcasting_binary_ops_match_ndarray() {
    let rt = rt();
    let mut pairs: Vec<(&[usize], &[usize])> = vec![
        (&[2, 3], &[2, 3]),
        (&[2, 3], &[3]),
        (&[2, 3], &[1]),
        (&[1], &[4, 1, 3]),
        (&[4, 1, 3], &[1, 5, 1]),
        (&[0, 3], &[3]),
        (&[2, 0], &[2, 1]),
        (&[3, 1], &[1, 4]),
        // Rows split across threads (Miri splits passes from 64 elements): a bias row, a
        // column, an outer product, and a middle axis broadcast with size-1 axes around it.
        (&[12, 9], &[1, 9]),
        (&[2, 1, 5, 1, 7], &[2, 3, 5, 1, 1]),
    ];
    if !cfg!(miri) {
        pairs.extend([
            (&[300, 250][..], &[1, 250][..]),
            (&[300, 1], &[300, 250]),
            (&[1, 300, 1], &[250, 1, 1, 1]),
            (&[6, 1, 40, 1, 50], &[6, 70, 40, 1, 1]),
        ]);
    }
    let ops: &[(&str, Binary)] = &[
        ("broadcast_add", |a, b| a + b),
        ("broadcast_sub", |a, b| a - b),
        ("broadcast_mul", |a, b| a * b),
        ("broadcast_div", |a, b| a / b),
        ("broadcast_maximum", f64::max),
        ("broadcast_minimum", f64::min),
        ("broadcast_power", |a: f64, b: f64| a.abs().powf(b)),
        ("broadcast_greater", |a, b| (a > b) as i32 as f64),
        ("broadcast_lesser_equal", |a, b| (a <= b) as i32 as f64),
        ("broadcast_equal", |a, b| (a == b) as i32 as f64),
    ];
    for (i, (sa, sb)) in pairs.iter().enumerate() {
        for (name, f) in ops {
            let (mut a, b) = (data(sa, i as u64), data(sb, 100 + i as u64));
            if *name == "broadcast_power" {
                a.mapv_inplace(f64::abs);
            }
            let (na, nb) = (
                rt.from_array(&a, Context::cpu(0)).unwrap(),
                rt.from_array(&b, Context::cpu(0)).unwrap(),
            );
            let got = run1(name, &[&na, &nb], &Attrs::new());
            let (ba, bb) = {
                let shape = got.shape().to_vec();
                (
                    a.broadcast(IxDyn(&shape)).unwrap().to_owned(),
                    b.broadcast(IxDyn(&shape)).unwrap().to_owned(),
                )
            };
            let want = ndarray::Zip::from(&ba)
                .and(&bb)
                .map_collect(|&x, &y| f(x, y));
            close(&got, &want, &format!("{name} {sa:?} {sb:?}"));
        }
    }
}

#[test]
fn incompatible_shapes_are_errors_at_the_call() {
    let rt = rt();
    let a = rt.zeros(&[2, 3], DType::F32, Context::cpu(0)).unwrap();
    let b = rt.zeros(&[4], DType::F32, Context::cpu(0)).unwrap();
    let e = (&a + &b).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, NdError::Shape { .. })
            && msg.contains("broadcast_add")
            && msg.contains("[4]")
            && msg.contains("[2, 3]"),
        "{msg}"
    );
    let c = rt.zeros(&[2, 3], DType::F64, Context::cpu(0)).unwrap();
    let e = (&a + &c).unwrap_err();
    assert!(
        matches!(e, NdError::DType { .. }) && e.to_string().contains("float64"),
        "{e}"
    );
    let d = rt.zeros(&[2, 3], DType::F32, Context::cpu(1)).unwrap();
    let e = (&a + &d).unwrap_err();
    assert!(
        matches!(e, NdError::Context { .. }) && e.to_string().contains("cpu(1)"),
        "{e}"
    );
    let e = invoke("elemwise_add", &[&a, &b], &Attrs::new(), None).unwrap_err();
    assert!(e.to_string().contains("elemwise_add"), "{e}");
    assert!(matches!(
        invoke("no_such_op", &[&a], &Attrs::new(), None),
        Err(NdError::UnknownOp(_))
    ));
    let e = invoke("_plus_scalar", &[&a], &Attrs::new(), None).unwrap_err();
    assert!(e.to_string().contains("scalar is required"), "{e}");
    let e = invoke(
        "_plus_scalar",
        &[&a],
        &Attrs::new().with("scalar", "abc"),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a number"), "{e}");
    let e = invoke("broadcast_add", &[&a], &Attrs::new(), None).unwrap_err();
    assert!(e.to_string().contains("inputs"), "{e}");
}

#[test]
fn scalar_and_unary_ops_match_ndarray() {
    let rt = rt();
    let a = data(&[3, 4], 7);
    let na = rt.from_array(&a, Context::cpu(0)).unwrap();
    let s = 1.5;
    let scalar: &[(&str, Binary)] = &[
        ("_plus_scalar", |x, s| x + s),
        ("_minus_scalar", |x, s| x - s),
        ("_rminus_scalar", |x, s| s - x),
        ("_mul_scalar", |x, s| x * s),
        ("_div_scalar", |x, s| x / s),
        ("_rdiv_scalar", |x, s| s / x),
        ("_maximum_scalar", f64::max),
        ("_minimum_scalar", f64::min),
        ("_greater_scalar", |x, s| (x > s) as i32 as f64),
    ];
    for (name, f) in scalar {
        let got = run1(name, &[&na], &Attrs::new().with("scalar", s));
        close(&got, &a.mapv(|x| f(x, s)), name);
    }
    let unary: &[(&str, Unary)] = &[
        ("_copy", |x| x),
        ("negative", |x| -x),
        ("abs", f64::abs),
        ("square", |x| x * x),
        ("relu", |x| x.max(0.0)),
        ("exp", f64::exp),
        ("tanh", f64::tanh),
        ("sigmoid", |x| 1.0 / (1.0 + (-x).exp())),
        ("softrelu", |x| (1.0 + x.exp()).ln()),
    ];
    for (name, f) in unary {
        close(&run1(name, &[&na], &Attrs::new()), &a.mapv(f), name);
    }
    let pos = a.mapv(f64::abs);
    let np = rt.from_array(&pos, Context::cpu(0)).unwrap();
    close(
        &run1("log", &[&np], &Attrs::new()),
        &pos.mapv(f64::ln),
        "log",
    );
    close(
        &run1("sqrt", &[&np], &Attrs::new()),
        &pos.mapv(f64::sqrt),
        "sqrt",
    );
}

#[test]
fn every_dtype_runs_arithmetic() {
    let rt = rt();
    for dtype in [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8] {
        let a = rt
            .arange(0.0, 6.0, 1.0, dtype, Context::cpu(0))
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        let b = rt.full(&[3], 2.0, dtype, Context::cpu(0)).unwrap();
        let c = (&(&a * &b).unwrap() + 1.0).unwrap();
        assert_eq!(c.dtype(), dtype);
        let got: Vec<f64> = ndarray_ops::with_dtype!(dtype, T => c.to_vec::<T>().unwrap().into_iter().map(ndarray_ops::Element::to_f64).collect());
        assert_eq!(got, vec![1.0, 3.0, 5.0, 7.0, 9.0, 11.0], "{dtype}");
    }
    // Integer division by zero is zero, not a trap.
    let i = rt.from_vec(vec![7i32, 8], &[2], Context::cpu(0)).unwrap();
    let z = rt.zeros(&[2], DType::I32, Context::cpu(0)).unwrap();
    assert_eq!((&i / &z).unwrap().to_vec::<i32>().unwrap(), vec![0, 0]);
}

#[test]
fn reductions_match_ndarray() {
    let rt = rt();
    let a = data(&[2, 3, 4], 3);
    let na = rt.from_array(&a, Context::cpu(0)).unwrap();
    for (axes, keep) in [
        (vec![], false),
        (vec![0i64], false),
        (vec![1], true),
        (vec![0, 2], false),
        (vec![-1], true),
    ] {
        let norm: Vec<usize> = axes
            .iter()
            .map(|&x: &i64| if x < 0 { (x + 3) as usize } else { x as usize })
            .collect();
        let mut sum = a.clone();
        let mut max = a.clone();
        let all: Vec<usize> = if norm.is_empty() {
            vec![0, 1, 2]
        } else {
            norm.clone()
        };
        for &ax in all.iter().rev() {
            sum = sum.sum_axis(Axis(ax));
            max = max.fold_axis(Axis(ax), f64::NEG_INFINITY, |m, x| m.max(*x));
            if keep {
                sum.insert_axis_inplace(Axis(ax));
                max.insert_axis_inplace(Axis(ax));
            }
        }
        let count: usize = all.iter().map(|&d| a.shape()[d]).product();
        if sum.ndim() == 0 {
            sum = sum.into_shape_with_order(IxDyn(&[1])).unwrap();
            max = max.into_shape_with_order(IxDyn(&[1])).unwrap();
        }
        let mut attrs = Attrs::new().with("keepdims", keep);
        if !axes.is_empty() {
            attrs = attrs.with("axis", format!("{axes:?}"));
        }
        close(
            &run1("sum", &[&na], &attrs),
            &sum,
            &format!("sum {axes:?} {keep}"),
        );
        close(
            &run1("mean", &[&na], &attrs),
            &sum.mapv(|x| x / count as f64),
            &format!("mean {axes:?}"),
        );
        close(&run1("max", &[&na], &attrs), &max, &format!("max {axes:?}"));
    }
    // argmax along an axis, and over everything.
    let got = run1("argmax", &[&na], &Attrs::new().with("axis", 2));
    let want = a.map_axis(Axis(2), |lane| {
        lane.iter()
            .enumerate()
            .fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &x)| {
                if x > bv {
                    (i, x)
                } else {
                    (bi, bv)
                }
            })
            .0 as f64
    });
    close(&got, &want, "argmax axis 2");
    let e = invoke("sum", &[&na], &Attrs::new().with("axis", 3), None).unwrap_err();
    assert!(e.to_string().contains("axis 3 is out of range"), "{e}");
    let empty = rt.zeros(&[0, 3], DType::F64, Context::cpu(0)).unwrap();
    assert_eq!(
        run1("sum", &[&empty], &Attrs::new().with("axis", 0)).shape(),
        &[3]
    );
    assert!(invoke("max", &[&empty], &Attrs::new().with("axis", 0), None).is_err());
}

#[test]
fn dot_and_batch_dot_match_ndarray() {
    let rt = rt();
    let a = data(&[3, 4], 1)
        .into_dimensionality::<ndarray::Ix2>()
        .unwrap();
    let b = data(&[4, 5], 2)
        .into_dimensionality::<ndarray::Ix2>()
        .unwrap();
    let (na, nb) = (
        rt.from_array(&a.clone().into_dyn(), Context::cpu(0))
            .unwrap(),
        rt.from_array(&b.clone().into_dyn(), Context::cpu(0))
            .unwrap(),
    );
    close(
        &na.dot(&nb).unwrap().to_ndarray::<f64>().unwrap(),
        &a.dot(&b).into_dyn(),
        "dot",
    );
    let at = rt
        .from_array(&a.t().to_owned().into_dyn(), Context::cpu(0))
        .unwrap();
    let bt = rt
        .from_array(&b.t().to_owned().into_dyn(), Context::cpu(0))
        .unwrap();
    let attrs = Attrs::new()
        .with("transpose_a", true)
        .with("transpose_b", "True");
    close(
        &run1("dot", &[&at, &bt], &attrs),
        &a.dot(&b).into_dyn(),
        "dot with transposes",
    );
    for dtype in [DType::F32, DType::I64] {
        let x = rt
            .arange(0.0, 6.0, 1.0, dtype, Context::cpu(0))
            .unwrap()
            .reshape(&[2, 3])
            .unwrap();
        let y = rt
            .arange(0.0, 6.0, 1.0, dtype, Context::cpu(0))
            .unwrap()
            .reshape(&[3, 2])
            .unwrap();
        let z = x.dot(&y).unwrap();
        let got: Vec<f64> = ndarray_ops::with_dtype!(dtype, T => z.to_vec::<T>().unwrap().into_iter().map(ndarray_ops::Element::to_f64).collect());
        assert_eq!(got, vec![10.0, 13.0, 28.0, 40.0], "{dtype}");
    }
    let p = data(&[2, 3, 4], 5);
    let q = data(&[2, 4, 2], 6);
    let (np, nq) = (
        rt.from_array(&p, Context::cpu(0)).unwrap(),
        rt.from_array(&q, Context::cpu(0)).unwrap(),
    );
    let got = run1("batch_dot", &[&np, &nq], &Attrs::new());
    for i in 0..2 {
        let pi = p
            .index_axis(Axis(0), i)
            .into_dimensionality::<ndarray::Ix2>()
            .unwrap();
        let qi = q
            .index_axis(Axis(0), i)
            .into_dimensionality::<ndarray::Ix2>()
            .unwrap();
        close(
            &got.index_axis(Axis(0), i).to_owned(),
            &pi.dot(&qi).into_dyn(),
            "batch_dot",
        );
    }
    let e = na.dot(&na).unwrap_err();
    assert!(
        e.to_string().contains("dot") && e.to_string().contains("[3, 4]"),
        "{e}"
    );
}

#[test]
fn in_place_forms_equal_out_of_place_ones() {
    let rt = rt();
    let a = data(&[4, 3], 11);
    let b = data(&[3], 12);
    let nb = rt.from_array(&b, Context::cpu(0)).unwrap();
    for (name, f) in [
        (
            "add",
            NDArray::add_inplace as fn(&NDArray, &NDArray) -> ndarray_ops::Result<()>,
        ),
        ("sub", NDArray::sub_inplace),
        ("mul", NDArray::mul_inplace),
        ("div", NDArray::div_inplace),
    ] {
        let x = rt.from_array(&a, Context::cpu(0)).unwrap();
        let out_of_place = invoke(
            &format!("broadcast_{name}"),
            &[&x, &nb],
            &Attrs::new(),
            None,
        )
        .unwrap()[0]
            .to_ndarray::<f64>()
            .unwrap();
        f(&x, &nb).unwrap();
        close(&x.to_ndarray::<f64>().unwrap(), &out_of_place, name);
    }
    let x = rt.from_array(&a, Context::cpu(0)).unwrap();
    x.mul_scalar_inplace(3.0).unwrap();
    x.add_scalar_inplace(1.0).unwrap();
    close(
        &x.to_ndarray::<f64>().unwrap(),
        &a.mapv(|v| v * 3.0 + 1.0),
        "scalar in place",
    );
    // x += x: the output is exactly an input.
    let y = rt.from_array(&a, Context::cpu(0)).unwrap();
    y.add_inplace(&y).unwrap();
    close(
        &y.to_ndarray::<f64>().unwrap(),
        &a.mapv(|v| 2.0 * v),
        "x += x",
    );
}

#[test]
fn views_share_memory_and_partial_overlap_is_safe() {
    let rt = rt();
    let a = rt
        .arange(0.0, 12.0, 1.0, DType::F64, Context::cpu(0))
        .unwrap()
        .reshape(&[4, 3])
        .unwrap();
    let row = a.at(1).unwrap();
    assert_eq!(row.shape(), &[3]);
    assert_eq!(row.to_vec::<f64>().unwrap(), vec![3.0, 4.0, 5.0]);
    assert!(row.shares_chunk(&a));
    // Writing through a view changes the base.
    row.mul_scalar_inplace(10.0).unwrap();
    assert_eq!(a.to_vec::<f64>().unwrap()[3..6], [30.0, 40.0, 50.0]);
    // rows 1..3 += rows 0..2: overlapping, not identical: the kernel must see the old values.
    let base: Vec<f64> = a.to_vec().unwrap();
    let (dst, src) = (a.slice(1, 3).unwrap(), a.slice(0, 2).unwrap());
    dst.add_inplace(&src).unwrap();
    let got = a.to_vec::<f64>().unwrap();
    for i in 3..9 {
        assert_eq!(got[i], base[i] + base[i - 3], "element {i}");
    }
    assert!(a.slice(3, 5).is_err());
    assert!(a.reshape(&[5, 2]).is_err());
    let e = a.at(9).unwrap_err();
    assert!(e.to_string().contains("outside 0..4"), "{e}");
}

#[test]
fn copies_between_contexts() {
    let rt = rt();
    let a = rt
        .arange(0.0, 5.0, 1.0, DType::F32, Context::cpu(0))
        .unwrap();
    let b = a.copy_to(Context::cpu(1)).unwrap();
    assert_eq!(b.ctx(), Context::cpu(1));
    a.fill(9.0).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    assert!(a.as_in_context(Context::cpu(0)).unwrap().shares_chunk(&a));
    // Where no GPU can be used, asking for one says which context failed.
    if !storage::gpu_available() {
        let e = rt.zeros(&[2], DType::F32, Context::gpu(0)).unwrap_err();
        assert!(e.to_string().contains("gpu(0)"), "{e}");
    }
}

#[test]
fn scalar_operators_use_the_scalar_given_each_time() {
    let rt = rt();
    let x = rt
        .from_vec(vec![1.0f32, 2.0], &[2], Context::cpu(0))
        .unwrap();
    // The operators keep the last scalar's attributes; alternating scalars must not mix them up.
    for (s, want) in [
        (1.0, [2.0f32, 3.0]),
        (2.0, [3.0, 4.0]),
        (1.0, [2.0, 3.0]),
        (-0.0, [1.0, 2.0]),
    ] {
        assert_eq!((&x + s).unwrap().to_vec::<f32>().unwrap(), want, "x + {s}");
    }
    assert_eq!((&x * 3.0).unwrap().to_vec::<f32>().unwrap(), [3.0, 6.0]);
    // A map remembers its numbers once read; one made from it with a new value reads that.
    let three = Attrs::new().with("scalar", 3);
    let four = three.clone().with("scalar", " 4 ");
    for (attrs, want) in [
        (&three, [4.0f32, 5.0]),
        (&four, [5.0, 6.0]),
        (&three, [4.0, 5.0]),
    ] {
        let got = invoke("_plus_scalar", &[&x], attrs, None).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(got, want, "{attrs:?}");
    }
    let y = x.copy_to(Context::cpu(0)).unwrap();
    y.add_scalar_inplace(0.5).unwrap();
    y.mul_scalar_inplace(2.0).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [3.0, 5.0]);
}

/// Inference is remembered per thread for the last (op, attributes, input shapes and dtypes);
/// calls that differ in any one of them, alternating with repeats, must each get their own
/// shapes, dtypes and errors.
#[test]
fn repeated_calls_infer_each_call_own_shapes() {
    let rt = rt();
    let ctx = Context::cpu(0);
    let a = rt.ones(&[2, 3], DType::F32, ctx).unwrap();
    let b = rt.ones(&[4, 5], DType::F32, ctx).unwrap();
    let c = rt.ones(&[2, 3], DType::F64, ctx).unwrap();
    let row = rt.ones(&[1, 3], DType::F32, ctx).unwrap();
    for _ in 0..3 {
        assert_eq!((&a + 1.0).unwrap().shape(), &[2, 3]);
        assert_eq!((&b + 1.0).unwrap().shape(), &[4, 5]);
        assert_eq!((&c + 1.0).unwrap().dtype(), DType::F64);
        assert_eq!((&a + &row).unwrap().shape(), &[2, 3]);
        assert!((&b + &row).is_err());
        assert_eq!(a.sum(&[0], false).unwrap().shape(), &[3]);
        assert_eq!(a.sum(&[1], false).unwrap().shape(), &[2]);
        assert_eq!(a.sum(&[1], true).unwrap().shape(), &[2, 1]);
        let e = (&a + &c).unwrap_err();
        assert!(matches!(e, NdError::DType { .. }), "{e}");
    }
    assert_eq!((&c * 2.0).unwrap().to_ndarray::<f64>().unwrap().sum(), 12.0);
}

/// The ops added from MXNet's wider set refuse what they cannot do with what was asked, what
/// was found and where, at the call or, for values only the kernel sees, when the result is read.
#[test]
fn wider_mxnet_ops_refuse_bad_input_clearly() {
    let rt = rt();
    let cpu = Context::cpu(0);
    let x = rt.zeros(&[2, 4, 3], DType::F64, cpu).unwrap();
    let err = |op: &str, inputs: &[&NDArray], attrs: Attrs| {
        invoke(op, inputs, &attrs, None).unwrap_err().to_string()
    };
    let e = err("LeakyReLU", &[&x], Attrs::new().with("act_type", "rrelu"));
    assert!(e.contains("rrelu") && e.contains("prelu"), "{e}");
    let e = err("LeakyReLU", &[&x], Attrs::new().with("act_type", "prelu"));
    assert!(e.contains("takes 2 input(s)") && e.contains("got 1"), "{e}");
    let g3 = rt.zeros(&[3], DType::F64, cpu).unwrap();
    let e = err(
        "GroupNorm",
        &[&x, &g3, &g3],
        Attrs::new().with("num_groups", 3),
    );
    assert!(
        e.contains("num_groups=3") && e.contains("4 channels"),
        "{e}"
    );
    let e = err("LayerNorm", &[&x, &g3, &g3], Attrs::new().with("axis", 1));
    assert!(
        e.contains("gamma") && e.contains("[4]") && e.contains("[3]"),
        "{e}"
    );
    let e = err("LayerNorm", &[&x, &g3, &g3], Attrs::new().with("axes", 1));
    assert!(
        e.contains("unknown attribute \"axes\"") && e.contains("axis"),
        "{e}"
    );
    let e = err("Cast", &[&x], Attrs::new().with("dtype", "float17"));
    assert!(e.contains("float17"), "{e}");
    let e = err("L2Normalization", &[&x], Attrs::new().with("mode", "row"));
    assert!(e.contains("\"row\""), "{e}");
    // A label no class has: the op fails when read, with the label and the class count.
    let scores = rt.zeros(&[2, 5], DType::F64, cpu).unwrap();
    let labels = rt.from_vec(vec![1.0f64, 7.0], &[2], cpu).unwrap();
    let out = invoke(
        "softmax_cross_entropy",
        &[&scores, &labels],
        &Attrs::new(),
        None,
    );
    let e = out
        .and_then(|o| o[0].to_vec::<f64>())
        .unwrap_err()
        .to_string();
    assert!(e.contains("label 7") && e.contains("below 5"), "{e}");
    let e = err("topk", &[&scores], Attrs::new().with("k", 9));
    assert!(e.contains("k=9") && e.contains("5 elements"), "{e}");
    let e = err("topk", &[&scores], Attrs::new().with("ret_typ", "values"));
    assert!(e.contains("\"values\""), "{e}");
    // Regression labels must have the data's elements.
    let e = err("LinearRegressionOutput", &[&scores, &g3], Attrs::new());
    assert!(e.contains("label") && e.contains("[2, 5]"), "{e}");
}

/// gather_nd, scatter_nd and `_backward_gather_nd` against plain loops over the coordinates,
/// negative coordinates wrapping in all three (MXNet 1.9.1 wraps them in gather_nd alone); a
/// coordinate outside its axis fails the op and names it; batch_take is pick over the last axis
/// with indices clipped.
/// softmax and log_softmax, and their gradients, along the contiguous axis and a strided one
/// of an array large enough to be split across threads, against the formulas lane by lane.
#[test]
fn softmax_and_its_gradient_over_long_and_strided_lanes() {
    let rt = rt();
    // Under Miri (which splits passes from 64 elements) a smaller array.
    let shape = if cfg!(miri) {
        [3, 20, 15]
    } else {
        [3, 200, 150]
    };
    let x = data(&shape, 11);
    let g = data(&shape, 12);
    let nx = rt.from_array(&x, Context::cpu(0)).unwrap();
    let ng = rt.from_array(&g, Context::cpu(0)).unwrap();
    let temp = 1.5;
    for axis in [1, 2] {
        for log in [false, true] {
            let op = if log { "log_softmax" } else { "softmax" };
            let attrs = Attrs::new().with("axis", axis).with("temperature", temp);
            let y = invoke(op, &[&nx], &attrs, None).unwrap().remove(0);
            let mut want = x.clone();
            for mut lane in want.lanes_mut(Axis(axis)) {
                let m = lane.fold(f64::NEG_INFINITY, |m, &v| m.max(v / temp));
                let z: f64 = lane.iter().map(|v| (v / temp - m).exp()).sum();
                lane.mapv_inplace(|v| match log {
                    true => v / temp - m - z.ln(),
                    false => (v / temp - m).exp() / z,
                });
            }
            let got = y.to_ndarray::<f64>().unwrap();
            close(&got, &want, op);
            let back = format!("_backward_{op}");
            let dx = run1(&back, &[&ng, &y], &attrs);
            let mut want_dx = g.clone();
            let lanes = want_dx.lanes_mut(Axis(axis)).into_iter();
            for (mut d, yl) in lanes.zip(got.lanes(Axis(axis))) {
                let gl = d.to_owned();
                let total: f64 = match log {
                    true => gl.sum(),
                    false => gl.iter().zip(&yl).map(|(a, b)| a * b).sum(),
                };
                for ((d, gk), yk) in d.iter_mut().zip(&gl).zip(&yl) {
                    *d = match log {
                        true => (gk - yk.exp() * total) / temp,
                        false => yk * (gk - total) / temp,
                    };
                }
            }
            close(&dx, &want_dx, &back);
        }
    }
}

/// Distance in units in the last place between two finite f32s (zeros of both signs are one
/// point).
fn ulps(a: f32, b: f32) -> u64 {
    let ordered = |x: f32| {
        let m = (x.to_bits() & 0x7fff_ffff) as i64;
        if x.is_sign_negative() {
            -m
        } else {
            m
        }
    };
    ordered(a).abs_diff(ordered(b))
}

/// f32 `exp`, `tanh` and `sigmoid` go through vectorized approximations: over a dense sweep
/// of where they vary, tiny and subnormal inputs, where they overflow, underflow and saturate,
/// and the special values, each stays within its bound of the correctly rounded result (f64
/// rounded; a subnormal result only needs to be subnormal), out of place and in place alike,
/// in a pass long enough to split across threads.
#[test]
fn vectorized_exp_tanh_and_sigmoid_stay_within_their_ulps() {
    let rt = rt();
    let mut x: Vec<f32> = (0..2_100_001).map(|i| -105.0 + i as f32 * 1e-4).collect();
    for k in -45..=38 {
        let m = 10f32.powi(k);
        x.extend([m, -m, 1.5 * m, -1.5 * m]);
    }
    x.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        88.72,
        88.73,
        -87.33,
        -103.9,
        -104.0,
        -200.0,
        200.0,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let n = x.len();
    let cases: [(&str, Unary, u64); 3] = [
        ("exp", f64::exp, 1),
        ("tanh", f64::tanh, 3),
        ("sigmoid", |v| 1.0 / (1.0 + (-v).exp()), 4),
    ];
    for (op, reference, bound) in cases {
        let a = rt.from_vec(x.clone(), &[n], Context::cpu(0)).unwrap();
        let out_of_place = run1_f32(op, &a, None);
        let in_place = run1_f32(op, &a, Some(&a));
        for (i, (&v, (&got, &got_in))) in
            x.iter().zip(out_of_place.iter().zip(&in_place)).enumerate()
        {
            let want = reference(v as f64) as f32;
            assert_eq!(
                got.to_bits(),
                got_in.to_bits(),
                "{op}({v}) in place, element {i}"
            );
            if want.is_nan() {
                assert!(got.is_nan(), "{op}({v}) = {got}, want NaN");
            } else if want.is_infinite() || got.is_infinite() {
                assert_eq!(got, want, "{op}({v})");
            } else if want.abs() < f32::MIN_POSITIVE {
                // Subnormal results (exp and sigmoid far below zero) need only stay there.
                assert!(
                    got.abs() < f32::MIN_POSITIVE,
                    "{op}({v}) = {got:e}, want {want:e}"
                );
            } else {
                let d = ulps(got, want);
                assert!(
                    d <= bound,
                    "{op}({v}) = {got:e}, want {want:e}: {d} ulps apart"
                );
            }
        }
    }
}

fn run1_f32(op: &str, a: &NDArray, out: Option<&NDArray>) -> Vec<f32> {
    let outs = out.map(|o| [o]);
    invoke(op, &[a], &Attrs::new(), outs.as_ref().map(|o| &o[..])).unwrap()[0]
        .to_vec::<f32>()
        .unwrap()
}

/// `where` over arrays long enough for several mask chunks and a split across threads, with
/// conditions of another dtype (element-wise and one per row): what a plain loop selects, out
/// of place and written into x or into y.
#[test]
fn where_selects_what_a_plain_loop_does_in_place_too() {
    let rt = rt();
    let (rows, cols) = (7, 14_003);
    let n = rows * cols;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| -(i as f32) - 1.0).collect();
    let full: Vec<i32> = (0..n).map(|i| ((i * 7919) % 3) as i32 - 1).collect();
    let by_row = [0.0f64, 2.0, -0.0, 0.5, 0.0, 1.0, f64::NAN];
    let cases = [
        (
            rt.from_vec(full.clone(), &[rows, cols], Context::cpu(0))
                .unwrap(),
            1,
        ),
        (
            rt.from_vec(by_row.to_vec(), &[rows], Context::cpu(0))
                .unwrap(),
            cols,
        ),
    ];
    for (cond, per) in &cases {
        let truth = |i: usize| match per {
            1 => full[i] != 0,
            _ => by_row[i / cols] != 0.0,
        };
        let want: Vec<f32> = (0..n).map(|i| if truth(i) { x[i] } else { y[i] }).collect();
        for into in [None, Some(0), Some(1)] {
            let nx = rt
                .from_vec(x.clone(), &[rows, cols], Context::cpu(0))
                .unwrap();
            let ny = rt
                .from_vec(y.clone(), &[rows, cols], Context::cpu(0))
                .unwrap();
            let out = into.map(|k| [[&nx, &ny][k]]);
            let got = invoke(
                "where",
                &[cond, &nx, &ny],
                &Attrs::new(),
                out.as_ref().map(|o| &o[..]),
            )
            .unwrap()
            .remove(0);
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                want,
                "per {per}, written into {into:?}"
            );
        }
    }
}

#[test]
fn bytes_in_and_out_round_trip_for_every_dtype_and_a_wrong_length_is_refused() {
    let rt = rt();
    for dtype in [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8] {
        let bytes: Vec<u8> = (0..6 * dtype.size()).map(|i| (i * 7 % 251) as u8).collect();
        let a = rt
            .from_bytes(&bytes, &[2, 3], dtype, storage::Context::cpu(0))
            .unwrap();
        assert_eq!((a.shape(), a.dtype()), (&[2usize, 3][..], dtype));
        assert_eq!(a.to_bytes().unwrap(), bytes, "{dtype}");
        let err = rt
            .from_bytes(&bytes[1..], &[2, 3], dtype, storage::Context::cpu(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("bytes given"), "{err}");
    }
    let x = rt
        .from_vec(vec![1.5f32, -2.0], &[2], storage::Context::cpu(0))
        .unwrap();
    let want: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    assert_eq!(x.to_bytes().unwrap(), want);
}

#[test]
fn add_n_sums_in_input_order_into_an_output_that_is_one_of_its_inputs() {
    // Large enough to be split across threads, with a block left over at the end.
    let n = if cfg!(miri) { 1500 } else { 300_001 };
    let rt = rt();
    let vals: Vec<Vec<f32>> = (0..3u64)
        .map(|k| data(&[n], k + 7).iter().map(|&v| v as f32).collect())
        .collect();
    let xs: Vec<NDArray> = vals
        .iter()
        .map(|v| rt.from_vec(v.clone(), &[n], Context::cpu(0)).unwrap())
        .collect();
    let refs: Vec<&NDArray> = xs.iter().collect();
    // Into the second input: each element's inputs are read before it is written.
    invoke("add_n", &refs, &Attrs::new(), Some(&[&xs[1]])).unwrap();
    let got = xs[1].to_vec::<f32>().unwrap();
    for (i, g) in got.iter().enumerate() {
        let want = ((0.0f32 + vals[0][i]) + vals[1][i]) + vals[2][i];
        assert_eq!(g.to_bits(), want.to_bits(), "element {i}");
    }
}
