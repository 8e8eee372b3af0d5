// The reduction family along lanes: max, min, prod, argmax, argmin.

// Reductions along the lanes of an (outer, len, inner) layout, one index per (outer, inner)
// pair, by the member's code (REDUCE_*, written from the Rust enum; argmax and argmin give the
// first extremum's index, as a float). NaN is
// skipped by max and min as on the CPU (a comparison with NaN is false).
KERNEL void reduce_lanes(Lanes a) {
    i64 len = a.len, inner = a.inner.n, code = a.code;
    FOR_EACH(t, a.n) {
        i64 i, o = split(a.inner, t, &i);
        const float* x = a.x + o * len * inner + i;
        float r = code == REDUCE_MAX ? -INF_F : (code == REDUCE_MIN ? INF_F : 1.0f), best = 0.0f;
        i64 at = -1;
        for (i64 l = 0; l < len; l++) {
            float v = x[l * inner];
            switch (code) {
                case REDUCE_MAX: if (v > r) r = v; break;
                case REDUCE_MIN: if (v < r) r = v; break;
                case REDUCE_PROD: r *= v; break;
                case REDUCE_ARGMAX: if (at < 0 || v > best) { at = l; best = v; } break;
                default: if (at < 0 || v < best) { at = l; best = v; } break;
            }
        }
        int arg = code == REDUCE_ARGMAX || code == REDUCE_ARGMIN;
        a.out[t] = arg ? (float)(at < 0 ? 0 : at) : r;
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
    int most = code == REDUCE_MAX || code == REDUCE_ARGMAX;
    double* out = a.partials;
    FOR_EACH(t, a.n) {
        i64 lane = t / parts, k0 = t % parts;
        i64 i, o = split(a.inner, lane, &i);
        const float* x = a.x + o * len * inner + i;
        float best = 1.0f;
        i64 at = -1;
        for (i64 l = k0; l < len; l += parts) {
            float v = x[l * inner];
            if (code == REDUCE_PROD) {
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
    int most = code == REDUCE_MAX || code == REDUCE_ARGMAX;
    FOR_EACH(lane, a.n) {
        const double* p = a.partials + 2 * lane * parts;
        float best = 1.0f;
        i64 at = -1;
        for (i64 k = 0; k < parts; k++) {
            float v = (float)p[2 * k];
            i64 pk = (i64)p[2 * k + 1];
            if (code == REDUCE_PROD) {
                best *= v;
            } else if (pk >= 0 && (at < 0 || (most ? v > best : v < best) || (v == best && pk < at))) {
                best = v;
                at = pk;
            }
        }
        if (code == REDUCE_PROD) {
            a.out[lane] = best;
        } else if (code == REDUCE_MAX || code == REDUCE_MIN) {
            a.out[lane] = at < 0 ? (code == REDUCE_MAX ? -INF_F : INF_F) : best;
        } else {
            i64 i, o = split(a.inner, lane, &i);
            float first = a.x[o * len * inner + i];
            a.out[lane] = (first != first || at < 0) ? 0.0f : (float)at;
        }
    }
}
