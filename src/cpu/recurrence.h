/* recurrence.h: the fp64 token recurrence of MATH §1 and its reverse mode, in the library.
 *
 * Two users share this one copy: the REWY_F64 path of the CPU backend (exact fp64 forward
 * and backward, for torch.autograd.gradcheck) and the fp64 oracle of src/check (the reference
 * every chunk path is tested against), which wraps these functions with malloc'd scratch.
 * Here nothing allocates: the caller passes scratch sized by the *_doubles / *_bytes queries.
 *
 * Two layers:
 *  - rewy_rec_head_*: one sequence and one value head in the generic vector form
 *    (g [T][K], b [T][K], w [T][V]), row-major, state [K][V].
 *  - rewy_rec_forward/backward: a whole problem with the API's layouts and config (op, GVA,
 *    varlen, state_v_first, scale default), every array double. It maps each operator to the
 *    vector form (DeltaNet g = 0; β broadcast to b and w) and reduces the gradients back
 *    (β̄ = Σ_K b̄ + Σ_V w̄; GDN ḡ = Σ_K; q̄, k̄ summed over each value-head group).
 */
#ifndef REWY_CPU_RECURRENCE_H
#define REWY_CPU_RECURRENCE_H

#include <stddef.h>
#include "rewy.h"

typedef struct rewy_oracle_head {
    int T, K, V;
    double scale;            /* o_t = S_tᵀ (scale · q_t) */
    const double *q, *k;     /* [T][K] */
    const double *v;         /* [T][V] */
    const double *g;         /* [T][K] log decay, natural log */
    const double *b;         /* [T][K] erase gate */
    const double *w;         /* [T][V] write gate */
    const double *h0;        /* [K][V] or NULL (zero) */
} rewy_oracle_head;

/* Scratch (in doubles) of one head's forward / backward of T tokens. */
size_t rewy_rec_head_fwd_doubles(int K, int V);
size_t rewy_rec_head_bwd_doubles(int T, int K, int V);

/* Return 0, or 1 on bad arguments. o [T][V]; hT [K][V] or NULL. */
int rewy_rec_head_forward(const rewy_oracle_head *p, double *o, double *hT, double *scratch);
/* do_ [T][V]; dhT [K][V] or NULL (zero). Every output (same shape as its input) is
 * overwritten, not accumulated; any output pointer may be NULL to skip it. */
int rewy_rec_head_backward(const rewy_oracle_head *p, const double *do_, const double *dhT,
                           double *dq, double *dk, double *dv, double *dg, double *db,
                           double *dw, double *dh0, double *scratch);

/* A whole problem in fp64, same layouts and meanings as rewy_fwd_params (cfg.dtype,
 * backend, policy, bwd_algo and chunk_size are ignored; cfg.cu_seqlens is host memory). */
typedef struct rewy_ref_problem {
    rewy_config cfg;
    const double *q, *k, *v, *g, *beta, *b, *w, *h0;
} rewy_ref_problem;

/* Scratch of one worker (one (sequence, head) task at a time), in bytes; 0 for an invalid
 * config. The whole problem runs on as many workers as workspace_bytes holds slots. */
size_t rewy_rec_slot_bytes(const rewy_config *cfg, int backward);

int rewy_rec_forward(const rewy_ref_problem *p, double *o, double *ht /* or NULL */,
                     void *workspace, size_t workspace_bytes);
/* dht may be NULL. Outputs that do not apply to the operator (dg for DeltaNet, dbeta for
 * GDN2, db/dw otherwise) and dh0 may be NULL. */
int rewy_rec_backward(const rewy_ref_problem *p, const double *do_, const double *dht,
                      double *dq, double *dk, double *dv, double *dg, double *dbeta,
                      double *db, double *dw, double *dh0, void *workspace, size_t workspace_bytes);

#endif
