//! Softmax regression on digits with imperative NDArray ops, its gradients written by hand or
//! recorded by autograd; shared by `examples/imperative_digits.rs` and the test that checks it
//! learns.

use std::sync::Arc;

use ndarray_ops::{autograd, invoke, Attrs, DType, GradReq, NDArray, Result, Runtime};
use storage::Context;

use super::digits::{self, Split};

fn one(name: &str, inputs: &[&NDArray], attrs: Attrs) -> Result<NDArray> {
    Ok(invoke(name, inputs, &attrs, None)?.remove(0))
}

/// A trained model: weight (classes, features) and bias.
pub struct Model {
    pub w: NDArray,
    pub b: NDArray,
}

/// Fraction of `split` the model classifies correctly.
pub fn accuracy(rt: &Arc<Runtime>, m: &Model, split: &Split) -> Result<f64> {
    let ctx = m.w.ctx();
    let x = rt.from_vec(split.x.clone(), &[split.n, digits::FEATURES], ctx)?;
    let y = rt.from_vec(split.y.clone(), &[split.n], ctx)?;
    let logits = one(
        "FullyConnected",
        &[&x, &m.w, &m.b],
        Attrs::new().with("num_hidden", digits::CLASSES),
    )?;
    let pred = one("argmax", &[&logits], Attrs::new().with("axis", 1))?;
    let hits = one("broadcast_equal", &[&pred, &y], Attrs::new())?;
    Ok(hits.mean(&[], false)?.to_vec::<f32>()?[0] as f64)
}

/// Where a training step's gradients come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gradients {
    /// Written out: `(softmax(logits) - onehot(y)) / n` through the layer by hand.
    ByHand,
    /// The mean cross-entropy recorded with `autograd::record` and differentiated by `backward`.
    Autograd,
}

/// Trains for `epochs` with mini-batches of 64; `each_epoch` sees the model after every epoch.
pub fn train(
    rt: &Arc<Runtime>,
    train: &Split,
    epochs: usize,
    gradients: Gradients,
    mut each_epoch: impl FnMut(usize, &Model) -> Result<()>,
) -> Result<Model> {
    let ctx = Context::cpu(0);
    let (batch, lr) = (64usize, 0.5f64);
    let (f, c) = (digits::FEATURES, digits::CLASSES);
    let xtr = rt.from_vec(train.x.clone(), &[train.n, f], ctx)?;
    let ytr = rt.from_vec(train.y.clone(), &[train.n], ctx)?;
    let mut model = Model {
        w: rt.zeros(&[c, f], DType::F32, ctx)?,
        b: rt.zeros(&[c], DType::F32, ctx)?,
    };
    if gradients == Gradients::Autograd {
        model.w.attach_grad(GradReq::Write)?;
        model.b.attach_grad(GradReq::Write)?;
    }
    let sgd = Attrs::new().with("lr", lr).with("wd", 1e-4);
    for epoch in 0..epochs {
        for start in (0..train.n).step_by(batch) {
            let end = (start + batch).min(train.n);
            let (x, y) = (xtr.slice(start, end)?, ytr.slice(start, end)?);
            let (dw, db) = match gradients {
                Gradients::ByHand => by_hand(&model, &x, &y, c)?,
                Gradients::Autograd => recorded(&model, &x, &y, c)?,
            };
            // The updates write into the weights.
            invoke("sgd_update", &[&model.w, &dw], &sgd, Some(&[&model.w]))?;
            invoke("sgd_update", &[&model.b, &db], &sgd, Some(&[&model.b]))?;
        }
        each_epoch(epoch, &model)?;
    }
    Ok(model)
}

/// The gradients of the mean cross-entropy over the batch, written out.
fn by_hand(model: &Model, x: &NDArray, y: &NDArray, c: usize) -> Result<(NDArray, NDArray)> {
    // Forward: p = softmax(x w^T + b).
    let logits = one(
        "FullyConnected",
        &[x, &model.w, &model.b],
        Attrs::new().with("num_hidden", c),
    )?;
    let p = one("softmax", &[&logits], Attrs::new().with("axis", 1))?;
    // Backward: dlogits = (p - onehot(y)) / n.
    let onehot = one("one_hot", &[y], Attrs::new().with("depth", c))?;
    let dlogits = (&(&p - &onehot)? * (1.0 / x.shape()[0] as f64))?;
    let dw = one(
        "dot",
        &[&dlogits, x],
        Attrs::new().with("transpose_a", true),
    )?;
    Ok((dw, dlogits.sum(&[0], false)?))
}

/// The same gradients, by autograd from the recorded loss.
fn recorded(model: &Model, x: &NDArray, y: &NDArray, c: usize) -> Result<(NDArray, NDArray)> {
    let loss = autograd::record(|| {
        let logits = one(
            "FullyConnected",
            &[x, &model.w, &model.b],
            Attrs::new().with("num_hidden", c),
        )?;
        let total = one("softmax_cross_entropy", &[&logits, y], Attrs::new())?;
        &total * (1.0 / x.shape()[0] as f64)
    })?;
    loss.backward()?;
    let grad = |a: &NDArray| {
        a.grad().ok_or_else(|| ndarray_ops::NdError::Invalid {
            op: "train".into(),
            reason: "no gradient attached".into(),
        })
    };
    Ok((grad(&model.w)?, grad(&model.b)?))
}
