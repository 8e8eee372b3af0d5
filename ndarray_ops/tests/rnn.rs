//! The fused RNN op beyond what `mxnet_ops.rs` checks against MXNet (every mode, stacked and
//! bidirectional, forward and backward, in float64): per-sample sequence lengths, which MXNet's
//! CPU op refuses, against each sample run alone; float32 against float64; a bound node's kept
//! trace against the forward pass run again; the parameters' shape inferred from the data's;
//! and what bad input is told.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::floats;
use ndarray_ops::ops::IS_TRAIN;
use ndarray_ops::{invoke, Attrs, BindOptions, DType, Executor, GradReq, NDArray, Runtime, Symbol};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::Context;

const CPU: Context = Context::cpu(0);

/// An RNN's configuration.
#[derive(Clone, Copy)]
struct Cfg {
    mode: &'static str,
    layers: usize,
    dirs: usize,
    hidden: usize,
    input: usize,
}

impl Cfg {
    fn gates(&self) -> usize {
        match self.mode {
            "lstm" => 4,
            "gru" => 3,
            _ => 1,
        }
    }

    fn lstm(&self) -> bool {
        self.mode == "lstm"
    }

    fn params(&self) -> usize {
        (0..self.layers)
            .map(|l| {
                let width = if l == 0 {
                    self.input
                } else {
                    self.dirs * self.hidden
                };
                self.dirs * self.gates() * self.hidden * (width + self.hidden + 2)
            })
            .sum()
    }

    fn attrs(&self, seq_len: bool) -> Attrs {
        Attrs::new()
            .with("mode", self.mode)
            .with("state_size", self.hidden)
            .with("num_layers", self.layers)
            .with("bidirectional", self.dirs == 2)
            .with("state_outputs", true)
            .with("use_sequence_length", seq_len)
    }

    fn input_names(&self, seq_len: bool) -> Vec<&'static str> {
        let mut v = vec!["data", "parameters", "state"];
        if self.lstm() {
            v.push("state_cell");
        }
        if seq_len {
            v.push("sequence_length");
        }
        v
    }

    fn symbol(&self, seq_len: bool, attrs: Attrs) -> ndarray_ops::Result<Symbol> {
        let vars: Vec<Symbol> = self
            .input_names(seq_len)
            .iter()
            .map(|n| Symbol::var(n))
            .collect();
        let refs: Vec<&Symbol> = vars.iter().collect();
        Symbol::op("RNN", "rnn", &refs, attrs)
    }

    /// A random case over `steps` x `batch`: the inputs but the sequence lengths (name, values,
    /// shape; the parameters within `scale`, the rest within 1) and a head for every output.
    fn draw(&self, rng: &mut StdRng, steps: usize, batch: usize, scale: f64) -> Case {
        let state = vec![self.layers * self.dirs, batch, self.hidden];
        let sn: usize = state.iter().product();
        let width = self.dirs * self.hidden;
        let mut inputs = vec![
            (
                "data",
                uniform(rng, steps * batch * self.input, 1.0),
                vec![steps, batch, self.input],
            ),
            (
                "parameters",
                uniform(rng, self.params(), scale),
                vec![self.params()],
            ),
            ("state", uniform(rng, sn, 1.0), state.clone()),
        ];
        let mut heads = vec![
            (
                uniform(rng, steps * batch * width, 1.0),
                vec![steps, batch, width],
            ),
            (uniform(rng, sn, 1.0), state.clone()),
        ];
        if self.lstm() {
            inputs.push(("state_cell", uniform(rng, sn, 1.0), state.clone()));
            heads.push((uniform(rng, sn, 1.0), state));
        }
        Case { inputs, heads }
    }
}

