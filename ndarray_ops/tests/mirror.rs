//! Recomputation during backward: gradients, outputs and BatchNorm's moving statistics equal
//! the graph bound without it bit for bit, while the planned memory falls; budgets that cannot
//! be met are refused by name.

mod common;

use std::collections::HashMap;

use ndarray_ops::symbol::mirror::Mirror;
use ndarray_ops::{BindOptions, Executor, GradReq};
use ndarray_ops::{Runtime, Symbol};
use storage::Context;

use common::{sorted, watchdog};

/// One training step of `sym` bound under `mirror`: every argument but `data` and the label
/// gets a gradient; arguments and auxiliary states are filled from a fixed pattern. Returns
/// the outputs, gradients and auxiliary states after the step by name, the executor's lower
/// bound and how many nodes it recomputes.
/// What one step gave: outputs, gradients and auxiliary states by name; the bound planned;
/// the recomputation chosen (nodes, and the cut point its segments end at).
type Stepped = (Vec<(String, Vec<f32>)>, u64, usize, usize);

fn step(sym: &Symbol, data: &[usize], mirror: Mirror) -> Stepped {
    let rt = Runtime::with_engine(engine::EngineKind::ThreadedPerDevice);
    rt.seed(7).unwrap();
    let shapes: HashMap<String, Vec<usize>> = [("data".to_string(), data.to_vec())].into();
    let grad_req: HashMap<String, GradReq> = sym
        .list_arguments()
        .into_iter()
        .filter(|a| a != "data" && !a.ends_with("label"))
        .map(|a| (a, GradReq::Write))
        .collect();
    let opts = BindOptions {
        grad_req,
        mirror: Some(mirror),
        ..BindOptions::default()
    };
    let exec =
        Executor::bind_with_options(&rt, Context::cpu(0), sym, &shapes, HashMap::new(), &opts)
            .unwrap();
    let mut names: Vec<(String, ndarray_ops::NDArray)> = exec.arg_dict().into_iter().collect();
    names.extend(exec.aux_dict());
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, (name, a)) in names.iter().enumerate() {
        let n = a.size();
        let v: Vec<f32> = match name.ends_with("label") || name == "data" {
            // Labels, and data that may be token ids: small whole numbers.
            true => (0..n).map(|i| ((i * 7 + k) % 10) as f32).collect(),
            false if name.ends_with("_var") => vec![1.0; n],
            false => (0..n)
                .map(|i| (((i * 2654435761 + k * 97) % 2001) as f32 / 1000.0 - 1.0) * 0.3)
                .collect(),
        };
        rt.from_vec(v, a.shape(), Context::cpu(0))
            .unwrap()
            .copy_into(a)
            .unwrap();
    }
    exec.forward(true).unwrap();
    exec.backward().unwrap();
    let mut all: Vec<(String, Vec<f32>)> = exec
        .outputs()
        .iter()
        .enumerate()
        .map(|(i, o)| (format!("output{i}"), o.to_vec::<f32>().unwrap()))
        .collect();
    all.extend(
        sorted(exec.grad_dict())
            .into_iter()
            .map(|(k, v)| (format!("grad:{k}"), v)),
    );
    all.extend(
        sorted(exec.aux_dict())
            .into_iter()
            .map(|(k, v)| (format!("aux:{k}"), v)),
    );
    let report = exec.memory_report();
    let (recomputed, prefix) = exec
        .mirror_report()
        .map_or((0, 0), |r| (r.recomputed_nodes, r.segments_end_at_cut));
    (all, report.lower_bound_bytes, recomputed, prefix)
}

