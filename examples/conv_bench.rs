//! Where a model's convolution time goes, against GEMM on the same shapes.
//!
//! `cargo run --release --example conv_bench -- graphs/resnet50_v1-symbol.json --batch 1 [--reps 5] [--json]`
//!
//! For every distinct convolution of the graph at the batch (shapes from inference), times the
//! `Convolution` op and its backward op (`_backward_Convolution`: data and weight gradients),
//! each waited for, median of `--reps` after one untimed run; then the GEMMs a convolution
//! amounts to, alone, at the same sizes and counts, through the GEMM the kernels call
//! (`Element::gemm`; per image and group, `M` filters, `K` = channels x window, `N` output
//! pixels): forward `M x K . K x N`, backward-data `K x M . M x N`, backward-weight
//! `M x N . N x K`, and through the `gemm` crate, a candidate (AVX-512 kernels). Depthwise
//! convolutions run a direct kernel and are timed without a GEMM beside them. Reports GFLOP/s
//! per layer and in total, each weighted by how often the layer occurs, and a 2048x2048
//! product as the GEMMs' peak on this machine.

#[path = "common/global_allocator.rs"]
mod global_allocator;

#[path = "common/stats.rs"]
mod stats;

use std::collections::HashMap;
use std::time::Instant;

use clap::Parser;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use ndarray_ops::{invoke, Attrs, DType, Element, NDArray, Runtime, Symbol};
use storage::Context;

#[derive(Parser)]
#[command(name = "conv_bench")]
struct Args {
    /// The graph (`*-symbol.json`); its data input is `(batch, 3, 224, 224)`.
    file: String,
    /// Images per batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Timed runs per measurement (the median is kept).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Print one JSON line.
    #[arg(long)]
    json: bool,
}

/// One distinct convolution of the graph and how often it occurs.
struct Layer {
    data: Vec<usize>,
    weight: Vec<usize>,
    attrs: Attrs,
    count: usize,
    /// Per image and group: filters, channels x window, output pixels; and the groups.
    m: usize,
    k: usize,
    n: usize,
    groups: usize,
}

/// Median seconds of `reps` runs of `f` after one untimed run.
fn timed(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    stats::median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn layers(file: &str, batch: usize) -> Result<Vec<Layer>, String> {
    let sym = Symbol::load(file).map_err(|e| format!("{file}: {e}"))?;
    let shapes: HashMap<String, Vec<usize>> =
        [("data".to_string(), vec![batch, 3, 224, 224])].into();
    let inf =
        ndarray_ops::symbol::infer(&sym, &shapes, &HashMap::new()).map_err(|e| e.to_string())?;
    let g = &inf.graph;
    let mut out: Vec<Layer> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if node.op.map(|d| d.name) != Some("Convolution") {
            continue;
        }
        let shape = |k: usize| {
            let (s, o) = g.inputs[i][k];
            inf.shapes[g.entry(s, o)].clone()
        };
        let (data, weight) = (shape(0), shape(1));
        let y = &inf.shapes[g.entry(i, 0)];
        let groups = data[1] / weight[1];
        let (m, k, n) = (
            weight[0] / groups,
            weight[1..].iter().product(),
            y[2] * y[3],
        );
        // Biases are left out: they add a pass over the output, no GEMM.
        let attrs = node.attrs.clone().with("no_bias", true);
        match out
            .iter_mut()
            .find(|l| l.data == data && l.weight == weight && l.attrs == attrs)
        {
            Some(l) => l.count += 1,
            None => out.push(Layer {
                data,
                weight,
                attrs,
                count: 1,
                m,
                k,
                n,
                groups,
            }),
        }
    }
    Ok(out)
}

/// `c = a . b` through the `gemm` crate on both cores.
fn gemm_crate(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, c: &mut ArrayViewMut2<'_, f32>) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let cols = |s: &[isize]| (s[1], s[0]);
    let ((acs, ars), (bcs, brs), (ccs, crs)) =
        (cols(a.strides()), cols(b.strides()), cols(c.strides()));
    // SAFETY: the three views hold `m x k`, `k x n` and `m x n` elements at their strides, and
    // `c` is disjoint from `a` and `b` (separate arrays).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            ccs,
            crs,
            false,
            a.as_ptr(),
            acs,
            ars,
            b.as_ptr(),
            bcs,
            brs,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(2),
        )
    };
}

