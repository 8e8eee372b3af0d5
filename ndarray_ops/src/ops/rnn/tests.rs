//! The recurrence's pieces against plain formulas.

use super::weights::Packs;
use super::{Attrs, Pass, Real, Rnn};

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

/// The fused LSTM row gives the bits of the unfused formula built from the slice functions
/// (biases, then each activation over the whole run, then the cell and the state): in float32
/// through the vectors, on runs shorter than one vector, of whole vectors and with ragged
/// ends, with and without a kept trace; and in float64 element by element.
#[test]
fn the_fused_lstm_row_is_the_unfused_formula() {
    fn check<T: Real + Copy + std::fmt::Debug + PartialEq>(w: usize, keep: bool) {
        let val = |i: usize, k: usize| {
            let v = ((i * 7919 + k * 104_729) % 2001) as f64 / 250.0 - 4.0;
            T::from(v).unwrap()
        };
        let runs = |k: usize| -> [Vec<T>; 4] {
            std::array::from_fn(|q| (0..w).map(|j| val(j, k * 4 + q)).collect())
        };
        let (input, bx, bh) = (runs(1), runs(2), runs(3));
        let cell: Vec<T> = (0..w).map(|j| val(j, 99)).collect();
        // The unfused formula.
        let mut a: [Vec<T>; 4] = std::array::from_fn(|q| {
            (0..w)
                .map(|j| (input[q][j] + bx[q][j]) + bh[q][j])
                .collect()
        });
        for q in [0, 1, 3] {
            T::sigmoid_all(&mut a[q]);
        }
        T::tanh_all(&mut a[2]);
        let c: Vec<T> = (0..w)
            .map(|j| a[1][j] * cell[j] + a[0][j] * a[2][j])
            .collect();
        let mut tc = c.clone();
        T::tanh_all(&mut tc);
        let h: Vec<T> = (0..w).map(|j| a[3][j] * tc[j]).collect();
        // The fused row.
        let mut got_input = input.clone();
        let mut got_cell = cell.clone();
        let (mut next, mut out) = (vec![T::zero(); w], vec![T::zero(); w]);
        let (mut kc, mut ktc) = (vec![T::zero(); w], vec![T::zero(); w]);
        let [i0, i1, i2, i3] = &mut got_input;
        T::lstm_row(super::cell::LstmRow {
            input: [i0, i1, i2, i3],
            biases: (
                std::array::from_fn(|q| &bx[q][..]),
                std::array::from_fn(|q| &bh[q][..]),
            ),
            cell: &mut got_cell,
            state: (&mut next, &mut out),
            kept: keep.then_some([&mut kc[..], &mut ktc[..]]),
        });
        let what = format!("{} units, keep {keep}", w);
        assert_eq!(got_cell, c, "cell, {what}");
        assert_eq!(next, h, "state, {what}");
        assert_eq!(out, h, "output, {what}");
        match keep {
            true => {
                assert_eq!(got_input, a, "activated gates, {what}");
                assert_eq!((kc, ktc), (c, tc), "kept cell and tanh, {what}");
            }
            false => assert_eq!(got_input, input, "the input projections, {what}"),
        }
    }
    for w in [1, 5, 16, 17, 40, 128] {
        for keep in [false, true] {
            check::<f32>(w, keep);
            check::<f64>(w, keep);
        }
    }
}

