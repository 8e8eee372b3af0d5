//! Convolution's forward kernel: im2col into the device's temp space plus one GEMM per image
//! and group, or the implicit-GEMM, Winograd and depthwise paths where they apply.

use crate::ops::Call;
use ndarray::{ArrayView2, ArrayViewMut2};

use super::{conv_params, Conv, ConvDims, Tap};
use crate::error::Result;
use crate::gemm::{sgemm_then, Batches, Epilogue, Mat, Norm};
use crate::ops::par::{for_ranges, Shared};
use crate::ops::{Attrs, KResult, TensorRef};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// Lays the receptive fields of `cg` channels out as columns: row (c, i, j), column (y, x).
/// Rows are independent, so a large layout is split across threads by rows.
///
/// # Safety
/// `src` holds `cg * h * w` elements, `col` `cg * kh * kw * ho * wo`, and the two are disjoint.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn im2col<T: Element>(
    src: *const T,
    cg: usize,
    h: usize,
    w: usize,
    c: &Conv,
    ho: usize,
    wo: usize,
    col: *mut T,
) {
    let (src, col) = (Shared::new(src), Shared::new(col));
    let taps = c.k.0 * c.k.1;
    for_ranges(cg * taps, ho * wo, |lo, hi| {
        for row in lo..hi {
            let (ch, tap) = (row / taps, row % taps);
            // SAFETY: channel `ch` lies inside `src` and row `row` inside `col` (the contract);
            // this range alone writes its rows.
            let (plane, out) = unsafe { (src.piece(ch, h * w), col.piece_mut(row, ho * wo)) };
            let tap = Tap::new(c, tap / c.k.1, tap % c.k.1, w, wo);
            for (y, out_row) in out.chunks_exact_mut(wo.max(1)).enumerate() {
                match tap.input_row(y, h) {
                    None => out_row.fill(T::default()),
                    Some(iy) => tap.gather(&plane[iy * w..(iy + 1) * w], out_row),
                }
            }
        }
    });
}

pub(crate) fn conv_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    conv_then(op, attrs, ins, outs, None, res).map(|_| ())
}

/// The convolution (with its bias) into `outs[0]`, then, with `norm`, the normalization (and
/// ReLU) on each element as the GEMM finishes its tile ([`crate::gemm::Epilogue`]), where the
/// float32 GEMM paths run. True when `norm` was applied; false when the caller must still
/// normalize the output (no `norm`, or a path without the epilogue). The bias goes through
/// the epilogue too where it can, instead of a pass of its own over the output.
pub(crate) fn conv_then(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    norm: Option<Norm<'_>>,
    res: &mut KernelRes,
) -> Result<bool, String> {
    let c = conv_params(op, attrs).map_err(|e| e.to_string())?;
    let (x, wt, o) = (&ins[0], &ins[1], &outs[0]);
    let dims = c.dims(&x.shape, &o.shape);
    let bias = match c.bias && o.dtype == DType::F32 {
        // SAFETY: the bias input holds the filters' float32 biases (shapes from inference);
        // nothing writes it while the op runs.
        true => Some(unsafe { ins[2].slice::<f32>() }),
        false => None,
    };
    let epilogue = Epilogue { bias, norm };
    if super::depthwise::applies(&c, &dims) {
        crate::with_dtype!(o.dtype, T => {
            // SAFETY: the shapes come from inference (data, weights, bias and output as
            // `dims` says); the output is disjoint from the inputs.
            unsafe {
                let bias = c.bias.then(|| ins[2].slice::<T>());
                super::depthwise::forward::<T>(&c, &dims, x.ptr::<T>(), wt.ptr::<T>(), bias, o.ptr::<T>());
            }
        });
        return Ok(false);
    }
    let winograd = super::winograd::forward_applies(&c, &dims, o.dtype);
    if winograd || super::implicit::applies(&c, o.dtype) {
        // SAFETY: the shapes come from inference; the output is disjoint from the inputs;
        // `applies` holds.
        unsafe {
            let io = (
                x.ptr::<f32>().cast_const(),
                wt.ptr::<f32>().cast_const(),
                o.ptr::<f32>(),
            );
            match winograd {
                true => super::winograd::forward(&c, &dims, io, &epilogue, res)?,
                false => super::implicit::forward(&c, &dims, io, &epilogue, res)?,
            }
        }
        return Ok(norm.is_some());
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
    let direct = c.columns_are_input();
    if direct && o.dtype == DType::F32 && crate::gemm::available() && (c.bias || norm.is_some()) {
        // The input is the column matrix (a 1x1 window of stride 1): one product per image
        // and group, with the epilogue.
        let pixels = ho * wo;
        for img in 0..n {
            for g in 0..c.groups {
                // SAFETY: image `img`, group `g` of the data, the weights and the output lie
                // inside their buffers (shapes from inference); the output is disjoint from
                // the inputs; the GEMM runs here (checked).
                unsafe {
                    let a = Mat::row_major(wt.ptr::<f32>().add(g * fg * rows).cast_const(), rows);
                    let b = Mat::row_major(
                        x.ptr::<f32>().add((img * ch + g * cg) * h * w).cast_const(),
                        pixels,
                    );
                    let out = Mat::row_major(
                        o.ptr::<f32>().add((img * c.filters + g * fg) * pixels),
                        pixels,
                    );
                    let group = epilogue.rows_from(g * fg);
                    sgemm_then(fg, rows, pixels, &a, &b, Batches::whole(out), &group, 0.0);
                }
            }
        }
        return Ok(norm.is_some());
    }
    crate::with_dtype!(o.dtype, T => {
        let col = match direct {
            true => std::ptr::null_mut(),
            false => res.temp(rows * ho * wo * std::mem::size_of::<T>())?.cast::<T>(),
        };
        for img in 0..n {
            for g in 0..c.groups {
                // SAFETY: image `img`, group `g` lies inside the data; `col` holds rows*ho*wo
                // elements (temp space sized above) unless the data is the columns; the weight
                // slice and output slice lie inside their buffers; the output is disjoint from
                // the inputs and the temp space.
                unsafe {
                    let xg = x.ptr::<T>().add((img * ch + g * cg) * h * w);
                    let cols = match direct {
                        true => xg,
                        false => {
                            im2col::<T>(xg, cg, h, w, &c, ho, wo, col);
                            col
                        }
                    };
                    let wv = ArrayView2::from_shape_ptr((fg, rows), wt.ptr::<T>().add(g * fg * rows) as *const T);
                    let cv = ArrayView2::from_shape_ptr((rows, ho * wo), cols as *const T);
                    let mut ov = ArrayViewMut2::from_shape_ptr((fg, ho * wo), o.ptr::<T>().add((img * c.filters + g * fg) * ho * wo));
                    T::gemm(&wv, &cv, &mut ov);
                }
            }
        }
        if c.bias {
            // SAFETY: the bias and the output are distinct buffers.
            unsafe { add_bias(ins[2].slice::<T>(), ho * wo, o.slice_mut::<T>()) };
        }
    });
    Ok(false)
}

/// Adds `bias[f]` to every pixel of filter `f` of every image of `out` `(N, F, pixels)`.
fn add_bias<T: Element>(bias: &[T], pixels: usize, out: &mut [T]) {
    for (k, plane) in out.chunks_exact_mut(pixels.max(1)).enumerate() {
        let b = bias[k % bias.len()];
        plane.iter_mut().for_each(|v| *v = v.add(b));
    }
}
