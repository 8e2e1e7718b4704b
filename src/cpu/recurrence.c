/* recurrence.c: the fp64 token recurrence of MATH §1 and its reverse mode (recurrence.h).
 *
 * Per token t (state S ∈ R^{K×V}, row-major [K][V]; e_t = b_t ⊙ k_t):
 *
 *     S⁻_t = Diag(exp g_t) S_{t−1}
 *     r_t  = w_t ⊙ v_t − S⁻_tᵀ e_t
 *     S_t  = S⁻_t + k_t r_tᵀ
 *     o_t  = S_tᵀ (scale · q_t)
 *
 * The backward differentiates exactly these four lines token by token, walking t from T−1
 * down to 0 with the state adjoint S̄ (initialised to the final-state gradient). It never
 * uses the chunk algebra of MATH §2–§7, so the oracle built on it checks the chunk paths
 * independently; the CPU backend runs it as the exact REWY_F64 path.
 *
 * Reverse mode needs S_{t−1} at every token, in reverse order. Keeping all of them costs
 * T·K·V doubles (512 MB at T = 1000, K = V = 256), so the backward checkpoints: it keeps
 * S every C = ⌈√T⌉ tokens and, per segment, recomputes the C states forward before walking
 * the segment backward. Memory is about 2√T·K·V; arithmetic is about two forwards.
 * Nothing here allocates: scratch comes from the caller (the API's workspace, or the
 * oracle's malloc).
 */
#include "cpu/recurrence.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------
 * One head, one sequence
 * ---------------------------------------------------------------------------------------- */

static int head_valid(const rewy_oracle_head *p) {
    return p && p->T > 0 && p->K > 0 && p->V > 0 && p->q && p->k && p->v && p->g && p->b &&
           p->w;
}

/* One token of the recurrence: from S_prev, write S⁻ into S_dec, r into r, S_t into S_new.
 * The three state pointers may alias (the forward runs in place): every element of S_prev
 * is read before the same element of S_dec is written, and S_dec is fully formed before the
 * rank-one write reads it. */
static void token_step(int K, int V, const double *g, const double *b, const double *w,
                       const double *k, const double *v, const double *S_prev, double *S_dec,
                       double *r, double *S_new) {
    /* S⁻ = Diag(exp g) S_prev */
    for (int i = 0; i < K; i++) {
        const double a = exp(g[i]);
        for (int j = 0; j < V; j++) S_dec[(size_t)i * V + j] = a * S_prev[(size_t)i * V + j];
    }
    /* r = w ⊙ v − S⁻ᵀ (b ⊙ k) */
    for (int j = 0; j < V; j++) r[j] = w[j] * v[j];
    for (int i = 0; i < K; i++) {
        const double e = b[i] * k[i];
        for (int j = 0; j < V; j++) r[j] -= S_dec[(size_t)i * V + j] * e;
    }
    /* S_t = S⁻ + k rᵀ */
    for (int i = 0; i < K; i++)
        for (int j = 0; j < V; j++)
            S_new[(size_t)i * V + j] = S_dec[(size_t)i * V + j] + k[i] * r[j];
}

/* o = Sᵀ (scale · q) */
static void read_out(int K, int V, double scale, const double *S, const double *q, double *o) {
    for (int j = 0; j < V; j++) o[j] = 0.0;
    for (int i = 0; i < K; i++) {
        const double sq = scale * q[i];
        for (int j = 0; j < V; j++) o[j] += S[(size_t)i * V + j] * sq;
    }
}

/* The token-t arguments of token_step, taken from the head's [T][K] / [T][V] rows. */
#define TOKEN_ARGS(p, t)                                                                   \
    (p)->K, (p)->V, (p)->g + (size_t)(t) * (p)->K, (p)->b + (size_t)(t) * (p)->K,          \
        (p)->w + (size_t)(t) * (p)->V, (p)->k + (size_t)(t) * (p)->K,                      \
        (p)->v + (size_t)(t) * (p)->V

