//! Gradient rules of the ops that move or select data: reshapes, transpose, slices, Concat,
//! split, stack, take and Embedding, the gather family, the sequence ops, sort, pick.

use super::*;
use crate::ops::names::op_name;
use crate::ops::params::{Params, SliceChannelParams, TransposeParams};

pub(crate) fn flatten(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone()];
    let bw = make(
        op_name!("reshape_like"),
        format!("{}_backward", n.name),
        ins,
        Attrs::new(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

pub(crate) fn embedding(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    let w = op1(
        op_name!("_backward_take"),
        format!("{}_backward", n.name),
        ins,
        Attrs::new(),
    )?;
    // Indices have no gradient.
    Ok(vec![None, Some(w)])
}

pub(crate) fn transpose(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    // The inverse permutation (the default reversal is its own inverse).
    let axes = &TransposeParams::get(n.op_name(), &n.attrs)?.axes;
    let mut inv = vec![0i64; axes.len()];
    let nd = axes.len() as i64;
    for (i, &a) in axes.iter().enumerate() {
        inv[(if a < 0 { a + nd } else { a }) as usize] = i as i64;
    }
    let attrs = TransposeParams { axes: inv }.to_attrs();
    Ok(vec![Some(op1(
        op_name!("transpose"),
        format!("{}_backward", n.name),
        vec![need(n, og)?],
        attrs,
    )?)])
}

pub(crate) fn slice(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let attrs = n.attrs.clone().with("__slice_op__", n.op_name());
    Ok(vec![Some(op1(
        op_name!("_backward_slice"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        attrs,
    )?)])
}

pub(crate) fn concat(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    let attrs = n.attrs.clone().with("num_args", n.inputs.len());
    let bw = make(
        op_name!("_backward_Concat"),
        format!("{}_backward", n.name),
        ins,
        attrs,
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&bw, k))).collect())
}

pub(crate) fn split(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let a = SliceChannelParams::get("SliceChannel", &n.attrs)?;
    let (axis, squeeze) = (a.axis, a.squeeze_axis);
    let mut parts = Vec::with_capacity(n.num_outputs());
    for (k, g) in og.iter().enumerate() {
        // An output nobody used contributes zeros.
        let g = match g {
            Some(g) => g.clone(),
            None => scaled(n, &format!("zero{k}"), out(n, k), 0.0)?,
        };
        parts.push(if squeeze {
            op1(
                op_name!("expand_dims"),
                format!("{}_backward_expand{k}", n.name),
                vec![g],
                Attrs::new().with("axis", axis),
            )?
        } else {
            g
        });
    }
    let attrs = Attrs::new().with("dim", axis).with("num_args", parts.len());
    Ok(vec![Some(op1(
        op_name!("Concat"),
        format!("{}_backward", n.name),
        parts,
        attrs,
    )?)])
}

/// Gradients that are the output gradient times a mask or factor built from forward ops.
pub(crate) fn masked(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let (x, y) = (n.inputs[0].clone(), out(n, 0));
    let op = n.op_name();
    let name = |t: &str| format!("{}_backward_{t}", n.name);
    let cmp = |t: &str, which: &str, v: f64| {
        op1(
            which,
            name(t),
            vec![x.clone()],
            Attrs::new().with("scalar", v),
        )
    };
    let factor = match op {
        "clip" => {
            let (lo, hi) = crate::ops::clip_bounds(op, &n.attrs)?;
            op1(
                op_name!("elemwise_mul"),
                name("inside"),
                vec![
                    cmp("above", "_greater_scalar", lo)?,
                    cmp("below", "_lesser_scalar", hi)?,
                ],
                Attrs::new(),
            )?
        }
        // alpha where the output is strictly inside (0, 1)
        "hard_sigmoid" => {
            let (alpha, _) = crate::ops::math::hard_sigmoid_params(op, &n.attrs)?;
            let on_output = |t: &str, which: &str, v: f64| {
                op1(
                    which,
                    name(t),
                    vec![y.clone()],
                    Attrs::new().with("scalar", v),
                )
            };
            let inside = op1(
                op_name!("elemwise_mul"),
                name("inside"),
                vec![
                    on_output("above", "_greater_scalar", 0.0)?,
                    on_output("below", "_lesser_scalar", 1.0)?,
                ],
                Attrs::new(),
            )?;
            scaled(n, "slope", inside, alpha)?
        }
        other => {
            return Err(invalid(
                other,
                format!("node '{}': no gradient rule", n.name),
            ))
        }
    };
    Ok(vec![Some(op1(
        op_name!("elemwise_mul"),
        name("out"),
        vec![g, factor],
        Attrs::new(),
    )?)])
}

