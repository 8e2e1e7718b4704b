/* reverse_ws.cu: the fused reverse pass for scalar gates (DeltaNet, GDN) under ReWY: the reverse chunk scan (MATH §3,
 * §4b (1), §5; bwd_state_scan_wg.cu's chain) and the pullback (MATH §4b, §7; pullback_ws.cu's math, term for term) of
 * each chunk in one warp-specialized block, for bf16, chunk 64, K = V = 128, sm_90a.
 *
 * Why: apart, the reverse scan writes S̄⁺ and P of every chunk (48 KB a chunk and value head) and the pullback reads them
 * back with K, Q and Ō a second time: at GDN (8,2048,32) the two moved 2.6 GB, this kernel 1.45, on a backward that ran
 * near the HBM's rate (docs/PERF.md, sessions 38 and 39). Here S̄ stays in registers and S̄⁺, P stay in shared memory;
 * a chunk's tiles are read once. Under policy R (Plan::rev_rf, the form RF) R is formed here too, from S_c (R = A Y,
 * Y = diag(β)(V − γ ⊙ K S_c): the forward chain's A-and-V form, A in bf16 as there), so that the recompute stores the
 * chunk states alone (FlashQLA's layout) and the segments' workspace holds no R of every chunk. Forming R costs this
 * kernel about 4 % (825 → 855 µs at GDN (8,2048,32), H100, session 48) and saves the recompute R's writes (325 → 243
 * µs): policy R's GPU-bound backward 1.139 → 1.093 ms there, DeltaNet's 0.979 → 0.876, (16,1024,16) 5–9 % faster,
 * (4,4096,16)'s windows 2 % slower (0.974 → 0.993). Policy A's pass loads the R its forward saved.
 *
 * One block per (sequence, value head), walking its chunks from the last: 384 threads, one producer warp and two math
 * warpgroups; one key head per value head (G = 1). Pairs (Plan::rev_pair): where one block a walk would leave half of
 * the SMs idle, two blocks a walk each run the whole chain, S̄ being needed at every chunk, and the pullback of every
 * other chunk (the chunks of iteration parity `half`): a chunk's pullback is about half of its work, so each block does
 * about three quarters of a single block's, on twice the SMs. The other block's chunks release their buffers as the
 * pullback would; only the first block writes dh0 (the same S̄: the walks are identical). Per chunk c the math
 * warpgroups run the chain, then the pullback:
 *   the chain, warpgroup w holding S̄'s value columns 64·w … (all K features: 64 registers a thread):
 *     S̄⁺ → bf16 boxes;   C_q = 𝓛_≤(scale·Q Kᵀ ⊙ e^{G_i−G_j}) (columns 32·w …);   RF: K S_c → Y (its columns, in its R box);
 *     R̄ = diag(f) K S̄⁺ + C_qᵀ Ō  (f_i = e^{G_n−G_i});   P = Aᵀ R̄ (bf16: A as the forward chain's);   dv = β ⊙ P, ⟨P, v⟩ by row;
 *     S̄ ← e^{G_n} S̄⁺ + Q_gᵀ Ō − Eᵀ P  (Q_gᵀ Ō = Qᵀ (scale·e^{G} ⊙ Ō), Eᵀ P = Kᵀ (β e^{G} ⊙ P));   RF: beside it R = A Y;
 *   the pullback, warpgroup w owning the K-wide results' features 64·w … (pullback_ws.cu's header names its terms):
 *     X = D = P Rᵀ (w = 0) or H_q = Ō Rᵀ (w = 1), then the Γ tiles; F = R S̄⁺ᵀ, Bh = P S_cᵀ, Qh = Ō S_cᵀ over V; the
 *     K-side products; k̄, q̄, β̄, Ḡ.
 * X is formed before F, Bh and Qh (not beside them, as in pullback_ws) so that S̄'s 64 registers and the pullback's
 * accumulators fit a thread's 232.
 *
 * Shared memory (one chunk in flight, 227 KB): the two V slabs (columns 64·s …) as pullback_ws lays out a stage: the
 * P box (first Ō_g = scale·e^{G} ⊙ Ō, the operand of Q_gᵀ Ō, then P), Ō, R (RF: first Y), V, S̄⁺ (two boxes: features
 * 0–63, 64–127), S_c (two boxes); K and Q; a scratch of four boxes (R̄ in bf16 by warpgroup, then −β e^{G} ⊙ P by
 * warpgroup, then the Γ tiles); C_q; A in bf16; the gates of chunks it & 1. The producer refills each
 * input once its last reader of the chunk has released it: A after P (RF: after R; a_empty), a slab's Ō,
 * R (not RF), V, S_c after the pullback's V-long products (empty[s]), K, Q and the gates after the K-side products
 * (kq_empty). Copies: tensor copies of the boxes (tma.cuh), A too (the saved A is bf16 here, Prob::a16: the forward
 * chain's own, whose gradient this pass then forms; until session 49 the producer rounded a bulk copy of an fp32 A), the
 * gates by a bulk copy; a sequence's tail chunk's token rows (K, Q, Ō, V, R) by the producer lanes' zero-filling
 * cp.async. Outputs: dv, k̄ and q̄
 * of a full chunk by tensor stores from boxes staged over the warpgroup's V box and S̄⁺ boxes (each drained before the
 * box is released or written again), a tail chunk's by per-thread stores; dβ, dg and dh0 by per-thread stores. */
