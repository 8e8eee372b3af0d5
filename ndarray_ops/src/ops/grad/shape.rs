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

/// The output gradient times `factor`, a mask or factor built from forward ops.
fn masked(n: &Arc<Node>, g: NodeEntry, factor: NodeEntry) -> Result<Vec<Option<NodeEntry>>> {
    Ok(vec![Some(op1(
        op_name!("elemwise_mul"),
        format!("{}_backward_out", n.name),
        vec![g, factor],
        Attrs::new(),
    )?)])
}

/// `v (cmp) bound`, a node named for `tag`.
fn compared(n: &Arc<Node>, tag: &str, cmp: &str, v: NodeEntry, bound: f64) -> Result<NodeEntry> {
    op1(
        cmp,
        format!("{}_backward_{tag}", n.name),
        vec![v],
        Attrs::new().with("scalar", bound),
    )
}

/// clip: the output gradient where the input is strictly inside the bounds.
pub(crate) fn clip(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let x = n.inputs[0].clone();
    let (lo, hi) = crate::ops::clip_bounds(n.op_name(), &n.attrs)?;
    let inside = op1(
        op_name!("elemwise_mul"),
        format!("{}_backward_inside", n.name),
        vec![
            compared(n, "above", op_name!("_greater_scalar"), x.clone(), lo)?,
            compared(n, "below", op_name!("_lesser_scalar"), x, hi)?,
        ],
        Attrs::new(),
    )?;
    masked(n, g, inside)
}

/// hard_sigmoid: the output gradient times alpha where the output is strictly inside (0, 1).
pub(crate) fn hard_sigmoid(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let y = out(n, 0);
    let (alpha, _) = crate::ops::math::hard_sigmoid_params(n.op_name(), &n.attrs)?;
    let inside = op1(
        op_name!("elemwise_mul"),
        format!("{}_backward_inside", n.name),
        vec![
            compared(n, "above", op_name!("_greater_scalar"), y.clone(), 0.0)?,
            compared(n, "below", op_name!("_lesser_scalar"), y, 1.0)?,
        ],
        Attrs::new(),
    )?;
    masked(n, g, scaled(n, "slope", inside, alpha)?)
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
/// data gives the shape); none for the indices.
pub(crate) fn gather_nd(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    let name = format!("{}_backward", n.name);
    let d = op1(op_name!("_backward_gather_nd"), name, ins, Attrs::new())?;
    Ok(vec![Some(d), None])
}

/// scatter_nd: the output gradient gathered from the blocks written; none for the indices.
pub(crate) fn scatter_nd(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone()];
    let name = format!("{}_backward", n.name);
    let d = op1(op_name!("gather_nd"), name, ins, Attrs::new())?;
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

/// One backward node `op` of the output gradient (and the data, with `data`) and the lengths
/// where given; none for the lengths.
fn sequence(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
    op: &str,
    data: bool,
) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    if data {
        ins.push(n.inputs[0].clone());
    }
    ins.extend(n.inputs.get(1).cloned());
    let d = op1(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    let mut grads = vec![Some(d)];
    grads.resize(n.inputs.len(), None);
    Ok(grads)
}

/// SequenceMask: the output gradient with the masked steps zeroed.
pub(crate) fn sequence_mask(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    sequence(n, og, op_name!("_backward_SequenceMask"), false)
}

/// SequenceLast: the output gradient at each sequence's last step.
pub(crate) fn sequence_last(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    sequence(n, og, op_name!("_backward_SequenceLast"), true)
}

/// SequenceReverse: the output gradient reversed back.
pub(crate) fn sequence_reverse(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    sequence(n, og, op_name!("SequenceReverse"), false)
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

/// One node of `op` on the output gradient, with the node's attributes.
fn inverse(n: &Arc<Node>, og: &[Option<NodeEntry>], op: &str) -> Result<Vec<Option<NodeEntry>>> {
    let name = format!("{}_backward", n.name);
    Ok(vec![Some(op1(
        op,
        name,
        vec![need(n, og)?],
        n.attrs.clone(),
    )?)])
}

/// depth_to_space: space_to_depth of the output gradient.
pub(crate) fn depth_to_space(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    inverse(n, og, op_name!("space_to_depth"))
}

/// space_to_depth: depth_to_space of the output gradient.
pub(crate) fn space_to_depth(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    inverse(n, og, op_name!("depth_to_space"))
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
