/* fuzz_api.c: a libFuzzer harness over the public C API on the CPU backend (issue 25, item 5).
 *
 * Each input is read as a short sequence of decision bytes (missing bytes read as 0):
 *
 *   byte  0  op (mod 4)                    byte  8  K − 1 (K = 1..256)
 *   byte  1  dtype (mod 4)                 byte  9  V − 1 (V = 1..256)
 *   byte  2  policy, bwd_algo, state_v_first, HV = 0 spelling (bits 0..3)
 *   byte  3  chunk size {0, 16, 32, 64} (mod 4)
 *   byte  4  optional tensors: h0, ht, dht, dh0 (bits 0..3); custom scale (bit 4); varlen (bit 5)
 *   byte  5  H − 1 (mod 3) and the value-head group − 1 (bits 2.., mod 3): HV = H · group
 *   byte  6  gate regime (bits 0..2 mod 6: normal, strong, −1000 / −inf / huge resets, mixed); bit 3:
 *            zero/tiny β; bit 4: resets per feature instead of per token (KDA, GDN2)
 *   byte  7  fault (below 176: none; else one invalid field, see the fault enum)
 *   byte 10  B − 1 (mod 3), or the number of varlen sequences − 1 (mod 6)
 *   byte 11..  T − 1 (T = 1..256), or one length − 1 per varlen sequence (1..100)
 *   8 more bytes: the seed of the input values
 *
 * The problem is shrunk until B·T·HV·K·V ≤ WORK_MAX (the oracle's cost) and the CPU path's cost,
 * B·HV·(K·V + BT·(K + V) + BT²) per token with every sequence padded to whole chunks of BT, is at
 * most PADDED_MAX (lengths first, then K and V, then heads and batch), so that one execution takes
 * at most about half a second under ASan (measured: 0.2-0.3 µs per unit of either bound). Every buffer gets exactly the bytes its shape or
 * size query says, so ASan reports any access beyond it; outputs are poisoned with NaN bytes
 * so an element the library forgets to write fails the comparison.
 *
 * Inputs stay inside the numerical contract (MATH §10): feature-normalized Gaussian q/k,
 * Gaussian v and do, h0 and dht Gaussian × 0.1, β/b/w uniform in [0.1, 0.9] (optionally 0 on
 * every third token and 1e-8 on others), gates log σ(x)/16 or uniform [−5, 0], with resets on
 * about one token (or feature) in 16: −1000, −inf (exact), or −25, −31, −1e4, −1e6, −1e30 in turn
 * (MATH §10 holds for any g ≤ 0: issue 25 item 1); or −1000 on every 7th token and −0.1 on the
 * others (strong and weak decay mixed in one chunk).
 *
 * REWY_F64 makes every array double, gates and states too (the CPU backend's exact path).
 *
 * Valid problems: validation must pass, forward and backward must return OK, the backward
 * must leave the saved buffer unchanged, and every output must be within MATH §10 of the fp64
 * oracle. Faulty problems: validation, the call (and the size queries for config faults)
 * must return the fault's status with a message. Any breach aborts: libFuzzer keeps the input.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "check/oracle.h"
#include "dtype.h"
#include "rewy.h"
#include "check/rng.h"

#define WORK_MAX (1L << 17)     /* B·T·HV·K·V */
#define PADDED_MAX (1L << 21)   /* the CPU path's cost, see above */
#define MAX_SEQS 6

/* ---------------------------------------------------------------- reading the input */

typedef struct reader { const uint8_t *p; size_t n; } reader;