#include "kernels.cuh"
#include "ws.cuh"

namespace rewy_cuda {

struct RvLayout : WsSlab {
    static constexpr int SLAB = BYTES; /* the two slabs (ws.cuh's), then: */
    static constexpr int oK = 2 * SLAB, oQ = oK + 2 * B;   /* [64 tokens][128 features], two boxes */
    static constexpr int oX = oQ + 2 * B;                  /* scratch: R̄ (bf16, a box a warpgroup), P', Γ, Γ_β, Γ_H' */
    static constexpr int oCq = oX + 4 * B;                 /* C_q [i][j], one box */
    static constexpr int oAb = oCq + B; /* A in bf16, [i][j], one box: K-major the A of R = A Y (RF), MN-major Aᵀ of Aᵀ R̄ */
    static constexpr int oGB = oAb + B;                    /* the gates of chunks it & 1: G, then β */
    static constexpr int oRed = oGB + 2 * GB_BYTES; /* β̄, Ḡ row terms [2][64] each, ⟨P, v⟩ [2][64], sums [16] */
    static constexpr int oMB = oRed + (6 * MAXBT + 16) * 4; /* full[2], empty[2], kq full, kq empty, a full, a empty, a copy */
    static constexpr int TOTAL = oMB + 9 * 8;
    /* a slab's copies, Ō, V, S_c ×2 and (not RF) R; of which token rows (a tail's) */
    static constexpr unsigned slab_tma(bool rf) { return rf ? 4 * B : 5 * B; }
    static constexpr unsigned slab_rows(bool rf) { return rf ? 2 * B : 3 * B; }
};
static_assert(RvLayout::TOTAL <= 227 * 1024, "reverse_ws: a Hopper block's shared memory");

/* the maps: k, q [token][H·K]; v, o (dO) [token][HV·V]; r (R, not RF) [chunk·HV·64][V]; sc (S_c) [chunk·HV·K][V] */
struct RvMaps {
    CUtensorMap k, q, v, o, r, sc, a, dk, dq, dv; /* a: the saved A (bf16, Prob::a16); dk, dq [token][H·K], dv [token][HV·V]:
                                                   * the staged stores (`stage`) */
};

/* The bracket of R = A Y for this thread's elements (MATH §2, the forward chain's A-and-V form): Y = diag(β)(V − γ ⊙ K S_c),
 * γ_i = e^{G_i}, from y = K S_c, into the warpgroup's R box (bf16, [token][column]); rows ≥ n zero (A is zero there, and
 * a zero row keeps a stray value out of the product). Vs: the warpgroup's V box. */
__device__ __forceinline__ void rv_bracket(const Prob &p, const float (&y)[32], __nv_bfloat16 *Rb, const __nv_bfloat16 *Vs,
                                           const float *Gs, const float *bs, int n, int i0) {
    using T2 = __nv_bfloat162;
    float c0 = 0.f, c1 = 0.f, b0 = 0.f, b1 = 0.f; /* γ and β of rows i0, i0 + 8 (0 past the chunk's rows) */
    if (i0 < n) c0 = gexp(p, Gs[i0]), b0 = bs[i0];
    if (i0 + 8 < n) c1 = gexp(p, Gs[i0 + 8]), b1 = bs[i0 + 8];
    T2 vv[16]; /* V at this thread's places */
    wg_box_load(vv, Vs);
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const bool hi = e & 2;
        const float g = hi ? c1 : c0, b = hi ? b1 : b0;
        const float2 v = __bfloat1622float2(vv[e / 2]);
        vv[e / 2] = __floats2bfloat162_rn(b * (v.x - g * y[e]), b * (v.y - g * y[e + 1]));
    }
    wg_box_store(Rb, vv);
}

