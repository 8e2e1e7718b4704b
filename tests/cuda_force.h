/* cuda_force.h: the device tests' forced plan choices (src/cuda/rewy_test.h) from the REWY_CUDA_* variables
 * that `make test-cuda` and bench/dev/device_run.sh set (the library reads no environment; the tests do),
 * and the calls that pass them: rewy_test_sizes, rewy_test_forward, rewy_test_backward. Unset variables
 * leave the choice to the library's plan, so without any of them these calls are the public ones. */
#ifndef REWY_TEST_CUDA_FORCE_H
#define REWY_TEST_CUDA_FORCE_H

#include <stdlib.h>

#include "cuda/rewy_test.h"

static inline int env_force_int(const char *name) {
    const char *e = getenv(name);
    return e ? atoi(e) : REWY_TEST_AUTO;
}

/* Each variable is the force field of the same name (rewy_test.h says what each value does). */
static inline rewy_test_force env_force(void) {
    rewy_test_force f = rewy_test_force_none();
    f.scan_bv = env_force_int("REWY_CUDA_SCAN_BV");
    f.scan_8w = env_force_int("REWY_CUDA_SCAN_8W");
    f.scan_out = env_force_int("REWY_CUDA_SCAN_OUT");
    f.scan_wu = env_force_int("REWY_CUDA_SCAN_WU");
    f.scan_beside = env_force_int("REWY_CUDA_SCAN_BESIDE");
    f.scan_wf = env_force_int("REWY_CUDA_SCAN_WF");
    f.chain = env_force_int("REWY_CUDA_CHAIN");
    f.scan_wg = env_force_int("REWY_CUDA_SCAN_WG");
    f.scan_wg2 = env_force_int("REWY_CUDA_SCAN_WG2");
    f.recurrent = env_force_int("REWY_CUDA_RECURRENT");
    f.fwd_chain = env_force_int("REWY_CUDA_FWD_CHAIN");
    f.win = env_force_int("REWY_CUDA_WIN");
    f.chain_bulk = env_force_int("REWY_CUDA_CHAIN_BULK");
    f.fwd_ws = env_force_int("REWY_CUDA_FWD_WS");
    f.chain_ws = env_force_int("REWY_CUDA_CHAIN_WS");
    f.pb_ws = env_force_int("REWY_CUDA_PB_WS");
    f.rev_ws = env_force_int("REWY_CUDA_REV_WS");
    f.seg = env_force_int("REWY_CUDA_SEG");
    f.rec_vt = env_force_int("REWY_CUDA_REC_VT");
    f.rev_pair = env_force_int("REWY_CUDA_REV_PAIR");
    return f;
}

/* The size queries, forward and backward with the environment's forced choices. */
static inline rewy_status forced_sizes(const rewy_config *cfg, size_t *saved, size_t *fwd, size_t *bwd) {
    const rewy_test_force f = env_force();
    return rewy_test_sizes(cfg, &f, saved, fwd, bwd);
}
static inline rewy_status forced_forward(const rewy_fwd_params *p) {
    const rewy_test_force f = env_force();
    return rewy_test_forward(p, &f);
}
static inline rewy_status forced_backward(const rewy_bwd_params *p) {
    const rewy_test_force f = env_force();
    return rewy_test_backward(p, &f);
}

#endif
