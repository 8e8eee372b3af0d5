//! ROIPooling and ROIAlign on the GPU, and their gradients. The CPU kernels refuse a region
//! naming an image outside the batch; the regions are also few (hundreds of rows of five), so
//! the op reads them back (one wait for the device per call), checks them and lays out every
//! region's cells with the CPU's own code (`ops::roi`), and uploads that as a table. The
//! forward kernels give one thread per output; the gradients one thread per data element,
//! which adds, in the CPU's order, over the list of cells (and, for ROIAlign, taps) that read
//! its pixel — built on the host by the same counting sort as the other gradient tables — so no
//! atomics and the CPU's sums.

use super::resample::{table, transpose};
use super::{buckets, KArgs, Stream};
use crate::ops::KResult;
use crate::ops::{align_plan, pooling_windows, Attrs, PlaneTaps, TensorRef};

/// The op layer's entry for ROIPooling, ROIAlign and their gradients.
pub(crate) fn roi(
    op: &str,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let rois: Vec<f64> = s.download(&ins[1])?.into_iter().map(f64::from).collect();
    match op {
        "ROIPooling" | "_backward_ROIPooling" => pooling(op, attrs, &rois, ins, outs, s),
        _ => align(op, attrs, &rois, ins, outs, s),
    }
}

/// Arguments common to the four kernels: the output's cells and channels, the data's channels
/// and plane size.
fn layout(n: usize, out: &TensorRef, data: &[usize]) -> KArgs {
    KArgs::new(n)
        .i(1, out.shape[2] * out.shape[3])
        .i(2, out.shape[1])
        .i(3, data[1])
        .i(4, data[2] * data[3])
}

/// ROIPooling `(data, rois) -> (out, argmax)`; `_backward_ROIPooling(ograd, rois, argmax,
/// data) -> d data`.
fn pooling(
    op: &str,
    attrs: &Attrs,
    rois: &[f64],
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let backward = op == "_backward_ROIPooling";
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
        let a = layout(n, y, x)
            .t(0, y)
            .t(1, data)
            .p(2, s.upload(&table)?.cast())
            .t(3, argmax)
            .i(5, w)
            .i(6, images.len());
        return s.launch("roi_pool", n, &a);
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
    let a = layout(n, g, x)
        .t(0, dx)
        .t(1, g)
        .p(2, s.upload(&table)?.cast())
        .t(3, &ins[2])
        .i(6, lists);
    s.launch("roi_pool_bwd", n, &a)
}

/// `_contrib_ROIAlign(data, rois) -> out`; `_backward_ROIAlign(ograd, rois, data) -> d data`.
fn align(
    op: &str,
    attrs: &Attrs,
    rois: &[f64],
    ins: &[TensorRef],
    outs: &[TensorRef],
    s: &dyn Stream,
) -> KResult {
    let backward = op == "_backward_ROIAlign";
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
        let a = layout(n, y, x)
            .t(0, y)
            .t(1, data)
            .p(2, s.upload(&table)?.cast())
            .i(5, usize::from(sensitive))
            .i(6, local.starts.len() - 1);
        return s.launch("roi_align", n, &a);
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
    let a = layout(n, g, x)
        .t(0, &outs[0])
        .t(1, g)
        .p(2, s.upload(&table(&readers))?.cast())
        .i(5, usize::from(sensitive))
        .i(6, lists)
        .i(7, readers.taps.len());
    s.launch("roi_align_bwd", n, &a)
}