/* The recurrence over all T tokens, in place on S, from h0 (or zero). The forward reads
 * every token out into o; the backward's first pass keeps S before every C-th token in
 * ckpt (segment s starts at token s·C). Either may be NULL. r: V scratch. */
static void run_head(const rewy_oracle_head *p, double *S, double *r, double *o, double *ckpt, int C) {
    const size_t KV = (size_t)p->K * p->V;
    if (p->h0) memcpy(S, p->h0, KV * sizeof *S);
    else memset(S, 0, KV * sizeof *S); /* all-zero bits are 0.0 in IEEE 754 */
    for (int t = 0; t < p->T; t++) {
        if (ckpt && t % C == 0) memcpy(ckpt + (size_t)(t / C) * KV, S, KV * sizeof *S);
        token_step(TOKEN_ARGS(p, t), S, S, r, S);
        if (o) read_out(p->K, p->V, p->scale, S, p->q + (size_t)t * p->K, o + (size_t)t * p->V);
    }
}

size_t rewy_rec_head_fwd_doubles(int K, int V) { return (size_t)K * V + (size_t)V; }

int rewy_rec_head_forward(const rewy_oracle_head *p, double *o, double *hT, double *scratch) {
    if (!head_valid(p) || !o || !scratch) return 1;
    const size_t KV = (size_t)p->K * p->V;
    double *S = scratch, *r = scratch + KV;
    run_head(p, S, r, o, NULL, 0);
    if (hT) memcpy(hT, S, KV * sizeof *S);
    return 0;
}

/* Copy a per-token gradient row to its output, unless that output was not asked for. */
static void put_row(double *dst, int t, int n, const double *src) {
    if (dst) memcpy(dst + (size_t)t * n, src, (size_t)n * sizeof *src);
}

/* Segment length C = ⌈√T⌉ balances the checkpoints (⌈T/C⌉ states) against one recomputed
 * segment (C states). */
static int segment_len(int T) {
    int C = (int)ceil(sqrt((double)T));
    if (C < 1) C = 1;
    while ((long long)C * C < T) C++; /* guard against sqrt rounding down */
    return C;
}

size_t rewy_rec_head_bwd_doubles(int T, int K, int V) {
    const int C = segment_len(T), nseg = (T + C - 1) / C;
    /* ckpt [nseg], seg [C], S⁻, S_t, S̄ states; per-token vectors r, r̄, v̄, w̄ [V], ē, q̄, k̄, b̄, ḡ [K] */
    return ((size_t)nseg + (size_t)C + 3) * K * V + 5 * (size_t)K + 4 * (size_t)V;
}

