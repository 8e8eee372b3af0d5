// The fused RNN's per-step gate math, forward and backward.

// Fused RNN (ops/rnn.rs): one step of one layer in one direction, one index per (sample n,
// unit j); n = N*H, hidden = H, mode 0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru. Gates are G*H
// wide per sample (G = 1, 1, 4, 3; LSTM i f g o, GRU r z n); the extra values ew wide (LSTM: the
// new cell and its tanh, 2H; GRU: the candidate's hidden part, H; else none).
__device__ inline float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline i64 rnn_gates(i64 mode) { return mode == 2 ? 4 : (mode == 3 ? 3 : 1); }
__device__ inline i64 rnn_extra(i64 mode, i64 h) { return mode == 2 ? 2 * h : (mode == 3 ? h : 0); }

// Forward: gates, the step's gates (N x GH; the input projection in, the activated gates out),
// hp the hidden projection (N x GH, no bias), bx and bh the input and hidden biases (GH), the
// state (rows state_stride apart), updated, the cell (N x H, LSTM), updated, the step's extra
// values (N x ew), the step's output (rows out_stride apart). With per-sample lengths (lens,
// else null), a sample whose sequence ended before the step's time outputs 0 and keeps its
// state.
KERNEL void rnn_step_fwd(RnnStepFwd a) {
    i64 hs = a.hidden.n, mode = a.mode;
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs);
    const i64* lens = a.lens;
    FOR_EACH(t, a.n) {
        i64 j, n = split(a.hidden, t, &j);
        if (lens && a.time >= lens[n]) {
            a.out[n * a.out_stride + j] = 0.0f;
            continue;
        }
        float* g = a.gates + n * gh;
        const float* hp = a.hp + n * gh;
        float* h = a.state + n * a.state_stride + j;
#define RNN_PRE(k) ((g[(k) * hs + j] + a.bx[(k) * hs + j]) + (hp[(k) * hs + j] + a.bh[(k) * hs + j]))
        if (mode == 2) {
            float i = rnn_sigmoid(RNN_PRE(0)), f = rnn_sigmoid(RNN_PRE(1));
            float gg = tanhf(RNN_PRE(2)), o = rnn_sigmoid(RNN_PRE(3));
            float* c = a.cell + n * hs + j;
            float cn = f * *c + i * gg, tc = tanhf(cn);
            *c = cn;
            *h = o * tc;
            g[j] = i; g[hs + j] = f; g[2 * hs + j] = gg; g[3 * hs + j] = o;
            a.extra[n * ew + j] = cn;
            a.extra[n * ew + hs + j] = tc;
        } else if (mode == 3) {
            float r = rnn_sigmoid(RNN_PRE(0)), z = rnn_sigmoid(RNN_PRE(1));
            float hn = hp[2 * hs + j] + a.bh[2 * hs + j];
            float cand = tanhf((g[2 * hs + j] + a.bx[2 * hs + j]) + r * hn);
            *h = (1.0f - z) * cand + z * *h;
            g[j] = r; g[hs + j] = z; g[2 * hs + j] = cand;
            a.extra[n * ew + j] = hn;
        } else {
            float s = RNN_PRE(0);
            float y = mode == 1 ? tanhf(s) : (s > 0.0f ? s : 0.0f);
            *h = y;
            g[j] = y;
        }
#undef RNN_PRE
        a.out[n * a.out_stride + j] = *h;
    }
}

// Backward: dgates the step's gate gradients (N x 2GH: the input projection's, then the hidden
// projection's, which differ only in GRU's candidate), gates the step's gates, extra its extra
// values, dh the carried state gradient (N x H) in, its part that bypasses the hidden
// projection (GRU: z dh, else 0) out, dc the carried cell gradient (N x H, LSTM), updated, dy
// the step's output gradient (rows dy_stride apart), h_prev the state after the step before in
// the direction's order (rows h_stride apart; null at the direction's first step), c_prev that
// step's cell (rows c_stride apart), h0 and c0 the initial state and cell (N x H), read where a
// sample's sequence starts at this step, whose hidden-projection gradient rows also go to
// dgates_first (N x GH, for the weight gradient against the initial state); lens the
// per-sample lengths (null: every sequence whole). A sample whose sequence ended before this
// step gets zero gate gradients and carries its state's gradients unchanged.
KERNEL void rnn_step_bwd(RnnStepBwd a) {
    i64 hs = a.hidden.n, mode = a.mode, time = a.time;
    i64 gh = rnn_gates(mode) * hs, ew = rnn_extra(mode, hs), gates = rnn_gates(mode);
    const i64* lens = a.lens;
    FOR_EACH(t, a.n) {
        i64 j, n = split(a.hidden, t, &j);
        float* dgx = a.dgates + n * 2 * gh;
        float* dgh = dgx + gh;
        i64 len = lens ? lens[n] : a.steps;
        if (time >= len) {
            for (i64 k = 0; k < gates; k++) dgx[k * hs + j] = dgh[k * hs + j] = 0.0f;
            continue;
        }
        // The state this sample's step started from: the step before it, or its initial state.
        int first = a.dir == 0 ? time == 0 : time + 1 >= len;
        const float* g = a.gates + n * gh;
        float* dhp = a.dh + n * hs + j;
        float dh = *dhp + a.dy[n * a.dy_stride + j];
        if (mode == 2) {
            float i = g[j], f = g[hs + j], gg = g[2 * hs + j], o = g[3 * hs + j];
            float tc = a.extra[n * ew + hs + j];
            float* dc = a.dc + n * hs + j;
            const float* c_prev = first ? a.c0 + n * hs : a.c_prev + n * a.c_stride;
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
            const float* h_prev = first ? a.h0 + n * hs : a.h_prev + n * a.h_stride;
            float dn = dh * (1.0f - z) * (1.0f - cand * cand);
            float dz = dh * (h_prev[j] - cand) * z * (1.0f - z);
            float dr = dn * a.extra[n * ew + j] * r * (1.0f - r);
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
            for (i64 k = 0; k < gates; k++) a.dgates_first[n * gh + k * hs + j] = dgh[k * hs + j];
        }
    }
}
