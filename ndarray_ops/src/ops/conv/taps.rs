//! The window taps a direct convolution and pooling run on: for one tap of the window, which
//! input row and columns each output row reads, with the columns of a strided row grouped by
//! phase so that a tap reads one contiguous run.

use std::ops::Range;

use super::Conv;
use crate::Element;

/// One kernel tap (i, j) of a convolution, seen from its column row: which input row each
/// output row reads, which output columns read inside the input (`x0..x1`; the others read
/// padding), and where.
pub(crate) struct Tap {
    /// Input row of output row y: `y * row_stride + row_offset`.
    row_offset: isize,
    row_stride: usize,
    /// Input column of output column x: `x * stride + offset`.
    offset: isize,
    stride: usize,
    x0: usize,
    x1: usize,
    /// Where the input of output column `x0` lies in an input row grouped by phase (see
    /// [`by_phase`]); there the columns `x0..x1` read are one contiguous run.
    phased: usize,
}

impl Tap {
    /// Tap (i, j) of `c` over inputs `w` wide and outputs `wo` wide.
    pub(crate) fn new(c: &Conv, i: usize, j: usize, w: usize, wo: usize) -> Self {
        Self::of((i, j), c.s, c.p, c.d, w, wo)
    }

    /// Every tap of a `k` window with strides `s`, padding `p` and dilation `d` (a
    /// convolution's or a pooling's) over inputs `w` wide and outputs `wo` wide, row-major: as
    /// a filter's weights lie, and as a loop over the window visits its elements.
    pub(crate) fn window(
        k: (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        w: usize,
        wo: usize,
    ) -> Vec<Tap> {
        (0..k.0 * k.1)
            .map(|t| Self::of((t / k.1, t % k.1), s, p, d, w, wo))
            .collect()
    }

    /// Tap (i, j) of a window as [`Tap::window`] describes it.
    fn of(
        (i, j): (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
        d: (usize, usize),
        w: usize,
        wo: usize,
    ) -> Self {
        let offset = (j * d.1) as isize - p.1 as isize;
        let stride = s.1 as isize;
        // The first x with x * stride + offset >= 0, and the first with it >= w.
        let first_at = |edge: isize| {
            let need = edge - offset;
            if need <= 0 {
                0
            } else {
                ((need + stride - 1) / stride) as usize
            }
        };
        let x0 = first_at(0).min(wo);
        let x1 = first_at(w as isize).clamp(x0, wo);
        let mut tap = Tap {
            row_offset: (i * d.0) as isize - p.0 as isize,
            row_stride: s.0,
            offset,
            stride: s.1,
            x0,
            x1,
            phased: 0,
        };
        if x0 < x1 {
            // Phases before the first input's hold `w / s` columns each, and one more each
            // below `w % s`. Kept, as the row loops would otherwise divide four times a tap.
            let (first, s) = (tap.first_input(), tap.stride);
            let r = first % s;
            tap.phased = r * (w / s) + r.min(w % s) + first / s;
        }
        tap
    }

    /// The input row output row `y` reads, if inside an input `h` high.
    #[inline(always)]
    pub(crate) fn input_row(&self, y: usize, h: usize) -> Option<usize> {
        let iy = (y * self.row_stride) as isize + self.row_offset;
        (0..h as isize).contains(&iy).then_some(iy as usize)
    }

    /// Whether neighbouring output columns read neighbouring input columns.
    pub(crate) fn unit_stride(&self) -> bool {
        self.stride == 1
    }

    /// The input column output column `x0` reads (inside the input: only asked when `x0 < x1`).
    pub(crate) fn first_input(&self) -> usize {
        (self.x0 as isize * self.stride as isize + self.offset) as usize
    }

    /// Fills one column row from one input row: padding outside `x0..x1`.
    pub(crate) fn gather<T: Element>(&self, input: &[T], out: &mut [T]) {
        self.gather_part(input, 0, out, false)
    }

    /// Fills output columns `from..from + out.len()` of one column row from one input row
    /// (grouped by phase when `phased`, see [`by_phase`]): padding outside `x0..x1`.
    pub(crate) fn gather_part<T: Element>(
        &self,
        input: &[T],
        from: usize,
        out: &mut [T],
        phased: bool,
    ) {
        let to = from + out.len();
        let (x0, x1) = (self.x0.clamp(from, to), self.x1.clamp(from, to));
        out[..x0 - from].fill(T::default());
        out[x1 - from..].fill(T::default());
        if x0 == x1 {
            return;
        }
        let out = &mut out[x0 - from..x1 - from];
        if phased {
            let first = self.phased + (x0 - self.x0);
            return out.copy_from_slice(&input[first..first + (x1 - x0)]);
        }
        let first = (x0 as isize * self.stride as isize + self.offset) as usize;
        if self.stride == 1 {
            out.copy_from_slice(&input[first..first + (x1 - x0)]);
        } else {
            for (k, o) in out.iter_mut().enumerate() {
                *o = input[first + k * self.stride];
            }
        }
    }

    /// The output columns that read inside an input row grouped by phase (as wide as the
    /// tap's input), and the input run they read there. With stride 1 the row is as it was.
    #[inline(always)]
    pub(crate) fn run(&self) -> Option<(Range<usize>, Range<usize>)> {
        (self.x0 < self.x1).then(|| {
            let from = self.phased;
            (self.x0..self.x1, from..from + (self.x1 - self.x0))
        })
    }

    /// `out[x] += wv * input[x's column]` over the output columns that read inside the input:
    /// one tap's share of one output row of a direct (depthwise) convolution. `input` is
    /// grouped by phase.
    #[inline(always)]
    pub(crate) fn add_scaled<T: Element>(&self, wv: T, input: &[T], out: &mut [T]) {
        if let Some((cols, run)) = self.run() {
            for (o, &v) in out[cols].iter_mut().zip(&input[run]) {
                *o = o.add(wv.mul(v));
            }
        }
    }

    /// `sum over x of grads[x] * input[x's column]`: one tap's share of its weight gradient
    /// from one output row (eight partial sums, so that the loop vectorizes). `input` is
    /// grouped by phase.
    #[inline(always)]
    pub(crate) fn dot<T: Element>(&self, grads: &[T], input: &[T]) -> T {
        let Some((cols, run)) = self.run() else {
            return T::default();
        };
        let (grads, input) = (&grads[cols], &input[run]);
        let mut part = [T::default(); 8];
        let (gs, xs) = (grads.chunks_exact(8), input.chunks_exact(8));
        let tail = gs.remainder().iter().zip(xs.remainder());
        for (g, x) in gs.zip(xs) {
            for l in 0..8 {
                part[l] = part[l].add(g[l].mul(x[l]));
            }
        }
        let sum = part.iter().fold(T::default(), |acc, &p| acc.add(p));
        tail.fold(sum, |acc, (&g, &x)| acc.add(g.mul(x)))
    }

    /// `input[x's column] += wv * grads[x]`: one tap's share of the data gradient of one input
    /// row (the reverse of `add_scaled`), grouped by phase.
    #[inline(always)]
    pub(crate) fn scatter_scaled<T: Element>(&self, wv: T, grads: &[T], input: &mut [T]) {
        if let Some((cols, run)) = self.run() {
            for (d, &g) in input[run].iter_mut().zip(&grads[cols]) {
                *d = d.add(wv.mul(g));
            }
        }
    }

    /// Adds one column row into one input row (the reverse of `gather`).
    pub(crate) fn scatter_add<T: Element>(&self, col: &[T], input: &mut [T]) {
        if self.x0 == self.x1 {
            return;
        }
        let from = self.first_input();
        let col = &col[self.x0..self.x1];
        if self.stride == 1 {
            for (d, &v) in input[from..from + col.len()].iter_mut().zip(col) {
                *d = d.add(v);
            }
        } else {
            for (k, &v) in col.iter().enumerate() {
                let d = &mut input[from + k * self.stride];
                *d = d.add(v);
            }
        }
    }
}

/// Lays each row of `plane` (`w` columns) out in `out` with its columns grouped by phase under
/// horizontal stride `s`: columns 0, s, 2s, .. first, then 1, s + 1, .., and so on. A tap
/// reads the columns `x * s + offset`, all of one phase, so there they are one contiguous run
/// (`Tap::run`).
pub(crate) fn by_phase<T: Copy>(plane: &[T], w: usize, s: usize, out: &mut [T]) {
    for (row, out) in plane
        .chunks_exact(w.max(1))
        .zip(out.chunks_exact_mut(w.max(1)))
    {
        if s == 2 {
            // The usual stride, split in one pass, which vectorizes (as shuffles of whole
            // vectors); a pass per phase reads every other element, which does not.
            let (even, odd) = out.split_at_mut(w.div_ceil(2));
            for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
                (*e, *o) = (pair[0], pair[1]);
            }
            if w % 2 == 1 {
                even[w / 2] = row[w - 1];
            }
            continue;
        }
        let mut out = &mut out[..];
        for r in 0..s.min(w) {
            let (phase, rest) = out.split_at_mut((w - r).div_ceil(s));
            for (k, o) in phase.iter_mut().enumerate() {
                *o = row[r + k * s];
            }
            out = rest;
        }
    }
}

/// The reverse of [`by_phase`]: writes the rows of `phased` back into `plane` in column order.
pub(crate) fn from_phase<T: Copy>(phased: &[T], w: usize, s: usize, plane: &mut [T]) {
    for (row, phased) in plane
        .chunks_exact_mut(w.max(1))
        .zip(phased.chunks_exact(w.max(1)))
    {
        if s == 2 {
            // In one pass, as `by_phase` splits it.
            let (even, odd) = phased.split_at(w.div_ceil(2));
            for ((&e, &o), pair) in even.iter().zip(odd).zip(row.chunks_exact_mut(2)) {
                (pair[0], pair[1]) = (e, o);
            }
            if w % 2 == 1 {
                row[w - 1] = even[w / 2];
            }
            continue;
        }
        let mut phased = phased;
        for r in 0..s.min(w) {
            let (phase, rest) = phased.split_at((w - r).div_ceil(s));
            for (k, &v) in phase.iter().enumerate() {
                row[r + k * s] = v;
            }
            phased = rest;
        }
    }
}
