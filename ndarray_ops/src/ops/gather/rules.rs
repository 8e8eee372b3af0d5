//! Per output axis, which input index each index reads: the gather ops' [`AxisRule`]s.

use super::*;

/// Which input index an output index reads along one axis (`None`: padding). A closed set of
/// shapes rather than a closure, so that a long axis can be cut into runs of alike reads
/// without visiting its indices (see [`Index::run`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Index {
    /// `i`: an axis kept as it is.
    Same,
    /// `0`: a broadcast axis, or an axis the input lacks (tile's leading ones).
    Zero,
    /// `i % n`: a tiled axis of `n`.
    Wrap(usize),
    /// `i / r`: each index repeated `r` times (repeat, UpSampling).
    Div(usize),
    /// `n - 1 - i`: a reversed axis of `n`.
    Rev(usize),
    /// `i - before` inside an axis of `n`; outside it, as `mode` says.
    Pad {
        n: usize,
        before: usize,
        mode: PadMode,
    },
}

impl Index {
    /// The input index read at `i`. (An index past the axis, from shapes that do not belong
    /// together, comes out past it too, for [`AxisRule::read`] to refuse.)
    #[inline]
    pub(super) fn at(self, i: usize) -> Option<usize> {
        match self {
            Index::Same => Some(i),
            Index::Zero => Some(0),
            Index::Wrap(n) => Some(i % n),
            Index::Div(r) => Some(i / r),
            Index::Rev(n) => Some(n.wrapping_sub(i + 1)),
            Index::Pad { n, before, mode } => {
                let j = i as i64 - before as i64;
                let n = n as i64;
                let k = match mode {
                    _ if (0..n).contains(&j) => j,
                    PadMode::Constant => return None,
                    // An empty axis has no edge: index 0 then reads past it.
                    PadMode::Edge => j.clamp(0, (n - 1).max(0)),
                    PadMode::Reflect if n <= 1 => 0,
                    PadMode::Reflect => {
                        let period = 2 * (n - 1);
                        let m = j.rem_euclid(period);
                        if m < n {
                            m
                        } else {
                            period - m
                        }
                    }
                };
                Some(k as usize)
            }
        }
    }

    /// The run that starts at index `i` and takes at most `rest` indices: what it reads (input
    /// indices, not offsets) and its length, at least 1. Runs need not be the longest
    /// possible, only read what [`Index::at`] says, index by index.
    pub(super) fn run(self, i: usize, rest: usize) -> (Read, usize) {
        let (read, len) = match self {
            Index::Same => (Read::Up(i), rest),
            Index::Zero => (Read::Same(0), rest),
            Index::Wrap(n) => (Read::Up(i % n), n - i % n),
            Index::Div(r) => (Read::Same(i / r), r - i % r),
            Index::Rev(n) => (Read::Down(n.wrapping_sub(i + 1)), rest),
            Index::Pad { n, before, mode } => {
                let j = i as i64 - before as i64;
                let n = n as i64;
                let (read, len) = match mode {
                    _ if (0..n).contains(&j) => (Read::Up(j as usize), n - j),
                    // Before the input up to its first element; after it, to the row's end.
                    PadMode::Constant if j < 0 => (Read::Pad, -j),
                    PadMode::Constant => (Read::Pad, i64::MAX),
                    PadMode::Edge if j < 0 => (Read::Same(0), -j),
                    PadMode::Edge => (Read::Same((n - 1).max(0) as usize), i64::MAX),
                    PadMode::Reflect if n <= 1 => (Read::Same(0), i64::MAX),
                    PadMode::Reflect => {
                        // Up from 0 to n - 2, then down from n - 1 to 1, and again.
                        let period = 2 * (n - 1);
                        match j.rem_euclid(period) {
                            m if m < n - 1 => (Read::Up(m as usize), n - 1 - m),
                            m => (Read::Down((period - m) as usize), period - m),
                        }
                    }
                };
                (read, len as usize)
            }
        };
        (read, len.min(rest))
    }

    /// Whether no two of an axis's `len` indices read the same input index.
    pub(super) fn injective(self, len: usize) -> bool {
        match self {
            Index::Same | Index::Rev(_) => true,
            Index::Zero => len <= 1,
            Index::Wrap(n) => len <= n,
            Index::Div(r) => r == 1 || len <= 1,
            Index::Pad { n, before, mode } => {
                matches!(mode, PadMode::Constant) || before == 0 && len <= n
            }
        }
    }

    /// At least as many runs as [`Index::run`] cuts an axis of `len` into, from index 0,
    /// without cutting it.
    pub(super) fn most_runs(self, len: usize) -> usize {
        match self {
            Index::Same | Index::Zero | Index::Rev(_) => 1,
            Index::Wrap(n) | Index::Div(n) => len.div_ceil(n),
            Index::Pad {
                mode: PadMode::Reflect,
                n,
                ..
            } if n > 1 => len.div_ceil(n - 1) + 2,
            // Before, inside and after the input.
            Index::Pad { .. } => 3,
        }
    }
}

/// One output axis of a gather: the input axis it walks (`None`: none, as tile's leading axes,
/// which read offset 0), its length, and per index along it the input index it reads. A rule
/// rather than a list, so that each consumer lays out only what it needs: the CPU kernels one
/// compact offset per index or a few runs, the GPU's tables the indices.
pub(super) struct AxisRule {
    pub(super) from: Option<usize>,
    pub(super) len: usize,
    pub(super) index: Index,
}

