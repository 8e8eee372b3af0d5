//! The shape ops' backward ops: `slice`'s and `Concat`'s (runs of the output gradient copied
//! back into place) and `take`'s (rows scatter-added into the table's gradient).

use super::{check_against_forward, named_forward, Arity, Attrs, OpDef, Outputs};
use crate::ops::gpu;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

// ---- _backward_slice: (ograd, input) -> input grad, zero outside the slice --------------------
// Attributes are the forward op's; `__slice_op__` names it (slice or slice_axis).

fn infer_slice_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let forward = named_forward(
        op,
        attrs,
        "__slice_op__",
        Some("slice"),
        &["slice", "slice_axis"],
    )?;
    check_against_forward(op, forward, attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

fn slice_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, attrs, ins, outs) = call.parts();
    let (g, o) = (&ins[0], &outs[0]);
    let fwd = attrs.get("__slice_op__").unwrap_or("slice");
    let r = super::shape::slice_ranges(fwd, attrs, &o.shape).map_err(|e| e.to_string())?;
    let es = o.dtype.size();
    // SAFETY: exclusive access to the output.
    unsafe { std::ptr::write_bytes(o.buf.ptr, 0, o.buf.bytes) };
    let run = super::shape::slice_run_len(&r) * es;
    super::shape::slice_runs(&r, &o.shape, |offset, k| {
        // SAFETY: every kept position lies inside the input gradient; run k of the output
        // gradient is one run; the two are disjoint.
        unsafe {
            std::ptr::copy_nonoverlapping(g.buf.ptr.add(k * run), o.buf.ptr.add(offset * es), run)
        };
    });
    Ok(())
}

// ---- _backward_Concat: (ograd, inputs...) -> one gradient per input -------------------------

fn infer_concat_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    check_against_forward(op, "Concat", attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((s[1..].to_vec(), d[1..].to_vec()))
}

fn concat_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let g = &ins[0];
    let axis = super::shape::concat_axis(op, attrs, g.shape.len()).map_err(|e| e.to_string())?;
    let es = g.dtype.size();
    let (outer, inner) = super::shape::outer_inner(&g.shape, axis);
    let src_stride = g.shape[axis] * inner * es;
    let mut offset = 0;
    for o in outs {
        let len = o.shape[axis] * inner * es;
        for r in 0..outer {
            // SAFETY: block r of output o lies inside it; its source inside the gradient.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    g.buf.ptr.add(r * src_stride + offset),
                    o.buf.ptr.add(r * len),
                    len,
                )
            };
        }
        offset += len;
    }
    Ok(())
}

pub(super) fn shape_grad_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            ..OpDef::new(
                "_backward_slice",
                Arity::Exactly(2),
                infer_slice_backward,
                slice_backward_kernel,
            )
        }
        .on_gpu(gpu::gather::backward_slice),
        OpDef {
            alias_safe: false,
            // A gradient for each piece Concat joined.
            outputs: Outputs::By(|op, attrs| {
                let n = super::output_count(op, attrs, "num_args")?;
                Ok((n, n))
            }),
            ..OpDef::new(
                "_backward_Concat",
                Arity::AtLeast(2),
                infer_concat_backward,
                concat_backward_kernel,
            )
        }
        .on_gpu(gpu::shape::concat_backward),
    ];
    OPS
}

// ---- _backward_take: (ograd, indices, table) -> table grad (rows scatter-added) --------------

/// `take`'s (and Embedding's: `take` of rows, with take's defaults) backward op.
fn infer_take_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let fwd = (&[s[2].clone(), s[1].clone()][..], &[d[2], d[1]][..]);
    check_against_forward(op, "take", attrs, fwd, &[(0, &s[0], d[0])])?;
    Ok((vec![s[2].clone()], vec![d[0]]))
}

fn take_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, attrs, ins, outs) = call.parts();
    let (g, idx, w) = (&ins[0], &ins[1], &outs[0]);
    let layout = super::shape::take_layout("_backward_take", attrs, &w.shape);
    let (outer, rows, inner) = layout.map_err(|e| e.to_string())?;
    // SAFETY: read access to the indices.
    let indices = unsafe { idx.to_f64s() };
    let mode = super::shape::take_mode("_backward_take", attrs).map_err(|e| e.to_string())?;
    let picked: Vec<usize> = indices
        .iter()
        .map(|&i| super::shape::take_row(mode, i, rows))
        .collect::<std::result::Result<_, _>>()?;
    crate::with_dtype!(w.dtype, T => {
        // SAFETY: read access to the inputs, exclusive access to the disjoint output.
        let (gs, ws) = unsafe { (g.slice::<T>(), w.slice_mut::<T>()) };
        ws.fill(T::default());
        for o in 0..outer {
            for (k, &r) in picked.iter().enumerate() {
                let (dst, src) = ((o * rows + r) * inner, (o * picked.len() + k) * inner);
                for c in 0..inner {
                    ws[dst + c] = ws[dst + c].add(gs[src + c]);
                }
            }
        }
    });
    Ok(())
}

pub(super) fn take_grad_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        alias_safe: false,
        ..OpDef::new(
            "_backward_take",
            Arity::Exactly(3),
            infer_take_backward,
            take_backward_kernel,
        )
    }
    .on_gpu(gpu::indexing::take_backward)];
    OPS
}
