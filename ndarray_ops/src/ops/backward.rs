//! Backward ops (MXNet's `_backward_*` names) and the elementwise sum that aggregates gradients.

use ndarray::{ArrayView2, ArrayViewMut2};

use super::{same_dtypes, Arity, Attrs, OpDef, TensorRef};
use crate::error::{invalid, NdError, Result};
use crate::resources::KernelRes;
use crate::{DType, Element};

type Infer = Result<(Vec<Vec<usize>>, Vec<DType>)>;
type KResult = std::result::Result<(), String>;

// ---- add_n ----------------------------------------------------------------------------------

fn infer_add_n(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    for (i, x) in s.iter().enumerate().skip(1) {
        if *x != s[0] {
            return Err(NdError::Shape {
                op: op.into(),
                arg: format!("input {i}"),
                found: x.clone(),
                expected: format!("{:?} like input 0", s[0]),
            });
        }
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

fn add_n_kernel(
    _: &str,
    _: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    crate::with_dtype!(outs[0].dtype, T => {
        let o = outs[0].ptr::<T>();
        for i in 0..outs[0].len() {
            let mut acc = T::default();
            for t in ins {
                // SAFETY: equal lengths; raw reads tolerate the output being exactly one input.
                acc = acc.add(unsafe { *t.ptr::<T>().add(i) });
            }
            // SAFETY: as above.
            unsafe { *o.add(i) = acc };
        }
    });
    Ok(())
}

// ---- _backward_FullyConnected: (ograd, data, weight) -> (data grad, weight grad[, bias grad]) --

fn infer_fc_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let no_bias = attrs.bool(op, "no_bias", false)?;
    let mut out = vec![s[1].clone(), s[2].clone()];
    if !no_bias {
        out.push(vec![s[2][0]]);
    }
    let n = out.len();
    Ok((out, vec![dt; n]))
}

fn fc_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (dy, x, w) = (&ins[0], &ins[1], &ins[2]);
    let (hidden, k) = (w.shape[0], w.shape[1]);
    let m = x.len().checked_div(k).unwrap_or(0);
    crate::with_dtype!(dy.dtype, T => {
        // SAFETY: shapes come from inference over these buffers; outputs are disjoint from inputs.
        unsafe {
            let dyv = ArrayView2::from_shape_ptr((m, hidden), dy.ptr::<T>() as *const T);
            let xv = ArrayView2::from_shape_ptr((m, k), x.ptr::<T>() as *const T);
            let wv = ArrayView2::from_shape_ptr((hidden, k), w.ptr::<T>() as *const T);
            let mut dx = ArrayViewMut2::from_shape_ptr((m, k), outs[0].ptr::<T>());
            let mut dw = ArrayViewMut2::from_shape_ptr((hidden, k), outs[1].ptr::<T>());
            T::gemm(&dyv, &wv, &mut dx);
            T::gemm(&dyv.t(), &xv, &mut dw);
            if !attrs.bool(op, "no_bias", false).map_err(|e| e.to_string())? {
                let db = outs[2].slice_mut::<T>();
                db.fill(T::default());
                for row in dyv.rows() {
                    for (b, v) in db.iter_mut().zip(row) {
                        *b = b.add(*v);
                    }
                }
            }
        }
    });
    Ok(())
}

// ---- _backward_Activation: (ograd, output) -> input grad -----------------------------------

fn infer_act_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    act_derivative(op, attrs)?;
    if s[0] != s[1] {
        return Err(NdError::Shape {
            op: op.into(),
            arg: "output".into(),
            found: s[1].clone(),
            expected: format!("{:?} like the gradient", s[0]),
        });
    }
    Ok((vec![s[0].clone()], vec![dt]))
}

