/*
 * rewy.h: the public C API of rewy, delta-rule linear attention with the ReWY backward.
 *
 * Four operators share one recurrence (MATH.md §1). Per token t, per value head:
 *
 *     S⁻_t = Diag(exp g_t) S_{t-1}
 *     r_t  = w_t ⊙ v_t − S⁻_tᵀ (b_t ⊙ k_t)
 *     S_t  = S⁻_t + k_t r_tᵀ
 *     o_t  = S_tᵀ (scale · q_t)
 *
 *   operator          g (log decay, fp32)   b (erase)     w (write)
 *   REWY_OP_DELTANET  none (0)              β·1           β·1
 *   REWY_OP_GDN       [B,T,HV]  scalar      β·1           β·1
 *   REWY_OP_KDA       [B,T,HV,K] vector     β·1           β·1
 *   REWY_OP_GDN2      [B,T,HV,K] vector     b [B,T,HV,K]  w [B,T,HV,V]
 *
 * Layout is time-first as in FLA: q, k [B,T,H,K]; v, o [B,T,HV,V]; β [B,T,HV].
 * Value head hv reads query/key head hv / (HV/H) (grouped value heads, GVA).
 * States are fp32 [N,HV,K,V] (or [N,HV,V,K] with state_v_first), N = number of sequences.
 *
 * Calls: fill a rewy_fwd_params, ask rewy_saved_size and rewy_fwd_workspace_size, allocate,
 * call rewy_forward; later fill a rewy_bwd_params with the same config and the same saved
 * buffer, ask rewy_bwd_workspace_size, call rewy_backward. The library never allocates on
 * these paths. Every function returns a rewy_status; rewy_strerror gives its message, and
 * rewy_validate_fwd / rewy_validate_bwd write which argument failed and why.
 */
#ifndef REWY_H
#define REWY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility: only what this header marks REWY_API is exported
 * from librewy.so. A caller may predefine REWY_API (e.g. empty) before including this header. */
#ifndef REWY_API
#if defined(__GNUC__) || defined(__clang__)
#define REWY_API __attribute__((visibility("default")))
#else
#define REWY_API
#endif
#endif

#define REWY_VERSION_MAJOR 0
#define REWY_VERSION_MINOR 1
#define REWY_VERSION_PATCH 0
#define REWY_VERSION_STRING "0.1.0"

typedef enum rewy_status {
    REWY_OK = 0,
    REWY_ERR_NULL_POINTER,      /* a required pointer is NULL */
    REWY_ERR_MISALIGNED,        /* a pointer is not aligned to its element size (16 B for workspace) */
    REWY_ERR_BAD_SHAPE,         /* B, T, H, HV, K or V out of range, or HV % H != 0, or a size past
                                 * SIZE_MAX or the backend's index limits (the message names it) */
    REWY_ERR_UNSUPPORTED_DIM,   /* K or V above the maximum (256) */
    REWY_ERR_BAD_CHUNK,         /* chunk size not 16, 32 or 64 */
    REWY_ERR_BAD_DTYPE,         /* element type not bf16, fp16, fp32 or fp64, or fp64 on CUDA */
    REWY_ERR_BAD_OP,            /* unknown operator, or a gate given/missing for this operator */
    REWY_ERR_BAD_SEQLENS,       /* cu_seqlens not starting at 0, not increasing, or not ending at T; B != 1 */
    REWY_ERR_BAD_ENUM,          /* unknown policy, backward algorithm or backend */
    REWY_ERR_WORKSPACE,         /* workspace or saved buffer smaller than its size query */
    REWY_ERR_BACKEND,           /* backend not compiled in, or the device reported an error */
    REWY_ERR_MISMATCH,          /* backward config, h0 or cu_seqlens values differ from the forward that
                                 * wrote the saved buffer (CPU; CUDA checks on the device, see rewy_backward) */
    REWY_STATUS_COUNT
} rewy_status;

typedef enum rewy_op {
    REWY_OP_DELTANET = 0,
    REWY_OP_GDN = 1,
    REWY_OP_KDA = 2,
    REWY_OP_GDN2 = 3
} rewy_op;