int rewy_rec_head_backward(const rewy_oracle_head *p, const double *do_, const double *dhT,
                           double *dq, double *dk, double *dv, double *dg, double *db,
                           double *dw, double *dh0, double *scratch) {
    if (!head_valid(p) || !do_ || !scratch) return 1;
    const int T = p->T, K = p->K, V = p->V;
    const size_t KV = (size_t)K * V;
    const int C = segment_len(T), nseg = (T + C - 1) / C;

    double *ckpt = scratch;                     /* ckpt[s] = S before token s·C */
    double *seg = ckpt + (size_t)nseg * KV;     /* seg[j] = S before token t0+j */
    double *S_dec = seg + (size_t)C * KV;       /* S⁻_t */
    double *S_t = S_dec + KV;                   /* S_t */
    double *dS = S_t + KV;                      /* adjoint of the running state */
    double *vec = dS + KV;                      /* per-token vectors */
    double *r = vec, *dr = r + V, *dv_t = dr + V, *dw_t = dv_t + V;
    double *de = dw_t + V, *dq_t = de + K, *dk_t = dq_t + K, *db_t = dk_t + K, *dg_t = db_t + K;

    /* Forward pass that keeps only the checkpoints (dS doubles as the running state). */
    run_head(p, dS, r, NULL, ckpt, C);

    /* S̄_T = the final-state gradient. */
    if (dhT) memcpy(dS, dhT, KV * sizeof *dS);
    else memset(dS, 0, KV * sizeof *dS);

    const double scale = p->scale;
    for (int s = nseg - 1; s >= 0; s--) {
        const int t0 = s * C, t1 = t0 + C < T ? t0 + C : T;
        /* Recompute the states entering tokens t0 .. t1−1 from the checkpoint. */
        memcpy(seg, ckpt + (size_t)s * KV, KV * sizeof *seg);
        for (int t = t0; t + 1 < t1; t++) {
            double *S_in = seg + (size_t)(t - t0) * KV, *S_out = S_in + KV;
            token_step(TOKEN_ARGS(p, t), S_in, S_out, r, S_out);
        }

        for (int t = t1 - 1; t >= t0; t--) {
            const double *S_prev = seg + (size_t)(t - t0) * KV;
            const double *q = p->q + (size_t)t * K, *k = p->k + (size_t)t * K;
            const double *g = p->g + (size_t)t * K, *b = p->b + (size_t)t * K;
            const double *v = p->v + (size_t)t * V, *w = p->w + (size_t)t * V;
            const double *dO = do_ + (size_t)t * V;
            token_step(TOKEN_ARGS(p, t), S_prev, S_dec, r, S_t);

            /* o = S_tᵀ (scale q):  q̄ = scale · S_t ō,  S̄_t += scale · q ōᵀ */
            for (int i = 0; i < K; i++) {
                double acc = 0.0;
                for (int j = 0; j < V; j++) {
                    acc += S_t[(size_t)i * V + j] * dO[j];
                    dS[(size_t)i * V + j] += scale * q[i] * dO[j];
                }
                dq_t[i] = scale * acc;
            }
            /* S_t = S⁻ + k rᵀ:  k̄ = S̄_t r,  r̄ = S̄_tᵀ k,  S̄⁻ = S̄_t (+ the r term below) */
            for (int j = 0; j < V; j++) dr[j] = 0.0;
            for (int i = 0; i < K; i++) {
                double acc = 0.0;
                for (int j = 0; j < V; j++) {
                    acc += dS[(size_t)i * V + j] * r[j];
                    dr[j] += k[i] * dS[(size_t)i * V + j];
                }
                dk_t[i] = acc;
            }
            /* r = w ⊙ v − S⁻ᵀ e:  w̄ = r̄ ⊙ v,  v̄ = r̄ ⊙ w,  ē = −S⁻ r̄,  S̄⁻ −= e r̄ᵀ */
            for (int j = 0; j < V; j++) {
                dw_t[j] = dr[j] * v[j];
                dv_t[j] = dr[j] * w[j];
            }
            for (int i = 0; i < K; i++) {
                const double e = b[i] * k[i];
                double acc = 0.0;
                for (int j = 0; j < V; j++) {
                    acc += S_dec[(size_t)i * V + j] * dr[j];
                    dS[(size_t)i * V + j] -= e * dr[j];
                }
                de[i] = -acc;
            }
            /* e = b ⊙ k:  b̄ = ē ⊙ k,  k̄ += ē ⊙ b */
            for (int i = 0; i < K; i++) {
                db_t[i] = de[i] * k[i];
                dk_t[i] += de[i] * b[i];
            }
            /* S⁻ = Diag(exp g) S_{t−1}:  ḡ_i = Σ_j S̄⁻_ij S⁻_ij  (d exp g / dg = exp g),
             * S̄_{t−1} = Diag(exp g) S̄⁻ */
            for (int i = 0; i < K; i++) {
                const double a = exp(g[i]);
                double acc = 0.0;
                for (int j = 0; j < V; j++) {
                    acc += dS[(size_t)i * V + j] * S_dec[(size_t)i * V + j];
                    dS[(size_t)i * V + j] *= a;
                }
                dg_t[i] = acc;
            }
            put_row(dq, t, K, dq_t);
            put_row(dk, t, K, dk_t);
            put_row(dv, t, V, dv_t);
            put_row(dg, t, K, dg_t);
            put_row(db, t, K, db_t);
            put_row(dw, t, V, dw_t);
        }
    }
    if (dh0) memcpy(dh0, dS, KV * sizeof *dS);
    return 0;
}

