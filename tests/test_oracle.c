/* test_oracle.c: the fp64 oracle checked against first principles, not against itself.
 *
 *  1. Forward: the oracle matches a direct loop written in the unrolled form
 *     S_t = (I − k eᵀ) Diag(exp g) S_{t−1} + k (w ⊙ v)ᵀ  (e = b ⊙ k), with its own indexing of
 *     the API layouts; a sequence split into two calls (ht → h0) equals one call; a varlen
 *     call equals separate calls per sequence.
 *  2. Backward: every input gradient (q, k, v, g, β or b and w, h0) of every operator equals
 *     a central finite difference of the loss  L = Σ o ⊙ ō + Σ ht ⊙ h̄t  (random ō, h̄t),
 *     at the head level (T up to 50: several checkpoint segments, a partial last one) and
 *     through rewy_ref_backward (T = 1 and 7, K ≠ V, GVA, varlen, state_v_first, h0 NULL and
 *     given, dht NULL, β = 0 on some tokens).
 *  3. Bad arguments are refused.
 */
#include "check/oracle.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "check/rng.h"

#define FD_STEP 1e-6
#define FD_TOL 1e-6  /* relative L2 agreement of analytic and finite-difference gradients */
#define FWD_TOL 1e-12 /* the same fp64 recurrence computed two ways */
#define MAXD 8        /* largest K or V the direct loops handle */

/* ---------------------------------------------------------------- small helpers */

static double rng_gauss(rng *r) {
    const double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static void fill_gauss(rng *r, double *x, size_t n, double sd) {
    for (size_t i = 0; i < n; i++) x[i] = sd * rng_gauss(r);
}
static void fill_unif(rng *r, double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r);
}
/* log σ(x): a log decay in (−∞, 0), moderate for x ~ N(1, 1) */
static void fill_logsig(rng *r, double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = -log1p(exp(-(1.0 + rng_gauss(r))));
}
/* unit-norm rows, like the l2-normalized keys of the models (keeps DeltaNet contractive) */
static void normalize_rows(double *x, size_t rows, int d) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0.0;
        for (int i = 0; i < d; i++) s += x[r * d + i] * x[r * d + i];
        s = 1.0 / sqrt(s);
        for (int i = 0; i < d; i++) x[r * d + i] *= s;
    }
}
static double *dalloc(size_t n) { /* test-side allocation; zeroed; exit on failure */
    double *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
static void fill_nan(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
/* ‖a − b‖ / max(‖b‖, floor); +inf if anything is not finite */
static double rel_err(const double *a, const double *b, size_t n, double floor) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    den = sqrt(den);
    return sqrt(num) / (den > floor ? den : floor);
}

static const char *op_name(rewy_op op) {
    static const char *names[] = {"DeltaNet", "GDN", "KDA", "GDN2"};
    return names[op];
}

/* ---------------------------------------------------------------- direct loops */

/* One token in the unrolled form S ← (I − k eᵀ) Diag(a) S + k (w⊙v)ᵀ, building the K×K
 * transition explicitly; then o = Sᵀ (scale q). S is [K][V]. */
static void direct_token(int K, int V, const double *a, const double *e, const double *k,
                         const double *wv, const double *q, double scale, double *S,
                         double *o) {
    double A[MAXD][MAXD], Sn[MAXD][MAXD];
    for (int i = 0; i < K; i++)
        for (int l = 0; l < K; l++) A[i][l] = ((i == l) - k[i] * e[l]) * a[l];
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) {
            double s = k[i] * wv[j];
            for (int l = 0; l < K; l++) s += A[i][l] * S[l * V + j];
            Sn[i][j] = s;
        }
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++) S[i * V + j] = Sn[i][j];
    for (int j = 0; j < V; j++) {
        double s = 0.0;
        for (int i = 0; i < K; i++) s += S[i * V + j] * q[i];
        o[j] = scale * s;
    }
}