static unsigned take(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

/* Gaussian input values from rng.h's stream */
static double normal(rng *r) {
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* One invalid field per faulty input; each has a status the library must report. */
typedef enum fault {
    F_NONE = 0,
    F_T_ZERO,          /* T = 0                              BAD_SHAPE */
    F_K_BIG,           /* K = 257                            UNSUPPORTED_DIM */
    F_CHUNK,           /* chunk_size = 48                    BAD_CHUNK */
    F_DTYPE,           /* dtype = 7                          BAD_DTYPE */
    F_OP,              /* op = 9                             BAD_OP */
    F_POLICY,          /* policy = 2                         BAD_ENUM */
    F_ALGO,            /* bwd_algo = 2                       BAD_ENUM */
    F_HV,              /* HV not a multiple of H             BAD_SHAPE */
    F_SEQ_END,         /* cu_seqlens not ending at T         BAD_SEQLENS */
    F_SEQ_B,           /* B = 2 with cu_seqlens              BAD_SEQLENS */
    F_SCALE,           /* scale = NaN                        BAD_SHAPE */
    F_BACKEND,         /* CUDA backend in a CPU-only build   BACKEND */
    F_NULL_Q,          /* q = NULL                           NULL_POINTER */
    F_GATE,            /* g given to DeltaNet / missing      BAD_OP */
    F_MISALIGNED,      /* o one byte off                     MISALIGNED */
    F_FWD_WS,          /* forward workspace one byte short   WORKSPACE */
    F_SAVED,           /* saved_bytes one byte short         WORKSPACE */
    /* backward faults (after a valid forward) */
    F_BWD_SCALE,       /* backward scale differs             MISMATCH */
    F_BWD_H0,          /* h0 only in the backward            MISMATCH */
    F_BWD_NULL_DK,     /* dk = NULL                          NULL_POINTER */
    F_BWD_NO_DH0,      /* h0 given, dh0 = NULL               NULL_POINTER */
    F_BWD_WS,          /* backward workspace one byte short  WORKSPACE */
    F_BWD_SEQLENS,     /* backward cu_seqlens split T apart  MISMATCH (issue 25 item 3) */
    F_COUNT
} fault;

static rewy_status fault_status(fault f) {
    switch (f) {
    case F_NONE: return REWY_OK;
    case F_T_ZERO: case F_HV: case F_SCALE: return REWY_ERR_BAD_SHAPE;
    case F_K_BIG: return REWY_ERR_UNSUPPORTED_DIM;
    case F_CHUNK: return REWY_ERR_BAD_CHUNK;
    case F_DTYPE: return REWY_ERR_BAD_DTYPE;
    case F_OP: case F_GATE: return REWY_ERR_BAD_OP;
    case F_POLICY: case F_ALGO: return REWY_ERR_BAD_ENUM;
    case F_SEQ_END: case F_SEQ_B: return REWY_ERR_BAD_SEQLENS;
    case F_BACKEND: return REWY_ERR_BACKEND;
    case F_NULL_Q: case F_BWD_NULL_DK: case F_BWD_NO_DH0: return REWY_ERR_NULL_POINTER;
    case F_MISALIGNED: return REWY_ERR_MISALIGNED;
    case F_FWD_WS: case F_SAVED: case F_BWD_WS: return REWY_ERR_WORKSPACE;
    case F_BWD_SCALE: case F_BWD_H0: case F_BWD_SEQLENS: return REWY_ERR_MISMATCH;
    case F_COUNT: break;
    }
    return REWY_OK;
}

/* Faults in the config itself: the size queries must refuse them too. */
static int config_fault(fault f) { return f >= F_T_ZERO && f <= F_BACKEND; }
static int bwd_fault(fault f) { return f >= F_BWD_SCALE; }

/* ---------------------------------------------------------------- the problem */

enum { G_NORMAL, G_STRONG, G_RESET, G_NEG_INF, G_HUGE, G_MIXED, G_COUNT };   /* gate regimes */

typedef struct problem {
    rewy_config cfg;
    int gates;              /* G_* */
    int feature_resets;     /* resets per feature (vector gates) instead of per token */
    int zero_betas;
    int h0, ht, dht, dh0;   /* optional tensors given */
    fault f;
    uint64_t seed;
    int nseq;
    int32_t cu[MAX_SEQS + 1];
    size_t nq, nv, ng, nbeta, nb, nw, ns;   /* element counts */
} problem;

/* Within both work bounds? lens[0..n) are the sequence lengths (n = 1: every batch row's T). The
 * chunk path's products per chunk and head are K·V·BT (states), BT²·(K + V) (the intra-chunk
 * matrices) and BT³ (the triangular inverse and the pullback's BT×BT products): with K = 1 and
 * V = 256 the second is 65 times the first, with K = 2 and V = 1 the third 20 times the second. */
static int small_enough(const problem *p, const int *lens, int n) {
    const rewy_config *c = &p->cfg;
    const long BT = c->chunk_size ? c->chunk_size : 64, heads = (long)c->B * c->HV;
    long T = 0, padded = 0;
    for (int s = 0; s < n; s++) { T += lens[s]; padded += (lens[s] + BT - 1) / BT * BT; }
    return T * heads * c->K * c->V <= WORK_MAX &&
           padded * heads * ((long)c->K * c->V + BT * (c->K + c->V) + BT * BT) <= PADDED_MAX;
}

static void parse(reader *r, problem *p) {
    memset(p, 0, sizeof *p);
    rewy_config *c = &p->cfg;
    c->op = (rewy_op)(take(r) % 4);
    c->dtype = (rewy_dtype)(take(r) % 4);     /* REWY_F64: the CPU backend's exact path */
    unsigned b2 = take(r);
    c->policy = (rewy_policy)(b2 & 1);
    c->bwd_algo = (rewy_bwd_algo)((b2 >> 1) & 1);
    c->state_v_first = (b2 >> 2) & 1;
    int hv_zero = (b2 >> 3) & 1;
    static const int chunks[4] = {0, 16, 32, 64};
    c->chunk_size = chunks[take(r) % 4];
    unsigned b4 = take(r);
    p->h0 = b4 & 1;
    p->ht = (b4 >> 1) & 1;
    p->dht = (b4 >> 2) & 1;
    p->dh0 = p->h0 || ((b4 >> 3) & 1);      /* required with h0, optional without */
    int custom_scale = (b4 >> 4) & 1;
    int varlen = (b4 >> 5) & 1;
    unsigned b5 = take(r);
    c->H = 1 + (int)(b5 % 3);
    c->HV = c->H * (1 + (int)((b5 >> 2) % 3));
    unsigned b6 = take(r);
    p->gates = (int)((b6 & 7) % G_COUNT);
    p->zero_betas = (b6 >> 3) & 1;
    p->feature_resets = (b6 >> 4) & 1;
    unsigned b7 = take(r);
    p->f = b7 < 176 ? F_NONE : (fault)(1 + (b7 - 176) % (F_COUNT - 1));
    c->K = 1 + (int)take(r);
    c->V = 1 + (int)take(r);
    unsigned b10 = take(r);
    int lens[MAX_SEQS];
    if (varlen) {
        p->nseq = 1 + (int)(b10 % MAX_SEQS);
        for (int s = 0; s < p->nseq; s++) lens[s] = 1 + (int)(take(r) % 100);
        c->B = 1;
    } else {
        c->B = 1 + (int)(b10 % 3);
        c->T = 1 + (int)take(r);
    }
    for (int i = 0; i < 8; i++) p->seed = p->seed << 8 | take(r);

    /* Shrink to the work bounds: the longest sequence first, then the wider of K and V, then the
     * batch and the heads (one token and one head are always within them). */
    if (!varlen) { p->nseq = 1; lens[0] = c->T; }
    while (!small_enough(p, lens, p->nseq)) {
        int longest = 0;
        for (int s = 1; s < p->nseq; s++) if (lens[s] > lens[longest]) longest = s;
        if (lens[longest] > 1) lens[longest] = (lens[longest] + 1) / 2;
        else if (c->K > 1 || c->V > 1) { if (c->K >= c->V) c->K = (c->K + 1) / 2; else c->V = (c->V + 1) / 2; }
        else if (c->B > 1) c->B--;
        else if (c->HV > 1) c->H = c->HV = 1;
        else break;
    }
    c->T = 0;
    for (int s = 0; s < p->nseq; s++) c->T += lens[s];
    if (varlen) {
        c->num_seqs = p->nseq;
        for (int s = 0; s < p->nseq; s++) p->cu[s + 1] = p->cu[s] + lens[s];
    } else {
        p->nseq = 0;
    }
    /* a query scale of 0.25..2 times the default K^-1/2 */
    if (custom_scale) c->scale = (float)((0.25 + 1.75 * (double)(p->seed >> 56) / 255.0) / sqrt(c->K));

    size_t bt = (size_t)c->B * (size_t)c->T, HV = (size_t)c->HV;
    p->nq = bt * (size_t)c->H * (size_t)c->K;
    p->nv = bt * HV * (size_t)c->V;
    p->ng = c->op == REWY_OP_DELTANET ? 0 : c->op == REWY_OP_GDN ? bt * HV : bt * HV * (size_t)c->K;
    p->nbeta = c->op == REWY_OP_GDN2 ? 0 : bt * HV;
    p->nb = c->op == REWY_OP_GDN2 ? bt * HV * (size_t)c->K : 0;
    p->nw = c->op == REWY_OP_GDN2 ? p->nv : 0;
    p->ns = (size_t)(varlen ? p->nseq : c->B) * HV * (size_t)c->K * (size_t)c->V;
    if (hv_zero && c->HV == c->H) c->HV = 0;   /* the "HV = 0 means H" spelling */
}

/* ---------------------------------------------------------------- buffers */

/* Exactly `bytes` (ASan's redzone starts right after); a zero-size request still gets a
 * distinct non-NULL pointer because the API wants non-NULL workspaces. */
static void *exact(size_t bytes) {
    void *x = malloc(bytes);
    if (!x && bytes == 0) x = malloc(1);
    if (!x) { fprintf(stderr, "fuzz_api: out of memory (%zu bytes)\n", bytes); abort(); }
    return x;
}

/* Element i of an array of type t (REWY_F64 arrays are double throughout). */
static double load(const void *x, rewy_dtype t, size_t i) {
    return t == REWY_F64 ? ((const double *)x)[i] : rewy_load(x, t, i);
}
static size_t elem_size(rewy_dtype t) { return t == REWY_F64 ? 8 : rewy_dtype_size(t); }

/* An array the library reads or writes, of type t, and the exact fp64 values it holds. */
typedef struct tensor { void *x; double *x64; size_t n; rewy_dtype t; } tensor;

static tensor make(size_t n, rewy_dtype t) {
    tensor a = {exact(n * elem_size(t)), exact(n * sizeof(double)), n, t};
    return a;
}
static void put(tensor *a, size_t i, double v) {
    if (a->t == REWY_F64) ((double *)a->x)[i] = v;
    else rewy_store(a->x, a->t, i, (float)v);
    a->x64[i] = load(a->x, a->t, i);
}
static void poison(tensor *a) { memset(a->x, 0xff, a->n * elem_size(a->t)); }   /* NaN in every type */
static void drop(tensor *a) { free(a->x); free(a->x64); }

/* Token index of element i of a [B,T,...] array with `per` elements per token. */
static int token_of(const problem *p, size_t i, size_t per) { return (int)((i / per) % (size_t)p->cfg.T); }

static void fill_rows(tensor *a, int K, rng *r) {   /* Gaussian rows normalized over K */
    double *row = exact((size_t)K * sizeof(double));
    for (size_t base = 0; base < a->n; base += (size_t)K) {
        double nrm = 0;
        for (int i = 0; i < K; i++) { row[i] = normal(r); nrm += row[i] * row[i]; }
        nrm = sqrt(nrm);
        for (int i = 0; i < K; i++) put(a, base + (size_t)i, row[i] / (nrm > 0 ? nrm : 1));
    }
    free(row);
}

static void fill_betas(const problem *p, tensor *a, rng *r) {
    size_t per = a->n / ((size_t)p->cfg.B * (size_t)p->cfg.T);
    for (size_t i = 0; i < a->n; i++) {
        double x = 0.1 + 0.8 * rng_uniform(r);
        int t = token_of(p, i, per);
        if (p->zero_betas && t % 3 == 0) x = 0;
        else if (p->zero_betas && t % 4 == 1) x = 1e-8;
        put(a, i, x);
    }
}

/* Gates: normal log σ(x)/16 or strong uniform [−5, 0]; the reset regimes replace about one token in
 * 16 (every feature of a vector gate, or with feature_resets each feature on its own) by −1000, −inf
 * or a huge value; mixed: −1000 on every 7th token, −0.1 on the others. */
static void fill_gates(const problem *p, tensor *g, rng *r) {
    const size_t n = g->n;
    static const float huge[5] = {-25.0f, -31.0f, -1e4f, -1e6f, -1e30f};
    size_t per = n / ((size_t)p->cfg.B * (size_t)p->cfg.T);
    int reset = 0, nhuge = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % per == 0 || p->feature_resets) reset = (rng_next(r) & 15) == 0;
        double x;
        if (p->gates == G_STRONG) x = -5.0 * rng_uniform(r);
        else if (p->gates == G_MIXED) x = token_of(p, i, per) % 7 == 6 ? -1000.0 : -0.1;
        else { double y = normal(r); x = (y > 0 ? -log1p(exp(-y)) : y - log1p(exp(y))) / 16.0; }
        if (reset && p->gates == G_RESET) x = -1000.0;
        if (reset && p->gates == G_NEG_INF) x = -INFINITY;
        if (reset && p->gates == G_HUGE) x = huge[nhuge++ % 5];
        put(g, i, x);
    }
}

