/* oracle.c: the fp64 token-recurrence reference of MATH §1 and its reverse mode.
 *
 * The recurrence and its reverse mode are src/cpu/recurrence.c, one copy shared with the
 * library's REWY_F64 path; they never use the chunk algebra of MATH §2–§7, so they check the
 * chunk paths independently. Here they get malloc'd scratch: the reference's callers (tests,
 * the CLI) have no workspace to give.
 */
#include "check/oracle.h"

#include <omp.h>
#include <stdlib.h>

int rewy_oracle_head_forward(const rewy_oracle_head *p, double *o, double *hT) {
    if (!p || p->K <= 0 || p->V <= 0) return 1;
    double *scratch = malloc(rewy_rec_head_fwd_doubles(p->K, p->V) * sizeof *scratch);
    if (!scratch) return 1;
    int rc = rewy_rec_head_forward(p, o, hT, scratch);
    free(scratch);
    return rc;
}

int rewy_oracle_head_backward(const rewy_oracle_head *p, const double *do_, const double *dhT,
                              double *dq, double *dk, double *dv, double *dg, double *db,
                              double *dw, double *dh0) {
    if (!p || p->T <= 0 || p->K <= 0 || p->V <= 0) return 1;
    double *scratch = malloc(rewy_rec_head_bwd_doubles(p->T, p->K, p->V) * sizeof *scratch);
    if (!scratch) return 1;
    int rc = rewy_rec_head_backward(p, do_, dhT, dq, dk, dv, dg, db, dw, dh0, scratch);
    free(scratch);
    return rc;
}

/* One slot per thread, so the whole problem runs on every core. */
static void *slots(const rewy_ref_problem *p, int backward, size_t *bytes) {
    size_t slot = p ? rewy_rec_slot_bytes(&p->cfg, backward) : 0;
    *bytes = slot * (size_t)omp_get_max_threads();
    return slot ? malloc(*bytes) : NULL;
}

int rewy_ref_forward(const rewy_ref_problem *p, double *o, double *ht) {
    size_t bytes;
    void *ws = slots(p, 0, &bytes);
    if (!ws) return 1;
    int rc = rewy_rec_forward(p, o, ht, ws, bytes);
    free(ws);
    return rc;
}

int rewy_ref_backward(const rewy_ref_problem *p, const double *do_, const double *dht,
                      double *dq, double *dk, double *dv, double *dg, double *dbeta,
                      double *db, double *dw, double *dh0) {
    size_t bytes;
    void *ws = slots(p, 1, &bytes);
    if (!ws) return 1;
    int rc = rewy_rec_backward(p, do_, dht, dq, dk, dv, dg, dbeta, db, dw, dh0, ws, bytes);
    free(ws);
    return rc;
}