/// Inputs by name (flat values with shapes) and output heads.
struct Case {
    inputs: Vec<(&'static str, Vec<f64>, Vec<usize>)>,
    heads: Vec<(Vec<f64>, Vec<usize>)>,
}

/// Outputs and gradients (by input name) of one forward and backward pass.
struct Run {
    outs: Vec<Vec<f64>>,
    grads: HashMap<String, Vec<f64>>,
}

/// `sym` bound on the CPU to `given`, with a written gradient for each input named in `grads`.
fn bind<'a>(
    rt: &Arc<Runtime>,
    sym: &Symbol,
    given: HashMap<String, NDArray>,
    grads: impl IntoIterator<Item = &'a str>,
) -> Executor {
    let opts = BindOptions {
        grad_req: grads
            .into_iter()
            .map(|n| (n.to_string(), GradReq::Write))
            .collect(),
        ..BindOptions::default()
    };
    Executor::bind_with_options(rt, CPU, sym, &HashMap::new(), given, &opts).unwrap()
}

fn array(rt: &Arc<Runtime>, v: &[f64], shape: &[usize], dt: DType) -> NDArray {
    match dt {
        DType::F32 => rt.from_vec(v.iter().map(|&x| x as f32).collect(), shape, CPU),
        _ => rt.from_vec(v.to_vec(), shape, CPU),
    }
    .unwrap()
}

/// Runs `cfg` over the given inputs (by name, flat values with shapes) and output heads.
fn run(
    rt: &Arc<Runtime>,
    cfg: &Cfg,
    inputs: &[(&str, Vec<f64>, Vec<usize>)],
    heads: &[(Vec<f64>, Vec<usize>)],
    dt: DType,
) -> Run {
    let seq_len = inputs.iter().any(|i| i.0 == "sequence_length");
    let sym = cfg.symbol(seq_len, cfg.attrs(seq_len)).unwrap();
    let given: HashMap<String, NDArray> = inputs
        .iter()
        .map(|(n, v, s)| (n.to_string(), array(rt, v, s, dt)))
        .collect();
    let grads = inputs
        .iter()
        .map(|i| i.0)
        .filter(|&n| n != "sequence_length");
    let exec = bind(rt, &sym, given, grads);
    exec.forward(true).unwrap();
    let heads: Vec<NDArray> = heads.iter().map(|(v, s)| array(rt, v, s, dt)).collect();
    exec.backward_with(&heads).unwrap();
    Run {
        outs: exec.outputs().iter().map(floats).collect(),
        grads: exec
            .grad_dict()
            .iter()
            .map(|(k, v)| (k.clone(), floats(v)))
            .collect(),
    }
}

fn uniform(rng: &mut StdRng, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// Rows `[t0, t1)` of sample `n` of a `(T, N, W)` array.
fn rows(v: &[f64], batch: usize, width: usize, n: usize, t0: usize, t1: usize) -> Vec<f64> {
    (t0..t1)
        .flat_map(|t| v[(t * batch + n) * width..(t * batch + n + 1) * width].to_vec())
        .collect()
}

/// Sample `n` of a `(K, N, H)` state.
fn state_of(v: &[f64], batch: usize, hidden: usize, n: usize) -> Vec<f64> {
    let k = v.len() / (batch * hidden);
    rows(v, batch, hidden, n, 0, k)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}[{i}]: got {g}, want {w} (tolerance {tol} of {scale})"
        );
    }
}

