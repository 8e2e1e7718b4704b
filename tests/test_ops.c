/* test_ops.c: every operator × {forward, WY backward, ReWY backward} × policy {R, A} against
 * the fp64 oracle (MATH §10 thresholds), on a case matrix that covers each dimension for each
 * operator without taking the full cross product: tails (T = 1, 63, 64, 65, 1000), head sizes
 * (equal and unequal K, V up to 256), chunk sizes 16/32/64, zero and tiny β, strong decay,
 * −1000 resets, independent GDN2 gates, grouped value heads, packed varlen sequences,
 * nonzero h0 and final-state gradient, state_v_first, and fp32/bf16/fp16.
 * fp32 cases also require WY and ReWY to agree to 1e-5 (relative).
 *
 * REWY_TEST_QUICK=1 (sanitizer builds) runs a reduced matrix that still touches every
 * operator, policy, algorithm, varlen, GVA and a tail. */
#include <string.h>
#include <time.h>

#include "cpu/check.h"
#include "testutil.h"

#define MAX_CASES 256

static const rewy_op all_ops[4] = {REWY_OP_DELTANET, REWY_OP_GDN, REWY_OP_KDA, REWY_OP_GDN2};

typedef struct case_list { rewy_case c[MAX_CASES]; int n; } case_list;

/* Base case: 2 sequences of 65 tokens (one full chunk and a 1-token tail), bf16, K = V = 64,
 * nonzero h0 and final-state gradient. Variants change one or two fields. */
