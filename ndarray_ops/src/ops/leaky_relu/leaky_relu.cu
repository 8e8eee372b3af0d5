// LeakyReLU and prelu, their data's gradient and prelu's gamma gradient's terms.

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
