//! Ops that read one element per lane, or a constant, where which element depends on data:
//! pick, SequenceMask, SequenceLast and SequenceReverse; and depth_to_space/space_to_depth,
//! which list each output element's source.

use super::params::{attr_enum, op_params, Params, PositiveInt};
use super::{norm_axes, Arity, Attrs, OpDef, TensorRef};
use crate::error::{invalid, shape_error, NdError, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

// ---- pick(data, index): one element per lane along an axis ------------------------------------

attr_enum! {
    /// What pick does with an index outside the axis.
    pub enum PickMode {
        /// Clamps it to the axis.
        Clip = "clip",
        /// Wraps it around.
        Wrap = "wrap",
    }
}

op_params! {
    /// pick's attributes.
    pub struct PickParams for "pick" {
        axis: Option<i64>,
        keepdims: bool,
        mode: PickMode,
    }
}

/// pick's axis, whether it keeps it, and its layout: (outer, lanes, inner) around the axis.
pub(crate) fn pick_layout(
    op: &str,
    attrs: &Attrs,
    x: &[usize],
) -> Result<(usize, bool, [usize; 3])> {
    let p = PickParams::get(op, attrs)?;
    let a = norm_axes(op, &[p.axis.unwrap_or(-1)], x.len())?[0];
    let keep = p.keepdims;
    let dims = [x[..a].iter().product(), x[a], x[a + 1..].iter().product()];
    Ok((a, keep, dims))
}

/// The lane index picked: `mode=clip` clamps, `wrap` wraps around.
pub(super) fn pick_index(v: f64, lanes: usize, wrap: bool) -> usize {
    let n = lanes.max(1) as i64;
    let i = v as i64;
    if wrap {
        i.rem_euclid(n) as usize
    } else {
        i.clamp(0, n - 1) as usize
    }
}

/// Whether pick wraps its indices around (or clamps them).
pub(crate) fn pick_wrap(op: &str, attrs: &Attrs) -> Result<bool> {
    Ok(PickParams::get(op, attrs)?.mode == PickMode::Wrap)
}

pub(super) fn infer_pick(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    pick_wrap(op, attrs)?;
    let (a, keep, _) = pick_layout(op, attrs, &s[0])?;
    let mut out = s[0].clone();
    out.remove(a);
    let mut kept = s[0].clone();
    kept[a] = 1;
    if s[1] != out && s[1] != kept {
        return Err(shape_error(
            op,
            "index",
            &s[1],
            format!("{out:?} (data {:?} without axis {a})", s[0]),
        ));
    }
    Ok((vec![if keep { kept } else { out }], vec![d[0]]))
}

/// For each output element of pick, the offset in data of the element it picks.
pub(super) fn pick_sources(
    op: &str,
    attrs: &Attrs,
    index: &TensorRef,
    data: &[usize],
) -> std::result::Result<Vec<usize>, String> {
    let e = |e: NdError| e.to_string();
    let (_, _, [_, lanes, inner]) = pick_layout(op, attrs, data).map_err(e)?;
    let wrap = pick_wrap(op, attrs).map_err(e)?;
    let inner = inner.max(1);
    if lanes == 0 && index.len() > 0 {
        return Err(format!("{op}: cannot pick from an empty axis"));
    }
    Ok(crate::with_dtype!(index.dtype, I => {
        // SAFETY: read access to the index.
        unsafe { index.slice::<I>() }
            .iter()
            .enumerate()
            .map(|(k, v)| ((k / inner) * lanes + pick_index(v.to_f64(), lanes, wrap)) * inner + k % inner)
            .collect()
    }))
}

pub(super) fn pick_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let sources = pick_sources(op, attrs, &ins[1], &ins[0].shape)?;
    read_from(&ins[0], &outs[0], &sources);
    Ok(())
}

/// `_backward_pick(ograd, index, data)`: each output gradient element into the element picked.
pub(super) fn infer_pick_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = (&[s[2].clone(), s[1].clone()][..], &[d[2], d[1]][..]);
    super::check_against_forward(op, "pick", attrs, fwd, &[(0, &s[0], d[0])])?;
    Ok((vec![s[2].clone()], vec![d[0]]))
}

