/* kernels.cuh: host-side launchers of the CUDA stages (one .cu per stage, MATH.md names).
 * Every launcher enqueues on `stream` and never synchronizes. dtype selects the element type
 * of q, k, v, β, o, do and the input gradients. */
#ifndef REWY_CUDA_KERNELS_CUH
#define REWY_CUDA_KERNELS_CUH

#include "common.cuh"
#include "recurrent.cuh" /* K < 16: the token recurrence (Plan::recurrent) */

namespace rewy_cuda {

/* chunk_plan.cu: the chunk table (ChunkInfo [NC]) and per-sequence chunk offsets [N+1]. */
cudaError_t launch_chunk_plan(const Prob &p, const int32_t *cu_seqlens, ChunkInfo *ctab, int *coff, cudaStream_t s);

/* kkt_inverse.cu: chunk-local gate cumsum (G, MATH §2), L = 𝓛_<(E Yᵀ), A = (I+L)⁻¹, C_q = 𝓛_≤(Q_g Yᵀ).
 * GB: per chunk and value head, [2][BT] fp32 = G then β (the gather every later stage reads with one
 * 16-B copy). Any output pointer may be NULL (skipped); A NULL also skips L and the inverse. A is written in the saved
 * A's format: fp32, or bf16 where Prob::a16 (the forward chains' A-and-V form reads that copy). */
/* wu (bf16, chunk 64, K = Kp of 64 or 128): also MATH §2's W = A E (bf16, [chunk][hv][BT][K]) and
 *   U = A Z (bf16, [chunk][hv][BT][V], V of 64 or 128; v then required), from the inverse it forms (A asked):
 *     the forward scan's two-product chain (state_scan_uses_wu);
 *   or, with wu.A (the saved A; A not asked), W alone: the reverse scan's W chain (bwd_scan_uses_w), or W and U:
 *     policy R's register chains (chain_scan_bvc). */
struct WuOut {
    __nv_bfloat16 *W = nullptr, *U = nullptr;
    const float *A = nullptr;
    /* with W, U: where the scan runs beside (state_scan_beside_kkt), one flag per chunk and value head, zeroed,
     * set once the chunk's outputs are stored; the grid is then one block per SM, taking the chunks in the order
     * the scans need them: rank within the sequence first where every sequence has seq_nc chunks (else 0) */
    int *ready = nullptr;
    int seq_nc = 0;
};
cudaError_t launch_kkt_inverse(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                               const void *beta, float *GB, float *A, cq_t *Cq, cudaStream_t s,
                               const void *v = nullptr, const WuOut &wu = {});

/* The output's operands when the forward scan computes it (the plan's fuse_output): q, C_q; o written.
 * W, U (kkt_inverse's WuOut, where the plan's scan_wu): the chain reads R = U − W S instead of A (Z − E S). */
struct ScanOut {
    const void *q = nullptr;
    const cq_t *Cq = nullptr;
    void *o = nullptr;
    const __nv_bfloat16 *W = nullptr, *U = nullptr;
    const int *ready = nullptr; /* WuOut's flags: the scan runs beside kkt_inverse and waits on them */
};

/* state_scan.cu: forward chunk scan: store S_c; R = A(Z − E S) (stored); S ← Λ S + Fᵀ R; ht at the end.
 * Sc / R / ht NULL: not stored. vo NULL: scalar gates (E, F from k and GB); else the vector-gate
 * operands (KDA, GDN2). so: also the output O = Q_g S_c + C_q R, where the plan's fuse_output says the
 * scan takes it (else NULL, and output.cu's launch_output follows). The wgmma scan where the plan's scan_wg.
 * The predicates below take make_plan's choices (backend_common.cuh), each reading the choices before it in
 * p.plan (vec: vector gates); the launchers read only p.plan. */
bool state_scan_fuses_output(const Prob &p, rewy_dtype dt, bool vec);
/* Whether a scan that fuses the output (plan.fuse_output) also takes W and U from kkt_inverse (FLA's
 * chain: two products per chunk, not three): w_shape_ok and u_shape_ok */
bool state_scan_uses_wu(const Prob &p, rewy_dtype dt);
/* Whether that scan (with W, U: plan.scan_wu) starts beside kkt_inverse, waiting per chunk on its ready flags
 * instead of its end: small grids (16-column tiles, at most one scan block per SM) on sm_90, where a kkt block
 * fits beside a scan block. kkt_beside_smem: the shared memory of such a kkt block. */
bool state_scan_beside_kkt(const Prob &p);
size_t kkt_beside_smem(const Prob &p);
cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *k, const void *v, const float *GB,
                              const float *A, const VecOps *vo, const float *h0, float *ht, state_t *Sc, rp_t *R,
                              cudaStream_t s, const ScanOut *so = nullptr);

