/* cases.h: the case matrix that test_ops.c (CPU) and cuda/test_cuda.c (CUDA) share. Each test
 * builds its list from the blocks below, in its own order, with the cases only it runs in
 * between. The order is part of the matrix: a case's seed, hence its inputs, is its position
 * in the list. */
#ifndef REWY_TEST_CASES_H
#define REWY_TEST_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "testutil.h"

#define CASES_MAX 256

/* One test's cases, in order. Every case added runs on the list's backend, with seed
 * seed0 + its index (distinct inputs per case, reproducible). */
typedef struct case_list {
    rewy_case c[CASES_MAX];
    int n;
    rewy_backend backend;
    uint64_t seed0;
} case_list;

static inline void cases_init(case_list *l, rewy_backend backend, uint64_t seed0) {
    l->n = 0;
    l->backend = backend;
    l->seed0 = seed0;
}

/* Base case: 2 sequences of 65 tokens (one full chunk and a 1-token tail), bf16, K = V = 64,
 * nonzero h0 and final-state gradient. Variants change one or two fields. The backend and
 * the seed are the list's (add sets them). */
static inline rewy_case base(rewy_op op) {
    rewy_case c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.dtype = REWY_BF16;
    c.B = 2;
    c.T = 65;
    c.H = 2;
    c.HV = 2;
    c.K = 64;
    c.V = 64;
    c.chunk_size = 64;
    c.use_h0 = 1;
    c.use_dht = 1;
    return c;
}

static inline void set_seqs(rewy_case *c, const int *lens, int n) {
    c->num_seqs = n;
    c->B = 1;
    c->T = 0;
    for (int i = 0; i < n; i++) { c->seqlens[i] = lens[i]; c->T += lens[i]; }
}

static inline void add(case_list *l, rewy_case c) {
    if (l->n == CASES_MAX) { fprintf(stderr, "cases.h: CASES_MAX too small\n"); exit(2); }
    c.backend = l->backend;
    c.seed = l->seed0 + (uint64_t)l->n;
    l->c[l->n++] = c;
}

/* Packed varlen sequences: a single token, a short one, exactly one chunk, a chunk and a
 * 1-token tail, several chunks with a tail. */
static const int varlen[5] = {1, 15, 64, 65, 300};

/* Every operator but DeltaNet has a decay gate. */
static inline int has_gates(rewy_op op) { return op != REWY_OP_DELTANET; }

/* Sequence lengths around the chunk boundary. */
static inline void cases_tails(case_list *l, rewy_op op) {
    static const int Ts[] = {1, 63, 64, 65};
    for (int t = 0; t < 4; t++) { rewy_case c = base(op); c.T = Ts[t]; add(l, c); }
}

/* Chunk sizes with a tail each (100 = 6·16 + 4 = 3·32 + 4), then β = 0 on every third token
 * and 1e-8 on others (GDN2: b and w). */
static inline void cases_chunks_betas(case_list *l, rewy_op op) {
    rewy_case c;
    c = base(op); c.T = 100; c.chunk_size = 16; add(l, c);
    c = base(op); c.T = 100; c.chunk_size = 32; c.K = 60; c.V = 100; add(l, c);
    c = base(op); c.B = 1; c.T = 130; c.betas = REWY_BETAS_ZERO; add(l, c);
    c = base(op); c.B = 1; c.T = 130; c.betas = REWY_BETAS_ZERO; c.dtype = REWY_F32; add(l, c);
}

/* Gated operators: strong decay (gates down to −5 per token). */
static inline void cases_strong_decay(case_list *l, rewy_op op) {
    if (!has_gates(op)) return;
    rewy_case c;
    c = base(op); c.T = 130; c.gates = REWY_GATES_STRONG; add(l, c);
    c = base(op); c.T = 130; c.gates = REWY_GATES_STRONG; c.dtype = REWY_F32; c.chunk_size = 32; add(l, c);
}

/* Gated operators: −1000 resets. */
static inline void cases_reset(case_list *l, rewy_op op) {
    if (!has_gates(op)) return;
    rewy_case c = base(op); c.T = 100; c.gates = REWY_GATES_RESET; add(l, c);
}

/* Gated operators: −1000 resets in packed varlen sequences (the first token of every odd
 * sequence is a reset too), with grouped value heads and in fp32. */
static inline void cases_varlen_resets(case_list *l, rewy_op op) {
    if (!has_gates(op)) return;
    rewy_case c;
    c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_RESET; c.H = 1; c.HV = 2; add(l, c);
    c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_RESET; c.dtype = REWY_F32; add(l, c);
}

/* Extreme gates and scale (issue 25): −inf resets (exact), huge finite gates (−25, −31 around the
 * library's floor of −30, then −1e4, −1e6, −1e30), strong and weak gates mixed in one chunk
 * (−1000 every 7th token, −0.1 otherwise; fp32 on the CPU is held to REWY_CHECK_TOL_MIXED_F32),
 * and a query scale of 1e30 and 1e-30 (folded into q before the centered factors of the vector
 * gates). T = 200 puts all five huge values into one sequence. Scale cases run for every operator. */
