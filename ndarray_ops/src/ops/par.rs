//! Splitting a CPU kernel's work across rayon's threads.
//!
//! A kernel runs on one engine worker; the worker asks rayon to run the pieces of a large pass
//! and waits for them (the f32 GEMM splits its product the same way; `matrixmultiply`, the
//! fallback, has threads of its own). Work is cut into items the
//! caller knows are independent — elements, image planes, channels, column rows — each of a
//! known cost in elements, and only passes large enough to pay for the split are split.

/// Below this many elements of work a pass runs on its engine worker alone; above, it is split
/// (the split costs a few microseconds, a 64K-element pass about as much). Under Miri, whose
/// tests are small, passes split from a few dozen elements, so that the split is what it checks.
const PARALLEL_MIN: usize = if cfg!(miri) { 64 } else { 1 << 16 };

/// Runs `body(lo, hi)` over `0..n` items of about `cost` elements of work each, in parallel
/// chunks when the whole pass is large. Chunks are disjoint and cover `0..n`.
pub(crate) fn for_ranges(n: usize, cost: usize, body: impl Fn(usize, usize) + Sync) {
    let cost = cost.max(1);
    if n < 2 || n.saturating_mul(cost) < PARALLEL_MIN {
        return body(0, n);
    }
    // A few chunks per thread, so a slow thread does not hold the pass up, but none so small
    // that its share of the split's cost shows.
    let chunk = n
        .div_ceil(rayon::current_num_threads().max(1) * 4)
        .max((PARALLEL_MIN / 4).div_ceil(cost));
    rayon::scope(|s| {
        for start in (0..n).step_by(chunk) {
            let body = &body;
            s.spawn(move |_| body(start, (start + chunk).min(n)));
        }
    });
}

/// Calls `f(scratch, lane, lanes, out)` for every lane of dense arrays of shape `shape` along
/// `axis`: `lane` is its index among the lanes (row-major over the other axes), `lanes` holds
/// each input's lane, `out` the output's, all contiguous, whatever the axis. The output is
/// disjoint from the inputs. Lanes along the last axis are slices of the arrays themselves;
/// other lanes are copied in and out a block of neighbours at a time (each of the lane's rows
/// then reads a run of neighbouring elements, not one element of a cache line), and `f` writes
/// the output lane into a buffer that is copied back. Lanes split across threads as
/// [`for_ranges`] splits items; the lanes of one chunk share one `S::default()` as scratch.
/// Along the last axis `f` runs compiled for the widest instruction set the CPU has ([`wide`]:
/// LayerNorm over 1000x1000, 1.37 -> 0.70 ms) where it is small enough to be inlined there
/// (the norm ops' gradient lane is not, and calls an AVX2 twin of its own); between the copies of
/// other lanes it measured slower (softmax along axis 0, 2.0 -> 2.9 ms), so there it does not.
pub(crate) fn map_lanes<T, S, const K: usize>(
    shape: &[usize],
    axis: usize,
    ins: [&[T]; K],
    out: Shared<T>,
    f: impl Fn(&mut S, usize, [&[T]; K], &mut [T]) + Sync,
) where
    T: Copy + Default + Sync,
    S: Default,
{
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    if n == 0 || inner == 0 || outer == 0 {
        return;
    }
    if inner == 1 {
        return for_ranges(outer, n, |lo, hi| {
            let f = &f;
            wide(move || {
                let mut scratch = S::default();
                for o in lo..hi {
                    // SAFETY: lane `o` of the output belongs to this call alone.
                    let dst = unsafe { out.piece_mut(o, n) };
                    f(&mut scratch, o, ins.map(|x| &x[o * n..(o + 1) * n]), dst);
                }
            })
        });
    }
    // Lanes copied together: up to 16 (a 64-byte run of f32 per row), fewer for long lanes,
    // so that a block holds at most 8192 elements per input (measured best of 4096, 8192 and
    // 16384 for softmax along axis 0 of 1000x1000).
    let width = (8192 / n).clamp(1, 16).min(inner);
    let blocks = inner.div_ceil(width);
    for_ranges(outer * blocks, n * width, |lo, hi| {
        let mut scratch = S::default();
        let mut tiles: [Vec<T>; K] = std::array::from_fn(|_| vec![T::default(); n * width]);
        let mut result = vec![T::default(); n * width];
        for unit in lo..hi {
            let (o, b) = (unit / blocks, unit % blocks);
            let (c0, w) = (b * width, width.min(inner - b * width));
            let at = |k: usize| o * n * inner + k * inner + c0;
            // Lane `j` of the block goes to `tile[j * n..]`.
            for (tile, x) in tiles.iter_mut().zip(ins) {
                for k in 0..n {
                    for (j, &v) in x[at(k)..at(k) + w].iter().enumerate() {
                        tile[j * n + k] = v;
                    }
                }
            }
            for j in 0..w {
                let lanes = std::array::from_fn(|i| &tiles[i][j * n..(j + 1) * n]);
                f(
                    &mut scratch,
                    o * inner + c0 + j,
                    lanes,
                    &mut result[j * n..(j + 1) * n],
                );
            }
            for k in 0..n {
                for j in 0..w {
                    // SAFETY: block `(o, b)` alone covers columns `c0..c0 + w` of lane row `k`,
                    // inside the output (which has the inputs' shape).
                    unsafe { out.write(at(k) + j, result[j * n + k]) };
                }
            }
        }
    });
}

