//! Region ops of detection models, NCHW, with their backward ops: `ROIPooling` (the maximum of
//! each cell of a region's grid, rounded to whole pixels) and `_contrib_ROIAlign` (each cell's
//! average of bilinear samples, no rounding). Regions are rows `(image, x1, y1, x2, y2)` in
//! input pixels, scaled by `spatial_scale` onto the feature map; a region naming an image
//! outside the batch fails the op, naming it.

use super::par::{for_ranges, Shared};
use super::params::{op_params, Params, Window};
use super::vision::{check_nchw, positive};
use super::{Arity, Attrs, OpDef, Outputs, TensorRef};
use crate::error::{invalid, shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn check_rois(op: &str, s: &[usize]) -> Result<()> {
    if s.len() != 2 || s[1] != 5 {
        return Err(shape_error(
            op,
            "rois",
            s,
            "(R, 5): batch index, x1, y1, x2, y2 per region",
        ));
    }
    Ok(())
}

/// Region `r`'s image, checked against a batch of `images`.
fn image_of(op: &str, rois: &[f64], r: usize, images: usize) -> std::result::Result<usize, String> {
    let image = rois[r * 5];
    if image.fract() != 0.0 || !(0.0..images as f64).contains(&image) {
        return Err(format!(
            "{op}: region {r} names image {image}, outside the batch of {images}"
        ));
    }
    Ok(image as usize)
}

// ---- ROIPooling --------------------------------------------------------------------------

op_params! {
    /// ROIPooling's attributes.
    pub struct ROIPoolingParams for "ROIPooling" {
        pooled_size: Window,
        spatial_scale: f32,
    }
}

/// A region's scale from the input image to the data, refused unless positive.
fn scale_of(op: &str, scale: f32) -> Result<f64> {
    if scale.is_nan() || scale <= 0.0 {
        return Err(invalid(
            op,
            format!("spatial_scale={scale} is not positive"),
        ));
    }
    Ok(f64::from(scale))
}

fn roi_params(op: &str, attrs: &Attrs) -> Result<((usize, usize), f64)> {
    let a = ROIPoolingParams::get(op, attrs)?;
    let pooled = positive(
        op,
        "pooled_size",
        a.pooled_size.required(op, "pooled_size")?,
    )?;
    Ok((pooled, scale_of(op, a.spatial_scale)?))
}

fn infer_roi_pooling(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_nchw(op, "data", &s[0], d[0])?;
    let ((ph, pw), _) = roi_params(op, attrs)?;
    check_rois(op, &s[1])?;
    let out = vec![s[1][0], s[0][1], ph, pw];
    // The output, and (hidden, as in MXNet) where each output's maximum was.
    Ok((vec![out.clone(), out], vec![d[0], d[0]]))
}

/// Region `r`'s image and, per output cell, its window of the feature map (empty windows
/// give 0 and no gradient), as MXNet's ROIPooling rounds them.
struct Region {
    image: usize,
    start: (i64, i64),
    bin: (f64, f64),
}

impl Region {
    fn read(
        rois: &[f64],
        r: usize,
        scale: f64,
        images: usize,
        pooled: (usize, usize),
    ) -> std::result::Result<Region, String> {
        let v = &rois[r * 5..r * 5 + 5];
        let image = image_of("ROIPooling", rois, r, images)?;
        let at = |k: usize| (v[k] * scale).round() as i64;
        let (x1, y1, x2, y2) = (at(1), at(2), at(3), at(4));
        let (rh, rw) = ((y2 - y1 + 1).max(1), (x2 - x1 + 1).max(1));
        Ok(Region {
            image,
            start: (y1, x1),
            bin: (rh as f64 / pooled.0 as f64, rw as f64 / pooled.1 as f64),
        })
    }

    /// The window of cell (a, b), clamped into an `h x w` map.
    fn window(
        &self,
        a: usize,
        b: usize,
        h: usize,
        w: usize,
    ) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let clamp = |v: f64, start: i64, n: usize| (v as i64 + start).clamp(0, n as i64) as usize;
        let (bh, bw) = self.bin;
        let rows = clamp((a as f64 * bh).floor(), self.start.0, h)
            ..clamp(((a + 1) as f64 * bh).ceil(), self.start.0, h);
        let cols = clamp((b as f64 * bw).floor(), self.start.1, w)
            ..clamp(((b + 1) as f64 * bw).ceil(), self.start.1, w);
        (rows, cols)
    }
}

