// Layers: BatchNorm, dropout, the norms over groups, the regression heads' gradient and the
// random generators.

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

// Dropout: mask = 0 where element t's uniform draw from the seed is below p, else scale =
// 1 / (1 - p); out = x * mask. With p = 0 and scale = 1 it copies (inference).
KERNEL void dropout(Dropout a) {
    unsigned long long seed = (unsigned long long)a.seed;
    double p = a.p;
    FOR_EACH(t, a.n) {
        double u = draw(seed, t);
        float m = u < p ? 0.0f : a.scale;
        a.mask[t] = m;
        a.out[t] = a.x[t] * m;
    }
}

// The normalization kernels' shared steps (layout and arguments as norm_fwd and norm_bwd
// below). The gamma entry scaling element k of group g: its position (per = 0) or the group's
// outer index modulo per.
__device__ inline i64 norm_scale(const Norm& a, i64 g, i64 k) {
    return a.per ? (g / a.inner.n) % a.per : k;
}

// Over a group's elements k0, k0 + step, ... (x its first): their mean (L2: 0) into m[0] and
// their squared deviations from it summed into m[1].
__device__ inline void norm_moments(const Norm& a, const float* x, i64 k0, i64 step, double* m) {
    i64 len = a.len.n, inner = a.inner.n;
    double mean = 0.0, m2 = 0.0;
    if (!a.l2) {
        for (i64 k = k0; k < len; k += step) mean += x[k * inner];
        mean /= (double)((len - k0 + step - 1) / step);
    }
    for (i64 k = k0; k < len; k += step) m2 += (x[k * inner] - mean) * (x[k * inner] - mean);
    m[0] = mean;
    m[1] = m2;
}

// Group g's deviation sqrt(m2 / len + eps) (L2: the norm sqrt(m2 + eps)), written with the mean
// to the hidden outputs mean and std (L2: the norm to mean); returns it.
__device__ inline double norm_stats(const Norm& a, i64 g, double mean, double m2) {
    double denom = sqrt((a.l2 ? m2 : m2 / (double)a.len.n) + a.eps);
    if (a.l2) {
        a.mean[g] = (float)denom;
    } else {
        a.mean[g] = (float)mean;
        a.std[g] = (float)denom;
    }
    return denom;
}

// out at element `at` (gamma entry c) from its group's mean and deviation.
__device__ inline void norm_out(const Norm& a, i64 at, i64 c, double mean, double denom) {
    double v = (a.x[at] - mean) / denom;
    a.out[at] = (float)(a.l2 ? v : v * a.gamma[c] + a.beta[c]);
}

// The gradient's two sums over group g's elements k0, k0 + step, ...: of d (x, the output's
// gradient, times gamma but for L2) into s[0] and of h * d (h the normalized data; L2: the
// output, in data) into s[1].
__device__ inline void norm_grad_sums(const Norm& a, i64 g, i64 k0, i64 step, double* s) {
    i64 len = a.len.n, inner = a.inner.n, l2 = a.l2;
    i64 base = lane_start(g, len, inner);
    const float* og = a.x + base;
    const float* x = a.data + base;
    double denom = a.std[g], mean = l2 ? 0.0 : a.mean[g];
    double sum_d = 0.0, dot = 0.0;
    for (i64 k = k0; k < len; k += step) {
        double h = l2 ? (double)x[k * inner] : (x[k * inner] - mean) / denom;
        double d = og[k * inner];
        if (!l2) d *= a.gamma[norm_scale(a, g, k)];
        dot += h * d;
        sum_d += d;
    }
    s[0] = sum_d;
    s[1] = dot;
}

// out (and, where given, terms = the output's gradient times h) at element `at` of group g
// (gamma entry c) from the group's gradient sums.
__device__ inline void norm_grad_at(const Norm& a, i64 at, i64 g, i64 c, double sum_d, double dot) {
    i64 l2 = a.l2;
    double len = (double)a.len.n, denom = a.std[g], mean = l2 ? 0.0 : a.mean[g];
    double h = l2 ? (double)a.data[at] : (a.data[at] - mean) / denom;
    double o = a.x[at], d = l2 ? o : o * a.gamma[c];
    double mean_d = l2 ? 0.0 : sum_d / len, dt = l2 ? dot : dot / len;
    if (a.terms) a.terms[at] = (float)(o * h);
    a.out[at] = (float)((d - mean_d - h * dt) / denom);
}