/// dy/dx as a function of the output y.
fn act_derivative(op: &str, attrs: &Attrs) -> Result<fn(f64) -> f64> {
    Ok(match attrs.get("act_type").unwrap_or("relu") {
        "relu" => |y: f64| if y > 0.0 { 1.0 } else { 0.0 },
        "sigmoid" => |y: f64| y * (1.0 - y),
        "tanh" => |y: f64| 1.0 - y * y,
        "softrelu" => |y: f64| 1.0 - (-y).exp(),
        other => return Err(invalid(op, format!("no gradient for act_type {other:?}"))),
    })
}

fn act_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let f = act_derivative(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (g, y, o) = (ins[0].ptr::<T>(), ins[1].ptr::<T>(), outs[0].ptr::<T>());
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths; raw pointers tolerate the output being exactly an input.
            unsafe { *o.add(i) = T::from_f64((*g.add(i)).to_f64() * f((*y.add(i)).to_f64())) };
        }
    });
    Ok(())
}

// ---- _backward_SoftmaxOutput: (output, label) -> (data grad, label grad) ---------------------

fn infer_softmax_output_backward(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[0].len() != 2 || s[1] != [s[0][0]] {
        return Err(NdError::Shape {
            op: op.into(),
            arg: "label".into(),
            found: s[1].clone(),
            expected: format!(
                "[{}] for a 2-D output {:?}",
                s[0].first().copied().unwrap_or(0),
                s[0]
            ),
        });
    }
    Ok((vec![s[0].clone(), s[1].clone()], vec![d[0], d[1]]))
}

fn softmax_output_backward_kernel(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    _res: &mut KernelRes,
) -> KResult {
    let (p, label) = (&ins[0], &ins[1]);
    let (n, c) = (p.shape[0], p.shape[1]);
    let scale = attrs
        .f64(op, "grad_scale", Some(1.0))
        .map_err(|e| e.to_string())?;
    let scale = match attrs.get("normalization").unwrap_or("null") {
        "batch" => scale / n.max(1) as f64,
        "null" => scale,
        other => {
            return Err(format!(
                "{op}: normalization {other:?} is not null or batch"
            ))
        }
    };
    crate::with_dtype!(p.dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the disjoint outputs.
        let (pv, g, lg) = unsafe { (p.slice::<T>(), outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>()) };
        let labels: Vec<f64> = crate::with_dtype!(label.dtype, L => unsafe { label.slice::<L>() }.iter().map(|v| v.to_f64()).collect());
        for i in 0..n {
            for j in 0..c {
                let hit = if labels[i] as usize == j && labels[i] >= 0.0 { 1.0 } else { 0.0 };
                g[i * c + j] = T::from_f64((pv[i * c + j].to_f64() - hit) * scale);
            }
        }
        lg.fill(T::default());
    });
    Ok(())
}

macro_rules! def {
    ($name:expr, $aliases:expr, $arity:expr, $infer:expr, $kernel:expr, $inplace:expr) => {
        OpDef {
            name: $name,
            aliases: $aliases,
            arity: $arity,
            infer: $infer,
            kernel: $kernel,
            inplace: $inplace,
            identity: false,
            backward_ignores: &[],
            alias_safe: true,
            mutate_inputs: &[],
            resources: &[],
            infer_inputs: None,
        }
    };
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        def!(
            "add_n",
            &["ElementWiseSum", "_grad_add"],
            Arity::AtLeast(1),
            infer_add_n,
            add_n_kernel,
            &[(0, 0)]
        ),
        OpDef {
            alias_safe: false,
            ..def!(
                "_backward_FullyConnected",
                &[],
                Arity::Exactly(3),
                infer_fc_backward,
                fc_backward_kernel,
                &[]
            )
        },
        def!(
            "_backward_Activation",
            &[],
            Arity::Exactly(2),
            infer_act_backward,
            act_backward_kernel,
            &[(0, 0)]
        ),
        OpDef {
            alias_safe: false,
            ..def!(
                "_backward_SoftmaxOutput",
                &[],
                Arity::Exactly(2),
                infer_softmax_output_backward,
                softmax_output_backward_kernel,
                &[]
            )
        },
    ];
    OPS
}
