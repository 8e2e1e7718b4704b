/* check.c: the accuracy harness (see check.h). Not a hot path: clarity over speed. */
#include "check.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "gates.h"
#include "oracle.h"
#include "check/rng.h"

/* ---------------------------------------------------------------- names */

const char *rewy_check_op_name(rewy_op op) {
    switch (op) {
    case REWY_OP_DELTANET: return "deltanet";
    case REWY_OP_GDN: return "gdn";
    case REWY_OP_KDA: return "kda";
    case REWY_OP_GDN2: return "gdn2";
    }
    return "?";
}

const char *rewy_check_dtype_name(rewy_dtype t) {
    switch (t) {
    case REWY_F32: return "fp32";
    case REWY_BF16: return "bf16";
    case REWY_F16: return "fp16";
    case REWY_F64: return "fp64";
    }
    return "?";
}

static const char *const qty_names[REWY_Q_COUNT] = {"o", "ht", "dq", "dk", "dv",
                                                    "dg", "dbeta", "db", "dw", "dh0"};

const char *rewy_check_qty_name(rewy_qty q) {
    return (unsigned)q < REWY_Q_COUNT ? qty_names[q] : "?";
}

int rewy_check_parse_op(const char *s, rewy_op *op) {
    static const rewy_op ops[] = {REWY_OP_DELTANET, REWY_OP_GDN, REWY_OP_KDA, REWY_OP_GDN2};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, rewy_check_op_name(ops[i])) == 0) { *op = ops[i]; return 0; }
    return 1;
}

int rewy_check_parse_dtype(const char *s, rewy_dtype *t) {
    if (!strcmp(s, "fp32") || !strcmp(s, "f32")) *t = REWY_F32;
    else if (!strcmp(s, "bf16")) *t = REWY_BF16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "f16")) *t = REWY_F16;
    else return 1;
    return 0;
}

/* Appends printf-style text at buf + *pos, never past len (snprintf truncates). */
static void append(char *buf, size_t len, size_t *pos, const char *fmt, ...) {
    if (*pos >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *pos, len - *pos, fmt, ap);
    va_end(ap);
    if (n > 0) *pos += (size_t)n;
    if (*pos >= len) *pos = len;
}

/* T as the library sees it: the packed length for varlen cases. */
static int case_T(const rewy_case *c) {
    if (c->num_seqs <= 0) return c->T;
    int T = 0;
    for (int s = 0; s < c->num_seqs && s < REWY_CHECK_MAX_SEQS; s++) T += c->seqlens[s];
    return T;
}

void rewy_check_describe(const rewy_case *c, char *buf, size_t len) {
    if (!buf || len == 0) return;
    buf[0] = 0;
    size_t pos = 0;
    int HV = c->HV ? c->HV : c->H;
    append(buf, len, &pos, "%s %s%s B%d T%d H%d/%d K%d V%d c%d %s",
           rewy_check_op_name(c->op), rewy_check_dtype_name(c->dtype),
           c->backend == REWY_BACKEND_CUDA ? " cuda" : "", c->num_seqs > 0 ? 1 : c->B, case_T(c),
           c->H, HV, c->K, c->V, c->chunk_size ? c->chunk_size : 64,
           c->policy == REWY_POLICY_A ? "A" : "R");
    if (c->use_h0) append(buf, len, &pos, " h0");
    if (c->use_dht) append(buf, len, &pos, " dht");
    if (c->no_ht) append(buf, len, &pos, " no-ht");
    if (c->state_v_first) append(buf, len, &pos, " vfirst");
    if (c->num_seqs > 0) {
        append(buf, len, &pos, " seqs[");
        for (int s = 0; s < c->num_seqs && s < REWY_CHECK_MAX_SEQS; s++)
            append(buf, len, &pos, s ? ",%d" : "%d", c->seqlens[s]);
        append(buf, len, &pos, "]");
    }
    if (c->gates == REWY_GATES_STRONG) append(buf, len, &pos, " strong");
    if (c->gates == REWY_GATES_RESET) append(buf, len, &pos, " resets");
    if (c->gates == REWY_GATES_NEG_INF) append(buf, len, &pos, " -inf-resets");
    if (c->gates == REWY_GATES_HUGE) append(buf, len, &pos, " huge-gates");
    if (c->gates == REWY_GATES_MIXED) append(buf, len, &pos, " mixed-gates");
    if (c->gates == REWY_GATES_KDA) append(buf, len, &pos, " kda-gates");
    if (c->scale != 0.0f) append(buf, len, &pos, " scale=%g", (double)c->scale);
    if (c->betas == REWY_BETAS_ZERO) append(buf, len, &pos, " beta0");
    append(buf, len, &pos, " seed=%llu", (unsigned long long)c->seed);
}

/* ---------------------------------------------------------------- random numbers */

/* One independent stream (rng.h) per tensor, so adding a tensor to a case never shifts the
 * values of the others. */
static rng rng_stream(uint64_t seed, uint64_t tensor) {
    rng r = {seed ^ (tensor * 0xD1B54A32D192ED03ull)};
    rng_next(&r);
    return r;
}

static double rng_normal(rng *r) { /* Box–Muller, one value per call */
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r); /* u1 in (0,1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------------- problem shape */

typedef struct dims {
    int B, T, H, HV, K, V, N, chunk;
    int nseq;                               /* 0: batched; > 0: packed varlen (B = 1) */
    int32_t cu[REWY_CHECK_MAX_SEQS + 1];
    size_t nq, nv, ng, nbeta, nb, nw, ns;   /* element counts of q/k, v/o, g, β, b, w, state */
} dims;

static int case_dims(const rewy_case *c, dims *d, char *msg, size_t len) {
    memset(d, 0, sizeof *d);
    d->H = c->H;
    d->HV = c->HV ? c->HV : c->H;
    d->K = c->K;
    d->V = c->V;
    d->chunk = c->chunk_size ? c->chunk_size : 64;
    if (c->num_seqs > 0) {
        if (c->num_seqs > REWY_CHECK_MAX_SEQS) {
            snprintf(msg, len, "harness: num_seqs %d > %d", c->num_seqs, REWY_CHECK_MAX_SEQS);
            return 1;
        }
        d->nseq = c->num_seqs;
        d->B = 1;
        for (int s = 0; s < d->nseq; s++) {
            if (c->seqlens[s] <= 0) {
                snprintf(msg, len, "harness: seqlens[%d] = %d", s, c->seqlens[s]);
                return 1;
            }
            d->cu[s + 1] = d->cu[s] + c->seqlens[s];
        }
        d->T = d->cu[d->nseq];
        d->N = d->nseq;
    } else {
        d->B = c->B;
        d->T = c->T;
        d->N = c->B;
    }
    /* name the first wrong field, so that a caller (rewy check --shape ...) sees what to fix */
    const char *names[6] = {"B", "T", "H", "HV", "K", "V"};
    const int vals[6] = {d->B, d->T, d->H, d->HV, d->K, d->V};
    for (int f = 0; f < 6; f++)
        if (vals[f] <= 0) {
            snprintf(msg, len, "harness: bad case shape: %s = %d (must be positive)", names[f], vals[f]);
            return 1;
        }
    if (d->HV % d->H) {
        snprintf(msg, len, "harness: bad case shape: HV = %d is not a multiple of H = %d", d->HV, d->H);
        return 1;
    }
    size_t bt = (size_t)d->B * (size_t)d->T;
    d->nq = bt * (size_t)d->H * (size_t)d->K;
    d->nv = bt * (size_t)d->HV * (size_t)d->V;
    d->ng = c->op == REWY_OP_DELTANET ? 0
          : c->op == REWY_OP_GDN      ? bt * (size_t)d->HV
                                      : bt * (size_t)d->HV * (size_t)d->K;
    d->nbeta = c->op == REWY_OP_GDN2 ? 0 : bt * (size_t)d->HV;
    d->nb = c->op == REWY_OP_GDN2 ? bt * (size_t)d->HV * (size_t)d->K : 0;
    d->nw = c->op == REWY_OP_GDN2 ? d->nv : 0;
    d->ns = (size_t)d->N * (size_t)d->HV * (size_t)d->K * (size_t)d->V;
    return 0;
}

