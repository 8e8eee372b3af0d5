// The fused RNN's per-step gate math, forward and backward.

// Fused RNN (ops/rnn.rs): one step of one layer in one direction, one index per (sample n,
// unit j); i0 = N*H, i1 = H, i2 = mode (0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru). Gates are G*H
// wide per sample (G = 1, 1, 4, 3; LSTM i f g o, GRU r z n); the extra values ew wide (LSTM: the
// new cell and its tanh, 2H; GRU: the candidate's hidden part, H; else none).
__device__ inline float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline i64 rnn_gates(i64 mode) { return mode == 2 ? 4 : (mode == 3 ? 3 : 1); }
__device__ inline i64 rnn_extra(i64 mode, i64 h) { return mode == 2 ? 2 * h : (mode == 3 ? h : 0); }

// Forward: p0 the step's gates (N x GH; the input projection in, the activated gates out), p1
// the hidden projection (N x GH, no bias), p2 and p3 the input and hidden biases (GH), p4 the
// state (rows i3 apart), updated, p5 the cell (N x H, LSTM), updated, p6 the step's extra values
// (N x ew), p7 the step's output (rows i4 apart). With per-sample lengths (p8, i64, else null),
// a sample whose sequence ended before the step's time i5 outputs 0 and keeps its state.
KERNEL void rnn_step_fwd(KArgs a) {
    i64 hs = a.i[1], mode = a.i[2];
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs);
    const i64* lens = (const i64*)a.p[8];
    FOR_EACH(t, a.i[0]) {
        i64 j, n = split(a, 1, t, &j);
        if (lens && a.i[5] >= lens[n]) {
            a.p[7][n * a.i[4] + j] = 0.0f;
            continue;
        }
        float* g = a.p[0] + n * gh;
        const float* hp = a.p[1] + n * gh;
        float* h = a.p[4] + n * a.i[3] + j;
#define RNN_PRE(k) ((g[(k) * hs + j] + a.p[2][(k) * hs + j]) + (hp[(k) * hs + j] + a.p[3][(k) * hs + j]))
        if (mode == 2) {
            float i = rnn_sigmoid(RNN_PRE(0)), f = rnn_sigmoid(RNN_PRE(1));
            float gg = tanhf(RNN_PRE(2)), o = rnn_sigmoid(RNN_PRE(3));
            float* c = a.p[5] + n * hs + j;
            float cn = f * *c + i * gg, tc = tanhf(cn);
            *c = cn;
            *h = o * tc;
            g[j] = i; g[hs + j] = f; g[2 * hs + j] = gg; g[3 * hs + j] = o;
            a.p[6][n * ew + j] = cn;
            a.p[6][n * ew + hs + j] = tc;
        } else if (mode == 3) {
            float r = rnn_sigmoid(RNN_PRE(0)), z = rnn_sigmoid(RNN_PRE(1));
            float hn = hp[2 * hs + j] + a.p[3][2 * hs + j];
            float cand = tanhf((g[2 * hs + j] + a.p[2][2 * hs + j]) + r * hn);
            *h = (1.0f - z) * cand + z * *h;
            g[j] = r; g[hs + j] = z; g[2 * hs + j] = cand;
            a.p[6][n * ew + j] = hn;
        } else {
            float s = RNN_PRE(0);
            float y = mode == 1 ? tanhf(s) : (s > 0.0f ? s : 0.0f);
            *h = y;
            g[j] = y;
        }
#undef RNN_PRE
        a.p[7][n * a.i[4] + j] = *h;
    }
}

// Backward: p0 the step's gate gradients (N x 2GH: the input projection's, then the hidden
// projection's, which differ only in GRU's candidate), p1 the step's gates, p2 the step's extra
// values, p3 the carried state gradient (N x H) in, its part that bypasses the hidden
// projection (GRU: z dh, else 0) out, p4 the carried cell gradient (N x H, LSTM), updated, p5
// the step's output gradient (rows i3 apart), p6 the state after the step before in the
// direction's order (rows i4 apart; null at the direction's first step), p7 that step's cell
// (rows i5 apart), p9 and p10 the initial state and cell (N x H), read where a sample's sequence
// starts at this step, whose hidden-projection gradient rows also go to p11 (N x GH, for the
// weight gradient against the initial state). i6 is the step's time, i7 the direction, i8 the
// steps; p8 the per-sample lengths (i64, or null: every sequence whole). A sample whose sequence
// ended before this step gets zero gate gradients and carries its state's gradients unchanged.
KERNEL void rnn_step_bwd(KArgs a) {
    i64 hs = a.i[1], mode = a.i[2], time = a.i[6];
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs), gates = rnn_gates(mode);
    const i64* lens = (const i64*)a.p[8];
    FOR_EACH(t, a.i[0]) {
        i64 j, n = split(a, 1, t, &j);
        float* dgx = a.p[0] + n * 2 * gh;
        float* dgh = dgx + gh;
        i64 len = lens ? lens[n] : a.i[8];
        if (time >= len) {
            for (i64 k = 0; k < gates; k++) dgx[k * hs + j] = dgh[k * hs + j] = 0.0f;
            continue;
        }
        // The state this sample's step started from: the step before it, or its initial state.
        int first = a.i[7] == 0 ? time == 0 : time + 1 >= len;
        const float* g = a.p[1] + n * gh;
        float* dhp = a.p[3] + n * hs + j;
        float dh = *dhp + a.p[5][n * a.i[3] + j];
        if (mode == 2) {
            float i = g[j], f = g[hs + j], gg = g[2 * hs + j], o = g[3 * hs + j];
            float tc = a.p[2][n * ew + hs + j];
            float* dc = a.p[4] + n * hs + j;
            const float* c_prev = first ? a.p[10] + n * hs : a.p[7] + n * a.i[5];
            float dct = *dc + dh * o * (1.0f - tc * tc);
            float ds[4] = {dct * gg * i * (1.0f - i),
                           dct * c_prev[j] * f * (1.0f - f),
                           dct * i * (1.0f - gg * gg), dh * tc * o * (1.0f - o)};
            for (int k = 0; k < 4; k++) {
                dgx[k * hs + j] = ds[k];
                dgh[k * hs + j] = ds[k];
            }
            *dc = dct * f;
            *dhp = 0.0f;
        } else if (mode == 3) {
            float r = g[j], z = g[hs + j], cand = g[2 * hs + j];
            const float* h_prev = first ? a.p[9] + n * hs : a.p[6] + n * a.i[4];
            float dn = dh * (1.0f - z) * (1.0f - cand * cand);
            float dz = dh * (h_prev[j] - cand) * z * (1.0f - z);
            float dr = dn * a.p[2][n * ew + j] * r * (1.0f - r);
            dgx[j] = dr; dgx[hs + j] = dz; dgx[2 * hs + j] = dn;
            dgh[j] = dr; dgh[hs + j] = dz; dgh[2 * hs + j] = dn * r;
            *dhp = dh * z;
        } else {
            float y = g[j];
            float d = mode == 1 ? dh * (1.0f - y * y) : (y > 0.0f ? dh : 0.0f);
            dgx[j] = d;
            dgh[j] = d;
            *dhp = 0.0f;
        }
        if (first) {
            for (i64 k = 0; k < gates; k++) a.p[11][n * gh + k * hs + j] = dgh[k * hs + j];
        }
    }
}
