//! The blocked product against a plain triple loop in f64, on shapes that cross every block
//! edge, with each operand row-major, transposed and strided, on one thread and on several, and
//! with `a` and `c` cut into batches as a convolution over a run of images cuts them.

use super::{
    aliases, available, block_columns, depth_step, sgemm, sgemm_packing, Batches, Mat, KC, MC, MR,
    NR,
};
#[cfg(all(target_arch = "x86_64", not(miri)))]
use super::{Isa, Strip};

/// A deterministic value in [-1, 1).
fn val(i: usize, seed: usize) -> f32 {
    (((i * 2654435761 + seed * 40503) % 2000) as f32) / 1000.0 - 1.0
}

/// A matrix of `rows x cols` stored transposed and/or with a gap between rows or columns.
struct Stored {
    data: Vec<f32>,
    rs: isize,
    cs: isize,
}

impl Stored {
    fn new(rows: usize, cols: usize, layout: usize, seed: usize) -> Self {
        // 0: row-major, 1: column-major, 2: row-major with every other column (stride 2).
        let (rs, cs, len) = match layout {
            0 => (cols as isize, 1, rows * cols),
            1 => (1, rows as isize, rows * cols),
            _ => ((2 * cols + 1) as isize, 2, rows * (2 * cols + 1)),
        };
        let mut data = vec![f32::NAN; len.max(1)];
        for i in 0..rows {
            for j in 0..cols {
                data[i * rs as usize + j * cs as usize] = val(i * 7919 + j, seed);
            }
        }
        Stored { data, rs, cs }
    }
    fn get(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs as usize + j * self.cs as usize]
    }
    fn view(&self) -> Mat<*const f32> {
        Mat {
            ptr: self.data.as_ptr(),
            rs: self.rs,
            cs: self.cs,
        }
    }
    fn view_mut(&mut self) -> Mat<*mut f32> {
        Mat {
            ptr: self.data.as_mut_ptr(),
            rs: self.rs,
            cs: self.cs,
        }
    }
}

fn check(m: usize, k: usize, n: usize, layouts: [usize; 3], beta: f32) {
    let a = Stored::new(m, k, layouts[0], 1);
    let b = Stored::new(k, n, layouts[1], 2);
    let mut c = Stored::new(m, n, layouts[2], 3);
    let before: Vec<Vec<f32>> = (0..m)
        .map(|i| (0..n).map(|j| c.get(i, j)).collect())
        .collect();
    if beta == 0.0 {
        // Whatever `c` held must not leak into the result.
        for i in 0..m {
            for j in 0..n {
                c.data[i * c.rs as usize + j * c.cs as usize] = f32::NAN;
            }
        }
    }
    // SAFETY: AVX-512 checked by the caller; the three matrices are allocated at their strides.
    unsafe { sgemm(m, k, n, a.view(), b.view(), beta, c.view_mut()) };
    for (i, row) in before.iter().enumerate() {
        for (j, &old) in row.iter().enumerate() {
            let mut want: f64 = (0..k)
                .map(|p| a.get(i, p) as f64 * b.get(p, j) as f64)
                .sum();
            if beta != 0.0 {
                want += beta as f64 * old as f64;
            }
            let got = c.get(i, j) as f64;
            let tol = 1e-5 * (k as f64 + 1.0);
            assert!(
                (got - want).abs() <= tol,
                "c[{i},{j}] = {got}, want {want} (m {m}, k {k}, n {n}, layouts {layouts:?}, beta {beta})"
            );
        }
    }
}

#[test]
fn small_shapes_in_every_layout_match_the_triple_loop() {
    if !available() {
        return;
    }
    for (m, k, n) in [
        (1, 1, 1),
        (3, 5, 7),
        (12, 8, 32),
        (13, 9, 33),
        (25, 17, 65),
        // Last strips of 8, 5 and 4 rows (the smaller tiles).
        (20, 9, 33),
        (17, 6, 40),
        (16, 7, 31),
        (0, 3, 4),
        (4, 0, 5),
    ] {
        for la in 0..3 {
            for lb in 0..3 {
                for lc in 0..3 {
                    for beta in [0.0, 1.0, 0.5] {
                        check(m, k, n, [la, lb, lc], beta);
                    }
                }
            }
        }
    }
}

#[test]
fn products_across_block_edges_and_threads_match_the_triple_loop() {
    if !available() {
        return;
    }
    let shapes = [
        (MC + MR + 1, KC + 3, NR * 3 + 5),
        (
            MR * 2 - 1,
            2 * KC + 1,
            block_columns(depth_step(2 * KC + 1)) + NR + 7,
        ),
        (200, 300, 150),
        (64, 576, 196),
        (7, 100, 1000),
        (13, 200, block_columns(200) + NR + 3),
        (1000, 100, 7),
    ];
    for (m, k, n) in shapes {
        for layouts in [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [2, 2, 2]] {
            for beta in [0.0, 1.0] {
                check(m, k, n, layouts, beta);
            }
        }
    }
}

