//! The rest of the MXNet ops the model zoo uses: LeakyReLU (leaky, elu, selu, gelu, prelu), stack,
//! `_zeros`/`_ones`/`_arange` and `where`.

use super::par::{for_ranges, Shared};
use super::params::{attr_enum, op_params, Params, PositiveInt};
use super::{
    norm_axes, same_dtypes, same_shapes, Arity, Attrs, OpDef, Outputs, TensorRef, MAX_ELEMENTS,
};
use crate::error::{invalid, shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

// ---- LeakyReLU -------------------------------------------------------------------------------

/// SELU's constants (Klambauer et al.), in double; MXNet's are rounded to float.
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_LAMBDA: f64 = 1.050_700_987_355_480_5;

attr_enum! {
    /// LeakyReLU's function (MXNet's `rrelu` is not supported).
    pub enum LeakyType {
        /// `x` above 0, `slope * x` below.
        Leaky = "leaky",
        /// `x` above 0, `slope * (exp(x) - 1)` below.
        Elu = "elu",
        /// The self-normalizing ELU.
        Selu = "selu",
        /// `x * Phi(x)`.
        Gelu = "gelu",
        /// Leaky with a learnt slope per channel (`gamma`).
        Prelu = "prelu",
    }
}

op_params! {
    /// LeakyReLU's attributes.
    pub struct LeakyReLUParams for "LeakyReLU" {
        act_type: LeakyType,
        slope: f32,
        lower_bound: f32,
        upper_bound: f32,
    }
}

/// LeakyReLU's activation. `prelu` learns its slope per channel (input `gamma`); MXNet's
/// `rrelu`, with random slopes, is refused.
#[derive(Clone, Copy)]
pub(crate) enum LeakyAct {
    Leaky(f64),
    Elu(f64),
    Selu,
    /// The exact form, `x * Phi(x)`, as MXNet computes it.
    Gelu,
    Prelu,
}

impl LeakyAct {
    pub(crate) fn of(op: &str, attrs: &Attrs) -> Result<LeakyAct> {
        let a = LeakyReLUParams::get(op, attrs)?;
        let slope = f64::from(a.slope);
        Ok(match a.act_type {
            LeakyType::Leaky => LeakyAct::Leaky(slope),
            LeakyType::Elu => LeakyAct::Elu(slope),
            LeakyType::Selu => LeakyAct::Selu,
            LeakyType::Gelu => LeakyAct::Gelu,
            LeakyType::Prelu => LeakyAct::Prelu,
        })
    }

    /// The output at `x`, `gamma` being prelu's slope there.
    fn apply(self, x: f64, gamma: f64) -> f64 {
        match self {
            LeakyAct::Gelu => 0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)),
            LeakyAct::Selu if x > 0.0 => SELU_LAMBDA * x,
            LeakyAct::Selu => SELU_LAMBDA * SELU_ALPHA * x.exp_m1(),
            _ if x > 0.0 => x,
            LeakyAct::Leaky(slope) => slope * x,
            LeakyAct::Elu(slope) => slope * x.exp_m1(),
            LeakyAct::Prelu => gamma * x,
        }
    }

    /// The derivative at `x`.
    fn derivative(self, x: f64, gamma: f64) -> f64 {
        match self {
            LeakyAct::Gelu => {
                let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
                0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)) + x * pdf
            }
            LeakyAct::Selu if x > 0.0 => SELU_LAMBDA,
            _ if x > 0.0 => 1.0,
            LeakyAct::Leaky(slope) => slope,
            LeakyAct::Elu(slope) => slope * x.exp(),
            LeakyAct::Selu => SELU_LAMBDA * SELU_ALPHA * x.exp(),
            LeakyAct::Prelu => gamma,
        }
    }
}

/// Where prelu's slope for each element of `data` sits in `gamma`: one per channel (axis 1),
/// one for all, or one per element.
#[derive(Clone, Copy)]
struct GammaIndex {
    len: usize,
    channels: usize,
    inner: usize,
}

impl GammaIndex {
    fn new(data: &[usize], gamma_len: usize) -> GammaIndex {
        GammaIndex {
            len: gamma_len,
            channels: data.get(1).copied().unwrap_or(1),
            inner: data.iter().skip(2).product(),
        }
    }