/// The vectorized LSTM gradient row gives the scalar formula's bits, on runs shorter than one
/// vector, of whole vectors and with ragged ends.
#[test]
fn the_vectorized_lstm_gradient_row_is_the_scalar_one() {
    use super::cell::{lstm_grad_row_scalar, LstmGradRow};
    for w in [1, 5, 16, 17, 40, 128] {
        let run = |k: usize| -> Vec<f32> {
            (0..w)
                .map(|j| ((j * 7919 + k * 104_729) % 2001) as f32 / 1000.0 - 1.0)
                .collect()
        };
        let (carried, dy, tc, c_prev, dc) = (run(0), run(1), run(2), run(3), run(4));
        let gates: [Vec<f32>; 4] = std::array::from_fn(|q| run(5 + q));
        let mut outs = Vec::new();
        for vectorized in [false, true] {
            let mut dc = dc.clone();
            let mut dg: [Vec<f32>; 4] = std::array::from_fn(|_| vec![0.0; w]);
            let [d0, d1, d2, d3] = &mut dg;
            let row = LstmGradRow {
                dh: (&carried[..], &dy[..]),
                dc: &mut dc,
                gates: std::array::from_fn(|q| &gates[q][..]),
                tc: &tc,
                c_prev: &c_prev,
                dgates: [d0, d1, d2, d3],
            };
            match vectorized {
                true => f32::lstm_grad_row(row),
                false => lstm_grad_row_scalar(row),
            }
            outs.push((dc, dg));
        }
        assert_eq!(outs[0], outs[1], "{w} units");
    }
}

/// A layer's steps cut into 1, 2, 3 or 5 units give the same results, forward (output, trace,
/// final states) and backward (gate gradients, previous states, initial states' gradients;
/// cut by hidden units for 3 samples, by samples for 41), in every mode, both directions,
/// with samples of full, partial and zero length, in float32 (the packed GEMM) and float64: a
/// unit that reads or writes a column or sample outside its own, or a step that starts before
/// the one before it ends, shows here.
#[test]
fn every_cut_into_units_gives_the_same_layer() {
    fn run<T: Real + Copy + std::fmt::Debug>(
        mode: &str,
        dirs: usize,
        units: usize,
        nb: usize,
    ) -> Vec<Vec<T>> {
        let (steps, input, hidden) = (5, 7, 40);
        let attrs = Attrs::new()
            .with("mode", mode)
            .with("num_layers", 1)
            .with("state_size", hidden)
            .with("bidirectional", dirs == 2);
        let r = Rnn::parse("RNN", &attrs).unwrap();
        let value =
            |i: usize, scale: f64| T::from_f64(((i * 7919 % 1000) as f64 / 500.0 - 1.0) * scale);
        let params: Vec<T> = (0..r.slots(input).1).map(|i| value(i, 0.3)).collect();
        let lens = (0..nb).map(|n| [5, 2, 0][n % 3]).collect();
        let mut pass = Pass::new(r, &[steps, nb, input], &params, Some(lens));
        pass.units = units;
        let x: Vec<T> = (0..steps * nb * input)
            .map(|i| value(i + 11, 1.0))
            .collect();
        let state = dirs * nb * hidden;
        let h0: Vec<T> = (0..state).map(|i| value(i + 3, 1.0)).collect();
        let c0: Vec<T> = (0..state).map(|i| value(i + 5, 1.0)).collect();
        let mut out = vec![T::default(); pass.layer_len()];
        let mut traces = vec![T::default(); dirs * pass.trace_len()];
        let (mut hy, mut cy) = (vec![T::default(); state], vec![T::default(); state]);
        let mut scratch = vec![T::default(); pass.step_scratch()];
        pass.forward_layer(
            0,
            &x,
            &mut out,
            &mut traces,
            &h0,
            &c0,
            &mut hy,
            &mut cy,
            &mut scratch,
            true,
        )
        .unwrap();
        let mut got = vec![out.clone(), traces.clone(), hy, cy];
        let (rows, gh) = (steps * nb, r.gh());
        let dy: Vec<T> = (0..out.len()).map(|i| value(i + 17, 1.0)).collect();
        for d in 0..dirs {
            let tl = pass.trace_len();
            let mut dh: Vec<T> = (0..nb * hidden).map(|i| value(i + 23, 1.0)).collect();
            let mut dc: Vec<T> = (0..nb * hidden).map(|i| value(i + 29, 1.0)).collect();
            let mut dgx = vec![T::default(); rows * gh];
            let mut dgh = vec![T::default(); if mode == "gru" { rows * gh } else { 0 }];
            let mut hprev = vec![T::default(); rows * hidden];
            pass.backward_steps(
                (0, d),
                (&out, &dy),
                &traces[d * tl..(d + 1) * tl],
                (&h0, &c0),
                (&mut dh, &mut dc),
                (&mut dgx, &mut dgh, &mut hprev),
                &mut scratch,
            );
            got.extend([dh, dc, dgx, dgh, hprev]);
        }
        got
    }
    // Three samples cut every way by hidden units; 41, by samples (at least 8 a unit).
    for (mode, nb) in ["rnn_relu", "rnn_tanh", "lstm", "gru"]
        .into_iter()
        .flat_map(|m| [(m, 3), (m, 41)])
    {
        for dirs in [1, 2] {
            let (one32, one64) = (run::<f32>(mode, dirs, 1, nb), run::<f64>(mode, dirs, 1, nb));
            for units in [2, 3, 5] {
                assert_eq!(
                    run::<f32>(mode, dirs, units, nb),
                    one32,
                    "{mode}, {dirs} directions, {units} units, {nb} samples, f32"
                );
                assert_eq!(
                    run::<f64>(mode, dirs, units, nb),
                    one64,
                    "{mode}, {dirs} directions, {units} units, {nb} samples, f64"
                );
            }
        }
    }
}