/// Runs `body` compiled for AVX2 and FMA where the CPU has them (checked at run time; the
/// build targets plain x86-64, whose SSE2 has no vector rounding, and whose vectors are half
/// as wide). The same operations give the same results either way: Rust never fuses a
/// multiply and an add on its own, and libm's functions stay the same calls.
///
/// The closure must be small: it is called from two places (the AVX2 copy and the plain one),
/// and LLVM inlines a large closure into neither, so the AVX2 copy only jumps to the closure
/// compiled for plain x86-64. A large body goes into an `#[inline(always)]` function and gets
/// its own `#[target_feature]` twin, called when [`has_wide`] says so (see `depthwise`).
#[inline(always)]
pub(crate) fn wide<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if has_wide() {
            // SAFETY: the CPU has the features `avx2` is compiled for.
            return unsafe { avx2(body) };
        }
    }
    body()
}

/// Whether the CPU has the features [`wide`] compiles for (AVX2 and FMA on x86-64; never under
/// Miri).
#[inline(always)]
#[cfg_attr(miri, allow(dead_code))] // its callers are compiled out under Miri
pub(crate) fn has_wide() -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        false
    }
}

/// A pointer that may cross into rayon's threads. Whoever uses one in a [`for_ranges`] body
/// must touch only what that body's item range owns.
pub(crate) struct Shared<T>(*mut T);

// By hand: a derive would ask `T: Copy`, and a pointer copies whatever it points to.
impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Shared<T> {}

// SAFETY: used only by `for_ranges` bodies, which touch disjoint parts of the buffer (the
// caller's contract above), so sending the pointer to another thread races with nothing.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Wraps a pointer (a `*const` is cast: only the caller's contract decides what is written).
    pub(crate) fn new(p: *const T) -> Self {
        Shared(p as *mut T)
    }

    pub(crate) fn get(self) -> *mut T {
        self.0
    }

    /// Piece `k` of a buffer cut into pieces of `len` elements (image planes, channels, column
    /// rows), to read.
    ///
    /// # Safety
    /// The piece lies inside the buffer, and nobody writes it while the slice lives.
    pub(crate) unsafe fn piece<'a>(self, k: usize, len: usize) -> &'a [T] {
        // SAFETY: the contract.
        unsafe { std::slice::from_raw_parts(self.0.add(k * len), len) }
    }

    /// Piece `k` of `len` elements, to write.
    ///
    /// # Safety
    /// The piece lies inside the buffer, and nobody else reads or writes it while the slice
    /// lives.
    pub(crate) unsafe fn piece_mut<'a>(self, k: usize, len: usize) -> &'a mut [T] {
        // SAFETY: the contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(k * len), len) }
    }

    /// Reads element `k`.
    ///
    /// # Safety
    /// Element `k` lies inside the buffer, and nobody writes it meanwhile.
    pub(crate) unsafe fn read(self, k: usize) -> T {
        // SAFETY: the contract.
        unsafe { self.0.add(k).read() }
    }

    /// Writes element `k`.
    ///
    /// # Safety
    /// Element `k` lies inside the buffer, and nobody else reads or writes it meanwhile.
    pub(crate) unsafe fn write(self, k: usize, v: T) {
        // SAFETY: the contract.
        unsafe { self.0.add(k).write(v) }
    }
}

