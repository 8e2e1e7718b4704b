/* recurrent.cuh: the plain fp32 token recurrence (MATH §1) and its exact reverse mode on the GPU, the path the
 * plan takes for K < 16 (Plan::recurrent; docs/DESIGN.md, "Small K: the token recurrence"), for all four
 * operators. recurrent.cu has the kernels; recurrent_step.h the per-column arithmetic they share with the host
 * emulation (tests/cuda/emu_recurrent.cpp).
 *
 * One block per (sequence, value head), one thread per value column j (blockDim = V rounded up to 32, at most
 * 256), each holding its column S[:, j] of the state in registers.
 *   forward:  o, ht, and the state before every chunk of BT tokens (the config's chunk size) into the saved
 *             buffer as fp32 checkpoints [NC][HV][K][V] (chunk index from chunk_plan's per-sequence offsets).
 *   backward: chunks in reverse: the chunk's token states recomputed from its checkpoint into the workspace
 *             ([N·HV][BT][K][V], each thread its own column), then its tokens in reverse (recurrent_step.h). The
 *             per-token sums over the value columns (q̄, k̄, ē, ḡ, Σ w̄) go through warp shuffles and per-warp
 *             partials in shared memory, summed in warp order: no atomics, bitwise repeatable. With grouped
 *             value heads q̄, k̄ go to fp32 partials per value head and a second kernel sums each group in order.
 * Every tensor index is 64-bit (size_t). */
#ifndef REWY_CUDA_RECURRENT_CUH
#define REWY_CUDA_RECURRENT_CUH

#include "common.cuh"
#include "recurrent_step.h"

namespace rewy_cuda {

/* The recurrence for this config? K < REC_K_LIMIT, unless the test-only override says otherwise
 * (rewy_test_force::recurrent). No device query: record_at (cuda_backend.cu) asks it too. */
inline bool plan_recurrent(const rewy_config *c, const rewy_test_force &f) {
    if (f.recurrent != REWY_TEST_AUTO) return f.recurrent != 0;
    return c->K < REC_K_LIMIT;
}

/* Everything the two kernels read (NULL where not given or not the operator's). Layouts as in rewy.h. */
struct RecArgs {
    int op;                  /* rewy_op */
    int N, T, H, HV, K, V, BT, G; /* G = HV / H; T: per sequence (B batches) or the packed total (cu) */
    int svf;                 /* states [V][K] */
    float scale;
    const int32_t *cu;       /* cu_seqlens (device) or NULL: sequence n is tokens [n·T, n·T + T) */
    const int *coff;         /* chunk_plan's first chunk of each sequence [N+1] */
    const void *q, *k, *v, *beta, *b, *w;
    const float *g;
    const float *h0;
    float *ckpt;             /* fp32 [NC][HV][K][V]: the state before each chunk (saved) */
    /* forward */
    void *o;
    float *ht;
    /* backward */
    const void *do_;
    const float *dht;
    float *dh0;
    float *states;           /* workspace fp32 [N·HV][BT][K][V] */
    void *dq, *dk, *dv, *dbeta, *db, *dw;
    float *dg;
    float *accq, *acck;      /* G > 1: fp32 q̄, k̄ per value head [rows][HV][K] (workspace), else NULL */
};

/* Workspace bytes of the backward: the token states of one chunk per block, and the GVA partials. */
inline size_t rec_states_bytes(size_t N, size_t HV, size_t BT, size_t K, size_t V) { return sizeof(float) * N * HV * BT * K * V; }
inline size_t rec_acc_bytes(size_t rows, size_t HV, size_t K) { return 2 * sizeof(float) * rows * HV * K; }

cudaError_t launch_recurrent_forward(const RecArgs &a, rewy_dtype dt, cudaStream_t s);
cudaError_t launch_recurrent_backward(const RecArgs &a, rewy_dtype dt, cudaStream_t s);

} // namespace rewy_cuda
#endif
