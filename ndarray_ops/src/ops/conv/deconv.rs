//! Deconvolution, the transpose of Convolution (a GEMM, then col2im), and its backward op.

use crate::ops::Call;
use ndarray::{ArrayView2, ArrayViewMut2};

use super::backward::{channel_sums, col2im};
use super::forward::im2col;
use super::{check_grouped_data, conv_params, Conv};
use crate::error::{invalid, shape_error, Result};
use crate::ops::{same_dtypes, Attrs, Infer, KResult, MAX_ELEMENTS};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// Deconvolution's geometry for an input of `hw`: its parameters with the padding it really
/// uses, and the output size. The output is the full transposed convolution, `stride * (in - 1)
/// + dilate * (kernel - 1) + 1`, less `pad` on each side, plus `adj` rows and columns at the
/// bottom and right. With a nonzero `target_shape`, pad and adj follow from it as MXNet derives
/// them: of the `total` to remove, `ceil(total / 2)` is padding and `total % 2` comes back as adj.
fn deconv_geometry(op: &str, attrs: &Attrs, hw: (usize, usize)) -> Result<(Conv, (usize, usize))> {
    let mut c = conv_params(op, attrs)?;
    let (adj, target) = (c.adj, c.target);
    // The window's entries are at most 2^31 (`pair`), the input's length is not.
    let full = |n: usize, k: usize, st: usize, dl: usize| {
        (n.max(1) - 1)
            .checked_mul(st)
            .and_then(|f| f.checked_add(dl * (k - 1) + 1))
            .filter(|&f| f as u64 <= MAX_ELEMENTS)
            .ok_or_else(|| {
                invalid(
                    op,
                    format!("an input of {n} with stride {st} gives an output axis past 2^48"),
                )
            })
    };
    let full = (
        full(hw.0, c.k.0, c.s.0, c.d.0)?,
        full(hw.1, c.k.1, c.s.1, c.d.1)?,
    );
    let side = |full: usize, pad: &mut usize, adj: usize, target: usize, stride: usize| {
        if target == 0 {
            if adj >= stride {
                return Err(invalid(
                    op,
                    format!("adj {adj} must be smaller than the stride {stride}"),
                ));
            }
            if full + adj < 2 * *pad + 1 {
                return Err(invalid(
                    op,
                    format!("pad {pad} removes the whole output ({full} before padding)"),
                ));
            }
            return Ok(full - 2 * *pad + adj);
        }
        if target > full {
            return Err(invalid(
                op,
                format!("target_shape {target} is larger than the full output {full}"),
            ));
        }
        let total = full - target;
        *pad = total.div_ceil(2);
        Ok(target)
    };
    let out = (
        side(full.0, &mut c.p.0, adj.0, target.0, c.s.0)?,
        side(full.1, &mut c.p.1, adj.1, target.1, c.s.1)?,
    );
    Ok((c, out))
}

/// Deconvolution on data of `hw` with `in_channels` channels as the convolution it transposes,
/// whose data has the Deconvolution's output shape: its filters are the Deconvolution's input
/// channels (the weight's layout is that convolution's), with the padding the geometry really
/// uses and no bias. The GPU runs a Deconvolution through that convolution's passes.
pub(crate) fn deconv_as_conv(
    op: &str,
    attrs: &Attrs,
    hw: (usize, usize),
    in_channels: usize,
) -> Result<Conv> {
    let (c, _) = deconv_geometry(op, attrs, hw)?;
    Ok(Conv {
        filters: in_channels,
        bias: false,
        ..c
    })
}

pub(super) fn infer_deconv(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let c = conv_params(op, attrs)?;
    let x = &s[0];
    check_grouped_data(op, x, &c)?;
    // Weight (in channels, filters / groups, kh, kw), as MXNet lays it out.
    let w = vec![x[1], c.filters / c.groups, c.k.0, c.k.1];
    if s[1] != w {
        return Err(shape_error(op, "weight", s[1].clone(), format!("{w:?}")));
    }
    let want = if c.bias { 3 } else { 2 };
    if s.len() != want {
        return Err(invalid(
            op,
            format!(
                "takes {want} inputs with no_bias={} (MXNet's Deconvolution has no bias unless \
                 no_bias=False), got {}",
                !c.bias,
                s.len()
            ),
        ));
    }
    if c.bias && s[2] != [c.filters] {
        return Err(invalid(
            op,
            format!("takes a bias of [{}] unless no_bias", c.filters),
        ));
    }
    let (_, (ho, wo)) = deconv_geometry(op, attrs, (x[2], x[3]))?;
    Ok((vec![vec![x[0], c.filters, ho, wo]], vec![dt]))
}

