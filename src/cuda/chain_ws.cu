/* chain_ws.cu: the forward pass's chain with its output (MATH §2, the A-and-V form of chain_scan.cu's forward pass)
 * as one warp-specialized block per (sequence, value head, 128 value columns) on Hopper's warpgroup products, for
 * scalar gates, bf16, chunk 64, K of 64 or 128, V = 128 (sm_90a):
 *   store S_c;   Y = diag(β)(V − γ ⊙ K S);   R = A Y;   O = diag(scale·γ) Q S + C_q R;
 *   S ← γ_n S + Kᵀ diag(f) R,   f_j = e^{G_n − G_j} (j < n),
 * with A in bf16 (the saved A, Prob::a16) and C_q = 𝓛_≤(scale·Q Kᵀ ⊙ e^{G_i − G_j}) formed in the block (ws_cq_issue), so
 * that kkt_inverse neither reads Q nor writes C_q for it.
 *
 * Why roles: a step of chain_scan.cu's chains is a sequence of short phases (copies, products, epilogues, barriers)
 * that every warp walks in turn, and neither fewer instructions (wgmma) nor bulk copies shortened it (PERF.md,
 * sessions 22, 31, 33). Here each warpgroup has one job, so the phases of different jobs overlap:
 *   the state warpgroups (KPC/64 of them: features 64·w …) hold S in registers (64 a thread), write its bf16 copy
 *     and run the state update Kᵀ R̃; their first thread issues the next chunk's tensor copies (tma.cuh: a few
 *     instructions a chunk, where the warpgroups' cp.async loops took 16 a thread and their addresses; session 37);
 *   the R warpgroup forms K S, the bracket Y, R = A Y and R̃ = diag(f) R;
 *   the O warpgroup forms Q S once K S is done, then C_q (both beside Y and A Y), C_q R beside the state update, and
 *     stores o.
 * Only K S → Y → A Y → Kᵀ R̃ is the chain; Q S, C_q R, o's stores and the copies run beside it. Policy R's two chains
 * take the same roles below (chain_pair_ws_kernel). Both are the plan's choice in place of chain_scan.cu's 128-column
 * blocks where they won (the deciding functions at the end; measurements: docs/PERF.md, session 34). Session 27's first
 * try (64 columns, one copy warp, P in the reverse block) lost everywhere (DESIGN.md).
 *
 * Per chunk (named barriers; NT = all threads):
 *   BAR_S (NT)            the chunk's tiles (the state warpgroups waited on the stage's mbarrier, and on their own
 *                         copies of a tail chunk's rows) and S's bf16 copy are in; the R and O warpgroups are done with
 *                         the chunk before (so the other stage and R's tiles are free)
 *   R warpgroup           K S → Y (BAR_Y: its own four warps) → A Y → R, R̃ → arrive BAR_P
 *   O warpgroup           Q S once K S is done (BAR_K) → arrive BAR_F (S's copy is read) → C_q (BAR_CQ: its own four
 *                         warps) → wait BAR_P → C_q R → o
 *   state warpgroups      issue the next chunk's copies → wait BAR_P → S ← γ_n S + Kᵀ R̃ → wait BAR_F → S's copy
 * Operands in shared memory: the copied tiles K, Q, V, A (and the pair's W, Ō, U, C_q) as tma.cuh's 64 × 64 boxes with
 * the 128-B swizzle, read both ways (K as K and as Kᵀ); the tiles the block writes (Y, R, R̃, S's copy) as wgmma.cuh's
 * two 64-column cm_mn halves, MN-major, and the forward's C_q cm_k<64>, K-major (the Op types below name each reading).
 * Two stages of the chunk tiles (K, Q, V, A, and the slot of the C_q the O warpgroup forms), G and β: 209 KB at
 * K = 128.
 *
 * The recompute form (REC): policy R's recompute before the fused reverse pass (reverse_ws.cu) as the same
 * chain without the output, storing S_c and R (in a time window's backward, the window's chunks from its checkpoint,
 * by the window's slots). A is the saved one, in bf16 (Prob::a16: the one copy kkt writes on this path), by the same
 * tensor copy as the forward's, so the recomputed S_c and R are the forward chain's own; the O warpgroup has no output
 * to form and only keeps the meetings. (Until session 49 the saved A was fp32, and that warpgroup rounded a bulk copy
 * of it to bf16 while K S ran.) It takes the place of state_scan_wg.cu's recompute (two 64-column chains a block, tf32
 * A X, every copy by the math warps' cp.async).
 *
 * The segments' walks (REC with nwin > 0; MATH §11b step 1, the forward's sequence split): the recompute form over the
 * segments (the sequences of segment_prob's problem), storing nothing but each segment's end state: X_w from the start
 * state (the caller's h0 for a sequence's first segment, zero for the others) into ht; and from block hom0 on a second
 * grid of homogeneous blocks from S = I (the block's columns of it) with V = 0 (never copied: Y = −diag(β) γ ⊙ K S) to
 * T_w in tout. Blocks whose result no combine reads return at once: the last segment's ordinary ones, the first
 * segment's homogeneous ones (as state_scan_wg.cu's walks did, which these replaced in session 52). */
#include "kernels.cuh"
#include "scan_wg.cuh"
#include "tma.cuh"
#include "ws.cuh"

