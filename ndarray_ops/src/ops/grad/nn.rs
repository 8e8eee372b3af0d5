//! Gradient rules of the layers and heads: FullyConnected, Pooling, BatchNorm,
//! Dropout, the activations, the norms, softmax, the vision ops, the losses.

use super::*;
use crate::ops::names::op_name;

pub(crate) fn softmax_output(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let bw = make(
        op_name!("_backward_SoftmaxOutput"),
        format!("{}_backward", n.name),
        vec![out(n, 0), n.inputs[1].clone()],
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
}

pub(crate) fn pooling(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone()];
    let bw = make(
        op_name!("_backward_Pooling"),
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0))])
}

pub(crate) fn dropout(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    // The mask (hidden output 1) already holds 0 or 1 / (1 - p): the gradient is og * mask.
    Ok(vec![Some(op1(
        op_name!("elemwise_mul"),
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 1)],
        Attrs::new(),
    )?)])
}

pub(crate) fn softmax(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let bw = if n.op_name() == "log_softmax" {
        "_backward_log_softmax"
    } else {
        "_backward_softmax"
    };
    Ok(vec![Some(op1(
        bw,
        format!("{}_backward", n.name),
        vec![need(n, og)?, out(n, 0)],
        n.attrs.clone(),
    )?)])
}

/// LeakyReLU: one backward node reading the output gradient, the data and prelu's gamma.
pub(crate) fn leaky_relu(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    backward_node(n, op_name!("_backward_LeakyReLU"), ins)
}

/// LayerNorm, InstanceNorm, GroupNorm: one backward node reading the data, gamma and the
/// statistics the forward pass kept; L2Normalization: one reading its output and the norms.
pub(crate) fn normalization(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let op = n.op_name();
    let ins = match op {
        "L2Normalization" => vec![need(n, og)?, out(n, 0), out(n, 1)],
        "SoftmaxActivation" => vec![need(n, og)?, out(n, 0)],
        _ => vec![
            need(n, og)?,
            n.inputs[0].clone(),
            n.inputs[1].clone(),
            out(n, 1),
            out(n, 2),
        ],
    };
    backward_node(n, &format!("_backward_{op}"), ins)
}

/// The resampling and region ops of `ops::vision` and `ops::roi`: one backward node reading
/// the output gradient and the forward inputs (ROIPooling: also where each maximum was; the
/// region ops: no gradient for the regions).
pub(crate) fn vision(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let g = need(n, og)?;
    let op = n.op_name();
    let name = op.trim_start_matches("_contrib_");
    match op {
        "ROIPooling" => {
            let ins = vec![g, n.inputs[1].clone(), out(n, 1), n.inputs[0].clone()];
            let bw = make(
                op_name!("_backward_ROIPooling"),
                format!("{}_backward", n.name),
                ins,
                n.attrs.clone(),
            )?;
            Ok(vec![Some(out(&bw, 0)), None])
        }
        "_contrib_ROIAlign" => {
            let ins = vec![g, n.inputs[1].clone(), n.inputs[0].clone()];
            let d = op1(
                op_name!("_backward_ROIAlign"),
                format!("{}_backward", n.name),
                ins,
                n.attrs.clone(),
            )?;
            Ok(vec![Some(d), None])
        }
        _ => {
            let mut ins = vec![g];
            ins.extend(n.inputs.iter().cloned());
            backward_node(n, &format!("_backward_{name}"), ins)
        }
    }
}

/// The loss heads of `ops::loss`: their gradient is their own, not the head gradient's.
pub(crate) fn loss(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let op = n.op_name();
    let name = format!("{}_backward", n.name);
    let y = out(n, 0);
    Ok(match op {
        "make_loss" => vec![Some(op1(
            op_name!("ones_like"),
            name,
            vec![y],
            Attrs::new(),
        )?)],
        "MakeLoss" => vec![Some(op1(
            op_name!("_backward_MakeLoss"),
            name,
            vec![y],
            n.attrs.clone(),
        )?)],
        "softmax_cross_entropy" => {
            let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
            let d = op1(
                op_name!("_backward_softmax_cross_entropy"),
                name,
                ins,
                Attrs::new(),
            )?;
            vec![Some(d), None]
        }
        _ => {
            let ins = vec![y, n.inputs[1].clone()];
            let bw = make(&format!("_backward_{op}"), name, ins, n.attrs.clone())?;
            vec![Some(out(&bw, 0)), Some(out(&bw, 1))]
        }
    })
}
