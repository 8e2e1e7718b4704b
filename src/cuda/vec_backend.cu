/* vec_backend.cu: the backend entry points for the vector-gate operators (KDA, GDN2).
 * cuda_backend.cu forwards KDA and GDN2 to these.
 *
 * Forward:  chunk_plan → vec_intra (Gc, A, C_q) → vec_factors (E, F, Q_g, Λ) → state_scan in its
 *           vector mode (S_c, R, ht) → output (o)
 * Backward: [policy R: vec_intra (C_q)] → vec_factors → [policy R: state_scan (S_c, R)]
 *           → bwd_state_scan, vector mode (S̄⁺, P or R̄, dh0) → vec_pullback (dq, dk, dv, dg, dβ | db, dw)
 *           [→ GVA sum of dq, dk]
 * Every kernel runs on cfg.stream; nothing synchronizes the host; scratch comes from the caller's
 * workspace or saved buffer (each region 256-B aligned):
 *
 * saved:   ChunkInfo[NC] | int coff[N+1] | Gc fp32 [NC*HV][BT][Kp] | A fp32 [NC*HV][BT][BT]
 *          policy A: + C_q fp32 [NC*HV][BT][BT] | S_c state_t [NC*HV][K][V] | R fp32 [NC*HV][BT][V]
 * fwd ws:  factors | policy R: C_q, S_c, R (policy A keeps them in saved)
 * bwd ws:  factors | policy R: C_q, S_c, R | S̄⁺ state_t [NC*HV][K][V] | P (or R̄) fp32 [NC*HV][BT][V]
 *          | W̄ fp32 [NC*HV][BT][Kp] (WY scratch, sized whatever bwd_algo: the backward may switch)
 *          | HV > H: q̄, k̄ partials fp32 2×[NC*HV][BT][Kp]
 * factors: E, F, Q_g factor_t [NC*HV][BT][Kp] each | lam fp32 [NC*HV][Kp] | GB fp32 [NC*HV][2][BT]
 * NC as in cuda_backend.cu (exact from cu_seqlens_host, else an upper bound). */
#include "vec_kernels.cuh"
#include "kernels.cuh"
#include <math.h>

using namespace rewy_cuda;

namespace {

struct VLayout {
    int NC, N, HV, BT, Kp;
    size_t ctab, coff, G, A, Cq, Sc, R, saved;
    size_t fCq, fSc, fR, fwd;
    size_t bCq, bSc, bR, Sbar, PR, Wbar, acc, bwd;
    size_t fac_E, fac_F, fac_Q, fac_lam, fac_GB, fac_bytes; /* factor region, relative to its start */
};

size_t al(size_t x) { return (x + 255) & ~(size_t)255; }

VLayout vplan(const rewy_config *c) {
    VLayout L = {};
    const Geometry g = geometry(c);
    L.NC = g.NC; L.N = g.N; L.HV = g.HV; L.BT = g.BT; L.Kp = g.Kp;
    const size_t chh = (size_t)L.NC * L.HV, nn = (size_t)L.BT * L.BT, rk = chh * L.BT * L.Kp * sizeof(float);
    const size_t st = chh * c->K * c->V * sizeof(state_t), rv = chh * L.BT * c->V * sizeof(float);
    const bool polA = c->policy == REWY_POLICY_A;
    const size_t fe = 2; /* factor_t: 2 bytes (fp16 for fp16 inputs, else bf16) */
    size_t o = 0;
    L.fac_E = o; o += al(chh * L.BT * L.Kp * fe);
    L.fac_F = o; o += al(chh * L.BT * L.Kp * fe);
    L.fac_Q = o; o += al(chh * L.BT * L.Kp * fe);
    L.fac_lam = o; o += al(sizeof(float) * chh * L.Kp);
    L.fac_GB = o; o += al(sizeof(float) * chh * 2 * L.BT);
    L.fac_bytes = o;
    o = 0;
    L.ctab = o; o += al(sizeof(ChunkInfo) * L.NC);
    L.coff = o; o += al(sizeof(int) * (L.N + 1));
    L.G = o; o += al(rk);
    L.A = o; o += al(sizeof(float) * chh * nn);
    if (polA) {
        L.Cq = o; o += al(sizeof(float) * chh * nn);
        L.Sc = o; o += al(st);
        L.R = o; o += al(rv);
    }
    L.saved = o;
    o = L.fac_bytes; /* both workspaces start with the factor region */
    if (!polA) {
        L.fCq = o; o += al(sizeof(float) * chh * nn);
        L.fSc = o; o += al(st);
        L.fR = o; o += al(rv);
    }
    L.fwd = o;
    o = L.fac_bytes;
    if (!polA) {
        L.bCq = o; o += al(sizeof(float) * chh * nn);
        L.bSc = o; o += al(st);
        L.bR = o; o += al(rv);
    }
    L.Sbar = o; o += al(st);
    L.PR = o; o += al(rv);
    L.Wbar = o; o += al(rk);
    L.acc = o; if (L.HV > c->H) o += al(2 * rk);
    L.bwd = o;
    return L;
}

Prob vmake_prob(const rewy_config *c, const VLayout &L, const void *saved) {
    Prob p;
    p.B = c->B; p.T = c->T; p.H = c->H; p.HV = L.HV; p.K = c->K; p.V = c->V; p.BT = L.BT;
    p.G = L.HV / c->H; p.N = L.N; p.NC = L.NC; p.Kp = L.Kp;
    p.gated = 1;
    p.svf = c->state_v_first != 0;
    p.scale = c->scale != 0.f ? c->scale : 1.f / sqrtf((float)c->K);
    p.ctab = (const ChunkInfo *)((const char *)saved + L.ctab);
    p.coff = (const int *)((const char *)saved + L.coff);
    return p;
}

template <class P> P *at(const void *base, size_t off) { return (P *)((char *)base + off); }

/* The factor region at the start of a workspace, as the scans take it; GB is its β table. */
VecOps factors(const VLayout &L, void *ws, const void *w, float **GB) {
    *GB = at<float>(ws, L.fac_GB);
    return VecOps{at<void>(ws, L.fac_E), at<void>(ws, L.fac_F), at<void>(ws, L.fac_Q), at<float>(ws, L.fac_lam), w};
}

bool vec_op(const rewy_config *c) { return c->op == REWY_OP_KDA || c->op == REWY_OP_GDN2; }

} // namespace