/// The regions' values.
fn rois_f64(t: &TensorRef) -> Vec<f64> {
    // SAFETY: the region ops' kernels hold read access to their regions input.
    unsafe { t.to_f64s() }
}

fn roi_pooling_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (pooled, scale) = roi_params(op, attrs).map_err(|e| e.to_string())?;
    let (x, y, arg) = (&ins[0], &outs[0], &outs[1]);
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let rois = rois_f64(&ins[1]);
    let regions = (0..y.shape[0])
        .map(|r| Region::read(&rois, r, scale, n, pooled))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let cells = pooled.0 * pooled.1;
    crate::with_dtype!(x.dtype, T => {
        let (xs, ys, args) = (Shared::new(x.ptr::<T>()), Shared::new(y.ptr::<T>()), Shared::new(arg.ptr::<T>()));
        for_ranges(regions.len() * c, h * w, |lo, hi| {
            for plane in lo..hi {
                let (reg, ch) = (&regions[plane / c], plane % c);
                // SAFETY: the image's channel and the output plane lie inside their buffers;
                // this range alone writes output plane `plane` (and its argmax plane).
                unsafe {
                    let xi = xs.piece(reg.image * c + ch, h * w);
                    let (yo, ao) = (ys.piece_mut(plane, cells), args.piece_mut(plane, cells));
                    for a in 0..pooled.0 {
                        for b in 0..pooled.1 {
                            let (rows, cols) = reg.window(a, b, h, w);
                            let mut best: Option<(usize, T)> = None;
                            for i in rows {
                                for j in cols.clone() {
                                    let v = xi[i * w + j];
                                    if best.is_none_or(|(_, m)| v > m) {
                                        best = Some((i * w + j, v));
                                    }
                                }
                            }
                            let k = a * pooled.1 + b;
                            (yo[k], ao[k]) = match best {
                                Some((at, v)) => (v, T::from_f64(at as f64)),
                                None => (T::default(), T::from_f64(-1.0)),
                            };
                        }
                    }
                }
            }
        });
    });
    Ok(())
}

/// `_backward_ROIPooling(ograd, rois, argmax, data)`: each output gradient into the element its
/// maximum came from.
fn roi_pooling_backward_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let (g, arg, dx) = (&ins[0], &ins[2], &outs[0]);
    let [c, hw] = [dx.shape[1], dx.shape[2] * dx.shape[3]];
    let rois = rois_f64(&ins[1]);
    let cells = g.shape[2] * g.shape[3];
    crate::with_dtype!(dx.dtype, T => {
        // SAFETY: read access to the gradient and the argmax, exclusive access to d data (not
        // alias-safe). Shapes are the forward op's (checked by inference); the regions' images
        // and the argmax positions are checked here, as the op may be invoked by hand.
        let (gs, args, dxs) = unsafe { (g.slice::<T>(), arg.slice::<T>(), dx.slice_mut::<T>()) };
        dxs.fill(T::default());
        for r in 0..g.shape[0] {
            let image = image_of(op, &rois, r, dx.shape[0])?;
            for ch in 0..c {
                let plane = r * c + ch;
                let base = (image * c + ch) * hw;
                for k in 0..cells {
                    let at = args[plane * cells + k].to_f64();
                    if at >= hw as f64 || at.fract() != 0.0 {
                        return Err(format!(
                            "{op}: argmax {at} of region {r} is not a position in a {hw}-pixel plane"
                        ));
                    }
                    if at >= 0.0 {
                        let d = &mut dxs[base + at as usize];
                        *d = d.add(gs[plane * cells + k]);
                    }
                }
            }
        }
    });
    Ok(())
}

