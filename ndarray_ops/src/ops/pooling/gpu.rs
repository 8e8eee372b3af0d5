//! Pooling on the GPU, forward and backward (`pooling.cu`).

use super::{pool_params, PoolType};
use crate::ops::gpu::args::{int, kernel_args, ptr, Dim};
use crate::ops::gpu::ops::e2s;
use crate::ops::gpu::Stream;
use crate::ops::Attrs;
use crate::ops::Call;
use crate::ops::KResult;

kernel_args! {
    /// Pooling over planes (h, w) -> (ho, wo), and its gradient.
    struct Pool [pool_fwd, pool_argmax, pool_bwd] {
        /// Outputs (forward, argmax) or input pixels (gradient).
        n: i64,
        /// The output, the windows' maxima's places, or the data's gradient.
        out: *mut f32,
        /// The data, or (gradient) the output's gradient.
        src: *mut f32,
        /// The data (gradient).
        data: *mut f32,
        /// Max pooling's argmax out (forward); null: none.
        mask: *mut f32,
        /// The windows' maxima's places (gradient); null: searched per pixel.
        argmax: *mut f32,
        /// The data's height.
        h: Dim,
        /// The data's width.
        w: Dim,
        /// The output's height.
        ho: Dim,
        /// The output's width.
        wo: Dim,
        /// The window's height.
        kh: i64,
        /// The window's width.
        kw: i64,
        /// The vertical stride.
        sh: i64,
        /// The horizontal stride.
        sw: i64,
        /// Rows of padding.
        ph: i64,
        /// Columns of padding.
        pw: i64,
        /// 0 max, 1 avg, 2 sum.
        kind: i64,
        /// 1: average pooling divides by the padded window.
        count_pad: i64,
    }
}

/// The pooling kernels' arguments: `n` threads over data of `x_shape` pooled to `ho x wo`.
pub(super) fn pool_args(
    op: &str,
    attrs: &Attrs,
    x_shape: &[usize],
    n: usize,
    ho: usize,
    wo: usize,
) -> Result<Pool, String> {
    let p = pool_params(op, attrs, x_shape).map_err(e2s)?;
    let kind = match p.kind {
        PoolType::Max => 0,
        PoolType::Avg => 1,
        PoolType::Sum => 2,
    };
    Ok(Pool {
        n: int(n),
        out: std::ptr::null_mut(),
        src: std::ptr::null_mut(),
        data: std::ptr::null_mut(),
        mask: std::ptr::null_mut(),
        argmax: std::ptr::null_mut(),
        h: Dim::new(x_shape[2]),
        w: Dim::new(x_shape[3]),
        ho: Dim::new(ho),
        wo: Dim::new(wo),
        kh: int(p.k.0),
        kw: int(p.k.1),
        sh: int(p.s.0),
        sw: int(p.s.1),
        ph: int(p.p.0),
        pw: int(p.p.1),
        kind,
        count_pad: i64::from(p.count_pad),
    })
}

pub(crate) fn pooling(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (x, o) = (&ins[0], &outs[0]);
    let n = o.len();
    let a = Pool {
        out: ptr(o),
        src: ptr(x),
        mask: outs.get(1).map_or(std::ptr::null_mut(), ptr),
        ..pool_args(op, attrs, &x.shape, n, o.shape[2], o.shape[3])?
    };
    s.run(k::pool_fwd, n, &a)
}

pub(crate) fn pooling_backward(call: Call, s: &dyn Stream) -> KResult {
    let (def, attrs, ins, outs) = call.parts();
    let op = def.name;
    let (dy, x) = (&ins[0], &ins[1]);
    let n = x.len();
    let (ho, wo) = (dy.shape[2], dy.shape[3]);
    let mut a = Pool {
        out: ptr(&outs[0]),
        src: ptr(dy),
        data: ptr(x),
        ..pool_args(op, attrs, &x.shape, n, ho, wo)?
    };
    // Max pooling: find each window's maximum once, not once per pixel under the window.
    let (windows, plane) = (dy.len(), x.shape[2] * x.shape[3]);
    if a.kind == 0 && windows > 0 && plane < 1 << 24 {
        let at = s.scratch(windows * 4)?.cast::<f32>();
        let search = Pool {
            n: int(windows),
            out: at,
            src: ptr(x),
            ..a
        };
        s.run(k::pool_argmax, windows, &search)?;
        a.argmax = at;
    }
    s.run(k::pool_bwd, n, &a)
}
