/* vec_backend.cu: the backend entry points for the vector-gate operators (KDA, GDN2).
 * cuda_backend.cu forwards KDA and GDN2 to these. The buffer layouts, the size queries and the stage
 * sequence are backend_common.cuh's, shared with cuda_backend.cu; this file supplies only the vector
 * stages and regions (VectorGates):
 *
 * Forward:  chunk_plan → vec_intra (Gc, A, C_q) → vec_factors (E, F, Q_g, Λ) → state_scan in its
 *           vector mode (S_c, R, ht) → output (o)
 * Backward: [policy R: vec_intra (Gc, C_q)] → vec_factors → [policy R: state_scan (S_c, R)]
 *           → bwd_state_scan, vector mode (S̄⁺, P or R̄, dh0) → vec_pullback (dq, dk, dv, dg, dβ | db, dw)
 *           [→ GVA sum of dq, dk]
 * The vector regions of the layouts (backend_common.cuh; each 256-B aligned):
 *
 * gate table:       Gc fp32 [NC*HV][BT][Kp] (per-feature G; vec_intra writes it): saved under policy A; under
 *                   policy R a region of each workspace, written by the forward's vec_intra and again by the
 *                   backward's (with C_q), so the saved buffer does not hold a second g-sized fp32 table
 * workspace head:   the factors, at the start of both workspaces (vec_factors writes them, forward and backward;
 *                   vec_intra's fast path instead, wherever it runs: vec_factors is then not launched):
 *                   E, F, Q_g factor_t [NC*HV][BT][Kp] each | lam fp32 [NC*HV][Kp] | GB fp32 [NC*HV][2][BT]
 * bwd ws W̄:         fp32 [NC*HV][BT][Kp] (WY scratch, sized whatever bwd_algo: the backward may switch)
 * bwd ws GVA:       HV > H: q̄, k̄ partials fp32 2×[NC*HV][BT][Kp]
 * K < 16 (Plan::recurrent): the token recurrence instead (recurrent.cu; backend_common.cuh's forward and backward). */
#include "vec_kernels.cuh"
#include "backend_common.cuh"

using namespace rewy_cuda;
using namespace rewy_cuda::host;

namespace {

/* The factor region (the workspace head), offsets from its start. */
struct Factors { size_t E, F, Q, lam, GB, bytes; };

Factors factor_plan(const Geometry &g) {
    const size_t chh = (size_t)g.NC * g.HV;
    const size_t fe = 2; /* factor_t: 2 bytes (fp16 for fp16 inputs, else bf16) */
    Factors f = {};
    size_t o = 0;
    f.E = o; o += al(chh * g.BT * g.Kp * fe);
    f.F = o; o += al(chh * g.BT * g.Kp * fe);
    f.Q = o; o += al(chh * g.BT * g.Kp * fe);
    f.lam = o; o += al(sizeof(float) * chh * g.Kp);
    f.GB = o; o += al(sizeof(float) * chh * 2 * g.BT);
    f.bytes = o;
    return f;
}

/* The vector-gate operator for backend_common.cuh. */
struct VectorGates {
    static bool supports(const rewy_config *c) { return c->op == REWY_OP_KDA || c->op == REWY_OP_GDN2; }
    static constexpr bool vector_gates = true; /* vector gates: the wgmma scans do not apply */

    static OpRegions regions(const rewy_config *c, const Geometry &g, const Plan &) { /* no region depends on the plan */
        const size_t rk = (size_t)g.NC * g.HV * g.BT * g.Kp * sizeof(float);
        OpRegions r = {};
        r.gate = rk; /* Gc */
        r.head = factor_plan(g).bytes;
        r.Wbar = rk;
        if (g.HV > c->H) r.acc = 2 * rk;
        return r;
    }

    /* vec_intra.cu: Gc, A, C_q (any NULL skipped; all NULL: no launch); the scans' factors E, F, Q_g, Λ
     * and the β table GB into the workspace head: by vec_intra itself on its fast path when it runs
     * (it holds G, k, q, b already), else by vec_factors.cu from the saved Gc */
    template <class Args>
    static cudaError_t gates(const Prob &p, const Args *a, const Layout &L, float *Gout, float *A, cq_t *Cq,
                             const float *Gc, ScanGates *sg, cudaStream_t s, const WuOut & = {}) {
        const Factors f = factor_plan(L);
        const FactorOut fo = {at<void>(a->workspace, f.E), at<void>(a->workspace, f.F), at<void>(a->workspace, f.Q),
                              at<float>(a->workspace, f.lam), at<float>(a->workspace, f.GB)};
        sg->GB = fo.GB;
        sg->ops = VecOps{fo.E, fo.F, fo.Qg, fo.lam, a->w};
        sg->vec = true;
        const bool intra = Gout || A || Cq, fuse = intra && vec_intra_fuses_factors(p, a->cfg.dtype);
        if (intra) {
            const cudaError_t e = launch_vec_intra(p, a->cfg.dtype, a->q, a->k, a->g, a->beta, a->b, Gout, A, Cq,
                                                   fuse ? &fo : nullptr, s);
            if (e != cudaSuccess || fuse) return e;
        }
        return launch_vec_factors(p, a->cfg.dtype, a->q, a->k, a->beta, a->b, Gc, fo, s);
    }

    static cudaError_t pullback(const Prob &p, const rewy_bwd_params *a, const float *Gc, const float *A,
                                const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, bool wy,
                                float *Wbar, float *acc, cudaStream_t s) {
        return launch_vec_pullback(p, a->cfg.dtype, a->q, a->k, a->v, a->beta, a->b, a->w, Gc, A, a->do_, Sc, Sbar,
                                   R, PR, wy, Wbar, acc, a->dq, a->dk, a->dv, a->dbeta, a->db, a->dw, a->g, a->dg, s);
    }
};

} // namespace

/* no vector region depends on the plan's choices (VectorGates::regions); the layout does on Plan::recurrent */
size_t rewy_cuda_vec_saved_size(const rewy_config *cfg, const Plan &pl) { return layout_bytes<VectorGates>(cfg, &Layout::saved, pl); }
size_t rewy_cuda_vec_fwd_workspace_size(const rewy_config *cfg, const Plan &pl) { return layout_bytes<VectorGates>(cfg, &Layout::fwd, pl); }
size_t rewy_cuda_vec_bwd_workspace_size(const rewy_config *cfg, const Plan &pl) { return layout_bytes<VectorGates>(cfg, &Layout::bwd, pl); }

rewy_status rewy_cuda_vec_forward(const rewy_fwd_params *a, const Plan &pl) { return host::forward<VectorGates>(a, pl); }
rewy_status rewy_cuda_vec_backward(const rewy_bwd_params *a, const Plan &pl) { return host::backward<VectorGates>(a, pl); }