/// ROIPooling as the GPU runs it, from the regions' values (read back from the device and
/// checked here as the CPU kernel checks them): each region's image, and per (region, cell) its
/// window `[row start, row end, column start, column end]` on the feature map.
pub(crate) fn pooling_windows(
    op: &str,
    attrs: &Attrs,
    rois: &[f64],
    x: &[usize],
) -> std::result::Result<(Vec<usize>, Vec<[usize; 4]>), String> {
    let (pooled, scale) = roi_params(op, attrs).map_err(|e| e.to_string())?;
    let (mut images, mut windows) = (Vec::new(), Vec::new());
    for r in 0..rois.len() / 5 {
        let reg = Region::read(rois, r, scale, x[0], pooled)?;
        images.push(reg.image);
        for a in 0..pooled.0 {
            for b in 0..pooled.1 {
                let (rows, cols) = reg.window(a, b, x[2], x[3]);
                windows.push([rows.start, rows.end, cols.start, cols.end]);
            }
        }
    }
    Ok((images, windows))
}

/// `(ograd, rois, argmax, data)`: the argmax is the forward op's hidden output.
fn infer_roi_pooling_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = (&[s[3].clone(), s[1].clone()][..], &[d[3], d[1]][..]);
    let grads = [(0, &s[0][..], d[0]), (1, &s[2][..], d[2])];
    super::check_against_forward(op, "ROIPooling", attrs, fwd, &grads)?;
    Ok((vec![s[3].clone()], vec![d[0]]))
}

// ---- ROIAlign -----------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Align {
    pooled: (usize, usize),
    scale: f64,
    /// Samples per cell along each axis; 0: as many as the cell is pixels, rounded up.
    samples: usize,
    /// Each cell reads its own channel group (R-FCN's position-sensitive pooling).
    position_sensitive: bool,
    /// Pixel centres at half-integers (`aligned`): regions shift by half a pixel and may be
    /// smaller than one.
    aligned: bool,
}

op_params! {
    /// ROIAlign's attributes.
    pub struct ROIAlignParams for "_contrib_ROIAlign" {
        pooled_size: Window,
        spatial_scale: f32,
        sample_ratio: i64,
        position_sensitive: bool,
        aligned: bool,
    }
}

fn align_params(op: &str, attrs: &Attrs) -> Result<Align> {
    let a = ROIAlignParams::get(op, attrs)?;
    Ok(Align {
        pooled: positive(
            op,
            "pooled_size",
            a.pooled_size.required(op, "pooled_size")?,
        )?,
        scale: scale_of(op, a.spatial_scale)?,
        // Not positive: adaptive, as in MXNet.
        samples: a.sample_ratio.max(0) as usize,
        position_sensitive: a.position_sensitive,
        aligned: a.aligned,
    })
}

fn infer_roi_align(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_nchw(op, "data", &s[0], d[0])?;
    check_rois(op, &s[1])?;
    let p = align_params(op, attrs)?;
    let cells = p.pooled.0 * p.pooled.1;
    let c = s[0][1];
    let out_c = match p.position_sensitive {
        true if c.is_multiple_of(cells) => c / cells,
        true => {
            return Err(invalid(
                op,
                format!("position_sensitive: the {c} channels are not a multiple of the {cells} cells of pooled_size {:?}", p.pooled),
            ))
        }
        false => c,
    };
    Ok((
        vec![vec![s[1][0], out_c, p.pooled.0, p.pooled.1]],
        vec![d[0]],
    ))
}

/// Per cell of a region, the pixels it reads (offsets in a plane) and their weights.
pub(crate) type CellTaps = Vec<Vec<(usize, f64)>>;

/// Most bilinear samples one cell of a region may take: its grid is `sample_ratio` samples per
/// axis or, adaptive, as many as the cell spans pixels, so a large `sample_ratio` or
/// `spatial_scale`, or a region's coordinates far beyond the map, would otherwise size the
/// plan (four taps a sample) and the loop by an attribute or a value in the data. 65,536 is a
/// 256 x 256 grid: an adaptive region of 1,792 pixels a side pooled 7 x 7.
const MAX_CELL_SAMPLES: usize = 1 << 16;