namespace rewy_cuda {

/* NH: the block's 64-column halves of V (its value tile: 64·NH columns) */
template <int KPC, int NH = 2> struct WsLayout {
    static constexpr int MB = KPC / 64;                  /* state warpgroups */
    static constexpr int NT = 128 * (MB + 2);            /* threads: the state warpgroups, then R's, then O's */
    static constexpr int KT = MAXBT * KPC * 2;           /* a [64][KPC] bf16 tile (K, Q) */
    static constexpr int HT = MAXBT * 64 * 2;            /* a [64][64] bf16 tile (a V half, A, C_q, Y …) */
    /* a stage: K, Q, V (NH halves), A, and the slot of C_q */
    static constexpr int oK = 0, oQ = KT, oV = 2 * KT, oA = oV + NH * HT, oC = oA + HT, STAGE = oC + HT;
    /* S's bf16 copy (NH halves of [KPC][64]), Y, R and R̃ (NH halves each); the stages' G and β, and their mbarriers
     * (the copies are in) */
    static constexpr int SH = KPC * 64 * 2;
    static constexpr int oS = 2 * STAGE, oY = oS + NH * SH, oR = oY + NH * HT, oP = oR + NH * HT, oGB = oP + NH * HT;
    static constexpr int oMB = oGB + 2 * GB_BYTES, TOTAL = oMB + 16;
    static constexpr unsigned BYTES = 2 * KT + (NH + 1) * HT + GB_BYTES; /* a stage's copies: K, Q, V, A, G and β */
    static constexpr unsigned ROW_BYTES = 2 * KT + NH * HT;              /* of which K, Q, V (a tail chunk's by cp.async) */
    /* the recompute form's: K, V, A, G and β (no Q); of which K, V */
    static constexpr unsigned BYTES_REC = KT + NH * HT + HT + GB_BYTES, ROW_BYTES_REC = KT + NH * HT;
    static_assert(STAGE % TMA_BOX == 0, "WsLayout: the copied boxes 1024-B aligned");
};

/* x (+)= X B for each 64-column half (NH: the block's, two at 128 value columns): X [64][KD] (layout LA: a copied K, Q,
 * W or A; the forward block's C_q), B NH halves of KD rows (LB: the state's bf16 copy in swizzled boxes, OpSt, KD = K;
 * Y and R as cm_mn<64>, OpN, KD = 64); ACC adds to x */
template <class LA, class LB, int KD, bool ACC = false, int NH>
__device__ __forceinline__ void ws_times_issue(float (&x)[NH][32], const void *X, const __nv_bfloat16 *B) {
    const uint32_t alo = wg_lo<LA::LBO>(X);
    wg_arrive();
#pragma unroll
    for (int hf = 0; hf < NH; hf++) ws_mma<LA, LB, KD>(x[hf], alo, wg_lo<LB::LBO>(B + hf * KD * 64), ACC);
    wg_commit();
}
template <class LA, class LB, int KD, bool ACC = false, int NH>
__device__ __forceinline__ void ws_times(float (&x)[NH][32], const void *X, const __nv_bfloat16 *B) {
    ws_times_issue<LA, LB, KD, ACC>(x, X, B);
    wg_wait();
}
/* x += Xᵀ B for each half, issue only: X a copied tile read MN-major from X on (a state warpgroup's 64 features of
 * Kᵀ, Qᵀ or Wᵀ; C_qᵀ), B NH halves over the 64 tokens, cm_mn<64> (LB = OpN: R̃, −R̄) or copied (LB = OpSt: Ō, Ō_g) */
template <class LB, int NH>
__device__ __forceinline__ void ws_tr_times_issue(float (&x)[NH][32], const void *X, const __nv_bfloat16 *B) {
    const uint32_t xlo = wg_lo<OpSt::LBO>(X);
    wg_arrive();
#pragma unroll
    for (int hf = 0; hf < NH; hf++) ws_mma<OpSt, LB, MAXBT>(x[hf], xlo, wg_lo<LB::LBO>(B + hf * 64 * 64), true);
    wg_commit();
}
/* the byte offset of feature 64·w in a copied K, Q or W tile (its box w) */
__device__ __forceinline__ int ws_feat(int w) { return TMA_BOX * w; }

/* f(hf, e, d) for every state element (hf, e) a thread holds (feature wg_row(e) of its block, column 64·hf + wg_col(e)
 * of its value tile), d its offset in a [K][V] state (SVF: [V][K]) from the thread's first element (e = 0, hf = 0),
 * with V = 128 and K = KPC: all offsets compile-time, so that the element loops keep one base address (64 addresses
 * hoisted out of the chunk loop spilled) */
template <int KPC, bool SVF, int NH, class F> __device__ __forceinline__ void ws_state_elems(F &&f) {
#pragma unroll
    for (int hf = 0; hf < NH; hf++)
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const int dr = 8 * ((e >> 1) & 1), dc = 64 * hf + 8 * (e >> 2) + (e & 1);
            f(hf, e, SVF ? dc * KPC + dr : dr * 128 + dc);
        }
}

/* A state warpgroup's part of the state (S or S̄): features 64·wg + wg_row(e), columns v0 + 64·hf + wg_col(e) (NH
 * halves), in registers for the whole walk; s0: the thread's first element in an API state (h0, ht, dht, dh0,
 * checkpoints) */
template <int KPC, int NH = 2> struct WsState {
    float s[NH][32];
    size_t s0;
    int wg, v0;
    __device__ WsState(const Prob &p, size_t sbase, int v0_, int w)
        : s0(sbase + st_idx(p, 64 * w + wg_row(0), v0_ + wg_col(0))), wg(w), v0(v0_) {}
    template <class F> __device__ __forceinline__ void each(const Prob &p, F &&f) {
        if (p.svf) ws_state_elems<KPC, true, NH>(f);
        else ws_state_elems<KPC, false, NH>(f);
    }
    __device__ __forceinline__ void load(const Prob &p, const float *src) {
        each(p, [&](int hf, int e, int d) { s[hf][e] = src ? src[s0 + d] : 0.f; });
    }
    /* from another state's place: base instead of the walk's sbase (a segment's start, its sequence's h0) */
    __device__ __forceinline__ void load_at(const Prob &p, const float *src, size_t base) {
        const size_t b0 = base + st_idx(p, 64 * wg + wg_row(0), v0 + wg_col(0));
        each(p, [&](int hf, int e, int d) { s[hf][e] = src ? src[b0 + d] : 0.f; });
    }
    /* the block's columns of the identity: feature 64·wg + wg_row(e), column v0 + 64·hf + wg_col(e) */
    __device__ __forceinline__ void identity() {
#pragma unroll
        for (int hf = 0; hf < NH; hf++)
#pragma unroll
            for (int e = 0; e < 32; e++) s[hf][e] = 64 * wg + wg_row(e) == v0 + 64 * hf + wg_col(e) ? 1.f : 0.f;
    }
    __device__ __forceinline__ void save(const Prob &p, float *dst) {
        each(p, [&](int hf, int e, int d) { dst[s0 + d] = s[hf][e]; });
    }
    __device__ __forceinline__ void scale(float g) {
#pragma unroll
        for (int hf = 0; hf < NH; hf++)
#pragma unroll
            for (int e = 0; e < 32; e++) s[hf][e] *= g;
    }
    /* the bf16 copy: the B operand [feature][column] of the products with the state, NH halves of KPC rows × 64
     * columns, each a stack of tma.cuh's swizzled boxes (read as OpSt; this warpgroup's 64 features are box wg of each
     * half), fenced for the async proxy (the products and the tensor stores of save) */
    __device__ __forceinline__ void spill(__nv_bfloat16 *Sb) const {
#pragma unroll
        for (int hf = 0; hf < NH; hf++) {
            __nv_bfloat162 v[16];
            wg_pack(v, s[hf]);
            wg_box_store(Sb + hf * KPC * 64 + wg * 64 * 64, v);
        }
        wg_proxy_fence();
    }
    /* its rows of the copy to a saved chunk state (S_c, S̄⁺: [K][V] bf16, V = 128; m maps every slot's, row: this one's
     * first) by a tensor store a half (at the block's value columns), once its four warps wrote them (bar): the
     * warpgroup's first thread issues them and drains them (drain) before the copy is written again */
    __device__ __forceinline__ void save_copy(const CUtensorMap *m, int row, const __nv_bfloat16 *Sb, int bar) const {
        ws_sync(bar, 128);
        if ((threadIdx.x & 127) == 0) {
#pragma unroll
            for (int hf = 0; hf < NH; hf++)
                tma_store_box(m, v0 + 64 * hf, row + 64 * wg, smem_u32(Sb + hf * KPC * 64 + wg * 64 * 64));
            tma_store_commit();
        }
    }
    __device__ __forceinline__ void drain() const {
        if ((threadIdx.x & 127) == 0) tma_store_drain();
    }
};

/* ---- a stage's copies: tensor copies (tma.cuh) issued by one thread, completing on the stage's mbarrier; G and β by
 * a bulk copy on the same. The maps: k, q [token][H·K]; x, the caller's [token][HV·V] V (forward) or dO (reverse); u,
 * a [slot·HV·64][128] workspace (the recompute's U); a, kkt's [slot·HV·64][KD] A (forward) or W (pair); c, kkt's C_q
 * (the reverse). Stores: sc, sb, the saved chunk states S_c (policy A's in the forward; the recompute's) and S̄⁺ (the
 * reverse's), [slot·HV·K][128] */
