// Host emulation of the CUDA token recurrence (src/cuda/recurrent.cu, the plan's path for K < 16), checked against
// the fp64 oracle through the accuracy harness (src/check/check.c) at MATH §10's thresholds, on a machine without a
// GPU. It runs recurrent.cu's algorithm as the kernels do: the per-column arithmetic is recurrent_step.h itself (the
// kernels' code), the blocks' structure is copied here: one column per emulated thread, the forward's checkpoints
// every BT tokens in the saved buffer, the backward's chunks in reverse with their token states recomputed into a
// workspace laid out as the kernel's [N·HV][BT][K][V], every per-token column sum reduced per 32-lane warp in the
// shuffle tree's order (lane l += lane l + off, off = 16 … 1) into per-warp partials, flushed every RS tokens and
// summed in warp order by rec_finalize, and the grouped value heads' q̄, k̄ partials summed per group in order.
// It checks the math and the indexing of the algorithm, not the kernels' own loads and stores (the GPU tests do).
//   make emu-recurrent        (builds the CPU library, then this; prints one line per case)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "check/check.h"
#include "dtype.h"
}
#include "cuda/recurrent_step.h"

using namespace rewy_cuda;

namespace {

struct Shape {
    int op, N, T, H, HV, K, V, BT, G, svf, NC;
    float scale;
    rewy_dtype dt;
    const int32_t *cu;
    std::vector<int> coff;
};

Shape shape_of(const rewy_config *c) {
    Shape s;
    s.op = c->op; s.T = c->T; s.H = c->H; s.HV = c->HV ? c->HV : c->H; s.K = c->K; s.V = c->V;
    s.BT = c->chunk_size ? c->chunk_size : 64; s.G = s.HV / s.H; s.svf = c->state_v_first;
    s.scale = c->scale != 0.f ? c->scale : 1.f / sqrtf((float)c->K);
    s.dt = c->dtype;
    s.cu = c->cu_seqlens; // host memory here
    s.N = s.cu ? c->num_seqs : c->B;
    s.coff.assign(s.N + 1, 0);
    for (int n = 0; n < s.N; n++) {
        const int len = s.cu ? s.cu[n + 1] - s.cu[n] : s.T;
        s.coff[n + 1] = s.coff[n] + (len + s.BT - 1) / s.BT; // chunk_plan's offsets
    }
    s.NC = s.coff[s.N];
    return s;
}
void seq_of(const Shape &s, int n, size_t &bos, int &len) {
    bos = s.cu ? (size_t)s.cu[n] : (size_t)n * s.T;
    len = s.cu ? s.cu[n + 1] - s.cu[n] : s.T;
}
size_t state_idx(const Shape &s, int n, int hv, int i, int j) {
    const size_t base = ((size_t)n * s.HV + hv) * (size_t)s.K * s.V;
    return base + (s.svf ? (size_t)j * s.K + i : (size_t)i * s.V + j);
}

constexpr int KMAX = 16; // the emulation covers the plan's range, K < 16

struct Ptrs { const void *q, *k, *v, *beta, *b, *w; const float *g; };

// recurrent.cu's rec_load
void load(const Shape &s, const Ptrs &p, size_t tok, int hv, int j, bool active, RecIn<KMAX> &in) {
    const size_t qk = (tok * s.H + hv / s.G) * s.K, th = tok * s.HV + hv;
    const bool gdn2 = s.op == REWY_OP_GDN2;
    const float beta = gdn2 ? 0.f : rewy_load(p.beta, s.dt, th);
    const float gs = s.op == REWY_OP_GDN ? p.g[th] : 0.f;
    for (int i = 0; i < KMAX; i++)
        if (i < s.K) {
            const float ki = rewy_load(p.k, s.dt, qk + i);
            const float gi = s.op == REWY_OP_KDA || gdn2 ? p.g[th * s.K + i] : gs;
            const float bi = gdn2 ? rewy_load(p.b, s.dt, th * s.K + i) : beta;
            in.q[i] = s.scale * rewy_load(p.q, s.dt, qk + i);
            in.k[i] = ki;
            in.a[i] = expf(rewy_gate_floor(gi));
            in.e[i] = bi * ki;
        }
    in.v = active ? rewy_load(p.v, s.dt, th * s.V + j) : 0.f;
    in.w = !active ? 0.f : gdn2 ? rewy_load(p.w, s.dt, th * s.V + j) : beta;
}

// the saved buffer: 256 B (the kernels' chunk table and offsets) | checkpoints fp32 [NC][HV][K][V]
float *ckpt_of(const void *saved) { return (float *)((char *)saved + 256); }
size_t saved_bytes(const Shape &s) { return 256 + sizeof(float) * (size_t)s.NC * s.HV * s.K * s.V; }

rewy_status emu_sizes(void *, const rewy_config *c, size_t *saved, size_t *fwd, size_t *bwd) {
    if (c->K >= REC_K_LIMIT) return REWY_ERR_UNSUPPORTED_DIM;
    const Shape s = shape_of(c);
    *saved = saved_bytes(s);
    *fwd = 256;
    const size_t rows = (size_t)c->B * c->T;
    *bwd = sizeof(float) * ((size_t)s.N * s.HV * s.BT * s.K * s.V + (s.G > 1 ? 2 * rows * s.HV * s.K : 0));
    return REWY_OK;
}

rewy_status emu_forward(void *, const rewy_fwd_params *a) {
    const Shape s = shape_of(&a->cfg);
    const Ptrs p = {a->q, a->k, a->v, a->beta, a->b, a->w, a->g};
    float *ckpt = ckpt_of(a->saved);
    const size_t KV = (size_t)s.K * s.V;
    for (int n = 0; n < s.N; n++)
        for (int hv = 0; hv < s.HV; hv++)
            for (int j = 0; j < s.V; j++) { // the block's threads: independent columns
                size_t bos;
                int len;
                seq_of(s, n, bos, len);
                float st[KMAX];
                for (int i = 0; i < KMAX; i++) st[i] = i < s.K && a->h0 ? a->h0[state_idx(s, n, hv, i, j)] : 0.f;
                for (int t = 0; t < len; t++) {
                    if (t % s.BT == 0) {
                        float *ck = ckpt + ((size_t)(s.coff[n] + t / s.BT) * s.HV + hv) * KV + j;
                        for (int i = 0; i < s.K; i++) ck[(size_t)i * s.V] = st[i];
                    }
                    const size_t tok = bos + t;
                    RecIn<KMAX> in;
                    load(s, p, tok, hv, j, true, in);
                    const float o = rec_fwd_step<KMAX>(s.K, st, in);
                    rewy_store(a->o, s.dt, (tok * s.HV + hv) * s.V + j, o);
                }
                if (a->ht)
                    for (int i = 0; i < s.K; i++) a->ht[state_idx(s, n, hv, i, j)] = st[i];
            }
    return REWY_OK;
}

// recurrent.cu's RecIO on host arrays
struct HostIO {
    const Shape &s;
    const rewy_bwd_params *a;
    float *accq, *acck;
    size_t qk, th;
    float k(int i) const { return rewy_load(a->k, s.dt, qk + i); }
    float b(int i) const {
        return s.op == REWY_OP_GDN2 ? rewy_load(a->b, s.dt, th * s.K + i) : rewy_load(a->beta, s.dt, th);
    }
    float g(int i) const { return s.op == REWY_OP_GDN ? a->g[th] : a->g[th * s.K + i]; }
    void dq(int i, float x) const {
        if (accq) accq[th * s.K + i] = x;
        else rewy_store(a->dq, s.dt, qk + i, x);
    }
    void dk(int i, float x) const {
        if (acck) acck[th * s.K + i] = x;
        else rewy_store(a->dk, s.dt, qk + i, x);
    }
    void db(int i, float x) const { rewy_store(a->db, s.dt, th * s.K + i, x); }
    void dg(int i, float x) const {
        if (s.op == REWY_OP_GDN) a->dg[th] = x;
        else a->dg[th * s.K + i] = x;
    }
    void dbeta(float x) const { rewy_store(a->dbeta, s.dt, th, x); }
};

rewy_status emu_backward(void *, const rewy_bwd_params *a) {
    const Shape s = shape_of(&a->cfg);
    const Ptrs p = {a->q, a->k, a->v, a->beta, a->b, a->w, a->g};
    const float *ckpt = ckpt_of(a->saved);
    const size_t KV = (size_t)s.K * s.V, rows = (size_t)a->cfg.B * a->cfg.T;
    float *states_all = (float *)a->workspace;
    float *accq = nullptr, *acck = nullptr;
    if (s.G > 1) {
        accq = states_all + (size_t)s.N * s.HV * s.BT * KV;
        acck = accq + rows * s.HV * s.K;
    }
    const int nw = (s.V + 31) / 32, nthr = 32 * nw, nq = RecSlots{s.K}.count();
    int RS = 8192 / (nw * nq); // recurrent.cu's rec_backward
    RS = RS < 1 ? 1 : RS > 64 ? 64 : RS;
    std::vector<float> part((size_t)RS * nw * nq), vals((size_t)nq * nthr);
    for (int n = 0; n < s.N; n++)
        for (int hv = 0; hv < s.HV; hv++) {
            size_t bos;
            int len;
            seq_of(s, n, bos, len);
            std::vector<float> ds((size_t)nthr * KMAX, 0.f); // each thread's S̄[:, j]
            for (int j = 0; j < s.V; j++)
                for (int i = 0; i < s.K; i++) ds[(size_t)j * KMAX + i] = a->dht ? a->dht[state_idx(s, n, hv, i, j)] : 0.f;
            float *states = states_all + ((size_t)n * s.HV + hv) * (size_t)s.BT * KV;
            const int nch = (len + s.BT - 1) / s.BT;
            int nbuf = 0;
            size_t tok_top = 0;
            for (int c = nch - 1; c >= 0; c--) {
                const int t0 = c * s.BT, nc = std::min(s.BT, len - t0);
                for (int j = 0; j < s.V; j++) {
                    const float *ck = ckpt + ((size_t)(s.coff[n] + c) * s.HV + hv) * KV + j;
                    float st[KMAX] = {0};
                    for (int i = 0; i < s.K; i++) st[i] = ck[(size_t)i * s.V];
                    for (int tt = 0; tt < nc; tt++) {
                        for (int i = 0; i < s.K; i++) states[(size_t)tt * KV + (size_t)i * s.V + j] = st[i];
                        if (tt + 1 < nc) {
                            RecIn<KMAX> in;
                            load(s, p, bos + t0 + tt, hv, j, true, in);
                            rec_fwd_step<KMAX>(s.K, st, in);
                        }
                    }
                }
                for (int tt = nc - 1; tt >= 0; tt--) {
                    const size_t tok = bos + t0 + tt, th = tok * s.HV + hv;
                    if (nbuf == 0) tok_top = tok;
                    for (int j = 0; j < nthr; j++) {
                        const bool active = j < s.V;
                        RecIn<KMAX> in;
                        load(s, p, tok, hv, j, active, in);
                        float sp[KMAX];
                        for (int i = 0; i < KMAX; i++) sp[i] = i < s.K && active ? states[(size_t)tt * KV + (size_t)i * s.V + j] : 0.f;
                        const float dO = active ? rewy_load(a->do_, s.dt, th * s.V + j) : 0.f;
                        auto red = [&](int q, float x) { vals[(size_t)q * nthr + j] = active ? x : 0.f; };
                        float dv, dw;
                        rec_bwd_step<KMAX>(s.K, sp, &ds[(size_t)j * KMAX], in, dO, dv, dw, red);
                        if (active) {
                            rewy_store(a->dv, s.dt, th * s.V + j, dv);
                            if (s.op == REWY_OP_GDN2) rewy_store(a->dw, s.dt, th * s.V + j, dw);
                        }
                    }
                    // the warps' shuffle trees: lane l adds lane l + off, off = 16, 8, 4, 2, 1; lane 0 stores
                    for (int w = 0; w < nw; w++)
                        for (int q = 0; q < nq; q++) {
                            float x[32];
                            for (int l = 0; l < 32; l++) x[l] = vals[(size_t)q * nthr + 32 * w + l];
                            for (int off = 16; off > 0; off >>= 1)
                                for (int l = 0; l < off; l++) x[l] = x[l] + x[l + off];
                            part[((size_t)nbuf * nw + w) * nq + q] = x[0];
                        }
                    if (++nbuf == RS || (c == 0 && tt == 0)) {
                        for (int x = 0; x < nbuf; x++) {
                            const size_t tx = tok_top - (size_t)x;
                            const HostIO io = {s, a, accq, acck, (tx * s.H + hv / s.G) * s.K, tx * s.HV + hv};
                            rec_finalize(s.K, s.op, nw, &part[(size_t)x * nw * nq], s.scale, io);
                        }
                        nbuf = 0;
                    }
                }
            }
            if (a->dh0)
                for (int j = 0; j < s.V; j++)
                    for (int i = 0; i < s.K; i++) a->dh0[state_idx(s, n, hv, i, j)] = ds[(size_t)j * KMAX + i];
        }
    if (s.G > 1) // rec_group_sum_kernel
        for (size_t x = 0; x < rows * s.H * s.K; x++) {
            const size_t i = x % s.K, th = x / s.K;
            float sq = accq[th * s.G * s.K + i], sk = acck[th * s.G * s.K + i];
            for (int gi = 1; gi < s.G; gi++) {
                sq += accq[(th * s.G + gi) * s.K + i];
                sk += acck[(th * s.G + gi) * s.K + i];
            }
            rewy_store(a->dq, s.dt, x, sq);
            rewy_store(a->dk, s.dt, x, sk);
        }
    return REWY_OK;
}

void *h_alloc(void *, size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64 + 64); }
void h_free(void *, void *p) { free(p); }
int h_copy(void *, void *dst, const void *src, size_t n) { memcpy(dst, src, n); return 0; }

