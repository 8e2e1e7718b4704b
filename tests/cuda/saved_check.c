/* saved_check.c: the CUDA backend's forward/backward consistency check (docs/DESIGN.md, "Backends
 * and forward/backward consistency"), on the device. Not a test_*.c of make test-cuda: a mismatch
 * traps and leaves the CUDA context unusable (and compute-sanitizer would report the trap), so each
 * case runs in its own child process and the parent reads its exit code.
 *
 *   matching backward (same cu_seqlens values in another array): runs, syncs clean;
 *   cu_seqlens values differ (same count and total, so every size is the same): the backward's
 *     first kernel traps, the sync reports an error; before the record this ran and gave wrong dk;
 *   h0 given to the forward only; scale differs: trap likewise;
 *   the forward planned policy R's time windows and the backward none (the test-only override; a rule that reads
 *     the SM count could do it on two GPUs): trap, instead of reading checkpoints that were never written.
 *
 * Run: make CUDA=1 BUILD=build/cuda-on build/cuda-on/tests/cuda/saved_check && build/cuda-on/tests/cuda/saved_check
 * Expect "5 passed, 0 failed" (and the device printf lines naming what differs). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "rewy.h"
#include "cuda/rewy_test.h"
#include "testutil.h"

enum { T0 = 70, H = 2, K0 = 32 };

static void *dev(size_t bytes, int byte) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) exit(3);
    cudaMemset(p, byte, bytes ? bytes : 16);
    return p;
}

/* mode 0: matching backward; 1: other cu_seqlens values; 2: h0 only in the forward; 3: other scale; 4: time windows
 * (one chunk each) in the forward's plan only, at T = 200 and K = V = 64, where windows apply.
 * Exit code: 0 = the backward ran and synced clean, 1 = it was refused (status or sync error), 3 = setup failed. */
static int child(int mode) {
    const int T = mode == 4 ? 200 : T0, K = mode == 4 ? 64 : K0, V = K;
    const int32_t cu_f[3] = {0, 30, T}, cu_b[3] = {0, 50, T};
    const int32_t *cu_back = mode == 1 ? cu_b : cu_f;
    rewy_test_force fwin = rewy_test_force_none(), fnone = rewy_test_force_none();
    fwin.win = mode == 4 ? 1 : REWY_TEST_AUTO;
    fnone.win = 0;
    rewy_config c;
    memset(&c, 0, sizeof c);
    c.op = REWY_OP_GDN;
    c.backend = REWY_BACKEND_CUDA;
    c.dtype = REWY_BF16;
    c.B = 1;
    c.T = T;
    c.H = H;
    c.K = K;
    c.V = V;
    c.num_seqs = 2;
    int32_t *dcu_f = dev(sizeof cu_f, 0), *dcu_b = dev(sizeof cu_f, 0);
    cudaMemcpy(dcu_f, cu_f, sizeof cu_f, cudaMemcpyHostToDevice);
    cudaMemcpy(dcu_b, cu_back, sizeof cu_f, cudaMemcpyHostToDevice);
    c.cu_seqlens = dcu_f;
    c.cu_seqlens_host = cu_f;
    size_t sb, fw, bw, bw0; /* the forward's plan's sizes (at least the public ones), and the backward's */
    if (rewy_test_sizes(&c, &fwin, &sb, &fw, &bw) || rewy_test_sizes(&c, &fnone, NULL, NULL, &bw0)) return 3;
    if (bw0 > bw) bw = bw0;
    const size_t nqk = (size_t)T * H * K * 2, nv = (size_t)T * H * V * 2, ns = (size_t)2 * H * K * V * 4;
    /* bf16 0x3c3c ≈ 0.0115 everywhere, log gates -0.0115·ln.. as fp32 bytes 0x3c3c3c3c negated below */
    void *q = dev(nqk, 0x3c), *k = dev(nqk, 0x3c), *v = dev(nv, 0x3c), *beta = dev((size_t)T * H * 2, 0x3c);
    float *g = dev((size_t)T * H * 4, 0xbc), *h0 = dev(ns, 0x3c), *dh0 = dev(ns, 0);
    void *o = dev(nv, 0), *do_ = dev(nv, 0x3c), *dq = dev(nqk, 0), *dk = dev(nqk, 0), *dv = dev(nv, 0);
    void *dbeta = dev((size_t)T * H * 2, 0);
    float *dg = dev((size_t)T * H * 4, 0);
    void *saved = dev(sb, 0), *fws = dev(fw, 0), *bws = dev(bw, 0);
    rewy_fwd_params f = {.cfg = c, .q = q, .k = k, .v = v, .g = g, .beta = beta, .h0 = h0, .o = o, .saved = saved,
                         .workspace = fws, .workspace_bytes = fw, .saved_bytes = sb};
    if (rewy_test_forward(&f, &fwin) || cudaDeviceSynchronize() != cudaSuccess) return 3;
    if (mode == 4) { /* the forward took the windows (else this case tests nothing) */
        rewy_test_plan pl;
        if (rewy_test_get_plan(&c, &fwin, &pl) || pl.win != 1) return 3;
    }
    rewy_bwd_params b = {.cfg = c, .q = q, .k = k, .v = v, .g = g, .beta = beta, .h0 = h0, .saved = saved,
                         .saved_bytes = sb, .do_ = do_, .dq = dq, .dk = dk, .dv = dv, .dg = dg, .dbeta = dbeta,
                         .dh0 = dh0, .workspace = bws, .workspace_bytes = bw};
    b.cfg.cu_seqlens = dcu_b;
    b.cfg.cu_seqlens_host = cu_back;
    if (mode == 2) b.h0 = NULL;
    if (mode == 3) b.cfg.scale = 0.5f;
    char msg[256] = "";
    rewy_status s = rewy_validate_bwd(&b, msg, sizeof msg);
    if (s) {
        fprintf(stderr, "mode %d: validate: %s\n", mode, msg);
        return 3;
    }
    /* The check kernel is the backward's first launch: after its trap the next launch already fails, so
     * rewy_backward itself returns REWY_ERR_BACKEND (seen on the H200), or, if every launch was queued
     * first, the sync reports the trap. Either is the backward refusing this saved buffer. */
    rewy_status bs = mode == 4 ? rewy_test_backward(&b, &fnone) : rewy_backward(&b);
    cudaError_t e = cudaDeviceSynchronize();
    fprintf(stderr, "mode %d: rewy_backward: %s; sync: %s\n", mode, rewy_strerror(bs), cudaGetErrorString(e));
    return bs == REWY_OK && e == cudaSuccess ? 0 : 1;
}

static int run_child(int mode) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(child(mode));
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

int main(void) {
    test_counts tc = {0, 0};
    if (!rewy_has_cuda()) {
        fprintf(stderr, "saved_check: this library has no CUDA backend\n");
        return 2;
    }
    static const char *names[] = {"matching backward", "other cu_seqlens values", "h0 only in the forward",
                                  "other scale", "time windows in the forward's plan only"};
    for (int mode = 0; mode < 5; mode++) {
        const int want = mode == 0 ? 0 : 1, got = run_child(mode);
        CHECK(&tc, got == want, "%s: child exit %d, want %d (0 = clean, 1 = the backward refused, 3 = setup)",
              names[mode], got, want);
    }
    return test_finish(&tc);
}