/// With `use_sequence_length`, each sample of a batch computes what it computes run alone over
/// its own first steps: its output and input gradient past its length are zero, its final
/// states are those at its last step (the first, backwards), and the parameter gradient is the
/// sum of the samples'. A sample of length 0 passes its states through.
#[test]
fn sequence_lengths_run_each_sample_as_if_alone() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(7);
    let cfgs = [
        Cfg {
            mode: "lstm",
            layers: 2,
            dirs: 2,
            hidden: 4,
            input: 3,
        },
        Cfg {
            mode: "gru",
            layers: 1,
            dirs: 2,
            hidden: 5,
            input: 2,
        },
        Cfg {
            mode: "rnn_tanh",
            layers: 2,
            dirs: 1,
            hidden: 3,
            input: 4,
        },
    ];
    let (steps, lens) = (5, [5usize, 2, 0, 3]);
    let batch = lens.len();
    for cfg in cfgs {
        let (h, k) = (cfg.hidden, cfg.layers * cfg.dirs);
        let width = cfg.dirs * h;
        let x = uniform(&mut rng, steps * batch * cfg.input, 1.0);
        let p = uniform(&mut rng, cfg.params(), 0.5);
        let h0 = uniform(&mut rng, k * batch * h, 1.0);
        let c0 = uniform(&mut rng, k * batch * h, 1.0);
        let head_y = uniform(&mut rng, steps * batch * width, 1.0);
        let head_h = uniform(&mut rng, k * batch * h, 1.0);
        let head_c = uniform(&mut rng, k * batch * h, 1.0);
        let state_shape = vec![k, batch, h];
        let mut inputs = vec![
            ("data", x.clone(), vec![steps, batch, cfg.input]),
            ("parameters", p.clone(), vec![cfg.params()]),
            ("state", h0.clone(), state_shape.clone()),
        ];
        let mut heads = vec![
            (head_y.clone(), vec![steps, batch, width]),
            (head_h.clone(), state_shape.clone()),
        ];
        if cfg.lstm() {
            inputs.push(("state_cell", c0.clone(), state_shape.clone()));
            heads.push((head_c.clone(), state_shape.clone()));
        }
        let mut with_lens = inputs.clone();
        let lv: Vec<f64> = lens.iter().map(|&l| l as f64).collect();
        with_lens.push(("sequence_length", lv, vec![batch]));
        let all = run(&rt, &cfg, &with_lens, &heads, DType::F64);
        let mut dparams = vec![0.0; cfg.params()];
        for (n, &len) in lens.iter().enumerate() {
            let what = |s: &str| format!("{} sample {n} (length {len}): {s}", cfg.mode);
            let pick_state = |v: &[f64]| state_of(v, batch, h, n);
            let zeros = |w: usize| vec![0.0; (steps - len) * w];
            assert_eq!(
                rows(&all.outs[0], batch, width, n, len, steps),
                zeros(width),
                "{}",
                what("output past the length")
            );
            assert_eq!(
                rows(&all.grads["data"], batch, cfg.input, n, len, steps),
                zeros(cfg.input),
                "{}",
                what("data gradient past the length")
            );
            if len == 0 {
                assert_eq!(pick_state(&all.outs[1]), pick_state(&h0), "{}", what("hy"));
                assert_eq!(
                    pick_state(&all.grads["state"]),
                    pick_state(&head_h),
                    "{}",
                    what("state gradient")
                );
                continue;
            }
            let one = |v: &[f64], w: usize| rows(v, batch, w, n, 0, len);
            let mut alone_in = vec![
                ("data", one(&x, cfg.input), vec![len, 1, cfg.input]),
                ("parameters", p.clone(), vec![cfg.params()]),
                ("state", pick_state(&h0), vec![k, 1, h]),
            ];
            let mut alone_heads = vec![
                (one(&head_y, width), vec![len, 1, width]),
                (pick_state(&head_h), vec![k, 1, h]),
            ];
            if cfg.lstm() {
                alone_in.push(("state_cell", pick_state(&c0), vec![k, 1, h]));
                alone_heads.push((pick_state(&head_c), vec![k, 1, h]));
            }
            let alone = run(&rt, &cfg, &alone_in, &alone_heads, DType::F64);
            let tol = 1e-12;
            assert_close(
                &one(&all.outs[0], width),
                &alone.outs[0],
                tol,
                &what("output"),
            );
            for o in 1..all.outs.len() {
                assert_close(
                    &pick_state(&all.outs[o]),
                    &alone.outs[o],
                    tol,
                    &what("state"),
                );
            }
            assert_close(
                &one(&all.grads["data"], cfg.input),
                &alone.grads["data"],
                tol,
                &what("data gradient"),
            );
            for s in ["state", "state_cell"]
                .iter()
                .filter(|s| all.grads.contains_key(**s))
            {
                assert_close(&pick_state(&all.grads[*s]), &alone.grads[*s], tol, &what(s));
            }
            for (a, b) in dparams.iter_mut().zip(&alone.grads["parameters"]) {
                *a += b;
            }
        }
        assert_close(
            &all.grads["parameters"],
            &dparams,
            1e-12,
            &format!("{}: parameter gradient", cfg.mode),
        );
    }
}

