//! Resampling ops of segmentation models, NCHW, with their backward ops:
//! `_contrib_AdaptiveAvgPooling2D`, `_contrib_BilinearResize2D` and `Crop`.
//!
//! Each forward kernel walks its output one plane at a time and each backward kernel the same
//! walk, adding every output gradient into the inputs that output read with the weight it read
//! them with — one description of which inputs an output reads serves both ways, as MXNet's
//! kernels do.

use super::family::Member;
use super::par::{for_ranges, Shared};
use super::params::{attr_enum, int32s, op_params, Params, PositiveInt, Window};
use super::{Arity, Attrs, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

pub(super) fn check_nchw(op: &str, arg: &str, x: &[usize], d: DType) -> Result<()> {
    if x.len() != 4 {
        return Err(shape_error(op, arg, x, "4 dimensions (N, C, H, W)"));
    }
    if !d.is_float() {
        return Err(NdError::DType {
            op: op.into(),
            arg: arg.into(),
            found: d.to_string(),
            expected: "float32 or float64".into(),
        });
    }
    Ok(())
}

/// A 2-D size attribute `key` whose both sizes are at least 1.
pub(super) fn positive(op: &str, key: &str, (a, b): (usize, usize)) -> Result<(usize, usize)> {
    if a == 0 || b == 0 {
        return Err(invalid(op, format!("{key}=({a}, {b}) is not positive")));
    }
    Ok((a, b))
}

/// The inputs an output element reads and with what weight: `(offset in its input plane,
/// weight)`, at most `N` of them.
type Taps<const N: usize> = ([(usize, f64); N], usize);

/// Runs `taps` over every output element of every plane: the forward pass sums the weighted
/// inputs; the backward pass (with `backward`) adds each output gradient into those inputs.
/// `planes` (N*C) planes of `inp` input and `out` output elements; `taps(o)` describes output
/// element `o` of a plane.
fn resample<T: Element, const N: usize>(
    x: &TensorRef,
    y: &TensorRef,
    planes: usize,
    inp: usize,
    out: usize,
    backward: bool,
    taps: impl Fn(usize) -> Taps<N> + Sync,
) {
    let (xs, ys) = (Shared::new(x.ptr::<T>()), Shared::new(y.ptr::<T>()));
    for_ranges(planes, out * N, |lo, hi| {
        for p in lo..hi {
            // SAFETY: plane `p` of the input and the output lie inside their buffers (shapes
            // checked at inference); the side read is only read, and this range alone writes
            // plane `p` of the side written (the output forward, the input gradient backward).
            unsafe {
                if backward {
                    let (dx, g) = (xs.piece_mut(p, inp), ys.piece(p, out));
                    dx.fill(T::default());
                    for (o, gv) in g.iter().enumerate() {
                        let (t, n) = taps(o);
                        for &(i, w) in &t[..n] {
                            dx[i] = T::from_f64(dx[i].to_f64() + w * gv.to_f64());
                        }
                    }
                } else {
                    let (xi, yo) = (xs.piece(p, inp), ys.piece_mut(p, out));
                    for (o, yv) in yo.iter_mut().enumerate() {
                        let (t, n) = taps(o);
                        *yv = T::from_f64(t[..n].iter().map(|&(i, w)| w * xi[i].to_f64()).sum());
                    }
                }
            }
        }
    });
}

// ---- AdaptiveAvgPooling2D ----------------------------------------------------------------

op_params! {
    /// AdaptiveAvgPooling2D's attributes.
    pub struct AdaptiveAvgPooling2DParams for "_contrib_AdaptiveAvgPooling2D" {
        output_size: Window,
    }
}

fn adaptive_size(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let size = AdaptiveAvgPooling2DParams::get(op, attrs)?.output_size;
    positive(op, "output_size", size.or((1, 1)))
}

/// Bin `a` of `out` bins over `len` inputs: `floor(a * len / out) .. ceil((a + 1) * len / out)`.
fn bin(a: usize, out: usize, len: usize) -> (usize, usize) {
    (a * len / out, ((a + 1) * len).div_ceil(out))
}

fn infer_adaptive(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_nchw(op, "data", &s[0], d[0])?;
    let (oh, ow) = adaptive_size(op, attrs)?;
    Ok((vec![vec![s[0][0], s[0][1], oh, ow]], vec![d[0]]))
}

/// The average of its bin, for the forward (`backward` false) and backward passes; `x` is the
/// data (or its gradient) and `y` the output (or its gradient).
fn adaptive_pass(op: &str, attrs: &Attrs, x: &TensorRef, y: &TensorRef, backward: bool) -> KResult {
    let (oh, ow) = adaptive_size(op, attrs).map_err(|e| e.to_string())?;
    let (h, w) = (x.shape[2], x.shape[3]);
    let planes = x.shape[0] * x.shape[1];
    // The windows can be large (a global average): no fixed tap count, so this pass loops
    // itself.
    crate::with_dtype!(x.dtype, T => {
        let (xs, ys) = (Shared::new(x.ptr::<T>()), Shared::new(y.ptr::<T>()));
        for_ranges(planes, h * w, |lo, hi| {
            for p in lo..hi {
                // SAFETY: as in `resample`: plane `p` is inside both buffers and this range
                // alone writes plane `p` of the side it writes.
                unsafe {
                    if backward {
                        let (dx, g) = (xs.piece_mut(p, h * w), ys.piece(p, oh * ow));
                        dx.fill(T::default());
                        for a in 0..oh {
                            let (h0, h1) = bin(a, oh, h);
                            for b in 0..ow {
                                let (w0, w1) = bin(b, ow, w);
                                let share = g[a * ow + b].to_f64() / ((h1 - h0) * (w1 - w0)) as f64;
                                for i in h0..h1 {
                                    for d in &mut dx[i * w + w0..i * w + w1] {
                                        *d = T::from_f64(d.to_f64() + share);
                                    }
                                }
                            }
                        }
                    } else {
                        let (xi, yo) = (xs.piece(p, h * w), ys.piece_mut(p, oh * ow));
                        for a in 0..oh {
                            let (h0, h1) = bin(a, oh, h);
                            for b in 0..ow {
                                let (w0, w1) = bin(b, ow, w);
                                let sum: f64 = (h0..h1)
                                    .flat_map(|i| &xi[i * w + w0..i * w + w1])
                                    .map(|v| v.to_f64())
                                    .sum();
                                yo[a * ow + b] = T::from_f64(sum / ((h1 - h0) * (w1 - w0)) as f64);
                            }
                        }
                    }
                }
            }
        });
    });
    Ok(())
}

fn adaptive_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    adaptive_pass(op, attrs, &ins[0], &outs[0], false)
}