type Gemm = fn(&ArrayView2<'_, f32>, &ArrayView2<'_, f32>, &mut ArrayViewMut2<'_, f32>);

/// Seconds of `times` products `(m x k) . (k x n)`.
fn gemm_seconds(gemm: Gemm, reps: usize, (m, k, n): (usize, usize, usize), times: usize) -> f64 {
    let a = Array2::from_shape_fn((m, k), |(i, j)| ((i * 7 + j) % 13) as f32 * 0.01);
    let b = Array2::from_shape_fn((k, n), |(i, j)| ((i * 3 + j) % 11) as f32 * 0.01);
    let mut c = Array2::<f32>::zeros((m, n));
    timed(reps, || {
        for _ in 0..times {
            gemm(&a.view(), &b.view(), &mut c.view_mut());
        }
    })
}

fn ours(a: &ArrayView2<'_, f32>, b: &ArrayView2<'_, f32>, c: &mut ArrayViewMut2<'_, f32>) {
    f32::gemm(a, b, c);
}

fn run() -> Result<(), String> {
    let a = Args::parse();
    let err = |e: ndarray_ops::NdError| e.to_string();
    let rt = Runtime::from_env(|b| b).map_err(err)?;
    let ctx = Context::cpu(0);
    let fill = |shape: &[usize]| -> Result<NDArray, String> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i % 17) as f32 - 8.0) * 0.01).collect();
        rt.from_vec(v, shape, ctx).map_err(err)
    };
    let mut rows = Vec::new();
    let mut total = HashMap::<&str, (f64, f64)>::new();
    for l in layers(&a.file, a.batch)? {
        let (x, w) = (fill(&l.data)?, fill(&l.weight)?);
        let y = invoke("Convolution", &[&x, &w], &l.attrs, None).map_err(err)?;
        let dy = fill(y[0].shape())?;
        let fwd = timed(a.reps, || {
            let y = invoke("Convolution", &[&x, &w], &l.attrs, None).expect("forward");
            y[0].wait_to_read().expect("forward");
        });
        let bwd = timed(a.reps, || {
            let g =
                invoke("_backward_Convolution", &[&dy, &x, &w], &l.attrs, None).expect("backward");
            for t in &g {
                t.wait_to_read().expect("backward");
            }
        });
        let times = a.batch * l.groups;
        let gflop = 2.0 * (l.m * l.k * l.n * times) as f64 / 1e9;
        let depthwise = l.groups > 1 && l.m == 1;
        let shapes = [(l.m, l.k, l.n), (l.k, l.m, l.n), (l.m, l.n, l.k)];
        let gemms: Vec<(f64, f64)> = match depthwise {
            true => vec![],
            false => shapes
                .iter()
                .map(|&s| {
                    (
                        gemm_seconds(ours, a.reps, s, times),
                        gemm_seconds(gemm_crate, a.reps, s, times),
                    )
                })
                .collect(),
        };
        let mut add = |key: &'static str, secs: f64, flop: f64| {
            let t = total.entry(key).or_default();
            t.0 += secs * l.count as f64;
            t.1 += flop * l.count as f64;
        };
        add("conv_forward", fwd, gflop);
        add("conv_backward", bwd, 2.0 * gflop);
        for (name, (ours_s, crate_s)) in ["forward", "backward_data", "backward_weight"]
            .iter()
            .zip(&gemms)
        {
            let (key_ours, key_crate) = match *name {
                "forward" => ("gemm_forward", "gemm_crate_forward"),
                "backward_data" => ("gemm_backward_data", "gemm_crate_backward_data"),
                _ => ("gemm_backward_weight", "gemm_crate_backward_weight"),
            };
            add(key_ours, *ours_s, gflop);
            add(key_crate, *crate_s, gflop);
        }
        let rate = |s: f64, f: f64| f / s;
        let mut row = serde_json::json!({
            "data": l.data, "weight": l.weight, "count": l.count, "depthwise": depthwise,
            "m": l.m, "k": l.k, "n": l.n, "products": times,
            "forward_ms": fwd * 1e3, "backward_ms": bwd * 1e3,
            "forward_gflops": rate(fwd, gflop), "backward_gflops": rate(bwd, 2.0 * gflop),
        });
        if let [(f, fc), (d, dc), (wt, wc)] = gemms[..] {
            row["gemm_gflops"] =
                serde_json::json!([rate(f, gflop), rate(d, gflop), rate(wt, gflop)]);
            row["gemm_crate_gflops"] =
                serde_json::json!([rate(fc, gflop), rate(dc, gflop), rate(wc, gflop)]);
        }
        if !a.json {
            println!(
                "{:?} * {:?} x{}: forward {:.1} GFLOP/s, backward {:.1}; GEMM (ours / gemm crate) forward {}, data {}, weight {}",
                l.data,
                l.weight,
                l.count,
                rate(fwd, gflop),
                rate(bwd, 2.0 * gflop),
                row["gemm_gflops"].get(0).map_or("-".into(), |v| format!("{:.1} / {:.1}", v.as_f64().unwrap_or(0.0), row["gemm_crate_gflops"][0].as_f64().unwrap_or(0.0))),
                row["gemm_gflops"].get(1).map_or("-".into(), |v| format!("{:.1} / {:.1}", v.as_f64().unwrap_or(0.0), row["gemm_crate_gflops"][1].as_f64().unwrap_or(0.0))),
                row["gemm_gflops"].get(2).map_or("-".into(), |v| format!("{:.1} / {:.1}", v.as_f64().unwrap_or(0.0), row["gemm_crate_gflops"][2].as_f64().unwrap_or(0.0))),
            );
        }
        rows.push(row);
    }
    let square = (2048, 2048, 2048);
    let peak_flop = 2.0 * 2048f64.powi(3) / 1e9;
    let peak = peak_flop / gemm_seconds(ours, a.reps, square, 1);
    let peak_crate = peak_flop / gemm_seconds(gemm_crate, a.reps, square, 1);
    let totals: serde_json::Map<String, serde_json::Value> = total
        .iter()
        .map(|(k, (s, f))| (format!("{k}_gflops"), (f / s).into()))
        .chain(
            total
                .iter()
                .map(|(k, (s, _))| (format!("{k}_ms"), (s * 1e3).into())),
        )
        .collect();
    let report = serde_json::json!({
        "graph": a.file, "batch": a.batch, "dtype": DType::F32.name(),
        "gemm_2048_gflops": peak, "gemm_crate_2048_gflops": peak_crate,
        "totals": totals, "layers": rows,
    });
    match a.json {
        true => println!("{report}"),
        false => {
            let mut keys: Vec<_> = total.keys().collect();
            keys.sort();
            for k in keys {
                let (s, f) = total[k];
                println!("{k}: {:.1} ms, {:.1} GFLOP/s", s * 1e3, f / s);
            }
            println!("2048x2048 GEMM: ours {peak:.1} GFLOP/s, gemm crate {peak_crate:.1}");
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("conv_bench: {e}");
        std::process::exit(1);
    }
}
