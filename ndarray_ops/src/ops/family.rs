//! Typed op families. An op of a family carries its member ([`OpDef::member`]); the family's CPU
//! kernel, gradient rule and GPU arguments match on that member exhaustively, so a member one of
//! them forgets is a compile error, and no kernel of the family dispatches on its name. The
//! family's names come from its members, one table per family.

pub(crate) use super::binary::Binary;
use super::OpDef;

/// Which member of a typed family an op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    /// An op of no typed family.
    None,
    /// A binary arithmetic, comparison or logic op (see [`Binary`]).
    Binary(Binary),
    /// An op of an array and a number (see [`Scalar`](super::scalar::Scalar)).
    Scalar(super::scalar::Scalar),
    /// A function of each element of one array (see [`Unary`](super::unary::Unary)).
    Unary(super::unary::Unary),
    /// A reduction along axes (see [`Reduce`](super::reduce::Reduce)).
    Reduce(super::reduce::Reduce),
    /// An op whose output elements are each one input element or a constant (see
    /// [`Gather`](super::gather::Gather)).
    Gather(super::gather::Gather),
    /// A normalization over groups of elements (see [`Norm`](super::norm::Norm)).
    Norm(super::norm::Norm),
    /// An op that draws its output from a distribution (see
    /// [`Sampler`](super::stochastic::Sampler)).
    Sampler(super::stochastic::Sampler),
    /// A resampling of image planes (see [`Resample`](super::vision::Resample)).
    Resample(super::vision::Resample),
    /// An optimizer update (see [`Update`](super::update::Update)).
    Update(super::update::Update),
}

impl Member {
    /// The binary member `def` is, or an error naming the op (a kernel or rule of the binary
    /// family registered on another op).
    pub(crate) fn binary(def: &OpDef) -> Result<Binary, String> {
        match def.member {
            Member::Binary(b) => Ok(b),
            _ => Err(format!("{} is not an op of the binary family", def.name)),
        }
    }
}
