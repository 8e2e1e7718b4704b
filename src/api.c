/* api.c: argument validation, size queries and dispatch to the CPU or CUDA backend.
 * Every check names the argument it rejects; the backends assume a valid call. A backend is
 * reached only through its rewy_backend_ops (backend.h): sizes, forward, backward and the check
 * of its saved record. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rewy.h"
#include "backend.h"
#include "dtype.h"
#include "gates.h"

#define REWY_MAX_DIM 256

const char *rewy_version(void) { return REWY_VERSION_STRING; }

int rewy_has_cuda(void) {
#ifdef REWY_WITH_CUDA
    return 1;
#else
    return 0;
#endif
}

const char *rewy_strerror(rewy_status s) {
    switch (s) {
    case REWY_OK: return "success";
    case REWY_ERR_NULL_POINTER: return "a required pointer is NULL";
    case REWY_ERR_MISALIGNED: return "a pointer is not aligned to its element size";
    case REWY_ERR_BAD_SHAPE: return "invalid shape (B, T, H, HV, K, V must be positive and HV a multiple of H; sizes within the backend's limits)";
    case REWY_ERR_UNSUPPORTED_DIM: return "unsupported head dimension (K and V must be at most 256)";
    case REWY_ERR_BAD_CHUNK: return "unsupported chunk size (16, 32 or 64)";
    case REWY_ERR_BAD_DTYPE: return "unsupported element type (bf16, fp16, fp32; fp64 on the CPU backend only)";
    case REWY_ERR_BAD_OP: return "unknown operator, or gate tensors that do not match the operator";
    case REWY_ERR_BAD_SEQLENS: return "invalid cu_seqlens (must start at 0, increase strictly and end at T, with B = 1)";
    case REWY_ERR_BAD_ENUM: return "unknown policy, backward algorithm or backend";
    case REWY_ERR_WORKSPACE: return "workspace or saved buffer smaller than its size query";
    case REWY_ERR_BACKEND: return "backend unavailable or failed";
    case REWY_ERR_MISMATCH: return "backward config differs from the forward that wrote the saved buffer";
    default: return "unknown status";
    }
}

double rewy_pullback_flops(rewy_bwd_algo algo, int n, int K, int V) {
    double N = n, k = K, v = V;
    if (algo == REWY_BWD_WY) /* §9: 2nKV + 2n²V + 2n²K + 4n³ + 2n²V + 2n²K */
        return 2 * N * k * v + 2 * N * N * v + 2 * N * N * k + 4 * N * N * N + 2 * N * N * v + 2 * N * N * k;
    return 2 * N * N * v + 2 * N * N * v + 2 * N * k * v; /* §9: 2n²V + 2n²V + 2nKV */
}

/* --- validation ------------------------------------------------------------------- */

typedef struct err { char *msg; size_t len; } err;

static rewy_status fail(err e, rewy_status s, const char *fmt, ...) {
    if (e.msg && e.len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e.msg, e.len, fmt, ap);
        va_end(ap);
    }
    return s;
}

static int misaligned(const void *ptr, size_t align) { return ((uintptr_t)ptr % align) != 0; }

/* Every tensor's byte size fits in size_t, so that every element offset does (64-bit sizes
 * throughout; the backends add their own index limits in their size queries). */
static rewy_status check_extent(const rewy_config *c, err e) {
    const size_t HV = (size_t)(c->HV ? c->HV : c->H), tok = (size_t)c->B * (size_t)c->T; /* < 2^62 */
    const size_t N = c->cu_seqlens ? (size_t)c->num_seqs : (size_t)c->B;
    const size_t el = c->dtype == REWY_F64 ? 8 : c->dtype == REWY_F32 ? 4 : 2, gl = c->dtype == REWY_F64 ? 8 : 4;
    const struct { const char *name; size_t bytes; } t[] = {
        {"q, k: B*T*H*K", rewy_sz_mul(rewy_sz_mul(tok, (size_t)c->H), (size_t)c->K * el)},
        {"v, o: B*T*HV*V", rewy_sz_mul(rewy_sz_mul(tok, HV), (size_t)c->V * el)},
        {"g, b: B*T*HV*K", rewy_sz_mul(rewy_sz_mul(tok, HV), (c->op == REWY_OP_GDN ? 1 : (size_t)c->K) * (el > gl ? el : gl))},
        {"states: N*HV*K*V", rewy_sz_mul(rewy_sz_mul(N, HV), (size_t)c->K * c->V * gl)}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].bytes == SIZE_MAX)
            return fail(e, REWY_ERR_BAD_SHAPE, "problem too large: %s elements need more than SIZE_MAX bytes", t[i].name);
    return REWY_OK;
}

