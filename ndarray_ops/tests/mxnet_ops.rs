//! Every op, one at a time, against MXNet 1.9.1 in float64: `tests/data/mxnet/ops64.*`, made by
//! `tools/mxnet_op_cases.py`, holds about a hundred cases (an op, its attributes as MXNet's JSON
//! writes them, inputs), each with MXNet's outputs and, for a random head gradient, MXNet's
//! gradient of every input that has one, and the auxiliary states after the pass. Each case is
//! bound here as a one-node symbol and run forward and backward; everything must agree to
//! 1e-12 of its largest magnitude. In float64 nothing hides in rounding: a different default, a
//! different convention at a border, or a different order of operations that matters all show.

use std::collections::HashMap;
use std::sync::Arc;

mod common;

use common::{floats, relative_error};
use ndarray_ops::ndfile;
use ndarray_ops::{Attrs, BindOptions, DType, Executor, GradReq, NDArray, Runtime, Symbol};
use storage::Context;

const CPU: Context = Context::cpu(0);
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mxnet");
const TOL: f64 = 1e-12;

/// Cases where MXNet itself computes in float32 inside a float64 op, so it can only be met to
/// float rounding: (case, tolerance, why).
const FLOAT_INSIDE: &[(&str, f64, &str)] = &[
    (
        "leaky",
        2e-7,
        "MXNet rounds LeakyReLU's leaky float64 output to float precision (x * 0.1 comes back as \
         0.10000001 * x for some x); ours is the float64 product",
    ),
    (
        "math_degrees",
        1e-7,
        "MXNet's factor is 180 / pi in float (57.2957763671875); ours 180 / pi in double",
    ),
    (
        "math_radians",
        1e-7,
        "MXNet's factor is pi / 180 in float; ours in double",
    ),
    (
        "prelu",
        1e-7,
        "MXNet rounds prelu's products below zero to float precision, as leaky's",
    ),
    (
        "prelu_shared",
        1e-7,
        "MXNet rounds prelu's products below zero to float precision, as leaky's",
    ),
    (
        "rnn_relu",
        1e-7,
        "MXNet's float64 rnn_relu rounds every step's output to float (its outputs are all exact \
         float32 values; rnn_tanh, lstm and gru match to 1e-15); ours is float64 throughout",
    ),
    (
        "selu",
        1e-7,
        "MXNet's SELU constants are floats; ours doubles",
    ),
    (
        "gelu",
        1e-7,
        "MXNet computes GELU's constants (1 / sqrt 2, 1 / sqrt(2 pi)) in float",
    ),
    (
        "math_erf",
        1e-7,
        "MXNet's erf derivative uses 2 / sqrt(pi) in float; ours in double",
    ),
];

/// Ops whose backward starts from their own loss, not from a head gradient.
const LOSSES: &[&str] = &[
    "SoftmaxOutput",
    "LinearRegressionOutput",
    "LogisticRegressionOutput",
    "MAERegressionOutput",
    "MakeLoss",
    "make_loss",
];

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    op: String,
    attrs: HashMap<String, String>,
    inputs: Vec<String>,
    aux: Vec<String>,
    grads: Vec<String>,
    outputs: usize,
    train: bool,
    /// "numeric" where MXNet's gradient is wrong and the fixture holds central differences of
    /// MXNet's forward instead (see `MXNET_GRAD_WRONG` in the script); "derived" where it holds
    /// the derivative applied to MXNet's forward output (`MXNET_GRAD_DERIVED`).
    grad_source: String,
}

/// Cases MXNet can only run in float32 (its InstanceNorm) agree to float rounding.
const FLOAT32_TOL: f64 = 2e-6;

/// How close central differences (step 1e-6, in float64) come to a gradient.
const NUMERIC_TOL: f64 = 1e-7;

/// The largest difference relative to the largest magnitude of `want` (where `want` is all
/// zeros, `got` must be too).
fn compare_arrays(got: &NDArray, want: &NDArray) -> Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, MXNet's {:?}",
            got.shape(),
            want.shape()
        ));
    }
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {}, MXNet's {}", got.dtype(), want.dtype()));
    }
    Ok(relative_error(&floats(got), &floats(want), 0.0).0)
}

