//! The main job learns: symbolic bind-and-run training of the MLP, the CNN and the LSTM (MXNet's
//! fused RNN op over the image's rows) on digits passes 95%
//! held out, on one context and data-parallel over two (gradients summed by a `device` store,
//! then by a `local` one); a model saved as an MXNet checkpoint
//! and reloaded into fresh executors scores exactly what the trained one did.

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use storage::Context;

#[test]
fn symbolic_mlp_cnn_and_lstm_reach_95_percent_on_held_out_digits() {
    for (contexts, kvstore) in [
        (vec![Context::cpu(0)], "device"),
        (vec![Context::cpu(0), Context::cpu(1)], "device"),
        (vec![Context::cpu(0), Context::cpu(1)], "local"),
    ] {
        for model in [
            train_digits::Model::Mlp,
            train_digits::Model::Cnn,
            train_digits::Model::Lstm,
        ] {
            let dir = std::env::temp_dir().join(format!("mxrs-digits-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let prefix = dir.join(format!("{model:?}-{}-{kvstore}", contexts.len()));
            let prefix = prefix.to_string_lossy();
            let r =
                train_digits::train(model, 20, &contexts, kvstore, false, Some(&prefix)).unwrap();
            assert_eq!(
                r.reloaded_test_accuracy,
                Some(r.test_accuracy),
                "{model:?} on {contexts:?}: the reloaded checkpoint scores differently"
            );
            std::fs::remove_dir_all(&dir).unwrap();
            assert!(
                r.test_accuracy >= 0.95,
                "{model:?} on {contexts:?} with a {kvstore} store: held-out accuracy {}",
                r.test_accuracy
            );
            assert!(r.planned_bytes <= r.no_reuse_bytes);
            assert_eq!(r.devices.len(), contexts.len());
        }
    }
}