pub(crate) fn stack(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let axis = n
        .attrs
        .ints("stack", "axis")?
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    let parts = Node::new(
        lookup(op_name!("SliceChannel"))?,
        &format!("{}_backward", n.name),
        Attrs::new()
            .with("num_outputs", n.inputs.len())
            .with("axis", axis)
            .with("squeeze_axis", true),
        vec![need(n, og)?],
    )?;
    Ok((0..n.inputs.len()).map(|k| Some(out(&parts, k))).collect())
}

pub(crate) fn take(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    Ok(vec![
        Some(op1(
            op_name!("_backward_take"),
            format!("{}_backward", n.name),
            ins,
            n.attrs.clone(),
        )?),
        None,
    ])
}

/// gather_nd: the output gradient added back into the blocks read (a scatter that adds; the
/// data gives the shape); scatter_nd: the output gradient gathered from the blocks written.
pub(crate) fn gather_nd(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let (g, indices) = (need(n, og)?, n.inputs[1].clone());
    let name = format!("{}_backward", n.name);
    let d = match n.op_name() {
        "gather_nd" => op1(
            op_name!("_backward_gather_nd"),
            name,
            vec![g, indices, n.inputs[0].clone()],
            Attrs::new(),
        )?,
        _ => op1(op_name!("gather_nd"), name, vec![g, indices], Attrs::new())?,
    };
    Ok(vec![Some(d), None])
}

/// The gather ops (`ops::gather`: broadcast_to, tile, Pad, ...): each output gradient element
/// goes back to the data element it was read from.
pub(crate) fn gather(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let d = op1(
        op_name!("_backward_gather"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, n.inputs[0].clone()],
        n.attrs.clone().with("__fwd__", n.op_name()),
    )?;
    let mut grads = vec![Some(d)];
    grads.resize(n.inputs.len(), None);
    Ok(grads)
}

/// SequenceMask: the output gradient with the masked steps zeroed; SequenceLast: it at each
/// sequence's last step; SequenceReverse: it reversed back. None for the lengths.
pub(crate) fn sequence(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    let op = match n.op_name() {
        "SequenceMask" => "_backward_SequenceMask",
        "SequenceReverse" => "SequenceReverse",
        _ => {
            ins.push(n.inputs[0].clone());
            "_backward_SequenceLast"
        }
    };
    ins.extend(n.inputs.get(1).cloned());
    let d = op1(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    let mut grads = vec![Some(d)];
    grads.resize(n.inputs.len(), None);
    Ok(grads)
}

/// sort and topk returning values: each value's gradient back where it came from (the
/// indices output); none for indices or masks.
pub(crate) fn sort(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    if !crate::ops::sort::returns_values(n.op_name(), &n.attrs) {
        return Ok(vec![None]);
    }
    let ins = vec![need(n, og)?, out(n, 1), n.inputs[0].clone()];
    let attrs = n.attrs.clone().with("__fwd__", n.op_name());
    let d = op1(
        op_name!("_backward_topk"),
        format!("{}_backward", n.name),
        ins,
        attrs,
    )?;
    Ok(vec![Some(d)])
}

/// depth_to_space and space_to_depth: each the other's gradient.
pub(crate) fn depth_space(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let other = match n.op_name() {
        "depth_to_space" => "space_to_depth",
        _ => "depth_to_space",
    };
    let d = op1(
        other,
        format!("{}_backward", n.name),
        vec![need(n, og)?],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(d)])
}

/// pick: the output gradient back into the picked elements; none for the index.
pub(crate) fn pick(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    let d = op1(
        op_name!("_backward_pick"),
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(d), None])
}
