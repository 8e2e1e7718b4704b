/* test_f64.c: REWY_F64 on the CPU backend, the exact fp64 recurrence behind the public API.
 *
 *  1. Plumbing: rewy_forward / rewy_backward with REWY_F64 give exactly (bit for bit) the
 *     oracle's rewy_ref_forward / rewy_ref_backward: every operator, both policies, GVA, varlen,
 *     state_v_first, K ≠ V, h0 and dht given or NULL (dh0 then the gradient at a zero state).
 *  2. Gradients: every input gradient the library returns equals a central finite difference of
 *     L = Σ o ⊙ ō + Σ ht ⊙ h̄t through the library's own forward (relative L2 ≤ 1e-6 over sampled
 *     elements), so the whole fp64 path (gradcheck's view of it) is checked end to end.
 *  3. Independence: the fp32 chunk kernels on the same inputs agree with it within MATH §10.
 *  4. Errors: CUDA + F64, gates and states aligned to 4 but not 8 bytes, a backward whose
 *     dtype differs from the forward's.
 */
#include "check/oracle.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "check/rng.h"

#define FD_STEP 1e-6
#define FD_TOL 1e-6
#define FD_SAMPLES 6 /* elements per input perturbed */

static double gauss(rng *r) { return sqrt(-2.0 * log(1.0 - rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r)); }

typedef struct f64_case {
    const char *name;
    rewy_op op;
    int B, T, H, HV, K, V, chunk;
    int nseq, lens[4];          /* varlen when nseq > 0 */
    int v_first, use_h0, use_dht;
    rewy_policy policy;
} f64_case;

/* Inputs, gradients, and everything sized from the case. */
typedef struct prob {
    rewy_config cfg;
    int32_t cu[5];
    size_t nqk, nv, nbeta, ng, nb, nw, ns; /* element counts; 0 where the op has none */
    double *q, *k, *v, *g, *beta, *b, *w, *h0, *dO, *dht;
} prob;

static double *dalloc(size_t n) { return n ? calloc(n, sizeof(double)) : NULL; }

static void prob_init(prob *p, const f64_case *c, uint64_t seed) {
    memset(p, 0, sizeof *p);
    rewy_config *f = &p->cfg;
    f->op = c->op;
    f->backend = REWY_BACKEND_CPU;
    f->dtype = REWY_F64;
    f->B = c->B;
    f->T = c->T;
    f->H = c->H;
    f->HV = c->HV;
    f->K = c->K;
    f->V = c->V;
    f->chunk_size = c->chunk;
    f->policy = c->policy;
    f->state_v_first = c->v_first;
    int N = c->B;
    if (c->nseq) {
        p->cu[0] = 0;
        for (int i = 0; i < c->nseq; i++) p->cu[i + 1] = p->cu[i] + c->lens[i];
        f->B = 1;
        f->T = p->cu[c->nseq];
        f->cu_seqlens = p->cu;
        f->num_seqs = N = c->nseq;
    }
    const size_t tok = (size_t)f->B * f->T, HV = (size_t)(c->HV ? c->HV : c->H);
    p->nqk = tok * c->H * c->K;
    p->nv = tok * HV * c->V;
    p->nbeta = c->op == REWY_OP_GDN2 ? 0 : tok * HV;
    p->ng = c->op == REWY_OP_DELTANET ? 0 : c->op == REWY_OP_GDN ? tok * HV : tok * HV * c->K;
    p->nb = c->op == REWY_OP_GDN2 ? tok * HV * c->K : 0;
    p->nw = c->op == REWY_OP_GDN2 ? p->nv : 0;
    p->ns = (size_t)N * HV * c->K * c->V;
    rng r = {seed};
    p->q = dalloc(p->nqk);
    p->k = dalloc(p->nqk);
    p->v = dalloc(p->nv);
    p->dO = dalloc(p->nv);
    p->g = dalloc(p->ng);
    p->beta = dalloc(p->nbeta);
    p->b = dalloc(p->nb);
    p->w = dalloc(p->nw);
    p->h0 = c->use_h0 ? dalloc(p->ns) : NULL;
    p->dht = c->use_dht ? dalloc(p->ns) : NULL;
    for (size_t i = 0; i < p->nqk; i++) p->q[i] = gauss(&r) / sqrt(c->K);
    for (size_t i = 0; i < p->nqk; i++) p->k[i] = gauss(&r) / sqrt(c->K);
    for (size_t i = 0; i < p->nv; i++) p->v[i] = gauss(&r);
    for (size_t i = 0; i < p->nv; i++) p->dO[i] = gauss(&r);
    for (size_t i = 0; i < p->ng; i++) p->g[i] = -log1p(exp(-gauss(&r))) / 16.0; /* MATH §10: log σ(x)/16 */
    for (size_t i = 0; i < p->nbeta; i++) p->beta[i] = 0.1 + 0.8 * rng_uniform(&r);
    for (size_t i = 0; i < p->nb; i++) p->b[i] = 0.1 + 0.8 * rng_uniform(&r);
    for (size_t i = 0; i < p->nw; i++) p->w[i] = 0.1 + 0.8 * rng_uniform(&r);
    for (size_t i = 0; p->h0 && i < p->ns; i++) p->h0[i] = 0.1 * gauss(&r);
    for (size_t i = 0; p->dht && i < p->ns; i++) p->dht[i] = 0.1 * gauss(&r);
}