/// Rows of `a` a multiple of 4 KiB apart, which the product copies block by block before the
/// kernel reads them, give the bits of the same rows read where they lie (1040 floats apart),
/// and the triple loop's sums: over blocks of depth and of rows, with `c` added to or not.
#[test]
fn rows_a_multiple_of_4_kib_apart_give_the_bits_of_rows_elsewhere() {
    if !available() {
        return;
    }
    assert!(aliases(1024) && aliases(2048) && !aliases(1040) && !aliases(512));
    for (m, k, n) in [
        (MC + MR + 5, 1024, 2 * NR + 3),
        (30, 600, 40),
        (7, 1024, 300),
    ] {
        let b = Stored::new(k, n, 0, 2);
        let run = |ld: usize, beta: f32| {
            let a: Vec<f32> = (0..m * ld)
                .map(|i| val(i % ld * 7919 + i / ld, 1))
                .collect();
            let mut c: Vec<f32> = (0..m * n).map(|i| val(i, 3)).collect();
            let (av, cv) = (
                Mat::row_major(a.as_ptr(), ld),
                Mat::row_major(c.as_mut_ptr(), n),
            );
            // SAFETY: AVX-512 checked above; `a` holds `m` rows `ld` apart of at least `k`
            // floats, `b` and `c` are allocated at their strides.
            unsafe { sgemm(m, k, n, av, b.view(), beta, cv) };
            (a, c)
        };
        for beta in [0.0, 1.0] {
            let ((a, aliased), (_, apart)) = (run(1024, beta), run(1040, beta));
            assert_eq!(aliased, apart, "{m}x{k}x{n}, beta {beta}");
            for (i, j) in [(0, 0), (m - 1, n - 1), (m / 2, n / 3)] {
                let want: f64 = (0..k)
                    .map(|p| a[i * 1024 + p] as f64 * b.get(p, j) as f64)
                    .sum::<f64>()
                    + f64::from(beta) * f64::from(val(i * n + j, 3));
                let got = f64::from(aliased[i * n + j]);
                assert!(
                    (got - want).abs() <= 1e-5 * (k as f64 + 1.0),
                    "c[{i},{j}] {got} != {want}"
                );
            }
        }
    }
}

#[test]
fn batched_operands_match_the_triple_loop() {
    if !available() {
        return;
    }
    // (rows, (a's columns per batch, batches), (c's columns per batch, batches)): tiles and
    // depth blocks that cross batches, on one thread and on several.
    for (m, (ka, kb), (na, nb)) in [
        (13, (7, 5), (9, 4)),
        (30, (300, 3), (49, 5)),
        (MR + 1, (KC + 5, 2), (NR + 3, 3)),
        (64, (49, 16), (196, 11)),
    ] {
        let (k, n) = (ka * kb, na * nb);
        // Each batch is followed by a gap that must be left as it was.
        let (a_stride, c_stride) = (m * ka + 5, m * na + 3);
        let a: Vec<f32> = (0..a_stride * kb).map(|i| val(i, 1)).collect();
        let a_at = |i: usize, p: usize| a[(p / ka) * a_stride + i * ka + p % ka];
        let b = Stored::new(k, n, 0, 2);
        let c_at = |i: usize, j: usize| (j / na) * c_stride + i * na + j % na;
        for beta in [0.0, 1.0] {
            let before: Vec<f32> = (0..c_stride * nb).map(|i| val(i, 3)).collect();
            let mut c = before.clone();
            let batched_a =
                Batches::new(Mat::row_major(a.as_ptr(), ka), (ka, kb), a_stride as isize);
            let dest = Batches::new(
                Mat::row_major(c.as_mut_ptr(), na),
                (na, nb),
                c_stride as isize,
            );
            // SAFETY: AVX-512 checked above; the batches lie inside `a` and `c`.
            unsafe { sgemm_packing(m, k, n, &batched_a, &b.view(), beta, dest) };
            let mut inside = vec![false; c.len()];
            for i in 0..m {
                for j in 0..n {
                    let mut want: f64 =
                        (0..k).map(|p| a_at(i, p) as f64 * b.get(p, j) as f64).sum();
                    want += beta as f64 * before[c_at(i, j)] as f64;
                    let got = c[c_at(i, j)] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (k as f64 + 1.0),
                        "c[{i},{j}] = {got}, want {want} (m {m}, a {ka}x{kb}, c {na}x{nb}, beta {beta})"
                    );
                    inside[c_at(i, j)] = true;
                }
            }
            for (e, (&got, &old)) in c.iter().zip(&before).enumerate() {
                assert!(inside[e] || got == old, "gap element {e} written");
            }
        }
    }
}