/// An odometer over some axes, each with a stride in two arrays (an input and the output, or
/// two inputs): visits their indices in row-major order, carrying both offsets.
pub(crate) struct Walk<'a> {
    dims: &'a [usize],
    first: &'a [usize],
    second: &'a [usize],
}

impl Walk<'_> {
    pub(crate) fn new<'a>(dims: &'a [usize], first: &'a [usize], second: &'a [usize]) -> Walk<'a> {
        Walk {
            dims,
            first,
            second,
        }
    }

    /// How many index tuples there are.
    pub(crate) fn count(&self) -> usize {
        self.dims.iter().product()
    }

    /// `f(k, first offset, second offset)` for the tuples `k` in `lo..hi`, in order.
    pub(crate) fn each(&self, lo: usize, hi: usize, mut f: impl FnMut(usize, usize, usize)) {
        if lo >= hi {
            return;
        }
        // The tuple of `lo`, then one step at a time.
        let mut idx = vec![0; self.dims.len()];
        let (mut a, mut b, mut rem) = (0, 0, lo);
        for d in (0..self.dims.len()).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
            a += idx[d] * self.first[d];
            b += idx[d] * self.second[d];
        }
        for k in lo..hi {
            f(k, a, b);
            for d in (0..self.dims.len()).rev() {
                idx[d] += 1;
                a += self.first[d];
                b += self.second[d];
                if idx[d] < self.dims[d] {
                    break;
                }
                a -= self.dims[d] * self.first[d];
                b -= self.dims[d] * self.second[d];
                idx[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every item is visited exactly once, whether the pass is split or not.
    #[test]
    fn chunks_cover_every_item_once() {
        for (n, cost) in [
            (0, 1),
            (1, 1 << 20),
            (10, 1),
            (1000, 1000),
            (70_000, 1),
            (3, 40_000),
        ] {
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for_ranges(n, cost, |lo, hi| {
                for s in &seen[lo..hi] {
                    s.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
                "n {n}, cost {cost}"
            );
        }
    }

    /// Along every axis of shapes with short and long lanes, blocks of neighbouring lanes that
    /// fill or leave a partial block, and axes of size 1 and 0: each lane of each input arrives
    /// whole and in order, and what `f` writes lands where the lane came from.
    #[test]
    fn lanes_arrive_whole_in_order_and_land_where_they_came_from() {
        let mut shapes = vec![vec![5], vec![3, 1, 4], vec![2, 0, 3], vec![3, 7, 19]];
        if !cfg!(miri) {
            shapes.extend([vec![2, 40, 1030], vec![9000, 3]]);
        }
        for shape in shapes {
            let len: usize = shape.iter().product();
            let a: Vec<f64> = (0..len).map(|i| i as f64).collect();
            let b: Vec<f64> = (0..len).map(|i| -(i as f64)).collect();
            for axis in 0..shape.len() {
                let stride: usize = shape[axis + 1..].iter().product();
                let n = shape[axis];
                let mut out = vec![f64::NAN; len];
                let dst = Shared::new(out.as_mut_ptr());
                map_lanes(
                    &shape,
                    axis,
                    [&a, &b],
                    dst,
                    |_: &mut (), lane, [x, y], o| {
                        assert_eq!((x.len(), y.len(), o.len()), (n, n, n));
                        // Lane `lane` starts at (outer, 0, inner) = (lane / stride, 0, lane % stride).
                        let first = (lane / stride * n) * stride + lane % stride;
                        assert_eq!(x[0], first as f64, "{shape:?} axis {axis} lane {lane}");
                        for k in 0..n {
                            // A lane's elements are `stride` apart in the arrays.
                            assert_eq!(x[k] - x[0], (k * stride) as f64, "{shape:?} axis {axis}");
                            assert_eq!(y[k], -x[k]);
                            o[k] = 2.0 * x[k] + 0.5;
                        }
                    },
                );
                let want: Vec<f64> = a.iter().map(|v| 2.0 * v + 0.5).collect();
                assert_eq!(out, want, "{shape:?} axis {axis}");
            }
        }
    }
}
