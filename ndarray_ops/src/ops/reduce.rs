//! Reductions along axes: sum, mean, prod, max, min, norm (L2 or L1), argmax, argmin (MXNet
//! semantics: no axis reduces everything to shape `(1,)`; `keepdims` keeps reduced axes as 1).

use ndarray::{ArrayD, ArrayViewD, Axis, IxDyn};

use super::{norm_axes, Arity, Attrs, OpDef, TensorRef};
use crate::error::Result;
use crate::resources::KernelRes;
use crate::{DType, Element};

/// The axes a reduction (or its backward op, which carries its attributes) reduces, sorted:
/// `axis` (none or empty: all), or every other axis with `exclude`.
pub(crate) fn axes_of(op: &str, attrs: &Attrs, ndim: usize) -> Result<Vec<usize>> {
    let mut axes = match attrs.ints(op, "axis")? {
        None => (0..ndim).collect(),
        Some(a) if a.is_empty() => (0..ndim).collect(),
        Some(a) => norm_axes(op, &a, ndim)?,
    };
    if attrs.bool(op, "exclude", false)? {
        axes = (0..ndim).filter(|d| !axes.contains(d)).collect();
    }
    axes.sort_unstable();
    Ok(axes)
}

fn out_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if !axes.contains(&d) {
            out.push(n);
        } else if keepdims {
            out.push(1);
        }
    }
    if out.is_empty() {
        out.push(1);
    }
    out
}

fn infer(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    let keep = attrs.bool(op, "keepdims", false)?;
    if op == "norm" {
        norm_ord(op, attrs)?;
        if attrs.get("out_dtype").is_some_and(|t| t != "None") {
            return Err(crate::error::invalid(op, "out_dtype is not supported"));
        }
    }
    if matches!(op, "argmax" | "argmin") {
        let shape = match attrs.ints(op, "axis")? {
            None => vec![1],
            Some(a) => {
                let ax = norm_axes(op, &a, s[0].len())?;
                if ax.len() != 1 {
                    return Err(crate::error::invalid(op, "takes one axis"));
                }
                out_shape(&s[0], &ax, keep)
            }
        };
        return Ok((vec![shape], vec![d[0]]));
    }
    let axes = axes_of(op, attrs, s[0].len())?;
    if matches!(op, "max" | "min") && axes.iter().any(|&a| s[0][a] == 0) {
        return Err(crate::error::invalid(
            op,
            format!("cannot reduce an empty axis of shape {:?}", s[0]),
        ));
    }
    Ok((vec![out_shape(&s[0], &axes, keep)], vec![d[0]]))
}

/// `norm`'s order: 2 (the default) or 1.
pub(crate) fn norm_ord(op: &str, attrs: &Attrs) -> Result<u8> {
    match attrs.f64(op, "ord", Some(2.0))? {
        2.0 => Ok(2),
        1.0 => Ok(1),
        o => Err(crate::error::invalid(op, format!("ord={o} is not 1 or 2"))),
    }
}

fn reduce_view<T: Element>(op: &str, v: ArrayViewD<'_, T>, axes: &[usize]) -> ArrayD<T> {
    if op == "norm" {
        // ord is checked at inference; 2 sums squares, 1 magnitudes, in f64.
        let squares = v.mapv(|x| x.to_f64() * x.to_f64());
        let r = reduce_view::<f64>("sum", squares.view(), axes);
        return r.mapv(|x| T::from_f64(x.sqrt()));
    }
    if op == "norm1" {
        let abs = v.mapv(|x| x.to_f64().abs());
        return reduce_view::<f64>("sum", abs.view(), axes).mapv(T::from_f64);
    }
    let mut acc = v.to_owned();
    let count: usize = axes.iter().map(|&a| v.shape()[a]).product();
    for &ax in axes.iter().rev() {
        let axis = Axis(ax);
        acc = match op {
            "max" => acc.fold_axis(axis, T::from_f64(f64::NEG_INFINITY), |&m, &x| {
                if x > m {
                    x
                } else {
                    m
                }
            }),
            "min" => acc.fold_axis(
                axis,
                T::from_f64(f64::INFINITY),
                |&m, &x| if x < m { x } else { m },
            ),
            "prod" => acc.fold_axis(axis, T::from_f64(1.0), |&p, &x| p.mul(x)),
            _ => acc.fold_axis(axis, T::default(), |&s, &x| s.add(x)),
        };
    }
    if op == "mean" {
        let n = T::from_f64(count.max(1) as f64);
        acc.mapv_inplace(|x| x.div(n));
    }
    acc
}

fn kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> std::result::Result<(), String> {
    let (a, out) = (&ins[0], &outs[0]);
    crate::with_dtype!(a.dtype, T => {
        // SAFETY: the engine gives this op read access to the input; `run_kernel` copied it if it
        // overlapped the output; the shape matches the buffer.
        let view = unsafe { ArrayViewD::from_shape_ptr(IxDyn(&a.shape), a.ptr::<T>() as *const T) };
        // SAFETY: exclusive access to the output (disjoint from the input view).
        let dst = unsafe { out.slice_mut::<T>() };
        if matches!(op, "argmax" | "argmin") {
            let max = op == "argmax";
            let arg = |lane: ndarray::ArrayViewD<'_, T>| {
                // The first extremum wins, as in MXNet.
                let mut best: Option<(usize, T)> = None;
                for (i, &x) in lane.iter().enumerate() {
                    if best.is_none_or(|(_, b)| if max { x > b } else { x < b }) {
                        best = Some((i, x));
                    }
                }
                T::from_f64(best.map_or(0, |(i, _)| i) as f64)
            };
            match attrs.ints(op, "axis").map_err(|e| e.to_string())? {
                None => dst[0] = arg(view.view().into_shape_with_order(IxDyn(&[a.len()])).map_err(|e| e.to_string())?),
                Some(ax) => {
                    let ax = norm_axes(op, &ax, a.shape.len()).map_err(|e| e.to_string())?[0];
                    for (o, lane) in dst.iter_mut().zip(view.lanes(Axis(ax))) {
                        *o = arg(lane.into_dyn());
                    }
                }
            }
            return Ok(());
        }
        let axes = axes_of(op, attrs, a.shape.len()).map_err(|e| e.to_string())?;
        let which = match (op, norm_ord(op, attrs)) {
            ("norm", Ok(1)) => "norm1",
            _ => op,
        };
        let r = reduce_view::<T>(which, view, &axes);
        for (o, x) in dst.iter_mut().zip(r.iter()) {
            *o = *x;
        }
    });
    Ok(())
}

macro_rules! def {
    ($name:expr, $ign:expr) => {
        OpDef {
            backward_ignores: $ign,
            alias_safe: false,
            ..OpDef::new($name, Arity::Exactly(1), infer, kernel)
        }
    };
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        def!("sum", &[0]),
        def!("mean", &[0]),
        def!("max", &[]),
        def!("min", &[]),
        def!("argmax", &[0]),
        def!("argmin", &[0]),
        def!("prod", &[]),
        def!("norm", &[]),
    ];
    OPS
}
