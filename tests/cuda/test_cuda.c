/* test_cuda.c: the CUDA backend (all four operators) against the fp64 oracle, on the device.
 *
 *  1. The core case matrix (tails T = 1, 63, 64, 65, 1000; K, V ∈ {32, 60, 64, 100, 128, 256} and
 *     K ≠ V; chunk sizes 16/32/64; zero/tiny β; strong decay; −1000 resets; GVA; packed varlen
 *     [1,15,64,65,300]; h0 and final-state gradient; state_v_first; fp32/bf16/fp16), each under
 *     policies R and A, each backward with both pullbacks (WY and ReWY), through the shared
 *     harness src/check/check.c with device memory. Thresholds: MATH §10.
 *  2. CUDA-graph capture of forward + backward on a non-default stream; replays with new inputs
 *     copied into the captured buffers must equal a direct call bit for bit, differ from the
 *     previous inputs' results, and pass the oracle.
 *  3. KDA and GDN2 (the vector-gate kernels): the same matrix for them (strong decay, −1000 resets
 *     through the pairwise path, GVA, varlen, both policies, both pullbacks).
 *  4. K < 16 (the plain fp32 token recurrence, src/cuda/recurrent.cu): K = 1..15 in every dtype, odd V, V = 1 and 256,
 *     varlen with GVA, state_v_first, −inf resets (cases_small_k), appended to both matrices.
 *  Each matrix ends with extreme gates and scale (−inf resets, huge finite gates, mixed −1000/−0.1,
 *  scale 1e30 and 1e-30; a floored gate's ḡ must be exactly 0), and a NaN gate must propagate
 *  (cases.h: cases_extreme, nan_gate_checks).
 *
 * REWY_TEST_QUICK=1 or --quick: a few small cases (for compute-sanitizer).
 * --v128: the quick matrix's V = 128 cases alone, no graph or vector-gate checks (racecheck of chain_ws.cu's kernels,
 *   whose 512-thread blocks make the whole quick matrix run past the sanitizer's time).
 * REWY_TEST_SCALAR=0: skip parts 1 and 2 (to spend device time on the vector-gate matrix alone). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "check/check.h"
#include "check/oracle.h"
#include "dtype.h"
#include "cases.h"
#include "cuda_check.h"
#include "testutil.h"

/* ------------------------------------------------------------------ 1. case matrix */
/* Case seeds: SEED0 + the position in the list (cases.h), as they have always been here. */
#define SEED0 5000

/* The core case matrix for one operator, in a fixed order (case seeds follow it): the blocks
 * test_ops.c runs too (cases.h) with ours in between. Vector gates add two cases for their
 * pairwise fallback (strong decay at chunk 16, resets with fp32 K = 256). */
static void core_cases(case_list *l, rewy_op op) {
    const int vec = op == REWY_OP_KDA || op == REWY_OP_GDN2;
    rewy_case c;
    cases_tails(l, op);
    c = base(op); c.B = 1; c.H = c.HV = 2; c.T = 1000; if (vec) c.K = c.V = 128; add(l, c);
    /* {33, 40}: odd K on the fast pullbacks (their paired q̄/k̄ stores must fall back to single ones) */
    static const int KV[][2] = {{32, 32}, {60, 60}, {100, 100}, {128, 128}, {256, 256},
                                {64, 128}, {128, 32}, {60, 100}, {256, 64}, {32, 256}, {33, 40}};
    for (int s = 0; s < 11; s++) { c = base(op); c.B = 1; c.T = 130; c.K = KV[s][0]; c.V = KV[s][1]; add(l, c); }
    c = base(op); c.B = 1; c.H = c.HV = 1; c.T = 1000; c.K = c.V = 256; add(l, c);
    if (!vec) { c = base(op); c.B = 1; c.H = c.HV = 2; c.T = 1000; c.K = c.V = 128; add(l, c); }
    cases_chunks_betas(l, op);
    /* strong decay (vector gates: centered and pairwise paths), −1000 resets */
    cases_strong_decay(l, op);
    if (vec) { c = base(op); c.T = 130; c.gates = REWY_GATES_STRONG; c.chunk_size = 16; c.K = 100; c.V = 60; add(l, c); }
    cases_reset(l, op);
    if (vec) { c = base(op); c.T = 100; c.gates = REWY_GATES_RESET; c.dtype = REWY_F32; c.K = 256; c.V = 64; add(l, c); }
    cases_varlen_resets(l, op);
    /* grouped value heads (KDA's Kimi configuration among them) */
    cases_gva(l, op);
    c = base(op); c.T = 100; c.H = 1; c.HV = 4; c.K = 128; c.V = 128; add(l, c);
    cases_layouts_dtypes(l, op);
}

/* --quick (compute-sanitizer): GVA with chunk 32 and K ≠ V; short varlen with resets and state_v_first;
 * K = 128 with chunk 64 (the fast paths' widest tiles: 128-feature pullbacks, register state). */
static void quick_cases(case_list *l, rewy_op op) {
    rewy_case c;
    c = base(op); c.B = 1; c.T = 70; c.K = 128; c.V = 64; add(l, c);
    c = base(op); c.H = 1; c.HV = 2; c.K = 32; c.V = 48; c.T = 40; c.chunk_size = 32; add(l, c);
    c = base(op); set_seqs(&c, (const int[]){1, 15, 40}, 3); c.K = 40; c.V = 32; c.gates = REWY_GATES_RESET;
    c.state_v_first = 1; add(l, c);
}

/* K < 16: the plain fp32 token recurrence (src/cuda/recurrent.cu; the chunk path's bf16 intermediates failed MATH §10
 * there, issue 25): K = 1, 2, 3, 4, 8, 15 in each element type, odd V (a partial warp), V = 1 and 256 (8 warps),
 * packed varlen with grouped value heads and chunk 16 (the checkpoint spacing), state_v_first without h0 or ht, −inf
 * resets, zero β, scale 1e30. Appended last (after the extreme cases), so every earlier case keeps its seed. */
static void cases_small_k(case_list *l, rewy_op op, int quick) {
    static const int Ks[6] = {1, 2, 3, 4, 8, 15};
    static const rewy_dtype dts[3] = {REWY_BF16, REWY_F16, REWY_F32};
    rewy_case c;
    for (int i = 0; i < (quick ? 2 : 6); i++) {
        c = base(op); c.T = 150; c.K = Ks[i]; c.V = i % 2 ? 37 : 64; c.dtype = dts[i % 3]; add(l, c);
    }
    c = base(op); set_seqs(&c, varlen, 5); c.K = 3; c.V = 33; c.H = 1; c.HV = 4; c.chunk_size = 16;
    if (has_gates(op)) c.gates = REWY_GATES_RESET;
    add(l, c);
    if (quick) return;
    c = base(op); c.T = 150; c.K = 4; c.V = 100; c.HV = 4; c.dtype = REWY_F32; c.chunk_size = 32; c.state_v_first = 1;
    c.use_h0 = 0; c.no_ht = 1;
    if (has_gates(op)) c.gates = REWY_GATES_NEG_INF;
    add(l, c);
    c = base(op); c.T = 70; c.K = 2; c.V = 256; c.betas = REWY_BETAS_ZERO; if (has_gates(op)) c.gates = REWY_GATES_STRONG; add(l, c);
    c = base(op); c.T = 200; c.K = 5; c.V = 1; c.dtype = REWY_F32; c.scale = 1e30f; if (has_gates(op)) c.gates = REWY_GATES_HUGE;
    add(l, c);
}

