//! Convolution and its transpose Deconvolution (2-D, NCHW; stride, pad, dilation, groups),
//! their backward ops, and UpSampling, whose bilinear mode is a Deconvolution: every part of
//! these ops, CPU and GPU, in this folder.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | attributes, geometry ([`Conv`], [`ConvDims`]), shape inference, the op table |
//! | `partial.rs` | partial shapes both ways: weights from the data, data from the output |
//! | `forward.rs` | the forward kernel: im2col into the temp space plus one GEMM per image and group, or a direct path |
//! | `implicit.rs`, `winograd/`, `depthwise.rs` | the direct paths: implicit GEMM, Winograd, depthwise |
//! | `taps.rs` | the window taps the direct paths and pooling run on |
//! | `backward.rs` | `_backward_Convolution` |
//! | `deconv.rs` | Deconvolution and `_backward_Deconvolution` |
//! | `upsampling.rs` | UpSampling |
//! | `grad.rs` | the gradient rules |
//! | `gpu.rs`, `conv.cu` | the GPU kernels: cuDNN where it loads, else im2col/col2im and batched GEMMs |

mod backward;
mod deconv;
mod depthwise;
mod forward;
pub(crate) mod gpu;
mod grad;
mod implicit;
pub(crate) mod partial;
mod taps;
mod upsampling;
mod winograd;

pub(crate) use deconv::deconv_as_conv;
pub(crate) use forward::conv_then;
pub(crate) use taps::{by_phase, from_phase, Tap};
pub(crate) use upsampling::bilinear_upsampling;

use super::params::{attr_enum, op_params, Params, Positive, Window};
use super::{same_dtypes, Arity, Attrs, Flops, OpDef, Outputs};
use crate::error::{invalid, shape_error, Result};
use crate::ops::Infer;
use crate::resources::Resource;
use crate::DType;

attr_enum! {
    /// An image layout, as MXNet names them. The kernels take (N, C, H, W) only: the others
    /// are refused ([`check_layout`]) rather than misread.
    pub enum Layout {
        /// Batch, channels, columns.
        Ncw = "NCW",
        /// Batch, channels, rows, columns.
        Nchw = "NCHW",
        /// Batch, channels, depth, rows, columns.
        Ncdhw = "NCDHW",
        /// Batch, columns, channels.
        Nwc = "NWC",
        /// Batch, rows, columns, channels.
        Nhwc = "NHWC",
        /// Batch, depth, rows, columns, channels.
        Ndhwc = "NDHWC",
    }
}

/// Refuses a layout other than (N, C, H, W), the one the kernels take.
pub(crate) fn check_layout(op: &str, layout: Option<Layout>) -> Result<()> {
    match layout {
        None | Some(Layout::Nchw) => Ok(()),
        Some(other) => Err(invalid(
            op,
            format!("layout {:?} is not supported (only NCHW)", other.word()),
        )),
    }
}

attr_enum! {
    /// How the GPU library chooses a convolution's algorithm (MXNet's `cudnn_tune`).
    pub enum CudnnTune {
        /// By measuring each within the workspace.
        LimitedWorkspace = "limited_workspace",
        /// By measuring each, the fastest whatever its workspace.
        Fastest = "fastest",
        /// By the library's heuristics only.
        Off = "off",
    }
}

op_params! {
    /// Convolution's attributes.
    pub struct ConvolutionParams for "Convolution" {
        kernel: Window,
        stride: Window,
        dilate: Window,
        pad: Window,
        num_filter: Positive,
        num_group: Positive,
        workspace: f64,
        no_bias: bool,
        cudnn_tune: Option<CudnnTune>,
        cudnn_off: bool,
        layout: Option<Layout>,
    }
}

op_params! {
    /// Deconvolution's attributes (a convolution's, with its output's size: `adj` and
    /// `target_shape`).
    pub struct DeconvolutionParams for "Deconvolution" {
        kernel: Window,
        stride: Window,
        dilate: Window,
        pad: Window,
        adj: Window,
        target_shape: Window,
        num_filter: Positive,
        num_group: Positive,
        workspace: f64,
        no_bias: bool,
        cudnn_tune: Option<CudnnTune>,
        cudnn_off: bool,
        layout: Option<Layout>,
    }
}