static void prob_free(prob *p) {
    double *a[] = {p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0, p->dO, p->dht};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) free(a[i]);
}

/* Outputs of one forward + backward. */
typedef struct outs { double *o, *ht, *dq, *dk, *dv, *dg, *dbeta, *db, *dw, *dh0; } outs;

static void outs_alloc(outs *x, const prob *p) {
    x->o = dalloc(p->nv);
    x->ht = dalloc(p->ns);
    x->dq = dalloc(p->nqk);
    x->dk = dalloc(p->nqk);
    x->dv = dalloc(p->nv);
    x->dg = dalloc(p->ng);
    x->dbeta = dalloc(p->nbeta);
    x->db = dalloc(p->nb);
    x->dw = dalloc(p->nw);
    x->dh0 = dalloc(p->ns);
}

static void outs_free(outs *x) {
    double *a[] = {x->o, x->ht, x->dq, x->dk, x->dv, x->dg, x->dbeta, x->db, x->dw, x->dh0};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) free(a[i]);
}

/* The library's forward (and backward when bwd): returns the first non-OK status. */
static rewy_status lib_run(const prob *p, outs *x, int bwd) {
    size_t saved_bytes, fws, bws;
    rewy_status s;
    if ((s = rewy_saved_size(&p->cfg, &saved_bytes)) || (s = rewy_fwd_workspace_size(&p->cfg, &fws)) ||
        (s = rewy_bwd_workspace_size(&p->cfg, &bws)))
        return s;
    void *saved = aligned_alloc(16, (saved_bytes + 15) / 16 * 16);
    void *ws = aligned_alloc(16, ((fws > bws ? fws : bws) + 15) / 16 * 16);
    rewy_fwd_params f = {.cfg = p->cfg, .q = p->q, .k = p->k, .v = p->v, .g = (const float *)(void *)p->g,
                         .beta = p->beta, .b = p->b, .w = p->w, .h0 = (const float *)(void *)p->h0,
                         .o = x->o, .ht = (float *)(void *)x->ht, .saved = saved, .workspace = ws,
                         .workspace_bytes = fws, .saved_bytes = saved_bytes};
    s = rewy_forward(&f);
    if (!s && bwd) {
        rewy_bwd_params b = {.cfg = p->cfg, .q = p->q, .k = p->k, .v = p->v, .g = f.g, .beta = p->beta,
                             .b = p->b, .w = p->w, .h0 = f.h0, .saved = saved, .saved_bytes = saved_bytes,
                             .do_ = p->dO, .dht = (const float *)(void *)p->dht, .dq = x->dq, .dk = x->dk,
                             .dv = x->dv, .dg = (float *)(void *)x->dg, .dbeta = x->dbeta, .db = x->db,
                             .dw = x->dw, .dh0 = (float *)(void *)x->dh0, .workspace = ws,
                             .workspace_bytes = bws};
        s = rewy_backward(&b);
    }
    free(saved);
    free(ws);
    return s;
}

static int same(const double *a, const double *b, size_t n) { return n == 0 || memcmp(a, b, n * sizeof *a) == 0; }

