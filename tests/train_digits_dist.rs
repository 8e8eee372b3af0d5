//! Training across processes (`--features mpi`): the digits MLP and CNN trained by two ranks
//! with a `dist_sync` store, each taking half of every batch, end with the weights one process
//! gets training on two devices with the same global batch, bit for bit, and the same held-out
//! accuracy. The test launches this binary under `mpiexec -n 2` for the ranks' part.
#![cfg(feature = "mpi")]

#[allow(dead_code)]
#[path = "../examples/train_digits.rs"]
mod train_digits;

use std::process::Command;

use storage::Context;

const RANK_ENV: &str = "MXRS_TEST_MPI_RANK";
const PREFIX_ENV: &str = "MXRS_TEST_MPI_PREFIX";

const MODELS: [(train_digits::Model, &str); 2] = [
    (train_digits::Model::Mlp, "mlp"),
    (train_digits::Model::Cnn, "cnn"),
];

#[test]
fn two_ranks_train_the_weights_of_one_process_on_two_devices() {
    if std::env::var_os(RANK_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mxrs-dist-digits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("mpiexec")
        .args(["-n", "2"])
        .arg(exe)
        .args(["--exact", "ranks_train", "--nocapture", "--test-threads=1"])
        .env(RANK_ENV, "1")
        .env(PREFIX_ENV, dir.join("dist"))
        .output()
        .expect("mpiexec (install MPICH or Open MPI to run this test)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the ranks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
