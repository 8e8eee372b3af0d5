//! Planning problems from MXNet's bound graphs with in-place sharing.

use std::time::Duration;

use ndarray_ops::plan::bound_graph_problem;
use storage::plan::{lower_bound, mxnet, solve, verify, SolverKind};

fn graph(nodes: &str, outputs: &str, shapes: &str) -> String {
    format!(r#"{{"nodes": [{nodes}], "outputs": [{outputs}], "entry_shapes": {{{shapes}}}}}"#)
}

#[test]
fn in_place_follows_the_registry_and_last_use() {
    let x = r#"{"op": null, "name": "x", "inputs": [], "outputs": [0]}"#;
    let w = r#"{"op": null, "name": "w", "inputs": [], "outputs": [1]}"#;
    let fc = r#"{"op": "FullyConnected", "name": "fc", "inputs": [0, 1], "outputs": [2]}"#;
    let relu = r#"{"op": "Activation", "name": "relu", "inputs": [2], "outputs": [3]}"#;
    let shapes = r#""0": [4, 8], "1": [8, 8], "2": [4, 8], "3": [4, 8], "4": [4, 8]"#;
    // The FC output's only reader is the relu: it shares.
    let g = bound_graph_problem(&graph(&[x, w, fc, relu].join(","), "3", shapes)).unwrap();
    assert_eq!((g.entries, g.inplace, g.problem.buffers.len()), (2, 1, 1));
    // A second reader after the relu keeps the FC output alive: no sharing.
    let later = r#"{"op": "elemwise_add", "name": "add", "inputs": [3, 2], "outputs": [4]}"#;
    let g = bound_graph_problem(&graph(&[x, w, fc, relu, later].join(","), "4", shapes)).unwrap();
    assert_eq!((g.entries, g.inplace, g.problem.buffers.len()), (3, 1, 2));
    // A relu straight on an argument never takes the argument's memory.
    let on_arg = r#"{"op": "Activation", "name": "relu", "inputs": [0], "outputs": [3]}"#;
    let g = bound_graph_problem(&graph(&[x, on_arg].join(","), "3", shapes)).unwrap();
    assert_eq!(g.inplace, 0);
    // An op the registry does not know gets no sharing.
    let unknown = r#"{"op": "_backward_Frobnicate", "name": "b", "inputs": [2], "outputs": [3]}"#;
    let g = bound_graph_problem(&graph(&[x, w, fc, unknown].join(","), "3", shapes)).unwrap();
    assert_eq!(g.inplace, 0);
    assert!(bound_graph_problem("{}").is_err());
}

#[test]
fn mxnet_graphs_plan_near_the_bound_and_below_mxnet() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-bound.json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 10);
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        let g = bound_graph_problem(&text).unwrap();
        let (liveness, _) = mxnet::liveness_problem(&text).unwrap();
        let plan = solve(&g.problem, SolverKind::Strong(Duration::from_millis(100)));
        verify(&g.problem, &plan).unwrap();
        let lb = lower_bound(&g.problem);
        assert!(
            plan.arena as f64 <= 1.02 * lb as f64,
            "{name}: {} over 1.02x the bound {lb}",
            plan.arena
        );
        assert!(
            lb <= lower_bound(&liveness),
            "{name}: in-place sharing raised the bound"
        );
        let mxnet = g.mxnet_bytes.unwrap();
        assert!(
            plan.arena < mxnet,
            "{name}: {} is not below MXNet's {mxnet}",
            plan.arena
        );
    }
}

/// MXNet 1.9.1's own totals (graphs/README.md): inference b1, inference b32, training b32.
const MXNET: [(&str, [u64; 3]); 5] = [
    ("mlp", [4_136, 132_352, 233_984]),
    ("resnet18_v1", [7_432_096, 237_831_168, 790_396_416]),
    ("resnet50_v1", [9_842_688, 314_840_064, 2_907_186_688]),
    ("mobilenet1.0", [6_631_424, 212_210_688, 1_394_294_272]),
    ("vgg16", [29_820_928, 954_269_696, 2_545_674_240]),
];

#[test]
fn every_model_plans_at_the_bound_below_nnvm_and_below_mxnet() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let mut ratios = vec![];
    for (model, mx) in MXNET {
        let sym = ndarray_ops::Symbol::from_json(
            &std::fs::read_to_string(format!("{dir}/{model}-symbol.json")).unwrap(),
        )
        .unwrap();
        let base: std::collections::HashMap<String, Vec<usize>> = serde_json::from_str(
            &std::fs::read_to_string(format!("{dir}/{model}-shapes.json")).unwrap(),
        )
        .unwrap();
        for (k, (train, batch)) in [(false, 1usize), (false, 32), (true, 32)]
            .into_iter()
            .enumerate()
        {
            let shapes = base
                .iter()
                .map(|(n, s)| {
                    (
                        n.clone(),
                        std::iter::once(batch)
                            .chain(s[1..].iter().copied())
                            .collect(),
                    )
                })
                .collect();
            let (gp, _) = ndarray_ops::plan::symbol_problem(&sym, &shapes, train).unwrap();
            let plan = solve(&gp.problem, SolverKind::Strong(Duration::from_millis(200)));
            verify(&gp.problem, &plan).unwrap();
            let (lb, nnvm) = (
                lower_bound(&gp.problem),
                solve(&gp.problem, SolverKind::NnvmBlocks(16)).arena,
            );
            let what = format!(
                "{model} {} b{batch}",
                if train { "training" } else { "inference" }
            );
            let ratio = plan.arena as f64 / lb as f64;
            assert!(ratio <= 1.05, "{what}: {ratio} over 1.05x the bound");
            assert!(plan.arena <= nnvm, "{what}: worse than NNVM's block plan");
            assert!(
                plan.arena < mx[k],
                "{what}: {} not below MXNet's {}",
                plan.arena,
                mx[k]
            );
            ratios.push(ratio);
        }
    }
    let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    assert!(geo <= 1.02, "geometric mean {geo}");
}