/* RF: R formed here from S_c (policy R, Plan::rev_rf), else loaded from R (policy A's saved) */
template <bool RF>
__global__ void __launch_bounds__(WS_NT, 1)
reverse_ws_kernel(Prob p, const __grid_constant__ RvMaps m, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                  const __nv_bfloat16 *v, const float *GB, const float *A, const __nv_bfloat16 *do_, const rp_t *R,
                  const float *dht, float *dh0, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                  __nv_bfloat16 *dbeta, const float *graw, float *dg, int stage) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using T2 = __nv_bfloat162;
    using L = RvLayout;
    constexpr int KD = 128, BAR = 1; /* BAR: both math warpgroups; 2 + w: warpgroup w alone */
    extern __shared__ __align__(1024) char smc[];
    const int tid = threadIdx.x;
    const unsigned mb = smem_u32(smc + L::oMB);
    const unsigned full0 = mb, empty0 = mb + 16, kq_full = mb + 32, kq_empty = mb + 40, a_full = mb + 48,
                   a_empty = mb + 56, a_copy = mb + 64; /* full[s]: full0 + 8·s … */
    auto slab = [&](int s) { return smc + s * L::SLAB; };
    auto gates = [&](int it) { return reinterpret_cast<float *>(smc + L::oGB + (it & 1) * GB_BYTES); };
    __nv_bfloat16 *const Abs = reinterpret_cast<__nv_bfloat16 *>(smc + L::oAb);
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;

    const int np = p.plan.rev_pair ? 2 : 1, half = blockIdx.x % np, bx = blockIdx.x / np; /* pairs: blocks 2·walk, + 1 */
    const int sq = bx / p.HV, hv = bx % p.HV, h = hv; /* G = 1 */
    int c_begin, c_end; /* the sequence's chunks, or its part in the time window (Prob::win_lo, win_hi) */
    seq_chunks(p, sq, c_begin, c_end);
    const int c_last = c_end - 1;
    ws_mbar_init(mb, {32, 32, WS_MATH, WS_MATH, 32, WS_MATH, 32, WS_MATH, 1}); /* full[2], empty[2], kq, a: full, empty; a copy */

    if (tid >= WS_MATH) {
        if (!ws_producer_copies()) return;
        /* ---- the producer warp, in the order the math releases the chunk before: A (its bulk copy), the slabs, K and Q;
         * then A's rounding (its copy's latency behind the tensor copies' issue; P, its first reader, is mid-chain) */
        const int lane = tid & 31;
        for (int c = c_last, it = 0; c >= c_begin; c--, it++) {
            const ChunkInfo ci = p.ctab[c];
            const bool tail = ci.n < MAXBT;
            ChunkInfo wi = ci; /* R's rows (not RF): from its own first row */
            wi.tok0 = 0;
            /* (chunk, value head): xa in the saved A, x in the workspace's S_c and R (a time window's slot) */
            const int xa = c * p.HV + hv, x = chunk_slot(p, c, ci) * p.HV + hv;
            if (it > 0) mbar_wait(a_empty, (it - 1) & 1);
            if (lane == 0) { /* the saved bf16 A, one box straight into A's */
                bulk_fence(); /* the math warps' reads of A's box (released on a_empty) before the copy's writes */
                mbar_expect(a_copy, TMA_BOX);
                tma_tile<64>(smem_u32(Abs), &m.a, 0, xa * MAXBT, a_copy);
            }
#pragma unroll 1
            for (int s = 0; s < 2; s++) {
                char *const st = slab(s);
                const unsigned f = full0 + 8 * s;
                if (it > 0) mbar_wait(empty0 + 8 * s, (it - 1) & 1);
                if (tail) {
                    ws_copy_tail<64, 32>(st + L::oO, do_, rsv, (size_t)hv * p.V + 64 * s, ci, lane);
                    if constexpr (!RF) ws_copy_tail<64, 32>(st + L::oR, R + (size_t)x * MAXBT * p.V, p.V, 64 * s, wi, lane);
                    ws_copy_tail<64, 32>(st + L::oV, v, rsv, (size_t)hv * p.V + 64 * s, ci, lane);
                    ws_rows_done();
                }
                if (lane != 0) mbar_arrive(f);
                else {
                    const unsigned sa = smem_u32(st);
                    bulk_fence(); /* the math warps' reads of this slab (released on empty[s]) before these writes */
                    mbar_expect(f, tail ? L::slab_tma(RF) - L::slab_rows(RF) : L::slab_tma(RF));
                    if (!tail) {
                        tma_box(sa + L::oO, &m.o, hv * p.V + 64 * s, ci.tok0, f);
                        if constexpr (!RF) tma_box(sa + L::oR, &m.r, 64 * s, x * MAXBT, f);
                        tma_box(sa + L::oV, &m.v, hv * p.V + 64 * s, ci.tok0, f);
                    }
#pragma unroll
                    for (int fb = 0; fb < 2; fb++) tma_box(sa + L::oSc + fb * L::B, &m.sc, 64 * s, x * KD + 64 * fb, f);
                }
            }
            if (it > 0) mbar_wait(kq_empty, (it - 1) & 1);
            if (tail) {
                ws_copy_tail<KD, 32>(smc + L::oK, k, rsk, (size_t)h * p.K, ci, lane);
                ws_copy_tail<KD, 32>(smc + L::oQ, q, rsk, (size_t)h * p.K, ci, lane);
                ws_rows_done();
            }
            if (lane != 0) mbar_arrive(kq_full);
            else {
                bulk_fence();
                mbar_expect(kq_full, (tail ? 0u : 4u * L::B) + GB_BYTES);
                if (!tail) {
                    tma_tile<KD>(smem_u32(smc + L::oK), &m.k, h * KD, ci.tok0, kq_full);
                    tma_tile<KD>(smem_u32(smc + L::oQ), &m.q, h * KD, ci.tok0, kq_full);
                }
                bulk_g2s(smem_u32(gates(it)), GB + ((size_t)c * p.HV + hv) * 2 * MAXBT, GB_BYTES, kq_full);
                /* the next chunk's tiles into L2 (full: only a sequence's last chunk is partial): its copies above are
                 * issued only when this chunk's readers release the buffers, near its end, and the next chunk's chain
                 * starts by waiting on them */
                if (c > c_begin) {
                    const int t1 = p.ctab[c - 1].tok0, x1 = x - p.HV, xa1 = xa - p.HV; /* (a window's slots run on too) */
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        tma_prefetch_box(&m.k, h * KD + 64 * j, t1);
                        tma_prefetch_box(&m.q, h * KD + 64 * j, t1);
                        tma_prefetch_box(&m.o, hv * p.V + 64 * j, t1);
                        tma_prefetch_box(&m.v, hv * p.V + 64 * j, t1);
                        if constexpr (!RF) tma_prefetch_box(&m.r, 64 * j, x1 * MAXBT);
                        tma_prefetch_box(&m.sc, 64 * j, x1 * KD);
                        tma_prefetch_box(&m.sc, 64 * j, x1 * KD + 64);
                    }
                    tma_prefetch_box(&m.a, 0, xa1 * MAXBT);
                    bulk_prefetch_l2(GB + (size_t)xa1 * 2 * MAXBT, GB_BYTES);
                }
            }
            mbar_wait(a_copy, it & 1);
            ws_rows_done();
            mbar_arrive(a_full);
        }
        return;
    }

    /* ---- the math warpgroups */
    ws_math_regs();
    const int w = tid >> 7, wt = tid & 127, lane = tid & 31, wbar = 2 + w;
    char *const my = slab(w); /* this warpgroup's value columns in the chain */
    T *const Gm = reinterpret_cast<T *>(smc + L::oX), *const Gb = Gm + 64 * 64, *const Hm = Gb + 64 * 64;
    T *const Cs = reinterpret_cast<T *>(smc + L::oCq);
    T *const Rs = reinterpret_cast<T *>(smc + L::oX + w * 2 * L::B);         /* this warpgroup's R̄ (bf16) */
    T *const Pq = reinterpret_cast<T *>(smc + L::oX + w * 2 * L::B);         /* then its P' = −β e^{G} ⊙ P */
    T *const Pw = reinterpret_cast<T *>(my + L::oP);                         /* Ō_g, then P, of its columns */
    const T *const Ks = reinterpret_cast<const T *>(smc + L::oK), *const Qs = reinterpret_cast<const T *>(smc + L::oQ);
    float *const rowb = reinterpret_cast<float *>(smc + L::oRed); /* [2][64] β̄ row terms by warpgroup */
    float *const rowg = rowb + 2 * MAXBT;                          /* [2][64] Ḡ row terms */
    float *const rowp = rowg + 2 * MAXBT;                          /* [2][64] ⟨P, v⟩ by warpgroup */
    float *const red = rowp + 2 * MAXBT;                           /* [16] block sums */
    const int i0 = wg_row(0), f0 = 64 * w; /* this thread's rows i0, i0 + 8; this warpgroup's features (pullback) */
    const float sc = p.scale;
    const bool gated = p.gated && dg;

    /* S̄: feature 64·fb + wg_row(e), value column 64·w + wg_col(e); from dht */
    float s[2][32];
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    wg_state_load(s, dht, p, sbase, 64 * w);

    /* operand tiles: K, Q K-major (A of K S̄⁺ and Q Kᵀ; B of Q Kᵀ from row 32·w: this warpgroup's C_q columns) and
     * MN-major by feature box (A of Kᵀ P', Q_gᵀ Ō; B of the K-side products) */
    const uint32_t klo = wg_lo<OpSk::LBO>(Ks), qlo = wg_lo<OpSk::LBO>(Qs), kjlo = klo + ((32 * w * 128) >> 4);
    const uint32_t ktlo0 = wg_lo<OpSt::LBO>(Ks), ktlo1 = wg_lo<OpSt::LBO>(smc + L::oK + L::B);
    const uint32_t qtlo0 = wg_lo<OpSt::LBO>(Qs), qtlo1 = wg_lo<OpSt::LBO>(smc + L::oQ + L::B);
    const uint32_t kxlo = w ? ktlo1 : ktlo0, qxlo = w ? qtlo1 : qtlo0;
    const uint32_t sbtlo = wg_lo<OpSt::LBO>(my + L::oSb), cqtlo = wg_lo<OpSt::LBO>(Cs);
    const uint32_t otlo = wg_lo<OpSt::LBO>(my + L::oO), pwtlo = wg_lo<OpSt::LBO>(Pw), pqtlo = wg_lo<OpSt::LBO>(Pq);
    const uint32_t attlo = wg_lo<OpSt::LBO>(Abs), rtlo = wg_lo<OpSt::LBO>(Rs); /* Aᵀ and R̄ of Aᵀ R̄, both MN-major */
    /* RF: A in bf16 (K-major) and Y, then R, in this warpgroup's R box (MN-major: k = token); S_c's boxes as B of K S_c */
    const uint32_t ablo = wg_lo<OpSk::LBO>(smc + L::oAb), yrlo = wg_lo<OpSt::LBO>(my + L::oR);
    const uint32_t sctlo = wg_lo<OpSt::LBO>(my + L::oSc);

    ChunkInfo cn = c_last >= c_begin ? p.ctab[c_last] : ChunkInfo{};
    for (int c = c_last, it = 0; c >= c_begin; c--, it++) {
        const ChunkInfo ci = cn;
        if (c > c_begin) cn = p.ctab[c - 1]; /* the next chunk's, a chunk ahead: at the chunk's start its latency stalled */
        const int n = ci.n, tok0 = ci.tok0;
        const bool own = np == 1 || (it & 1) == half; /* this block writes the chunk's gradients (pairs: every other) */
        /* a full chunk's dv, k̄, q̄ leave by tensor stores from boxes staged in this warpgroup's V box and S̄⁺ boxes (its
         * per-thread 4-byte stores held the registers behind them); a tail chunk's (whose box would reach the next
         * sequence's rows) by per-thread stores */
        const bool stg = stage && n == MAXBT;
        const float *const Gs = gates(it), *const bs = Gs + MAXBT;
        float gr0 = 0.f, gr1 = 0.f; /* the raw gates of rows 2·lane, 2·lane + 1 for the suffix sum, loaded early */
        const size_t th = (size_t)(tok0 + 2 * lane) * p.HV + hv;
        if (gated) { /* by every math warp: see the chunk's end */
            gr0 = 2 * lane < n ? graw[th] : 0.f;
            gr1 = 2 * lane + 1 < n ? graw[th + p.HV] : 0.f;
        }

        /* ==== the chain ==== */
        mbar_wait(kq_full, it & 1);
        __syncwarp(); /* converged before the products (else ptxas serializes every wgmma of the kernel) */
        /* the last chunk's tensor stores of k̄, q̄ have read the S̄⁺ boxes written below */
        if (wt == 0) tma_store_drain();
        ws_sync(wbar, 128);
        /* C_q's columns 32·w … (issued first: S̄⁺'s bf16 copy is written beside it); RF: with it K S_c, the start of
         * this chunk's R = A Y (MATH §2) for this warpgroup's columns */
        float cq[16], y[32];
        if constexpr (RF) {
            mbar_wait(full0 + 8 * w, it & 1); /* this warpgroup's slab: Ō, V, S_c */
            __syncwarp();
        }
        wg_arrive();
        ws_mma<OpSk, OpSk, KD, 32>(cq, qlo, kjlo, false);
        if constexpr (RF) ws_mma<OpSk, OpSt, KD>(y, klo, sctlo, false);
        wg_commit();
#pragma unroll
        for (int fb = 0; fb < 2; fb++) {
            T2 v[16];
            wg_pack(v, s[fb]);
            wg_box_store(my + L::oSb + fb * L::B, v);
        }
        wg_wait();
        {
            T2 v[8]; /* C_q at this warpgroup's columns 32·w … */
            ws_masked_decay<16>(p, Gs, n, 32 * w, 0, [&](int e, bool k0, float d0, bool k1, float d1) {
                v[e / 2] = __floats2bfloat162_rn(k0 ? sc * cq[e] * d0 : 0.f, k1 ? sc * cq[e + 1] * d1 : 0.f);
            });
            wg_box_store<4>(Cs, v, 4 * w); /* this warpgroup's columns 32·w … */
        }
        if constexpr (RF)
            rv_bracket(p, y, reinterpret_cast<T *>(my + L::oR), reinterpret_cast<const T *>(my + L::oV), Gs, bs, n, i0);
        wg_proxy_fence();
        ws_sync(BAR, WS_MATH); /* S̄⁺'s copy, C_q (RF: and Y) are in */
        /* R̄ = diag(f) (K S̄⁺) + C_qᵀ Ō */
        float r[32];
        if constexpr (!RF) {
            mbar_wait(full0 + 8 * w, it & 1); /* this warpgroup's slab: Ō (and R, V, S_c) */
            __syncwarp();
        }
        wg_arrive();
        ws_mma<OpSk, OpSt, KD>(r, klo, sbtlo, false);
        wg_commit();
        wg_wait();
        const float gl = Gs[n - 1], gn = gexp(p, gl);
        {
            const float e0 = i0 < n ? gexp(p, gl - Gs[i0]) : 0.f, e1 = i0 + 8 < n ? gexp(p, gl - Gs[i0 + 8]) : 0.f;
#pragma unroll
            for (int e = 0; e < 32; e++) r[e] *= e & 2 ? e1 : e0;
        }
        wg_arrive();
        ws_mma<OpSt, OpSt, MAXBT>(r, cqtlo, otlo, true);
        wg_commit();
#pragma unroll
        for (int fb = 0; fb < 2; fb++)
#pragma unroll
            for (int e = 0; e < 32; e++) s[fb][e] *= gn;
        wg_wait();
        /* R̄ in bf16 (B of Aᵀ R̄); Ō_g = scale·e^{G} ⊙ Ō into the P box (element pairs of the box: row = offset / 64) */
        {
            T2 v[16];
            wg_pack(v, r);
            wg_box_store(Rs, v);
        }
        {
            const T *const Os = reinterpret_cast<const T *>(my + L::oO);
            T2 ov[16];
#pragma unroll
            for (int y = 0; y < 16; y++) ov[y] = *reinterpret_cast<const T2 *>(Os + 2 * (wt + 128 * y));
#pragma unroll
            for (int y = 0; y < 16; y++) {
                const int o2 = 2 * (wt + 128 * y);
                const float g = sc * gexp(p, Gs[o2 >> 6]);
                const float2 f = __bfloat1622float2(ov[y]);
                *reinterpret_cast<T2 *>(Pw + o2) = __floats2bfloat162_rn(g * f.x, g * f.y);
            }
        }
        wg_proxy_fence();
        ws_sync(wbar, 128); /* R̄ and Ō_g are in (this warpgroup's own) */
        /* S̄ += Q_gᵀ Ō (issued first: it runs with Aᵀ R̄);  P = Aᵀ R̄ */
        mbar_wait(a_full, it & 1);
        __syncwarp();
        wg_arrive();
        ws_mma<OpSt, OpSt, MAXBT>(s[0], qtlo0, pwtlo, true);
        ws_mma<OpSt, OpSt, MAXBT>(s[1], qtlo1, pwtlo, true);
        wg_commit();
        float pp[32];
        wg_arrive();
        ws_mma<OpSt, OpSt, MAXBT>(pp, attlo, rtlo, false);
        wg_commit();
        wg_wait();
        if constexpr (!RF) mbar_arrive(a_empty); /* this thread's reads of Aᵀ are done */
        /* dv = β ⊙ P and ⟨P, v⟩ by row, from the registers (V read before the stores) */
        {
            const T *const Vs = reinterpret_cast<const T *>(my + L::oV);
            T2 vv[16];
            wg_box_load(vv, Vs);
            const float b0 = bs[i0], b1 = bs[i0 + 8];
            float pv[2] = {0.f, 0.f};
#pragma unroll
            for (int e = 0; e < 32; e += 2) { /* dv over V's registers (one branch on stg below, not one an element) */
                const int hi = (e >> 1) & 1;
                const float2 vf = __bfloat1622float2(vv[e / 2]);
                pv[hi] += pp[e] * vf.x + pp[e + 1] * vf.y;
                const float bb = hi ? b1 : b0;
                vv[e / 2] = __floats2bfloat162_rn(bb * pp[e], bb * pp[e + 1]);
            }
            if (own) { /* (pairs: the chunk's dv is this block's) */
                if (stg) { /* dv staged over V (this warpgroup its only reader, done above) */
                    wg_box_store(my + L::oV, vv);
                    wg_proxy_fence();
                } else {
#pragma unroll
                    for (int e = 0; e < 32; e += 2)
                        if (wg_row(e) < n)
                            *reinterpret_cast<T2 *>(dv + (size_t)(tok0 + wg_row(e)) * rsv + (size_t)hv * p.V + 64 * w +
                                                    wg_col(e)) = vv[e / 2];
                }
            }
            pv[0] = sum4(pv[0]);
            pv[1] = sum4(pv[1]);
            if ((lane & 3) == 0) {
                rowp[w * MAXBT + i0] = pv[0];
                rowp[w * MAXBT + i0 + 8] = pv[1];
            }
        }
        ws_sync(wbar, 128); /* every warp of this warpgroup is done with R̄ and Ō_g; dv's box is in */
        if (own && stg && wt == 0) {
            tma_store_box(&m.dv, hv * p.V + 64 * w, tok0, smem_u32(my + L::oV));
            tma_store_commit();
        }
        /* P' = −β e^{G} ⊙ P (B of Kᵀ P'), over R̄; P in bf16 over Ō_g (the pullback's) */
        {
            const float y0 = -bs[i0] * gexp(p, Gs[i0]), y1 = -bs[i0 + 8] * gexp(p, Gs[i0 + 8]);
            T2 v[16];
            wg_pack(v, pp);
            wg_box_store(Pw, v);
            wg_pack(v, pp, y0, y1);
            wg_box_store(Pq, v);
        }
        wg_proxy_fence();
        ws_sync(wbar, 128);
        /* S̄ += Kᵀ P';  RF: R = A Y beside it (A in bf16, as the forward chain's), off the chain: its registers are free
         * here */
        wg_arrive();
        ws_mma<OpSt, OpSt, MAXBT>(s[0], ktlo0, pqtlo, true);
        ws_mma<OpSt, OpSt, MAXBT>(s[1], ktlo1, pqtlo, true);
        if constexpr (RF) ws_mma<OpSk, OpSt, MAXBT>(y, ablo, yrlo, false);
        wg_commit();
        wg_wait();
        if constexpr (RF) {
            mbar_arrive(a_empty); /* this thread's reads of Aᵀ and A are done */
            ws_sync(wbar, 128);   /* and every warp's reads of Y: R goes over it */
            T2 v[16];
            wg_pack(v, y);
            wg_box_store(my + L::oR, v);
            wg_proxy_fence();
        }
        ws_sync(BAR, WS_MATH); /* P, R (RF) and S̄⁺ of both slabs are in; every read of P' is done (the Γ tiles go over it) */
        if (!own) { /* the pair's other block takes this chunk's pullback: the slabs, K and Q released as it would (every
                     * read of them, and of C_q and the scratch, is behind the barrier above) */
            mbar_wait(full0 + 8 * (1 - w), it & 1);
            mbar_arrive(empty0);
            mbar_arrive(empty0 + 8);
            mbar_arrive(kq_empty);
            continue;
        }

        /* ==== the pullback: warpgroup w owns the features f0 … f0 + 63 ==== */
        mbar_wait(full0 + 8 * (1 - w), it & 1);
        __syncwarp();
        /* X = D = P Rᵀ or H_q = Ō Rᵀ over V, then the Γ tiles */
        {
            float X[32];
            wg_arrive();
#pragma unroll
            for (int sl = 0; sl < 2; sl++) {
                const char *const st = slab(sl);
                ws_mma<OpSk, OpSk, 64>(X, wg_lo<OpSk::LBO>(st + (w ? L::oO : L::oP)), wg_lo<OpSk::LBO>(st + L::oR), sl > 0);
            }
            wg_commit();
            wg_wait();
            ws_gamma_tiles(p, X, Gs, bs, n, w, i0, Gm, Gb, Hm); /* Γ, Γ_β (w = 0) or Γ_H' (w = 1) */
        }
        /* F = R S̄⁺ᵀ, Bh = P S_cᵀ, Qh = Ō S_cᵀ over V; ⟨S̄⁺, S_c⟩ beside */
        float F[32], Bh[32], Qh[32];
        float lam = 0.f;
        wg_arrive();
#pragma unroll
        for (int sl = 0; sl < 2; sl++) {
            const char *const st = slab(sl);
            const uint32_t rlo_s = wg_lo<OpSk::LBO>(st + L::oR), plo_s = wg_lo<OpSk::LBO>(st + L::oP);
            const uint32_t olo_s = wg_lo<OpSk::LBO>(st + L::oO);
            const uint32_t sblo = wg_lo<OpSk::LBO>(st + L::oSb + w * L::B), sclo = wg_lo<OpSk::LBO>(st + L::oSc + w * L::B);
            ws_mma<OpSk, OpSk, 64>(F, rlo_s, sblo, sl > 0);
            ws_mma<OpSk, OpSk, 64>(Bh, plo_s, sclo, sl > 0);
            ws_mma<OpSk, OpSk, 64>(Qh, olo_s, sclo, sl > 0);
        }
        wg_commit();
        if (gated)
#pragma unroll
            for (int sl = 0; sl < 2; sl++)
                lam += ws_slab_dot<WS_MATH>(reinterpret_cast<const T *>(slab(sl) + L::oSb), reinterpret_cast<const T *>(slab(sl) + L::oSc), tid);
        wg_wait();
        if (wt == 0) tma_store_drain(); /* dv's tensor store has read the V box */
        /* this thread is done with both slabs' Ō, R, V, S_c (RF's R: the next chunk's chain rewrites it after block_sum2's
         * barrier) */
        mbar_arrive(empty0);
        mbar_arrive(empty0 + 8);
        ws_scale_rows(p, F, Bh, Qh, Gs, n, i0);
        ws_sync(BAR, WS_MATH); /* every Γ tile is in */
        const float endp = gated ? ws_endpoint(F, Ks, f0) : 0.f;
        ws_kside(Bh, F, Qh, Gm, Gb, Hm, kxlo, qxlo); /* the K-side products */
        /* k̄ = β B̂ + Ŷ, q̄ = Q̂ and the row terms of β̄, Ḡ */
        const float b0 = bs[i0], b1 = bs[i0 + 8];
        float sb[2] = {0.f, 0.f}, sg[2] = {0.f, 0.f};
        T2 kr[16], qr[16]; /* K and Q at this thread's places, read before the stores below */
        ws_kq_frags(kr, qr, Ks, Qs, w, gated);
        mbar_arrive(kq_empty); /* this thread's last reads of K, Q (and the gates it reads after are the other buffer's
                                * next: the producer refills this one only after the next chunk's kq_empty) */
#pragma unroll
        for (int e = 0; e < 32; e += 2) { /* the row terms, and k̄ over B̂ (Ŷ and K, Q are then dead) */
            const int hi = (e >> 1) & 1;
            const float bb = hi ? b1 : b0;
            const float2 kk = __bfloat1622float2(kr[e / 2]);
            const float dk0 = bb * Bh[e] + F[e], dk1 = bb * Bh[e + 1] + F[e + 1];
            sb[hi] += kk.x * Bh[e] + kk.y * Bh[e + 1];
            if (gated) {
                const float2 qq = __bfloat1622float2(qr[e / 2]);
                sg[hi] += kk.x * (bb * Bh[e] - F[e]) + kk.y * (bb * Bh[e + 1] - F[e + 1]) + qq.x * Qh[e] + qq.y * Qh[e + 1];
            }
            Bh[e] = dk0, Bh[e + 1] = dk1;
        }
        T *const Dk = reinterpret_cast<T *>(my + L::oSb), *const Dq = Dk + 64 * 64; /* the staging boxes */
        if (stg) { /* over this warpgroup's S̄⁺ boxes: every read of them ended before the Γ barrier */
            wg_pack(kr, Bh);
            wg_box_store(Dk, kr);
            wg_pack(kr, Qh);
            wg_box_store(Dq, kr);
        } else {
#pragma unroll
            for (int e = 0; e < 32; e += 2) {
                const int i = wg_row(e);
                if (i >= n) continue;
                const size_t o = ((size_t)(tok0 + i) * p.H + h) * p.K + f0 + wg_col(e);
                *reinterpret_cast<T2 *>(dk + o) = __floats2bfloat162_rn(Bh[e], Bh[e + 1]);
                *reinterpret_cast<T2 *>(dq + o) = __floats2bfloat162_rn(Qh[e], Qh[e + 1]);
            }
        }
        if (stg) {
            wg_proxy_fence();
            ws_sync(wbar, 128);
            if (wt == 0) {
                tma_store_box(&m.dk, h * KD + 64 * w, tok0, smem_u32(Dk));
                tma_store_box(&m.dq, h * KD + 64 * w, tok0, smem_u32(Dq));
                tma_store_commit();
            }
        }
#pragma unroll
        for (int z = 0; z < 2; z++) {
            sb[z] = sum4(sb[z]);
            sg[z] = sum4(sg[z]);
        }
        if ((lane & 3) == 0) {
            rowb[w * MAXBT + i0] = sb[0];
            rowb[w * MAXBT + i0 + 8] = sb[1];
            rowg[w * MAXBT + i0] = sg[0];
            rowg[w * MAXBT + i0 + 8] = sg[1];
        }
        /* (meets the math warps: the row terms are in; the chunk's first barrier is between the last chunk's reads of
         * red and these writes) */
        const float2 sums = block_sum2<WS_MATH / 32, false>(lam, endp, red, [] { ws_sync(BAR, WS_MATH); });
        /* dβ, and dg_i = Ḡ_n's state term + Σ_{m ≥ i} (row terms), a suffix scan (pullback_ws.cu's), lane l at rows 2l,
         * 2l + 1: every math warp computes it and the first stores it (a path of the first warp alone, with S̄'s
         * accumulators live across it, made ptxas serialize every wgmma of the kernel). The next chunk's first barrier
         * is where every warp's reads of these row terms and sums are behind everyone. */
        {
            const int i = 2 * lane;
            const bool st0 = tid < 32 && i < n, st1 = tid < 32 && i + 1 < n;
            if (dbeta) {
                const float x0 = rowp[i] + rowp[MAXBT + i] + rowb[i] + rowb[MAXBT + i];
                const float x1 = rowp[i + 1] + rowp[MAXBT + i + 1] + rowb[i + 1] + rowb[MAXBT + i + 1];
                if (st0) st<T>(dbeta + th, x0);
                if (st1) st<T>(dbeta + th + p.HV, x1);
            }
            if (gated) {
                const float a = i < n ? rowg[i] + rowg[MAXBT + i] : 0.f, a2 = i + 1 < n ? rowg[i + 1] + rowg[MAXBT + i + 1] : 0.f;
                const float2 d = ws_gate_grads(a, a2, sums, Gs[n - 1], gr0, gr1, p.zero_h0 && ci.idx == 0 && i == 0);
                if (st0) dg[th] = d.x;
                if (st1) dg[th + p.HV] = d.y;
            }
        }
    }
    if (wt == 0) tma_store_drain(); /* the block's shared memory outlives its tensor stores' reads */
    if (dh0 && half == 0) wg_state_save(s, dh0, p, sbase, 64 * w);
