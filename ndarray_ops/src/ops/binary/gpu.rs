//! The binary family on the GPU (`binary.cu`): one kernel for every member, by its code, over
//! at most four merged broadcast dims.

use crate::ops::elemwise::broadcast_strides;
use crate::ops::family::{self, Member};
use crate::ops::gpu::args::{int, kernel_args, ptr, Dim};
use crate::ops::gpu::Stream;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {
    /// `out = x (op) y` with broadcasting.
    struct Binary [binary] {
        /// Elements of `out`.
        n: i64,
        /// The result.
        out: *mut f32,
        /// The left operand.
        x: *mut f32,
        /// The right operand.
        y: *mut f32,
        /// The operation (a [`family::Binary`] member's code).
        code: i64,
        /// Dims used.
        rank: i64,
        /// The output's dims, outermost first.
        dims: [Dim; BINARY_RANK],
        /// `x`'s stride along each (0: broadcast).
        x_strides: [i64; BINARY_RANK],
        /// `y`'s stride along each (0: broadcast).
        y_strides: [i64; BINARY_RANK],
    }
}

/// The most dims the `binary` kernel indexes (its arguments hold four dims and two strides each).
pub(super) const BINARY_RANK: usize = 4;

/// The dims of a broadcast `out = a op b` as the `binary` kernel walks them: `[dim, a's stride,
/// b's stride]` per dim, outermost first, with size-1 dims dropped and each dim merged into the
/// one outside it wherever both inputs step through the pair as through one dim. Equal shapes
/// become one dim, a bias added along one axis at most three.
pub(super) fn broadcast_dims(a: &[usize], b: &[usize], out: &[usize]) -> Vec<[usize; 3]> {
    let (sa, sb) = (broadcast_strides(a, out), broadcast_strides(b, out));
    let mut dims: Vec<[usize; 3]> = Vec::with_capacity(out.len());
    for (d, &n) in out.iter().enumerate().filter(|(_, &n)| n != 1) {
        match dims.last_mut() {
            Some(last) if last[1] == sa[d] * n && last[2] == sb[d] * n => {
                *last = [last[0] * n, sa[d], sb[d]];
            }
            _ => dims.push([n, sa[d], sb[d]]),
        }
    }
    dims
}

pub(crate) fn binary(call: Call, s: &dyn Stream) -> KResult {
    let (def, _, ins, outs) = call.parts();
    let op = def.name;
    let code = Member::binary(def)?.code();
    let (a, b, out) = (&ins[0], &ins[1], &outs[0]);
    let dims = broadcast_dims(&a.shape, &b.shape, &out.shape);
    if dims.len() > BINARY_RANK {
        return Err(format!(
            "{op}: broadcasting {:?} and {:?} to {:?} takes {} dims after merging; the GPU \
             kernel walks at most {BINARY_RANK}",
            a.shape,
            b.shape,
            out.shape,
            dims.len()
        ));
    }
    let n = out.len();
    let mut args = Binary {
        n: int(n),
        out: ptr(out),
        x: ptr(a),
        y: ptr(b),
        code: int(code),
        rank: int(dims.len()),
        dims: [Dim::new(0); BINARY_RANK],
        x_strides: [0; BINARY_RANK],
        y_strides: [0; BINARY_RANK],
    };
    for (d, [dim, sa, sb]) in dims.into_iter().enumerate() {
        args.dims[d] = Dim::new(dim);
        args.x_strides[d] = int(sa);
        args.y_strides[d] = int(sb);
    }
    s.run(k::binary, n, &args)
}

/// `out = a * b` over `n` elements (buffers of equal length; `out` may be either).
pub(crate) fn multiply(
    s: &dyn Stream,
    out: *mut f32,
    a: *mut f32,
    b: *mut f32,
    n: usize,
) -> KResult {
    let code = family::Binary::Mul.code();
    let mut args = Binary {
        n: int(n),
        out,
        x: a,
        y: b,
        code: int(code),
        rank: 1,
        dims: [Dim::new(0); BINARY_RANK],
        x_strides: [0; BINARY_RANK],
        y_strides: [0; BINARY_RANK],
    };
    args.dims[0] = Dim::new(n);
    args.x_strides[0] = 1;
    args.y_strides[0] = 1;
    s.run(k::binary, n, &args)
}
