//! The cores' multiply-add limit: the rate of independent vector multiply-adds in registers, on
//! one thread and on every core at once. No product, convolution or cell can run faster, so it
//! is the physical limit the CPU benchmarks' GFLOP/s are read against.
//!
//! `cargo run --release --example cpu_peak -- [--threads N] [--json]`
//!
//! Each thread runs a loop of independent chains of fused multiply-adds on vectors of the
//! instruction set the kernels use (`MXRS_CPU` picks it as for them): 24 with AVX-512F, 12 with
//! AVX2 and FMA, more than the multiply-add's latency needs on x86 cores of the last decade (two
//! units of four cycles need eight). The best of several trials is reported: a shared machine
//! only ever makes a trial slower.

#[path = "common/cli.rs"]
#[allow(dead_code)]
mod cli;

use std::hint::black_box;
use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
#[command(about = "The rate of independent vector multiply-adds on one core and on all of them")]
struct Args {
    /// Threads of the all-cores figure (default: the machine's available parallelism)
    #[arg(long, value_parser = cli::positive)]
    threads: Option<usize>,
    /// Trials of each figure (the best is reported)
    #[arg(long, default_value_t = 5, value_parser = cli::positive)]
    trials: usize,
    /// Print one JSON line instead of text
    #[arg(long)]
    json: bool,
}

/// Rounds of a thread's chains per trial: 6.4 GFLOP with AVX-512, about 55 ms at 116 GFLOP/s,
/// so that starting the threads (tens of microseconds) is lost in the trial's time.
const ROUNDS: usize = 1 << 23;

/// The vector instruction set the loop runs on, and its lanes of `f32`.
#[derive(Clone, Copy, Debug)]
enum Isa {
    Avx512,
    Avx2,
}

impl Isa {
    /// The set the library's kernels run with here: the widest this CPU has, or the one
    /// `MXRS_CPU` names (`avx2` times the AVX2 kernels' limit on an AVX-512 machine).
    fn of_kernels() -> Option<Isa> {
        match ndarray_ops::cpu_vector_isa()? {
            "avx512" => Some(Isa::Avx512),
            "avx2" => Some(Isa::Avx2),
            _ => None,
        }
    }

    /// Floats multiplied and added per round of a thread's chains: the vector's lanes times
    /// the chains, as many as the registers hold beside the two operands (32 and 16
    /// registers).
    fn per_round(self) -> usize {
        match self {
            Isa::Avx512 => 16 * 24,
            Isa::Avx2 => 8 * 12,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512f",
            Isa::Avx2 => "avx2+fma",
        }
    }

    /// Runs `rounds` rounds of the chains; returns a sum of the accumulators, so that the
    /// compiler keeps the work.
    fn run(self, rounds: usize) -> f32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the library runs its kernels with this set, which it found on this CPU.
        unsafe {
            match self {
                Isa::Avx512 => chains_avx512(rounds),
                Isa::Avx2 => chains_avx2(rounds),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = rounds;
            unreachable!("no vector instruction set is detected off x86_64")
        }
    }
}

/// `acc = acc * a + b` for each of 24 accumulators, `rounds` times.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn chains_avx512(rounds: usize) -> f32 {
    use std::arch::x86_64::*;
    // Opaque to the compiler, so that it cannot fold the chains ahead of time.
    let (a, b) = black_box((_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-6)));
    let mut acc = black_box([_mm512_set1_ps(1.0); 24]);
    for _ in 0..black_box(rounds) {
        for v in &mut acc {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

/// `acc = acc * a + b` for each of 12 accumulators, `rounds` times.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chains_avx2(rounds: usize) -> f32 {
    use std::arch::x86_64::*;
    // Opaque to the compiler, so that it cannot fold the chains ahead of time.
    let (a, b) = black_box((_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-6)));
    let mut acc = black_box([_mm256_set1_ps(1.0); 12]);
    for _ in 0..black_box(rounds) {
        for v in &mut acc {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut lanes = [0f32; 8];
    acc.iter()
        .map(|&v| {
            // SAFETY: `lanes` holds the vector's 8 floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
            lanes.iter().sum::<f32>()
        })
        .sum()
}

/// GFLOP/s of `threads` threads running the chains at once (two FLOPs a multiply-add), the
/// best of `trials`.
fn peak(isa: Isa, threads: usize, trials: usize) -> f64 {
    let flops = (threads * ROUNDS * isa.per_round() * 2) as f64;
    (0..trials)
        .map(|_| {
            let start = Instant::now();
            let sum: f32 = std::thread::scope(|s| {
                let runs: Vec<_> = (0..threads)
                    .map(|_| s.spawn(move || isa.run(ROUNDS)))
                    .collect();
                runs.into_iter().map(|r| r.join().unwrap_or(f32::NAN)).sum()
            });
            assert!(sum.is_finite(), "the chains' sum {sum} is not finite");
            flops / start.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

fn main() {
    let args = Args::parse();
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
    });
    let Some(isa) = Isa::of_kernels() else {
        eprintln!(
            "cpu_peak: the kernels take the portable path here (no AVX2 with FMA, or \
             MXRS_CPU=none): no vector multiply-adds to measure"
        );
        std::process::exit(1);
    };
    let one = peak(isa, 1, args.trials);
    let all = peak(isa, threads, args.trials);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "isa": isa.name(),
                "threads": threads,
                "fma_peak_gflops_one": (one * 10.0).round() / 10.0,
                "fma_peak_gflops": (all * 10.0).round() / 10.0,
            })
        );
    } else {
        println!(
            "{}: one thread {one:.1} GFLOP/s, {threads} threads {all:.1} GFLOP/s",
            isa.name()
        );
    }
}