/// Layers run two at a time as a wavefront (on a pool of two threads) give the same bits as
/// the same layers one after the other, in every mode, for a pair alone and a pair with a
/// layer above it, with samples of full, partial and zero length, kept trace or not, with and
/// without kept packs, of one unit a step and of two (whose last upper step the two threads
/// share, where its scratch allows: not GRU's of 65 units): the upper layer's input projection
/// made step by step in two parts, or a step of either layer run before what it reads, shows
/// here. (Float64, on `matrixmultiply`, runs layer by layer.)
#[test]
fn layers_in_pairs_are_the_layers_one_after_the_other() {
    fn run<T: Real + Copy + std::fmt::Debug>(
        mode: &str,
        layers: usize,
        keep: bool,
        (hidden, packed): (usize, bool),
    ) -> Vec<Vec<T>> {
        let (steps, nb, input) = (6, 3, 7);
        let attrs = Attrs::new()
            .with("mode", mode)
            .with("num_layers", layers)
            .with("state_size", hidden);
        let r = Rnn::parse("RNN", &attrs).unwrap();
        let value =
            |i: usize, scale: f64| T::from_f64(((i * 7919 % 1000) as f64 / 500.0 - 1.0) * scale);
        let params: Vec<T> = (0..r.slots(input).1).map(|i| value(i, 0.3)).collect();
        let mut packs = Packs::default();
        let pass = Pass::new(r, &[steps, nb, input], &params, Some(vec![6, 2, 0]));
        let pass = match packed {
            true => pass.with_packs(packs.at((1, 1))),
            false => pass,
        };
        let x: Vec<T> = (0..steps * nb * input)
            .map(|i| value(i + 11, 1.0))
            .collect();
        let state = layers * nb * hidden;
        let h0: Vec<T> = (0..state).map(|i| value(i + 3, 1.0)).collect();
        let c0: Vec<T> = (0..state).map(|i| value(i + 5, 1.0)).collect();
        let (ll, tl) = (pass.layer_len(), pass.trace_len());
        let (mut ys, mut traces) = (
            vec![T::default(); layers * ll],
            vec![T::default(); layers * tl],
        );
        let (mut hy, mut cy) = (vec![T::default(); state], vec![T::default(); state]);
        let mut scratch = vec![T::default(); pass.step_scratch()];
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        two.install(|| {
            assert_eq!(
                pass.pairs(),
                T::packs(),
                "a pool of two threads runs layers in pairs"
            );
            let (mid, top) = ys.split_at_mut((layers - 1) * ll);
            let (h, c) = (&mut hy, &mut cy);
            pass.forward_layers(
                &x,
                (mid, top),
                &mut traces,
                (&h0, &c0),
                (h, c),
                &mut scratch,
                keep,
            )
        })
        .unwrap();
        // One after the other, each layer reading the output of the one below.
        let (mut ys1, mut traces1) = (
            vec![T::default(); layers * ll],
            vec![T::default(); layers * tl],
        );
        let (mut hy1, mut cy1) = (vec![T::default(); state], vec![T::default(); state]);
        for l in 0..layers {
            let (below, here) = ys1.split_at_mut(l * ll);
            let input: &[T] = if l == 0 { &x } else { &below[(l - 1) * ll..] };
            let tr = &mut traces1[l * tl..(l + 1) * tl];
            pass.forward_layer(
                l,
                input,
                &mut here[..ll],
                tr,
                &h0,
                &c0,
                &mut hy1,
                &mut cy1,
                &mut scratch,
                keep,
            )
            .unwrap();
        }
        assert_eq!(ys, ys1, "{mode}, {layers} layers, outputs");
        assert_eq!(
            (&hy, &cy),
            (&hy1, &cy1),
            "{mode}, {layers} layers, final states"
        );
        if keep {
            assert_eq!(traces, traces1, "{mode}, {layers} layers, traces");
        }
        vec![ys, hy, cy]
    }
    for mode in ["rnn_relu", "rnn_tanh", "lstm", "gru"] {
        for layers in [2, 3] {
            for keep in [false, true] {
                for size in [(40, false), (40, true), (64, true), (65, true)] {
                    run::<f32>(mode, layers, keep, size);
                    run::<f64>(mode, layers, keep, size);
                }
            }
        }
    }
}

