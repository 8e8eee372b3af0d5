//! 2-D Convolution (NCHW; stride, pad, dilation, groups) as im2col into the device's temp space
//! plus one GEMM per image and group (depthwise ones directly: see `depthwise`), and the window
//! taps ([`Tap`]) that the direct convolution and pooling run on.

use std::ops::Range;

use ndarray::{ArrayView2, ArrayViewMut2};

use super::par::{for_ranges, Shared};
use super::params::{attr_enum, op_params, Params, Positive, Window};
use super::{same_dtypes, Arity, Attrs, Flops, OpDef, TensorRef};
use crate::error::{invalid, shape_error, Result};
use crate::gemm::{sgemm_then, Batches, Epilogue, Mat, Norm};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::{Infer, KResult};
use crate::resources::{KernelRes, Resource};
use crate::{DType, Element};

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

/// A (de)convolution's parameters (parsed on the node's first run, then kept with its
/// attributes).
/// The backward op's outputs (Convolution's and Deconvolution's): the data's and the weight's
/// gradients, and the bias's where there is one.
pub(crate) fn grad_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = if has_bias(op, attrs)? { 3 } else { 2 };
    Ok((n, n))
}

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

/// Lays the receptive fields of `cg` channels out as columns: row (c, i, j), column (y, x).
/// Rows are independent, so a large layout is split across threads by rows.
///
/// # Safety
/// `src` holds `cg * h * w` elements, `col` `cg * kh * kw * ho * wo`, and the two are disjoint.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn im2col<T: Element>(
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

/// One kernel tap (i, j) of a convolution, seen from its column row: which input row each
/// output row reads, which output columns read inside the input (`x0..x1`; the others read
/// padding), and where.
pub(super) struct Tap {
    /// Input row of output row y: `y * row_stride + row_offset`.
    row_offset: isize,
    row_stride: usize,
    /// Input column of output column x: `x * stride + offset`.
    offset: isize,
    stride: usize,
    x0: usize,
    x1: usize,
    /// Where the input of output column `x0` lies in an input row grouped by phase (see
    /// [`by_phase`]); there the columns `x0..x1` read are one contiguous run.
    phased: usize,
}

impl Tap {
    /// Tap (i, j) of `c` over inputs `w` wide and outputs `wo` wide.
    pub(super) fn new(c: &Conv, i: usize, j: usize, w: usize, wo: usize) -> Self {
        Self::of((i, j), c.s, c.p, c.d, w, wo)
    }

