//! The reduction family: sum, mean, prod, max, min, norm (L2 or L1), argmax, argmin along axes
//! (MXNet semantics: no axis reduces everything to shape `(1,)`; `keepdims` keeps reduced axes
//! as 1). Every member is a [`Reduce`]; its inference, CPU kernel, gradient rule and GPU kernel
//! match on it.
//!
//! Files: `mod.rs` the members, attributes, inference and op table; `kernel.rs` the CPU kernel;
//! `grad.rs` the gradient rule; `gpu.rs` and `reduce.cu` the GPU kernels.

mod backward;
pub(crate) mod gpu;
pub(crate) use backward::backward_ops;
mod grad;
mod kernel;

pub(crate) use kernel::fold_run;

use super::family::Member;
use super::params::{op_params, Params};
use super::{norm_axes, Arity, Attrs, OpDef};
use crate::error::Result;
use crate::DType;

/// A member of the reduction family, named for its op. Its discriminant is its code in the GPU
/// kernels (`REDUCE_*` in the device code, written from [`Reduce::c_defines`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduce {
    Max,
    Min,
    Prod,
    Argmax,
    Argmin,
    Sum,
    Mean,
    Norm,
}

impl Reduce {
    /// Every member, in code order.
    pub(crate) const ALL: [Reduce; 8] = [
        Reduce::Max,
        Reduce::Min,
        Reduce::Prod,
        Reduce::Argmax,
        Reduce::Argmin,
        Reduce::Sum,
        Reduce::Mean,
        Reduce::Norm,
    ];

    /// The op's name: the family's one name table.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Reduce::Max => "max",
            Reduce::Min => "min",
            Reduce::Prod => "prod",
            Reduce::Argmax => "argmax",
            Reduce::Argmin => "argmin",
            Reduce::Sum => "sum",
            Reduce::Mean => "mean",
            Reduce::Norm => "norm",
        }
    }

    /// The members' codes as C `#define`s (`#define REDUCE_MAX 0`), for the device code.
    pub(crate) fn c_defines() -> String {
        Reduce::ALL
            .iter()
            .map(|m| {
                let name = m.name().to_ascii_uppercase();
                format!("#define REDUCE_{name} {}\n", *m as usize)
            })
            .collect()
    }

    /// Forward inputs the backward pass does not read: sum's and mean's gradient is the output
    /// gradient spread back, and argmax's and argmin's is none.
    const fn backward_ignores(self) -> &'static [usize] {
        match self {
            Reduce::Sum | Reduce::Mean | Reduce::Argmax | Reduce::Argmin => &[0],
            Reduce::Max | Reduce::Min | Reduce::Prod | Reduce::Norm => &[],
        }
    }
}

/// The member `def` is, as an error message where it is none.
pub(crate) fn member(def: &OpDef) -> std::result::Result<Reduce, String> {
    match def.member {
        Member::Reduce(m) => Ok(m),
        _ => Err(format!("{} is not an op of the reduction family", def.name)),
    }
}

op_params! {
    /// The attributes of the reductions over axes.
    pub struct ReduceParams for "sum", "mean", "prod", "max", "min" {
        axis: Option<Vec<i64>>,
        keepdims: bool,
        exclude: bool,
    }
}

op_params! {
    /// norm's attributes.
    pub struct NormParams for "norm" {
        ord: i64,
        axis: Option<Vec<i64>>,
        out_dtype: Option<String>,
        keepdims: bool,
    }
}

op_params! {
    /// The attributes of argmax and argmin.
    pub struct ArgExtremeParams for "argmax", "argmin" {
        axis: Option<i64>,
        keepdims: bool,
    }
}

/// The axes a reduction (or its backward op, which carries its attributes) reduces, sorted:
/// `axis` (none or empty: all), or every other axis with `exclude` (which norm has not, so
/// it reads as its default there).
pub(crate) fn axes_of(op: &str, attrs: &Attrs, ndim: usize) -> Result<Vec<usize>> {
    let a = ReduceParams::get(op, attrs)?;
    let mut axes = match &a.axis {
        None => (0..ndim).collect(),
        Some(a) if a.is_empty() => (0..ndim).collect(),
        Some(a) => norm_axes(op, a, ndim)?,
    };
    if a.exclude {
        axes = (0..ndim).filter(|d| !axes.contains(d)).collect();
    }
    axes.sort_unstable();
    Ok(axes)
}

