/* chunk_common.c: what the CPU forward and backward share: loading a chunk into the
 * vector form of MATH §2, the decayed products of §6/§7, products and the inverse. */
#include <math.h>
#include <string.h>
#include <omp.h>
#ifndef REWY_NO_CBLAS
#include <cblas.h>
#endif

#include "backend.h"
#include "cpu/chunk.h"
#include "dtype.h"
#include "gates.h"

float *arena_floats(arena *a, size_t n) {
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63; /* keep every buffer 64 B aligned */
    float *p = (float *)(a->base + a->used);
    a->used += bytes;
    return a->used <= a->cap ? p : NULL;
}

size_t chunk_floats(int BT, int K, int V) {
    /* 14 n×K, 3 n×V, Γ, Λ and three K-vectors, the blocked mode's between_ends, plus 64 B
     * rounding per buffer */
    return (size_t)BT * (14 * (size_t)K + 3 * (size_t)V + (size_t)BT) + 4 * (size_t)K +
           INTRA_MAX_BLOCKS * INTRA_MAX_BLOCKS * (size_t)K + 23 * 16;
}

void chunk_alloc(chunk *c, arena *a, int BT, int K, int V) {
    size_t nk = (size_t)BT * K, nv = (size_t)BT * V;
    c->K = K;
    c->V = V;
    c->q = arena_floats(a, nk);
    c->k = arena_floats(a, nk);
    c->G = arena_floats(a, nk);
    c->b = arena_floats(a, nk);
    c->be = arena_floats(a, nk);
    c->gam = arena_floats(a, nk);
    c->tail = arena_floats(a, nk);
    c->E = arena_floats(a, nk);
    c->Qg = arena_floats(a, nk);
    c->F = arena_floats(a, nk);
    c->alpha = arena_floats(a, nk);
    c->kz = arena_floats(a, nk);
    c->from_prev_end = arena_floats(a, nk);
    c->to_own_end = arena_floats(a, nk);
    c->between_ends = arena_floats(a, (size_t)INTRA_MAX_BLOCKS * INTRA_MAX_BLOCKS * K);
    c->v = arena_floats(a, nv);
    c->w = arena_floats(a, nv);
    c->Z = arena_floats(a, nv);
    c->Gam = arena_floats(a, (size_t)BT * BT);
    c->lam = arena_floats(a, (size_t)K);
    c->lo = arena_floats(a, (size_t)K);
    c->hi = arena_floats(a, (size_t)K);
    c->mid = arena_floats(a, (size_t)K);
}

int problem_init(problem *pb, const rewy_config *cfg) {
    pb->op = cfg->op;
    pb->dt = cfg->dtype;
    pb->B = cfg->B;
    pb->T = cfg->T;
    pb->H = cfg->H;
    pb->HV = cfg->HV ? cfg->HV : cfg->H;
    pb->K = cfg->K;
    pb->V = cfg->V;
    pb->BT = cfg->chunk_size ? cfg->chunk_size : 64;
    pb->scale = cfg->scale != 0.0f ? cfg->scale : 1.0f / sqrtf((float)cfg->K);
    pb->vector_gate = cfg->op == REWY_OP_KDA || cfg->op == REWY_OP_GDN2;
    pb->state_v_first = cfg->state_v_first != 0;
    pb->policy = cfg->policy;
    pb->N = cfg->cu_seqlens ? cfg->num_seqs : cfg->B;
    pb->Tmax = 0;
    pb->NC = 0;
    seq_cursor cur = {0, 0};
    for (int s = 0; s < pb->N; s++) {
        seq_span sp = problem_seq(pb, cfg, &cur, s);
        if (sp.len > pb->Tmax) pb->Tmax = sp.len;
        pb->NC += ((int64_t)sp.len + pb->BT - 1) / pb->BT; /* 64-bit: len may be near INT_MAX */
    }
    return 0;
}

