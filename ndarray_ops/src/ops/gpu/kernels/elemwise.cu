// Elementwise kernels outside the typed families: fill, clip, where, one_hot, LeakyReLU/prelu.

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

// prelu's gamma gradient's terms, one per data element: the output's gradient times the data
// where the data is not positive, else 0; the host sums them per gamma entry.
KERNEL void prelu_terms(PreluTerms a) {
    FOR_EACH(t, a.n) a.out[t] = a.data[t] <= 0.0f ? a.ograd[t] * a.data[t] : 0.0f;
}
