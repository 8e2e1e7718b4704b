/* chunk_bwd.c: the complete chunkwise backward (MATH §3–§5, §8) on the CPU, with the
 * conventional WY pullback (§4a, 7 products) and ReWY (§4b, 3 products) side by side.
 *
 * Per value head: [policy R: recompute W, U, S_c, R from the saved A] then one reverse
 * scan over chunks. For each chunk, given Ō and S̄⁺ (the gradient of its outgoing state):
 *   R̄ = C_qᵀ Ō + F S̄⁺,  H_q = 𝓛_≤(Ō Rᵀ),  F̄ = R S̄⁺ᵀ                      (§3)
 *   pullback of M R = Z − E S  →  P (= Z̄), D, Ē_dir, S̄_res                   (§4)
 *   feature-local chain rule to q̄, k̄, v̄, gates; S̄ = Q_gᵀ Ō + Λ S̄⁺ + S̄_res   (§5)
 * Products with Y = K ⊘ γ go through the decayed products of chunk_common.c (§6, §7), so
 * nothing ever forms Y or divides by γ.
 */
#include <omp.h>
#include <string.h>

#include "backend.h"
#include "cpu/chunk.h"
#include "dtype.h"
#include "gates.h"

/* Scratch of one chunk's backward. */
typedef struct bwd_bufs {
    float *A, *Cq, *Hq, *D, *Ab, *T1;   /* n×n */
    float *Ob, *Rb, *P;                 /* n×V */
    float *Wb, *Ed, *ek, *yk, *qk, *Fb, *Gb; /* n×K */
    float *tmp;                         /* 2·n·max(K,n) */
    float *Sres;                        /* K×V */
} bwd_bufs;

static size_t bwd_chunk_floats(int BT, int K, int V) {
    int m = K > BT ? K : BT;
    return chunk_floats(BT, K, V) + 6 * (size_t)BT * BT + 3 * (size_t)BT * V + 7 * (size_t)BT * K +
           2 * (size_t)BT * m + (size_t)K * V + 20 * 16;
}

static void bwd_alloc(bwd_bufs *w, arena *a, int BT, int K, int V) {
    size_t nn = (size_t)BT * BT, nk = (size_t)BT * K, nv = (size_t)BT * V;
    float **sq[] = {&w->A, &w->Cq, &w->Hq, &w->D, &w->Ab, &w->T1};
    float **rv[] = {&w->Ob, &w->Rb, &w->P};
    float **rk[] = {&w->Wb, &w->Ed, &w->ek, &w->yk, &w->qk, &w->Fb, &w->Gb};
    for (int i = 0; i < 6; i++) *sq[i] = arena_floats(a, nn);
    for (int i = 0; i < 3; i++) *rv[i] = arena_floats(a, nv);
    for (int i = 0; i < 7; i++) *rk[i] = arena_floats(a, nk);
    w->tmp = arena_floats(a, 2 * (size_t)BT * (K > BT ? K : BT));
    w->Sres = arena_floats(a, (size_t)K * V);
}

