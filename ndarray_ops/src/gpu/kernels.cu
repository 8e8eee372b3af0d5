// The GPU back end's kernels. NVRTC compiles this file at run time for the GPU at hand (no CUDA
// toolkit at build time); the tests compile it as plain C++ and run it on the host, where each
// kernel is one "thread" looping over every index (see emulate.rs). That works because every
// kernel here is written as a grid-stride loop with no shared memory, no barriers and no
// atomics: each index's result depends on that index alone, so any grid gives the same answer.
//
// Every kernel takes one KArgs by value (pointers, integers, floats), so one launch path serves
// them all. Float32 only; reductions accumulate in double.

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

// m[k] is i[k]'s divider for split(), set by the host with every integer.
struct KArgs {
    float* p[12];
    i64 i[16];
    float f[8];
    unsigned long long m[16];
};

__device__ inline i64 min64(i64 a, i64 b) { return a < b ? a : b; }
__device__ inline i64 max64(i64 a, i64 b) { return a > b ? a : b; }

// t / i[k] for t >= 0, the remainder into *r. Index arithmetic is most of the work of the
// layout kernels (im2col, col2im, per-channel maps) and a division costs tens of instructions, so
// the host gives every integer a multiplier and shift (m[k]: Granlund and Montgomery's division
// by an invariant integer) and this divides with one multiply-high, an add and a shift, exact
// while t and i[k] are below 2^31; beyond that (m[k] == 0 or t too large) it divides.
__device__ inline i64 split(const KArgs& a, int k, i64 t, i64* r) {
    unsigned long long m = a.m[k];
    i64 q;
    if (m != 0 && t < 2147483648LL) {
        unsigned n = (unsigned)t;
        q = (i64)((umulhi32(n, (unsigned)m) + n) >> (unsigned)(m >> 32));
    } else {
        q = t / a.i[k];
    }
    *r = t - q * a.i[k];
    return q;
}

// (t / i1) % i2: the channel of element t in an (outer, channels = i2, inner = i1) layout.
__device__ inline i64 channel_of(const KArgs& a, i64 t) {
    i64 r, c;
    split(a, 2, split(a, 1, t, &r), &c);
    return c;
}

// p0[t] = f0
KERNEL void fill(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = a.f[0];
}

// x (op) y for the binary and scalar kernels' codes: 0 add, 1 sub, 2 mul, 3 div, 4 maximum,
// 5 minimum, 6 power, 7 equal, 8 not_equal, 9 greater, 10 greater_equal, 11 lesser,
// 12 lesser_equal (comparisons and logic give 1 or 0), 13 hypot, 14 mod (the divisor's sign,
// 0 for a zero divisor, as MXNet), 15 logical_and, 16 logical_or, 17 logical_xor, 18 smooth_l1
// of x with sigma y. Powers, hypot and mod in double, as the CPU kernels.
__device__ inline float apply2(i64 code, float x, float y) {
    switch (code) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        case 3: return x / y;
        case 4: return y > x ? y : x;
        case 5: return y < x ? y : x;
        case 6: return (float)pow((double)x, (double)y);
        case 7: return x == y ? 1.0f : 0.0f;
        case 8: return x != y ? 1.0f : 0.0f;
        case 9: return x > y ? 1.0f : 0.0f;
        case 10: return x >= y ? 1.0f : 0.0f;
        case 11: return x < y ? 1.0f : 0.0f;
        case 12: return x <= y ? 1.0f : 0.0f;
        case 13: return (float)hypot((double)x, (double)y);
        case 14: {
            double b = y;
            if (b == 0.0) return 0.0f;
            double r = fmod((double)x, b);
            if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;
            return (float)r;
        }
        case 15: return (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f;
        case 16: return (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f;
        case 17: return ((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f;
        default: {
            double v = x, s2 = (double)y * (double)y;
            return (float)(fabs(v) < 1.0 / s2 ? 0.5 * s2 * v * v : fabs(v) - 0.5 / s2);
        }
    }
}

// p0 = p1 (op i1) p2 with broadcasting (apply2's codes). The output has rank i2 <= 4 and dims
// i3..i6; p1 and p2 step i7..i10 and i11..i14 elements along those dims (0 where they
// broadcast). The host merges dims first, so equal shapes arrive as rank 1 and need no index
// arithmetic.
KERNEL void binary(KArgs a) {
    i64 rank = a.i[2];
    FOR_EACH(t, a.i[0]) {
        i64 rest = t, ia = 0, ib = 0;
        for (i64 d = rank - 1; d > 0; d--) {
            i64 k;
            rest = split(a, (int)(3 + d), rest, &k);
            ia += k * a.i[7 + d];
            ib += k * a.i[11 + d];
        }
        if (rank > 0) {
            ia += rest * a.i[7];
            ib += rest * a.i[11];
        }
        a.p[0][t] = apply2(a.i[1], a.p[1][ia], a.p[2][ib]);
    }
}

// p0 = p1 (op i1) f0, or f0 (op i1) p1 where i2 is 1 (apply2's codes).
KERNEL void scalar(KArgs a) {
    float s = a.f[0];
    FOR_EACH(t, a.i[0]) {
        float x = a.p[1][t];
        a.p[0][t] = a.i[2] ? apply2(a.i[1], s, x) : apply2(a.i[1], x, s);
    }
}

// p0 = f0 * p1 + f1 clamped to [f2, f3], in double (clip: 1, 0, a_min, a_max; hard_sigmoid:
// alpha, beta, 0, 1). NaN stays NaN, as in the CPU kernels.
KERNEL void clamp_affine(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        double v = (double)a.f[0] * a.p[1][t] + (double)a.f[1];
        a.p[0][t] = (float)(v < a.f[2] ? (double)a.f[2] : (v > a.f[3] ? (double)a.f[3] : v));
    }
}

// where: p0 = p1 (the condition, one per i1 elements) nonzero ? p2 : p3.
KERNEL void where_select(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = a.p[1][t / a.i[1]] != 0.0f ? a.p[2][t] : a.p[3][t];
}

// one_hot: p0 (rows of i1) = f0 where the column is row's index in p1 (truncated; out of range:
// none), else f1.
KERNEL void one_hot(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        i64 col, row = split(a, 1, t, &col);
        float v = a.p[1][row];
        a.p[0][t] = (v >= 0.0f && (i64)v == col) ? a.f[0] : a.f[1];
    }
}

// Reductions along the lanes of an (outer, i1, inner = i2) layout, one index per (outer,
// inner) pair: i3 0 max, 1 min, 2 prod, 3 argmax, 4 argmin (the first extremum, as a float).
// NaN is skipped by max and min as on the CPU (a comparison with NaN is false).
KERNEL void reduce_lanes(KArgs a) {
    i64 len = a.i[1], inner = a.i[2], code = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 i, o = split(a, 2, t, &i);
        const float* x = a.p[1] + o * len * inner + i;
        float r = code == 0 ? -INF_F : (code == 1 ? INF_F : 1.0f), best = 0.0f;
        i64 at = -1;
        for (i64 l = 0; l < len; l++) {
            float v = x[l * inner];
            switch (code) {
                case 0: if (v > r) r = v; break;
                case 1: if (v < r) r = v; break;
                case 2: r *= v; break;
                case 3: if (at < 0 || v > best) { at = l; best = v; } break;
                default: if (at < 0 || v < best) { at = l; best = v; } break;
            }
        }
        a.p[0][t] = code >= 3 ? (float)(at < 0 ? 0 : at) : r;
    }
}

// reduce_lanes split for few long lanes (its layout, i1..i3 and p0, p1), each lane in i4 parts.
// reduce_parts, one thread per (lane, part) (i0 of them): part k takes the lane's elements k,
// k + i4, ... and writes to p2 (doubles, two per part) its product (prod), or its extremum and
// where in the lane that first occurs (-1: nowhere, every element NaN; NaN is skipped, as the
// scan's comparisons skip it). reduce_join, one thread per lane (i0 lanes): the parts' product,
// or the extremum of their extrema, the earliest winning ties (so max and min keep the sign of
// the first of equal zeros, as the scan does); argmax and argmin of a lane whose first element
// is NaN answer 0, as the scan (which starts from the first element) does.
KERNEL void reduce_parts(KArgs a) {
    i64 len = a.i[1], inner = a.i[2], code = a.i[3], parts = a.i[4];
    int most = code == 0 || code == 3;
    double* out = (double*)a.p[2];
    FOR_EACH(t, a.i[0]) {
        i64 lane = t / parts, k0 = t % parts;
        i64 i, o = split(a, 2, lane, &i);
        const float* x = a.p[1] + o * len * inner + i;
        float best = 1.0f;
        i64 at = -1;
        for (i64 l = k0; l < len; l += parts) {
            float v = x[l * inner];
            if (code == 2) {
                best *= v;
            } else if (v == v && (at < 0 || (most ? v > best : v < best))) {
                best = v;
                at = l;
            }
        }
        out[2 * t] = best;
        out[2 * t + 1] = (double)at;
    }
}

KERNEL void reduce_join(KArgs a) {
    i64 len = a.i[1], inner = a.i[2], code = a.i[3], parts = a.i[4];
    int most = code == 0 || code == 3;
    FOR_EACH(lane, a.i[0]) {
        const double* p = (const double*)a.p[2] + 2 * lane * parts;
        float best = 1.0f;
        i64 at = -1;
        for (i64 k = 0; k < parts; k++) {
            float v = (float)p[2 * k];
            i64 pk = (i64)p[2 * k + 1];
            if (code == 2) {
                best *= v;
            } else if (pk >= 0 && (at < 0 || (most ? v > best : v < best) || (v == best && pk < at))) {
                best = v;
                at = pk;
            }
        }
        if (code == 2) {
            a.p[0][lane] = best;
        } else if (code <= 1) {
            a.p[0][lane] = at < 0 ? (code == 0 ? -INF_F : INF_F) : best;
        } else {
            i64 i, o = split(a, 2, lane, &i);
            float first = a.p[1][o * len * inner + i];
            a.p[0][lane] = (first != first || at < 0) ? 0.0f : (float)at;
        }
    }
}