/// The float32 kernels compute what the float64 ones do, to float rounding.
#[test]
fn float32_agrees_with_float64() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(11);
    for mode in ["lstm", "gru", "rnn_relu"] {
        let cfg = Cfg {
            mode,
            layers: 2,
            dirs: 2,
            hidden: 6,
            input: 5,
        };
        let Case { inputs, heads } = cfg.draw(&mut rng, 7, 3, 0.4);
        let (a, b) = (
            run(&rt, &cfg, &inputs, &heads, DType::F32),
            run(&rt, &cfg, &inputs, &heads, DType::F64),
        );
        for (o, (x, y)) in a.outs.iter().zip(&b.outs).enumerate() {
            assert_close(x, y, 1e-5, &format!("{mode} output {o}"));
        }
        for (n, g) in &b.grads {
            assert_close(&a.grads[n], g, 1e-4, &format!("{mode} gradient of {n}"));
        }
    }
}

/// A node bound for training keeps its forward pass's trace for its backward node; the
/// imperative backward op, which has none, runs the forward pass again. Both give the same
/// gradients, bit for bit, in every mode. A forward pass outside training keeps nothing, so the
/// backward pass after it runs the forward pass again on the arrays as they are then, rather
/// than reading the trace of an earlier training pass on other data.
#[test]
fn a_kept_trace_gives_the_gradients_of_the_forward_pass_run_again() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(5);
    for (mode, layers, dirs, seq_len) in [
        ("lstm", 2, 1, false),
        ("gru", 2, 2, true),
        ("rnn_tanh", 3, 2, false),
        ("rnn_relu", 1, 1, true),
    ] {
        let cfg = Cfg {
            mode,
            layers,
            dirs,
            hidden: 5,
            input: 4,
        };
        let (steps, batch) = (6, 3);
        // Two sets of inputs (the second's heads unused), as arrays with the lengths last.
        let (first, second) = (
            cfg.draw(&mut rng, steps, batch, 0.8),
            cfg.draw(&mut rng, steps, batch, 0.8),
        );
        let arrays = |c: &Case| -> Vec<NDArray> {
            let mut v: Vec<NDArray> = c
                .inputs
                .iter()
                .map(|(_, x, s)| array(&rt, x, s, DType::F64))
                .collect();
            if seq_len {
                let lens: Vec<f64> = (0..batch).map(|n| (steps - n) as f64).collect();
                v.push(array(&rt, &lens, &[batch], DType::F64));
            }
            v
        };
        let heads: Vec<NDArray> = first
            .heads
            .iter()
            .map(|(x, s)| array(&rt, x, s, DType::F64))
            .collect();
        let shapes = &first.inputs;
        let (first, second) = (arrays(&first), arrays(&second));
        let names = cfg.input_names(seq_len);
        let sym = cfg.symbol(seq_len, cfg.attrs(seq_len)).unwrap();
        let given: HashMap<String, NDArray> = names
            .iter()
            .zip(&first)
            .map(|(n, a)| (n.to_string(), a.copy_to(CPU).unwrap()))
            .collect();
        let exec = bind(&rt, &sym, given, shapes.iter().map(|i| i.0));
        // The gradients of the forward pass run again on `inputs`, in input order.
        let again = |inputs: &[NDArray]| -> Vec<Vec<f64>> {
            let all: Vec<&NDArray> = heads.iter().chain(inputs).collect();
            let grads = invoke("_backward_RNN", &all, &cfg.attrs(seq_len), None).unwrap();
            grads.iter().map(floats).collect()
        };
        let bound = |exec: &Executor| -> Vec<Vec<f64>> {
            let g = exec.grad_dict();
            shapes.iter().map(|(n, _, _)| floats(&g[*n])).collect()
        };
        exec.forward(true).unwrap();
        exec.backward_with(&heads).unwrap();
        let want = again(&first);
        assert_eq!(bound(&exec), want[..shapes.len()], "{mode}: kept trace");
        // A training pass on the first arrays, then one outside training on the second.
        exec.forward(true).unwrap();
        let args = exec.arg_dict();
        for (n, a) in names.iter().zip(&second) {
            a.copy_into(&args[*n]).unwrap();
        }
        exec.forward(false).unwrap();
        exec.backward_with(&heads).unwrap();
        let want = again(&second);
        assert_eq!(
            bound(&exec),
            want[..shapes.len()],
            "{mode}: after inference"
        );
    }
}

