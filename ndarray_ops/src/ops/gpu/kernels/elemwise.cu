// Elementwise kernels outside the typed families: fill, clip, where, one_hot.

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