/// `_backward_AdaptiveAvgPooling2D(ograd, data)`.
fn adaptive_backward_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    adaptive_pass(op, attrs, &outs[0], &ins[0], true)
}

// ---- BilinearResize2D --------------------------------------------------------------------

attr_enum! {
    /// How BilinearResize2D finds its output's size.
    pub enum ResizeMode {
        /// `height` and `width`, or the scales where given.
        Size = "size",
        /// The scales, keeping an odd size's last pixel aligned.
        OddScale = "odd_scale",
        /// The second input's height and width.
        Like = "like",
        /// The nearest even size at or below.
        ToEvenDown = "to_even_down",
        /// The nearest even size at or above.
        ToEvenUp = "to_even_up",
        /// The nearest odd size at or below.
        ToOddDown = "to_odd_down",
        /// The nearest odd size at or above.
        ToOddUp = "to_odd_up",
    }
}

op_params! {
    /// BilinearResize2D's attributes.
    pub struct BilinearResize2DParams for "_contrib_BilinearResize2D" {
        height: PositiveInt,
        width: PositiveInt,
        scale_height: Option<f32>,
        scale_width: Option<f32>,
        mode: ResizeMode,
        align_corners: bool,
    }
}

/// The output size of a bilinear resize of data `x` (`like` the second input's shape in mode
/// `like`), MXNet's modes.
fn resize_size(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
    like: Option<&[usize]>,
) -> Result<(usize, usize)> {
    let p = BilinearResize2DParams::get(op, attrs)?;
    let (h, w) = (x[2], x[3]);
    let (sh, sw) = (p.scale_height.map(f64::from), p.scale_width.map(f64::from));
    let even = |n: usize| n.is_multiple_of(2);
    let size = match p.mode {
        ResizeMode::Size => {
            let h = match sh {
                Some(s) => (s * h as f64) as i64,
                None => p.height.0 as i64,
            };
            let w = match sw {
                Some(s) => (s * w as f64) as i64,
                None => p.width.0 as i64,
            };
            (h, w)
        }
        ResizeMode::OddScale => {
            let (Some(sh), Some(sw)) = (sh, sw) else {
                return Err(invalid(
                    op,
                    "mode odd_scale needs scale_height and scale_width",
                ));
            };
            let odd = |n: usize, s: f64| match even(n) {
                true => (n as f64 * s) as i64,
                false => (((n - 1) as f64 * s) as i64).saturating_add(1),
            };
            (odd(h, sh), odd(w, sw))
        }
        ResizeMode::Like => match like {
            Some(l) if l.len() == 4 => (l[2] as i64, l[3] as i64),
            Some(l) => return Err(shape_error(op, "like", l, "4 dimensions (N, C, H, W)")),
            None => return Err(invalid(op, "mode like takes a second input, like")),
        },
        ResizeMode::ToEvenDown => (
            h as i64 - i64::from(!even(h)),
            w as i64 - i64::from(!even(w)),
        ),
        ResizeMode::ToEvenUp => (
            h as i64 + i64::from(!even(h)),
            w as i64 + i64::from(!even(w)),
        ),
        ResizeMode::ToOddDown => (h as i64 - i64::from(even(h)), w as i64 - i64::from(even(w))),
        ResizeMode::ToOddUp => (h as i64 + i64::from(even(h)), w as i64 + i64::from(even(w))),
    };
    if size.0 < 1 || size.1 < 1 {
        return Err(invalid(
            op,
            format!("the output size {size:?} for data {x:?} is empty"),
        ));
    }
    Ok((size.0 as usize, size.1 as usize))
}

