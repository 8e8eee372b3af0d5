// im2col/col2im for convolutions without cuDNN, and pooling forward and backward.

// Receptive fields of a channel group of i13 images as columns: p1 holds the images, i14 floats
// apart, each (cg, h, w); p0 gets (cg*kh*kw, i13, ho*wo), so that one image's columns are a
// submatrix (row stride i13*ho*wo) and all images' columns side by side are one matrix. i0 = the
// column buffer's size, i1 h, i2 w, i3 kh, i4 kw, i5 sh, i6 sw, i7 ph, i8 pw, i9 dh, i10 dw,
// i11 ho, i12 wo. With a 1x1 window this regroups planes: (nb, rows, plane) -> (rows, nb, plane).
KERNEL void im2col(KArgs a) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[3], kw = a.i[4], ho = a.i[11], wo = a.i[12];
    i64 nb = a.i[13];
    FOR_EACH(t, a.i[0]) {
        i64 x, y, b, j, i;
        i64 row = split(a, 13, split(a, 11, split(a, 12, t, &x), &y), &b);
        i64 ch = split(a, 3, split(a, 4, row, &j), &i);
        i64 iy = y * a.i[5] + i * a.i[9] - a.i[7];
        i64 ix = x * a.i[6] + j * a.i[10] - a.i[8];
        bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        a.p[0][t] = inside ? a.p[1][b * a.i[14] + (ch * h + iy) * w + ix] : 0.0f;
    }
}

// The adjoint: each pixel of i13 images at p0 (i14 floats apart, each (i15 = cg, h, w)) gathers
// the entries of the columns p1 (laid out as im2col writes them) that read it.
// i0 = i13*cg*h*w, other integers as for im2col.
KERNEL void col2im(KArgs a) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[3], kw = a.i[4], sh = a.i[5], sw = a.i[6];
    i64 ph = a.i[7], pw = a.i[8], dh = a.i[9], dw = a.i[10], ho = a.i[11], wo = a.i[12];
    i64 nb = a.i[13], cg = a.i[15];
    FOR_EACH(t, a.i[0]) {
        i64 ix, iy, ch;
        i64 b = split(a, 15, split(a, 1, split(a, 2, t, &ix), &iy), &ch);
        double s = 0.0;
        for (i64 i = 0; i < kh; i++) {
            i64 ny = iy + ph - i * dh, oy, ry;
            if (ny < 0) continue;
            oy = split(a, 5, ny, &ry);
            if (ry != 0 || oy >= ho) continue;
            for (i64 j = 0; j < kw; j++) {
                i64 nx = ix + pw - j * dw, ox, rx;
                if (nx < 0) continue;
                ox = split(a, 6, nx, &rx);
                if (rx != 0 || ox >= wo) continue;
                i64 row = (ch * kh + i) * kw + j;
                s += a.p[1][(row * nb + b) * ho * wo + oy * wo + ox];
            }
        }
        a.p[0][b * a.i[14] + (ch * h + iy) * w + ix] = (float)s;
    }
}

// One pooling window, clipped as MXNet clips it: [*y0, *y1) x [*x0, *x1) is read; *padded is the
// window clipped to the padded input (what average pooling divides by by default).
struct Window {
    i64 y0, y1, x0, x1;
    double padded;
};

__device__ inline Window pool_window(const KArgs& a, i64 y, i64 x) {
    i64 h = a.i[1], w = a.i[2], kh = a.i[5], kw = a.i[6], sh = a.i[7], sw = a.i[8];
    i64 ph = a.i[9], pw = a.i[10];
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

// Pooling: p1 (planes, h, w) -> p0 (planes, ho, wo), and for max pooling the argmax into p2 when
// i13 is set. i0 outputs, i1 h, i2 w, i3 ho, i4 wo, i5 kh, i6 kw, i7 sh, i8 sw, i9 ph, i10 pw,
// i11 kind (0 max, 1 avg, 2 sum), i12 count_include_pad.
KERNEL void pool_fwd(KArgs a) {
    i64 h = a.i[1], w = a.i[2], ho = a.i[3], wo = a.i[4], kind = a.i[11];
    FOR_EACH(t, a.i[0]) {
        i64 x, y;
        i64 plane = split(a, 3, split(a, 4, t, &x), &y);
        const float* src = a.p[1] + plane * h * w;
        Window win = pool_window(a, y, x);
        double r;
        if (kind == 0) {
            i64 at = window_argmax(src, w, win);
            r = at < 0 ? 0.0 : src[at];
            if (a.i[13]) a.p[2][t] = (float)(at < 0 ? 0 : at);
        } else {
            double s = 0.0;
            for (i64 iy = win.y0; iy < win.y1; iy++)
                for (i64 ix = win.x0; ix < win.x1; ix++) s += src[iy * w + ix];
            double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
            r = kind == 2 ? s : s / (a.i[12] ? win.padded : inside);
        }
        a.p[0][t] = (float)r;
    }
}

// Max pooling's window maxima for its gradient: p0[t] = where in its plane output window t's
// first maximum lies in p1 (planes, h, w), -1 for an empty window; exact while h * w < 2^24.
// Integers as for pool_fwd.
KERNEL void pool_argmax(KArgs a) {
    i64 h = a.i[1], w = a.i[2];
    FOR_EACH(t, a.i[0]) {
        i64 x, y;
        i64 plane = split(a, 3, split(a, 4, t, &x), &y);
        a.p[0][t] = (float)window_argmax(a.p[1] + plane * h * w, w, pool_window(a, y, x));
    }
}

// Pooling's gradient, gathered: each input pixel of p0 (planes, h, w) adds up the output
// gradients p1 of the windows that took it (max: it is the window's first maximum in the data
// p2, read from pool_argmax's p3 when given: one search per window instead of one per window
// and pixel under it). Integers as for pool_fwd, but i0 = the number of input pixels.
KERNEL void pool_bwd(KArgs a) {
    i64 h = a.i[1], w = a.i[2], ho = a.i[3], wo = a.i[4], kh = a.i[5], kw = a.i[6];
    i64 sh = a.i[7], sw = a.i[8], ph = a.i[9], pw = a.i[10], kind = a.i[11];
    FOR_EACH(t, a.i[0]) {
        i64 ix, iy;
        i64 plane = split(a, 1, split(a, 2, t, &ix), &iy);
        const float* data = a.p[2] + plane * h * w;
        const float* dy = a.p[1] + plane * ho * wo;
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
                    i64 at = a.p[3] ? (i64)a.p[3][(plane * ho + y) * wo + x]
                                    : window_argmax(data, w, win);
                    if (at == iy * w + ix) s += g;
                } else if (kind == 2) {
                    s += g;
                } else {
                    double inside = (double)max64((win.y1 - win.y0) * (win.x1 - win.x0), 1);
                    s += g / (a.i[12] ? win.padded : inside);
                }
            }
        a.p[0][t] = (float)s;
    }
}
