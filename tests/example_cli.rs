//! The examples' shared command-line parsers refuse bad values saying what was expected, and
//! the model examples refuse an input shape given twice.

#[path = "../examples/common/cli.rs"]
#[allow(dead_code)] // `run_or_exit` ends the process: the examples exercise it, not a test
mod cli;

use engine::EngineKind;

#[test]
fn counts_must_be_positive_whole_numbers() {
    assert_eq!(cli::positive("12"), Ok(12));
    for bad in ["0", "-3", "1.5", "", "ten"] {
        let e = cli::positive(bad).unwrap_err();
        assert!(
            e.contains("positive whole number") && e.contains(bad),
            "{bad}: {e}"
        );
    }
}

#[test]
fn engines_go_by_any_of_their_names_and_an_unknown_one_lists_the_known() {
    assert_eq!(
        cli::engine_kind("per_device"),
        Ok(EngineKind::ThreadedPerDevice)
    );
    assert_eq!(cli::engine_kind("NaiveEngine"), Ok(EngineKind::Naive));
    let e = cli::engine_kind("turbo").unwrap_err();
    assert!(
        e.contains("\"turbo\"") && e.contains("threaded_pooled"),
        "{e}"
    );
}

#[test]
fn mirror_settings_parse_as_the_environment_variable_takes_them() {
    use ndarray_ops::symbol::mirror::Mirror;
    assert_eq!(cli::mirror("auto:0.5"), Ok(Mirror::Auto(0.5)));
    assert_eq!(cli::mirror("2G"), Ok(Mirror::Budget(2 << 30)));
    let e = cli::mirror("lots").unwrap_err();
    assert!(e.contains("\"lots\"") && e.contains("`auto`"), "{e}");
}

#[test]
fn shapes_parse_by_name_and_a_name_given_twice_is_refused() {
    assert_eq!(
        cli::shape("data=32, 3,224,224"),
        Ok(("data".to_string(), vec![32, 3, 224, 224]))
    );
    for bad in ["data", "data=3,x", "data=", "=3,4"] {
        let e = cli::shape(bad).unwrap_err();
        assert!(e.contains(bad), "{bad}: {e}");
    }
    let given = vec![
        ("data".to_string(), vec![1, 784]),
        ("label".to_string(), vec![1]),
    ];
    let shapes = cli::shapes(given.clone()).unwrap();
    assert_eq!((shapes.len(), &shapes["data"]), (2, &vec![1, 784]));
    let mut twice = given;
    twice.push(("data".to_string(), vec![2, 784]));
    let e = cli::shapes(twice).unwrap_err();
    assert!(e.contains("'data' was already given as [1, 784]"), "{e}");
}

#[test]
fn a_graphs_shapes_file_is_read_from_beside_it_and_a_broken_one_is_named() {
    let dir = std::env::temp_dir().join(format!("mxrs-sidecar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("net-symbol.json").to_string_lossy().into_owned();
    let side = dir.join("net-shapes.json");
    // No file beside the graph: nothing, and the path it looked for.
    let _ = std::fs::remove_file(&side);
    let (path, none) = cli::sidecar_shapes(&graph).unwrap();
    assert_eq!((path.as_str(), none), (side.to_str().unwrap(), None));
    std::fs::write(&side, r#"{"data": [32, 3, 224, 224]}"#).unwrap();
    let (_, found) = cli::sidecar_shapes(&graph).unwrap();
    assert_eq!(found.unwrap()["data"], vec![32, 3, 224, 224]);
    std::fs::write(&side, r#"{"data": [32, -3]}"#).unwrap();
    let e = cli::sidecar_shapes(&graph).unwrap_err();
    assert!(e.contains("net-shapes.json"), "{e}");
    // A graph not named *-symbol.json has no shapes file, rather than being read as one.
    let (_, none) = cli::sidecar_shapes(&side.to_string_lossy()).unwrap();
    assert_eq!(none, None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shapes_given_win_over_the_shapes_file_and_a_graph_without_either_has_none() {
    let dir = std::env::temp_dir().join(format!("mxrs-given-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("net-symbol.json").to_string_lossy().into_owned();
    // Neither given nor beside the graph: no shapes (the graph's own are all there is).
    assert!(cli::given_or_sidecar(&graph, &[]).unwrap().is_empty());
    std::fs::write(dir.join("net-shapes.json"), r#"{"data": [32, 784]}"#).unwrap();
    let found = cli::given_or_sidecar(&graph, &[]).unwrap();
    assert_eq!(found["data"], vec![32, 784]);
    // Given shapes are taken as they are, the file not read.
    let given = [("data".to_string(), vec![1, 784])];
    let found = cli::given_or_sidecar(&graph, &given).unwrap();
    assert_eq!((found.len(), &found["data"]), (1, &vec![1, 784]));
    // Given twice: refused, as the examples' --shape is.
    let twice = [given[0].clone(), given[0].clone()];
    assert!(cli::given_or_sidecar(&graph, &twice).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
