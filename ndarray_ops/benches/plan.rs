//! Planning time: ResNet-50's training graph (batch 32 and 1) and a generated training graph of
//! about 100,000 nodes, from the symbol to a verified plan (graph side, in-place pass, strong
//! solver with the `plan` tool's 500 ms budget).
//!
//! `cargo bench -p ndarray_ops --bench plan`

use std::collections::HashMap;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ndarray_ops::plan::{generated_residual_mlp, symbol_problem};
use ndarray_ops::Symbol;
use storage::plan::{solve, verify, SolverKind};

fn plan(sym: &Symbol, shapes: &HashMap<String, Vec<usize>>) -> u64 {
    let (gp, _) = symbol_problem(sym, shapes, true).expect("plannable");
    let p = solve(&gp.problem, SolverKind::Strong(Duration::from_millis(500)));
    verify(&gp.problem, &p).expect("valid plan");
    p.arena
}

fn benches(c: &mut Criterion) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let text = std::fs::read_to_string(format!("{dir}/resnet50_v1-symbol.json")).expect("graph");
    let resnet = Symbol::from_json(&text).expect("loads");
    let mut g = c.benchmark_group("plan");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for batch in [32, 1] {
        let shapes = HashMap::from([("data".to_string(), vec![batch, 3, 224, 224])]);
        g.bench_function(format!("resnet50_training_b{batch}"), |b| {
            b.iter(|| plan(&resnet, &shapes))
        });
    }
    let big = generated_residual_mlp(8300).expect("builds");
    let shapes = HashMap::from([("data".to_string(), vec![64, 256])]);
    g.bench_function("generated_100k_nodes_training", |b| {
        b.iter(|| plan(&big, &shapes))
    });
    g.finish();
}

criterion_group!(plan_benches, benches);
criterion_main!(plan_benches);
