// Sums: add_n, and per-channel sums in steps (sums over axes, bias gradients, BatchNorm's
// statistics).

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