#undef TOKEN_ARGS

/* ------------------------------------------------------------------------------------------
 * Whole problem with the API layouts
 * ---------------------------------------------------------------------------------------- */

/* The resolved shape of a problem: defaults applied, sequences located. */
typedef struct ref_shape {
    rewy_op op;
    int T, H, HV, K, V;
    int group;          /* HV / H: value heads per query/key head */
    int N;              /* number of sequences */
    int v_first;        /* states stored [V][K] per head */
    double scale;
    const int32_t *cu;  /* varlen boundaries, or NULL */
} ref_shape;

static int ref_shape_init(const rewy_config *c, ref_shape *s) {
    if (c->op < REWY_OP_DELTANET || c->op > REWY_OP_GDN2) return 1;
    s->op = c->op;
    s->T = c->T;
    s->H = c->H;
    s->HV = c->HV ? c->HV : c->H;
    s->K = c->K;
    s->V = c->V;
    if (c->B <= 0 || s->T <= 0 || s->H <= 0 || s->HV <= 0 || s->K <= 0 || s->V <= 0) return 1;
    if (s->HV % s->H) return 1;
    s->group = s->HV / s->H;
    s->v_first = c->state_v_first != 0;
    s->scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)s->K);
    s->cu = c->cu_seqlens;
    if (s->cu) {
        /* Packed sequences: B = 1, boundaries 0 = cu[0] < cu[1] < ... < cu[N] = T. */
        if (c->B != 1 || c->num_seqs <= 0 || s->cu[0] != 0 || s->cu[c->num_seqs] != s->T)
            return 1;
        for (int n = 0; n < c->num_seqs; n++)
            if (s->cu[n + 1] <= s->cu[n]) return 1;
        s->N = c->num_seqs;
    } else {
        s->N = c->B;
    }
    return 0;
}

/* The shape, and the inputs the operator reads (others are ignored). */
static int ref_problem_init(const rewy_ref_problem *p, ref_shape *s) {
    if (!p || ref_shape_init(&p->cfg, s)) return 1;
    if (!p->q || !p->k || !p->v) return 1;
    if (s->op != REWY_OP_DELTANET && !p->g) return 1;
    if (s->op == REWY_OP_GDN2 ? (!p->b || !p->w) : !p->beta) return 1;
    return 0;
}

/* Sequence n covers global tokens [bos, bos + len) of the flattened [B·T] token axis. */
static void seq_range(const ref_shape *s, int n, size_t *bos, int *len) {
    if (s->cu) {
        *bos = (size_t)s->cu[n];
        *len = s->cu[n + 1] - s->cu[n];
    } else {
        *bos = (size_t)n * s->T;
        *len = s->T;
    }
}

/* Offset of element (i, j) = (key feature, value feature) of state (n, hv). */
static size_t state_idx(const ref_shape *s, int n, int hv, int i, int j) {
    const size_t base = ((size_t)n * s->HV + hv) * s->K * s->V;
    return base + (s->v_first ? (size_t)j * s->K + i : (size_t)i * s->V + j);
}

/* State (n, hv) between the API layout and a head's row-major [K][V]. */
static void state_to_head(const ref_shape *s, int n, int hv, const double *api, double *head) {
    for (int i = 0; i < s->K; i++)
        for (int j = 0; j < s->V; j++) head[(size_t)i * s->V + j] = api[state_idx(s, n, hv, i, j)];
}