pub(super) fn pick_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let sources = pick_sources(op, attrs, &ins[1], &outs[0].shape)?;
    scatter(&ins[0], &outs[0], &sources);
    Ok(())
}

/// `y[k] = x[sources[k]]`.
pub(super) fn read_from(x: &TensorRef, y: &TensorRef, sources: &[usize]) {
    crate::with_dtype!(y.dtype, T => {
        // SAFETY: read access to the data, exclusive access to the output (not alias-safe).
        let (x, y) = unsafe { (x.slice::<T>(), y.slice_mut::<T>()) };
        for (y, &j) in y.iter_mut().zip(sources) {
            *y = x[j];
        }
    });
}

/// `dx[sources[k]] = g[k]`, every other element of `dx` zero: the gradient of reading
/// `x[sources[k]]` into element `k` (sources distinct).
pub(super) fn scatter(g: &TensorRef, dx: &TensorRef, sources: &[usize]) {
    crate::with_dtype!(dx.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to d data (not alias-safe).
        let (g, dx) = unsafe { (g.slice::<T>(), dx.slice_mut::<T>()) };
        dx.fill(T::default());
        for (g, &j) in g.iter().zip(sources) {
            dx[j] = *g;
        }
    });
}

// ---- SequenceMask(data[, sequence_length]) ------------------------------------------------------

op_params! {
    /// The attributes of the sequence ops.
    pub struct SequenceParams for "SequenceMask", "SequenceLast", "SequenceReverse" {
        use_sequence_length: bool,
        axis: i64,
    }
}

op_params! {
    /// SequenceMask's value for the masked steps.
    pub struct SequenceMaskParams for "SequenceMask" {
        value: f32,
    }
}

/// Whether a sequence op uses its lengths, its time axis (0 or 1), and the value SequenceMask
/// writes.
pub(crate) fn mask_params(op: &str, attrs: &Attrs) -> Result<(bool, usize, f64)> {
    let a = SequenceParams::get(op, attrs)?;
    if a.axis != 0 && a.axis != 1 {
        return Err(invalid(op, format!("axis={} is not 0 or 1", a.axis)));
    }
    let value = match op.ends_with("SequenceMask") {
        true => f64::from(SequenceMaskParams::get(op, attrs)?.value),
        false => 0.0,
    };
    Ok((a.use_sequence_length, a.axis as usize, value))
}

pub(super) fn infer_sequence_mask(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let (use_len, axis, _) = mask_params(op, attrs)?;
    let x = &s[0];
    if x.len() < 2 {
        return Err(shape_error(
            op,
            "data",
            x,
            "at least 2 dimensions (time and batch)",
        ));
    }
    if s.len() != 1 + use_len as usize {
        return Err(invalid(
            op,
            format!(
                "takes {} input(s) with use_sequence_length={use_len}, got {}",
                1 + use_len as usize,
                s.len()
            ),
        ));
    }
    let batch = x[1 - axis];
    if use_len && s[1] != [batch] {
        return Err(shape_error(
            op,
            "sequence_length",
            &s[1],
            format!("[{batch}] (data's batch)"),
        ));
    }
    Ok((vec![x.clone()], vec![d[0]]))
}

/// For each element of data shaped `x`, whether it lies past its sequence's length.
pub(super) fn masked<'a>(
    axis: usize,
    x: &'a [usize],
    lengths: &'a [usize],
) -> impl Fn(usize) -> bool + 'a {
    let inner: usize = x[2..].iter().product();
    let (steps, batch) = if axis == 0 {
        (x[0], x[1])
    } else {
        (x[1], x[0])
    };
    move |i: usize| {
        let (a, b) = ((i / inner) / x[1], (i / inner) % x[1]);
        let (t, n) = if axis == 0 { (a, b) } else { (b, a) };
        debug_assert!(t < steps && n < batch);
        t >= lengths[n]
    }
}