/* Element type of q, k, v, β, b, w, o, do and of their gradients dq, dk, dv, dβ, db, dw.
 * With F32, BF16 and F16 the gates g, dg and all states (h0, ht, dht, dh0) are fp32.
 * REWY_F64 (CPU backend only; CUDA gets REWY_ERR_BAD_DTYPE): every array is double, the
 * gates g, dg and the states h0, ht, dht, dh0 too (pass double * where the structs below say
 * float *), so that torch.autograd.gradcheck can run in fp64. It is computed exactly by the
 * fp64 token recurrence of MATH §1 (the test oracle's), token by token, not by the chunk
 * kernels: meant for checking, not speed. chunk_size, policy and bwd_algo are accepted and
 * do not change the result; the saved buffer holds only a header. */
typedef enum rewy_dtype {
    REWY_F32 = 0,
    REWY_BF16 = 1,
    REWY_F16 = 2,
    REWY_F64 = 3
} rewy_dtype;

/* Saving policy (MATH §8). R: the forward saves A = M⁻¹ per chunk, the backward recomputes
 * W, U, chunk states and R (and, on CUDA, the vector gates' cumulative G). A: the forward also
 * saves chunk states and R; no recompute. */
typedef enum rewy_policy {
    REWY_POLICY_R = 0,
    REWY_POLICY_A = 1
} rewy_policy;

/* The local pullback of M R = Z − E S (MATH §4). */
typedef enum rewy_bwd_algo {
    REWY_BWD_REWY = 0,  /* 3 products: P = Aᵀ R̄, D = −𝓛_<(P Rᵀ), −P Sᵀ (default) */
    REWY_BWD_WY = 1     /* the conventional expanded WY graph, 7 products (§4a) */
} rewy_bwd_algo;

typedef enum rewy_backend {
    REWY_BACKEND_CPU = 0,   /* host pointers; fp32 chunk kernels, CBLAS, OpenMP */
    REWY_BACKEND_CUDA = 1   /* device pointers; stream is a cudaStream_t */
} rewy_backend;

/* What the forward and the backward must agree on. Zero-initialise, then set. */
typedef struct rewy_config {
    rewy_op op;
    rewy_backend backend;
    rewy_dtype dtype;           /* element type, see rewy_dtype */
    int B, T, H, HV, K, V;      /* HV = 0 means HV = H */
    int chunk_size;             /* 16, 32 or 64; 0 means 64 */
    float scale;                /* query scale; 0 means K^-1/2 */
    /* Packed variable-length sequences: cu_seqlens[0..num_seqs] = 0 < ... = T, B must be 1.
     * cu_seqlens lives in backend memory; cu_seqlens_host is an optional host copy
     * (the CUDA backend needs it to plan without a device sync; CPU may leave it NULL). */
    const int32_t *cu_seqlens;
    const int32_t *cu_seqlens_host;
    int num_seqs;               /* number of sequences when cu_seqlens is given */
    rewy_policy policy;
    rewy_bwd_algo bwd_algo;
    int state_v_first;          /* nonzero: states are [.., V, K] instead of [.., K, V] */
    void *stream;               /* CUDA stream (cudaStream_t), NULL = default stream */
} rewy_config;

typedef struct rewy_fwd_params {
    rewy_config cfg;
    /* inputs */
    const void *q;              /* [B,T,H,K]   dtype */
    const void *k;              /* [B,T,H,K]   dtype */
    const void *v;              /* [B,T,HV,V]  dtype */
    const float *g;             /* GDN [B,T,HV]; KDA/GDN2 [B,T,HV,K]; DeltaNet NULL. Natural log, per token */
    const void *beta;           /* [B,T,HV] dtype; DeltaNet/GDN/KDA; NULL for GDN2 */
    const void *b;              /* GDN2 erase gate [B,T,HV,K] dtype; NULL otherwise */
    const void *w;              /* GDN2 write gate [B,T,HV,V] dtype; NULL otherwise */
    const float *h0;            /* optional initial state [N,HV,K,V] fp32 (N = B, or num_seqs) */
    /* outputs */
    void *o;                    /* [B,T,HV,V] dtype */
    float *ht;                  /* optional final state [N,HV,K,V] fp32 */
    void *saved;                /* rewy_saved_size bytes; read by rewy_backward */
    void *workspace;            /* rewy_fwd_workspace_size bytes, 16 B aligned */
    size_t workspace_bytes;
    size_t saved_bytes;
} rewy_fwd_params;

