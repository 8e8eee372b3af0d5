// The softmax family: softmax and log_softmax (and their gradients) along lanes of an
// (outer, len, inner) layout, which SoftmaxActivation and softmax_cross_entropy also run (see
// gpu/lanes.rs), and SoftmaxOutput's gradient.

// Softmax over axis 1 of an (outer, len, inner) layout at temperature temp, one thread per lane
// (n lanes): out = softmax(x / temp), or its logarithm where log is set.
KERNEL void softmax_lanes(Softmax a) {
    i64 len = a.len, inner = a.inner.n;
    double temp = a.temp;
    FOR_EACH(t, a.n) {
        i64 base = (t / inner) * len * inner + t % inner;
        const float* x = a.x + base;
        float* y = a.out + base;
        double m = x[0] / temp;
        for (i64 k = 1; k < len; k++) m = fmax(m, x[k * inner] / temp);
        double z = 0.0;
        for (i64 k = 0; k < len; k++) z += exp(x[k * inner] / temp - m);
        double logz = log(z);
        for (i64 k = 0; k < len; k++) {
            double s = x[k * inner] / temp - m;
            y[k * inner] = (float)(a.log ? s - logz : exp(s) / z);
        }
    }
}

// softmax_lanes' gradient, per lane: out = d data from x (the output's gradient, g) and y (the
// output); softmax: y * (g - sum(g * y)) / temp; log_softmax: (g - exp(y) * sum(g)) / temp.
KERNEL void softmax_lanes_bwd(Softmax a) {
    i64 len = a.len, inner = a.inner.n;
    double temp = a.temp;
    FOR_EACH(t, a.n) {
        i64 base = (t / inner) * len * inner + t % inner;
        const float* g = a.x + base;
        const float* y = a.y + base;
        float* dx = a.out + base;
        double s = 0.0;
        for (i64 k = 0; k < len; k++) s += a.log ? (double)g[k * inner] : (double)g[k * inner] * y[k * inner];
        for (i64 k = 0; k < len; k++) {
            double gk = g[k * inner], yk = y[k * inner];
            dx[k * inner] = (float)((a.log ? gk - exp(yk) * s : yk * (gk - s)) / temp);
        }
    }
}

// softmax_lanes and softmax_lanes_bwd split for few long lanes (as gpu/lanes.rs's over_lanes
// runs them), each lane in `parts` parts so that many threads share a lane. softmax_parts, one
// thread per (lane, part) (n of them): part k of a lane takes its elements k, k + parts, ...
// (neighbouring threads read neighbouring addresses) and writes to partials their maximum and
// their sum of exp(x - that maximum), of x / temp (backward: the sum of g * y, or of g for
// log_softmax). softmax_join, one thread per lane (n lanes): the lane's maximum and sum of exp
// from its parts (backward: its sum) into figures (two per lane). softmax_each, one thread per
// element (n of them): out as the lane kernels compute it, from the lane's figures.
KERNEL void softmax_parts(Softmax a) {
    i64 len = a.len, inner = a.inner.n, parts = a.parts;
    double temp = a.temp;
    double* out = a.partials;
    FOR_EACH(t, a.n) {
        i64 lane = t / parts, k0 = t % parts;
        i64 base = lane_start(lane, len, inner);
        const float* x = a.x + base;
        if (a.backward) {
            const float* y = a.y + base;
            double s = 0.0;
            for (i64 k = k0; k < len; k += parts)
                s += a.log ? (double)x[k * inner] : (double)x[k * inner] * y[k * inner];
            out[2 * t] = s;
            continue;
        }
        double m = x[k0 * inner] / temp;
        for (i64 k = k0 + parts; k < len; k += parts) m = fmax(m, x[k * inner] / temp);
        double z = 0.0;
        for (i64 k = k0; k < len; k += parts) z += exp(x[k * inner] / temp - m);
        out[2 * t] = m;
        out[2 * t + 1] = z;
    }
}

KERNEL void softmax_join(Softmax a) {
    i64 parts = a.parts;
    FOR_EACH(lane, a.n) {
        const double* p = a.partials + 2 * lane * parts;
        double* out = a.figures + 2 * lane;
        if (a.backward) {
            double s = 0.0;
            for (i64 k = 0; k < parts; k++) s += p[2 * k];
            out[0] = s;
            continue;
        }
        double m = p[0];
        for (i64 k = 1; k < parts; k++) m = fmax(m, p[2 * k]);
        double z = 0.0;
        for (i64 k = 0; k < parts; k++) z += p[2 * k + 1] * exp(p[2 * k] - m);
        out[0] = m;
        out[1] = z;
    }
}

KERNEL void softmax_each(Softmax a) {
    i64 len = a.len, inner = a.inner.n;
    double temp = a.temp;
    FOR_EACH(t, a.n) {
        i64 r, q = split(a.inner, t, &r);
        const double* lane = a.figures + 2 * ((q / len) * inner + r);
        if (a.backward) {
            double g = a.x[t], y = a.y[t];
            a.out[t] = (float)((a.log ? g - exp(y) * lane[0] : y * (g - lane[0])) / temp);
            continue;
        }
        double s = a.x[t] / temp - lane[0];
        a.out[t] = (float)(a.log ? s - log(lane[1]) : exp(s) / lane[1]);
    }
}

// SoftmaxOutput's gradient on an (n, classes) output: dx = (prob - onehot(label)) * scale.
// has_ignore = 1: rows labelled `ignore` pass no gradient.
KERNEL void softmax_output_bwd(SoftmaxOutputBwd a) {
    i64 classes = a.classes;
    FOR_EACH(t, a.n) {
        float label = a.label[t / classes];
        float hit = (label >= 0.0f && (i64)label == t % classes) ? 1.0f : 0.0f;
        bool ignored = a.has_ignore != 0 && label == a.ignore;
        a.dx[t] = ignored ? 0.0f : (a.prob[t] - hit) * a.scale;
    }
}