static void direct_head(const rewy_oracle_head *p, double *o, double *hT) {
    const int K = p->K, V = p->V;
    double S[MAXD * MAXD] = {0}, a[MAXD], e[MAXD], wv[MAXD];
    if (p->h0) memcpy(S, p->h0, sizeof(double) * K * V);
    for (int t = 0; t < p->T; t++) {
        for (int i = 0; i < K; i++) {
            a[i] = exp(p->g[t * K + i]);
            e[i] = p->b[t * K + i] * p->k[t * K + i];
        }
        for (int j = 0; j < V; j++) wv[j] = p->w[t * V + j] * p->v[t * V + j];
        direct_token(K, V, a, e, p->k + t * K, wv, p->q + t * K, p->scale, S, o + t * V);
    }
    memcpy(hT, S, sizeof(double) * K * V);
}

/* The whole problem, indexing the API layouts directly (independent of oracle.c). */
static void direct_problem(const rewy_ref_problem *p, double *o, double *ht) {
    const rewy_config *c = &p->cfg;
    const int H = c->H, HV = c->HV ? c->HV : c->H, K = c->K, V = c->V;
    const int N = c->cu_seqlens ? c->num_seqs : c->B;
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)K);
    for (int n = 0; n < N; n++)
        for (int hv = 0; hv < HV; hv++) {
            const int h = hv / (HV / H);
            const int bos = c->cu_seqlens ? c->cu_seqlens[n] : n * c->T;
            const int eos = c->cu_seqlens ? c->cu_seqlens[n + 1] : (n + 1) * c->T;
            double S[MAXD * MAXD] = {0}, a[MAXD], e[MAXD], wv[MAXD];
            double *st = ht ? ht + (size_t)(n * HV + hv) * K * V : NULL;
            const double *s0 = p->h0 ? p->h0 + (size_t)(n * HV + hv) * K * V : NULL;
            for (int i = 0; i < K; i++)
                for (int j = 0; j < V; j++)
                    S[i * V + j] = !s0 ? 0.0 : c->state_v_first ? s0[j * K + i] : s0[i * V + j];
            for (int t = bos; t < eos; t++) {
                const double *q = p->q + (t * H + h) * K, *k = p->k + (t * H + h) * K;
                const double *v = p->v + (t * HV + hv) * V;
                for (int i = 0; i < K; i++) {
                    double g = 0.0, b;
                    if (c->op == REWY_OP_GDN) g = p->g[t * HV + hv];
                    if (c->op == REWY_OP_KDA || c->op == REWY_OP_GDN2)
                        g = p->g[(t * HV + hv) * K + i];
                    b = c->op == REWY_OP_GDN2 ? p->b[(t * HV + hv) * K + i] : p->beta[t * HV + hv];
                    a[i] = exp(g);
                    e[i] = b * k[i];
                }
                for (int j = 0; j < V; j++) {
                    const double w = c->op == REWY_OP_GDN2 ? p->w[(t * HV + hv) * V + j]
                                                           : p->beta[t * HV + hv];
                    wv[j] = w * v[j];
                }
                direct_token(K, V, a, e, k, wv, q, scale, S, o + (t * HV + hv) * V);
            }
            if (st)
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < V; j++)
                        st[c->state_v_first ? j * K + i : i * V + j] = S[i * V + j];
        }
}

/* ---------------------------------------------------------------- finite differences */

/* Loss evaluator: L(x) for the current contents of the inputs. */
typedef double (*loss_fn)(void *ctx);

/* Central differences of L over x[0..n), compared with the analytic gradient an. */
static void check_fd(test_counts *tc, const char *what, loss_fn L, void *ctx, double *x,
                     size_t n, const double *an, double *worst) {
    double *fd = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i];
        x[i] = x0 + FD_STEP;
        const double lp = L(ctx);
        x[i] = x0 - FD_STEP;
        const double lm = L(ctx);
        x[i] = x0;
        fd[i] = (lp - lm) / (2.0 * FD_STEP);
    }
    /* floor: a gradient that is truly ~0 is compared in absolute terms */
    const double err = rel_err(an, fd, n, 1e-3);
    if (err > *worst) *worst = err;
    CHECK(tc, err <= FD_TOL, "%s: analytic vs finite-difference rel err %.3e", what, err);
    free(fd);
}

