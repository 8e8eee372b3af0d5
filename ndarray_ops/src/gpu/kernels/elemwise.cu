// Elementwise kernels: fill, binary and scalar arithmetic with broadcasting, clip, where,
// one_hot, the activations, LeakyReLU/prelu and the unary math functions.

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