static rewy_case base(rewy_op op) {
    rewy_case c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.backend = REWY_BACKEND_CPU;
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

static void set_seqs(rewy_case *c, const int *lens, int n) {
    c->num_seqs = n;
    c->B = 1;
    c->T = 0;
    for (int i = 0; i < n; i++) { c->seqlens[i] = lens[i]; c->T += lens[i]; }
}

static void add(case_list *l, rewy_case c) {
    if (l->n == MAX_CASES) { fprintf(stderr, "test_ops: MAX_CASES too small\n"); exit(2); }
    c.seed = 1000u + (uint64_t)l->n;    /* distinct inputs per case, reproducible */
    l->c[l->n++] = c;
}

static const int varlen[5] = {1, 15, 64, 65, 300};

static void full_matrix(case_list *l) {
    for (int i = 0; i < 4; i++) {
        rewy_op op = all_ops[i];
        int gated = op != REWY_OP_DELTANET;
        rewy_case c;

        /* Sequence lengths around the chunk boundary, and a long one. */
        static const int Ts[] = {1, 63, 64, 65};
        for (int t = 0; t < 4; t++) { c = base(op); c.T = Ts[t]; add(l, c); }
        c = base(op); c.B = 1; c.H = c.HV = 1; c.T = 1000; add(l, c);

        /* Head sizes: equal, then unequal K ≠ V. */
        static const int KV[][2] = {{32, 32}, {60, 60}, {100, 100}, {128, 128},
                                    {64, 128}, {128, 32}, {60, 100}};
        for (int s = 0; s < 7; s++) {
            c = base(op); c.B = 1; c.K = KV[s][0]; c.V = KV[s][1]; add(l, c);
        }
        c = base(op); c.B = 1; c.H = c.HV = 1; c.T = 130; c.K = c.V = 256; add(l, c);

        /* Chunk sizes with a tail each (100 = 6·16 + 4 = 3·32 + 4). */
        c = base(op); c.T = 100; c.chunk_size = 16; add(l, c);
        c = base(op); c.T = 100; c.chunk_size = 32; c.K = 60; c.V = 100; add(l, c);

        /* β = 0 on every third token and 1e-8 on others (GDN2: b and w). */
        c = base(op); c.B = 1; c.T = 130; c.betas = REWY_BETAS_ZERO; add(l, c);
        c = base(op); c.B = 1; c.T = 130; c.betas = REWY_BETAS_ZERO; c.dtype = REWY_F32; add(l, c);

        if (gated) {
            /* Strong decay (gates down to −5 per token) and −1000 resets. */
            c = base(op); c.T = 130; c.gates = REWY_GATES_STRONG; add(l, c);
            c = base(op); c.T = 130; c.gates = REWY_GATES_STRONG; c.dtype = REWY_F32; c.chunk_size = 32; add(l, c);
            c = base(op); c.T = 100; c.gates = REWY_GATES_RESET; add(l, c);
            c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_RESET; c.H = 1; c.HV = 2; add(l, c);
            c = base(op); set_seqs(&c, varlen, 5); c.gates = REWY_GATES_RESET; c.dtype = REWY_F32; add(l, c);
        }

        /* Grouped value heads (H = 2, HV = 4). */
        c = base(op); c.T = 100; c.HV = 4; add(l, c);
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
        c = base(op); c.dtype = REWY_F16; c.T = 130; c.chunk_size = 32; if (gated) c.gates = REWY_GATES_STRONG; add(l, c);
        c = base(op); c.dtype = REWY_F16; set_seqs(&c, varlen, 5); c.HV = 4; add(l, c);

        /* Several dimensions at once, where interactions could hide: varlen + GVA +
         * state_v_first + chunk 16 + K ≠ V + resets (zero β for DeltaNet). */
        c = base(op); set_seqs(&c, varlen, 5); c.H = 1; c.HV = 2; c.state_v_first = 1;
        c.chunk_size = 16; c.K = 48; c.V = 64;
        if (gated) c.gates = REWY_GATES_RESET;
        else c.betas = REWY_BETAS_ZERO;
        add(l, c);
    }
    /* Long fp32 sequences: WY and ReWY must still agree to 1e-5 after 16 chunks. */
    {
        rewy_case c = base(REWY_OP_DELTANET);
        c.B = 1; c.H = c.HV = 1; c.T = 1000; c.K = c.V = 128; c.dtype = REWY_F32;
        add(l, c);
        c.op = REWY_OP_GDN2;
        add(l, c);
    }
    /* A few big shapes: T = 1000 with K = V = 256 (one scalar-gate, one vector-gate op). */
    rewy_case c = base(REWY_OP_GDN);
    c.B = 1; c.H = c.HV = 1; c.T = 1000; c.K = c.V = 256;
    add(l, c);
    c.op = REWY_OP_KDA;
    add(l, c);
}

static void quick_matrix(case_list *l) {
    for (int i = 0; i < 4; i++) {
        rewy_op op = all_ops[i];
        rewy_case c;
        /* GVA + tail + unequal K, V + chunk 32. */
        c = base(op); c.H = 1; c.HV = 2; c.K = 32; c.V = 48; c.chunk_size = 32; add(l, c);
        /* Varlen with resets (or zero β for DeltaNet), K > V, fp32 (so WY ≈ ReWY is checked too). */
        c = base(op); set_seqs(&c, varlen, 5); c.H = c.HV = 1; c.K = 48; c.V = 32; c.dtype = REWY_F32;
        if (op == REWY_OP_DELTANET) c.betas = REWY_BETAS_ZERO;
        else c.gates = REWY_GATES_RESET;
        add(l, c);
        /* One token, fp16, state_v_first. */
        c = base(op); c.T = 1; c.K = 16; c.V = 24; c.dtype = REWY_F16; c.state_v_first = 1; add(l, c);
        /* Chunk 16 with strong decay (zero β for DeltaNet). */
        c = base(op); c.T = 100; c.chunk_size = 16;
        if (op == REWY_OP_DELTANET) c.betas = REWY_BETAS_ZERO;
        else c.gates = REWY_GATES_STRONG;
        add(l, c);
        /* Varlen + GVA (H = 2, HV = 4) + state_v_first + K < V. */
        c = base(op); set_seqs(&c, varlen, 5); c.HV = 4; c.K = 64; c.V = 128; c.state_v_first = 1; add(l, c);
        /* Larger heads, several chunks, no state boundaries. */
        c = base(op); c.B = 1; c.T = 300; c.K = c.V = 128; c.use_h0 = 0; c.use_dht = 0; add(l, c);
    }
}

/* One case under one policy: each check is one quantity of one run. */
static void run_case(test_counts *tc, rewy_case c) {
    rewy_check_result r;
    char desc[256];
    rewy_check_describe(&c, desc, sizeof desc);
    int failed_before = tc->failed;
    rewy_check_run(&c, NULL, &r);

    CHECK(tc, !r.harness_error, "%s: %s", desc, r.msg);
    CHECK(tc, r.fwd_status == REWY_OK && r.bwd_status[REWY_BWD_WY] == REWY_OK &&
              r.bwd_status[REWY_BWD_REWY] == REWY_OK, "%s: %s", desc, r.msg);
    if (!r.harness_error && r.fwd_status == REWY_OK) {
        static const char *const run_names[REWY_RUN_COUNT] = {"forward", "WY", "ReWY"};
        for (int q = 0; q < REWY_Q_COUNT; q++) {
            if (!r.applies[q]) continue;
            for (int run = 0; run < REWY_RUN_COUNT; run++) {
                if ((run == REWY_RUN_FWD) != (q <= REWY_Q_HT)) continue;
                const rewy_check_err *e = &r.err[run][q];
                CHECK(tc, e->pass, "%s: %s %s rel %.3e (tol %.1e), max abs %.3e, |ref| %.3e%s", desc,
                      run_names[run], rewy_check_qty_name((rewy_qty)q), e->rel, r.tol[q], e->max_abs,
                      e->ref_norm, e->finite ? "" : ", NOT FINITE");
            }
        }
        CHECK(tc, r.saved_intact, "%s: the backward modified the saved buffer", desc);
        if (c.dtype == REWY_F32) CHECK(tc, r.agree, "%s: WY and ReWY disagree beyond 1e-5", desc);
    }
    if (tc->failed != failed_before) rewy_check_print_table(stderr, &c, &r);
}

int main(void) {
    static case_list l;     /* static: large, keeps it off the stack */
    test_counts tc = {0, 0};
    int quick = test_quick();
    if (quick) quick_matrix(&l);
    else full_matrix(&l);

    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    int runs = 0;
    for (int i = 0; i < l.n; i++) {
        for (int p = 0; p < 2; p++) {
            rewy_case c = l.c[i];
            c.policy = p ? REWY_POLICY_A : REWY_POLICY_R;
            run_case(&tc, c);
            runs++;
        }
    }
    timespec_get(&t1, TIME_UTC);
    printf("test_ops: %d cases x 2 policies = %d runs (%s matrix), %.1f s\n", l.n, runs,
           quick ? "quick" : "full", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return test_finish(&tc);
}