/* §4a: the expanded WY graph. 7 products; S̄_res = −Wᵀ R̄ from the forward's W. */
static void pullback_wy(const chunk *c, const float *S, const float *W, int ldW, bwd_bufs *x) {
    const int n = c->n, K = c->K, V = c->V;
    mm(0, 1, n, K, V, -1.0f, x->Rb, V, S, V, 0.0f, x->Wb, K);      /* (1) W̄ = −R̄ Sᵀ        */
    mm(0, 1, n, n, V, 1.0f, x->Rb, V, c->Z, V, 0.0f, x->Ab, n);    /* (2) Ā = R̄ Zᵀ          */
    mm(0, 1, n, n, K, 1.0f, x->Wb, K, c->E, K, 1.0f, x->Ab, n);    /* (3)   + W̄ Eᵀ          */
    mm(1, 0, n, n, n, 1.0f, x->A, n, x->Ab, n, 0.0f, x->T1, n);    /* (4) Aᵀ Ā              */
    mm(0, 1, n, n, n, -1.0f, x->T1, n, x->A, n, 0.0f, x->D, n);    /* (5) M̄ = −Aᵀ Ā Aᵀ      */
    mm(1, 0, n, V, n, 1.0f, x->A, n, x->Rb, V, 0.0f, x->P, V);     /* (6) Z̄ = Aᵀ R̄          */
    mm(1, 0, n, K, n, 1.0f, x->A, n, x->Wb, K, 0.0f, x->Ed, K);    /* (7) Ē_dir = Aᵀ W̄      */
    for (int i = 0; i < n; i++)                                    /*     D = 𝓛_<(M̄)        */
        for (int j = i; j < n; j++) x->D[i * n + j] = 0.0f;
    mm(1, 0, K, V, n, -1.0f, W, ldW, x->Rb, V, 0.0f, x->Sres, V);    /*     S̄_res = −Wᵀ R̄    */
}

/* §4b: ReWY. 3 products; S̄_res = −Eᵀ P (supplied once, here). */
static void pullback_rewy(const chunk *c, const float *S, const float *R, int ldR, bwd_bufs *x) {
    const int n = c->n, K = c->K, V = c->V;
    mm(1, 0, n, V, n, 1.0f, x->A, n, x->Rb, V, 0.0f, x->P, V);     /* (1) P = Aᵀ R̄          */
    mm(0, 1, n, n, V, -1.0f, x->P, V, R, ldR, 0.0f, x->D, n);       /* (2) D = −𝓛_<(P Rᵀ)    */
    for (int i = 0; i < n; i++)
        for (int j = i; j < n; j++) x->D[i * n + j] = 0.0f;
    mm(0, 1, n, K, V, -1.0f, x->P, V, S, V, 0.0f, x->Ed, K);       /* (3) Ē_dir = −P Sᵀ     */
    mm(1, 0, K, V, n, -1.0f, c->E, K, x->P, V, 0.0f, x->Sres, V);  /*     S̄_res = −Eᵀ P     */
}

/* Where one value head's gradients go. dq/dk accumulate in fp32 over the value-head group. */
typedef struct head_grads {
    float *dq, *dk;   /* [t][K] of this sequence, group accumulators */
} head_grads;

/* One chunk: everything of §3–§5 given S (incoming state), R, W, A and S̄⁺ (in Sb, which
 * is replaced by the gradient of the incoming state). */