static void fill_state(tensor *s, rng *r) {
    for (size_t i = 0; i < s->n; i++) put(s, i, 0.1 * normal(r));
}

/* ---------------------------------------------------------------- checks */

static void fail(const problem *p, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

static void fail(const problem *p, const char *fmt, ...) {
    const rewy_config *c = &p->cfg;
    fprintf(stderr, "fuzz_api: op %d dtype %d B %d T %d H %d HV %d K %d V %d chunk %d policy %d algo %d vfirst %d "
            "scale %g seqs %d gates %d beta0 %d h0 %d ht %d dht %d dh0 %d fault %d seed %llu\n  ",
            c->op, c->dtype, c->B, c->T, c->H, c->HV, c->K, c->V, c->chunk_size, c->policy, c->bwd_algo,
            c->state_v_first, c->scale, p->nseq, p->gates, p->zero_betas, p->h0, p->ht, p->dht, p->dh0, p->f,
            (unsigned long long)p->seed);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* x (type t) against the oracle: relative L2 error within tol, or max-abs 1e-6 where the
 * reference is tiny (MATH §10); every value finite. */
static void compare(const problem *p, const char *name, const void *x, rewy_dtype t, const double *ref,
                    size_t n, double tol) {
    double num = 0, den = 0, max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        double xi = load(x, t, i), d = xi - ref[i];
        if (!isfinite(xi)) fail(p, "%s[%zu] = %g is not finite (oracle %g)", name, i, xi, ref[i]);
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > max_abs) max_abs = fabs(d);
    }
    double rel = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
    if (rel <= tol) return;
    if (sqrt(den) <= REWY_CHECK_TINY_NORM && max_abs <= REWY_CHECK_TINY_ABS) return;
    fail(p, "%s: relative error %.3e > %.1e (max abs %.3e, |ref| %.3e)", name, rel, tol, max_abs, sqrt(den));
}

