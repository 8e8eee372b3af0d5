// Reductions: along lanes (whole, or in parts for few long lanes), add_n, and per-channel
// sums in steps (bias gradients, BatchNorm's statistics).

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

// p0 = p1 + ... + p(i1), 1 <= i1 <= 7. Each index reads all its inputs before writing, so the
// output may be one of the inputs.
KERNEL void add_n(KArgs a) {
    FOR_EACH(t, a.i[0]) {
        float s = 0.0f;
        for (i64 k = 0; k < a.i[1]; k++) s += a.p[1 + k][t];
        a.p[0][t] = s;
    }
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
