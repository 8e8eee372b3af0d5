//! ROIPooling and ROIAlign on the GPU, and their gradients. The CPU kernels refuse a region
//! naming an image outside the batch; the regions are also few (hundreds of rows of five), so
//! the op reads them back (one wait for the device per call), checks them and lays out every
//! region's cells with the CPU's own code (`ops::roi`), and uploads that as a table. The
//! forward kernels give one thread per output; the gradients one thread per data element,
//! which adds, in the CPU's order, over the list of cells (and, for ROIAlign, taps) that read
//! its pixel — built on the host by the same counting sort as the other gradient tables — so no
//! atomics and the CPU's sums.

use super::args::{int, kernel_args, ptr, Dim};
use super::resample::{table, transpose};
use super::{buckets, Stream};
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::{align_plan, pooling_windows, PlaneTaps, TensorRef};

/// ROIPooling.
pub(crate) fn roi_pooling(call: Call, s: &dyn Stream) -> KResult {
    pooling(call, &rois(call, s)?, s, false)
}

/// `_backward_ROIPooling`.
pub(crate) fn roi_pooling_backward(call: Call, s: &dyn Stream) -> KResult {
    pooling(call, &rois(call, s)?, s, true)
}

/// `_contrib_ROIAlign`.
pub(crate) fn roi_align(call: Call, s: &dyn Stream) -> KResult {
    align(call, &rois(call, s)?, s, false)
}

/// `_backward_ROIAlign`.
pub(crate) fn roi_align_backward(call: Call, s: &dyn Stream) -> KResult {
    align(call, &rois(call, s)?, s, true)
}

/// The regions (input 1), read back: the windows are planned on the host with the CPU's code.
fn rois(call: Call, s: &dyn Stream) -> Result<Vec<f64>, String> {
    Ok(s.download(&call.ins[1])?
        .into_iter()
        .map(f64::from)
        .collect())
}

kernel_args! {
    /// ROIPooling and ROIAlign, forward and backward (see `kernels/roi.cu` for the tables).
    struct Roi [roi_pool, roi_pool_bwd, roi_align, roi_align_bwd] {
        /// Elements written.
        n: i64,
        /// The output (R, channels, cells), or the data's gradient.
        out: *mut f32,
        /// The data, or the output's gradient.
        src: *mut f32,
        /// The regions' table.
        table: *const i64,
        /// ROIPooling's maxima's offsets (out forward, in backward).
        argmax: *mut f32,
        /// Cells per region's channel.
        cells: Dim,
        /// The output's channels.
        channels: Dim,
        /// The data's channels.
        data_channels: Dim,
        /// The data's plane size (h * w).
        plane: Dim,
        /// The data's width (ROIPooling).
        width: i64,
        /// 1: position sensitive (ROIAlign).
        sensitive: i64,
        /// The table's rows: regions (ROIPooling), (region, cell)s (ROIAlign), (image, pixel)
        /// lists (the gradients).
        rows: i64,
        /// The gradient lists' total length (ROIAlign's gradient).
        total: i64,
    }
}

/// Arguments common to the four kernels: the output's cells and channels, the data's channels
/// and plane size (`out` the op's output, or the gradient of it).
fn layout(n: usize, dst: &TensorRef, src: &TensorRef, out: &TensorRef, data: &[usize]) -> Roi {
    Roi {
        n: int(n),
        out: ptr(dst),
        src: ptr(src),
        table: std::ptr::null(),
        argmax: std::ptr::null_mut(),
        cells: Dim::new(out.shape[2] * out.shape[3]),
        channels: Dim::new(out.shape[1]),
        data_channels: Dim::new(data[1]),
        plane: Dim::new(data[2] * data[3]),
        width: 0,
        sensitive: 0,
        rows: 0,
        total: 0,
    }
}