fn resize_inputs(op: &str, attrs: &Attrs) -> Result<usize> {
    Ok(match BilinearResize2DParams::get(op, attrs)?.mode {
        ResizeMode::Like => 2,
        _ => 1,
    })
}

fn infer_resize(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let want = resize_inputs(op, attrs)?;
    if s.len() != want {
        return Err(invalid(
            op,
            format!("takes {want} input(s) in this mode, got {}", s.len()),
        ));
    }
    check_nchw(op, "data", &s[0], d[0])?;
    let (oh, ow) = resize_size(op, attrs, &s[0], s.get(1).map(Vec::as_slice))?;
    let out = vec![s[0][0], s[0][1], oh, ow];
    if s[0][2] * s[0][3] == 0 && out.iter().product::<usize>() > 0 {
        return Err(shape_error(
            op,
            "data",
            s[0].clone(),
            format!("planes with pixels to resize into {oh}x{ow}"),
        ));
    }
    Ok((vec![out], vec![d[0]]))
}

/// Along one axis, output index `o`'s two input indices and the second one's weight, MXNet's
/// `area_pixel_compute_source_index`: with `align_corners` the corners' centres meet, else the
/// whole extent scales and a source before the first input clamps to it. The scale and the
/// source position are floats, as MXNet computes them for every dtype: with positions in double
/// its float64 outputs came out up to 6e-7 apart from ours, with these they match to rounding.
fn linear_taps(input: usize, output: usize, align: bool) -> Vec<(usize, usize, f64)> {
    // An empty input gives taps at 0 that nothing reads: inference refuses an empty plane
    // unless the output is empty too.
    let last = input.saturating_sub(1);
    let scale = match (output > 1, align) {
        (false, _) => 0.0f32,
        (true, true) => last as f32 / (output - 1) as f32,
        (true, false) => input as f32 / output as f32,
    };
    (0..output)
        .map(|o| {
            let src = match align {
                true => scale * o as f32,
                // MXNet adds the half in double, then stores the position as a float.
                false => ((f64::from(scale) * (o as f64 + 0.5) - 0.5) as f32).max(0.0),
            };
            let i = (src as usize).min(last);
            let next = if i + 1 < input { i + 1 } else { i };
            (i, next, f64::from(src) - i as f64)
        })
        .collect()
}

