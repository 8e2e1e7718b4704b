/* cuda_backend.cu: the five entry points api.c calls for cfg.backend == REWY_BACKEND_CUDA.
 * Scalar-gate operators (DeltaNet, GDN) here; KDA and GDN2 go to vec_backend.cu.
 *
 * Forward:  chunk_plan → kkt_inverse (G, A, C_q) → state_scan (S_c, R, ht) → output (o)
 * Backward: [policy R: kkt_inverse (C_q) → state_scan (S_c, R)] → bwd_state_scan (S̄⁺, P or R̄, dh0)
 *           → pullback (dq, dk, dv, dβ, dg)
 * Every kernel runs on cfg.stream; nothing synchronizes the host; all scratch comes from the
 * caller's workspace or saved buffer, whose layouts are below (each region 256-B aligned).
 *
 * saved:   ChunkInfo[NC] | int coff[N+1] | GB fp32 [NC*HV][2][BT] (G, β per chunk) | A fp32 [NC*HV][BT][BT]
 *          policy A: + C_q fp32 [NC*HV][BT][BT] | S_c state_t [NC*HV][K][V] | R fp32 [NC*HV][BT][V]
 * fwd ws:  policy R: C_q, S_c, R (policy A keeps them in saved)
 * bwd ws:  policy R: C_q, S_c, R | S̄⁺ state_t [NC*HV][K][V] | P (or R̄) fp32 [NC*HV][BT][V]
 *          K > 128 or fp32: + W̄ fp32 [NC*HV][BT][Kp] (WY scratch) | GVA (HV > H): + q̄, k̄ accumulators fp32 2×[NC*H][BT][Kp]
 * NC = number of chunks: exact from cu_seqlens_host when given, else ⌈T/BT⌉ + num_seqs (varlen)
 * or B·⌈T/BT⌉. */
#include "cuda_backend.h"
#include "kernels.cuh"
#include "vec_kernels.cuh" /* KDA, GDN2 (vec_backend.cu) */
#define REWY_VEC_DISPATCH(cfg, call) do { if ((cfg)->op == REWY_OP_KDA || (cfg)->op == REWY_OP_GDN2) return call; } while (0)
#include <math.h>

using namespace rewy_cuda;

namespace {

struct Layout {
    int NC, N, HV, BT, Kp;
    size_t ctab, coff, G, A, Cq, Sc, R, saved;   /* saved offsets */
    size_t fCq, fSc, fR, fwd;                     /* fwd workspace */
    size_t bCq, bSc, bR, Sbar, PR, Wbar, acc, bwd; /* bwd workspace */
};

size_t al(size_t x) { return (x + 255) & ~(size_t)255; }

bool supported(const rewy_config *c) { return c->op == REWY_OP_DELTANET || c->op == REWY_OP_GDN; }

Layout plan(const rewy_config *c) {
    Layout L = {};
    const Geometry g = geometry(c);
    L.NC = g.NC; L.N = g.N; L.HV = g.HV; L.BT = g.BT; L.Kp = g.Kp;
    const size_t chh = (size_t)L.NC * L.HV, nn = (size_t)L.BT * L.BT;
    const size_t st = chh * c->K * c->V * sizeof(state_t), rv = chh * L.BT * c->V * sizeof(float);
    const bool polA = c->policy == REWY_POLICY_A;
    size_t o = 0;
    L.ctab = o; o += al(sizeof(ChunkInfo) * L.NC);
    L.coff = o; o += al(sizeof(int) * (L.N + 1));
    L.G = o; o += al(sizeof(float) * chh * 2 * L.BT);
    L.A = o; o += al(sizeof(float) * chh * nn);
    if (polA) {
        L.Cq = o; o += al(sizeof(float) * chh * nn);
        L.Sc = o; o += al(st);
        L.R = o; o += al(rv);
    }
    L.saved = o;
    o = 0;
    if (!polA) {
        L.fCq = o; o += al(sizeof(float) * chh * nn);
        L.fSc = o; o += al(st);
        L.fR = o; o += al(rv);
    }
    L.fwd = o > 256 ? o : 256; /* never 0: the API requires a workspace pointer */
    o = 0;
    if (!polA) {
        L.bCq = o; o += al(sizeof(float) * chh * nn);
        L.bSc = o; o += al(st);
        L.bR = o; o += al(rv);
    }
    L.Sbar = o; o += al(st);
    L.PR = o; o += al(rv);
    /* W̄ scratch of the WY pullback when it does not fit in shared memory. Sized whatever the
     * algorithm: a backward may switch bwd_algo against the same workspace size. */
    L.Wbar = o; if (!wbar_in_smem(L.Kp, c->dtype == REWY_F32 ? 4 : 2)) o += al(sizeof(float) * chh * L.BT * L.Kp);
    L.acc = o; if (L.HV > c->H) o += al(2 * sizeof(float) * (size_t)L.NC * c->H * L.BT * L.Kp);
    L.bwd = o;
    return L;
}

Prob make_prob(const rewy_config *c, const Layout &L, const void *saved) {
    Prob p;
    p.B = c->B; p.T = c->T; p.H = c->H; p.HV = L.HV; p.K = c->K; p.V = c->V; p.BT = L.BT;
    p.G = L.HV / c->H; p.N = L.N; p.NC = L.NC; p.Kp = L.Kp;
    p.gated = c->op == REWY_OP_GDN;
    p.svf = c->state_v_first != 0;
    p.scale = c->scale != 0.f ? c->scale : 1.f / sqrtf((float)c->K);
    p.ctab = (const ChunkInfo *)((const char *)saved + L.ctab);
    p.coff = (const int *)((const char *)saved + L.coff);
    return p;
}

template <class P> P *at(const void *base, size_t off) { return (P *)((char *)base + off); }


} // namespace

