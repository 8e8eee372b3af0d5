//! Typed op families. An op of a family carries its member ([`OpDef::member`]); the family's CPU
//! kernel, gradient rule and GPU arguments match on that member exhaustively, so a member one of
//! them forgets is a compile error, and no kernel of the family dispatches on its name. The
//! family's names come from its members, one table per family.

use super::OpDef;

/// Which member of a typed family an op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    /// An op of no typed family.
    None,
    /// A binary arithmetic, comparison or logic op (see [`Binary`]).
    Binary(Binary),
}

impl Member {
    /// The binary member `def` is, or an error naming the op (a kernel or rule of the binary
    /// family registered on another op).
    pub(crate) fn binary(def: &OpDef) -> Result<Binary, String> {
        match def.member {
            Member::Binary(b) => Ok(b),
            Member::None => Err(format!("{} is not an op of the binary family", def.name)),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_registered_under_both_names_and_carries_itself() {
        for (i, b) in Binary::ALL.iter().enumerate() {
            assert_eq!(b.code(), i, "{b:?} out of code order");
            assert_eq!(b.broadcast_name(), format!("broadcast_{}", b.stem()));
            for name in [b.broadcast_name(), b.same_shape_name()] {
                let def = super::super::lookup(name).expect("registered");
                assert_eq!(def.member, Member::Binary(*b), "{name}");
            }
        }
        assert_eq!(
            Member::binary(super::super::lookup("dot").unwrap()),
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
