//! The elementwise loops the families share (a map of one array, a broadcasting map of two),
//! numpy's broadcasting rule, and the copy ops (`_copy`, `_CrossDeviceCopy`). The loops read
//! and write through raw pointers, so an output that is exactly one of the inputs (the in-place
//! forms) is safe.

use super::par::{for_ranges, wide, Shared, Walk};
use super::{Arity, Attrs, OpDef, TensorRef};
use crate::error::{shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::{DType, Element};

/// Numpy broadcasting of two shapes.
pub(crate) fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(shape_error(
                    op,
                    "rhs",
                    b,
                    format!("a shape that broadcasts with lhs {a:?}"),
                ))
            }
        };
    }
    Ok(out)
}

pub(crate) fn infer_unary(
    _: &str,
    _: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    Ok((vec![s[0].clone()], vec![d[0]]))
}

/// Row-major strides of `shape` aligned to `ndim` output dimensions, 0 where broadcast.
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        let o = i + out.len() - shape.len();
        strides[o] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i];
    }
    strides
}

/// `out[i] = f(a[ia], b[ib])` with broadcasting.
pub(crate) fn binary_map<T: Element>(
    a: &TensorRef,
    b: &TensorRef,
    out: &TensorRef,
    f: impl Fn(T, T) -> T + Sync,
) {
    let n = out.len();
    let (pa, pb, po) = (a.ptr::<T>(), b.ptr::<T>(), out.ptr::<T>());
    if a.shape == out.shape && b.shape == out.shape {
        let (sa, sb, so) = (Shared::new(pa), Shared::new(pb), Shared::new(po));
        for_ranges(n, 1, |lo, hi| {
            let (pa, pb, po, f) = (sa.get(), sb.get(), so.get(), &f);
            // SAFETY: `lo..hi` lies inside every tensor (equal shapes); ranges of different
            // calls are disjoint; the output is disjoint from the inputs or exactly one of them,
            // and only raw pointers are used, so no reference aliases another.
            wide(move || unsafe {
                for i in lo..hi {
                    *po.add(i) = f(*pa.add(i), *pb.add(i));
                }
            })
        });
        return;
    }
    // A scalar against an array is one row of the broadcast too.
    if n > 0 {
        broadcast_rows(a, b, out, f);
    }
}

pub(crate) fn unary_map<T: Element>(a: &TensorRef, out: &TensorRef, f: impl Fn(T) -> T + Sync) {
    let (sa, so) = (Shared::new(a.ptr::<T>()), Shared::new(out.ptr::<T>()));
    for_ranges(out.len(), 1, |lo, hi| {
        let (pa, po, f) = (sa.get(), so.get(), &f);
        // SAFETY: same length; disjoint ranges per call; output disjoint from or exactly the
        // input; raw pointers only. (Moved in: pointers captured by reference would be reloaded
        // after every store, which may alias them, and the loop would not vectorize.)
        wide(move || unsafe {
            for i in lo..hi {
                *po.add(i) = f(*pa.add(i));
            }
        })
    });
}

/// `out[i] = f(a[ia], b[ib])` with broadcasting, row by row: output axes of size 1 dropped and
/// neighbours merged where each input is broadcast along both or neither, so that a row (the
/// last merged axis) reads each input contiguously or as one element; rows split across
/// threads.
fn broadcast_rows<T: Element>(
    a: &TensorRef,
    b: &TensorRef,
    out: &TensorRef,
    f: impl Fn(T, T) -> T + Sync,
) {
    let (sa, sb) = (
        broadcast_strides(&a.shape, &out.shape),
        broadcast_strides(&b.shape, &out.shape),
    );
    let (mut dims, mut ka, mut kb): (Vec<usize>, Vec<usize>, Vec<usize>) = Default::default();
    for (d, &n) in out.shape.iter().enumerate().filter(|&(_, &n)| n != 1) {
        if let (Some(m), Some(x), Some(y)) = (dims.last_mut(), ka.last_mut(), kb.last_mut()) {
            if *x == sa[d] * n && *y == sb[d] * n {
                *m *= n;
                (*x, *y) = (sa[d], sb[d]);
                continue;
            }
        }
        dims.push(n);
        ka.push(sa[d]);
        kb.push(sb[d]);
    }
    // The row: the last merged axis (its strides are 0 or 1: every later axis is of size 1).
    let len = dims.pop().unwrap_or(1);
    let (la, lb) = (ka.pop().unwrap_or(0), kb.pop().unwrap_or(0));
    let rows = Walk::new(&dims, &ka, &kb);
    let (pa, pb, po) = (
        Shared::new(a.ptr::<T>()),
        Shared::new(b.ptr::<T>()),
        Shared::new(out.ptr::<T>()),
    );
    for_ranges(rows.count(), len, |lo, hi| {
        let (pa, pb, po, f, rows) = (pa.get(), pb.get(), po.get(), &f, &rows);
        wide(move || {
            rows.each(lo, hi, |r, ia, ib| {
                // SAFETY: row `r` of the output is written by this call alone; offsets stay below
                // each tensor's length (shapes checked by inference); the output is disjoint from
                // the inputs or exactly one of them (then read at the same index before the write),
                // and only raw pointers are used.
                unsafe {
                    let (x, y, o) = (pa.add(ia), pb.add(ib), po.add(r * len));
                    match (la, lb) {
                        (0, 0) => {
                            let v = f(*x, *y);
                            (0..len).for_each(|k| *o.add(k) = v);
                        }
                        (0, _) => (0..len).for_each(|k| *o.add(k) = f(*x, *y.add(k))),
                        (_, 0) => (0..len).for_each(|k| *o.add(k) = f(*x.add(k), *y)),
                        _ => (0..len).for_each(|k| *o.add(k) = f(*x.add(k), *y.add(k))),
                    }
                }
            })
        })
    });
}

pub(super) fn ops() -> &'static [OpDef] {
    const U: Arity = Arity::Exactly(1);
    static OPS: &[OpDef] = &[
        OpDef {
            aliases: &["identity"],
            inplace: &[(0, 0)],
            backward_ignores: &[0],
            ..OpDef::new("_copy", U, infer_unary, super::copy_kernel)
        }
        .grad(grad::identity)
        .on_gpu(gpu::ops::copy),
        // The copy the placement pass puts on an edge between devices; the executor runs it as an
        // engine copy op on the destination's copy workers (its kernel serves same-device calls).
        OpDef {
            backward_ignores: &[0],
            ..OpDef::new("_CrossDeviceCopy", U, infer_unary, super::copy_kernel)
        }
        .grad(grad::identity)
        .on_gpu(gpu::ops::copy),
    ];
    OPS
}
