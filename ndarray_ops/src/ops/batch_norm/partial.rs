//! BatchNorm's shape rule on partial shapes (see `ops::partial_shapes`).

use super::BatchNormParams;
use crate::ops::params::Params;
use crate::ops::partial_shapes::{inputs, Found, Known};
use crate::ops::Attrs;

/// BatchNorm: gamma, beta, moving mean and variance all have the channel count.
pub(crate) fn batch_norm(op: &str, attrs: &Attrs, ins: &Known, _outs: &Known) -> Found {
    let mut out = vec![None; ins.len()];
    if let Some(Some(x)) = ins.first() {
        let axis = BatchNormParams::get(op, attrs)?.axis;
        let axis = if axis < 0 {
            axis + x.len() as i64
        } else {
            axis
        };
        if let Some(&c) = usize::try_from(axis).ok().and_then(|a| x.get(a)) {
            for o in out.iter_mut().skip(1) {
                *o = Some(vec![c]);
            }
        }
    }
    inputs(out)
}