    fn of(self, i: usize) -> usize {
        match self.len {
            1 => 0,
            n if n == self.channels => (i / self.inner) % n,
            _ => i,
        }
    }
}

fn infer_leaky(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let want = match LeakyAct::of(op, attrs)? {
        LeakyAct::Prelu => 2,
        _ => 1,
    };
    if s.len() != want {
        return Err(invalid(
            op,
            format!(
                "act_type {:?} takes {want} input(s) (data{}), got {}",
                LeakyReLUParams::get(op, attrs)?.act_type.word(),
                if want == 2 { ", gamma" } else { "" },
                s.len()
            ),
        ));
    }
    if want == 2 {
        let c = s[0].get(1).copied().unwrap_or(1);
        let n: usize = s[1].iter().product();
        if !(n == 1 || (s[1].len() == 1 && n == c) || s[1] == s[0]) {
            return Err(shape_error(
                op,
                "gamma",
                s[1].clone(),
                format!(
                    "[{c}] (the channels of data {:?}), [1] or data's shape",
                    s[0]
                ),
            ));
        }
    }
    Ok((vec![s[0].clone()], vec![same_dtypes(op, d)?]))
}

fn leaky_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let kind = LeakyAct::of(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (x, y) = (ins[0].ptr::<T>(), outs[0].ptr::<T>());
        let gamma = ins.get(1).map(|g| (g.ptr::<T>(), GammaIndex::new(&ins[0].shape, g.len())));
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths, gamma indexed inside its length; raw pointers tolerate the
            // output being exactly the input.
            unsafe {
                let g = gamma.map_or(0.0, |(p, at)| (*p.add(at.of(i))).to_f64());
                *y.add(i) = T::from_f64(kind.apply((*x.add(i)).to_f64(), g));
            }
        }
    });
    Ok(())
}

/// `_backward_LeakyReLU(ograd, data[, gamma])`: the gradients of data and, for prelu, gamma.
/// `(ograd, data[, gamma])`, prelu's gamma as the forward op had it.
fn infer_leaky_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    LeakyAct::of(op, attrs)?;
    let dt = same_dtypes(op, d)?;
    super::check_against_forward(
        op,
        "LeakyReLU",
        attrs,
        (&s[1..], &d[1..]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((s[1..].to_vec(), vec![dt; s.len() - 1]))
}

fn leaky_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let kind = LeakyAct::of(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        let (g, x, dx) = (ins[0].ptr::<T>(), ins[1].ptr::<T>(), outs[0].ptr::<T>());
        let gamma = ins.get(2).map(|t| (t.ptr::<T>(), GammaIndex::new(&ins[1].shape, t.len())));
        let mut dgamma = vec![0.0; ins.get(2).map_or(0, |t| t.len())];
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths, gamma indexed inside its length; dx may be exactly ograd,
            // whose element is read before it is written.
            unsafe {
                let (gi, xi) = ((*g.add(i)).to_f64(), (*x.add(i)).to_f64());
                let slope = gamma.map_or(0.0, |(p, at)| (*p.add(at.of(i))).to_f64());
                if let Some((_, at)) = gamma {
                    if xi <= 0.0 {
                        dgamma[at.of(i)] += gi * xi;
                    }
                }
                *dx.add(i) = T::from_f64(gi * kind.derivative(xi, slope));
            }
        }
        if let Some(out) = outs.get(1) {
            // SAFETY: exclusive access to gamma's gradient.
            for (o, v) in unsafe { out.slice_mut::<T>() }.iter_mut().zip(&dgamma) {
                *o = T::from_f64(*v);
            }
        }
    });
    Ok(())
}

// ---- stack -----------------------------------------------------------------------------------

op_params! {
    /// stack's attributes.
    pub struct StackParams for "stack" { axis: i64, num_args: Option<usize> }
}

/// stack's new axis in an output of `ndim` dims (negative from the end).
pub(crate) fn stack_axis(op: &str, attrs: &Attrs, ndim: usize) -> Result<usize> {
    Ok(norm_axes(op, &[StackParams::get(op, attrs)?.axis], ndim)?[0])
}