struct WsMaps {
    CUtensorMap k, q, x, u, a, c, sc, sb;
};
/* The stages' two mbarriers (at mb, mb + 8) set up, and the first chunk's tensor copies issued, by the block's first
 * thread before the block's first barrier: every later issue comes before a barrier (BAR_F) that the threads waiting on
 * a stage pass first */
#if REWY_WGMMA /* (the mbarriers: sm_90 code only) */
template <class Issue> __device__ __forceinline__ void ws_stages_begin(unsigned mb, Issue &&issue_first) {
    if (threadIdx.x == 0) {
        mbar_init(mb, 1);
        mbar_init(mb + 8, 1);
        mbar_init_fence();
        issue_first();
    }
    __syncthreads();
}
/* stage b of walk step it is in: its tensor copies (the mbarrier's phase it / 2) and this thread's copies of a tail
 * chunk, made visible to the products */
__device__ __forceinline__ void ws_stage_wait(unsigned mb, int b, int it) {
    mbar_wait(mb + 8 * b, (it >> 1) & 1);
    cp_async_wait_group<0>();
    wg_proxy_fence();
}
#endif

/* ---- a warpgroup's [64 tokens][64·NH columns] accumulators x (rows i0 = wg_row(0) and i0 + 8) */
/* to the NH cm_mn<64> halves at dst (a B operand [token][column]) in bf16, row i0 times f0 and row i0 + 8 times f1 */
template <int NH>
__device__ __forceinline__ void ws_put_rows(__nv_bfloat16 *dst, const float (&x)[NH][32], float f0, float f1) {
#pragma unroll
    for (int hf = 0; hf < NH; hf++) {
        __nv_bfloat162 v[16];
        wg_pack(v, x[hf], f0, f1);
        wg_box_store<8, false>(dst + hf * 64 * 64, v);
    }
}
/* the thread's bf16 pairs of a copied [64][64·NH] tile (the stage's V or U), at the accumulator's places: f[hf][e / 2]
 * holds the columns of x[hf][e], x[hf][e + 1] */
template <int NH> __device__ __forceinline__ void ws_get_rows(__nv_bfloat162 (&f)[NH][16], const __nv_bfloat16 *src) {
#pragma unroll
    for (int hf = 0; hf < NH; hf++)
#pragma unroll
        for (int e = 0; e < 32; e += 2)
            f[hf][e / 2] = *reinterpret_cast<const __nv_bfloat162 *>(src + sw128(wg_row(e), 64 * hf + wg_col(e)));
}
/* to rows [0, n) of a row-major [token][64·NH] matrix (row stride ld) in bf16 (o, R, R̄): the thread's two rows, its
 * columns at compile-time offsets */
template <int NH>
__device__ __forceinline__ void ws_store_rows(__nv_bfloat16 *dst, size_t ld, const float (&x)[NH][32], int n) {
    const int i0 = wg_row(0);
    __nv_bfloat16 *const d0 = dst + (size_t)i0 * ld + wg_col(0), *const d1 = d0 + 8 * ld;
    const bool w0 = i0 < n, w1 = i0 + 8 < n;
#pragma unroll
    for (int hf = 0; hf < NH; hf++)
#pragma unroll
        for (int e = 0; e < 32; e += 2)
            if (e & 2 ? w1 : w0)
                *reinterpret_cast<__nv_bfloat162 *>((e & 2 ? d1 : d0) + 64 * hf + 8 * (e >> 2)) =
                    __floats2bfloat162_rn(x[hf][e], x[hf][e + 1]);
}
/* the row factors e^{G_n − G_i} (0 from n on) of F at the thread's rows i0, i0 + 8 */
__device__ __forceinline__ float2 ws_fdec(const Prob &p, const float *Gs, int n) {
    const int i0 = wg_row(0);
    const float gl = Gs[n - 1];
    return make_float2(i0 < n ? gexp(p, gl - Gs[i0]) : 0.f, i0 + 8 < n ? gexp(p, gl - Gs[i0 + 8]) : 0.f);
}

/* C_q = 𝓛_≤(scale·Q Kᵀ ⊙ e^{G_i − G_j}) of a chunk (MATH §2), formed by one warpgroup from the stage's Q and K tiles:
 * ws_cq_issue issues Q Kᵀ (Kᵀ is the K tile read K-major as the B operand), ws_cq_put waits for
 * it and writes C_q into Cs as cm_k<64>(i, j) (the A operand of C_q R; read MN-major, C_qᵀ), zero from row n on and
 * above the diagonal, in bf16 as kkt_inverse forms it. The caller fences and meets whoever reads Cs. The forward
 * block's O warpgroup forms it, so that kkt neither reads Q nor writes C_q for the forward; the pair's reverse block
 * still reads kkt's (formed there, the backward lost: session 35, PERF.md). */
template <int KPC> __device__ __forceinline__ void ws_cq_issue(float (&cq)[32], const char *Qt, const char *Kt) {
    wg_arrive();
    ws_mma<OpSk, OpSk, KPC>(cq, wg_lo<OpSk::LBO>(Qt), wg_lo<OpSk::LBO>(Kt), false);
    wg_commit();
}
__device__ __forceinline__ void ws_cq_put(const Prob &p, float (&cq)[32], __nv_bfloat16 *Cs, const float *Gs, int n) {
    wg_wait();
    __nv_bfloat162 v[16];
    ws_masked_decay<32>(p, Gs, n, 0, 0, [&](int e, bool k0, float d0, bool k1, float d1) {
        v[e / 2] = __floats2bfloat162_rn(k0 ? p.scale * cq[e] * d0 : 0.f, k1 ? p.scale * cq[e + 1] * d1 : 0.f);
    });
    wg_box_store<8, false>(Cs, v); /* cm_k<64>(i, j) */
}

/* The O warpgroup issues Q S once K S is complete (BAR_K), so that the chain's K S has the tensor cores to itself:
 * issued together, the forward took 0.5–2 % longer (H200, session 34: GDN (8,2048,32) 0.649 against 0.655 ms). */