/* Token t of batch row bi gets a −1000 reset: every 37th token, and the first token of every
 * odd-numbered sequence (a varlen sequence, or a batch row). */
static int is_reset(const dims *d, int bi, int t) {
    if (t % 37 == 36) return 1;
    if (d->nseq) {
        for (int s = 1; s < d->nseq; s += 2)
            if (d->cu[s] == t) return 1;
        return 0;
    }
    return t == 0 && (bi & 1);
}

/* β-like value (β, b or w) of token t under the case's regime. */
static float beta_value(const rewy_case *c, rng *r, int t) {
    float x = (float)(0.1 + 0.8 * rng_uniform(r));
    if (c->betas == REWY_BETAS_ZERO) {
        if (t % 3 == 0) return 0.0f;
        if (t % 4 == 1) return 1e-8f;
    }
    return x;
}

static float log_sigmoid(double x) { /* stable log σ(x) */
    return (float)(x > 0 ? -log1p(exp(-x)) : x - log1p(exp(x)));
}

/* ---------------------------------------------------------------- memory */

#define POOL_MAX 64

/* Every allocation of one run, freed together; keeps the error paths short. */
typedef struct pool {
    const rewy_check_mem *mem;
    void *host[POOL_MAX];
    void *dev[POOL_MAX];
    int nh, nd;
    int failed;
} pool;

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

static void *host_alloc(pool *p, size_t bytes) {
    if (p->nh == POOL_MAX) { p->failed = 1; return NULL; }
    void *x = calloc(1, bytes ? bytes : 1);
    if (!x) p->failed = 1;
    else p->host[p->nh++] = x;
    return x;
}

/* Backend buffers are 64-byte aligned on the host path (the API wants 16 for workspaces and
 * element alignment elsewhere); sizes are padded so aligned_alloc's contract holds. */
static void *dev_alloc(pool *p, size_t bytes) {
    if (p->nd == POOL_MAX) { p->failed = 1; return NULL; }
    size_t n = round64(bytes ? bytes : 1);
    void *x = p->mem ? p->mem->alloc(p->mem->user, n) : aligned_alloc(64, n);
    if (!x) p->failed = 1;
    else p->dev[p->nd++] = x;
    return x;
}

static void pool_free(pool *p) {
    for (int i = 0; i < p->nh; i++) free(p->host[i]);
    for (int i = 0; i < p->nd; i++) {
        if (p->mem) p->mem->free(p->mem->user, p->dev[i]);
        else free(p->dev[i]);
    }
    p->nh = p->nd = 0;
}

static int to_dev(pool *p, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    if (!p->mem) { memcpy(dst, src, bytes); return 0; }
    if (p->mem->to_backend(p->mem->user, dst, src, bytes)) { p->failed = 1; return 1; }
    return 0;
}

static int to_host(pool *p, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    if (!p->mem) { memcpy(dst, src, bytes); return 0; }
    if (p->mem->to_host(p->mem->user, dst, src, bytes)) { p->failed = 1; return 1; }
    return 0;
}