/* ---- head level */

typedef struct head_case {
    rewy_oracle_head h;
    double *q, *k, *v, *g, *b, *w, *h0; /* mutable copies behind h */
    double *dO, *dhT, *o, *hT;
} head_case;

static double head_loss(void *ctx) {
    head_case *c = ctx;
    if (rewy_oracle_head_forward(&c->h, c->o, c->hT)) return NAN;
    return dot(c->o, c->dO, (size_t)c->h.T * c->h.V) + dot(c->hT, c->dhT, (size_t)c->h.K * c->h.V);
}

static void head_case_init(head_case *c, rng *r, int T, int K, int V) {
    const size_t TK = (size_t)T * K, TV = (size_t)T * V, KV = (size_t)K * V;
    c->q = dalloc(TK), c->k = dalloc(TK), c->g = dalloc(TK), c->b = dalloc(TK);
    c->v = dalloc(TV), c->w = dalloc(TV), c->dO = dalloc(TV), c->o = dalloc(TV);
    c->h0 = dalloc(KV), c->dhT = dalloc(KV), c->hT = dalloc(KV);
    fill_gauss(r, c->q, TK, 1.0);
    fill_gauss(r, c->k, TK, 1.0);
    normalize_rows(c->k, (size_t)T, K);
    fill_logsig(r, c->g, TK);
    fill_unif(r, c->b, TK, 0.1, 0.9);
    fill_gauss(r, c->v, TV, 1.0);
    fill_unif(r, c->w, TV, 0.1, 0.9);
    fill_gauss(r, c->dO, TV, 1.0);
    fill_gauss(r, c->h0, KV, 0.5);
    fill_gauss(r, c->dhT, KV, 0.5);
    if (T > 2) { /* an erase-free and a write-free token */
        memset(c->b + K, 0, sizeof(double) * K);
        memset(c->w + 2 * V, 0, sizeof(double) * V);
    }
    c->h = (rewy_oracle_head){.T = T, .K = K, .V = V, .scale = 0.6, .q = c->q, .k = c->k,
                              .v = c->v, .g = c->g, .b = c->b, .w = c->w, .h0 = c->h0};
}

static void head_case_free(head_case *c) {
    free(c->q), free(c->k), free(c->g), free(c->b), free(c->v), free(c->w);
    free(c->dO), free(c->o), free(c->h0), free(c->dhT), free(c->hT);
}

static void test_head_forward(test_counts *tc, rng *r) {
    for (int with_h0 = 0; with_h0 < 2; with_h0++) {
        head_case c;
        head_case_init(&c, r, 9, 3, 5);
        if (!with_h0) c.h.h0 = NULL;
        double o_ref[9 * 5], hT_ref[3 * 5];
        direct_head(&c.h, o_ref, hT_ref);
        int rc = rewy_oracle_head_forward(&c.h, c.o, c.hT);
        CHECK(tc, rc == 0, "head forward rc %d", rc);
        double eo = rel_err(c.o, o_ref, 45, 1e-300), eh = rel_err(c.hT, hT_ref, 15, 1e-300);
        CHECK(tc, eo <= FWD_TOL && eh <= FWD_TOL,
              "head forward vs direct loop (h0 %s): o %.3e ht %.3e", with_h0 ? "given" : "NULL", eo, eh);
        /* hT may be NULL */
        rc = rewy_oracle_head_forward(&c.h, c.o, NULL);
        CHECK(tc, rc == 0 && rel_err(c.o, o_ref, 45, 1e-300) <= FWD_TOL, "head forward, hT NULL");
        head_case_free(&c);
    }
}

