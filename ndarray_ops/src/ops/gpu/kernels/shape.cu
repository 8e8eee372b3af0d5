// Data movement: the sequence ops, permutations (transpose), copies along an axis and blocks
// (depth_to_space/space_to_depth).

// The sequence ops on data shaped (steps, batch, inner) when time_axis is 0, or (batch, steps,
// inner) when it is 1; lengths holds the batch's lengths (null: every sequence is full; a
// length is truncated and clamped to [0, steps]). mode: 0 SequenceMask (out = x, value past
// each length), 1 SequenceLast (out, (batch, inner), = x at each last step; the first for a
// length of 0), 2 SequenceReverse (each sequence's steps within its length reversed), 3
// SequenceLast's gradient (out, the data's shape, = x, (batch, inner), at each last step, 0
// elsewhere). n = out's elements.
__device__ inline i64 seq_len(const Sequence& a, i64 n) {
    i64 steps = a.steps.n;
    if (!a.lengths) return steps;
    float v = a.lengths[n];
    i64 l = v > 0.0f ? (i64)v : 0;
    return l < steps ? l : steps;
}

__device__ inline i64 seq_at(const Sequence& a, i64 step, i64 n, i64 i) {
    i64 outer = a.time_axis == 0 ? step * a.batch.n + n : n * a.steps.n + step;
    return outer * a.inner.n + i;
}

KERNEL void sequence(Sequence a) {
    i64 mode = a.mode, inner = a.inner.n;
    FOR_EACH(t, a.n) {
        if (mode == 1) {
            i64 i, n = split(a.inner, t, &i), l = seq_len(a, n);
            a.out[t] = a.x[seq_at(a, (l > 0 ? l : 1) - 1, n, i)];
            continue;
        }
        i64 i, rest = split(a.inner, t, &i), step, n;
        if (a.time_axis == 0) {
            step = split(a.batch, rest, &n);
        } else {
            n = split(a.steps, rest, &step);
        }
        i64 l = seq_len(a, n);
        if (mode == 0) {
            a.out[t] = step >= l ? a.value : a.x[t];
        } else if (mode == 2) {
            a.out[t] = a.x[seq_at(a, step < l ? l - 1 - step : step, n, i)];
        } else {
            a.out[t] = step == (l > 0 ? l : 1) - 1 ? a.x[n * inner + i] : 0.0f;
        }
    }
}

// out = x with its axes permuted: out's dims are dims[..rank] (rank <= 6, outermost first) and
// x steps strides[d] elements along dim d.
KERNEL void permute(Permute a) {
    i64 rank = a.rank;
    FOR_EACH(t, a.n) {
        i64 rest = t, at = 0;
        for (i64 d = rank - 1; d > 0; d--) {
            i64 k;
            rest = split(a.dims[d], rest, &k);
            at += k * a.strides[d];
        }
        if (rank > 0) at += rest * a.strides[0];
        a.out[t] = a.x[at];
    }
}

// A block along an axis, between an (outer, src_len, inner) layout at src and an (outer,
// dst_len, inner) layout at dst: rows [src_first, src_first + rows) of src go to rows
// [dst_first, dst_first + rows) of dst (Concat, SliceChannel). n = outer * rows * inner.
KERNEL void axis_copy(AxisCopy a) {
    i64 inner = a.inner.n;
    FOR_EACH(t, a.n) {
        i64 i, k;
        i64 o = split(a.rows, split(a.inner, t, &i), &k);
        a.dst[((o * a.dst_len) + a.dst_first + k) * inner + i] = a.src[((o * a.src_len) + a.src_first + k) * inner + i];
    }
}

// gather_nd and its scatters (see gather_nd.rs), by blocks of `block` elements. mode = 0:
// out's block b = x's block starting at the table's entry b (n = out's size). mode = 1 (assign)
// or 2 (add): table = [targets, their list starts (targets + 1), the lists of x's block
// numbers]; the block of out at each target = the sum in order of the blocks listed, from -0
// (an assign lists one block, copied exactly) or +0 (an add, as the CPU adds into zeros).
// n = targets * block.
KERNEL void blocks(Blocks a) {
    const i64* tab = a.table;
    i64 block = a.block.n;
    FOR_EACH(t, a.n) {
        i64 e, b = split(a.block, t, &e);
        if (a.mode == 0) {
            a.out[t] = a.x[tab[b] + e];
            continue;
        }
        const i64* starts = tab + a.targets;
        const i64* list = starts + a.targets + 1;
        float acc = a.mode == 1 ? -0.0f : 0.0f;
        for (i64 k = starts[b]; k < starts[b + 1]; k++) acc += a.x[list[k] * block + e];
        a.out[tab[b] + e] = acc;
    }
}