static void state_from_head(const ref_shape *s, int n, int hv, const double *head, double *api) {
    for (int i = 0; i < s->K; i++)
        for (int j = 0; j < s->V; j++) api[state_idx(s, n, hv, i, j)] = head[(size_t)i * s->V + j];
}

/* One value head's inputs in the generic vector form, plus room for its outputs. */
typedef struct head_buf {
    rewy_oracle_head h;
    double *q, *k, *v, *g, *b, *w, *h0;  /* gathered inputs */
    double *o, *hT;                      /* forward outputs */
    double *do_, *dht;                   /* backward inputs */
    double *dq, *dk, *dv, *dg, *db, *dw, *dh0;
} head_buf;

/* Doubles of a head_buf for `len` tokens. */
static size_t head_buf_doubles(int len, int K, int V, int backward) {
    const size_t TK = (size_t)len * K, TV = (size_t)len * V, KV = (size_t)K * V;
    /* forward: q k g b [T][K], v w o [T][V], h0 hT [K][V];
     * backward adds do dv dw [T][V], dq dk dg db [T][K], dht dh0 [K][V] */
    return (4 * TK + 3 * TV + 2 * KV) * (backward ? 2 : 1);
}

/* Lay a head_buf out over m (head_buf_doubles of it). */
static void head_buf_carve(head_buf *hb, double *m, int len, int K, int V, int backward) {
    const size_t TK = (size_t)len * K, TV = (size_t)len * V, KV = (size_t)K * V;
    memset(hb, 0, sizeof *hb);
    hb->q = m; m += TK;
    hb->k = m; m += TK;
    hb->g = m; m += TK;
    hb->b = m; m += TK;
    hb->v = m; m += TV;
    hb->w = m; m += TV;
    hb->o = m; m += TV;
    hb->h0 = m; m += KV;
    hb->hT = m; m += KV;
    if (backward) {
        hb->do_ = m; m += TV;
        hb->dv = m; m += TV;
        hb->dw = m; m += TV;
        hb->dq = m; m += TK;
        hb->dk = m; m += TK;
        hb->dg = m; m += TK;
        hb->db = m; m += TK;
        hb->dht = m; m += KV;
        hb->dh0 = m;
    }
}

/* Map sequence n, value head hv to the vector form of MATH §1 (table of operators):
 * DeltaNet g = 0; GDN g broadcast over K; β broadcast to b = β·1_K and w = β·1_V. */
static void gather_head(const rewy_ref_problem *p, const ref_shape *s, int n, int hv,
                        size_t bos, int len, head_buf *hb) {
    const int K = s->K, V = s->V, H = s->H, HV = s->HV, h = hv / s->group;
    for (int t = 0; t < len; t++) {
        const size_t gt = bos + (size_t)t;          /* global token */
        const size_t qk = (gt * H + h) * K;         /* [.,H,K] row */
        const size_t hk = (gt * HV + hv) * K;       /* [.,HV,K] row */
        const size_t hvv = (gt * HV + hv) * V;      /* [.,HV,V] row */
        const size_t hs = gt * HV + hv;             /* [.,HV] scalar */
        double *q = hb->q + (size_t)t * K, *k = hb->k + (size_t)t * K;
        double *g = hb->g + (size_t)t * K, *b = hb->b + (size_t)t * K;
        double *v = hb->v + (size_t)t * V, *w = hb->w + (size_t)t * V;
        for (int i = 0; i < K; i++) {
            q[i] = p->q[qk + i];
            k[i] = p->k[qk + i];
            switch (s->op) {
            case REWY_OP_DELTANET: g[i] = 0.0; break;
            case REWY_OP_GDN: g[i] = p->g[hs]; break;
            default: g[i] = p->g[hk + i]; break;
            }
            b[i] = s->op == REWY_OP_GDN2 ? p->b[hk + i] : p->beta[hs];
        }
        for (int j = 0; j < V; j++) {
            v[j] = p->v[hvv + j];
            w[j] = s->op == REWY_OP_GDN2 ? p->w[hvv + j] : p->beta[hs];
        }
    }
    if (p->h0) state_to_head(s, n, hv, p->h0, hb->h0);

    hb->h = (rewy_oracle_head){.T = len, .K = K, .V = V, .scale = s->scale,
                               .q = hb->q, .k = hb->k, .v = hb->v, .g = hb->g,
                               .b = hb->b, .w = hb->w, .h0 = p->h0 ? hb->h0 : NULL};
}

