/* cuda_backend.cu: the CUDA backend's rewy_backend_ops (backend.h): sizes with the kernels' index limits,
 * forward, backward, and the saved record (written by the forward's last kernel, checked by the backward's first).
 * Scalar-gate operators (DeltaNet, GDN) here; KDA and GDN2 go to vec_backend.cu. The buffer layouts,
 * the size queries and the stage sequence are backend_common.cuh's, shared with vec_backend.cu; this
 * file supplies only the scalar stages and regions (ScalarGates):
 *
 * Forward:  chunk_plan → kkt_inverse (G, A, C_q; W, U where the scan fuses the output) → state_scan (S_c, R, ht)
 *           → output (o), or state_scan with o (fused)
 * Backward: [policy R: kkt_inverse (C_q; W at small grids) → state_scan (S_c, R)] → bwd_state_scan (S̄⁺, P or R̄,
 *           dh0) [→ P = Aᵀ R̄ where the reverse scan ran the W chain] → pullback (dq, dk, dv, dβ, dg)
 * The scalar regions of the layouts (backend_common.cuh; each 256-B aligned):
 *
 * saved gate table: GB fp32 [NC*HV][2][BT] (G, β per chunk; kkt_inverse writes it, every later stage reads it)
 * workspace head:   none (E, F, Q_g are formed per row inside the scans)
 * fwd ws W, U:      bf16 [NC*HV][BT][K], [NC*HV][BT][V] (the two-product forward chain) for bf16, chunk 64,
 *                   K and V of 64 or 128; bwd ws (policy R) W alike (the reverse scan's W chain; one time
 *                   window's chunks where the plan takes windows)
 * bwd ws W̄:         fp32 [NC*HV][BT][Kp] (WY scratch) only for K > 128 or fp32 (else in shared memory)
 * bwd ws GVA:       HV > H: q̄, k̄ accumulators fp32 2×[NC*H][BT][Kp]
 * K < 16 (Plan::recurrent), every operator: the plain fp32 token recurrence (recurrent.cu) and its own layout
 * (backend_common.cuh, recurrent_layout) instead of all of the above. */
#include "cuda_backend.h"
#include "rewy_test.h"
#include "backend_common.cuh"
#include "vec_kernels.cuh" /* KDA, GDN2 (vec_backend.cu) */
#include <stdio.h>

using namespace rewy_cuda;
using namespace rewy_cuda::host;

namespace {

/* The scalar-gate operator for backend_common.cuh. */
struct ScalarGates {
    static bool supports(const rewy_config *c) { return c->op == REWY_OP_DELTANET || c->op == REWY_OP_GDN; }
    static constexpr bool vector_gates = false; /* vector gates: the wgmma scans do not apply */

    static OpRegions regions(const rewy_config *c, const Geometry &g, const Plan &pl) {
        const size_t chh = (size_t)g.NC * g.HV;
        OpRegions r = {};
        r.gate = sizeof(float) * chh * 2 * g.BT; /* GB: G, β */
        /* W̄ scratch of the WY pullback when it does not fit in shared memory. Sized whatever the
         * algorithm: a backward may switch bwd_algo against the same workspace size. */
        if (!wbar_in_smem(g.Kp, c->dtype == REWY_F32 ? 4 : 2)) r.Wbar = sizeof(float) * chh * g.BT * g.Kp;
        if (g.HV > c->H) r.acc = 2 * sizeof(float) * (size_t)g.NC * c->H * g.BT * g.Kp;
        /* W, U (bf16) of the two-product chains, for the shapes the plan's scan_wu and bwd_w may pick */
        if (w_shape_ok(c->dtype, g.BT, c->K, g.Kp)) {
            r.W = sizeof(__nv_bfloat16) * chh * g.BT * c->K;
            if (u_shape_ok(c->V)) r.U = sizeof(__nv_bfloat16) * chh * g.BT * c->V;
            /* the reverse scan takes W only at 16-column tiles (small grids), the register chains (the plan's
             * chain_bvc: W, and U over R's region) on small grids too: elsewhere no bwd region */
            if (pl.scan_bv == 16 || pl.chain_bvc > 0) /* one time window's chunks where the plan takes them */
                r.Wb = sizeof(__nv_bfloat16) * bwd_slots(g, pl) * g.BT * c->K;
        }
        return r;
    }

