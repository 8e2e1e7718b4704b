/* backend.h: the narrow interface between api.c and each backend (CPU: src/cpu/, CUDA: the host
 * side of src/cuda/). api.c validates every argument (types, pointers, shapes, cu_seqlens, the
 * caller's buffer sizes) and then reaches a backend only through its rewy_backend_ops. The saved
 * record and the checked size arithmetic below are what the backends share. Plain C, also
 * included from CUDA C++. */
#ifndef REWY_BACKEND_H
#define REWY_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "rewy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the saved buffer and of the forward and backward workspaces. */
typedef struct rewy_sizes { size_t saved, fwd, bwd; } rewy_sizes;

typedef struct rewy_backend_ops {
    /* Exact sizes for a validated config. A size that does not fit in size_t, or a shape beyond the
     * index range of the backend's kernels, gives REWY_ERR_BAD_SHAPE and a message naming the
     * limit (msg may be NULL): never a wrapped number. */
    rewy_status (*sizes)(const rewy_config *cfg, rewy_sizes *out, char *msg, size_t msg_len);
    rewy_status (*forward)(const rewy_fwd_params *p);
    rewy_status (*backward)(const rewy_bwd_params *p);
    /* Whether the saved buffer holds the record of a forward with this backward's config and
     * inputs: REWY_ERR_MISMATCH and a message saying what differs. A backend whose saved buffer
     * the host cannot read without a device sync (CUDA) returns REWY_OK here and makes the same
     * comparison on the device, inside backward (docs/DESIGN.md, "Forward/backward consistency"). */
    rewy_status (*check_saved)(const rewy_bwd_params *p, char *msg, size_t msg_len);
    /* rewy_l2norm_forward / _backward on validated arguments (rows > 0): dy == NULL is the forward
     * (x → out = y, and r into rstd unless NULL), else the backward (x = y, rstd = r, dy → out = dx). */
    rewy_status (*l2norm)(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                          const void *dy, void *out, void *stream);
    /* rewy_gate_forward (ws == NULL: g → y) / _backward (g, dy → dg and the sums, partials in ws) on
     * validated arguments; the forward only with rows > 0, the backward with any rows ≥ 0 (dy, dg NULL at 0) */
    rewy_status (*gate)(rewy_dtype dtype, int64_t rows, int heads, int dim, const void *g, const float *A_log,
                        const float *dt_bias, float *y, const float *dy, void *dg, float *dA_log, float *ddt_bias,
                        float *ws, void *stream);
} rewy_backend_ops;


const rewy_backend_ops *rewy_cpu_backend_ops(void);
const rewy_backend_ops *rewy_cuda_backend_ops(void); /* built in with REWY_WITH_CUDA only */

/* What the forward records at the start of its saved buffer (CPU) or in its own region (CUDA),
 * and the backward must match: the config as resolved (HV, chunk size, scale defaults applied),
 * whether h0 was given, and a hash of the cu_seqlens values (the backward plans its chunks from
 * its own cu_seqlens, so different boundaries would silently mix sequences). */
typedef struct rewy_saved_record {
    char magic[8];             /* "rewyCPU" / "rewyGPU" */
    int32_t op, dtype, B, T, H, HV, K, V, chunk_size, num_seqs, policy, state_v_first, has_h0;
    int32_t time_window;       /* CUDA's policy-R time windows (chunks each, 0: none; its plan's); 0 on the CPU */
    float scale;
    uint64_t seqlens_hash;     /* FNV-1a over cu_seqlens[0..num_seqs] as int32; 0 without cu_seqlens */
} rewy_saved_record;

/* cu: the host copy of the cu_seqlens values, NULL without varlen; time_window: the plan's (CUDA), 0 on the CPU. */
rewy_saved_record rewy_saved_record_of(const rewy_config *cfg, const int32_t *cu, int has_h0, int time_window,
                                       const char *magic);
/* 0 when the records are equal; else 1, with "<field> differs from the forward's (.. here, .. in
 * saved)" in msg (may be NULL). */
int rewy_saved_record_diff(const rewy_saved_record *fwd, const rewy_saved_record *bwd, char *msg, size_t msg_len);

/* Checked size arithmetic: a result that does not fit in size_t is SIZE_MAX, and SIZE_MAX stays
 * SIZE_MAX through later sums and products (operands are never 0 for a valid config), so a size
 * expression is exact or SIZE_MAX. */
static inline size_t rewy_sz_mul(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static inline size_t rewy_sz_add(size_t a, size_t b) {
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

#ifdef __cplusplus
}
#endif
#endif
