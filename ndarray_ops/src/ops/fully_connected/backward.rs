//! `_backward_FullyConnected`: `(ograd, data, weight) -> (data grad, weight grad[, bias grad])`,
//! `dx = dy W`, `dW = dy^T x`, `db` the sum of `dy`'s rows.

use crate::ops::Call;
use ndarray::{ArrayView2, ArrayViewMut2};

use super::{fc_dims, FullyConnectedParams};
use crate::ops::params::Params;
use crate::ops::{check_against_forward, same_dtypes, Attrs, Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

pub(super) fn infer_fc_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let no_bias = FullyConnectedParams::get(op, attrs)?.no_bias;
    let mut out = vec![s[1].clone(), s[2].clone()];
    if !no_bias {
        out.push(s[2].iter().take(1).copied().collect());
    }
    check_against_forward(
        op,
        "FullyConnected",
        attrs,
        (&out, &vec![dt; out.len()]),
        &[(0, &s[0], d[0])],
    )?;
    let n = out.len();
    Ok((out, vec![dt; n]))
}

pub(super) fn fc_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x, w) = (&ins[0], &ins[1], &ins[2]);
    let (m, hidden, k) = fc_dims(x, w);
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
            if !FullyConnectedParams::get(op, attrs).map_err(|e| e.to_string())?.no_bias {
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