fn model(file: &str) -> Symbol {
    let path = format!("{}/../graphs/{file}", env!("CARGO_MANIFEST_DIR"));
    Symbol::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every policy's step equals the unmirrored step exactly; where recomputation can lower the
/// memory (`saves`), the recomputing ones plan less; budgets of the given `fractions` of the
/// unmirrored bound are tried too. Returns how many policies chose a prefix of segments (see
/// `MirrorReport::segments_end_at_cut`).
fn check(sym: Symbol, data: Vec<usize>, saves: bool, fractions: &'static [f64]) -> usize {
    watchdog("mirror", 300, move || {
        let (want, bound, none, _) = step(&sym, &data, Mirror::Off);
        assert_eq!(none, 0);
        let (got, _, recomputed, _) = step(&sym, &data, Mirror::Cheap);
        assert!(recomputed > 0, "cheap: nothing recomputed");
        same(&got, &want, Mirror::Cheap);
        let mut policies = vec![Mirror::Auto(0.3), Mirror::Auto(10.0)];
        if saves {
            policies.push(Mirror::Budget(bound - 1));
            policies.extend(
                fractions
                    .iter()
                    .map(|f| Mirror::Budget((bound as f64 * f) as u64)),
            );
        }
        let mut prefixes = 0;
        for policy in policies {
            let (got, mirrored, recomputed, prefix) = step(&sym, &data, policy);
            prefixes += usize::from(prefix > 0);
            // `auto` within 30% of a step may find nothing worth it on a small graph; the others
            // must recompute where that can help, and whatever recomputes plans less.
            if saves && policy != Mirror::Auto(0.3) {
                assert!(recomputed > 0, "{policy}: nothing recomputed");
            }
            match recomputed {
                0 => assert_eq!(mirrored, bound, "{policy}"),
                _ => assert!(
                    mirrored < bound,
                    "{policy}: bound {mirrored} not below {bound}"
                ),
            }
            if !saves {
                assert_eq!(recomputed, 0, "{policy}: recomputes where nothing helps");
            }
            if let Mirror::Budget(b) = policy {
                assert!(mirrored <= b, "{policy}: bound {mirrored} over the budget");
            }
            same(&got, &want, policy);
        }
        prefixes
    })
}

/// Outputs, gradients and auxiliary states equal bit for bit.
fn same(got: &[(String, Vec<f32>)], want: &[(String, Vec<f32>)], policy: Mirror) {
    assert_eq!(got.len(), want.len());
    for ((name, g), (_, w)) in got.iter().zip(want) {
        let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{policy}: {name} differs from the unmirrored step");
    }
}

#[test]
fn resnet18_steps_equal_with_recomputation() {
    let prefixes = check(
        model("resnet18_v1-symbol.json"),
        vec![2, 3, 32, 32],
        true,
        &[0.65],
    );
    assert!(prefixes > 0, "no policy recomputed a prefix of segments");
}

#[test]
fn resnet50_steps_equal_with_recomputation() {
    let prefixes = check(
        model("resnet50_v1-symbol.json"),
        vec![2, 3, 32, 32],
        true,
        &[0.6],
    );
    assert!(prefixes > 0, "no policy recomputed a prefix of segments");
}

#[test]
fn mobilenet_steps_equal_with_recomputation() {
    check(
        model("mobilenet1.0-symbol.json"),
        vec![2, 3, 32, 32],
        true,
        &[],
    );
}

#[test]
fn vgg16_steps_equal_with_recomputation() {
    check(model("vgg16-symbol.json"), vec![2, 3, 32, 32], true, &[]);
}

/// A Gluon LSTM language model, unrolled from elementwise ops and fully connected layers. Its
/// cells carry two entries from step to step (no single-entry cut to checkpoint) and the
/// gates' inputs are wider than their outputs, so no budget lowers its memory; MXNet's rule
/// still recomputes its cheap nodes.
#[test]
fn lstm_language_model_steps_equal_with_recomputation() {
    let path = format!(
        "{}/tests/data/mxnet/lm-symbol.json",
        env!("CARGO_MANIFEST_DIR")
    );
    check(Symbol::load(path).unwrap(), vec![5, 4], false, &[]);
}

/// The MLP keeps nothing recomputation could drop (each layer's input is what its backward
/// node reads): it binds unchanged.
#[test]
fn mlp_steps_equal_with_recomputation() {
    check(model("mlp-symbol.json"), vec![8, 784], false, &[]);
}

#[test]
fn a_budget_below_what_recomputation_reaches_is_refused() {
    let sym = model("resnet18_v1-symbol.json");
    let rt = Runtime::with_engine(engine::EngineKind::Naive);
    let shapes: HashMap<String, Vec<usize>> = [("data".to_string(), vec![2, 3, 32, 32])].into();
    let opts = BindOptions {
        grad_req: [("resnetv10_conv0_weight".to_string(), GradReq::Write)].into(),
        mirror: Some(Mirror::Budget(1000)),
        ..BindOptions::default()
    };
    let err =
        Executor::bind_with_options(&rt, Context::cpu(0), &sym, &shapes, HashMap::new(), &opts)
            .err()
            .expect("a 1000-byte budget cannot be met")
            .to_string();
    assert!(err.contains("budget of 1000 bytes"), "{err}");
    assert!(err.contains("without"), "{err}");
}

#[test]
fn mirror_settings_parse_and_bad_ones_are_refused() {
    assert_eq!("off".parse::<Mirror>(), Ok(Mirror::Off));
    assert_eq!("auto".parse::<Mirror>(), Ok(Mirror::Auto(0.3)));
    assert_eq!("auto:0.5".parse::<Mirror>(), Ok(Mirror::Auto(0.5)));
    assert_eq!("800M".parse::<Mirror>(), Ok(Mirror::Budget(800 << 20)));
    assert_eq!("1.5GB".parse::<Mirror>(), Ok(Mirror::Budget(3 << 29)));
    assert_eq!("4096".parse::<Mirror>(), Ok(Mirror::Budget(4096)));
    assert_eq!("cheap".parse::<Mirror>(), Ok(Mirror::Cheap));
    for bad in ["", "fast", "auto:-1", "-5M", "12Q"] {
        let err = bad.parse::<Mirror>().unwrap_err();
        assert!(err.contains("not `off`, `auto`"), "{bad:?}: {err}");
    }
}

/// Dropout is never recomputed: its output (and so its mask) is the forward pass's, while the
/// activations around it are recomputed; the step equals the unmirrored one on equally seeded
/// runtimes.
#[test]
fn dropout_keeps_its_mask_under_recomputation() {
    let data = Symbol::var("data");
    let mut x = data;
    for k in 0..3 {
        let attrs = |a: &[(&str, &str)]| {
            a.iter()
                .fold(ndarray_ops::Attrs::new(), |m, (key, v)| m.with(key, v))
        };
        let fc = Symbol::op(
            "FullyConnected",
            &format!("fc{k}"),
            &[
                &x,
                &Symbol::var(&format!("fc{k}_weight")),
                &Symbol::var(&format!("fc{k}_bias")),
            ],
            attrs(&[("num_hidden", "64")]),
        )
        .unwrap();
        let act = Symbol::op(
            "Activation",
            &format!("relu{k}"),
            &[&fc],
            attrs(&[("act_type", "relu")]),
        )
        .unwrap();
        x = Symbol::op(
            "Dropout",
            &format!("drop{k}"),
            &[&act],
            attrs(&[("p", "0.5")]),
        )
        .unwrap();
    }
    let label = Symbol::var("sm_label");
    let sym = Symbol::op(
        "SoftmaxOutput",
        "sm",
        &[&x, &label],
        ndarray_ops::Attrs::new(),
    )
    .unwrap();
    let (want, _, _, _) = step(&sym, &[16, 32], Mirror::Off);
    let (got, _, recomputed, _) = step(&sym, &[16, 32], Mirror::Cheap);
    assert!(recomputed > 0, "the activations are recomputed");
    same(&got, &want, Mirror::Cheap);
}
