//! Memory plan solvers: every plan verifies, none beats the lower bound, the strong solver never
//! loses to greedy-by-size; and on the liveness of MXNet's own graphs.

use std::time::Duration;

use proptest::prelude::*;
use storage::plan::{lower_bound, solve, verify, Buffer, Plan, PlanError, Problem, SolverKind};

fn kinds() -> Vec<SolverKind> {
    vec![
        SolverKind::NnvmBlocks(0),
        SolverKind::NnvmBlocks(16),
        SolverKind::NnvmAuto,
        SolverKind::GreedyBySize,
        SolverKind::BestFitHeap,
        SolverKind::Strong(Duration::from_millis(20)),
    ]
}

fn buffer() -> impl Strategy<Value = Buffer> {
    (
        1u64..20_000,
        prop_oneof![Just(0u64), Just(64), Just(256)],
        0u32..40,
        0u32..15,
    )
        .prop_map(|(size, align, start, len)| Buffer {
            size,
            start,
            end: start + len,
            align,
            name: String::new(),
        })
}

fn problem() -> impl Strategy<Value = Problem> {
    (prop::collection::vec(buffer(), 1..60), any::<bool>()).prop_map(|(mut buffers, grouped)| {
        let mut groups = vec![];
        if grouped && buffers.len() >= 4 {
            // Members after the first need sizes that keep the next one aligned.
            for b in buffers.iter_mut().take(3) {
                b.size = b.size.next_multiple_of(256);
                b.align = 0;
            }
            buffers[0].align = 256;
            groups.push(vec![0, 1, 2]);
        }
        Problem { buffers, groups }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_solver_gives_a_valid_plan_no_smaller_than_the_bound(p in problem()) {
        let lb = lower_bound(&p);
        let mut greedy = 0;
        let mut strong = 0;
        for k in kinds() {
            let plan = solve(&p, k);
            if let Err(e) = verify(&p, &plan) {
                return Err(TestCaseError::fail(format!("{}: {e}", plan.solver)));
            }
            prop_assert!(plan.arena >= lb, "{} beat the lower bound", plan.solver);
            match k {
                SolverKind::GreedyBySize => greedy = plan.arena,
                SolverKind::Strong(_) => strong = plan.arena,
                SolverKind::NnvmBlocks(0) => prop_assert_eq!(plan.arena, p.total_bytes() + padding(&p, &plan)),
                _ => {}
            }
        }
        prop_assert!(strong <= greedy, "strong {strong} > greedy {greedy}");
    }
}

/// Alignment padding inside a no-reuse plan (blocks laid end to end).
fn padding(p: &Problem, plan: &Plan) -> u64 {
    plan.arena - p.total_bytes()
}

#[test]
fn the_verifier_rejects_every_kind_of_bad_plan() {
    let b = |size, start, end| Buffer {
        size,
        start,
        end,
        align: 0,
        name: String::new(),
    };
    let p = Problem {
        buffers: vec![b(100, 0, 2), b(100, 1, 3), b(50, 3, 4)],
        groups: vec![],
    };
    let ok = Plan {
        offsets: vec![0, 100, 0],
        arena: 200,
        solver: "hand".into(),
    };
    verify(&p, &ok).unwrap();
    let overlap = Plan {
        offsets: vec![0, 50, 0],
        ..ok.clone()
    };
    assert!(
        matches!(
            verify(&p, &overlap),
            Err(PlanError::Overlap { a: 0, b: 1, .. })
        ),
        "{:?}",
        verify(&p, &overlap)
    );
    let late = Plan {
        offsets: vec![0, 100, 120],
        ..ok.clone()
    };
    assert!(matches!(verify(&p, &late), Err(PlanError::Overlap { .. })));
    let outside = Plan {
        arena: 150,
        ..ok.clone()
    };
    assert!(matches!(
        verify(&p, &outside),
        Err(PlanError::OutsideArena { buffer: 1, .. })
    ));
    let mut aligned = p.clone();
    aligned.buffers[1].align = 64;
    assert!(matches!(
        verify(&aligned, &ok),
        Err(PlanError::Misaligned {
            buffer: 1,
            offset: 100,
            align: 64
        })
    ));
    let mut grouped = p.clone();
    grouped.groups = vec![vec![0, 1]];
    verify(&grouped, &ok).unwrap();
    grouped.groups = vec![vec![1, 0]];
    assert!(matches!(
        verify(&grouped, &ok),
        Err(PlanError::GroupBroken { .. })
    ));
    let bad = Problem {
        buffers: vec![b(1, 5, 2)],
        groups: vec![],
    };
    assert!(matches!(bad.validate(), Err(PlanError::Invalid(_))));
    assert_eq!(lower_bound(&p), 200);
}

#[test]
fn problems_and_plans_round_trip_through_json() {
    let p = Problem {
        buffers: vec![Buffer {
            size: 10,
            start: 0,
            end: 1,
            align: 64,
            name: "conv0".into(),
        }],
        groups: vec![],
    };
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Problem>(&text).unwrap(), p);
    let plan = solve(&p, SolverKind::GreedyBySize);
    assert_eq!(
        serde_json::from_str::<Plan>(&serde_json::to_string(&plan).unwrap()).unwrap(),
        plan
    );
}

fn liveness(path: &std::path::Path) -> (Problem, u64) {
    let (p, mxnet) =
        storage::plan::mxnet::liveness_problem(&std::fs::read_to_string(path).unwrap()).unwrap();
    (p, mxnet.unwrap())
}

#[test]
fn on_mxnet_graphs_the_strong_solver_is_near_the_bound() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-bound.json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 10);
    for f in files {
        let (p, mxnet) = liveness(&f);
        let lb = lower_bound(&p);
        let nnvm = solve(&p, SolverKind::NnvmAuto);
        let strong = solve(&p, SolverKind::Strong(Duration::from_millis(200)));
        verify(&p, &nnvm).unwrap();
        verify(&p, &strong).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        println!(
            "{name:<40} bound {lb:>12}  strong {:>12} ({:.4}x)  nnvm_auto {:>12} ({:.3}x)  mxnet (with in-place) {mxnet:>12}",
            strong.arena,
            strong.arena as f64 / lb as f64,
            nnvm.arena,
            nnvm.arena as f64 / lb as f64
        );
        assert!(
            strong.arena <= nnvm.arena,
            "{name}: strong worse than NNVM's search"
        );
        assert!(
            (strong.arena as f64) <= 1.02 * lb as f64,
            "{name}: strong {} is over 1.02x the bound {lb}",
            strong.arena
        );
    }
}
