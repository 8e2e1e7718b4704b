/* test_sizes.c: 64-bit sizes at the boundaries (issue 25 item 2). The size queries compute only:
 * nothing here allocates a tensor (a few cases validate with placeholder pointers that are never
 * read). Each query must be exact, or REWY_ERR_BAD_SHAPE with a message naming the limit.
 *
 *  1. rewy_saved_size against the CPU layout written out here in 128-bit arithmetic: varlen and
 *     fixed length, both policies, and T within 63 of INT_MAX (where `len + BT − 1` overflowed
 *     and the size came out 256 MiB short).
 *  2. Shapes whose buffers pass 2^64 bytes: the issue's 500,000 sequences × HV 698,063,396 ×
 *     K = V = 256 (policy A), a saved buffer that alone overflows, tensors that overflow.
 *  3. The CPU's CBLAS limit under policy A (HV·max(K,V) < 2^31).
 *  4. Many sequences × heads run for real with tiny dims: every sequence is written.
 *  5. With CUDA compiled in: the kernels' 32-bit index limits are refused with their message.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rewy.h"
#include "testutil.h"

typedef unsigned __int128 u128;

static rewy_config cfg_of(rewy_op op, int B, int T, int H, int HV, int K, int V, int BT, rewy_policy pol) {
    rewy_config c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.backend = REWY_BACKEND_CPU;
    c.dtype = REWY_BF16;
    c.B = B;
    c.T = T;
    c.H = H;
    c.HV = HV;
    c.K = K;
    c.V = V;
    c.chunk_size = BT;
    c.policy = pol;
    return c;
}

/* The CPU saved layout (src/cpu/chunk.h): a 128-byte header, then fp32 A [tok][HV][BT], and
 * under policy A S_c [NC][HV][K][V], R [tok][HV][V], W [tok][HV][K]. */
static u128 cpu_saved_expected(const rewy_config *c, u128 NC) {
    const u128 tok = (u128)c->B * (u128)c->T, HV = (u128)(c->HV ? c->HV : c->H);
    const u128 BT = (u128)(c->chunk_size ? c->chunk_size : 64);
    u128 floats = tok * HV * BT;
    if (c->policy == REWY_POLICY_A) floats += NC * HV * c->K * c->V + tok * HV * c->V + tok * HV * c->K;
    return 128 + 4 * floats;
}

static u128 chunks_fixed(const rewy_config *c) {
    const u128 BT = (u128)(c->chunk_size ? c->chunk_size : 64);
    return (u128)c->B * (((u128)c->T + BT - 1) / BT);
}

static void expect_saved(test_counts *tc, const char *what, const rewy_config *c, u128 NC) {
    size_t got = 0;
    rewy_status s = rewy_saved_size(c, &got);
    const u128 want = cpu_saved_expected(c, NC);
    CHECK(tc, s == REWY_OK && (u128)got == want, "%s: rewy_saved_size %s, %zu bytes; want %.0f", what,
          rewy_strerror(s), got, (double)want);
    size_t fws = 0, bws = 0;
    CHECK(tc, rewy_fwd_workspace_size(c, &fws) == REWY_OK && fws > 0, "%s: fwd workspace", what);
    CHECK(tc, rewy_bwd_workspace_size(c, &bws) == REWY_OK && bws > 0, "%s: bwd workspace", what);
}

/* Every placeholder pointer is 64-byte aligned and never read: only cu_seqlens is. */
#define PLACE ((void *)(uintptr_t)4096)

/* A forward validated with placeholder tensors: the status and message of the size check. */
static rewy_status validate_msg(const rewy_config *c, char *msg, size_t len) {
    rewy_fwd_params p;
    memset(&p, 0, sizeof p);
    p.cfg = *c;
    p.q = p.k = p.v = p.o = p.saved = p.workspace = PLACE;
    if (c->op != REWY_OP_DELTANET) p.g = PLACE;
    if (c->op == REWY_OP_GDN2) p.b = p.w = PLACE;
    else p.beta = PLACE;
    p.saved_bytes = p.workspace_bytes = SIZE_MAX;
    return rewy_validate_fwd(&p, msg, len);
}

static void expect_refused(test_counts *tc, const char *what, const rewy_config *c, const char *needle) {
    size_t got = 12345;
    rewy_status s = rewy_saved_size(c, &got);
    CHECK(tc, s == REWY_ERR_BAD_SHAPE, "%s: rewy_saved_size gave %s (%zu bytes), want BAD_SHAPE", what,
          rewy_strerror(s), got);
    char msg[512] = "";
    s = validate_msg(c, msg, sizeof msg);
    CHECK(tc, s == REWY_ERR_BAD_SHAPE && strstr(msg, needle), "%s: validate gave %s \"%s\", want BAD_SHAPE naming \"%s\"",
          what, rewy_strerror(s), msg, needle);
}