/* ḡ where it is nearly 0 (issue 25's campaign): every sequence inside one chunk, no h0, the final-state gradient given,
 * β = 0 or 1e-8 on the tokens before the last writes (REWY_BETAS_ZERO), so every state before the last write is near 0
 * and so is ḡ, held to MATH §10's 1e-6 absolute rule. The pullbacks once took H_q's diagonal through two rounded
 * products whose terms cancel in Ḡ and left ~1e-5 there. The fast paths (bf16, K = 128, chunk 64) and the general
 * ones (fp32; K = 100). Appended last, so every earlier case keeps its seed. */
static void cases_tiny_dg(case_list *l, rewy_op op) {
    rewy_case c;
    c = base(op); c.B = 3; c.T = 3; c.K = 128; c.V = 128; c.use_h0 = 0; c.betas = REWY_BETAS_ZERO; add(l, c);
    c = base(op); c.B = 2; c.T = 50; c.K = 128; c.V = 64; c.use_h0 = 0; c.betas = REWY_BETAS_ZERO; add(l, c);
    c = base(op); c.B = 3; c.T = 5; c.K = 100; c.V = 48; c.use_h0 = 0; c.dtype = REWY_F32; c.betas = REWY_BETAS_ZERO;
    add(l, c);
}

/* The sequence split (REWY_CUDA_SEG=n: segments of n chunks; K = V = 128, one key head a value head): 11 chunks a
 * sequence with strong decay, h0 and dht; packed varlen of 10, 1, 1 and 4 chunks (segments past the short sequences'
 * ends are empty) with −1000 resets; DeltaNet without h0 (the zero-start rule of the first chunk's ḡ term) */
static void cases_segments(case_list *l) {
    static const int lens[4] = {640, 64, 3, 200};
    rewy_case c = base(REWY_OP_GDN); c.T = 700; c.K = 128; c.V = 128; c.gates = REWY_GATES_STRONG; add(l, c);
    c = base(REWY_OP_GDN); set_seqs(&c, lens, 4); c.K = 128; c.V = 128; c.gates = REWY_GATES_RESET; add(l, c);
    c = base(REWY_OP_DELTANET); c.T = 500; c.K = 128; c.V = 128; c.use_h0 = 0; add(l, c);
}

static void full_matrix(case_list *l) {
    core_cases(l, REWY_OP_DELTANET);
    core_cases(l, REWY_OP_GDN);
    /* extreme gates and scale (cases.h), last so the cases above keep their seeds */
    cases_extreme(l, REWY_OP_DELTANET);
    cases_extreme(l, REWY_OP_GDN);
    cases_small_k(l, REWY_OP_DELTANET, 0);
    cases_small_k(l, REWY_OP_GDN, 0);
    cases_tiny_dg(l, REWY_OP_GDN);
    /* packed varlen at K = 256 (the reverse scan's shared-memory state tiles), for the time windows' empty windows
     * (REWY_CUDA_WIN): appended last, so every earlier case keeps its seed */
    rewy_case c = base(REWY_OP_GDN);
    set_seqs(&c, varlen, 5); c.K = 256; c.V = 64; add(l, c);
    /* the forward chains at V = 128 (chain_ws.cu under REWY_CUDA_FWD_WS=1, the register chains' 128-column blocks):
     * packed varlen with −1000 resets and grouped value heads, strong decay at K = 64, −inf resets, DeltaNet's varlen;
     * appended last */
    c = base(REWY_OP_GDN); set_seqs(&c, varlen, 5); c.K = 128; c.V = 128; c.gates = REWY_GATES_RESET; c.H = 1; c.HV = 2;
    add(l, c);
    c = base(REWY_OP_GDN); c.T = 200; c.K = 64; c.V = 128; c.gates = REWY_GATES_STRONG; add(l, c);
    c = base(REWY_OP_GDN); c.T = 130; c.K = 128; c.V = 128; c.gates = REWY_GATES_NEG_INF; add(l, c);
    c = base(REWY_OP_DELTANET); set_seqs(&c, varlen, 5); c.K = 128; c.V = 128; add(l, c);
    /* the sequence split (segments.cu under REWY_CUDA_SEG): longer sequences at K = V = 128; appended last */
    cases_segments(l);
}

/* --quick: −inf resets in fp32 varlen with GVA, and scale 1e30 with strong gates at chunk 16. */
static void quick_extreme(case_list *l, rewy_op op) {
    rewy_case c = base(op);
    set_seqs(&c, varlen, 5); c.gates = REWY_GATES_NEG_INF; c.dtype = REWY_F32; c.HV = 4; add(l, c);
    c = base(op); c.T = 100; c.scale = 1e30f; c.gates = REWY_GATES_STRONG; c.chunk_size = 16; add(l, c);
}

/* V = 128 (chain_ws.cu under REWY_CUDA_FWD_WS=1, REWY_CUDA_CHAIN_WS=1): packed varlen, −1000 resets, grouped value
 * heads; then one key head a value head (reverse_ws.cu under REWY_CUDA_REV_WS=1): packed varlen with strong decay, and
 * DeltaNet with a tail chunk */
static void quick_v128(case_list *l) {
    rewy_case c = base(REWY_OP_GDN); set_seqs(&c, varlen, 5); c.K = 128; c.V = 128; c.gates = REWY_GATES_RESET;
    c.H = 1; c.HV = 2; add(l, c);
    c = base(REWY_OP_GDN); set_seqs(&c, varlen, 5); c.K = 128; c.V = 128; c.gates = REWY_GATES_STRONG; add(l, c);
    c = base(REWY_OP_DELTANET); c.T = 130; c.K = 128; c.V = 128; add(l, c);
    cases_segments(l);
}

static void quick_matrix(case_list *l) {
    quick_cases(l, REWY_OP_GDN);
    rewy_case c = base(REWY_OP_DELTANET); c.T = 20; c.K = 16; c.V = 24; c.dtype = REWY_F16; c.chunk_size = 16; add(l, c);
    quick_extreme(l, REWY_OP_GDN);
    cases_small_k(l, REWY_OP_GDN, 1);
    quick_v128(l);
}

/* ------------------------------------------------------------------ the forced choices reach the plan */
/* The sequence split's own workspace (backend_common.cuh's layout): every chunk's S_c (bf16) and one fp32 state region,
 * a state a segment and head (B sequences of ncs chunks, H heads, kv = K·V, segments of win chunks) */
static size_t seg_ws_bytes(int B, int ncs, int H, size_t kv, int win) {
    const size_t nseg = (size_t)B * ((ncs + win - 1) / win);
    return (size_t)B * ncs * H * kv * 2 + nseg * H * kv * 4;
}