template <int KPC, bool REC = false, int NH = 2>
__global__ void __launch_bounds__(WsLayout<KPC, NH>::NT, 1)
chain_ws_kernel(Prob p, const __grid_constant__ WsMaps m, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                const __nv_bfloat16 *v, const float *GB, cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R,
                __nv_bfloat16 *o, int nwin = 0, int hom0 = INT_MAX, float *tout = nullptr) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WsLayout<KPC, NH>;
    constexpr int VT = 64 * NH; /* the block's value columns */
    /* the named barriers (the file-top comment); SC + w: state warpgroup w's own */
    constexpr int WS_BAR_S = 1, WS_BAR_P = 2, WS_BAR_F = 3, WS_BAR_Y = 4, WS_BAR_K = 5, WS_BAR_SC = 6;
    constexpr int MB = L::MB, NT = L::NT, NL = 128 * MB; /* NL: the state warpgroups, which also issue the copies */
    constexpr int WS_BAR_CQ = WS_BAR_SC + MB;            /* the O warpgroup's own: its C_q tile is in */
    extern __shared__ __align__(1024) char smc[]; /* the copied boxes: 1024-B aligned */
    const int wg = threadIdx.x >> 7;
    const bool hom = REC && (int)blockIdx.x >= hom0; /* the segments' homogeneous walk (the file-top comment) */
    const int bx = hom ? (int)blockIdx.x - hom0 : (int)blockIdx.x;
    const int nvt = p.V / VT, sh = bx / nvt, sq = sh / p.HV, hv = sh % p.HV, h = hv / p.G;
    const int v0 = (bx % nvt) * VT;
    if (REC && nwin > 0 && sq % nwin == (hom ? 0 : nwin - 1)) return; /* the whole block: no combine reads it */
    int c_begin, c_end;
    seq_chunks(p, sq, c_begin, c_end);
    const size_t rsv = (size_t)p.HV * p.V, sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    /* the state warpgroups' start state: the identity's columns (the homogeneous walk), a segment's start, or h0 */
    auto start = [&](WsState<KPC, NH> &S) {
        if (hom) S.identity();
        else if (REC && nwin > 0) /* a segment: the caller's h0 (its sequence's) for the first, zero for the others */
            S.load_at(p, sq % nwin ? nullptr : h0, ((size_t)(sq / nwin) * p.HV + hv) * p.K * p.V);
        else S.load(p, h0);
    };
    if (c_end <= c_begin) { /* the whole block; an empty segment's walk still leaves its end state (its start) */
        if (REC && nwin > 0 && wg < MB) {
            WsState<KPC, NH> S(p, sbase, v0, wg);
            start(S);
            S.save(p, hom ? tout : ht);
        }
        return;
    }
    const int nch = c_end - c_begin;
    auto stage = [&](int b) { return smc + b * L::STAGE; };
    auto gates = [&](int b) { return reinterpret_cast<float *>(smc + L::oGB + b * GB_BYTES); }; /* stage b's G, then β */
    const unsigned mb = smem_u32(smc + L::oMB); /* stage b's mbarrier: mb + 8·b */
    /* chunk c's tiles into stage b: K, Q, V, A, G, β, all by chunk (the recompute form's A is the saved one; only the
     * S_c and R it stores go by a time window's slots). The tensor copies by the first thread (issue_tma); K, Q, V of
     * a sequence's tail chunk by the state warpgroups (issue_tail, ws_copy_tail) */
    const size_t rsk = (size_t)p.H * p.K;
    auto issue_tma = [&](int c, int b) {
        if (threadIdx.x != 0) return;
        const ChunkInfo cj = p.ctab[c];
        const unsigned st = smem_u32(stage(b)), mbb = mb + 8 * b;
        const size_t cw = (size_t)c * p.HV + hv;
        const bool full = cj.n == MAXBT;
        bulk_fence(); /* the block's earlier reads of the stage come before these writes */
        constexpr unsigned all = REC ? L::BYTES_REC : L::BYTES, rows = REC ? L::ROW_BYTES_REC : L::ROW_BYTES;
        mbar_expect(mbb, full ? all - (hom ? NH * L::HT : 0) : all - rows); /* (a tail's rows: by cp.async) */
        if (full) {
            tma_tile<KPC>(st + L::oK, &m.k, h * KPC, cj.tok0, mbb);
            if constexpr (!REC) tma_tile<KPC>(st + L::oQ, &m.q, h * KPC, cj.tok0, mbb);
            if (!hom) tma_tile<VT>(st + L::oV, &m.x, hv * p.V + v0, cj.tok0, mbb);
        }
        tma_tile<64>(st + L::oA, &m.a, 0, (int)(cw * MAXBT), mbb);
        bulk_g2s(smem_u32(gates(b)), GB + cw * 2 * MAXBT, GB_BYTES, mbb);
    };
    auto issue_tail = [&](int c, int b) {
        const ChunkInfo cj = p.ctab[c];
        if (cj.n == MAXBT) return;
        ws_copy_tail<KPC, NL>(stage(b) + L::oK, k, rsk, (size_t)h * p.K, cj);
        if constexpr (!REC) ws_copy_tail<KPC, NL>(stage(b) + L::oQ, q, rsk, (size_t)h * p.K, cj);
        if (!hom) ws_copy_tail<VT, NL>(stage(b) + L::oV, v, rsv, (size_t)hv * p.V + v0, cj);
        cp_async_commit();
    };
    ws_stages_begin(mb, [&] { issue_tma(c_begin, 0); });
    T *const Sb = reinterpret_cast<T *>(smc + L::oS); /* half hf: Sb + hf · KPC · 64 */
    T *const Yb = reinterpret_cast<T *>(smc + L::oY), *const Rb = reinterpret_cast<T *>(smc + L::oR);
    T *const Pb = reinterpret_cast<T *>(smc + L::oP); /* R̃; the halves of Y, R, R̃ at + hf · 64 · 64 */
    if (wg < MB) {
        /* ---- a state warpgroup: S's features 64·wg … (the block's first thread, in warpgroup 0, issues the tensor
         * copies; every thread of these warpgroups copies a tail chunk's token tiles) */
        WsState<KPC, NH> S(p, sbase, v0, wg);
        issue_tail(c_begin, 0);
        start(S);
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            /* S's copy: the B operand of K S and Q S (the O warpgroup read the last one: BAR_F) */
            if (it > 0) {
                if (Sc) S.drain();
                ws_sync(WS_BAR_F, NL + 128);
            }
            S.spill(Sb);
            if (Sc) /* policy A's S_c, or the recompute's (by the window's slot in a time window's backward) */
                S.save_copy(&m.sc, (int)(((size_t)chunk_slot(p, c, p.ctab[c]) * p.HV + hv) * p.K), Sb, WS_BAR_SC + wg);
            ws_stage_wait(mb, b, it);
            ws_sync(WS_BAR_S, NT); /* chunk c's tiles and S's copy are in */
            if (it + 1 < nch) {
                issue_tma(c + 1, b ^ 1);
                issue_tail(c + 1, b ^ 1);
            }
            const float gn = gexp(p, gates(b)[p.ctab[c].n - 1]);
            ws_sync(WS_BAR_P, NT); /* R̃ is in */
            /* S ← γ_n S + Kᵀ R̃; Kᵀ's rows of this warpgroup's features: the tile read from feature 64·wg on (one
             * descriptor start for every warpgroup, so no branch on wg around the products) */
            S.scale(gn);
            ws_tr_times_issue<OpN>(S.s, st + L::oK + ws_feat(wg), Pb);
            wg_wait();
            if (float *ck = window_checkpoint(p, c_begin, c, c_end)) S.save(p, ck); /* a time window's start state */
        }
        if (float *const out = hom ? tout : ht) S.save(p, out);
        if (Sc) S.drain(); /* the last stores have read the copy before the block ends */
    } else if (wg == MB) {
        /* ---- the R warpgroup: tokens wg_row(e), columns 64·hf + wg_col(e) */
        const int i0 = wg_row(0); /* a thread's rows: i0, i0 + 8 */
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NT);
            const int n = p.ctab[c].n;
            const float *Gs = gates(b), *bs = Gs + MAXBT;
            const T *Vs = reinterpret_cast<const T *>(st + L::oV);
            float x[NH][32];
            ws_times_issue<OpSk, OpSt, KPC>(x, st + L::oK, Sb); /* K S */
            /* V's fragments and the row factors while K S runs: read after the wait, these loads stalled the bracket
             * below (session 35's source counters: a third of this warpgroup's time) */
            __nv_bfloat162 vf[NH][16];
            if (hom) { /* V = 0 */
#pragma unroll
                for (int hf = 0; hf < NH; hf++)
#pragma unroll
                    for (int e = 0; e < 16; e++) vf[hf][e] = __floats2bfloat162_rn(0.f, 0.f);
            } else {
                ws_get_rows(vf, Vs);
            }
            const float g0 = gexp(p, Gs[i0]), g1 = gexp(p, Gs[i0 + 8]), b0 = bs[i0], b1 = bs[i0 + 8];
            wg_wait();
            ws_arrive(WS_BAR_K, 256); /* the O warpgroup's Q S may start */
            /* Y = diag(β)(V − γ ⊙ K S), the B operand of A Y */
