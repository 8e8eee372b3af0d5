// Reductions: along lanes (whole, or in parts for few long lanes), add_n, and per-channel
// sums in steps (bias gradients, BatchNorm's statistics).

// Reductions along the lanes of an (outer, len, inner) layout, one index per (outer, inner)
// pair: code 0 max, 1 min, 2 prod, 3 argmax, 4 argmin (the first extremum, as a float). NaN is
// skipped by max and min as on the CPU (a comparison with NaN is false).
KERNEL void reduce_lanes(Lanes a) {
    i64 len = a.len, inner = a.inner.n, code = a.code;
    FOR_EACH(t, a.n) {
        i64 i, o = split(a.inner, t, &i);
        const float* x = a.x + o * len * inner + i;
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
        a.out[t] = code >= 3 ? (float)(at < 0 ? 0 : at) : r;
    }
}

// reduce_lanes split for few long lanes (its layout), each lane in `parts` parts.
// reduce_parts, one thread per (lane, part) (n of them): part k takes the lane's elements k,
// k + parts, ... and writes to partials (two per part) its product (prod), or its extremum and
// where in the lane that first occurs (-1: nowhere, every element NaN; NaN is skipped, as the
// scan's comparisons skip it). reduce_join, one thread per lane (n lanes): the parts' product,
// or the extremum of their extrema, the earliest winning ties (so max and min keep the sign of
// the first of equal zeros, as the scan does); argmax and argmin of a lane whose first element
// is NaN answer 0, as the scan (which starts from the first element) does.
KERNEL void reduce_parts(Lanes a) {
    i64 len = a.len, inner = a.inner.n, code = a.code, parts = a.parts;
    int most = code == 0 || code == 3;
    double* out = a.partials;
    FOR_EACH(t, a.n) {
        i64 lane = t / parts, k0 = t % parts;
        i64 i, o = split(a.inner, lane, &i);
        const float* x = a.x + o * len * inner + i;
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

KERNEL void reduce_join(Lanes a) {
    i64 len = a.len, inner = a.inner.n, code = a.code, parts = a.parts;
    int most = code == 0 || code == 3;
    FOR_EACH(lane, a.n) {
        const double* p = a.partials + 2 * lane * parts;
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
            a.out[lane] = best;
        } else if (code <= 1) {
            a.out[lane] = at < 0 ? (code == 0 ? -INF_F : INF_F) : best;
        } else {
            i64 i, o = split(a.inner, lane, &i);
            float first = a.x[o * len * inner + i];
            a.out[lane] = (first != first || at < 0) ? 0.0f : (float)at;
        }
    }
}

// out = ins[0] + ... + ins[count - 1], 1 <= count <= 7. Each index reads all its inputs before
// writing, so the output may be one of the inputs.
KERNEL void add_n(AddN a) {
    FOR_EACH(t, a.n) {
        float s = 0.0f;
        for (i64 k = 0; k < a.count; k++) s += a.ins[k][t];
        a.out[t] = s;
    }
}

// out[t] += bias[c], c = (t / inner) % channels: a bias per channel of an (outer, channels,
// inner) layout.
KERNEL void add_bias(AddBias a) {
    FOR_EACH(t, a.n) a.out[t] += a.bias[channel_of(a.inner, a.channels, t)];
}

// Per-channel sums over an (outer, channels, inner) layout, in steps so that many threads share
// a channel: chan_partial writes `parts` partial sums per channel (doubles, into out),
// chan_fold adds runs of them up until few are left, and chan_total (or BatchNorm's prepare
// kernels) adds those. Mode 0 sums x into one plane of partial sums; modes 1 and 2 sum two
// things in the same pass, into two planes (all channels' first sums, then all their second
// sums, so that the folds treat them as 2 * channels channels): 1 sums x and x^2, 2 sums x and
// x * other. One pass reads the data once where a sum around the mean needs the mean first;
// in double, E[x^2] - E[x]^2 loses nothing that matters for float data (a float's square is
// exact in a double).
KERNEL void chan_partial(ChanPartial a) {
    i64 channels = a.channels, inner = a.inner, parts = a.parts, mode = a.mode;
    i64 m = a.outer * inner;
    // Partial sum k of channel c takes elements k, k + parts, ... of the channel; neighbouring
    // threads read neighbouring addresses. Element e lies at (e / inner, e % inner); stepping
    // e by parts moves that pair by (dq, dr), so the loop needs no division.
    i64 dq = parts / inner, dr = parts % inner;
    double* out = a.out;
    FOR_EACH(t, channels * parts) {
        i64 c = t / parts, e = t % parts;
        i64 o = e / inner, i = e % inner;
        double s = 0.0, s2 = 0.0;
        for (; e < m; e += parts) {
            i64 at = (o * channels + c) * inner + i;
            double v = a.x[at];
            s += v;
            if (mode == 1) {
                s2 += v * v;
            } else if (mode == 2) {
                s2 += v * (double)a.other[at];
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

// out[t] = the sum of src[t * run .. (t + 1) * run) clipped to each channel's `parts` partial
// sums, over n = channels * ceil(parts / run) outputs.
KERNEL void chan_fold(ChanFold a) {
    i64 run = a.run, parts = a.parts, folded = (parts + run - 1) / run;
    const double* in = a.src;
    double* out = a.out;
    FOR_EACH(t, a.n) {
        i64 c = t / folded, k0 = (t % folded) * run, k1 = min64(k0 + run, parts);
        double s = 0.0;
        for (i64 k = k0; k < k1; k++) s += in[c * parts + k];
        out[t] = s;
    }
}

// The sum of channel c's n partial sums at p.
__device__ inline double chan_sum(const double* p, i64 c, i64 n) {
    const double* part = p + c * n;
    double s = 0.0;
    for (i64 k = 0; k < n; k++) s += part[k];
    return s;
}

// out[c] = scale * (the `parts` partial sums of channel c in partials), for n channels.
KERNEL void chan_total(ChanTotal a) {
    FOR_EACH(c, a.n) a.out[c] = (float)(chan_sum(a.partials, c, a.parts) * a.scale);
}
