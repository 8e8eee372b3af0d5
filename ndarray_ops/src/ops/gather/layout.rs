//! The CPU's walk of a gather: the axes before the last laid out as one offset per index, the
//! last axis as runs of copies, fills and reversed copies, or as offsets where runs are short.

use super::*;

impl Offset for u32 {
    const PAD: u32 = u32::MAX;
    fn new(o: usize) -> u32 {
        o as u32
    }
    #[inline]
    fn get(self) -> Option<usize> {
        (self != Self::PAD).then_some(self as usize)
    }
}

impl Offset for usize {
    const PAD: usize = usize::MAX;
    fn new(o: usize) -> usize {
        o
    }
    #[inline]
    fn get(self) -> Option<usize> {
        (self != Self::PAD).then_some(self)
    }
}

/// How the CPU kernels walk a gather's output: row by row along the last axis, each row
/// starting at the input offset its other indices add up to (`outer`, one offset per index
/// along each axis but the last), and reading along the row as `row` says.
pub(super) struct Layout<O> {
    pub(super) outer: Vec<Vec<O>>,
    pub(super) row_len: usize,
    pub(super) row: Row<O>,
}

/// What a row reads, from its first element's input offset.
pub(super) enum Row<O> {
    /// A few runs of alike reads (copies, fills, reversed copies), when the rule's bound on
    /// their number ([`Index::most_runs`]) is at most a quarter of the row's length...
    Runs(Vec<Run>),
    /// ...or else one offset per element (short runs, as a flattened repeat's runs of two; or
    /// a strided row, which only SwapAxis makes, and whose kernels take [`Plan::Permute`]).
    Offsets(Vec<O>),
}

/// How a CPU kernel moves a gather's elements: a gather that only permutes its input's axes
/// (SwapAxis; slice_like or a broadcast to the same shape) is a transpose, which
/// [`permute`]'s tiles do faster than walking offsets; output axis `d` is input axis
/// `axes[d]`. Any other walks its [`OffsetMaps`].
pub(super) enum Plan {
    Permute(Vec<usize>),
    Maps(OffsetMaps),
}

/// [`Layout`] in the narrowest offset type that holds the input's offsets.
pub(super) enum OffsetMaps {
    Narrow(Layout<u32>),
    Wide(Layout<usize>),
}

impl Rules {
    /// Whether every input element is read by one output element at most (a gradient then
    /// needs no sums).
    pub(super) fn injective(&self) -> bool {
        self.axes.iter().all(|a| a.index.injective(a.len))
    }

    /// How the CPU kernels move the elements (see [`Plan`]).
    pub(super) fn plan(&self, op: &str) -> Result<Plan> {
        // Each output axis reads one input axis whole, in order.
        let permutation = self.axes.iter().map(|a| match (a.index, a.from) {
            (Index::Same, Some(f)) if a.len == self.input[f] => Some(f),
            _ => None,
        });
        match permutation.collect::<Option<Vec<_>>>() {
            Some(axes) => Ok(Plan::Permute(axes)),
            None => self.offset_maps(op).map(Plan::Maps),
        }
    }

    /// The CPU kernels' layout (see [`OffsetMaps`]).
    pub(super) fn offset_maps(&self, op: &str) -> Result<OffsetMaps> {
        match self.input.iter().product::<usize>() < u32::MAX as usize {
            true => self.layout(op).map(OffsetMaps::Narrow),
            false => self.layout(op).map(OffsetMaps::Wide),
        }
    }

    pub(super) fn layout<O: Offset>(&self, op: &str) -> Result<Layout<O>> {
        let offset = |stride: usize, j: Option<usize>| j.map_or(O::PAD, |j| O::new(j * stride));
        let st = strides(&self.input);
        let stride = |a: &AxisRule| a.from.map_or(0, |f| st[f]);
        let Some((last, outer)) = self.axes.split_last() else {
            // A scalar: one row of one element, at offset 0.
            let row = Row::Offsets(vec![O::new(0)]);
            return Ok(Layout {
                outer: Vec::new(),
                row_len: 1,
                row,
            });
        };
        let outer = outer
            .iter()
            .map(|a| self.lay_out_axis(op, a, |j| offset(stride(a), j)))
            .collect::<Result<_>>()?;
        let row = match self.row_runs(op, last, stride(last))? {
            Some(runs) => Row::Runs(runs),
            None => Row::Offsets(self.lay_out_axis(op, last, |j| offset(stride(last), j))?),
        };
        Ok(Layout {
            outer,
            row_len: last.len,
            row,
        })
    }

