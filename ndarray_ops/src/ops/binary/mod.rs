//! The binary family: arithmetic, comparison and logic of two arrays, broadcasting
//! (`broadcast_add`, ...) or on operands of one shape (`elemwise_add`, `_maximum`, ...). Every
//! member is a [`Binary`]; its CPU kernel, gradient rule and GPU arguments match on it.
//!
//! Files: `mod.rs` the members, inference and op table; `kernel.rs` the CPU kernel; `grad.rs`
//! the gradient rules; `gpu.rs` and `binary.cu` the GPU kernel (whose `apply2` the scalar ops'
//! kernel shares: a scalar op computes its member's function with one operand fixed).

pub(crate) mod gpu;
mod grad;
mod kernel;
mod sum_to_like;
pub(crate) use sum_to_like::backward_ops;

pub(crate) use kernel::{modulo, truth};

use super::elemwise::broadcast_shape;
use super::family::Member;
use super::{same_dtypes, same_shapes, Arity, Attrs, OpDef};
use crate::error::Result;
use crate::DType;

/// The binary family: `broadcast_<op>` broadcasts its operands to one shape; its same-shape twin
/// (`elemwise_add`, `_maximum`, ...) takes operands of one shape and computes the same. Each
/// member's discriminant is its code in the GPU kernels (`BINARY_*` in the device code, written
/// from [`Binary::c_defines`]). Comparisons and logic give 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Power,
    Equal,
    NotEqual,
    Greater,
    GreaterEqual,
    Lesser,
    LesserEqual,
    Hypot,
    Mod,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
}

impl Binary {
    /// Every member, in code order.
    pub(crate) const ALL: [Binary; 18] = [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Maximum,
        Binary::Minimum,
        Binary::Power,
        Binary::Equal,
        Binary::NotEqual,
        Binary::Greater,
        Binary::GreaterEqual,
        Binary::Lesser,
        Binary::LesserEqual,
        Binary::Hypot,
        Binary::Mod,
        Binary::LogicalAnd,
        Binary::LogicalOr,
        Binary::LogicalXor,
    ];

    /// The member's code in the GPU kernels.
    pub(crate) const fn code(self) -> usize {
        self as usize
    }

    /// The name of the member without its prefix (`add`, `greater_equal`).
    pub(crate) const fn stem(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Maximum => "maximum",
            Binary::Minimum => "minimum",
            Binary::Power => "power",
            Binary::Equal => "equal",
            Binary::NotEqual => "not_equal",
            Binary::Greater => "greater",
            Binary::GreaterEqual => "greater_equal",
            Binary::Lesser => "lesser",
            Binary::LesserEqual => "lesser_equal",
            Binary::Hypot => "hypot",
            Binary::Mod => "mod",
            Binary::LogicalAnd => "logical_and",
            Binary::LogicalOr => "logical_or",
            Binary::LogicalXor => "logical_xor",
        }
    }

    /// The broadcasting op's name (MXNet's).
    pub(crate) const fn broadcast_name(self) -> &'static str {
        match self {
            Binary::Add => "broadcast_add",
            Binary::Sub => "broadcast_sub",
            Binary::Mul => "broadcast_mul",
            Binary::Div => "broadcast_div",
            Binary::Maximum => "broadcast_maximum",
            Binary::Minimum => "broadcast_minimum",
            Binary::Power => "broadcast_power",
            Binary::Equal => "broadcast_equal",
            Binary::NotEqual => "broadcast_not_equal",
            Binary::Greater => "broadcast_greater",
            Binary::GreaterEqual => "broadcast_greater_equal",
            Binary::Lesser => "broadcast_lesser",
            Binary::LesserEqual => "broadcast_lesser_equal",
            Binary::Hypot => "broadcast_hypot",
            Binary::Mod => "broadcast_mod",
            Binary::LogicalAnd => "broadcast_logical_and",
            Binary::LogicalOr => "broadcast_logical_or",
            Binary::LogicalXor => "broadcast_logical_xor",
        }
    }

    /// The same-shape op's name (MXNet's: `elemwise_` for the four arithmetic ops, `_` for the
    /// others).
    pub(crate) const fn same_shape_name(self) -> &'static str {
        match self {
            Binary::Add => "elemwise_add",
            Binary::Sub => "elemwise_sub",
            Binary::Mul => "elemwise_mul",
            Binary::Div => "elemwise_div",
            Binary::Maximum => "_maximum",
            Binary::Minimum => "_minimum",
            Binary::Power => "_power",
            Binary::Equal => "_equal",
            Binary::NotEqual => "_not_equal",
            Binary::Greater => "_greater",
            Binary::GreaterEqual => "_greater_equal",
            Binary::Lesser => "_lesser",
            Binary::LesserEqual => "_lesser_equal",
            Binary::Hypot => "_hypot",
            Binary::Mod => "_mod",
            Binary::LogicalAnd => "_logical_and",
            Binary::LogicalOr => "_logical_or",
            Binary::LogicalXor => "_logical_xor",
        }
    }

    /// Whether a fused elementwise program runs the same-shape op (`symbol::fuse`): the
    /// arithmetic of a training graph's gradients and updates.
    pub(crate) const fn fused_elementwise(self) -> bool {
        matches!(
            self,
            Binary::Add
                | Binary::Sub
                | Binary::Mul
                | Binary::Div
                | Binary::Maximum
                | Binary::Minimum
        )
    }

    /// Inputs the member's backward pass does not read: neither operand where the gradient is
    /// the output gradient itself (add, sub) or nothing (comparisons, logic).
    pub(crate) const fn backward_ignores(self) -> &'static [usize] {
        match self {
            Binary::Add
            | Binary::Sub
            | Binary::Equal
            | Binary::NotEqual
            | Binary::Greater
            | Binary::GreaterEqual
            | Binary::Lesser
            | Binary::LesserEqual
            | Binary::LogicalAnd
            | Binary::LogicalOr
            | Binary::LogicalXor => &[0, 1],
            Binary::Mul
            | Binary::Div
            | Binary::Maximum
            | Binary::Minimum
            | Binary::Power
            | Binary::Hypot
            | Binary::Mod => &[],
        }
    }

    /// The members' codes as C `#define`s (`#define BINARY_ADD 0`), for the device code.
    pub(crate) fn c_defines() -> String {
        Binary::ALL
            .iter()
            .map(|b| {
                let name = b.stem().to_ascii_uppercase();
                format!("#define BINARY_{name} {}\n", b.code())
            })
            .collect()
    }
}

