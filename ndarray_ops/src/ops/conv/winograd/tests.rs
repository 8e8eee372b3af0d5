//! The transforms and products against the definitions of a 3x3 convolution and its gradients.

use super::*;

/// Every cut of `pr`'s tiles: chunks of every size, in one to three groups (no more than
/// the chunks), slots of `fixed` floats and the chunk's transforms.
fn cuts(pr: &Problem, fixed: usize) -> Vec<Cut> {
    let tile_rows = pr.n * pr.tiles().0;
    (1..=tile_rows)
        .flat_map(|chunk| {
            let slot = fixed + 16 * (pr.ch + pr.f) * chunk * pr.tiles().1;
            (1..=3.min(tile_rows.div_ceil(chunk))).map(move |groups| Cut {
                chunk,
                groups,
                slot,
            })
        })
        .collect()
}

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `compute` and `compute_weight_gradient` in chunks of every size and groups of them
/// against the definitions of a 3x3 convolution and of its data and weight gradients
/// (sums in f64), over the paddings 0, 1 and 2, images whose sides are odd (tiles cut by
/// the edge) and even, and rows of fewer and more than 16 tiles.
#[test]
fn tiles_match_the_definitions_in_chunks_of_every_size() {
    if !crate::gemm::available() {
        eprintln!("skipped: the CPU has neither AVX-512F nor AVX2");
        return;
    }
    // Rows of 2-4 tiles, and of 18-19 (a whole vector of 16 tiles and a part of one).
    for (p, h, w) in (0..=2).flat_map(|p| [(p, 7, 6), (p, 5, 35)]) {
        let (n, ch, f) = (2, 3, 5);
        let (ho, wo) = (h + 2 * p - 2, w + 2 * p - 2);
        let x = values(n * ch * h * w, 1);
        let wt = values(f * ch * 9, 2);
        let dy = values(n * f * ho * wo, 3);
        // y[i][o][a][b] = sum x[i][c][a + ky - p][b + kx - p] w[o][c][ky][kx]
        let mut y = vec![0f64; n * f * ho * wo];
        let mut dx = vec![0f64; n * ch * h * w];
        let mut dw = vec![0f64; f * ch * 9];
        for i in 0..n {
            for o in 0..f {
                for c in 0..ch {
                    for (a, b, ky, kx) in
                        (0..ho * wo * 9).map(|z| (z / (wo * 9), z / 9 % wo, z % 9 / 3, z % 3))
                    {
                        let (r, s) = ((a + ky).wrapping_sub(p), (b + kx).wrapping_sub(p));
                        if r >= h || s >= w {
                            continue;
                        }
                        let wv = f64::from(wt[(o * ch + c) * 9 + ky * 3 + kx]);
                        let xi = ((i * ch + c) * h + r) * w + s;
                        let yi = ((i * f + o) * ho + a) * wo + b;
                        y[yi] += f64::from(x[xi]) * wv;
                        dx[xi] += f64::from(dy[yi]) * wv;
                        dw[(o * ch + c) * 9 + ky * 3 + kx] += f64::from(dy[yi]) * f64::from(x[xi]);
                    }
                }
            }
        }
        let forward = Problem {
            n,
            ch,
            f,
            h,
            w,
            ho,
            wo,
            p: (p, p),
        };
        let backward = Problem {
            ch: f,
            f: ch,
            h: ho,
            w: wo,
            ho: h,
            wo: w,
            p: (2 - p, 2 - p),
            ..forward
        };
        for (pr, input, flipped, want) in [(forward, &x, false, &y), (backward, &dy, true, &dx)] {
            for cut in cuts(&pr, 0) {
                let mut temp = vec![0f32; 16 * pr.f * pr.ch + cut.groups * cut.slot];
                let mut got = vec![f32::NAN; want.len()];
                // SAFETY: the buffers hold the problem's shapes and the temp space.
                unsafe {
                    compute(
                        &pr,
                        (input.as_ptr(), wt.as_ptr(), flipped),
                        (got.as_mut_ptr(), &Epilogue::default()),
                        temp.as_mut_ptr(),
                        cut,
                    )
                };
                for (k, (&g, &v)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (f64::from(g) - v).abs() <= 1e-5,
                        "pad {p}, {h}x{w}, flipped {flipped}, {cut:?}: element {k} is {g}, \
                         the definition gives {v}"
                    );
                }
            }
        }
        let scale = dw.iter().fold(1f64, |m, v| m.max(v.abs()));
        for cut in cuts(&forward, 16 * f * ch) {
            let mut temp = vec![0f32; cut.groups * cut.slot];
            let mut got = vec![f32::NAN; dw.len()];
            // SAFETY: the buffers hold the problem's shapes and the temp space.
            unsafe {
                compute_weight_gradient(
                    &forward,
                    (dy.as_ptr(), x.as_ptr()),
                    got.as_mut_ptr(),
                    temp.as_mut_ptr(),
                    cut,
                )
            };
            for (k, (&g, &v)) in got.iter().zip(dw.iter()).enumerate() {
                assert!(
                    (f64::from(g) - v).abs() <= 1e-5 * scale,
                    "pad {p}, {h}x{w}, weight gradient, {cut:?}: element {k} is {g}, the \
                     definition gives {v}"
                );
            }
        }
    }
}