    /// Every tap of a `k` window with strides `s`, padding `p` and dilation `d` (a
    /// convolution's or a pooling's) over inputs `w` wide and outputs `wo` wide, row-major: as
    /// a filter's weights lie, and as a loop over the window visits its elements.
    pub(super) fn window(
        k: (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        w: usize,
        wo: usize,
    ) -> Vec<Tap> {
        (0..k.0 * k.1)
            .map(|t| Self::of((t / k.1, t % k.1), s, p, d, w, wo))
            .collect()
    }

    /// Tap (i, j) of a window as [`Tap::window`] describes it.
    fn of(
        (i, j): (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        w: usize,
        wo: usize,
    ) -> Self {
        let offset = (j * d.1) as isize - p.1 as isize;
        let stride = s.1 as isize;
        // The first x with x * stride + offset >= 0, and the first with it >= w.
        let first_at = |edge: isize| {
            let need = edge - offset;
            if need <= 0 {
                0
            } else {
                ((need + stride - 1) / stride) as usize
            }
        };
        let x0 = first_at(0).min(wo);
        let x1 = first_at(w as isize).clamp(x0, wo);
        let mut tap = Tap {
            row_offset: (i * d.0) as isize - p.0 as isize,
            row_stride: s.0,
            offset,
            stride: s.1,
            x0,
            x1,
            phased: 0,
        };
        if x0 < x1 {
            // Phases before the first input's hold `w / s` columns each, and one more each
            // below `w % s`. Kept, as the row loops would otherwise divide four times a tap.
            let (first, s) = (tap.first_input(), tap.stride);
            let r = first % s;
            tap.phased = r * (w / s) + r.min(w % s) + first / s;
        }
        tap
    }

    /// The input row output row `y` reads, if inside an input `h` high.
    #[inline(always)]
    pub(super) fn input_row(&self, y: usize, h: usize) -> Option<usize> {
        let iy = (y * self.row_stride) as isize + self.row_offset;
        (0..h as isize).contains(&iy).then_some(iy as usize)
    }

    /// Whether neighbouring output columns read neighbouring input columns.
    pub(super) fn unit_stride(&self) -> bool {
        self.stride == 1
    }

    /// The input column output column `x0` reads (inside the input: only asked when `x0 < x1`).
    pub(super) fn first_input(&self) -> usize {
        (self.x0 as isize * self.stride as isize + self.offset) as usize
    }

    /// Fills one column row from one input row: padding outside `x0..x1`.
    fn gather<T: Element>(&self, input: &[T], out: &mut [T]) {
        self.gather_part(input, 0, out, false)
    }

    /// Fills output columns `from..from + out.len()` of one column row from one input row
    /// (grouped by phase when `phased`, see [`by_phase`]): padding outside `x0..x1`.
    pub(super) fn gather_part<T: Element>(
        &self,
        input: &[T],
        from: usize,
        out: &mut [T],
        phased: bool,
    ) {
        let to = from + out.len();
        let (x0, x1) = (self.x0.clamp(from, to), self.x1.clamp(from, to));
        out[..x0 - from].fill(T::default());
        out[x1 - from..].fill(T::default());
        if x0 == x1 {
            return;
        }
        let out = &mut out[x0 - from..x1 - from];
        if phased {
            let first = self.phased + (x0 - self.x0);
            return out.copy_from_slice(&input[first..first + (x1 - x0)]);
        }
        let first = (x0 as isize * self.stride as isize + self.offset) as usize;
        if self.stride == 1 {
            out.copy_from_slice(&input[first..first + (x1 - x0)]);
        } else {
            for (k, o) in out.iter_mut().enumerate() {
                *o = input[first + k * self.stride];
            }
        }
    }

    /// The output columns that read inside an input row grouped by phase (as wide as the
    /// tap's input), and the input run they read there. With stride 1 the row is as it was.
    #[inline(always)]
    pub(super) fn run(&self) -> Option<(Range<usize>, Range<usize>)> {
        (self.x0 < self.x1).then(|| {
            let from = self.phased;
            (self.x0..self.x1, from..from + (self.x1 - self.x0))
        })
    }

    /// `out[x] += wv * input[x's column]` over the output columns that read inside the input:
    /// one tap's share of one output row of a direct (depthwise) convolution. `input` is
    /// grouped by phase.
    #[inline(always)]
    pub(super) fn add_scaled<T: Element>(&self, wv: T, input: &[T], out: &mut [T]) {
        if let Some((cols, run)) = self.run() {
            for (o, &v) in out[cols].iter_mut().zip(&input[run]) {
                *o = o.add(wv.mul(v));
            }
        }
    }

    /// `sum over x of grads[x] * input[x's column]`: one tap's share of its weight gradient
    /// from one output row (eight partial sums, so that the loop vectorizes). `input` is
    /// grouped by phase.
    #[inline(always)]
    pub(super) fn dot<T: Element>(&self, grads: &[T], input: &[T]) -> T {
        let Some((cols, run)) = self.run() else {
            return T::default();
        };
        let (grads, input) = (&grads[cols], &input[run]);
        let mut part = [T::default(); 8];
        let (gs, xs) = (grads.chunks_exact(8), input.chunks_exact(8));
        let tail = gs.remainder().iter().zip(xs.remainder());
        for (g, x) in gs.zip(xs) {
            for l in 0..8 {
                part[l] = part[l].add(g[l].mul(x[l]));
            }
        }
        let sum = part.iter().fold(T::default(), |acc, &p| acc.add(p));
        tail.fold(sum, |acc, (&g, &x)| acc.add(g.mul(x)))
    }

    /// `input[x's column] += wv * grads[x]`: one tap's share of the data gradient of one input
    /// row (the reverse of `add_scaled`), grouped by phase.
    #[inline(always)]
    pub(super) fn scatter_scaled<T: Element>(&self, wv: T, grads: &[T], input: &mut [T]) {
        if let Some((cols, run)) = self.run() {
            for (d, &g) in input[run].iter_mut().zip(&grads[cols]) {
                *d = d.add(wv.mul(g));
            }
        }
    }

    /// Adds one column row into one input row (the reverse of `gather`).
    pub(super) fn scatter_add<T: Element>(&self, col: &[T], input: &mut [T]) {
        if self.x0 == self.x1 {
            return;
        }
        let from = self.first_input();
        let col = &col[self.x0..self.x1];
        if self.stride == 1 {
            for (d, &v) in input[from..from + col.len()].iter_mut().zip(col) {
                *d = d.add(v);
            }
        } else {
            for (k, &v) in col.iter().enumerate() {
                let d = &mut input[from + k * self.stride];
                *d = d.add(v);
            }
        }
    }
}

/// Lays each row of `plane` (`w` columns) out in `out` with its columns grouped by phase under
/// horizontal stride `s`: columns 0, s, 2s, .. first, then 1, s + 1, .., and so on. A tap
/// reads the columns `x * s + offset`, all of one phase, so there they are one contiguous run
/// (`Tap::run`).
pub(super) fn by_phase<T: Copy>(plane: &[T], w: usize, s: usize, out: &mut [T]) {
    for (row, out) in plane
        .chunks_exact(w.max(1))
        .zip(out.chunks_exact_mut(w.max(1)))
    {
        if s == 2 {
            // The usual stride, split in one pass, which vectorizes (as shuffles of whole
            // vectors); a pass per phase reads every other element, which does not.
            let (even, odd) = out.split_at_mut(w.div_ceil(2));
            for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
                (*e, *o) = (pair[0], pair[1]);
            }
            if w % 2 == 1 {
                even[w / 2] = row[w - 1];
            }
            continue;
        }
        let mut out = &mut out[..];
        for r in 0..s.min(w) {
            let (phase, rest) = out.split_at_mut((w - r).div_ceil(s));
            for (k, o) in phase.iter_mut().enumerate() {
                *o = row[r + k * s];
            }
            out = rest;
        }
    }
}

/// The reverse of [`by_phase`]: writes the rows of `phased` back into `plane` in column order.
pub(super) fn from_phase<T: Copy>(phased: &[T], w: usize, s: usize, plane: &mut [T]) {
    for (row, phased) in plane
        .chunks_exact_mut(w.max(1))
        .zip(phased.chunks_exact(w.max(1)))
    {
        if s == 2 {
            // In one pass, as `by_phase` splits it.
            let (even, odd) = phased.split_at(w.div_ceil(2));
            for ((&e, &o), pair) in even.iter().zip(odd).zip(row.chunks_exact_mut(2)) {
                (pair[0], pair[1]) = (e, o);
            }
            if w % 2 == 1 {
                row[w - 1] = even[w / 2];
            }
            continue;
        }
        let mut phased = phased;
        for r in 0..s.min(w) {
            let (phase, rest) = phased.split_at((w - r).div_ceil(s));
            for (k, &v) in phase.iter().enumerate() {
                row[r + k * s] = v;
            }
            phased = rest;
        }
    }
}

pub(super) fn conv_kernel(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    res: &mut KernelRes,
) -> KResult {
    let op = def.name;
    conv_then(op, attrs, ins, outs, None, res).map(|_| ())
}

/// The convolution (with its bias) into `outs[0]`, then, with `norm`, the normalization (and
/// ReLU) on each element as the GEMM finishes its tile ([`crate::gemm::Epilogue`]), where the
/// float32 GEMM paths run. True when `norm` was applied; false when the caller must still
/// normalize the output (no `norm`, or a path without the epilogue). The bias goes through
/// the epilogue too where it can, instead of a pass of its own over the output.
pub(super) fn conv_then(
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
    if winograd || super::implicit_conv::applies(&c, o.dtype) {
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
                false => super::implicit_conv::forward(&c, &dims, io, &epilogue, res)?,
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

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        alias_safe: false,
        resources: &[Resource::TempSpace],
        infer_partial: Some(super::partial_shapes::convolution),
        gradient: Some(grad::convolution),
        ..OpDef::new("Convolution", Arity::AtLeast(2), infer_conv, conv_kernel)
    }
    .cost(Flops::Window, 1.0)
    .on_gpu(gpu::conv::convolution)];
    OPS
}