/// The instruction sets whose kernels can run on this CPU.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn kernels() -> Vec<Isa> {
    super::isa::detect()
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[test]
fn transpose16_turns_rows_into_columns() {
    for isa in kernels() {
        let (ss, ds) = (21, 19);
        let src: Vec<f32> = (0..16 * ss).map(|i| i as f32).collect();
        let mut dst = vec![-1.0f32; 16 * ds];
        // SAFETY: the CPU has `isa`; 16 rows at each stride fit both buffers.
        unsafe {
            match isa {
                Isa::Avx512 => super::avx512::transpose16(src.as_ptr(), ss, dst.as_mut_ptr(), ds),
                Isa::Avx2 => super::avx2::transpose16(src.as_ptr(), ss, dst.as_mut_ptr(), ds),
            }
        };
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(
                    dst[j * ds + i],
                    src[i * ss + j],
                    "{isa:?}: element ({i}, {j})"
                );
            }
            for j in 16..ds {
                assert_eq!(dst[i * ds + j], -1.0, "{isa:?}: past row {i}");
            }
        }
    }
}

/// Runs the micro-kernel of `isa` on one tile (`mr` rows, `nr` columns, depth `kc`), with
/// `a` read in place or packed, `b` packed or read where it lies and packed on the way, and
/// `c` of the three layouts; returns `c`, then the strip the kernel packed (if any).
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn one_tile(
    isa: Isa,
    (mr, nr, kc): (usize, usize, usize),
    (a_packed, b_fill, layout): (bool, bool, usize),
    add: bool,
) -> (Vec<f32>, Vec<f32>) {
    // `a`: row-major `mr x kc` (rows 3 floats apart past their end), or a packed strip of MR
    // rows per step with zeros past `mr`.
    let a_rows = Stored::new(mr, kc + 3, 0, 4);
    let mut a_strip = vec![0.0f32; kc * MR];
    for p in 0..kc {
        for i in 0..mr {
            a_strip[p * MR + i] = a_rows.get(i, p);
        }
    }
    // `b`: `kc` steps of NR floats, 40 apart where read in place (NR apart packed).
    let b = Stored::new(kc, 40, 0, 5);
    let mut fill = vec![f32::NAN; kc * NR];
    let mut packed = vec![0.0f32; kc * NR];
    for p in 0..kc {
        packed[p * NR..(p + 1) * NR].copy_from_slice(&b.data[p * 40..p * 40 + NR]);
    }
    let strip = match b_fill {
        true => Strip {
            src: b.data.as_ptr(),
            stride: 40,
            fill: Some(fill.as_mut_ptr()),
        },
        false => Strip::packed(packed.as_ptr()),
    };
    let mut c = Stored::new(mr, nr, layout, 6);
    let a = match a_packed {
        true => (a_strip.as_ptr(), 1, MR as isize),
        false => (a_rows.data.as_ptr(), a_rows.rs, 1),
    };
    let cm = c.view_mut();
    // SAFETY: the CPU has `isa`; `a` holds `mr` rows of `kc` (or a packed strip of MR), the
    // strips `kc` steps of NR, `c` the tile at its strides.
    unsafe {
        match isa {
            Isa::Avx512 => super::avx512::kernel::<MR>(kc, a, strip, cm, mr, nr, add),
            Isa::Avx2 => super::avx2::kernel(kc, a, strip, cm, mr, nr, add),
        }
    }
    let tile: Vec<f32> = (0..mr)
        .flat_map(|i| (0..nr).map(move |j| (i, j)))
        .map(|(i, j)| c.get(i, j))
        .collect();
    // Every element of `c` outside the tile is as it was.
    let fresh = Stored::new(mr, nr, layout, 6);
    for (e, (&got, &was)) in c.data.iter().zip(&fresh.data).enumerate() {
        let inside = (0..mr).any(|i| (0..nr).any(|j| e == i * c.rs as usize + j * c.cs as usize));
        assert!(
            inside || got.to_bits() == was.to_bits(),
            "{isa:?}: element {e} outside the tile written"
        );
    }
    (tile, if b_fill { fill } else { Vec::new() })
}

