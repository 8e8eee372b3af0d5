// sort/argsort/topk: a bitonic network over each lane, one launch per stage.

// Sorting (topk, sort, argsort; see sort.rs) as a bitonic network over each lane padded to
// P = padded entries (a power of two). keys holds one i64 per entry: the value's total-order key
// (as Rust's total_cmp orders floats; flipped bitwise for a descending sort) times 2^32 plus its
// position in the lane, so ascending order of the i64s is the CPU's stable order. sort_keys
// fills them from x, laid out (outer, lane, inner), over n = lanes * P entries. Padding
// (positions from lane on) sorts after every element.
__device__ inline int float_bits(float v) {
    union { float f; int i; } u;
    u.f = v;
    return u.i;
}

KERNEL void sort_keys(SortKeys a) {
    i64* keys = a.keys;
    i64 lane = a.lane, inner = a.inner.n;
    FOR_EACH(t, a.n) {
        i64 j, l = split(a.padded, t, &j);
        if (j >= lane) {
            keys[t] = 2147483647LL * 4294967296LL + j;
            continue;
        }
        i64 c, o = split(a.inner, l, &c);
        int b = float_bits(a.x[(o * lane + j) * inner + c]);
        int k = b ^ (int)((unsigned)(b >> 31) >> 1);
        if (a.descending) k = ~k;
        keys[t] = (i64)k * 4294967296LL + j;
    }
}

// One compare-exchange stage of the network over every lane at once: merges of `merge`
// entries, partners `apart` apart, n = lanes * P / 2 pairs. A pair never crosses a lane (P is a
// multiple of every merge size), and its direction is set by its position within the lane.
KERNEL void sort_step(SortStep a) {
    i64* keys = a.keys;
    i64 within = a.padded - 1, merge = a.merge, d = a.apart.n;
    FOR_EACH(t, a.n) {
        i64 r, q = split(a.apart, t, &r);
        i64 g = q * 2 * d + r, h = g + d;
        bool up = ((g & within) & merge) == 0;
        i64 x = keys[g], y = keys[h];
        if ((x > y) == up) {
            keys[g] = y;
            keys[h] = x;
        }
    }
}

// The first k entries of each sorted lane, n = lanes * k of them: where out is set, the values
// of x there (mask = 0), or 1 at each kept element's place in out (mask = 1, out shaped like x
// and zeroed first); where positions is set, the positions as floats. Layouts as sort_keys, the
// kept (outer, k, inner).
KERNEL void sort_take(SortTake a) {
    const i64* keys = a.keys;
    i64 inner = a.inner.n, P = a.padded, lane = a.lane, k = a.k.n;
    FOR_EACH(t, a.n) {
        i64 r, l = split(a.k, t, &r);
        i64 j = keys[l * P + r] & 4294967295LL;
        i64 c, o = split(a.inner, l, &c);
        i64 src = (o * lane + j) * inner + c, dst = (o * k + r) * inner + c;
        if (a.out) {
            if (a.mask) a.out[src] = 1.0f; else a.out[dst] = a.x[src];
        }
        if (a.positions) a.positions[dst] = (float)j;
    }
}
