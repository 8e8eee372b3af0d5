//! stack: arrays of one shape joined along a new axis.

use super::params::{op_params, Params};
use super::partial_shapes::{inputs, merge, Found, Known};
use super::{norm_axes, same_dtypes, same_shapes, Arity, Attrs, OpDef};
use crate::error::Result;
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::DType;

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

/// stack: every input is the output without the new axis.
fn partial_stack(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let mut one = ins.iter().fold(None, merge);
    if let Some(Some(y)) = outs.first() {
        if !y.is_empty() {
            let axis = stack_axis(op, attrs, y.len())?;
            let mut x = y.clone();
            x.remove(axis);
            one = merge(one, &Some(x));
        }
    }
    inputs(vec![one; ins.len()])
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        alias_safe: false,
        ..OpDef::new("stack", Arity::AtLeast(1), infer_stack, stack_kernel)
    }
    .partial(partial_stack)
    .grad(grad::stack)
    .on_gpu(gpu::shape::stack)];
    OPS
}