// adam_update in double, MXNet's order: g = clip(rescale f2 * p4 + wd f1 * w, f3), mean p1 =
// f4 p5 + (1 - f4) g, var p2 = f5 p6 + (1 - f5) g^2, p0 = w - lr f0 * mean / (sqrt(var) + f6);
// w = p3.
KERNEL void adam(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        double w = a.p[3][t];
        double g = (double)a.p[4][t] * (double)a.f[2] + (double)a.f[1] * w;
        double clip = a.f[3];
        if (clip > 0.0) g = g < -clip ? -clip : (g > clip ? clip : g);
        double b1 = a.f[4], b2 = a.f[5];
        double mean = b1 * a.p[5][t] + (1.0 - b1) * g;
        double var = b2 * a.p[6][t] + (1.0 - b2) * g * g;
        a.p[1][t] = (float)mean;
        a.p[2][t] = (float)var;
        a.p[0][t] = (float)(w - (double)a.f[0] * mean / (sqrt(var) + (double)a.f[6]));
    }
}

// The sequence ops on data shaped (steps i3, batch i4, inner i5) when i2 (the time axis) is 0,
// or (batch, steps, inner) when it is 1; p2 holds the batch's lengths (null: every sequence is
// full; a length is truncated and clamped to [0, steps]). i1: 0 SequenceMask (p0 = p1, f0
// past each length), 1 SequenceLast (p0, (batch, inner), = p1 at each last step; the first
// for a length of 0), 2 SequenceReverse (each sequence's steps within its length reversed),
// 3 SequenceLast's gradient (p0, the data's shape, = p1, (batch, inner), at each last step,
// 0 elsewhere). i0 = p0's elements.
__device__ inline i64 seq_len(const KArgs& a, i64 n) {
    i64 steps = a.i[3];
    if (!a.p[2]) return steps;
    float v = a.p[2][n];
    i64 l = v > 0.0f ? (i64)v : 0;
    return l < steps ? l : steps;
}

__device__ inline i64 seq_at(const KArgs& a, i64 step, i64 n, i64 i) {
    i64 outer = a.i[2] == 0 ? step * a.i[4] + n : n * a.i[3] + step;
    return outer * a.i[5] + i;
}

KERNEL void sequence(KArgs a) {
    i64 mode = a.i[1], inner = a.i[5];
    FOR_EACH(t, a.i[0]) {
        if (mode == 1) {
            i64 i, n = split(a, 5, t, &i), l = seq_len(a, n);
            a.p[0][t] = a.p[1][seq_at(a, (l > 0 ? l : 1) - 1, n, i)];
            continue;
        }
        i64 i, rest = split(a, 5, t, &i), step, n;
        if (a.i[2] == 0) {
            step = split(a, 4, rest, &n);
        } else {
            n = split(a, 3, rest, &step);
        }
        i64 l = seq_len(a, n);
        if (mode == 0) {
            a.p[0][t] = step >= l ? a.f[0] : a.p[1][t];
        } else if (mode == 2) {
            a.p[0][t] = a.p[1][seq_at(a, step < l ? l - 1 - step : step, n, i)];
        } else {
            a.p[0][t] = step == (l > 0 ? l : 1) - 1 ? a.p[1][n * inner + i] : 0.0f;
        }
    }
}

// p0 = p1 + ... + p(i1), 1 <= i1 <= 7. Each index reads all its inputs before writing, so the
// output may be one of the inputs.
KERNEL void add_n(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        float s = 0.0f;
        for (i64 k = 0; k < a.i[1]; k++) s += a.p[1 + k][t];
        a.p[0][t] = s;
    }
}

// Activations by code: 0 relu, 1 sigmoid, 2 tanh, 3 softrelu, 4 softsign.
__device__ inline float activate(i64 kind, float x) {
    switch (kind) {
        case 0: return fmaxf(x, 0.0f);
        case 1: return 1.0f / (1.0f + expf(-x));
        case 2: return tanhf(x);
        case 3: return x > 20.0f ? x : log1pf(expf(x));
        default: return x / (1.0f + fabsf(x));
    }
}

// The derivative as a function of the activation's output y (codes as above).
__device__ inline float activate_grad(i64 kind, float y) {
    switch (kind) {
        case 0: return y > 0.0f ? 1.0f : 0.0f;
        case 1: return y * (1.0f - y);
        case 2: return 1.0f - y * y;
        case 3: return 1.0f - expf(-y);
        default: return (1.0f - fabsf(y)) * (1.0f - fabsf(y));
    }
}

// p0 = act(p1), act = i1.
KERNEL void act_fwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = activate(a.i[1], a.p[1][t]);
}

// p0 = p1 (output gradient) * act'(p2 = output).
KERNEL void act_bwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = a.p[1][t] * activate_grad(a.i[1], a.p[2][t]);
}

// p0[t] += p1[c], c = (t / i1) % i2: a bias per channel of an (outer, i2, i1) layout.
KERNEL void add_bias(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] += a.p[1][channel_of(a, t)];
}

// Per-channel sums over an (outer = i1, channels = i0, inner = i2) layout, in steps so that
// many threads share a channel: chan_partial writes i3 partial sums per channel (doubles, into
// p0), chan_fold adds runs of them up until few are left, and chan_total (or BatchNorm's
// prepare kernels) adds those. Mode (i4) 0 sums p1 into one plane of partial sums; modes 1 and 2
// sum two things in the same pass, into two planes (all channels' first sums, then all their
// second sums, so that the folds treat them as 2 * i0 channels): 1 sums p1 and p1^2, 2 sums p1
// and p1 * p2. One pass reads the data once where a sum around the mean needs the mean first;
// in double, E[x^2] - E[x]^2 loses nothing that matters for float data (a float's square is
// exact in a double).
KERNEL void chan_partial(KArgs a) {
    i64 channels = a.i[0], inner = a.i[2], parts = a.i[3], mode = a.i[4];
    i64 m = a.i[1] * inner;
    // Partial sum k of channel c takes elements k, k + parts, ... of the channel; neighbouring
    // threads read neighbouring addresses. Element e lies at (e / inner, e % inner); stepping
    // e by parts moves that pair by (dq, dr), so the loop needs no division.
    i64 dq = parts / inner, dr = parts % inner;
    double* out = (double*)a.p[0];
    FOR_EACH(t, channels * parts) {
        i64 c = t / parts, e = t % parts;
        i64 o = e / inner, i = e % inner;
        double s = 0.0, s2 = 0.0;
        for (; e < m; e += parts) {
            i64 at = (o * channels + c) * inner + i;
            double v = a.p[1][at];
            s += v;
            if (mode == 1) {
                s2 += v * v;
            } else if (mode == 2) {
                s2 += v * (double)a.p[2][at];
            }
            o += dq;
            i += dr;
            if (i >= inner) {
                i -= inner;
                o += 1;
            }
        }
        out[t] = s;
        if (mode != 0) out[channels * parts + t] = s2;
    }
}

// p0[t] = the sum of p1[t * i1 .. (t + 1) * i1) clipped to each channel's i2 partial sums
// (doubles both), over i0 = channels * ceil(i2 / i1) outputs.
KERNEL void chan_fold(KArgs a) {
    i64 run = a.i[1], parts = a.i[2], folded = (parts + run - 1) / run;
    const double* in = (const double*)a.p[1];
    double* out = (double*)a.p[0];
    FOR_EACH(t, a.i[0]) {
        i64 c = t / folded, k0 = (t % folded) * run, k1 = min64(k0 + run, parts);
        double s = 0.0;
        for (i64 k = k0; k < k1; k++) s += in[c * parts + k];
        out[t] = s;
    }
}

// The sum of channel c's n partial sums (doubles) at p.
__device__ inline double chan_sum(const float* p, i64 c, i64 n) {
    const double* part = (const double*)p + c * n;
    double s = 0.0;
    for (i64 k = 0; k < n; k++) s += part[k];
    return s;
}

// p0[c] = f0 * (the i1 partial sums of channel c in p1), for i0 channels.
KERNEL void chan_total(KArgs a) {
    FOR_EACH(c, a.i[0]) a.p[0][c] = (float)(chan_sum(a.p[1], c, a.i[1]) * a.f[0]);
}

// BatchNorm forward, per channel (i0 channels): p0 mean and p1 var out (the batch's when i1
// says batch statistics, else the moving ones), p2 gamma, p3 beta, p4 moving mean, p5 moving
// var (updated with momentum f1 under batch statistics), p6 scale out for bn_apply; under batch statistics p7 holds chan_partial's two planes of sums of
// x and x^2 (i3 partial sums per channel) over f2 elements per channel. f0 eps, i2 fix_gamma.
KERNEL void bn_prepare(KArgs a) {
    FOR_EACH(c, a.i[0]) {
        float mean, var;
        if (a.i[1]) {
            double n = a.f[2];
            double m = chan_sum(a.p[7], c, a.i[3]) / n;
            double sq = chan_sum(a.p[7], a.i[0] + c, a.i[3]) / n;
            mean = (float)m;
            var = (float)fmax(sq - m * m, 0.0);
            float mom = a.f[1];
            a.p[4][c] = a.p[4][c] * mom + mean * (1.0f - mom);
            a.p[5][c] = a.p[5][c] * mom + var * (1.0f - mom);
        } else {
            mean = a.p[4][c];
            var = a.p[5][c];
        }
        a.p[0][c] = mean;
        a.p[1][c] = var;
        float g = a.i[2] ? 1.0f : a.p[2][c];
        a.p[6][c] = g / sqrtf(var + a.f[0]);
    }
}

// p0[t] = (p1[t] - p4[c]) * p2[c] + p3[c] (x, mean, scale, beta), c = (t / i1) % i2. Centring
// first keeps data far from zero accurate, where x * scale + (beta - mean * scale) cancels.
KERNEL void bn_apply(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        i64 c = channel_of(a, t);
        a.p[0][t] = (a.p[1][t] - a.p[4][c]) * a.p[2][c] + a.p[3][c];
    }
}

