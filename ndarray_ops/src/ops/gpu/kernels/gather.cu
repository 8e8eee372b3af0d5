// The gather family (broadcast, tile, repeat, reverse, Pad, ...) and its gradient.

// The gather family (see gather.rs for the tables and the GatherFwd struct).
KERNEL void gather_fwd(GatherFwd a) {
    const i64* tab = a.table;
    i64 nd = tab[0], end = 1 + nd;
    for (i64 d = 0; d < nd; d++) end += tab[1 + d];
    FOR_EACH(t, a.n) {
        i64 rest = t, src = 0, pos = end, pad = 0;
        for (i64 d = nd - 1; d >= 0; d--) {
            i64 n = tab[1 + d];
            pos -= n;
            i64 o = tab[pos + rest % n];
            rest /= n;
            if (o < 0) pad = 1; else src += o;
        }
        a.out[t] = pad ? a.fill : a.x[src];
    }
}

#define GATHER_DIMS 8

// dx (the data's gradient) = the sum of g (the output's gradient) over the output elements that
// read each data element, in output order; table = gather.rs's backward table. Each element's
// sum is split into `parts`, n = elements * parts threads: part k takes the element's terms k,
// k + parts, ... (an odometer over its buckets stepped parts at a time) and, with parts > 1,
// writes its sum to partials (doubles, an element's parts together) for chan_total to add; with
// one part the element's sum goes to dx.
KERNEL void gather_bwd(GatherBwd a) {
    const i64* tab = a.table;
    i64 ni = tab[0], no = tab[1], parts = a.parts;
    const i64* in_dims = tab + 2;
    const i64* out_dims = in_dims + ni;
    const i64* from = out_dims + no;
    const i64* starts = from + no;
    const i64* lists = starts + no;
    FOR_EACH(t, a.n) {
        i64 k[GATHER_DIMS], lo[GATHER_DIMS], size[GATHER_DIMS], c[GATHER_DIMS], stride[GATHER_DIMS];
        i64 rest = t / parts, s = 1, empty = 0;
        for (i64 d = ni - 1; d >= 0; d--) {
            k[d] = rest % in_dims[d];
            rest /= in_dims[d];
        }
        for (i64 d = no - 1; d >= 0; d--) {
            i64 j = from[d] < 0 ? 0 : k[from[d]];
            lo[d] = tab[starts[d] + j];
            size[d] = tab[starts[d] + j + 1] - lo[d];
            if (size[d] == 0) empty = 1;
            c[d] = 0;
            stride[d] = s;
            s *= out_dims[d];
        }
        // The odometer (the last bucket turning fastest) moves to term t % parts first, then
        // parts terms at a time, until it carries out of the first bucket.
        i64 step = t % parts;
        double acc = 0.0;
        while (!empty) {
            for (i64 d = no - 1; d >= 0 && step; d--) {
                i64 v = c[d] + step;
                step = v < size[d] ? 0 : v / size[d];
                c[d] = v < size[d] ? v : v % size[d];
            }
            if (step) break;
            i64 o = 0;
            for (i64 d = 0; d < no; d++) o += tab[lists[d] + lo[d] + c[d]] * stride[d];
            acc += (double)a.g[o];
            step = parts;
        }
        if (parts == 1) a.dx[t] = (float)acc; else a.partials[t] = acc;
    }
}
