//! `where(condition, x, y)`: each element from `x` where the condition holds, else from `y`.

use super::par::{for_ranges, Shared};
use super::{Arity, Attrs, OpDef, TensorRef};
use crate::error::shape_error;
use crate::ops::gpu;
use crate::ops::grad;
use crate::ops::Call;
use crate::ops::{Infer, KResult};
use crate::resources::KernelRes;
use crate::{DType, Element};

fn infer_where(op: &str, _: &Attrs, s: &[Vec<usize>], d: &[DType]) -> Infer {
    if s[1] != s[2] || d[1] != d[2] {
        return Err(shape_error(
            op,
            "y",
            s[2].clone(),
            format!("shape {:?} and dtype {} like x", s[1], d[1]),
        ));
    }
    let ok = s[0] == s[1] || (s[0].len() == 1 && s[1].first() == s[0].first());
    if !ok {
        return Err(shape_error(
            op,
            "condition",
            s[0].clone(),
            format!("{:?}, or a vector over its first axis", s[1]),
        ));
    }
    Ok((vec![s[1].clone()], vec![d[1]]))
}

/// `out = condition ? x : y` element by element, or row by row where the condition is a vector
/// over the first axis (each row then one copy). The condition is read a chunk at a time into
/// a mask, so the selecting loop is the same for every condition dtype; chunks split across
/// threads.
fn where_kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (_, _, ins, outs) = call.parts();
    const CHUNK: usize = 4096;
    let (c, o) = (&ins[0], &outs[0]);
    let row = if c.len() == o.len() {
        1
    } else {
        o.len() / c.len().max(1)
    };
    crate::with_dtype!(o.dtype, T => {
        let (x, y, out) = (
            Shared::new(ins[1].ptr::<T>()),
            Shared::new(ins[2].ptr::<T>()),
            Shared::new(o.ptr::<T>()),
        );
        for_ranges(c.len().div_ceil(CHUNK), CHUNK * row, |lo, hi| {
            let mut mask = [false; CHUNK];
            for chunk in lo..hi {
                let start = chunk * CHUNK;
                let mask = &mut mask[..CHUNK.min(c.len() - start)];
                truths(c, start, mask);
                // SAFETY: condition element `k` governs output elements `k * row..(k + 1) *
                // row` (inside the output, whose shape x and y share), which this chunk alone
                // writes; the output is disjoint from x and y or exactly one of them, which
                // `select` is told of and `copy` allows.
                unsafe {
                    if row == 1 {
                        select(mask, (x.get().add(start), y.get().add(start)), out.get().add(start));
                    } else {
                        for (k, &m) in (start..).zip(mask.iter()) {
                            let from = if m { x } else { y };
                            std::ptr::copy(from.get().add(k * row), out.get().add(k * row), row);
                        }
                    }
                }
            }
        });
    });
    Ok(())
}

/// `out[k] = if mask[k] { x[k] } else { y[k] }` for `mask.len()` elements, as a select on
/// slices (both sides loaded, which the compiler may only do through references, so that the
/// loop vectorizes); where the output is exactly x or y, that side is the output itself.
///
/// # Safety
/// All three point to `mask.len()` elements; the output is disjoint from x and y or equal to
/// one (or both) of them; nothing else touches them meanwhile.
unsafe fn select<T: Copy>(mask: &[bool], (x, y): (*const T, *const T), out: *mut T) {
    let n = mask.len();
    // SAFETY: per the contract; where the output is one of the inputs, that input is read
    // through the output's one mutable slice.
    let out_slice = unsafe { std::slice::from_raw_parts_mut(out, n) };
    // An input other than the output, as a slice (disjoint from the output's, per the contract).
    let side = |p: *const T| {
        // SAFETY: per the contract.
        (p != out.cast_const()).then(|| unsafe { std::slice::from_raw_parts(p, n) })
    };
    match (side(x), side(y)) {
        (Some(x), Some(y)) => {
            for (o, ((&m, &a), &b)) in out_slice.iter_mut().zip(mask.iter().zip(x).zip(y)) {
                *o = if m { a } else { b };
            }
        }
        (None, Some(y)) => {
            for (o, (&m, &b)) in out_slice.iter_mut().zip(mask.iter().zip(y)) {
                *o = if m { *o } else { b };
            }
        }
        (Some(x), None) => {
            for (o, (&m, &a)) in out_slice.iter_mut().zip(mask.iter().zip(x)) {
                *o = if m { a } else { *o };
            }
        }
        (None, None) => {}
    }
}

/// Whether each of the condition's elements from `start` on is nonzero, into `mask`.
fn truths(c: &TensorRef, start: usize, mask: &mut [bool]) {
    crate::with_dtype!(c.dtype, C => {
        // SAFETY: read access to the condition.
        let c = unsafe { c.slice::<C>() };
        for (m, v) in mask.iter_mut().zip(&c[start..]) {
            *m = v.to_f64() != 0.0;
        }
    });
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[OpDef {
        inplace: &[(1, 0), (2, 0)],
        ..OpDef::new("where", Arity::Exactly(3), infer_where, where_kernel)
    }
    .grad(grad::where_)
    .on_gpu(gpu::elemwise::select)];
    OPS
}

#[cfg(test)]
mod tests {
    use super::select;

    /// `select` out of place, into x, into y and with x, y and the output one array: what a
    /// plain loop picks (under Miri too, where writing through the output while an input
    /// aliases it would be caught).
    #[test]
    fn select_picks_per_mask_whichever_array_it_writes_into() {
        let mask: Vec<bool> = (0..37).map(|i| i % 3 == 0).collect();
        let x: Vec<i32> = (0..37).collect();
        let y: Vec<i32> = (0..37).map(|i| -i).collect();
        let want: Vec<i32> = (0..37).map(|i| if mask[i] { x[i] } else { y[i] }).collect();
        let mut out = vec![0; 37];
        // SAFETY: three distinct arrays of the mask's length.
        unsafe { select(&mask, (x.as_ptr(), y.as_ptr()), out.as_mut_ptr()) };
        assert_eq!(out, want);
        let (mut into_x, mut into_y) = (x.clone(), y.clone());
        let p = into_x.as_mut_ptr();
        // SAFETY: the output is exactly x; y is distinct.
        unsafe { select(&mask, (p, y.as_ptr()), p) };
        assert_eq!(into_x, want);
        let p = into_y.as_mut_ptr();
        // SAFETY: the output is exactly y; x is distinct.
        unsafe { select(&mask, (x.as_ptr(), p), p) };
        assert_eq!(into_y, want);
        let mut same = x.clone();
        let p = same.as_mut_ptr();
        // SAFETY: x, y and the output are one array.
        unsafe { select(&mask, (p, p), p) };
        assert_eq!(same, x);
    }
}
