//! Gradient rules of the layers and heads: FullyConnected, Pooling, BatchNorm,
//! Dropout, the activations, the norms, the vision ops, the losses.

use super::*;
use crate::ops::names::op_name;

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

/// LayerNorm, InstanceNorm, GroupNorm: one backward node `op` reading the output gradient,
/// the data, gamma and the statistics the forward pass kept.
fn with_statistics(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
    op: &str,
) -> Result<Vec<Option<NodeEntry>>> {
    let (x, gamma) = (n.inputs[0].clone(), n.inputs[1].clone());
    backward_node(n, op, vec![need(n, og)?, x, gamma, out(n, 1), out(n, 2)])
}

pub(crate) fn layer_norm(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    with_statistics(n, og, op_name!("_backward_LayerNorm"))
}

pub(crate) fn instance_norm(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    with_statistics(n, og, op_name!("_backward_InstanceNorm"))
}

pub(crate) fn group_norm(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    with_statistics(n, og, op_name!("_backward_GroupNorm"))
}

/// L2Normalization: one backward node reading its output and the norms.
pub(crate) fn l2_normalization(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, out(n, 0), out(n, 1)];
    backward_node(n, op_name!("_backward_L2Normalization"), ins)
}

/// SoftmaxActivation: one backward node reading its output.
pub(crate) fn softmax_activation(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, out(n, 0)];
    backward_node(n, op_name!("_backward_SoftmaxActivation"), ins)
}

/// One backward node `op` reading the output gradient and the forward inputs, a gradient for
/// each of them: the resampling ops and Crop.
fn of_inputs(n: &Arc<Node>, og: &[Option<NodeEntry>], op: &str) -> Result<Vec<Option<NodeEntry>>> {
    let mut ins = vec![need(n, og)?];
    ins.extend(n.inputs.iter().cloned());
    backward_node(n, op, ins)
}

pub(crate) fn adaptive_avg_pooling(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    of_inputs(n, og, op_name!("_backward_AdaptiveAvgPooling2D"))
}

pub(crate) fn bilinear_resize(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    of_inputs(n, og, op_name!("_backward_BilinearResize2D"))
}

pub(crate) fn crop(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    of_inputs(n, og, op_name!("_backward_Crop"))
}

/// ROIPooling: one backward node reading the output gradient, the regions, where each maximum
/// was and the data; no gradient for the regions.
pub(crate) fn roi_pooling(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![
        need(n, og)?,
        n.inputs[1].clone(),
        out(n, 1),
        n.inputs[0].clone(),
    ];
    let bw = make(
        op_name!("_backward_ROIPooling"),
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(out(&bw, 0)), None])
}

/// ROIAlign: one backward node reading the output gradient, the regions and the data; no
/// gradient for the regions.
pub(crate) fn roi_align(n: &Arc<Node>, og: &[Option<NodeEntry>]) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[1].clone(), n.inputs[0].clone()];
    let d = op1(
        op_name!("_backward_ROIAlign"),
        format!("{}_backward", n.name),
        ins,
        n.attrs.clone(),
    )?;
    Ok(vec![Some(d), None])
}

/// The regression heads: their own gradient (the prediction's error), not the head
/// gradient's, from one backward node `op` of the output and the label.
fn regression(n: &Arc<Node>, op: &str) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![out(n, 0), n.inputs[1].clone()];
    let bw = make(op, format!("{}_backward", n.name), ins, n.attrs.clone())?;
    Ok(vec![Some(out(&bw, 0)), Some(out(&bw, 1))])
}

pub(crate) fn linear_regression(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    regression(n, op_name!("_backward_LinearRegressionOutput"))
}

pub(crate) fn logistic_regression(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    regression(n, op_name!("_backward_LogisticRegressionOutput"))
}

pub(crate) fn mae_regression(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    regression(n, op_name!("_backward_MAERegressionOutput"))
}

/// make_loss: ones, whatever the head gradient.
pub(crate) fn make_loss(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let name = format!("{}_backward", n.name);
    Ok(vec![Some(op1(
        op_name!("ones_like"),
        name,
        vec![out(n, 0)],
        Attrs::new(),
    )?)])
}

/// MakeLoss: its `grad_scale`, normalized as asked, from `_backward_MakeLoss` of the output.
pub(crate) fn make_loss_scaled(
    n: &Arc<Node>,
    _og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let name = format!("{}_backward", n.name);
    Ok(vec![Some(op1(
        op_name!("_backward_MakeLoss"),
        name,
        vec![out(n, 0)],
        n.attrs.clone(),
    )?)])
}

/// softmax_cross_entropy: one backward node reading the head gradient, the data and the
/// labels; none for the labels.
pub(crate) fn softmax_cross_entropy(
    n: &Arc<Node>,
    og: &[Option<NodeEntry>],
) -> Result<Vec<Option<NodeEntry>>> {
    let ins = vec![need(n, og)?, n.inputs[0].clone(), n.inputs[1].clone()];
    let d = op1(
        op_name!("_backward_softmax_cross_entropy"),
        format!("{}_backward", n.name),
        ins,
        Attrs::new(),
    )?;
    Ok(vec![Some(d), None])
}