static void test_head_backward(test_counts *tc, rng *r, double *worst) {
    /* T = 16 is a perfect square (4 full segments); T = 50 has C = 8 and a partial last
     * segment of 2 tokens; T = 1, 2 are the degenerate segmentations. */
    const int Ts[] = {1, 2, 16, 50};
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        const int T = Ts[ti], K = 3, V = 4;
        const size_t TK = (size_t)T * K, TV = (size_t)T * V, KV = (size_t)K * V;
        head_case c;
        head_case_init(&c, r, T, K, V);
        double *dq = dalloc(TK), *dk = dalloc(TK), *dg = dalloc(TK), *db = dalloc(TK);
        double *dv = dalloc(TV), *dw = dalloc(TV), *dh0 = dalloc(KV);
        fill_nan(dq, TK), fill_nan(dk, TK), fill_nan(dg, TK), fill_nan(db, TK);
        fill_nan(dv, TV), fill_nan(dw, TV), fill_nan(dh0, KV); /* must all be overwritten */
        int rc = rewy_oracle_head_backward(&c.h, c.dO, c.dhT, dq, dk, dv, dg, db, dw, dh0);
        CHECK(tc, rc == 0, "head backward rc %d", rc);
        char what[64];
#define FD(name, x, n, an)                                                           \
    snprintf(what, sizeof what, "head T=%d d%s", T, name);                          \
    check_fd(tc, what, head_loss, &c, x, n, an, worst)
        FD("q", c.q, TK, dq);
        FD("k", c.k, TK, dk);
        FD("v", c.v, TV, dv);
        FD("g", c.g, TK, dg);
        FD("b", c.b, TK, db);
        FD("w", c.w, TV, dw);
        FD("h0", c.h0, KV, dh0);
#undef FD
        /* NULL outputs are skipped, the rest unchanged; dhT NULL = zero final gradient */
        double *dq2 = dalloc(TK), *dv2 = dalloc(TV);
        rc = rewy_oracle_head_backward(&c.h, c.dO, c.dhT, dq2, NULL, dv2, NULL, NULL, NULL, NULL);
        CHECK(tc, rc == 0 && rel_err(dq2, dq, TK, 1e-300) == 0.0 && rel_err(dv2, dv, TV, 1e-300) == 0.0,
              "head T=%d backward with NULL outputs", T);
        memset(c.dhT, 0, sizeof(double) * KV);
        double *dv3 = dalloc(TV);
        rewy_oracle_head_backward(&c.h, c.dO, NULL, NULL, NULL, dv3, NULL, NULL, NULL, NULL);
        rewy_oracle_head_backward(&c.h, c.dO, c.dhT, NULL, NULL, dv2, NULL, NULL, NULL, NULL);
        CHECK(tc, rel_err(dv3, dv2, TV, 1e-300) == 0.0, "head T=%d: dhT NULL equals dhT = 0", T);
        free(dq2), free(dv2), free(dv3);
        free(dq), free(dk), free(dg), free(db), free(dv), free(dw), free(dh0);
        head_case_free(&c);
    }
}

/* ---- problem level */

enum { IQ, IK, IV, IG, IBETA, IB, IW, IH0, NIN };
static const char *in_name[NIN] = {"q", "k", "v", "g", "beta", "b", "w", "h0"};

typedef struct case_def {
    const char *name;
    int B, T, H, HV, K, V;
    const int32_t *cu;
    int num_seqs;
    int v_first, has_h0, has_dht;
    float scale;
} case_def;

typedef struct prob {
    rewy_ref_problem p;
    double *x[NIN];   /* inputs; NULL where the operator has none */
    size_t n[NIN];
    size_t no, nh;    /* sizes of o and of a state tensor */
    double *dO, *dht, *o, *ht;
    int use_dht;
} prob;

static double prob_loss(void *ctx) {
    prob *pb = ctx;
    if (rewy_ref_forward(&pb->p, pb->o, pb->ht)) return NAN;
    return dot(pb->o, pb->dO, pb->no) + (pb->use_dht ? dot(pb->ht, pb->dht, pb->nh) : 0.0);
}