fn infer_broadcast(
    op: &str,
    _: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    let dt = same_dtypes(op, d)?;
    Ok((vec![broadcast_shape(op, &s[0], &s[1])?], vec![dt]))
}

fn infer_same_shape(
    op: &str,
    _: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    let dt = same_dtypes(op, d)?;
    Ok((vec![same_shapes(op, s)?.to_vec()], vec![dt]))
}

pub(super) fn ops() -> &'static [OpDef] {
    const IP2: &[(usize, usize)] = &[(0, 0), (1, 0)];
    /// A broadcasting binary op: the operands broadcast to one shape.
    const fn broadcast(b: Binary) -> OpDef {
        OpDef {
            inplace: IP2,
            backward_ignores: b.backward_ignores(),
            ..OpDef::new(
                b.broadcast_name(),
                Arity::Exactly(2),
                infer_broadcast,
                kernel::binary_kernel,
            )
        }
        .member(Member::Binary(b))
        .grad(grad::broadcasting)
        .on_gpu(gpu::binary)
    }
    /// A same-shape binary op: both operands and the output have one shape, which inference
    /// may take from any of them.
    const fn same(b: Binary) -> OpDef {
        OpDef {
            inplace: IP2,
            backward_ignores: b.backward_ignores(),
            ..OpDef::new(
                b.same_shape_name(),
                Arity::Exactly(2),
                infer_same_shape,
                kernel::binary_kernel,
            )
        }
        .partial(super::partial_shapes::same_shape)
        .pointwise(b.fused_elementwise())
        .member(Member::Binary(b))
        .grad(grad::same_shaped)
        .on_gpu(gpu::binary)
    }
    static OPS: &[OpDef] = &[
        broadcast(Binary::Add),
        broadcast(Binary::Sub),
        broadcast(Binary::Mul),
        broadcast(Binary::Div),
        broadcast(Binary::Maximum),
        broadcast(Binary::Minimum),
        broadcast(Binary::Power),
        broadcast(Binary::Equal),
        broadcast(Binary::NotEqual),
        broadcast(Binary::Greater),
        broadcast(Binary::GreaterEqual),
        broadcast(Binary::Lesser),
        broadcast(Binary::LesserEqual),
        broadcast(Binary::Hypot),
        broadcast(Binary::Mod),
        broadcast(Binary::LogicalAnd),
        broadcast(Binary::LogicalOr),
        broadcast(Binary::LogicalXor),
        same(Binary::Maximum),
        same(Binary::Minimum),
        same(Binary::Power),
        same(Binary::Hypot),
        same(Binary::Mod),
        same(Binary::Equal),
        same(Binary::NotEqual),
        same(Binary::Greater),
        same(Binary::GreaterEqual),
        same(Binary::Lesser),
        same(Binary::LesserEqual),
        same(Binary::LogicalAnd),
        same(Binary::LogicalOr),
        same(Binary::LogicalXor),
        same(Binary::Add),
        same(Binary::Sub),
        same(Binary::Mul),
        same(Binary::Div),
    ];
    OPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_registered_under_both_names_and_carries_itself() {
        for (i, b) in Binary::ALL.iter().enumerate() {
            assert_eq!(b.code(), i, "{b:?} out of code order");
            assert_eq!(b.broadcast_name(), format!("broadcast_{}", b.stem()));
            for name in [b.broadcast_name(), b.same_shape_name()] {
                let def = crate::ops::lookup(name).expect("registered");
                assert_eq!(def.member, Member::Binary(*b), "{name}");
            }
        }
        assert_eq!(
            Member::binary(crate::ops::lookup("dot").unwrap()),
            Err("dot is not an op of the binary family".to_string())
        );
    }

    #[test]
    fn the_device_code_names_the_codes() {
        let c = Binary::c_defines();
        assert!(c.starts_with("#define BINARY_ADD 0\n"));
        assert!(c.contains("#define BINARY_LOGICAL_XOR 17\n"));
    }
}