// BatchNorm backward, per channel (i0 channels): p0 gets the gamma gradient and p1 the beta
// gradient; p2 gamma, p3 var, p5 mean; p6 holds chan_partial's two planes of sums of dy and
// dy * x (i3 partial sums per channel), so that sum(dy * (x - mean)) = sum(dy * x) - mean *
// sum(dy). Writes bn_bwd_apply's coefficients ka, kb, kc to p4 (three runs of i0 floats). f0
// eps, f1 elements per channel, i1 batch statistics, i2 fix_gamma.
KERNEL void bn_bwd_prepare(KArgs a) {
    i64 channels = a.i[0];
    FOR_EACH(c, channels) {
        double dy = chan_sum(a.p[6], c, a.i[3]);
        double dy_x = chan_sum(a.p[6], channels + c, a.i[3]);
        float dy_centred = (float)(dy_x - (double)a.p[5][c] * dy);
        float inv = 1.0f / sqrtf(a.p[3][c] + a.f[0]);
        float dy_xhat = dy_centred * inv;
        float g = a.i[2] ? 1.0f : a.p[2][c];
        float* k = a.p[4];
        k[c] = g * inv;
        k[channels + c] = a.i[1] ? (float)(dy / a.f[1]) : 0.0f;
        k[2 * channels + c] = a.i[1] ? dy_xhat * inv / a.f[1] : 0.0f;
        a.p[0][c] = a.i[2] ? 0.0f : dy_xhat;
        a.p[1][c] = (float)dy;
    }
}

// p0 = ka[c] * (p1 - kb[c] - (p2 - mean[c]) * kc[c]); p3 mean, p4 ka, p5 kb, p6 kc;
// c = (t / i1) % i2.
KERNEL void bn_bwd_apply(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        i64 c = channel_of(a, t);
        a.p[0][t] = a.p[4][c] * (a.p[1][t] - a.p[5][c] - (a.p[2][t] - a.p[3][c]) * a.p[6][c]);
    }
}

// Softmax over axis 1 of an (outer, i1, i2) layout at temperature f0, one thread per lane (i0
// lanes): p0 = softmax(p1 / f0), or its logarithm where i3 is set.
KERNEL void softmax_lanes(KArgs a) {
    i64 len = a.i[1], inner = a.i[2];
    double temp = a.f[0];
    FOR_EACH(t, a.i[0]) {
        i64 base = (t / inner) * len * inner + t % inner;
        const float* x = a.p[1] + base;
        float* y = a.p[0] + base;
        double m = x[0] / temp;
        for (i64 k = 1; k < len; k++) m = fmax(m, x[k * inner] / temp);
        double z = 0.0;
        for (i64 k = 0; k < len; k++) z += exp(x[k * inner] / temp - m);
        double logz = log(z);
        for (i64 k = 0; k < len; k++) {
            double s = x[k * inner] / temp - m;
            y[k * inner] = (float)(a.i[3] ? s - logz : exp(s) / z);
        }
    }
}

// softmax_lanes' gradient, per lane: p0 = d data from p1 (the output's gradient) and p2 (the
// output); softmax: y * (g - sum(g * y)) / f0; log_softmax (i3): (g - exp(y) * sum(g)) / f0.
KERNEL void softmax_lanes_bwd(KArgs a) {
    i64 len = a.i[1], inner = a.i[2];
    double temp = a.f[0];
    FOR_EACH(t, a.i[0]) {
        i64 base = (t / inner) * len * inner + t % inner;
        const float* g = a.p[1] + base;
        const float* y = a.p[2] + base;
        float* dx = a.p[0] + base;
        double s = 0.0;
        for (i64 k = 0; k < len; k++) s += a.i[3] ? (double)g[k * inner] : (double)g[k * inner] * y[k * inner];
        for (i64 k = 0; k < len; k++) {
            double gk = g[k * inner], yk = y[k * inner];
            dx[k * inner] = (float)((a.i[3] ? gk - exp(yk) * s : yk * (gk - s)) / temp);
        }
    }
}

// softmax_lanes and softmax_lanes_bwd split for few long lanes (as gpu/ops.rs's over_lanes
// runs them), with their layout, i1..i3, f0 and p0..p2, each lane in i5 parts so that many
// threads share a lane; i6 says backward. softmax_parts, one thread per (lane, part) (i0 of
// them): part k of a lane takes its elements k, k + i5, ... (neighbouring threads read
// neighbouring addresses) and writes to p7 (doubles) their maximum and their sum of exp(x -
// that maximum), of x / f0 (backward: the sum of g * y, or of g for log_softmax). softmax_join,
// one thread per lane (i0 lanes): the lane's maximum and sum of exp from its parts (backward:
// its sum) into p8 (doubles, two per lane). softmax_each, one thread per element (i0 of them):
// p0 as the lane kernels compute it, from the lane's figures in p8.
__device__ inline i64 lane_start(i64 lane, i64 len, i64 inner) {
    return (lane / inner) * len * inner + lane % inner;
}

KERNEL void softmax_parts(KArgs a) {
    i64 len = a.i[1], inner = a.i[2], parts = a.i[5];
    double temp = a.f[0];
    double* out = (double*)a.p[7];
    FOR_EACH(t, a.i[0]) {
        i64 lane = t / parts, k0 = t % parts;
        i64 base = lane_start(lane, len, inner);
        const float* x = a.p[1] + base;
        if (a.i[6]) {
            const float* y = a.p[2] + base;
            double s = 0.0;
            for (i64 k = k0; k < len; k += parts)
                s += a.i[3] ? (double)x[k * inner] : (double)x[k * inner] * y[k * inner];
            out[2 * t] = s;
            continue;
        }
        double m = x[k0 * inner] / temp;
        for (i64 k = k0 + parts; k < len; k += parts) m = fmax(m, x[k * inner] / temp);
        double z = 0.0;
        for (i64 k = k0; k < len; k += parts) z += exp(x[k * inner] / temp - m);
        out[2 * t] = m;
        out[2 * t + 1] = z;
    }
}

KERNEL void softmax_join(KArgs a) {
    i64 parts = a.i[5];
    FOR_EACH(lane, a.i[0]) {
        const double* p = (const double*)a.p[7] + 2 * lane * parts;
        double* out = (double*)a.p[8] + 2 * lane;
        if (a.i[6]) {
            double s = 0.0;
            for (i64 k = 0; k < parts; k++) s += p[2 * k];
            out[0] = s;
            continue;
        }
        double m = p[0];
        for (i64 k = 1; k < parts; k++) m = fmax(m, p[2 * k]);
        double z = 0.0;
        for (i64 k = 0; k < parts; k++) z += p[2 * k + 1] * exp(p[2 * k] - m);
        out[0] = m;
        out[1] = z;
    }
}

KERNEL void softmax_each(KArgs a) {
    i64 len = a.i[1], inner = a.i[2];
    double temp = a.f[0];
    FOR_EACH(t, a.i[0]) {
        i64 r, q = split(a, 2, t, &r);
        const double* lane = (const double*)a.p[8] + 2 * ((q / len) * inner + r);
        if (a.i[6]) {
            double g = a.p[1][t], y = a.p[2][t];
            a.p[0][t] = (float)((a.i[3] ? g - exp(y) * lane[0] : y * (g - lane[0])) / temp);
            continue;
        }
        double s = a.p[1][t] / temp - lane[0];
        a.p[0][t] = (float)(a.i[3] ? s - log(lane[1]) : exp(s) / lane[1]);
    }
}

// SoftmaxOutput's gradient on an (n, i1) output: p0 = (p1 - onehot(p2)) * f0.
// i2 = 1: rows labelled f1 (ignore_label) pass no gradient.
KERNEL void softmax_output_bwd(KArgs a) {
    i64 classes = a.i[1];
    FOR_EACH(t, a.i[0]) {
        float label = a.p[2][t / classes];
        float hit = (label >= 0.0f && (i64)label == t % classes) ? 1.0f : 0.0f;
        bool ignored = a.i[2] != 0 && label == a.f[1];
        a.p[0][t] = ignored ? 0.0f : (a.p[1][t] - hit) * a.f[0];
    }
}

// Receptive fields of a channel group of i13 images as columns: p1 holds the images, i14 floats
// apart, each (cg, h, w); p0 gets (cg*kh*kw, i13, ho*wo), so that one image's columns are a
// submatrix (row stride i13*ho*wo) and all images' columns side by side are one matrix. i0 = the
// column buffer's size, i1 h, i2 w, i3 kh, i4 kw, i5 sh, i6 sw, i7 ph, i8 pw, i9 dh, i10 dw,
// i11 ho, i12 wo. With a 1x1 window this regroups planes: (nb, rows, plane) -> (rows, nb, plane).
KERNEL void im2col(KArgs a) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[3], kw = a.i[4], ho = a.i[11], wo = a.i[12];
    i64 nb = a.i[13];
    FOR_EACH(t, a.i[0]) {
        i64 x, y, b, j, i;
        i64 row = split(a, 13, split(a, 11, split(a, 12, t, &x), &y), &b);
        i64 ch = split(a, 3, split(a, 4, row, &j), &i);
        i64 iy = y * a.i[5] + i * a.i[9] - a.i[7];
        i64 ix = x * a.i[6] + j * a.i[10] - a.i[8];
        bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        a.p[0][t] = inside ? a.p[1][b * a.i[14] + (ch * h + iy) * w + ix] : 0.0f;
    }
}

// The adjoint: each pixel of i13 images at p0 (i14 floats apart, each (i15 = cg, h, w)) gathers
// the entries of the columns p1 (laid out as im2col writes them) that read it.
// i0 = i13*cg*h*w, other integers as for im2col.
KERNEL void col2im(KArgs a) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[3], kw = a.i[4], sh = a.i[5], sw = a.i[6];
    i64 ph = a.i[7], pw = a.i[8], dh = a.i[9], dw = a.i[10], ho = a.i[11], wo = a.i[12];
    i64 nb = a.i[13], cg = a.i[15];
    FOR_EACH(t, a.i[0]) {
        i64 ix, iy, ch;
        i64 b = split(a, 15, split(a, 1, split(a, 2, t, &ix), &iy), &ch);
        double s = 0.0;
        for (i64 i = 0; i < kh; i++) {
            i64 ny = iy + ph - i * dh, oy, ry;
            if (ny < 0) continue;
            oy = split(a, 5, ny, &ry);
            if (ry != 0 || oy >= ho) continue;
            for (i64 j = 0; j < kw; j++) {
                i64 nx = ix + pw - j * dw, ox, rx;
                if (nx < 0) continue;
                ox = split(a, 6, nx, &rx);
                if (rx != 0 || ox >= wo) continue;
                i64 row = (ch * kh + i) * kw + j;
                s += a.p[1][(row * nb + b) * ho * wo + oy * wo + ox];
            }
        }
        a.p[0][b * a.i[14] + (ch * h + iy) * w + ix] = (float)s;
    }
}

