/* cuda_check.h: what the device tests (tests/cuda/) share: device memory for the accuracy harness
 * (src/check/check.c) and one case checked against the fp64 oracle. Include after cuda_runtime.h,
 * check/check.h and testutil.h. */
#ifndef REWY_TEST_CUDA_CHECK_H
#define REWY_TEST_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "check/check.h"
#include "cuda_force.h"
#include "testutil.h"

/* ------------------------------------------------------------------ device memory for the harness */
static inline void *d_alloc(void *u, size_t n) {
    (void)u;
    void *p = NULL;
    return cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : NULL;
}
static inline void d_free(void *u, void *p) { (void)u; cudaFree(p); }
static inline int d_up(void *u, void *dst, const void *src, size_t n) {
    (void)u;
    return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}
static inline int d_down(void *u, void *dst, const void *src, size_t n) {
    (void)u;
    return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}
/* the harness's calls with the environment's forced plan choices (cuda_force.h) */
static inline rewy_status d_sizes(void *u, const rewy_config *cfg, size_t *saved, size_t *fwd, size_t *bwd) {
    (void)u;
    return forced_sizes(cfg, saved, fwd, bwd);
}
static inline rewy_status d_forward(void *u, const rewy_fwd_params *p) { (void)u; return forced_forward(p); }
static inline rewy_status d_backward(void *u, const rewy_bwd_params *p) { (void)u; return forced_backward(p); }
/* (a function, not a static object: a test that does not use it would warn about an unused const) */
static inline const rewy_check_mem *device_mem(void) {
    static const rewy_check_mem m = {d_alloc, d_free, d_up, d_down, NULL, d_sizes, d_forward, d_backward};
    return &m;
}

/* fp32 inputs: WY and ReWY agree to a few 1e-3, not to fp32 rounding (1e-5): the products are tf32, and the
 * chunk intermediates between the kernels (S_c, S̄⁺, R, and P under ReWY where WY stores R̄) are bf16, whose
 * rounding (2⁻⁹ ≈ 2e-3 relative) the two algorithms take at different places. Their difference is therefore
 * bounded like each one's distance to the oracle: by the quantity's own MATH §10 bound (0.8 %, 2 % for the gate
 * gradients). A fixed 5e-3 failed ḡ and b̄ at 5.1e-3..8.1e-3 in the random campaign (session 19), where each
 * pullback alone was within its 2 % of the oracle. */

/* One case through the harness on the device (both pullbacks on one forward), every quantity against
 * its MATH §10 threshold; fp32 cases also WY against ReWY. verbose: one line per case; a failing case
 * prints its table to stderr. */
static inline void run_case(test_counts *tc, rewy_case c, int verbose) {
    rewy_check_result r;
    char desc[256];
    rewy_check_describe(&c, desc, sizeof desc);
    int failed_before = tc->failed;
    rewy_check_run(&c, device_mem(), &r);
    cudaError_t ce = cudaDeviceSynchronize();
    CHECK(tc, ce == cudaSuccess, "%s: CUDA error %s", desc, cudaGetErrorString(ce));
    cudaGetLastError();
    CHECK(tc, !r.harness_error, "%s: %s", desc, r.msg);
    CHECK(tc, r.fwd_status == REWY_OK && r.bwd_status[REWY_BWD_WY] == REWY_OK &&
              r.bwd_status[REWY_BWD_REWY] == REWY_OK, "%s: %s", desc, r.msg);
    double worst[REWY_RUN_COUNT] = {0, 0, 0};
    if (!r.harness_error && r.fwd_status == REWY_OK) {
        static const char *const run_names[REWY_RUN_COUNT] = {"forward", "WY", "ReWY"};
        for (int q = 0; q < REWY_Q_COUNT; q++) {
            if (!r.applies[q]) continue;
            for (int run = 0; run < REWY_RUN_COUNT; run++) {
                if ((run == REWY_RUN_FWD) != (q <= REWY_Q_HT)) continue;
                const rewy_check_err *e = &r.err[run][q];
                if (e->rel / r.tol[q] > worst[run]) worst[run] = e->rel / r.tol[q];
                CHECK(tc, e->pass, "%s: %s %s rel %.3e (tol %.1e), max abs %.3e, |ref| %.3e%s", desc,
                      run_names[run], rewy_check_qty_name((rewy_qty)q), e->rel, r.tol[q], e->max_abs,
                      e->ref_norm, e->finite ? "" : ", NOT FINITE");
            }
            if (q >= REWY_Q_DQ && c.dtype == REWY_F32)
                CHECK(tc, r.wy_vs_rewy[q] <= r.tol[q], "%s: WY vs ReWY %s differ by %.3e (bound %.1e)", desc,
                      rewy_check_qty_name((rewy_qty)q), r.wy_vs_rewy[q], r.tol[q]);
        }
        CHECK(tc, r.saved_intact, "%s: the backward modified the saved buffer", desc);
        CHECK(tc, r.floored_dg_nonzero == 0, "%s: %ld gradients of floored gates (below -30) are not 0", desc,
              r.floored_dg_nonzero);
    }
    if (verbose)
        printf("  %-60s worst err/tol: fwd %.2f  WY %.2f  ReWY %.2f%s\n", desc, worst[0], worst[1], worst[2],
               tc->failed != failed_before ? "  FAIL" : "");
    if (tc->failed != failed_before) rewy_check_print_table(stderr, &c, &r);
}

#endif
