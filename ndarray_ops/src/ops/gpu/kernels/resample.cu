// Bilinear resampling (BilinearResize2D, AdaptiveAvgPooling2D's windows, Crop).

// Resampling one plane at a time (Crop, AdaptiveAvgPooling2D, BilinearResize2D and their
// gradients; see resample.rs and the Resample struct there).
KERNEL void resample(Resample a) {
    const i64* starts = a.table;
    i64 rows = a.rows.n, cols = a.cols, nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    FOR_EACH(t, a.n) {
        i64 r, p = split(a.rows, t, &r);
        const float* x = a.src + p * cols;
        if (a.round_each_add) {
            float acc = 0.0f;
            for (i64 k = starts[r]; k < starts[r + 1]; k++)
                acc = (float)((double)acc + bits_double(w[k]) * (double)x[at[k]]);
            a.dst[t] = acc;
        } else {
            double acc = 0.0;
            for (i64 k = starts[r]; k < starts[r + 1]; k++) acc += bits_double(w[k]) * (double)x[at[k]];
            a.dst[t] = (float)acc;
        }
    }
}
