//! Copying an array with its axes permuted (transpose): the one CPU data movement
//! where neither side can be walked in order by the other's loop.
//!
//! The permutation is first simplified: axes of size 1 dropped, and output axes that are also
//! neighbours, in the same order, in the input merged into one. What is left is one of two
//! cases. If the output's last axis is still the input's contiguous one, the output is a list
//! of rows each copied whole from the input. Otherwise the input's contiguous axis (`a`) sits
//! somewhere before the output's last (`b`): for every index of the remaining axes the pair
//! (a, b) is a 2-D transpose, done in square tiles so that both the rows read (along `a`) and
//! the rows written (along `b`) stay in cache while a tile is copied. Either way the work is
//! cut into independent pieces (rows, or tiles' strips along `a`) and split across threads.

use super::par::{for_ranges, Shared, Walk};

/// A tile's side, in elements: 16 x 16 four-byte elements read 16 lines and write 16.
const TILE: usize = 16;

/// Writes into `out` (dense, in the permuted shape) the dense array `x` of shape `shape`
/// with its axes permuted: output axis `d` is input axis `axes[d]`.
pub(crate) fn permute<T: Copy + Send + Sync>(
    x: &[T],
    shape: &[usize],
    axes: &[usize],
    out: &mut [T],
) {
    debug_assert_eq!(x.len(), out.len());
    let Some(p) = Plan::new(shape, axes) else {
        return out.copy_from_slice(x);
    };
    let (xs, os) = (Shared::new(x.as_ptr()), Shared::new(out.as_mut_ptr()));
    let last = p.dims.len() - 1;
    if p.input[last] == 1 {
        // Rows copied whole; the other axes walk the input.
        let len = p.dims[last];
        let rows = Walk::new(&p.dims[..last], &p.input[..last], &p.output[..last]);
        for_ranges(rows.count(), len, |lo, hi| {
            rows.each(lo, hi, |_, i, o| {
                // SAFETY: row `o / len` of the output belongs to this range alone; `i` starts a
                // row of `len` input elements (the walk stays inside the input's shape).
                unsafe { std::ptr::copy_nonoverlapping(xs.get().add(i), os.get().add(o), len) }
            });
        });
        return;
    }
    // A 2-D transpose between output axis `a`, the input's contiguous one (the kept axis of
    // least input stride, which is 1), and the last, `b`, for every index of the other axes;
    // a piece is one index of those and one strip of TILE along `a`.
    let a = (0..last).min_by_key(|&d| p.input[d]).unwrap_or(0);
    let (na, nb) = (p.dims[a], p.dims[last]);
    let (in_a, out_a, in_b) = (p.input[a], p.output[a], p.input[last]);
    let rest: Vec<usize> = (0..last).filter(|&d| d != a).collect();
    let pick = |v: &[usize]| rest.iter().map(|&d| v[d]).collect::<Vec<_>>();
    let (dims, input, output) = (pick(&p.dims), pick(&p.input), pick(&p.output));
    let planes = Walk::new(&dims, &input, &output);
    let strips = na.div_ceil(TILE);
    for_ranges(planes.count() * strips, TILE * nb, |lo, hi| {
        planes.each(lo / strips, (hi - 1) / strips + 1, |plane, i0, o0| {
            // The strips of this plane inside `lo..hi`.
            let first = plane * strips;
            for s in lo.max(first) - first..hi.min(first + strips) - first {
                let (a0, a1) = (s * TILE, ((s + 1) * TILE).min(na));
                // SAFETY: output elements (plane, a0..a1, all b) are written by this strip
                // alone; the offsets stay inside their buffers (indices below their sizes).
                unsafe {
                    let src = xs.get().add(i0 + a0 * in_a) as *const T;
                    let dst = os.get().add(o0 + a0 * out_a);
                    strip(src, dst, a1 - a0, nb, (in_a, in_b), out_a);
                }
            }
        });
    });
}