seq_span problem_seq(const problem *pb, const rewy_config *cfg, seq_cursor *cur, int s) {
    seq_span sp;
    const int32_t *cu = cfg->cu_seqlens_host ? cfg->cu_seqlens_host : cfg->cu_seqlens;
    if (cu) {
        if (s < cur->s) *cur = (seq_cursor){0, 0}; /* asked for an earlier sequence: rewalk */
        for (; cur->s < s; cur->s++) cur->chunk0 += ((int64_t)cu[cur->s + 1] - cu[cur->s] + pb->BT - 1) / pb->BT;
        sp.tok0 = cu[s];
        sp.len = cu[s + 1] - cu[s];
        sp.chunk0 = cur->chunk0;
    } else {
        sp.tok0 = (int64_t)s * pb->T;
        sp.len = pb->T;
        sp.chunk0 = (int64_t)s * (((int64_t)pb->T + pb->BT - 1) / pb->BT);
    }
    return sp;
}

/* e^x, written so that a loop of it vectorises (libm's expf is a call per element):
 * x = m ln2 + r with |r| ≤ ln2/2, e^r by Cephes' degree-7 polynomial (relative error about
 * 1e-7, as expf), 2^m built in the exponent bits. Below −87 it returns 0 (expf gives a
 * denormal there, far below anything the chunk sums can see). A NaN x gives NaN: the
 * polynomial carries it, while the exponent bits are built from 0 (converting NaN to int is
 * undefined behaviour). */
static inline float exp_fast(float x) {
    const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : (x == x ? x : 0.0f));
    const float m = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest */
    const float r = xc - m * 0.693359375f + m * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)m + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return x < -87.0f ? 0.0f : (x == x ? p * scale : x);
}

/* α = e^{G − c} and k ⊙ ζ = k / α for rows [r0, r1), center c (K). */
static void center_factors(chunk *c, int r0, int r1, const float *center) {
    const int K = c->K;
    for (int i = r0; i < r1; i++)
#pragma omp simd
        for (int d = 0; d < K; d++) {
            const int x = i * K + d;
            c->alpha[x] = exp_fast(c->G[x] - center[d]);
            c->kz[x] = c->k[x] / c->alpha[x]; /* k ⊙ ζ, ζ = 1/α (same center) */
        }
}

/* Blocked mode (MATH §6): a center per block (its diagonal products), and the factors of the decay
 * between blocks, all taken at block ends ε_J = G_{e_J − 1}. Each exponent is G at a later token
 * minus G at an earlier one, a sum of gates ≤ 0: every factor is in (0, 1], and one underflows only
 * where the decay it is part of is below fp32's range too. */
static void blocked_factors(chunk *c, float limit) {
    const int n = c->n, K = c->K, nb = (n + INTRA_BLOCK - 1) / INTRA_BLOCK;
    float *lo = c->lo, *hi = c->hi, *mid = c->mid;
    c->nblk = nb;
    c->diag_pairwise = 0;
    for (int bi = 0; bi < nb; bi++) {
        const int s0 = bi * INTRA_BLOCK, e0 = s0 + INTRA_BLOCK < n ? s0 + INTRA_BLOCK : n;
        memcpy(lo, c->G + (size_t)s0 * K, sizeof(float) * K);
        memcpy(hi, c->G + (size_t)s0 * K, sizeof(float) * K);
        for (int i = s0 + 1; i < e0; i++)
            for (int d = 0; d < K; d++) {
                const float x = c->G[i * K + d];
                lo[d] = x < lo[d] ? x : lo[d];
                hi[d] = x > hi[d] ? x : hi[d];
            }
        float half_range = 0.0f;
        for (int d = 0; d < K; d++) {
            if (0.5f * (hi[d] - lo[d]) > half_range) half_range = 0.5f * (hi[d] - lo[d]);
            mid[d] = 0.5f * (hi[d] + lo[d]);
        }
        if (half_range <= limit) center_factors(c, s0, e0, mid);
        else c->diag_pairwise |= 1u << bi;
        if (bi > 0) { /* e^{G_i − ε_{I−1}}: from the end of the block before */
            const float *end = c->G + (size_t)(s0 - 1) * K;
            for (int i = s0; i < e0; i++)
#pragma omp simd
                for (int d = 0; d < K; d++) c->from_prev_end[i * K + d] = exp_fast(c->G[i * K + d] - end[d]);
        }
        if (bi < nb - 1) { /* e^{ε_I − G_j}: to the end of the token's own block */
            const float *end = c->G + (size_t)(e0 - 1) * K;
            for (int j = s0; j < e0; j++)
#pragma omp simd
                for (int d = 0; d < K; d++) c->to_own_end[j * K + d] = exp_fast(end[d] - c->G[j * K + d]);
        }
    }
    for (int bi = 1; bi < nb; bi++) /* e^{ε_{I−1} − ε_J}: across the whole blocks between J and I (none: 1) */
        for (int bj = 0; bj < bi; bj++) {
            const float *later = c->G + (size_t)(bi * INTRA_BLOCK - 1) * K;
            const float *earlier = c->G + (size_t)((bj + 1) * INTRA_BLOCK - 1) * K;
            float *t = c->between_ends + (size_t)(bi * INTRA_MAX_BLOCKS + bj) * K;
#pragma omp simd
            for (int d = 0; d < K; d++) t[d] = bj + 1 == bi ? 1.0f : exp_fast(later[d] - earlier[d]);
        }
}