/* All-ones bytes are a NaN in fp32, bf16 and fp16 alike. */
static int poison(pool *p, void *dst, size_t bytes) {
    if (!dst || !bytes) return 0;
    if (!p->mem) { memset(dst, 0xff, bytes); return 0; }
    void *tmp = malloc(bytes);
    if (!tmp) { p->failed = 1; return 1; }
    memset(tmp, 0xff, bytes);
    int rc = to_dev(p, dst, tmp, bytes);
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------- inputs */

/* Host copies of one case's inputs: element-typed arrays already rounded to the dtype,
 * fp32 arrays (gates, states), and the fp64 values the oracle reads (exactly the same). */
typedef struct inputs {
    void *q, *k, *v, *beta, *b, *w, *do_;   /* dtype */
    float *g, *h0, *dht;                    /* fp32 */
    double *q64, *k64, *v64, *g64, *beta64, *b64, *w64, *h064, *do64, *dht64;
} inputs;

/* Rounds x[0..n) to dtype t into out, and gives the rounded values back as doubles. */
static void round_to(rewy_dtype t, const float *x, size_t n, void *out, double *out64) {
    for (size_t i = 0; i < n; i++) {
        rewy_store(out, t, i, x[i]);
        out64[i] = rewy_load(out, t, i);
    }
}

enum { ST_Q = 1, ST_K, ST_V, ST_G, ST_BETA, ST_B, ST_W, ST_H0, ST_DO, ST_DHT };

static int make_inputs(const rewy_case *c, const dims *d, pool *p, inputs *in) {
    memset(in, 0, sizeof *in);
    rewy_dtype t = c->dtype;
    size_t es = rewy_dtype_size(t);
    size_t nmax = d->nq > d->nv ? d->nq : d->nv;
    if (d->nb > nmax) nmax = d->nb;
    if (d->ns > nmax) nmax = d->ns;
    if (d->ng > nmax) nmax = d->ng;
    float *tmp = host_alloc(p, nmax * sizeof(float));
    if (!tmp) return 1;

    /* q, k: Gaussian rows normalized over K (per token and head). */
    for (int which = 0; which < 2; which++) {
        rng r = rng_stream(c->seed, which ? ST_K : ST_Q);
        for (size_t row = 0; row < d->nq / (size_t)d->K; row++) {
            float *x = tmp + row * (size_t)d->K;
            double nrm = 0;
            for (int i = 0; i < d->K; i++) { x[i] = (float)rng_normal(&r); nrm += (double)x[i] * x[i]; }
            nrm = sqrt(nrm);
            for (int i = 0; i < d->K; i++) x[i] = (float)(x[i] / (nrm > 0 ? nrm : 1));
        }
        void *buf = host_alloc(p, d->nq * es);
        double *b64 = host_alloc(p, d->nq * sizeof(double));
        if (!buf || !b64) return 1;
        round_to(t, tmp, d->nq, buf, b64);
        if (which) { in->k = buf; in->k64 = b64; } else { in->q = buf; in->q64 = b64; }
    }

    /* v and do: plain Gaussian. */
    for (int which = 0; which < 2; which++) {
        rng r = rng_stream(c->seed, which ? ST_DO : ST_V);
        for (size_t i = 0; i < d->nv; i++) tmp[i] = (float)rng_normal(&r);
        void *buf = host_alloc(p, d->nv * es);
        double *b64 = host_alloc(p, d->nv * sizeof(double));
        if (!buf || !b64) return 1;
        round_to(t, tmp, d->nv, buf, b64);
        if (which) { in->do_ = buf; in->do64 = b64; } else { in->v = buf; in->v64 = b64; }
    }

    /* g: fp32 log decay, [B,T,HV] or [B,T,HV,K]. */
    if (d->ng) {
        rng r = rng_stream(c->seed, ST_G);
        size_t per = d->ng / ((size_t)d->B * (size_t)d->T);   /* values per token */
        in->g = host_alloc(p, d->ng * sizeof(float));
        in->g64 = host_alloc(p, d->ng * sizeof(double));
        if (!in->g || !in->g64) return 1;
        for (size_t i = 0; i < d->ng; i++) {
            int tok = (int)((i / per) % (size_t)d->T), bi = (int)(i / (per * (size_t)d->T));
            float x = c->gates == REWY_GATES_STRONG ? (float)(-5.0 * rng_uniform(&r))
                                                    : log_sigmoid(rng_normal(&r)) / 16.0f;
            if (c->gates == REWY_GATES_MIXED) x = tok % 7 == 6 ? -1000.0f : -0.1f;
            if (c->gates == REWY_GATES_KDA) {
                /* the feature's rate, spread over [0.001, 1.6] by the golden-ratio sequence */
                double a = 0.001 + 1.599 * fmod(0.6180339887 * (double)(i % per + 1), 1.0);
                x = (float)-(0.001 + (a - 0.001) * (0.8 + 0.2 * rng_uniform(&r)));
            }
            if (c->gates == REWY_GATES_RESET || c->gates == REWY_GATES_NEG_INF || c->gates == REWY_GATES_HUGE) {
                static const float huge[5] = {-25.0f, -31.0f, -1e4f, -1e6f, -1e30f};
                if (is_reset(d, bi, tok))
                    x = c->gates == REWY_GATES_RESET ? -1000.0f
                        : c->gates == REWY_GATES_NEG_INF ? -INFINITY : huge[(tok + bi) % 5];
            }
            in->g[i] = x;
            in->g64[i] = x;
        }
    }

    /* β (DeltaNet/GDN/KDA) or b, w (GDN2): uniform [0.1, 0.9], regime per token. */
    struct { size_t n; int stream; void **buf; double **b64; } gates[3] = {
        {d->nbeta, ST_BETA, &in->beta, &in->beta64},
        {d->nb, ST_B, &in->b, &in->b64},
        {d->nw, ST_W, &in->w, &in->w64},
    };
    for (int gi = 0; gi < 3; gi++) {
        size_t n = gates[gi].n;
        if (!n) continue;
        rng r = rng_stream(c->seed, (uint64_t)gates[gi].stream);
        size_t per = n / ((size_t)d->B * (size_t)d->T);
        for (size_t i = 0; i < n; i++) tmp[i] = beta_value(c, &r, (int)((i / per) % (size_t)d->T));
        *gates[gi].buf = host_alloc(p, n * es);
        *gates[gi].b64 = host_alloc(p, n * sizeof(double));
        if (!*gates[gi].buf || !*gates[gi].b64) return 1;
        round_to(t, tmp, n, *gates[gi].buf, *gates[gi].b64);
    }

    /* h0 and dht: fp32 Gaussian × 0.1. */
    for (int which = 0; which < 2; which++) {
        if (!(which ? c->use_dht : c->use_h0)) continue;
        rng r = rng_stream(c->seed, which ? ST_DHT : ST_H0);
        float *s = host_alloc(p, d->ns * sizeof(float));
        double *s64 = host_alloc(p, d->ns * sizeof(double));
        if (!s || !s64) return 1;
        for (size_t i = 0; i < d->ns; i++) { s[i] = (float)(0.1 * rng_normal(&r)); s64[i] = s[i]; }
        if (which) { in->dht = s; in->dht64 = s64; } else { in->h0 = s; in->h064 = s64; }
    }
    return 0;
}

/* ---------------------------------------------------------------- comparison */

static rewy_check_err compare(const void *x, rewy_dtype t, const double *ref, size_t n, double tol) {
    rewy_check_err e = {0, 0, 0, 1, 0};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = rewy_load(x, t, i), di = xi - ref[i];
        if (!isfinite(xi)) e.finite = 0;
        num += di * di;
        den += ref[i] * ref[i];
        if (fabs(di) > e.max_abs) e.max_abs = fabs(di);
    }
    if (!e.finite) e.max_abs = INFINITY;
    e.ref_norm = sqrt(den);
    e.rel = den > 0 ? sqrt(num) / e.ref_norm : (num > 0 ? INFINITY : 0);
    if (!e.finite) e.rel = NAN;
    e.pass = e.finite && (e.rel <= tol || (e.ref_norm <= REWY_CHECK_TINY_NORM && e.max_abs <= REWY_CHECK_TINY_ABS));
    return e;
}

/* ‖a − b‖ / max(‖ref‖, tiny), both arrays of type t. */
static double rel_diff(const void *a, const void *b, rewy_dtype t, size_t n, double ref_norm) {
    double num = 0;
    for (size_t i = 0; i < n; i++) {
        double di = (double)rewy_load(a, t, i) - (double)rewy_load(b, t, i);
        num += di * di;
    }
    return sqrt(num) / fmax(ref_norm, REWY_CHECK_TINY_NORM);
}

/* ---------------------------------------------------------------- one run */

/* One checked quantity: its shape, type, oracle values, backend buffer and host copies. */
typedef struct qbuf {
    size_t n;
    rewy_dtype t;
    double *ref;
    void *dev;
    void *host[REWY_RUN_COUNT];
} qbuf;

static void fill_cfg(const rewy_case *c, const dims *d, rewy_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->op = c->op;
    cfg->backend = c->backend;
    cfg->dtype = c->dtype;
    cfg->B = d->B;
    cfg->T = d->T;
    cfg->H = d->H;
    cfg->HV = d->HV;
    cfg->K = d->K;
    cfg->V = d->V;
    cfg->chunk_size = c->chunk_size;
    cfg->scale = c->scale;      /* 0: the default K^-1/2, on both sides */
    cfg->num_seqs = d->nseq;
    cfg->policy = c->policy;
    cfg->bwd_algo = REWY_BWD_REWY;
    cfg->state_v_first = c->state_v_first;
}

/* The oracle's problem: the config on the host's cu_seqlens, and the inputs' fp64 values */
static rewy_ref_problem ref_problem(const rewy_config *cfg, const dims *d, const inputs *in) {
    rewy_ref_problem rp;
    memset(&rp, 0, sizeof rp);
    rp.cfg = *cfg;
    rp.cfg.cu_seqlens = d->nseq ? d->cu : NULL;
    rp.cfg.cu_seqlens_host = rp.cfg.cu_seqlens;
    rp.q = in->q64; rp.k = in->k64; rp.v = in->v64; rp.g = in->g64;
    rp.beta = in->beta64; rp.b = in->b64; rp.w = in->w64; rp.h0 = in->h064;
    return rp;
}