static void expect(const problem *p, const char *what, rewy_status got, rewy_status want, const char *msg) {
    if (got != want)
        fail(p, "%s returned %d (%s) where %d (%s) was expected; message: %s", what, (int)got, rewy_strerror(got),
             (int)want, rewy_strerror(want), msg ? msg : "");
    if (want != REWY_OK && msg && !msg[0]) fail(p, "%s returned %d without a message", what, (int)got);
}

/* The message buffer at a short length (0..7 bytes, exactly allocated): the same status, nothing
 * written past msg_len, a terminated string; and every status has a non-empty description. */
static void short_message(const problem *p, const rewy_fwd_params *fp, rewy_status want) {
    size_t len = (size_t)(p->seed & 7);
    char *m = exact(len);
    expect(p, "rewy_validate_fwd (short message buffer)", rewy_validate_fwd(fp, len ? m : NULL, len), want, NULL);
    if (len && !memchr(m, 0, len)) fail(p, "rewy_validate_fwd: message not terminated within msg_len %zu", len);
    free(m);
    const char *d = rewy_strerror(want);
    if (!d || !d[0]) fail(p, "rewy_strerror(%d) is empty", (int)want);
    d = rewy_strerror((rewy_status)(REWY_STATUS_COUNT + (int)(p->seed >> 60)));
    if (!d || !d[0]) fail(p, "rewy_strerror of an unknown status is empty");
    expect(p, "rewy_validate_fwd(NULL)", rewy_validate_fwd(NULL, NULL, 0), REWY_ERR_NULL_POINTER, NULL);
}