/// The bilinear resize of planes shaped `x` into planes shaped `y` (NCHW), as taps.
fn resize_taps(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
    y: &[usize],
) -> Result<impl Fn(usize) -> Taps<4>> {
    let (h, w, oh, ow) = (x[2], x[3], y[2], y[3]);
    let align = BilinearResize2DParams::get(op, attrs)?.align_corners;
    let (rows, cols) = (linear_taps(h, oh, align), linear_taps(w, ow, align));
    Ok(move |o: usize| -> Taps<4> {
        let ((h0, h1, lh), (w0, w1, lw)) = (rows[o / ow], cols[o % ow]);
        (
            [
                (h0 * w + w0, (1.0 - lh) * (1.0 - lw)),
                (h0 * w + w1, (1.0 - lh) * lw),
                (h1 * w + w0, lh * (1.0 - lw)),
                (h1 * w + w1, lh * lw),
            ],
            4,
        )
    })
}

fn resize_pass(op: &str, attrs: &Attrs, x: &TensorRef, y: &TensorRef, backward: bool) -> KResult {
    let (h, w, oh, ow) = (x.shape[2], x.shape[3], y.shape[2], y.shape[3]);
    let taps = resize_taps(op, attrs, &x.shape, &y.shape).map_err(|e| e.to_string())?;
    crate::with_dtype!(x.dtype, T => {
        resample::<T, 4>(x, y, x.shape[0] * x.shape[1], h * w, oh * ow, backward, taps)
    });
    Ok(())
}

fn resize_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    resize_pass(op, attrs, &ins[0], &outs[0], false)
}

/// `_backward_BilinearResize2D(ograd, data[, like])`: the data's gradient, and zeros for `like`.
fn resize_backward_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    resize_pass(op, attrs, &outs[0], &ins[0], true)?;
    zero_like_gradient(outs.get(1));
    Ok(())
}

/// The three resampling ops, a typed family: each output element a weighted sum of the input
/// plane's elements ([`plane_taps`]). The backward ops carry their forward op's member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resample {
    /// Crop: a window of the plane.
    Crop,
    /// `_contrib_BilinearResize2D`.
    Bilinear,
    /// `_contrib_AdaptiveAvgPooling2D`.
    AdaptiveAvg,
}

impl Resample {
    /// The forward op's name.
    const fn name(self) -> &'static str {
        match self {
            Resample::Crop => "Crop",
            Resample::Bilinear => "_contrib_BilinearResize2D",
            Resample::AdaptiveAvg => "_contrib_AdaptiveAvgPooling2D",
        }
    }
}

/// `(ograd, the forward inputs...)`, one gradient per forward input of `forward`.
fn backward_like_inputs(
    forward: Resample,
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    let fwd = forward.name();
    super::check_against_forward(op, fwd, attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((s[1..].to_vec(), d[1..].to_vec()))
}

fn infer_crop_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    backward_like_inputs(Resample::Crop, op, attrs, s, d)
}

fn infer_resize_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    backward_like_inputs(Resample::Bilinear, op, attrs, s, d)
}

fn infer_adaptive_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    backward_like_inputs(Resample::AdaptiveAvg, op, attrs, s, d)
}

// ---- Crop ---------------------------------------------------------------------------------

/// MXNet's older Crop: a window of `h_w` (or of the second input's height and width) at
/// `offset` (or centred) out of every plane. Returns the window's corner and size.
fn crop_window(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
    like: Option<&[usize]>,
) -> Result<((usize, usize), (usize, usize))> {
    let p = CropParams::get(op, attrs)?;
    let pair = |key: &str, v: &[i64]| -> Result<(i64, i64)> {
        int32s(v, -i64::from(i32::MAX))
            .map_err(|e| invalid(op, format!("attribute {key}={v:?} {e}")))?;
        Ok(match v {
            [] => (0, 0),
            [a] => (*a, *a),
            [a, b] => (*a, *b),
            v => return Err(invalid(op, format!("{key}={v:?} has more than two values"))),
        })
    };
    let size = match like {
        Some(l) if l.len() == 4 => (l[2] as i64, l[3] as i64),
        Some(l) => return Err(shape_error(op, "crop_like", l, "4 dimensions (N, C, H, W)")),
        None => pair("h_w", &p.h_w)?,
    };
    let (h, w) = (x[2] as i64, x[3] as i64);
    let at = match p.center_crop {
        true => ((h - size.0) / 2, (w - size.1) / 2),
        false => pair("offset", &p.offset)?,
    };
    if size.0 < 1 || size.1 < 1 || at.0 < 0 || at.1 < 0 || at.0 + size.0 > h || at.1 + size.1 > w {
        return Err(invalid(
            op,
            format!(
                "a {size:?} window at {at:?} does not fit in the {:?} planes of data {x:?}",
                (h, w)
            ),
        ));
    }
    Ok((
        (at.0 as usize, at.1 as usize),
        (size.0 as usize, size.1 as usize),
    ))
}

