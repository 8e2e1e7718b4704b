/* f64.c: REWY_F64 on the CPU backend: the exact fp64 token recurrence (recurrence.c), so that
 * torch.autograd.gradcheck can run against the library. Every array is double, gates and
 * states too. The backward reruns the recurrence from the inputs, so the saved buffer holds
 * only the header the consistency check reads. */
#include <omp.h>

#include "cpu/chunk.h"
#include "cpu/recurrence.h"

size_t cpu_f64_workspace_size(const rewy_config *cfg, int backward) {
    return (size_t)omp_get_max_threads() * rewy_rec_slot_bytes(cfg, backward);
}

static rewy_ref_problem ref_of(const rewy_config *cfg, const void *q, const void *k, const void *v, const void *g,
                               const void *beta, const void *b, const void *w, const void *h0) {
    rewy_ref_problem r = {*cfg, q, k, v, g, beta, b, w, h0};
    return r;
}

rewy_status cpu_f64_forward(const rewy_fwd_params *p) {
    const rewy_ref_problem r = ref_of(&p->cfg, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0);
    if (rewy_rec_forward(&r, p->o, (double *)(void *)p->ht, p->workspace, p->workspace_bytes))
        return REWY_ERR_WORKSPACE; /* api.c has checked the rest: only a short workspace is left */
    return REWY_OK;
}

rewy_status cpu_f64_backward(const rewy_bwd_params *p) {
    const rewy_ref_problem r = ref_of(&p->cfg, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0);
    if (rewy_rec_backward(&r, p->do_, (const double *)(const void *)p->dht, p->dq, p->dk, p->dv,
                          (double *)(void *)p->dg, p->dbeta, p->db, p->dw, (double *)(void *)p->dh0,
                          p->workspace, p->workspace_bytes))
        return REWY_ERR_WORKSPACE;
    return REWY_OK;
}