/// A (de)convolution as its kernels take it: its window, its sizes, and for Deconvolution the
/// output's extra rows (`adj`) or size (`target`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conv {
    pub(crate) k: (usize, usize),
    pub(crate) s: (usize, usize),
    pub(crate) p: (usize, usize),
    pub(crate) d: (usize, usize),
    pub(crate) filters: usize,
    pub(crate) groups: usize,
    pub(crate) bias: bool,
    pub(crate) adj: (usize, usize),
    pub(crate) target: (usize, usize),
    /// The temporary space the GPU kernels may take, in MiB.
    pub(crate) workspace_mb: f64,
    pub(crate) cudnn_off: bool,
    pub(crate) cudnn_tune: bool,
}

/// A convolution's sizes: data `(n, ch, h, w)`, output `ho x wo`, channels `cg` and filters `fg`
/// per group, and the rows of its column buffer (`cg * kh * kw`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvDims {
    pub(crate) n: usize,
    pub(crate) ch: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    pub(crate) ho: usize,
    pub(crate) wo: usize,
    pub(crate) cg: usize,
    pub(crate) fg: usize,
    pub(crate) rows: usize,
}

impl Conv {
    /// The sizes of this convolution over `data` `(N, C, H, W)` with output (or output gradient)
    /// `out` `(N, F, Ho, Wo)` — what its CPU and GPU kernels, forward and backward, work on.
    pub(crate) fn dims(&self, data: &[usize], out: &[usize]) -> ConvDims {
        let cg = data[1] / self.groups;
        ConvDims {
            n: data[0],
            ch: data[1],
            h: data[2],
            w: data[3],
            ho: out[2],
            wo: out[3],
            cg,
            fg: self.filters / self.groups,
            rows: cg * self.k.0 * self.k.1,
        }
    }

    /// Whether the columns are the input itself (1x1 window, stride 1, no padding): a group of
    /// an image is then already its (rows, Ho*Wo) column matrix, and im2col and col2im are
    /// skipped.
    pub(crate) fn columns_are_input(&self) -> bool {
        self.k == (1, 1) && self.s == (1, 1) && self.p == (0, 0)
    }
}

/// Whether a (de)convolution has a bias input. MXNet's defaults differ: a Convolution has one
/// unless `no_bias`, a Deconvolution has none unless `no_bias=False`.
pub(crate) fn has_bias(op: &str, attrs: &Attrs) -> Result<bool> {
    Ok(conv_params(op, attrs)?.bias)
}

/// The backward op's outputs (Convolution's and Deconvolution's): the data's and the weight's
/// gradients, and the bias's where there is one.
pub(crate) fn grad_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = if has_bias(op, attrs)? { 3 } else { 2 };
    Ok((n, n))
}

/// A (de)convolution's parameters (parsed on the node's first run, then kept with its
/// attributes).
pub(crate) fn conv_params(op: &str, attrs: &Attrs) -> Result<Conv> {
    attrs.parsed(op, parse_conv).map(|c| *c)
}

fn parse_conv(op: &str, attrs: &Attrs) -> Result<Conv> {
    // A Deconvolution's attributes are a Convolution's (with other defaults) and its output's
    // size; the two structs name their shared fields alike.
    macro_rules! conv {
        ($p:expr, $adj:expr, $target:expr) => {{
            let p = $p;
            check_layout(op, p.layout)?;
            Conv {
                k: p.kernel.required(op, "kernel")?,
                s: p.stride.or((1, 1)),
                p: p.pad.or((0, 0)),
                d: p.dilate.or((1, 1)),
                filters: p.num_filter.0,
                groups: p.num_group.0,
                bias: !p.no_bias,
                adj: $adj(&p).or((0, 0)),
                target: $target(&p).or((0, 0)),
                workspace_mb: p.workspace,
                cudnn_off: p.cudnn_off,
                cudnn_tune: p.cudnn_tune != Some(CudnnTune::Off),
            }
        }};
    }
    let c = match op.ends_with("Deconvolution") {
        false => conv!(
            ConvolutionParams::read(op, attrs)?,
            |_: &ConvolutionParams| Window(None),
            |_: &ConvolutionParams| Window(None)
        ),
        true => conv!(
            DeconvolutionParams::read(op, attrs)?,
            |d: &DeconvolutionParams| d.adj,
            |d: &DeconvolutionParams| d.target_shape
        ),
    };
    if c.k.0 == 0 || c.k.1 == 0 || c.s.0 == 0 || c.s.1 == 0 || c.d.0 == 0 || c.d.1 == 0 {
        return Err(invalid(
            op,
            format!(
                "kernel {:?}, stride {:?} and dilate {:?} must be positive",
                c.k, c.s, c.d
            ),
        ));
    }
    Ok(c)
}