/// Every kernel this CPU can run, on tiles of every height and of ragged widths, against a
/// sum in f64, and against each other bit for bit: each sums an element's products in the
/// order of the depth with fused multiply-adds, so they agree exactly. Where `b` is packed
/// on the way, the packed strip is `b`'s rows.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[test]
fn every_kernel_computes_every_tile_shape_alike() {
    let isas = kernels();
    let mut cases = Vec::new();
    for mr in 1..=MR {
        for nr in [1, 7, 8, 9, 16, 17, 31, NR] {
            for (kc, a_packed, layout, add) in
                (0..36).map(|c| ([1, 5, 33][c % 3], c / 3 % 2 == 1, c / 6 % 3, c / 18 == 1))
            {
                cases.push(((mr, nr, kc), (a_packed, false, layout), add));
                if nr == NR {
                    // Only whole strips are packed on the way.
                    cases.push(((mr, nr, kc), (a_packed, true, layout), add));
                }
            }
        }
    }
    for case in cases {
        let ((mr, nr, kc), (_, b_fill, layout), add) = case;
        let results: Vec<_> = isas
            .iter()
            .map(|&isa| one_tile(isa, case.0, case.1, case.2))
            .collect();
        let a = Stored::new(mr, kc + 3, 0, 4);
        let b = Stored::new(kc, 40, 0, 5);
        let old = Stored::new(mr, nr, layout, 6);
        for (isa, (tile, fill)) in isas.iter().zip(&results) {
            for (e, &got) in tile.iter().enumerate() {
                let (i, j) = (e / nr, e % nr);
                let products = (0..kc).map(|p| a.get(i, p) as f64 * b.get(p, j) as f64);
                let want = products.sum::<f64>() + if add { old.get(i, j) as f64 } else { 0.0 };
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (kc as f64 + 1.0),
                    "{isa:?} {case:?}: c[{i},{j}] = {got}, want {want}"
                );
            }
            for p in 0..kc * (b_fill as usize) {
                let want = &b.data[p * 40..p * 40 + NR];
                assert_eq!(
                    &fill[p * NR..(p + 1) * NR],
                    want,
                    "{isa:?} {case:?}: packed step {p}"
                );
            }
        }
        let bits = |t: &[f32]| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for (isa, (tile, _)) in isas.iter().zip(&results).skip(1) {
            assert_eq!(
                bits(tile),
                bits(&results[0].0),
                "{isa:?} against {:?}, {case:?}",
                isas[0]
            );
        }
    }
}

#[test]
fn depth_blocks_are_equal_and_at_most_kc() {
    for k in [
        1,
        2,
        17,
        64,
        KC - 1,
        KC,
        KC + 1,
        576,
        1152,
        2304,
        4608,
        3 * KC + 7,
    ] {
        let step = depth_step(k);
        let blocks = k.div_ceil(step);
        assert!(
            step <= KC && step.is_multiple_of(16),
            "depth {k}: blocks of {step}"
        );
        assert_eq!(
            blocks,
            k.div_ceil(KC),
            "depth {k}: {blocks} blocks of {step}"
        );
        // The last block is at most 16 steps per block shorter than the others.
        let last = k - (blocks - 1) * step;
        assert!(
            step - last < 16 * blocks,
            "depth {k}: blocks of {step}, the last {last}"
        );
    }
}

#[test]
fn strassen_products_match_the_triple_loop() {
    if !available() {
        return;
    }
    // (m, k, n, rows of c apart): a step of an LSTM's gate (c's rows a gate block apart),
    // shapes with ragged tiles in each half, a depth over two blocks.
    for (m, k, n, ldc) in [
        (32, 256, 256, 1024),
        (16, 256, 128, 128),
        (40, 300, 192, 200),
        (8, 1100, 64, 64),
    ] {
        let a = Stored::new(m, k, 0, 1);
        let b = Stored::new(k, n, 0, 2);
        // SAFETY: `b`'s elements at its strides.
        let split = unsafe { super::Strassen::new(k, n, b.view()) };
        assert_eq!(split.dim(), (k, n));
        for add in [false, true] {
            let old: Vec<f32> = (0..m * ldc).map(|i| val(i, 4)).collect();
            let mut c = old.clone();
            if !add {
                c.iter_mut().for_each(|v| *v = f32::NAN);
            }
            // SAFETY: `a` and `c` hold `m x k` and `m x n` elements at these strides.
            unsafe { split.product(m, a.view(), Mat::row_major(c.as_mut_ptr(), ldc), add) };
            for i in 0..m {
                for j in 0..n {
                    let mut want: f64 = (0..k)
                        .map(|p| a.get(i, p) as f64 * b.get(p, j) as f64)
                        .sum();
                    if add {
                        want += old[i * ldc + j] as f64;
                    }
                    let got = c[i * ldc + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * (k as f64 + 1.0),
                        "c[{i},{j}] = {got}, want {want} ({m}x{k}x{n}, add {add})"
                    );
                }
            }
            // Columns past `n` in each row are not touched.
            for i in 0..m {
                for j in n..ldc {
                    assert_eq!(c[i * ldc + j].to_bits(), {
                        let v = if add { old[i * ldc + j] } else { f32::NAN };
                        v.to_bits()
                    });
                }
            }
        }
    }
}
