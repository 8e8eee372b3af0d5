//! Softmax regression on the digits data set with imperative NDArray ops and hand-written
//! gradients: every call returns at once, the engine runs the kernels.
//!
//! `cargo run --release --example imperative_digits -- [--json] [--epochs N] [--engine KIND]`

#[path = "common/digits.rs"]
mod digits;
#[path = "common/softmax_regression.rs"]
mod softmax_regression;

use std::time::Instant;

use engine::EngineKind;
use ndarray_ops::Runtime;

fn main() {
    if let Err(e) = run() {
        eprintln!("imperative_digits: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let (mut json, mut epochs, mut kind) = (false, 30usize, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = true,
            "--epochs" => {
                epochs = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--epochs needs a number")?
            }
            "--engine" => {
                let v = args.next().ok_or("--engine needs a name")?;
                kind = Some(EngineKind::parse(&v).ok_or(format!("unknown engine {v:?}"))?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let (train, test) = digits::load(42)?;
    let rt = Runtime::from_env(|b| match kind {
        Some(k) => b.kind(k),
        None => b,
    })
    .map_err(|e| e.to_string())?;
    let kind = rt.engine().kind();
    let t0 = Instant::now();
    let model = softmax_regression::train(&rt, &train, epochs, |epoch, m| {
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
            serde_json::json!({"test_accuracy": acc, "train_accuracy": train_acc, "seconds": seconds, "epochs": epochs, "engine": kind.name()})
        );
    } else {
        println!(
            "softmax regression, {epochs} epochs on {} images: train {:.2}%, test {:.2}% ({} held out), {:.2} s on {}",
            train.n, train_acc * 100.0, acc * 100.0, test.n, seconds, kind.name()
        );
    }
    Ok(())
}
