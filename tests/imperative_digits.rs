//! The imperative example learns: softmax regression on digits passes 90% held-out accuracy, with
//! the same weights on every engine, and with autograd's gradients as with the hand-written ones.

#[path = "../examples/common/digits.rs"]
mod digits;
#[path = "../examples/common/softmax_regression.rs"]
mod softmax_regression;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::Runtime;
use softmax_regression::Gradients;
use storage::StorageConfig;

#[test]
fn softmax_regression_on_digits_generalizes_and_agrees_across_engines() {
    let (train, test) = digits::load(42).unwrap();
    assert_eq!((train.n, test.n), (1437, 360));
    let mut weights = Vec::new();
    for kind in EngineKind::ALL {
        let rt = Runtime::new(EngineBuilder::new(kind).build(), StorageConfig::default());
        let model =
            softmax_regression::train(&rt, &train, 15, Gradients::ByHand, |_, _| Ok(())).unwrap();
        let acc = softmax_regression::accuracy(&rt, &model, &test).unwrap();
        assert!(acc > 0.90, "{kind:?}: held-out accuracy {acc}");
        weights.push(model.w.to_vec::<f32>().unwrap());
    }
    assert!(
        weights.windows(2).all(|w| w[0] == w[1]),
        "engines trained different weights"
    );
}

/// Training with the gradients autograd records from the loss follows the hand-written
/// gradients' path: after five epochs (about 115 steps, each one's error carried into the next)
/// the weights agree to a few float steps, as does the accuracy.
#[test]
fn autograd_trains_as_the_hand_written_gradients_do() {
    let (train, test) = digits::load(42).unwrap();
    let rt = Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice).build(),
        StorageConfig::default(),
    );
    let mut models = Vec::new();
    for gradients in [Gradients::ByHand, Gradients::Autograd] {
        let model = softmax_regression::train(&rt, &train, 5, gradients, |_, _| Ok(())).unwrap();
        let acc = softmax_regression::accuracy(&rt, &model, &test).unwrap();
        assert!(acc > 0.85, "{gradients:?}: held-out accuracy {acc}");
        models.push((model.w.to_vec::<f32>().unwrap(), acc));
    }
    let (hand, auto) = (&models[0], &models[1]);
    let scale = hand.0.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = hand
        .0
        .iter()
        .zip(&auto.0)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        diff <= 1e-4 * scale,
        "weights differ by {diff} (largest {scale})"
    );
    assert!(
        (hand.1 - auto.1).abs() < 0.01,
        "accuracy {} vs {}",
        hand.1,
        auto.1
    );
}
