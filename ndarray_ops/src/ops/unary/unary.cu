// The unary family: a function of each element, its gradient, and the activations.

// The member `code` (UNARY_*, written from the Rust enum) at x, in double as the CPU kernels.
__device__ inline double unary_f(i64 code, double x) {
    const double pi = 3.14159265358979323846;
    switch (code) {
        case UNARY_NEGATIVE: return -x;
        case UNARY_ABS: return fabs(x);
        case UNARY_SQUARE: return x * x;
        case UNARY_EXP: return exp(x);
        case UNARY_LOG: return log(x);
        case UNARY_SQRT: return sqrt(x);
        case UNARY_RSQRT: return 1.0 / sqrt(x);
        case UNARY_RECIPROCAL: return 1.0 / x;
        case UNARY_CBRT: return cbrt(x);
        case UNARY_RCBRT: return 1.0 / cbrt(x);
        case UNARY_LOG1P: return log1p(x);
        case UNARY_EXPM1: return expm1(x);
        case UNARY_LOG2: return log2(x);
        case UNARY_LOG10: return log10(x);
        case UNARY_ERF: return erf(x);
        case UNARY_SIN: return sin(x);
        case UNARY_COS: return cos(x);
        case UNARY_TAN: return tan(x);
        case UNARY_ARCSIN: return asin(x);
        case UNARY_ARCCOS: return acos(x);
        case UNARY_ARCTAN: return atan(x);
        case UNARY_SINH: return sinh(x);
        case UNARY_COSH: return cosh(x);
        case UNARY_ARCSINH: return asinh(x);
        case UNARY_ARCCOSH: return acosh(x);
        case UNARY_ARCTANH: return atanh(x);
        case UNARY_DEGREES: return x * (180.0 / pi);
        case UNARY_RADIANS: return x * (pi / 180.0);
        case UNARY_SOFTSIGN: return x / (1.0 + fabs(x));
        case UNARY_ROUND: return round(x);
        // MXNet's rint takes halves down.
        case UNARY_RINT: { double d = floor(x); return x - d <= 0.5 ? d : d + 1.0; }
        case UNARY_FIX: case UNARY_TRUNC: return trunc(x);
        case UNARY_FLOOR: return floor(x);
        case UNARY_CEIL: return ceil(x);
        case UNARY_SIGN: return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0);
        case UNARY_RELU: return x > 0.0 ? x : 0.0;
        case UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
        case UNARY_TANH: return tanh(x);
        case UNARY_SOFTRELU: default: return x > 20.0 ? x : log1p(exp(x));
    }
}

// The derivative of member `code`, written in the input or the output as `Unary::deriv`
// writes it (v is whichever the backward node reads); 0 for the flat members.
__device__ inline double unary_d(i64 code, double v) {
    const double pi = 3.14159265358979323846;
    switch (code) {
        case UNARY_NEGATIVE: return -1.0;
        case UNARY_ABS: return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0);
        case UNARY_SQUARE: return 2.0 * v;
        case UNARY_EXP: return v;
        case UNARY_LOG: return 1.0 / v;
        case UNARY_SQRT: return 0.5 / v;
        case UNARY_RSQRT: return -0.5 / (v * sqrt(v));
        case UNARY_RECIPROCAL: return -1.0 / (v * v);
        case UNARY_CBRT: return 1.0 / (3.0 * v * v);
        case UNARY_RCBRT: return -1.0 / (3.0 * v * cbrt(v));
        case UNARY_LOG1P: return 1.0 / (1.0 + v);
        case UNARY_EXPM1: return exp(v);
        case UNARY_LOG2: return 1.0 / (v * 0.69314718055994530942);
        case UNARY_LOG10: return 1.0 / (v * 2.30258509299404568402);
        case UNARY_ERF: return 2.0 / sqrt(pi) * exp(-v * v);
        case UNARY_SIN: return cos(v);
        case UNARY_COS: return -sin(v);
        case UNARY_TAN: return 1.0 + v * v;
        case UNARY_ARCSIN: return 1.0 / sqrt(1.0 - v * v);
        case UNARY_ARCCOS: return -1.0 / sqrt(1.0 - v * v);
        case UNARY_ARCTAN: return 1.0 / (1.0 + v * v);
        case UNARY_SINH: return cosh(v);
        case UNARY_COSH: return sinh(v);
        case UNARY_ARCSINH: return 1.0 / sqrt(v * v + 1.0);
        case UNARY_ARCCOSH: return 1.0 / sqrt(v * v - 1.0);
        case UNARY_ARCTANH: return 1.0 / (1.0 - v * v);
        case UNARY_DEGREES: return 180.0 / pi;
        case UNARY_RADIANS: return pi / 180.0;
        case UNARY_SOFTSIGN: return 1.0 / ((1.0 + fabs(v)) * (1.0 + fabs(v)));
        case UNARY_RELU: return v > 0.0 ? 1.0 : 0.0;
        case UNARY_SIGMOID: return v * (1.0 - v);
        case UNARY_TANH: return 1.0 - v * v;
        case UNARY_SOFTRELU: return 1.0 - exp(-v);
        default: return 0.0;
    }
}

// out = f(x), f the member `code`.
KERNEL void unary_fwd(UnaryMap a) {
    FOR_EACH(t, a.n) a.out[t] = (float)unary_f(a.code, (double)a.x[t]);
}

// out = x * f'(at): the gradient x through the member `code`, its derivative taken at `at`.
KERNEL void unary_bwd(UnaryMap a) {
    FOR_EACH(t, a.n) a.out[t] = (float)((double)a.x[t] * unary_d(a.code, (double)a.at[t]));
}

// Activation's functions (ACT_*, written from the Rust enum), in single precision.
__device__ inline float activate(i64 kind, float x) {
    switch (kind) {
        case ACT_RELU: return fmaxf(x, 0.0f);
        case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
        case ACT_TANH: return tanhf(x);
        case ACT_SOFTRELU: return x > 20.0f ? x : log1pf(expf(x));
        case ACT_SOFTSIGN: default: return x / (1.0f + fabsf(x));
    }
}

// The derivative as a function of the activation's output y.
__device__ inline float activate_grad(i64 kind, float y) {
    switch (kind) {
        case ACT_RELU: return y > 0.0f ? 1.0f : 0.0f;
        case ACT_SIGMOID: return y * (1.0f - y);
        case ACT_TANH: return 1.0f - y * y;
        case ACT_SOFTRELU: return 1.0f - expf(-y);
        case ACT_SOFTSIGN: default: return (1.0f - fabsf(y)) * (1.0f - fabsf(y));
    }
}

// out = act(x), act = code.
KERNEL void act_fwd(UnaryMap a) {
    FOR_EACH(t, a.n) a.out[t] = activate(a.code, a.x[t]);
}

// out = x (the output's gradient) * act'(at = the output).
KERNEL void act_bwd(UnaryMap a) {
    FOR_EACH(t, a.n) a.out[t] = a.x[t] * activate_grad(a.code, a.at[t]);
}