/// Runs one case; the arrays that differ from MXNet's, or why it could not run.
fn run_case(rt: &Arc<Runtime>, c: &Case, f: &HashMap<String, NDArray>) -> Vec<String> {
    let attrs = c.attrs.iter().fold(Attrs::new(), |a, (k, v)| a.with(k, v));
    let vars: Vec<Symbol> = c.inputs.iter().map(|n| Symbol::var(n)).collect();
    let refs: Vec<&Symbol> = vars.iter().collect();
    let sym = match Symbol::op(&c.op, "node", &refs, attrs) {
        Ok(s) => s,
        Err(e) => return vec![format!("symbol: {e}")],
    };
    let given: HashMap<String, NDArray> = c
        .inputs
        .iter()
        .map(|n| (n.clone(), f[&format!("{}/in/{n}", c.name)].clone()))
        .collect();
    let opts = BindOptions {
        grad_req: c
            .grads
            .iter()
            .map(|n| (n.clone(), GradReq::Write))
            .collect(),
        ..BindOptions::default()
    };
    let exec = match Executor::bind_with_options(rt, CPU, &sym, &HashMap::new(), given, &opts) {
        Ok(e) => e,
        Err(e) => return vec![format!("bind: {e}")],
    };
    let float32 = c
        .inputs
        .first()
        .is_some_and(|n| f[&format!("{}/in/{n}", c.name)].dtype() == DType::F32);
    let tol = FLOAT_INSIDE
        .iter()
        .find(|k| k.0 == c.name)
        .map_or(if float32 { FLOAT32_TOL } else { TOL }, |k| k.1);
    let mut bad = Vec::new();
    let mut compare =
        |what: String, got: &NDArray, key: String, tol: f64| match compare_arrays(got, &f[&key]) {
            Ok(e) if e <= tol => {}
            Ok(e) => bad.push(format!("{what}: {e:e}")),
            Err(e) => bad.push(format!("{what}: {e}")),
        };
    if let Err(e) = exec.forward(c.train) {
        return vec![format!("forward: {e}")];
    }
    let outs = exec.outputs();
    if outs.len() != c.outputs {
        return vec![format!("{} outputs, MXNet's {}", outs.len(), c.outputs)];
    }
    for (k, o) in outs.iter().enumerate() {
        compare(format!("output {k}"), o, format!("{}/out/{k}", c.name), tol);
    }
    if !c.grads.is_empty() {
        let pass = match LOSSES.contains(&c.op.as_str()) {
            true => exec.backward(),
            false => {
                let heads: Vec<NDArray> = (0..c.outputs)
                    .map(|k| f[&format!("{}/head/{k}", c.name)].clone())
                    .collect();
                exec.backward_with(&heads)
            }
        };
        if let Err(e) = pass {
            return vec![format!("backward: {e}")];
        }
        let grads = exec.grad_dict();
        let grad_tol = match c.grad_source.as_str() {
            "numeric" => NUMERIC_TOL,
            _ => tol,
        };
        for n in &c.grads {
            compare(
                format!("gradient of {n}"),
                &grads[n],
                format!("{}/grad/{n}", c.name),
                grad_tol,
            );
        }
    }
    let aux = exec.aux_dict();
    for n in &c.aux {
        compare(
            format!("{n} after"),
            &aux[n],
            format!("{}/aux_after/{n}", c.name),
            tol,
        );
    }
    bad
}

#[test]
fn every_op_computes_what_mxnet_computes_in_float64() {
    let rt = common::threaded_runtime(0);
    let cases: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/ops64.json")).unwrap())
            .unwrap();
    let f = ndfile::load(format!("{DIR}/ops64.nd"), &rt, CPU)
        .unwrap()
        .into_named()
        .unwrap();
    assert!(cases.len() >= 90, "{} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let bad = run_case(&rt, c, &f);
            (!bad.is_empty()).then(|| format!("{} ({}): {}", c.name, c.op, bad.join("; ")))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from MXNet:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