/* The three size queries a run needs; the first failing one's status. mem's hooks (check.h) where given. */
static rewy_status query_sizes(const rewy_check_mem *mem, const rewy_config *cfg, size_t *saved, size_t *fws,
                               size_t *bws) {
    if (mem && mem->sizes) return mem->sizes(mem->user, cfg, saved, fws, bws);
    rewy_status st = rewy_saved_size(cfg, saved);
    if (st == REWY_OK) st = rewy_fwd_workspace_size(cfg, fws);
    if (st == REWY_OK) st = rewy_bwd_workspace_size(cfg, bws);
    return st;
}
static rewy_status call_forward(const rewy_check_mem *mem, const rewy_fwd_params *fp) {
    return mem && mem->forward ? mem->forward(mem->user, fp) : rewy_forward(fp);
}
static rewy_status call_backward(const rewy_check_mem *mem, const rewy_bwd_params *bp) {
    return mem && mem->backward ? mem->backward(mem->user, bp) : rewy_backward(bp);
}

/* Copies quantity q's backend buffer into its host copy for `run` and scores it against the
 * oracle. */
static rewy_check_err fetch_compare(pool *p, const qbuf *q, int run, double tol) {
    to_host(p, q->host[run], q->dev, q->n * rewy_dtype_size(q->t));
    return compare(q->host[run], q->t, q->ref, q->n, tol);
}

static int harness_fail(rewy_check_result *r, const char *what) {
    r->harness_error = 1;
    r->pass = 0;
    if (!r->msg[0]) snprintf(r->msg, sizeof r->msg, "harness: %s", what);
    return 1;
}

/* Backend copies of the inputs (device or host memory through the pool). */
typedef struct dev_inputs {
    void *q, *k, *v, *beta, *b, *w, *do_;
    float *g, *h0, *dht;
    int32_t *cu;
} dev_inputs;

static void *upload(pool *p, const void *src, size_t bytes) {
    if (!src) return NULL;
    void *x = dev_alloc(p, bytes);
    if (x) to_dev(p, x, src, bytes);
    return x;
}

static int upload_inputs(const rewy_case *c, const dims *d, const inputs *in, pool *p, dev_inputs *di) {
    size_t es = rewy_dtype_size(c->dtype);
    di->q = upload(p, in->q, d->nq * es);
    di->k = upload(p, in->k, d->nq * es);
    di->v = upload(p, in->v, d->nv * es);
    di->do_ = upload(p, in->do_, d->nv * es);
    di->beta = upload(p, in->beta, d->nbeta * es);
    di->b = upload(p, in->b, d->nb * es);
    di->w = upload(p, in->w, d->nw * es);
    di->g = upload(p, in->g, d->ng * sizeof(float));
    di->h0 = upload(p, in->h0, d->ns * sizeof(float));
    di->dht = upload(p, in->dht, d->ns * sizeof(float));
    di->cu = d->nseq ? upload(p, d->cu, (size_t)(d->nseq + 1) * sizeof(int32_t)) : NULL;
    return p->failed;
}

static void fill_fwd(const rewy_config *cfg, const dev_inputs *di, rewy_fwd_params *fp) {
    memset(fp, 0, sizeof *fp);
    fp->cfg = *cfg;
    fp->q = di->q;
    fp->k = di->k;
    fp->v = di->v;
    fp->g = di->g;
    fp->beta = di->beta;
    fp->b = di->b;
    fp->w = di->w;
    fp->h0 = di->h0;
}

static void fill_bwd(const rewy_fwd_params *fp, const dev_inputs *di, rewy_bwd_params *bp) {
    memset(bp, 0, sizeof *bp);
    bp->cfg = fp->cfg;
    bp->q = fp->q;
    bp->k = fp->k;
    bp->v = fp->v;
    bp->g = fp->g;
    bp->beta = fp->beta;
    bp->b = fp->b;
    bp->w = fp->w;
    bp->h0 = fp->h0;
    bp->saved = fp->saved;
    bp->saved_bytes = fp->saved_bytes;
    bp->do_ = di->do_;
    bp->dht = di->dht;
}