// One pooling window, clipped as MXNet clips it: [*y0, *y1) x [*x0, *x1) is read; *padded is the
// window clipped to the padded input (what average pooling divides by by default).
struct Window {
    i64 y0, y1, x0, x1;
    double padded;
};

__device__ inline Window pool_window(const KArgs& a, i64 y, i64 x) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[5], kw = a.i[6], sh = a.i[7], sw = a.i[8];
    i64 ph = a.i[9], pw = a.i[10];
    i64 ys = y * sh - ph, ye = min64(ys + kh, h + ph);
    i64 xs = x * sw - pw, xe = min64(xs + kw, w + pw);
    Window win;
    win.padded = (double)max64((ye - ys) * (xe - xs), 1);
    win.y0 = max64(ys, 0);
    win.y1 = min64(max64(ye, 0), h);
    win.x0 = max64(xs, 0);
    win.x1 = min64(max64(xe, 0), w);
    return win;
}

// Where the first maximum of a window lies (-1 for an empty window).
__device__ inline i64 window_argmax(const float* plane, i64 w, const Window& win) {
    i64 at = -1;
    float best = 0.0f;
    for (i64 iy = win.y0; iy < win.y1; iy++)
        for (i64 ix = win.x0; ix < win.x1; ix++) {
            float v = plane[iy * w + ix];
            if (at < 0 || v > best) {
                best = v;
                at = iy * w + ix;
            }
        }
    return at;
}

// Pooling: p1 (planes, h, w) -> p0 (planes, ho, wo), and for max pooling the argmax into p2 when
// i13 is set. i0 outputs, i1 h, i2 w, i3 ho, i4 wo, i5 kh, i6 kw, i7 sh, i8 sw, i9 ph, i10 pw,
// i11 kind (0 max, 1 avg, 2 sum), i12 count_include_pad.
KERNEL void pool_fwd(KArgs a) {
    i64 h = a.i[1], w = a.i[2], ho = a.i[3], wo = a.i[4], kind = a.i[11];
    FOR_EACH(t, a.i[0]) {
        i64 x, y;
        i64 plane = split(a, 3, split(a, 4, t, &x), &y);
        const float* src = a.p[1] + plane * h * w;
        Window win = pool_window(a, y, x);
        double r;
        if (kind == 0) {
            i64 at = window_argmax(src, w, win);
            r = at < 0 ? 0.0 : src[at];
            if (a.i[13]) a.p[2][t] = (float)(at < 0 ? 0 : at);
        } else {
            double s = 0.0;
            for (i64 iy = win.y0; iy < win.y1; iy++)
                for (i64 ix = win.x0; ix < win.x1; ix++) s += src[iy * w + ix];
            double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
            r = kind == 2 ? s : s / (a.i[12] ? win.padded : inside);
        }
        a.p[0][t] = (float)r;
    }
}

// Max pooling's window maxima for its gradient: p0[t] = where in its plane output window t's
// first maximum lies in p1 (planes, h, w), -1 for an empty window; exact while h * w < 2^24.
// Integers as for pool_fwd.
KERNEL void pool_argmax(KArgs a) {
    i64 h = a.i[1], w = a.i[2];
    FOR_EACH(t, a.i[0]) {
        i64 x, y;
        i64 plane = split(a, 3, split(a, 4, t, &x), &y);
        a.p[0][t] = (float)window_argmax(a.p[1] + plane * h * w, w, pool_window(a, y, x));
    }
}

// Pooling's gradient, gathered: each input pixel of p0 (planes, h, w) adds up the output
// gradients p1 of the windows that took it (max: it is the window's first maximum in the data
// p2, read from pool_argmax's p3 when given: one search per window instead of one per window
// and pixel under it). Integers as for pool_fwd, but i0 = the number of input pixels.
KERNEL void pool_bwd(KArgs a) {
    i64 h = a.i[1], w = a.i[2], ho = a.i[3], wo = a.i[4], kh = a.i[5], kw = a.i[6];
    i64 sh = a.i[7], sw = a.i[8], ph = a.i[9], pw = a.i[10], kind = a.i[11];
    FOR_EACH(t, a.i[0]) {
        i64 ix, iy;
        i64 plane = split(a, 1, split(a, 2, t, &ix), &iy);
        const float* data = a.p[2] + plane * h * w;
        const float* dy = a.p[1] + plane * ho * wo;
        // Windows y with y*sh - ph <= iy < y*sh - ph + kh.
        i64 lo_y = iy + ph - kh + 1, lo_x = ix + pw - kw + 1;
        i64 y_first = lo_y <= 0 ? 0 : (lo_y + sh - 1) / sh;
        i64 x_first = lo_x <= 0 ? 0 : (lo_x + sw - 1) / sw;
        i64 y_last = min64((iy + ph) / sh, ho - 1), x_last = min64((ix + pw) / sw, wo - 1);
        double s = 0.0;
        for (i64 y = y_first; y <= y_last; y++)
            for (i64 x = x_first; x <= x_last; x++) {
                Window win = pool_window(a, y, x);
                if (iy < win.y0 || iy >= win.y1 || ix < win.x0 || ix >= win.x1) continue;
                double g = dy[y * wo + x];
                if (kind == 0) {
                    i64 at = a.p[3] ? (i64)a.p[3][(plane * ho + y) * wo + x]
                                    : window_argmax(data, w, win);
                    if (at == iy * w + ix) s += g;
                } else if (kind == 2) {
                    s += g;
                } else {
                    double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
                    s += g / (a.i[12] ? win.padded : inside);
                }
            }
        a.p[0][t] = (float)s;
    }
}

__device__ inline float prepared_grad(float g, float w, const KArgs& a) {
    g *= a.f[2];
    if (a.f[3] > 0.0f) g = fminf(fmaxf(g, -a.f[3]), a.f[3]);
    return g + a.f[1] * w;
}

// sgd_update: p0 = p1 - lr * grad(p2); f0 lr, f1 wd, f2 rescale_grad, f3 clip_gradient.
KERNEL void sgd(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        float w = a.p[1][t];
        a.p[0][t] = w - a.f[0] * prepared_grad(a.p[2][t], w, a);
    }
}

// sgd_mom_update: m = f4 * p4 - lr * grad(p3); p1 = m; p0 = p2 + m.
KERNEL void sgd_mom(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        float w = a.p[2][t];
        float m = a.f[4] * a.p[4][t] - a.f[0] * prepared_grad(a.p[3][t], w, a);
        a.p[1][t] = m;
        a.p[0][t] = w + m;
    }
}

// splitmix64's output function: a bijection of 64-bit words whose outputs for consecutive inputs
// pass statistical tests, so that element t's random number is a function of (seed, t) alone.
__device__ inline unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// Draw k of the stream `seed`: uniform in [0, 1), 53 bits.
__device__ inline double draw(unsigned long long seed, i64 k) {
    unsigned long long bits = mix64(seed + (unsigned long long)(k + 1) * 0x9E3779B97F4A7C15ULL);
    return (double)(bits >> 11) * (1.0 / 9007199254740992.0);
}

// Dropout: p1 = the mask (0 where element t's uniform draw from seed i1 is below f0, else f1 =
// 1 / (1 - p)), p0 = p2 * mask. With f0 = 0 and f1 = 1 it copies (inference).
KERNEL void dropout(KArgs a) {
    unsigned long long seed = (unsigned long long)a.i[1];
    double p = a.f[0];
    FOR_EACH(t, a.i[0]) {
        double u = draw(seed, t);
        float m = u < p ? 0.0f : a.f[1];
        a.p[1][t] = m;
        a.p[0][t] = a.p[2][t] * m;
    }
}

// The normalization kernels' shared steps (layout and arguments as norm_fwd and norm_bwd
// below). The gamma entry scaling element k of group g: its position (i3 = 0) or the group's
// outer index modulo i3.
__device__ inline i64 norm_scale(const KArgs& a, i64 g, i64 k) {
    return a.i[3] ? (g / a.i[2]) % a.i[3] : k;
}

// Over a group's elements k0, k0 + step, ... (x its first): their mean (L2: 0) into m[0] and
// their squared deviations from it summed into m[1].
__device__ inline void norm_moments(const KArgs& a, const float* x, i64 k0, i64 step, double* m) {
    i64 len = a.i[1], inner = a.i[2];
    double mean = 0.0, m2 = 0.0;
    if (!a.i[4]) {
        for (i64 k = k0; k < len; k += step) mean += x[k * inner];
        mean /= (double)((len - k0 + step - 1) / step);
    }
    for (i64 k = k0; k < len; k += step) m2 += (x[k * inner] - mean) * (x[k * inner] - mean);
    m[0] = mean;
    m[1] = m2;
}

// Group g's deviation sqrt(m2 / len + f0) (L2: the norm sqrt(m2 + f0)), written with the mean
// to the hidden outputs p4 and p5 (L2: the norm to p4); returns it.
__device__ inline double norm_stats(const KArgs& a, i64 g, double mean, double m2) {
    double denom = sqrt((a.i[4] ? m2 : m2 / (double)a.i[1]) + a.f[0]);
    if (a.i[4]) {
        a.p[4][g] = (float)denom;
    } else {
        a.p[4][g] = (float)mean;
        a.p[5][g] = (float)denom;
    }
    return denom;
}

// p0 at element `at` (gamma entry c) from its group's mean and deviation.
__device__ inline void norm_out(const KArgs& a, i64 at, i64 c, double mean, double denom) {
    double v = (a.p[1][at] - mean) / denom;
    a.p[0][at] = (float)(a.i[4] ? v : v * a.p[2][c] + a.p[3][c]);
}

// The gradient's two sums over group g's elements k0, k0 + step, ...: of d (p1, the output's
// gradient, times gamma but for L2) into s[0] and of h * d (h the normalized data; L2: the
// output p2) into s[1].
__device__ inline void norm_grad_sums(const KArgs& a, i64 g, i64 k0, i64 step, double* s) {
    i64 len = a.i[1], inner = a.i[2], l2 = a.i[4];
    i64 base = lane_start(g, len, inner);
    const float* og = a.p[1] + base;
    const float* x = a.p[2] + base;
    double denom = a.p[5][g], mean = l2 ? 0.0 : a.p[4][g];
    double sum_d = 0.0, dot = 0.0;
    for (i64 k = k0; k < len; k += step) {
        double h = l2 ? (double)x[k * inner] : (x[k * inner] - mean) / denom;
        double d = og[k * inner];
        if (!l2) d *= a.p[3][norm_scale(a, g, k)];
        dot += h * d;
        sum_d += d;
    }
    s[0] = sum_d;
    s[1] = dot;
}