/// `dst[a * out_a + b] = src[a * in.0 + b * in.1]` for `a < na`, `b < nb`, in square tiles.
///
/// # Safety
/// Every such offset lies inside its buffer, and nobody else touches those elements of `dst`.
/// (The strides are arguments, not captures, so that the compiler keeps them in registers
/// across the stores.)
unsafe fn strip<T: Copy>(
    src: *const T,
    dst: *mut T,
    na: usize,
    nb: usize,
    (in_a, in_b): (usize, usize),
    out_a: usize,
) {
    for b0 in (0..nb).step_by(TILE) {
        let b1 = (b0 + TILE).min(nb);
        for a in 0..na {
            // SAFETY: the caller's contract.
            unsafe {
                let (s, d) = (src.add(a * in_a), dst.add(a * out_a));
                for b in b0..b1 {
                    *d.add(b) = *s.add(b * in_b);
                }
            }
        }
    }
}

/// A permutation, simplified: per remaining output axis, its size and its strides in the
/// input and the output (elements).
struct Plan {
    dims: Vec<usize>,
    input: Vec<usize>,
    output: Vec<usize>,
}

impl Plan {
    /// `None` when nothing moves (at most one axis of size above 1 is left, or the
    /// permutation keeps every such axis in order): the copy is then a plain one.
    fn new(shape: &[usize], axes: &[usize]) -> Option<Plan> {
        let mut st = vec![1; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            st[d] = st[d + 1] * shape[d + 1];
        }
        let (mut dims, mut input): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        for &a in axes.iter().filter(|&&a| shape[a] != 1) {
            if let (Some(n), Some(s)) = (dims.last_mut(), input.last_mut()) {
                // Output neighbours that are input neighbours in the same order: one axis.
                if *s == st[a] * shape[a] {
                    *n *= shape[a];
                    *s = st[a];
                    continue;
                }
            }
            dims.push(shape[a]);
            input.push(st[a]);
        }
        if dims.len() < 2 || shape.contains(&0) {
            return None;
        }
        let mut output = vec![1; dims.len()];
        for d in (0..dims.len() - 1).rev() {
            output[d] = output[d + 1] * dims[d + 1];
        }
        Some(Plan {
            dims,
            input,
            output,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    /// Every permutation of `0..n`.
    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![Vec::new()];
        }
        let mut all = Vec::new();
        for p in permutations(n - 1) {
            for at in 0..=p.len() {
                let mut q = p.clone();
                q.insert(at, n - 1);
                all.push(q);
            }
        }
        all
    }

    /// Every permutation of shapes with axes of size 1 (dropped), neighbours that stay
    /// neighbours (merged), sizes across a tile's edge, and (outside Miri) passes large enough
    /// to be split across threads: the copy is `ndarray`'s permuted view read in order.
    #[test]
    fn permutes_as_ndarray_does() {
        let mut shapes = vec![
            vec![],
            vec![5],
            vec![0, 3],
            vec![1, 1],
            vec![3, 1],
            vec![17, 33],
            vec![2, 1, 3],
            vec![2, 3, 4],
            vec![2, 17, 1, 5],
            vec![3, 4, 5, 6],
        ];
        if !cfg!(miri) {
            shapes.extend([vec![300, 301], vec![2, 40, 50, 17], vec![64, 3, 20, 33]]);
        }
        for shape in shapes {
            let n: usize = shape.iter().product();
            let x: Vec<u32> = (0..n as u32).collect();
            let a = ArrayD::from_shape_vec(IxDyn(&shape), x.clone()).unwrap();
            for axes in permutations(shape.len()) {
                let want: Vec<u32> = a
                    .view()
                    .permuted_axes(IxDyn(&axes))
                    .iter()
                    .copied()
                    .collect();
                let mut out = vec![u32::MAX; n];
                permute(&x, &shape, &axes, &mut out);
                assert_eq!(out, want, "{shape:?} permuted by {axes:?}");
            }
        }
    }
}