    /* kkt_inverse.cu: GB (G, β), A, C_q (any NULL skipped; all NULL: no launch), and W, U where wu asks
     * (the forward's two-product chain). The scans read the saved GB table; E, F, Q_g are formed per row
     * inside them. */
    template <class Args>
    static cudaError_t gates(const Prob &p, const Args *a, const Layout &, float *Gout, float *A, cq_t *Cq,
                             const float *GB, ScanGates *sg, cudaStream_t s, const WuOut &wu = {}) {
        sg->GB = GB;
        if (!Gout && !A && !Cq && !wu.W) return cudaSuccess;
        return launch_kkt_inverse(p, a->cfg.dtype, a->q, a->k, a->g, a->beta, Gout, A, Cq, s, wu.U ? a->v : nullptr, wu);
    }

    static cudaError_t pullback(const Prob &p, const rewy_bwd_params *a, const float *GB, const float *A,
                                const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, bool wy,
                                float *Wbar, float *acc, cudaStream_t s) {
        const rewy_config *c = &a->cfg;
        return launch_pullback(p, c->dtype, a->q, a->k, a->v, a->beta, GB, A, a->do_, Sc, Sbar, R, PR, wy,
                               (wy && !wbar_in_smem(p.Kp, c->dtype == REWY_F32 ? 4 : 2)) ? Wbar : nullptr, acc,
                               a->dq, a->dk, a->dv, a->dbeta, a->g, p.gated ? a->dg : nullptr, s);
    }
};

} // namespace

/* The saved buffer: the operator's layout (backend_common.cuh), then the record the backward checks
 * (backend.h) in its own 256-B region, so the record is on the device like everything else saved.
 * The sizes under one plan (make_plan; force: the test-only override of rewy_test.h, NULL in the library's
 * calls). The saved regions depend on two choices of the plan, Plan::recurrent (K < 16: the recurrence's own
 * layout) and Plan::win (checkpoints after the record), the workspaces on more (ScalarGates::regions). */
static rewy_sizes op_sizes(const rewy_config *cfg, const rewy_test_force *force) {
    rewy_sizes z;
    const Plan pl = make_plan(cfg, force);
    if (cfg->op == REWY_OP_KDA || cfg->op == REWY_OP_GDN2) {
        z.saved = al(rewy_cuda_vec_saved_size(cfg, pl)) + RECORD_BYTES;
        z.fwd = rewy_cuda_vec_fwd_workspace_size(cfg, pl);
        z.bwd = rewy_cuda_vec_bwd_workspace_size(cfg, pl);
    } else {
        const Layout L = plan<ScalarGates>(cfg, pl);
        z.saved = L.saved_end; z.fwd = L.fwd; z.bwd = L.bwd; /* the record (and time windows' checkpoints) included */
    }
    return z;
}
static_assert(sizeof(rewy_saved_record) <= RECORD_BYTES, "the saved record's region (backend_common.cuh)");
/* The record's place, after the saved regions. Of the plan's choices only Plan::recurrent changes the regions before
 * it (time windows' checkpoints come after it), and plan_recurrent needs no device query: the full plan is not made
 * here. */
static rewy_saved_record *record_at(const void *saved, const rewy_config *cfg, const rewy_test_force *force) {
    const bool vec = cfg->op == REWY_OP_KDA || cfg->op == REWY_OP_GDN2;
    Plan pl = {};
    pl.recurrent = plan_recurrent(cfg, force ? *force : rewy_test_force_none());
    return at<rewy_saved_record>(saved, al(vec ? rewy_cuda_vec_saved_size(cfg, pl) : plan<ScalarGates>(cfg, pl).saved));
}
/* win: the plan's time window (Plan::win; 0 for the vector gates, which take none): a backward that planned other
 * windows than its forward would read checkpoints the forward never wrote */