// p0 (and, where given, p6 = the output's gradient times h) at element `at` of group g (gamma
// entry c) from the group's gradient sums.
__device__ inline void norm_grad_at(const KArgs& a, i64 at, i64 g, i64 c, double sum_d, double dot) {
    i64 l2 = a.i[4];
    double len = (double)a.i[1], denom = a.p[5][g], mean = l2 ? 0.0 : a.p[4][g];
    double h = l2 ? (double)a.p[2][at] : (a.p[2][at] - mean) / denom;
    double o = a.p[1][at], d = l2 ? o : o * a.p[3][c];
    double mean_d = l2 ? 0.0 : sum_d / len, dt = l2 ? dot : dot / len;
    if (a.p[6]) a.p[6][at] = (float)(o * h);
    a.p[0][at] = (float)((d - mean_d - h * dt) / denom);
}

// The normalizations over groups of i1 elements i2 apart (group g starts at (g / i2) * i1 * i2 +
// g % i2), one thread per group (i0 groups): p0 = (p1 - mean) / sqrt(var + f0) * gamma + beta
// (p2 gamma, p3 beta; i3 = 0: indexed by the position in the group, else by (g / i2) % i3),
// each group's mean into p4 and sqrt(var + f0) into p5; with i4 (L2Normalization) p0 = p1 /
// sqrt(sum p1^2 + f0) and that norm into p4.
KERNEL void norm_fwd(KArgs a) {
    i64 len = a.i[1], inner = a.i[2];
    FOR_EACH(g, a.i[0]) {
        i64 base = lane_start(g, len, inner);
        double m[2];
        norm_moments(a, a.p[1] + base, 0, 1, m);
        double denom = norm_stats(a, g, m[0], m[1]);
        for (i64 k = 0; k < len; k++) norm_out(a, base + k * inner, norm_scale(a, g, k), m[0], denom);
    }
}

// norm_fwd's gradient, per group (layout and i0..i4 as there): p0 = d data from p1 (the output's
// gradient), p2 the data (L2: the output), p3 gamma, p4 mean and p5 std (L2: p5 the norm); with
// p6 given, p6 = p1 * the normalized data, whose sums per gamma entry are gamma's gradient.
KERNEL void norm_bwd(KArgs a) {
    i64 len = a.i[1], inner = a.i[2];
    FOR_EACH(g, a.i[0]) {
        i64 base = lane_start(g, len, inner);
        double sums[2];
        norm_grad_sums(a, g, 0, 1, sums);
        for (i64 k = 0; k < len; k++)
            norm_grad_at(a, base + k * inner, g, norm_scale(a, g, k), sums[0], sums[1]);
    }
}

// norm_fwd and norm_bwd split for few long groups (as gpu/ops.rs's over_lanes runs them; layout,
// i1..i4, f0 and p0..p6 as there), each group in i5 parts so that many threads share a group;
// i6 says backward. norm_parts, one thread per (group, part) (i0 of them): part k of a group
// takes its elements k, k + i5, ... and writes two doubles to p7: forward, their mean and
// their squared deviations from it summed (L2: 0 and the sum of squares); backward, the sums
// of d and of h * d (norm_bwd's). norm_join, one thread per group (i0 groups): forward, the
// group's mean and deviation from its parts' (Chan, Golub and LeVeque's pairwise update: a
// part's mean differing from the running one adds to the squared deviations) into p8
// (doubles, two per group) and the hidden outputs; backward, the parts' sums into p8.
// norm_each, one thread per element (i0 of them): p0 as norm_fwd or norm_bwd computes it, from
// the group's figures in p8.
KERNEL void norm_parts(KArgs a) {
    i64 len = a.i[1], inner = a.i[2], parts = a.i[5];
    double* out = (double*)a.p[7];
    FOR_EACH(t, a.i[0]) {
        i64 g = t / parts, k0 = t % parts;
        if (a.i[6]) {
            norm_grad_sums(a, g, k0, parts, out + 2 * t);
        } else {
            norm_moments(a, a.p[1] + lane_start(g, len, inner), k0, parts, out + 2 * t);
        }
    }
}

KERNEL void norm_join(KArgs a) {
    i64 len = a.i[1], parts = a.i[5];
    FOR_EACH(g, a.i[0]) {
        const double* p = (const double*)a.p[7] + 2 * g * parts;
        double* out = (double*)a.p[8] + 2 * g;
        if (a.i[6]) {
            double sum_d = 0.0, dot = 0.0;
            for (i64 k = 0; k < parts; k++) {
                sum_d += p[2 * k];
                dot += p[2 * k + 1];
            }
            out[0] = sum_d;
            out[1] = dot;
            continue;
        }
        double n = 0.0, mean = 0.0, m2 = 0.0;
        for (i64 k = 0; k < parts; k++) {
            double nk = (double)((len - k + parts - 1) / parts), total = n + nk;
            double delta = p[2 * k] - mean;
            mean += delta * nk / total;
            m2 += p[2 * k + 1] + delta * delta * n * nk / total;
            n = total;
        }
        out[0] = mean;
        out[1] = norm_stats(a, g, mean, m2);
    }
}

KERNEL void norm_each(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        i64 i, k, o = split(a, 1, split(a, 2, t, &i), &k);
        i64 g = o * a.i[2] + i;
        const double* f = (const double*)a.p[8] + 2 * g;
        if (a.i[6]) {
            norm_grad_at(a, t, g, norm_scale(a, g, k), f[0], f[1]);
        } else {
            norm_out(a, t, norm_scale(a, g, k), f[0], f[1]);
        }
    }
}

// p0 = p1 with its axes permuted: p0's dims are i2.. (rank i1 <= 6, outermost first) and p1
// steps i8.. elements along each of them.
KERNEL void permute(KArgs a) {
    i64 rank = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 rest = t, at = 0;
        for (i64 d = rank - 1; d > 0; d--) {
            i64 k;
            rest = split(a, (int)(2 + d), rest, &k);
            at += k * a.i[8 + d];
        }
        if (rank > 0) at += rest * a.i[8];
        a.p[0][t] = a.p[1][at];
    }
}

// A block along an axis, between an (outer, i2, inner = i1) layout at p1 and an (outer, i3,
// inner) layout at p0: rows [i4, i4 + i5) of p1 go to rows [i6, i6 + i5) of p0 (Concat,
// SliceChannel). i0 = outer * i5 * inner.
KERNEL void axis_copy(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        i64 i, k;
        i64 o = split(a, 5, split(a, 1, t, &i), &k);
        a.p[0][((o * a.i[3]) + a.i[6] + k) * a.i[1] + i] = a.p[1][((o * a.i[2]) + a.i[4] + k) * a.i[1] + i];
    }
}

// LeakyReLU's activations (i1: 0 leaky, 1 elu, 2 selu, 3 gelu; f0 the slope) and, with grad
// set, their derivatives, at x.
__device__ inline double leaky(i64 kind, double x, double slope, int grad) {
    const double alpha = 1.6732632423543772, lambda = 1.0507009873554805;
    if (kind == 3) {
        double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752));
        return grad ? cdf + x * exp(-0.5 * x * x) * 0.39894228040143268 : x * cdf;
    }
    if (kind == 2) {
        if (x > 0.0) return grad ? lambda : lambda * x;
        return grad ? lambda * alpha * exp(x) : lambda * alpha * expm1(x);
    }
    if (x > 0.0) return grad ? 1.0 : x;
    if (kind == 1) return grad ? slope * exp(x) : slope * expm1(x);
    return grad ? slope : slope * x;
}

// The slope at element t: f0, or prelu's gamma p3 (i2 entries: one for all, one per channel of
// an (outer, i3 channels, i4 inner) layout, or one per element), as the CPU's GammaIndex.
__device__ inline double slope_at(const KArgs& a, i64 t) {
    if (!a.p[3]) return a.f[0];
    i64 len = a.i[2], r;
    if (len == 1) return a.p[3][0];
    if (len == a.i[3]) return a.p[3][split(a, 4, t, &r) % len];
    return a.p[3][t];
}

// p0 = leaky(p1); prelu is kind 0 with the slope from gamma.
KERNEL void leaky_fwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = (float)leaky(a.i[1], a.p[1][t], slope_at(a, t), 0);
}

// p0 = p1 (the output's gradient) * leaky'(p2 = the data).
KERNEL void leaky_bwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = (float)(a.p[1][t] * leaky(a.i[1], a.p[2][t], slope_at(a, t), 1));
}

// prelu's gamma gradient's terms, one per data element: p0 = p1 (the output's gradient) times
// p2 (the data) where the data is not positive, else 0; the host sums them per gamma entry.
KERNEL void prelu_terms(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = a.p[2][t] <= 0.0f ? a.p[1][t] * a.p[2][t] : 0.0f;
}

// Fused RNN (ops/rnn.rs): one step of one layer in one direction, one index per (sample n,
// unit j); i0 = N*H, i1 = H, i2 = mode (0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru). Gates are G*H
// wide per sample (G = 1, 1, 4, 3; LSTM i f g o, GRU r z n); the extra values ew wide (LSTM: the
// new cell and its tanh, 2H; GRU: the candidate's hidden part, H; else none).
__device__ inline float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline i64 rnn_gates(i64 mode) { return mode == 2 ? 4 : (mode == 3 ? 3 : 1); }
__device__ inline i64 rnn_extra(i64 mode, i64 h) { return mode == 2 ? 2 * h : (mode == 3 ? h : 0); }