int rewy_check_run(const rewy_case *c, const rewy_check_mem *mem, rewy_check_result *r) {
    memset(r, 0, sizeof *r);
    r->saved_intact = 1;
    r->all_finite = 1;
    r->agree = 1;
    dims d;
    if (case_dims(c, &d, r->msg, sizeof r->msg)) return harness_fail(r, "bad case");

    static const double tols[REWY_Q_COUNT] = {
        REWY_CHECK_TOL_MAIN, REWY_CHECK_TOL_MAIN, REWY_CHECK_TOL_MAIN, REWY_CHECK_TOL_MAIN,
        REWY_CHECK_TOL_MAIN, REWY_CHECK_TOL_GATE, REWY_CHECK_TOL_GATE, REWY_CHECK_TOL_GATE,
        REWY_CHECK_TOL_GATE, REWY_CHECK_TOL_MAIN};
    memcpy(r->tol, tols, sizeof tols);
    /* tighter on the CPU: see REWY_CHECK_TOL_MIXED_F32 (the CUDA path's fp32 cases round their
     * chunk intermediates to bf16, 2e-3, far above the cumsum's error: §10 applies there) */
    if (c->gates == REWY_GATES_MIXED && c->dtype == REWY_F32 && c->backend == REWY_BACKEND_CPU)
        for (int q = 0; q < REWY_Q_COUNT; q++) r->tol[q] = REWY_CHECK_TOL_MIXED_F32;
    r->applies[REWY_Q_O] = 1;
    r->applies[REWY_Q_HT] = !c->no_ht;
    r->applies[REWY_Q_DQ] = r->applies[REWY_Q_DK] = r->applies[REWY_Q_DV] = 1;
    r->applies[REWY_Q_DG] = d.ng > 0;
    r->applies[REWY_Q_DBETA] = d.nbeta > 0;
    r->applies[REWY_Q_DB] = d.nb > 0;
    r->applies[REWY_Q_DW] = d.nw > 0;
    r->applies[REWY_Q_DH0] = c->use_h0 != 0;

    pool p = {.mem = mem};
    inputs in;
    if (make_inputs(c, &d, &p, &in)) { pool_free(&p); return harness_fail(r, "out of host memory"); }

    qbuf qb[REWY_Q_COUNT];
    memset(qb, 0, sizeof qb);
    rewy_dtype t = c->dtype;
    const size_t counts[REWY_Q_COUNT] = {d.nv, d.ns, d.nq, d.nq, d.nv, d.ng, d.nbeta, d.nb, d.nw, d.ns};
    const int is_f32[REWY_Q_COUNT] = {0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
    for (int q = 0; q < REWY_Q_COUNT; q++) {
        if (!r->applies[q]) continue;
        qb[q].n = counts[q];
        qb[q].t = is_f32[q] ? REWY_F32 : t;
        qb[q].ref = host_alloc(&p, counts[q] * sizeof(double));
        size_t bytes = counts[q] * rewy_dtype_size(qb[q].t);
        qb[q].dev = dev_alloc(&p, bytes);
        if (q <= REWY_Q_HT) qb[q].host[REWY_RUN_FWD] = host_alloc(&p, bytes);
        else {
            qb[q].host[REWY_RUN_WY] = host_alloc(&p, bytes);
            qb[q].host[REWY_RUN_REWY] = host_alloc(&p, bytes);
        }
    }
    if (p.failed) { pool_free(&p); return harness_fail(r, "out of memory"); }

    rewy_config cfg;
    fill_cfg(c, &d, &cfg);

    /* The oracle: fp64 token recurrence on exactly the rounded inputs. Always produce the
     * final state (even when the library is not asked for it: the gradients need dht only). */
    {
        const rewy_ref_problem rp = ref_problem(&cfg, &d, &in);
        double *ht_ref = qb[REWY_Q_HT].ref ? qb[REWY_Q_HT].ref : host_alloc(&p, d.ns * sizeof(double));
        if (!ht_ref || rewy_ref_forward(&rp, qb[REWY_Q_O].ref, ht_ref) ||
            rewy_ref_backward(&rp, in.do64, in.dht64, qb[REWY_Q_DQ].ref, qb[REWY_Q_DK].ref,
                              qb[REWY_Q_DV].ref, qb[REWY_Q_DG].ref, qb[REWY_Q_DBETA].ref,
                              qb[REWY_Q_DB].ref, qb[REWY_Q_DW].ref, qb[REWY_Q_DH0].ref)) {
            pool_free(&p);
            return harness_fail(r, "oracle failed");
        }
    }

    /* The library. */
    dev_inputs di;
    if (upload_inputs(c, &d, &in, &p, &di)) { pool_free(&p); return harness_fail(r, "upload failed"); }
    cfg.cu_seqlens = di.cu;
    /* The CPU backend may leave the host copy NULL (rewy.h); give it only where it is needed. */
    cfg.cu_seqlens_host = (d.nseq && c->backend == REWY_BACKEND_CUDA) ? d.cu : NULL;

    size_t saved_bytes = 0, fws_bytes = 0, bws_bytes = 0;
    rewy_status st = query_sizes(mem, &cfg, &saved_bytes, &fws_bytes, &bws_bytes);
    if (st != REWY_OK) {
        /* validate checks the config first, so its message names the bad field */
        rewy_fwd_params vp;
        memset(&vp, 0, sizeof vp);
        vp.cfg = cfg;
        char m[200] = "";
        rewy_validate_fwd(&vp, m, sizeof m);
        r->fwd_status = st;
        snprintf(r->msg, sizeof r->msg, "size query: %s: %s", rewy_strerror(st), m);
        pool_free(&p);
        return 0;
    }
    void *saved = dev_alloc(&p, saved_bytes), *fws = dev_alloc(&p, fws_bytes);
    void *bws = dev_alloc(&p, bws_bytes);
    void *saved_copy = host_alloc(&p, saved_bytes), *saved_after = host_alloc(&p, saved_bytes);
    if (p.failed) { pool_free(&p); return harness_fail(r, "out of memory"); }

    rewy_fwd_params fp;
    fill_fwd(&cfg, &di, &fp);
    fp.o = qb[REWY_Q_O].dev;
    fp.ht = qb[REWY_Q_HT].dev;
    fp.saved = saved;
    fp.saved_bytes = saved_bytes;
    fp.workspace = fws;
    fp.workspace_bytes = fws_bytes;
    poison(&p, fp.o, d.nv * rewy_dtype_size(t));
    poison(&p, fp.ht, c->no_ht ? 0 : d.ns * sizeof(float));
    poison(&p, saved, saved_bytes);
    poison(&p, fws, fws_bytes);
    if (p.failed) { pool_free(&p); return harness_fail(r, "poison copy failed"); }

    r->fwd_status = call_forward(mem, &fp);
    if (r->fwd_status != REWY_OK) {
        char m[200] = "";
        rewy_validate_fwd(&fp, m, sizeof m);
        snprintf(r->msg, sizeof r->msg, "forward: %s: %s", rewy_strerror(r->fwd_status), m);
        pool_free(&p);
        return 0;
    }
    for (int q = REWY_Q_O; q <= REWY_Q_HT; q++) {
        if (!r->applies[q]) continue;
        r->err[REWY_RUN_FWD][q] = fetch_compare(&p, &qb[q], REWY_RUN_FWD, r->tol[q]);
    }
    to_host(&p, saved_copy, saved, saved_bytes);

    /* Both backward algorithms read the same saved buffer: the forward never depends on the
     * algorithm, so bwd_algo is the one field allowed to differ from the forward's config. */
    static const int runs[2] = {REWY_RUN_WY, REWY_RUN_REWY};
    static const rewy_bwd_algo algos[2] = {REWY_BWD_WY, REWY_BWD_REWY};
    for (int a = 0; a < 2; a++) {
        rewy_bwd_params bp;
        fill_bwd(&fp, &di, &bp);
        bp.cfg.bwd_algo = algos[a];
        bp.dq = qb[REWY_Q_DQ].dev;
        bp.dk = qb[REWY_Q_DK].dev;
        bp.dv = qb[REWY_Q_DV].dev;
        bp.dg = qb[REWY_Q_DG].dev;
        bp.dbeta = qb[REWY_Q_DBETA].dev;
        bp.db = qb[REWY_Q_DB].dev;
        bp.dw = qb[REWY_Q_DW].dev;
        bp.dh0 = qb[REWY_Q_DH0].dev;
        bp.workspace = bws;
        bp.workspace_bytes = bws_bytes;
        for (int q = REWY_Q_DQ; q < REWY_Q_COUNT; q++)
            if (r->applies[q]) poison(&p, qb[q].dev, qb[q].n * rewy_dtype_size(qb[q].t));
        poison(&p, bws, bws_bytes);
        rewy_status bs = call_backward(mem, &bp);
        r->bwd_status[algos[a]] = bs;
        if (bs != REWY_OK) {
            if (!r->msg[0]) {
                char m[200] = "";
                rewy_validate_bwd(&bp, m, sizeof m);
                snprintf(r->msg, sizeof r->msg, "backward %s: %s: %s", a ? "ReWY" : "WY",
                         rewy_strerror(bs), m);
            }
            continue;
        }
        for (int q = REWY_Q_DQ; q < REWY_Q_COUNT; q++) {
            if (!r->applies[q]) continue;
            r->err[runs[a]][q] = fetch_compare(&p, &qb[q], runs[a], r->tol[q]);
        }
        /* a gate below the library's floor gets the floor's gradient, exactly 0 (src/gates.h) */
        const float *dg = r->applies[REWY_Q_DG] && qb[REWY_Q_DG].t == REWY_F32 ? qb[REWY_Q_DG].host[runs[a]] : NULL;
        for (size_t i = 0; dg && i < d.ng; i++)
            if (in.g[i] < -REWY_GATE_FLOOR && dg[i] != 0.0f) r->floored_dg_nonzero++;
    }
    to_host(&p, saved_after, saved, saved_bytes);
    if (p.failed) { pool_free(&p); return harness_fail(r, "copy to host failed"); }
    r->saved_intact = memcmp(saved_copy, saved_after, saved_bytes) == 0;

    int bwd_ok = r->bwd_status[REWY_BWD_WY] == REWY_OK && r->bwd_status[REWY_BWD_REWY] == REWY_OK;
    for (int q = REWY_Q_DQ; q < REWY_Q_COUNT && bwd_ok; q++) {
        if (!r->applies[q]) continue;
        r->wy_vs_rewy[q] = rel_diff(qb[q].host[REWY_RUN_WY], qb[q].host[REWY_RUN_REWY], qb[q].t,
                                    qb[q].n, r->err[REWY_RUN_REWY][q].ref_norm);
        if (t == REWY_F32 && !(r->wy_vs_rewy[q] <= REWY_CHECK_AGREE_F32)) r->agree = 0;
    }

    /* Verdict. */
    int pass = bwd_ok && r->saved_intact && r->agree && r->floored_dg_nonzero == 0;
    for (int q = 0; q < REWY_Q_COUNT; q++) {
        if (!r->applies[q]) continue;
        for (int run = 0; run < REWY_RUN_COUNT; run++) {
            if ((run == REWY_RUN_FWD) != (q <= REWY_Q_HT)) continue;
            if (!r->err[run][q].finite) r->all_finite = 0;
            if (!r->err[run][q].pass) pass = 0;
        }
    }
    r->pass = pass && r->all_finite;
    if (!r->pass && !r->msg[0]) {
        if (!r->saved_intact) snprintf(r->msg, sizeof r->msg, "backward modified the saved buffer");
        else if (!r->all_finite) snprintf(r->msg, sizeof r->msg, "non-finite output");
        else if (r->floored_dg_nonzero)
            snprintf(r->msg, sizeof r->msg, "%ld gradients of floored gates are not 0", r->floored_dg_nonzero);
        else if (!r->agree) snprintf(r->msg, sizeof r->msg, "WY and ReWY disagree beyond %.0e", REWY_CHECK_AGREE_F32);
        else snprintf(r->msg, sizeof r->msg, "error above tolerance");
    }
    pool_free(&p);
    return 0;
}

/* ---------------------------------------------------------------- conditioning */

int rewy_check_dht_sensitivity(const rewy_case *c, double rel[REWY_Q_COUNT]) {
    for (int q = 0; q < REWY_Q_COUNT; q++) rel[q] = 0.0;
    dims d;
    char msg[160];
    if (!c->use_dht || case_dims(c, &d, msg, sizeof msg)) return 1;
    pool p = {.mem = NULL};
    inputs in;
    if (make_inputs(c, &d, &p, &in)) { pool_free(&p); return 1; }
    rewy_config cfg;
    fill_cfg(c, &d, &cfg);
    const rewy_ref_problem rp = ref_problem(&cfg, &d, &in);
    /* the gradients in the rewy_qty order from q̄ on: q̄, k̄, v̄, ḡ, β̄, b̄, w̄, dh0; two sets (exact dht, bf16 dht) */
    const size_t n[8] = {d.nq, d.nq, d.nv, d.ng, d.nbeta, d.nb, d.nw, c->use_h0 ? d.ns : 0};
    double *gr[2][8];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 8; i++) gr[s][i] = n[i] ? host_alloc(&p, n[i] * sizeof(double)) : NULL;
    double *dht16 = host_alloc(&p, d.ns * sizeof(double));
    void *bf = host_alloc(&p, d.ns * rewy_dtype_size(REWY_BF16));
    if (p.failed) { pool_free(&p); return 1; }
    round_to(REWY_BF16, in.dht, d.ns, bf, dht16); /* the fp32 dht as the CUDA backend stores S̄⁺ */
    int rc = 0;
    for (int s = 0; s < 2 && !rc; s++)
        rc = rewy_ref_backward(&rp, in.do64, s ? dht16 : in.dht64, gr[s][0], gr[s][1], gr[s][2], gr[s][3], gr[s][4],
                               gr[s][5], gr[s][6], gr[s][7]);
    for (int i = 0; i < 8 && !rc; i++) {
        double dd = 0.0, rr = 0.0;
        for (size_t e = 0; e < n[i]; e++) {
            const double x = gr[1][i][e] - gr[0][i][e];
            dd += x * x;
            rr += gr[0][i][e] * gr[0][i][e];
        }
        rel[REWY_Q_DQ + i] = rr > 0.0 ? sqrt(dd / rr) : 0.0;
    }
    pool_free(&p);
    return rc;
}