/// A gather as axis rules: the input's shape as the rules read it (repeat without an axis reads
/// the input flattened) and one [`AxisRule`] per output axis. Every input axis is walked by
/// exactly one output axis, so an input element's readers are the product of its indices'
/// preimages (what the GPU's gradient kernel enumerates).
pub(super) struct Rules {
    pub(super) input: Vec<usize>,
    pub(super) axes: Vec<AxisRule>,
}

impl AxisRule {
    /// The axis cut into runs of alike reads, in order (see [`Index::run`]).
    pub(super) fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let (read, len) = self.index.run(at, (at < self.len).then(|| self.len - at)?);
            at += len;
            Some(Run {
                at: at - len,
                len,
                read,
            })
        })
    }

    /// The input index read at `i`, refused when past the end of the axis it walks (shapes that
    /// do not belong together; checked at bind, so only a kernel handed other shapes sees it).
    #[inline]
    pub(super) fn read(&self, op: &str, input: &[usize], i: usize) -> Result<Option<usize>> {
        let j = self.index.at(i);
        let size = self.from.map_or(1, |a| input[a]);
        match j {
            Some(j) if j >= size => Err(self.past(op, i, j, size)),
            _ => Ok(j),
        }
    }

    #[cold]
    pub(super) fn past(&self, op: &str, i: usize, j: usize, size: usize) -> NdError {
        match self.from {
            Some(a) => invalid(
                op,
                format!("index {i} of an output axis reads past input axis {a}, of size {size}"),
            ),
            None => invalid(op, format!("index {i} of a new axis reads {j}")),
        }
    }
}

/// The rules of the op's gather from data of shape `x` into an output of shape `out` (checked
/// by `out_shape` for a forward, by [`check_backward`] for a gradient).
pub(super) fn rules(m: Gather, attrs: &Attrs, x: &[usize], out: &[usize]) -> Result<Rules> {
    let op = m.name();
    // Output axis `d` walking input axis `a` through `index`.
    let rule = |d: usize, a: usize, index: Index| AxisRule {
        from: Some(a),
        len: out[d],
        index,
    };
    let same = |d: usize| rule(d, d, Index::Same);
    let mut input = x.to_vec();
    let axes = match m {
        Gather::BroadcastTo | Gather::BroadcastAxis | Gather::BroadcastLike => {
            broadcastable(op, x, out)?;
            (0..out.len())
                .map(|d| match x[d] == out[d] {
                    true => same(d),
                    false => rule(d, d, Index::Zero),
                })
                .collect()
        }
        Gather::Tile => {
            // Leading axes the input lacks read nothing (offset 0).
            let lead = out.len() - x.len();
            (0..out.len())
                .map(|d| match d.checked_sub(lead) {
                    None => AxisRule {
                        from: None,
                        len: out[d],
                        index: Index::Zero,
                    },
                    Some(a) => rule(d, a, Index::Wrap(x[a].max(1))),
                })
                .collect()
        }
        Gather::Repeat => {
            // An empty output reads nothing, so 0 repeats needs no rule of its own.
            let p = RepeatParams::get(op, attrs)?;
            let r = p.repeats.max(1);
            match p.axis {
                // Flattened: the one output axis walks the contiguous input.
                None => {
                    input = vec![x.iter().product()];
                    vec![rule(0, 0, Index::Div(r))]
                }
                Some(a) => {
                    let a = norm_axes(op, &[a], x.len())?[0];
                    (0..out.len())
                        .map(|d| match d == a {
                            true => rule(d, d, Index::Div(r)),
                            false => same(d),
                        })
                        .collect()
                }
            }
        }
        Gather::Reverse => {
            let axes = norm_axes(op, &ReverseParams::get(op, attrs)?.axis, x.len())?;
            (0..out.len())
                .map(|d| match axes.contains(&d) {
                    true => rule(d, d, Index::Rev(x[d])),
                    false => same(d),
                })
                .collect()
        }
        Gather::SwapAxis => {
            let (a, b) = swapped(op, attrs, x.len())?;
            (0..out.len())
                .map(|d| {
                    let from = if d == a {
                        b
                    } else if d == b {
                        a
                    } else {
                        d
                    };
                    rule(d, from, Index::Same)
                })
                .collect()
        }
        Gather::Pad => {
            let widths = pad_widths(op, attrs, x.len())?;
            let mode = PadParams::get(op, attrs)?.mode;
            (0..out.len())
                .map(|d| {
                    let (n, before) = (x[d], widths[d].0);
                    rule(d, d, Index::Pad { n, before, mode })
                })
                .collect()
        }
        Gather::UpSampling => {
            let k = UpSamplingParams::get(op, attrs)?.scale.0;
            (0..out.len())
                .map(|d| match d >= 2 {
                    true => rule(d, d, Index::Div(k)),
                    false => same(d),
                })
                .collect()
        }
        Gather::SliceLike => (0..out.len()).map(same).collect(),
    };
    Ok(Rules { input, axes })
}

/// An input offset as the CPU kernels keep it per output index: `u32` where the input has fewer
/// than `u32::MAX` elements (nearly always), `usize` otherwise; the type's largest value marks
/// padding. A map of an axis of `n` indices then takes `4n` bytes, where the output's own
/// elements (f32) take `4n` times the other axes' sizes.
pub(super) trait Offset: Copy {
    const PAD: Self;
    /// `o`, known to be below the input's element count.
    fn new(o: usize) -> Self;
    fn get(self) -> Option<usize>;
}