// Forward: p0 the step's gates (N x GH; the input projection in, the activated gates out), p1
// the hidden projection (N x GH, no bias), p2 and p3 the input and hidden biases (GH), p4 the
// state (rows i3 apart), updated, p5 the cell (N x H, LSTM), updated, p6 the step's extra values
// (N x ew), p7 the step's output (rows i4 apart). With per-sample lengths (p8, i64, else null),
// a sample whose sequence ended before the step's time i5 outputs 0 and keeps its state.
KERNEL void rnn_step_fwd(KArgs a) {
    i64 hs = a.i[1], mode = a.i[2];
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs);
    const i64* lens = (const i64*)a.p[8];
    FOR_EACH(t, a.i[0]) {
        i64 j, n = split(a, 1, t, &j);
        if (lens && a.i[5] >= lens[n]) {
            a.p[7][n * a.i[4] + j] = 0.0f;
            continue;
        }
        float* g = a.p[0] + n * gh;
        const float* hp = a.p[1] + n * gh;
        float* h = a.p[4] + n * a.i[3] + j;
#define RNN_PRE(k) ((g[(k) * hs + j] + a.p[2][(k) * hs + j]) + (hp[(k) * hs + j] + a.p[3][(k) * hs + j]))
        if (mode == 2) {
            float i = rnn_sigmoid(RNN_PRE(0)), f = rnn_sigmoid(RNN_PRE(1));
            float gg = tanhf(RNN_PRE(2)), o = rnn_sigmoid(RNN_PRE(3));
            float* c = a.p[5] + n * hs + j;
            float cn = f * *c + i * gg, tc = tanhf(cn);
            *c = cn;
            *h = o * tc;
            g[j] = i; g[hs + j] = f; g[2 * hs + j] = gg; g[3 * hs + j] = o;
            a.p[6][n * ew + j] = cn;
            a.p[6][n * ew + hs + j] = tc;
        } else if (mode == 3) {
            float r = rnn_sigmoid(RNN_PRE(0)), z = rnn_sigmoid(RNN_PRE(1));
            float hn = hp[2 * hs + j] + a.p[3][2 * hs + j];
            float cand = tanhf((g[2 * hs + j] + a.p[2][2 * hs + j]) + r * hn);
            *h = (1.0f - z) * cand + z * *h;
            g[j] = r; g[hs + j] = z; g[2 * hs + j] = cand;
            a.p[6][n * ew + j] = hn;
        } else {
            float s = RNN_PRE(0);
            float y = mode == 1 ? tanhf(s) : (s > 0.0f ? s : 0.0f);
            *h = y;
            g[j] = y;
        }
#undef RNN_PRE
        a.p[7][n * a.i[4] + j] = *h;
    }
}

// Backward: p0 the step's gate gradients (N x 2GH: the input projection's, then the hidden
// projection's, which differ only in GRU's candidate), p1 the step's gates, p2 the step's extra
// values, p3 the carried state gradient (N x H) in, its part that bypasses the hidden
// projection (GRU: z dh, else 0) out, p4 the carried cell gradient (N x H, LSTM), updated, p5
// the step's output gradient (rows i3 apart), p6 the state after the step before in the
// direction's order (rows i4 apart; null at the direction's first step), p7 that step's cell
// (rows i5 apart), p9 and p10 the initial state and cell (N x H), read where a sample's sequence
// starts at this step, whose hidden-projection gradient rows also go to p11 (N x GH, for the
// weight gradient against the initial state). i6 is the step's time, i7 the direction, i8 the
// steps; p8 the per-sample lengths (i64, or null: every sequence whole). A sample whose sequence
// ended before this step gets zero gate gradients and carries its state's gradients unchanged.
KERNEL void rnn_step_bwd(KArgs a) {
    i64 hs = a.i[1], mode = a.i[2], time = a.i[6];
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs), gates = rnn_gates(mode);
    const i64* lens = (const i64*)a.p[8];
    FOR_EACH(t, a.i[0]) {
        i64 j, n = split(a, 1, t, &j);
        float* dgx = a.p[0] + n * 2 * gh;
        float* dgh = dgx + gh;
        i64 len = lens ? lens[n] : a.i[8];
        if (time >= len) {
            for (i64 k = 0; k < gates; k++) dgx[k * hs + j] = dgh[k * hs + j] = 0.0f;
            continue;
        }
        // The state this sample's step started from: the step before it, or its initial state.
        int first = a.i[7] == 0 ? time == 0 : time + 1 >= len;
        const float* g = a.p[1] + n * gh;
        float* dhp = a.p[3] + n * hs + j;
        float dh = *dhp + a.p[5][n * a.i[3] + j];
        if (mode == 2) {
            float i = g[j], f = g[hs + j], gg = g[2 * hs + j], o = g[3 * hs + j];
            float tc = a.p[2][n * ew + hs + j];
            float* dc = a.p[4] + n * hs + j;
            const float* c_prev = first ? a.p[10] + n * hs : a.p[7] + n * a.i[5];
            float dct = *dc + dh * o * (1.0f - tc * tc);
            float ds[4] = {dct * gg * i * (1.0f - i),
                           dct * c_prev[j] * f * (1.0f - f),
                           dct * i * (1.0f - gg * gg), dh * tc * o * (1.0f - o)};
            for (int k = 0; k < 4; k++) {
                dgx[k * hs + j] = ds[k];
                dgh[k * hs + j] = ds[k];
            }
            *dc = dct * f;
            *dhp = 0.0f;
        } else if (mode == 3) {
            float r = g[j], z = g[hs + j], cand = g[2 * hs + j];
            const float* h_prev = first ? a.p[9] + n * hs : a.p[6] + n * a.i[4];
            float dn = dh * (1.0f - z) * (1.0f - cand * cand);
            float dz = dh * (h_prev[j] - cand) * z * (1.0f - z);
            float dr = dn * a.p[2][n * ew + j] * r * (1.0f - r);
            dgx[j] = dr; dgx[hs + j] = dz; dgx[2 * hs + j] = dn;
            dgh[j] = dr; dgh[hs + j] = dz; dgh[2 * hs + j] = dn * r;
            *dhp = dh * z;
        } else {
            float y = g[j];
            float d = mode == 1 ? dh * (1.0f - y * y) : (y > 0.0f ? dh : 0.0f);
            dgx[j] = d;
            dgh[j] = d;
            *dhp = 0.0f;
        }
        if (first) {
            for (i64 k = 0; k < gates; k++) a.p[11][n * gh + k * hs + j] = dgh[k * hs + j];
        }
    }
}

// Unary math (ops/math.rs and the unary ops of ops/elemwise.rs), computed in double as the CPU
// kernels do; the code is the function's place in gpu/ops.rs's UNARY list.
__device__ inline double unary_f(i64 code, double x) {
    const double pi = 3.14159265358979323846;
    switch (code) {
        case 0: return -x;
        case 1: return fabs(x);
        case 2: return x * x;
        case 3: return exp(x);
        case 4: return log(x);
        case 5: return sqrt(x);
        case 6: return 1.0 / sqrt(x);
        case 7: return 1.0 / x;
        case 8: return cbrt(x);
        case 9: return 1.0 / cbrt(x);
        case 10: return log1p(x);
        case 11: return expm1(x);
        case 12: return log2(x);
        case 13: return log10(x);
        case 14: return erf(x);
        case 15: return sin(x);
        case 16: return cos(x);
        case 17: return tan(x);
        case 18: return asin(x);
        case 19: return acos(x);
        case 20: return atan(x);
        case 21: return sinh(x);
        case 22: return cosh(x);
        case 23: return asinh(x);
        case 24: return acosh(x);
        case 25: return atanh(x);
        case 26: return x * (180.0 / pi);
        case 27: return x * (pi / 180.0);
        case 28: return x / (1.0 + fabs(x));
        case 29: return round(x);
        // MXNet's rint takes halves down.
        case 30: { double d = floor(x); return x - d <= 0.5 ? d : d + 1.0; }
        case 31: case 32: return trunc(x);
        case 33: return floor(x);
        case 34: return ceil(x);
        default: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
    }
}

// The derivative of unary_f's function `code`, written in the input or the output as ops/math.rs
// writes it (v is whichever the backward node reads).
__device__ inline double unary_d(i64 code, double v) {
    const double pi = 3.14159265358979323846;
    switch (code) {
        case 6: return -0.5 / (v * sqrt(v));
        case 7: return -1.0 / (v * v);
        case 8: return 1.0 / (3.0 * v * v);
        case 9: return -1.0 / (3.0 * v * cbrt(v));
        case 10: return 1.0 / (1.0 + v);
        case 11: return exp(v);
        case 12: return 1.0 / (v * 0.69314718055994530942);
        case 13: return 1.0 / (v * 2.30258509299404568402);
        case 14: return 2.0 / sqrt(pi) * exp(-v * v);
        case 15: return cos(v);
        case 16: return -sin(v);
        case 17: return 1.0 + v * v;
        case 18: return 1.0 / sqrt(1.0 - v * v);
        case 19: return -1.0 / sqrt(1.0 - v * v);
        case 20: return 1.0 / (1.0 + v * v);
        case 21: return cosh(v);
        case 22: return sinh(v);
        case 23: return 1.0 / sqrt(v * v + 1.0);
        case 24: return 1.0 / sqrt(v * v - 1.0);
        case 25: return 1.0 / (1.0 - v * v);
        case 26: return 180.0 / pi;
        case 27: return pi / 180.0;
        case 28: return 1.0 / ((1.0 + fabs(v)) * (1.0 + fabs(v)));
        default: return 0.0;
    }
}

// p0 = f(p1), f the function i1.
KERNEL void unary_fwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = (float)unary_f(a.i[1], (double)a.p[1][t]);
}

// p0 = p1 * f'(p2): the gradient p1 through the function i1, its derivative taken at p2.
KERNEL void unary_bwd(KArgs a) {
    FOR_EACH(t, a.i[0]) a.p[0][t] = (float)((double)a.p[1][t] * unary_d(a.i[1], (double)a.p[2][t]));
}

// A float index as an integer, as the CPU's `as` casts make it: truncated, NaN reads 0 and
// values beyond the i64 range saturate (a plain C cast is undefined there).
__device__ inline i64 to_index(float v) {
    if (v != v) return 0;
    if (v >= 9.2e18f) return 9223372036854775807LL;
    if (v <= -9.2e18f) return -9223372036854775807LL - 1;
    return (i64)v;
}

