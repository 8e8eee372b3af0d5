//! Writes through an index: `x[key] = value` for a key of integers and strided slices writes
//! a strided region of `x` in place, as one op on the engine that updates `x`'s var (it reads
//! it too, since the rest of the array stays). Ordered by the var like any other write, so
//! writes from several threads into disjoint regions all land, and a failure `x` holds stops
//! the write and stays.
//!
//! The region is given per axis as (first index, step, count), steps possibly negative. The
//! kernel walks the region's elements in row-major order with an odometer over all axes but the
//! last, and runs the last axis as a strided loop.

use crate::array::NDArray;
use crate::error::{invalid, shape_error, Result};

/// One axis of a region: indices `start + k * step` for `k` in `0..count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first index.
    pub start: usize,
    /// The distance between consecutive indices (negative: walking backwards).
    pub step: isize,
    /// How many indices.
    pub count: usize,
}

/// What a region is set to.
enum Source {
    Array(NDArray),
    Scalar(f64),
}

impl NDArray {
    /// Copies `value` (of the region's shape: each span's count, and this array's dtype) into
    /// the region `spans` of this array, in place and asynchronously.
    pub fn assign_region(&self, spans: &[Span], value: &NDArray) -> Result<()> {
        let shape: Vec<usize> = spans.iter().map(|s| s.count).collect();
        if value.shape() != shape.as_slice() || value.dtype() != self.dtype() {
            return Err(shape_error(
                "_slice_assign",
                "value",
                value.shape(),
                format!(
                    "the region's shape {shape:?} and dtype {} (it is {})",
                    self.dtype(),
                    value.dtype()
                ),
            ));
        }
        self.write_region(spans, Source::Array(value.clone()))
    }

    /// Sets every element of the region `spans` of this array to `value` (converted to the
    /// dtype), in place and asynchronously.
    pub fn fill_region(&self, spans: &[Span], value: f64) -> Result<()> {
        self.write_region(spans, Source::Scalar(value))
    }

    fn write_region(&self, spans: &[Span], source: Source) -> Result<()> {
        let op = match source {
            Source::Array(_) => "_slice_assign",
            Source::Scalar(_) => "_slice_assign_scalar",
        };
        crate::array::tape::check_write(op, self)?;
        check_spans(op, self.shape(), spans)?;
        if !self.ctx().is_cpu() {
            return Err(invalid(
                op,
                format!(
                    "writing a strided region runs on the CPU; the array is on {}",
                    self.ctx()
                ),
            ));
        }
        let strides = strides(self.shape());
        let walk: Vec<(isize, usize)> = spans
            .iter()
            .zip(&strides)
            .map(|(s, &st)| (s.step * st as isize, s.count))
            .collect();
        let first: usize = spans.iter().zip(&strides).map(|(s, st)| s.start * st).sum();
        let dst = self.tensor();
        let dtype = self.dtype();
        match source {
            Source::Array(value) => {
                let src = value.tensor();
                self.push(op, &[&value, self], &[self], move || {
                    crate::with_dtype!(dtype, T => {
                        // SAFETY: the engine orders this op after the value's writes and gives
                        // it exclusive access to this array; the caller copies a value that
                        // shares this array's memory first, so the two do not overlap.
                        let (out, vals) = unsafe { (dst.slice_mut::<T>(), src.slice::<T>()) };
                        let mut next = vals.iter();
                        visit(&walk, first, &mut |i| out[i] = *next.next().expect("region size"));
                    });
                    Ok(())
                })
            }
            Source::Scalar(v) => self.push(op, &[self], &[self], move || {
                crate::with_dtype!(dtype, T => {
                    // SAFETY: the engine gives this op exclusive access to this array.
                    let out = unsafe { dst.slice_mut::<T>() };
                    let v = <T as crate::Element>::from_f64(v);
                    visit(&walk, first, &mut |i| out[i] = v);
                });
                Ok(())
            }),
        }
    }
}

/// Row-major strides, in elements.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        st[k] = st[k + 1] * shape[k + 1];
    }
    st
}

/// Every span lies inside its axis, and there is one per axis.
fn check_spans(op: &str, shape: &[usize], spans: &[Span]) -> Result<()> {
    if spans.len() != shape.len() {
        return Err(invalid(
            op,
            format!("{} spans for an array of {} axes", spans.len(), shape.len()),
        ));
    }
    for (axis, (s, &n)) in spans.iter().zip(shape).enumerate() {
        if s.count == 0 {
            continue;
        }
        let last = s.start as isize + (s.count as isize - 1) * s.step;
        if s.start >= n || last < 0 || last as usize >= n {
            return Err(invalid(
                op,
                format!("span {s:?} of axis {axis} leaves its {n} indices"),
            ));
        }
    }
    Ok(())
}

/// Calls `f` with the flat index of every element of the region, in row-major order: `walk`
/// holds each axis's step (in elements) and count, `first` the flat index of the first.
fn visit(walk: &[(isize, usize)], first: usize, f: &mut impl FnMut(usize)) {
    if walk.iter().any(|&(_, n)| n == 0) {
        return;
    }
    let Some((&(inner_step, inner_n), outer)) = walk.split_last() else {
        f(first);
        return;
    };
    let mut idx = vec![0usize; outer.len()];
    let mut base = first as isize;
    loop {
        for k in 0..inner_n {
            f((base + k as isize * inner_step) as usize);
        }
        // Advance the odometer over the outer axes, last fastest.
        let mut axis = outer.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            let (step, n) = outer[axis];
            idx[axis] += 1;
            base += step;
            if idx[axis] < n {
                break;
            }
            base -= step * n as isize;
            idx[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_visits_a_strided_region_in_row_major_order() {
        // A 3x4 array, rows 2 and 0 (step -2), columns 1 and 3 (step 2).
        let spans = [
            Span {
                start: 2,
                step: -2,
                count: 2,
            },
            Span {
                start: 1,
                step: 2,
                count: 2,
            },
        ];
        let st = strides(&[3, 4]);
        let walk: Vec<_> = spans
            .iter()
            .zip(&st)
            .map(|(s, &t)| (s.step * t as isize, s.count))
            .collect();
        let first = spans.iter().zip(&st).map(|(s, t)| s.start * t).sum();
        let mut seen = Vec::new();
        visit(&walk, first, &mut |i| seen.push(i));
        assert_eq!(seen, vec![9, 11, 1, 3]);
        assert!(check_spans("t", &[3, 4], &spans).is_ok());
        let outside = [
            spans[0],
            Span {
                start: 3,
                step: 1,
                count: 2,
            },
        ];
        assert!(check_spans("t", &[3, 4], &outside).is_err());
    }
}