pub(super) fn lengths_of(t: Option<&TensorRef>, x: &[usize], axis: usize) -> Vec<usize> {
    let steps = if axis == 0 { x[0] } else { x[1] };
    match t {
        None => vec![steps; x[1 - axis]],
        Some(t) => crate::with_dtype!(t.dtype, L => {
            // SAFETY: read access to the lengths.
            unsafe { t.slice::<L>() }.iter().map(|v| v.to_f64().max(0.0) as usize).collect()
        }),
    }
}

fn sequence_mask_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    mask(call, true)
}

/// `_backward_SequenceMask(ograd[, sequence_length])` masks the gradient with zeros.
fn sequence_mask_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    mask(call, false)
}

/// The steps past each sequence's length set to the attributes' value (`valued`) or to zero.
fn mask(call: Call, valued: bool) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (_, axis, value) = mask_params(def.name, attrs).map_err(|e| e.to_string())?;
    let value = if valued { value } else { 0.0 };
    let x = &ins[0];
    let lengths = lengths_of(ins.get(1), &x.shape, axis);
    let past = masked(axis, &x.shape, &lengths);
    crate::with_dtype!(outs[0].dtype, T => {
        let (src, dst) = (x.ptr::<T>(), outs[0].ptr::<T>());
        for i in 0..outs[0].len() {
            // SAFETY: equal lengths; raw pointers tolerate the output being exactly the data.
            unsafe { *dst.add(i) = if past(i) { T::from_f64(value) } else { *src.add(i) } };
        }
    });
    Ok(())
}

/// `(ograd[, sequence_length])`: SequenceMask of the gradient, so its inputs are SequenceMask's.
pub(super) fn infer_sequence_mask_backward(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    super::check_against_forward(op, "SequenceMask", attrs, (s, d), &[])?;
    Ok((vec![s[0].clone()], vec![d[0]]))
}

// ---- SequenceLast, SequenceReverse -------------------------------------------------------------

/// Data shaped `(steps, batch, inner...)` (axis 0) or `(batch, steps, inner...)` (axis 1): the
/// element of step `t` of sequence `n` at inner position `i`.
#[derive(Clone, Copy)]
pub(super) struct Steps {
    axis: usize,
    steps: usize,
    batch: usize,
    inner: usize,
}

impl Steps {
    fn of(axis: usize, x: &[usize]) -> Steps {
        let (steps, batch) = if axis == 0 {
            (x[0], x[1])
        } else {
            (x[1], x[0])
        };
        Steps {
            axis,
            steps,
            batch,
            inner: x[2..].iter().product(),
        }
    }

    fn at(self, t: usize, n: usize, i: usize) -> usize {
        let outer = if self.axis == 0 {
            t * self.batch + n
        } else {
            n * self.steps + t
        };
        outer * self.inner + i
    }
}

pub(super) fn infer_sequence_last(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    infer_sequence_mask(op, attrs, s, d)?;
    let (_, axis, _) = mask_params(op, attrs)?;
    let mut out = s[0].clone();
    out.remove(axis);
    if s[0][axis] == 0 && out.iter().product::<usize>() > 0 {
        return Err(shape_error(
            op,
            "data",
            &s[0],
            "at least one step to take the last of",
        ));
    }
    Ok((vec![out], vec![d[0]]))
}

pub(super) fn infer_sequence_reverse(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    if mask_params(op, attrs)?.1 != 0 {
        return Err(invalid(
            op,
            "only axis 0 (time first) is supported, as in MXNet",
        ));
    }
    infer_sequence_mask(op, attrs, s, d)
}

/// For each output element, the data element it reads: SequenceLast the last step of its
/// sequence (the first when a length is 0), SequenceReverse the mirror step within its length.
/// What SequenceLast and SequenceReverse read: each sequence's last step, or its steps up to
/// its length in reverse order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reorder {
    Last,
    Reverse,
}