#pragma unroll
            for (int hf = 0; hf < NH; hf++) {
#pragma unroll
                for (int e = 0; e < 32; e += 2) {
                    const float gi = e & 2 ? g1 : g0, bi = e & 2 ? b1 : b0;
                    const float2 vv = __bfloat1622float2(vf[hf][e / 2]);
                    vf[hf][e / 2] = __floats2bfloat162_rn(bi * (vv.x - gi * x[hf][e]), bi * (vv.y - gi * x[hf][e + 1]));
                }
                wg_box_store<8, false>(Yb + hf * 64 * 64, vf[hf]);
            }
            wg_proxy_fence();
            ws_sync(WS_BAR_Y, 128);
            /* R = A Y */
            ws_times<OpSk, OpN, 64>(x, st + L::oA, Yb);
            /* R (the B operand of C_q R) and R̃ = diag(f) R (of Kᵀ R̃; zero on rows from n on) */
            const float2 f = ws_fdec(p, Gs, n);
            ws_put_rows(Rb, x, 1.f, 1.f);
            ws_put_rows(Pb, x, f.x, f.y);
            if (R) /* policy A's R, or the recompute's (by slot, as S_c) */
                ws_store_rows(R + ((size_t)chunk_slot(p, c, p.ctab[c]) * p.HV + hv) * MAXBT * p.V + v0, p.V, x, n);
            wg_proxy_fence();
            ws_arrive(WS_BAR_P, NT);
        }
    } else if constexpr (REC) {
        /* ---- the recompute form's O warpgroup: no output; the meetings of the O warpgroup (K S done: S's copy is read) */
        for (int it = 0; it < nch; it++) {
            ws_sync(WS_BAR_S, NT);
            ws_sync(WS_BAR_K, 256);
            if (it + 1 < nch) ws_arrive(WS_BAR_F, NL + 128);
            ws_sync(WS_BAR_P, NT);
        }
    } else {
        /* ---- the O warpgroup: tokens wg_row(e), columns 64·hf + wg_col(e) */
        const int i0 = wg_row(0);
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NT);
            const ChunkInfo ci = p.ctab[c];
            const float *Gs = gates(b);
            T *const Cs = reinterpret_cast<T *>(stage(b) + L::oC);
            float x[NH][32];
            /* Q S, after K S */
            ws_sync(WS_BAR_K, 256);
            ws_times<OpSk, OpSt, KPC>(x, st + L::oQ, Sb);
            if (it + 1 < nch) ws_arrive(WS_BAR_F, NL + 128); /* S's copy is read */
            /* C_q into the stage (beside Y and A Y), and to policy A's saved C_q */
            {
                float cq[32];
                ws_cq_issue<KPC>(cq, st + L::oQ, st + L::oK);
                ws_cq_put(p, cq, Cs, Gs, ci.n);
            }
            wg_proxy_fence();
            ws_sync(WS_BAR_CQ, 128);
            if (Cq && v0 == 0) /* (every value tile of the head forms the same C_q; the first stores it) */
                wg_store_rows<MAXBT, MAXBT>(Cq + ((size_t)c * p.HV + hv) * MAXBT * MAXBT, Cs, MAXBT, MAXBT, 0);
            /* O = diag(scale·γ) Q S + C_q R, once R is in */
            const float q0 = p.scale * gexp(p, Gs[i0]), q1 = p.scale * gexp(p, Gs[i0 + 8]);
#pragma unroll
            for (int hf = 0; hf < NH; hf++)
#pragma unroll
                for (int e = 0; e < 32; e++) x[hf][e] *= e & 2 ? q1 : q0;
            ws_sync(WS_BAR_P, NT);
            ws_times<OpK, OpN, 64, true>(x, Cs, Rb);
            ws_store_rows(o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0, rsv, x, ci.n);
        }
    }
#else
    (void)p, (void)m, (void)q, (void)k, (void)v, (void)GB, (void)Cq, (void)h0, (void)ht, (void)Sc, (void)R, (void)o;
    (void)nwin, (void)hom0, (void)tout;
#endif
}

/* ==== Policy R's two chains (chain_scan.cu's pair, the W form) in the same roles ====
 * One launch: blocks [0, nb) the reverse chain, [nb, 2nb) the forward recompute, one per (sequence, value head, 128
 * columns) each, as chain_pair_kernel's blocks; the same inputs and outputs (W from kkt_inverse, U over R's region; S_c,
 * R; S̄⁺, R̄ into PR; dh0), so P = Aᵀ R̄ and the pullback follow unchanged.
 *   Recompute:  store S_c;  R = U − W S (stored);  S ← γ_n S + Kᵀ diag(f) R
 *     state warpgroups: S's copy (and S_c from it), the copies, the state update; the R warpgroup: W S, R, R̃ (the O
 *     warpgroup has nothing to do and leaves).
 *   Reverse:    store S̄⁺;  R̄ = diag(f) K S̄⁺ + C_qᵀ Ō (stored);  S̄ ← γ_n S̄⁺ + Qᵀ diag(scale·γ) Ō − Wᵀ R̄
 *     state warpgroups: S̄⁺'s copy (and S̄⁺ from it), the copies, Qᵀ Ō_g as soon as Ō_g is in (BAR_O), then −Wᵀ R̄
 *     (BAR_P); the R warpgroup: K S̄⁺ (then arrive BAR_F), the row scaling, C_qᵀ Ō, R̄ stored and −R̄ for the state;
 *     the O warpgroup: Ō_g = diag(scale·γ) Ō (BAR_O).
 * Stage: K, W, Q, Ō or U (two halves), C_q; G and β beside. */
template <int KPC> struct WsPairLayout {
    static constexpr int KT = MAXBT * KPC * 2, HT = MAXBT * 64 * 2;
    static constexpr int oK = 0, oW = KT, oQ = 2 * KT, oX = 3 * KT, oC = oX + 2 * HT, STAGE = oC + HT;
    static constexpr int SH = KPC * 64 * 2;
    static constexpr int oS = 2 * STAGE, oO = oS + 2 * SH, oP = oO + 2 * HT, oGB = oP + 2 * HT, oMB = oGB + 2 * GB_BYTES;
    static constexpr int TOTAL = oMB + 16;
    /* a stage's copies: the reverse's K, W, Q, Ō, C_q, G and β; the recompute's K, W, U, G and β */
    static constexpr unsigned BYTES_REV = 3 * KT + 3 * HT + GB_BYTES, BYTES_REC = 2 * KT + 2 * HT + GB_BYTES;
    static constexpr unsigned ROW_BYTES_REV = 2 * KT + 2 * HT; /* the reverse's K, Q, Ō (a tail chunk's by cp.async) */
    static_assert(STAGE % TMA_BOX == 0, "WsPairLayout: the copied boxes 1024-B aligned");
};