/* 1. exactly the oracle */
static void check_oracle(test_counts *tc, const f64_case *c, const prob *p, const outs *x) {
    rewy_ref_problem rp = {p->cfg, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, p->h0};
    outs r;
    outs_alloc(&r, p);
    int rc = rewy_ref_forward(&rp, r.o, r.ht) ||
             rewy_ref_backward(&rp, p->dO, p->dht, r.dq, r.dk, r.dv, r.dg, r.dbeta, r.db, r.dw, r.dh0);
    CHECK(tc, rc == 0, "%s: oracle failed", c->name);
    const struct { const char *n; const double *a, *b; size_t len; } f[] = {
        {"o", x->o, r.o, p->nv}, {"ht", x->ht, r.ht, p->ns}, {"dq", x->dq, r.dq, p->nqk},
        {"dk", x->dk, r.dk, p->nqk}, {"dv", x->dv, r.dv, p->nv}, {"dg", x->dg, r.dg, p->ng},
        {"dbeta", x->dbeta, r.dbeta, p->nbeta}, {"db", x->db, r.db, p->nb}, {"dw", x->dw, r.dw, p->nw},
        {"dh0", x->dh0, r.dh0, p->ns}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        CHECK(tc, same(f[i].a, f[i].b, f[i].len), "%s: %s differs from the oracle's", c->name, f[i].n);
    outs_free(&r);
}

static double loss(const prob *p, const outs *x) {
    double L = 0.0;
    for (size_t i = 0; i < p->nv; i++) L += x->o[i] * p->dO[i];
    for (size_t i = 0; p->dht && i < p->ns; i++) L += x->ht[i] * p->dht[i];
    return L;
}

/* 2. central differences of the library's forward against its backward */
static void check_fd(test_counts *tc, const f64_case *c, prob *p, const outs *x, rng *r) {
    outs y;
    outs_alloc(&y, p);
    struct { const char *n; double *in; const double *grad; size_t len; } f[] = {
        {"q", p->q, x->dq, p->nqk}, {"k", p->k, x->dk, p->nqk}, {"v", p->v, x->dv, p->nv},
        {"g", p->g, x->dg, p->ng}, {"beta", p->beta, x->dbeta, p->nbeta}, {"b", p->b, x->db, p->nb},
        {"w", p->w, x->dw, p->nw}, {"h0", p->h0, x->dh0, p->h0 ? p->ns : 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].len) continue;
        double num = 0.0, den = 0.0;
        for (int s = 0; s < FD_SAMPLES; s++) {
            const size_t j = (size_t)(rng_next(r) % f[i].len);
            const double x0 = f[i].in[j];
            f[i].in[j] = x0 + FD_STEP;
            rewy_status s1 = lib_run(p, &y, 0);
            const double Lp = loss(p, &y);
            f[i].in[j] = x0 - FD_STEP;
            rewy_status s2 = lib_run(p, &y, 0);
            const double Lm = loss(p, &y);
            f[i].in[j] = x0;
            CHECK(tc, !s1 && !s2, "%s: forward failed", c->name);
            const double fd = (Lp - Lm) / (2 * FD_STEP), an = f[i].grad[j];
            num += (fd - an) * (fd - an);
            den += an * an;
        }
        const double err = sqrt(num) / (sqrt(den) > 1e-12 ? sqrt(den) : 1.0);
        CHECK(tc, err <= FD_TOL, "%s: d%s vs finite differences: rel err %.3g > %g", c->name, f[i].n, err, FD_TOL);
    }
    outs_free(&y);
}

/* 3. the fp32 chunk kernels on the same inputs, within MATH §10 (0.8% outputs, states, q̄ k̄ v̄
 * S̄_0; 2% gates; max abs 1e-6 where the reference is tiny). */
static float *to_f32(const double *x, size_t n) {
    if (!x || !n) return NULL;
    float *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}
static float *f32_zeros(size_t n) { return n ? calloc(n, sizeof(float)) : NULL; }

