/* oracle.h: the fp64 token-recurrence reference (MATH §1), independent of the chunk algebra.
 *
 * Forward runs the recurrence token by token; backward is reverse mode of that same
 * recurrence (not of the chunk system), so it checks the chunk paths independently.
 *
 * Two layers:
 *  - rewy_oracle_head_*: one sequence and one value head in the generic vector form
 *    (g [T][K], b [T][K], w [T][V]), row-major, state [K][V].
 *  - rewy_ref_*: a whole problem with the API's layouts and config (op, GVA, varlen,
 *    state_v_first, scale default), in fp64. It maps each operator to the vector form
 *    (DeltaNet g = 0; β broadcast to b and w) and reduces the gradients back
 *    (β̄ = Σ_K b̄ + Σ_V w̄; GDN ḡ = Σ_K; q̄, k̄ summed over each value-head group).
 * The recurrence lives in the library (src/cpu/recurrence.c, also the CPU backend's REWY_F64
 * path); these wrappers allocate its scratch with malloc: references, not hot paths.
 * Functions return 0 on success, nonzero on allocation failure or bad arguments.
 */
#ifndef REWY_ORACLE_H
#define REWY_ORACLE_H

#include "rewy.h"
#include "cpu/recurrence.h" /* the recurrence itself, shared with the REWY_F64 path */

int rewy_oracle_head_forward(const rewy_oracle_head *p, double *o /* [T][V] */, double *hT /* [K][V] or NULL */);

/* do_ [T][V]; dhT [K][V] or NULL (zero). Every output [same shape as its input] is
 * overwritten (not accumulated); any output pointer may be NULL to skip it. */
int rewy_oracle_head_backward(const rewy_oracle_head *p, const double *do_, const double *dhT,
                              double *dq, double *dk, double *dv, double *dg, double *db,
                              double *dw, double *dh0);

/* A whole problem in fp64, same layouts and meanings as rewy_fwd_params (cfg.dtype,
 * backend, policy, bwd_algo and chunk_size are ignored); rewy_ref_problem is in recurrence.h. */
int rewy_ref_forward(const rewy_ref_problem *p, double *o, double *ht /* or NULL */);

/* dht may be NULL. Outputs that do not apply to the operator (dg for DeltaNet, dbeta for
 * GDN2, db/dw otherwise) and dh0 may be NULL. */
int rewy_ref_backward(const rewy_ref_problem *p, const double *do_, const double *dht,
                      double *dq, double *dk, double *dv, double *dg, double *dbeta,
                      double *db, double *dw, double *dh0);

#endif
