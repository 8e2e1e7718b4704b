/* check.h: the accuracy harness shared by the C tests, the `rewy` CLI and the CUDA tests.
 *
 * A rewy_case describes one problem. rewy_check_run generates its inputs (MATH §10), rounds
 * every element-typed input to the case dtype, runs the fp64 oracle on exactly those rounded
 * values (so only compute error is measured), runs rewy_forward once and rewy_backward with
 * each algorithm on the same saved buffer, and reports relative errors per quantity.
 *
 * Memory goes through an optional rewy_check_mem so the CUDA tests can reuse the harness
 * with device buffers; NULL means host memory. Outputs and workspaces are poisoned with NaN
 * bytes before every call, so an element the library forgets to write shows up as non-finite.
 */
#ifndef REWY_CHECK_H
#define REWY_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rewy.h"

#define REWY_CHECK_MAX_SEQS 32

/* Acceptance thresholds (MATH §10). */
#define REWY_CHECK_TOL_MAIN 8e-3     /* o, ht, dq, dk, dv, dh0 */
#define REWY_CHECK_TOL_GATE 2e-2     /* dg, dbeta, db, dw */
#define REWY_CHECK_TINY_NORM 1e-5    /* ‖ref‖ at or below this is "tiny": use the absolute bound */
#define REWY_CHECK_TINY_ABS 1e-6     /* max |x − ref| allowed where ‖ref‖ is tiny */
#define REWY_CHECK_AGREE_F32 1e-5    /* ‖WY − ReWY‖ / ‖ref‖ allowed for fp32 cases */

typedef enum rewy_gate_regime {
    REWY_GATES_NORMAL = 0,  /* g = log σ(x) / 16, x ~ N(0,1) */
    REWY_GATES_STRONG = 1,  /* g uniform in [−5, 0] per token (and per feature) */
    REWY_GATES_RESET = 2,   /* normal, plus −1000 on every 37th token and on the first token
                               of every odd-numbered sequence */
    REWY_GATES_NEG_INF = 3, /* as RESET with −inf: exact resets */
    REWY_GATES_HUGE = 4,    /* as RESET with −25, −31, −1e4, −1e6, −1e30 in turn: just above and
                               below the library's gate floor (30), then huge finite gates */
    REWY_GATES_MIXED = 5,   /* −1000 on every 7th token, −0.1 on the others (per token, all
                               features): strong and weak gates in one chunk */
    REWY_GATES_KDA = 6      /* Kimi-Linear-like: each feature (vector gates; each head for scalar
                               ones) has its own rate a in [0.001, 1.6], and g = −(0.001 + (a − 0.001)
                               (0.8 + 0.2u)), u uniform per token: g in [−1.6, −0.001], the fast
                               features make most 64-token chunks wider than one center (MATH §6) */
} rewy_gate_regime;

/* fp32 MIXED cases on the CPU: every quantity within this relative error. The small gates after
 * a −1000 reset keep their bits because the library floors each log gate at −30 (src/gates.h:
 * |G| ≤ 9 resets × 30 + 55 × 0.1 = 276 in a 64-token chunk, ulp 3.1e-5, against 9,000 and ulp
 * 9.8e-4 unfloored): a decay e^{G_i − G_j} within a 7-token run carries a few ulp(276) of
 * absolute exponent error. Measured: o ≤ 9.1e-6, every quantity ≤ 1.7e-5 (16 cases × 2
 * policies); unfloored the same cases gave 1.7e-4 to 2.5e-4 for o and up to 7.0e-4 for the
 * gradients (issue 25: 6.9e-4), which 1e-4 rejects. Normal fp32 gates give 4e-7. */
#define REWY_CHECK_TOL_MIXED_F32 1e-4

typedef enum rewy_beta_regime {
    REWY_BETAS_NORMAL = 0,  /* β (and GDN2 b, w) uniform in [0.1, 0.9] */
    REWY_BETAS_ZERO = 1     /* as normal, but 0 on every third token and 1e-8 on some others */
} rewy_beta_regime;