template <int KPC>
__global__ void __launch_bounds__(WsLayout<KPC>::NT, 1)
chain_pair_ws_kernel(Prob p, const __grid_constant__ WsMaps m, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                     const __nv_bfloat16 *do_, const float *GB, const float *h0, state_t *Sc, rp_t *R, const float *dht,
                     float *dh0, state_t *Sbar, rp_t *PR, int nb) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WsPairLayout<KPC>;
    constexpr int WS_BAR_S = 1, WS_BAR_P = 2, WS_BAR_F = 3, WS_BAR_O = 4, WS_BAR_SC = 5;
    constexpr int MB = KPC / 64, NT = WsLayout<KPC>::NT, NL = 128 * MB;
    extern __shared__ __align__(1024) char smc[]; /* the copied boxes: 1024-B aligned */
    const bool rev = (int)blockIdx.x < nb;
    const int bid = rev ? blockIdx.x : blockIdx.x - nb, wg = threadIdx.x >> 7;
    const int sq = bid / p.HV, hv = bid % p.HV, h = hv / p.G; /* V = 128: one tile */
    int c_begin, c_end;
    seq_chunks(p, sq, c_begin, c_end);
    if (c_end <= c_begin) return; /* the whole block (a window empty for this sequence: the carry stays as it is) */
    const int nch = c_end - c_begin;
    const int NA = rev ? NT : NL + 128; /* the threads at BAR_S */
    auto chunk_at = [&](int it) { return rev ? c_end - 1 - it : c_begin + it; };
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    auto stage = [&](int b) { return smc + b * L::STAGE; };
    auto gates = [&](int b) { return reinterpret_cast<float *>(smc + L::oGB + b * GB_BYTES); }; /* stage b's G, then β */
    const unsigned mb = smem_u32(smc + L::oMB); /* stage b's mbarrier: mb + 8·b */
    /* chunk c's tiles into stage b: K, W (and the reverse's Q, Ō, C_q; the recompute's U), G and β. G, β by chunk;
     * W, U, C_q (kkt's, of the backward's window) by workspace slot. As in chain_ws_kernel: the tensor copies by the
     * first thread, the token tiles of a sequence's tail chunk (K, and the reverse's Q, Ō) by the state warpgroups */
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    auto issue_tma = [&](int c, int b) {
        if (threadIdx.x != 0) return;
        const ChunkInfo cj = p.ctab[c];
        const unsigned st = smem_u32(stage(b)), mbb = mb + 8 * b;
        const int row = chunk_slot(p, c, cj) * p.HV * MAXBT + hv * MAXBT; /* the slot's rows of W, U, C_q */
        const bool full = cj.n == MAXBT;
        bulk_fence(); /* the block's earlier reads of the stage come before these writes */
        mbar_expect(mbb, rev ? (full ? L::BYTES_REV : L::BYTES_REV - L::ROW_BYTES_REV)
                             : (full ? L::BYTES_REC : L::BYTES_REC - L::KT));
        if (full) tma_tile<KPC>(st + L::oK, &m.k, h * KPC, cj.tok0, mbb);
        tma_tile<KPC>(st + L::oW, &m.a, 0, row, mbb);
        if (rev) {
            if (full) {
                tma_tile<KPC>(st + L::oQ, &m.q, h * KPC, cj.tok0, mbb);
                tma_tile<128>(st + L::oX, &m.x, hv * p.V, cj.tok0, mbb);
            }
            tma_tile<64>(st + L::oC, &m.c, 0, row, mbb);
        } else {
            tma_tile<128>(st + L::oX, &m.u, 0, row, mbb);
        }
        bulk_g2s(smem_u32(gates(b)), GB + ((size_t)c * p.HV + hv) * 2 * MAXBT, GB_BYTES, mbb);
    };
    auto issue_tail = [&](int c, int b) {
        const ChunkInfo cj = p.ctab[c];
        if (cj.n == MAXBT) return;
        ws_copy_tail<KPC, NL>(stage(b) + L::oK, k, rsk, (size_t)h * p.K, cj);
        if (rev) {
            ws_copy_tail<KPC, NL>(stage(b) + L::oQ, q, rsk, (size_t)h * p.K, cj);
            ws_copy_tail<128, NL>(stage(b) + L::oX, do_, rsv, (size_t)hv * p.V, cj);
        }
        cp_async_commit();
    };
    ws_stages_begin(mb, [&] { issue_tma(chunk_at(0), 0); });
    if (!rev && wg == MB + 1) return; /* the recompute has no O warpgroup's work */
    T *const Sb = reinterpret_cast<T *>(smc + L::oS), *const Og = reinterpret_cast<T *>(smc + L::oO);
    T *const Pb = reinterpret_cast<T *>(smc + L::oP);

    if (wg < MB) {
        /* ---- a state warpgroup: S (recompute) or S̄ (reverse), features 64·wg … (the copies as in chain_ws_kernel) */
        WsState<KPC> S(p, sbase, 0, wg);
        issue_tail(chunk_at(0), 0);
        S.load(p, rev ? dht : h0);
        for (int it = 0; it < nch; it++) {
            const int c = chunk_at(it), b = it & 1;
            const ChunkInfo ci = p.ctab[c];
            const size_t ch = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
            const char *st = stage(b);
            /* the state's copy, the B operand of W S or K S̄⁺ (the R warpgroup read the last one: BAR_F), and from
             * it S_c or S̄⁺ for the pullback */
            if (it > 0) {
                S.drain();
                ws_sync(WS_BAR_F, NL + 128);
            }
            S.spill(Sb);
            S.save_copy(rev ? &m.sb : &m.sc, (int)(ch * p.K), Sb, WS_BAR_SC + wg);
            ws_stage_wait(mb, b, it);
            ws_sync(WS_BAR_S, NA); /* chunk c's tiles and the state's copy are in */
            if (it + 1 < nch) {
                issue_tma(chunk_at(it + 1), b ^ 1);
                issue_tail(chunk_at(it + 1), b ^ 1);
            }
            S.scale(gexp(p, gates(b)[ci.n - 1]));
            /* the tiles read from feature 64·wg on: this warpgroup's rows of Kᵀ, Qᵀ, Wᵀ */
            if (rev) { /* S̄ += Qᵀ Ō_g, as soon as Ō_g is in */
                ws_sync(WS_BAR_O, NL + 128);
                ws_tr_times_issue<OpSt>(S.s, st + L::oQ + ws_feat(wg), Og);
            }
            ws_sync(WS_BAR_P, NL + 128); /* R̃ (recompute) or −R̄ (reverse) is in */
            /* S ← γ_n S + Kᵀ R̃, or S̄ ← γ_n S̄⁺ + Qᵀ Ō_g − Wᵀ R̄ */
            ws_tr_times_issue<OpN>(S.s, st + (rev ? L::oW : L::oK) + ws_feat(wg), Pb);
            wg_wait();
        }
        if (rev && dh0) S.save(p, dh0);
        S.drain();
    } else if (wg == MB) {
        /* ---- the R warpgroup: tokens wg_row(e), columns 64·hf + wg_col(e) */
        for (int it = 0; it < nch; it++) {
            const int c = chunk_at(it), b = it & 1;
            const ChunkInfo ci = p.ctab[c];
            const size_t ch = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NA);
            const float *Gs = gates(b);
            const float2 f = ws_fdec(p, Gs, ci.n);
            float x[2][32];
            ws_times_issue<OpSk, OpSt, KPC>(x, st + (rev ? L::oK : L::oW), Sb); /* W S (recompute) or K S̄⁺ */
            /* the recompute's U fragments while W S runs (as the forward block's V: loaded after the wait, they stall) */
            const T *Us = reinterpret_cast<const T *>(st + L::oX);
            __nv_bfloat162 uf[2][16];
            if (!rev) ws_get_rows(uf, Us);
            wg_wait();
            if (it + 1 < nch) ws_arrive(WS_BAR_F, NL + 128); /* the state's copy is read */
            if (rev) {
                /* R̄ = diag(f) K S̄⁺ + C_qᵀ Ō (C_q's tile read MN-major as C_qᵀ) */
#pragma unroll
                for (int e = 0; e < 32; e++) {
                    x[0][e] *= e & 2 ? f.y : f.x;
                    x[1][e] *= e & 2 ? f.y : f.x;
                }
                ws_tr_times_issue<OpSt>(x, st + L::oC, reinterpret_cast<const T *>(st + L::oX));
                wg_wait();
                ws_put_rows(Pb, x, -1.f, -1.f); /* −R̄, the B operand of the state's −Wᵀ R̄ */
                ws_store_rows(PR + ch * MAXBT * p.V, p.V, x, ci.n);
            } else {
                /* R = U − W S, stored over U's region (this block read its U into the stage); R̃ = diag(f) R */
#pragma unroll
                for (int hf = 0; hf < 2; hf++)
#pragma unroll
                    for (int e = 0; e < 32; e += 2) {
                        const float2 u = __bfloat1622float2(uf[hf][e / 2]);
                        x[hf][e] = u.x - x[hf][e];
                        x[hf][e + 1] = u.y - x[hf][e + 1];
                    }
                ws_put_rows(Pb, x, f.x, f.y);
                ws_store_rows(R + ch * MAXBT * p.V, p.V, x, ci.n);
            }
            wg_proxy_fence();
            ws_arrive(WS_BAR_P, NL + 128);
        }
    } else {
        /* ---- the O warpgroup (reverse only): Ō_g = diag(scale·γ) Ō, the B operand of Qᵀ Ō_g, in Ō's copied layout: a
         * 16-B vector x holds eight columns of token (x / 8) % 64 */
        const int t = threadIdx.x & 127;
        for (int it = 0; it < nch; it++) {
            const int c = chunk_at(it), b = it & 1;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NA);
            const float *Gs = gates(b);
            const uint4 *src = reinterpret_cast<const uint4 *>(st + L::oX);
            uint4 *dst = reinterpret_cast<uint4 *>(Og);
#pragma unroll 2
            for (int m = 0; m < 2 * 64 * 64 / 8 / 128; m++) {
                const int x = t + 128 * m, j = (x >> 3) & 63;
                const float sc = p.scale * gexp(p, Gs[j]);
                uint4 u = src[x];
                uint32_t *w = reinterpret_cast<uint32_t *>(&u);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w[i]));
                    const __nv_bfloat162 r = __floats2bfloat162_rn(sc * a.x, sc * a.y);
                    w[i] = *reinterpret_cast<const uint32_t *>(&r);
                }
                dst[x] = u;
            }
            wg_proxy_fence();
            ws_arrive(WS_BAR_O, NL + 128);
        }
    }
