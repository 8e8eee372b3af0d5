//! The fused RNN's CPU kernels: the forward pass (keeping its trace for a bound node's backward
//! pass), and the backward pass (reading the kept trace, or running the forward pass again).

use super::*;
use crate::ops::Call;

/// Runs `$body` with `$t` the float type of `$dtype` (inference refuses other dtypes).
macro_rules! with_float {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            other => return Err(format!("RNN: dtype {other} is not float32 or float64")),
        }
    };
}

/// Carves one scratch block into buffers of the given lengths. Their contents are
/// unspecified (what the last op left): the kernels write every element before they read it.
pub(super) fn carve<'a, T: Element>(
    res: &mut KernelRes,
    lens: &[usize],
) -> std::result::Result<Vec<&'a mut [T]>, String> {
    let total: usize = lens.iter().sum();
    let ptr = res
        .temp_written(total.max(1) * std::mem::size_of::<T>())?
        .cast::<T>();
    // SAFETY: the temp block holds `total` elements of `T` (asked above; the pool aligns to 64
    // bytes), every byte of it written (so each element is some valid float), and the engine
    // gives this op alone the temp space until it ends.
    let all = unsafe { std::slice::from_raw_parts_mut(ptr, total) };
    let mut rest = all;
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        let (a, b) = rest.split_at_mut(n);
        out.push(a);
        rest = b;
    }
    Ok(out)
}

/// Reads the sequence lengths (an integer in 0..=T per sample), or all T.
pub(super) fn lengths(
    r: &Rnn,
    ins: &[TensorRef],
    steps: usize,
    batch: usize,
) -> std::result::Result<Vec<usize>, String> {
    if !r.seq_len {
        return Ok(vec![steps; batch]);
    }
    let t = &ins[r.inputs() - 1];
    // SAFETY: read access to the lengths input, `batch` elements (checked at inference).
    sequence_lengths(unsafe { t.to_f64s() }, steps)
}

/// The lengths input's values checked (each an integer in 0..=`steps`), as step counts.
pub(crate) fn sequence_lengths(
    vals: impl IntoIterator<Item = f64>,
    steps: usize,
) -> std::result::Result<Vec<usize>, String> {
    vals.into_iter()
        .enumerate()
        .map(|(n, v)| {
            if v.fract() != 0.0 || !(0.0..=steps as f64).contains(&v) {
                Err(format!(
                    "RNN: sequence_length[{n}] = {v} is not an integer in 0..={steps} (the \
                     sequence length)"
                ))
            } else {
                Ok(v as usize)
            }
        })
        .collect()
}

/// The forward op's inputs as both kernels read them: the sequence, the initial states, and the
/// pass over them with its parameters and sequence lengths.
pub(super) struct Forward<'a, T> {
    pub(super) pass: Pass<'a, T>,
    pub(super) xs: &'a [T],
    pub(super) h0: &'a [T],
    /// LSTM's initial cell (empty otherwise).
    pub(super) c0: &'a [T],
}

impl<'a, T: Real> Forward<'a, T> {
    /// # Safety
    /// The caller has read access to `ins` (the forward op's inputs, in order, of dtype `T`)
    /// for `'a`.
    unsafe fn read(r: Rnn, ins: &'a [TensorRef], lens: Vec<usize>) -> Self {
        let x = &ins[0];
        // SAFETY: the caller's read access.
        let (xs, params, h0) =
            unsafe { (x.slice::<T>(), ins[1].slice::<T>(), ins[2].slice::<T>()) };
        let c0: &[T] = if r.lstm() {
            // SAFETY: as above; an LSTM's fourth input is its cell.
            unsafe { ins[3].slice::<T>() }
        } else {
            &[]
        };
        Forward {
            pass: Pass::new(r, &x.shape, params, Some(lens)),
            xs,
            h0,
            c0,
        }
    }
}

/// What a bound node keeps between its kernels' runs.
pub(super) struct NodeState<T> {
    /// The last training pass's trace, for the backward node (a paired state's only).
    kept: Option<Kept<T>>,
    /// The weights packed by earlier passes over the same parameters.
    packs: Packs,
}