/* One problem. Zero-initialise, then set. With num_seqs > 0 the tokens are packed
 * variable-length sequences seqlens[0..num_seqs): B is taken as 1 and T as their sum. */
typedef struct rewy_case {
    rewy_op op;
    rewy_backend backend;
    rewy_dtype dtype;
    int B, T, H, HV, K, V;      /* HV = 0 means HV = H */
    int chunk_size;             /* 0 means 64 */
    rewy_policy policy;
    int state_v_first;
    int use_h0;                 /* nonzero: Gaussian × 0.1 initial state, and check dh0 */
    int use_dht;                /* nonzero: Gaussian × 0.1 final-state gradient */
    int no_ht;                  /* nonzero: do not request the final state (ht = NULL) */
    int num_seqs;
    int seqlens[REWY_CHECK_MAX_SEQS];
    rewy_gate_regime gates;
    rewy_beta_regime betas;
    float scale;                /* query scale; 0 means K^-1/2 */
    uint64_t seed;
} rewy_case;

/* Backend memory. Every function returns 0 (or non-NULL) on success. NULL = host memory. */
typedef struct rewy_check_mem {
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *ptr);
    int (*to_backend)(void *user, void *dst, const void *src, size_t bytes);
    int (*to_host)(void *user, void *dst, const void *src, size_t bytes);
    void *user;
    /* Optional (NULL: the public size queries, rewy_forward, rewy_backward): the calls the device tests
     * route through the CUDA backend's test-only entry points with their forced plan choices
     * (src/cuda/rewy_test.h; tests/cuda_force.h). */
    rewy_status (*sizes)(void *user, const rewy_config *cfg, size_t *saved, size_t *fwd, size_t *bwd);
    rewy_status (*forward)(void *user, const rewy_fwd_params *p);
    rewy_status (*backward)(void *user, const rewy_bwd_params *p);
} rewy_check_mem;

typedef enum rewy_qty {
    REWY_Q_O = 0, REWY_Q_HT, REWY_Q_DQ, REWY_Q_DK, REWY_Q_DV,
    REWY_Q_DG, REWY_Q_DBETA, REWY_Q_DB, REWY_Q_DW, REWY_Q_DH0,
    REWY_Q_COUNT
} rewy_qty;

/* Rows of rewy_check_result.err: the forward, then one per backward algorithm. */
enum { REWY_RUN_FWD = 0, REWY_RUN_WY = 1, REWY_RUN_REWY = 2, REWY_RUN_COUNT = 3 };

typedef struct rewy_check_err {
    double rel;         /* ‖x − ref‖ / ‖ref‖ */
    double max_abs;     /* max |x − ref| */
    double ref_norm;    /* ‖ref‖ */
    int finite;         /* every element of x finite */
    int pass;
} rewy_check_err;

typedef struct rewy_check_result {
    rewy_status fwd_status;
    rewy_status bwd_status[2];          /* indexed by rewy_bwd_algo */
    char msg[256];                      /* first failure: a validate message or a harness error */
    int harness_error;                  /* allocation, copy or oracle failure (not the library's) */
    int applies[REWY_Q_COUNT];          /* quantity exists for this case */
    double tol[REWY_Q_COUNT];
    /* err[REWY_RUN_FWD] holds o and ht; err[REWY_RUN_WY] / err[REWY_RUN_REWY] the gradients. */
    rewy_check_err err[REWY_RUN_COUNT][REWY_Q_COUNT];
    double wy_vs_rewy[REWY_Q_COUNT];    /* ‖x_WY − x_ReWY‖ / ‖ref‖ per gradient */
    int agree;                          /* fp32 cases: every wy_vs_rewy ≤ REWY_CHECK_AGREE_F32 */
    int saved_intact;                   /* the backward left the saved buffer unchanged */
    long floored_dg_nonzero;            /* ḡ of gates below the library's floor (src/gates.h)
                                           that are not exactly 0, over both backwards */
    int all_finite;
    int pass;                           /* everything above as required */
} rewy_check_result;

/* Runs one case. Returns 0 when the run completed (the verdict is r->pass), nonzero on a
 * harness error (r->harness_error set, r->msg says what). */