static double rel_err(const float *a, const double *ref, size_t n, double *maxabs) {
    double num = 0, den = 0;
    *maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        num += d * d;
        den += ref[i] * ref[i];
        if (!(d <= *maxabs)) *maxabs = d; /* NaN sticks */
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void check_chunk_f32(test_counts *tc, const f64_case *c, const prob *p, const outs *x) {
    rewy_config cfg = p->cfg;
    cfg.dtype = REWY_F32;
    float *in[] = {to_f32(p->q, p->nqk), to_f32(p->k, p->nqk), to_f32(p->v, p->nv), to_f32(p->g, p->ng),
                   to_f32(p->beta, p->nbeta), to_f32(p->b, p->nb), to_f32(p->w, p->nw),
                   to_f32(p->h0, p->ns), to_f32(p->dO, p->nv), to_f32(p->dht, p->ns)};
    const size_t n_out[] = {p->nv, p->ns, p->nqk, p->nqk, p->nv, p->ng, p->nbeta, p->nb, p->nw, p->ns};
    float *out[10];
    for (int i = 0; i < 10; i++) out[i] = f32_zeros(n_out[i]);
    size_t sb, fws, bws;
    rewy_saved_size(&cfg, &sb);
    rewy_fwd_workspace_size(&cfg, &fws);
    rewy_bwd_workspace_size(&cfg, &bws);
    void *saved = aligned_alloc(16, (sb + 15) / 16 * 16), *ws = aligned_alloc(16, ((fws > bws ? fws : bws) + 15) / 16 * 16);
    rewy_fwd_params f = {.cfg = cfg, .q = in[0], .k = in[1], .v = in[2], .g = in[3], .beta = in[4], .b = in[5],
                         .w = in[6], .h0 = in[7], .o = out[0], .ht = out[1], .saved = saved, .workspace = ws,
                         .workspace_bytes = fws, .saved_bytes = sb};
    rewy_bwd_params b = {.cfg = cfg, .q = in[0], .k = in[1], .v = in[2], .g = in[3], .beta = in[4], .b = in[5],
                         .w = in[6], .h0 = in[7], .saved = saved, .saved_bytes = sb, .do_ = in[8], .dht = in[9],
                         .dq = out[2], .dk = out[3], .dv = out[4], .dg = out[5], .dbeta = out[6], .db = out[7],
                         .dw = out[8], .dh0 = out[9], .workspace = ws, .workspace_bytes = bws};
    rewy_status s = rewy_forward(&f);
    if (!s) s = rewy_backward(&b);
    CHECK(tc, s == REWY_OK, "%s: fp32 chunk path: %s", c->name, rewy_strerror(s));
    const char *names[] = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "db", "dw", "dh0"};
    const double *ref[] = {x->o, x->ht, x->dq, x->dk, x->dv, x->dg, x->dbeta, x->db, x->dw, x->dh0};
    for (int i = 0; i < 10 && !s; i++) {
        if (!n_out[i]) continue;
        const double tol = (i >= 5 && i <= 8) ? 0.02 : 0.008;
        double maxabs, e = rel_err(out[i], ref[i], n_out[i], &maxabs);
        CHECK(tc, e <= tol || maxabs <= 1e-6, "%s: fp32 chunk %s vs fp64: rel err %.3g > %g", c->name, names[i], e, tol);
    }
    for (int i = 0; i < 10; i++) { free(in[i]); free(out[i]); }
    free(saved);
    free(ws);
}

