//! Helpers shared by the integration tests.

use ndarray_ops::{Attrs, Symbol};

/// `graphs/mlp-symbol.json` built in code, with the file's node names and attributes.
pub fn mlp_in_code() -> Symbol {
    let mut h = Symbol::var("data");
    for (i, n) in [(0, 512), (1, 512), (2, 10)] {
        let w = Symbol::var(&format!("mlp_dense{i}_weight"));
        let b = Symbol::var(&format!("mlp_dense{i}_bias"));
        h = Symbol::op(
            "FullyConnected",
            &format!("mlp_dense{i}_fwd"),
            &[&h, &w, &b],
            Attrs::new()
                .with("flatten", "True")
                .with("no_bias", "False")
                .with("num_hidden", n),
        )
        .unwrap();
        if i < 2 {
            h = Symbol::op(
                "Activation",
                &format!("mlp_dense{i}_relu_fwd"),
                &[&h],
                Attrs::new().with("act_type", "relu"),
            )
            .unwrap();
        }
    }
    h
}