static void prob_init(prob *pb, rewy_op op, const case_def *cd, rng *r) {
    memset(pb, 0, sizeof *pb);
    const int HV = cd->HV ? cd->HV : cd->H, N = cd->cu ? cd->num_seqs : cd->B;
    const size_t BT = (size_t)cd->B * cd->T, K = (size_t)cd->K, V = (size_t)cd->V;
    rewy_config *c = &pb->p.cfg;
    c->op = op;
    c->B = cd->B, c->T = cd->T, c->H = cd->H, c->HV = cd->HV, c->K = cd->K, c->V = cd->V;
    c->scale = cd->scale;
    c->cu_seqlens = cd->cu;
    c->num_seqs = cd->num_seqs;
    c->state_v_first = cd->v_first;

    pb->n[IQ] = pb->n[IK] = BT * cd->H * K;
    pb->n[IV] = BT * HV * V;
    pb->n[IG] = op == REWY_OP_DELTANET ? 0 : op == REWY_OP_GDN ? BT * HV : BT * HV * K;
    pb->n[IBETA] = op == REWY_OP_GDN2 ? 0 : BT * HV;
    pb->n[IB] = op == REWY_OP_GDN2 ? BT * HV * K : 0;
    pb->n[IW] = op == REWY_OP_GDN2 ? BT * HV * V : 0;
    pb->n[IH0] = (size_t)N * HV * K * V;
    for (int a = 0; a < NIN; a++) pb->x[a] = pb->n[a] ? dalloc(pb->n[a]) : NULL;

    fill_gauss(r, pb->x[IQ], pb->n[IQ], 1.0);
    fill_gauss(r, pb->x[IK], pb->n[IK], 1.0);
    normalize_rows(pb->x[IK], BT * cd->H, cd->K);
    fill_gauss(r, pb->x[IV], pb->n[IV], 1.0);
    if (pb->x[IG]) fill_logsig(r, pb->x[IG], pb->n[IG]);
    if (pb->x[IBETA]) {
        fill_unif(r, pb->x[IBETA], pb->n[IBETA], 0.1, 0.9);
        if (BT > 1) pb->x[IBETA][1 * HV + 0] = 0.0;             /* β = 0: global token 1, head 0 */
        if (BT > 3) pb->x[IBETA][3 * HV + HV - 1] = 0.0;        /* and token 3, last head */
    }
    if (pb->x[IB]) {
        fill_unif(r, pb->x[IB], pb->n[IB], 0.1, 0.9);
        fill_unif(r, pb->x[IW], pb->n[IW], 0.1, 0.9);
        if (BT > 1) memset(pb->x[IB] + (1 * HV + 0) * K, 0, sizeof(double) * K); /* b = 0 */
        if (BT > 2) memset(pb->x[IW] + (2 * HV + 0) * V, 0, sizeof(double) * V); /* w = 0 */
        if (BT > 3) { /* both zero on one token: the β = 0 analogue */
            memset(pb->x[IB] + (3 * HV + HV - 1) * K, 0, sizeof(double) * K);
            memset(pb->x[IW] + (3 * HV + HV - 1) * V, 0, sizeof(double) * V);
        }
    }
    if (cd->has_h0) fill_gauss(r, pb->x[IH0], pb->n[IH0], 0.5); /* else stays zero */

    pb->p.q = pb->x[IQ], pb->p.k = pb->x[IK], pb->p.v = pb->x[IV], pb->p.g = pb->x[IG];
    pb->p.beta = pb->x[IBETA], pb->p.b = pb->x[IB], pb->p.w = pb->x[IW];
    pb->p.h0 = cd->has_h0 ? pb->x[IH0] : NULL;

    pb->no = pb->n[IV];
    pb->nh = pb->n[IH0];
    pb->dO = dalloc(pb->no), pb->o = dalloc(pb->no);
    pb->dht = dalloc(pb->nh), pb->ht = dalloc(pb->nh);
    fill_gauss(r, pb->dO, pb->no, 1.0);
    pb->use_dht = cd->has_dht;
    if (pb->use_dht) fill_gauss(r, pb->dht, pb->nh, 0.5);
}

static void prob_free(prob *pb) {
    for (int a = 0; a < NIN; a++) free(pb->x[a]);
    free(pb->dO), free(pb->o), free(pb->dht), free(pb->ht);
}