/* ---------------------------------------------------------------- a NaN gate */

/* Non-finite elements of x[i0 .. i0 + n) (type t). */
static long count_nonfinite(const void *x, rewy_dtype t, size_t i0, size_t n) {
    long c = 0;
    for (size_t i = i0; i < i0 + n; i++) c += !isfinite(rewy_load(x, t, i));
    return c;
}

int rewy_check_nan_gate(const rewy_case *c, const rewy_check_mem *mem, int tok, rewy_check_nan *r) {
    memset(r, 0, sizeof *r);
    dims d;
    char msg[200];
    int HV = c->HV ? c->HV : c->H;
    if (c->op == REWY_OP_DELTANET || c->num_seqs > 0 || HV != c->H || c->B < 2 || c->H < 2 ||
        !c->use_h0 || tok < 0 || tok >= c->T || case_dims(c, &d, msg, sizeof msg)) {
        r->harness_error = 1; /* gated, batched, B, H ≥ 2, HV = H, h0, tok inside the sequence */
        return 1;
    }
    pool p = {.mem = mem};
    inputs in;
    if (make_inputs(c, &d, &p, &in)) { pool_free(&p); r->harness_error = 1; return 1; }
    /* the NaN: sequence 0, value head 0, token tok (vector gates: feature 0 only) */
    in.g[(size_t)tok * HV * (d.ng / ((size_t)d.B * d.T * HV))] = NAN;
    rewy_config cfg;
    fill_cfg(c, &d, &cfg);
    dev_inputs di;
    size_t saved_bytes = 0, fws = 0, bws = 0;
    if (upload_inputs(c, &d, &in, &p, &di) || query_sizes(mem, &cfg, &saved_bytes, &fws, &bws) != REWY_OK) {
        pool_free(&p);
        r->harness_error = 1;
        return 1;
    }
    const rewy_dtype t = c->dtype;
    const size_t es = rewy_dtype_size(t);
    rewy_fwd_params fp;
    fill_fwd(&cfg, &di, &fp);
    fp.o = dev_alloc(&p, d.nv * es);
    fp.ht = dev_alloc(&p, d.ns * sizeof(float));
    fp.saved = dev_alloc(&p, saved_bytes);
    fp.saved_bytes = saved_bytes;
    fp.workspace = dev_alloc(&p, fws);
    fp.workspace_bytes = fws;
    rewy_bwd_params bp;
    fill_bwd(&fp, &di, &bp);
    bp.dq = dev_alloc(&p, d.nq * es);
    bp.dk = dev_alloc(&p, d.nq * es);
    bp.dv = dev_alloc(&p, d.nv * es);
    bp.dg = dev_alloc(&p, d.ng * sizeof(float));
    bp.dbeta = d.nbeta ? dev_alloc(&p, d.nbeta * es) : NULL;
    bp.db = d.nb ? dev_alloc(&p, d.nb * es) : NULL;
    bp.dw = d.nw ? dev_alloc(&p, d.nw * es) : NULL;
    bp.dh0 = dev_alloc(&p, d.ns * sizeof(float));
    bp.workspace = dev_alloc(&p, bws);
    bp.workspace_bytes = bws;
    void *o = host_alloc(&p, d.nv * es), *dq = host_alloc(&p, d.nq * es), *dk = host_alloc(&p, d.nq * es);
    void *dv = host_alloc(&p, d.nv * es);
    float *ht = host_alloc(&p, d.ns * sizeof(float)), *dh0 = host_alloc(&p, d.ns * sizeof(float));
    float *dg = host_alloc(&p, d.ng * sizeof(float));
    if (p.failed) { pool_free(&p); r->harness_error = 1; return 1; }
    r->fwd_status = call_forward(mem, &fp);
    r->bwd_status = r->fwd_status == REWY_OK ? call_backward(mem, &bp) : r->fwd_status;
    if (r->bwd_status == REWY_OK) {
        to_host(&p, o, fp.o, d.nv * es);
        to_host(&p, ht, fp.ht, d.ns * sizeof(float));
        to_host(&p, dq, bp.dq, d.nq * es);
        to_host(&p, dk, bp.dk, d.nq * es);
        to_host(&p, dv, bp.dv, d.nv * es);
        to_host(&p, dg, bp.dg, d.ng * sizeof(float));
        to_host(&p, dh0, bp.dh0, d.ns * sizeof(float));
    }
    if (p.failed) { pool_free(&p); r->harness_error = 1; return 1; }
    if (r->bwd_status == REWY_OK) {
        /* per token: o and dv rows [HV][V], dq/dk rows [H][K], dg rows [HV] or [HV][K]; head 0 first */
        const size_t ov = (size_t)d.V, qk = (size_t)d.K, gk = d.ng / ((size_t)d.B * d.T * HV);
        const size_t st = (size_t)d.K * d.V; /* one head's state */
        const int chunk0 = tok / d.chunk * d.chunk;
        for (int b = 0; b < d.B; b++)
            for (int i = 0; i < d.T; i++) {
                const size_t row = (size_t)b * d.T + i;
                for (int h = 0; h < HV; h++) {
                    const long no = count_nonfinite(o, t, (row * HV + h) * ov, ov);
                    const long ng = count_nonfinite(dq, t, (row * HV + h) * qk, qk) +
                                    count_nonfinite(dk, t, (row * HV + h) * qk, qk) +
                                    count_nonfinite(dv, t, (row * HV + h) * ov, ov) +
                                    count_nonfinite(dg, REWY_F32, (row * HV + h) * gk, gk);
                    if (b != 0 || h != 0) r->others += no + ng;
                    else if (i < chunk0) r->o_before += no;
                    else if (i < tok) r->o_chunk_before += no;
                    else r->o_from_finite += (long)ov - no;
                }
            }
        for (int b = 0; b < d.B; b++)
            for (int h = 0; h < HV; h++) {
                const size_t off = ((size_t)b * HV + h) * st;
                const long nh = count_nonfinite(ht, REWY_F32, off, st), nd = count_nonfinite(dh0, REWY_F32, off, st);
                if (b != 0 || h != 0) r->others += nh + nd;
                else {
                    r->ht_nonfinite = nh;
                    r->dh0_nonfinite = nd;
                }
            }
        r->state_size = (long)st;
    }
    pool_free(&p);
    return 0;
}

