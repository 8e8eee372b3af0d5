//! Matrix products: `dot` (2-D with transposes; N-D flattens the leading axes of the left and
//! the trailing axes of the right) and `batch_dot` (3-D, one product per leading index).

use crate::ops::{Call, KResult};
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder};

use super::params::{op_params, Params};
use super::{same_dtypes, Arity, Attrs, Flops, OpDef};
use crate::error::{shape_error, Result};
use crate::ops::gpu;
use crate::ops::grad;
use crate::resources::KernelRes;
use crate::{DType, Element};

/// (rows, inner, cols) of `op(a) x op(b)` for 2-D `a` and `b`.
fn mm_dims(
    op: &str,
    a: &[usize],
    b: &[usize],
    ta: bool,
    tb: bool,
) -> Result<(usize, usize, usize)> {
    let (m, ka) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
    let (kb, n) = if tb { (b[1], b[0]) } else { (b[0], b[1]) };
    if ka != kb {
        return Err(shape_error(
            op,
            "rhs",
            b,
            format!(
                "{} rows{} to match lhs {:?}{}",
                ka,
                if tb { " (transposed)" } else { "" },
                a,
                if ta { " (transposed)" } else { "" }
            ),
        ));
    }
    Ok((m, ka, n))
}

fn as_2d(op: &str, which: &str, s: &[usize], split_last: bool) -> Result<Vec<usize>> {
    match s.len() {
        0 => Err(shape_error(op, which, s, "at least 1 dimension")),
        1 if split_last => Ok(vec![1, s[0]]),
        1 => Ok(vec![s[0], 1]),
        _ if split_last => Ok(vec![s[..s.len() - 1].iter().product(), s[s.len() - 1]]),
        _ => Ok(vec![s[0], s[1..].iter().product()]),
    }
}

op_params! {
    /// The attributes of dot and batch_dot.
    pub struct DotParams for "dot", "batch_dot" {
        transpose_a: bool,
        transpose_b: bool,
    }
}

/// Whether the product reads its left and right operands transposed.
pub(crate) fn transposes(op: &str, attrs: &Attrs) -> Result<(bool, bool)> {
    let a = DotParams::get(op, attrs)?;
    Ok((a.transpose_a, a.transpose_b))
}

fn infer(
    op: &str,
    attrs: &Attrs,
    s: &[Vec<usize>],
    d: &[DType],
) -> Result<(Vec<Vec<usize>>, Vec<DType>)> {
    let dt = same_dtypes(op, d)?;
    let (ta, tb) = transposes(op, attrs)?;
    if op == "batch_dot" {
        for (i, x) in s.iter().enumerate() {
            if x.len() != 3 {
                return Err(shape_error(
                    op,
                    format!("input {i}"),
                    x.clone(),
                    "3 dimensions (batch, rows, cols)",
                ));
            }
        }
        if s[0][0] != s[1][0] {
            return Err(shape_error(
                op,
                "rhs",
                s[1].clone(),
                format!("batch {} like lhs", s[0][0]),
            ));
        }
        let (m, _, n) = mm_dims(op, &s[0][1..], &s[1][1..], ta, tb)?;
        return Ok((vec![vec![s[0][0], m, n]], vec![dt]));
    }
    if (ta || tb) && (s[0].len() != 2 || s[1].len() != 2) {
        return Err(crate::error::invalid(
            op,
            "transpose_a/transpose_b need 2-D inputs",
        ));
    }
    let (a2, b2) = (
        as_2d(op, "lhs", &s[0], true)?,
        as_2d(op, "rhs", &s[1], false)?,
    );
    mm_dims(op, &a2, &b2, ta, tb)?;
    let mut out: Vec<usize> = if ta {
        vec![s[0][1]]
    } else {
        s[0][..s[0].len().saturating_sub(1)].to_vec()
    };
    if tb {
        out.push(s[1][0]);
    } else {
        out.extend_from_slice(&s[1][1.min(s[1].len())..]);
    }
    if out.is_empty() {
        out.push(1);
    }
    Ok((vec![out], vec![dt]))
}

/// `c = op(a) x op(b)` for row-major buffers.
///
/// # Safety
/// `a`, `b`, `c` point to `m*k`, `k*n`, `m*n` elements; `c` does not overlap `a` or `b`.
unsafe fn matmul<T: Element>(
    a: *const T,
    b: *const T,
    c: *mut T,
    (m, k, n): (usize, usize, usize),
    ta: bool,
    tb: bool,
) {
    // Transposes are views with swapped strides, so no data moves.
    let sa = if ta { (1, m) } else { (k, 1) };
    let sb = if tb { (1, k) } else { (n, 1) };
    // SAFETY: per the function's contract.
    let (av, bv, mut cv) = unsafe {
        (
            ArrayView2::from_shape_ptr((m, k).strides(sa), a),
            ArrayView2::from_shape_ptr((k, n).strides(sb), b),
            ArrayViewMut2::from_shape_ptr((m, n), c),
        )
    };
    T::gemm(&av, &bv, &mut cv);
}

/// One call of `dot` or `batch_dot` as the kernels run it: `batch` products, each `op(a) x
/// op(b)` of (rows, inner, cols) `dims`, the matrices of product `i` lying `i` times their size
/// into each buffer.
pub(crate) struct Product {
    pub(crate) batch: usize,
    pub(crate) dims: (usize, usize, usize),
    pub(crate) ta: bool,
    pub(crate) tb: bool,
}

/// The products `op` computes on inputs of shapes `a` and `b` (already inferred valid).
pub(crate) fn product(op: &str, attrs: &Attrs, a: &[usize], b: &[usize]) -> Result<Product> {
    let (ta, tb) = transposes(op, attrs)?;
    let (batch, dims) = if op == "batch_dot" {
        (a[0], mm_dims(op, &a[1..], &b[1..], ta, tb)?)
    } else {
        let (a2, b2) = (as_2d(op, "lhs", a, true)?, as_2d(op, "rhs", b, false)?);
        (1, mm_dims(op, &a2, &b2, ta, tb)?)
    };
    Ok(Product {
        batch,
        dims,
        ta,
        tb,
    })
}

fn kernel(call: Call, _res: &mut KernelRes) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (a, b, c) = (&ins[0], &ins[1], &outs[0]);
    let p = product(op, attrs, &a.shape, &b.shape).map_err(|e| e.to_string())?;
    let (m, k, n) = p.dims;
    crate::with_dtype!(c.dtype, T => {
        for i in 0..p.batch {
            // SAFETY: product i of each buffer lies inside it; the output is disjoint.
            unsafe { matmul::<T>(a.ptr::<T>().add(i * m * k), b.ptr::<T>().add(i * k * n), c.ptr::<T>().add(i * m * n), p.dims, p.ta, p.tb) };
        }
    });
    Ok(())
}

pub(super) fn ops() -> &'static [OpDef] {
    static OPS: &[OpDef] = &[
        OpDef {
            alias_safe: false,
            gradient: Some(grad::dot),
            ..OpDef::new("dot", Arity::Exactly(2), infer, kernel)
        }
        .cost(Flops::Inner, 1.0)
        .on_gpu(gpu::shape::matmul),
        OpDef {
            alias_safe: false,
            gradient: Some(grad::dot),
            ..OpDef::new("batch_dot", Arity::Exactly(2), infer, kernel)
        }
        .cost(Flops::Inner, 1.0)
        .on_gpu(gpu::shape::matmul),
    ];
    OPS
}