static void test_exact(test_counts *tc) {
    for (int pol = 0; pol < 2; pol++) {
        rewy_config c = cfg_of(REWY_OP_GDN, 3, 130, 2, 4, 48, 80, 32, (rewy_policy)pol);
        expect_saved(tc, "fixed length", &c, chunks_fixed(&c));
        /* varlen: 1 + 1 + 2 + 5 chunks of 64 */
        static const int32_t cu[] = {0, 1, 65, 130, 430};
        c = cfg_of(REWY_OP_KDA, 1, 430, 1, 3, 64, 32, 64, (rewy_policy)pol);
        c.cu_seqlens = cu;
        c.num_seqs = 4;
        expect_saved(tc, "varlen", &c, 9);
    }
    /* T within 63 of INT_MAX: the chunk count ⌈T/BT⌉ is formed in 64 bits */
    static const int dT[] = {0, 1, 15, 62, 63};
    static const int BTs[] = {16, 64};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++)
            for (int pol = 0; pol < 2; pol++) {
                rewy_config c = cfg_of(REWY_OP_GDN, 1, INT_MAX - dT[i], 1, 1, 1, 1, BTs[j], (rewy_policy)pol);
                char what[96];
                snprintf(what, sizeof what, "T = INT_MAX - %d, chunk %d, policy %c", dT[i], BTs[j], pol ? 'A' : 'R');
                expect_saved(tc, what, &c, chunks_fixed(&c));
            }
    /* varlen with one sequence near INT_MAX and a short one */
    static const int32_t cu2[] = {0, 5, INT_MAX - 3};
    rewy_config c = cfg_of(REWY_OP_DELTANET, 1, INT_MAX - 3, 1, 1, 2, 1, 64, REWY_POLICY_A);
    c.cu_seqlens = cu2;
    c.num_seqs = 2;
    expect_saved(tc, "varlen, a sequence near INT_MAX", &c, 1 + ((u128)INT_MAX - 8 + 63) / 64);
    /* the issue's 65,537 sequences × 65,536 heads (N·HV passes 2^32): 275 GB of saved A, exact */
    c = cfg_of(REWY_OP_GDN, 65537, 1, 1, 65536, 1, 1, 16, REWY_POLICY_R);
    expect_saved(tc, "B=65537, HV=65536", &c, 65537);
}

static void test_overflow(test_counts *tc) {
    /* the issue's case: 500,000 one-token sequences, HV = 698,063,396, K = V = 256, policy A; its
     * states alone (N·HV·K·V fp32) need 9.1e19 bytes */
    const int N = 500000;
    int32_t *cu = malloc(sizeof *cu * (N + 1));
    for (int i = 0; i <= N; i++) cu[i] = i;
    rewy_config c = cfg_of(REWY_OP_GDN, 1, N, 1, 698063396, 256, 256, 64, REWY_POLICY_A);
    c.cu_seqlens = cu;
    c.num_seqs = N;
    expect_refused(tc, "500,000 sequences, HV 698,063,396", &c, "states");
    /* 2-chunk sequences with HV between the two limits: the states fit (N·HV·K·V·4 < 2^64), the
     * policy-A saved chunk states (2N·HV·K·V·4) do not */
    for (int i = 0; i <= N; i++) cu[i] = 128 * i;
    c = cfg_of(REWY_OP_GDN, 1, 128 * N, 1, 100000000, 256, 256, 64, REWY_POLICY_A);
    c.cu_seqlens = cu;
    c.num_seqs = N;
    expect_refused(tc, "saved chunk states past 2^64", &c, "saved buffer too large");
    free(cu);
    /* policy R: the saved A (tok·HV·BT fp32 = 2^66 bytes) overflows while every tensor fits */
    c = cfg_of(REWY_OP_GDN, 1, 1 << 30, 1, 1 << 28, 16, 16, 64, REWY_POLICY_R);
    expect_refused(tc, "saved A past 2^64", &c, "saved buffer too large");
    /* tensors: q holds B·T·H·K elements */
    c = cfg_of(REWY_OP_GDN, INT_MAX, INT_MAX, INT_MAX, INT_MAX, 256, 256, 64, REWY_POLICY_R);
    expect_refused(tc, "B = T = H = INT_MAX", &c, "q, k");
    c = cfg_of(REWY_OP_GDN, 1 << 20, 1 << 20, 1, 1 << 20, 256, 256, 64, REWY_POLICY_R);
    expect_refused(tc, "B·T·HV·V past 2^64", &c, "v, o");
    /* F64: the saved buffer is the header, whatever the shape; its workspace is per sequence */
    c = cfg_of(REWY_OP_GDN, 1 << 20, 1 << 20, 1, 1 << 10, 8, 8, 64, REWY_POLICY_A);
    c.dtype = REWY_F64;
    size_t got = 0;
    CHECK(tc, rewy_saved_size(&c, &got) == REWY_OK && got == 128, "F64 saved size %zu", got);
}