/* ---------------------------------------------------------------- one execution */

static void run(problem *p) {
    rewy_config *c = &p->cfg;
    const rewy_dtype dt = c->dtype;
    const size_t es = elem_size(dt);
    const rewy_dtype st = dt == REWY_F64 ? REWY_F64 : REWY_F32;   /* gates and states */
    const fault f = p->f;
    char msg[256];
    int32_t *cu = NULL;
    if (p->nseq) {
        cu = exact((size_t)(p->nseq + 1) * sizeof(int32_t));
        memcpy(cu, p->cu, (size_t)(p->nseq + 1) * sizeof(int32_t));
        c->cu_seqlens = cu;     /* the CPU backend needs no separate host copy */
    }

    size_t saved_bytes = 0, fws_bytes = 0, bws_bytes = 0;
    rewy_status s = rewy_saved_size(c, &saved_bytes);
    if (s == REWY_OK) s = rewy_fwd_workspace_size(c, &fws_bytes);
    if (s == REWY_OK) s = rewy_bwd_workspace_size(c, &bws_bytes);
    expect(p, "size query of a valid config", s, REWY_OK, "");

    /* inputs */
    rng r = {p->seed};
    tensor q = make(p->nq, dt), k = make(p->nq, dt), v = make(p->nv, dt), dout = make(p->nv, dt);
    tensor beta = make(p->nbeta, dt), bb = make(p->nb, dt), ww = make(p->nw, dt);
    fill_rows(&q, c->K, &r);
    fill_rows(&k, c->K, &r);
    for (size_t i = 0; i < p->nv; i++) put(&v, i, normal(&r));
    for (size_t i = 0; i < p->nv; i++) put(&dout, i, normal(&r));
    fill_betas(p, &beta, &r);
    fill_betas(p, &bb, &r);
    fill_betas(p, &ww, &r);
    tensor gt = make(p->ng, st), h0t = make(p->h0 ? p->ns : 0, st), dhtt = make(p->dht ? p->ns : 0, st);
    fill_gates(p, &gt, &r);
    fill_state(&h0t, &r);
    fill_state(&dhtt, &r);
    /* the optional ones as the API sees them (the structs say float *; REWY_F64 passes double *) */
    const float *g = p->ng ? gt.x : NULL, *h0 = p->h0 ? h0t.x : NULL, *dht = p->dht ? dhtt.x : NULL;

    /* outputs, poisoned: all-ones bytes are NaN in every dtype */
    void *o = exact(p->nv * es), *saved = exact(saved_bytes), *fws = exact(fws_bytes), *bws = exact(bws_bytes);
    tensor htt = make(p->ht ? p->ns : 0, st);
    float *ht = p->ht ? htt.x : NULL;
    memset(o, 0xff, p->nv * es);
    memset(saved, 0xff, saved_bytes);
    poison(&htt);

    /* ---- forward */
    rewy_fwd_params fp;
    memset(&fp, 0, sizeof fp);
    fp.cfg = *c;
    fp.q = q.x; fp.k = k.x; fp.v = v.x; fp.g = g;
    fp.beta = p->nbeta ? beta.x : NULL; fp.b = p->nb ? bb.x : NULL; fp.w = p->nw ? ww.x : NULL;
    fp.h0 = h0; fp.o = o; fp.ht = ht;
    fp.saved = saved; fp.saved_bytes = saved_bytes;
    fp.workspace = fws; fp.workspace_bytes = fws_bytes;
    switch (f) {
    case F_T_ZERO: fp.cfg.T = 0; break;
    case F_K_BIG: fp.cfg.K = 257; break;
    case F_CHUNK: fp.cfg.chunk_size = 48; break;
    case F_DTYPE: fp.cfg.dtype = (rewy_dtype)7; break;
    case F_OP: fp.cfg.op = (rewy_op)9; break;
    case F_POLICY: fp.cfg.policy = (rewy_policy)2; break;
    case F_ALGO: fp.cfg.bwd_algo = (rewy_bwd_algo)2; break;
    case F_HV: fp.cfg.H = 2; fp.cfg.HV = 3; break;
    case F_SEQ_END: if (cu) cu[p->nseq] += 1; else fp.cfg.T = 0; break;
    case F_SEQ_B: if (cu) fp.cfg.B = 2; else fp.cfg.T = 0; break;
    case F_SCALE: fp.cfg.scale = NAN; break;
    case F_BACKEND:   /* with the host copy the CUDA backend wants, so that only the backend is wrong */
        fp.cfg.backend = REWY_BACKEND_CUDA;
        fp.cfg.cu_seqlens_host = cu;
        break;
    case F_NULL_Q: fp.q = NULL; break;
    case F_GATE: fp.g = g ? NULL : (const float *)saved; break;
    case F_MISALIGNED: fp.o = (char *)o + 1; break;
    case F_FWD_WS: if (fws_bytes) fp.workspace_bytes--; else fp.saved_bytes--; break;
    case F_SAVED: fp.saved_bytes--; break;
    default: break;
    }
    rewy_status want = bwd_fault(f) ? REWY_OK : fault_status(f);
    /* the two stand-ins above when a fault does not fit the problem */
    if ((f == F_SEQ_END || f == F_SEQ_B) && !cu) want = REWY_ERR_BAD_SHAPE;
    if (f == F_BACKEND && dt == REWY_F64) want = REWY_ERR_BAD_DTYPE;   /* fp64 is CPU-only, checked first */
    s = rewy_validate_fwd(&fp, msg, sizeof msg);
    expect(p, "rewy_validate_fwd", s, want, msg);
    short_message(p, &fp, want);
    expect(p, "rewy_forward", rewy_forward(&fp), want, NULL);
    if (want != REWY_OK && config_fault(f)) {
        size_t dummy = 0;
        expect(p, "rewy_saved_size", rewy_saved_size(&fp.cfg, &dummy), want, NULL);
        expect(p, "rewy_fwd_workspace_size", rewy_fwd_workspace_size(&fp.cfg, &dummy), want, NULL);
        expect(p, "rewy_bwd_workspace_size", rewy_bwd_workspace_size(&fp.cfg, &dummy), want, NULL);
    }

    if (want == REWY_OK) {
        /* ---- backward */
        tensor dq = make(p->nq, dt), dk = make(p->nq, dt), dv = make(p->nv, dt);
        tensor dbeta = make(p->nbeta, dt), db = make(p->nb, dt), dw = make(p->nw, dt);
        tensor dgt = make(p->ng, st), dh0t = make(p->dh0 ? p->ns : 0, st);
        float *dg = p->ng ? dgt.x : NULL, *dh0 = p->dh0 ? dh0t.x : NULL;
        void *saved_copy = exact(saved_bytes);
        memcpy(saved_copy, saved, saved_bytes);
        memset(dq.x, 0xff, p->nq * es); memset(dk.x, 0xff, p->nq * es); memset(dv.x, 0xff, p->nv * es);
        memset(dbeta.x, 0xff, p->nbeta * es); memset(db.x, 0xff, p->nb * es); memset(dw.x, 0xff, p->nw * es);
        poison(&dgt);
        poison(&dh0t);
        tensor h0_only_bwd = make(0, st);
        int32_t *cu_bwd = NULL;
        void *bws_other = NULL;

        rewy_bwd_params bp;
        memset(&bp, 0, sizeof bp);
        bp.cfg = *c;
        bp.q = q.x; bp.k = k.x; bp.v = v.x; bp.g = g;
        bp.beta = fp.beta; bp.b = fp.b; bp.w = fp.w; bp.h0 = h0;
        bp.saved = saved; bp.saved_bytes = saved_bytes;
        bp.do_ = dout.x; bp.dht = dht;
        bp.dq = dq.x; bp.dk = dk.x; bp.dv = dv.x; bp.dg = dg;
        bp.dbeta = p->nbeta ? dbeta.x : NULL; bp.db = p->nb ? db.x : NULL; bp.dw = p->nw ? dw.x : NULL;
        bp.dh0 = dh0;
        bp.workspace = bws; bp.workspace_bytes = bws_bytes;
        want = fault_status(f);
        switch (f) {
        /* 3 is never the default K^-1/2, so a zero scale changes too */
        case F_BWD_SCALE: bp.cfg.scale = c->scale ? 2 * c->scale : 3.0f; break;
        case F_BWD_H0:
            if (h0) { bp.h0 = NULL; }           /* given to the forward only */
            else {
                drop(&h0_only_bwd);
                h0_only_bwd = make(p->ns, st);
                memset(h0_only_bwd.x, 0, p->ns * elem_size(st));
                bp.h0 = h0_only_bwd.x;
                if (!dh0) want = REWY_ERR_NULL_POINTER;   /* dh0 is required with h0, checked first */
            }
            break;
        case F_BWD_NULL_DK: bp.dk = NULL; break;
        case F_BWD_NO_DH0: if (h0) bp.dh0 = NULL; else want = REWY_OK; break;
        case F_BWD_WS: if (bws_bytes) bp.workspace_bytes--; else bp.saved_bytes--; break;
        case F_BWD_SEQLENS:   /* one boundary moved by a token (same T and num_seqs); without one, the scale */
            bp.cfg.scale = c->scale ? 2 * c->scale : 3.0f;
            for (int k = 1; k < p->nseq; k++) {
                int step = p->cu[k] - p->cu[k - 1] > 1 ? -1 : p->cu[k + 1] - p->cu[k] > 1 ? 1 : 0;
                if (!step) continue;
                cu_bwd = exact((size_t)(p->nseq + 1) * sizeof(int32_t));
                memcpy(cu_bwd, p->cu, (size_t)(p->nseq + 1) * sizeof(int32_t));
                cu_bwd[k] += step;
                bp.cfg.cu_seqlens = cu_bwd;
                bp.cfg.scale = c->scale;
                /* the backward's workspace follows its own split (the longest sequence); a saved
                 * buffer too small for that split is reported before the mismatch */
                size_t need_saved = 0;
                rewy_saved_size(&bp.cfg, &need_saved);
                rewy_bwd_workspace_size(&bp.cfg, &bp.workspace_bytes);
                bws_other = exact(bp.workspace_bytes);
                bp.workspace = bws_other;
                if (need_saved > saved_bytes) want = REWY_ERR_WORKSPACE;
                break;
            }
            break;
        default: break;
        }
        s = rewy_validate_bwd(&bp, msg, sizeof msg);
        expect(p, "rewy_validate_bwd", s, want, msg);
        expect(p, "rewy_backward", rewy_backward(&bp), want, NULL);

        if (want == REWY_OK) {
            if (memcmp(saved_copy, saved, saved_bytes) != 0) fail(p, "the backward modified the saved buffer");
            /* ---- the fp64 oracle on exactly the values the library read */
            rewy_ref_problem rp;
            memset(&rp, 0, sizeof rp);
            rp.cfg = *c;
            rp.q = q.x64; rp.k = k.x64; rp.v = v.x64; rp.g = p->ng ? gt.x64 : NULL;
            rp.beta = p->nbeta ? beta.x64 : NULL; rp.b = p->nb ? bb.x64 : NULL; rp.w = p->nw ? ww.x64 : NULL;
            rp.h0 = h0 ? h0t.x64 : NULL;
            double *ro = exact(p->nv * 8), *rht = exact(p->ns * 8), *rdq = exact(p->nq * 8), *rdk = exact(p->nq * 8),
                   *rdv = exact(p->nv * 8), *rdg = exact(p->ng * 8), *rdbeta = exact(p->nbeta * 8),
                   *rdb = exact(p->nb * 8), *rdw = exact(p->nw * 8), *rdh0 = exact(p->ns * 8);
            if (rewy_ref_forward(&rp, ro, rht) ||
                rewy_ref_backward(&rp, dout.x64, dht ? dhtt.x64 : NULL, rdq, rdk, rdv, p->ng ? rdg : NULL,
                                  p->nbeta ? rdbeta : NULL, p->nb ? rdb : NULL, p->nw ? rdw : NULL, rdh0))
                fail(p, "the oracle failed");
            const double M = REWY_CHECK_TOL_MAIN, G = REWY_CHECK_TOL_GATE;
            compare(p, "o", o, dt, ro, p->nv, M);
            if (ht) compare(p, "ht", ht, st, rht, p->ns, M);
            compare(p, "dq", dq.x, dt, rdq, p->nq, M);
            compare(p, "dk", dk.x, dt, rdk, p->nq, M);
            compare(p, "dv", dv.x, dt, rdv, p->nv, M);
            if (dh0) compare(p, "dh0", dh0, st, rdh0, p->ns, M);
            if (dg) compare(p, "dg", dg, st, rdg, p->ng, G);
            if (p->nbeta) compare(p, "dbeta", dbeta.x, dt, rdbeta, p->nbeta, G);
            if (p->nb) compare(p, "db", db.x, dt, rdb, p->nb, G);
            if (p->nw) compare(p, "dw", dw.x, dt, rdw, p->nw, G);
            free(ro); free(rht); free(rdq); free(rdk); free(rdv); free(rdg); free(rdbeta); free(rdb); free(rdw);
            free(rdh0);
        }
        drop(&dq); drop(&dk); drop(&dv); drop(&dbeta); drop(&db); drop(&dw);
        drop(&dgt); drop(&dh0t); drop(&h0_only_bwd); free(saved_copy); free(cu_bwd); free(bws_other);
    }

    drop(&q); drop(&k); drop(&v); drop(&dout); drop(&beta); drop(&bb); drop(&ww);
    drop(&gt); drop(&h0t); drop(&dhtt); drop(&htt);
    free(o); free(saved); free(fws); free(bws); free(cu);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    problem p;
    parse(&r, &p);
    run(&p);
    return 0;
}
