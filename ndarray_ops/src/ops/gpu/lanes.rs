//! Ops over lanes on the GPU: the lane softmax (its launches, which the softmax family's entries
//! in `ops/softmax/gpu.rs`, SoftmaxActivation and softmax_cross_entropy run), and the
//! normalizations over groups of elements (LayerNorm, InstanceNorm, GroupNorm, L2Normalization). Each runs one
//! thread per lane where the lanes alone fill a GPU; otherwise each lane is split into parts
//! (`*_parts`), the parts joined per lane (`*_join`) and then one thread per element (`*_each`)
//! writes the result from its lane's figures, so that a few long lanes (a classifier's classes
//! over a small batch, an InstanceNorm's images) do not run on a few threads.

use super::args::{int, kernel_args, ptr, Dim, Kernel};
use super::nn::around;
use super::ops::e2s;
use super::reduce::{channel_sum, lane_parts};
use super::Stream;
use crate::ops::Call;
use crate::ops::KResult;
use crate::ops::TensorRef;

kernel_args! {
    /// softmax (or log_softmax, or their gradient) along lanes of an (outer, len, inner)
    /// layout.
    struct Softmax [softmax_lanes, softmax_lanes_bwd, softmax_parts, softmax_join, softmax_each] {
        /// Threads: lanes, (lane, part)s or elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data, or (backward) the output's gradient.
        x: *mut f32,
        /// The output (backward).
        y: *mut f32,
        /// Two doubles per (lane, part).
        partials: *mut f64,
        /// Two doubles per lane: its maximum and its sum of exponentials (backward: its sum).
        figures: *mut f64,
        /// Elements per lane.
        len: i64,
        /// Elements after the lanes' axis.
        inner: Dim,
        /// 1: log_softmax.
        log: i64,
        /// Parts per lane.
        parts: i64,
        /// 1: the gradient.
        backward: i64,
        /// The temperature.
        temp: f32,
    }

    /// The normalizations over groups of `len` elements `inner` apart, and their gradients.
    struct Norm [norm_fwd, norm_bwd, norm_parts, norm_join, norm_each] {
        /// Threads: groups, (group, part)s or elements.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The data, or (backward) the output's gradient.
        x: *mut f32,
        /// The data (backward; L2Normalization: the output).
        data: *mut f32,
        /// gamma.
        gamma: *mut f32,
        /// beta (forward).
        beta: *mut f32,
        /// Each group's mean (L2Normalization forward: its norm), out forward, in backward.
        mean: *mut f32,
        /// Each group's deviation (L2Normalization backward: its norm).
        std: *mut f32,
        /// The output's gradient times the normalized data (backward; null: not wanted).
        terms: *mut f32,
        /// Two doubles per (group, part).
        partials: *mut f64,
        /// Two doubles per group.
        figures: *mut f64,
        /// Elements per group.
        len: Dim,
        /// The elements' stride within a group.
        inner: Dim,
        /// 0: gamma and beta by position in the group; else by the group's outer index modulo
        /// this.
        per: i64,
        /// 1: L2Normalization.
        l2: i64,
        /// Parts per group.
        parts: i64,
        /// 1: the gradient.
        backward: i64,
        /// Added under the square root.
        eps: f32,
    }
}

/// What [`over_lanes`] sets in an op's arguments.
trait LaneArgs: Copy {
    /// The threads of the next launch.
    fn threads(&mut self, n: usize);
    /// The split: `parts` per lane, their sums at `partials`, the lanes' figures at `figures`.
    fn split(&mut self, partials: *mut f64, figures: *mut f64, parts: usize, backward: bool);
}

/// Both structs name the fields [`over_lanes`] sets alike.
macro_rules! lane_args {
    ($($t:ty),*) => {$(
        impl LaneArgs for $t {
            fn threads(&mut self, n: usize) {
                self.n = int(n);
            }
            fn split(&mut self, partials: *mut f64, figures: *mut f64, parts: usize, backward: bool) {
                (self.partials, self.figures) = (partials, figures);
                (self.parts, self.backward) = (int(parts), i64::from(backward));
            }
        }
    )*};
}
lane_args!(Softmax, Norm);

