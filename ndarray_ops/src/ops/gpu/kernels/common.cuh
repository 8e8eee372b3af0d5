// What every kernel family (kernels/*.cu, one per op family, beside the Rust module that
// launches it) shares. `gpu::KERNELS` joins this file and the families into one source; NVRTC
// compiles it at run time for the GPU at hand (no CUDA toolkit at build time), and the tests
// compile it as plain C++ and run it on the host, where each kernel is one "thread" looping over
// every index (see emulate.rs). That works because every
// kernel here is written as a grid-stride loop with no shared memory, no barriers and no
// atomics: each index's result depends on that index alone, so any grid gives the same answer.
//
// Every kernel takes one argument struct by value, declared in Rust (gpu/args.rs's kernel_args!
// tables) and written out before the families, so one launch path serves them all. Float32
// only; reductions accumulate in double.

#ifdef __CUDACC_RTC__
#define KERNEL extern "C" __global__
#define FIRST ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define STEP ((long long)blockDim.x * gridDim.x)
#define umulhi32 __umulhi
#define INF_F __int_as_float(0x7f800000)
#else
#include <math.h>
#define KERNEL extern "C"
#define FIRST 0LL
#define STEP 1LL
#define __device__
#define INF_F INFINITY
inline unsigned umulhi32(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
#endif

#define FOR_EACH(t, n) for (long long t = FIRST; t < (long long)(n); t += STEP)

typedef long long i64;

__device__ inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }
__device__ inline i64 max64(i64 a, i64 b) { return a > b ? a : b; }

// An integer a kernel divides by, with its divider m (set by the host: Dim::new in gpu/args.rs).
struct Dim {
    i64 n;
    unsigned long long m;
};

// t / d for t >= 0, the remainder into *r. Index arithmetic is most of the work of the layout
// kernels (im2col, col2im, per-channel maps) and a division costs tens of instructions, so the
// host gives every divisor a multiplier and shift (Granlund and Montgomery's division by an
// invariant integer) and this divides with one multiply-high, an add and a shift, exact while t
// and d are below 2^31; beyond that (m == 0 or t too large) it divides.
__device__ inline i64 split(Dim d, i64 t, i64* r) {
    i64 q;
    if (d.m != 0 && t < 2147483648LL) {
        unsigned n = (unsigned)t;
        q = (i64)((umulhi32(n, (unsigned)d.m) + n) >> (unsigned)(d.m >> 32));
    } else {
        q = t / d.n;
    }
    *r = t - q * d.n;
    return q;
}

// (t / inner) % channels: the channel of element t in an (outer, channels, inner) layout.
__device__ inline i64 channel_of(Dim inner, Dim channels, i64 t) {
    i64 r, c;
    split(channels, split(inner, t, &r), &c);
    return c;
}

// The first element of lane `lane` of an (outer, len, inner) layout (its elements `inner` apart).
__device__ inline i64 lane_start(i64 lane, i64 len, i64 inner) {
    return (lane / inner) * len * inner + lane % inner;
}