impl<T: Real> NodeState<T> {
    /// The node's state in `slot`, made empty where the slot holds none of this dtype.
    fn of(slot: &mut StateSlot) -> &mut Self {
        if !slot.as_ref().is_some_and(|b| b.is::<NodeState<T>>()) {
            *slot = Some(Box::new(NodeState::<T> {
                kept: None,
                packs: Packs::default(),
            }));
        }
        match slot.as_mut().and_then(|b| b.downcast_mut::<NodeState<T>>()) {
            Some(s) => s,
            None => unreachable!("the slot was just filled with this type"),
        }
    }
}

/// What a training forward pass keeps for the backward pass: every layer's output and every
/// (layer, direction)'s trace, for data of one shape.
pub(super) struct Kept<T> {
    /// Steps, batch and input width of the data the trace is for.
    pub(super) data: [usize; 3],
    /// Whether the last forward pass left its trace here (one outside training does not).
    pub(super) valid: bool,
    /// `(L, T, N, D*H)`.
    pub(super) ys: Vec<T>,
    /// `(L*D)` traces of `Pass::trace_len` elements.
    pub(super) traces: Vec<T>,
    /// With dropout, the masks of the layers' outputs but the top one's, `(L-1, T, N, D*H)`
    /// (each element 0 or `1 / (1 - p)`); empty without.
    pub(super) masks: Vec<T>,
}

impl<T: Real> Kept<T> {
    /// The record for `pass` on `data`, made (or remade, for another shape) with room for it.
    pub(super) fn for_pass<'s>(
        kept: &'s mut Option<Kept<T>>,
        pass: &Pass<'_, T>,
        data: &[usize],
    ) -> &'s mut Self {
        let data = [data[0], data[1], data[2]];
        if kept.as_ref().is_none_or(|k| k.data != data) {
            let r = pass.r;
            *kept = Some(Kept {
                data,
                valid: false,
                ys: vec![T::default(); r.layers * pass.layer_len()],
                traces: vec![T::default(); r.layers * r.dirs * pass.trace_len()],
                masks: Vec::new(),
            });
        }
        match kept {
            Some(k) => k,
            None => unreachable!("the record was just made"),
        }
    }

    /// The trace the last forward pass kept for data of this shape, if it kept one.
    pub(super) fn valid<'s>(slot: Option<&'s StateSlot>, data: &[usize]) -> Option<&'s Self> {
        slot?
            .as_ref()?
            .downcast_ref::<NodeState<T>>()?
            .kept
            .as_ref()
            .filter(|k| k.valid && k.data[..] == data[..3])
    }
}