/// `z = p + sum(q)` with `p` and `q` both large products of `x`: the given (depth-first) order
/// keeps `p` alive while `q` is made and reduced; the memory-aware order reduces `q` first.
#[test]
fn memory_aware_reordering_lowers_the_peak_where_the_order_allows() {
    use ndarray_ops::plan::{graph_problem, reorder_for_memory, symbol_desc};
    use ndarray_ops::{Attrs, Symbol};
    let x = Symbol::var("x");
    let fc = |name: &str| {
        Symbol::op(
            "FullyConnected",
            name,
            &[&x, &Symbol::var(&format!("{name}_weight"))],
            Attrs::new().with("num_hidden", 4096).with("no_bias", true),
        )
        .unwrap()
    };
    let (p, q) = (fc("p"), fc("q"));
    let s = Symbol::op("sum", "s", &[&q], Attrs::new()).unwrap();
    let z = Symbol::op("broadcast_add", "z", &[&p, &s], Attrs::new()).unwrap();
    let shapes = std::collections::HashMap::from([("x".to_string(), vec![1, 8])]);
    let desc = symbol_desc(&z, &shapes, false).unwrap();
    let given = lower_bound(&graph_problem(&desc).unwrap().problem);
    let re = reorder_for_memory(&desc);
    // The same nodes, each after its inputs.
    assert_eq!(re.nodes.len(), desc.nodes.len());
    let mut done = std::collections::HashSet::new();
    for (_, name, ins, outs) in &re.nodes {
        for e in ins {
            assert!(done.contains(e), "{name} runs before its input {e}");
        }
        done.extend(outs.iter().copied());
    }
    let reordered = lower_bound(&graph_problem(&re).unwrap().problem);
    assert!(given >= 2 * 4096 * 4, "given order: {given}");
    assert!(
        reordered < given * 3 / 4,
        "reordered {reordered} vs given {given}"
    );
}

/// Hostile dumps: an entry id of 10^12 or `usize::MAX` is renumbered, not used to size a table;
/// an input no node makes, and sizes whose product or sum passes 2^64 bytes, are errors naming
/// the entry, in both readers.
#[test]
fn bound_graph_dumps_with_huge_ids_or_sizes_are_planned_or_refused_never_aborted() {
    let x = r#"{"op": null, "name": "x", "inputs": [], "outputs": [0]}"#;
    for id in ["1000000000000", &usize::MAX.to_string()] {
        let relu =
            format!(r#"{{"op": "Activation", "name": "relu", "inputs": [0], "outputs": [{id}]}}"#);
        let shapes = format!(r#""0": [4, 8], "{id}": [4, 8]"#);
        let g = bound_graph_problem(&graph(&[x, &relu].join(","), id, &shapes)).unwrap();
        assert_eq!(g.problem.buffers.len(), 1, "id {id}");
        assert_eq!(g.problem.buffers[0].size, 128);
        let (p, _) = mxnet::liveness_problem(&graph(&[x, &relu].join(","), id, &shapes)).unwrap();
        assert_eq!(p.buffers.len(), 1);
    }
    let orphan = r#"{"op": "Activation", "name": "relu", "inputs": [7], "outputs": [1]}"#;
    let shapes = r#""0": [4, 8], "1": [4, 8]"#;
    let err = bound_graph_problem(&graph(&[x, orphan].join(","), "1", shapes))
        .err()
        .expect("an input no node makes is refused")
        .to_string();
    assert!(err.contains("entry 7") && err.contains("relu"), "{err}");
    let relu = r#"{"op": "Activation", "name": "relu", "inputs": [0], "outputs": [1]}"#;
    // 2^62 elements of four bytes: the product passes 2^64 (it used to wrap to 0 and plan).
    let huge = r#""0": [4, 8], "1": [4611686018427387904]"#;
    let err = bound_graph_problem(&graph(&[x, relu].join(","), "1", huge))
        .err()
        .expect("an entry over 2^64 bytes is refused")
        .to_string();
    assert!(err.contains("entry 1"), "{err}");
    let err = mxnet::liveness_problem(&graph(&[x, relu].join(","), "1", huge))
        .expect_err("an entry over 2^64 bytes is refused")
        .to_string();
    assert!(err.contains("entry 1"), "{err}");
    // Entries of 2^63 bytes each fit alone but not together.
    let two = r#"{"op": "Activation", "name": "relu2", "inputs": [1], "outputs": [2]}"#;
    let big = r#""0": [4, 8], "1": [1152921504606846976, 2], "2": [1152921504606846976, 2], "3": [1152921504606846976, 2]"#;
    let three = r#"{"op": "Activation", "name": "relu3", "inputs": [2], "outputs": [3]}"#;
    let err = bound_graph_problem(&graph(&[x, relu, two, three].join(","), "3", big))
        .err()
        .expect("sizes adding up past 2^64 bytes are refused")
        .to_string();
    assert!(err.contains("2^64"), "{err}");
}