int rewy_check_run(const rewy_case *c, const rewy_check_mem *mem, rewy_check_result *r);

/* A NaN gate (issue 25: NaN inputs propagate, never hidden). The case's inputs, with one NaN log
 * gate at token tok of batch row 0, value head 0 (feature 0 for vector gates); one forward and one
 * backward (the case's policy, ReWY). Counts of elements, sorted by where they lie. The case must be
 * gated, batched with B ≥ 2, H ≥ 2, HV = H, with h0. Returns nonzero on a harness error. */
typedef struct rewy_check_nan {
    rewy_status fwd_status, bwd_status;
    int harness_error;
    long o_before;          /* non-finite o (row 0, head 0) in the chunks before tok's chunk */
    long o_chunk_before;    /* non-finite o (row 0, head 0) in tok's chunk, before tok */
    long o_from_finite;     /* finite o (row 0, head 0) from tok to the end of the sequence */
    long ht_nonfinite, dh0_nonfinite; /* of (row 0, head 0), out of state_size */
    long state_size;        /* K·V */
    long others;            /* non-finite o, q̄, k̄, v̄, ḡ, ht, dh0 of the other rows and heads */
} rewy_check_nan;
int rewy_check_nan_gate(const rewy_case *c, const rewy_check_mem *mem, int tok, rewy_check_nan *r);

/* The gradients' own sensitivity to the final-state gradient stored in bf16, as the CUDA backend stores every
 * chunk's S̄⁺ (docs/DESIGN.md, "S̄⁺ in bf16 and ḡ's conditioning"): the fp64 oracle's backward once with the case's
 * dht and once with dht rounded to bf16, rel[q] = ‖Δ‖ / ‖ref‖ per gradient (0 where it does not apply). A failing
 * configuration whose sensitivity is near its error is conditioned so, not wrong. Needs use_dht; returns nonzero on
 * a harness error or without dht. Host only: the oracle. */
int rewy_check_dht_sensitivity(const rewy_case *c, double rel[REWY_Q_COUNT]);

/* Header line + one line per quantity: rel errors of fwd / WY / ReWY, WY-vs-ReWY, verdict. */
void rewy_check_print_table(FILE *f, const rewy_case *c, const rewy_check_result *r);
/* One JSON object (no trailing newline). */
void rewy_check_print_json(FILE *f, const rewy_case *c, const rewy_check_result *r);
/* Short description, e.g. "gdn bf16 B2 T65 H2/4 K64 V64 c64 R h0 dht seed=1". */
void rewy_check_describe(const rewy_case *c, char *buf, size_t len);

const char *rewy_check_op_name(rewy_op op);
const char *rewy_check_dtype_name(rewy_dtype t);
const char *rewy_check_qty_name(rewy_qty q);
int rewy_check_parse_op(const char *s, rewy_op *op);         /* 0 on success */
int rewy_check_parse_dtype(const char *s, rewy_dtype *t);    /* 0 on success */

/* CPU timing: median wall time over up to `reps` runs (after one warm-up run each) of the
 * forward, the complete WY backward and the complete ReWY backward (recompute included),
 * under the case's policy. Stops repeating a measurement once it has used max_seconds
 * (at least one timed run each). A warm-up longer than REWY_CHECK_WARMUP_S counts as a
 * timed run (start-up costs are negligible there; it keeps big shapes affordable). */
#define REWY_CHECK_WARMUP_S 1.0
typedef struct rewy_check_timing {
    double fwd_ms, bwd_wy_ms, bwd_rewy_ms;
    double wy_over_rewy;                /* median over reps of the paired ratio WY_i / ReWY_i
                                           (the two runs of a pair are adjacent in time) */
    int reps_fwd, reps_bwd;             /* timed runs actually used */
    rewy_status status;                 /* first non-OK library status, else REWY_OK */
    char msg[160];                      /* when rewy_check_time returns nonzero: what went wrong
                                           (e.g. "harness: bad case shape: T = 0 ...") */
} rewy_check_timing;

int rewy_check_time(const rewy_case *c, int reps, double max_seconds, rewy_check_timing *t);

#endif
