//! Softmax regression on the digits data set with imperative NDArray ops and hand-written
//! gradients (or, with `--autograd`, gradients autograd records): every call returns at once,
//! the engine runs the kernels.
//!
//! `cargo run --release --example imperative_digits -- [--json] [--epochs N] [--engine KIND] [--autograd]`

#[allow(dead_code)]
#[path = "common/cli.rs"]
mod cli;
#[path = "common/digits.rs"]
mod digits;
#[path = "common/softmax_regression.rs"]
mod softmax_regression;

use std::time::Instant;

use clap::Parser;
use engine::EngineKind;
use ndarray_ops::Runtime;

fn main() {
    cli::run_or_exit("imperative_digits", run);
}

/// Softmax regression on the digits data set with imperative NDArray ops and hand-written
/// gradients (or recorded ones).
#[derive(Parser)]
#[command(name = "imperative_digits", allow_negative_numbers = true)]
struct Args {
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Passes over the training set.
    #[arg(long, default_value_t = 30, value_parser = cli::positive)]
    epochs: usize,
    /// The engine (default: MXRS_ENGINE, else threaded_per_device).
    #[arg(long = "engine", value_name = "KIND", value_parser = cli::engine_kind)]
    kind: Option<EngineKind>,
    /// Take the gradients from autograd (record the loss, then backward) instead of the
    /// hand-written ones.
    #[arg(long)]
    autograd: bool,
}

fn run() -> Result<(), String> {
    let Args {
        json,
        epochs,
        kind,
        autograd,
    } = Args::parse();
    let gradients = match autograd {
        true => softmax_regression::Gradients::Autograd,
        false => softmax_regression::Gradients::ByHand,
    };
    let (train, test) = digits::load(42)?;
    let rt = Runtime::from_env(|b| match kind {
        Some(k) => b.kind(k),
        None => b,
    })
    .map_err(|e| e.to_string())?;
    let kind = rt.engine().kind();
    let t0 = Instant::now();
    let model = softmax_regression::train(&rt, &train, epochs, gradients, |epoch, m| {
        if !json && (epoch + 1) % 5 == 0 {
            let acc = softmax_regression::accuracy(&rt, m, &test)?;
            println!("epoch {:>3}: test accuracy {:.2}%", epoch + 1, acc * 100.0);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    rt.wait_all().map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let acc = softmax_regression::accuracy(&rt, &model, &test).map_err(|e| e.to_string())?;
    let train_acc = softmax_regression::accuracy(&rt, &model, &train).map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::json!({"test_accuracy": acc, "train_accuracy": train_acc, "seconds": seconds, "epochs": epochs, "engine": kind.name(), "gradients": if autograd { "autograd" } else { "by_hand" }})
        );
    } else {
        println!(
            "softmax regression, {epochs} epochs on {} images, gradients {}: train {:.2}%, test {:.2}% ({} held out), {:.2} s on {}",
            train.n, if autograd { "by autograd" } else { "by hand" }, train_acc * 100.0, acc * 100.0, test.n, seconds, kind.name()
        );
    }
    Ok(())
}