static void chunk_backward(const problem *pb, const rewy_bwd_params *p, chunk *c, bwd_bufs *x,
                           long t0, int hv, const float *S, const float *R, int ldR,
                           const float *W, int ldW, float *Sb, head_grads hg, int trow) {
    const int n = c->n, K = c->K, V = c->V, HV = pb->HV;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < V; e++)
            x->Ob[i * V + e] = rewy_load(p->do_, pb->dt, ((size_t)(t0 + i) * HV + hv) * V + e);

    /* §3: adjoints entering the chunk */
    intra_coef(c, c->q, 1, x->Cq, x->tmp);                            /* C_q (recomputed)   */
    mm(1, 0, n, V, n, 1.0f, x->Cq, n, x->Ob, V, 0.0f, x->Rb, V);       /* R̄ = C_qᵀ Ō        */
    mm(0, 0, n, V, K, 1.0f, c->F, K, Sb, V, 1.0f, x->Rb, V);           /*   + F S̄⁺          */
    mm(0, 1, n, n, V, 1.0f, x->Ob, V, R, ldR, 0.0f, x->Hq, n);           /* H_q = 𝓛_≤(Ō Rᵀ)  */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) x->Hq[i * n + j] = 0.0f;
    mm(0, 1, n, K, V, 1.0f, R, ldR, Sb, V, 0.0f, x->Fb, K);              /* F̄ = R S̄⁺ᵀ        */

    /* §4: the local pullback */
    if (p->cfg.bwd_algo == REWY_BWD_WY) pullback_wy(c, S, W, ldW, x);
    else pullback_rewy(c, S, R, ldR, x);

    /* §5 in feature-local form: ek = Ē⊙γ, yk = Ȳ⊘γ, qk = Q̄_g⊙γ (all bounded) */
    for (int x_ = 0; x_ < n * K; x_++) {
        x->ek[x_] = x->Ed[x_] * c->gam[x_];              /* Ē_dir ⊙ γ           */
        x->yk[x_] = x->Fb[x_] * c->tail[x_];             /* (F̄ Λ) ⊘ γ           */
    }
    intra_apply(c, x->D, x->ek, x->tmp);                 /* + γ ⊙ (D Y)         */
    intra_apply_t(c, x->D, c->be, x->yk, x->tmp);        /* + (Dᵀ E) ⊘ γ        */
    intra_apply_t(c, x->Hq, c->q, x->yk, x->tmp);        /* + (H_qᵀ Q_g) ⊘ γ    */
    mm(0, 1, n, K, V, 1.0f, x->Ob, V, S, V, 0.0f, x->qk, K);  /* Ō Sᵀ            */
    for (int x_ = 0; x_ < n * K; x_++) x->qk[x_] *= c->gam[x_];
    intra_apply(c, x->Hq, x->qk, x->tmp);                /* + γ ⊙ (H_q Y)       */

    /* inputs: K̄ = Ē⊙b⊙γ + Ȳ⊘γ, Q̄ = scale·(Q̄_g⊙γ), V̄ = P⊙w; gates per feature */
    const int gated = pb->op != REWY_OP_DELTANET;
    for (int i = 0; i < n; i++) {
        size_t tk = (size_t)(trow + i) * K, th = (size_t)(t0 + i) * HV + hv;
        float dbeta = 0.0f;
        for (int d = 0; d < K; d++) {
            int x_ = i * K + d;
            hg.dq[tk + d] += pb->scale * x->qk[x_];
            hg.dk[tk + d] += x->ek[x_] * c->b[x_] + x->yk[x_];
            float db = x->ek[x_] * c->k[x_];                           /* B̄_e = Ē⊙K⊙γ     */
            if (p->db) rewy_store(p->db, pb->dt, th * K + d, db);
            dbeta += db;
            /* Ḡ = Ē⊙E − Ȳ⊙Y + Q̄_g⊙Q_g (§5; Gram-free, §7) */
            x->Gb[x_] = x->ek[x_] * c->be[x_] - x->yk[x_] * c->k[x_] + x->qk[x_] * c->q[x_];
        }
        for (int e = 0; e < V; e++) {
            float pe = x->P[i * V + e];
            rewy_store(p->dv, pb->dt, th * V + e, pe * c->w[i * V + e]);
            float dw = pe * c->v[i * V + e];                           /* W̄_e = P⊙V       */
            if (p->dw) rewy_store(p->dw, pb->dt, th * V + e, dw);
            dbeta += dw;
        }
        if (p->dbeta) rewy_store(p->dbeta, pb->dt, th, dbeta);        /* β̄ = ΣB̄_e + ΣW̄_e */
    }

    /* endpoint: Ḡ_n += λ̄ ⊙ γ_n = diag(S̄⁺ Sᵀ) ⊙ γ_n + Σ_j F_j ⊙ F̄_j */
    float *Gn = x->Gb + (size_t)(n - 1) * K;
    for (int d = 0; d < K; d++) {
        float state = 0.0f, key = 0.0f;
        for (int e = 0; e < V; e++) state += Sb[d * V + e] * S[d * V + e];
        for (int j = 0; j < n; j++) key += c->F[j * K + d] * x->Fb[j * K + d];
        Gn[d] += state * c->lam[d] + key;
    }

    /* S̄ = Q_gᵀ Ō + Λ S̄⁺ + S̄_res (→ previous chunk) */
    for (int d = 0; d < K; d++)
        for (int e = 0; e < V; e++) Sb[d * V + e] = Sb[d * V + e] * c->lam[d] + x->Sres[d * V + e];
    mm(1, 0, K, V, n, 1.0f, c->Qg, K, x->Ob, V, 1.0f, Sb, V);

    /* ḡ_t = Σ_{i ≥ t, same chunk} Ḡ_i, w.r.t. the per-token natural-log gate */
    if (!gated) return;
    for (int i = n - 2; i >= 0; i--)
        for (int d = 0; d < K; d++) x->Gb[i * K + d] += x->Gb[(i + 1) * K + d];
    /* a floored gate (gates.h) gets the floor's gradient, 0; so does a sequence's first token
     * when it starts from a zero state (it decays only that zero state) */
    for (int i = 0; i < n; i++) {
        size_t th = (size_t)(t0 + i) * HV + hv;
        const int first0 = !p->h0 && trow + i == 0;
        if (pb->vector_gate) {
            for (int d = 0; d < K; d++)
                p->dg[th * K + d] = rewy_gate_grad(p->g[th * K + d], x->Gb[i * K + d], first0);
        } else { /* scalar gate broadcast over K: its gradient sums over K */
            float s = 0.0f;
            for (int d = 0; d < K; d++) s += x->Gb[i * K + d];
            p->dg[th] = rewy_gate_grad(p->g[th], s, first0);
        }
    }
}