typedef struct rewy_bwd_params {
    rewy_config cfg;            /* must equal the forward's */
    /* the forward's inputs, unchanged */
    const void *q, *k, *v;
    const float *g;
    const void *beta, *b, *w;
    const float *h0;
    const void *saved;          /* what rewy_forward wrote */
    size_t saved_bytes;
    /* incoming gradients */
    const void *do_;            /* [B,T,HV,V] dtype */
    const float *dht;           /* optional final-state gradient [N,HV,K,V] fp32 */
    /* gradients out (each written whole; NULL only where the input is NULL; none may overlap an input: the CUDA
     * backward may keep scratch in dq before it writes dq) */
    void *dq, *dk;              /* [B,T,H,K] dtype (summed over each value-head group) */
    void *dv;                   /* [B,T,HV,V] dtype */
    float *dg;                  /* like g, fp32, w.r.t. the per-token natural-log g */
    void *dbeta;                /* [B,T,HV] dtype */
    void *db, *dw;              /* GDN2 [B,T,HV,K], [B,T,HV,V] dtype */
    float *dh0;                 /* [N,HV,K,V] fp32; required when h0 is given, optional (gradient at a zero state) otherwise */
    void *workspace;            /* rewy_bwd_workspace_size bytes, 16 B aligned */
    size_t workspace_bytes;
} rewy_bwd_params;

/* Size queries: validate the config and report bytes (never allocate). */
REWY_API rewy_status rewy_saved_size(const rewy_config *cfg, size_t *bytes);
REWY_API rewy_status rewy_fwd_workspace_size(const rewy_config *cfg, size_t *bytes);
REWY_API rewy_status rewy_bwd_workspace_size(const rewy_config *cfg, size_t *bytes);

REWY_API rewy_status rewy_forward(const rewy_fwd_params *p);
/* The saved buffer records the forward's config, whether h0 was given and a hash of the cu_seqlens
 * values; a backward that differs gets REWY_ERR_MISMATCH naming what differs (CPU). On CUDA the
 * record is device memory and reading it would cost a sync: the backward's first kernel compares
 * it, and on a difference prints what differs and traps, so the stream reports a launch error at
 * the next synchronisation and no gradient is computed from the wrong saved buffer. */
REWY_API rewy_status rewy_backward(const rewy_bwd_params *p);

/* Check every argument as the call would, without running anything. On failure, msg (if not
 * NULL) receives a one-line description of the first bad argument, e.g. "T must be > 0 (got 0)". */
REWY_API rewy_status rewy_validate_fwd(const rewy_fwd_params *p, char *msg, size_t msg_len);
REWY_API rewy_status rewy_validate_bwd(const rewy_bwd_params *p, char *msg, size_t msg_len);

/* Local-pullback arithmetic per chunk and head (MATH §9), in FLOP (multiply-add = 2). */
REWY_API double rewy_pullback_flops(rewy_bwd_algo algo, int n, int K, int V);

/* Element conversion for C callers that prepare inputs or read outputs in bf16 or fp16: n
 * elements of src_dtype at src are written as dst_dtype at dst (host memory; dst and src must not
 * overlap unless they are the same array of the same type). bf16 and fp16 values are their bit
 * patterns as uint16_t. fp32 to bf16/fp16 rounds to nearest, ties to even (the library's own
 * rounding), with subnormals kept, values beyond fp16's range becoming ±inf, and NaN staying
 * a (quiet) NaN; bf16/fp16 to fp32 is exact; bf16 <-> fp16 rounds once. Each pointer must be
 * aligned to its element size; NULL is accepted when n is 0. REWY_F64 is not converted here
 * (REWY_ERR_BAD_DTYPE). Example, a float array to bf16:
 *     uint16_t *x16 = malloc(n * sizeof *x16);
 *     rewy_status s = rewy_convert(REWY_BF16, x16, REWY_F32, x, n); */