    /// `f(the index read)` for each index along one output axis.
    pub(super) fn lay_out_axis<T>(
        &self,
        op: &str,
        a: &AxisRule,
        f: impl Fn(Option<usize>) -> T,
    ) -> Result<Vec<T>> {
        let mut list = index_list(op, a.len)?;
        for i in 0..a.len {
            list.push(f(a.read(op, &self.input, i)?));
        }
        Ok(list)
    }

    /// The runs of an axis the rows walk with input stride `stride`, when they read
    /// consecutive offsets (stride 1, or no input axis) and are few enough (see [`Row`]).
    pub(super) fn row_runs(
        &self,
        op: &str,
        a: &AxisRule,
        stride: usize,
    ) -> Result<Option<Vec<Run>>> {
        if a.from.is_some() && stride != 1 || a.index.most_runs(a.len) > a.len / 4 {
            return Ok(None);
        }
        a.runs()
            .map(|r| self.check(op, a, r))
            .collect::<Result<_>>()
            .map(Some)
    }

    /// `run`, once it is known to read inside the input axis its rule walks.
    pub(super) fn check(&self, op: &str, a: &AxisRule, run: Run) -> Result<Run> {
        let size = a.from.map_or(1, |f| self.input[f]);
        let inside = match run.read {
            Read::Pad => true,
            Read::Same(j) => j < size,
            Read::Up(j) => j.checked_add(run.len).is_some_and(|end| end <= size),
            Read::Down(j) => j < size && run.len <= j + 1,
        };
        if !inside {
            // The index that reads outside, for the error.
            for i in run.at..run.at + run.len {
                a.read(op, &self.input, i)?;
            }
            return Err(invalid(
                op,
                format!(
                    "the {} indices from {} read outside their input axis",
                    run.len, run.at
                ),
            ));
        }
        Ok(run)
    }

    /// Per output axis, `f(the index read)` for each index along it.
    pub(super) fn lay_out<T>(
        &self,
        op: &str,
        f: impl Fn(Option<usize>) -> T,
    ) -> Result<Vec<Vec<T>>> {
        let f = &f;
        self.axes
            .iter()
            .map(|a| self.lay_out_axis(op, a, f))
            .collect()
    }
}

/// An empty list with room for the `n` indices of one output axis, refused when that memory
/// cannot be had: an output that fits may still leave no room for a long axis's list (on the
/// GPU, 8 bytes an index and more for a gradient's buckets), and the op then fails with this
/// error instead of aborting the process.
pub(super) fn index_list<T>(op: &str, n: usize) -> Result<Vec<T>> {
    let mut list = Vec::new();
    list.try_reserve_exact(n).map_err(|_| {
        invalid(
            op,
            format!("cannot allocate the index list of an output axis of {n}"),
        )
    })?;
    Ok(list)
}

/// One output axis of a gather as the GPU's tables take it: the input axis it walks and the
/// input index each index reads (`None`: padding).
pub(crate) struct Walk {
    pub(crate) from: Option<usize>,
    pub(crate) index: Vec<Option<usize>>,
}

/// A gather's [`Rules`] laid out as index lists (see [`Walk`]).
pub(crate) struct Walks {
    pub(crate) input: Vec<usize>,
    pub(crate) axes: Vec<Walk>,
}

/// The op's gather from data of shape `x` into an output of shape `out` as index lists.
pub(crate) fn walks(m: Gather, attrs: &Attrs, x: &[usize], out: &[usize]) -> Result<Walks> {
    let rules = rules(m, attrs, x, out)?;
    let lists = rules.lay_out(m.name(), |j| j)?;
    let axes = rules.axes.iter().zip(lists);
    Ok(Walks {
        axes: axes
            .map(|(a, index)| Walk {
                from: a.from,
                index,
            })
            .collect(),
        input: rules.input,
    })
}

impl OffsetMaps {
    /// `y[i] = x[offset of i]`, or `pad` where output element `i` is padding.
    pub(super) fn gather<T: Copy>(&self, x: &[T], y: &mut [T], pad: T) {
        match self {
            OffsetMaps::Narrow(l) => l.gather(x, y, pad),
            OffsetMaps::Wide(l) => l.gather(x, y, pad),
        }
    }

