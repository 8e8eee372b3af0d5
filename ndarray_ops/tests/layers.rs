//! Data-movement ops, Convolution, Pooling, BatchNorm, Dropout and the random generators against
//! direct reference computations.

use std::sync::Arc;

use ndarray::{s, ArrayD, Axis, IxDyn};
use ndarray_ops::ops::IS_TRAIN;
use ndarray_ops::{invoke, Attrs, DType, NDArray, Runtime};
use storage::Context;

mod common;

use common::{close, large, nd, nd_as, rt, run_all, wave};

#[test]
fn concat_split_slice_take() {
    let rt = rt();
    let (a, b) = (wave(&[2, 3, 4], 1), wave(&[2, 5, 4], 2));
    let got = run_all(
        "Concat",
        &[&nd(&rt, &a), &nd(&rt, &b)],
        &Attrs::new().with("dim", 1).with("num_args", 2),
    );
    close(
        &got[0],
        &ndarray::concatenate(Axis(1), &[a.view(), b.view()]).unwrap(),
        "Concat",
    );
    assert!(invoke(
        "concat",
        &[&nd(&rt, &a), &nd(&rt, &b)],
        &Attrs::new().with("dim", 2),
        None
    )
    .is_err());

    let x = wave(&[2, 6, 3], 3);
    let parts = run_all(
        "SliceChannel",
        &[&nd(&rt, &x)],
        &Attrs::new().with("num_outputs", 3).with("axis", 1),
    );
    for (k, p) in parts.iter().enumerate() {
        close(
            p,
            &x.slice(s![.., 2 * k..2 * k + 2, ..]).to_owned().into_dyn(),
            "split",
        );
    }
    let sq = run_all(
        "split",
        &[&nd(&rt, &x)],
        &Attrs::new()
            .with("num_outputs", 3)
            .with("axis", 2)
            .with("squeeze_axis", true),
    );
    close(
        &sq[1],
        &x.index_axis(Axis(2), 1).to_owned(),
        "split squeeze",
    );
    assert!(invoke(
        "split",
        &[&nd(&rt, &x)],
        &Attrs::new().with("num_outputs", 4),
        None
    )
    .is_err());

    let got = run_all(
        "slice_axis",
        &[&nd(&rt, &x)],
        &Attrs::new()
            .with("axis", 1)
            .with("begin", 1)
            .with("end", -1),
    );
    close(
        &got[0],
        &x.slice(s![.., 1..5, ..]).to_owned().into_dyn(),
        "slice_axis",
    );
    let got = run_all(
        "slice",
        &[&nd(&rt, &x)],
        &Attrs::new()
            .with("begin", "(1, None, 1)")
            .with("end", "(2, 4, None)"),
    );
    close(
        &got[0],
        &x.slice(s![1..2, 0..4, 1..3]).to_owned().into_dyn(),
        "slice",
    );
    let e = invoke(
        "slice_axis",
        &[&nd(&rt, &x)],
        &Attrs::new().with("axis", 1).with("begin", 5).with("end", 9),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");

    let table = wave(&[5, 3], 4);
    let idx = rt
        .from_vec(vec![4.0f64, 0.0, 2.0, 9.0, -3.0], &[5], Context::cpu(0))
        .unwrap();
    let got = run_all("take", &[&nd(&rt, &table), &idx], &Attrs::new());
    for (k, r) in [4usize, 0, 2, 4, 0].iter().enumerate() {
        close(
            &got[0].index_axis(Axis(0), k).to_owned(),
            &table.index_axis(Axis(0), *r).to_owned(),
            "take (clip)",
        );
    }
    let ids = rt
        .from_vec(vec![1.0f64, 3.0, 3.0, 0.0], &[2, 2], Context::cpu(0))
        .unwrap();
    let emb = run_all(
        "Embedding",
        &[&ids, &nd(&rt, &table)],
        &Attrs::new().with("input_dim", 5).with("output_dim", 3),
    );
    assert_eq!(emb[0].shape(), &[2, 2, 3]);
    close(
        &emb[0].slice(s![1, 0, ..]).to_owned().into_dyn(),
        &table.slice(s![3, ..]).to_owned().into_dyn(),
        "Embedding",
    );

    let r = run_all(
        "Reshape",
        &[&nd(&rt, &x)],
        &Attrs::new().with("shape", "(0, -1)"),
    );
    assert_eq!(r[0].shape(), &[2, 18]);
    assert_eq!(
        run_all(
            "expand_dims",
            &[&nd(&rt, &x)],
            &Attrs::new().with("axis", -1)
        )[0]
        .shape(),
        &[2, 6, 3, 1]
    );
    let one = wave(&[1, 4, 1], 5);
    assert_eq!(
        run_all("squeeze", &[&nd(&rt, &one)], &Attrs::new())[0].shape(),
        &[4]
    );
    assert!(invoke(
        "squeeze",
        &[&nd(&rt, &one)],
        &Attrs::new().with("axis", 1),
        None
    )
    .is_err());
}

/// The output shape of a convolution of data `x` with weights `w`.
fn conv_out_shape(x: &[usize], w: &[usize], stride: usize, pad: usize, dil: usize) -> [usize; 4] {
    let ho = (x[2] + 2 * pad - dil * (w[2] - 1) - 1) / stride + 1;
    let wo = (x[3] + 2 * pad - dil * (w[3] - 1) - 1) / stride + 1;
    [x[0], w[0], ho, wo]
}

/// Every product a convolution sums, in order: `visit(out, data, weight)` with the index of the
/// output element, of the data element and of the weight it multiplies (padding reads none).
fn conv_products(
    x: &[usize],
    w: &[usize],
    (stride, pad, dil, groups): (usize, usize, usize, usize),
    mut visit: impl FnMut([usize; 4], [usize; 4], [usize; 4]),
) {
    let [n, f, ho, wo] = conv_out_shape(x, w, stride, pad, dil);
    let (h, wd, cg, kh, kw) = (x[2], x[3], w[1], w[2], w[3]);
    let fg = f / groups;
    for i in 0..n {
        for o in 0..f {
            let g = o / fg;
            for y in 0..ho {
                for xx in 0..wo {
                    for ci in 0..cg {
                        for p in 0..kh {
                            for q in 0..kw {
                                let iy = (y * stride + p * dil) as isize - pad as isize;
                                let ix = (xx * stride + q * dil) as isize - pad as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < wd {
                                    visit(
                                        [i, o, y, xx],
                                        [i, g * cg + ci, iy as usize, ix as usize],
                                        [o, ci, p, q],
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Direct convolution, for reference.
fn conv_ref(
    x: &ArrayD<f64>,
    w: &ArrayD<f64>,
    b: Option<&ArrayD<f64>>,
    stride: usize,
    pad: usize,
    dil: usize,
    groups: usize,
) -> ArrayD<f64> {
    let shape = conv_out_shape(x.shape(), w.shape(), stride, pad, dil);
    let mut out = ArrayD::from_shape_fn(IxDyn(&shape), |i| b.map_or(0.0, |b| b[[i[1]]]));
    conv_products(
        x.shape(),
        w.shape(),
        (stride, pad, dil, groups),
        |o, i, k| out[o] += x[i] * w[k],
    );
    out
}

/// The data and weight gradients of a convolution, for reference, from the output gradient.
fn conv_grads_ref(
    dy: &ArrayD<f64>,
    x: &ArrayD<f64>,
    w: &ArrayD<f64>,
    conv: (usize, usize, usize, usize),
) -> (ArrayD<f64>, ArrayD<f64>) {
    let mut dx = ArrayD::zeros(x.raw_dim());
    let mut dw = ArrayD::zeros(w.raw_dim());
    conv_products(x.shape(), w.shape(), conv, |o, i, k| {
        dx[i] += dy[o] * w[k];
        dw[k] += dy[o] * x[i];
    });
    (dx, dw)
}

#[test]
fn convolution_matches_direct_computation() {
    let rt = rt();
    let small = [2, 4, 7, 6];
    // Large enough that im2col splits its rows across threads (8 channels x 9 taps x 4,620 or
    // 1,155 columns).
    let large = large([1, 8, 70, 66], [1, 8, 5, 4]);
    // A 1x1 window of stride 1 without padding reads the data as its columns (no im2col).
    for (shape, k, stride, pad, dil, groups, bias) in [
        (small, 3, 1, 0, 1, 1, true),
        (small, 3, 2, 1, 1, 1, false),
        (small, 3, 1, 2, 2, 1, true),
        (small, 3, 1, 1, 1, 2, true),
        (small, 3, 3, 1, 1, 4, false),
        (small, 1, 1, 0, 1, 2, true),
        (small, 1, 2, 0, 1, 1, false),
        (large, 3, 1, 1, 1, 1, false),
        (large, 3, 2, 2, 2, 2, true),
        (large, 1, 1, 0, 1, 1, false),
    ] {
        let x = wave(&shape, 6);
        let w = wave(&[8, shape[1] / groups, k, k], 7);
        let b = wave(&[8], 8);
        let mut attrs = Attrs::new()
            .with("kernel", format!("({k}, {k})"))
            .with("num_filter", 8)
            .with("stride", format!("({stride}, {stride})"))
            .with("pad", format!("({pad}, {pad})"))
            .with("dilate", format!("({dil}, {dil})"))
            .with("num_group", groups);
        let (xn, wn, bn) = (nd(&rt, &x), nd(&rt, &w), nd(&rt, &b));
        let got = if bias {
            run_all("Convolution", &[&xn, &wn, &bn], &attrs)
        } else {
            attrs = attrs.with("no_bias", true);
            run_all("Convolution", &[&xn, &wn], &attrs)
        };
        close(
            &got[0],
            &conv_ref(&x, &w, bias.then_some(&b), stride, pad, dil, groups),
            &format!("conv {k}x{k} s{stride} p{pad} d{dil} g{groups}"),
        );
    }
    let x = nd(&rt, &wave(&[1, 3, 5, 5], 1));
    let bad_w = nd(&rt, &wave(&[4, 2, 3, 3], 2));
    let e = invoke(
        "Convolution",
        &[&x, &bad_w],
        &Attrs::new()
            .with("kernel", "(3,3)")
            .with("num_filter", 4)
            .with("no_bias", 1),
        None,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("weight") && e.to_string().contains("[4, 3, 3, 3]"),
        "{e}"
    );
    let e = invoke(
        "Convolution",
        &[&x, &bad_w],
        &Attrs::new()
            .with("kernel", "(9,9)")
            .with("num_filter", 4)
            .with("no_bias", 1),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("Convolution"), "{e}");
}

/// Float32 convolutions, which where the GEMM runs (AVX-512, or AVX2 as `tools/test.sh` reruns
/// it) pack the GEMM's strips straight from the data (forward and weight gradient) instead of
/// writing columns: output and both gradients against the f64 definitions, over strides,
/// padding, dilation, groups, odd windows, output widths that cross the GEMM's 32-column
/// strips and 512-deep blocks mid-row, batches whose images share a product, and both ways of
/// making the stride-1 data gradient.
#[test]
fn f32_convolutions_and_their_gradients_match_the_definitions() {
    let rt = rt();
    let small = [2, 4, 7, 6];
    let wide = large([1, 64, 19, 45], [1, 4, 5, 9]);
    for (shape, k, stride, pad, dil, groups, filters) in [
        (small, (3, 3), 1, 1, 1, 1, 12),
        (small, (3, 3), 2, 1, 1, 1, 12),
        (small, (3, 3), 1, 2, 2, 2, 12),
        (small, (5, 3), 3, 2, 1, 4, 12),
        (small, (1, 1), 2, 0, 1, 1, 12),
        (small, (1, 1), 1, 1, 1, 1, 12),
        // More filters than twice the pixels: the data gradient through columns.
        ([1, 4, 2, 2], (3, 3), 1, 1, 1, 1, 12),
        (wide, (3, 3), 1, 1, 1, 1, 12),
        (wide, (3, 3), 2, 1, 1, 2, 12),
        (wide, (7, 7), 2, 3, 1, 1, 12),
        // Images small enough that one product covers several (a strip, a depth block and a
        // tile of the output crossing from one image into the next), and images that split
        // into products of two and one.
        ([5, 6, 5, 5], (3, 3), 1, 1, 1, 2, 12),
        ([5, 6, 9, 11], (3, 3), 2, 1, 1, 1, 12),
        ([3, 4, 40, 40], (3, 3), 1, 1, 1, 1, 12),
        // A 1x1 window with a stride reads a subsampled copy.
        ([3, 6, 9, 7], (1, 1), 3, 0, 1, 2, 12),
        // 3x3 windows of stride 1 with at least 16 channels and filters and 64 tiles of 2x2
        // outputs go through Winograd's tiles, forward and data gradient: odd sizes (tiles
        // cut by the edge), and paddings 0 and 2 (the data gradient's 2 and 0).
        ([2, 16, 15, 13], (3, 3), 1, 1, 1, 1, 20),
        ([1, 16, 18, 18], (3, 3), 1, 0, 1, 1, 16),
        ([1, 24, 16, 17], (3, 3), 1, 2, 1, 1, 16),
    ] {
        let what = format!("f32 conv {k:?} s{stride} p{pad} d{dil} g{groups} on {shape:?}");
        let x = wave(&shape, 50);
        let w = wave(&[filters, shape[1] / groups, k.0, k.1], 51);
        let attrs = Attrs::new()
            .with("kernel", format!("({}, {})", k.0, k.1))
            .with("num_filter", filters)
            .with("stride", format!("({stride}, {stride})"))
            .with("pad", format!("({pad}, {pad})"))
            .with("dilate", format!("({dil}, {dil})"))
            .with("num_group", groups)
            .with("no_bias", true);
        let f32nd = |a: &ArrayD<f64>| nd_as(&rt, a, DType::F32);
        let (xn, wn) = (f32nd(&x), f32nd(&w));
        let y = conv_ref(&x, &w, None, stride, pad, dil, groups);
        let near = |got: &NDArray, want: &ArrayD<f64>, part: &str| {
            let got = got.to_ndarray::<f32>().unwrap().mapv(f64::from);
            assert_eq!(got.shape(), want.shape(), "{what}: {part} shape");
            let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (g, v) in got.iter().zip(want.iter()) {
                assert!((g - v).abs() <= 1e-5 * scale, "{what}: {part} {g} vs {v}");
            }
        };
        near(
            &invoke("Convolution", &[&xn, &wn], &attrs, None).unwrap()[0],
            &y,
            "output",
        );
        let dy = wave(y.shape(), 52);
        let grads = invoke(
            "_backward_Convolution",
            &[&f32nd(&dy), &xn, &wn],
            &attrs,
            None,
        )
        .unwrap();
        let (dx, dw) = conv_grads_ref(&dy, &x, &w, (stride, pad, dil, groups));
        near(&grads[0], &dx, "data gradient");
        near(&grads[1], &dw, "weight gradient");
    }
}

/// Depthwise convolutions (one input channel per group), which run on the planes directly
/// rather than through columns: forward and both gradients against the definitions, over
/// strides, padding, dilation, channel multipliers, odd windows, and a shape large enough to
/// split across threads.
#[test]
fn depthwise_convolution_and_its_gradients_match_their_definitions() {
    let rt = rt();
    let small = [2, 4, 7, 6];
    let large = large([2, 16, 30, 29], [1, 4, 5, 4]);
    for (shape, k, stride, pad, dil, mult, bias) in [
        (small, (3, 3), 1, 1, 1, 1, true),
        (small, (3, 3), 2, 1, 1, 1, false),
        (small, (3, 3), 1, 2, 2, 2, true),
        (small, (3, 3), 2, 0, 1, 2, true),
        (small, (5, 5), 3, 2, 1, 1, false),
        (small, (1, 3), 1, 1, 1, 3, true),
        (small, (2, 2), 1, 0, 1, 1, false),
        (small, (1, 1), 1, 0, 1, 1, true),
        (large, (3, 3), 1, 1, 1, 1, false),
        (large, (3, 3), 2, 1, 1, 2, true),
    ] {
        let ch = shape[1];
        let what = format!("depthwise {k:?} s{stride} p{pad} d{dil} x{mult} on {shape:?}");
        let x = wave(&shape, 40);
        let w = wave(&[ch * mult, 1, k.0, k.1], 41);
        let b = wave(&[ch * mult], 42);
        let attrs = Attrs::new()
            .with("kernel", format!("({}, {})", k.0, k.1))
            .with("num_filter", ch * mult)
            .with("stride", format!("({stride}, {stride})"))
            .with("pad", format!("({pad}, {pad})"))
            .with("dilate", format!("({dil}, {dil})"))
            .with("num_group", ch)
            .with("no_bias", !bias);
        let (xn, wn, bn) = (nd(&rt, &x), nd(&rt, &w), nd(&rt, &b));
        let mut ins = vec![&xn, &wn];
        if bias {
            ins.push(&bn);
        }
        let y = conv_ref(&x, &w, bias.then_some(&b), stride, pad, dil, ch);
        close(&run_all("Convolution", &ins, &attrs)[0], &y, &what);
        let dy = wave(y.shape(), 43);
        let grads = run_all("_backward_Convolution", &[&nd(&rt, &dy), &xn, &wn], &attrs);
        let (dx, dw) = conv_grads_ref(&dy, &x, &w, (stride, pad, dil, ch));
        close(&grads[0], &dx, &format!("{what}: data gradient"));
        close(&grads[1], &dw, &format!("{what}: weight gradient"));
        if bias {
            let db = dy.sum_axis(Axis(3)).sum_axis(Axis(2)).sum_axis(Axis(0));
            close(&grads[2], &db, &format!("{what}: bias gradient"));
        }
    }
}

/// One pooling window of output `(y, x)` over an `h` x `w` plane: the positions it holds
/// (row-major) and its extent clipped to the padded input, by the definition MXNet's CPU
/// kernels follow.
fn pool_window(
    (y, x): (usize, usize),
    (h, w): (usize, usize),
    (k, s, p): ((usize, usize), (usize, usize), (usize, usize)),
) -> (Vec<usize>, f64) {
    let axis = |o: usize, n: usize, k: usize, s: usize, p: usize| {
        let start = (o * s) as isize - p as isize;
        let end = (start + k as isize).min((n + p) as isize);
        (start.max(0)..end.min(n as isize), end - start)
    };
    let (rows, py) = axis(y, h, k.0, s.0, p.0);
    let (cols, px) = axis(x, w, k.1, s.1, p.1);
    let mut at = vec![];
    for iy in rows {
        for ix in cols.clone() {
            at.push(iy as usize * w + ix as usize);
        }
    }
    (at, ((py * px).max(1)) as f64)
}

/// Pooling's outputs (with max pooling's argmax) and data gradient by their definitions, over
/// `x` `(N, C, H, W)` flattened: the first maximum of each window in row-major order (NaN never
/// one; position 0 and, when the window holds nothing, value 0 if nothing beats minus
/// infinity), which also takes the window's gradient (the window's first element when nothing
/// beat minus infinity); the sum, or the sum over the window's extent within the padded input,
/// whose gradient shares are each `round`ed to the element type (for integers, truncated).
fn pool_ref(
    x: &[f64],
    dy: &[f64],
    shape: [usize; 4],
    (ho, wo): (usize, usize),
    kind: &str,
    geometry: ((usize, usize), (usize, usize), (usize, usize)),
    round: impl Fn(f64) -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (h, w) = (shape[2], shape[3]);
    let (mut out, mut mask, mut dx) = (vec![], vec![], vec![0.0; x.len()]);
    for plane in 0..shape[0] * shape[1] {
        let (x, dx) = (&x[plane * h * w..], &mut dx[plane * h * w..]);
        for y in 0..ho {
            for xx in 0..wo {
                let g = dy[out.len()];
                let (window, extent) = pool_window((y, xx), (h, w), geometry);
                if kind == "max" {
                    let (mut best, mut at) = (f64::NEG_INFINITY, None);
                    for &i in &window {
                        if x[i] > best {
                            (best, at) = (x[i], Some(i));
                        }
                    }
                    out.push(if window.is_empty() { 0.0 } else { best });
                    mask.push(at.unwrap_or(0) as f64);
                    if let Some(&to) = at.as_ref().or(window.first()) {
                        dx[to] += g;
                    }
                    continue;
                }
                let sum: f64 = window.iter().map(|&i| x[i]).sum();
                let share = if kind == "sum" { 1.0 } else { 1.0 / extent };
                out.push(sum * share);
                for &i in &window {
                    dx[i] += round(g * share);
                }
            }
        }
    }
    (out, mask, dx)
}

/// Elements of type `T` that exercise pooling: for floats, values on a coarse grid (so that
/// windows hold ties, and the first maximum must be the one taken) with, where `special`,
/// every 7th minus infinity and every 11th NaN; for integers, small ones that sum past `u8`.
fn pool_data<T: ndarray_ops::Element>(n: usize, seed: usize, special: bool) -> Vec<T> {
    (0..n)
        .map(|i| {
            let v = ((i * 37 + seed * 11) % 23) as f64;
            let float = T::DTYPE.is_float();
            T::from_f64(match i % 77 {
                _ if !float => v * 10.0,
                0 | 7 | 14 | 21 | 28 | 35 | 42 | 49 | 56 | 63 | 70 if special => f64::NEG_INFINITY,
                11 | 22 | 33 | 44 | 55 | 66 if special => f64::NAN,
                _ => v / 4.0 - 2.0,
            })
        })
        .collect()
}

/// Runs one pooling case in type `T` against `pool_ref`.
fn pool_case<T: ndarray_ops::Element>(
    rt: &Arc<Runtime>,
    shape: [usize; 4],
    kind: &str,
    (k, s, p): ((usize, usize), (usize, usize), (usize, usize)),
    full: bool,
) {
    let n: usize = shape.iter().product();
    let x = pool_data::<T>(n, 1, kind == "max");
    let attrs = Attrs::new()
        .with("pool_type", kind)
        .with("kernel", format!("({},{})", k.0, k.1))
        .with("stride", format!("({},{})", s.0, s.1))
        .with("pad", format!("({},{})", p.0, p.1))
        .with("pooling_convention", if full { "full" } else { "valid" });
    let what = format!(
        "{:?} {kind} {shape:?} k{k:?} s{s:?} p{p:?} full={full}",
        T::DTYPE
    );
    let xn = rt.from_vec(x.clone(), &shape, Context::cpu(0)).unwrap();
    let outs = invoke("Pooling", &[&xn], &attrs, None).unwrap();
    let olen = |n: usize, k: usize, s: usize, p: usize| match full {
        true => (n + 2 * p - k).div_ceil(s) + 1,
        false => (n + 2 * p - k) / s + 1,
    };
    let (ho, wo) = (olen(shape[2], k.0, s.0, p.0), olen(shape[3], k.1, s.1, p.1));
    assert_eq!(outs[0].shape(), &[shape[0], shape[1], ho, wo], "{what}");
    // Integer gradients small enough that no sum of them wraps (integer arithmetic wraps).
    let dy: Vec<T> = pool_data::<T>(outs[0].size(), 2, false)
        .into_iter()
        .map(|v| {
            T::from_f64(if T::DTYPE.is_float() {
                v.to_f64()
            } else {
                v.to_f64() % 3.0
            })
        })
        .collect();
    let dyn_ = rt
        .from_vec(dy.clone(), outs[0].shape(), Context::cpu(0))
        .unwrap();
    let dx = invoke("_backward_Pooling", &[&dyn_, &xn], &attrs, None).unwrap();
    let f64s = |v: &[T]| v.iter().map(|v| v.to_f64()).collect::<Vec<_>>();
    let (x, dy) = (f64s(&x), f64s(&dy));
    let geometry = (k, s, p);
    let round = |v: f64| T::from_f64(v).to_f64();
    let (want, want_mask, want_dx) = pool_ref(&x, &dy, shape, (ho, wo), kind, geometry, round);
    // Sums in T (floats) may round; maxima, positions and integer sums may not.
    let tol = if T::DTYPE == DType::F32 { 1e-5 } else { 1e-12 };
    let want_t = |v: &[f64]| f64s(&v.iter().map(|&v| T::from_f64(v)).collect::<Vec<_>>());
    let mut checks = vec![
        ("output", outs[0].to_vec::<T>().unwrap(), want_t(&want)),
        (
            "data gradient",
            dx[0].to_vec::<T>().unwrap(),
            want_t(&want_dx),
        ),
    ];
    if kind == "max" {
        checks.push(("argmax", outs[1].to_vec::<T>().unwrap(), want_t(&want_mask)));
    }
    for (name, got, want) in checks {
        for (i, (g, w)) in f64s(&got).iter().zip(&want).enumerate() {
            let same =
                (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
            assert!(same, "{what}: {name}[{i}] = {g}, want {w}");
        }
    }
}

#[test]
fn pooling_and_its_gradient_match_their_definitions() {
    let rt = rt();
    // Rows wide enough for blocks of eight outputs between the padded edges, and planes enough
    // (in the last shape) that pooling splits them across threads.
    let (small, wide) = ([2, 3, 7, 6], large([1, 3, 9, 45], [1, 1, 9, 30]));
    let large = large([2, 16, 40, 38], [1, 4, 6, 5]);
    for (shape, kind, k, s, p, full) in [
        (small, "max", (2, 2), (2, 2), (0, 0), false),
        (small, "avg", (3, 3), (2, 2), (1, 1), false),
        (small, "sum", (3, 3), (1, 1), (1, 1), false),
        (small, "max", (3, 3), (2, 2), (0, 0), true),
        (small, "avg", (2, 2), (2, 2), (0, 0), true),
        // The last row of windows lies wholly in the padding.
        (small, "max", (2, 2), (3, 3), (1, 1), true),
        (small, "avg", (2, 2), (3, 3), (1, 1), true),
        // One output per plane (global pooling, and a padded window that covers the plane).
        (small, "max", (7, 6), (1, 1), (0, 0), false),
        (small, "sum", (7, 6), (1, 1), (0, 0), false),
        (small, "avg", (8, 7), (2, 2), (1, 1), false),
        (small, "max", (8, 7), (2, 3), (1, 1), false),
        (wide, "avg", (wide[2], wide[3]), (1, 1), (0, 0), false),
        (wide, "max", (3, 3), (2, 2), (1, 1), false),
        (wide, "max", (3, 3), (1, 1), (1, 1), false),
        (wide, "max", (2, 2), (2, 2), (0, 0), false),
        (wide, "max", (1, 3), (1, 3), (0, 1), true),
        (wide, "max", (5, 4), (3, 1), (2, 2), false),
        // Windows of one element, and of two (some only minus infinity and NaN).
        (wide, "max", (1, 1), (1, 1), (0, 0), false),
        (wide, "max", (1, 2), (1, 1), (0, 0), false),
        (wide, "avg", (3, 3), (2, 2), (1, 1), false),
        (wide, "avg", (3, 2), (1, 3), (1, 1), true),
        (wide, "sum", (5, 5), (2, 3), (2, 2), false),
        (large, "max", (3, 3), (2, 2), (1, 1), false),
        (large, "avg", (3, 3), (1, 1), (1, 1), false),
    ] {
        let g = (k, s, p);
        pool_case::<f32>(&rt, shape, kind, g, full);
        pool_case::<u8>(&rt, shape, kind, g, full);
        // Under Miri, one float and one integer type: the others run the same code.
        if !cfg!(miri) {
            pool_case::<f64>(&rt, shape, kind, g, full);
            pool_case::<i32>(&rt, shape, kind, g, full);
        }
    }
    // Average pooling that leaves the padding out of its divisor.
    let x = wave(&[1, 2, 5, 12], 9);
    let exclude = Attrs::new()
        .with("pool_type", "avg")
        .with("kernel", "(3,3)")
        .with("pad", "(1,1)")
        .with("count_include_pad", false);
    let got = &run_all("Pooling", &[&nd(&rt, &x)], &exclude)[0];
    for ((c, y, xx), g) in (0..2)
        .flat_map(|c| (0..5).flat_map(move |y| (0..12).map(move |xx| (c, y, xx))))
        .zip(got.iter())
    {
        let window = |o: usize, n: usize| o.saturating_sub(1)..(o + 2).min(n);
        let x = &x;
        let vals: Vec<f64> = window(y, 5)
            .flat_map(|iy| window(xx, 12).map(move |ix| x[[0, c, iy, ix]]))
            .collect();
        let want = vals.iter().sum::<f64>() / vals.len() as f64;
        assert!(
            (g - want).abs() < 1e-12,
            "count_include_pad=False at {c},{y},{xx}: {g} vs {want}"
        );
    }
    let x = wave(&[2, 3, 7, 6], 9);
    let xn = nd(&rt, &x);
    let glob = &run_all(
        "Pooling",
        &[&xn],
        &Attrs::new()
            .with("pool_type", "avg")
            .with("global_pool", true),
    )[0];
    close(
        glob,
        &x.mean_axis(Axis(3))
            .unwrap()
            .mean_axis(Axis(2))
            .unwrap()
            .insert_axis(Axis(2))
            .insert_axis(Axis(3)),
        "global avg",
    );
}

#[test]
fn deconvolution_is_the_transpose_of_convolution() {
    let rt = rt();
    for (stride, pad, dil, groups) in [(1usize, 0usize, 1usize, 1usize), (2, 1, 1, 1), (2, 0, 2, 2)]
    {
        let (n, cin, h, w, f, k) = (2, 4, 4, 3, 6, 3);
        let x = wave(&[n, cin, h, w], 30);
        let wt = wave(&[cin, f / groups, k, k], 31);
        let b = wave(&[f], 32);
        let attrs = Attrs::new()
            .with("kernel", "(3,3)")
            .with("num_filter", f)
            .with("stride", format!("({stride},{stride})"))
            .with("pad", format!("({pad},{pad})"))
            .with("dilate", format!("({dil},{dil})"))
            .with("num_group", groups)
            .with("no_bias", false);
        let got = &run_all(
            "Deconvolution",
            &[&nd(&rt, &x), &nd(&rt, &wt), &nd(&rt, &b)],
            &attrs,
        )[0];
        let ho = (h - 1) * stride + dil * (k - 1) + 1 - 2 * pad;
        let wo = (w - 1) * stride + dil * (k - 1) + 1 - 2 * pad;
        assert_eq!(got.shape(), &[n, f, ho, wo]);
        let (cg, fg) = (cin / groups, f / groups);
        let mut want = ArrayD::<f64>::zeros(IxDyn(&[n, f, ho, wo]));
        for img in 0..n {
            for c in 0..cin {
                let g = c / cg;
                for fo in 0..fg {
                    for iy in 0..h {
                        for ix in 0..w {
                            for i in 0..k {
                                for j in 0..k {
                                    let oy = (iy * stride + i * dil) as isize - pad as isize;
                                    let ox = (ix * stride + j * dil) as isize - pad as isize;
                                    if oy >= 0
                                        && ox >= 0
                                        && (oy as usize) < ho
                                        && (ox as usize) < wo
                                    {
                                        want[[img, g * fg + fo, oy as usize, ox as usize]] +=
                                            x[[img, c, iy, ix]] * wt[[c, fo, i, j]];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        for img in 0..n {
            for fo in 0..f {
                want.index_axis_mut(Axis(0), img)
                    .index_axis_mut(Axis(0), fo)
                    .mapv_inplace(|v| v + b[[fo]]);
            }
        }
        close(
            got,
            &want,
            &format!("deconv s{stride} p{pad} d{dil} g{groups}"),
        );
    }
}

/// The backward kernels, and Activation, on shapes large enough that each splits its pass
/// across threads. Convolution is linear in its data and in its weight, and pooling in its data
/// (at fixed maxima), so their gradients must satisfy the adjoint identity
/// `<f(x), dy> = <x, f*(dy)>`; BatchNorm's gradient and Activation are checked against their
/// formulas.
#[test]
fn large_passes_and_their_gradients_match_their_definitions() {
    let rt = rt();
    let dot = |a: &ArrayD<f64>, b: &ArrayD<f64>| (a * b).sum();
    let same = |a: f64, b: f64, what: &str| {
        assert!(
            (a - b).abs() <= 1e-9 * (1.0 + a.abs()),
            "{what}: {a} against {b}"
        );
    };
    // Convolution: col2im splits 8 channels of 9 taps x 4,620 or 1,155 columns; a 1x1 window
    // of stride 1 writes its data gradient without col2im.
    let x = wave(&large([1, 8, 70, 66], [1, 8, 5, 4]), 20);
    for (k, stride, pad, dil) in [(3, 1, 1, 1), (3, 2, 2, 2), (1, 1, 0, 1)] {
        let w = wave(&[8, 8, k, k], 21);
        let attrs = Attrs::new()
            .with("kernel", format!("({k}, {k})"))
            .with("num_filter", 8)
            .with("stride", format!("({stride}, {stride})"))
            .with("pad", format!("({pad}, {pad})"))
            .with("dilate", format!("({dil}, {dil})"))
            .with("no_bias", true);
        let y = conv_ref(&x, &w, None, stride, pad, dil, 1);
        let dy = wave(y.shape(), 22);
        let grads = run_all(
            "_backward_Convolution",
            &[&nd(&rt, &dy), &nd(&rt, &x), &nd(&rt, &w)],
            &attrs,
        );
        let what = format!("convolution {k}x{k} s{stride} p{pad} d{dil}");
        same(dot(&y, &dy), dot(&x, &grads[0]), &format!("{what}, data"));
        same(dot(&y, &dy), dot(&w, &grads[1]), &format!("{what}, weight"));
    }
    // Pooling: 32 planes, each 20 x 19 windows of 3 x 3.
    let x = wave(&large([2, 16, 40, 38], [1, 4, 6, 5]), 23);
    let xn = nd(&rt, &x);
    for kind in ["max", "avg", "sum"] {
        let attrs = Attrs::new()
            .with("pool_type", kind)
            .with("kernel", "(3, 3)")
            .with("stride", "(2, 2)")
            .with("pad", "(1, 1)");
        let y = &run_all("Pooling", &[&xn], &attrs)[0];
        let dy = wave(y.shape(), 24);
        let dx = &run_all("_backward_Pooling", &[&nd(&rt, &dy), &xn], &attrs)[0];
        same(dot(y, &dy), dot(&x, dx), &format!("{kind} pooling"));
    }
    // BatchNorm's gradient with batch statistics: 8 channels of 7,936 elements.
    let (shape, eps) = (large([2, 8, 64, 62], [2, 8, 3, 3]), 1e-5);
    let (x, dy, gamma) = (wave(&shape, 25), wave(&shape, 26), wave(&[8], 27));
    let lanes = |a: &ArrayD<f64>, c: usize| a.index_axis(Axis(1), c).to_owned();
    let mean = ArrayD::from_shape_fn(IxDyn(&[8]), |i| lanes(&x, i[0]).mean().unwrap());
    let var = ArrayD::from_shape_fn(IxDyn(&[8]), |i| {
        lanes(&x, i[0])
            .mapv(|v| (v - mean[[i[0]]]).powi(2))
            .mean()
            .unwrap()
    });
    let grads = run_all(
        "_backward_BatchNorm",
        &[
            &nd(&rt, &dy),
            &nd(&rt, &x),
            &nd(&rt, &gamma),
            &nd(&rt, &mean),
            &nd(&rt, &var),
        ],
        &Attrs::new()
            .with("eps", eps)
            .with("fix_gamma", false)
            .with(IS_TRAIN, true),
    );
    let mut want_dx = x.clone();
    for c in 0..8 {
        let inv = 1.0 / (var[[c]] + eps).sqrt();
        let xhat = lanes(&x, c).mapv(|v| (v - mean[[c]]) * inv);
        let d = lanes(&dy, c);
        let m = d.len() as f64;
        let (sum_dy, sum_dy_xhat) = (d.sum(), (&d * &xhat).sum());
        same(grads[2][[c]], sum_dy, "BatchNorm beta gradient");
        same(grads[1][[c]], sum_dy_xhat, "BatchNorm gamma gradient");
        let dx = (&d - sum_dy / m - &xhat * (sum_dy_xhat / m)) * (gamma[[c]] * inv);
        want_dx.index_axis_mut(Axis(1), c).assign(&dx);
    }
    close(&grads[0], &want_dx, "BatchNorm data gradient");
    // Activation and its gradient over 90,000 elements.
    let shape = large([3, 30_000], [3, 40]);
    let x = wave(&shape, 28);
    let (xn, dy) = (nd(&rt, &x), wave(&shape, 29));
    type Act = (&'static str, fn(f64) -> f64, fn(f64) -> f64);
    let acts: [Act; 4] = [
        ("relu", |x| x.max(0.0), |y| if y > 0.0 { 1.0 } else { 0.0 }),
        ("sigmoid", |x| 1.0 / (1.0 + (-x).exp()), |y| y * (1.0 - y)),
        ("tanh", f64::tanh, |y| 1.0 - y * y),
        ("softrelu", |x| x.exp().ln_1p(), |y| 1.0 - (-y).exp()),
    ];
    for (act, f, df) in acts {
        let attrs = Attrs::new().with("act_type", act);
        let y = &run_all("Activation", &[&xn], &attrs)[0];
        close(y, &x.mapv(f), act);
        let dx = &run_all(
            "_backward_Activation",
            &[&nd(&rt, &dy), &nd(&rt, y)],
            &attrs,
        )[0];
        close(dx, &(&dy * &y.mapv(df)), &format!("{act} gradient"));
    }
}

/// BatchNorm's gradient in f32 (sixteen lanes at a time where the CPU has AVX-512, partial sums
/// carried to f64 every 1,024 elements) against the same gradient in f64, over runs of a
/// channel shorter than a lane, across lanes and blocks, with data far from zero (the sums are
/// of `dy·(x - mean)`, so the offset must not cost precision), with batch statistics and with
/// the moving ones, gamma fixed and free.
#[test]
fn f32_batch_norm_gradients_match_f64() {
    let rt = rt();
    for (shape, train, fix_gamma) in [
        ([2usize, 3, 1, 1], true, false),
        ([3, 4, 3, 3], true, true),
        ([1, 5, 7, 7], true, false),
        ([2, 3, 33, 65], true, false),
        ([2, 3, 33, 65], false, false),
    ] {
        let what = format!("BatchNorm gradient on {shape:?}, train {train}, fix_gamma {fix_gamma}");
        let c = shape[1];
        let x = wave(&shape, 60).mapv(|v| v + 1000.0);
        let dy = wave(&shape, 61);
        let gamma = wave(&[c], 62).mapv(|v| v + 1.5);
        // The statistics the forward pass would have used: each channel's mean and variance.
        let m = (shape.iter().product::<usize>() / c) as f64;
        let mut mean = ndarray::Array1::<f64>::zeros(c);
        let mut var = ndarray::Array1::<f64>::zeros(c);
        for ch in 0..c {
            let lane = x.index_axis(Axis(1), ch);
            let mu = lane.sum() / m;
            mean[ch] = mu;
            var[ch] = lane.mapv(|v| (v - mu) * (v - mu)).sum() / m;
        }
        let attrs = Attrs::new()
            .with("eps", 1e-3)
            .with("fix_gamma", fix_gamma)
            .with(IS_TRAIN, train);
        // Both runs take the same values (those f32 holds), so what differs is the arithmetic.
        let f32ed = |a: ArrayD<f64>| a.mapv(|v| f64::from(v as f32));
        let (x, dy, gamma, mean, var) = (
            f32ed(x),
            f32ed(dy),
            f32ed(gamma.into_dyn()),
            f32ed(mean.into_dyn()),
            f32ed(var.into_dyn()),
        );
        let run = |dtype: DType| -> Vec<ArrayD<f64>> {
            let put = |a: &ArrayD<f64>| nd_as(&rt, a, dtype);
            let ins = [&dy, &x, &gamma, &mean, &var].map(put);
            let refs: Vec<&NDArray> = ins.iter().collect();
            invoke("_backward_BatchNorm", &refs, &attrs, None)
                .unwrap()
                .iter()
                .map(|g| match dtype {
                    DType::F32 => g.to_ndarray::<f32>().unwrap().mapv(f64::from),
                    _ => g.to_ndarray::<f64>().unwrap(),
                })
                .collect()
        };
        let (single, double) = (run(DType::F32), run(DType::F64));
        for (part, (got, want)) in ["data", "gamma", "beta"]
            .iter()
            .zip(single.iter().zip(&double))
        {
            let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (g, v) in got.iter().zip(want.iter()) {
                assert!((g - v).abs() <= 1e-4 * scale, "{what}: {part} {g} vs {v}");
            }
        }
    }
}

/// BatchNorm's forward pass in `f32` (sixteen lanes on AVX-512) agrees with the same data in
/// `f64`: the batch statistics it outputs, the moving averages it updates and the normalized
/// output, fused with ReLU or not, on runs shorter than a lane, across lanes and across
/// blocks, data offset far from zero.
#[test]
fn f32_batch_norm_forward_matches_f64() {
    let rt = rt();
    for (shape, train, op) in [
        ([2usize, 3, 1, 1], true, "BatchNorm"),
        ([3, 4, 3, 3], true, "_fused_BatchNormReLU"),
        ([1, 5, 7, 7], false, "BatchNorm"),
        ([2, 3, 33, 65], true, "BatchNorm"),
        ([2, 3, 33, 65], true, "_fused_BatchNormReLU"),
        ([2, 3, 33, 65], false, "_fused_BatchNormReLU"),
    ] {
        let what = format!("{op} on {shape:?}, train {train}");
        let c = shape[1];
        let f32ed = |a: ArrayD<f64>| a.mapv(|v| f64::from(v as f32));
        let x = f32ed(wave(&shape, 70).mapv(|v| v + 1000.0));
        let gamma = f32ed(wave(&[c], 71).mapv(|v| v + 1.5));
        let beta = f32ed(wave(&[c], 72));
        let moving_mean = f32ed(wave(&[c], 73).mapv(|v| v + 1000.0));
        let moving_var = f32ed(wave(&[c], 74).mapv(|v| v.abs() + 0.5));
        let attrs = Attrs::new()
            .with("eps", 1e-3)
            .with("fix_gamma", false)
            .with(IS_TRAIN, train);
        let run = |dtype: DType| -> Vec<ArrayD<f64>> {
            let put = |a: &ArrayD<f64>| nd_as(&rt, a, dtype);
            let ins = [&x, &gamma, &beta, &moving_mean, &moving_var].map(put);
            let refs: Vec<&NDArray> = ins.iter().collect();
            let mut outs = invoke(
                op,
                &refs,
                &attrs.clone().with("output_mean_var", true),
                None,
            )
            .unwrap();
            outs.extend([ins[3].clone(), ins[4].clone()]);
            outs.iter()
                .map(|g| match dtype {
                    DType::F32 => g.to_ndarray::<f32>().unwrap().mapv(f64::from),
                    _ => g.to_ndarray::<f64>().unwrap(),
                })
                .collect()
        };
        let (single, double) = (run(DType::F32), run(DType::F64));
        for (part, (got, want)) in ["output", "mean", "var", "moving_mean", "moving_var"]
            .iter()
            .zip(single.iter().zip(&double))
        {
            let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (g, v) in got.iter().zip(want.iter()) {
                assert!((g - v).abs() <= 1e-4 * scale, "{what}: {part} {g} vs {v}");
            }
        }
        if op == "_fused_BatchNormReLU" {
            assert!(
                single[0].iter().all(|&v| v >= 0.0),
                "{what}: a negative output"
            );
            assert!(
                single[0].iter().any(|&v| v == 0.0),
                "{what}: ReLU never cut"
            );
        }
    }
}