/// A bound node keeps its weights packed between passes while its parameters are unchanged,
/// and packs them again when they change: after new parameters are copied into the bound
/// array, a pass gives the imperative op's outputs on them, bit for bit (the packed products
/// add in the same order), never those of the weights packed before. Float32, where the GEMM
/// packs; bound for inference (the node's state unpaired) and for training (paired).
#[test]
fn a_bound_node_packs_its_weights_again_when_they_change() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(11);
    let cfg = Cfg {
        mode: "lstm",
        layers: 2,
        dirs: 1,
        hidden: 48,
        input: 40,
    };
    let (steps, batch) = (7, 5);
    let (first, second) = (
        cfg.draw(&mut rng, steps, batch, 0.3),
        cfg.draw(&mut rng, steps, batch, 0.3),
    );
    let arrays = |c: &Case| -> Vec<NDArray> {
        c.inputs
            .iter()
            .map(|(_, x, s)| array(&rt, x, s, DType::F32))
            .collect()
    };
    let (first, second) = (arrays(&first), arrays(&second));
    let names = cfg.input_names(false);
    let imperative = |inputs: &[NDArray], train: bool| -> Vec<Vec<f64>> {
        let refs: Vec<&NDArray> = inputs.iter().collect();
        let attrs = cfg.attrs(false).with(IS_TRAIN, train);
        let outs = invoke("RNN", &refs, &attrs, None).unwrap();
        outs.iter().map(floats).collect()
    };
    for grads in [false, true] {
        let given: HashMap<String, NDArray> = names
            .iter()
            .zip(&first)
            .map(|(n, a)| (n.to_string(), a.copy_to(CPU).unwrap()))
            .collect();
        let sym = cfg.symbol(false, cfg.attrs(false)).unwrap();
        let exec = bind(
            &rt,
            &sym,
            given,
            ["parameters"].into_iter().filter(|_| grads),
        );
        let run = |train: bool| -> Vec<Vec<f64>> {
            exec.forward(train).unwrap();
            exec.outputs().iter().map(floats).collect()
        };
        let before = run(grads);
        same(
            &before,
            &imperative(&first, grads),
            &format!("gradients {grads}"),
        );
        same(
            &run(grads),
            &before,
            &format!("the same weights again, gradients {grads}"),
        );
        // New weights (and data) in place: the pass must not multiply by the old packs.
        let args = exec.arg_dict();
        for (n, a) in names.iter().zip(&second) {
            a.copy_into(&args[*n]).unwrap();
        }
        let after = run(grads);
        assert_ne!(after[0], before[0]);
        same(
            &after,
            &imperative(&second, grads),
            &format!("new weights, gradients {grads}"),
        );
    }
}