static rewy_saved_record record_of(const rewy_config *cfg, const void *h0, int win) {
    return rewy_saved_record_of(cfg, cfg->cu_seqlens_host, h0 != nullptr, win, "rewyGPU");
}

static rewy_status refuse(char *msg, size_t len, const char *fmt, long long got, long long limit) {
    if (msg && len) snprintf(msg, len, fmt, got, limit);
    return REWY_ERR_BAD_SHAPE;
}

/* The kernels' 32-bit limits first (they also keep every layout size far below 2^64: at most 2^31
 * chunk rows of at most 256×256 fp32), then the layouts. cu_seqlens_host is required with CUDA. */
static rewy_status cuda_sizes(const rewy_config *c, rewy_sizes *out, char *msg, size_t len) {
    const long long HV = c->HV ? c->HV : c->H, BT = c->chunk_size ? c->chunk_size : 64;
    if (HV > REWY_CUDA_MAX_HEADS)
        return refuse(msg, len, "HV = %lld exceeds %lld, the CUDA backend's limit (value heads are a grid dimension)",
                      HV, REWY_CUDA_MAX_HEADS);
    const long long tok = (long long)c->B * c->T;
    if (tok > REWY_CUDA_MAX_TOKENS)
        return refuse(msg, len, "B*T = %lld tokens exceeds %lld, the CUDA backend's limit (32-bit token indices)", tok,
                      REWY_CUDA_MAX_TOKENS);
    long long nc = 0; /* the chunks, exact, in 64 bits */
    if (c->cu_seqlens_host)
        for (int s = 0; s < c->num_seqs; s++) nc += ((long long)c->cu_seqlens_host[s + 1] - c->cu_seqlens_host[s] + BT - 1) / BT;
    else
        nc = (long long)c->B * (((long long)c->T + BT - 1) / BT);
    if (nc * HV * BT > REWY_CUDA_MAX_CHUNK_ROWS)
        return refuse(msg, len, "NC*HV*BT = %lld chunk rows exceeds %lld, the CUDA backend's limit (32-bit row indices)",
                      nc * HV * BT, REWY_CUDA_MAX_CHUNK_ROWS);
    *out = op_sizes(c, nullptr);
    return REWY_OK;
}

/* One plan per call, for both gate families (the vector gates take no time windows: their pl.win is 0). */
static rewy_status forward_with(const rewy_fwd_params *a, const rewy_test_force *force) {
    const bool vec = a->cfg.op == REWY_OP_KDA || a->cfg.op == REWY_OP_GDN2;
    const Plan pl = call_plan(a, force);
    const rewy_status s = vec ? rewy_cuda_vec_forward(a, pl) : host::forward<ScalarGates>(a, pl);
    if (s) return s;
    if (launch_record_write(record_of(&a->cfg, a->h0, pl.win), record_at(a->saved, &a->cfg, force),
                            (cudaStream_t)a->cfg.stream))
        return REWY_ERR_BACKEND;
    return REWY_OK;
}

static rewy_status backward_with(const rewy_bwd_params *a, const rewy_test_force *force) {
    const bool vec = a->cfg.op == REWY_OP_KDA || a->cfg.op == REWY_OP_GDN2;
    const Plan pl = call_plan(a, force);
    /* the check runs first on the stream: on a mismatch nothing after it runs */
    if (launch_record_check(record_of(&a->cfg, a->h0, pl.win), record_at(a->saved, &a->cfg, force),
                            (cudaStream_t)a->cfg.stream))
        return REWY_ERR_BACKEND;
    return vec ? rewy_cuda_vec_backward(a, pl) : host::backward<ScalarGates>(a, pl);
}
static rewy_status cuda_forward(const rewy_fwd_params *a) { return forward_with(a, nullptr); }
static rewy_status cuda_backward(const rewy_bwd_params *a) { return backward_with(a, nullptr); }

/* The saved buffer is device memory: reading its record here would cost a device sync on every
 * backward (and break graph capture), so the comparison is the backward's first kernel instead. */
static rewy_status cuda_check_saved(const rewy_bwd_params *, char *, size_t) { return REWY_OK; }