/// Per cell of region `v` (`(image, x1, y1, x2, y2)`), the pixels its samples read and their
/// weights (each sample's bilinear weights over the cell's sample count), as MXNet's ROIAlign
/// places the samples: evenly inside each cell, a sample beyond a pixel outside the map reading
/// nothing and one just outside clamping to the border. A grid of more than
/// [`MAX_CELL_SAMPLES`] per cell is refused.
fn align_taps(p: &Align, v: &[f64], h: usize, w: usize) -> std::result::Result<CellTaps, String> {
    let shift = if p.aligned { 0.5 } else { 0.0 };
    let at = |k: usize| v[k] * p.scale - shift;
    let (x1, y1) = (at(1), at(2));
    let (mut rw, mut rh) = (at(3) - x1, at(4) - y1);
    if !p.aligned {
        rw = rw.max(1.0);
        rh = rh.max(1.0);
    }
    let (ph, pw) = p.pooled;
    let (bh, bw) = (rh / ph as f64, rw / pw as f64);
    // Casting saturates (and maps NaN to 0), so a grid past any bound stays past it.
    let grid = |extent: f64, cells: usize| match p.samples {
        0 => (extent / cells as f64).ceil().max(0.0) as usize,
        n => n,
    };
    let (gh, gw) = (grid(rh, ph), grid(rw, pw));
    let samples = gh.checked_mul(gw).filter(|&n| n <= MAX_CELL_SAMPLES);
    let Some(samples) = samples else {
        return Err(format!(
            "({}, {}, {}, {}) at spatial_scale {} takes a grid of {gh} x {gw} samples per cell \
             (sample_ratio {}); at most {MAX_CELL_SAMPLES} are supported",
            v[1],
            v[2],
            v[3],
            v[4],
            p.scale,
            match p.samples {
                0 => "adaptive".to_string(),
                n => n.to_string(),
            },
        ));
    };
    let count = samples.max(1) as f64;
    let mut cells = Vec::with_capacity(ph * pw);
    for a in 0..ph {
        for b in 0..pw {
            let mut taps = Vec::with_capacity(4 * samples);
            for iy in 0..gh {
                let y = y1 + a as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                for ix in 0..gw {
                    let x = x1 + b as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                    bilinear(y, x, h, w, count, &mut taps);
                }
            }
            cells.push(taps);
        }
    }
    Ok(cells)
}

/// The four pixels around (y, x) and their weights over `count`, pushed onto `taps`.
fn bilinear(y: f64, x: f64, h: usize, w: usize, count: f64, taps: &mut Vec<(usize, f64)>) {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return;
    }
    let edge = |v: f64, n: usize| {
        let v = v.max(0.0);
        let lo = v as usize;
        if lo + 1 >= n {
            (n - 1, n - 1, 0.0)
        } else {
            (lo, lo + 1, v - lo as f64)
        }
    };
    let ((y0, y1, ly), (x0, x1, lx)) = (edge(y, h), edge(x, w));
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    taps.extend([
        (y0 * w + x0, hy * hx / count),
        (y0 * w + x1, hy * lx / count),
        (y1 * w + x0, ly * hx / count),
        (y1 * w + x1, ly * lx / count),
    ]);
}

/// Region `r`'s image and its cells' taps.
fn align_regions(
    op: &str,
    p: &Align,
    rois: &[f64],
    regions: usize,
    x: &[usize],
) -> std::result::Result<Vec<(usize, CellTaps)>, String> {
    (0..regions)
        .map(|r| {
            Ok((
                image_of(op, rois, r, x[0])?,
                align_taps(p, &rois[r * 5..r * 5 + 5], x[2], x[3])
                    .map_err(|e| format!("{op}: region {r} {e}"))?,
            ))
        })
        .collect()
}

/// The input channel cell `k` of output channel `c` reads.
fn align_channel(p: &Align, c: usize, k: usize) -> usize {
    match p.position_sensitive {
        true => c * p.pooled.0 * p.pooled.1 + k,
        false => c,
    }
}

/// ROIAlign as the GPU runs it.
pub(crate) struct AlignPlan {
    /// Cells per region.
    pub(crate) cells: usize,
    pub(crate) position_sensitive: bool,
    /// Each region's image and its cells' taps.
    pub(crate) regions: Vec<(usize, CellTaps)>,
}

/// The plan of ROIAlign from the regions' values (read back from the device and checked here as
/// the CPU kernel checks them) over data of shape `x`.
pub(crate) fn align_plan(
    op: &str,
    attrs: &Attrs,
    rois: &[f64],
    x: &[usize],
) -> std::result::Result<AlignPlan, String> {
    let p = align_params(op, attrs).map_err(|e| e.to_string())?;
    Ok(AlignPlan {
        cells: p.pooled.0 * p.pooled.1,
        position_sensitive: p.position_sensitive,
        regions: align_regions(op, &p, rois, rois.len() / 5, x)?,
    })
}