static void test_ref_forward(test_counts *tc, rewy_op op, const case_def *cd, rng *r) {
    prob pb;
    prob_init(&pb, op, cd, r);
    double *o_ref = dalloc(pb.no), *ht_ref = dalloc(pb.nh);
    fill_nan(pb.o, pb.no), fill_nan(pb.ht, pb.nh);
    direct_problem(&pb.p, o_ref, ht_ref);
    int rc = rewy_ref_forward(&pb.p, pb.o, pb.ht);
    double eo = rel_err(pb.o, o_ref, pb.no, 1e-300), eh = rel_err(pb.ht, ht_ref, pb.nh, 1e-300);
    CHECK(tc, rc == 0 && eo <= FWD_TOL && eh <= FWD_TOL,
          "%s %s: ref forward vs direct loop: rc %d, o %.3e, ht %.3e", op_name(op), cd->name, rc, eo, eh);
    free(o_ref), free(ht_ref);
    prob_free(&pb);
}

static void test_ref_backward(test_counts *tc, rewy_op op, const case_def *cd, rng *r,
                              double *worst) {
    prob pb;
    prob_init(&pb, op, cd, r);
    double *grad[NIN];
    for (int a = 0; a < NIN; a++) {
        grad[a] = pb.n[a] ? dalloc(pb.n[a]) : NULL;
        if (grad[a]) fill_nan(grad[a], pb.n[a]); /* every element must be written */
    }
    int rc = rewy_ref_backward(&pb.p, pb.dO, pb.use_dht ? pb.dht : NULL, grad[IQ], grad[IK],
                               grad[IV], grad[IG], grad[IBETA], grad[IB], grad[IW], grad[IH0]);
    CHECK(tc, rc == 0, "%s %s: ref backward rc %d", op_name(op), cd->name, rc);

    /* h0 NULL means a zero initial state: differentiate at an explicit zero h0 */
    pb.p.h0 = pb.x[IH0];
    char what[96];
    for (int a = 0; a < NIN; a++) {
        if (!pb.x[a]) continue;
        snprintf(what, sizeof what, "%s %s d%s", op_name(op), cd->name, in_name[a]);
        check_fd(tc, what, prob_loss, &pb, pb.x[a], pb.n[a], grad[a], worst);
    }
    for (int a = 0; a < NIN; a++) free(grad[a]);
    prob_free(&pb);
}

/* ht of a sequence run in two calls (ht of the first as h0 of the second) equals one call;
 * a varlen call equals one call per sequence. */