void chunk_load(chunk *c, const problem *pb, int n, long t0, int hv, const void *q, const void *k,
                const void *v, const float *g, const void *beta, const void *b, const void *w) {
    const int K = pb->K, V = pb->V, HV = pb->HV, h = hv / (pb->HV / pb->H);
    c->n = n;
    for (int i = 0; i < n; i++) {
        const long t = t0 + i;
        const size_t qk_off = ((size_t)t * pb->H + h) * K, hk = ((size_t)t * HV + hv) * K;
        const size_t hv_off = ((size_t)t * HV + hv) * V, hs = (size_t)t * HV + hv;
        float *qi = c->q + (size_t)i * K, *bi = c->b + (size_t)i * K, *Gi = c->G + (size_t)i * K;
        float *vi = c->v + (size_t)i * V, *wi = c->w + (size_t)i * V;
        const float bt = beta ? rewy_load(beta, pb->dt, hs) : 0.0f;
        rewy_load_n(qi, q, pb->dt, qk_off, K);
        rewy_load_n(c->k + (size_t)i * K, k, pb->dt, qk_off, K);
        rewy_load_n(vi, v, pb->dt, hv_off, V);
        if (b) rewy_load_n(bi, b, pb->dt, hk, K);
        if (w) rewy_load_n(wi, w, pb->dt, hv_off, V);
        for (int d = 0; d < K; d++) qi[d] *= pb->scale;
        if (!b)
            for (int d = 0; d < K; d++) bi[d] = bt;
        if (!w)
            for (int e = 0; e < V; e++) wi[e] = bt;
        for (int e = 0; e < V; e++) c->Z[(size_t)i * V + e] = wi[e] * vi[e];
        /* chunk-local cumulative log decay G (resets at each chunk) of the floored gates
         * (gates.h: −inf and huge gates become resets, |G| stays bounded) */
        const float *Gprev = i ? Gi - K : NULL;
        for (int d = 0; d < K; d++) {
            const float gi = !g ? 0.0f : rewy_gate_floor(pb->vector_gate ? g[hk + d] : g[hs]);
            Gi[d] = (Gprev ? Gprev[d] : 0.0f) + gi;
        }
    }
    /* Factors that stay bounded for log gates ≤ 0: E = b⊙k⊙γ, Q_g = q⊙γ, F = k⊙e^{G_n−G}.
     * A scalar gate has one γ per row: two exponentials a row instead of two an element. */
    const float *Gn = c->G + (size_t)(n - 1) * K;
    for (int d = 0; d < K; d++) c->lam[d] = expf(Gn[d]);
    for (int i = 0; i < n; i++) {
        const float *Gi = c->G + (size_t)i * K;
        float *gam = c->gam + (size_t)i * K, *tail = c->tail + (size_t)i * K;
        if (pb->vector_gate) {
#pragma omp simd
            for (int d = 0; d < K; d++) {
                gam[d] = exp_fast(Gi[d]);
                tail[d] = exp_fast(Gn[d] - Gi[d]);
            }
        } else {
            const float row_gam = expf(Gi[0]), row_tail = expf(Gn[0] - Gi[0]);
            for (int d = 0; d < K; d++) {
                gam[d] = row_gam;
                tail[d] = row_tail;
            }
        }
    }
#pragma omp simd
    for (int x = 0; x < n * K; x++) {
        c->be[x] = c->b[x] * c->k[x];
        c->E[x] = c->be[x] * c->gam[x];
        c->Qg[x] = c->q[x] * c->gam[x];
        c->F[x] = c->k[x] * c->tail[x];
    }
    if (!pb->vector_gate) {
        /* Scalar gate: one n×n decay matrix Γ_ij = e^{G_i − G_j} (zero above the diagonal). */
        c->mode = INTRA_SCALAR;
        for (int i = 0; i < n; i++)
#pragma omp simd
            for (int j = 0; j < n; j++)
                c->Gam[i * n + j] = j <= i ? exp_fast(c->G[i * K] - c->G[j * K]) : 0.0f;
        return;
    }
    /* Vector gate: the midpoint center per feature minimises the largest exponent (§6). A chunk
     * whose range is too wide for one center takes blocked factors; rise: the largest total of
     * positive gate increments of a feature, which bounds every blocked factor by e^rise (0 for
     * gates ≤ 0, the contract; a chunk of rising gates too wide for them goes pairwise). */
    float *lo = c->lo, *hi = c->hi, *mid = c->mid, half_range = 0.0f, rise = 0.0f;
    memcpy(lo, c->G, sizeof(float) * K);
    memcpy(hi, c->G, sizeof(float) * K);
    memset(mid, 0, sizeof(float) * K); /* the rise per feature, for now */
    for (int i = 1; i < n; i++)
        for (int d = 0; d < K; d++) {
            const float x = c->G[i * K + d], up = x - c->G[(i - 1) * K + d];
            lo[d] = x < lo[d] ? x : lo[d];
            hi[d] = x > hi[d] ? x : hi[d];
            mid[d] += up > 0.0f ? up : 0.0f;
        }
    for (int d = 0; d < K; d++) {
        if (0.5f * (hi[d] - lo[d]) > half_range) half_range = 0.5f * (hi[d] - lo[d]);
        if (mid[d] > rise) rise = mid[d];
        mid[d] = 0.5f * (hi[d] + lo[d]);
    }
    const float limit = center_limit(pb->scale);
    if (half_range <= limit) {
        c->mode = INTRA_CENTERED;
        center_factors(c, 0, n, mid);
        return;
    }
    c->mode = rise <= (limit > 0.0f ? limit : 0.0f) ? INTRA_BLOCKED : INTRA_PAIRWISE;
    if (c->mode == INTRA_BLOCKED) blocked_factors(c, limit);
}