#else
    (void)p, (void)m, (void)q, (void)k, (void)do_, (void)GB, (void)h0, (void)Sc, (void)R, (void)dht, (void)dh0, (void)Sbar;
    (void)PR, (void)nb;
#endif
}

/* Whether the forward pass's chain runs as this kernel (Plan::fwd_ws; the plan then also takes fwd_chain's stages:
 * kkt's G and A in bf16, without C_q). Where: the forward chain's shapes (bf16, chunk 64, K of 64 or 128) with V = 128,
 * an sm_90a binary, 16-B aligned q, k, v and o (NULL in a size query: the layout does not depend on this choice), and
 * the tiles in the device's shared memory. By default where the plan's forward chain takes 128-column blocks (the
 * large grids: chain_forward_bvc), for both operators: with C_q formed in the block it won against the register chain
 * there (H100, session 35, GPU-bound forward: GDN (8,2048,32) 0.734 → 0.675 ms, (16,1024,16) 0.388 → 0.368; DeltaNet
 * 0.627 → 0.601, 0.335 → 0.326). With C_q from kkt (session 34, H200) it won for GDN only and lost on the grids of
 * fewer blocks than SMs: (4,4096,16) 0.448 → 0.511 (64 blocks, each a walk of 64 chunks), (1,8192,16) 0.436 → 0.793
 * (16 blocks). force.fwd_ws = 1 takes it wherever it applies, 0 never; a forced forward chain (force.fwd_chain, the
 * tests of the register chain) keeps that chain. */
bool chain_forward_ws_fits(const Prob &p, rewy_dtype dt, bool vec, const void *q, const void *k, const void *v,
                           const void *o) {
    if (!ws_shapes_ok(p, dt, vec, p.Kp == 64 ? WsLayout<64>::TOTAL : WsLayout<128>::TOTAL)) return false;
    return !(((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)o) & 15);
}

bool chain_forward_ws(const Prob &p, rewy_dtype dt, bool vec, const void *q, const void *k, const void *v, const void *o,
                      int fwd_chain) {
    if (!chain_forward_ws_fits(p, dt, vec, q, k, v, o)) return false;
    const rewy_test_force &f = p.plan.force;
    if (f.fwd_ws != REWY_TEST_AUTO) return f.fwd_ws == 1 && f.fwd_chain != 0; /* a forced "no forward chain" wins */
    return f.fwd_chain == REWY_TEST_AUTO && (fwd_chain == 128 || fwd_chain == 64);
}

/* One launch of chain_ws_kernel (either form): a block per (sequence, value head, value tile of VT = 64 or 128 columns:
 * the plan's Plan::fwd_chain or Plan::rec_vt), K of KPC features */
template <int KPC, bool REC>
static cudaError_t launch_chain_ws(int VT, const Prob &p, const WsMaps &m, const void *q, const void *k, const void *v,
                                   const float *GB, cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R, void *o,
                                   cudaStream_t s, int nwin = 0, float *tout = nullptr) {
    auto go = [&](auto nh) -> cudaError_t {
        constexpr int NH = decltype(nh)::value;
        using L = WsLayout<KPC, NH>;
        cudaError_t e = ensure_smem<chain_ws_kernel<KPC, REC, NH>>(L::TOTAL);
        if (e != cudaSuccess) return e;
        const int nb = p.N * p.HV * (p.V / (64 * NH)); /* (the segments' walks: twice, the homogeneous grid after) */
        chain_ws_kernel<KPC, REC, NH><<<tout ? 2 * nb : nb, L::NT, L::TOTAL, s>>>(
            p, m, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, GB, Cq, h0, ht, Sc, R,
            (__nv_bfloat16 *)o, nwin, tout ? nb : INT_MAX, tout);
        return cudaGetLastError();
    };
    return VT == 64 ? go(std::integral_constant<int, 1>{}) : go(std::integral_constant<int, 2>{});
}

cudaError_t launch_chain_forward_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                                    const __nv_bfloat16 *Ab, cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R,
                                    void *o, cudaStream_t s) {
    if (p.V != 128 || p.K != p.Kp || (p.Kp != 64 && p.Kp != 128)) return cudaErrorInvalidValue;
    const TmaEncoder enc;
    WsMaps m{};
    if (!ws_token_map(enc, &m.k, p, k, p.H, p.K) || !ws_token_map(enc, &m.q, p, q, p.H, p.K) ||
        !ws_token_map(enc, &m.x, p, v, p.HV, p.V) || !ws_a_map(enc, &m.a, p, Ab) ||
        (Sc && !ws_slot_map(enc, &m.sc, Sc, (uint64_t)p.NC * p.HV * p.K, 128)))
        return cudaErrorInvalidValue;
    /* the plan's value tile (Plan::fwd_chain): 64 columns, two blocks a head, where 128 would leave SMs idle */
    const int vt = p.plan.fwd_chain == 64 ? 64 : 128;
    return p.Kp == 64 ? launch_chain_ws<64, false>(vt, p, m, q, k, v, GB, Cq, h0, ht, Sc, R, o, s)
                      : launch_chain_ws<128, false>(vt, p, m, q, k, v, GB, Cq, h0, ht, Sc, R, o, s);
}