pub(super) fn out_len(
    op: &str,
    n: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    ceil: bool,
) -> Result<usize> {
    let span = d * (k - 1) + 1;
    if n + 2 * p < span {
        return Err(invalid(
            op,
            format!(
                "window of {span} (kernel {k}, dilation {d}) is larger than the padded input {}",
                n + 2 * p
            ),
        ));
    }
    let room = n + 2 * p - span;
    Ok(if ceil {
        room.div_ceil(s) + 1
    } else {
        room / s + 1
    })
}

/// The data of Convolution and Deconvolution: `(N, C, H, W)`, with `num_group` dividing both the
/// channels and the filters.
pub(super) fn check_grouped_data(op: &str, x: &[usize], c: &Conv) -> Result<()> {
    if x.len() != 4 {
        return Err(shape_error(op, "data", x, "4 dimensions (N, C, H, W)"));
    }
    if !x[1].is_multiple_of(c.groups) || !c.filters.is_multiple_of(c.groups) {
        return Err(invalid(
            op,
            format!(
                "num_group {} must divide the {} input channels and the {} filters",
                c.groups, x[1], c.filters
            ),
        ));
    }
    Ok(())
}

pub(super) fn infer_conv(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    let c = conv_params(op, attrs)?;
    let want = if c.bias { 3 } else { 2 };
    if s.len() != want {
        return Err(invalid(
            op,
            format!(
                "takes {want} inputs with no_bias={}, got {}",
                !c.bias,
                s.len()
            ),
        ));
    }
    let x = &s[0];
    check_grouped_data(op, x, &c)?;
    let wshape = vec![c.filters, x[1] / c.groups, c.k.0, c.k.1];
    if s[1] != wshape {
        return Err(shape_error(
            op,
            "weight",
            s[1].clone(),
            format!("{wshape:?}"),
        ));
    }
    if c.bias && s[2] != [c.filters] {
        return Err(shape_error(
            op,
            "bias",
            s[2].clone(),
            format!("[{}]", c.filters),
        ));
    }
    let ho = out_len(op, x[2], c.k.0, c.s.0, c.p.0, c.d.0, false)?;
    let wo = out_len(op, x[3], c.k.1, c.s.1, c.p.1, c.d.1, false)?;
    Ok((vec![vec![x[0], c.filters, ho, wo]], vec![dt]))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            infer_partial: Some(partial::convolution),
            gradient: Some(grad::convolution),
            ..OpDef::new(
                "Convolution",
                Arity::AtLeast(2),
                infer_conv,
                forward::conv_kernel,
            )
        }
        .cost(Flops::Window, 1.0)
        .on_gpu(gpu::convolution),
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            outputs: Outputs::By(grad_outputs),
            ..OpDef::new(
                "_backward_Convolution",
                Arity::Exactly(3),
                backward::infer_conv_backward,
                backward::conv_backward_kernel,
            )
        }
        .on_gpu(gpu::convolution_backward),
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            infer_partial: Some(partial::deconvolution),
            gradient: Some(grad::deconvolution),
            ..OpDef::new(
                "Deconvolution",
                Arity::AtLeast(2),
                deconv::infer_deconv,
                deconv::deconv_kernel,
            )
        }
        .cost(Flops::Window, 1.0)
        .on_gpu(gpu::deconvolution),
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            outputs: Outputs::By(grad_outputs),
            ..OpDef::new(
                "_backward_Deconvolution",
                Arity::Exactly(3),
                backward::infer_conv_backward,
                deconv::deconv_backward_kernel,
            )
        }
        .on_gpu(gpu::deconvolution_backward),
        OpDef {
            alias_safe: false,
            resources: &[Resource::TempSpace],
            infer_partial: Some(partial::upsampling),
            gradient: Some(grad::upsampling),
            ..OpDef::new(
                "UpSampling",
                Arity::AtLeast(1),
                upsampling::infer_upsampling,
                upsampling::upsampling_kernel,
            )
        }
        // Nearest UpSampling is the gather family's.
        .member(super::Member::Gather(super::gather::Gather::UpSampling))
        .on_gpu(gpu::upsampling),
    ];
    OPS
}
