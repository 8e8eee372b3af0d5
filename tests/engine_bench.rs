//! The engine bench's `--json` report keeps its schema (how progress on the engine is measured),
//! and its command line refuses names it does not know instead of measuring nothing.

#[allow(dead_code)]
#[path = "../examples/engine_bench.rs"]
mod engine_bench;

#[path = "../engine/tests/common/mod.rs"]
mod common;

fn args(argv: &[&str]) -> Result<engine_bench::Args, String> {
    engine_bench::parse_args(argv.iter().map(|a| a.to_string()))
}

/// Fails unless each of `keys` in `v` holds a positive number (`whose` prefixes the message).
fn assert_positive(v: &serde_json::Value, whose: &str, keys: &[&str]) {
    for key in keys {
        let x = v[key].as_f64();
        assert!(x.is_some_and(|x| x > 0.0), "{whose}{key}: {:?}", v[key]);
    }
}

#[test]
fn the_report_has_every_key_of_the_schema_for_every_engine() {
    // Tiny: 2,000 independent ops, a 200-op chain, 20 fan-out rounds.
    let a = args(&["--scale", "0.002", "--repeats", "1"]).unwrap();
    let report = common::watchdog("engine_bench, every engine", 120, move || {
        engine_bench::run(&a)
    });
    assert_eq!(report["threads"], 1);
    assert_eq!(report["bulk_size"], 16);
    assert_positive(
        &report,
        "",
        &[
            "floor_independent_ns",
            "floor_boxed_ns",
            "floor_op_sized_ns",
            "floor_with_var_ns",
            "line_transfer_ns",
        ],
    );
    for engine in ["naive", "threaded_pooled", "threaded_per_device"] {
        let e = &report["engines"][engine];
        assert_positive(
            e,
            &format!("{engine}."),
            &[
                "independent_ns",
                "chain_ns",
                "chain_bulk_ns",
                "fanout_ns",
                "independent_vs_floor",
                "chain_bulk_speedup",
                "independent_cheap_ns",
                "chain_cheap_ns",
                "independent_profiled_ns",
                "profiler_cost",
            ],
        );
        // Split runs need every worker held; on a busy machine that may fail and report 0.
        for key in [
            "independent_push_alone_ns",
            "independent_run_alone_ns",
            "chain_bulk_push_alone_ns",
            "chain_bulk_run_alone_ns",
        ] {
            assert!(e[key].as_f64().is_some(), "{engine}.{key}: {:?}", e[key]);
        }
    }
    assert_eq!(report["mxnet_1_9_1_per_device_ns"]["independent_ns"], 739);
}

#[test]
fn a_workload_list_runs_those_workloads_and_nothing_else() {
    let a = args(&[
        "--scale",
        "0.002",
        "--repeats",
        "1",
        "--only",
        "naive",
        "--workload",
        "fanout,chain",
    ])
    .unwrap();
    let report = common::watchdog("engine_bench, two workloads", 60, move || {
        engine_bench::run(&a)
    });
    let engines = report["engines"].as_object().unwrap();
    assert_eq!(engines.keys().collect::<Vec<_>>(), ["naive"]);
    let naive = &report["engines"]["naive"];
    assert_positive(naive, "naive.", &["chain_ns", "fanout_ns"]);
    assert_eq!(naive["independent_ns"], 0.0);
    assert_eq!(naive["chain_bulk_ns"], 0.0);
    assert_eq!(naive["chain_bulk_speedup"], 0.0);
    // The floors are only timed beside the independent workload.
    assert_eq!(report["floor_independent_ns"], 0.0);
}

#[test]
fn unknown_names_and_bad_numbers_are_refused_with_what_is_known() {
    let e = args(&["--only", "turbo"]).err().unwrap();
    assert!(e.contains("unknown engine \"turbo\""), "{e}");
    assert!(e.contains("threaded_per_device"), "{e}");
    let e = args(&["--workload", "chain,chian"]).err().unwrap();
    assert!(e.contains("unknown workload \"chian\""), "{e}");
    assert!(e.contains("chain_bulk_split"), "{e}");
    let e = args(&["--threads", "0"]).err().unwrap();
    assert!(e.contains("--threads") && e.contains("positive"), "{e}");
    let e = args(&["--scale", "-1"]).err().unwrap();
    assert!(e.contains("--scale") && e.contains("positive"), "{e}");
    let e = args(&["--repeats"]).err().unwrap();
    assert!(
        e.contains("--repeats") && e.contains("value is required"),
        "{e}"
    );
    let e = args(&["--quick"]).err().unwrap();
    assert!(e.contains("unexpected argument '--quick'"), "{e}");
    assert!(args(&["--only", "per_device"]).is_ok());
}
