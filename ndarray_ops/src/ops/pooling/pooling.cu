// Pooling forward and backward.

// One pooling window, clipped as MXNet clips it: [*y0, *y1) x [*x0, *x1) is read; *padded is the
// window clipped to the padded input (what average pooling divides by by default).
struct Window {
    i64 y0, y1, x0, x1;
    double padded;
};

__device__ inline Window pool_window(const Pool& a, i64 y, i64 x) {
    i64 h = a.h.n, w = a.w.n, kh = a.kh, kw = a.kw, sh = a.sh, sw = a.sw;
    i64 ph = a.ph, pw = a.pw;
    i64 ys = y * sh - ph, ye = min64(ys + kh, h + ph);
    i64 xs = x * sw - pw, xe = min64(xs + kw, w + pw);
    Window win;
    win.padded = (double)max64((ye - ys) * (xe - xs), 1);
    win.y0 = max64(ys, 0);
    win.y1 = min64(max64(ye, 0), h);
    win.x0 = max64(xs, 0);
    win.x1 = min64(max64(xe, 0), w);
    return win;
}

// Where the first maximum of a window lies (-1 for an empty window).
__device__ inline i64 window_argmax(const float* plane, i64 w, const Window& win) {
    i64 at = -1;
    float best = 0.0f;
    for (i64 iy = win.y0; iy < win.y1; iy++)
        for (i64 ix = win.x0; ix < win.x1; ix++) {
            float v = plane[iy * w + ix];
            if (at < 0 || v > best) {
                best = v;
                at = iy * w + ix;
            }
        }
    return at;
}

// Pooling: src (planes, h, w) -> out (planes, ho, wo), and for max pooling the argmax into
// mask when it is set. n outputs; kind 0 max, 1 avg, 2 sum.
KERNEL void pool_fwd(Pool a) {
    i64 h = a.h.n, w = a.w.n, ho = a.ho.n, wo = a.wo.n, kind = a.kind;
    FOR_EACH(t, a.n) {
        i64 x, y;
        i64 plane = split(a.ho, split(a.wo, t, &x), &y);
        const float* src = a.src + plane * h * w;
        Window win = pool_window(a, y, x);
        double r;
        if (kind == 0) {
            i64 at = window_argmax(src, w, win);
            r = at < 0 ? 0.0 : src[at];
            if (a.mask) a.mask[t] = (float)(at < 0 ? 0 : at);
        } else {
            double s = 0.0;
            for (i64 iy = win.y0; iy < win.y1; iy++)
                for (i64 ix = win.x0; ix < win.x1; ix++) s += src[iy * w + ix];
            double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
            r = kind == 2 ? s : s / (a.count_pad ? win.padded : inside);
        }
        a.out[t] = (float)r;
    }
}

// Max pooling's window maxima for its gradient: out[t] = where in its plane output window t's
// first maximum lies in src (planes, h, w), -1 for an empty window; exact while h * w < 2^24.
KERNEL void pool_argmax(Pool a) {
    i64 h = a.h.n, w = a.w.n;
    FOR_EACH(t, a.n) {
        i64 x, y;
        i64 plane = split(a.ho, split(a.wo, t, &x), &y);
        a.out[t] = (float)window_argmax(a.src + plane * h * w, w, pool_window(a, y, x));
    }
}

// Pooling's gradient, gathered: each input pixel of out (planes, h, w) adds up the output
// gradients src of the windows that took it (max: it is the window's first maximum in the
// data, read from pool_argmax's argmax when given: one search per window instead of one per
// window and pixel under it). n = the number of input pixels.
KERNEL void pool_bwd(Pool a) {
    i64 h = a.h.n, w = a.w.n, ho = a.ho.n, wo = a.wo.n, kh = a.kh, kw = a.kw;
    i64 sh = a.sh, sw = a.sw, ph = a.ph, pw = a.pw, kind = a.kind;
    FOR_EACH(t, a.n) {
        i64 ix, iy;
        i64 plane = split(a.h, split(a.w, t, &ix), &iy);
        const float* data = a.data + plane * h * w;
        const float* dy = a.src + plane * ho * wo;
        // Windows y with y*sh - ph <= iy < y*sh - ph + kh.
        i64 lo_y = iy + ph - kh + 1, lo_x = ix + pw - kw + 1;
        i64 y_first = lo_y <= 0 ? 0 : (lo_y + sh - 1) / sh;
        i64 x_first = lo_x <= 0 ? 0 : (lo_x + sw - 1) / sw;
        i64 y_last = min64((iy + ph) / sh, ho - 1), x_last = min64((ix + pw) / sw, wo - 1);
        double s = 0.0;
        for (i64 y = y_first; y <= y_last; y++)
            for (i64 x = x_first; x <= x_last; x++) {
                Window win = pool_window(a, y, x);
                if (iy < win.y0 || iy >= win.y1 || ix < win.x0 || ix >= win.x1) continue;
                double g = dy[y * wo + x];
                if (kind == 0) {
                    i64 at = a.argmax ? (i64)a.argmax[(plane * ho + y) * wo + x]
                                    : window_argmax(data, w, win);
                    if (at == iy * w + ix) s += g;
                } else if (kind == 2) {
                    s += g;
                } else {
                    double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
                    s += g / (a.count_pad ? win.padded : inside);
                }
            }
        a.out[t] = (float)s;
    }
}
