/* rewy_test.h: test-only entry points of the CUDA backend (never in include/rewy.h, not exported from
 * librewy.so: the device tests link librewy.a). The CUDA backend takes every kernel choice once per call in
 * its plan (common.cuh, Plan; made by backend_common.cuh's make_plan from the config and the device). The
 * tests reach the variants the plan would not pick on their small shapes through a rewy_test_force: each
 * field forces one choice where the shape allows it, or leaves it to the plan (REWY_TEST_AUTO). The library
 * reads no environment: tests/cuda_force.h maps the REWY_CUDA_* variables of `make test-cuda` onto it.
 * Plain C, also included from CUDA C++. */
#ifndef REWY_CUDA_TEST_H
#define REWY_CUDA_TEST_H

#include <stddef.h>
#include "rewy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REWY_TEST_AUTO (-1) /* the plan decides */

/* Forced choices; REWY_TEST_AUTO in every field is the library's own plan (rewy_test_force_none). */
typedef struct rewy_test_force {
    int scan_bv;     /* the scans' value tile: 16, 32 or 64 (other values: the plan's) */
    int scan_8w;     /* 64-column scans as 8-warp blocks, two per SM, where two fit: 1 on, 0 off */
    int scan_out;    /* the forward scan fuses the output (bf16 fast path, mma.sync scans): 1 on, 0 off */
    int scan_wu;     /* that scan reads W, U from kkt_inverse (where K, V allow): 0 off (A (Z − E S) instead) */
    int scan_beside; /* that scan starts beside kkt_inverse (sm_90, 16-column tiles): 0 off */
    int scan_wf;     /* policy R's reverse scan at 16 columns runs the W chain: 0 off (P in the chain) */
    int chain;       /* policy R's register chains: 0 never, 1 wherever they fit, 2 128-column blocks where V = 128 fits */
    int scan_wg;     /* the wgmma scans (sm_90a binary, bf16 fast path): 1 on, 0 off */
    int scan_wg2;    /* the wgmma scans at 64 columns as two warpgroups per block (V % 128 = 0): 0 off */
    int recurrent;   /* the plain fp32 token recurrence (recurrent.cu; the plan's choice for K < 16): 1 on at any K,
                      * 0 off (the chunk path even at K < 16) */
    int fwd_chain;   /* the forward pass as the register chain with its output (chain_scan.cu; by default on large
                      * grids only), where the shape allows: 1 on, 16, 32 or 64 on with that many value columns per
                      * block, 128 on at V's width (8-warp blocks at V = 128), 0 off */
    int win;         /* policy R's time windows (scalar gates, 2-byte inputs, the mma.sync chains and scans): n > 0 chunks
                      * per window where they apply, 0 off */
    int chain_bulk;  /* policy R's register chains take full chunks by bulk copies (sm_90a binary): 0 off (cp.async) */
    int fwd_ws;      /* the forward pass's chain as the warp-specialized wgmma kernel (chain_ws.cu; sm_90a binary, bf16,
                      * K of 64 or 128, V = 128; by default in place of 128-column register chains): 1 on where it
                      * applies, 0 off */
    int chain_ws;    /* policy R's chains as the warp-specialized wgmma pair (chain_ws.cu; sm_90a binary, bf16, K of 64 or
                      * 128, V = 128; by default in place of 128-column register chains): 1 on where it applies (any
                      * grid), 0 off */
    int pb_ws;       /* the scalar-gate ReWY pullback as the warp-specialized wgmma kernel (pullback_ws.cu; sm_90a binary,
                      * bf16, K = V = 128; the default where it applies): 0 off (pullback_fast), 1 on where it applies */
    int rev_ws;      /* the reverse scan and the warp-specialized pullback as one fused kernel (reverse_ws.cu; where
                      * pb_ws runs, one key head per value head; the default on the large grids, over segments and in
                      * time windows): 0 off, 1 on where it applies */
    int seg;         /* policy R's sequence split (MATH §11d; segments.cu; by default where plan_segments's rule puts it):
                      * n > 0 chunks a segment where it applies (the fused reverse pass's shapes, policy R, no wgmma
                      * forward scan), 0 off; its time windows then run at once as segments */
    int rec_vt;      /* the value columns of that pass's recompute blocks: 64 or 128 (other values: the plan's) */
    int rev_pair;    /* that pass as two blocks a walk in time windows (by default where two blocks a sequence and head
                      * fit the SMs in one wave): 0 off, 1 on wherever windows run it */
} rewy_test_force;

static inline rewy_test_force rewy_test_force_none(void) {
    rewy_test_force f = {REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO,
                         REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO,
                         REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO,
                         REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO, REWY_TEST_AUTO};
    return f;
}

/* The plan's device facts and choices (common.cuh, Plan) for a config under force f (NULL: none), taken as a
 * size query takes them (pointers aligned): the tests assert that their forced choices reach the plan. */
typedef struct rewy_test_plan {
    int sms, wgmma;
    size_t smem_optin;
    int scan_bv, scan_8w, pair_8w, scan_wg, bwd_scan_wg, scan_wg2, fuse_output, scan_wu, beside_kkt, bwd_w, chain_bvc;
    int recurrent; /* the token recurrence instead of the chunk path (then the chunk path's choices above are 0) */
    int fwd_chain; /* the forward pass's register chain: value columns per block, 0: not */
    int win;       /* policy R's time windows: chunks per window, 0: none */
    int chain_bulk; /* policy R's register chains take full chunks by bulk copies */
    int fwd_ws;     /* the forward pass's chain as the warp-specialized kernel (then fwd_chain is 128) */
    int chain_ws;   /* policy R's chains as the warp-specialized pair (then chain_bvc is 128) */
    int pb_ws;      /* the scalar-gate ReWY pullback as the warp-specialized kernel (pullback_ws.cu) */
    int rev_ws;     /* the reverse scan and that pullback fused (reverse_ws.cu) */
    int seg;        /* the sequence split: the time windows (win chunks each) run at once as segments */
    int fwd_seg;    /* and the forward's: local walks, combine, the warp-specialized chain over all segments */
    int rev_rf;     /* the fused pass forms R from S_c (the recompute stores S_c alone) */
    int rec_vt;     /* the value columns of its recompute blocks */
    int rev_pair;   /* the fused pass as two blocks a walk (time windows) */
    size_t saved_bytes, fwd_bytes, bwd_bytes; /* the sizes of this plan's own layout (rewy_test_sizes: at least the
                                               * public query's) */
} rewy_test_plan;
rewy_status rewy_test_get_plan(const rewy_config *cfg, const rewy_test_force *f, rewy_test_plan *out);

/* rewy_saved_size, rewy_fwd_workspace_size and rewy_bwd_workspace_size of the plan with force f (NULL:
 * none), each at least the public query's (so that the public validation accepts the buffers). */
rewy_status rewy_test_sizes(const rewy_config *cfg, const rewy_test_force *f, size_t *saved, size_t *fwd,
                            size_t *bwd);
/* rewy_forward and rewy_backward with force f (NULL: none); the same validation (rewy_validate_fwd/_bwd).
 * Backend CUDA only (else REWY_ERR_BACKEND). */
rewy_status rewy_test_forward(const rewy_fwd_params *p, const rewy_test_force *f);
rewy_status rewy_test_backward(const rewy_bwd_params *p, const rewy_test_force *f);

#ifdef __cplusplus
}
#endif
#endif