/// Asserts two sets of outputs equal bit for bit, saying how many elements differ.
fn same(got: &[Vec<f64>], want: &[Vec<f64>], what: &str) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let differ = g.iter().zip(w).filter(|(a, b)| a != b).count();
        assert!(
            g.len() == w.len() && differ == 0,
            "{what}: output {k}: {differ} of {} elements differ",
            w.len()
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: outputs");
}

/// Dropout between layers (`p`), in training: the output of every layer but the top one is
/// multiplied by a mask drawn from the device's generator before the next layer reads it. The
/// first layer's final state is untouched, the top output is not the undropped one, inference
/// ignores `p`, the same seed draws the same masks (on a node that keeps them for its backward
/// pass and on one bound without gradients alike), and the gradients are those of the network
/// with those masks fixed: central differences, reseeding before every pass.
#[test]
fn dropout_between_layers_trains_with_the_masks_it_drew() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(3);
    for (mode, dirs) in [("lstm", 1), ("gru", 2)] {
        let cfg = Cfg {
            mode,
            layers: 3,
            dirs,
            hidden: 4,
            input: 3,
        };
        let (steps, batch) = (5, 2);
        let Case { inputs, heads } = cfg.draw(&mut rng, steps, batch, 0.5);
        let bind = |p: f64, grads: bool| {
            let sym = cfg.symbol(false, cfg.attrs(false).with("p", p)).unwrap();
            let given: HashMap<String, NDArray> = inputs
                .iter()
                .map(|(n, v, s)| (n.to_string(), array(&rt, v, s, DType::F64)))
                .collect();
            bind(
                &rt,
                &sym,
                given,
                inputs.iter().map(|i| i.0).filter(|_| grads),
            )
        };
        let outs = |exec: &Executor, train: bool| -> Vec<Vec<f64>> {
            rt.seed(7).unwrap();
            exec.forward(train).unwrap();
            exec.outputs().iter().map(floats).collect()
        };
        let (plain, dropped, unkept) = (bind(0.0, true), bind(0.4, true), bind(0.4, false));
        let (want, got) = (outs(&plain, true), outs(&dropped, true));
        let first = dirs * batch * cfg.hidden;
        assert_eq!(got[1][..first], want[1][..first], "{mode}: layer 0's state");
        assert_ne!(got[0], want[0], "{mode}: the top output with dropout");
        assert_eq!(
            outs(&dropped, false),
            outs(&plain, false),
            "{mode}: inference"
        );
        assert_eq!(outs(&dropped, true), got, "{mode}: the same seed");
        assert_eq!(outs(&unkept, true), got, "{mode}: a node keeping nothing");

        // The loss the head gradients stand for: the sum of each output times its head.
        let loss = |exec: &Executor| -> f64 {
            outs(exec, true)
                .iter()
                .zip(&heads)
                .map(|(o, (h, _))| o.iter().zip(h).map(|(a, b)| a * b).sum::<f64>())
                .sum()
        };
        outs(&dropped, true);
        let head_arrays: Vec<NDArray> = heads
            .iter()
            .map(|(v, s)| array(&rt, v, s, DType::F64))
            .collect();
        dropped.backward_with(&head_arrays).unwrap();
        let grads = dropped.grad_dict();
        let args = dropped.arg_dict();
        let eps = 1e-6;
        for (name, values, shape) in &inputs {
            let analytic = floats(&grads[*name]);
            for _ in 0..6 {
                let i = rng.gen_range(0..values.len());
                let at = |delta: f64| {
                    let mut v = values.clone();
                    v[i] += delta;
                    array(&rt, &v, shape, DType::F64)
                        .copy_into(&args[*name])
                        .unwrap();
                    loss(&dropped)
                };
                let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
                at(0.0);
                assert!(
                    (numeric - analytic[i]).abs() <= 1e-6 * numeric.abs().max(1.0),
                    "{mode}: d loss / d {name}[{i}]: {} by the backward pass, {numeric} by \
                     central differences",
                    analytic[i]
                );
            }
        }
    }
}

