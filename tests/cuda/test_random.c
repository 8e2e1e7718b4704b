/* test_random.c: a random campaign on the CUDA backend against the fp64 oracle (issue 25, item 5).
 *
 * Each configuration is drawn from its own random stream (seed, index), so any one of them can be
 * run again alone: all four operators, both saving policies, both pullbacks (the harness runs WY
 * and ReWY on one forward), chunk sizes 0/16/32/64, batched or packed varlen (1..8 sequences),
 * grouped value heads (HV = H · 1, 2 or 4), K and V from 1 to 256, lengths around the chunk
 * boundaries (tails), bf16/fp16/fp32, h0 and the final-state gradient given or not, ht requested
 * or not, state_v_first, normal/strong/−1000-reset gates and zero/tiny β. Each is checked through
 * src/check/check.c's harness (tests/cuda_check.h's run_case) at the MATH §10 thresholds.
 *
 * Sizes: B·T·HV·K·V ≤ 2^21 (lengths shrink first, then heads, then the wider of K and V), so
 * the fp64 oracle on the host, which dominates, keeps 2,000 configurations within a few minutes.
 *
 *   test_random [--seed S] [--count N] [--start I] [--quick] [--verbose] [--all-gates]
 *
 * Defaults: seed 1, 2,000 configurations from index 0. --quick: 24 configurations of at most 2^17
 * (for compute-sanitizer). --all-gates: the gated configurations also draw −inf resets, huge gates
 * (−25 … −1e30) and mixed −1000/−0.1 gates (issue 25 item 1). A failing configuration prints its table and the command that reruns
 * it alone. The last lines: a summary of what ran, then "N passed, N failed" (checks). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "check/check.h"
#include "cuda_check.h"
#include "testutil.h"
#include "check/rng.h"

/* one rng.h stream per configuration */
static int below(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

/* K or V: uniform 1..256, the usual sizes, or small (the narrowest tiles and odd widths). */
static int pick_dim(rng *r) {
    static const int usual[] = {16, 32, 48, 64, 100, 128, 256};
    switch (below(r, 3)) {
    case 0: return 1 + below(r, 256);
    case 1: return usual[below(r, 7)];
    default: return 1 + below(r, 64);
    }
}

/* A sequence length: uniform 1..300, around a multiple of 64 (so around every chunk size's
 * boundary), or short. */
static int pick_len(rng *r) {
    switch (below(r, 3)) {
    case 0: return 1 + below(r, 300);
    case 1: return 64 * (1 + below(r, 4)) - 1 + below(r, 3);
    default: return 1 + below(r, 20);
    }
}

static long work(const rewy_case *c) {
    int T = c->T;
    if (c->num_seqs) { T = 0; for (int s = 0; s < c->num_seqs; s++) T += c->seqlens[s]; }
    return (long)(c->num_seqs ? 1 : c->B) * T * c->HV * c->K * c->V;
}

static rewy_case random_case(uint64_t seed, int index, long work_max, int all_gates) {
    /* the index multiplied by an odd constant: neighbouring configurations start far apart in
     * splitmix's state sequence (index + 1 would give a shifted copy of the same stream) */
    rng r = {seed};
    r.s = rng_next(&r) ^ (uint64_t)index * 0xD1B54A32D192ED03ull;
    rewy_case c;
    memset(&c, 0, sizeof c);
    c.backend = REWY_BACKEND_CUDA;
    c.seed = seed * 1000003ull + (uint64_t)index;
    c.op = (rewy_op)below(&r, 4);
    static const rewy_dtype dtypes[4] = {REWY_BF16, REWY_BF16, REWY_F16, REWY_F32};
    c.dtype = dtypes[below(&r, 4)];
    static const int chunks[4] = {0, 16, 32, 64};
    c.chunk_size = chunks[below(&r, 4)];
    c.policy = (rewy_policy)below(&r, 2);
    c.state_v_first = below(&r, 4) == 0;
    c.H = 1 + below(&r, 4);
    static const int groups[4] = {1, 1, 2, 4};
    c.HV = c.H * groups[below(&r, 4)];
    c.K = pick_dim(&r);
    c.V = pick_dim(&r);
    if (below(&r, 5) < 2) {
        int n = 1 + below(&r, 8);
        int lens[8];
        for (int s = 0; s < n; s++) lens[s] = pick_len(&r);
        c.num_seqs = n;
        c.B = 1;
        for (int s = 0; s < n; s++) c.seqlens[s] = lens[s];
    } else {
        c.B = 1 + below(&r, 3);
        c.T = pick_len(&r);
    }
    if (c.op != REWY_OP_DELTANET) {
        static const rewy_gate_regime gates[7] = {REWY_GATES_NORMAL, REWY_GATES_NORMAL, REWY_GATES_STRONG,
                                                  REWY_GATES_RESET, REWY_GATES_NEG_INF, REWY_GATES_HUGE,
                                                  REWY_GATES_MIXED};
        c.gates = gates[below(&r, all_gates ? 7 : 4)];
    }
    c.betas = below(&r, 6) == 0 ? REWY_BETAS_ZERO : REWY_BETAS_NORMAL;
    c.use_h0 = below(&r, 2);
    c.use_dht = below(&r, 2);
    c.no_ht = below(&r, 5) == 0;

    /* Shrink to the work bound: the longest sequence, then the value-head group, then H, then
     * the wider of K and V. */
    while (work(&c) > work_max) {
        int *len = &c.T;
        for (int s = 0; s < c.num_seqs; s++)
            if (s == 0 || c.seqlens[s] > *len) len = &c.seqlens[s];
        if (*len > 1) *len = (*len + 1) / 2;
        else if (c.HV > c.H) c.HV /= 2;
        else if (c.H > 1) { c.H /= 2; c.HV = c.H; }
        else if (c.K >= c.V) c.K = (c.K + 1) / 2;
        else c.V = (c.V + 1) / 2;
    }
    if (c.num_seqs) {
        c.T = 0;
        for (int s = 0; s < c.num_seqs; s++) c.T += c.seqlens[s];
    }
    return c;
}

/* What the campaign covered, for its summary line. */
typedef struct tally {
    int ops[4], dtypes[3], policies[2], varlen, gva, small_kv, wide_kv, tails, h0, dht, no_ht, vfirst;
    int gates[6], beta0;    /* by rewy_gate_regime */
} tally;

static void count(tally *t, const rewy_case *c) {
    t->ops[c->op]++;
    t->dtypes[c->dtype]++;
    t->policies[c->policy]++;
    t->varlen += c->num_seqs > 0;
    t->gva += c->HV > c->H;
    t->small_kv += c->K < 16 || c->V < 16;
    t->wide_kv += c->K > 128 || c->V > 128;
    int chunk = c->chunk_size ? c->chunk_size : 64, tail = 0;
    if (c->num_seqs) { for (int s = 0; s < c->num_seqs; s++) tail |= c->seqlens[s] % chunk != 0; }
    else tail = c->T % chunk != 0;
    t->tails += tail;
    t->h0 += c->use_h0;
    t->dht += c->use_dht;
    t->no_ht += c->no_ht;
    t->vfirst += c->state_v_first;
    t->gates[c->gates]++;
    t->beta0 += c->betas == REWY_BETAS_ZERO;
}

static int arg_int(int argc, char **argv, int *i, long *out) {
    if (*i + 1 >= argc) return 1;
    char *end;
    *out = strtol(argv[++*i], &end, 10);
    return *end != 0 || *out < 0;
}

int main(int argc, char **argv) {
    long seed = 1, n = 2000, start = 0;
    int quick = test_quick(), verbose = 0, all_gates = 0;
    for (int i = 1; i < argc; i++) {
        int bad = 0;
        if (!strcmp(argv[i], "--seed")) bad = arg_int(argc, argv, &i, &seed);
        else if (!strcmp(argv[i], "--count")) bad = arg_int(argc, argv, &i, &n);
        else if (!strcmp(argv[i], "--start")) bad = arg_int(argc, argv, &i, &start);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--all-gates")) all_gates = 1;
        else bad = 1;
        if (bad) {
            fprintf(stderr, "usage: test_random [--seed S] [--count N] [--start I] [--quick] [--verbose] "
                            "[--all-gates]\n");
            return 2;
        }
    }
    long work_max = 1L << 21;
    if (quick) { n = 24; work_max = 1L << 17; }
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "test_random: no CUDA device\n");
        return 1;
    }
    if (!rewy_has_cuda()) { fprintf(stderr, "test_random: library built without CUDA\n"); return 1; }
    printf("test_random on %s (sm_%d%d): seed %ld, configurations %ld..%ld, B*T*HV*K*V <= %ld\n", prop.name,
           prop.major, prop.minor, seed, start, start + n - 1, work_max);

    test_counts tc = {0, 0};
    tally t;
    memset(&t, 0, sizeof t);
    long ran = 0, failed = 0;
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    for (long i = start; i < start + n; i++) {
        rewy_case c = random_case((uint64_t)seed, (int)i, work_max, all_gates);
        int failed_before = tc.failed;
        run_case(&tc, c, verbose);
        ran++;
        count(&t, &c);
        if (tc.failed != failed_before) {
            failed++;
            char desc[256];
            rewy_check_describe(&c, desc, sizeof desc);
            printf("FAIL configuration %ld: %s (alone: test_random --seed %ld --start %ld --count 1%s)\n", i,
                   desc, seed, i, all_gates ? " --all-gates" : "");
            /* how much of it the case's own conditioning explains: the exact gradients' change when the final-state
             * gradient is stored in bf16 (as every chunk's S̄⁺ is), against the tolerance; the verdict stands */
            double sens[REWY_Q_COUNT];
            if (c.use_dht && !rewy_check_dht_sensitivity(&c, sens))
                printf("  conditioning: with dht in bf16 the exact q̄ k̄ v̄ ḡ move by %.2f %.2f %.2f %.2f of their "
                       "tolerances\n", sens[REWY_Q_DQ] / REWY_CHECK_TOL_MAIN, sens[REWY_Q_DK] / REWY_CHECK_TOL_MAIN,
                       sens[REWY_Q_DV] / REWY_CHECK_TOL_MAIN, sens[REWY_Q_DG] / REWY_CHECK_TOL_GATE);
        }
        /* a device fault leaves the context unusable: stop instead of failing every later configuration */
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess) {
            printf("test_random: stopped at configuration %ld: CUDA error %s\n", i, cudaGetErrorString(ce));
            tc.failed++;
            break;
        }
    }
    timespec_get(&t1, TIME_UTC);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("covered: deltanet %d, gdn %d, kda %d, gdn2 %d; fp32 %d, bf16 %d, fp16 %d; policy R %d, A %d; varlen %d, "
           "grouped heads %d, K or V < 16 %d, K or V > 128 %d, tails %d; h0 %d, dht %d, no ht %d, state_v_first %d; "
           "gates normal %d, strong %d, resets %d, -inf %d, huge %d, mixed %d; zero beta %d\n",
           t.ops[0], t.ops[1], t.ops[2], t.ops[3], t.dtypes[REWY_F32], t.dtypes[REWY_BF16], t.dtypes[REWY_F16],
           t.policies[0], t.policies[1], t.varlen, t.gva, t.small_kv, t.wide_kv, t.tails, t.h0, t.dht, t.no_ht,
           t.vfirst, t.gates[REWY_GATES_NORMAL], t.gates[REWY_GATES_STRONG], t.gates[REWY_GATES_RESET],
           t.gates[REWY_GATES_NEG_INF], t.gates[REWY_GATES_HUGE], t.gates[REWY_GATES_MIXED], t.beta0);
    printf("test_random: %ld configurations run (x {WY, ReWY}), %ld failed, seed %ld, %.1f s\n", ran, failed, seed,
           secs);
    return test_finish(&tc);
}