/* ---------------------------------------------------------------- reports */

static const char *status_name(rewy_status s) {
    static const char *const names[REWY_STATUS_COUNT] = {
        "OK", "NULL_POINTER", "MISALIGNED", "BAD_SHAPE", "UNSUPPORTED_DIM", "BAD_CHUNK",
        "BAD_DTYPE", "BAD_OP", "BAD_SEQLENS", "BAD_ENUM", "WORKSPACE", "BACKEND", "MISMATCH"};
    return (unsigned)s < REWY_STATUS_COUNT ? names[s] : "?";
}

static void print_num(FILE *f, double x, int applies) {
    if (!applies) fprintf(f, " %10s", "-");
    else fprintf(f, " %10.3e", x);
}

void rewy_check_print_table(FILE *f, const rewy_case *c, const rewy_check_result *r) {
    char desc[256];
    rewy_check_describe(c, desc, sizeof desc);
    fprintf(f, "%-4s %s\n", r->pass ? "PASS" : "FAIL", desc);
    if (!r->harness_error && r->fwd_status)
        fprintf(f, "     status fwd %s (backward not run)\n", status_name(r->fwd_status));
    else if (!r->harness_error && (r->bwd_status[0] || r->bwd_status[1]))
        fprintf(f, "     status fwd OK, bwd WY %s, bwd ReWY %s\n", status_name(r->bwd_status[REWY_BWD_WY]),
                status_name(r->bwd_status[REWY_BWD_REWY]));
    if (r->msg[0]) fprintf(f, "     %s\n", r->msg);
    if (r->harness_error || r->fwd_status) return;
    fprintf(f, "     %-6s %10s %10s %10s %10s %8s\n", "qty", "fwd", "WY", "ReWY", "WY~ReWY", "tol");
    for (int q = 0; q < REWY_Q_COUNT; q++) {
        if (!r->applies[q]) continue;
        int fwd = q <= REWY_Q_HT;
        int ok = fwd ? r->err[REWY_RUN_FWD][q].pass
                     : r->err[REWY_RUN_WY][q].pass && r->err[REWY_RUN_REWY][q].pass;
        fprintf(f, "     %-6s", qty_names[q]);
        print_num(f, r->err[REWY_RUN_FWD][q].rel, fwd);
        print_num(f, r->err[REWY_RUN_WY][q].rel, !fwd);
        print_num(f, r->err[REWY_RUN_REWY][q].rel, !fwd);
        print_num(f, r->wy_vs_rewy[q], !fwd);
        fprintf(f, " %8.1e %s\n", r->tol[q], ok ? "ok" : "FAIL");
    }
}

static void json_num(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.6g", x);
    else fprintf(f, "null");
}

static void json_err(FILE *f, const rewy_check_err *e) {
    fprintf(f, "{\"rel\": ");
    json_num(f, e->rel);
    fprintf(f, ", \"max_abs\": ");
    json_num(f, e->max_abs);
    fprintf(f, ", \"ref_norm\": ");
    json_num(f, e->ref_norm);
    fprintf(f, ", \"pass\": %s}", e->pass ? "true" : "false");
}

