// sort/argsort/topk: a bitonic network over each lane, one launch per stage.

// Sorting (topk, sort, argsort; see sort.rs) as a bitonic network over each lane padded to
// P = i2 entries (a power of two). p3 holds one i64 per entry: the value's total-order key (as
// Rust's total_cmp orders floats; flipped bitwise for a descending sort) times 2^32 plus its
// position in the lane, so ascending order of the i64s is the CPU's stable order. sort_keys
// fills them from p1, laid out (outer, lane = i3, inner = i1), over i0 = lanes * P entries;
// i4 = 1 sorts descending. Padding (positions from i3 on) sorts after every element.
__device__ inline int float_bits(float v) {
    union { float f; int i; } u;
    u.f = v;
    return u.i;
}

KERNEL void sort_keys(KArgs a) {
    i64* keys = (i64*)a.p[3];
    i64 lane = a.i[3], inner = a.i[1];
    FOR_EACH(t, a.i[0]) {
        i64 j, l = split(a, 2, t, &j);
        if (j >= lane) {
            keys[t] = 2147483647LL * 4294967296LL + j;
            continue;
        }
        i64 c, o = split(a, 1, l, &c);
        int b = float_bits(a.p[1][(o * lane + j) * inner + c]);
        int k = b ^ (int)((unsigned)(b >> 31) >> 1);
        if (a.i[4]) k = ~k;
        keys[t] = (i64)k * 4294967296LL + j;
    }
}

// One compare-exchange stage of the network over every lane at once: merges of i5 entries,
// partners i6 apart, i0 = lanes * P / 2 pairs. A pair never crosses a lane (P is a multiple of
// every merge size), and its direction is set by its position within the lane.
KERNEL void sort_step(KArgs a) {
    i64* keys = (i64*)a.p[3];
    i64 within = a.i[2] - 1, merge = a.i[5], d = a.i[6];
    FOR_EACH(t, a.i[0]) {
        i64 r, q = split(a, 6, t, &r);
        i64 g = q * 2 * d + r, h = g + d;
        bool up = ((g & within) & merge) == 0;
        i64 x = keys[g], y = keys[h];
        if ((x > y) == up) {
            keys[g] = y;
            keys[h] = x;
        }
    }
}

// The first i5 = k entries of each sorted lane, i0 = lanes * k of them: where p0 is set, the
// values of p1 there (i4 = 0), or 1 at each kept element's place in p0 (i4 = 1, p0 shaped like
// p1 and zeroed first); where p2 is set, the positions as floats. Layouts as sort_keys, the
// kept (outer, k, inner).
KERNEL void sort_take(KArgs a) {
    const i64* keys = (const i64*)a.p[3];
    i64 inner = a.i[1], P = a.i[2], lane = a.i[3], k = a.i[5];
    FOR_EACH(t, a.i[0]) {
        i64 r, l = split(a, 5, t, &r);
        i64 j = keys[l * P + r] & 4294967295LL;
        i64 c, o = split(a, 1, l, &c);
        i64 src = (o * lane + j) * inner + c, dst = (o * k + r) * inner + c;
        if (a.p[0]) {
            if (a.i[4]) a.p[0][src] = 1.0f; else a.p[0][dst] = a.p[1][src];
        }
        if (a.p[2]) a.p[2][dst] = (float)j;
    }
}