static rewy_status check_config(const rewy_config *c, err e) {
    if (!c) return fail(e, REWY_ERR_NULL_POINTER, "params must not be NULL");
    if ((unsigned)c->op > REWY_OP_GDN2) return fail(e, REWY_ERR_BAD_OP, "op: unknown operator %d", (int)c->op);
    if ((unsigned)c->backend > REWY_BACKEND_CUDA)
        return fail(e, REWY_ERR_BAD_ENUM, "backend: unknown backend %d", (int)c->backend);
    if ((unsigned)c->dtype > REWY_F64)
        return fail(e, REWY_ERR_BAD_DTYPE, "dtype: unknown element type %d (bf16, fp16, fp32 or fp64)", (int)c->dtype);
    if (c->dtype == REWY_F64 && c->backend != REWY_BACKEND_CPU)
        return fail(e, REWY_ERR_BAD_DTYPE, "dtype: REWY_F64 runs on the CPU backend only (CUDA takes fp32, bf16 or fp16)");
    if ((unsigned)c->policy > REWY_POLICY_A)
        return fail(e, REWY_ERR_BAD_ENUM, "policy: unknown saving policy %d (R or A)", (int)c->policy);
    if ((unsigned)c->bwd_algo > REWY_BWD_WY)
        return fail(e, REWY_ERR_BAD_ENUM, "bwd_algo: unknown backward algorithm %d", (int)c->bwd_algo);
    const struct { const char *name; int v; } dims[] = {
        {"B", c->B}, {"T", c->T}, {"H", c->H}, {"K", c->K}, {"V", c->V}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v <= 0) return fail(e, REWY_ERR_BAD_SHAPE, "%s must be > 0 (got %d)", dims[i].name, dims[i].v);
    if (c->HV < 0) return fail(e, REWY_ERR_BAD_SHAPE, "HV must be >= 0 (got %d; 0 means HV = H)", c->HV);
    int HV = c->HV ? c->HV : c->H;
    if (HV % c->H)
        return fail(e, REWY_ERR_BAD_SHAPE, "HV (%d) must be a multiple of H (%d)", HV, c->H);
    if (c->K > REWY_MAX_DIM || c->V > REWY_MAX_DIM)
        return fail(e, REWY_ERR_UNSUPPORTED_DIM, "K and V must be at most %d (got K=%d, V=%d)", REWY_MAX_DIM, c->K, c->V);
    if (c->chunk_size != 0 && c->chunk_size != 16 && c->chunk_size != 32 && c->chunk_size != 64)
        return fail(e, REWY_ERR_BAD_CHUNK, "chunk_size must be 16, 32 or 64 (got %d)", c->chunk_size);
    if (!isfinite(c->scale)) return fail(e, REWY_ERR_BAD_SHAPE, "scale must be finite");
    if (c->cu_seqlens || c->cu_seqlens_host) {
        if (!c->cu_seqlens) return fail(e, REWY_ERR_NULL_POINTER, "cu_seqlens_host given without cu_seqlens");
        if (c->B != 1) return fail(e, REWY_ERR_BAD_SEQLENS, "B must be 1 with cu_seqlens (got %d)", c->B);
        if (c->num_seqs <= 0) return fail(e, REWY_ERR_BAD_SEQLENS, "num_seqs must be > 0 with cu_seqlens (got %d)", c->num_seqs);
        if (misaligned(c->cu_seqlens, 4) || (c->cu_seqlens_host && misaligned(c->cu_seqlens_host, 4)))
            return fail(e, REWY_ERR_MISALIGNED, "cu_seqlens must be 4-byte aligned");
        const int32_t *cu = c->cu_seqlens_host;
        if (!cu && c->backend == REWY_BACKEND_CPU) cu = c->cu_seqlens;
        if (!cu) return fail(e, REWY_ERR_NULL_POINTER, "cu_seqlens_host is required with the CUDA backend");
        if (cu[0] != 0) return fail(e, REWY_ERR_BAD_SEQLENS, "cu_seqlens[0] must be 0 (got %d)", cu[0]);
        for (int i = 0; i < c->num_seqs; i++)
            if (cu[i + 1] <= cu[i])
                return fail(e, REWY_ERR_BAD_SEQLENS, "cu_seqlens must increase strictly (cu_seqlens[%d]=%d, cu_seqlens[%d]=%d)",
                            i, cu[i], i + 1, cu[i + 1]);
        if (cu[c->num_seqs] != c->T)
            return fail(e, REWY_ERR_BAD_SEQLENS, "cu_seqlens must end at T=%d (got %d)", c->T, cu[c->num_seqs]);
    }
    if (c->backend == REWY_BACKEND_CUDA && !rewy_has_cuda())
        return fail(e, REWY_ERR_BACKEND, "backend: this library was built without CUDA (rebuild with make CUDA=1)");
    return check_extent(c, e);
}