/* The REWY_CUDA_* variables of make test-cuda's loop (cuda_force.h) must change what the plan picks, else the loop
 * would test the defaults again: on the matrix's shapes (bf16 GDN, B = 2, H = 2, chunk 64; K = V = 64, and V = 128
 * for the 128-column chains) each forced choice is asserted where that shape allows it, and without any variable
 * the defaults the Makefile names (16-column tiles, output.cu, no register chains, no wgmma scans). */
static void test_forced_plan(test_counts *tc) {
    const rewy_test_force f = env_force();
    rewy_config c;
    memset(&c, 0, sizeof c);
    c.op = REWY_OP_GDN; c.backend = REWY_BACKEND_CUDA; c.dtype = REWY_BF16;
    c.B = 2; c.T = 256; c.H = 2; c.K = 64; c.V = 64;
    rewy_test_plan p, p128, p4;
    CHECK(tc, rewy_test_get_plan(&c, &f, &p) == REWY_OK, "plan: rewy_test_get_plan failed");
    c.V = 128;
    CHECK(tc, rewy_test_get_plan(&c, &f, &p128) == REWY_OK, "plan: rewy_test_get_plan (V = 128) failed");
    c.V = 64; c.K = 4;
    CHECK(tc, rewy_test_get_plan(&c, &f, &p4) == REWY_OK, "plan: rewy_test_get_plan (K = 4) failed");
    /* K < 16 takes the token recurrence unless told (REWY_CUDA_RECURRENT=0/1 forces it off or on at any K) */
    CHECK(tc, p4.recurrent == (f.recurrent != 0) && p.recurrent == (f.recurrent == 1) &&
              p128.recurrent == (f.recurrent == 1),
          "plan: the recurrence at K = 4 / 64: %d / %d (REWY_CUDA_RECURRENT %d)", p4.recurrent, p.recurrent, f.recurrent);
    if (f.recurrent == 1) return; /* no chunk-path choice is taken then */
    printf("plan (K = V = 64): %d SMs, wgmma %d, scan_bv %d, 8w %d, wg %d/%d, wg2 %d, fused output %d, W/U %d, "
           "beside %d, W chain %d, chains %d, forward chain %d, windows of %d chunks\n", p.sms, p.wgmma, p.scan_bv,
           p.scan_8w, p.scan_wg, p.bwd_scan_wg, p.scan_wg2, p.fuse_output, p.scan_wu, p.beside_kkt, p.bwd_w, p.chain_bvc,
           p.fwd_chain, p.win);
    /* time windows (plan_windows): policy R only (the config above is R: 0); the test shape has 4 chunks a sequence,
     * so a forced window of 1–3 chunks is taken unless the wgmma scans are */
    {
        rewy_config ca = c;
        ca.K = ca.V = 64; ca.policy = REWY_POLICY_A;
        rewy_test_plan pa;
        CHECK(tc, rewy_test_get_plan(&ca, &f, &pa) == REWY_OK && !pa.win, "plan: time windows under policy A");
        const int want = f.win > 0 && f.win < 4 && !p.scan_wg ? f.win : 0;
        if (f.win != REWY_TEST_AUTO)
            CHECK(tc, p.win == want, "plan: REWY_CUDA_WIN=%d gave windows of %d chunks, want %d", f.win, p.win, want);
        if (p.win) { /* the backward's workspace holds one window (GDN, 2 sequences of 4 chunks, K = V = 64) */
            rewy_config cr = ca;
            cr.policy = REWY_POLICY_R;
            rewy_test_force none = f;
            none.win = 0;
            rewy_test_plan pn;
            CHECK(tc, rewy_test_get_plan(&cr, &none, &pn) == REWY_OK && !pn.win && p.bwd_bytes < pn.bwd_bytes &&
                          p.saved_bytes > pn.saved_bytes,
                  "plan: windows of %d chunks: bwd workspace %zu B against %zu without, saved %zu against %zu", p.win,
                  p.bwd_bytes, pn.bwd_bytes, p.saved_bytes, pn.saved_bytes);
        }
    }
    if (f.rec_vt == 64 || f.rec_vt == 128)
        CHECK(tc, p.rec_vt == f.rec_vt, "plan: REWY_CUDA_REC_VT=%d gave %d", f.rec_vt, p.rec_vt);
    const rewy_test_force none = rewy_test_force_none();
    if (!memcmp(&f, &none, sizeof f)) {
        CHECK(tc, p.scan_bv == 16 && !p.fuse_output && !p.chain_bvc && !p.scan_wg && !p.bwd_scan_wg && !p.fwd_chain &&
                      !p.win,
              "plan: the test shape's defaults changed (scan_bv %d, fused output %d, chains %d, wgmma scans %d/%d, "
              "forward chain %d, windows %d)", p.scan_bv, p.fuse_output, p.chain_bvc, p.scan_wg, p.bwd_scan_wg,
              p.fwd_chain, p.win);
        /* the forward register chain's rule (chain_scan.cu, chain_forward_bvc): by default at 64 columns where
         * 16-column blocks fill the SMs, B·HV·V/16 ≥ SMs, else not (the fused-output scan); plans only, no run.
         * Checked on GPUs like the ones it was measured on (> 32 SMs, Hopper's 227 KB a block): with fewer SMs the
         * rule's one-wave widths (32 columns) can apply, and on an A100 the 64-column tiles fill its 163 KB exactly */
        rewy_config big = c;
        big.K = big.V = 128; big.T = 4096;
        const int shapes[3][2] = {{4, 16}, {1, 4}, {8, 32}}; /* (B, H): 512, 32 and 2048 blocks of 16 columns */
        for (int i = 0; i < 3; i++) {
            big.B = shapes[i][0]; big.H = shapes[i][1];
            rewy_test_plan pb;
            CHECK(tc, rewy_test_get_plan(&big, &f, &pb) == REWY_OK, "plan: rewy_test_get_plan (B %d, H %d) failed",
                  big.B, big.H);
            if (pb.sms <= 32 || pb.smem_optin < 227 * 1024) continue; /* the rule's numbers assume a Hopper-sized GPU */
            /* 128 columns where B·H blocks fill the SMs in at most 2/3 of the 64-column rounds */
            const int bh = big.B * big.H, r128 = (bh + pb.sms - 1) / pb.sms, r64 = (2 * bh + pb.sms - 1) / pb.sms;
            const int want = bh * 8 < pb.sms ? 0 : bh >= pb.sms && 3 * r128 <= 2 * r64 ? 128 : 64;
            CHECK(tc, pb.fwd_chain == want && !(pb.fwd_chain && pb.fuse_output),
                  "plan: GDN (%d,4096,%d) took the forward chain at %d columns (fused output %d), want %d (%d SMs)",
                  big.B, big.H, pb.fwd_chain, pb.fuse_output, want, pb.sms);
            /* the warp-specialized kernels (chain_ws.cu) in place of the register chains' 128- and 64-column blocks
             * (the forward's 64-column tile: session 47) */
            CHECK(tc, pb.fwd_ws == (want >= 64 && pb.wgmma) && pb.chain_ws == (pb.chain_bvc == 128 && pb.wgmma),
                  "plan: GDN (%d,4096,%d) took the warp-specialized forward %d (forward chain %d columns) and pair %d "
                  "(chains of %d columns; sm_90a binary %d)", big.B, big.H, pb.fwd_ws, want, pb.chain_ws,
                  pb.chain_bvc, pb.wgmma);
            /* DeltaNet's forward alike (its plan once differed: the GDN-only rule of session 34) */
            rewy_config bd = big;
            bd.op = REWY_OP_DELTANET;
            rewy_test_plan pd;
            CHECK(tc, rewy_test_get_plan(&bd, &f, &pd) == REWY_OK && pd.fwd_ws == pb.fwd_ws,
                  "plan: DeltaNet (%d,4096,%d) took the warp-specialized forward %d, GDN %d", big.B, big.H, pd.fwd_ws,
                  pb.fwd_ws);
            /* the fused reverse pass (reverse_ws.cu) by default exactly where the wgmma reverse scan runs or time
             * windows do, at these K = V = 128 bf16 shapes with one key head a value head (session 39: it fired at
             * (8,2048,32) and (16,1024,16) on an H100; session 47: in the windows of (4,4096,16)) */
            CHECK(tc, pb.rev_ws == ((pb.bwd_scan_wg || pb.win > 0) && pb.pb_ws && (big.HV == 0 || big.HV == big.H)) &&
                          (big.B * big.H < 256 || pb.rev_ws == pb.wgmma),
                  "plan: GDN (%d,4096,%d) took the fused reverse pass %d (wgmma reverse scan %d, windows of %d, "
                  "pullback_ws %d, sm_90a binary %d)", big.B, big.H, pb.rev_ws, pb.bwd_scan_wg, pb.win, pb.pb_ws,
                  pb.wgmma);
            /* its recompute at 64 value columns where two blocks a sequence and head fit the SMs in one wave */
            CHECK(tc, !pb.rev_ws || pb.seg || pb.rec_vt == (2 * big.B * big.H <= pb.sms ? 64 : 128),
                  "plan: GDN (%d,4096,%d): the recompute's value tile %d (%d SMs)", big.B, big.H, pb.rec_vt, pb.sms);
            /* as two blocks a walk in the windows where two blocks a sequence and head fit the SMs in one wave */
            CHECK(tc, pb.rev_pair == (pb.rev_ws && pb.win > 0 && !pb.seg && 2 * big.B * big.H <= pb.sms),
                  "plan: GDN (%d,4096,%d): the fused pass's pairs %d (fused pass %d, windows of %d, segments %d, %d SMs)",
                  big.B, big.H, pb.rev_pair, pb.rev_ws, pb.win, pb.seg, pb.sms);
            /* and forms R itself under policy R (this config), wherever it runs */
            CHECK(tc, pb.rev_rf == pb.rev_ws, "plan: GDN (%d,4096,%d): the fused pass forms R %d (fused pass %d)", big.B,
                  big.H, pb.rev_rf, pb.rev_ws);
            /* the time windows' rule (plan_windows): a quarter of the 64 chunks where N·16·H ≥ 2·SMs, unless the
             * wgmma scans take the shape */
            const int wwant = !pb.scan_wg && big.B * 16 * big.H >= 2 * pb.sms ? 16 : 0;
            CHECK(tc, pb.win == wwant, "plan: GDN (%d,4096,%d) took windows of %d chunks, want %d (%d SMs)", big.B,
                  big.H, pb.win, wwant, pb.sms);
        }
        /* the sequence split's rule (plan_segments), in place of those windows: ⌊SMs / (N·H)⌋ segments a sequence,
         * at most one for every 16 chunks, where that is at least 4 (the fused pass's shapes from an sm_90a binary):
         * GDN (1,8192,16) and (2,16384,8); and the workspace is every chunk's S_c and the two state regions (the
         * windows' fallback inside them), with Tᵀ in dq (T·H·K bf16 ≥ its N·nwin·H·K·V fp32) */
        const int lshapes[2][3] = {{1, 8192, 16}, {2, 16384, 8}};
        for (int i = 0; i < 2; i++) {
            rewy_config sc = c;
            sc.K = sc.V = 128; sc.B = lshapes[i][0]; sc.T = lshapes[i][1]; sc.H = lshapes[i][2];
            rewy_test_plan ps;
            CHECK(tc, rewy_test_get_plan(&sc, &f, &ps) == REWY_OK, "plan: rewy_test_get_plan (segments) failed");
            if (!ps.wgmma || !ps.pb_ws || ps.scan_wg || !ps.sms) continue; /* the fused pass's shapes only */
            const int ncs = sc.T / 64, fill = ps.sms / (sc.B * sc.H), n = fill < ncs / 16 ? fill : ncs / 16;
            const int want = n >= 4 ? (ncs + n - 1) / n : 0;
            CHECK(tc, ps.seg == (want > 0) && ps.win == want && ps.rev_ws == ps.seg && ps.fwd_seg == ps.seg,
                  "plan: GDN (%d,%d,%d) took segments %d of %d chunks (fused pass %d, forward %d), want %d (%d SMs)",
                  sc.B, sc.T, sc.H, ps.seg, ps.win, ps.rev_ws, ps.fwd_seg, want, ps.sms);
            if (!ps.seg) continue;
            const size_t bound = seg_ws_bytes(sc.B, ncs, sc.H, (size_t)sc.K * sc.V, want) + 4096;
            CHECK(tc, ps.bwd_bytes <= bound, "plan: GDN (%d,%d,%d) segments' workspace %zu B, want at most %zu", sc.B,
                  sc.T, sc.H, ps.bwd_bytes, bound);
        }
    }
    if (f.scan_bv == 16 || f.scan_bv == 32 || f.scan_bv == 64)
        CHECK(tc, p.scan_bv == f.scan_bv, "plan: REWY_CUDA_SCAN_BV=%d gave %d", f.scan_bv, p.scan_bv);
    if (f.scan_8w != REWY_TEST_AUTO) CHECK(tc, p.scan_8w == (f.scan_8w != 0), "plan: REWY_CUDA_SCAN_8W not taken");
    if (f.scan_wg != REWY_TEST_AUTO)
        CHECK(tc, p.scan_wg == (f.scan_wg != 0 && p.wgmma) && p.bwd_scan_wg == p.scan_wg,
              "plan: REWY_CUDA_SCAN_WG=%d gave %d/%d (wgmma binary %d)", f.scan_wg, p.scan_wg, p.bwd_scan_wg, p.wgmma);
    if (f.scan_wg2 == 0) CHECK(tc, !p128.scan_wg2, "plan: REWY_CUDA_SCAN_WG2=0 not taken");
    if (f.scan_out != REWY_TEST_AUTO && !p.scan_wg)
        CHECK(tc, p.fuse_output == (f.scan_out != 0), "plan: REWY_CUDA_SCAN_OUT=%d gave %d", f.scan_out, p.fuse_output);
    if (f.scan_wu == 0) CHECK(tc, !p.scan_wu, "plan: REWY_CUDA_SCAN_WU=0 not taken");
    if (f.scan_beside == 0) CHECK(tc, !p.beside_kkt, "plan: REWY_CUDA_SCAN_BESIDE=0 not taken");
    if (f.scan_wf == 0) CHECK(tc, !p.bwd_w, "plan: REWY_CUDA_SCAN_WF=0 not taken");
    if (f.chain == 0) CHECK(tc, !p.chain_bvc && !p128.chain_bvc, "plan: REWY_CUDA_CHAIN=0 not taken");
    if (f.chain == 1) CHECK(tc, p.chain_bvc == 64, "plan: REWY_CUDA_CHAIN=1 gave %d columns", p.chain_bvc);
    if (f.chain == 2) /* 128-column blocks where two stages of tiles fit (certain with Hopper's 227 KB per block) */
        CHECK(tc, (p128.chain_bvc == 128 || (p128.chain_bvc == 0 && p128.smem_optin < 227 * 1024)) && !p.chain_bvc,
              "plan: REWY_CUDA_CHAIN=2 gave %d columns at V = 128, %d at V = 64", p128.chain_bvc, p.chain_bvc);
    /* bulk copies wherever the chains run from an sm_90a binary, unless forced off */
    if (f.chain_bulk == 0) CHECK(tc, !p.chain_bulk && !p128.chain_bulk, "plan: REWY_CUDA_CHAIN_BULK=0 not taken");
    else
        CHECK(tc, p.chain_bulk == (p.chain_bvc > 0 && p.wgmma) && p128.chain_bulk == (p128.chain_bvc > 0 && p128.wgmma),
              "plan: chain_bulk %d / %d with chains of %d / %d columns (sm_90a binary %d)", p.chain_bulk, p128.chain_bulk,
              p.chain_bvc, p128.chain_bvc, p.wgmma);
    if (f.fwd_chain == 0) CHECK(tc, !p.fwd_chain && !p128.fwd_chain, "plan: REWY_CUDA_FWD_CHAIN=0 not taken");
    if (f.fwd_chain == 1) /* the plan's width: 16 columns on these small grids */
        CHECK(tc, p.fwd_chain == 16 && !p.fuse_output, "plan: REWY_CUDA_FWD_CHAIN=1 gave %d columns (fused output %d)",
              p.fwd_chain, p.fuse_output);
    if (f.fwd_chain == 16 || f.fwd_chain == 32 || f.fwd_chain == 64)
        CHECK(tc, p.fwd_chain == f.fwd_chain && p128.fwd_chain == f.fwd_chain,
              "plan: REWY_CUDA_FWD_CHAIN=%d gave %d / %d columns", f.fwd_chain, p.fwd_chain, p128.fwd_chain);
    if (f.fwd_chain == 128) /* V's width: 64 at V = 64; at V = 128 where the tiles fit (Hopper's 227 KB a block) */
        CHECK(tc, p.fwd_chain == 64 && (p128.fwd_chain == 128 || (!p128.fwd_chain && p128.smem_optin < 227 * 1024)),
              "plan: REWY_CUDA_FWD_CHAIN=128 gave %d / %d columns", p.fwd_chain, p128.fwd_chain);
    /* the warp-specialized forward chain and pair (chain_ws.cu): at V = 128 from an sm_90a binary, where told (=1)
     * or by default in place of the register chains' 128- and 64-column blocks (the large grids' GDN forward; the pair
     * where the register chains would run at 128 columns: here under REWY_CUDA_SCAN_BV=64), never at =0; the forward's
     * value tile 64 columns where the chain's rule (or REWY_CUDA_FWD_CHAIN=64) takes 64, else 128 */
    const int ws_tile = f.fwd_chain == 64 ? 64 : 128;
    if (f.fwd_ws == 1 && f.fwd_chain != 0)
        CHECK(tc, !p.fwd_ws && p128.fwd_ws == p128.wgmma && (!p128.fwd_ws || p128.fwd_chain == ws_tile),
              "plan: REWY_CUDA_FWD_WS=1 gave %d / %d (forward chain %d columns, sm_90a binary %d)", p.fwd_ws,
              p128.fwd_ws, p128.fwd_chain, p128.wgmma);
    else
        CHECK(tc, !p.fwd_ws && (f.fwd_ws != 0 || !p128.fwd_ws) && (!p128.fwd_ws || p128.fwd_chain == ws_tile),
              "plan: the warp-specialized forward chain %d / %d (REWY_CUDA_FWD_WS %d, forward chain %d columns)",
              p.fwd_ws, p128.fwd_ws, f.fwd_ws, p128.fwd_chain);
    if (f.chain_ws == 1 && f.chain != 0)
        CHECK(tc, !p.chain_ws && p128.chain_ws == p128.wgmma && (!p128.chain_ws || p128.chain_bvc == 128),
              "plan: REWY_CUDA_CHAIN_WS=1 gave %d / %d (chains of %d columns, sm_90a binary %d)", p.chain_ws,
              p128.chain_ws, p128.chain_bvc, p128.wgmma);
    else
        CHECK(tc, !p.chain_ws && (f.chain_ws != 0 || !p128.chain_ws) && (!p128.chain_ws || p128.chain_bvc == 128) &&
                      (f.chain == REWY_TEST_AUTO || !p128.chain_ws),
              "plan: the warp-specialized chain pair %d / %d (REWY_CUDA_CHAIN_WS %d, REWY_CUDA_CHAIN %d, chains of %d "
              "columns)", p.chain_ws, p128.chain_ws, f.chain_ws, f.chain, p128.chain_bvc);
    /* the warp-specialized pullback (pullback_ws.cu): at K = V = 128 from an sm_90a binary, by default and where told
     * (=1); never at =0 */
    rewy_test_plan pk;
    c.K = 128; c.V = 128;
    CHECK(tc, rewy_test_get_plan(&c, &f, &pk) == REWY_OK, "plan: rewy_test_get_plan (K = V = 128) failed");
    CHECK(tc, !p.pb_ws && !p128.pb_ws && pk.pb_ws == (f.pb_ws != 0 && pk.wgmma),
          "plan: the warp-specialized pullback %d / %d / %d (REWY_CUDA_PB_WS %d, sm_90a binary %d)", p.pb_ws, p128.pb_ws,
          pk.pb_ws, f.pb_ws, pk.wgmma);
    /* the fused reverse pass (reverse_ws.cu): only where that pullback runs, with one key head a value head; where told
     * (=1) wherever that holds, by default where the wgmma reverse scan runs, over segments and in time windows, never
     * at =0 */
    const int fits = pk.pb_ws && (c.HV == 0 || c.HV == c.H);
    CHECK(tc, !p.rev_ws && !p128.rev_ws &&
                  pk.rev_ws == (fits && (f.rev_ws == 1 || (f.rev_ws != 0 && (pk.bwd_scan_wg || pk.win > 0)))),
          "plan: the fused reverse pass %d / %d / %d (REWY_CUDA_REV_WS %d, pullback_ws %d, windows %d, segments %d, "
          "wgmma reverse scan %d)", p.rev_ws, p128.rev_ws, pk.rev_ws, f.rev_ws, pk.pb_ws, pk.win, pk.seg, pk.bwd_scan_wg);
    /* its pairs: only in time windows, never at =0, in every window at =1 (the test shapes' small grids: by default too) */
    CHECK(tc, pk.rev_pair == (pk.rev_ws && pk.win > 0 && !pk.seg && f.rev_pair != 0),
          "plan: the fused pass's pairs %d (REWY_CUDA_REV_PAIR %d, fused pass %d, windows %d, segments %d)", pk.rev_pair,
          f.rev_pair, pk.rev_ws, pk.win, pk.seg);
    /* which forms R from S_c under policy R (its recompute stores S_c alone) and loads policy A's saved R */
    CHECK(tc, pk.rev_rf == (pk.rev_ws && c.policy == REWY_POLICY_R), "plan: the fused pass forms R %d (fused pass %d, "
          "policy %d)", pk.rev_rf, pk.rev_ws, (int)c.policy);
    /* the sequence split (plan_segments): at K = V = 128 with that pullback (judged without pointers: pb_ws here),
     * policy R, one key head a value head and no wgmma forward scan, where told: n chunks a segment (the shape has 4
     * chunks a sequence); then the time windows are the segments. Not by default at 4 chunks a sequence (the rule's
     * own shapes: the defaults' checks above), nor at K = V = 64 */
    const int swant = f.seg > 0 && f.seg < 4 && pk.pb_ws && !pk.scan_wg ? f.seg : 0;
    CHECK(tc, !p.seg && !p128.seg && pk.seg == (swant > 0) && (!swant || pk.win == swant),
          "plan: REWY_CUDA_SEG=%d gave segments %d of %d chunks at K = V = 128 (%d / %d at 64 / V = 128), want %d",
          f.seg, pk.seg, pk.win, p.seg, p128.seg, swant);
    /* the forward's segments (plan_fwd_segments): with the backward's, where the warp-specialized chain fits and is not
     * forced off (the chain's own plan check: the bf16 shapes at V = 128 from an sm_90a binary) */
    CHECK(tc, !p.fwd_seg && !p128.fwd_seg && pk.fwd_seg == (pk.seg && f.fwd_ws != 0 && f.fwd_chain != 0 && pk.wgmma),
          "plan: the forward's segments %d with segments %d (REWY_CUDA_FWD_WS %d, REWY_CUDA_FWD_CHAIN %d)", pk.fwd_seg,
          pk.seg, f.fwd_ws, f.fwd_chain);
    if (pk.seg) { /* the workspace holds every chunk's S_c and the segments' states, the saved buffer the checkpoints */
        rewy_test_force none = f;
        none.seg = 0; none.win = 0;
        rewy_test_plan pn;
        const size_t least = seg_ws_bytes(c.B, 4, c.H, (size_t)c.K * c.V, pk.win);
        CHECK(tc, rewy_test_get_plan(&c, &none, &pn) == REWY_OK && !pn.seg && !pn.win && pk.bwd_bytes >= least &&
                      pk.saved_bytes > pn.saved_bytes,
              "plan: segments of %d chunks: bwd workspace %zu B (at least %zu), saved %zu against %zu without", pk.win,
              pk.bwd_bytes, least, pk.saved_bytes, pn.saved_bytes);
        rewy_config ca = c;
        ca.policy = REWY_POLICY_A;
        rewy_test_plan pa;
        CHECK(tc, rewy_test_get_plan(&ca, &f, &pa) == REWY_OK && !pa.seg && !pa.win, "plan: segments under policy A");
    }
}

