//! The recurrence's pieces against plain formulas.

use super::{Attrs, Real, Rnn};

/// `param_count` (checked, used to refuse attributes) and the slots the kernels lay the
/// parameters out by agree on every mode, depth and direction; past `usize` it refuses.
#[test]
fn the_parameter_count_is_where_the_slots_end() {
    for mode in ["rnn_relu", "rnn_tanh", "lstm", "gru"] {
        for (layers, hidden, bidirectional, input) in [
            (1, 1, false, 1),
            (2, 3, true, 5),
            (3, 7, false, 2),
            (4, 2, true, 9),
        ] {
            let attrs = Attrs::new()
                .with("mode", mode)
                .with("num_layers", layers)
                .with("state_size", hidden)
                .with("bidirectional", bidirectional);
            let r = Rnn::parse("RNN", &attrs).unwrap();
            assert_eq!(
                r.param_count(input),
                Some(r.slots(input).1),
                "{mode} {layers} x {hidden}, bidirectional {bidirectional}, input {input}"
            );
        }
    }
    let huge = Attrs::new()
        .with("mode", "lstm")
        .with("num_layers", u32::MAX)
        .with("state_size", u32::MAX);
    let r = Rnn::parse("RNN", &huge).unwrap();
    assert_eq!(r.param_count(10), None);
    let err = r.input_shapes("RNN", &[4, 2, 10]).unwrap_err().to_string();
    assert!(err.contains("more parameters than fit"), "{err}");
    let too_many = Attrs::new()
        .with("mode", "lstm")
        .with("num_layers", "99999999999999999999")
        .with("state_size", 4);
    let err = Rnn::parse("RNN", &too_many).err().unwrap().to_string();
    assert!(err.contains("from 1 to 4294967295"), "{err}");
}

/// The float gates are the double ones to a few float steps, over the whole range, across
/// the vectorized functions' borders (series, saturation), on odd slice lengths (the
/// vector tails) and at the infinities; NaN stays NaN.
#[test]
fn float_gates_are_the_double_ones_to_a_few_steps() {
    let mut xs: Vec<f32> = (0..16_000).map(|i| -30.0 + i as f32 * 0.00375).collect();
    xs.extend([
        1e-4, -1e-4, 4e-4, 0.55, -0.55, 9.02, -9.02, 20.0, -20.0, 1e-30, 0.0, -0.0,
    ]);
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, 87.0, -87.0, 100.0, -100.0]);
    /// A gate's name, its float slice function and its double reference.
    type Gate = (&'static str, fn(&mut [f32]), fn(f64) -> f64);
    let gates: [Gate; 2] = [
        ("tanh", f32::tanh_all, f64::tanh),
        ("sigmoid", f32::sigmoid_all, |x| 1.0 / (1.0 + (-x).exp())),
    ];
    for (name, all, want_of) in gates {
        for len in [xs.len(), 7, 1] {
            let mut got = xs[..len].to_vec();
            all(&mut got);
            for (&x, &y) in xs.iter().zip(&got) {
                let want = want_of(f64::from(x));
                let step = 4.0 * f64::from(f32::EPSILON) * want.abs();
                let err = (f64::from(y) - want).abs();
                // Results below the normal range may flush to zero.
                assert!(
                    err <= step.max(f64::from(f32::MIN_POSITIVE)),
                    "{name}({x}): {y}, want {want}"
                );
            }
        }
        let mut nan = [f32::NAN; 9];
        all(&mut nan);
        assert!(nan.iter().all(|v| v.is_nan()), "{name}(NaN): {nan:?}");
    }
}