void rewy_check_print_json(FILE *f, const rewy_case *c, const rewy_check_result *r) {
    char desc[256];
    rewy_check_describe(c, desc, sizeof desc);
    int HV = c->HV ? c->HV : c->H;
    fprintf(f, "{\"case\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"backend\": \"%s\", "
               "\"B\": %d, \"T\": %d, \"H\": %d, \"HV\": %d, \"K\": %d, \"V\": %d, "
               "\"chunk_size\": %d, \"policy\": \"%s\", \"seed\": %llu, ",
            desc, rewy_check_op_name(c->op), rewy_check_dtype_name(c->dtype),
            c->backend == REWY_BACKEND_CUDA ? "cuda" : "cpu", c->num_seqs > 0 ? 1 : c->B, case_T(c),
            c->H, HV, c->K, c->V, c->chunk_size ? c->chunk_size : 64,
            c->policy == REWY_POLICY_A ? "A" : "R", (unsigned long long)c->seed);
    static const char *const gates[] = {"normal", "strong", "reset", "neg_inf", "huge", "mixed", "kda"};
    fprintf(f, "\"state_v_first\": %s, \"use_h0\": %s, \"use_dht\": %s, \"gates\": \"%s\", "
               "\"betas\": \"%s\", \"seqlens\": [",
            c->state_v_first ? "true" : "false", c->use_h0 ? "true" : "false",
            c->use_dht ? "true" : "false", (unsigned)c->gates < 7 ? gates[c->gates] : "?",
            c->betas == REWY_BETAS_ZERO ? "zero" : "normal");
    for (int s = 0; s < c->num_seqs && s < REWY_CHECK_MAX_SEQS; s++) fprintf(f, s ? ", %d" : "%d", c->seqlens[s]);
    fprintf(f, "], ");
    fprintf(f, "\"status\": {\"fwd\": \"%s\", \"bwd_wy\": \"%s\", \"bwd_rewy\": \"%s\"}, ",
            status_name(r->fwd_status), status_name(r->bwd_status[REWY_BWD_WY]),
            status_name(r->bwd_status[REWY_BWD_REWY]));
    fprintf(f, "\"pass\": %s, \"all_finite\": %s, \"saved_intact\": %s, \"wy_rewy_agree\": %s, "
               "\"harness_error\": %s, \"message\": \"",
            r->pass ? "true" : "false", r->all_finite ? "true" : "false",
            r->saved_intact ? "true" : "false", r->agree ? "true" : "false",
            r->harness_error ? "true" : "false");
    for (const char *s = r->msg; *s; s++) /* messages are plain ASCII; escape quotes */
        fprintf(f, (*s == '"' || *s == '\\') ? "\\%c" : "%c", *s);
    fprintf(f, "\", \"quantities\": {");
    int first = 1;
    for (int q = 0; q < REWY_Q_COUNT; q++) {
        if (!r->applies[q]) continue;
        fprintf(f, "%s\"%s\": {\"tol\": %g, ", first ? "" : ", ", qty_names[q], r->tol[q]);
        first = 0;
        if (q <= REWY_Q_HT) {
            fprintf(f, "\"fwd\": ");
            json_err(f, &r->err[REWY_RUN_FWD][q]);
        } else {
            fprintf(f, "\"wy\": ");
            json_err(f, &r->err[REWY_RUN_WY][q]);
            fprintf(f, ", \"rewy\": ");
            json_err(f, &r->err[REWY_RUN_REWY][q]);
            fprintf(f, ", \"wy_vs_rewy\": ");
            json_num(f, r->wy_vs_rewy[q]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "}}");
}

/* ---------------------------------------------------------------- timing */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int rewy_check_time(const rewy_case *c, int reps, double max_seconds, rewy_check_timing *tm) {
    memset(tm, 0, sizeof *tm);
    if (c->backend != REWY_BACKEND_CPU || reps < 1) {
        snprintf(tm->msg, sizeof tm->msg, "harness: timing needs the CPU backend and reps >= 1");
        return 1;
    }
    dims d;
    if (case_dims(c, &d, tm->msg, sizeof tm->msg)) return 1;
    pool p = {.mem = NULL};
    inputs in;
    dev_inputs di;
    if (make_inputs(c, &d, &p, &in) || upload_inputs(c, &d, &in, &p, &di)) {
        snprintf(tm->msg, sizeof tm->msg, "harness: out of memory for the inputs");
        pool_free(&p);
        return 1;
    }

    rewy_config cfg;
    fill_cfg(c, &d, &cfg);
    cfg.cu_seqlens = di.cu;
    size_t saved_bytes = 0, fws_bytes = 0, bws_bytes = 0;
    rewy_status st = query_sizes(NULL, &cfg, &saved_bytes, &fws_bytes, &bws_bytes);
    if (st != REWY_OK) { tm->status = st; pool_free(&p); return 0; }

    size_t es = rewy_dtype_size(c->dtype);
    rewy_fwd_params fp;
    fill_fwd(&cfg, &di, &fp);
    fp.o = dev_alloc(&p, d.nv * es);
    fp.ht = c->no_ht ? NULL : dev_alloc(&p, d.ns * sizeof(float));
    fp.saved = dev_alloc(&p, saved_bytes);
    fp.saved_bytes = saved_bytes;
    fp.workspace = dev_alloc(&p, fws_bytes);
    fp.workspace_bytes = fws_bytes;
    rewy_bwd_params bp;
    fill_bwd(&fp, &di, &bp);
    bp.dq = dev_alloc(&p, d.nq * es);
    bp.dk = dev_alloc(&p, d.nq * es);
    bp.dv = dev_alloc(&p, d.nv * es);
    bp.dg = d.ng ? dev_alloc(&p, d.ng * sizeof(float)) : NULL;
    bp.dbeta = d.nbeta ? dev_alloc(&p, d.nbeta * es) : NULL;
    bp.db = d.nb ? dev_alloc(&p, d.nb * es) : NULL;
    bp.dw = d.nw ? dev_alloc(&p, d.nw * es) : NULL;
    bp.dh0 = c->use_h0 ? dev_alloc(&p, d.ns * sizeof(float)) : NULL;
    bp.workspace = dev_alloc(&p, bws_bytes);
    bp.workspace_bytes = bws_bytes;
    double *ms = host_alloc(&p, (size_t)reps * sizeof(double));
    if (p.failed) {
        snprintf(tm->msg, sizeof tm->msg, "harness: out of memory for the outputs and workspaces");
        pool_free(&p);
        return 1;
    }

    /* The forward alone, then the two backwards interleaved (WY, ReWY, ReWY, WY, ...) so
     * that drift in the machine's load falls on both alike. Each measurement starts with a
     * warm-up run (first touch of the buffers, thread start-up) that is not timed, unless
     * it took longer than REWY_CHECK_WARMUP_S: then those costs are noise and it counts as
     * a timed run, which keeps large shapes affordable. Then up to reps timed runs,
     * stopping once max_seconds have been used. */
    double *wy = host_alloc(&p, (size_t)reps * sizeof(double));
    if (p.failed) { pool_free(&p); return 1; }
    int n = 0;
    double start = omp_get_wtime();
    for (int i = -1; i < reps && n < reps; i++) {
        double t0 = omp_get_wtime();
        st = rewy_forward(&fp);
        double t1 = omp_get_wtime();
        if (st != REWY_OK) { tm->status = st; pool_free(&p); return 0; }
        if (i >= 0 || t1 - t0 > REWY_CHECK_WARMUP_S) ms[n++] = 1e3 * (t1 - t0);
        if (n > 0 && t1 - start > max_seconds) break;
    }
    tm->fwd_ms = median(ms, n);
    tm->reps_fwd = n;
    n = 0;
    start = omp_get_wtime();
    for (int i = -1; i < reps && n < reps; i++) {
        double t[2];
        for (int j = 0; j < 2; j++) {
            int algo = (i & 1) ? 1 - j : j; /* ABBA order */
            bp.cfg.bwd_algo = algo ? REWY_BWD_REWY : REWY_BWD_WY;
            double t0 = omp_get_wtime();
            st = rewy_backward(&bp);
            t[algo] = omp_get_wtime() - t0;
            if (st != REWY_OK) { tm->status = st; pool_free(&p); return 0; }
        }
        if (i >= 0 || t[0] + t[1] > 2 * REWY_CHECK_WARMUP_S) {
            wy[n] = 1e3 * t[0];
            ms[n++] = 1e3 * t[1];
        }
        if (n > 0 && omp_get_wtime() - start > max_seconds) break;
    }
    double *ratio = host_alloc(&p, (size_t)reps * sizeof(double));
    if (p.failed) { pool_free(&p); return 1; }
    for (int i = 0; i < n; i++) ratio[i] = wy[i] / ms[i];
    tm->wy_over_rewy = median(ratio, n);
    tm->bwd_wy_ms = median(wy, n);
    tm->bwd_rewy_ms = median(ms, n);
    tm->reps_bwd = n;
    pool_free(&p);
    return 0;
}
