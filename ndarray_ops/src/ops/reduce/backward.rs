//! `_broadcast_backward`, the backward op of sum and mean: it spreads a reduced gradient back
//! over the input's shape.

use crate::ops::gpu;
use crate::ops::par::Walk;
use crate::ops::Call;
use crate::ops::{check_against_forward, named_forward, Arity, Attrs, OpDef};
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

/// `(ograd of sum or mean, input) -> input gradient`; the attributes are the reduction's.
fn infer_reduce_backward(op: &str, attrs: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    let forward = named_forward(op, attrs, "__reduce__", None, &["sum", "mean"])?;
    check_against_forward(op, forward, attrs, (&s[1..], &d[1..]), &[(0, &s[0], d[0])])?;
    Ok((vec![s[1].clone()], vec![d[0]]))
}

fn reduce_backward_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (g, o) = (&ins[0], &outs[0]);
    let shape = &o.shape;
    let axes = crate::ops::reduce::axes_of(op, attrs, shape.len()).map_err(|e| e.to_string())?;
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let scale = if attrs.get("__reduce__") == Some(crate::ops::reduce::Reduce::Mean.name()) {
        1.0 / count.max(1) as f64
    } else {
        1.0
    };
    // The reduced gradient laid out with kept dims (reduced axes have size 1) broadcasts along
    // the reduced axes.
    let kept: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(d, &n)| if axes.contains(&d) { 1 } else { n })
        .collect();
    let gstride = crate::ops::elemwise::broadcast_strides(&kept, shape);
    crate::with_dtype!(o.dtype, T => {
        // SAFETY: read access to the gradient, exclusive access to the disjoint output.
        let (gs, out) = unsafe { (g.slice::<T>(), o.slice_mut::<T>()) };
        Walk::new(shape, &gstride, &gstride).each(0, out.len(), |k, src, _| {
            out[k] = T::from_f64(gs[src].to_f64() * scale);
        });
    });
    Ok(())
}

pub(crate) fn backward_ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        alias_safe: false,
        ..OpDef::new(
            "_broadcast_backward",
            Arity::Exactly(2),
            infer_reduce_backward,
            reduce_backward_kernel,
        )
    }
    .on_gpu(gpu::reduce::broadcast_backward)];
    OPS
}