#else
    (void)p, (void)m, (void)q, (void)k, (void)v, (void)GB, (void)A, (void)do_, (void)R, (void)dht, (void)dh0, (void)dq,
        (void)dk, (void)dv, (void)dbeta, (void)graw, (void)dg, (void)stage;
#endif
}

/* Whether the fused reverse pass runs (Plan::rev_ws): where the warp-specialized pullback runs (pullback_ws: ReWY,
 * bf16, K = V = 128, sm_90a, aligned pointers) with one key head per value head; by default where the wgmma reverse
 * scan would run (the large grids: one block per sequence and value head fills the SMs), over the segments, and in
 * each time window (win > 0 without segments: the recompute and this pass once a window, S̄ carried between them);
 * force.rev_ws = 1 wherever it applies, 0 never. In the windows it replaced the pair of chains and pullback_ws
 * (session 47, H100, GDN (4,4096,16), GPU-bound backward: the windows' pair 1.153 ms, this pass without windows
 * 0.994, which holds every chunk's S_c and R: about 600 MiB of peak against the windows' 321.5; session 48: this pass in
 * the windows 0.974 at the windows' memory, DeltaNet 1.140 → 0.793). */
bool reverse_ws(const Prob &p, int win) {
    const Plan &pl = p.plan;
    if (!pl.pb_ws || p.G != 1 || pl.force.rev_ws == 0) return false;
    return pl.force.rev_ws == 1 || pl.bwd_scan_wg || pl.seg || win > 0;
}