op_params! {
    /// Crop's attributes.
    pub struct CropParams for "Crop" {
        num_args: Option<usize>,
        offset: Vec<i64>,
        h_w: Vec<i64>,
        center_crop: bool,
    }
}

fn crop_inputs(op: &str, attrs: &Attrs) -> Result<usize> {
    match CropParams::get(op, attrs)?.num_args.unwrap_or(1) {
        n @ (1 | 2) => Ok(n),
        n => Err(invalid(
            op,
            format!("num_args={n}: takes the data, and optionally an array to crop like"),
        )),
    }
}

fn infer_crop(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let want = crop_inputs(op, attrs)?;
    if s.len() != want {
        return Err(invalid(
            op,
            format!("num_args={want} but {} inputs", s.len()),
        ));
    }
    check_nchw(op, "data", &s[0], d[0])?;
    let (_, (ch, cw)) = crop_window(op, attrs, &s[0], s.get(1).map(Vec::as_slice))?;
    Ok((vec![vec![s[0][0], s[0][1], ch, cw]], vec![d[0]]))
}

/// Copies the window between the data (or its gradient, zero outside the window) and the
/// output (or its gradient).
fn crop_pass(
    op: &str,
    attrs: &Attrs,
    x: &TensorRef,
    y: &TensorRef,
    like: Option<&[usize]>,
    backward: bool,
) -> KResult {
    let (out, taps) = crop_taps(op, attrs, &x.shape, like).map_err(|e| e.to_string())?;
    let (h, w) = (x.shape[2], x.shape[3]);
    crate::with_dtype!(x.dtype, T => {
        resample::<T, 1>(x, y, x.shape[0] * x.shape[1], h * w, out, backward, taps)
    });
    Ok(())
}

/// Crop's window of planes shaped `x` as taps, with the window's size.
fn crop_taps(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
    like: Option<&[usize]>,
) -> Result<(usize, impl Fn(usize) -> Taps<1>)> {
    let ((top, left), (ch, cw)) = crop_window(op, attrs, x, like)?;
    let w = x[3];
    Ok((ch * cw, move |o: usize| -> Taps<1> {
        ([((top + o / cw) * w + left + o % cw, 1.0)], 1)
    }))
}

/// One plane of a resampling op as a sparse matrix: output element `o` reads
/// `taps[starts[o]..starts[o + 1]]` (offsets in the input plane, weights), in the order the
/// CPU kernels read them — what the GPU uploads.
pub(crate) struct PlaneTaps {
    pub(crate) starts: Vec<usize>,
    pub(crate) taps: Vec<(usize, f64)>,
}

impl PlaneTaps {
    fn of<const N: usize>(out: usize, taps: impl Fn(usize) -> Taps<N>) -> PlaneTaps {
        let mut p = PlaneTaps {
            starts: vec![0],
            taps: Vec::with_capacity(out * N),
        };
        for o in 0..out {
            let (t, n) = taps(o);
            p.taps.extend_from_slice(&t[..n]);
            p.starts.push(p.taps.len());
        }
        p
    }
}