// take / Embedding: a table (outer, rows = i2, inner = i1) read at one row per index (p2, i3 of
// them): the output is (outer, i3, inner). i4: 0 clamps an index into the rows, 1 wraps it.
__device__ inline i64 take_row(float v, i64 rows, i64 wrap) {
    i64 i = to_index(v);
    if (wrap) { i64 r = i % rows; return r < 0 ? r + rows : r; }
    return i < 0 ? 0 : (i >= rows ? rows - 1 : i);
}

// p0 = the rows of p1 that p2 names.
KERNEL void take_fwd(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, rest = split(a, 1, t, &c), k;
        i64 o = split(a, 3, rest, &k);
        a.p[0][t] = a.p[1][(o * rows + take_row(a.p[2][k], rows, a.i[4])) * inner + c];
    }
}

// Gradients added back row by row: take's and Embedding's (one list of i3 indices, p2, shared
// by every (outer, column) pair: i5 = 0) and topk's (a list of i3 = k positions per (outer,
// column) pair, the j-th at p2[(o * i3 + j) * i1 + c]: i5 = 1). p0 (outer, i2 rows, i1 columns;
// zeroed first) += p1 (outer, i3, i1) into the rows the indices name, clipped or (i4 = 1)
// wrapped into the rows; added in index order in float.
__device__ inline float list_index(const KArgs& a, i64 o, i64 c, i64 j) {
    return a.i[5] ? a.p[2][(o * a.i[3] + j) * a.i[1] + c] : a.p[2][j];
}

// One index per (outer, column) walks its whole list in order, so repeated rows add up without
// atomics and in the same order on every run; i0 = outer * i1.
KERNEL void take_bwd(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, o = split(a, 1, t, &c);
        for (i64 k = 0; k < count; k++) {
            i64 r = take_row(list_index(a, o, c, k), rows, a.i[4]);
            a.p[0][(o * rows + r) * inner + c] += a.p[1][(o * count + k) * inner + c];
        }
    }
}

// For long lists (see add_rows in ops.rs) the indices are sorted by the row they name, then
// each run of one row is added up by one thread per column. take_keys, i0 = lists * P entries
// (P = i6, a power of two; one list, or one per (outer, column) pair): p3 = one i64 each, the
// row that index j of its list names times 2^32 plus j, so that sort_step's ascending order keeps a
// row's indices in index order; entries from i3 on (padding) sort after every index.
// take_runs, one index per (outer, sorted entry, column), i0 = outer * i3 * i1: the entry that
// starts a row's run writes p0's row as the sum of the run's gradient rows, from 0 in index
// order, as take_bwd adds them.
KERNEL void take_keys(KArgs a) {
    i64* keys = (i64*)a.p[3];
    FOR_EACH(t, a.i[0]) {
        i64 j, l = split(a, 6, t, &j);
        i64 row = 2147483647LL;
        if (j < a.i[3]) {
            i64 c, o = split(a, 1, l, &c);
            row = take_row(list_index(a, o, c, j), a.i[2], a.i[4]);
        }
        keys[t] = row * 4294967296LL + j;
    }
}

KERNEL void take_runs(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, j, o = split(a, 3, split(a, 1, t, &c), &j);
        const i64* keys = (const i64*)a.p[3] + (a.i[5] ? (o * inner + c) * a.i[6] : 0);
        i64 row = keys[j] >> 32;
        if (j > 0 && keys[j - 1] >> 32 == row) continue;
        float acc = 0.0f;
        for (i64 e = j; e < count && keys[e] >> 32 == row; e++)
            acc += a.p[1][(o * count + (keys[e] & 4294967295LL)) * inner + c];
        a.p[0][(o * rows + row) * inner + c] = acc;
    }
}

// pick: p1 is (outer, lanes = i2, inner = i1) and p2 holds one index per (outer, inner), i0 of
// them; i3: 0 clamps an index into the lanes, 1 wraps it. i4 = 0: p0 = the element each index
// picks; i4 = 1 (the gradient): p0, shaped like the data and zeroed first, gets p1's element at
// the element picked (p1 then being the output gradient). The elements picked are distinct.
KERNEL void pick(KArgs a) {
    i64 lanes = a.i[2], inner = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 c, o = split(a, 1, t, &c);
        i64 at = (o * lanes + take_row(a.p[2][t], lanes, a.i[3])) * inner + c;
        if (a.i[4]) a.p[0][at] = a.p[1][t]; else a.p[0][t] = a.p[1][at];
    }
}

// An integer slot carrying a double's bits.
__device__ inline double bits_double(i64 b) {
    union { i64 i; double d; } u;
    u.i = b;
    return u.d;
}

// arange: p0[t] = start + step * (t / i1), start and step the doubles in i2 and i3.
KERNEL void arange(KArgs a) {
    double start = bits_double(a.i[2]), step = bits_double(a.i[3]);
    FOR_EACH(t, a.i[0]) {
        i64 r, k = split(a, 1, t, &r);
        a.p[0][t] = (float)(start + step * (double)k);
    }
}

// The gather family (see gather.rs for the tables). p0 = the output, p1 = the data, p2 = the
// table [ndim, dims..., each axis's input offsets (-1: padding)...]; f0 fills padding.
KERNEL void gather_fwd(KArgs a) {
    const i64* tab = (const i64*)a.p[2];
    i64 nd = tab[0], end = 1 + nd;
    for (i64 d = 0; d < nd; d++) end += tab[1 + d];
    FOR_EACH(t, a.i[0]) {
        i64 rest = t, src = 0, pos = end, pad = 0;
        for (i64 d = nd - 1; d >= 0; d--) {
            i64 n = tab[1 + d];
            pos -= n;
            i64 o = tab[pos + rest % n];
            rest /= n;
            if (o < 0) pad = 1; else src += o;
        }
        a.p[0][t] = pad ? a.f[0] : a.p[1][src];
    }
}

#define GATHER_DIMS 8

// p0 (the data's gradient) = the sum of p1 (the output's gradient) over the output elements
// that read each data element, in output order; p2 = gather.rs's backward table. Each element's
// sum is split into i1 parts, i0 = elements * i1 threads: part k takes the element's terms k,
// k + i1, ... (an odometer over its buckets stepped i1 at a time) and, with i1 > 1, writes its
// sum to p3 (doubles, an element's parts together) for chan_total to add; with i1 = 1 the
// element's sum goes to p0.
KERNEL void gather_bwd(KArgs a) {
    const i64* tab = (const i64*)a.p[2];
    i64 ni = tab[0], no = tab[1], parts = a.i[1];
    const i64* in_dims = tab + 2;
    const i64* out_dims = in_dims + ni;
    const i64* from = out_dims + no;
    const i64* starts = from + no;
    const i64* lists = starts + no;
    FOR_EACH(t, a.i[0]) {
        i64 k[GATHER_DIMS], lo[GATHER_DIMS], size[GATHER_DIMS], c[GATHER_DIMS], stride[GATHER_DIMS];
        i64 rest = t / parts, s = 1, empty = 0;
        for (i64 d = ni - 1; d >= 0; d--) {
            k[d] = rest % in_dims[d];
            rest /= in_dims[d];
        }
        for (i64 d = no - 1; d >= 0; d--) {
            i64 j = from[d] < 0 ? 0 : k[from[d]];
            lo[d] = tab[starts[d] + j];
            size[d] = tab[starts[d] + j + 1] - lo[d];
            if (size[d] == 0) empty = 1;
            c[d] = 0;
            stride[d] = s;
            s *= out_dims[d];
        }
        // The odometer (the last bucket turning fastest) moves to term t % parts first, then
        // parts terms at a time, until it carries out of the first bucket.
        i64 step = t % parts;
        double acc = 0.0;
        while (!empty) {
            for (i64 d = no - 1; d >= 0 && step; d--) {
                i64 v = c[d] + step;
                step = v < size[d] ? 0 : v / size[d];
                c[d] = v < size[d] ? v : v % size[d];
            }
            if (step) break;
            i64 o = 0;
            for (i64 d = 0; d < no; d++) o += tab[lists[d] + lo[d] + c[d]] * stride[d];
            acc += (double)a.p[1][o];
            step = parts;
        }
        if (parts == 1) a.p[0][t] = (float)acc; else ((double*)a.p[3])[t] = acc;
    }
}

// The regression outputs' gradient: p0 = f0 * (p1 - p2) (the prediction less the label), or
// f0 times its sign where i1 is set (MAE), in double.
KERNEL void regression_bwd(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        double d = (double)a.p[1][t] - (double)a.p[2][t];
        if (a.i[1]) d = d > 0.0 ? 1.0 : (d < 0.0 ? -1.0 : 0.0);
        a.p[0][t] = (float)((double)a.f[0] * d);
    }
}

// p0[t] = f0 / max(p1[0], 1): MakeLoss's gradient over a count computed on the device.
KERNEL void fill_ratio(KArgs a) {
    double count = a.p[1][0];
    FOR_EACH(t, a.i[0]) a.p[0][t] = (float)((double)a.f[0] / (count > 1.0 ? count : 1.0));
}

// The random generators from seed i1, in double: i2 0 uniform on [f0, f1) (draw t), 1 normal
// with mean f0 and deviation f1 (Box-Muller on draws 2t and 2t + 1).
KERNEL void random_fill(KArgs a) {
    unsigned long long seed = (unsigned long long)a.i[1];
    double lo = a.f[0], hi = a.f[1];
    FOR_EACH(t, a.i[0]) {
        double v;
        if (a.i[2] == 0) {
            v = lo + (hi - lo) * draw(seed, t);
        } else {
            double u1 = 1.0 - draw(seed, 2 * t), u2 = draw(seed, 2 * t + 1);
            v = lo + hi * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        }
        a.p[0][t] = (float)v;
    }
}

// Sorting (topk, sort, argsort; see sort.rs) as a bitonic network over each lane padded to
// P = i2 entries (a power of two). p3 holds one i64 per entry: the value's total-order key (as
// Rust's total_cmp orders floats; flipped bitwise for a descending sort) times 2^32 plus its
// position in the lane, so ascending order of the i64s is the CPU's stable order. sort_keys
// fills them from p1, laid out (outer, lane = i3, inner = i1), over i0 = lanes * P entries;
// i4 = 1 sorts descending. Padding (positions from i3 on) sorts after every element.
__device__ inline int float_bits(float v) {
    union { float f; int i; } u;
    u.f = v;
    return u.i;
}

