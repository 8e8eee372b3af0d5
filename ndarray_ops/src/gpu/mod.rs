//! The GPU back end's kernels and the op implementations built on them.
//!
//! Three layers, so that everything but the driver calls runs on any machine:
//!
//! * `kernels.cu`: the device code, CUDA C, every kernel a grid-stride loop over one [`KArgs`];
//! * [`ops`]: one function per op (MXNet's semantics, float32) that launches kernels and GEMMs on a
//!   [`Stream`] — the same op list the CPU kernels implement for `train_digits` and ResNet;
//! * the streams: [`cuda`] (the `cuda` feature) compiles the kernels with NVRTC, runs GEMMs with
//!   cuBLAS and launches on the engine worker's own CUDA stream; the tests' host emulator compiles
//!   `kernels.cu` as C++ and runs each kernel as one loop, with a reference GEMM, so the op layer
//!   and the kernels are checked against the CPU kernels on every machine (no GPU needed).

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(test)]
mod emulate;
pub(crate) mod ops;
#[cfg(test)]
mod tests;

use crate::ops::TensorRef;

/// The kernels' source.
pub(crate) const KERNELS: &str = include_str!("kernels.cu");

/// The names of every kernel in [`KERNELS`] (what a back end loads).
pub(crate) const KERNEL_NAMES: &[&str] = &[
    "fill",
    "binary",
    "scalar",
    "add_n",
    "act_fwd",
    "act_bwd",
    "add_bias",
    "chan_partial",
    "chan_fold",
    "chan_total",
    "bn_prepare",
    "bn_apply",
    "bn_bwd_prepare",
    "bn_bwd_apply",
    "softmax_lanes",
    "softmax_output_bwd",
    "im2col",
    "col2im",
    "pool_fwd",
    "pool_bwd",
    "sgd",
    "sgd_mom",
];

/// A kernel's one argument (the `KArgs` of `kernels.cu`, field for field): device pointers,
/// integers and floats, each kernel documenting which slots it reads.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct KArgs {
    p: [*mut f32; 8],
    i: [i64; 16],
    f: [f32; 8],
}

impl KArgs {
    /// Arguments with `i0 = n` (most kernels' element count).
    pub(crate) fn new(n: usize) -> KArgs {
        let mut i = [0; 16];
        i[0] = n as i64;
        KArgs {
            p: [std::ptr::null_mut(); 8],
            i,
            f: [0.0; 8],
        }
    }

    /// Pointer slot `k` = the tensor's memory.
    pub(crate) fn t(self, k: usize, t: &TensorRef) -> KArgs {
        self.p(k, t.ptr::<f32>())
    }

    /// Pointer slot `k`.
    pub(crate) fn p(mut self, k: usize, p: *mut f32) -> KArgs {
        self.p[k] = p;
        self
    }

    /// Integer slot `k`.
    pub(crate) fn i(mut self, k: usize, v: usize) -> KArgs {
        self.i[k] = v as i64;
        self
    }

    /// Float slot `k`.
    pub(crate) fn f(mut self, k: usize, v: f64) -> KArgs {
        self.f[k] = v as f32;
        self
    }
}

/// `C = op(A) op(B) + beta C` on row-major float32 matrices: `op(A)` is `m x k`, `op(B)` is
/// `k x n`, `C` is `m x n`; `ld*` are the row strides of the matrices as stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemm {
    pub(crate) ta: bool,
    pub(crate) tb: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: *const f32,
    pub(crate) lda: usize,
    pub(crate) b: *const f32,
    pub(crate) ldb: usize,
    pub(crate) c: *mut f32,
    pub(crate) ldc: usize,
    pub(crate) beta: f32,
}

/// What the op layer runs on: one device queue, in order.
pub(crate) trait Stream {
    /// Launches `kernel` with enough threads for `threads` loop indices.
    fn launch(&self, kernel: &'static str, threads: usize, args: &KArgs) -> Result<(), String>;
    /// A matrix product (see [`Gemm`]).
    fn gemm(&self, g: &Gemm) -> Result<(), String> {
        self.gemm_batched(g, 1, [0; 3])
    }
    /// `batch` independent products: product `i` is `g` with `A`, `B` and `C` moved on by `i`
    /// times `strides[0]`, `[1]` and `[2]` elements (a stride of 0 shares that matrix).
    fn gemm_batched(&self, g: &Gemm, batch: usize, strides: [usize; 3]) -> Result<(), String>;
    /// Copies `bytes` from `src` to `dst` (device memory, not overlapping).
    fn copy(&self, src: *const u8, dst: *mut u8, bytes: usize) -> Result<(), String>;
    /// Device scratch memory of at least `bytes`, 8-byte aligned, its own until the op ends.
    fn scratch(&self, bytes: usize) -> Result<*mut u8, String>;
}