static void test_split(test_counts *tc, rewy_op op, rng *r) {
    const case_def full = {"split", 1, 7, 1, 2, 3, 4, NULL, 0, 1, 1, 1, 0.0f};
    prob pb;
    prob_init(&pb, op, &full, r);
    const int HV = 2, K = 3, V = 4, t_cut = 3;
    double *o1 = dalloc(pb.no), *mid = dalloc(pb.nh), *ht2 = dalloc(pb.nh);
    rewy_ref_problem a = pb.p, b = pb.p;
    a.cfg.T = t_cut;
    b.cfg.T = full.T - t_cut;
    /* B = 1 time-first layout: the second part starts t_cut tokens in */
    const size_t tok_qk = (size_t)1 * K, tok_v = (size_t)HV * V;
    b.q = pb.p.q + t_cut * tok_qk, b.k = pb.p.k + t_cut * tok_qk, b.v = pb.p.v + t_cut * tok_v;
    if (pb.p.g) b.g = pb.p.g + t_cut * (op == REWY_OP_GDN ? (size_t)HV : (size_t)HV * K);
    if (pb.p.beta) b.beta = pb.p.beta + t_cut * HV;
    if (pb.p.b) b.b = pb.p.b + t_cut * (size_t)HV * K, b.w = pb.p.w + t_cut * tok_v;
    b.h0 = mid;
    int rc = rewy_ref_forward(&pb.p, pb.o, pb.ht);
    rc |= rewy_ref_forward(&a, o1, mid);
    rc |= rewy_ref_forward(&b, o1 + t_cut * tok_v, ht2);
    double eo = rel_err(o1, pb.o, pb.no, 1e-300), eh = rel_err(ht2, pb.ht, pb.nh, 1e-300);
    CHECK(tc, rc == 0 && eo <= FWD_TOL && eh <= FWD_TOL,
          "%s: split 3+4 vs one call: rc %d, o %.3e, ht %.3e", op_name(op), rc, eo, eh);
    free(o1), free(mid), free(ht2);
    prob_free(&pb);

    /* varlen {0,2,7} equals B=1 calls of T=2 and T=5 with their own h0 */
    static const int32_t cu[] = {0, 2, 7};
    const case_def vl = {"varlen", 1, 7, 1, 2, 3, 4, cu, 2, 0, 1, 1, 0.5f};
    prob_init(&pb, op, &vl, r);
    rc = rewy_ref_forward(&pb.p, pb.o, pb.ht);
    double *os = dalloc(pb.no), *hs = dalloc(pb.nh);
    const size_t KVH = (size_t)HV * K * V;
    for (int n = 0; n < 2; n++) {
        rewy_ref_problem s = pb.p;
        const int bos = cu[n];
        s.cfg.cu_seqlens = NULL, s.cfg.num_seqs = 0, s.cfg.T = cu[n + 1] - cu[n];
        s.q = pb.p.q + bos * tok_qk, s.k = pb.p.k + bos * tok_qk, s.v = pb.p.v + bos * tok_v;
        if (pb.p.g) s.g = pb.p.g + bos * (op == REWY_OP_GDN ? (size_t)HV : (size_t)HV * K);
        if (pb.p.beta) s.beta = pb.p.beta + bos * HV;
        if (pb.p.b) s.b = pb.p.b + bos * (size_t)HV * K, s.w = pb.p.w + bos * tok_v;
        s.h0 = pb.p.h0 + n * KVH;
        rc |= rewy_ref_forward(&s, os + bos * tok_v, hs + n * KVH);
    }
    eo = rel_err(os, pb.o, pb.no, 1e-300), eh = rel_err(hs, pb.ht, pb.nh, 1e-300);
    CHECK(tc, rc == 0 && eo == 0.0 && eh == 0.0,
          "%s: varlen vs per-sequence calls: rc %d, o %.3e, ht %.3e", op_name(op), rc, eo, eh);
    free(os), free(hs);
    prob_free(&pb);
}

