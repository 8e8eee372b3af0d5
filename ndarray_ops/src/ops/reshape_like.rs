//! reshape_like: the first array's elements in the second's shape.

use super::{Arity, Attrs, OpDef};
use crate::error::shape_error;
use crate::ops::gpu;
use crate::ops::Infer;
use crate::DType;

fn infer_reshape_like(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[0].iter().product::<usize>() != s[1].iter().product::<usize>() {
        return Err(shape_error(
            op,
            "rhs",
            s[1].clone(),
            format!("as many elements as lhs {:?}", s[0]),
        ));
    }
    Ok((vec![s[1].clone()], vec![d[0]]))
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        identity: true,
        backward_ignores: &[1],
        inplace: &[(0, 0)],
        ..OpDef::new(
            "reshape_like",
            Arity::Exactly(2),
            infer_reshape_like,
            super::copy_kernel,
        )
    }
    .on_gpu(gpu::ops::copy)];
    OPS
}