cudaError_t launch_reverse_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB, const float *A,
                              const void *do_, const state_t *Sc, const rp_t *R, const float *dht, float *dh0, void *dq,
                              void *dk, void *dv, void *dbeta, const float *graw, float *dg, cudaStream_t s) {
    using T = __nv_bfloat16;
    if (p.K != 128 || p.Kp != 128 || p.V != 128 || p.G != 1 || !p.a16) return cudaErrorInvalidValue;
    const bool rf = p.plan.rev_rf; /* R formed here (R unused: policy R, Plan::rev_rf), else loaded */
    const TmaEncoder enc;
    RvMaps m{};
    const uint64_t rows = (uint64_t)chunk_slots(p) * p.HV * MAXBT; /* R's rows (a time window's slots) */
    if (!ws_token_map(enc, &m.k, p, k, p.H, p.K) || !ws_token_map(enc, &m.q, p, q, p.H, p.K) ||
        !ws_token_map(enc, &m.v, p, v, p.HV, p.V) || !ws_token_map(enc, &m.o, p, do_, p.HV, p.V) ||
        (!rf && !ws_slot_map(enc, &m.r, R, rows, p.V)) || !ws_slot_map(enc, &m.sc, Sc, rows / MAXBT * p.K, p.V) ||
        !ws_a_map(enc, &m.a, p, A))
        return cudaErrorInvalidValue;
    /* dv, k̄, q̄ of full chunks by tensor stores where dv, dk, dq take a map (16-B aligned); per-thread stores otherwise */
    const int stage = ws_token_map(enc, &m.dk, p, dk, p.H, p.K) && ws_token_map(enc, &m.dq, p, dq, p.H, p.K) &&
                      ws_token_map(enc, &m.dv, p, dv, p.HV, p.V);
    auto go = [&](auto rfc) {
        constexpr bool RF = decltype(rfc)::value;
        constexpr size_t smem = RvLayout::TOTAL;
        cudaError_t e = ensure_smem<reverse_ws_kernel<RF>>(smem);
        if (e != cudaSuccess) return e;
        const unsigned blocks = p.N * p.HV * (p.plan.rev_pair ? 2 : 1); /* pairs: two a walk */
        reverse_ws_kernel<RF><<<blocks, WS_NT, smem, s>>>(p, m, (const T *)q, (const T *)k, (const T *)v, GB, A,
                                                          (const T *)do_, R, dht, dh0, (T *)dq, (T *)dk, (T *)dv,
                                                          (T *)dbeta, graw, dg, stage);
        return cudaGetLastError();
    };
    return rf ? go(std::true_type{}) : go(std::false_type{});
}

} // namespace rewy_cuda