static inline void cases_extreme(case_list *l, rewy_op op) {
    rewy_case c;
    if (has_gates(op)) {
        c = base(op); c.T = 100; c.gates = REWY_GATES_NEG_INF; add(l, c);
        c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_NEG_INF; c.dtype = REWY_F32; c.HV = 4; add(l, c);
        c = base(op); c.T = 200; c.gates = REWY_GATES_HUGE; add(l, c);
        c = base(op); c.T = 200; c.gates = REWY_GATES_HUGE; c.dtype = REWY_F32; c.chunk_size = 32; add(l, c);
        c = base(op); c.T = 130; c.gates = REWY_GATES_MIXED; c.dtype = REWY_F32; add(l, c);
        c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_MIXED; c.dtype = REWY_F32; c.K = 128; c.V = 64; add(l, c);
        c = base(op); c.T = 130; c.gates = REWY_GATES_MIXED; add(l, c);
    }
    c = base(op); c.T = 100; c.scale = 1e30f; add(l, c);
    c = base(op); c.T = 100; c.scale = 1e30f; c.dtype = REWY_F32; c.K = 128; c.V = 64; add(l, c);
    c = base(op); c.T = 100; c.scale = 1e-30f; c.dtype = REWY_F32; add(l, c);
    if (has_gates(op)) { c.gates = REWY_GATES_STRONG; c.chunk_size = 16; add(l, c); }
    /* strong gates at chunk 16: half ranges around 20, which the centered factors take at the default
     * scale; at 1e30 they would reach 1e30·e^40 and overflow (issue 25), so these go pairwise */
    if (has_gates(op)) {
        c = base(op); c.T = 130; c.scale = 1e30f; c.gates = REWY_GATES_STRONG; c.chunk_size = 16; add(l, c);
        c.dtype = REWY_F32; add(l, c);
    }
}

/* A NaN log gate propagates, never hidden (issue 25). One NaN at token 70 (row 6 of the second
 * chunk) of batch row 0, value head 0, in a 130-token sequence: the first chunk's outputs stay
 * finite, every output from the NaN's token on and the sequence's final state are NaN, the
 * initial-state gradient is not finite, and the other batch row and head are untouched. Tokens of
 * the NaN's chunk before it may be NaN too (dense products meet the NaN rows with masked zeros:
 * 0 · NaN = NaN); that count is printed. Each gated operator under both policies. */
static inline void nan_gate_checks(test_counts *tc, rewy_backend backend, const rewy_check_mem *mem) {
    static const rewy_op ops[3] = {REWY_OP_GDN, REWY_OP_KDA, REWY_OP_GDN2};
    for (int i = 0; i < 6; i++) {
        rewy_case c = base(ops[i / 2]);
        c.backend = backend;
        c.T = 130;
        c.policy = i % 2 ? REWY_POLICY_A : REWY_POLICY_R;
        c.seed = 77;
        rewy_check_nan r;
        char desc[256];
        rewy_check_describe(&c, desc, sizeof desc);
        rewy_check_nan_gate(&c, mem, 70, &r);
        CHECK(tc, !r.harness_error && r.fwd_status == REWY_OK && r.bwd_status == REWY_OK, "%s: NaN gate: run failed", desc);
        if (r.harness_error || r.bwd_status != REWY_OK) continue;
        CHECK(tc, r.o_before == 0, "%s: NaN gate: %ld non-finite o before its chunk", desc, r.o_before);
        CHECK(tc, r.o_from_finite == 0, "%s: NaN gate: %ld finite o from its token on", desc, r.o_from_finite);
        CHECK(tc, r.ht_nonfinite == r.state_size, "%s: NaN gate: %ld of %ld ht non-finite", desc, r.ht_nonfinite,
              r.state_size);
        CHECK(tc, r.dh0_nonfinite > 0, "%s: NaN gate: dh0 finite", desc);
        CHECK(tc, r.others == 0, "%s: NaN gate: %ld non-finite values in other rows or heads", desc, r.others);
        printf("  NaN gate, %s: o of the 6 tokens before it in its chunk: %ld of %d non-finite; dh0 %ld of %ld\n",
               desc, r.o_chunk_before, 6 * c.V, r.dh0_nonfinite, r.state_size);
    }
}

/* Grouped value heads (H = 2, HV = 4). */
static inline void cases_gva(case_list *l, rewy_op op) {
    rewy_case c = base(op); c.T = 100; c.HV = 4; add(l, c);
}

/* The rest of the shared matrix: grouped value heads again, packed varlen, state boundaries,
 * state_v_first and element types. */
static inline void cases_layouts_dtypes(case_list *l, rewy_op op) {
    rewy_case c;
    /* Grouped value heads in fp32, with K ≠ V. */
    c = base(op); c.T = 100; c.HV = 4; c.dtype = REWY_F32; c.K = 32; c.V = 48; add(l, c);

    /* Packed varlen sequences. */
    c = base(op); set_seqs(&c, varlen, 5); add(l, c);
    c = base(op); set_seqs(&c, varlen, 5); c.dtype = REWY_F32; c.chunk_size = 16; c.K = c.V = 32; add(l, c);

    /* State boundaries: none at all; no final-state gradient; ht not requested. */
    c = base(op); c.use_h0 = 0; c.use_dht = 0; add(l, c);
    c = base(op); c.use_dht = 0; c.no_ht = 1; c.T = 100; add(l, c);

    /* state_v_first, with K ≠ V so a transposition cannot hide. */
    c = base(op); c.state_v_first = 1; c.K = 64; c.V = 128; c.T = 100; add(l, c);
    c = base(op); c.state_v_first = 1; set_seqs(&c, varlen, 5); c.K = 32; c.V = 48; c.dtype = REWY_F32; add(l, c);

    /* Element types. */
    c = base(op); c.dtype = REWY_F32; add(l, c);
    c = base(op); c.dtype = REWY_F32; c.T = 200; c.K = 100; c.V = 60; c.HV = 4; add(l, c);
    c = base(op); c.dtype = REWY_F16; add(l, c);
    c = base(op); c.dtype = REWY_F16; c.T = 130; c.chunk_size = 32; if (has_gates(op)) c.gates = REWY_GATES_STRONG; add(l, c);
}

#endif
