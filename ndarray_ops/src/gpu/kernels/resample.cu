// Bilinear resampling (BilinearResize2D, AdaptiveAvgPooling2D's windows, Crop).

// Resampling one plane at a time (Crop, AdaptiveAvgPooling2D, BilinearResize2D and their
// gradients; see resample.rs): p2 is a table [row starts (i1 + 1), then each row's input
// offsets, then their weights as doubles' bits]; p0 (planes, i1) = the weighted sums of p1
// (planes, i2) over each row's taps, i0 = planes * i1. i3 = 0 sums in double and rounds once
// (the forward passes); i3 = 1 rounds after every add, as the CPU's gradients add into float.
KERNEL void resample(KArgs a) {
    const i64* starts = (const i64*)a.p[2];
    i64 rows = a.i[1], cols = a.i[2], nnz = starts[rows];
    const i64* at = starts + rows + 1;
    const i64* w = at + nnz;
    FOR_EACH(t, a.i[0]) {
        i64 r, p = split(a, 1, t, &r);
        const float* x = a.p[1] + p * cols;
        if (a.i[3]) {
            float acc = 0.0f;
            for (i64 k = starts[r]; k < starts[r + 1]; k++)
                acc = (float)((double)acc + bits_double(w[k]) * (double)x[at[k]]);
            a.p[0][t] = acc;
        } else {
            double acc = 0.0;
            for (i64 k = starts[r]; k < starts[r + 1]; k++) acc += bits_double(w[k]) * (double)x[at[k]];
            a.p[0][t] = (float)acc;
        }
    }
}