extern "C" const rewy_backend_ops *rewy_cuda_backend_ops(void) {
    static const rewy_backend_ops ops = {cuda_sizes, cuda_forward, cuda_backward, cuda_check_saved,
                                          rewy_cuda_l2norm, rewy_cuda_gate};
    return &ops;
}

/* ==== rewy_test.h: the test-only entry points (hidden like every internal: the tests link librewy.a) ==== */

extern "C" rewy_status rewy_test_sizes(const rewy_config *cfg, const rewy_test_force *f, size_t *saved, size_t *fwd,
                                       size_t *bwd) {
    size_t pub[3];
    rewy_status s = rewy_saved_size(cfg, &pub[0]);
    if (s == REWY_OK) s = rewy_fwd_workspace_size(cfg, &pub[1]);
    if (s == REWY_OK) s = rewy_bwd_workspace_size(cfg, &pub[2]);
    if (s != REWY_OK) return s;
    if (cfg->backend != REWY_BACKEND_CUDA) return REWY_ERR_BACKEND;
    /* the public queries passed the limits of cuda_sizes; the forced plan changes only regions below them */
    const rewy_sizes z = op_sizes(cfg, f);
    const size_t forced[3] = {z.saved, z.fwd, z.bwd};
    size_t *out[3] = {saved, fwd, bwd};
    for (int i = 0; i < 3; i++)
        if (out[i]) *out[i] = forced[i] > pub[i] ? forced[i] : pub[i];
    return REWY_OK;
}

extern "C" rewy_status rewy_test_get_plan(const rewy_config *cfg, const rewy_test_force *f, rewy_test_plan *out) {
    size_t bytes;
    rewy_status s = rewy_saved_size(cfg, &bytes); /* validates cfg */
    if (s != REWY_OK) return s;
    if (!out) return REWY_ERR_NULL_POINTER;
    if (cfg->backend != REWY_BACKEND_CUDA) return REWY_ERR_BACKEND;
    const Plan pl = make_plan(cfg, f);
    out->sms = pl.sms; out->wgmma = pl.wgmma; out->smem_optin = pl.smem_optin;
    out->scan_bv = pl.scan_bv; out->scan_8w = pl.scan_8w; out->pair_8w = pl.pair_8w; out->scan_wg = pl.scan_wg;
    out->bwd_scan_wg = pl.bwd_scan_wg; out->scan_wg2 = pl.scan_wg2; out->fuse_output = pl.fuse_output;
    out->scan_wu = pl.scan_wu; out->beside_kkt = pl.beside_kkt; out->bwd_w = pl.bwd_w; out->chain_bvc = pl.chain_bvc;
    out->recurrent = pl.recurrent; out->fwd_chain = pl.fwd_chain; out->win = pl.win; out->chain_bulk = pl.chain_bulk;
    out->fwd_ws = pl.fwd_ws; out->chain_ws = pl.chain_ws; out->pb_ws = pl.pb_ws;
    out->rev_ws = pl.rev_ws; out->seg = pl.seg; out->fwd_seg = pl.fwd_seg; out->rev_rf = pl.rev_rf;
    out->rec_vt = pl.rec_vt; out->rev_pair = pl.rev_pair;
    const rewy_sizes z = op_sizes(cfg, f); /* this plan's own layout (rewy_test_sizes reports at least the public one) */
    out->saved_bytes = z.saved; out->fwd_bytes = z.fwd; out->bwd_bytes = z.bwd;
    return REWY_OK;
}

extern "C" rewy_status rewy_test_forward(const rewy_fwd_params *p, const rewy_test_force *f) {
    rewy_status s = rewy_validate_fwd(p, nullptr, 0);
    if (s != REWY_OK) return s;
    if (p->cfg.backend != REWY_BACKEND_CUDA) return REWY_ERR_BACKEND;
    return forward_with(p, f);
}

extern "C" rewy_status rewy_test_backward(const rewy_bwd_params *p, const rewy_test_force *f) {
    rewy_status s = rewy_validate_bwd(p, nullptr, 0);
    if (s != REWY_OK) return s;
    if (p->cfg.backend != REWY_BACKEND_CUDA) return REWY_ERR_BACKEND;
    return backward_with(p, f);
}
