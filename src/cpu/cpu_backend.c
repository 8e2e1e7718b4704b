/* cpu_backend.c: the CPU backend behind the interface api.c uses (backend.h): sizes with the
 * CPU's limits, forward, backward, and the saved-record check. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "cpu/chunk.h"

static rewy_status too_large(char *msg, size_t len, const char *what, const problem *pb) {
    if (msg && len)
        snprintf(msg, len, "%s too large: more than SIZE_MAX bytes (B=%d, T=%d, HV=%d, K=%d, V=%d, %lld chunks, policy %s)",
                 what, pb->B, pb->T, pb->HV, pb->K, pb->V, (long long)pb->NC, pb->policy == REWY_POLICY_A ? "A" : "R");
    return REWY_ERR_BAD_SHAPE;
}

static rewy_status cpu_sizes(const rewy_config *cfg, rewy_sizes *out, char *msg, size_t len) {
    problem pb;
    problem_init(&pb, cfg);
    out->saved = rewy_cpu_saved_size(cfg);
    out->fwd = rewy_cpu_fwd_workspace_size(cfg);
    out->bwd = rewy_cpu_bwd_workspace_size(cfg);
    if (out->saved == SIZE_MAX) return too_large(msg, len, "saved buffer", &pb);
    if (out->fwd == SIZE_MAX) return too_large(msg, len, "forward workspace", &pb);
    if (out->bwd == SIZE_MAX) return too_large(msg, len, "backward workspace", &pb);
    /* Policy A hands the saved R and W rows to CBLAS with a leading dimension of HV·V and HV·K,
     * and CBLAS takes an int there. */
    const int64_t ld = (int64_t)pb.HV * (pb.K > pb.V ? pb.K : pb.V);
    if (pb.dt != REWY_F64 && pb.policy == REWY_POLICY_A && ld > INT32_MAX) {
        if (msg && len)
            snprintf(msg, len, "HV*max(K,V) = %lld exceeds 2^31-1, the CPU backend's limit under policy A "
                     "(CBLAS leading dimensions are int); use policy R", (long long)ld);
        return REWY_ERR_BAD_SHAPE;
    }
    return REWY_OK;
}

static rewy_status cpu_check_saved(const rewy_bwd_params *p, char *msg, size_t len) {
    const rewy_config *c = &p->cfg;
    rewy_saved_record fwd;
    memcpy(&fwd, p->saved, sizeof fwd);
    const rewy_saved_record bwd = rewy_saved_record_of(c, c->cu_seqlens_host ? c->cu_seqlens_host : c->cu_seqlens,
                                                       p->h0 != NULL, 0, SAVED_MAGIC);
    return rewy_saved_record_diff(&fwd, &bwd, msg, len) ? REWY_ERR_MISMATCH : REWY_OK;
}

const rewy_backend_ops *rewy_cpu_backend_ops(void) {
    static const rewy_backend_ops ops = {cpu_sizes, rewy_cpu_forward, rewy_cpu_backward, cpu_check_saved,
                                          rewy_cpu_l2norm, rewy_cpu_gate};
    return &ops;
}
