//! Splitting a CPU kernel's work across rayon's threads.
//!
//! A kernel runs on one engine worker; the worker asks rayon to run the pieces of a large pass
//! and waits for them (a GEMM's threads are `matrixmultiply`'s own). Work is cut into items the
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

/// Calls `f(scratch, first, stride)` for every lane of a dense array of shape `shape` along
/// `axis` (its `shape[axis]` elements at `first + k * stride`), lanes split across threads
/// as [`for_ranges`] splits items; the lanes of one chunk share one `S::default()` as scratch.
pub(crate) fn for_lanes<S: Default>(
    shape: &[usize],
    axis: usize,
    f: impl Fn(&mut S, usize, usize) + Sync,
) {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    if n == 0 || inner == 0 {
        return;
    }
    for_ranges(outer * inner, n, |lo, hi| {
        let mut scratch = S::default();
        for lane in lo..hi {
            let (o, i) = (lane / inner, lane % inner);
            f(&mut scratch, o * n * inner + i, inner);
        }
    });
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
}