/* ------------------------------------------------------------------ 2. graph capture */
typedef struct gbuf {
    rewy_config cfg;
    size_t nq, nv, ng, ns;
    void *q, *k, *v, *beta, *o, *dq, *dk, *dv, *dbeta, *do_;
    float *g, *h0, *ht, *dht, *dg, *dh0;
    int32_t *cu;
    void *saved, *fws, *bws;
    size_t saved_bytes, fws_bytes, bws_bytes;
    double *q64, *k64, *v64, *g64, *b64, *h064, *do64, *dht64;
} gbuf;

static uint64_t rs;
static double urand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) {
    double u = urand() + 1e-12, w = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * w);
}

/* Fill a bf16 device tensor and its exact fp64 copy. */
static int put_bf16(void *dev, double *h64, size_t n, double (*gen)(size_t, void *), void *ctx) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        h[i] = rewy_f32_to_bf16((float)gen(i, ctx));
        h64[i] = rewy_bf16_to_f32(h[i]);
    }
    int rc = cudaMemcpy(dev, h, n * 2, cudaMemcpyHostToDevice) != cudaSuccess;
    free(h);
    return rc;
}
static int put_f32(float *dev, double *h64, size_t n, double (*gen)(size_t, void *), void *ctx) {
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++) { h[i] = (float)gen(i, ctx); h64[i] = h[i]; }
    int rc = cudaMemcpy(dev, h, n * 4, cudaMemcpyHostToDevice) != cudaSuccess;
    free(h);
    return rc;
}
static double gen_normal(size_t i, void *c) { (void)i; return nrand() * *(double *)c; }
static double gen_beta(size_t i, void *c) { (void)i; (void)c; return 0.1 + 0.8 * urand(); }
static double gen_gate(size_t i, void *c) { (void)i; (void)c; double x = nrand(); return -log1p(exp(-x)) / 16.0; }
static double gen_unitrow_K;
static double gen_row_normal(size_t i, void *c) { (void)i; (void)c; return nrand() / sqrt(gen_unitrow_K); }