/* state_scan_wg.cu: the same forward scan on Hopper's warpgroup products (wgmma), where state_scan_wg_ok
 * says it applies (bf16, scalar gates, chunk 64, K of 64 or 128, an sm_90a binary; make_plan's Plan::scan_wg);
 * launch_state_scan and launch_scan_pair take it there. */
bool state_scan_wg_ok(const Prob &p, rewy_dtype dt, const void *k, const void *v, bool vec);
/* Whether the loaded binary carries the wgmma scans' sm_90a code for the current device (a driver query:
 * make_plan asks once per call and keeps the answer in Plan::wgmma). */
bool wgmma_binary_ok();
cudaError_t launch_state_scan_wg(const Prob &p, const void *k, const void *v, const float *GB, const float *A,
                                 const float *h0, float *ht, state_t *Sc, rp_t *R, cudaStream_t s);
/* chain_ws.cu: the forward's segment walks (segments.cu's seg_walks; ps: segment_prob's, K = V = 128, the saved bf16
 * A) as its recompute form: each segment's end state into xs (from h0 for the first segment of a sequence, zero for the
 * others) and its map T into t, those seg_combine_fwd reads */
cudaError_t launch_seg_walks(const Prob &ps, int nwin, const void *k, const void *v, const float *GB, const float *A,
                             const float *h0, float *xs, float *t, cudaStream_t s);

/* output.cu: O = Q_g S_c + C_q R per chunk, in parallel (after the scan stored S_c and R).
 * vo NULL: scalar gates (Q_g from q and GB); else Q_g from the vector-gate operands. */
cudaError_t launch_output(const Prob &p, rewy_dtype dt, const void *q, const float *GB, const cq_t *Cq,
                          const state_t *Sc, const rp_t *R, const VecOps *vo, void *o, cudaStream_t s);

/* bwd_state_scan.cu: reverse scan: R̄ = C_qᵀŌ + F S̄⁺, P = AᵀR̄, S̄ = Q_gᵀŌ + ΛS̄⁺ − EᵀP.
 * Stores S̄⁺ per chunk, and P (ReWY) or R̄ (WY) per chunk; dh0 when not NULL.
 * vo NULL: scalar gates (F, Q_g, E from k, q and GB); else the vector-gate operands. */
cudaError_t launch_bwd_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *GB,
                                  const float *A, const cq_t *Cq, const VecOps *vo, const void *do_,
                                  const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy, cudaStream_t s);

/* bwd_state_scan_wg.cu: the same reverse scan on wgmma, where bwd_state_scan_wg_ok says it applies (as
 * state_scan_wg_ok; Plan::bwd_scan_wg); launch_bwd_state_scan and launch_scan_pair take it there. It forms C_q
 * itself (Cq of those launchers is not read then, and the backward skips its recompute). */
bool bwd_state_scan_wg_ok(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *do_, bool vec);
/* Sbar NULL: the reverse walk alone (S̄⁺ and P not stored; PR is not read), its end state to dh0. tout (segments,
 * MATH §11c): a second grid of homogeneous blocks beside it, the same walk from S̄ = I with Ō = 0 (V = K), whose end
 * state, Tᵀ of the walk's chunks, goes to tout in dh0's layout; where *tskip is nonzero (the forward left its maps T)
 * those blocks return at once. */
cudaError_t launch_bwd_state_scan_wg(const Prob &p, const void *q, const void *k, const float *GB, const float *A,
                                     const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                                     cudaStream_t s, float *tout = nullptr, const int *tskip = nullptr);

/* bwd_state_scan.cu: policy R's recompute scan (launch_state_scan with ht NULL) and the reverse scan
 * (launch_bwd_state_scan), in one launch where their tiles allow it, else one after the other. */
/* W (kkt_inverse's, where bwd_scan_uses_w: Plan::bwd_w): the reverse scan runs FLA's dhu chain,
 * S̄ ← Q_gᵀŌ + ΛS̄⁺ − Wᵀ R̄, and stores R̄ in PR whatever wy says (launch_p_from_rbar turns it into P for ReWY). */
