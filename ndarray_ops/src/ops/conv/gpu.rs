//! Convolution, Deconvolution and bilinear UpSampling on the GPU, forward and backward: cuDNN
//! where it loads, else im2col/col2im (`conv.cu`) and batched GEMMs.

use super::{conv_params, ConvDims};
use crate::ops::gpu::args::{int, kernel_args, Dim};
use crate::ops::gpu::ops::{e2s, fill_with};
use crate::ops::gpu::reduce::{add_bias, channel_sum};
use crate::ops::gpu::{ConvCall, ConvPass, ConvShape, Gemm, Stream};
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::OpDef;
use crate::ops::{Attrs, TensorRef};

kernel_args! {
    /// im2col and col2im over `nb` images of one channel group (`cg` channels of h x w), the
    /// columns (cg * kh * kw, nb, ho * wo).
    struct Columns [im2col, col2im] {
        /// Elements written: the columns' (im2col) or the images' (col2im).
        n: i64,
        /// The columns.
        cols: *mut f32,
        /// The first image's channel group; the images `image` floats apart.
        images: *mut f32,
        /// The image's height.
        h: Dim,
        /// The image's width.
        w: Dim,
        /// The window's height.
        kh: Dim,
        /// The window's width.
        kw: Dim,
        /// The vertical stride.
        sh: Dim,
        /// The horizontal stride.
        sw: Dim,
        /// Rows of padding.
        ph: i64,
        /// Columns of padding.
        pw: i64,
        /// The vertical dilation.
        dh: i64,
        /// The horizontal dilation.
        dw: i64,
        /// The output's height.
        ho: Dim,
        /// The output's width.
        wo: Dim,
        /// Images.
        nb: Dim,
        /// Floats from one image to the next.
        image: i64,
        /// Channels in the group.
        cg: Dim,
    }

}

/// The im2col / col2im arguments of one convolution, over `nb` images `image` floats apart.
#[allow(clippy::too_many_arguments)]
fn conv_args(
    n: usize,
    c: &crate::ops::conv::Conv,
    (h, w, ho, wo): (usize, usize, usize, usize),
    cols: *mut f32,
    images: *mut f32,
    nb: usize,
    image: usize,
    cg: usize,
) -> Columns {
    Columns {
        n: int(n),
        cols,
        images,
        h: Dim::new(h),
        w: Dim::new(w),
        kh: Dim::new(c.k.0),
        kw: Dim::new(c.k.1),
        sh: Dim::new(c.s.0),
        sw: Dim::new(c.s.1),
        ph: int(c.p.0),
        pw: int(c.p.1),
        dh: int(c.d.0),
        dw: int(c.d.1),
        ho: Dim::new(ho),
        wo: Dim::new(wo),
        nb: Dim::new(nb),
        image: int(image),
        cg: Dim::new(cg),
    }
}

/// How a convolution walks its batch: `chunk` images at a time, each chunk's columns in one
/// scratch buffer, so that a chunk is one im2col launch and one (batched) GEMM per group rather
/// than one of each per image — per-image products of a late ResNet layer (7x7 planes) are too
/// small to fill a GPU. The chunk is as large as the op's `workspace` (MXNet's attribute, in MB,
/// 1024 for Convolution and 512 for Deconvolution by default) allows for `per_image` bytes of scratch.
pub(super) fn conv_chunk(
    op: &str,
    attrs: &Attrs,
    n: usize,
    per_image: usize,
) -> Result<usize, String> {
    let bytes = workspace_bytes(op, attrs)?;
    Ok((bytes / per_image.max(1)).clamp(1, n.max(1)))
}

/// The op's `workspace` attribute in bytes.
pub(super) fn workspace_bytes(op: &str, attrs: &Attrs) -> Result<usize, String> {
    let mb = conv_params(op, attrs).map_err(e2s)?.workspace_mb;
    if mb.is_nan() || mb <= 0.0 {
        return Err(format!(
            "{op}: workspace must be a positive number of MB, got {mb}"
        ));
    }
    Ok((mb * (1 << 20) as f64) as usize)
}

