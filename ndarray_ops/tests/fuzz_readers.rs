//! Structured fuzzing of the readers a user hands files to: the symbol JSON reader, the
//! NDArray file reader, the bound-graph dump readers and the attribute parser. Each starts from
//! real inputs (the shipped graphs, a file this test saves, attribute sets of common ops) and
//! runs thousands of seeded mutations through the same harnesses the coverage-guided targets in
//! `fuzz/` use: nothing may panic, and after every case the runtime still computes and its
//! storage is back where it was. `MXRS_FUZZ_CASES=N` runs N mutations per seed (default 2,000).

use std::sync::Arc;

use engine::{EngineBuilder, EngineKind};
use ndarray_ops::{fuzz, ndfile, Runtime};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use storage::{Context, StorageConfig};

const CPU: Context = Context::cpu(0);

/// A runtime with a 64 MiB limit, as the fuzz targets use: a file asking for more is refused
/// by the limit, not by the machine.
fn runtime() -> Arc<Runtime> {
    let storage = StorageConfig {
        default_limit: Some(64 << 20),
        ..StorageConfig::default()
    };
    Runtime::new(
        EngineBuilder::new(EngineKind::ThreadedPerDevice)
            .cpu_workers(2)
            .build(),
        storage,
    )
}

fn cases() -> usize {
    std::env::var("MXRS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// Numbers that break readers: zero, negatives, past 32 and 64 bits, not a number.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967296",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "NaN",
    "2.5",
    "()",
    "(0, -1)",
    "(1000000000, 1000000000)",
];

/// One mutation of `seed`: bytes flipped, a range cut, a range repeated, the end cut off, or
/// (in text) a number replaced with one of [`NUMBERS`].
fn mutate(seed: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        if v.is_empty() {
            v.push(rng.gen());
            continue;
        }
        let at = rng.gen_range(0..v.len());
        match rng.gen_range(0..6) {
            0 => v[at] ^= 1 << rng.gen_range(0..8),
            1 => v[at] = rng.gen(),
            2 => {
                let end = (at + rng.gen_range(1..64)).min(v.len());
                v.drain(at..end);
            }
            3 => {
                let end = (at + rng.gen_range(1..64)).min(v.len());
                let chunk = v[at..end].to_vec();
                v.splice(at..at, chunk);
            }
            4 => v.truncate(at),
            _ => {
                // The run of digits around `at`, if any, becomes another number.
                let digit = |b: u8| b.is_ascii_digit() || b == b'-' || b == b'.';
                if !digit(v[at]) {
                    continue;
                }
                let mut lo = at;
                while lo > 0 && digit(v[lo - 1]) {
                    lo -= 1;
                }
                let mut hi = at;
                while hi < v.len() && digit(v[hi]) {
                    hi += 1;
                }
                let n = NUMBERS[rng.gen_range(0..NUMBERS.len())].as_bytes().to_vec();
                v.splice(lo..hi, n);
            }
        }
    }
    v
}

/// Runs `harness` on every mutation of every seed, then checks the runtime: it still computes,
/// and its storage holds what it held before.
fn run(name: &str, seeds: &[Vec<u8>], harness: impl Fn(&Arc<Runtime>, &[u8])) {
    let rt = runtime();
    let pool = rt.storage(CPU);
    let probe = rt.from_vec(vec![1.0f32, 2.0], &[2], CPU).unwrap();
    rt.wait_all().unwrap();
    let base = pool.stats().in_use;
    let mut rng = StdRng::seed_from_u64(0xF022);
    for (s, seed) in seeds.iter().enumerate() {
        harness(&rt, seed);
        for k in 0..cases() {
            let input = mutate(seed, &mut rng);
            harness(&rt, &input);
            let _ = rt.wait_all();
            assert_eq!(
                pool.stats().in_use,
                base,
                "{name}: seed {s}, case {k}: storage not given back"
            );
            if k % 50 == 0 {
                let sum = (&probe + &probe).unwrap().to_vec::<f32>().unwrap();
                assert_eq!(sum, vec![2.0, 4.0], "{name}: the runtime stopped computing");
            }
        }
    }
}

fn graph(file: &str) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../graphs");
    std::fs::read(format!("{dir}/{file}")).unwrap()
}