/// The kernels of an op over lanes: one thread per lane (forward, backward), or the split's
/// three steps.
struct LaneKernels<A> {
    whole: [Kernel<A>; 2],
    parts: Kernel<A>,
    join: Kernel<A>,
    each: Kernel<A>,
}

const SOFTMAX: LaneKernels<Softmax> = LaneKernels {
    whole: [k::softmax_lanes, k::softmax_lanes_bwd],
    parts: k::softmax_parts,
    join: k::softmax_join,
    each: k::softmax_each,
};

const NORM: LaneKernels<Norm> = LaneKernels {
    whole: [k::norm_fwd, k::norm_bwd],
    parts: k::norm_parts,
    join: k::norm_join,
    each: k::norm_each,
};

/// Runs an op over `count` lanes of `len` elements with its arguments `a` (`backward`: its
/// gradient): one thread per lane where the lanes alone fill a GPU, else each lane split into
/// parts ([`lane_figures`]) and then one thread per element (`each`, from the figures).
fn over_lanes<A: LaneArgs>(
    s: &dyn Stream,
    mut a: A,
    (count, len): (usize, usize),
    backward: bool,
    k: &LaneKernels<A>,
) -> KResult {
    let split = lane_parts(count, len);
    if split == 1 {
        a.threads(count);
        return s.run(k.whole[usize::from(backward)], count, &a);
    }
    let _ = lane_figures(s, &mut a, (count, split), backward, [k.parts, k.join])?;
    let n = count * len;
    a.threads(n);
    s.run(k.each, n, &a)
}

/// Each of `count` lanes' two figures (doubles, in device scratch) found in `split` parts per
/// lane: `kernels[0]`, one thread per (lane, part), writes two doubles per part; `kernels[1]`,
/// one thread per lane, joins them into the figures. Leaves both set in `a`; returns the
/// figures.
fn lane_figures<A: LaneArgs>(
    s: &dyn Stream,
    a: &mut A,
    (count, split): (usize, usize),
    backward: bool,
    kernels: [Kernel<A>; 2],
) -> Result<*mut f64, String> {
    let partials = s.scratch(count * split * 16)?.cast::<f64>();
    let figures = s.scratch(count * 16)?.cast::<f64>();
    a.split(partials, figures, split, backward);
    a.threads(count * split);
    s.run(kernels[0], count * split, a)?;
    a.threads(count);
    s.run(kernels[1], count, a)?;
    Ok(figures)
}

/// The lanes along `axis` of `shape` and the softmax kernels' arguments for them (the arrays
/// left to [`Lanes::on`]).
pub(crate) fn lane_args(shape: &[usize], axis: usize, temp: f64, log: bool) -> Lanes {
    let (outer, len, inner) = around(shape, axis);
    let count = outer * inner;
    let args = Softmax {
        n: int(count),
        out: std::ptr::null_mut(),
        x: std::ptr::null_mut(),
        y: std::ptr::null_mut(),
        partials: std::ptr::null_mut(),
        figures: std::ptr::null_mut(),
        len: int(len),
        inner: Dim::new(inner),
        log: i64::from(log),
        parts: 1,
        backward: 0,
        temp: temp as f32,
    };
    Lanes { count, len, args }
}

/// Lanes a softmax normalizes, and the kernels' arguments.
pub(crate) struct Lanes {
    count: usize,
    len: usize,
    args: Softmax,
}

impl Lanes {
    /// Sets the arrays: `out`, then the data (backward: the output's gradient, then the output).
    pub(crate) fn on(mut self, ts: &[&TensorRef]) -> Lanes {
        let a = &mut self.args;
        for (slot, t) in [&mut a.out, &mut a.x, &mut a.y].into_iter().zip(ts) {
            *slot = ptr(t);
        }
        self
    }

    /// Runs the softmax (or, `backward`, its gradient) over the lanes ([`over_lanes`]).
    pub(crate) fn run(self, s: &dyn Stream, backward: bool) -> KResult {
        over_lanes(s, self.args, (self.count, self.len), backward, &SOFTMAX)
    }

