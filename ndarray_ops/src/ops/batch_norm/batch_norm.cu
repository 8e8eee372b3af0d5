// BatchNorm forward and backward.

// BatchNorm forward, per channel: mean and var out (the batch's under batch statistics, else
// the moving ones), the moving mean and var updated with momentum under batch statistics when
// update_moving says so (not in a node recomputed during backward), scale out for bn_apply;
// under batch statistics sums holds chan_partial's two planes of sums of x and x^2 (`parts`
// partial sums per channel) over `count` elements per channel.
KERNEL void bn_prepare(BnPrepare a) {
    FOR_EACH(c, a.channels) {
        float mean, var;
        if (a.batch_stats) {
            double n = a.count;
            double m = chan_sum(a.sums, c, a.parts) / n;
            double sq = chan_sum(a.sums, a.channels + c, a.parts) / n;
            mean = (float)m;
            var = (float)fmax(sq - m * m, 0.0);
            if (a.update_moving) {
                float mom = a.momentum;
                a.moving_mean[c] = a.moving_mean[c] * mom + mean * (1.0f - mom);
                a.moving_var[c] = a.moving_var[c] * mom + var * (1.0f - mom);
            }
        } else {
            mean = a.moving_mean[c];
            var = a.moving_var[c];
        }
        a.mean[c] = mean;
        a.var[c] = var;
        float g = a.fix_gamma ? 1.0f : a.gamma[c];
        a.scale[c] = g / sqrtf(var + a.eps);
    }
}

// p0[t] = (p1[t] - p4[c]) * p2[c] + p3[c] (x, mean, scale, beta), c = (t / i1) % i2. Centring
// first keeps data far from zero accurate, where x * scale + (beta - mean * scale) cancels.
KERNEL void bn_apply(BnApply a) {
    FOR_EACH(t, a.n) {
        i64 c = channel_of(a.inner, a.channels, t);
        a.out[t] = (a.x[t] - a.mean[c]) * a.scale[c] + a.beta[c];
    }
}

// BatchNorm backward, per channel: the gamma and beta gradients; sums holds chan_partial's two
// planes of sums of dy and dy * x (`parts` partial sums per channel), so that
// sum(dy * (x - mean)) = sum(dy * x) - mean * sum(dy). Writes bn_bwd_apply's coefficients ka,
// kb, kc to coef (three runs of `channels` floats); `count` elements per channel.
KERNEL void bn_bwd_prepare(BnBwdPrepare a) {
    i64 channels = a.channels;
    FOR_EACH(c, channels) {
        double dy = chan_sum(a.sums, c, a.parts);
        double dy_x = chan_sum(a.sums, channels + c, a.parts);
        float dy_centred = (float)(dy_x - (double)a.mean[c] * dy);
        float inv = 1.0f / sqrtf(a.var[c] + a.eps);
        float dy_xhat = dy_centred * inv;
        float g = a.fix_gamma ? 1.0f : a.gamma[c];
        float* k = a.coef;
        k[c] = g * inv;
        k[channels + c] = a.batch_stats ? (float)(dy / a.count) : 0.0f;
        k[2 * channels + c] = a.batch_stats ? dy_xhat * inv / a.count : 0.0f;
        a.dgamma[c] = a.fix_gamma ? 0.0f : dy_xhat;
        a.dbeta[c] = (float)dy;
    }
}

// dx = ka[c] * (dy - kb[c] - (x - mean[c]) * kc[c]), c = (t / inner) % channels.
KERNEL void bn_bwd_apply(BnBwdApply a) {
    FOR_EACH(t, a.n) {
        i64 c = channel_of(a.inner, a.channels, t);
        a.dx[t] = a.ka[c] * (a.dy[t] - a.kb[c] - (a.x[t] - a.mean[c]) * a.kc[c]);
    }
}