static void test_cblas_limit(test_counts *tc) {
    rewy_config c = cfg_of(REWY_OP_GDN, 1, 64, 1, 1 << 24, 256, 128, 64, REWY_POLICY_A);
    expect_refused(tc, "policy A, HV*K = 2^32", &c, "policy R");
    c.policy = REWY_POLICY_R; /* the same shape under policy R is within every limit */
    expect_saved(tc, "policy R, HV*K = 2^32", &c, chunks_fixed(&c));
}

/* Many sequences and heads for real, K = V = 1: o starts as NaN and every element must be written
 * with the oracle's value (h0 = 0, one token: o = scale·q·β·v, with scale = K^-½ = 1). */
static void test_all_written(test_counts *tc) {
    const int B = 301, HV = 257;
    rewy_config c = cfg_of(REWY_OP_GDN, B, 1, 1, HV, 1, 1, 16, REWY_POLICY_R);
    c.dtype = REWY_F32;
    const size_t nq = (size_t)B, nv = (size_t)B * HV;
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *g = malloc(nv * 4), *beta = malloc(nv * 4);
    float *o = malloc(nv * 4);
    for (size_t i = 0; i < nq; i++) { q[i] = 1.0f + (float)(i % 7); k[i] = 1.0f; }
    for (size_t i = 0; i < nv; i++) { v[i] = (float)(i % 13) - 6.0f; g[i] = -0.5f; beta[i] = 0.5f; o[i] = NAN; }
    size_t sb, wb;
    rewy_saved_size(&c, &sb);
    rewy_fwd_workspace_size(&c, &wb);
    void *saved = aligned_alloc(64, (sb + 63) / 64 * 64), *ws = aligned_alloc(64, (wb + 63) / 64 * 64);
    rewy_fwd_params p = {.cfg = c, .q = q, .k = k, .v = v, .g = g, .beta = beta, .o = o, .saved = saved,
                         .workspace = ws, .saved_bytes = sb, .workspace_bytes = wb};
    rewy_status s = rewy_forward(&p);
    CHECK(tc, s == REWY_OK, "B=%d HV=%d forward: %s", B, HV, rewy_strerror(s));
    size_t wrong = 0;
    for (size_t i = 0; i < nv; i++) {
        const float want = q[i / HV] * 0.5f * v[i]; /* S = k (β v)ᵀ, o = Sᵀ q */
        if (!(fabsf(o[i] - want) <= 1e-6f * fabsf(want) + 1e-7f)) wrong++;
    }
    CHECK(tc, wrong == 0, "B=%d HV=%d: %zu of %zu outputs not written or wrong", B, HV, wrong, nv);
    free(q); free(k); free(v); free(g); free(beta); free(o); free(saved); free(ws);
}

/* The CUDA kernels index tokens, chunk rows (NC·HV·BT) with 32-bit ints and put HV (or H) on a
 * grid's y dimension (at most 65,535). */
static void test_cuda_limits(test_counts *tc) {
    if (!rewy_has_cuda()) {
        printf("test_sizes: CUDA not compiled in, its index limits not checked here (build this test with "
               "make CUDA=1 BUILD=build/cuda-on build/cuda-on/tests/test_sizes)\n");
        return;
    }
    rewy_config c = cfg_of(REWY_OP_GDN, 1, 64, 1, 65536, 64, 64, 64, REWY_POLICY_R);
    c.backend = REWY_BACKEND_CUDA;
    expect_refused(tc, "CUDA HV = 65536", &c, "65535");
    c = cfg_of(REWY_OP_GDN, 2, INT_MAX / 2 + 1, 1, 1, 64, 64, 64, REWY_POLICY_R);
    c.backend = REWY_BACKEND_CUDA;
    expect_refused(tc, "CUDA B*T = 2^31", &c, "B*T");
    c = cfg_of(REWY_OP_GDN, 1, 1 << 24, 1, 128, 64, 64, 64, REWY_POLICY_R);
    c.backend = REWY_BACKEND_CUDA;
    expect_refused(tc, "CUDA NC*HV*BT = 2^31", &c, "NC*HV*BT");
    c = cfg_of(REWY_OP_GDN, 1, 1 << 24, 1, 127, 64, 64, 64, REWY_POLICY_R);
    c.backend = REWY_BACKEND_CUDA;
    size_t got = 0;
    CHECK(tc, rewy_saved_size(&c, &got) == REWY_OK && got > 0, "CUDA NC*HV*BT just below 2^31: %zu", got);
}

int main(void) {
    test_counts tc = {0, 0};
    test_exact(&tc);
    test_overflow(&tc);
    test_cblas_limit(&tc);
    test_all_written(&tc);
    test_cuda_limits(&tc);
    return test_finish(&tc);
}