KERNEL void sort_keys(KArgs a) {
    i64* keys = (i64*)a.p[3];
    i64 lane = a.i[3], inner = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 j, l = split(a, 2, t, &j);
        if (j >= lane) {
            keys[t] = 2147483647LL * 4294967296LL + j;
            continue;
        }
        i64 c, o = split(a, 1, l, &c);
        int b = float_bits(a.p[1][(o * lane + j) * inner + c]);
        int k = b ^ (int)((unsigned)(b >> 31) >> 1);
        if (a.i[4]) k = ~k;
        keys[t] = (i64)k * 4294967296LL + j;
    }
}

// One compare-exchange stage of the network over every lane at once: merges of i5 entries,
// partners i6 apart, i0 = lanes * P / 2 pairs. A pair never crosses a lane (P is a multiple of
// every merge size), and its direction is set by its position within the lane.
KERNEL void sort_step(KArgs a) {
    i64* keys = (i64*)a.p[3];
    i64 within = a.i[2] - 1, merge = a.i[5], d = a.i[6];
    FOR_EACH(t, a.i[0]) {
        i64 r, q = split(a, 6, t, &r);
        i64 g = q * 2 * d + r, h = g + d;
        bool up = ((g & within) & merge) == 0;
        i64 x = keys[g], y = keys[h];
        if ((x > y) == up) {
            keys[g] = y;
            keys[h] = x;
        }
    }
}

// The first i5 = k entries of each sorted lane, i0 = lanes * k of them: where p0 is set, the
// values of p1 there (i4 = 0), or 1 at each kept element's place in p0 (i4 = 1, p0 shaped like
// p1 and zeroed first); where p2 is set, the positions as floats. Layouts as sort_keys, the
// kept (outer, k, inner).
KERNEL void sort_take(KArgs a) {
    const i64* keys = (const i64*)a.p[3];
    i64 inner = a.i[1], P = a.i[2], lane = a.i[3], k = a.i[5];
    FOR_EACH(t, a.i[0]) {
        i64 r, l = split(a, 5, t, &r);
        i64 j = keys[l * P + r] & 4294967295LL;
        i64 c, o = split(a, 1, l, &c);
        i64 src = (o * lane + j) * inner + c, dst = (o * k + r) * inner + c;
        if (a.p[0]) {
            if (a.i[4]) a.p[0][src] = 1.0f; else a.p[0][dst] = a.p[1][src];
        }
        if (a.p[2]) a.p[2][dst] = (float)j;
    }
}

// Resampling one plane at a time (Crop, AdaptiveAvgPooling2D, BilinearResize2D and their
// gradients; see resample.rs): p2 is a table [row starts (i1 + 1), then each row's input
// offsets, then their weights as doubles' bits]; p0 (planes, i1) = the weighted sums of p1
// (planes, i2) over each row's taps, i0 = planes * i1. i3 = 0 sums in double and rounds once
// (the forward passes); i3 = 1 rounds after every add, as the CPU's gradients add into float.
KERNEL void resample(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 rows = a.i[1], cols = a.i[2], nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    FOR_EACH(t, a.i[0]) {
        i64 r, p = split(a, 1, t, &r);
        const float* x = a.p[1] + p * cols;
        if (a.i[3]) {
            float acc = 0.0f;
            for (i64 k = starts[r]; k < starts[r + 1]; k++)
                acc = (float)((double)acc + bits_double(w[k]) * (double)x[at[k]]);
            a.p[0][t] = acc;
        } else {
            double acc = 0.0;
            for (i64 k = starts[r]; k < starts[r + 1]; k++) acc += bits_double(w[k]) * (double)x[at[k]];
            a.p[0][t] = (float)acc;
        }
    }
}

// gather_nd and its scatters (see gather_nd.rs), by blocks of i1 elements. i2 = 0: p0's block
// b = p1's block starting at the table p2's entry b (i0 = p0's size). i2 = 1 (assign) or 2
// (add): p2 = [i3 targets, their list starts (i3 + 1), the lists of p1's block numbers]; the
// block of p0 at each target = the sum in order of the blocks listed, from -0 (an assign lists
// one block, copied exactly) or +0 (an add, as the CPU adds into zeros). i0 = i3 * i1.
KERNEL void blocks(KArgs a) {
    const i64* tab = (const i64*)a.p[2];
    i64 block = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 e, b = split(a, 1, t, &e);
        if (a.i[2] == 0) {
            a.p[0][t] = a.p[1][tab[b] + e];
            continue;
        }
        const i64* starts = tab + a.i[3];
        const i64* list = starts + a.i[3] + 1;
        float acc = a.i[2] == 1 ? -0.0f : 0.0f;
        for (i64 k = starts[b]; k < starts[b + 1]; k++) acc += a.p[1][list[k] * block + e];
        a.p[0][tab[b] + e] = acc;
    }
}

// softmax_cross_entropy (see loss.rs) over i3 rows of i1 scores p1, with class labels p2 the host
// has checked and each row's maximum and sum of exponentials in p5 (softmax_join's figures, in
// double). i2 = 0: each row's loss, log-sum-exp minus the label's score, into the doubles p3 (i0 =
// rows; the host sums them as partial sums); i2 = 1: the gradient, one thread per score, p0 =
// p4[0] * (softmax - one_hot(label)) (i0 = rows * i1). In double, as the CPU.
KERNEL void cross_entropy(KArgs a) {
    i64 k = a.i[1];
    double* loss = (double*)a.p[3];
    const double* fig = (const double*)a.p[5];
    FOR_EACH(t, a.i[0]) {
        i64 j = 0, row = a.i[2] ? split(a, 1, t, &j) : t;
        double lse = fig[2 * row] + log(fig[2 * row + 1]);
        i64 c = (i64)a.p[2][row];
        if (a.i[2] == 0) {
            loss[t] = lse - (double)a.p[1][t * k + c];
            continue;
        }
        double g = a.p[4][0];
        a.p[0][t] = (float)(g * (exp((double)a.p[1][t] - lse) - (j == c ? 1.0 : 0.0)));
    }
}

// The region ops (see roi.rs and gpu/roi.rs); the host has read the regions back and built the
// tables from the CPU's code. Outputs are (R, channels, i1 = cells); the data (N, i3 channels,
// i4 = h * w).
//
// ROIPooling: p2 = [the regions' images (R), then per (region, cell) its window: row start, row
// end, column start, column end]; i5 = w, i6 = R, i2 = channels. p0 = each window's maximum
// (the first of equals, row-major; 0 for an empty window) and p3 = its offset in the plane
// (-1: empty).
KERNEL void roi_pool(KArgs a) {
    const i64* images = (const i64*)a.p[2];
    i64 cells = a.i[1], w = a.i[5];
    FOR_EACH(t, a.i[0]) {
        i64 k, q = split(a, 1, t, &k);
        i64 ch, r = split(a, 2, q, &ch);
        const i64* win = images + a.i[6] + (r * cells + k) * 4;
        const float* x = a.p[1] + (images[r] * a.i[3] + ch) * a.i[4];
        i64 best = -1;
        float m = 0.0f;
        for (i64 i = win[0]; i < win[1]; i++)
            for (i64 j = win[2]; j < win[3]; j++) {
                float v = x[i * w + j];
                if (best < 0 || v > m) {
                    best = i * w + j;
                    m = v;
                }
            }
        a.p[0][t] = m;
        a.p[3][t] = (float)best;
    }
}

// ROIPooling's gradient, one index per data element (i0 = N * i3 * i4): p2 = [per (image,
// pixel) the start of its list (N * i4 + 1), then the lists of (region * cells + cell) whose
// window holds the pixel, in order]; the element adds the gradient p1 of each listed cell whose
// maximum (p3, the forward's offsets) it was, in region and cell order, as the CPU adds;
// i6 = N * i4 lists.
KERNEL void roi_pool_bwd(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 hw = a.i[4], cells = a.i[1], channels = a.i[2];
    const i64* list = starts + a.i[6] + 1;
    FOR_EACH(t, a.i[0]) {
        i64 i, q = split(a, 4, t, &i);
        i64 ch, image = split(a, 3, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a, 1, list[e], &k);
            i64 out = (r * channels + ch) * cells + k;
            if ((i64)a.p[3][out] == i) acc += a.p[1][out];
        }
        a.p[0][t] = acc;
    }
}

// ROIAlign: p2 = [per (region, cell) the start of its taps (R * cells + 1), the taps' plane
// offsets, their weights' bits, then the regions' images (R)]; i5 = 1: position sensitive
// (cell k of output channel c reads channel c * cells + k); i6 = R * cells. Sums in double, as
// the CPU.
KERNEL void roi_align(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 cells = a.i[1], rows = a.i[6], nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    const i64* images = w + nnz;
    FOR_EACH(t, a.i[0]) {
        i64 k, q = split(a, 1, t, &k);
        i64 c, r = split(a, 2, q, &c);
        i64 row = r * cells + k, ch = a.i[5] ? c * cells + k : c;
        const float* x = a.p[1] + (images[r] * a.i[3] + ch) * a.i[4];
        double acc = 0.0;
        for (i64 e = starts[row]; e < starts[row + 1]; e++) acc += bits_double(w[e]) * (double)x[at[e]];
        a.p[0][t] = (float)acc;
    }
}

// ROIAlign's gradient, one index per data element (i0 = N * i3 * i4): p2 = [per (image, pixel)
// the start of its list (N * i4 + 1), then the (region * cells + cell) of each tap reading the
// pixel and the tap's weight's bits, listed in region, cell and tap order]; the element adds
// weight * gradient for each (a position-sensitive cell only from its own channel), rounding to
// float after every add as the CPU accumulates. i6 = N * i4 lists, i7 = their total length.
KERNEL void roi_align_bwd(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 hw = a.i[4], cells = a.i[1], channels = a.i[2], total = a.i[7];
    const i64* rows = starts + a.i[6] + 1;
    const i64* w = rows + total;
    FOR_EACH(t, a.i[0]) {
        i64 i, q = split(a, 4, t, &i);
        i64 ch, image = split(a, 3, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a, 1, rows[e], &k);
            i64 c = ch;
            if (a.i[5]) {
                if (ch % cells != k) continue;
                c = ch / cells;
            }
            acc = (float)((double)acc + bits_double(w[e]) * (double)a.p[1][(r * channels + c) * cells + k]);
        }
        a.p[0][t] = acc;
    }
}
