/* chunk_fwd.c: the chunkwise WY forward (MATH §2) on the CPU.
 *
 * Per chunk, with incoming state S:
 *   L = 𝓛_<(E Yᵀ)  (decayed, §6)      A = (I + L)⁻¹
 *   W = A E,  U = A Z                  R = U − W S
 *   O = Q_g S + C_q R,  C_q = 𝓛_≤(Q_g Yᵀ)
 *   S ← Λ S + Fᵀ R
 */
#include <omp.h>
#include <string.h>

#include "backend.h"
#include "cpu/chunk.h"
#include "dtype.h"

size_t head_forward_floats(int BT, int K, int V) {
    int m = K > BT ? K : BT;
    return chunk_floats(BT, K, V) + 2 * (size_t)BT * BT + (size_t)BT * K + 2 * (size_t)BT * V +
           2 * (size_t)BT * m + 8 * 16;
}

void head_forward(const problem *pb, seq_span sp, int hv, const void *q, const void *k,
                  const void *v, const float *g, const void *beta, const void *b, const void *w,
                  float *S, void *o, head_io io, int A_ready, chunk *c, arena scratch) {
    const int K = pb->K, V = pb->V, BT = pb->BT, HV = pb->HV;
    float *A = arena_floats(&scratch, (size_t)BT * BT), *Cq = arena_floats(&scratch, (size_t)BT * BT);
    float *W = arena_floats(&scratch, (size_t)BT * K), *R = arena_floats(&scratch, (size_t)BT * V);
    float *O = arena_floats(&scratch, (size_t)BT * V);
    float *tmp = arena_floats(&scratch, 2 * (size_t)BT * (K > BT ? K : BT));

    for (int ci = 0, t = 0; t < sp.len; ci++, t += BT) {
        const int n = sp.len - t < BT ? sp.len - t : BT;
        const long t0 = sp.tok0 + t;
        chunk_load(c, pb, n, t0, hv, q, k, v, g, beta, b, w);
        float *Arow = io.A + (size_t)t * io.ldA; /* saved A rows of this chunk, stride ldA */
        if (A_ready) {
            for (int i = 0; i < n; i++) memcpy(A + i * n, Arow + (size_t)i * io.ldA, sizeof(float) * n);
        } else {
            intra_coef(c, c->be, 0, A, tmp);    /* L = 𝓛_<(E Yᵀ) */
            unit_lower_inverse(n, A, A);        /* A = (I + L)⁻¹ */
            for (int i = 0; i < n; i++) {
                memcpy(Arow + (size_t)i * io.ldA, A + i * n, sizeof(float) * n);
                memset(Arow + (size_t)i * io.ldA + n, 0, sizeof(float) * (BT - n));
            }
        }
        mm(0, 0, n, K, n, 1.0f, A, n, c->E, K, 0.0f, W, K); /* W = A E */
        mm(0, 0, n, V, n, 1.0f, A, n, c->Z, V, 0.0f, R, V); /* U = A Z */
        if (io.S_all) memcpy(io.S_all + (size_t)ci * io.ldS, S, sizeof(float) * K * V);
        mm(0, 0, n, V, K, -1.0f, W, K, S, V, 1.0f, R, V);  /* R = U − W S */
        for (int i = 0; i < n; i++) {
            if (io.R_all) memcpy(io.R_all + (size_t)(t + i) * io.ldR, R + i * V, sizeof(float) * V);
            if (io.W_all) memcpy(io.W_all + (size_t)(t + i) * io.ldW, W + i * K, sizeof(float) * K);
        }
        if (o) {
            intra_coef(c, c->q, 1, Cq, tmp);                     /* C_q = 𝓛_≤(Q_g Yᵀ) */
            mm(0, 0, n, V, K, 1.0f, c->Qg, K, S, V, 0.0f, O, V);  /* O = Q_g S */
            mm(0, 0, n, V, n, 1.0f, Cq, n, R, V, 1.0f, O, V);    /*   + C_q R */
            for (int i = 0; i < n; i++) rewy_store_n(o, pb->dt, ((size_t)(t0 + i) * HV + hv) * V, O + i * V, V);
        }
        for (int d = 0; d < K; d++)                              /* S ← Λ S + Fᵀ R */
            for (int e = 0; e < V; e++) S[d * V + e] *= c->lam[d];
        mm(1, 0, K, V, n, 1.0f, c->F, K, R, V, 1.0f, S, V);
    }
}