fn sequence_sources(r: Reorder, st: Steps, lengths: &[usize]) -> Vec<usize> {
    let len = |n: usize| lengths[n].min(st.steps);
    if r == Reorder::Last {
        let mut v = Vec::with_capacity(st.batch * st.inner);
        for n in 0..st.batch {
            for i in 0..st.inner {
                v.push(st.at(len(n).max(1) - 1, n, i));
            }
        }
        return v;
    }
    let mut v = vec![0; st.steps * st.batch * st.inner];
    for t in 0..st.steps {
        for n in 0..st.batch {
            let from = if t < len(n) { len(n) - 1 - t } else { t };
            for i in 0..st.inner {
                v[st.at(t, n, i)] = st.at(from, n, i);
            }
        }
    }
    v
}

fn sequence_last_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    reorder(call, Reorder::Last)
}

fn sequence_reverse_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    reorder(call, Reorder::Reverse)
}

/// SequenceLast or SequenceReverse of the data: a read of the steps `r` names.
fn reorder(call: Call, r: Reorder) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let (_, axis, _) = mask_params(def.name, attrs).map_err(|e| e.to_string())?;
    let x = &ins[0];
    let lengths = lengths_of(ins.get(1), &x.shape, axis);
    let sources = sequence_sources(r, Steps::of(axis, &x.shape), &lengths);
    read_from(x, &outs[0], &sources);
    Ok(())
}

/// `_backward_SequenceLast(ograd, data[, sequence_length])`: each sequence's gradient at its
/// last step, zero elsewhere.
/// `(ograd, data[, sequence_length])`.
pub(super) fn infer_sequence_last_backward(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Infer {
    super::check_against_forward(
        op,
        "SequenceLast",
        attrs,
        (&s[1..], &d[1..]),
        &[(0, &s[0], d[0])],
    )?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

pub(super) fn sequence_last_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (_, axis, _) = mask_params(op, attrs).map_err(|e| e.to_string())?;
    let shape = &outs[0].shape;
    let lengths = lengths_of(ins.get(2), shape, axis);
    let sources = sequence_sources(Reorder::Last, Steps::of(axis, shape), &lengths);
    scatter(&ins[0], &outs[0], &sources);
    Ok(())
}

// ---- depth_to_space, space_to_depth -------------------------------------------------------------

op_params! {
    /// The attributes of depth_to_space and space_to_depth.
    pub struct BlockParams for "depth_to_space", "space_to_depth" {
        block_size: PositiveInt,
    }
}

/// The side of depth_to_space's and space_to_depth's blocks.
pub(crate) fn block_size(op: &str, attrs: &Attrs) -> Result<usize> {
    Ok(BlockParams::get(op, attrs)?.block_size.0)
}

/// `depth_to_space` moves blocks of `b * b` channels into `b x b` pixel blocks, `(n, c, h, w)
/// -> (n, c / b², h b, w b)`; `space_to_depth` undoes it.
fn infer_depth_to_space(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    infer_depth_space(op, attrs, s, d, true)
}

fn infer_space_to_depth(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    infer_depth_space(op, attrs, s, d, false)
}

/// Either op's output shape: `to_space` for depth_to_space.
fn infer_depth_space(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
    to_space: bool,
) -> Infer {
    let b = block_size(op, attrs)?;
    let x = &s[0];
    if x.len() != 4 {
        return Err(shape_error(op, "data", x, "(n, c, h, w)"));
    }
    let out = if to_space {
        if !x[1].is_multiple_of(b * b) {
            return Err(shape_error(
                op,
                "data",
                x,
                format!("channels divisible by {}", b * b),
            ));
        }
        vec![x[0], x[1] / (b * b), x[2] * b, x[3] * b]
    } else {
        if !x[2].is_multiple_of(b) || !x[3].is_multiple_of(b) {
            return Err(shape_error(
                op,
                "data",
                x,
                format!("height and width divisible by {b}"),
            ));
        }
        vec![x[0], x[1] * b * b, x[2] / b, x[3] / b]
    };
    Ok((vec![out], vec![d[0]]))
}

/// depth_to_space of a deep array shaped `deep`, as pairs (element of the spread-out array,
/// element of the deep array it holds): `out[n, c, h b + i, w b + j] = x[n, (i b + j) c' + c,
/// h, w]`. space_to_depth is the same pairs read the other way.
pub(super) fn depth_space_pairs(
    b: usize,
    deep: &[usize],
) -> impl Iterator<Item = (usize, usize)> + '_ {
    let (n, c, h, w) = (deep[0], deep[1] / (b * b), deep[2], deep[3]);
    let (hb, wb) = (h * b, w * b);
    (0..n * c * hb * wb).map(move |o| {
        let (x, y, ch, s) = (
            o % wb,
            (o / wb) % hb,
            (o / (wb * hb)) % c,
            o / (wb * hb * c),
        );
        let (i, j) = (y % b, x % b);
        let src = ((s * b * b * c + (i * b + j) * c + ch) * h + y / b) * w + x / b;
        (o, src)
    })
}

