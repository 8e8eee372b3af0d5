//! FullyConnected's shape rule on partial shapes (see `ops::partial_shapes`).

use super::FullyConnectedParams;
use crate::ops::params::Params;
use crate::ops::partial_shapes::{merge, Found, Known};
use crate::ops::{Attrs, Partial};

/// FullyConnected: weight (num_hidden, features), bias (num_hidden); the output's leading
/// dimensions are the data's (its batch, or every axis but the last without `flatten`).
pub(crate) fn fully_connected(op: &str, attrs: &Attrs, ins: &Known, outs: &Known) -> Found {
    let a = FullyConnectedParams::get(op, attrs)?;
    let (hidden, flatten) = (a.num_hidden.0, a.flatten);
    let mut data = ins.first().cloned().flatten();
    let weight = ins.get(1).cloned().flatten();
    // From the output back to the data.
    if let Some(Some(y)) = outs.first() {
        let lead = &y[..y.len().saturating_sub(1)];
        data = match (data, flatten) {
            (Some(mut x), true) if !x.is_empty() && !lead.is_empty() => {
                if x[0] == 0 {
                    x[0] = lead[0];
                }
                Some(x)
            }
            (x, false) => {
                let features = weight.as_ref().and_then(|w| w.get(1).copied()).unwrap_or(0);
                let mut from_out = lead.to_vec();
                from_out.push(features);
                merge(x, &Some(from_out))
            }
            (x, _) => x,
        };
    }
    let mut proposed = vec![None; ins.len()];
    let mut output = None;
    if let Some(x) = &data {
        if !x.is_empty() {
            let k = match flatten {
                true => x[1..].iter().product(),
                false => x[x.len() - 1],
            };
            if ins.len() > 1 {
                proposed[1] = Some(vec![hidden, k]);
            }
            let mut y = match flatten {
                true => vec![x[0]],
                false => x[..x.len() - 1].to_vec(),
            };
            y.push(hidden);
            output = Some(y);
        }
    }
    if ins.len() > 2 {
        proposed[2] = Some(vec![hidden]);
    }
    proposed[0] = data;
    Ok(Partial {
        inputs: proposed,
        outputs: vec![output],
    })
}
