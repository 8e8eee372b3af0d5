//! The GPU back end's kernels and the op implementations built on them.
//!
//! Three layers, so that everything but the driver calls runs on any machine:
//!
//! * `kernels/*.cu` (and the `.cu` of an op's own folder, as `conv/conv.cu`): the device code, CUDA C, one file per op family over `kernels/common.cuh`, every kernel a grid-stride loop over one argument struct ([`args`]);
//! * [`ops`]: one function per op (MXNet's semantics, float32) that launches kernels and GEMMs on a
//!   [`Stream`] — the same op list the CPU kernels implement for `train_digits` and ResNet;
//! * the streams: [`cuda`] (the `cuda` feature) compiles the kernels with NVRTC, runs GEMMs with
//!   cuBLAS and launches on the op's GPU's one stream; the tests' host emulator compiles
//!   the device code as C++ and runs each kernel as one loop, with a reference GEMM, so the op layer
//!   and the kernels are checked against the CPU kernels on every machine (no GPU needed).

pub(crate) mod args;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(feature = "cuda")]
pub(crate) mod cudnn;
pub(crate) mod elemwise;
#[cfg(test)]
mod emulate;
pub(crate) mod gather;
pub(crate) mod gather_nd;
pub(crate) mod indexing;
pub(crate) mod lanes;
pub(crate) mod nn;
pub(crate) mod ops;
mod ptx_cache;
pub(crate) mod reduce;
pub(crate) mod resample;
pub(crate) mod roi;
pub(crate) mod shape;
pub(crate) mod sort;
#[cfg(test)]
mod tests;

use crate::ops::TensorRef;

/// The kernel families' source, after `kernels/common.cuh` and the argument structs (see
/// [`args::source`]).
const FAMILIES: &[&str] = &[
    include_str!("../binary/binary.cu"),
    include_str!("../scalar/scalar.cu"),
    include_str!("../unary/unary.cu"),
    include_str!("kernels/elemwise.cu"),
    include_str!("../leaky_relu/leaky_relu.cu"),
    include_str!("kernels/reduce.cu"),
    include_str!("../reduce/reduce.cu"),
    include_str!("kernels/nn.cu"),
    include_str!("../update/update.cu"),
    include_str!("../softmax/softmax.cu"),
    include_str!("../batch_norm/batch_norm.cu"),
    include_str!("../conv/conv.cu"),
    include_str!("../pooling/pooling.cu"),
    include_str!("kernels/shape.cu"),
    include_str!("../rnn/rnn.cu"),
    include_str!("kernels/indexing.cu"),
    include_str!("kernels/gather.cu"),
    include_str!("kernels/sort.cu"),
    include_str!("kernels/resample.cu"),
    include_str!("kernels/roi.cu"),
];

/// The argument structs of every family (each family's `kernel_args!` table).
const ARG_TABLES: &[&[args::Decl]] = &[
    resample::DECLS,
    sort::DECLS,
    indexing::DECLS,
    gather::DECLS,
    roi::DECLS,
    shape::DECLS,
    gather_nd::DECLS,
    crate::ops::conv::gpu::DECLS,
    crate::ops::pooling::gpu::DECLS,
    reduce::DECLS,
    elemwise::DECLS,
    crate::ops::leaky_relu::gpu::DECLS,
    crate::ops::binary::gpu::DECLS,
    crate::ops::scalar::gpu::DECLS,
    crate::ops::unary::gpu::DECLS,
    crate::ops::reduce::gpu::DECLS,
    nn::DECLS,
    crate::ops::update::gpu::DECLS,
    crate::ops::softmax::gpu::DECLS,
    crate::ops::batch_norm::gpu::DECLS,
    lanes::DECLS,
    crate::ops::rnn::gpu::DECLS,
];

/// A counting sort, for the tables of gradient kernels that gather instead of scattering: item
/// `k` goes to bucket `keys[k]` (none: left out). Returns where each bucket starts in the list
/// (`size + 1` entries, the last the list's length) and the list of items, bucket by bucket, each
/// bucket in item order — so a gradient summed over a bucket adds in the forward pass's order.
fn buckets(
    keys: impl Iterator<Item = Option<usize>> + Clone,
    size: usize,
) -> (Vec<usize>, Vec<usize>) {
    let mut starts = vec![0usize; size + 1];
    for j in keys.clone().flatten() {
        starts[j + 1] += 1;
    }
    for j in 0..size {
        starts[j + 1] += starts[j];
    }
    let mut list = vec![0; starts[size]];
    let mut next = starts.clone();
    for (k, j) in keys.enumerate() {
        if let Some(j) = j {
            list[next[j]] = k;
            next[j] += 1;
        }
    }
    (starts, list)
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

/// Which convolution a [`ConvCall`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ConvPass {
    /// `out = conv(data, filter)`.
    Forward,
    /// `data = the gradient of data` from `out` (the output's gradient) and `filter`.
    Data,
    /// `filter = the gradient of the filters` from `data` and `out` (the output's gradient).
    Filter,
}