void mm(int transA, int transB, int M, int N, int Kd, float alpha, const float *A, int lda,
        const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (Kd <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[i * ldc + j] = beta != 0.0f ? beta * C[i * ldc + j] : 0.0f;
        return;
    }
#ifndef REWY_NO_CBLAS
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                M, N, Kd, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    /* Built without BLAS (BLAS=0): the same product as plain loops, for machines without it. */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int l = 0; l < Kd; l++)
                s += (transA ? A[l * lda + i] : A[i * lda + l]) * (transB ? B[j * ldb + l] : B[l * ldb + j]);
            /* beta = 0 overwrites (as BLAS does): C may hold garbage or NaN */
            C[i * ldc + j] = alpha * s + (beta != 0.0f ? beta * C[i * ldc + j] : 0.0f);
        }
#endif
}

void unit_lower_inverse(int n, const float *L, float *A) {
    /* Row i of A = e_i − Σ_{m<i} L_im A_m; ascending j lets A overwrite L in place. */
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) {
            float s = 0.0f;
            for (int m = j; m < i; m++) s -= L[i * n + m] * A[m * n + j];
            A[i * n + j] = s;
        }
        A[i * n + i] = 1.0f;
        for (int j = i + 1; j < n; j++) A[i * n + j] = 0.0f;
    }
}