fn depth_to_space_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    depth_space(def, attrs, ins, outs, true)
}

fn space_to_depth_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    depth_space(def, attrs, ins, outs, false)
}

/// Either op: `to_space` for depth_to_space.
fn depth_space(
    def: &OpDef,
    attrs: &Attrs,
    ins: &[TensorRef],
    outs: &[TensorRef],
    to_space: bool,
) -> KResult {
    let b = block_size(def.name, attrs).map_err(|e| e.to_string())?;
    // Element `o` of the spread-out (space) array pairs with element `src` of the deep one.
    let deep = if to_space {
        &ins[0].shape
    } else {
        &outs[0].shape
    };
    let mut sources = vec![0; outs[0].len()];
    for (o, src) in depth_space_pairs(b, deep) {
        if to_space {
            sources[o] = src;
        } else {
            sources[src] = o;
        }
    }
    read_from(&ins[0], &outs[0], &sources);
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::pick),
            ..OpDef::new("pick", Arity::Exactly(2), infer_pick, pick_kernel)
        }
        .on_gpu(gpu::indexing::pick),
        OpDef {
            inplace: &[(0, 0)],
            backward_ignores: &[0],
            gradient: Some(grad::sequence_mask),
            ..OpDef::new(
                "SequenceMask",
                Arity::AtLeast(1),
                infer_sequence_mask,
                sequence_mask_kernel,
            )
        }
        .on_gpu(gpu::shape::sequence_mask),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::sequence_last),
            ..OpDef::new(
                "SequenceLast",
                Arity::AtLeast(1),
                infer_sequence_last,
                sequence_last_kernel,
            )
        }
        .on_gpu(gpu::shape::sequence_last),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_SequenceLast",
                Arity::AtLeast(2),
                infer_sequence_last_backward,
                sequence_last_backward_kernel,
            )
        }
        .on_gpu(gpu::shape::sequence_last_backward),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "depth_to_space",
                Arity::Exactly(1),
                infer_depth_to_space,
                depth_to_space_kernel,
            )
        }
        .grad(grad::depth_to_space)
        .on_gpu(gpu::shape::depth_to_space),
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            gradient: Some(grad::space_to_depth),
            ..OpDef::new(
                "space_to_depth",
                Arity::Exactly(1),
                infer_space_to_depth,
                space_to_depth_kernel,
            )
        }
        .on_gpu(gpu::shape::space_to_depth),
        // Its own gradient: reversing twice is the identity.
        OpDef {
            alias_safe: false,
            backward_ignores: &[0],
            ..OpDef::new(
                "SequenceReverse",
                Arity::AtLeast(1),
                infer_sequence_reverse,
                sequence_reverse_kernel,
            )
        }
        .grad(grad::sequence_reverse)
        .on_gpu(gpu::shape::sequence_reverse),
        OpDef {
            inplace: &[(0, 0)],
            ..OpDef::new(
                "_backward_SequenceMask",
                Arity::AtLeast(1),
                infer_sequence_mask_backward,
                sequence_mask_backward_kernel,
            )
        }
        .on_gpu(gpu::shape::sequence_mask_backward),
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_pick",
                Arity::Exactly(3),
                infer_pick_backward,
                pick_backward_kernel,
            )
        }
        .on_gpu(gpu::indexing::pick_backward),
    ];
    OPS
}