    /// `put(&mut acc[offset of i], g[i])` for every output element `i` that is not padding,
    /// in order.
    pub(super) fn scatter<T: Copy, A>(&self, g: &[T], acc: &mut [A], put: impl Fn(&mut A, T)) {
        match self {
            OffsetMaps::Narrow(l) => l.scatter(g, acc, put),
            OffsetMaps::Wide(l) => l.scatter(g, acc, put),
        }
    }
}

impl<O: Offset> Layout<O> {
    pub(super) fn gather<T: Copy>(&self, x: &[T], y: &mut [T], pad: T) {
        self.for_each_row(|i0, base| {
            let row = &mut y[i0..i0 + self.row_len];
            let Some(b) = base else {
                return row.fill(pad);
            };
            let x = &x[b..];
            let runs = match &self.row {
                Row::Runs(runs) => runs,
                Row::Offsets(map) => {
                    for (v, &o) in row.iter_mut().zip(map) {
                        *v = match o.get() {
                            Some(o) => x[o],
                            None => pad,
                        };
                    }
                    return;
                }
            };
            for r in runs {
                let out = &mut row[r.at..r.at + r.len];
                match r.read {
                    Read::Pad => out.fill(pad),
                    Read::Same(o) => out.fill(x[o]),
                    Read::Up(o) => out.copy_from_slice(&x[o..o + r.len]),
                    Read::Down(o) => {
                        let src = &x[o + 1 - r.len..=o];
                        out.iter_mut()
                            .zip(src.iter().rev())
                            .for_each(|(v, &s)| *v = s);
                    }
                }
            }
        });
    }

    pub(super) fn scatter<T: Copy, A>(&self, g: &[T], acc: &mut [A], put: impl Fn(&mut A, T)) {
        self.for_each_row(|i0, base| {
            let Some(b) = base else { return };
            let (g, acc) = (&g[i0..i0 + self.row_len], &mut acc[b..]);
            let runs = match &self.row {
                Row::Runs(runs) => runs,
                Row::Offsets(map) => {
                    for (&v, &o) in g.iter().zip(map) {
                        if let Some(o) = o.get() {
                            put(&mut acc[o], v);
                        }
                    }
                    return;
                }
            };
            for r in runs {
                let g = &g[r.at..r.at + r.len];
                match r.read {
                    Read::Pad => {}
                    // One by one, in output order, as the element loop would.
                    Read::Same(o) => g.iter().for_each(|&v| put(&mut acc[o], v)),
                    Read::Up(o) => {
                        let dst = &mut acc[o..o + r.len];
                        dst.iter_mut().zip(g).for_each(|(a, &v)| put(a, v));
                    }
                    Read::Down(o) => {
                        let dst = &mut acc[o + 1 - r.len..=o];
                        dst.iter_mut().rev().zip(g).for_each(|(a, &v)| put(a, v));
                    }
                }
            }
        });
    }

    /// Calls `f(index of the row's first element, the input offset of the row's first element
    /// (None: padding))` for every row of the output, in order; the kernels run their inner
    /// loops over the row.
    pub(super) fn for_each_row(&self, mut f: impl FnMut(usize, Option<usize>)) {
        let outer = &self.outer;
        if self.row_len == 0 || outer.iter().any(Vec::is_empty) {
            return;
        }
        let mut idx = vec![0usize; outer.len()];
        let mut i = 0;
        loop {
            let base =
                (0..outer.len()).try_fold(0, |acc, d| outer[d][idx[d]].get().map(|o| acc + o));
            f(i, base);
            i += self.row_len;
            // Advance the odometer over the axes before the last.
            let mut d = outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < outer[d].len() {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// What a run of a row reads, from the input offset of its first element (from the input
/// index, as [`Index::run`] gives it).
#[derive(Clone, Copy, Debug)]
pub(super) enum Read {
    /// Padding.
    Pad,
    /// One element, again and again (a broadcast or repeated axis).
    Same(usize),
    /// Consecutive elements, upwards (an unchanged or tiled axis, Pad's middle)...
    Up(usize),
    /// ...or downwards (a reversed axis).
    Down(usize),
}

/// A stretch of a row whose elements read alike (see [`Read`]), from index `at`.
pub(super) struct Run {
    pub(super) at: usize,
    pub(super) len: usize,
    pub(super) read: Read,
}