/* --- decayed products (§6, §7) ------------------------------------------------------ */

/* e^{G_id − G_jd}: the exact decay from token j to token i ≥ j of feature d (pairwise exponents). */
static inline float pair_decay(const chunk *c, int i, int j, int d) {
    return expf(c->G[i * c->K + d] - c->G[j * c->K + d]);
}

/* tmp = D ⊙ Γ (scalar mode): the decay folded into an n×n coefficient matrix. */
static const float *decayed(const chunk *c, const float *D, float *tmp) {
    for (int x = 0; x < c->n * c->n; x++) tmp[x] = D[x] * c->Gam[x];
    return tmp;
}

static void mask_lower(int n, float *C, int incl) {
    for (int i = 0; i < n; i++)
        for (int j = incl ? i + 1 : i; j < n; j++) C[i * n + j] = 0.0f;
}

/* The three products with pairwise exponents over the pairs j ≤ i of tokens [r0, r1): the whole
 * chunk (pairwise mode) or one diagonal block (blocked mode). */
static void pairwise_coef(const chunk *c, const float *X, int r0, int r1, float *C) {
    const int n = c->n, K = c->K;
    for (int i = r0; i < r1; i++)
        for (int j = r0; j <= i; j++) {
            float s = 0.0f;
            for (int d = 0; d < K; d++) s += X[i * K + d] * c->k[j * K + d] * pair_decay(c, i, j, d);
            C[i * n + j] = s;
        }
}

static void pairwise_apply(const chunk *c, const float *D, int r0, int r1, float *out) {
    const int n = c->n, K = c->K;
    for (int i = r0; i < r1; i++)
        for (int j = r0; j <= i; j++)
            if (D[i * n + j] != 0.0f)
                for (int d = 0; d < K; d++) out[i * K + d] += D[i * n + j] * c->k[j * K + d] * pair_decay(c, i, j, d);
}

static void pairwise_apply_t(const chunk *c, const float *D, const float *X, int r0, int r1, float *out) {
    const int n = c->n, K = c->K;
    for (int i = r0; i < r1; i++)
        for (int j = r0; j <= i; j++)
            if (D[i * n + j] != 0.0f)
                for (int d = 0; d < K; d++) out[j * K + d] += D[i * n + j] * X[i * K + d] * pair_decay(c, i, j, d);
}

/* --- blocked mode: block I holds tokens [s_I, e_I), s_I = I·INTRA_BLOCK; ε_J = G_{e_J − 1} ---- */

static inline int blk_end(const chunk *c, int bi) {
    const int e = (bi + 1) * INTRA_BLOCK;
    return e < c->n ? e : c->n;
}

/* e^{ε_{I−1} − ε_J} for blocks J < I (1 for J = I − 1: no whole block between). */
static inline const float *between(const chunk *c, int bi, int bj) {
    return c->between_ends + (size_t)(bi * INTRA_MAX_BLOCKS + bj) * c->K;
}

/* out (s_I×K) = rows j < s_I of K ⊙ e^{ε_{I−1} − G}: the right operand of block row I, the decay
 * from each earlier token to the block's reference ε_{I−1}, as to_own_end_j ⊙ between_ends_{I,J}
 * (two factors ≤ 1). */