    /// Each lane's figures in device scratch (doubles, two per lane: its maximum and its sum
    /// of exponentials), found in `split` parts per lane.
    pub(super) fn figures(&self, s: &dyn Stream, split: usize) -> Result<*mut f64, String> {
        let kernels = [SOFTMAX.parts, SOFTMAX.join];
        let mut a = self.args;
        lane_figures(s, &mut a, (self.count, split), false, kernels)
    }
}

/// SoftmaxActivation (a softmax over the last axis, as MXNet's `instance` mode flattens the
/// data to 2-D keeping it, or over the channels at each position) and its backward op, as
/// softmax lanes.
pub(crate) fn softmax_activation(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let x = &ins[0];
    use crate::ops::params::{Params, SoftmaxActivationParams, SoftmaxMode};
    let shape = match SoftmaxActivationParams::get(op, attrs).map_err(e2s)?.mode {
        SoftmaxMode::Channel => x.shape.to_vec(),
        SoftmaxMode::Instance => {
            let last = x.shape.last().copied().unwrap_or(1);
            vec![x.len() / last.max(1), last]
        }
    };
    let ts: Vec<&TensorRef> = outs.iter().take(1).chain(ins).collect();
    lane_args(&shape, 1, 1.0, false)
        .on(&ts)
        .run(s, op.starts_with("_backward_"))
}

/// LayerNorm, InstanceNorm, GroupNorm and L2Normalization, and their backward ops over
/// `ops::norm`'s groups of elements as lanes ([`over_lanes`]: a few long groups, such as an
/// InstanceNorm's images or a LayerNorm over a small batch, split into parts); gamma's and
/// beta's gradients are per-channel sums over the grouping's layout.
pub(crate) fn normalization(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    use crate::ops::Scale;
    let backward = op.starts_with("_backward_");
    let data = &ins[usize::from(backward)];
    let (groups, scale, _, _) = crate::ops::norm_layout(op, attrs, &data.shape).map_err(e2s)?;
    let l2 = crate::ops::norm::member(def)? == crate::ops::norm::Norm::L2;
    let (per, layout) = match scale {
        Scale::ByPosition => (0, (groups.outer, groups.len, groups.inner)),
        // InstanceNorm and GroupNorm: groups are whole (sample, channel or group) runs.
        Scale::ByGroup(m) if groups.inner == 1 => (m, (groups.outer / m, m, groups.len)),
        Scale::ByGroup(_) => return Err(format!("{op}: groups with inner strides")),
    };
    let null = std::ptr::null_mut;
    let mut a = Norm {
        n: int(groups.count()),
        out: ptr(&outs[0]),
        x: ptr(&ins[0]),
        data: null(),
        gamma: null(),
        beta: null(),
        mean: null(),
        std: null(),
        terms: null(),
        partials: std::ptr::null_mut(),
        figures: std::ptr::null_mut(),
        len: Dim::new(groups.len),
        inner: Dim::new(groups.inner),
        per: int(per),
        l2: i64::from(l2),
        parts: 1,
        backward: 0,
        eps: 0.0,
    };
    let lanes = (groups.count(), groups.len);
    if !backward {
        a.mean = ptr(&outs[1]);
        a.eps = crate::ops::norm_eps(op, attrs).map_err(e2s)? as f32;
        if !l2 {
            (a.gamma, a.beta, a.std) = (ptr(&ins[1]), ptr(&ins[2]), ptr(&outs[2]));
        }
        return over_lanes(s, a, lanes, false, &NORM);
    }
    // (ograd, out, norm) for L2Normalization, else (ograd, data, gamma, mean, std).
    a.data = ptr(data);
    if l2 {
        a.std = ptr(&ins[2]);
        return over_lanes(s, a, lanes, true, &NORM);
    }
    // beta's gradient first: the data's gradient may be written over the output's.
    channel_sum(s, outs[2].ptr(), ins[0].ptr(), layout, 1.0)?;
    let scaled = s.scratch(data.buf.bytes)?.cast::<f32>();
    (a.gamma, a.mean, a.std) = (ptr(&ins[2]), ptr(&ins[3]), ptr(&ins[4]));
    a.terms = scaled;
    over_lanes(s, a, lanes, true, &NORM)?;
    channel_sum(s, outs[1].ptr(), scaled, layout, 1.0)
}