pub(super) fn rnn_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    strassen_setting()?;
    let x = &ins[0];
    let lens = lengths(&r, ins, x.shape[0], x.shape[1])?;
    with_float!(x.dtype, T => {
        // SAFETY: read access to the inputs, write access to the outputs, which the engine
        // keeps apart from the inputs (the op is not alias-safe).
        let Forward { pass, xs, h0, c0 } = unsafe { Forward::<T>::read(r, ins, lens) };
        let state = r.layers * r.dirs * pass.batch * r.hidden;
        // SAFETY: the op's own output, apart from its inputs.
        let out = unsafe { outs[0].slice_mut::<T>() };
        // A bound node in training keeps every layer's output and trace for its backward node;
        // otherwise one trace serves every layer, and only the layers below the top need room.
        // A bound node keeps its packed weights while its parameters (input 1) are unchanged.
        let stamp = res.input_stamp(1);
        let (kept, packs) = match res.state.take().map(NodeState::<T>::of) {
            Some(NodeState { kept, packs }) => {
                let kept = match r.train && res.paired {
                    true => Some(Kept::for_pass(kept, &pass, &x.shape)),
                    false => {
                        if let Some(k) = kept {
                            k.valid = false;
                        }
                        None
                    }
                };
                (kept, stamp.map(|s| packs.at(s)))
            }
            None => (None, None),
        };
        let pass = match packs {
            Some(p) => pass.with_packs(p),
            None => pass,
        };
        let ll = pass.layer_len();
        let (mid_len, trace_len) = match kept {
            Some(_) => (0, 0),
            None => ((r.layers - 1) * ll, pass.scratch_traces()),
        };
        // Intermediate layers' outputs, the trace, the steps' scratch, the final states
        // when the op does not output them, and with dropout room for one layer: its mask
        // without a kept trace, the next layer's input with one.
        let dropped_len = if r.drops() { ll } else { 0 };
        let mut b = carve::<T>(res, &[mid_len, trace_len, pass.step_scratch(), state, state, dropped_len])?.into_iter();
        let mut next = || b.next().unwrap_or_default();
        let (mid, trace, hp, hy_unused, cy_unused) = (next(), next(), next(), next(), next());
        let dropped = next();
        // SAFETY: the op's own outputs, apart from its inputs and from each other.
        let hy: &mut [T] = if r.outputs() > 1 { unsafe { outs[1].slice_mut::<T>() } } else { hy_unused };
        // SAFETY: as for `hy`.
        let cy: &mut [T] = if r.outputs() > 2 { unsafe { outs[2].slice_mut::<T>() } } else { cy_unused };
        let tl = pass.trace_len() * r.dirs;
        // Dropout draws from the device's generator, one number per unit, in the same order
        // on both paths (the Dropout op's mask rule).
        let mut rng = match r.drops() {
            true => Some(res.rng()?),
            false => None,
        };
        match kept {
            Some(k) => {
                // Each layer's output is kept as it was made; what the next layer reads is
                // that times its mask, kept too.
                k.masks.resize(if r.drops() { (r.layers - 1) * ll } else { 0 }, T::default());
                match rng.as_deref_mut() {
                    None => {
                        let (mid, top) = k.ys.split_at_mut((r.layers - 1) * ll);
                        let ys = (mid, &mut top[..ll]);
                        pass.forward_layers(xs, ys, &mut k.traces, (h0, c0), (hy, cy), hp, true)?;
                    }
                    Some(rng) => {
                        for l in 0..r.layers {
                            let here = &mut k.ys[l * ll..];
                            let input: &[T] = if l == 0 { xs } else { dropped };
                            let traces = &mut k.traces[l * tl..(l + 1) * tl];
                            pass.forward_layer(l, input, &mut here[..ll], traces, h0, c0, hy, cy, hp, true)?;
                            if l + 1 < r.layers {
                                let mask = &mut k.masks[l * ll..(l + 1) * ll];
                                dropout_mask(rng, r.p, mask);
                                for ((o, &y), &m) in dropped.iter_mut().zip(&here[..ll]).zip(&*mask) {
                                    *o = y * m;
                                }
                            }
                        }
                    }
                }
                out.copy_from_slice(&k.ys[(r.layers - 1) * ll..]);
                k.valid = true;
            }
            None if rng.is_none() => {
                pass.forward_layers(xs, (mid, out), trace, (h0, c0), (hy, cy), hp, false)?;
            }
            None => {
                for l in 0..r.layers {
                    let (below, here) = mid.split_at_mut(l.min(r.layers - 1) * ll);
                    let input: &[T] = if l == 0 { xs } else { &below[(l - 1) * ll..] };
                    let top = l + 1 == r.layers;
                    let output: &mut [T] = if top { &mut *out } else { &mut here[..ll] };
                    pass.forward_layer(l, input, output, trace, h0, c0, hy, cy, hp, false)?;
                    if let Some(rng) = rng.as_deref_mut().filter(|_| !top) {
                        dropout_mask(rng, r.p, dropped);
                        for (y, &m) in output.iter_mut().zip(&*dropped) {
                            *y *= m;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// Why a backward pass with dropout between layers cannot run without the forward node's state.
pub(crate) fn masks_lost(op: &str, r: &Rnn) -> String {
    format!(
        "{op}: p={} drops units between layers in training, and the masks are kept only by a \
         bound RNN node for its own backward node (bind the graph; an imperative backward call \
         cannot know them)",
        r.p
    )
}

pub(super) fn rnn_backward_kernel(call: Call, res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let r = Rnn::parse(op, attrs).map_err(|e| e.to_string())?;
    strassen_setting()?;
    let heads = r.outputs();
    let fwd = &ins[heads..];
    let x = &fwd[0];
    let lens = lengths(&r, fwd, x.shape[0], x.shape[1])?;
    with_float!(x.dtype, T => {
        // SAFETY: read access to the inputs, write access to the outputs (not alias-safe: the
        // engine keeps them apart).
        let f = unsafe { Forward::<T>::read(r, fwd, lens) };
        // SAFETY: the output gradients, read only.
        let dout = unsafe { ins[0].slice::<T>() };
        // SAFETY: as for `dout`.
        let dhy: &[T] = if heads > 1 { unsafe { ins[1].slice::<T>() } } else { &[] };
        // SAFETY: as for `dout`.
        let dcy: &[T] = if heads > 2 { unsafe { ins[2].slice::<T>() } } else { &[] };
        // SAFETY: the op's own outputs, apart from its inputs and from each other.
        let (dx, dparams, dh0) = unsafe { (outs[0].slice_mut::<T>(), outs[1].slice_mut::<T>(), outs[2].slice_mut::<T>()) };
        // SAFETY: as for `dx`.
        let dc0: &mut [T] = if r.lstm() { unsafe { outs[3].slice_mut::<T>() } } else { &mut [] };
        let state = res.state.take();
        // Without the forward node's state the masks it drew are lost: the gradient of the
        // network without dropout would be silently wrong.
        if state.is_none() && r.drops() {
            return Err(masks_lost(op, &r));
        }
        let kept = Kept::<T>::valid(state.as_deref(), &x.shape);
        backward(&f, dout, dhy, dcy, dx, dparams, dh0, dc0, kept, res)?;
    });
    Ok(())
}

/// The backward pass: the layers from the top down, reading every layer's output and every
/// trace from what the forward pass kept, or else from the forward pass run again here.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward<T: Real>(
    f: &Forward<'_, T>,
    dout: &[T],
    dhy: &[T],
    dcy: &[T],
    dx: &mut [T],
    dparams: &mut [T],
    dh0: &mut [T],
    dc0: &mut [T],
    kept: Option<&Kept<T>>,
    res: &mut KernelRes,
) -> KResult {
    let Forward { pass, xs, h0, c0 } = f;
    let r = pass.r;
    let (h, gh, nb, steps) = (r.hidden, r.gh(), pass.batch, pass.steps);
    let (ll, tl, rows) = (pass.layer_len(), pass.trace_len(), steps * nb);
    let state = r.layers * r.dirs * nb * h;
    let want_dx = res.wanted(0);
    // Room to run the forward pass again only without a kept trace.
    let again = usize::from(kept.is_none());
    let mut b = carve::<T>(
        res,
        &[
            again * r.layers * ll,          // every layer's output
            again * r.layers * r.dirs * tl, // every trace
            // The forward pass's steps' scratch; the steps backward's state gradient through
            // the hidden projection, and its bypass.
            pass.step_scratch().max(2 * nb * h),
            again * state, // final states (not needed)
            again * if r.lstm() { state } else { 0 },
            2 * ll,    // the gradient of a layer's output, and of the one below
            rows * gh, // input projection gradients
            // Hidden projection gradients, apart from the input projection's only in GRU.
            if r.mode == Mode::Gru { rows * gh } else { 0 },
            rows * h,                          // the states the steps started from
            nb * h,                            // the carried state gradient
            if r.lstm() { nb * h } else { 0 }, // LSTM's carried cell gradient
            // With dropout, the layer's input as it read it (the output below times its mask).
            if kept.is_some_and(|k| !k.masks.is_empty()) {
                ll
            } else {
                0
            },
        ],
    )?
    .into_iter();
    let mut next = || b.next().unwrap_or_default();
    let (ys, traces, hp, hy, cy) = (next(), next(), next(), next(), next());
    let (dys, dgx, dgh, hprev, dhbuf, dcbuf) = (next(), next(), next(), next(), next(), next());
    let dropped = next();
    let masks: &[T] = kept.map_or(&[], |k| &k.masks);
    let (ys, traces): (&[T], &[T]) = match kept {
        Some(k) => (&k.ys, &k.traces),
        None => {
            let (mid, top) = ys.split_at_mut((r.layers - 1) * ll);
            let ys_out = (mid, &mut top[..ll]);
            pass.forward_layers(xs, ys_out, traces, (h0, c0), (hy, cy), hp, true)?;
            (ys, traces)
        }
    };
    dparams.fill(T::default());
    let (dy_a, dy_b) = dys.split_at_mut(ll);
    for l in (0..r.layers).rev() {
        // The gradient of this layer's output, and where the one below's goes.
        let (dy, dbelow): (&[T], &mut [T]) = match r.layers - 1 - l {
            0 => (dout, &mut *dy_a),
            i if i % 2 == 1 => (&*dy_a, &mut *dy_b),
            _ => (&*dy_b, &mut *dy_a),
        };
        let input: &[T] = match l {
            0 => xs,
            _ if masks.is_empty() => &ys[(l - 1) * ll..l * ll],
            _ => {
                let (y, m) = (&ys[(l - 1) * ll..l * ll], &masks[(l - 1) * ll..l * ll]);
                for ((o, &y), &m) in dropped.iter_mut().zip(y).zip(m) {
                    *o = y * m;
                }
                &*dropped
            }
        };
        let y = &ys[l * ll..(l + 1) * ll];
        for d in 0..r.dirs {
            let s = pass.slot(l, d);
            let k = l * r.dirs + d;
            let tr = &traces[k * tl..(k + 1) * tl];
            let st = k * nb * h..(k + 1) * nb * h;
            let dh = &mut dhbuf[..nb * h];
            match dhy.is_empty() {
                true => dh.fill(T::default()),
                false => dh.copy_from_slice(&dhy[st.clone()]),
            }
            let dc = &mut dcbuf[..];
            if r.lstm() && !dcy.is_empty() {
                dc.copy_from_slice(&dcy[st.clone()]);
            } else {
                dc.fill(T::default());
            }
            pass.backward_steps(
                (l, d),
                (y, dy),
                tr,
                (h0, c0),
                (&mut *dh, &mut *dc),
                (&mut *dgx, &mut *dgh, &mut *hprev),
                &mut hp[..2 * nb * h],
            );
            dh0[st.clone()].copy_from_slice(dh);
            // Weight and bias gradients over every step at once, and the input's gradient.
            let gx_all = mat(dgx, rows, gh);
            let gh_all = mat(if dgh.is_empty() { &*dgx } else { &*dgh }, rows, gh);
            let (wx_at, wh_at) = (s.wx, s.wh);
            T::gemm(
                &gx_all.t(),
                &mat(input, rows, s.input),
                &mut mat_mut(&mut dparams[wx_at..], gh, s.input),
            );
            T::gemm(
                &gh_all.t(),
                &mat(hprev, rows, h),
                &mut mat_mut(&mut dparams[wh_at..], gh, h),
            );
            sum_rows(dgx, &mut dparams[s.bx..s.bx + gh]);
            match dgh.is_empty() {
                true => dparams.copy_within(s.bx..s.bx + gh, s.bh),
                false => sum_rows(dgh, &mut dparams[s.bh..s.bh + gh]),
            }
            // The input's gradient, unless it is the data's and nothing reads it (a bound
            // graph asking no gradient of its data: a third of the bottom layer's GEMMs).
            if l > 0 || want_dx {
                let wx = mat(&pass.params[s.wx..], gh, s.input);
                let target: &mut [T] = if l == 0 { &mut *dx } else { &mut dbelow[..] };
                let mut dxv = mat_mut(target, rows, s.input);
                if d == 0 {
                    T::gemm(&gx_all, &wx, &mut dxv);
                } else {
                    T::gemm_add(&gx_all, &wx, &mut dxv);
                }
            }
            if r.lstm() {
                dc0[st.clone()].copy_from_slice(dc);
            }
        }
        // What reached the layer below went through its mask.
        if l > 0 && !masks.is_empty() {
            for (g, &m) in dbelow.iter_mut().zip(&masks[(l - 1) * ll..l * ll]) {
                *g = *g * m;
            }
        }
    }
    Ok(())
}