/// The taps of Crop, AdaptiveAvgPooling2D or BilinearResize2D (or their gradients, which carry
/// the forward attributes) from data planes shaped `x` (NCHW) into output planes shaped `y`;
/// `like` is Crop's second input's shape. The average pool's weights are 1 / its window's
/// size (the CPU divides the window's sum by it).
pub(crate) fn plane_taps(
    r: Resample,
    (op, attrs): (&str, &Attrs),
    x: &[usize],
    y: &[usize],
    like: Option<&[usize]>,
) -> Result<PlaneTaps> {
    Ok(match r {
        Resample::Crop => {
            let (out, taps) = crop_taps(op, attrs, x, like)?;
            PlaneTaps::of(out, taps)
        }
        Resample::Bilinear => PlaneTaps::of(y[2] * y[3], resize_taps(op, attrs, x, y)?),
        Resample::AdaptiveAvg => {
            let ((h, w), (oh, ow)) = ((x[2], x[3]), (y[2], y[3]));
            let mut p = PlaneTaps {
                starts: vec![0],
                taps: Vec::new(),
            };
            for a in 0..oh {
                let (h0, h1) = bin(a, oh, h);
                for b in 0..ow {
                    let (w0, w1) = bin(b, ow, w);
                    let share = 1.0 / ((h1 - h0) * (w1 - w0)) as f64;
                    p.taps
                        .extend((h0..h1).flat_map(|i| (w0..w1).map(move |j| (i * w + j, share))));
                    p.starts.push(p.taps.len());
                }
            }
            p
        }
    })
}

fn crop_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    crop_pass(
        op,
        attrs,
        &ins[0],
        &outs[0],
        ins.get(1).map(|t| &t.shape[..]),
        false,
    )
}

/// `_backward_Crop(ograd, data[, crop_like])`: the gradient inside the window, and zeros for
/// `crop_like`.
fn crop_backward_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    crop_pass(
        op,
        attrs,
        &outs[0],
        &ins[0],
        ins.get(2).map(|t| &t.shape[..]),
        true,
    )?;
    zero_like_gradient(outs.get(1));
    Ok(())
}

/// Zeros the gradient of an input read for its shape alone.
fn zero_like_gradient(t: Option<&TensorRef>) {
    if let Some(t) = t {
        crate::with_dtype!(t.dtype, T => {
            // SAFETY: exclusive access to the output.
            unsafe { t.slice_mut::<T>() }.fill(T::default());
        });
    }
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            member: Member::Resample(Resample::AdaptiveAvg),
            alias_safe: false,
            gradient: Some(grad::adaptive_avg_pooling),
            ..OpDef::new(
                "_contrib_AdaptiveAvgPooling2D",
                Arity::Exactly(1),
                infer_adaptive,
                adaptive_kernel,
            )
        }
        .on_gpu(gpu::resample::resample),
        OpDef {
            member: Member::Resample(Resample::AdaptiveAvg),
            alias_safe: false,
            ..OpDef::new(
                "_backward_AdaptiveAvgPooling2D",
                Arity::Exactly(2),
                infer_adaptive_backward,
                adaptive_backward_kernel,
            )
        }
        .on_gpu(gpu::resample::resample_backward),
        OpDef {
            member: Member::Resample(Resample::Bilinear),
            alias_safe: false,
            gradient: Some(grad::bilinear_resize),
            ..OpDef::new(
                "_contrib_BilinearResize2D",
                Arity::AtLeast(1),
                infer_resize,
                resize_kernel,
            )
        }
        .on_gpu(gpu::resample::resample),
        OpDef {
            member: Member::Resample(Resample::Bilinear),
            alias_safe: false,
            ..OpDef::new(
                "_backward_BilinearResize2D",
                Arity::AtLeast(2),
                infer_resize_backward,
                resize_backward_kernel,
            )
        }
        // A gradient for each input of the forward op: the data, and a shape input if any.
        .outputs(Outputs::By(|op, attrs| {
            resize_inputs(op, attrs).map(|n| (n, n))
        }))
        .on_gpu(gpu::resample::resample_backward),
        OpDef {
            member: Member::Resample(Resample::Crop),
            alias_safe: false,
            gradient: Some(grad::crop),
            ..OpDef::new("Crop", Arity::AtLeast(1), infer_crop, crop_kernel)
        }
        .on_gpu(gpu::resample::resample),
        OpDef {
            member: Member::Resample(Resample::Crop),
            alias_safe: false,
            ..OpDef::new(
                "_backward_Crop",
                Arity::AtLeast(2),
                infer_crop_backward,
                crop_backward_kernel,
            )
        }
        // A gradient for each input of the forward op: the data, and a shape input if any.
        .outputs(Outputs::By(|op, attrs| {
            crop_inputs(op, attrs).map(|n| (n, n))
        }))
        .on_gpu(gpu::resample::resample_backward),
    ];
    OPS
}