fn infer_stack(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let dt = same_dtypes(op, d)?;
    same_shapes(op, s)?;
    let axis = stack_axis(op, attrs, s[0].len() + 1)?;
    let mut out = s[0].clone();
    out.insert(axis, s.len());
    Ok((vec![out], vec![dt]))
}

fn stack_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let o = &outs[0];
    let axis = stack_axis(op, attrs, o.shape.len()).map_err(|e| e.to_string())?;
    let es = o.dtype.size();
    let outer: usize = o.shape[..axis].iter().product();
    let inner: usize = o.shape[axis + 1..].iter().product::<usize>() * es;
    for (k, t) in ins.iter().enumerate() {
        for r in 0..outer {
            // SAFETY: block r of input k lies in the input; its slot in the output lies in the
            // output; inputs overlapping the output were copied first.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    t.buf.ptr.add(r * inner),
                    o.buf.ptr.add((r * ins.len() + k) * inner),
                    inner,
                )
            };
        }
    }
    Ok(())
}

// ---- _zeros, _ones ----------------------------------------------------------------------------

fn infer_fill(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let shape = attrs
        .ints(op, "shape")?
        .ok_or_else(|| invalid(op, "attribute shape is required"))?;
    // -1, as 0, is a dimension left unknown, which a graph's inference fills from what the
    // output meets (MXNet takes both).
    if shape.iter().any(|&d| d < -1) {
        return Err(invalid(op, format!("shape {shape:?} has a negative size")));
    }
    let dt = attrs.dtype(op)?;
    Ok((
        vec![shape.iter().map(|&d| d.max(0) as usize).collect()],
        vec![dt],
    ))
}

/// `_zeros`, `_ones`, and `zeros_like`/`ones_like` (whose input only gives the shape).
pub(super) fn fill_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, _, _, outs) = call.parts();
    let op = def.name;
    let v = if matches!(op, "_ones" | "ones_like") {
        1.0
    } else {
        0.0
    };
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output.
        unsafe { outs[0].slice_mut::<T>() }.fill(T::from_f64(v));
    });
    Ok(())
}

// ---- _arange -----------------------------------------------------------------------------------

op_params! {
    /// arange's attributes (`dtype` is read by the generic dtype rule).
    pub struct ArangeParams for "_arange" {
        start: f64,
        stop: Option<f64>,
        step: f64,
        repeat: PositiveInt,
        infer_range: bool,
    }
}

/// `_arange`'s values: `start, start + step, ...` below `stop` (or `0..start` without one),
/// each `repeat` times.
pub(crate) fn arange_params(op: &str, attrs: &Attrs) -> Result<(f64, f64, usize, usize)> {
    let a = ArangeParams::get(op, attrs)?;
    let (step, repeat) = (a.step, a.repeat.0);
    let (start, stop) = match a.stop {
        None => (0.0, a.start),
        Some(stop) => (a.start, stop),
    };
    if step == 0.0 || ![start, stop, step].iter().all(|v| v.is_finite()) {
        return Err(invalid(
            op,
            format!("start={start}, stop={stop} and step={step} must be finite, step nonzero"),
        ));
    }
    if a.infer_range {
        return Err(invalid(op, "infer_range is not supported: give stop"));
    }
    let count = ((stop - start) / step).ceil().max(0.0);
    if count * repeat as f64 > MAX_ELEMENTS as f64 {
        return Err(invalid(
            op,
            format!("{count} values, each {repeat} times, are more than 2^48 elements"),
        ));
    }
    Ok((start, step, count as usize, repeat))
}

fn infer_arange(op: &str, attrs: &Attrs, _s: &[Vec<usize>], _d: &[DType]) -> Infer {
    let (_, _, count, repeat) = arange_params(op, attrs)?;
    let dt = attrs.dtype(op)?;
    Ok((vec![vec![count * repeat]], vec![dt]))
}

fn arange_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, _, outs) = call.parts();
    let op = def.name;
    let (start, step, _, repeat) = arange_params(op, attrs).map_err(|e| e.to_string())?;
    crate::with_dtype!(outs[0].dtype, T => {
        // SAFETY: exclusive access to the output.
        for (k, v) in unsafe { outs[0].slice_mut::<T>() }.iter_mut().enumerate() {
            *v = T::from_f64(start + step * (k / repeat) as f64);
        }
    });
    Ok(())
}