/// A small graph whose variables carry their shapes, so that mutations of it bind and run.
fn shaped_mlp_json() -> Vec<u8> {
    let shaped = |name: &str, shape: &str| {
        format!(
            r#"{{"op": "null", "name": "{name}", "attrs": {{"__shape__": "{shape}"}}, "inputs": []}}"#
        )
    };
    let nodes = [
        shaped("data", "(4, 6)"),
        shaped("fc_weight", "(5, 6)"),
        shaped("fc_bias", "(5,)"),
        r#"{"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "5"}, "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}"#.to_string(),
        r#"{"op": "Activation", "name": "relu", "attrs": {"act_type": "relu"}, "inputs": [[3, 0, 0]]}"#.to_string(),
        r#"{"op": "sum", "name": "total", "attrs": {"axis": "1"}, "inputs": [[4, 0, 0]]}"#.to_string(),
    ];
    format!(
        r#"{{"nodes": [{}], "arg_nodes": [0, 1, 2], "node_row_ptr": [0, 1, 2, 3, 4, 5, 6], "heads": [[5, 0, 0]], "attrs": {{"mxnet_version": ["int", 10901]}}}}"#,
        nodes.join(", ")
    )
    .into_bytes()
}

#[test]
fn the_symbol_reader_survives_mutated_graphs() {
    let seeds = [shaped_mlp_json(), graph("mlp-symbol.json")];
    // The shaped seed binds and runs as it is: mutations start from a working graph.
    {
        let rt = runtime();
        fuzz::symbol_json(&rt, &seeds[0]);
        let sym = ndarray_ops::Symbol::from_json(std::str::from_utf8(&seeds[0]).unwrap()).unwrap();
        assert_eq!(sym.list_arguments(), ["data", "fc_weight", "fc_bias"]);
        let none = std::collections::HashMap::new();
        let exec = ndarray_ops::Executor::simple_bind(&rt, CPU, &sym, &none).unwrap();
        exec.forward(false).unwrap();
        assert_eq!(exec.outputs()[0].shape(), &[4]);
    }
    run("symbol json", &seeds, fuzz::symbol_json);
}

#[test]
fn the_ndarray_file_reader_survives_mutated_files() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("mxrs-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("seed.params");
    let a = rt.from_vec(vec![1.5f32; 12], &[3, 4], CPU).unwrap();
    let b = rt.from_vec(vec![7i32, 8, 9], &[3], CPU).unwrap();
    let c = rt.from_vec(vec![0.25f64; 8], &[2, 2, 2], CPU).unwrap();
    ndfile::save(&path, &[("arg:w", &a), ("aux:n", &b), ("arg:c", &c)]).unwrap();
    let named = std::fs::read(&path).unwrap();
    ndfile::save_list(&path, &[&a, &c]).unwrap();
    let list = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    drop((a, b, c, rt));
    run("ndarray file", &[named, list], fuzz::ndarray_file);
}

#[test]
fn the_bound_graph_readers_survive_mutated_dumps() {
    let seeds = [
        graph("mlp-inference-b32-bound.json"),
        graph("mlp-training-b32-bound.json"),
    ];
    run("bound graph", &seeds, |_, data| fuzz::bound_graph(data));
}

#[test]
fn the_attribute_parser_survives_mutated_attributes() {
    let seeds: Vec<Vec<u8>> = [
        "Convolution\nkernel=(3, 3)\nnum_filter=4\npad=(1, 1)\nstride=(1, 1)\nno_bias=True",
        "Pooling\nkernel=(2, 2)\nstride=(2, 2)\npool_type=max",
        "take\nmode=raise\naxis=0",
        "Reshape\nshape=(0, -1)",
        "sum\naxis=(0, 1)\nkeepdims=True",
        "topk\nk=2\nret_typ=both\naxis=-1",
        "slice\nbegin=(0, 1)\nend=(2, None)\nstep=(1, 2)",
        "one_hot\ndepth=4\non_value=1.5\ndtype=float64",
        "FullyConnected\nnum_hidden=3\nflatten=False",
        "tile\nreps=(2, 3)",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    run("attributes", &seeds, fuzz::attributes);
}