// The normalizations over groups of len elements inner apart (group g starts at (g / inner) *
// len * inner + g % inner), one thread per group (n groups): out = (x - mean) / sqrt(var + eps)
// * gamma + beta (per = 0: gamma and beta indexed by the position in the group, else by
// (g / inner) % per), each group's mean into mean and sqrt(var + eps) into std; with l2
// (L2Normalization) out = x / sqrt(sum x^2 + eps) and that norm into mean.
KERNEL void norm_fwd(Norm a) {
    i64 len = a.len.n, inner = a.inner.n;
    FOR_EACH(g, a.n) {
        i64 base = lane_start(g, len, inner);
        double m[2];
        norm_moments(a, a.x + base, 0, 1, m);
        double denom = norm_stats(a, g, m[0], m[1]);
        for (i64 k = 0; k < len; k++) norm_out(a, base + k * inner, norm_scale(a, g, k), m[0], denom);
    }
}

// norm_fwd's gradient, per group (layout as there): out = d data from x (the output's
// gradient), data (L2: the output), gamma, mean and std (L2: std the norm); with terms given,
// terms = x * the normalized data, whose sums per gamma entry are gamma's gradient.
KERNEL void norm_bwd(Norm a) {
    i64 len = a.len.n, inner = a.inner.n;
    FOR_EACH(g, a.n) {
        i64 base = lane_start(g, len, inner);
        double sums[2];
        norm_grad_sums(a, g, 0, 1, sums);
        for (i64 k = 0; k < len; k++)
            norm_grad_at(a, base + k * inner, g, norm_scale(a, g, k), sums[0], sums[1]);
    }
}

// norm_fwd and norm_bwd split for few long groups (as gpu/lanes.rs's over_lanes runs them),
// each group in `parts` parts so that many threads share a group. norm_parts, one thread per
// (group, part) (n of them): part k of a group takes its elements k, k + parts, ... and writes
// two doubles to partials: forward, their mean and their squared deviations from it summed
// (L2: 0 and the sum of squares); backward, the sums of d and of h * d (norm_bwd's). norm_join,
// one thread per group (n groups): forward, the group's mean and deviation from its parts'
// (Chan, Golub and LeVeque's pairwise update: a part's mean differing from the running one adds
// to the squared deviations) into figures (two per group) and the hidden outputs; backward, the
// parts' sums into figures. norm_each, one thread per element (n of them): out as norm_fwd or
// norm_bwd computes it, from the group's figures.
KERNEL void norm_parts(Norm a) {
    i64 len = a.len.n, inner = a.inner.n, parts = a.parts;
    double* out = a.partials;
    FOR_EACH(t, a.n) {
        i64 g = t / parts, k0 = t % parts;
        if (a.backward) {
            norm_grad_sums(a, g, k0, parts, out + 2 * t);
        } else {
            norm_moments(a, a.x + lane_start(g, len, inner), k0, parts, out + 2 * t);
        }
    }
}

KERNEL void norm_join(Norm a) {
    i64 len = a.len.n, parts = a.parts;
    FOR_EACH(g, a.n) {
        const double* p = a.partials + 2 * g * parts;
        double* out = a.figures + 2 * g;
        if (a.backward) {
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

KERNEL void norm_each(Norm a) {
    FOR_EACH(t, a.n) {
        i64 i, k, o = split(a.len, split(a.inner, t, &i), &k);
        i64 g = o * a.inner.n + i;
        const double* f = a.figures + 2 * g;
        if (a.backward) {
            norm_grad_at(a, t, g, norm_scale(a, g, k), f[0], f[1]);
        } else {
            norm_out(a, t, norm_scale(a, g, k), f[0], f[1]);
        }
    }
}

// The regression outputs' gradient: out = scale * (pred - label), or scale times its sign
// where mae is set, in double.
KERNEL void regression_bwd(Regression a) {
    FOR_EACH(t, a.n) {
        double d = (double)a.pred[t] - (double)a.label[t];
        if (a.mae) d = d > 0.0 ? 1.0 : (d < 0.0 ? -1.0 : 0.0);
        a.out[t] = (float)((double)a.scale * d);
    }
}

// out[t] = value / max(count[0], 1): MakeLoss's gradient over a count computed on the device.
KERNEL void fill_ratio(FillRatio a) {
    double count = a.count[0];
    FOR_EACH(t, a.n) a.out[t] = (float)((double)a.value / (count > 1.0 ? count : 1.0));
}

// The random generators from the seed, in double: normal = 0 uniform on [lo, hi) (draw t),
// 1 normal with mean lo and deviation hi (Box-Muller on draws 2t and 2t + 1).
KERNEL void random_fill(RandomFill a) {
    unsigned long long seed = (unsigned long long)a.seed;
    double lo = a.lo, hi = a.hi;
    FOR_EACH(t, a.n) {
        double v;
        if (a.normal == 0) {
            v = lo + (hi - lo) * draw(seed, t);
        } else {
            double u1 = 1.0 - draw(seed, 2 * t), u2 = draw(seed, 2 * t + 1);
            v = lo + hi * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        }
        a.out[t] = (float)v;
    }
}
