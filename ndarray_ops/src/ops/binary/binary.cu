// The binary family: x (op) y with broadcasting.

// x (op) y for the binary and scalar kernels' codes: the binary family's members (BINARY_*,
// written from the Rust enum; comparisons and logic give 1 or 0; mod takes the divisor's sign,
// and 0 for a zero divisor, as MXNet), and SMOOTH_L1 of x with sigma y. Powers, hypot and mod in
// double, as the CPU kernels.
__device__ inline float apply2(i64 code, float x, float y) {
    switch (code) {
        case BINARY_ADD: return x + y;
        case BINARY_SUB: return x - y;
        case BINARY_MUL: return x * y;
        case BINARY_DIV: return x / y;
        case BINARY_MAXIMUM: return y > x ? y : x;
        case BINARY_MINIMUM: return y < x ? y : x;
        case BINARY_POWER: return (float)pow((double)x, (double)y);
        case BINARY_EQUAL: return x == y ? 1.0f : 0.0f;
        case BINARY_NOT_EQUAL: return x != y ? 1.0f : 0.0f;
        case BINARY_GREATER: return x > y ? 1.0f : 0.0f;
        case BINARY_GREATER_EQUAL: return x >= y ? 1.0f : 0.0f;
        case BINARY_LESSER: return x < y ? 1.0f : 0.0f;
        case BINARY_LESSER_EQUAL: return x <= y ? 1.0f : 0.0f;
        case BINARY_HYPOT: return (float)hypot((double)x, (double)y);
        case BINARY_MOD: {
            double b = y;
            if (b == 0.0) return 0.0f;
            double r = fmod((double)x, b);
            if (r != 0.0 && ((r < 0.0) != (b < 0.0))) r += b;
            return (float)r;
        }
        case BINARY_LOGICAL_AND: return (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f;
        case BINARY_LOGICAL_OR: return (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f;
        case BINARY_LOGICAL_XOR: return ((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f;
        case SMOOTH_L1:
        default: {
            double v = x, s2 = (double)y * (double)y;
            return (float)(fabs(v) < 1.0 / s2 ? 0.5 * s2 * v * v : fabs(v) - 0.5 / s2);
        }
    }
}

// out = x (op code) y with broadcasting (apply2's codes). The output has rank <= 4 and dims
// dims[..rank]; x and y step x_strides and y_strides elements along those dims (0 where they
// broadcast). The host merges dims first, so equal shapes arrive as rank 1 and need no index
// arithmetic.
KERNEL void binary(Binary a) {
    i64 rank = a.rank;
    FOR_EACH(t, a.n) {
        i64 rest = t, ia = 0, ib = 0;
        for (i64 d = rank - 1; d > 0; d--) {
            i64 k;
            rest = split(a.dims[d], rest, &k);
            ia += k * a.x_strides[d];
            ib += k * a.y_strides[d];
        }
        if (rank > 0) {
            ia += rest * a.x_strides[0];
            ib += rest * a.y_strides[0];
        }
        a.out[t] = apply2(a.code, a.x[ia], a.y[ib]);
    }
}
