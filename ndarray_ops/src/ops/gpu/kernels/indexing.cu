// Reads by index: take and its gradient (by sorted runs), pick, arange, softmax_cross_entropy.

// A float index as an integer, as the CPU's `as` casts make it: truncated, NaN reads 0 and
// values beyond the i64 range saturate (a plain C cast is undefined there).
__device__ inline i64 to_index(float v) {
    if (v != v) return 0;
    if (v >= 9.2e18f) return 9223372036854775807LL;
    if (v <= -9.2e18f) return -9223372036854775807LL - 1;
    return (i64)v;
}

// take / Embedding: a table (outer, rows, inner) read at one row per index (count of them): the
// output is (outer, count, inner). wrap: 0 clamps an index into the rows, 1 wraps it.
__device__ inline i64 take_row(float v, i64 rows, i64 wrap) {
    i64 i = to_index(v);
    if (wrap) { i64 r = i % rows; return r < 0 ? r + rows : r; }
    return i < 0 ? 0 : (i >= rows ? rows - 1 : i);
}

// out = the rows of table that idx names.
KERNEL void take_fwd(Take a) {
    i64 inner = a.inner.n, rows = a.rows;
    FOR_EACH(t, a.n) {
        i64 c, rest = split(a.inner, t, &c), k;
        i64 o = split(a.count, rest, &k);
        a.out[t] = a.table[(o * rows + take_row(a.idx[k], rows, a.wrap)) * inner + c];
    }
}

// Gradients added back row by row: take's and Embedding's (one list of count indices, idx,
// shared by every (outer, column) pair: per_pair = 0) and topk's (a list of count = k positions
// per (outer, column) pair, the j-th at idx[(o * count + j) * inner + c]: per_pair = 1). grad
// (outer, rows, inner; zeroed first) += ograd (outer, count, inner) into the rows the indices
// name, clipped or (wrap = 1) wrapped into the rows; added in index order in float.
__device__ inline float list_index(const AddRows& a, i64 o, i64 c, i64 j) {
    return a.per_pair ? a.idx[(o * a.count.n + j) * a.inner.n + c] : a.idx[j];
}

// One index per (outer, column) walks its whole list in order, so repeated rows add up without
// atomics and in the same order on every run; n = outer * inner.
KERNEL void take_bwd(AddRows a) {
    i64 inner = a.inner.n, rows = a.rows, count = a.count.n;
    FOR_EACH(t, a.n) {
        i64 c, o = split(a.inner, t, &c);
        for (i64 k = 0; k < count; k++) {
            i64 r = take_row(list_index(a, o, c, k), rows, a.wrap);
            a.grad[(o * rows + r) * inner + c] += a.ograd[(o * count + k) * inner + c];
        }
    }
}

// For long lists (see add_rows in indexing.rs) the indices are sorted by the row they name,
// then each run of one row is added up by one thread per column. take_keys, n = lists * P
// entries (P = padded, a power of two; one list, or one per (outer, column) pair): keys = one
// i64 each, the row that index j of its list names times 2^32 plus j, so that sort_step's
// ascending order keeps a row's indices in index order; entries from count on (padding) sort
// after every index. take_runs, one index per (outer, sorted entry, column), n = outer * count *
// inner: the entry that starts a row's run writes grad's row as the sum of the run's gradient
// rows, from 0 in index order, as take_bwd adds them.
KERNEL void take_keys(AddRows a) {
    FOR_EACH(t, a.n) {
        i64 j, l = split(a.padded, t, &j);
        i64 row = 2147483647LL;
        if (j < a.count.n) {
            i64 c, o = split(a.inner, l, &c);
            row = take_row(list_index(a, o, c, j), a.rows, a.wrap);
        }
        a.keys[t] = row * 4294967296LL + j;
    }
}

KERNEL void take_runs(AddRows a) {
    i64 inner = a.inner.n, rows = a.rows, count = a.count.n;
    FOR_EACH(t, a.n) {
        i64 c, j, o = split(a.count, split(a.inner, t, &c), &j);
        const i64* keys = a.keys + (a.per_pair ? (o * inner + c) * a.padded.n : 0);
        i64 row = keys[j] >> 32;
        if (j > 0 && keys[j - 1] >> 32 == row) continue;
        float acc = 0.0f;
        for (i64 e = j; e < count && keys[e] >> 32 == row; e++)
            acc += a.ograd[(o * count + (keys[e] & 4294967295LL)) * inner + c];
        a.grad[(o * rows + row) * inner + c] = acc;
    }
}

// pick: src is (outer, lanes, inner) and idx holds one index per (outer, inner), n of them;
// wrap: 0 clamps an index into the lanes, 1 wraps it. backward = 0: out = the element each
// index picks; backward = 1: out, shaped like the data and zeroed first, gets src's element at
// the element picked (src then being the output gradient). The elements picked are distinct.
KERNEL void pick(Pick a) {
    i64 lanes = a.lanes, inner = a.inner.n;
    FOR_EACH(t, a.n) {
        i64 c, o = split(a.inner, t, &c);
        i64 at = (o * lanes + take_row(a.idx[t], lanes, a.wrap)) * inner + c;
        if (a.backward) a.out[at] = a.src[t]; else a.out[t] = a.src[at];
    }
}

// A double from its bits (resample's tables carry weights so).
__device__ inline double bits_double(i64 b) {
    union { i64 i; double d; } u;
    u.i = b;
    return u.d;
}

// arange: out[t] = start + step * (t / repeat).
KERNEL void arange(Arange a) {
    FOR_EACH(t, a.n) {
        i64 r, k = split(a.repeat, t, &r);
        a.out[t] = (float)(a.start + a.step * (double)k);
    }
}

// softmax_cross_entropy (see loss.rs) over rows of `classes` scores x, with class labels the
// host has checked and each row's maximum and sum of exponentials in figures (softmax_join's, in
// double). gradient = 0: each row's loss, log-sum-exp minus the label's score, into the doubles
// loss (n = rows; the host sums them as partial sums); gradient = 1: one thread per score, grad
// = ograd[0] * (softmax - one_hot(label)) (n = rows * classes). In double, as the CPU.
KERNEL void cross_entropy(CrossEntropy a) {
    i64 k = a.classes.n;
    const double* fig = a.figures;
    FOR_EACH(t, a.n) {
        i64 j = 0, row = a.gradient ? split(a.classes, t, &j) : t;
        double lse = fig[2 * row] + log(fig[2 * row + 1]);
        i64 c = (i64)a.label[row];
        if (a.gradient == 0) {
            a.loss[t] = lse - (double)a.x[t * k + c];
            continue;
        }
        double g = a.ograd[0];
        a.grad[t] = (float)(g * (exp((double)a.x[t] - lse) - (j == c ? 1.0 : 0.0)));
    }
}