// ---- where(condition, x, y) ---------------------------------------------------------------------

fn infer_where(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[1] != s[2] || d[1] != d[2] {
        return Err(shape_error(
            op,
            "y",
            s[2].clone(),
            format!("shape {:?} and dtype {} like x", s[1], d[1]),
        ));
    }
    let ok = s[0] == s[1] || (s[0].len() == 1 && s[1].first() == s[0].first());
    if !ok {
        return Err(shape_error(
            op,
            "condition",
            s[0].clone(),
            format!("{:?}, or a vector over its first axis", s[1]),
        ));
    }
    Ok((vec![s[1].clone()], vec![d[1]]))
}

/// `out = condition ? x : y` element by element, or row by row where the condition is a vector
/// over the first axis (each row then one copy). The condition is read a chunk at a time into
/// a mask, so the selecting loop is the same for every condition dtype; chunks split across
/// threads.
fn where_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    const CHUNK: usize = 4096;
    let (c, o) = (&ins[0], &outs[0]);
    let row = if c.len() == o.len() {
        1
    } else {
        o.len() / c.len().max(1)
    };
    crate::with_dtype!(o.dtype, T => {
        let (x, y, out) = (
            Shared::new(ins[1].ptr::<T>()),
            Shared::new(ins[2].ptr::<T>()),
            Shared::new(o.ptr::<T>()),
        );
        for_ranges(c.len().div_ceil(CHUNK), CHUNK * row, |lo, hi| {
            let mut mask = [false; CHUNK];
            for chunk in lo..hi {
                let start = chunk * CHUNK;
                let mask = &mut mask[..CHUNK.min(c.len() - start)];
                truths(c, start, mask);
                // SAFETY: condition element `k` governs output elements `k * row..(k + 1) *
                // row` (inside the output, whose shape x and y share), which this chunk alone
                // writes; the output is disjoint from x and y or exactly one of them, which
                // `select` is told of and `copy` allows.
                unsafe {
                    if row == 1 {
                        select(mask, (x.get().add(start), y.get().add(start)), out.get().add(start));
                    } else {
                        for (k, &m) in (start..).zip(mask.iter()) {
                            let from = if m { x } else { y };
                            std::ptr::copy(from.get().add(k * row), out.get().add(k * row), row);
                        }
                    }
                }
            }
        });
    });
    Ok(())
}

/// `out[k] = if mask[k] { x[k] } else { y[k] }` for `mask.len()` elements, as a select on
/// slices (both sides loaded, which the compiler may only do through references, so that the
/// loop vectorizes); where the output is exactly x or y, that side is the output itself.
///
/// # Safety
/// All three point to `mask.len()` elements; the output is disjoint from x and y or equal to
/// one (or both) of them; nothing else touches them meanwhile.
unsafe fn select<T: Copy>(mask: &[bool], (x, y): (*const T, *const T), out: *mut T) {
    let n = mask.len();
    // SAFETY: per the contract; where the output is one of the inputs, that input is read
    // through the output's one mutable slice.
    let out_slice = unsafe { std::slice::from_raw_parts_mut(out, n) };
    // An input other than the output, as a slice (disjoint from the output's, per the contract).
    let side = |p: *const T| {
        // SAFETY: per the contract.
        (p != out.cast_const()).then(|| unsafe { std::slice::from_raw_parts(p, n) })
    };
    match (side(x), side(y)) {
        (Some(x), Some(y)) => {
            for (o, ((&m, &a), &b)) in out_slice.iter_mut().zip(mask.iter().zip(x).zip(y)) {
                *o = if m { a } else { b };
            }
        }
        (None, Some(y)) => {
            for (o, (&m, &b)) in out_slice.iter_mut().zip(mask.iter().zip(y)) {
                *o = if m { *o } else { b };
            }
        }
        (Some(x), None) => {
            for (o, (&m, &a)) in out_slice.iter_mut().zip(mask.iter().zip(x)) {
                *o = if m { a } else { *o };
            }
        }
        (None, None) => {}
    }
}

