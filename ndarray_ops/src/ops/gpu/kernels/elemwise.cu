// Elementwise kernels: fill, binary and scalar arithmetic with broadcasting, clip, where,
// one_hot, the activations, LeakyReLU/prelu and the unary math functions.

// out[t] = value
KERNEL void fill(Fill a) {
    FOR_EACH(t, a.n) a.out[t] = a.value;
}

// out = scale * x + shift clamped to [lo, hi], in double (clip: 1, 0, a_min, a_max;
// hard_sigmoid: alpha, beta, 0, 1). NaN stays NaN, as in the CPU kernels.
KERNEL void clamp_affine(ClampAffine a) {
    FOR_EACH(t, a.n) {
        double v = (double)a.scale * a.x[t] + (double)a.shift;
        a.out[t] = (float)(v < a.lo ? (double)a.lo : (v > a.hi ? (double)a.hi : v));
    }
}

// where: out = cond (one per `per_cond` elements) nonzero ? x : y.
KERNEL void where_select(Where a) {
    FOR_EACH(t, a.n) a.out[t] = a.cond[t / a.per_cond] != 0.0f ? a.x[t] : a.y[t];
}

// one_hot: out (rows of depth) = on where the column is row's index in idx (truncated; out of
// range: none), else off.
KERNEL void one_hot(OneHot a) {
    FOR_EACH(t, a.n) {
        i64 col, row = split(a.depth, t, &col);
        float v = a.idx[row];
        a.out[t] = (v >= 0.0f && (i64)v == col) ? a.on : a.off;
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

// out = act(x), act = code.
KERNEL void act_fwd(Map a) {
    FOR_EACH(t, a.n) a.out[t] = activate(a.code, a.x[t]);
}

// out = x (the output's gradient) * act'(at = the output).
KERNEL void act_bwd(Map a) {
    FOR_EACH(t, a.n) a.out[t] = a.x[t] * activate_grad(a.code, a.at[t]);
}

// LeakyReLU's activations (kind: 0 leaky, 1 elu, 2 selu, 3 gelu) and, with grad set, their
// derivatives, at x.
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

// The slope at element t: `slope`, or prelu's gamma (gamma_len entries: one for all, one per
// channel of an (outer, channels, inner) layout, or one per element), as the CPU's GammaIndex.
__device__ inline double slope_at(const Leaky& a, i64 t) {
    if (!a.gamma) return a.slope;
    i64 len = a.gamma_len, r;
    if (len == 1) return a.gamma[0];
    if (len == a.channels) return a.gamma[split(a.inner, t, &r) % len];
    return a.gamma[t];
}

// out = leaky(x); prelu is kind 0 with the slope from gamma.
KERNEL void leaky_fwd(Leaky a) {
    FOR_EACH(t, a.n) a.out[t] = (float)leaky(a.kind, a.x[t], slope_at(a, t), 0);
}

// out = x (the output's gradient) * leaky'(data).
KERNEL void leaky_bwd(Leaky a) {
    FOR_EACH(t, a.n) a.out[t] = (float)(a.x[t] * leaky(a.kind, a.data[t], slope_at(a, t), 1));
}

// prelu's gamma gradient's terms, one per data element: out = x (the output's gradient) times
// at (the data) where the data is not positive, else 0; the host sums them per gamma entry.
KERNEL void prelu_terms(Map a) {
    FOR_EACH(t, a.n) a.out[t] = a.at[t] <= 0.0f ? a.x[t] * a.at[t] : 0.0f;
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

// out = f(x), f the function `code`.
KERNEL void unary_fwd(Map a) {
    FOR_EACH(t, a.n) a.out[t] = (float)unary_f(a.code, (double)a.x[t]);
}

// out = x * f'(at): the gradient x through the function `code`, its derivative taken at `at`.
KERNEL void unary_bwd(Map a) {
    FOR_EACH(t, a.n) a.out[t] = (float)((double)a.x[t] * unary_d(a.code, (double)a.at[t]));
}
