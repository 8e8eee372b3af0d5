// Data movement: the sequence ops, permutations (transpose), copies along an axis and blocks
// (depth_to_space/space_to_depth).

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
