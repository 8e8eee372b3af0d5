//! The main job learns: symbolic bind-and-run training of the MLP and the CNN on digits passes 95%
//! held out.

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

#[test]
fn symbolic_mlp_and_cnn_reach_95_percent_on_held_out_digits() {
    for model in [train_digits::Model::Mlp, train_digits::Model::Cnn] {
        let r = train_digits::train(model, 20, false).unwrap();
        assert!(
            r.test_accuracy >= 0.95,
            "{model:?}: held-out accuracy {}",
            r.test_accuracy
        );
        assert!(r.planned_bytes <= r.no_reuse_bytes);
    }
}