/// Two RNN nodes with the same inputs and attributes are twins no backward node can tell
/// apart: without dropout each backward node runs its forward pass again (the gradients are
/// twice one node's); with dropout, whose masks differ between the twins, the backward pass
/// refuses rather than pair a node with its twin's masks.
#[test]
fn twin_nodes_keep_nothing_and_say_why_with_dropout() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let mut rng = StdRng::seed_from_u64(17);
    let cfg = Cfg {
        mode: "lstm",
        layers: 2,
        dirs: 1,
        hidden: 3,
        input: 2,
    };
    let Case { inputs, heads } = cfg.draw(&mut rng, 4, 2, 0.5);
    let grads = |p: f64, twins: bool| {
        let vars: Vec<Symbol> = cfg
            .input_names(false)
            .iter()
            .map(|n| Symbol::var(n))
            .collect();
        let refs: Vec<&Symbol> = vars.iter().collect();
        let attrs = cfg.attrs(false).with("p", p);
        let node = |name: &str| Symbol::op("RNN", name, &refs, attrs.clone()).unwrap();
        let sym = match twins {
            true => Symbol::group(&[node("a"), node("b")]),
            false => node("a"),
        };
        let given: HashMap<String, NDArray> = inputs
            .iter()
            .map(|(n, v, s)| (n.to_string(), array(&rt, v, s, DType::F64)))
            .collect();
        let exec = bind(&rt, &sym, given, inputs.iter().map(|i| i.0));
        let copies = if twins { 2 } else { 1 };
        let heads: Vec<NDArray> = (0..copies)
            .flat_map(|_| heads.iter())
            .map(|(v, s)| array(&rt, v, s, DType::F64))
            .collect();
        exec.forward(true).unwrap();
        exec.backward_with(&heads)?;
        let g = exec.grad_dict();
        inputs
            .iter()
            .map(|(n, _, _)| g[*n].wait_to_read().map(|_| floats(&g[*n])))
            .collect::<ndarray_ops::Result<Vec<Vec<f64>>>>()
    };
    let (one, two) = (grads(0.0, false).unwrap(), grads(0.0, true).unwrap());
    for (k, (a, b)) in one.iter().zip(&two).enumerate() {
        let doubled: Vec<f64> = a.iter().map(|x| 2.0 * x).collect();
        assert_close(b, &doubled, 1e-12, &format!("twins' gradient of input {k}"));
    }
    let e = grads(0.5, true)
        .expect_err("twins with dropout")
        .to_string();
    assert!(e.contains("p=0.5") && e.contains("bind"), "{e}");
}

/// Binding with the data's shape alone gives the parameters and states their shapes, and the
/// parameters' length is MXNet's (the fixture's cases check the layout itself).
#[test]
fn parameter_and_state_shapes_follow_from_the_data() {
    let rt = Runtime::with_engine(engine::EngineKind::Naive);
    let cfg = Cfg {
        mode: "gru",
        layers: 3,
        dirs: 2,
        hidden: 8,
        input: 5,
    };
    let sym = cfg.symbol(false, cfg.attrs(false)).unwrap();
    let shapes = HashMap::from([("data".to_string(), vec![6, 4, 5])]);
    let exec = Executor::simple_bind(&rt, CPU, &sym, &shapes).unwrap();
    let args = exec.arg_dict();
    // 3 gates * 8: layer 0 per direction 24 * (5 + 8 + 2), layers 1 and 2 24 * (16 + 8 + 2).
    assert_eq!(args["parameters"].shape(), [2 * 24 * 15 + 4 * 24 * 26]);
    assert_eq!(args["parameters"].shape(), [cfg.params()]);
    assert_eq!(args["state"].shape(), [6, 4, 8]);
    let outs = exec.outputs();
    assert_eq!(outs[0].shape(), [6, 4, 16]);
    assert_eq!(outs[1].shape(), [6, 4, 8]);
}

