// Region ops: ROIPooling and ROIAlign, forward and backward.

// The region ops (see roi.rs and gpu/roi.rs); the host has read the regions back and built the
// tables from the CPU's code. Outputs are (R, channels, cells); the data (N, data_channels,
// plane = h * w). See the Roi struct in gpu/roi.rs.
//
// ROIPooling: table = [the regions' images (rows = R), then per (region, cell) its window: row
// start, row end, column start, column end]. out = each window's maximum (the first of equals,
// row-major; 0 for an empty window) and argmax = its offset in the plane (-1: empty).
KERNEL void roi_pool(Roi a) {
    const i64* images = a.table;
    i64 cells = a.cells.n, w = a.width;
    FOR_EACH(t, a.n) {
        i64 k, q = split(a.cells, t, &k);
        i64 ch, r = split(a.channels, q, &ch);
        const i64* win = images + a.rows + (r * cells + k) * 4;
        const float* x = a.src + (images[r] * a.data_channels.n + ch) * a.plane.n;
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
        a.out[t] = m;
        a.argmax[t] = (float)best;
    }
}

// ROIPooling's gradient, one index per data element (n = N * data_channels * plane): table =
// [per (image, pixel) the start of its list (rows = N * plane lists, + 1), then the lists of
// (region * cells + cell) whose window holds the pixel, in order]; the element adds the
// gradient src of each listed cell whose maximum (argmax, the forward's offsets) it was, in
// region and cell order, as the CPU adds.
KERNEL void roi_pool_bwd(Roi a) {
    const i64* starts = a.table;
    i64 hw = a.plane.n, cells = a.cells.n, channels = a.channels.n;
    const i64* list = starts + a.rows + 1;
    FOR_EACH(t, a.n) {
        i64 i, q = split(a.plane, t, &i);
        i64 ch, image = split(a.data_channels, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a.cells, list[e], &k);
            i64 out = (r * channels + ch) * cells + k;
            if ((i64)a.argmax[out] == i) acc += a.src[out];
        }
        a.out[t] = acc;
    }
}

// ROIAlign: table = [per (region, cell) the start of its taps (rows = R * cells, + 1), the
// taps' plane offsets, their weights' bits, then the regions' images (R)]; sensitive = 1:
// position sensitive (cell k of output channel c reads channel c * cells + k). Sums in double,
// as the CPU.
KERNEL void roi_align(Roi a) {
    const i64* starts = a.table;
    i64 cells = a.cells.n, rows = a.rows, nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    const i64* images = w + nnz;
    FOR_EACH(t, a.n) {
        i64 k, q = split(a.cells, t, &k);
        i64 c, r = split(a.channels, q, &c);
        i64 row = r * cells + k, ch = a.sensitive ? c * cells + k : c;
        const float* x = a.src + (images[r] * a.data_channels.n + ch) * a.plane.n;
        double acc = 0.0;
        for (i64 e = starts[row]; e < starts[row + 1]; e++) acc += bits_double(w[e]) * (double)x[at[e]];
        a.out[t] = (float)acc;
    }
}

// ROIAlign's gradient, one index per data element (n = N * data_channels * plane): table = [per
// (image, pixel) the start of its list (rows = N * plane lists, + 1), then the (region * cells +
// cell) of each tap reading the pixel and the tap's weight's bits (total of each), listed in
// region, cell and tap order]; the element adds weight * gradient for each (a
// position-sensitive cell only from its own channel), rounding to float after every add as the
// CPU accumulates.
KERNEL void roi_align_bwd(Roi a) {
    const i64* starts = a.table;
    i64 hw = a.plane.n, cells = a.cells.n, channels = a.channels.n, total = a.total;
    const i64* rows = starts + a.rows + 1;
    const i64* w = rows + total;
    FOR_EACH(t, a.n) {
        i64 i, q = split(a.plane, t, &i);
        i64 ch, image = split(a.data_channels, q, &ch);
        float acc = 0.0f;
        for (i64 e = starts[image * hw + i]; e < starts[image * hw + i + 1]; e++) {
            i64 k, r = split(a.cells, rows[e], &k);
            i64 c = ch;
            if (a.sensitive) {
                if (ch % cells != k) continue;
                c = ch / cells;
            }
            acc = (float)((double)acc + bits_double(w[e]) * (double)a.src[(r * channels + c) * cells + k]);
        }
        a.out[t] = acc;
    }
}