/* required: must be non-NULL; allowed: may be non-NULL for this op; gate: a missing one is
 * an operator mismatch (REWY_ERR_BAD_OP), not a plain NULL pointer. */
typedef struct tensor_arg { const char *name; const void *ptr; size_t align; int required, allowed, gate; } tensor_arg;

/* Each tensor: required → non-NULL; not allowed for this op → must be NULL; aligned. */
static rewy_status check_tensors(const rewy_config *c, const tensor_arg *t, int n, err e) {
    static const char *ops[] = {"DeltaNet", "GDN", "KDA", "GDN2"};
    for (int i = 0; i < n; i++) {
        if (!t[i].allowed && t[i].ptr)
            return fail(e, REWY_ERR_BAD_OP, "%s must be NULL for %s", t[i].name, ops[c->op]);
        if (t[i].required && !t[i].ptr && t[i].gate)
            return fail(e, REWY_ERR_BAD_OP, "%s is required for %s", t[i].name, ops[c->op]);
        if (t[i].required && !t[i].ptr)
            return fail(e, REWY_ERR_NULL_POINTER, "%s must not be NULL", t[i].name);
        if (t[i].ptr && misaligned(t[i].ptr, t[i].align))
            return fail(e, REWY_ERR_MISALIGNED, "%s must be %zu-byte aligned", t[i].name, t[i].align);
    }
    return REWY_OK;
}

static size_t elem(const rewy_config *c) { return c->dtype == REWY_F64 ? 8 : c->dtype == REWY_F32 ? 4 : 2; }
/* Gates (g, dg) and states (h0, ht, dht, dh0): fp32, or double with REWY_F64. */
static size_t gate_elem(const rewy_config *c) { return c->dtype == REWY_F64 ? 8 : 4; }

/* The backend of a checked config (check_config has refused CUDA where it is not built in). */
static const rewy_backend_ops *ops_of(const rewy_config *c) {
#ifdef REWY_WITH_CUDA
    if (c->backend == REWY_BACKEND_CUDA) return rewy_cuda_backend_ops();
#endif
    (void)c;
    return rewy_cpu_backend_ops();
}

static rewy_status sizes(const rewy_config *c, rewy_sizes *out, err e) {
    return ops_of(c)->sizes(c, out, e.msg, e.len);
}

/* The forward's inputs, checked alike by both calls. */
static rewy_status check_inputs(const rewy_config *c, const void *q, const void *k, const void *v, const float *g,
                                const void *beta, const void *b, const void *w, const float *h0, err e) {
    const int gated = c->op != REWY_OP_DELTANET, gdn2 = c->op == REWY_OP_GDN2;
    const size_t el = elem(c), gl = gate_elem(c);
    const tensor_arg t[] = {
        {"q", q, el, 1, 1, 0}, {"k", k, el, 1, 1, 0}, {"v", v, el, 1, 1, 0},
        {"g", g, gl, gated, gated, 1}, {"beta", beta, el, !gdn2, !gdn2, 1},
        {"b", b, el, gdn2, gdn2, 1}, {"w", w, el, gdn2, gdn2, 1}, {"h0", h0, gl, 0, 1, 0}};
    return check_tensors(c, t, (int)(sizeof t / sizeof t[0]), e);
}