/// Bad input is told what was asked and what was found, at bind or when the pass runs, and
/// never panics.
#[test]
fn bad_input_is_refused_with_what_was_expected() {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    let cfg = Cfg {
        mode: "lstm",
        layers: 2,
        dirs: 1,
        hidden: 3,
        input: 2,
    };
    let bind = |attrs: Attrs, seq_len: bool, shapes: &[(&str, Vec<usize>)]| {
        let sym = cfg.symbol(seq_len, attrs)?;
        let shapes: HashMap<String, Vec<usize>> = shapes
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Executor::simple_bind(&rt, CPU, &sym, &shapes)
    };
    let data = ("data", vec![4, 2, 2]);
    let err = |r: ndarray_ops::Result<Executor>| match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    let e = err(bind(
        cfg.attrs(false),
        false,
        &[data.clone(), ("parameters", vec![10])],
    ));
    assert!(
        e.contains("parameters") && e.contains(&format!("[{}]", cfg.params())),
        "{e}"
    );
    let e = err(bind(
        cfg.attrs(false),
        false,
        &[data.clone(), ("state", vec![2, 3, 3])],
    ));
    assert!(e.contains("state") && e.contains("[2, 2, 3]"), "{e}");
    let e = err(bind(
        cfg.attrs(false).with("mode", "lstmp"),
        false,
        std::slice::from_ref(&data),
    ));
    assert!(e.contains("lstmp") && e.contains("gru"), "{e}");
    let e = err(bind(
        cfg.attrs(false).with("projection_size", 2),
        false,
        std::slice::from_ref(&data),
    ));
    assert!(e.contains("projection_size"), "{e}");
    let e = err(bind(cfg.attrs(false), false, &[("data", vec![4, 2])]));
    assert!(e.contains("3 dimensions"), "{e}");
    let e = err(bind(
        cfg.attrs(false).with("state_size", 0),
        false,
        std::slice::from_ref(&data),
    ));
    assert!(e.contains("state_size"), "{e}");

    // Dropout between layers in training needs the masks a bound node keeps: the backward op
    // called on its own in training refuses, naming p.
    let ins: Vec<NDArray> = [
        vec![4, 2, 2],
        vec![cfg.params()],
        vec![2, 2, 3],
        vec![2, 2, 3],
    ]
    .iter()
    .map(|s| rt.zeros(s, DType::F32, CPU).unwrap())
    .collect();
    let head = rt.zeros(&[4, 2, 3], DType::F32, CPU).unwrap();
    let all: Vec<&NDArray> = std::iter::once(&head).chain(&ins).collect();
    let attrs = Attrs::new()
        .with("mode", "lstm")
        .with("state_size", 3)
        .with("num_layers", 2)
        .with("p", 0.3)
        .with("__is_train__", true);
    let e = invoke("_backward_RNN", &all, &attrs, None)
        .and_then(|g| g[0].wait_to_read())
        .expect_err("an imperative backward pass with dropout in training")
        .to_string();
    assert!(e.contains("p=0.3") && e.contains("bind"), "{e}");
    // The failure poisoned the op's outputs, not the device's temp space and generator, which
    // every later RNN pass shares: a good pass still runs.
    let exec = bind(cfg.attrs(false), false, std::slice::from_ref(&data)).unwrap();
    exec.forward(true).unwrap();
    exec.outputs()[0].wait_to_read().unwrap();

    // A sequence length past the sequence fails the pass, naming the sample.
    let exec = bind(cfg.attrs(true), true, std::slice::from_ref(&data)).unwrap();
    rt.from_vec(vec![4.0f32, 5.0], &[2], CPU)
        .unwrap()
        .copy_into(&exec.arg_dict()["sequence_length"])
        .unwrap();
    let e = exec
        .forward(false)
        .and_then(|_| exec.outputs()[0].wait_to_read())
        .expect_err("length 5 of 4 steps")
        .to_string();
    assert!(
        e.contains("sequence_length[1] = 5") && e.contains("0..=4"),
        "{e}"
    );
}