bool bwd_scan_uses_w(const Prob &p, rewy_dtype dt, bool vec);
/* pullback_p.cu: P = Aᵀ R̄ (MATH §4b (1)) in place of R̄ in PR, in parallel over the chunks */
cudaError_t launch_p_from_rbar(const Prob &p, const float *A, rp_t *PR, cudaStream_t s);
/* chain_scan.cu: policy R's two chains in register form (FLA's h and dhu chains) on small grids of the bf16
 * scalar-gate fast path: chain_scan_bvc > 0 (the value columns per block; 0: not here). kkt_inverse has written
 * W ([chunk][hv][64][K]) and U over R's region ([chunk][hv][64][V]) from the saved A; the forward half writes
 * S_c and R (in place of U), the reverse half S̄⁺, R̄ (into PR) and dh0. P = Aᵀ R̄ then follows for ReWY. */
int chain_scan_bvc(const Prob &p, rewy_dtype dt, bool vec); /* Plan::chain_bvc */
bool chain_scan_bulk(const Prob &p);                        /* Plan::chain_bulk */
cudaError_t launch_chain_pair(const Prob &p, int bvc, const void *q, const void *k, const float *GB,
                              const __nv_bfloat16 *W, const cq_t *Cq, const float *h0, state_t *Sc, rp_t *R,
                              const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, cudaStream_t s);
/* chain_scan.cu: the forward pass's chain with the output in its steps (the plan's fwd_chain: chain_forward_bvc, 16
 * to 128 value columns per block; 0: not here), after kkt_inverse's G, C_q and A in bf16 (Ab), from the inputs q, k,
 * v: o, ht, and S_c and R where they are given (policy A saves them; NULL: not stored). o must be 16-B aligned (NULL
 * in a size query). */
int chain_forward_bvc(const Prob &p, rewy_dtype dt, bool vec, const void *o); /* Plan::fwd_chain */
cudaError_t launch_chain_forward(const Prob &p, int bvc, const void *q, const void *k, const void *v, const float *GB,
                                 const __nv_bfloat16 *Ab, const cq_t *Cq, const float *h0, float *ht, state_t *Sc,
                                 rp_t *R, void *o, cudaStream_t s);
/* chain_ws.cu: that forward chain as one warp-specialized block of warpgroup products per (sequence, value head, 128
 * value columns) on sm_90a (Plan::fwd_ws, in place of launch_chain_forward): the same inputs and outputs, except that
 * it forms C_q itself from q and k (kkt skips it) and stores it to Cq where given (policy A saves it; NULL: not stored) */
bool chain_forward_ws(const Prob &p, rewy_dtype dt, bool vec, const void *q, const void *k, const void *v,
                      const void *o, int fwd_chain); /* Plan::fwd_ws, given the register chain's width */
/* whether that kernel can take the problem at all (shapes, device, pointers), whatever the plan's rule */
bool chain_forward_ws_fits(const Prob &p, rewy_dtype dt, bool vec, const void *q, const void *k, const void *v,
                           const void *o);
cudaError_t launch_chain_forward_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                                    const __nv_bfloat16 *Ab, cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R,
                                    void *o, cudaStream_t s);
/* chain_ws.cu: policy R's recompute before the fused reverse pass (wherever Plan::rev_ws runs under policy R; its shapes
 * and pointers are that kernel's too) as that kernel's recompute form: S_c and R (NULL: not stored) of every chunk from
 * h0 (of a time window's chunks from its start state, by its slots), with the saved A in fp32 rounded to bf16 in the
 * block (the forward chain's A) and no output */
cudaError_t launch_recompute_ws(const Prob &p, const void *k, const void *v, const float *GB, const float *A,
                                const float *h0, state_t *Sc, rp_t *R, cudaStream_t s);
/* chain_ws.cu: policy R's pair as that kernel's roles (Plan::chain_ws; launch_chain_pair hands over to it where q, k
 * and dO are 16-B aligned): same inputs and outputs as chain_pair_kernel */
bool chain_scan_ws(const Prob &p, rewy_dtype dt, bool vec, int chain_bvc); /* Plan::chain_ws, given chain_scan_bvc */
cudaError_t launch_chain_pair_ws(const Prob &p, const void *q, const void *k, const float *GB, const __nv_bfloat16 *W,
                                 const cq_t *Cq, const float *h0, state_t *Sc, rp_t *R, const void *do_,
                                 const float *dht, float *dh0, state_t *Sbar, rp_t *PR, cudaStream_t s);