/* Per work item (sequence, query/key head): fp32 group accumulators for dq, dk, the
 * policy-R recompute of S_c, R, W for one value head, two states, then chunk scratch. */
static size_t bwd_slot_floats(const problem *pb) {
    const size_t K = pb->K, V = pb->V, Tm = pb->Tmax, NTm = (Tm + pb->BT - 1) / pb->BT;
    size_t fl = 2 * Tm * K + 2 * K * V + 16 * 8;
    if (pb->policy == REWY_POLICY_R) fl += NTm * K * V + Tm * V + Tm * K;
    size_t a = head_forward_floats(pb->BT, pb->K, pb->V), b = bwd_chunk_floats(pb->BT, pb->K, pb->V);
    return fl + (a > b ? a : b);
}

size_t rewy_cpu_bwd_workspace_size(const rewy_config *cfg) {
    if (cfg->dtype == REWY_F64) return cpu_f64_workspace_size(cfg, 1);
    problem pb;
    problem_init(&pb, cfg);
    return rewy_sz_mul((size_t)omp_get_max_threads(), rewy_sz_mul(bwd_slot_floats(&pb), sizeof(float)));
}

rewy_status rewy_cpu_backward(const rewy_bwd_params *p) {
    if (p->cfg.dtype == REWY_F64) return cpu_f64_backward(p);
    problem pb;
    problem_init(&pb, &p->cfg);
    const float *saved = (const float *)((const char *)p->saved + SAVED_HEADER_BYTES);
    const saved_layout L = saved_layout_of(&pb);
    const size_t slot = bwd_slot_floats(&pb) * sizeof(float);
    const int64_t items = (int64_t)pb.N * pb.H; /* 64-bit: N·H passes 2^31 */
    const int nslots = cpu_slots(p->workspace_bytes, slot, items);
    const int K = pb.K, V = pb.V, KV = K * V, HV = pb.HV, BT = pb.BT, group = pb.HV / pb.H;

    /* firstprivate: a cursor per thread. Monotonic dynamic scheduling hands each thread
     * increasing items, so its cursor only moves forward: O(N) per thread in all. */
    seq_cursor cur = {0, 0};
#pragma omp parallel for num_threads(nslots) schedule(monotonic : dynamic) firstprivate(cur) if (nslots > 1)
    for (int64_t it = 0; it < items; it++) {
        const int s = (int)(it / pb.H), h = (int)(it % pb.H);
        const seq_span sp = problem_seq(&pb, &p->cfg, &cur, s);
        arena a = {(char *)p->workspace + (size_t)omp_get_thread_num() * slot, 0, slot};
        head_grads hg = {arena_floats(&a, (size_t)sp.len * K), arena_floats(&a, (size_t)sp.len * K)};
        memset(hg.dq, 0, sizeof(float) * sp.len * K);
        memset(hg.dk, 0, sizeof(float) * sp.len * K);
        float *S0 = arena_floats(&a, (size_t)KV), *Sb = arena_floats(&a, (size_t)KV);
        const int NT = (int)(((int64_t)sp.len + BT - 1) / BT);
        float *S_rc = NULL, *R_rc = NULL, *W_rc = NULL;
        if (pb.policy == REWY_POLICY_R) {
            S_rc = arena_floats(&a, (size_t)NT * KV);
            R_rc = arena_floats(&a, (size_t)sp.len * V);
            W_rc = arena_floats(&a, (size_t)sp.len * K);
        }
        chunk c; /* shared by the recompute and the reverse scan (see below) */
        chunk_alloc(&c, &a, BT, K, V);
        for (int gi = 0; gi < group; gi++) {
            const int hv = h * group + gi;
            const int64_t sh = (int64_t)s * HV + hv;
            const float *A = saved + L.A + ((size_t)sp.tok0 * HV + hv) * BT;
            head_io io = {(float *)A, S_rc, R_rc, W_rc, (long)HV * BT, KV, V, K};
            if (pb.policy == REWY_POLICY_R) { /* recompute W, U, S_c, R from the saved A */
                state_load(&pb, p->h0 ? p->h0 + (size_t)sh * KV : NULL, S0);
                head_forward(&pb, sp, hv, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, S0, NULL, io, 1, &c, a);
            } else {
                io.S_all = (float *)saved + L.S + ((size_t)sp.chunk0 * HV + hv) * KV;
                io.R_all = (float *)saved + L.R + ((size_t)sp.tok0 * HV + hv) * V;
                io.W_all = (float *)saved + L.W + ((size_t)sp.tok0 * HV + hv) * K;
                io.ldS = (long)HV * KV;
                io.ldR = (long)HV * V;
                io.ldW = (long)HV * K;
            }
            arena sc = a;
            bwd_bufs x;
            bwd_alloc(&x, &sc, BT, K, V);
            state_load(&pb, p->dht ? p->dht + (size_t)sh * KV : NULL, Sb);
            for (int ci = NT - 1; ci >= 0; ci--) {
                const int t = ci * BT, n = sp.len - t < BT ? sp.len - t : BT;
                /* The recompute ended on the last chunk and left it loaded in c: the reverse
                 * scan starts there without converting its inputs again. */
                if (pb.policy != REWY_POLICY_R || ci != NT - 1)
                    chunk_load(&c, &pb, n, sp.tok0 + t, hv, p->q, p->k, p->v, p->g, p->beta, p->b, p->w);
                for (int i = 0; i < n; i++)
                    memcpy(x.A + i * n, A + (size_t)(t + i) * io.ldA, sizeof(float) * n);
                chunk_backward(&pb, p, &c, &x, sp.tok0 + t, hv, io.S_all + (size_t)ci * io.ldS,
                               io.R_all + (size_t)t * io.ldR, (int)io.ldR, io.W_all + (size_t)t * io.ldW,
                               (int)io.ldW, Sb, hg, t);
            }
            if (p->dh0) state_store(&pb, Sb, p->dh0 + (size_t)sh * KV);
        }
        for (int t = 0; t < sp.len; t++) {
            const size_t off = ((size_t)(sp.tok0 + t) * pb.H + h) * K;
            rewy_store_n(p->dq, pb.dt, off, hg.dq + (size_t)t * K, K);
            rewy_store_n(p->dk, pb.dt, off, hg.dk + (size_t)t * K, K);
        }
    }
    return REWY_OK;
}