REWY_API rewy_status rewy_convert(rewy_dtype dst_dtype, void *dst, rewy_dtype src_dtype, const void *src,
                                  size_t n);

/* Row-wise l2 normalisation, FLA's use_qk_l2norm_in_kernel as a pass of its own (callers that
 * normalise q and k before rewy_forward; the Python functions do, where FLA fuses it): each of
 * `rows` rows of `dim` contiguous elements becomes
 *     y = x · r,   r = 1 / sqrt(Σ x² + eps)
 * accumulated in fp32 (fp64 for REWY_F64, CPU only) and rounded once to dtype; rstd (optional,
 * fp32 [rows], double for REWY_F64) receives r. The backward takes the forward's output y and r
 * (so that a caller keeps the normalised rows it passes on anyway, not the raw ones) and the
 * gradient dy of y:
 *     dx = r · (dy − y · (y · dy))
 * An output may be one of the inputs (in place). backend and stream as in rewy_config; rows = 0
 * does nothing. eps must be finite and ≥ 0 (FLA uses 1e-6). */
REWY_API rewy_status rewy_l2norm_forward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int dim, float eps,
                                         const void *x, void *y, void *rstd, void *stream);
REWY_API rewy_status rewy_l2norm_backward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int dim,
                                          const void *y, const void *rstd, const void *dy, void *dx, void *stream);

/* FLA's in-kernel gate (use_gate_in_kernel with A_log and no lower_bound) as a pass of its own, for the
 * log gate g of rewy_forward (the Python functions call it; FLA fuses it). Over `rows` rows of `heads` ×
 * `dim` contiguous elements ([B·T][HV][K] for KDA and GDN2; dim = 1 for GDN's [B·T][HV]):
 *     y = −exp(A_log[h]) · softplus(x),   x = g + dt_bias[h][k]   (softplus(x) = x where x > 20, as torch's)
 * computed in fp32: g in dtype (fp32, bf16 or fp16), A_log fp32 [heads], dt_bias fp32 [heads][dim] or NULL
 * (no bias), y fp32. The backward recomputes x from g and takes dy = ∂L/∂y (fp32):
 *     dg = dy · (−exp(A_log[h])) · σ(x)                    (rounded to dtype)
 *     dA_log[h] = Σ_{rows, k} dy · y,   ddt_bias[h][k] = Σ_rows dy · (−exp(A_log[h])) · σ(x)
 * each sum in fp32, in an order fixed by the shape (bitwise repeatable). dA_log and ddt_bias may be NULL
 * (not wanted); dg may not alias dy. The backward needs a scratch of rewy_gate_workspace_size bytes
 * (16-byte aligned; partial sums over fixed slices of the rows). backend and stream as in rewy_config;
 * rows = 0 gives dA_log = ddt_bias = 0. REWY_F64 is not accepted (REWY_ERR_BAD_DTYPE). */
REWY_API rewy_status rewy_gate_forward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int heads, int dim,
                                       const void *g, const float *A_log, const float *dt_bias, float *y,
                                       void *stream);
REWY_API rewy_status rewy_gate_workspace_size(int64_t rows, int heads, int dim, size_t *bytes);
REWY_API rewy_status rewy_gate_backward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int heads, int dim,
                                        const void *g, const float *A_log, const float *dt_bias, const float *dy,
                                        void *dg, float *dA_log, float *ddt_bias, void *workspace,
                                        size_t workspace_bytes, void *stream);

REWY_API const char *rewy_strerror(rewy_status s);
REWY_API const char *rewy_version(void);
/* Nonzero when the CUDA backend was compiled into this library. */
REWY_API int rewy_has_cuda(void);

#ifdef __cplusplus
}
#endif
#endif /* REWY_H */
