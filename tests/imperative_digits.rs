//! The imperative example learns: softmax regression on digits passes 90% held-out accuracy, with
//! the same weights on every engine.

#[path = "../examples/common/digits.rs"]
mod digits;
#[path = "../examples/common/softmax_regression.rs"]
mod softmax_regression;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::Runtime;
use storage::StorageConfig;

#[test]
fn softmax_regression_on_digits_generalizes_and_agrees_across_engines() {
    let (train, test) = digits::load(42).unwrap();
    assert_eq!((train.n, test.n), (1437, 360));
    let mut weights = Vec::new();
    for kind in EngineKind::ALL {
        let rt = Runtime::new(EngineBuilder::new(kind).build(), StorageConfig::default());
        let model = softmax_regression::train(&rt, &train, 15, |_, _| Ok(())).unwrap();
        let acc = softmax_regression::accuracy(&rt, &model, &test).unwrap();
        assert!(acc > 0.90, "{kind:?}: held-out accuracy {acc}");
        weights.push(model.w.to_vec::<f32>().unwrap());
    }
    assert!(
        weights.windows(2).all(|w| w[0] == w[1]),
        "engines trained different weights"
    );
}