#define VTRY(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return REWY_ERR_BACKEND; } while (0)

size_t rewy_cuda_vec_saved_size(const rewy_config *cfg) { return vec_op(cfg) ? vplan(cfg).saved : 0; }
size_t rewy_cuda_vec_fwd_workspace_size(const rewy_config *cfg) { return vec_op(cfg) ? vplan(cfg).fwd : 0; }
size_t rewy_cuda_vec_bwd_workspace_size(const rewy_config *cfg) { return vec_op(cfg) ? vplan(cfg).bwd : 0; }

rewy_status rewy_cuda_vec_forward(const rewy_fwd_params *a) {
    const rewy_config *c = &a->cfg;
    if (!vec_op(c)) return REWY_ERR_BACKEND;
    const VLayout L = vplan(c);
    const Prob p = vmake_prob(c, L, a->saved);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A;
    float *Gc = at<float>(a->saved, L.G);
    float *A = at<float>(a->saved, L.A);
    float *Cq = polA ? at<float>(a->saved, L.Cq) : at<float>(a->workspace, L.fCq);
    VTRY(launch_chunk_plan(p, c->cu_seqlens, at<ChunkInfo>(a->saved, L.ctab), at<int>(a->saved, L.coff), s));
    VTRY(launch_vec_intra(p, c->dtype, a->q, a->k, a->g, a->beta, a->b, Gc, A, Cq, s));
    float *GB;
    const VecOps vo = factors(L, a->workspace, a->w, &GB);
    VTRY(launch_vec_factors(p, c->dtype, a->q, a->k, a->beta, a->b, Gc, (void *)vo.E, (void *)vo.F, (void *)vo.Qg,
                            (float *)vo.lam, GB, s));
    state_t *Sc = polA ? at<state_t>(a->saved, L.Sc) : at<state_t>(a->workspace, L.fSc);
    float *R = polA ? at<float>(a->saved, L.R) : at<float>(a->workspace, L.fR);
    VTRY(launch_state_scan(p, c->dtype, a->k, a->v, GB, A, &vo, a->h0, a->ht, Sc, R, s));
    VTRY(launch_output(p, c->dtype, a->q, GB, Cq, Sc, R, &vo, a->o, s));
    return REWY_OK;
}

rewy_status rewy_cuda_vec_backward(const rewy_bwd_params *a) {
    const rewy_config *c = &a->cfg;
    if (!vec_op(c)) return REWY_ERR_BACKEND;
    const VLayout L = vplan(c);
    const Prob p = vmake_prob(c, L, a->saved);
    cudaStream_t s = (cudaStream_t)c->stream;
    const bool polA = c->policy == REWY_POLICY_A, wy = c->bwd_algo == REWY_BWD_WY;
    const float *Gc = at<const float>(a->saved, L.G);
    const float *A = at<const float>(a->saved, L.A);
    const float *Cq;
    const state_t *Sc;
    const float *R;
    float *GB;
    const VecOps vo = factors(L, a->workspace, a->w, &GB);
    VTRY(launch_vec_factors(p, c->dtype, a->q, a->k, a->beta, a->b, Gc, (void *)vo.E, (void *)vo.F, (void *)vo.Qg,
                            (float *)vo.lam, GB, s));
    if (polA) {
        Cq = at<const float>(a->saved, L.Cq);
        Sc = at<const state_t>(a->saved, L.Sc);
        R = at<const float>(a->saved, L.R);
    } else {
        float *cq = at<float>(a->workspace, L.bCq);
        state_t *sc = at<state_t>(a->workspace, L.bSc);
        float *r = at<float>(a->workspace, L.bR);
        /* recompute: C_q only (G and A are saved), then S_c and R by one forward scan without output */
        VTRY(launch_vec_intra(p, c->dtype, a->q, a->k, a->g, a->beta, a->b, nullptr, nullptr, cq, s));
        VTRY(launch_state_scan(p, c->dtype, a->k, a->v, GB, A, &vo, a->h0, nullptr, sc, r, s));
        Cq = cq; Sc = sc; R = r;
    }
    state_t *Sbar = at<state_t>(a->workspace, L.Sbar);
    float *PR = at<float>(a->workspace, L.PR);
    VTRY(launch_bwd_state_scan(p, c->dtype, a->q, a->k, GB, A, Cq, &vo, a->do_, a->dht, a->dh0, Sbar, PR, wy, s));
    VTRY(launch_vec_pullback(p, c->dtype, a->q, a->k, a->v, a->beta, a->b, a->w, Gc, A, a->do_, Sc, Sbar, R, PR, wy,
                             at<float>(a->workspace, L.Wbar), p.G > 1 ? at<float>(a->workspace, L.acc) : nullptr,
                             a->dq, a->dk, a->dv, a->dbeta, a->db, a->dw, a->dg, s));
    return REWY_OK;
}
