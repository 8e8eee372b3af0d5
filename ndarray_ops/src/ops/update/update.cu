// The optimizer updates: SGD with and without momentum, and Adam.

__device__ inline float prepared_grad(float g, float w, const Sgd& a) {
    g *= a.rescale;
    if (a.clip > 0.0f) g = fminf(fmaxf(g, -a.clip), a.clip);
    return g + a.wd * w;
}

// sgd_update: out = w - lr * the prepared gradient.
KERNEL void sgd(Sgd a) {
    FOR_EACH(t, a.n) {
        float w = a.w[t];
        a.out[t] = w - a.lr * prepared_grad(a.grad[t], w, a);
    }
}

// sgd_mom_update: m = momentum * mom - lr * the prepared gradient; mom_out = m; out = w + m.
KERNEL void sgd_mom(Sgd a) {
    FOR_EACH(t, a.n) {
        float w = a.w[t];
        float m = a.momentum * a.mom[t] - a.lr * prepared_grad(a.grad[t], w, a);
        a.mom_out[t] = m;
        a.out[t] = w + m;
    }
}

// adam_update in double, MXNet's order: g = clip(rescale * grad + wd * w, clip), mean_out =
// beta1 mean + (1 - beta1) g, var_out = beta2 var + (1 - beta2) g^2, out = w - lr * mean_out /
// (sqrt(var_out) + epsilon).
KERNEL void adam(Adam a) {
    FOR_EACH(t, a.n) {
        double w = a.w[t];
        double g = (double)a.grad[t] * (double)a.rescale + (double)a.wd * w;
        double clip = a.clip;
        if (clip > 0.0) g = g < -clip ? -clip : (g > clip ? clip : g);
        double b1 = a.beta1, b2 = a.beta2;
        double mean = b1 * a.mean[t] + (1.0 - b1) * g;
        double var = b2 * a.var[t] + (1.0 - b2) * g * g;
        a.mean_out[t] = (float)mean;
        a.var_out[t] = (float)var;
        a.out[t] = (float)(w - (double)a.lr * mean / (sqrt(var) + (double)a.epsilon));
    }
}