fn roi_align_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let p = align_params(op, attrs).map_err(|e| e.to_string())?;
    let (x, y) = (&ins[0], &outs[0]);
    let regions = align_regions(op, &p, &rois_f64(&ins[1]), y.shape[0], &x.shape)?;
    let (c_in, hw, c_out) = (x.shape[1], x.shape[2] * x.shape[3], y.shape[1]);
    let cells = p.pooled.0 * p.pooled.1;
    crate::with_dtype!(x.dtype, T => {
        let (xs, ys) = (Shared::new(x.ptr::<T>()), Shared::new(y.ptr::<T>()));
        for_ranges(regions.len() * c_out, cells * 16, |lo, hi| {
            for plane in lo..hi {
                let ((image, taps), c) = (&regions[plane / c_out], plane % c_out);
                // SAFETY: read access to the data; output plane `plane` is written by this
                // range alone.
                unsafe {
                    let out = ys.piece_mut(plane, cells);
                    for (k, cell) in taps.iter().enumerate() {
                        let xi = xs.piece(image * c_in + align_channel(&p, c, k), hw);
                        out[k] = T::from_f64(cell.iter().map(|&(i, wt)| wt * xi[i].to_f64()).sum());
                    }
                }
            }
        });
    });
    Ok(())
}

/// `_backward_ROIAlign(ograd, rois, data)`: each output gradient back onto the pixels its
/// samples read.
fn roi_align_backward_kernel(call: Call, _: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let p = align_params(op, attrs).map_err(|e| e.to_string())?;
    let (g, dx) = (&ins[0], &outs[0]);
    let regions = align_regions(op, &p, &rois_f64(&ins[1]), g.shape[0], &dx.shape)?;
    let (c_in, hw, c_out) = (dx.shape[1], dx.shape[2] * dx.shape[3], g.shape[1]);
    let cells = p.pooled.0 * p.pooled.1;
    crate::with_dtype!(dx.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to d data (not alias-safe).
        let (gs, dxs) = unsafe { (g.slice::<T>(), dx.slice_mut::<T>()) };
        dxs.fill(T::default());
        for (r, (image, taps)) in regions.iter().enumerate() {
            for c in 0..c_out {
                for (k, cell) in taps.iter().enumerate() {
                    let gv = gs[(r * c_out + c) * cells + k].to_f64();
                    let base = (image * c_in + align_channel(&p, c, k)) * hw;
                    for &(i, wt) in cell {
                        let d = &mut dxs[base + i];
                        *d = T::from_f64(d.to_f64() + wt * gv);
                    }
                }
            }
        }
    });
    Ok(())
}

/// `(ograd, rois, data)`.
fn infer_roi_align_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = (&[s[2].clone(), s[1].clone()][..], &[d[2], d[1]][..]);
    super::check_against_forward(op, "_contrib_ROIAlign", attrs, fwd, &[(0, &s[0], d[0])])?;
    Ok((vec![s[2].clone()], vec![d[0]]))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            gradient: Some(grad::roi_pooling),
            // Where each maximum was is a hidden output, as in MXNet.
            outputs: Outputs::Fixed(2, 1),
            ..OpDef::new(
                "ROIPooling",
                Arity::Exactly(2),
                infer_roi_pooling,
                roi_pooling_kernel,
            )
        }
        .on_gpu(gpu::roi::roi_pooling),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_ROIPooling",
                Arity::Exactly(4),
                infer_roi_pooling_backward,
                roi_pooling_backward_kernel,
            )
        }
        .on_gpu(gpu::roi::roi_pooling_backward),
        OpDef {
            alias_safe: false,
            gradient: Some(grad::roi_align),
            ..OpDef::new(
                "_contrib_ROIAlign",
                Arity::Exactly(2),
                infer_roi_align,
                roi_align_kernel,
            )
        }
        .on_gpu(gpu::roi::roi_align),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_ROIAlign",
                Arity::Exactly(3),
                infer_roi_align_backward,
                roi_align_backward_kernel,
            )
        }
        .on_gpu(gpu::roi::roi_align_backward),
    ];
    OPS
}
