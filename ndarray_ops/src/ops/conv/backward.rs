//! `_backward_Convolution`: `(ograd, data, weight) -> (data grad, weight grad[, bias grad])`,
//! by the depthwise, implicit-GEMM or Winograd path where one applies, else one GEMM per image
//! and group for each gradient (with col2im for the data's).

use crate::ops::Call;
use ndarray::{ArrayView2, ArrayViewMut2};

use super::forward::im2col;
use super::{conv_params, Conv, ConvDims, Tap};

use crate::ops::par::{for_ranges, Shared};
use crate::ops::{check_against_forward, same_dtypes, Attrs, Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// Convolution and Deconvolution: the forward op is the backward op's name without its prefix.
pub(super) fn infer_conv_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let c = conv_params(op, attrs)?;
    let mut out = vec![s[1].clone(), s[2].clone()];
    if c.bias {
        out.push(vec![c.filters]);
    }
    let forward = op.trim_start_matches("_backward_");
    check_against_forward(
        op,
        forward,
        attrs,
        (&out, &vec![dt; out.len()]),
        &[(0, &s[0], d[0])],
    )?;
    let n = out.len();
    Ok((out, vec![dt; n]))
}

/// The bias gradient of a convolution-like op: `out[f]` is the sum of channel `f` of `dy`
/// (laid out `(N, out.len(), plane)`) over images and positions.
pub(super) fn channel_sums<T: Element>(dy: &[T], plane: usize, out: &mut [T]) {
    out.fill(T::default());
    let channels = out.len();
    for (i, chunk) in dy.chunks_exact(plane.max(1)).enumerate() {
        let b = &mut out[i % channels];
        *b = chunk.iter().fold(*b, |acc, v| acc.add(*v));
    }
}

/// Adds columns back into `cg` channels: the reverse of `im2col`. Channels are independent (a
/// channel's rows are the only ones that reach it), so a large pass is split by channels; each
/// channel adds its taps in the same order as a single thread would.
///
/// # Safety
/// `col` holds `cg * kh * kw * ho * wo` elements, `dst` `cg * h * w`, and the two are disjoint.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn col2im<T: Element>(
    col: *const T,
    cg: usize,
    h: usize,
    w: usize,
    c: &Conv,
    ho: usize,
    wo: usize,
    dst: *mut T,
) {
    let (col, dst) = (Shared::new(col), Shared::new(dst));
    let taps = c.k.0 * c.k.1;
    for_ranges(cg, taps * ho * wo, |lo, hi| {
        for ch in lo..hi {
            // SAFETY: channel `ch` of `dst` and its rows of `col` lie inside them (the
            // contract); this range alone touches those.
            let (plane, rows) =
                unsafe { (dst.piece_mut(ch, h * w), col.piece(ch, taps * ho * wo)) };
            for (tap, tap_rows) in rows.chunks_exact((ho * wo).max(1)).enumerate() {
                let tap = Tap::new(c, tap / c.k.1, tap % c.k.1, w, wo);
                for (y, col_row) in tap_rows.chunks_exact(wo.max(1)).enumerate() {
                    if let Some(iy) = tap.input_row(y, h) {
                        tap.scatter_add(col_row, &mut plane[iy * w..(iy + 1) * w]);
                    }
                }
            }
        }
    });
}

pub(super) fn conv_backward_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let c = conv_params(op, attrs).map_err(|e| e.to_string())?;
    let (dy, x, wt) = (&ins[0], &ins[1], &ins[2]);
    let dims = c.dims(&x.shape, &dy.shape);
    if super::depthwise::applies(&c, &dims) {
        crate::with_dtype!(dy.dtype, T => {
            // SAFETY: the shapes come from inference; the gradients are disjoint from each
            // other and from the inputs.
            unsafe {
                super::depthwise::backward::<T>(&c, &dims, (dy.ptr::<T>(), x.ptr::<T>(), wt.ptr::<T>()), outs[0].ptr::<T>(), outs[1].ptr::<T>());
                if c.bias {
                    channel_sums(dy.slice::<T>(), dims.ho * dims.wo, outs[2].slice_mut::<T>());
                }
            }
        });
        return Ok(());
    }
    if super::implicit::applies(&c, dy.dtype) {
        // SAFETY: the shapes come from inference; the gradients are disjoint from each other
        // and from the inputs; `applies` holds.
        unsafe {
            super::implicit::backward(
                &c,
                &dims,
                (dy.ptr::<f32>(), x.ptr::<f32>(), wt.ptr::<f32>()),
                (outs[0].ptr::<f32>(), outs[1].ptr::<f32>()),
                res,
            )?;
            if c.bias {
                channel_sums(
                    dy.slice::<f32>(),
                    dims.ho * dims.wo,
                    outs[2].slice_mut::<f32>(),
                );
            }
        }
        return Ok(());
    }
    let ConvDims {
        n,
        ch,
        h,
        w,
        ho,
        wo,
        cg,
        fg,
        rows,
    } = dims;
    // A 1x1 convolution of stride 1 reads its columns from the data and writes its data
    // gradient's columns straight into the gradient (see `Conv::columns_are_input`).
    let direct = c.columns_are_input();
    crate::with_dtype!(dy.dtype, T => {
        let col = match direct {
            true => std::ptr::null_mut(),
            false => res.temp(2 * rows * ho * wo * std::mem::size_of::<T>())?.cast::<T>(),
        };
        // SAFETY: the temp space holds two column buffers unless the data and its gradient are
        // the columns; every slice below lies inside its buffer (shapes from inference);
        // outputs are disjoint from inputs and temp space.
        unsafe {
            outs[0].slice_mut::<T>().fill(T::default());
            outs[1].slice_mut::<T>().fill(T::default());
            for img in 0..n {
                for g in 0..c.groups {
                    let xg = x.ptr::<T>().add((img * ch + g * cg) * h * w);
                    let dxg = outs[0].ptr::<T>().add((img * ch + g * cg) * h * w);
                    let (cols, dcol) = match direct {
                        true => (xg as *const T, dxg),
                        false => {
                            im2col::<T>(xg, cg, h, w, &c, ho, wo, col);
                            (col as *const T, col.add(rows * ho * wo))
                        }
                    };
                    let dyv = ArrayView2::from_shape_ptr((fg, ho * wo), dy.ptr::<T>().add((img * c.filters + g * fg) * ho * wo) as *const T);
                    let colv = ArrayView2::from_shape_ptr((rows, ho * wo), cols);
                    // Weight gradient: dY_g x col^T, summed over images.
                    let mut dw = ArrayViewMut2::from_shape_ptr((fg, rows), outs[1].ptr::<T>().add(g * fg * rows));
                    T::gemm_add(&dyv, &colv.t(), &mut dw);
                    // Data gradient: W_g^T x dY_g, scattered back.
                    let wv = ArrayView2::from_shape_ptr((fg, rows), wt.ptr::<T>().add(g * fg * rows) as *const T);
                    let mut dcolv = ArrayViewMut2::from_shape_ptr((rows, ho * wo), dcol);
                    T::gemm(&wv.t(), &dyv, &mut dcolv);
                    if !direct {
                        col2im::<T>(dcol, cg, h, w, &c, ho, wo, dxg);
                    }
                }
            }
            if c.bias {
                channel_sums(dy.slice::<T>(), ho * wo, outs[2].slice_mut::<T>());
            }
        }
    });
    Ok(())
}