pub(super) fn deconv_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, w, o) = (&ins[0], &ins[1], &outs[0]);
    let (n, cin, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (c, _) = deconv_geometry(op, attrs, (h, wd)).map_err(|e| e.to_string())?;
    let (ho, wo) = (o.shape[2], o.shape[3]);
    let (cg, fg) = (cin / c.groups, c.filters / c.groups);
    let rows = fg * c.k.0 * c.k.1;
    crate::with_dtype!(o.dtype, T => {
        let col = res.temp(rows * h * wd * std::mem::size_of::<T>())?.cast::<T>();
        // SAFETY: every view lies inside its buffer (shapes from inference); the output is
        // disjoint from the inputs and the temp space.
        unsafe {
            o.slice_mut::<T>().fill(T::default());
            for img in 0..n {
                for g in 0..c.groups {
                    // The adjoint of convolution's im2col + GEMM: col = W_g^T x X_g, then scatter.
                    let wv = ArrayView2::from_shape_ptr((cg, rows), w.ptr::<T>().add(g * cg * rows) as *const T);
                    let xv = ArrayView2::from_shape_ptr((cg, h * wd), x.ptr::<T>().add((img * cin + g * cg) * h * wd) as *const T);
                    let mut cv = ArrayViewMut2::from_shape_ptr((rows, h * wd), col);
                    T::gemm(&wv.t(), &xv, &mut cv);
                    col2im::<T>(col, fg, ho, wo, &c, h, wd, o.ptr::<T>().add((img * c.filters + g * fg) * ho * wo));
                }
            }
            if c.bias {
                let b = ins[2].slice::<T>();
                let out = o.slice_mut::<T>();
                for img in 0..n {
                    for f in 0..c.filters {
                        for v in &mut out[(img * c.filters + f) * ho * wo..(img * c.filters + f + 1) * ho * wo] {
                            *v = v.add(b[f]);
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Deconvolution's backward pass, `(ograd, data, weight) -> (data grad, weight grad[, bias
/// grad])`, inferred as Convolution's (checked against the forward op of its own name). The
/// forward op scatters `W_g^T X_g` with col2im, so the backward op gathers the output gradient
/// with im2col (`dcol`) and then `dX_g = W_g dcol` and `dW_g += X_g dcol^T`.
pub(super) fn deconv_backward_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x, w) = (&ins[0], &ins[1], &ins[2]);
    let (n, cin, h, wd) = (x.shape[0], x.shape[1], x.shape[2], x.shape[3]);
    let (c, _) = deconv_geometry(op, attrs, (h, wd)).map_err(|e| e.to_string())?;
    let (ho, wo) = (dy.shape[2], dy.shape[3]);
    let (cg, fg) = (cin / c.groups, c.filters / c.groups);
    let rows = fg * c.k.0 * c.k.1;
    crate::with_dtype!(dy.dtype, T => {
        let dcol = res.temp(rows * h * wd * std::mem::size_of::<T>())?.cast::<T>();
        // SAFETY: every view lies inside its buffer (shapes from inference); outputs are disjoint
        // from the inputs and the temp space.
        unsafe {
            outs[1].slice_mut::<T>().fill(T::default());
            for img in 0..n {
                for g in 0..c.groups {
                    let dyg = dy.ptr::<T>().add((img * c.filters + g * fg) * ho * wo);
                    im2col::<T>(dyg, fg, ho, wo, &c, h, wd, dcol);
                    let dcolv = ArrayView2::from_shape_ptr((rows, h * wd), dcol as *const T);
                    let wv = ArrayView2::from_shape_ptr((cg, rows), w.ptr::<T>().add(g * cg * rows) as *const T);
                    let off = (img * cin + g * cg) * h * wd;
                    let mut dxv = ArrayViewMut2::from_shape_ptr((cg, h * wd), outs[0].ptr::<T>().add(off));
                    T::gemm(&wv, &dcolv, &mut dxv);
                    let xv = ArrayView2::from_shape_ptr((cg, h * wd), x.ptr::<T>().add(off) as *const T);
                    let mut dw = ArrayViewMut2::from_shape_ptr((cg, rows), outs[1].ptr::<T>().add(g * cg * rows));
                    T::gemm_add(&xv, &dcolv.t(), &mut dw);
                }
            }
            if c.bias {
                channel_sums(dy.slice::<T>(), ho * wo, outs[2].slice_mut::<T>());
            }
        }
    });
    Ok(())
}