/* saved and workspace against their size queries; `pass` 1 = forward, 2 = backward. */
static rewy_status check_sizes(const rewy_config *c, size_t saved_bytes, size_t ws_bytes, int pass, err e) {
    rewy_sizes need;
    rewy_status s = sizes(c, &need, e);
    if (s) return s;
    const size_t ws_need = pass == 1 ? need.fwd : need.bwd;
    if (saved_bytes < need.saved)
        return fail(e, REWY_ERR_WORKSPACE, "saved_bytes %zu < rewy_saved_size %zu", saved_bytes, need.saved);
    if (ws_bytes < ws_need)
        return fail(e, REWY_ERR_WORKSPACE, "workspace_bytes %zu < rewy_%s_workspace_size %zu", ws_bytes,
                    pass == 1 ? "fwd" : "bwd", ws_need);
    return REWY_OK;
}

static rewy_status validate_fwd(const rewy_fwd_params *p, err e) {
    if (!p) return fail(e, REWY_ERR_NULL_POINTER, "params must not be NULL");
    const rewy_config *c = &p->cfg;
    rewy_status s = check_config(c, e);
    if (!s) s = check_inputs(c, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0, e);
    if (s) return s;
    const size_t el = elem(c);
    const tensor_arg t[] = {
        {"o", p->o, el, 1, 1, 0}, {"ht", p->ht, gate_elem(c), 0, 1, 0},
        {"saved", p->saved, 16, 1, 1, 0}, {"workspace", p->workspace, 16, 1, 1, 0}};
    if ((s = check_tensors(c, t, (int)(sizeof t / sizeof t[0]), e))) return s;
    return check_sizes(c, p->saved_bytes, p->workspace_bytes, 1, e);
}

static rewy_status validate_bwd(const rewy_bwd_params *p, err e) {
    if (!p) return fail(e, REWY_ERR_NULL_POINTER, "params must not be NULL");
    const rewy_config *c = &p->cfg;
    rewy_status s = check_config(c, e);
    if (!s) s = check_inputs(c, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0, e);
    if (s) return s;
    const int gated = c->op != REWY_OP_DELTANET, gdn2 = c->op == REWY_OP_GDN2;
    const size_t el = elem(c), gl = gate_elem(c);
    const tensor_arg t[] = {
        {"saved", p->saved, 16, 1, 1, 0}, {"do_", p->do_, el, 1, 1, 0}, {"dht", p->dht, gl, 0, 1, 0},
        {"dq", p->dq, el, 1, 1, 0}, {"dk", p->dk, el, 1, 1, 0}, {"dv", p->dv, el, 1, 1, 0},
        {"dg", p->dg, gl, gated, gated, 0}, {"dbeta", p->dbeta, el, !gdn2, !gdn2, 0},
        {"db", p->db, el, gdn2, gdn2, 0}, {"dw", p->dw, el, gdn2, gdn2, 0},
        {"dh0", p->dh0, gl, p->h0 != NULL, 1, 0}, {"workspace", p->workspace, 16, 1, 1, 0}};
    if ((s = check_tensors(c, t, (int)(sizeof t / sizeof t[0]), e))) return s;
    if ((s = check_sizes(c, p->saved_bytes, p->workspace_bytes, 2, e))) return s;
    return ops_of(c)->check_saved(p, e.msg, e.len);
}

/* --- public entry points ------------------------------------------------------------ */

rewy_status rewy_validate_fwd(const rewy_fwd_params *p, char *msg, size_t msg_len) {
    err e = {msg, msg_len};
    if (msg && msg_len) msg[0] = '\0';
    return validate_fwd(p, e);
}