/* The longest sequence of a valid shape. */
static int longest(const ref_shape *s) {
    int m = 0;
    for (int n = 0; n < s->N; n++) {
        size_t bos;
        int len;
        seq_range(s, n, &bos, &len);
        if (len > m) m = len;
    }
    return m;
}

/* Forward slot: the head_buf and the head's scratch. Backward slot (a task per query/key
 * head): the group's q̄, k̄ sums, the head_buf and the head's scratch. */
static size_t slot_doubles(const ref_shape *s, int backward) {
    const int L = longest(s), K = s->K, V = s->V;
    if (!backward) return head_buf_doubles(L, K, V, 0) + rewy_rec_head_fwd_doubles(K, V);
    return 2 * (size_t)L * K + head_buf_doubles(L, K, V, 1) + rewy_rec_head_bwd_doubles(L, K, V);
}

size_t rewy_rec_slot_bytes(const rewy_config *cfg, int backward) {
    ref_shape s;
    if (!cfg || ref_shape_init(cfg, &s)) return 0;
    return slot_doubles(&s, backward) * sizeof(double);
}

/* Workers: one slot each, no more than the workspace holds, the threads or the tasks. */
static int workers(size_t workspace_bytes, size_t slot_bytes, int64_t tasks) {
    size_t n = workspace_bytes / slot_bytes, m = (size_t)omp_get_max_threads();
    n = n < m ? n : m;
    n = n < (size_t)tasks ? n : (size_t)tasks;
    return (int)n;
}

int rewy_rec_forward(const rewy_ref_problem *p, double *o, double *ht, void *workspace,
                     size_t workspace_bytes) {
    ref_shape s;
    if (ref_problem_init(p, &s) || !o || !workspace) return 1;
    const int K = s.K, V = s.V, HV = s.HV;
    const int64_t tasks = (int64_t)s.N * HV;
    const size_t slot = slot_doubles(&s, 0);
    const int nw = workers(workspace_bytes, slot * sizeof(double), tasks);
    if (nw < 1) return 1;

    /* Every (sequence, value head) is independent and writes disjoint parts of o and ht. */
#pragma omp parallel for num_threads(nw) schedule(dynamic) if (nw > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int n = (int)(task / HV), hv = (int)(task % HV);
        double *mem = (double *)workspace + (size_t)omp_get_thread_num() * slot;
        size_t bos;
        int len;
        seq_range(&s, n, &bos, &len);
        head_buf hb;
        head_buf_carve(&hb, mem, len, K, V, 0);
        gather_head(p, &s, n, hv, bos, len, &hb);
        rewy_rec_head_forward(&hb.h, hb.o, hb.hT, mem + head_buf_doubles(len, K, V, 0));
        for (int t = 0; t < len; t++)
            memcpy(o + ((bos + (size_t)t) * HV + hv) * V, hb.o + (size_t)t * V, (size_t)V * sizeof *o);
        if (ht) state_from_head(&s, n, hv, hb.hT, ht);
    }
    return 0;
}