static void cols_to_ref(const chunk *c, int bi, float *out) {
    const int K = c->K;
    for (int bj = 0; bj < bi; bj++) {
        const float *t = between(c, bi, bj);
        for (int j = bj * INTRA_BLOCK; j < (bj + 1) * INTRA_BLOCK; j++) {
            const float *kj = c->k + (size_t)j * K, *u = c->to_own_end + (size_t)j * K;
            float *o = out + (size_t)j * K;
#pragma omp simd
            for (int d = 0; d < K; d++) o[d] = kj[d] * u[d] * t[d];
        }
    }
}

/* out ((n − e_J)×K) = rows i ≥ e_J of X ⊙ e^{G − ε_J}: the operand of column block J (Dᵀ products),
 * the decay from the block's end to each later token, as from_prev_end_i ⊙ between_ends_{I,J}
 * (two factors ≤ 1). */
static void rows_from_ref(const chunk *c, const float *X, int bj, float *out) {
    const int n = c->n, K = c->K, e0 = (bj + 1) * INTRA_BLOCK;
    for (int i = e0; i < n; i++) {
        const float *t = between(c, i / INTRA_BLOCK, bj);
        const float *xi = X + (size_t)i * K, *f = c->from_prev_end + (size_t)i * K;
        float *o = out + (size_t)(i - e0) * K;
#pragma omp simd
        for (int d = 0; d < K; d++) o[d] = xi[d] * f[d] * t[d];
    }
}

/* Diagonal block I = rows and columns [s, e): the same products with the block's own center (as
 * centered mode, over ≤ INTRA_BLOCK tokens), or pairwise exponents if its half range needs them.
 * tmp: 2·(e − s)·K. */
static void diag_coef(const chunk *c, const float *X, int bi, float *C, float *tmp) {
    const int n = c->n, K = c->K, s = bi * INTRA_BLOCK, e = blk_end(c, bi), m = e - s;
    if ((c->diag_pairwise >> bi) & 1u) {
        pairwise_coef(c, X, s, e, C);
        return;
    }
    for (int x = s * K; x < e * K; x++) tmp[x - s * K] = X[x] * c->alpha[x];
    mm(0, 1, m, m, K, 1.0f, tmp, K, c->kz + (size_t)s * K, K, 0.0f, C + (size_t)s * n + s, n);
}

static void diag_apply(const chunk *c, const float *D, int bi, float *out, float *tmp) {
    const int n = c->n, K = c->K, s = bi * INTRA_BLOCK, e = blk_end(c, bi), m = e - s;
    if ((c->diag_pairwise >> bi) & 1u) {
        pairwise_apply(c, D, s, e, out);
        return;
    }
    mm(0, 0, m, K, m, 1.0f, D + (size_t)s * n + s, n, c->kz + (size_t)s * K, K, 0.0f, tmp, K);
    for (int x = s * K; x < e * K; x++) out[x] += c->alpha[x] * tmp[x - s * K];
}

static void diag_apply_t(const chunk *c, const float *D, const float *X, int bj, float *out, float *tmp) {
    const int n = c->n, K = c->K, s = bj * INTRA_BLOCK, e = blk_end(c, bj), m = e - s;
    if ((c->diag_pairwise >> bj) & 1u) {
        pairwise_apply_t(c, D, X, s, e, out);
        return;
    }
    float *xa = tmp, *r = tmp + (size_t)m * K;
    for (int x = s * K; x < e * K; x++) xa[x - s * K] = X[x] * c->alpha[x];
    mm(1, 0, m, K, m, 1.0f, D + (size_t)s * n + s, n, xa, K, 0.0f, r, K);
    for (int x = s * K; x < e * K; x++) out[x] += r[x - s * K] / c->alpha[x];
}

/* Blocked C: block row I ≥ 1 over every earlier column is one product,
 * C[I, <s_I] = (X_I ⊙ e^{G − ε_{I−1}}) (K_{<s_I} ⊙ e^{ε_{I−1} − G})ᵀ, its right operand rebuilt per row. */