rewy_case make(rewy_op op, rewy_dtype dt, int K, int V) {
    rewy_case c;
    memset(&c, 0, sizeof c);
    c.op = op; c.backend = REWY_BACKEND_CUDA; c.dtype = dt;
    c.B = 2; c.T = 150; c.H = 2; c.HV = 2; c.K = K; c.V = V; c.chunk_size = 64;
    c.use_h0 = 1; c.use_dht = 1;
    return c;
}

} // namespace

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const rewy_check_mem mem = {h_alloc, h_free, h_copy, h_copy, nullptr, emu_sizes, emu_forward, emu_backward};
    std::vector<rewy_case> cases;
    static const int seqs[5] = {1, 15, 64, 65, 130};
    const rewy_dtype dts[3] = {REWY_BF16, REWY_F16, REWY_F32};
    for (int op = 0; op < 4; op++) {
        static const int Ks[] = {1, 2, 3, 4, 8, 15};
        for (int kk = 0; kk < (quick ? 2 : 6); kk++)
            for (int d = 0; d < 3; d++) {
                rewy_case c = make((rewy_op)op, dts[d], Ks[kk], kk % 2 ? 37 : 64); // V odd on every other K
                cases.push_back(c);
            }
        rewy_case c;
        // varlen with grouped value heads, chunk 16, resets
        c = make((rewy_op)op, REWY_BF16, 3, 33);
        c.num_seqs = 5; c.B = 1; c.T = 0;
        for (int i = 0; i < 5; i++) { c.seqlens[i] = seqs[i]; c.T += seqs[i]; }
        c.H = 1; c.HV = 4; c.chunk_size = 16;
        if (op) c.gates = REWY_GATES_RESET;
        cases.push_back(c);
        // −inf gates, state_v_first, no h0, ht not asked, chunk 32, GVA 2
        c = make((rewy_op)op, REWY_F32, 4, 100);
        c.state_v_first = 1; c.use_h0 = 0; c.no_ht = 1; c.chunk_size = 32; c.HV = 4;
        if (op) c.gates = REWY_GATES_NEG_INF;
        cases.push_back(c);
        // strong and huge gates, zero betas, V = 256 (8 warps), scale 1e-30 and 1e30
        c = make((rewy_op)op, REWY_BF16, 2, 256);
        c.T = 70;
        if (op) c.gates = REWY_GATES_STRONG;
        c.betas = REWY_BETAS_ZERO;
        cases.push_back(c);
        c = make((rewy_op)op, REWY_F32, 5, 1);
        c.T = 200;
        if (op) c.gates = REWY_GATES_HUGE;
        c.scale = 1e30f;
        cases.push_back(c);
        c = make((rewy_op)op, REWY_F32, 7, 20);
        if (op) c.gates = REWY_GATES_MIXED;
        c.scale = 1e-30f;
        cases.push_back(c);
        c = make((rewy_op)op, REWY_F16, 9, 48);
        c.use_h0 = 0; c.use_dht = 0; c.policy = REWY_POLICY_A;
        cases.push_back(c);
    }
    int failed = 0;
    double worst = 0;
    for (size_t ci = 0; ci < cases.size(); ci++) {
        rewy_case c = cases[ci];
        c.seed = 9000 + ci;
        rewy_check_result r;
        char desc[256];
        rewy_check_describe(&c, desc, sizeof desc);
        if (rewy_check_run(&c, &mem, &r)) { printf("%s: harness error %s\n", desc, r.msg); failed++; continue; }
        double w = 0;
        char line[512] = "";
        for (int q = 0; q < REWY_Q_COUNT; q++) {
            if (!r.applies[q]) continue;
            const rewy_check_err &e = r.err[q <= REWY_Q_HT ? REWY_RUN_FWD : REWY_RUN_REWY][q];
            // as the harness judges it: relative error against MATH §10's bound, or the absolute bound where ‖ref‖ is tiny
            w = std::max(w, e.ref_norm <= REWY_CHECK_TINY_NORM ? e.max_abs / REWY_CHECK_TINY_ABS : e.rel / r.tol[q]);
            char part[48];
            snprintf(part, sizeof part, " %s %.1e", rewy_check_qty_name((rewy_qty)q), e.rel);
            strncat(line, part, sizeof line - strlen(line) - 1);
        }
        worst = std::max(worst, w);
        printf("%-58s %s  worst err/tol %.3f%s\n", desc, line, w, r.pass ? "" : "  FAIL");
        if (!r.pass) {
            failed++;
            rewy_check_print_table(stdout, &c, &r);
        }
    }
    // a NaN log gate propagates (tests/cases.h, nan_gate_checks): token 70 of row 0, head 0, in a 130-token sequence
    for (int op = 1; op < 4; op++) {
        rewy_case c = make((rewy_op)op, REWY_BF16, 4, 40);
        c.T = 130; c.seed = 77;
        rewy_check_nan r;
        char desc[256];
        rewy_check_describe(&c, desc, sizeof desc);
        const int bad = rewy_check_nan_gate(&c, &mem, 70, &r) || r.fwd_status || r.bwd_status || r.o_before ||
                        r.o_chunk_before || r.o_from_finite || r.ht_nonfinite != r.state_size || !r.dh0_nonfinite ||
                        r.others;
        printf("NaN gate, %s: o before %ld, in its chunk before it %ld, finite from it %ld; ht %ld/%ld, dh0 %ld "
               "non-finite; others %ld%s\n", desc, r.o_before, r.o_chunk_before, r.o_from_finite, r.ht_nonfinite,
               r.state_size, r.dh0_nonfinite, r.others, bad ? "  FAIL" : "");
        failed += bad;
    }
    printf("emu_recurrent: %zu cases, %d failed; worst error / MATH §10 tolerance %.3f\n", cases.size(), failed, worst);
    return failed ? 1 : 0;
}