rewy_status rewy_validate_bwd(const rewy_bwd_params *p, char *msg, size_t msg_len) {
    err e = {msg, msg_len};
    if (msg && msg_len) msg[0] = '\0';
    return validate_bwd(p, e);
}

static rewy_status size_query(const rewy_config *cfg, size_t *bytes, int which) {
    err none = {NULL, 0};
    if (!bytes) return REWY_ERR_NULL_POINTER;
    rewy_status s = check_config(cfg, none);
    if (s) return s;
    rewy_sizes v;
    if ((s = sizes(cfg, &v, none))) return s;
    *bytes = which == 0 ? v.saved : which == 1 ? v.fwd : v.bwd;
    return REWY_OK;
}

rewy_status rewy_saved_size(const rewy_config *cfg, size_t *bytes) { return size_query(cfg, bytes, 0); }
rewy_status rewy_fwd_workspace_size(const rewy_config *cfg, size_t *bytes) { return size_query(cfg, bytes, 1); }
rewy_status rewy_bwd_workspace_size(const rewy_config *cfg, size_t *bytes) { return size_query(cfg, bytes, 2); }

rewy_status rewy_forward(const rewy_fwd_params *p) {
    err none = {NULL, 0};
    rewy_status s = validate_fwd(p, none);
    if (s) return s;
    return ops_of(&p->cfg)->forward(p);
}

rewy_status rewy_backward(const rewy_bwd_params *p) {
    err none = {NULL, 0};
    rewy_status s = validate_bwd(p, none);
    if (s) return s;
    return ops_of(&p->cfg)->backward(p);
}

/* The operations of a transform's backend (l2norm, gate), or NULL with *s saying why: an unknown backend, or
 * CUDA in a build without it. */
static const rewy_backend_ops *transform_backend(rewy_backend backend, rewy_status *s) {
    *s = REWY_OK;
    if (backend != REWY_BACKEND_CPU && backend != REWY_BACKEND_CUDA) *s = REWY_ERR_BAD_ENUM;
#ifndef REWY_WITH_CUDA
    else if (backend == REWY_BACKEND_CUDA) *s = REWY_ERR_BACKEND;
#endif
    if (*s) return NULL;
    rewy_config c;
    memset(&c, 0, sizeof c);
    c.backend = backend;
    return ops_of(&c);
}

/* rewy_l2norm_forward / _backward: the arguments, then the backend (rows = 0 does nothing).
 * Forward: x → out (y), rstd optional. Backward: x = y, rstd required, dy → out (dx). */
static rewy_status l2norm_call(rewy_backend backend, rewy_dtype dtype, int64_t rows, int dim, float eps,
                               const void *x, void *rstd, const void *dy, void *out, void *stream) {
    rewy_status s;
    const rewy_backend_ops *ops = transform_backend(backend, &s);
    if (s) return s;
    if (dtype != REWY_F32 && dtype != REWY_BF16 && dtype != REWY_F16 && !(dtype == REWY_F64 && backend == REWY_BACKEND_CPU))
        return REWY_ERR_BAD_DTYPE;
    const size_t el = rewy_dtype_size(dtype), rl = dtype == REWY_F64 ? 8 : 4;
    /* rows·dim·el within size_t keeps every element offset below 2^63 too (el ≥ 2) */
    if (rows < 0 || dim < 1 || rewy_sz_mul(rewy_sz_mul((size_t)rows, (size_t)dim), el) == SIZE_MAX)
        return REWY_ERR_BAD_SHAPE;
    if (!(eps >= 0.0f) || isinf(eps)) return REWY_ERR_BAD_SHAPE;
    if (rows == 0) return REWY_OK;
    if (!x || !out || (dy && !rstd)) return REWY_ERR_NULL_POINTER;
    if (misaligned(x, el) || misaligned(out, el) || (dy && misaligned(dy, el)) || (rstd && misaligned(rstd, rl)))
        return REWY_ERR_MISALIGNED;
    return ops->l2norm(dtype, rows, dim, eps, x, rstd, dy, out, stream);
}

rewy_status rewy_l2norm_forward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int dim, float eps,
                                const void *x, void *y, void *rstd, void *stream) {
    return l2norm_call(backend, dtype, rows, dim, eps, x, rstd, NULL, y, stream);
}