/// Runs one pass of a convolution through the stream's convolution library (cuDNN), unless the
/// op's `cudnn_off` says not to, the batch is empty or the stream has none; whether it did.
/// `[data, filter, out]` as [`ConvCall`] names them.
pub(super) fn by_library(
    op: &str,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    d: &ConvDims,
    pass: ConvPass,
    [data, filter, out]: [*mut f32; 3],
    s: &dyn Stream,
) -> Result<bool, String> {
    // cuDNN's 4-D descriptors take int dimensions and strides: larger tensors take im2col.
    let fits = |len: usize| len <= i32::MAX as usize;
    let sizes = [
        d.n * d.ch * d.h * d.w,
        d.n * c.filters * d.ho * d.wo,
        c.filters * d.cg * c.k.0 * c.k.1,
    ];
    if d.n == 0 || !sizes.into_iter().all(fits) || c.cudnn_off {
        return Ok(false);
    }
    let shape = ConvShape {
        pass,
        x: [d.n, d.ch, d.h, d.w],
        w: [c.filters, d.cg, c.k.0, c.k.1],
        y: [d.n, c.filters, d.ho, d.wo],
        pad: c.p,
        stride: c.s,
        dilate: c.d,
        groups: c.groups,
        workspace: workspace_bytes(op, attrs)?,
        tune: c.cudnn_tune,
    };
    let call = ConvCall {
        shape,
        data,
        filter,
        out,
    };
    match s.conv(&call) {
        Some(done) => done.map(|()| true).map_err(|e| format!("{op}: {e}")),
        None => Ok(false),
    }
}

/// im2col over `nb` images of one channel group: `src` is the first image's group, the images
/// `image` floats apart; `dst` gets (rows, nb, plane).
#[allow(clippy::too_many_arguments)]
pub(super) fn im2col(
    s: &dyn Stream,
    c: &crate::ops::conv::Conv,
    (h, w, ho, wo): (usize, usize, usize, usize),
    rows: usize,
    nb: usize,
    src: *mut f32,
    image: usize,
    dst: *mut f32,
) -> KResult {
    let n = rows * nb * ho * wo;
    let a = conv_args(n, c, (h, w, ho, wo), dst, src, nb, image, 0);
    s.run(k::im2col, n, &a)
}

pub(crate) fn convolution(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let c = conv_params(op, attrs).map_err(e2s)?;
    let (x, wt, o) = (&ins[0], &ins[1], &outs[0]);
    let dims = c.dims(&x.shape, &o.shape);
    let pointers = [x.ptr(), wt.ptr(), o.ptr()];
    if !by_library(op, attrs, &c, &dims, ConvPass::Forward, pointers, s)? {
        conv_forward_columns(def, attrs, &c, &dims, [x, wt, o], s)?;
    }
    if c.bias {
        add_bias(s, o, &ins[2], (c.filters, dims.ho * dims.wo))?;
    }
    Ok(())
}

/// The forward pass by im2col and batched GEMMs.
pub(super) fn conv_forward_columns(
    def: &OpDef,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    dims: &ConvDims,
    [x, wt, o]: [&TensorRef; 3],
    s: &dyn Stream,
) -> KResult {
    let op = def.name;
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
    } = *dims;
    let plane = ho * wo;
    let direct = c.columns_are_input();
    let chunk = if direct {
        n
    } else {
        conv_chunk(op, attrs, n, rows * plane * 4)?
    };
    let col = if direct {
        std::ptr::null_mut()
    } else {
        s.scratch(chunk * rows * plane * 4)?.cast::<f32>()
    };
    for first in (0..n).step_by(chunk) {
        let nb = chunk.min(n - first);
        for g in 0..c.groups {
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside each tensor.
            let (src, wg, og) = unsafe {
                (
                    x.ptr::<f32>().add((first * ch + g * cg) * h * w),
                    wt.ptr::<f32>().add(g * fg * rows),
                    o.ptr::<f32>().add((first * c.filters + g * fg) * plane),
                )
            };
            // Image b's columns: at b * stride, rows ld apart.
            let (b, ld, stride) = if direct {
                (src, plane, ch * h * w)
            } else {
                im2col(s, c, (h, w, ho, wo), rows, nb, src, ch * h * w, col)?;
                (col, nb * plane, plane)
            };
            let gemm = Gemm {
                ta: false,
                tb: false,
                m: fg,
                n: plane,
                k: rows,
                a: wg,
                lda: rows,
                b,
                ldb: ld,
                c: og,
                ldc: plane,
                beta: 0.0,
            };
            s.gemm_batched(&gemm, nb, [0, stride, c.filters * plane])?;
        }
    }
    Ok(())
}