static int fill_inputs(gbuf *b, uint64_t seed) {
    rs = seed * 0x9E3779B97F4A7C15ull + 1;
    double one = 1.0, tenth = 0.1;
    gen_unitrow_K = b->cfg.K;
    int rc = 0;
    rc |= put_bf16(b->q, b->q64, b->nq, gen_row_normal, NULL);
    rc |= put_bf16(b->k, b->k64, b->nq, gen_row_normal, NULL);
    rc |= put_bf16(b->v, b->v64, b->nv, gen_normal, &one);
    rc |= put_bf16(b->do_, b->do64, b->nv, gen_normal, &one);
    rc |= put_bf16(b->beta, b->b64, b->ng, gen_beta, NULL);
    rc |= put_f32(b->g, b->g64, b->ng, gen_gate, NULL);
    rc |= put_f32(b->h0, b->h064, b->ns, gen_normal, &tenth);
    rc |= put_f32(b->dht, b->dht64, b->ns, gen_normal, &tenth);
    /* cudaMemcpy from pageable memory may return before its DMA lands, and the graph test's stream is non-blocking
     * (no order with the legacy stream those copies run on): without this wait a replay could read the previous
     * inputs in part (sessions 51 and 52: one "replay differs from the direct call" each, under a matrix's six
     * concurrent processes, never alone) */
    rc |= cudaDeviceSynchronize() != cudaSuccess;
    return rc;
}