/// An LSTM whose products fit Strassen's split (batch 16, 256 inputs and hidden units) gives,
/// with the split, the plain products' results to within rounding, run as a wavefront of two
/// layers (a pool of two threads) and layer by layer (three): outputs, final states and the
/// kept trace; and not their exact bits, so that the split is known to have run.
#[test]
fn strassen_steps_match_the_plain_products() {
    if !f32::splits(16, 256, 128) {
        return;
    }
    let run = |strassen: bool, threads: usize| -> Vec<Vec<f32>> {
        let (steps, nb, input, hidden, layers) = (4, 16, 256, 256, 2);
        let attrs = Attrs::new()
            .with("mode", "lstm")
            .with("num_layers", layers)
            .with("state_size", hidden);
        let r = Rnn::parse("RNN", &attrs).unwrap();
        let value = |i: usize, scale: f32| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * scale;
        let params: Vec<f32> = (0..r.slots(input).1).map(|i| value(i, 0.1)).collect();
        let mut packs = Packs::default();
        let mut pass =
            Pass::new(r, &[steps, nb, input], &params, None).with_packs(packs.at((1, 1)));
        pass.strassen = strassen;
        let x: Vec<f32> = (0..steps * nb * input)
            .map(|i| value(i + 11, 1.0))
            .collect();
        let state = layers * nb * hidden;
        let h0: Vec<f32> = (0..state).map(|i| value(i + 3, 1.0)).collect();
        let c0: Vec<f32> = (0..state).map(|i| value(i + 5, 1.0)).collect();
        let (ll, tl) = (pass.layer_len(), pass.trace_len());
        let (mut ys, mut traces) = (vec![0.0; layers * ll], vec![0.0; layers * tl]);
        let (mut hy, mut cy) = (vec![0.0; state], vec![0.0; state]);
        let mut scratch = vec![0.0; pass.step_scratch()];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(pass.pairs(), threads == 2);
            let (mid, top) = ys.split_at_mut((layers - 1) * ll);
            pass.forward_layers(
                &x,
                (mid, top),
                &mut traces,
                (&h0, &c0),
                (&mut hy, &mut cy),
                &mut scratch,
                true,
            )
        })
        .unwrap();
        vec![ys, hy, cy, traces]
    };
    for threads in [2, 3] {
        let (plain, split) = (run(false, threads), run(true, threads));
        assert_ne!(plain, split, "{threads} threads: the split did not run");
        for (what, (p, s)) in ["outputs", "final states", "cells", "traces"]
            .iter()
            .zip(plain.iter().zip(&split))
        {
            let worst = p
                .iter()
                .zip(s)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(worst <= 2e-5, "{threads} threads, {what}: off by {worst}");
        }
    }
}