pub(crate) fn convolution_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let c = conv_params(op, attrs).map_err(e2s)?;
    let (dy, x, wt) = (&ins[0], &ins[1], &ins[2]);
    let dims = c.dims(&x.shape, &dy.shape);
    let (dx, dw) = (&outs[0], &outs[1]);
    let data = [dx.ptr(), wt.ptr(), dy.ptr()];
    let filter = [x.ptr(), dw.ptr(), dy.ptr()];
    if !(by_library(op, attrs, &c, &dims, ConvPass::Data, data, s)?
        && by_library(op, attrs, &c, &dims, ConvPass::Filter, filter, s)?)
    {
        conv_backward_columns(def, attrs, &c, &dims, [dy, x, wt], [Some(dx), Some(dw)], s)?;
    }
    if c.bias {
        let layout = (dims.n, c.filters, dims.ho * dims.wo);
        channel_sum(s, outs[2].ptr(), dy.ptr(), layout, 1.0)?;
    }
    Ok(())
}

/// Deconvolution: the transpose of the convolution `deconv_as_conv` describes (data of the
/// Deconvolution's output shape, filters as many as its input channels), so its forward pass is
/// that convolution's data-gradient pass with the input as the output gradient.
pub(crate) fn deconvolution(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, wt, y) = (&ins[0], &ins[1], &outs[0]);
    let c =
        crate::ops::deconv_as_conv(op, attrs, (x.shape[2], x.shape[3]), x.shape[1]).map_err(e2s)?;
    let dims = c.dims(&y.shape, &x.shape);
    let pointers = [y.ptr(), wt.ptr(), x.ptr()];
    if !by_library(op, attrs, &c, &dims, ConvPass::Data, pointers, s)? {
        // The convolution's data (`y`) is read only for a filter gradient, not asked here.
        conv_backward_columns(def, attrs, &c, &dims, [x, y, wt], [Some(y), None], s)?;
    }
    if crate::ops::has_bias(op, attrs).map_err(e2s)? {
        add_bias(s, y, &ins[2], (y.shape[1], y.shape[2] * y.shape[3]))?;
    }
    Ok(())
}

/// `_backward_Deconvolution(ograd, data, weight)`: the data's gradient is the transposed
/// convolution's forward pass over the output gradient, the weight's its filter gradient with
/// the output gradient as data and the data as output gradient.
pub(crate) fn deconvolution_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x, wt) = (&ins[0], &ins[1], &ins[2]);
    let c =
        crate::ops::deconv_as_conv(op, attrs, (x.shape[2], x.shape[3]), x.shape[1]).map_err(e2s)?;
    let dims = c.dims(&dy.shape, &x.shape);
    let (dx, dw) = (&outs[0], &outs[1]);
    if !by_library(
        op,
        attrs,
        &c,
        &dims,
        ConvPass::Forward,
        [dy.ptr(), wt.ptr(), dx.ptr()],
        s,
    )? {
        conv_forward_columns(def, attrs, &c, &dims, [dy, wt, dx], s)?;
    }
    if !by_library(
        op,
        attrs,
        &c,
        &dims,
        ConvPass::Filter,
        [dy.ptr(), dw.ptr(), x.ptr()],
        s,
    )? {
        conv_backward_columns(def, attrs, &c, &dims, [x, dy, wt], [None, Some(dw)], s)?;
    }
    if crate::ops::has_bias(op, attrs).map_err(e2s)? {
        let layout = (dy.shape[0], dy.shape[1], dy.shape[2] * dy.shape[3]);
        channel_sum(s, outs[2].ptr(), dy.ptr(), layout, 1.0)?;
    }
    Ok(())
}

/// UpSampling: nearest is a gather, bilinear a depthwise Deconvolution (as on the CPU).
pub(crate) fn upsampling(call: Call, s: &dyn Stream) -> KResult {
    let op = call.def.name;
    match crate::ops::bilinear_upsampling(op, call.attrs).map_err(e2s)? {
        Some(deconv) => deconvolution(
            Call {
                attrs: &deconv,
                ..call
            },
            s,
        ),
        None => crate::ops::gpu::gather::gather(call, s),
    }
}

