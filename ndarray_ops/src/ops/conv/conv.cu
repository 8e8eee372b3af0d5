// im2col and col2im, for convolutions without cuDNN.

// Receptive fields of a channel group of nb images as columns: `images` holds the images, `image`
// floats apart, each (cg, h, w); cols gets (cg*kh*kw, nb, ho*wo), so that one image's columns
// are a submatrix (row stride nb*ho*wo) and all images' columns side by side are one matrix.
// n = the column buffer's size. With a 1x1 window this regroups planes: (nb, rows, plane) ->
// (rows, nb, plane).
KERNEL void im2col(Columns a) {
    i64 h = a.h.n, w = a.w.n, kh = a.kh.n, kw = a.kw.n, ho = a.ho.n, wo = a.wo.n;
    i64 nb = a.nb.n;
    FOR_EACH(t, a.n) {
        i64 x, y, b, j, i;
        i64 row = split(a.nb, split(a.ho, split(a.wo, t, &x), &y), &b);
        i64 ch = split(a.kh, split(a.kw, row, &j), &i);
        i64 iy = y * a.sh.n + i * a.dh - a.ph;
        i64 ix = x * a.sw.n + j * a.dw - a.pw;
        bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
        a.cols[t] = inside ? a.images[b * a.image + (ch * h + iy) * w + ix] : 0.0f;
    }
}

// The adjoint: each pixel of nb images at `images` (`image` floats apart, each (cg, h, w))
// gathers the entries of the columns `cols` (laid out as im2col writes them) that read it.
// n = nb*cg*h*w.
KERNEL void col2im(Columns a) {
    i64 h = a.h.n, w = a.w.n, kh = a.kh.n, kw = a.kw.n, sh = a.sh.n, sw = a.sw.n;
    i64 ph = a.ph, pw = a.pw, dh = a.dh, dw = a.dw, ho = a.ho.n, wo = a.wo.n;
    i64 nb = a.nb.n, cg = a.cg.n;
    FOR_EACH(t, a.n) {
        i64 ix, iy, ch;
        i64 b = split(a.cg, split(a.h, split(a.w, t, &ix), &iy), &ch);
        double s = 0.0;
        for (i64 i = 0; i < kh; i++) {
            i64 ny = iy + ph - i * dh, oy, ry;
            if (ny < 0) continue;
            oy = split(a.sh, ny, &ry);
            if (ry != 0 || oy >= ho) continue;
            for (i64 j = 0; j < kw; j++) {
                i64 nx = ix + pw - j * dw, ox, rx;
                if (nx < 0) continue;
                ox = split(a.sw, nx, &rx);
                if (rx != 0 || ox >= wo) continue;
                i64 row = (ch * kh + i) * kw + j;
                s += a.cols[(row * nb + b) * ho * wo + oy * wo + ox];
            }
        }
        a.images[b * a.image + (ch * h + iy) * w + ix] = (float)s;
    }
}