/* 4. errors */
static void check_errors(test_counts *tc) {
    f64_case c = {"errors", REWY_OP_GDN, 1, 9, 1, 1, 4, 3, 0, 0, {0}, 0, 1, 1, REWY_POLICY_R};
    prob p;
    prob_init(&p, &c, 1);
    char msg[256];
    size_t bytes;

    rewy_config cuda = p.cfg;
    cuda.backend = REWY_BACKEND_CUDA;
    rewy_fwd_params f = {.cfg = cuda};
    rewy_status s = rewy_validate_fwd(&f, msg, sizeof msg);
    CHECK(tc, s == REWY_ERR_BAD_DTYPE && strstr(msg, "CPU backend only"), "CUDA + F64: %d '%s'", (int)s, msg);
    CHECK(tc, rewy_saved_size(&cuda, &bytes) == REWY_ERR_BAD_DTYPE, "CUDA + F64 size query");
    rewy_config bad = p.cfg;
    bad.dtype = (rewy_dtype)4;
    CHECK(tc, rewy_saved_size(&bad, &bytes) == REWY_ERR_BAD_DTYPE, "dtype 4 is unknown");

    /* the saved buffer is the header alone, under either policy */
    for (int pol = 0; pol < 2; pol++) {
        rewy_config cf = p.cfg;
        cf.policy = (rewy_policy)pol;
        CHECK(tc, rewy_saved_size(&cf, &bytes) == REWY_OK && bytes == 128, "F64 saved size %zu, policy %d", bytes, pol);
    }

    /* gates and states are double: 4-byte alignment is not enough */
    size_t sb, ws_bytes;
    rewy_saved_size(&p.cfg, &sb);
    rewy_fwd_workspace_size(&p.cfg, &ws_bytes);
    void *saved = aligned_alloc(16, 128), *ws = aligned_alloc(16, (ws_bytes + 15) / 16 * 16);
    double *g4 = malloc((p.ng + 1) * sizeof *g4), *h4 = malloc((p.ns + 1) * sizeof *h4);
    double *o = calloc(p.nv, sizeof *o);
    rewy_fwd_params ok = {.cfg = p.cfg, .q = p.q, .k = p.k, .v = p.v, .g = (const float *)(void *)p.g,
                          .beta = p.beta, .h0 = (const float *)(void *)p.h0, .o = o, .saved = saved,
                          .workspace = ws, .workspace_bytes = ws_bytes, .saved_bytes = sb};
    CHECK(tc, rewy_validate_fwd(&ok, msg, sizeof msg) == REWY_OK, "F64 valid call: '%s'", msg);
    f = ok;
    f.g = (const float *)(const void *)((const char *)g4 + 4);
    CHECK(tc, rewy_validate_fwd(&f, msg, sizeof msg) == REWY_ERR_MISALIGNED && strstr(msg, "g must be 8-byte"),
          "F64 g at 4 mod 8: '%s'", msg);
    f = ok;
    f.h0 = (const float *)(const void *)((const char *)h4 + 4);
    CHECK(tc, rewy_validate_fwd(&f, msg, sizeof msg) == REWY_ERR_MISALIGNED && strstr(msg, "h0 must be 8-byte"),
          "F64 h0 at 4 mod 8: '%s'", msg);

    /* a backward in another dtype than the forward that wrote the saved buffer */
    CHECK(tc, rewy_forward(&ok) == REWY_OK, "F64 forward");
    rewy_config f32 = p.cfg;
    f32.dtype = REWY_F32;
    size_t bws;
    rewy_bwd_workspace_size(&f32, &bws);
    void *ws2 = aligned_alloc(16, (bws + 15) / 16 * 16);
    float *buf = calloc(4 * p.nqk + 4 * p.nv + 4 * p.ns + 4 * p.ng + 16, sizeof(float)); /* room for any of them */
    rewy_bwd_params b = {.cfg = f32, .q = buf, .k = buf, .v = buf, .g = buf, .beta = buf, .h0 = buf,
                         .saved = saved, .saved_bytes = 128 > sb ? 128 : sb, .do_ = buf, .dq = buf, .dk = buf,
                         .dv = buf, .dg = buf, .dbeta = buf, .dh0 = buf, .workspace = ws2, .workspace_bytes = bws};
    size_t f32_saved;
    rewy_saved_size(&f32, &f32_saved);
    void *big = aligned_alloc(16, (f32_saved + 15) / 16 * 16);
    memcpy(big, saved, 128);
    b.saved = big;
    b.saved_bytes = f32_saved;
    s = rewy_validate_bwd(&b, msg, sizeof msg);
    CHECK(tc, s == REWY_ERR_MISMATCH && strstr(msg, "dtype"), "F32 backward of an F64 forward: %d '%s'", (int)s, msg);
    free(big);
    free(buf);
    free(ws2);
    free(g4);
    free(h4);
    free(o);
    free(saved);
    free(ws);
    prob_free(&p);
}

int main(void) {
    test_counts tc = {0, 0};
    /* name, op, B, T, H, HV, K, V, chunk, nseq, lens, v_first, h0, dht, policy */
    const f64_case cases[] = {
        {"deltanet", REWY_OP_DELTANET, 2, 13, 2, 2, 5, 4, 16, 0, {0}, 0, 1, 1, REWY_POLICY_R},
        {"gdn policy A", REWY_OP_GDN, 2, 17, 1, 2, 4, 6, 16, 0, {0}, 0, 1, 1, REWY_POLICY_A},
        {"kda varlen", REWY_OP_KDA, 1, 0, 2, 2, 6, 5, 16, 3, {1, 7, 18}, 0, 1, 1, REWY_POLICY_R},
        {"gdn2 gva v_first", REWY_OP_GDN2, 1, 11, 1, 3, 4, 4, 32, 0, {0}, 1, 1, 1, REWY_POLICY_A},
        {"gdn no h0 no dht", REWY_OP_GDN, 1, 9, 1, 1, 3, 5, 64, 0, {0}, 0, 0, 0, REWY_POLICY_R},
        {"kda gva varlen A", REWY_OP_KDA, 1, 0, 1, 2, 3, 4, 16, 2, {5, 20}, 1, 0, 1, REWY_POLICY_A},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const f64_case *c = &cases[i];
        prob p;
        prob_init(&p, c, 100 + i);
        outs x;
        outs_alloc(&x, &p);
        rewy_status s = lib_run(&p, &x, 1);
        CHECK(&tc, s == REWY_OK, "%s: %s", c->name, rewy_strerror(s));
        if (!s) {
            check_oracle(&tc, c, &p, &x);
            rng r = {7 + i};
            check_fd(&tc, c, &p, &x, &r);
            check_chunk_f32(&tc, c, &p, &x);
        }
        outs_free(&x);
        prob_free(&p);
    }
    check_errors(&tc);
    return test_finish(&tc);
}