static rewy_status call_fb(gbuf *b) {
    rewy_fwd_params f;
    memset(&f, 0, sizeof f);
    f.cfg = b->cfg;
    f.q = b->q; f.k = b->k; f.v = b->v; f.g = b->g; f.beta = b->beta; f.h0 = b->h0;
    f.o = b->o; f.ht = b->ht; f.saved = b->saved; f.saved_bytes = b->saved_bytes;
    f.workspace = b->fws; f.workspace_bytes = b->fws_bytes;
    rewy_status s = forced_forward(&f); /* cuda_force.h: the REWY_CUDA_* variant, as the harness runs */
    if (s != REWY_OK) return s;
    rewy_bwd_params p;
    memset(&p, 0, sizeof p);
    p.cfg = b->cfg;
    p.q = b->q; p.k = b->k; p.v = b->v; p.g = b->g; p.beta = b->beta; p.h0 = b->h0;
    p.saved = b->saved; p.saved_bytes = b->saved_bytes;
    p.do_ = b->do_; p.dht = b->dht;
    p.dq = b->dq; p.dk = b->dk; p.dv = b->dv; p.dg = b->dg; p.dbeta = b->dbeta; p.dh0 = b->dh0;
    p.workspace = b->bws; p.workspace_bytes = b->bws_bytes;
    return forced_backward(&p);
}

