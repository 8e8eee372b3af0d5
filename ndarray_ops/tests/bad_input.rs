//! Requests a runtime cannot or should not carry out get a clear error or the documented
//! result, never an abort or a silent wrong answer.

use ndarray_ops::{invoke, Attrs, DType};
use storage::Context;

mod common;

const CPU: Context = Context::cpu(0);

#[test]
fn a_range_too_long_for_memory_is_an_error() {
    let rt = common::threaded_runtime(1);
    let err = rt
        .arange(0.0, 1e18, 1.0, DType::F32, CPU)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("arange") && err.contains("1000000000000000000"),
        "{err}"
    );
    // The runtime still works.
    let a = rt.arange(0.0, 4.0, 1.0, DType::F32, CPU).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn the_mean_of_nothing_is_nan_and_argmax_of_nothing_is_refused() {
    let rt = common::threaded_runtime(1);
    let empty = rt.zeros(&[3, 0], DType::F32, CPU).unwrap();
    let axis1 = Attrs::new().with("axis", 1);
    let mean = invoke("mean", &[&empty], &axis1, None).unwrap().remove(0);
    let got = mean.to_vec::<f32>().unwrap();
    assert!(got.len() == 3 && got.iter().all(|x| x.is_nan()), "{got:?}");
    let all = invoke("mean", &[&empty], &Attrs::new(), None)
        .unwrap()
        .remove(0);
    assert!(all.to_vec::<f32>().unwrap()[0].is_nan());
    // Over the non-empty axis there is nothing to average per lane, and no lane: empty.
    let axis0 = Attrs::new().with("axis", 0);
    let m0 = invoke("mean", &[&empty], &axis0, None).unwrap().remove(0);
    assert_eq!(m0.shape(), &[0]);
    for op in ["argmax", "argmin"] {
        let err = invoke(op, &[&empty], &axis1, None).unwrap_err().to_string();
        assert!(err.contains(op) && err.contains("empty axis"), "{err}");
        let err = invoke(op, &[&empty], &Attrs::new(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("empty"), "{err}");
    }
    // max refuses the same, as before.
    assert!(invoke("max", &[&empty], &axis1, None).is_err());
}

/// Two variables with one name are refused where they can do harm: loading such a graph, and
/// inferring or binding one composed in code (one would silently take the other's array, and
/// one would be lost on save). The error names both nodes.
#[test]
fn two_variables_with_one_name_are_refused() {
    let var = |name: &str| format!(r#"{{"op": "null", "name": "{name}", "inputs": []}}"#);
    let json = format!(
        r#"{{"nodes": [{}, {}, {{"op": "elemwise_add", "name": "add", "inputs": [[0, 0, 0], [1, 0, 0]]}}], "arg_nodes": [0, 1], "heads": [[2, 0, 0]]}}"#,
        var("w"),
        var("w")
    );
    let err = ndarray_ops::Symbol::from_json(&json)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("two variables are named 'w'") && err.contains("nodes 0 and 1"),
        "{err}"
    );

    let (a, b) = (ndarray_ops::Symbol::var("x"), ndarray_ops::Symbol::var("x"));
    let sum = ndarray_ops::Symbol::op("elemwise_add", "add", &[&a, &b], Attrs::new()).unwrap();
    let rt = common::threaded_runtime(1);
    let shapes = std::collections::HashMap::from([("x".to_string(), vec![2])]);
    let err = ndarray_ops::Executor::simple_bind(&rt, CPU, &sum, &shapes)
        .err()
        .expect("binding two variables named x is refused")
        .to_string();
    assert!(err.contains("two variables are named 'x'"), "{err}");
    // One variable used twice is one argument, and binds.
    let twice = ndarray_ops::Symbol::op("elemwise_add", "add", &[&a, &a], Attrs::new()).unwrap();
    assert!(ndarray_ops::Executor::simple_bind(&rt, CPU, &twice, &shapes).is_ok());
}

/// An op whose output does not fit in memory says which op and which output, with what storage
/// found, and the runtime keeps working.
#[test]
fn an_output_that_does_not_fit_names_its_op() {
    let storage = storage::StorageConfig {
        kind: storage::PoolKind::Unpooled,
        default_limit: Some(1 << 20),
        ..storage::StorageConfig::default()
    };
    let rt = ndarray_ops::Runtime::new(
        engine::EngineBuilder::new(engine::EngineKind::ThreadedPerDevice).build(),
        storage,
    );
    let x = rt.ones(&[1, 1000], DType::F32, CPU).unwrap();
    let wide = Attrs::new().with("shape", "(1000, 1000)");
    let err = invoke("broadcast_to", &[&x], &wide, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("broadcast_to: output 0 ([1000, 1000], float32)")
            && err.contains("out of memory"),
        "{err}"
    );
    let small = Attrs::new().with("shape", "(2, 1000)");
    let y = invoke("broadcast_to", &[&x], &small, None)
        .unwrap()
        .remove(0);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0; 2000]);
}

/// SoftmaxOutput's labels name classes: one outside `[0, classes)` or NaN makes the backward
/// pass fail with the row and the label (it used to train towards nothing), unless the row is
/// ignored through `use_ignore` and `ignore_label`.
#[test]
fn softmax_output_refuses_labels_that_are_not_classes() {
    let rt = common::threaded_runtime(1);
    let p = rt.from_vec(vec![0.5f32; 6], &[2, 3], CPU).unwrap();
    for bad in [3.0f32, -1.0, f32::NAN] {
        let label = rt.from_vec(vec![1.0f32, bad], &[2], CPU).unwrap();
        let g = invoke(
            "_backward_SoftmaxOutput",
            &[&p, &label],
            &Attrs::new(),
            None,
        )
        .unwrap();
        let err = g[0].to_vec::<f32>().unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("[0, 3)"), "{err}");
    }
    // An ignored row may carry any label, and passes no gradient.
    let label = rt.from_vec(vec![-1.0f32, 2.0], &[2], CPU).unwrap();
    let ignore = Attrs::new()
        .with("use_ignore", true)
        .with("ignore_label", -1.0);
    let g = invoke("_backward_SoftmaxOutput", &[&p, &label], &ignore, None).unwrap();
    assert_eq!(
        g[0].to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, 0.0, 0.5, 0.5, -0.5]
    );
}
