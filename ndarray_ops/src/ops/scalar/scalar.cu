// The scalar family: out = x (op code) scalar, or scalar (op code) x where `left` is 1
// (binary.cu's apply2 codes, and SMOOTH_L1).
KERNEL void scalar(ScalarArgs a) {
    float s = a.scalar;
    FOR_EACH(t, a.n) {
        float x = a.x[t];
        a.out[t] = a.left ? apply2(a.code, s, x) : apply2(a.code, x, s);
    }
}