static void test_bad_args(test_counts *tc, rng *r) {
    /* head level */
    head_case c;
    head_case_init(&c, r, 3, 2, 2);
    double g[6];
    rewy_oracle_head h = c.h;
    CHECK(tc, rewy_oracle_head_forward(NULL, c.o, NULL) != 0, "head forward: p NULL");
    CHECK(tc, rewy_oracle_head_forward(&h, NULL, NULL) != 0, "head forward: o NULL");
    h.T = 0;
    CHECK(tc, rewy_oracle_head_forward(&h, c.o, NULL) != 0, "head forward: T = 0");
    h = c.h, h.K = -1;
    CHECK(tc, rewy_oracle_head_backward(&h, c.dO, NULL, g, 0, 0, 0, 0, 0, 0) != 0, "head backward: K < 0");
    h = c.h, h.g = NULL;
    CHECK(tc, rewy_oracle_head_backward(&h, c.dO, NULL, g, 0, 0, 0, 0, 0, 0) != 0, "head backward: g NULL");
    CHECK(tc, rewy_oracle_head_backward(&c.h, NULL, NULL, g, 0, 0, 0, 0, 0, 0) != 0, "head backward: do NULL");
    head_case_free(&c);

    /* problem level: one valid GDN problem, then one defect at a time */
    static const int32_t cu_ok[] = {0, 2, 4}, cu_end[] = {0, 2, 3}, cu_flat[] = {0, 2, 2, 4};
    const case_def cd = {"bad", 2, 4, 2, 4, 3, 2, NULL, 0, 0, 1, 1, 0.0f};
    prob pb;
    prob_init(&pb, REWY_OP_GDN, &cd, r);
    double *d = dalloc(pb.n[IV]);
    CHECK(tc, rewy_ref_forward(&pb.p, pb.o, pb.ht) == 0, "baseline problem accepted");
    rewy_ref_problem p;
#define BAD(stmt, msg)                                                                  \
    do {                                                                                \
        p = pb.p;                                                                       \
        stmt;                                                                           \
        CHECK(tc, rewy_ref_forward(&p, pb.o, pb.ht) != 0, "ref forward accepts %s", msg); \
        CHECK(tc, rewy_ref_backward(&p, pb.dO, NULL, d, 0, 0, 0, 0, 0, 0, 0) != 0,       \
              "ref backward accepts %s", msg);                                         \
    } while (0)
    BAD(p.cfg.K = 0, "K = 0");
    BAD(p.cfg.V = -2, "V < 0");
    BAD(p.cfg.B = 0, "B = 0");
    BAD(p.cfg.T = 0, "T = 0");
    BAD(p.cfg.HV = 3, "HV % H != 0");
    BAD(p.cfg.op = (rewy_op)7, "op = 7");
    BAD(p.q = NULL, "q NULL");
    BAD(p.v = NULL, "v NULL");
    BAD(p.g = NULL, "GDN without g");
    BAD(p.beta = NULL, "GDN without beta");
    BAD((p.cfg.op = REWY_OP_GDN2, p.b = NULL), "GDN2 without b");
    BAD((p.cfg.cu_seqlens = cu_ok, p.cfg.num_seqs = 2), "cu_seqlens with B = 2");
    BAD((p.cfg.B = 1, p.cfg.cu_seqlens = cu_end, p.cfg.num_seqs = 2), "cu_seqlens not ending at T");
    BAD((p.cfg.B = 1, p.cfg.cu_seqlens = cu_flat, p.cfg.num_seqs = 3), "an empty sequence");
    BAD((p.cfg.B = 1, p.cfg.cu_seqlens = cu_ok, p.cfg.num_seqs = 0), "num_seqs = 0");
#undef BAD
    CHECK(tc, rewy_ref_forward(&pb.p, NULL, pb.ht) != 0, "ref forward accepts o NULL");
    CHECK(tc, rewy_ref_backward(&pb.p, NULL, NULL, d, 0, 0, 0, 0, 0, 0, 0) != 0,
          "ref backward accepts do NULL");
    free(d);
    prob_free(&pb);
}

int main(void) {
    test_counts tc = {0, 0};
    rng r = {0x5eed0fdeadbeefull};
    const clock_t t0 = clock();
    double worst_fd = 0.0;

    test_head_forward(&tc, &r);
    test_head_backward(&tc, &r, &worst_fd);

    static const int32_t cu2[] = {0, 2, 7}, cu3[] = {0, 1, 3};
    const case_def cases[] = {
        /* name           B  T  H HV K V  cu   N  vfirst h0 dht scale */
        {"T1 B2",         2, 1, 1, 1, 3, 4, NULL, 0, 0, 0, 1, 0.0f},
        {"T7 GVA",        1, 7, 1, 2, 3, 4, NULL, 0, 0, 1, 1, 0.7f},
        {"varlen vfirst", 1, 7, 1, 2, 4, 3, cu2,  2, 1, 1, 1, 0.0f},
        {"B2 H2 HV4",     2, 5, 2, 4, 3, 4, NULL, 0, 1, 0, 0, 0.0f},
        {"varlen T1",     1, 3, 2, 2, 2, 3, cu3,  2, 0, 1, 1, 1.3f},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int op = REWY_OP_DELTANET; op <= REWY_OP_GDN2; op++) {
        for (int i = 0; i < ncases; i++) {
            test_ref_forward(&tc, (rewy_op)op, &cases[i], &r);
            test_ref_backward(&tc, (rewy_op)op, &cases[i], &r, &worst_fd);
        }
        test_split(&tc, (rewy_op)op, &r);
    }
    test_bad_args(&tc, &r);

    printf("test_oracle: worst finite-difference rel err %.2e (tol %.0e), %.2f s cpu\n", worst_fd,
           FD_TOL, (double)(clock() - t0) / CLOCKS_PER_SEC);
    return test_finish(&tc);
}