#define TRY(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return REWY_ERR_BACKEND; } while (0)

extern "C" size_t rewy_cuda_saved_size(const rewy_config *cfg) {
    REWY_VEC_DISPATCH(cfg, rewy_cuda_vec_saved_size(cfg));
    return supported(cfg) ? plan(cfg).saved : 0;
}
extern "C" size_t rewy_cuda_fwd_workspace_size(const rewy_config *cfg) {
    REWY_VEC_DISPATCH(cfg, rewy_cuda_vec_fwd_workspace_size(cfg));
    return supported(cfg) ? plan(cfg).fwd : 0;
}
extern "C" size_t rewy_cuda_bwd_workspace_size(const rewy_config *cfg) {
    REWY_VEC_DISPATCH(cfg, rewy_cuda_vec_bwd_workspace_size(cfg));
    return supported(cfg) ? plan(cfg).bwd : 0;
}

extern "C" rewy_status rewy_cuda_forward(const rewy_fwd_params *a) {
    const rewy_config *c = &a->cfg;
    REWY_VEC_DISPATCH(c, rewy_cuda_vec_forward(a));
    if (!supported(c)) return REWY_ERR_BACKEND;
    const Layout L = plan(c);
    const Prob p = make_prob(c, L, a->saved);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A;
    float *Gc = at<float>(a->saved, L.G);
    float *A = at<float>(a->saved, L.A);
    float *Cq = polA ? at<float>(a->saved, L.Cq) : at<float>(a->workspace, L.fCq);
    TRY(launch_chunk_plan(p, c->cu_seqlens, at<ChunkInfo>(a->saved, L.ctab), at<int>(a->saved, L.coff), s));
    TRY(launch_kkt_inverse(p, c->dtype, a->q, a->k, a->g, a->beta, Gc, A, Cq, s));
    state_t *Sc = polA ? at<state_t>(a->saved, L.Sc) : at<state_t>(a->workspace, L.fSc);
    float *R = polA ? at<float>(a->saved, L.R) : at<float>(a->workspace, L.fR);
    TRY(launch_state_scan(p, c->dtype, a->k, a->v, Gc, A, nullptr, a->h0, a->ht, Sc, R, s));
    TRY(launch_output(p, c->dtype, a->q, Gc, Cq, Sc, R, nullptr, a->o, s));
    return REWY_OK;
}

extern "C" rewy_status rewy_cuda_backward(const rewy_bwd_params *a) {
    const rewy_config *c = &a->cfg;
    REWY_VEC_DISPATCH(c, rewy_cuda_vec_backward(a));
    if (!supported(c)) return REWY_ERR_BACKEND;
    const Layout L = plan(c);
    const Prob p = make_prob(c, L, a->saved);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A, wy = c->bwd_algo == REWY_BWD_WY;
    const float *Gc = at<const float>(a->saved, L.G);
    const float *A = at<const float>(a->saved, L.A);
    const float *Cq;
    const state_t *Sc;
    const float *R;
    if (polA) {
        Cq = at<const float>(a->saved, L.Cq);
        Sc = at<const state_t>(a->saved, L.Sc);
        R = at<const float>(a->saved, L.R);
    } else {
        float *cq = at<float>(a->workspace, L.bCq);
        state_t *sc = at<state_t>(a->workspace, L.bSc);
        float *r = at<float>(a->workspace, L.bR);
        TRY(launch_kkt_inverse(p, c->dtype, a->q, a->k, a->g, a->beta, nullptr, nullptr, cq, s));
        TRY(launch_state_scan(p, c->dtype, a->k, a->v, Gc, A, nullptr, a->h0, nullptr, sc, r, s));
        Cq = cq; Sc = sc; R = r;
    }
    state_t *Sbar = at<state_t>(a->workspace, L.Sbar);
    float *PR = at<float>(a->workspace, L.PR);
    TRY(launch_bwd_state_scan(p, c->dtype, a->q, a->k, Gc, A, Cq, nullptr, a->do_, a->dht, a->dh0, Sbar, PR, wy, s));
    TRY(launch_pullback(p, c->dtype, a->q, a->k, a->v, a->beta, Gc, A, a->do_, Sc, Sbar, R, PR, wy,
                        (wy && !wbar_in_smem(L.Kp, c->dtype == REWY_F32 ? 4 : 2)) ? at<float>(a->workspace, L.Wbar) : nullptr,
                        p.G > 1 ? at<float>(a->workspace, L.acc) : nullptr,
                        a->dq, a->dk, a->dv, a->dbeta, p.gated ? a->dg : nullptr, s));
    return REWY_OK;
}
