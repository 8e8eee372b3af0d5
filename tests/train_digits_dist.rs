//! Training across processes (`--features mpi`): the digits MLP and CNN trained by two ranks
//! with a `dist_sync` store, each taking half of every batch, end with the weights one process
//! gets training on two devices with the same global batch, bit for bit, and the same held-out
//! accuracy; with a `dist_async` store the MLP still learns (held-out accuracy near one
//! process's), both ranks end with rank 0's weights, and the staleness is reported. The tests
//! launch this binary under `mpiexec -n 2` for the ranks' part.
#![cfg(feature = "mpi")]

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use std::process::Command;

use storage::Context;

const RANK_ENV: &str = "MXRS_TEST_MPI_RANK";
const PREFIX_ENV: &str = "MXRS_TEST_MPI_PREFIX";
const ASYNC_ENV: &str = "MXRS_TEST_MPI_ASYNC";

const MODELS: [(train_digits::Model, &str); 2] = [
    (train_digits::Model::Mlp, "mlp"),
    (train_digits::Model::Cnn, "cnn"),
];

/// Runs test `name` of this binary on 2 ranks with `env` set, and returns what they printed;
/// fails if the job did.
fn launch(name: &str, env: (&str, &std::ffi::OsStr)) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("mpiexec")
        .args(["-n", "2"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(RANK_ENV, "1")
        .env(env.0, env.1)
        .output()
        .expect("mpiexec (install MPICH or Open MPI to run this test)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the ranks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn two_ranks_train_the_weights_of_one_process_on_two_devices() {
    if std::env::var_os(RANK_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mxrs-dist-digits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stdout = launch("ranks_train", (PREFIX_ENV, dir.join("dist").as_os_str()));
    let contexts = [Context::cpu(0), Context::cpu(1)];
    for (model, name) in MODELS {
        let single = dir.join("single");
        let prefix = format!("{}-{name}", single.to_string_lossy());
        let r = train_digits::train(model, 5, &contexts, "device", false, Some(&prefix)).unwrap();
        let dist = format!("{}-{name}", dir.join("dist").to_string_lossy());
        let (_, dist_params) = ndarray_ops::ndfile::checkpoint_paths(&dist, 5);
        let (_, single_params) = ndarray_ops::ndfile::checkpoint_paths(&prefix, 5);
        assert_eq!(
            std::fs::read(&dist_params).unwrap(),
            std::fs::read(&single_params).unwrap(),
            "{name}: the weights trained across processes differ from one process's"
        );
        let reported = format!("rank0 {name} accuracy {}", r.test_accuracy);
        assert!(stdout.contains(&reported), "{reported} not in:\n{stdout}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranks_train() {
    let Some(prefix) = std::env::var_os(PREFIX_ENV) else {
        return;
    };
    for (model, name) in MODELS {
        let prefix = format!("{}-{name}", prefix.to_string_lossy());
        let r = train_digits::train(
            model,
            5,
            &[Context::cpu(0)],
            "dist_sync",
            false,
            Some(&prefix),
        )
        .unwrap();
        assert_eq!(r.workers, 2);
        println!("rank{} {name} accuracy {}", r.rank, r.test_accuracy);
    }
}

#[test]
fn two_ranks_train_with_dist_async() {
    if std::env::var_os(RANK_ENV).is_some() {
        return;
    }
    let stdout = launch("ranks_train_async", (ASYNC_ENV, "1".as_ref()));
    let said = |r: usize| -> Vec<f64> {
        let prefix = format!("rank{r} async ");
        let line = stdout
            .lines()
            .find_map(|l| Some(&l[l.find(&prefix)? + prefix.len()..]))
            .unwrap_or_else(|| panic!("no line from rank {r}:\n{stdout}"));
        line.split(' ').map(|v| v.parse().unwrap()).collect()
    };
    let (r0, r1) = (said(0), said(1));
    // Both ranks evaluate rank 0's final weights.
    assert_eq!(r0[0], r1[0], "{stdout}");
    // One process reaches about 0.95 in 5 epochs; gradients applied a little late cost some.
    assert!(r0[0] > 0.9, "held-out accuracy {} with dist_async", r0[0]);
    // Every step's update of every parameter was counted, on rank 0 and told to rank 1.
    assert!(r0[1] > 0.0 && r0[1] == r1[1], "{stdout}");
}

#[test]
fn ranks_train_async() {
    if std::env::var_os(ASYNC_ENV).is_none() {
        return;
    }
    let r = train_digits::train(
        train_digits::Model::Mlp,
        5,
        &[Context::cpu(0)],
        "dist_async",
        false,
        None,
    )
    .unwrap();
    let s = r
        .staleness
        .expect("a dist_async store reports its staleness");
    println!(
        "rank{} async {} {} {}",
        r.rank,
        r.test_accuracy,
        s.updates,
        s.mean()
    );
}