/* all outputs, concatenated on the host */
static size_t out_bytes(const gbuf *b) { return (b->nv * 2) * 2 + b->nq * 2 * 2 + b->ng * 6 + b->ns * 8; }
static int get_outputs(const gbuf *b, unsigned char *h) {
    struct { const void *p; size_t n; } o[] = {{b->o, b->nv * 2}, {b->dv, b->nv * 2}, {b->dq, b->nq * 2},
        {b->dk, b->nq * 2}, {b->dbeta, b->ng * 2}, {b->dg, b->ng * 4}, {b->ht, b->ns * 4}, {b->dh0, b->ns * 4}};
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
        if (cudaMemcpy(h, o[i].p, o[i].n, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
        h += o[i].n;
    }
    return 0;
}

static double rel_err_bf16(const unsigned char *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t u;
        memcpy(&u, x + 2 * i, 2);
        double d = rewy_bf16_to_f32(u) - ref[i];
        num += d * d; den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static double rel_err_f32(const unsigned char *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, x + 4 * i, 4);
        double d = f - ref[i];
        num += d * d; den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* K = 64 takes the chunk kernels, K = 4 the token recurrence (recurrent.cu), K = V = 128 with one key head a value head
 * the fused reverse pass and the sequence split where forced (REWY_CUDA_REV_WS, REWY_CUDA_SEG) */
static void test_graph(test_counts *tc, int K) {
    static const int lens[5] = {1, 15, 64, 65, 300};
    gbuf b;
    memset(&b, 0, sizeof b);
    int32_t cu_h[6] = {0};
    for (int i = 0; i < 5; i++) cu_h[i + 1] = cu_h[i] + lens[i];
    rewy_config *c = &b.cfg;
    c->op = REWY_OP_GDN; c->backend = REWY_BACKEND_CUDA; c->dtype = REWY_BF16;
    c->B = 1; c->T = cu_h[5]; c->H = 2; c->HV = K == 128 ? 2 : 4; c->K = K; c->V = K == 128 ? 128 : 48; c->chunk_size = 64;
    c->num_seqs = 5; c->cu_seqlens_host = cu_h; c->policy = REWY_POLICY_R; c->bwd_algo = REWY_BWD_REWY;
    cudaStream_t st;
    CHECK(tc, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "graph: stream");
    c->stream = st;
    b.nq = (size_t)c->T * c->H * c->K; b.nv = (size_t)c->T * c->HV * c->V; b.ng = (size_t)c->T * c->HV;
    b.ns = (size_t)5 * c->HV * c->K * c->V;
    cudaMalloc((void **)&b.cu, sizeof cu_h);
    cudaMemcpy(b.cu, cu_h, sizeof cu_h, cudaMemcpyHostToDevice);
    c->cu_seqlens = b.cu;
    void **bf[] = {&b.q, &b.k, &b.dq, &b.dk};
    for (int i = 0; i < 4; i++) cudaMalloc(bf[i], b.nq * 2);
    void **bv[] = {&b.v, &b.o, &b.dv, &b.do_};
    for (int i = 0; i < 4; i++) cudaMalloc(bv[i], b.nv * 2);
    cudaMalloc(&b.beta, b.ng * 2); cudaMalloc(&b.dbeta, b.ng * 2);
    cudaMalloc((void **)&b.g, b.ng * 4); cudaMalloc((void **)&b.dg, b.ng * 4);
    float **bs[] = {&b.h0, &b.ht, &b.dht, &b.dh0};
    for (int i = 0; i < 4; i++) cudaMalloc((void **)bs[i], b.ns * 4);
    forced_sizes(c, &b.saved_bytes, &b.fws_bytes, &b.bws_bytes);
    cudaMalloc(&b.saved, b.saved_bytes); cudaMalloc(&b.fws, b.fws_bytes); cudaMalloc(&b.bws, b.bws_bytes);
    double **h64[] = {&b.q64, &b.k64, &b.v64, &b.do64, &b.g64, &b.b64, &b.h064, &b.dht64};
    size_t h64n[] = {b.nq, b.nq, b.nv, b.nv, b.ng, b.ng, b.ns, b.ns};
    for (int i = 0; i < 8; i++) *h64[i] = malloc(h64n[i] * sizeof(double));
    CHECK(tc, cudaGetLastError() == cudaSuccess, "graph: allocation");

    size_t nb = out_bytes(&b);
    unsigned char *direct = malloc(nb), *replay = malloc(nb), *prev = malloc(nb);
    /* warm-up direct call (also the first use of each kernel: attributes set outside capture) */
    CHECK(tc, fill_inputs(&b, 1) == 0, "graph: fill");
    CHECK(tc, call_fb(&b) == REWY_OK, "graph: direct call");
    cudaStreamSynchronize(st);
    get_outputs(&b, prev);

    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(tc, cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal) == cudaSuccess, "graph: begin capture");
    rewy_status s = call_fb(&b);
    cudaError_t ce = cudaStreamEndCapture(st, &graph);
    CHECK(tc, s == REWY_OK && ce == cudaSuccess, "graph: capture (%s, %s)", rewy_strerror(s), cudaGetErrorString(ce));
    CHECK(tc, cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "graph: instantiate");

    for (uint64_t seed = 2; seed <= 3 && exec; seed++) {
        fill_inputs(&b, seed);
        CHECK(tc, cudaGraphLaunch(exec, st) == cudaSuccess, "graph: launch");
        CHECK(tc, cudaStreamSynchronize(st) == cudaSuccess, "graph: replay");
        get_outputs(&b, replay);
        call_fb(&b);
        cudaStreamSynchronize(st);
        get_outputs(&b, direct);
        CHECK(tc, memcmp(replay, direct, nb) == 0, "graph: replay (seed %d) differs from the direct call", (int)seed);
        CHECK(tc, memcmp(replay, prev, nb) != 0, "graph: replay (seed %d) returned the previous inputs' results", (int)seed);
        memcpy(prev, replay, nb);
        /* oracle on this seed's inputs */
        rewy_ref_problem rp;
        memset(&rp, 0, sizeof rp);
        rp.cfg = *c;
        rp.cfg.cu_seqlens = cu_h;
        rp.cfg.cu_seqlens_host = cu_h;
        rp.q = b.q64; rp.k = b.k64; rp.v = b.v64; rp.g = b.g64; rp.beta = b.b64; rp.h0 = b.h064;
        double *o = malloc(b.nv * 8), *ht = malloc(b.ns * 8), *dq = malloc(b.nq * 8), *dk = malloc(b.nq * 8),
               *dv = malloc(b.nv * 8), *dg = malloc(b.ng * 8), *db = malloc(b.ng * 8), *dh0 = malloc(b.ns * 8);
        int orc = rewy_ref_forward(&rp, o, ht) || rewy_ref_backward(&rp, b.do64, b.dht64, dq, dk, dv, dg, db, NULL, NULL, dh0);
        CHECK(tc, orc == 0, "graph: oracle failed");
        const unsigned char *x = replay;
        double e_o = rel_err_bf16(x, o, b.nv); x += b.nv * 2;
        double e_dv = rel_err_bf16(x, dv, b.nv); x += b.nv * 2;
        double e_dq = rel_err_bf16(x, dq, b.nq); x += b.nq * 2;
        double e_dk = rel_err_bf16(x, dk, b.nq); x += b.nq * 2;
        double e_db = rel_err_bf16(x, db, b.ng); x += b.ng * 2;
        double e_dg = rel_err_f32(x, dg, b.ng); x += b.ng * 4;
        double e_ht = rel_err_f32(x, ht, b.ns); x += b.ns * 4;
        double e_dh0 = rel_err_f32(x, dh0, b.ns);
        printf("  graph replay K = %d seed %d: o %.2e ht %.2e dq %.2e dk %.2e dv %.2e dh0 %.2e dg %.2e dbeta %.2e\n",
               K, (int)seed, e_o, e_ht, e_dq, e_dk, e_dv, e_dh0, e_dg, e_db);
        CHECK(tc, e_o <= 8e-3 && e_ht <= 8e-3 && e_dq <= 8e-3 && e_dk <= 8e-3 && e_dv <= 8e-3 && e_dh0 <= 8e-3 &&
                  e_dg <= 2e-2 && e_db <= 2e-2, "graph: replay (seed %d) fails the oracle", (int)seed);
        free(o); free(ht); free(dq); free(dk); free(dv); free(dg); free(db); free(dh0);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
    free(direct); free(replay); free(prev);
    for (int i = 0; i < 8; i++) free(*h64[i]);
    cudaFree(b.cu); cudaFree(b.q); cudaFree(b.k); cudaFree(b.dq); cudaFree(b.dk); cudaFree(b.v); cudaFree(b.o);
    cudaFree(b.dv); cudaFree(b.do_); cudaFree(b.beta); cudaFree(b.dbeta); cudaFree(b.g); cudaFree(b.dg);
    cudaFree(b.h0); cudaFree(b.ht); cudaFree(b.dht); cudaFree(b.dh0); cudaFree(b.saved); cudaFree(b.fws); cudaFree(b.bws);
    CHECK(tc, cudaDeviceSynchronize() == cudaSuccess, "graph: CUDA error at the end");
}

/* ------------------------------------------------------------------ 3. vector gates (KDA, GDN2)
 * The core case matrix for the vector-gate kernels (src/cuda/vec_*.cu) under both policies and
 * both pullbacks against the fp64 oracle. */
static void vec_matrix(case_list *l, int quick) {
    static const rewy_op ops[2] = {REWY_OP_KDA, REWY_OP_GDN2};
    for (int i = 0; i < 2; i++) {
        if (quick) quick_cases(l, ops[i]);
        else core_cases(l, ops[i]);
    }
    for (int i = 0; i < 2; i++) { /* extreme gates and scale, last so the cases above keep their seeds */
        if (quick) quick_extreme(l, ops[i]);
        else cases_extreme(l, ops[i]);
    }
    for (int i = 0; i < 2; i++) cases_small_k(l, ops[i], quick); /* K < 16: the token recurrence */
    if (!quick)
        for (int i = 0; i < 2; i++) cases_tiny_dg(l, ops[i]);
}

/* every case of the list under both policies (each with both pullbacks: run_case) */
static void run_list(test_counts *tc, const case_list *l) {
    for (int i = 0; i < l->n; i++)
        for (int p = 0; p < 2; p++) {
            rewy_case c = l->c[i];
            c.policy = p ? REWY_POLICY_A : REWY_POLICY_R;
            run_case(tc, c, 1);
        }
}

static void test_vector_gates(test_counts *tc, int quick) {
    static case_list l;
    cases_init(&l, REWY_BACKEND_CUDA, SEED0);
    vec_matrix(&l, quick);
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    run_list(tc, &l);
    timespec_get(&t1, TIME_UTC);
    printf("test_cuda: vector gates, %d cases x 2 policies x {WY, ReWY}, %.1f s\n", l.n,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
}

int main(int argc, char **argv) {
    static case_list l;
    cases_init(&l, REWY_BACKEND_CUDA, SEED0);
    test_counts tc = {0, 0};
    int quick = test_quick() || (argc > 1 && strcmp(argv[1], "--quick") == 0);
    const int v128 = argc > 1 && strcmp(argv[1], "--v128") == 0;
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "test_cuda: no CUDA device\n");
        return 1;
    }
    printf("test_cuda on %s (sm_%d%d), %s matrix\n", prop.name, prop.major, prop.minor,
           v128 ? "V = 128" : quick ? "quick" : "full");
    if (!rewy_has_cuda()) { fprintf(stderr, "test_cuda: library built without CUDA\n"); return 1; }
    if (v128) {
        quick_v128(&l);
        run_list(&tc, &l);
        return test_finish(&tc);
    }
    test_forced_plan(&tc);
    const char *sc = getenv("REWY_TEST_SCALAR");
    const int scalar = !(sc && sc[0] == '0');
    if (!scalar) l.n = 0;
    else if (quick) quick_matrix(&l);
    else full_matrix(&l);
    struct timespec t0, t1;
    timespec_get(&t0, TIME_UTC);
    run_list(&tc, &l);
    timespec_get(&t1, TIME_UTC);
    printf("test_cuda: %d cases x 2 policies x {WY, ReWY}, %.1f s\n", l.n,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    const char *ng = getenv("REWY_TEST_NO_GRAPH");
    if (scalar && !(ng && ng[0] == '1')) {
        test_graph(&tc, 64);
        test_graph(&tc, 4);
        test_graph(&tc, 128);
    }
    test_vector_gates(&tc, quick);
    nan_gate_checks(&tc, REWY_BACKEND_CUDA, device_mem()); /* a NaN gate propagates (cases.h) */
    return test_finish(&tc);
}