/* The recompute form's launch: wherever the fused reverse pass runs under policy R (Plan::rev_ws: bf16, scalar gates,
 * K = V = 128, 16-B aligned k and v, an sm_90a binary; its block's shared memory is larger than this one's). Measured
 * against state_scan_wg.cu's recompute, which it replaced there (H100, session 45, GPU-bound backward): GDN (8,2048,32)
 * 1.477 → 1.423 ms, (16,1024,16) 0.782 → 0.748, (1,8192,16) 0.765 → 0.697, (2,16384,8) 1.371 → 1.246; DeltaNet 4–9 %
 * alike (docs/PERF.md). */
cudaError_t launch_recompute_ws(const Prob &p, const void *k, const void *v, const float *GB, const float *A,
                                const float *h0, state_t *Sc, rp_t *R, cudaStream_t s) {
    if (p.V != 128 || p.K != 128 || p.Kp != 128 || !Sc || !p.a16) return cudaErrorInvalidValue;
    const TmaEncoder enc;
    WsMaps m{};
    if (!ws_token_map(enc, &m.k, p, k, p.H, p.K) || !ws_token_map(enc, &m.x, p, v, p.HV, p.V) ||
        !ws_a_map(enc, &m.a, p, A) ||
        !ws_slot_map(enc, &m.sc, Sc, (uint64_t)chunk_slots(p) * p.HV * p.K, 128))
        return cudaErrorInvalidValue;
    return launch_chain_ws<128, true>(p.plan.rec_vt, p, m, nullptr, k, v, GB, nullptr, h0, nullptr, Sc, R, nullptr, s);
}

/* The segments' walks (the file-top comment) as the recompute form, 128 value columns a block: X_w into xs, T_w into t.
 * cudaErrorNotSupported where the tensor maps cannot be made (never where the plan runs the forward's segments:
 * chain_forward_ws_fits checked the pointers). Its problem ps: segment_prob's (each segment a sequence). The wgmma
 * scan's walks (state_scan_wg.cu) lost to it in session 52 and are gone. */
cudaError_t launch_seg_walks(const Prob &ps, int nwin, const void *k, const void *v, const float *GB, const float *A,
                             const float *h0, float *xs, float *t, cudaStream_t s) {
    if (ps.V != 128 || ps.K != 128 || ps.Kp != 128 || !ps.a16 || nwin < 1 || !xs || !t) return cudaErrorInvalidValue;
    const TmaEncoder enc;
    WsMaps m{};
    if (!ws_token_map(enc, &m.k, ps, k, ps.H, ps.K) || !ws_token_map(enc, &m.x, ps, v, ps.HV, ps.V) ||
        !ws_a_map(enc, &m.a, ps, A))
        return cudaErrorNotSupported;
    return launch_chain_ws<128, true>(128, ps, m, nullptr, k, v, GB, nullptr, h0, xs, nullptr, nullptr, nullptr, s, nwin,
                                      t);
}

/* Whether policy R's two chains run as chain_pair_ws_kernel (Plan::chain_ws; the plan then takes the register chains'
 * 128-column stages: kkt's W and U from the saved A, P = Aᵀ R̄ after it): bf16, chunk 64, K of 64 or 128, V = 128, an
 * sm_90a binary, the tiles in the device's shared memory. Blocks beyond the SMs run in waves (each is a whole walk),
 * so any grid. By default where the plan would run the register chains at 128 columns (chain_scan_bvc: their grid of
 * 2·N·HV blocks fits the SMs, and the mma.sync pair would take 64-column tiles), where it won (H200, session 34,
 * GPU-bound backward with the default time windows: GDN (4,4096,16) 1.649 → 1.377 ms, DeltaNet 1.509 → 1.292). It
 * lost against the wgmma scans on the large grids ((8,2048,32) 2.077 → 2.324, (16,1024,16) 1.072 → 1.200: two to four
 * waves of whole walks) and against the scan pair's 16-column tiles on the long ones ((1,8192,16) 1.004 → 1.419).
 * force.chain_ws = 1 takes it wherever it applies, 0 never; forced register chains (force.chain) keep those. No
 * pointer enters the choice, so the layout never depends on it; unaligned inputs fall back to chain_pair_kernel's
 * 128-column blocks at launch. */
bool chain_scan_ws(const Prob &p, rewy_dtype dt, bool vec, int chain_bvc) {
    if (!ws_shapes_ok(p, dt, vec, p.Kp == 64 ? WsPairLayout<64>::TOTAL : WsPairLayout<128>::TOTAL)) return false;
    const rewy_test_force &f = p.plan.force;
    if (f.chain_ws != REWY_TEST_AUTO) return f.chain_ws == 1 && f.chain != 0; /* a forced "no chains" wins */
    return f.chain == REWY_TEST_AUTO && chain_bvc == 128;
}

cudaError_t launch_chain_pair_ws(const Prob &p, const void *q, const void *k, const float *GB, const __nv_bfloat16 *W,
                                 const cq_t *Cq, const float *h0, state_t *Sc, rp_t *R, const void *do_,
                                 const float *dht, float *dh0, state_t *Sbar, rp_t *PR, cudaStream_t s) {
    if (p.V != 128 || p.K != p.Kp || (p.Kp != 64 && p.Kp != 128)) return cudaErrorInvalidValue;
    const int nb = p.N * p.HV;
    const TmaEncoder enc;
    WsMaps m{};
    const uint64_t rows = (uint64_t)chunk_slots(p) * p.HV * MAXBT; /* the workspaces' rows */
    if (!ws_token_map(enc, &m.k, p, k, p.H, p.K) || !ws_token_map(enc, &m.q, p, q, p.H, p.K) ||
        !ws_token_map(enc, &m.x, p, do_, p.HV, p.V) || !ws_slot_map(enc, &m.u, R, rows, 128) ||
        !ws_slot_map(enc, &m.a, W, rows, p.K) || !ws_slot_map(enc, &m.c, Cq, rows, MAXBT) ||
        !ws_slot_map(enc, &m.sc, Sc, rows / MAXBT * p.K, 128) || !ws_slot_map(enc, &m.sb, Sbar, rows / MAXBT * p.K, 128))
        return cudaErrorInvalidValue;
    auto go = [&](auto kp) -> cudaError_t {
        constexpr int KPC = decltype(kp)::value;
        constexpr size_t smem = WsPairLayout<KPC>::TOTAL;
        cudaError_t e = ensure_smem<chain_pair_ws_kernel<KPC>>(smem);
        if (e != cudaSuccess) return e;
        chain_pair_ws_kernel<KPC><<<2 * nb, WsLayout<KPC>::NT, smem, s>>>(
            p, m, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)do_, GB, h0, Sc, R, dht, dh0,
            Sbar, PR, nb);
        return cudaGetLastError();
    };
    return p.Kp == 64 ? go(std::integral_constant<int, 64>{}) : go(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