/// Whether each of the condition's elements from `start` on is nonzero, into `mask`.
fn truths(c: &TensorRef, start: usize, mask: &mut [bool]) {
    crate::with_dtype!(c.dtype, C => {
        // SAFETY: read access to the condition.
        let c = unsafe { c.slice::<C>() };
        for (m, v) in mask.iter_mut().zip(&c[start..]) {
            *m = v.to_f64() != 0.0;
        }
    });
}

/// LeakyReLU's gradients: the data's, and with `prelu` gamma's.
fn leaky_grad_outputs(op: &str, attrs: &Attrs) -> Result<(usize, usize)> {
    let n = match LeakyReLUParams::get(op, attrs)?.act_type {
        LeakyType::Prelu => 2,
        _ => 1,
    };
    Ok((n, n))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            infer_partial: Some(super::partial_shapes::prelu),
            gradient: Some(grad::leaky_relu),
            inplace: &[(0, 0)],
            ..OpDef::new("LeakyReLU", Arity::AtLeast(1), infer_leaky, leaky_kernel)
        }
        .on_gpu(gpu::elemwise::leaky_relu),
        OpDef {
            inplace: &[(0, 0)],
            ..OpDef::new(
                "_backward_LeakyReLU",
                Arity::AtLeast(2),
                infer_leaky_backward,
                leaky_backward_kernel,
            )
        }
        .outputs(Outputs::By(leaky_grad_outputs))
        .on_gpu(gpu::elemwise::leaky_relu),
        OpDef {
            alias_safe: false,
            ..OpDef::new("stack", Arity::AtLeast(1), infer_stack, stack_kernel)
        }
        .partial(super::partial_shapes::stack)
        .grad(grad::stack)
        .on_gpu(gpu::shape::stack),
        OpDef {
            aliases: &["zeros"],
            alias_safe: false,
            ..OpDef::new("_zeros", Arity::Exactly(0), infer_fill, fill_kernel)
        }
        .on_gpu(gpu::ops::fill),
        OpDef {
            aliases: &["ones"],
            alias_safe: false,
            ..OpDef::new("_ones", Arity::Exactly(0), infer_fill, fill_kernel)
        }
        .on_gpu(gpu::ops::fill),
        OpDef {
            aliases: &["arange"],
            alias_safe: false,
            ..OpDef::new("_arange", Arity::Exactly(0), infer_arange, arange_kernel)
        }
        .on_gpu(gpu::indexing::arange),
        OpDef {
            inplace: &[(1, 0), (2, 0)],
            ..OpDef::new("where", Arity::Exactly(3), infer_where, where_kernel)
        }
        .grad(grad::where_)
        .on_gpu(gpu::elemwise::select),
    ];
    OPS
}

#[cfg(test)]
mod tests {
    use super::select;

    /// `select` out of place, into x, into y and with x, y and the output one array: what a
    /// plain loop picks (under Miri too, where writing through the output while an input
    /// aliases it would be caught).
    #[test]
    fn select_picks_per_mask_whichever_array_it_writes_into() {
        let mask: Vec<bool> = (0..37).map(|i| i % 3 == 0).collect();
        let x: Vec<i32> = (0..37).collect();
        let y: Vec<i32> = (0..37).map(|i| -i).collect();
        let want: Vec<i32> = (0..37).map(|i| if mask[i] { x[i] } else { y[i] }).collect();
        let mut out = vec![0; 37];
        // SAFETY: three distinct arrays of the mask's length.
        unsafe { select(&mask, (x.as_ptr(), y.as_ptr()), out.as_mut_ptr()) };
        assert_eq!(out, want);
        let (mut into_x, mut into_y) = (x.clone(), y.clone());
        let p = into_x.as_mut_ptr();
        // SAFETY: the output is exactly x; y is distinct.
        unsafe { select(&mask, (p, y.as_ptr()), p) };
        assert_eq!(into_x, want);
        let p = into_y.as_mut_ptr();
        // SAFETY: the output is exactly y; x is distinct.
        unsafe { select(&mask, (x.as_ptr(), p), p) };
        assert_eq!(into_y, want);
        let mut same = x.clone();
        let p = same.as_mut_ptr();
        // SAFETY: x, y and the output are one array.
        unsafe { select(&mask, (p, p), p) };
        assert_eq!(same, x);
    }
}