int rewy_rec_backward(const rewy_ref_problem *p, const double *do_, const double *dht,
                      double *dq, double *dk, double *dv, double *dg, double *dbeta,
                      double *db, double *dw, double *dh0, void *workspace, size_t workspace_bytes) {
    ref_shape s;
    if (ref_problem_init(p, &s) || !do_ || !workspace) return 1;
    const int K = s.K, V = s.V, H = s.H, HV = s.HV;
    const int64_t tasks = (int64_t)s.N * H;
    const size_t slot = slot_doubles(&s, 1);
    const int nw = workers(workspace_bytes, slot * sizeof(double), tasks);
    if (nw < 1) return 1;

    /* One task per (sequence, query/key head): it runs the group's value heads in turn and
     * sums their q̄, k̄ itself, so no two tasks write the same element. */
#pragma omp parallel for num_threads(nw) schedule(dynamic) if (nw > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int n = (int)(task / H), h = (int)(task % H);
        size_t bos;
        int len;
        seq_range(&s, n, &bos, &len);
        double *dq_sum = (double *)workspace + (size_t)omp_get_thread_num() * slot;
        double *dk_sum = dq_sum + (size_t)len * K;
        memset(dq_sum, 0, (size_t)len * K * 2 * sizeof *dq_sum);
        head_buf hb;
        head_buf_carve(&hb, dk_sum + (size_t)len * K, len, K, V, 1);
        double *scratch = dk_sum + (size_t)len * K + head_buf_doubles(len, K, V, 1);

        for (int hv = h * s.group; hv < (h + 1) * s.group; hv++) {
            gather_head(p, &s, n, hv, bos, len, &hb);
            for (int t = 0; t < len; t++)
                memcpy(hb.do_ + (size_t)t * V, do_ + ((bos + (size_t)t) * HV + hv) * V,
                       (size_t)V * sizeof *do_);
            if (dht) state_to_head(&s, n, hv, dht, hb.dht);
            rewy_rec_head_backward(&hb.h, hb.do_, dht ? hb.dht : NULL, hb.dq, hb.dk, hb.dv, hb.dg,
                                   hb.db, hb.dw, hb.dh0, scratch);
            for (size_t x = 0; x < (size_t)len * K; x++) {
                dq_sum[x] += hb.dq[x];
                dk_sum[x] += hb.dk[x];
            }
            /* Reduce the vector-form gradients back to the operator's inputs. */
            for (int t = 0; t < len; t++) {
                const size_t gt = bos + (size_t)t, hs = gt * HV + hv;
                const double *dg_t = hb.dg + (size_t)t * K, *db_t = hb.db + (size_t)t * K;
                const double *dv_t = hb.dv + (size_t)t * V, *dw_t = hb.dw + (size_t)t * V;
                if (dv) memcpy(dv + hs * V, dv_t, (size_t)V * sizeof *dv);
                if (dg && s.op == REWY_OP_GDN) {
                    double acc = 0.0; /* scalar gate: ḡ = Σ_K of the per-feature ḡ */
                    for (int i = 0; i < K; i++) acc += dg_t[i];
                    dg[hs] = acc;
                } else if (dg && s.op != REWY_OP_DELTANET) {
                    memcpy(dg + hs * K, dg_t, (size_t)K * sizeof *dg);
                }
                if (s.op == REWY_OP_GDN2) {
                    if (db) memcpy(db + hs * K, db_t, (size_t)K * sizeof *db);
                    if (dw) memcpy(dw + hs * V, dw_t, (size_t)V * sizeof *dw);
                } else if (dbeta) {
                    /* β feeds both gates: β̄ = Σ_K b̄ + Σ_V w̄ (no division by β) */
                    double acc = 0.0;
                    for (int i = 0; i < K; i++) acc += db_t[i];
                    for (int j = 0; j < V; j++) acc += dw_t[j];
                    dbeta[hs] = acc;
                }
            }
            if (dh0) state_from_head(&s, n, hv, hb.dh0, dh0);
        }
        for (int t = 0; t < len; t++) {
            const size_t row = ((bos + (size_t)t) * H + h) * K;
            if (dq) memcpy(dq + row, dq_sum + (size_t)t * K, (size_t)K * sizeof *dq);
            if (dk) memcpy(dk + row, dk_sum + (size_t)t * K, (size_t)K * sizeof *dk);
        }
    }
    return 0;
}