/// ROIPooling `(data, rois) -> (out, argmax)`; `_backward_ROIPooling(ograd, rois, argmax,
/// data) -> d data`.
fn pooling(call: Call, rois: &[f64], s: &dyn Stream, backward: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let data = if backward { &outs[0] } else { &ins[0] };
    let x = &data.shape;
    let (images, windows) = pooling_windows(op, attrs, rois, x)?;
    let (hw, w) = (x[2] * x[3], x[3]);
    if !backward {
        let (y, argmax) = (&outs[0], &outs[1]);
        let n = y.len();
        if n == 0 {
            return Ok(());
        }
        let mut table: Vec<i64> = images.iter().map(|&i| i as i64).collect();
        table.extend(windows.iter().flatten().map(|&v| v as i64));
        let a = Roi {
            table: s.upload(&table)?.cast(),
            argmax: ptr(argmax),
            width: int(w),
            rows: int(images.len()),
            ..layout(n, y, data, y, x)
        };
        return s.run(k::roi_pool, n, &a);
    }
    // Each (image, pixel) lists the (region, cell)s whose window holds it.
    let cells = windows.len() / images.len().max(1);
    let mut holders = Vec::new();
    for (rc, win) in windows.iter().enumerate() {
        let image = images[rc / cells.max(1)];
        for i in win[0]..win[1] {
            for j in win[2]..win[3] {
                holders.push((image * hw + i * w + j, rc));
            }
        }
    }
    let lists = x[0] * hw;
    let (starts, list) = buckets(holders.iter().map(|&(key, _)| Some(key)), lists);
    let mut table: Vec<i64> = starts.iter().map(|&k| k as i64).collect();
    table.extend(list.iter().map(|&e| holders[e].1 as i64));
    let (g, dx) = (&ins[0], &outs[0]);
    let n = dx.len();
    if n == 0 {
        return Ok(());
    }
    let a = Roi {
        table: s.upload(&table)?.cast(),
        argmax: ptr(&ins[2]),
        rows: int(lists),
        ..layout(n, dx, g, g, x)
    };
    s.run(k::roi_pool_bwd, n, &a)
}

/// `_contrib_ROIAlign(data, rois) -> out`; `_backward_ROIAlign(ograd, rois, data) -> d data`.
fn align(call: Call, rois: &[f64], s: &dyn Stream, backward: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let data = if backward { &outs[0] } else { &ins[0] };
    let x = &data.shape;
    let plan = align_plan(op, attrs, rois, x)?;
    let (cells, sensitive, regions) = (plan.cells, plan.position_sensitive, plan.regions);
    let n = outs[0].len();
    if n == 0 {
        return Ok(());
    }
    // Row `r * cells + k` of the matrix: cell k of region r's taps, offsets in its image's
    // planes.
    let mut local = PlaneTaps {
        starts: vec![0],
        taps: Vec::new(),
    };
    for (_, taps) in &regions {
        for cell in taps {
            local.taps.extend_from_slice(cell);
            local.starts.push(local.taps.len());
        }
    }
    if !backward {
        let y = &outs[0];
        let mut table = table(&local);
        table.extend(regions.iter().map(|&(image, _)| image as i64));
        let a = Roi {
            table: s.upload(&table)?.cast(),
            sensitive: i64::from(sensitive),
            rows: int(local.starts.len() - 1),
            ..layout(n, y, data, y, x)
        };
        return s.run(k::roi_align, n, &a);
    }
    // The gradient reads the transpose, its columns every image's pixels: per (image, pixel),
    // the rows reading it and their weights in row order — the CPU's order of adds.
    let hw = x[2] * x[3];
    let mut global = local;
    for (row, w) in global.starts.windows(2).enumerate() {
        let image = regions[row / cells.max(1)].0;
        for tap in &mut global.taps[w[0]..w[1]] {
            tap.0 += image * hw;
        }
    }
    let lists = x[0] * hw;
    let readers = transpose(&global, lists);
    let g = &ins[0];
    let a = Roi {
        table: s.upload(&table(&readers))?.cast(),
        sensitive: i64::from(sensitive),
        rows: int(lists),
        total: int(readers.taps.len()),
        ..layout(n, &outs[0], g, g, x)
    };
    s.run(k::roi_align_bwd, n, &a)
}
