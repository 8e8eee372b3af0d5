// Reads by index: take and its gradient (by sorted runs), pick, arange, softmax_cross_entropy.

// A float index as an integer, as the CPU's `as` casts make it: truncated, NaN reads 0 and
// values beyond the i64 range saturate (a plain C cast is undefined there).
__device__ inline i64 to_index(float v) {
    if (v != v) return 0;
    if (v >= 9.2e18f) return 9223372036854775807LL;
    if (v <= -9.2e18f) return -9223372036854775807LL - 1;
    return (i64)v;
}

// take / Embedding: a table (outer, rows = i2, inner = i1) read at one row per index (p2, i3 of
// them): the output is (outer, i3, inner). i4: 0 clamps an index into the rows, 1 wraps it.
__device__ inline i64 take_row(float v, i64 rows, i64 wrap) {
    i64 i = to_index(v);
    if (wrap) { i64 r = i % rows; return r < 0 ? r + rows : r; }
    return i < 0 ? 0 : (i >= rows ? rows - 1 : i);
}

// p0 = the rows of p1 that p2 names.
KERNEL void take_fwd(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, rest = split(a, 1, t, &c), k;
        i64 o = split(a, 3, rest, &k);
        a.p[0][t] = a.p[1][(o * rows + take_row(a.p[2][k], rows, a.i[4])) * inner + c];
    }
}

// Gradients added back row by row: take's and Embedding's (one list of i3 indices, p2, shared
// by every (outer, column) pair: i5 = 0) and topk's (a list of i3 = k positions per (outer,
// column) pair, the j-th at p2[(o * i3 + j) * i1 + c]: i5 = 1). p0 (outer, i2 rows, i1 columns;
// zeroed first) += p1 (outer, i3, i1) into the rows the indices name, clipped or (i4 = 1)
// wrapped into the rows; added in index order in float.
__device__ inline float list_index(const KArgs& a, i64 o, i64 c, i64 j) {
    return a.i[5] ? a.p[2][(o * a.i[3] + j) * a.i[1] + c] : a.p[2][j];
}

// One index per (outer, column) walks its whole list in order, so repeated rows add up without
// atomics and in the same order on every run; i0 = outer * i1.
KERNEL void take_bwd(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, o = split(a, 1, t, &c);
        for (i64 k = 0; k < count; k++) {
            i64 r = take_row(list_index(a, o, c, k), rows, a.i[4]);
            a.p[0][(o * rows + r) * inner + c] += a.p[1][(o * count + k) * inner + c];
        }
    }
}

// For long lists (see add_rows in ops.rs) the indices are sorted by the row they name, then
// each run of one row is added up by one thread per column. take_keys, i0 = lists * P entries
// (P = i6, a power of two; one list, or one per (outer, column) pair): p3 = one i64 each, the
// row that index j of its list names times 2^32 plus j, so that sort_step's ascending order keeps a
// row's indices in index order; entries from i3 on (padding) sort after every index.
// take_runs, one index per (outer, sorted entry, column), i0 = outer * i3 * i1: the entry that
// starts a row's run writes p0's row as the sum of the run's gradient rows, from 0 in index
// order, as take_bwd adds them.
KERNEL void take_keys(KArgs a) {
    i64* keys = (i64*)a.p[3];
    FOR_EACH(t, a.i[0]) {
        i64 j, l = split(a, 6, t, &j);
        i64 row = 2147483647LL;
        if (j < a.i[3]) {
            i64 c, o = split(a, 1, l, &c);
            row = take_row(list_index(a, o, c, j), a.i[2], a.i[4]);
        }
        keys[t] = row * 4294967296LL + j;
    }
}

KERNEL void take_runs(KArgs a) {
    i64 inner = a.i[1], rows = a.i[2], count = a.i[3];
    FOR_EACH(t, a.i[0]) {
        i64 c, j, o = split(a, 3, split(a, 1, t, &c), &j);
        const i64* keys = (const i64*)a.p[3] + (a.i[5] ? (o * inner + c) * a.i[6] : 0);
        i64 row = keys[j] >> 32;
        if (j > 0 && keys[j - 1] >> 32 == row) continue;
        float acc = 0.0f;
        for (i64 e = j; e < count && keys[e] >> 32 == row; e++)
            acc += a.p[1][(o * count + (keys[e] & 4294967295LL)) * inner + c];
        a.p[0][(o * rows + row) * inner + c] = acc;
    }
}

// pick: p1 is (outer, lanes = i2, inner = i1) and p2 holds one index per (outer, inner), i0 of
// them; i3: 0 clamps an index into the lanes, 1 wraps it. i4 = 0: p0 = the element each index
// picks; i4 = 1 (the gradient): p0, shaped like the data and zeroed first, gets p1's element at
// the element picked (p1 then being the output gradient). The elements picked are distinct.
KERNEL void pick(KArgs a) {
    i64 lanes = a.i[2], inner = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 c, o = split(a, 1, t, &c);
        i64 at = (o * lanes + take_row(a.p[2][t], lanes, a.i[3])) * inner + c;
        if (a.i[4]) a.p[0][at] = a.p[1][t]; else a.p[0][t] = a.p[1][at];
    }
}

// An integer slot carrying a double's bits.
__device__ inline double bits_double(i64 b) {
    union { i64 i; double d; } u;
    u.i = b;
    return u.d;
}

// arange: p0[t] = start + step * (t / i1), start and step the doubles in i2 and i3.
KERNEL void arange(KArgs a) {
    double start = bits_double(a.i[2]), step = bits_double(a.i[3]);
    FOR_EACH(t, a.i[0]) {
        i64 r, k = split(a, 1, t, &r);
        a.p[0][t] = (float)(start + step * (double)k);
    }
}

// softmax_cross_entropy (see loss.rs) over i3 rows of i1 scores p1, with class labels p2 the host
// has checked and each row's maximum and sum of exponentials in p5 (softmax_join's figures, in
// double). i2 = 0: each row's loss, log-sum-exp minus the label's score, into the doubles p3 (i0 =
// rows; the host sums them as partial sums); i2 = 1: the gradient, one thread per score, p0 =
// p4[0] * (softmax - one_hot(label)) (i0 = rows * i1). In double, as the CPU.
KERNEL void cross_entropy(KArgs a) {
    i64 k = a.i[1];
    double* loss = (double*)a.p[3];
    const double* fig = (const double*)a.p[5];
    FOR_EACH(t, a.i[0]) {
        i64 j = 0, row = a.i[2] ? split(a, 1, t, &j) : t;
        double lse = fig[2 * row] + log(fig[2 * row + 1]);
        i64 c = (i64)a.p[2][row];
        if (a.i[2] == 0) {
            loss[t] = lse - (double)a.p[1][t * k + c];
            continue;
        }
        double g = a.p[4][0];
        a.p[0][t] = (float)(g * (exp((double)a.p[1][t] - lse) - (j == c ? 1.0 : 0.0)));
    }
}