static size_t fwd_slot_floats(const problem *pb) {
    return head_forward_floats(pb->BT, pb->K, pb->V) + (size_t)pb->K * pb->V + 16;
}

size_t rewy_cpu_saved_size(const rewy_config *cfg) {
    problem pb;
    problem_init(&pb, cfg);
    if (pb.dt == REWY_F64) return SAVED_HEADER_BYTES; /* the backward reruns the recurrence */
    return rewy_sz_add(SAVED_HEADER_BYTES, rewy_sz_mul(saved_layout_of(&pb).floats, sizeof(float)));
}

size_t rewy_cpu_fwd_workspace_size(const rewy_config *cfg) {
    if (cfg->dtype == REWY_F64) return cpu_f64_workspace_size(cfg, 0);
    problem pb;
    problem_init(&pb, cfg);
    return rewy_sz_mul((size_t)omp_get_max_threads(), rewy_sz_mul(fwd_slot_floats(&pb), sizeof(float)));
}

/* The record the backward checks (backend.h): config, h0 given, cu_seqlens hash. */
static void write_header(const rewy_fwd_params *p) {
    _Static_assert(sizeof(rewy_saved_record) <= SAVED_HEADER_BYTES, "saved header too large");
    const rewy_config *c = &p->cfg;
    const rewy_saved_record h = rewy_saved_record_of(c, c->cu_seqlens_host ? c->cu_seqlens_host : c->cu_seqlens,
                                                     p->h0 != NULL, 0, SAVED_MAGIC);
    memset(p->saved, 0, SAVED_HEADER_BYTES); /* every byte of the header written */
    memcpy(p->saved, &h, sizeof h);
}

rewy_status rewy_cpu_forward(const rewy_fwd_params *p) {
    problem pb;
    problem_init(&pb, &p->cfg);
    write_header(p);
    if (pb.dt == REWY_F64) return cpu_f64_forward(p);
    float *saved = (float *)((char *)p->saved + SAVED_HEADER_BYTES);
    const saved_layout L = saved_layout_of(&pb);
    const size_t slot = fwd_slot_floats(&pb) * sizeof(float);
    const int64_t items = (int64_t)pb.N * pb.HV; /* 64-bit: N·HV passes 2^31 (65537 sequences × 65536 heads) */
    const int nslots = cpu_slots(p->workspace_bytes, slot, items);
    const int KV = pb.K * pb.V, HV = pb.HV;

    /* firstprivate: a cursor per thread. Monotonic dynamic scheduling hands each thread
     * increasing items, so its cursor only moves forward: O(N) per thread in all. */
    seq_cursor cur = {0, 0};
#pragma omp parallel for num_threads(nslots) schedule(monotonic : dynamic) firstprivate(cur) if (nslots > 1)
    for (int64_t it = 0; it < items; it++) {
        const int s = (int)(it / HV), hv = (int)(it % HV);
        arena a = {(char *)p->workspace + (size_t)omp_get_thread_num() * slot, 0, slot};
        float *S = arena_floats(&a, (size_t)KV);
        chunk c;
        chunk_alloc(&c, &a, pb.BT, pb.K, pb.V);
        seq_span sp = problem_seq(&pb, &p->cfg, &cur, s);
        state_load(&pb, p->h0 ? p->h0 + (size_t)it * KV : NULL, S);
        head_io io = {saved + L.A + ((size_t)sp.tok0 * HV + hv) * pb.BT, NULL, NULL, NULL,
                      (long)HV * pb.BT, (long)HV * KV, (long)HV * pb.V, (long)HV * pb.K};
        if (pb.policy == REWY_POLICY_A) { /* save all: the backward skips the recompute */
            io.S_all = saved + L.S + ((size_t)sp.chunk0 * HV + hv) * KV;
            io.R_all = saved + L.R + ((size_t)sp.tok0 * HV + hv) * pb.V;
            io.W_all = saved + L.W + ((size_t)sp.tok0 * HV + hv) * pb.K;
        }
        head_forward(&pb, sp, hv, p->q, p->k, p->v, p->g, p->beta, p->b, p->w, S, p->o, io, 0, &c, a);
        if (p->ht) state_store(&pb, S, p->ht + (size_t)it * KV);
    }
    return REWY_OK;
}