rewy_status rewy_l2norm_backward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int dim, const void *y,
                                 const void *rstd, const void *dy, void *dx, void *stream) {
    if (!dy && rows > 0) return REWY_ERR_NULL_POINTER;
    /* (the backend reads rstd in the backward; one table entry serves both directions) */
    return l2norm_call(backend, dtype, rows, dim, 0.0f, y, (void *)(uintptr_t)rstd, dy, dx, stream);
}

/* rewy_gate_*: the shape (rows ≥ 0, heads and dim ≥ 1, the fp32 tables' bytes within size_t, which keeps
 * every element offset below 2^63) and the element type. */
static rewy_status gate_shape(rewy_dtype dtype, int64_t rows, int heads, int dim) {
    if (dtype != REWY_F32 && dtype != REWY_BF16 && dtype != REWY_F16) return REWY_ERR_BAD_DTYPE;
    if (rows < 0 || heads < 1 || dim < 1) return REWY_ERR_BAD_SHAPE;
    const size_t cols = rewy_sz_mul((size_t)heads, (size_t)dim);
    if (rewy_sz_mul(rewy_sz_mul((size_t)rows, cols), sizeof(float)) == SIZE_MAX ||
        rewy_sz_mul(rewy_sz_mul(cols, (size_t)REWY_GATE_MAX_SLICES), 2 * sizeof(float)) == SIZE_MAX)
        return REWY_ERR_BAD_SHAPE;
    return REWY_OK;
}

rewy_status rewy_gate_workspace_size(int64_t rows, int heads, int dim, size_t *bytes) {
    if (!bytes) return REWY_ERR_NULL_POINTER;
    rewy_status s = gate_shape(REWY_F32, rows, heads, dim);
    if (s) return s;
    *bytes = 2 * sizeof(float) * (size_t)rewy_gate_slices(rows) * (size_t)heads * (size_t)dim;
    return REWY_OK;
}

rewy_status rewy_gate_forward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int heads, int dim,
                              const void *g, const float *A_log, const float *dt_bias, float *y, void *stream) {
    rewy_status s;
    const rewy_backend_ops *ops = transform_backend(backend, &s);
    if (s || (s = gate_shape(dtype, rows, heads, dim))) return s;
    if (rows == 0) return REWY_OK;
    if (!g || !A_log || !y) return REWY_ERR_NULL_POINTER;
    if (misaligned(g, rewy_dtype_size(dtype)) || misaligned(A_log, 4) || misaligned(dt_bias, 4) || misaligned(y, 4))
        return REWY_ERR_MISALIGNED;
    return ops->gate(dtype, rows, heads, dim, g, A_log, dt_bias, y, NULL, NULL, NULL, NULL, NULL, stream);
}

rewy_status rewy_gate_backward(rewy_backend backend, rewy_dtype dtype, int64_t rows, int heads, int dim,
                               const void *g, const float *A_log, const float *dt_bias, const float *dy, void *dg,
                               float *dA_log, float *ddt_bias, void *workspace, size_t workspace_bytes,
                               void *stream) {
    rewy_status s;
    const rewy_backend_ops *ops = transform_backend(backend, &s);
    if (s || (s = gate_shape(dtype, rows, heads, dim))) return s;
    size_t need;
    rewy_gate_workspace_size(rows, heads, dim, &need);
    if (!A_log || !workspace || (rows > 0 && (!g || !dy || !dg))) return REWY_ERR_NULL_POINTER;
    const size_t el = rewy_dtype_size(dtype);
    if (misaligned(g, el) || misaligned(dg, el) || misaligned(A_log, 4) || misaligned(dt_bias, 4) ||
        misaligned(dy, 4) || misaligned(dA_log, 4) || misaligned(ddt_bias, 4) || misaligned(workspace, 16))
        return REWY_ERR_MISALIGNED;
    if (workspace_bytes < need) return REWY_ERR_WORKSPACE;
    return ops->gate(dtype, rows, heads, dim, g, A_log, dt_bias, NULL, dy, dg, dA_log, ddt_bias, (float *)workspace,
                     stream);
}