cudaError_t launch_scan_pair(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v, const float *GB,
                             const float *A, const cq_t *Cq, const VecOps *vo, const float *h0, state_t *Sc, rp_t *R,
                             const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                             cudaStream_t s, const __nv_bfloat16 *W = nullptr);

/* pullback.cu: per chunk, the local pullback (ReWY: 3 products, or the 7-product WY graph) fused with
 * the output-gradient consumers, Gram elimination for ḡ, the reverse in-chunk cumsum of ḡ and the
 * GVA group sums of q̄, k̄. Wbar: WY scratch [NC*HV][BT][Kp] (used only when !wbar_in_smem);
 * acc: GVA scratch 2×[NC*H][BT][Kp] (used only when HV > H). */
/* pullback_ws.cu: the same pullback (ReWY, scalar gates, K = V = 128) as a warp-specialized block on sm_90a
 * (Plan::pb_ws; launch_pullback hands over to it): the same inputs and outputs */
bool pullback_ws(const Prob &p, rewy_dtype dt, bool vec, bool wy, const void *q, const void *k, const void *v,
                 const void *do_, const void *dq, const void *dk, const void *dv); /* Plan::pb_ws */
/* reverse_ws.cu: the reverse scan and the warp-specialized pullback fused (Plan::rev_ws: G = 1): from S_c and policy
 * A's saved R (under policy R from S_c alone, R formed in the pass, Plan::rev_rf; R unused) to dq, dk, dv, dβ, dg and
 * dh0, with no S̄⁺ or P in HBM. In a time window (Prob::win_len): the window's chunks, S_c and R by its slots, from
 * dht to dh0 (which may be one buffer: a block reads its elements first and writes them last) */
bool reverse_ws(const Prob &p, int win); /* Plan::rev_ws, after pb_ws, bwd_scan_wg and the windows */
cudaError_t launch_reverse_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB, const float *A,
                              const void *do_, const state_t *Sc, const rp_t *R, const float *dht, float *dh0, void *dq,
                              void *dk, void *dv, void *dbeta, const float *graw, float *dg, cudaStream_t s);
/* segments.cu: policy R's sequence split (MATH §11d; Plan::seg). p is the call's problem (its sequences), nwin the
 * segments a sequence, win their chunks; segment x = sequence · nwin + w, its states at (x · HV + hv) · K · V.
 *   seg_offsets: the segments' chunk offsets [N·nwin + 1] (a segment past its sequence's end is empty);
 *   seg_starts:  each segment's start state: h0 (zero without it) for the first, else the forward's checkpoint;
 *   seg_combine: S̄ at each segment's end, from dht (zero without it) at the last and S̄_start = Tᵀ S̄_end + X̄
 *                (K = V = 128), each over the segment's X̄ in xe; Tᵀ from tt, or where *tok is nonzero the forward's
 *                T (saved) read transposed */
cudaError_t launch_seg_offsets(const Prob &p, int win, int nwin, int *sco, cudaStream_t s);
cudaError_t launch_seg_starts(const Prob &p, int nwin, const float *h0, const float *ck, float *start, cudaStream_t s);
cudaError_t launch_seg_combine(const Prob &p, int nwin, const float *dht, const float *tt, const float *t, const int *tok,
                               float *xe, cudaStream_t s);
/* the forward's (MATH §11b; Plan::fwd_seg): each segment's start state over its end state X_w in xs (h0, zero without it,
 * for the first), from X and the maps T of launch_seg_walks, and the checkpoints ck (NULL: none) */
cudaError_t launch_seg_combine_fwd(const Prob &p, int nwin, const float *h0, const float *t, float *xs, float *ck,
                                   cudaStream_t s);
cudaError_t launch_pullback_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                               const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR,
                               float *acc, void *dq, void *dk, void *dv, void *dbeta, const float *graw, float *dg,
                               cudaStream_t s);
cudaError_t launch_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                            const void *beta, const float *GB, const float *A, const void *do_,
                            const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR, int wy,
                            float *Wbar, float *acc, void *dq, void *dk, void *dv, void *dbeta, const float *g,
                            float *dg, cudaStream_t s);

} // namespace rewy_cuda
#endif