fn out_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if !axes.contains(&d) {
            out.push(n);
        } else if keepdims {
            out.push(1);
        }
    }
    if out.is_empty() {
        out.push(1);
    }
    out
}

/// Inference of member `M`'s op (its index a constant, so that inference, which receives only
/// the op's name, knows the member).
fn infer<const M: usize>(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    let m = Reduce::ALL[M];
    let keep = match m {
        Reduce::Norm => {
            norm_ord(op, attrs)?;
            let a = NormParams::get(op, attrs)?;
            if a.out_dtype.is_some() {
                return Err(crate::error::invalid(op, "out_dtype is not supported"));
            }
            a.keepdims
        }
        Reduce::Argmax | Reduce::Argmin => ArgExtremeParams::get(op, attrs)?.keepdims,
        Reduce::Sum | Reduce::Mean | Reduce::Max | Reduce::Min | Reduce::Prod => {
            ReduceParams::get(op, attrs)?.keepdims
        }
    };
    if let Reduce::Argmax | Reduce::Argmin = m {
        let (shape, empty) = match ArgExtremeParams::get(op, attrs)?.axis {
            None => (vec![1], s[0].contains(&0)),
            Some(a) => {
                let ax = norm_axes(op, &[a], s[0].len())?;
                (out_shape(&s[0], &ax, keep), s[0][ax[0]] == 0)
            }
        };
        // As max and min: an empty lane has no extreme element to point at.
        if empty {
            return Err(crate::error::invalid(
                op,
                format!(
                    "cannot take the index of an extreme of an empty axis of shape {:?}",
                    s[0]
                ),
            ));
        }
        return Ok((vec![shape], vec![d[0]]));
    }
    let axes = axes_of(op, attrs, s[0].len())?;
    if let Reduce::Max | Reduce::Min = m {
        if axes.iter().any(|&a| s[0][a] == 0) {
            return Err(crate::error::invalid(
                op,
                format!("cannot reduce an empty axis of shape {:?}", s[0]),
            ));
        }
    }
    Ok((vec![out_shape(&s[0], &axes, keep)], vec![d[0]]))
}

/// `norm`'s order: 2 (the default) or 1.
pub(crate) fn norm_ord(op: &str, attrs: &Attrs) -> Result<u8> {
    match NormParams::get(op, attrs)?.ord {
        2 => Ok(2),
        1 => Ok(1),
        o => Err(crate::error::invalid(op, format!("ord={o} is not 1 or 2"))),
    }
}

pub(super) fn ops() -> &'static [OpDef] {
    /// Member `M` of [`Reduce::ALL`]'s op.
    const fn def<const M: usize>() -> OpDef {
        let m = Reduce::ALL[M];
        OpDef {
            backward_ignores: m.backward_ignores(),
            alias_safe: false,
            ..OpDef::new(m.name(), Arity::Exactly(1), infer::<M>, kernel::kernel)
        }
        .member(Member::Reduce(m))
        .grad(grad::reduce)
        .on_gpu(gpu::reduce)
    }
    static OPS: [OpDef; 8] = [
        def::<0>(),
        def::<1>(),
        def::<2>(),
        def::<3>(),
        def::<4>(),
        def::<5>(),
        def::<6>(),
        def::<7>(),
    ];
    &OPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_is_registered_and_carries_itself() {
        for m in Reduce::ALL {
            let def = crate::ops::lookup(m.name()).expect("registered");
            assert_eq!(member(def), Ok(m), "{}", m.name());
        }
        assert_eq!(
            member(crate::ops::lookup("dot").unwrap()),
            Err("dot is not an op of the reduction family".to_string())
        );
    }
}
