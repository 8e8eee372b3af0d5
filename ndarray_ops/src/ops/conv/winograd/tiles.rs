//! The transforms of a row of tiles, a vector of tiles (or of channels) at a time, written once
//! over [`Lanes`] and compiled for each width ([`widest!`]: 16 lanes where the products run
//! with AVX-512, 8 where they run with AVX2).
//! The bodies call the lanes' methods directly or through the `#[inline(always)]` helpers at
//! the end, never from closures (see [`crate::ops::simd`]).

use crate::ops::simd::{widest, Lanes};

widest! {
    /// `G g G^T` of `n` windows `g`: window `l`'s tap `(ky, kx)` at `w + l * stride + 3 * ky +
    /// kx`, or with `flipped` at `w + l * stride + 8 - 3 * ky - kx`; position `xi`'s values go to
    /// `u + xi * block + at + l`.
    ///
    /// # Safety
    /// The windows lie inside the weights, the outputs inside `U`; [`crate::gemm::available`].
    fn weights(
        w: *const f32,
        stride: usize,
        flipped: bool,
        n: usize,
        u: *mut f32,
        at: usize,
        block: usize,
    ) => weights_in;
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn weights_in<L: Lanes>(
    l: L,
    w: *const f32,
    stride: usize,
    flipped: bool,
    n: usize,
    u: *mut f32,
    at: usize,
    block: usize,
) {
    let half = l.splat(0.5);
    for i in (0..n).step_by(L::N) {
        let mut g = [[l.splat(0.0); 3]; 3];
        for (ky, row) in g.iter_mut().enumerate() {
            for (kx, tap_value) in row.iter_mut().enumerate() {
                let tap = match flipped {
                    true => 8 - 3 * ky - kx,
                    false => 3 * ky + kx,
                };
                // SAFETY: windows `i..n` lie inside the weights (the contract).
                *tap_value = unsafe { l.gather(w.add(i * stride + tap), stride, n - i) };
            }
        }
        // G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2; then the same across.
        let mut rows = [g[0], g[0], g[0], g[2]];
        for j in 0..3 {
            rows[1][j] = plus(l, half, g[0][j], g[1][j], g[2][j]);
            rows[2][j] = minus(l, half, g[0][j], g[1][j], g[2][j]);
        }
        for (r, t) in rows.iter().enumerate() {
            let out = [
                t[0],
                plus(l, half, t[0], t[1], t[2]),
                minus(l, half, t[0], t[1], t[2]),
                t[2],
            ];
            for (q, value) in out.into_iter().enumerate() {
                // SAFETY: position `4r + q`'s values `i..n` lie inside `U` (the contract).
                unsafe { l.store(u.add((4 * r + q) * block + at + i), value, n - i) };
            }
        }
    }
}

widest! {
    /// `dW = G^T S G` for `n` channels: position `xi`'s sums at `from[k] + xi * block + at + l`
    /// for channel `l` (added over `from`), channel `l`'s 3x3 window to `out + 9 * l`.
    ///
    /// # Safety
    /// The sums lie inside each of `from`, the windows inside the weight gradient;
    /// [`crate::gemm::available`].
    fn weight_sums(
        from: &[*const f32],
        at: usize,
        block: usize,
        n: usize,
        out: *mut f32,
    ) => weight_sums_in;
}

#[inline(always)]
unsafe fn weight_sums_in<L: Lanes>(
    l: L,
    from: &[*const f32],
    at: usize,
    block: usize,
    n: usize,
    out: *mut f32,
) {
    let half = l.splat(0.5);
    for i in (0..n).step_by(L::N) {
        let mut s = [l.splat(0.0); 16];
        for (xi, sum) in s.iter_mut().enumerate() {
            for p in from {
                // SAFETY: channels `i..n` of the sums lie inside each of `from` (the contract).
                *sum = l.add(*sum, unsafe { l.load(p.add(xi * block + at + i), n - i) });
            }
        }
        // G^T s down the positions' rows, then across.
        let mut rows = [[l.splat(0.0); 3]; 4];
        for (q, row) in rows.iter_mut().enumerate() {
            *row = reduce(l, half, [s[q], s[4 + q], s[8 + q], s[12 + q]]);
        }
        let mut windows = [[l.splat(0.0); 3]; 3];
        for (ky, window) in windows.iter_mut().enumerate() {
            *window = reduce(
                l,
                half,
                [rows[0][ky], rows[1][ky], rows[2][ky], rows[3][ky]],
            );
        }
        for (ky, window) in windows.into_iter().enumerate() {
            for (kx, value) in window.into_iter().enumerate() {
                // SAFETY: channels `i..n`'s windows lie inside the weight gradient.
                unsafe { l.scatter(out.add(9 * i + 3 * ky + kx), 9, value, n - i) };
            }
        }
    }
}

widest! {
    /// `Z[xi]` of a row of `tw` tiles from the two padded output-gradient rows (`len` floats
    /// each, tile `j` at columns `2j, 2j + 1`): `A z A^T`, rows `z0, z0 + z1, z0 - z1, -z1`,
    /// then the same across; position `xi`'s values go to `z + xi * block + at`.
    ///
    /// # Safety
    /// `padded` holds two rows of `2 * tw.next_multiple_of(16)`; the outputs lie inside `z`;
    /// [`crate::gemm::available`].
    fn gradient(
        padded: &[f32],
        len: usize,
        tw: usize,
        z: *mut f32,
        at: usize,
        block: usize,
    ) => gradient_in;
}

#[inline(always)]
unsafe fn gradient_in<L: Lanes>(
    l: L,
    padded: &[f32],
    len: usize,
    tw: usize,
    z: *mut f32,
    at: usize,
    block: usize,
) {
    for j in (0..tw).step_by(L::N) {
        // SAFETY: each row holds `2 N` floats from `2j` (its length).
        let ((e0, o0), (e1, o1)) = unsafe {
            let p = padded.as_ptr().add(2 * j);
            (l.halves(p), l.halves(p.add(len)))
        };
        let (evens, odds) = (spread(l, e0, e1), spread(l, o0, o1));
        for k in 0..4 {
            for (q, value) in spread(l, evens[k], odds[k]).into_iter().enumerate() {
                // SAFETY: position `4k + q`'s tiles `j..tw` of this row lie inside `z`.
                unsafe { l.store(z.add((4 * k + q) * block + at + j), value, tw - j) };
            }
        }
    }
}

widest! {
    /// `V[xi]` of a row of `tw` tiles from the four padded input rows under it (`len` floats
    /// each, tile `j` at columns `2j..2j + 4`): `B^T d` down the rows, then across, a vector of
    /// tiles at a time; position `xi`'s values go to `v + xi * block + at`, `tw` of them.
    ///
    /// # Safety
    /// `padded` holds four rows of `2 * tw.next_multiple_of(16) + 2`; the outputs lie inside
    /// `v`; [`crate::gemm::available`].
    fn input(
        padded: &[f32],
        len: usize,
        tw: usize,
        v: *mut f32,
        at: usize,
        block: usize,
    ) => input_in;
}

#[inline(always)]
unsafe fn input_in<L: Lanes>(
    l: L,
    padded: &[f32],
    len: usize,
    tw: usize,
    v: *mut f32,
    at: usize,
    block: usize,
) {
    for j in (0..tw).step_by(L::N) {
        // d[k][q]: column q of row k of the tiles' input blocks.
        let mut d = [[l.splat(0.0); 4]; 4];
        for (k, row) in d.iter_mut().enumerate() {
            // SAFETY: row k holds `2 N` floats from `2j` and from `2j + 2` (its length).
            let ((c0, c1), (c2, c3)) = unsafe {
                let p = padded.as_ptr().add(k * len + 2 * j);
                (l.halves(p), l.halves(p.add(2)))
            };
            *row = [c0, c1, c2, c3];
        }
        // B^T d: rows 0 - 2, 1 + 2, 2 - 1, 1 - 3; then the same across each row's columns.
        let rows = [
            across(l, d[0], d[2], true),
            across(l, d[1], d[2], false),
            across(l, d[2], d[1], true),
            across(l, d[1], d[3], true),
        ];
        for (k, row) in rows.iter().enumerate() {
            let out = [
                l.sub(row[0], row[2]),
                l.add(row[1], row[2]),
                l.sub(row[2], row[1]),
                l.sub(row[1], row[3]),
            ];
            for (q, value) in out.into_iter().enumerate() {
                // SAFETY: position `4k + q`'s tiles `j..tw` of this row lie inside `v`.
                unsafe { l.store(v.add((4 * k + q) * block + at + j), value, tw - j) };
            }
        }
    }
}

widest! {
    /// The outputs of a row of `tw` tiles, `A^T M A`: position `xi`'s values at
    /// `m + xi * block + at`, the tiles' first output row to `out` (`wo` floats) and, with
    /// `second`, their second to `out + wo`.
    ///
    /// # Safety
    /// The inputs lie inside `m`, the outputs inside the output; [`crate::gemm::available`].
    fn output(
        m: *const f32,
        at: usize,
        block: usize,
        tw: usize,
        out: *mut f32,
        wo: usize,
        second: bool,
    ) => output_in;
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn output_in<L: Lanes>(
    l: L,
    m: *const f32,
    at: usize,
    block: usize,
    tw: usize,
    out: *mut f32,
    wo: usize,
    second: bool,
) {
    for j in (0..tw).step_by(L::N) {
        // e[4k + q]: position (k, q) of the tiles.
        let mut e = [l.splat(0.0); 16];
        for (xi, value) in e.iter_mut().enumerate() {
            // SAFETY: position `xi`'s tiles `j..tw` lie inside `m`.
            *value = unsafe { l.load(m.add(xi * block + at + j), tw - j) };
        }
        // A^T M: rows 0 + 1 + 2 and 1 - 2 - 3; then A across the columns the same way.
        for (a, to) in [(0, out), (1, out.wrapping_add(wo))] {
            if a == 1 && !second {
                break;
            }
            let mut s = [l.splat(0.0); 4];
            for (q, value) in s.iter_mut().enumerate() {
                *value = match a {
                    0 => l.add(l.add(e[q], e[4 + q]), e[8 + q]),
                    _ => l.sub(l.sub(e[4 + q], e[8 + q]), e[12 + q]),
                };
            }
            let y0 = l.add(l.add(s[0], s[1]), s[2]);
            let y1 = l.sub(l.sub(s[1], s[2]), s[3]);
            // Tile j's outputs at columns 2j and 2j + 1: the two interleaved.
            let col = 2 * j;
            let (left, right) = l.interleave(y0, y1);
            // SAFETY: columns `col..wo` of the row lie inside the output.
            unsafe {
                l.store(to.add(col), left, wo - col);
                if wo > col + L::N {
                    l.store(to.add(col + L::N), right, wo - col - L::N);
                }
            }
        }
    }
}

/// `(a + b + c) / 2`, with `half` all 0.5.
#[inline(always)]
fn plus<L: Lanes>(l: L, half: L::V, a: L::V, b: L::V, c: L::V) -> L::V {
    l.mul(half, l.add(l.add(a, b), c))
}

/// `(a - b + c) / 2`, with `half` all 0.5.
#[inline(always)]
fn minus<L: Lanes>(l: L, half: L::V, a: L::V, b: L::V, c: L::V) -> L::V {
    l.mul(half, l.add(l.sub(a, b), c))
}

/// `G^T` of a column `s`: `s0 + (s1 + s2) / 2, (s1 - s2) / 2, (s1 + s2) / 2 + s3`.
#[inline(always)]
fn reduce<L: Lanes>(l: L, half: L::V, [a, b, c, d]: [L::V; 4]) -> [L::V; 3] {
    let mid = l.mul(half, l.add(b, c));
    [l.add(a, mid), l.mul(half, l.sub(b, c)), l.add(mid, d)]
}

/// `A` of a column: `a, a + b, a - b, -b`.
#[inline(always)]
fn spread<L: Lanes>(l: L, a: L::V, b: L::V) -> [L::V; 4] {
    [a, l.add(a, b), l.sub(a, b), l.sub(l.splat(0.0), b)]
}

/// `a - b` (`sub`) or `a + b`, element by element.
#[inline(always)]
fn across<L: Lanes>(l: L, a: [L::V; 4], b: [L::V; 4], sub: bool) -> [L::V; 4] {
    let mut out = [l.splat(0.0); 4];
    for (q, value) in out.iter_mut().enumerate() {
        *value = match sub {
            true => l.sub(a[q], b[q]),
            false => l.add(a[q], b[q]),
        };
    }
    out
}