/// The backward pass by im2col, GEMMs and col2im: the data's gradient, the filters' or both
/// (Deconvolution asks for one at a time).
pub(super) fn conv_backward_columns(
    def: &OpDef,
    attrs: &Attrs,
    c: &crate::ops::conv::Conv,
    dims: &ConvDims,
    [dy, x, wt]: [&TensorRef; 3],
    [dx, dw]: [Option<&TensorRef>; 2],
    s: &dyn Stream,
) -> KResult {
    let op = def.name;
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
    } = *dims;
    let plane = ho * wo;
    let direct = c.columns_are_input();
    // Per image: x's columns and dY's planes regrouped as (fg, nb, plane), and unless dX comes
    // straight from the GEMM, dX's columns.
    let per_image = (rows * plane + fg * plane + if direct { 0 } else { rows * plane }) * 4;
    let chunk = conv_chunk(op, attrs, n, per_image)?;
    let col = s.scratch(chunk * per_image)?.cast::<f32>();
    // SAFETY: the scratch holds the three buffers, one after another.
    let (dyt, dcol) = unsafe {
        let dyt = col.add(chunk * rows * plane);
        (dyt, dyt.add(chunk * fg * plane))
    };
    let one = crate::ops::conv::Conv {
        k: (1, 1),
        s: (1, 1),
        p: (0, 0),
        d: (1, 1),
        ..*c
    };
    if let (0, Some(dw)) = (n, dw) {
        fill_with(s, dw, 0.0)?;
    }
    for first in (0..n).step_by(chunk) {
        let nb = chunk.min(n - first);
        for g in 0..c.groups {
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside each tensor.
            let (xg, dyg, wg) = unsafe {
                (
                    x.ptr::<f32>().add((first * ch + g * cg) * h * w),
                    dy.ptr::<f32>().add((first * c.filters + g * fg) * plane),
                    wt.ptr::<f32>().add(g * fg * rows),
                )
            };
            let (filters, image) = (c.filters * plane, ch * h * w);
            // dY's planes regrouped: for dW, and for dX unless it comes straight from the GEMM.
            if dw.is_some() || !direct {
                im2col(s, &one, (ho, wo, ho, wo), fg, nb, dyg, filters, dyt)?;
            }
            if let Some(dw) = dw {
                im2col(s, c, (h, w, ho, wo), rows, nb, xg, ch * h * w, col)?;
                // SAFETY: (pointer arithmetic) group `g`'s filters lie inside dW.
                let dwg = unsafe { dw.ptr::<f32>().add(g * fg * rows) };
                conv_filter_gemm(s, (fg, rows, nb * plane), dyt, col, dwg, first == 0)?;
            }
            let Some(dx) = dx else { continue };
            // SAFETY: (pointer arithmetic) image `first`, group `g` lies inside dX.
            let dxg = unsafe { dx.ptr::<f32>().add((first * ch + g * cg) * h * w) };
            // dX: W_g^T dY_g, straight into dX when the columns are the input, else into
            // columns gathered back.
            let gemm = Gemm {
                ta: true,
                tb: false,
                m: rows,
                n: plane,
                k: fg,
                a: wg,
                lda: rows,
                b: dyg,
                ldb: plane,
                c: dxg,
                ldc: plane,
                beta: 0.0,
            };
            if direct {
                s.gemm_batched(&gemm, nb, [0, filters, image])?;
            } else {
                let gemm = Gemm {
                    n: nb * plane,
                    b: dyt,
                    ldb: nb * plane,
                    c: dcol,
                    ldc: nb * plane,
                    ..gemm
                };
                s.gemm(&gemm)?;
                let n = nb * cg * h * w;
                let a = conv_args(n, c, (h, w, ho, wo), dcol, dxg, nb, image, cg);
                s.run(k::col2im, n, &a)?;
            }
        }
    }
    Ok(())
}

/// dW_g (+)= dY_g col^T over a chunk's images at once: `(fg, rows, k = images * plane)`; the
/// first chunk writes, the later ones add.
pub(super) fn conv_filter_gemm(
    s: &dyn Stream,
    (fg, rows, k): (usize, usize, usize),
    dyt: *mut f32,
    col: *mut f32,
    dwg: *mut f32,
    first: bool,
) -> KResult {
    s.gemm(&Gemm {
        ta: false,
        tb: true,
        m: fg,
        n: rows,
        k,
        a: dyt,
        lda: k,
        b: col,
        ldb: k,
        c: dwg,
        ldc: rows,
        beta: if first { 0.0 } else { 1.0 },
    })
}
