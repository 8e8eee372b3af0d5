// Region ops: ROIPooling and ROIAlign, forward and backward.

// The region ops (see roi.rs and gpu/roi.rs); the host has read the regions back and built the
// tables from the CPU's code. Outputs are (R, channels, i1 = cells); the data (N, i3 channels,
// i4 = h * w).
//
// ROIPooling: p2 = [the regions' images (R), then per (region, cell) its window: row start, row
// end, column start, column end]; i5 = w, i6 = R, i2 = channels. p0 = each window's maximum
// (the first of equals, row-major; 0 for an empty window) and p3 = its offset in the plane
// (-1: empty).
KERNEL void roi_pool(KArgs a) {
    const i64* images = (const i64*)a.p[2];
    i64 cells = a.i[1], w = a.i[5];
    FOR_EACH(t, a.i[0]) {
        i64 k, q = split(a, 1, t, &k);
        i64 ch, r = split(a, 2, q, &ch);
        const i64* win = images + a.i[6] + (r * cells + k) * 4;
        const float* x = a.p[1] + (images[r] * a.i[3] + ch) * a.i[4];
        i64 best = -1;
        float m = 0.0f;
        for (i64 i = win[0]; i < win[1]; i++)
            for (i64 j = win[2]; j < win[3]; j++) {
                float v = x[i * w + j];
                if (best < 0 || v > m) {
                    best = i * w + j;
                    m = v;
                }
            }
        a.p[0][t] = m;
        a.p[3][t] = (float)best;
    }
}

// ROIPooling's gradient, one index per data element (i0 = N * i3 * i4): p2 = [per (image,
// pixel) the start of its list (N * i4 + 1), then the lists of (region * cells + cell) whose
// window holds the pixel, in order]; the element adds the gradient p1 of each listed cell whose
// maximum (p3, the forward's offsets) it was, in region and cell order, as the CPU adds;
// i6 = N * i4 lists.
KERNEL void roi_pool_bwd(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 hw = a.i[4], cells = a.i[1], channels = a.i[2];
    const i64* list = starts + a.i[6] + 1;
    FOR_EACH(t, a.i[0]) {
        i64 i, q = split(a, 4, t, &i);
        i64 ch, image = split(a, 3, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a, 1, list[e], &k);
            i64 out = (r * channels + ch) * cells + k;
            if ((i64)a.p[3][out] == i) acc += a.p[1][out];
        }
        a.p[0][t] = acc;
    }
}

// ROIAlign: p2 = [per (region, cell) the start of its taps (R * cells + 1), the taps' plane
// offsets, their weights' bits, then the regions' images (R)]; i5 = 1: position sensitive
// (cell k of output channel c reads channel c * cells + k); i6 = R * cells. Sums in double, as
// the CPU.
KERNEL void roi_align(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 cells = a.i[1], rows = a.i[6], nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    const i64* images = w + nnz;
    FOR_EACH(t, a.i[0]) {
        i64 k, q = split(a, 1, t, &k);
        i64 c, r = split(a, 2, q, &c);
        i64 row = r * cells + k, ch = a.i[5] ? c * cells + k : c;
        const float* x = a.p[1] + (images[r] * a.i[3] + ch) * a.i[4];
        double acc = 0.0;
        for (i64 e = starts[row]; e < starts[row + 1]; e++) acc += bits_double(w[e]) * (double)x[at[e]];
        a.p[0][t] = (float)acc;
    }
}

// ROIAlign's gradient, one index per data element (i0 = N * i3 * i4): p2 = [per (image, pixel)
// the start of its list (N * i4 + 1), then the (region * cells + cell) of each tap reading the
// pixel and the tap's weight's bits, listed in region, cell and tap order]; the element adds
// weight * gradient for each (a position-sensitive cell only from its own channel), rounding to
// float after every add as the CPU accumulates. i6 = N * i4 lists, i7 = their total length.
KERNEL void roi_align_bwd(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 hw = a.i[4], cells = a.i[1], channels = a.i[2], total = a.i[7];
    const i64* rows = starts + a.i[6] + 1;
    const i64* w = rows + total;
    FOR_EACH(t, a.i[0]) {
        i64 i, q = split(a, 4, t, &i);
        i64 ch, image = split(a, 3, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a, 1, rows[e], &k);
            i64 c = ch;
            if (a.i[5]) {
                if (ch % cells != k) continue;
                c = ch / cells;
            }
            acc = (float)((double)acc + bits_double(w[e]) * (double)a.p[1][(r * channels + c) * cells + k]);
        }
        a.p[0][t] = acc;
    }
}