// Only cuDNN (the `cuda` feature) reads a call; the host emulator has no convolution library.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl ConvPass {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConvPass::Forward => "convolution forward",
            ConvPass::Data => "convolution backward data",
            ConvPass::Filter => "convolution backward filter",
        }
    }
}

/// The geometry of one 2-D convolution pass for a library that computes it whole (cuDNN):
/// float32, data `x = (n, channels, h, w)`, filters `w = (filters, channels / groups, kh, kw)`,
/// output `y = (n, filters, ho, wo)`, all dense; and what the op allows it. The library
/// remembers its choice of algorithm per shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct ConvShape {
    pub(crate) pass: ConvPass,
    pub(crate) x: [usize; 4],
    pub(crate) w: [usize; 4],
    pub(crate) y: [usize; 4],
    pub(crate) pad: (usize, usize),
    pub(crate) stride: (usize, usize),
    pub(crate) dilate: (usize, usize),
    pub(crate) groups: usize,
    /// The most workspace the pass may use, in bytes.
    pub(crate) workspace: usize,
    /// Whether the library may time its algorithms to choose one (else it takes its
    /// heuristics' first): the op's `cudnn_tune` is not `off`.
    pub(crate) tune: bool,
}

/// One convolution pass: its shape and its buffers. The pass writes (not adds to) its result.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct ConvCall {
    pub(crate) shape: ConvShape,
    /// The data, or its gradient.
    pub(crate) data: *mut f32,
    /// The filters, or their gradient.
    pub(crate) filter: *mut f32,
    /// The output, or its gradient.
    pub(crate) out: *mut f32,
}

/// A block of device memory from [`Stream::lasting`].
pub(crate) trait DeviceBlock: Send {
    /// Where the block starts.
    fn ptr(&self) -> *mut u8;
}

/// What the op layer runs on: one device queue, in order.
pub(crate) trait Stream {
    /// Launches `kernel` with enough threads for `threads` loop indices, passing it the
    /// argument struct at `args` (see [`args`]; launches go through [`run`](dyn Stream::run)).
    fn launch_raw(
        &self,
        kernel: &'static str,
        threads: usize,
        args: args::RawArgs,
    ) -> Result<(), String>;
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
    /// Device scratch memory (as [`Stream::scratch`]) holding a copy of `table`, in the stream's
    /// order: for index tables a kernel reads, too long for its arguments.
    fn upload(&self, table: &[i64]) -> Result<*mut u8, String>;
    /// A copy of `t` (device memory, float32) on the host, once the stream has reached this
    /// point: for the ops whose CPU kernels refuse bad indices, which the op layer checks on the
    /// host with the CPU's code — one wait for the device per call.
    fn download(&self, t: &TensorRef) -> Result<Vec<f32>, String>;
    /// Device memory of at least `bytes` (contents unspecified, 8-byte aligned) that outlives
    /// the op: what a bound node keeps for its backward node. Freed when dropped; work queued
    /// on the stream before then may still read it, as it may read an op's scratch.
    fn lasting(&self, bytes: usize) -> Result<Box<dyn DeviceBlock>, String>;
    /// Runs a convolution pass through a library (cuDNN) where the stream has one; `None`
    /// where it has none, and the op layer uses im2col and GEMMs.
    fn conv(&self, _call: &ConvCall) -> Option<Result<(), String>> {
        None
    }
}

impl dyn Stream + '_ {
    /// Launches `kernel` with `args`, enough threads for `threads` loop indices.
    pub(crate) fn run<A>(
        &self,
        kernel: args::Kernel<A>,
        threads: usize,
        args: &A,
    ) -> Result<(), String> {
        self.launch_raw(kernel.name, threads, args::RawArgs::of(args))
    }
}

#[cfg(test)]
mod divider_tests {
    use super::args::divider;

    /// `split`'s fast path in `kernels/common.cuh`, in Rust.
    fn split(t: u32, packed: u64) -> u32 {
        let hi = ((u64::from(t) * (packed & 0xffff_ffff)) >> 32) as u32;
        (hi + t) >> (packed >> 32)
    }

    #[test]
    fn dividers_divide_exactly_below_two_to_the_31() {
        let big = (1u32 << 31) - 1;
        let mut divisors: Vec<u32> = (1..=2048).collect();
        divisors.extend([
            3_136,
            12_544,
            50_176,
            65_535,
            65_536,
            1 << 20,
            1 << 30,
            big - 1,
            big,
        ]);
        for d in divisors {
            let packed = divider(i64::from(d));
            assert_ne!(packed, 0, "{d}");
            let near = |x: u32| [x.saturating_sub(1), x, x.saturating_add(1).min(big)];
            let mut ts: Vec<u32> = (0..4096).collect();
            for k in [1, 2, 7, 1000, big / d] {
                ts.extend(near(k.saturating_mul(d).min(big)));
            }
            ts.extend(near(big));
            for t in ts {
                assert_eq!(split(t, packed), t / d, "{t} / {d}");
            }
        }
        assert_eq!(divider(0), 0);
        assert_eq!(divider(1 << 31), 0);
    }
}