static void blocked_coef(const chunk *c, const float *X, float *C, float *tmp) {
    const int n = c->n, K = c->K;
    for (int bi = 0; bi < c->nblk; bi++) {
        const int s = bi * INTRA_BLOCK, e = blk_end(c, bi), m = e - s;
        if (bi > 0) {
            float *right = tmp, *left = tmp + (size_t)s * K; /* s + m ≤ n rows */
            cols_to_ref(c, bi, right);
            for (int x = s * K; x < e * K; x++) left[x - s * K] = X[x] * c->from_prev_end[x];
            mm(0, 1, m, s, K, 1.0f, left, K, right, K, 0.0f, C + (size_t)s * n, n);
        }
        diag_coef(c, X, bi, C, tmp);
    }
}

/* Blocked γ ⊙ (D Y): out_I += e^{G − ε_{I−1}} ⊙ (D[I, <s_I] (K_{<s_I} ⊙ e^{ε_{I−1} − G})), one product per
 * block row, plus the diagonal block. */
static void blocked_apply(const chunk *c, const float *D, float *out, float *tmp) {
    const int n = c->n, K = c->K;
    for (int bi = 0; bi < c->nblk; bi++) {
        const int s = bi * INTRA_BLOCK, e = blk_end(c, bi), m = e - s;
        if (bi > 0) {
            float *right = tmp, *r = tmp + (size_t)s * K; /* s + m ≤ n rows */
            cols_to_ref(c, bi, right);
            mm(0, 0, m, K, s, 1.0f, D + (size_t)s * n, n, right, K, 0.0f, r, K);
            for (int x = s * K; x < e * K; x++) out[x] += c->from_prev_end[x] * r[x - s * K];
        }
        diag_apply(c, D, bi, out, tmp);
    }
}

/* Blocked (Dᵀ (X ⊙ γ)) ⊘ γ: column block J gathers the rows i ≥ e_J below it through its own end ε_J,
 * out_J += e^{ε_J − G_J} ⊙ (D[≥e_J, J]ᵀ (X_{≥e_J} ⊙ e^{G − ε_J})), one product per column block (the
 * left operand rebuilt per block), plus the diagonal block. */
static void blocked_apply_t(const chunk *c, const float *D, const float *X, float *out, float *tmp) {
    const int n = c->n, K = c->K;
    for (int bj = 0; bj < c->nblk; bj++) {
        const int s = bj * INTRA_BLOCK, e = blk_end(c, bj), m = e - s;
        if (e < n) {
            float *left = tmp, *r = tmp + (size_t)(n - e) * K; /* n − e + m ≤ n rows */
            rows_from_ref(c, X, bj, left);
            mm(1, 0, m, K, n - e, 1.0f, D + (size_t)e * n + s, n, left, K, 0.0f, r, K);
            for (int x = s * K; x < e * K; x++) out[x] += c->to_own_end[x] * r[x - s * K];
        }
        diag_apply_t(c, D, X, bj, out, tmp);
    }
}

void intra_coef(const chunk *c, const float *X, int incl, float *C, float *tmp) {
    const int n = c->n, K = c->K;
    switch (c->mode) {
    case INTRA_SCALAR: /* (X Kᵀ) ⊙ Γ */
        mm(0, 1, n, n, K, 1.0f, X, K, c->k, K, 0.0f, C, n);
        for (int x = 0; x < n * n; x++) C[x] *= c->Gam[x];
        break;
    case INTRA_CENTERED: /* (X ⊙ α)(K ⊙ ζ)ᵀ */
        for (int x = 0; x < n * K; x++) tmp[x] = X[x] * c->alpha[x];
        mm(0, 1, n, n, K, 1.0f, tmp, K, c->kz, K, 0.0f, C, n);
        break;
    case INTRA_BLOCKED: /* the lower block triangle; mask_lower clears the rest */
        blocked_coef(c, X, C, tmp);
        break;
    case INTRA_PAIRWISE:
        pairwise_coef(c, X, 0, n, C);
        break;
    }
    mask_lower(n, C, incl);
}

void intra_apply(const chunk *c, const float *D, float *out, float *tmp) {
    const int n = c->n, K = c->K;
    switch (c->mode) {
    case INTRA_SCALAR: /* (D ⊙ Γ) K */
        mm(0, 0, n, K, n, 1.0f, decayed(c, D, tmp), n, c->k, K, 1.0f, out, K);
        break;
    case INTRA_CENTERED: /* α ⊙ (D (K ⊙ ζ)) */
        mm(0, 0, n, K, n, 1.0f, D, n, c->kz, K, 0.0f, tmp, K);
        for (int x = 0; x < n * K; x++) out[x] += c->alpha[x] * tmp[x];
        break;
    case INTRA_BLOCKED:
        blocked_apply(c, D, out, tmp);
        break;
    case INTRA_PAIRWISE:
        pairwise_apply(c, D, 0, n, out);
        break;
    }
}

void intra_apply_t(const chunk *c, const float *D, const float *X, float *out, float *tmp) {
    const int n = c->n, K = c->K;
    switch (c->mode) {
    case INTRA_SCALAR: /* (D ⊙ Γ)ᵀ X */
        mm(1, 0, n, K, n, 1.0f, decayed(c, D, tmp), n, X, K, 1.0f, out, K);
        break;
    case INTRA_CENTERED: { /* ζ ⊙ (Dᵀ (X ⊙ α)), with ζ = kz / k folded as e^{c−G} */
        float *xa = tmp, *r = tmp + (size_t)n * K;
        for (int x = 0; x < n * K; x++) xa[x] = X[x] * c->alpha[x];
        mm(1, 0, n, K, n, 1.0f, D, n, xa, K, 0.0f, r, K);
        /* ζ = 1/α exactly (same center), so divide instead of storing ζ */
        for (int x = 0; x < n * K; x++) out[x] += r[x] / c->alpha[x];
        break;
    }
    case INTRA_BLOCKED:
        blocked_apply_t(c, D, X, out, tmp);
        break;
    case INTRA_PAIRWISE:
        pairwise_apply_t(c, D, X, 0, n, out);
        break;
    }
}

void state_load(const problem *pb, const float *src, float *S) {
    const int K = pb->K, V = pb->V;
    if (!src) {
        memset(S, 0, sizeof(float) * K * V);
        return;
    }
    for (int d = 0; d < K; d++)
        for (int e = 0; e < V; e++) S[d * V + e] = pb->state_v_first ? src[e * K + d] : src[d * V + e];
}

void state_store(const problem *pb, const float *S, float *dst) {
    const int K = pb->K, V = pb->V;
    for (int d = 0; d < K; d++)
        for (int e = 0; e < V; e++) {
            if (pb->state_v_first) dst[e * K + d] = S[d * V + e];
            else dst[d * V + e] = S[d * V + e];
        }
}

saved_layout saved_layout_of(const problem *pb) {
    saved_layout L; /* checked: floats is exact or SIZE_MAX (then the size query refuses the shape) */
    const size_t tokHV = rewy_sz_mul((size_t)pb->B * (size_t)pb->T, (size_t)pb->HV);
    L.A = 0;
    L.S = rewy_sz_mul(tokHV, (size_t)pb->BT);
    L.R = L.S;
    L.W = L.S;
    L.floats = L.S;
    if (pb->policy == REWY_POLICY_A) {
        L.R = rewy_sz_add(L.S, rewy_sz_mul(rewy_sz_mul((size_t)pb->NC, (size_t)pb->HV), (size_t)pb->K * pb->V));
        L.W = rewy_sz_add(L.R, rewy_sz_mul(tokHV, (size_t)pb->V));
        L.floats = rewy_sz_add(L.W, rewy_sz_mul(tokHV, (size_t)pb->K));
    }
    return L;
}

int cpu_slots(size_t workspace_bytes, size_t slot_bytes, int64_t items) {
    size_t n = workspace_bytes / slot_bytes, m = (size_t)omp_get_max_threads();
    n = n < m ? n : m;
    n = n < (size_t)items ? n : (size_t)items; /* no idle threads: a lone item runs inline */
    return n ? (int)n : 1;
}
