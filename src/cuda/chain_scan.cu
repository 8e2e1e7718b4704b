/* chain_scan.cu: policy R's two chunk chains in register form, FLA's h and dhu chains, for the bf16 scalar-gate
 * fast path on small grids (chain_scan_bvc). One launch: blocks [0, nb) run the reverse scan, [nb, 2nb) the
 * forward recompute; both walk one sequence's chunks for one value head and BVC value columns, one warp per 16
 * columns, the state tile of each warp in its registers for the whole chain.
 *
 * Forward (MATH §2), W = A E and U = A Z from kkt_inverse (U written over R's region, R then written in place):
 *   store S_c;   R = U − W S;   store R;   S ← γ_n S + Fᵀ R,   F_j = k_j e^{G_n − G_j} (j < n)
 * (the forward pass's chain below takes R = A diag(β)(V − γ ⊙ K S) instead, the same R)
 * Reverse (MATH §3, §4b (1), §5 in the W form, as bwd_state_scan.cuh's WF chain):
 *   store S̄⁺;   R̄ = F S̄⁺ + C_qᵀ Ō;   store R̄;   S̄ ← γ_n S̄⁺ + Q_gᵀ Ō − Wᵀ R̄,   Q_g = scale·γ ⊙ q
 * and dh0 = S̄ at the sequence start; P = Aᵀ R̄ follows in parallel (launch_p_from_rbar).
 * The forward pass (launch_chain_forward: the forward chain alone, on blocks of 16 to 64 columns) also forms the
 * output in the same step, from the same register operands (MATH §2):
 *   Oᵀ = diag(scale·γ) ⊙ (S_cᵀ Qᵀ) + Rᵀ C_qᵀ,
 * whose products do not feed the chain: they fill its latency. S_c and R are stored only where policy A saves them.
 * It forms R in the A-and-V form, FlashQLA's: R = A diag(β)(V − γ ⊙ K S), with A in bf16 (the saved A, Prob::a16)
 * and V the input, so kkt forms no W or U, and a step reads K, V, A, Q and C_q: 56 KB at 64 columns against 64 KB
 * with W and U, for one more dependent product a step (Yᵀ Aᵀ, 32 mma a warp). Measured (H100, session 31, GDN
 * (4,4096,16)): kkt 215 → 143 µs, the chain 258 → 307 µs, the forward 0.473 → 0.452 ms GPU-bound.
 *
 * Why registers: a warp holds the transposed state Sᵀ (its 16 value columns × K) as mma accumulators. The
 * accumulator layout of m16n8k16 is the layout of its A operand, so every product whose left factor is the
 * state or R (Sᵀ Wᵀ, Rᵀ F, S̄ᵀ Fᵀ, R̄ᵀ W) takes it straight from the registers, rounded to bf16, with
 * no shared-memory round trip and no barrier between the products. The warps of a block share only the
 * chunk's input tiles (K, W, U; K, Q, W, Ō, C_q; the forward pass: K, A, V, Q, C_q), double-buffered: one
 * barrier per chunk, after which the next chunk's copies are issued, so each has a whole step to land. On sm_90 the
 * pair's full chunks come in by bulk copies (the plan's chain_bulk; below, at issue). */
#include "kernels.cuh"

namespace rewy_cuda {

using bf16 = __nv_bfloat16;

/* Row stride, bytes, of a warp's staging tile for its transposed stores (store_staged): 32 B of data (16 value columns),
 * rows 16-B aligned, and the eight rows of one 8 × 8 block of stmatrix in distinct banks */
constexpr int STG_LD = 48;

/* Shared memory of a chain block, bytes: two stages of the larger of the two chains' tile sets (the forward pass's
 * chain uses them all: K, A in W's place, V in U's, G and β, Q and C_q), then the warps' staging tiles */
template <int KS, int BVC> struct ChainLayout {
    static constexpr int LDK = KS + 8, LDV = BVC + 8;
    static constexpr int KT = MAXBT * LDK * 2;  /* a [64][KS] bf16 tile (K, Q, W) */
    static constexpr int VT = MAXBT * LDV * 2;  /* a [64][BVC] bf16 tile (U, Ō) */
    static constexpr int CT = MAXBT * LDA * 2;  /* C_q [64][64] (LDA = 72) */
    static constexpr int GBB = 2 * MAXBT * 4;   /* G, β */
    /* offsets in a stage: K, W, X (U or Ō), GB, then Q, C_q (the reverse scan's; the forward pass's output) */
    static constexpr int oK = 0, oW = KT, oX = 2 * KT, oGB = 2 * KT + VT, oQ = oGB + GBB, oC = oQ + KT;
    static constexpr int STAGE = oC + CT;
    /* each warp's staging tile: KS rows (S_c, S̄⁺; R, R̄ use 64) */
    static constexpr int STG = KS * STG_LD, oSTG = 2 * STAGE;
    static constexpr int TOTAL = oSTG + (BVC / 16) * STG;
    /* the two stages' mbarriers (the pair's bulk copies on sm_90) in the last 16 B of warp 0's first staging row, which
     * store_staged never touches (32 B of data a row): no bytes more, so that the 64-column blocks still fit an A100 */
    static constexpr int oMB = oSTG + 32;
    static_assert(STG_LD - 32 >= 16, "ChainLayout: the mbarriers need 16 B of a staging row's padding");
};
/* ChainLayout's TOTAL for a runtime K tile (64, 128) and width (16 … 128 columns) */
inline size_t chain_smem(int kp, int bvc) {
    auto by_bvc = [&](auto ks) -> size_t {
        constexpr int KS = decltype(ks)::value;
        return bvc == 16 ? ChainLayout<KS, 16>::TOTAL : bvc == 32 ? ChainLayout<KS, 32>::TOTAL
               : bvc == 64 ? ChainLayout<KS, 64>::TOTAL : ChainLayout<KS, 128>::TOTAL;
    };
    return kp == 64 ? by_bvc(std::integral_constant<int, 64>{}) : by_bvc(std::integral_constant<int, 128>{});
}

__device__ __forceinline__ uint32_t pack_bf2(float x, float y) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t *>(&h);
}
__device__ __forceinline__ float2 unpack_bf2(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}

__device__ __forceinline__ void cp16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

/* A full chunk's [64][NC] tile of 16-B vectors, row stride rs elements in global memory and LD in shared memory.
 * Thread x's vectors sit in one column, RS rows apart, so each is an address add and one cp.async: copy_tile_k's
 * bounds, alignment and zero-fill tests (for tails and odd strides) cost ten instructions per vector, and with them
 * the copies were a third of the chains' instructions (Nsight, session 17). The caller checks 16-B alignment. */
template <int NC, int LD, int NTH, class E>
__device__ __forceinline__ void lean_tile(E *dst, const E *src, size_t rs) {
    constexpr int EPV = 16 / sizeof(E), GV = NC / EPV, RS = NTH / GV, IT = MAXBT / RS;
    static_assert(NC % EPV == 0 && NTH % GV == 0 && IT * RS == MAXBT, "lean_tile: tile and threads do not divide");
    const int i = threadIdx.x / GV, c = (threadIdx.x % GV) * EPV;
    const E *s = src + (size_t)i * rs + c;
    const unsigned d = smem_u32(dst + i * LD + c);
#pragma unroll
    for (int m = 0; m < IT; m++) cp16(d + m * RS * LD * (int)sizeof(E), s + (size_t)m * RS * rs);
}

/* acc[s] (s < NB: the warp's 16 × 8 column blocks) += A · B, A the warp's 16 × 16·KST operand given per k step
 * by afrag(ks, a) (an m16n8k16 A fragment), B in shared memory: BT = false stored [n][k] (row n, k contiguous),
 * BT = true stored [k][n] (ldmatrix.trans) */
template <int NB, bool BT>
__device__ __forceinline__ void mma_kstep(float (&acc)[NB][4], const uint32_t (&a)[4], const bf16 *B, int ldb, int ks) {
    const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
    const bf16 *bp = BT ? B + (r + (m & 1) * 8) * ldb + (m >> 1) * 8 : B + (r + (m >> 1) * 8) * ldb + (m & 1) * 8;
    uint32_t b[NB / 2][4];
    /* all of the k step's B fragments first: the loads (in program order, asm volatile) then overlap, and the
     * products wait once per k step instead of once per pair of column blocks */
#pragma unroll
    for (int s = 0; s < NB; s += 2) {
        if (BT) ldsm_x4_t(b[s / 2], bp + 16 * ks * ldb + 8 * s);
        else ldsm_x4(b[s / 2], bp + 8 * s * ldb + 16 * ks);
    }
#pragma unroll
    for (int s = 0; s < NB; s += 2) {
        mma_bf16(acc[s], a, b[s / 2][0], b[s / 2][1]);
        mma_bf16(acc[s + 1], a, b[s / 2][2], b[s / 2][3]);
    }
}
template <int NB, int KST, bool BT, class AF>
__device__ __forceinline__ void chain_mma(float (&acc)[NB][4], AF afrag, const bf16 *B, int ldb) {
#pragma unroll
    for (int ks = 0; ks < KST; ks++) {
        uint32_t a[4];
        afrag(ks, a);
        mma_kstep<NB, BT>(acc, a, B, ldb, ks);
    }
}

/* The A fragment of k step ks from accumulators X (16 × 8·NB, the layout chain_mma writes), scaled by sgn */
template <int NB>
__device__ __forceinline__ void acc_afrag(const float (&X)[NB][4], int ks, uint32_t (&a)[4], float sgn = 1.f) {
    a[0] = pack_bf2(sgn * X[2 * ks][0], sgn * X[2 * ks][1]);
    a[1] = pack_bf2(sgn * X[2 * ks][2], sgn * X[2 * ks][3]);
    a[2] = pack_bf2(sgn * X[2 * ks + 1][0], sgn * X[2 * ks + 1][1]);
    a[3] = pack_bf2(sgn * X[2 * ks + 1][2], sgn * X[2 * ks + 1][3]);
}
/* The A fragment of k step ks of Xᵀ, X stored [k][i] in shared memory (Xᵀ rows i0…i0+15): ldmatrix.trans */
__device__ __forceinline__ void smem_afrag_t(const bf16 *X, int ldx, int i0, int ks, uint32_t (&a)[4]) {
    const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
    ldsm_x4_t(a, X + (16 * ks + r + (m >> 1) * 8) * ldx + i0 + (m & 1) * 8);
}

/* Stores this warp's 16 × 8·NB accumulator tile X (rows: value columns vw + g, + 8; columns: n·8 + 2t, + 1 of the
 * other index) to dst[col * ld + row] as bf16 (ld: dst's row stride, elements): the saved chunk states ([K][V]) and R, R̄ ([token][V]); columns (rows
 * of dst) from nmax on are skipped (V is a multiple of the block's columns: no row check). Neighbouring lanes (g, g + 1)
 * trade one value each, so that every lane stores two adjacent value columns in one 4-byte store. */
template <int NB>
__device__ __forceinline__ void store_t(const float (&X)[NB][4], bf16 *dst, size_t ld, int vw, int nmax) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, odd = g & 1;
    /* one base per lane; the (s, h) offsets are compile-time where ld is (the chunk tiles), one store each */
    bf16 *d0 = dst + (size_t)(2 * t + odd) * ld + vw + (g & ~1);
    const bool all = nmax >= 8 * NB;
#pragma unroll
    for (int s = 0; s < NB; s++) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* rows g (h = 0) and g + 8 */
            /* even g keeps column 2t and takes the odd neighbour's; odd g keeps 2t + 1 and takes the even one's */
            const float x0 = X[s][2 * h], x1 = X[s][2 * h + 1]; /* selects, not a lane-dependent index (local memory) */
            const float mine = odd ? x1 : x0, give = odd ? x0 : x1;
            const float got = __shfl_xor_sync(0xffffffffu, give, 4);
            if (all || 8 * s + 2 * t + odd < nmax)
                *reinterpret_cast<__nv_bfloat162 *>(d0 + 8 * s * ld + 8 * h) =
                    odd ? __floats2bfloat162_rn(got, mine) : __floats2bfloat162_rn(mine, got);
        }
    }
}

#if __CUDA_ARCH__ >= 900
/* store_t through the warp's staging tile stg (sm_90: stmatrix): stmatrix.trans writes each 8 × 8 block of X transposed,
 * so a staging row is one index of dst's rows (k, or a token) with the warp's 16 value columns; then every lane stores
 * whole 16-B vectors, each row of dst getting one full 32-B sector. store_t's shuffles, selects and 4-B stores (half
 * sectors) took 8 instructions per 4 B. Rows from nmax on are skipped. */
template <int NB>
__device__ __forceinline__ void store_staged(const float (&X)[NB][4], char *stg, bf16 *dst, size_t ld, int vw, int nmax) {
    constexpr int SLD = STG_LD, ROWS = 8 * NB;
    const int lane = threadIdx.x & 31, j = lane >> 3, r = lane & 7;
    /* lane 8j + r addresses row r of the x4's matrix j: (X[s], rows g) j = 0, (X[s], rows g + 8) j = 1, then X[s + 1] */
    const unsigned a = smem_u32(stg) + (8 * (j >> 1) + r) * SLD + (j & 1) * 16;
    __syncwarp(); /* the lanes' reads of the previous staged store are done */
#pragma unroll
    for (int s = 0; s < NB; s += 2)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a + 8 * s * SLD),
                     "r"(pack_bf2(X[s][0], X[s][1])), "r"(pack_bf2(X[s][2], X[s][3])), "r"(pack_bf2(X[s + 1][0], X[s + 1][1])),
                     "r"(pack_bf2(X[s + 1][2], X[s + 1][3])) : "memory");
    __syncwarp();
    /* every shared read first, then the stores: interleaved, each store waited on its own read (7 % of the pair's
     * stall samples were such short-scoreboard waits, Nsight, session 23) */
    constexpr int IT = 2 * ROWS / 32;
    static_assert(IT * 32 == 2 * ROWS, "store_staged: 16 rows per lane pair");
    uint4 x[IT];
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int e = lane + 32 * i;
        x[i] = *reinterpret_cast<const uint4 *>(stg + (e >> 1) * SLD + 16 * (e & 1));
    }
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int e = lane + 32 * i, row = e >> 1;
        if (row < nmax) *reinterpret_cast<uint4 *>(dst + (size_t)row * ld + vw + 8 * (e & 1)) = x[i];
    }
}
#endif

/* The transposed store of a warp's accumulator tile: staged on sm_90, store_t's shuffles on sm_80 */
template <int NB>
__device__ __forceinline__ void store_acc(const float (&X)[NB][4], char *stg, bf16 *dst, size_t ld, int vw, int nmax) {
#if __CUDA_ARCH__ >= 900
    store_staged<NB>(X, stg, dst, ld, vw, nmax);
#else
    (void)stg;
    store_t<NB>(X, dst, ld, vw, nmax);
#endif
}

/* PAIR: blocks [0, nb) the reverse chain, [nb, 2nb) the forward (policy R's recompute: S_c and R for the pullback);
 * else every block the forward pass's chain with its output (FO), which also stores the final state ht. W, U: the
 * pair's, kkt's ([chunk][hv][64][K] and [64][V]; U in R's region, R written in its place); FO's (the A-and-V form):
 * A in bf16 ([chunk][hv][64][64]: the saved A, Prob::a16) and the input v ([token][HV][V]). Sc, R: NULL where nothing reads them (the
 * forward pass under policy R). The pointers are separate parameters: in one struct (by value) the compiler held
 * them in registers (the pair: 252 registers a thread, 216 without). */
template <int KS, int BVC, int VV, bool PAIR>
__global__ void __launch_bounds__(BVC * 2)
chain_pair_kernel(Prob p, const bf16 *q, const bf16 *k, const float *GB, const bf16 *W, const bf16 *U, const cq_t *Cq,
                  const float *h0, state_t *Sc, rp_t *R, const bf16 *do_, const float *dht, float *dh0, state_t *Sbar,
                  rp_t *PR, int nb, bool lean, bool bulk_on, float *ht, bf16 *o) {
    constexpr bool FO = !PAIR;
    using L = ChainLayout<KS, BVC>;
    constexpr int NK = KS / 8;   /* 8-column blocks of the state tile (over K) */
    constexpr int NT = MAXBT / 8; /* … of R, R̄ (over the chunk's tokens) */
    constexpr int NTH = BVC * 2;  /* threads: one warp per 16 value columns */
    extern __shared__ __align__(16) char smc[];
    const bool rev = PAIR && (int)blockIdx.x < nb;
    const int bid = rev ? blockIdx.x : blockIdx.x - nb;
    const int nvt = ceil_div(p.V, BVC), sh = bid / nvt;
    const int sq = sh / p.HV, hv = sh % p.HV, v0 = (bid % nvt) * BVC, h = hv / p.G;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int vw = v0 + 16 * warp; /* this warp's first value column */
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    int c_begin, c_end;
    seq_chunks(p, sq, c_begin, c_end);
    if (c_end <= c_begin) return;

    /* the state tile: element (value column vw + g (+8), k = 8s + 2t (+1)) at S[s][e]; its index in h0, dht, dh0 */
    float S[NK][4];
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    auto sidx = [&](int s, int e) { return sbase + st_idx(p, 8 * s + 2 * t + (e & 1), vw + g + 8 * (e >> 1)); };
    {
        const float *src = rev ? dht : h0;
#pragma unroll
        for (int s = 0; s < NK; s++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[s][e] = src ? src[sidx(s, e)] : 0.f;
    }
    char *stg = smc + L::oSTG + warp * L::STG;
    auto stage = [&](int b) { return smc + b * L::STAGE; };
#if __CUDA_ARCH__ >= 900
    /* the pair's full chunks come into stage b by bulk copies on mbarrier b, which every thread arrives on once a chunk;
     * bulk_on: the plan's chain_bulk with aligned rows (the launcher's lean) */
    constexpr bool BULK = PAIR;
    auto mbar = [&](int b) { return smem_u32(smc + L::oMB + 8 * b); };
    if (BULK && bulk_on) {
        if (threadIdx.x == 0) {
            mbar_init(mbar(0), NTH);
            mbar_init(mbar(1), NTH);
            mbar_init_fence();
        }
        __syncthreads();
    }
    unsigned ph = 0; /* bit b: the parity of stage b's next bulk phase */
#else
    constexpr bool BULK = false;
#endif
    /* whether chunk entry cj's tiles come in by bulk copies (its issue and its wait) */
    auto bulk_chunk = [&](const ChunkInfo &cj) { return BULK && bulk_on && cj.n == MAXBT; };
    /* chunk c's tiles into stage b: K, W, U (forward; with Q and C_q for FO's output) or Ō, Q, C_q (reverse), G, β */
    auto issue = [&](int c, int b, const ChunkInfo &cj) {
        /* G, β by chunk; W, U, C_q (kkt's, of the backward's window) by workspace slot */
        const size_t ch = (size_t)c * p.HV + hv, cw = (size_t)chunk_slot(p, c, cj) * p.HV + hv;
        const bool qc = rev || FO; /* Q and C_q: the reverse scan's; the forward pass's output */
        char *st = stage(b);
        /* G and β: 512 B, the first 32 threads (the bulk copies below: one) */
        const bool bulk = bulk_chunk(cj);
        if (!bulk && threadIdx.x < 2 * MAXBT / 4)
            cp16(smem_u32(st + L::oGB) + 16 * threadIdx.x, GB + ch * 2 * MAXBT + 4 * threadIdx.x);
#if __CUDA_ARCH__ >= 900
        /* a full chunk of aligned rows (the pair on sm_90): one bulk copy a tile row, the block's threads taking the rows
         * of the tiles in turn (G and β: the last thread), in place of lean_tile's 16-B cp.async, 12–32 a thread a step
         * with their 64-bit addresses. Tiles: K, W, X (Ō or U), then the reverse chain's Q and C_q. Measured (H100,
         * session 33, GPU-bound backward at (4,4096,16)): GDN 1.833 → 1.764 ms, DeltaNet 1.715 → 1.618. The forward
         * pass's chain lost with them (GDN forward 0.452 → 0.580 ms at 64 columns: 320 copies of 128–256 B a step), so
         * it keeps lean_tile. */
        if (bulk) {
            const int ntl = rev ? 5 : 3;
            /* the bytes of a row of tile tl: K, W, Q rows of KS, Ō or U rows of BVC, C_q rows of 64 elements */
            auto row_bytes = [&](int tl) { return 2u * (tl == 2 ? BVC : tl == 4 ? MAXBT : KS); };
            /* this thread's rows: r ≡ threadIdx.x (mod NTH) over the tiles' 64·ntl rows; first their bytes */
            unsigned bytes = threadIdx.x == NTH - 1 ? 2 * MAXBT * 4 : 0;
            for (int r = threadIdx.x; r < MAXBT * ntl; r += NTH) bytes += row_bytes(r / MAXBT);
            const unsigned mb = mbar(b);
            mbar_expect(mb, bytes);
            bulk_fence(); /* the block barrier before issue ordered every read of this stage before these writes */
            for (int r = threadIdx.x; r < MAXBT * ntl; r += NTH) {
                const int tl = r / MAXBT, i = r % MAXBT;
                unsigned d;       /* row i of tile tl: its shared address and its source */
                const bf16 *gs;
                if (tl == 0 || tl == 3) { /* K, Q */
                    d = smem_u32(st + (tl ? L::oQ : L::oK)) + i * L::LDK * 2;
                    gs = (tl ? q : k) + ((size_t)(cj.tok0 + i) * p.H + h) * p.K;
                } else if (tl == 1) { /* W */
                    d = smem_u32(st + L::oW) + i * L::LDK * 2;
                    gs = W + (cw * MAXBT + i) * KS;
                } else if (tl == 2) { /* Ō, U */
                    d = smem_u32(st + L::oX) + i * L::LDV * 2;
                    gs = rev ? do_ + (size_t)(cj.tok0 + i) * rsv + (size_t)hv * p.V + v0 : U + (cw * MAXBT + i) * VV + v0;
                } else { /* C_q */
                    d = smem_u32(st + L::oC) + i * LDA * 2;
                    gs = Cq + (cw * MAXBT + i) * MAXBT;
                }
                bulk_g2s(d, gs, row_bytes(tl), mb);
            }
            if (threadIdx.x == NTH - 1) bulk_g2s(smem_u32(st + L::oGB), GB + ch * 2 * MAXBT, 2 * MAXBT * 4, mb);
            return;
        }
#endif
        if (lean && cj.n == MAXBT) {
            lean_tile<KS, L::LDK, NTH>(reinterpret_cast<bf16 *>(st + L::oK), k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk);
            if (FO) /* A in bf16 in W's place, [64][LDA] */
                lean_tile<MAXBT, LDA, NTH>(reinterpret_cast<bf16 *>(st + L::oW), W + cw * MAXBT * MAXBT, MAXBT);
            else
                lean_tile<KS, L::LDK, NTH>(reinterpret_cast<bf16 *>(st + L::oW), W + cw * MAXBT * KS, KS);
            if (rev)
                lean_tile<BVC, L::LDV, NTH>(reinterpret_cast<bf16 *>(st + L::oX),
                                            do_ + (size_t)cj.tok0 * rsv + (size_t)hv * p.V + v0, rsv);
            else if (FO) /* V's columns in U's place */
                lean_tile<BVC, L::LDV, NTH>(reinterpret_cast<bf16 *>(st + L::oX),
                                            U + (size_t)cj.tok0 * rsv + (size_t)hv * p.V + v0, rsv);
            else
                lean_tile<BVC, L::LDV, NTH>(reinterpret_cast<bf16 *>(st + L::oX), U + cw * MAXBT * VV + v0, VV);
            if (qc) {
                lean_tile<KS, L::LDK, NTH>(reinterpret_cast<bf16 *>(st + L::oQ), q + ((size_t)cj.tok0 * p.H + h) * p.K, rsk);
                lean_tile<MAXBT, LDA, NTH>(reinterpret_cast<cq_t *>(st + L::oC), Cq + cw * MAXBT * MAXBT, MAXBT);
            }
            cp_async_commit();
            return;
        }
        /* a sequence's last, partial chunk, or unaligned inputs: bounds-checked, zero-filled copies */
        copy_tile_k<bf16, MAXBT, KS, NTH>(reinterpret_cast<bf16 *>(st + L::oK), L::LDK, MAXBT, KS,
                                          k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
        if (FO)
            copy_tile_k<bf16, MAXBT, MAXBT, NTH>(reinterpret_cast<bf16 *>(st + L::oW), LDA, MAXBT, MAXBT,
                                                 W + cw * MAXBT * MAXBT, MAXBT, MAXBT, 0, MAXBT);
        else
            copy_tile_k<bf16, MAXBT, KS, NTH>(reinterpret_cast<bf16 *>(st + L::oW), L::LDK, MAXBT, KS, W + cw * MAXBT * KS,
                                              KS, MAXBT, 0, KS);
        if (rev)
            copy_tile_k<bf16, MAXBT, BVC, NTH>(reinterpret_cast<bf16 *>(st + L::oX), L::LDV, MAXBT, BVC,
                                               do_ + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n, v0, p.V);
        else if (FO) /* V: the input, [token][HV][V] */
            copy_tile_k<bf16, MAXBT, BVC, NTH>(reinterpret_cast<bf16 *>(st + L::oX), L::LDV, MAXBT, BVC,
                                               U + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n, v0, p.V);
        else /* U: kkt_inverse's, [chunk][hv][64][V] */
            copy_tile_k<bf16, MAXBT, BVC, NTH>(reinterpret_cast<bf16 *>(st + L::oX), L::LDV, MAXBT, BVC,
                                               U + cw * MAXBT * p.V, p.V, MAXBT, v0, p.V);
        if (qc) {
            copy_tile_k<bf16, MAXBT, KS, NTH>(reinterpret_cast<bf16 *>(st + L::oQ), L::LDK, MAXBT, KS,
                                              q + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
            scan_copy_nn<MAXBT, NTH>(reinterpret_cast<cq_t *>(st + L::oC), Cq, p, hv, MAXBT, chunk_slot(p, c, cj));
        }
        cp_async_commit();
    };

    const int nch = c_end - c_begin;
    /* the it-th chunk of the walk */
    auto chunk_at = [&](int it) { return rev ? c_end - 1 - it : c_begin + it; };
    /* chunk-table entries: this step's (ci), the next one's (cn, whose copies this step issues) and the one after
     * (cnn), loaded a step ahead. Loaded where the copies needed it, the entry's global-load latency preceded every
     * step's copy addresses: 18 % of the pair's stall samples were long-scoreboard waits, on those addresses (Nsight,
     * GDN (4,4096,16), session 23). */
    ChunkInfo cn = p.ctab[chunk_at(0)];
    ChunkInfo cnn = nch > 1 ? p.ctab[chunk_at(1)] : cn;
    issue(chunk_at(0), 0, cn);
    for (int it = 0; it < nch; it++) {
        const int c = chunk_at(it), b = it & 1;
        const ChunkInfo ci = cn;
        const ChunkInfo c3 = it + 2 < nch ? p.ctab[chunk_at(it + 2)] : cnn; /* used a step later */
        const int n = ci.n;
        const size_t ch = (size_t)chunk_slot(p, c, ci) * p.HV + hv; /* S_c, R, S̄⁺, R̄: by workspace slot */
        cp_async_wait_group<0>();
#if __CUDA_ARCH__ >= 900
        if (bulk_chunk(ci)) { /* issued by bulk copies: wait for stage b's phase */
            mbar_wait(mbar(b), (ph >> b) & 1);
            ph ^= 1u << b;
        }
#endif
        __syncthreads(); /* chunk c's tiles are in; every warp is done with the other stage (the step before) */
        cn = cnn;
        cnn = c3;
        if (it + 1 < nch) issue(chunk_at(it + 1), b ^ 1, cn);
        const char *st = stage(b);
        const bf16 *Ks = reinterpret_cast<const bf16 *>(st + L::oK), *Ws = reinterpret_cast<const bf16 *>(st + L::oW);
        const bf16 *Xs = reinterpret_cast<const bf16 *>(st + L::oX);
        const bf16 *Qs = reinterpret_cast<const bf16 *>(st + L::oQ); /* Q, C_q: the reverse chain's; FO's output */
        const cq_t *Cs = reinterpret_cast<const cq_t *>(st + L::oC);
        const float *Gs = reinterpret_cast<const float *>(st + L::oGB);
        const float gl = Gs[n - 1], gn = gexp(p, gl);
        float X[NT][4] = {}; /* Rᵀ / R̄ᵀ: value columns × tokens */
        /* F's row factor e^{G_n − G_j} (0 from n on) at this lane's token columns 8s + 2t (+1); DeltaNet's full
         * chunks have none, and no γ_n (uniform branches around those multiplications) */
        auto fdec = [&](int j) { return j < n ? gexp(p, gl - Gs[j]) : 0.f; };
        const bool plain = !p.gated && n == MAXBT;
        /* an accumulator over the chunk's tokens (value columns × tokens) times f(j) on token column j */
        auto scale_tokens = [&](float (&A)[NT][4], auto f) {
#pragma unroll
            for (int s = 0; s < NT; s++) {
                const float f0 = f(8 * s + 2 * t), f1 = f(8 * s + 2 * t + 1);
                A[s][0] *= f0; A[s][1] *= f1; A[s][2] *= f0; A[s][3] *= f1;
            }
        };
        auto scale_cols = [&]() {
            if (!plain) scale_tokens(X, fdec);
        };
        auto decay_state = [&]() {
            if (!p.gated) return;
#pragma unroll
            for (int s = 0; s < NK; s++)
#pragma unroll
                for (int e = 0; e < 4; e++) S[s][e] *= gn;
        };

        /* the incoming state (S_c) or the outgoing state's gradient (S̄⁺), for the pullback (S_c: the pair's, and
         * the forward pass's under policy A) */
        state_t *const sdst = rev ? Sbar : Sc;
        if (PAIR || sdst) store_acc<NK>(S, stg, sdst + ch * KS * VV, VV, vw, KS);

        if (!rev) {
            float O[NT][4] = {}; /* FO: Oᵀ, value columns × tokens */
            /* the pair: Rᵀ = Uᵀ − Sᵀ Wᵀ: Sᵀ Wᵀ, then U (A-fragment order = accumulator order) from the stage minus it.
             * FO: Xᵀ = Sᵀ Kᵀ, and Oᵀ = Sᵀ Qᵀ from the same fragments of S = S_c, its products between the chain's */
            if constexpr (FO) {
#pragma unroll
                for (int ks = 0; ks < KS / 16; ks++) {
                    uint32_t af[4];
                    acc_afrag<NK>(S, ks, af);
                    mma_kstep<NT, false>(X, af, Ks, L::LDK, ks);
                    mma_kstep<NT, false>(O, af, Qs, L::LDK, ks);
                }
            } else {
                chain_mma<NT, KS / 16, false>(X, [&](int ks, uint32_t (&a)[4]) { acc_afrag<NK>(S, ks, a); }, Ws, L::LDK);
            }
            if constexpr (FO) {
                /* Rᵀ = (diag(β)(V − γ ⊙ X))ᵀ Aᵀ: the bracket Y per token column j = 16ks + 2t (+1, +8, +9), from V's
                 * tile in the stage, rounded to bf16 A fragments (acc_afrag's order); then R = A Y into X */
                const float *bs = Gs + MAXBT;
                uint32_t yf[NT / 2][4];
#pragma unroll
                for (int ks = 0; ks < NT / 2; ks++) {
                    uint32_t a[4];
                    smem_afrag_t(Xs, L::LDV, 16 * warp, ks, a);
                    const int j0 = 16 * ks + 2 * t, j1 = j0 + 8;
                    const float g0 = gexp(p, Gs[j0]), g1 = gexp(p, Gs[j0 + 1]), g2 = gexp(p, Gs[j1]), g3 = gexp(p, Gs[j1 + 1]);
                    const float b0 = bs[j0], b1 = bs[j0 + 1], b2 = bs[j1], b3 = bs[j1 + 1];
                    const float2 v0_ = unpack_bf2(a[0]), v1_ = unpack_bf2(a[1]), v2_ = unpack_bf2(a[2]), v3_ = unpack_bf2(a[3]);
                    yf[ks][0] = pack_bf2(b0 * (v0_.x - g0 * X[2 * ks][0]), b1 * (v0_.y - g1 * X[2 * ks][1]));
                    yf[ks][1] = pack_bf2(b0 * (v1_.x - g0 * X[2 * ks][2]), b1 * (v1_.y - g1 * X[2 * ks][3]));
                    yf[ks][2] = pack_bf2(b2 * (v2_.x - g2 * X[2 * ks + 1][0]), b3 * (v2_.y - g3 * X[2 * ks + 1][1]));
                    yf[ks][3] = pack_bf2(b2 * (v3_.x - g2 * X[2 * ks + 1][2]), b3 * (v3_.y - g3 * X[2 * ks + 1][3]));
                }
#pragma unroll
                for (int s = 0; s < NT; s++) X[s][0] = X[s][1] = X[s][2] = X[s][3] = 0.f;
#pragma unroll
                for (int ks = 0; ks < NT / 2; ks++) mma_kstep<NT, false>(X, yf[ks], Ws, LDA, ks);
            } else {
#pragma unroll
                for (int ks = 0; ks < NT / 2; ks++) {
                    uint32_t a[4];
                    smem_afrag_t(Xs, L::LDV, 16 * warp, ks, a);
                    const float2 x0 = unpack_bf2(a[0]), x1 = unpack_bf2(a[1]), x2 = unpack_bf2(a[2]), x3 = unpack_bf2(a[3]);
                    X[2 * ks][0] = x0.x - X[2 * ks][0]; X[2 * ks][1] = x0.y - X[2 * ks][1];
                    X[2 * ks][2] = x1.x - X[2 * ks][2]; X[2 * ks][3] = x1.y - X[2 * ks][3];
                    X[2 * ks + 1][0] = x2.x - X[2 * ks + 1][0]; X[2 * ks + 1][1] = x2.y - X[2 * ks + 1][1];
                    X[2 * ks + 1][2] = x3.x - X[2 * ks + 1][2]; X[2 * ks + 1][3] = x3.y - X[2 * ks + 1][3];
                }
            }
            if (PAIR || R) store_acc<NT>(X, stg, R + ch * MAXBT * VV, VV, vw, n);
            if constexpr (FO) {
                /* Q_g = scale·γ ⊙ q: O's token column j times scale·γ_j (output.cu's epilogue); then R's fragments,
                 * before F scales its columns, for C_q R */
                scale_tokens(O, [&](int j) { return p.scale * gexp(p, Gs[j]); });
                uint32_t rf[NT / 2][4];
#pragma unroll
                for (int ks = 0; ks < NT / 2; ks++) acc_afrag<NT>(X, ks, rf[ks]);
                scale_cols();
                decay_state();
                /* S ← γ_n S + Fᵀ R (the chain), and beside it Oᵀ += Rᵀ C_qᵀ; then O leaves (rows from n on: none) */
#pragma unroll
                for (int ks = 0; ks < NT / 2; ks++) {
                    uint32_t af[4];
                    acc_afrag<NT>(X, ks, af);
                    mma_kstep<NK, true>(S, af, Ks, L::LDK, ks);
                    mma_kstep<NT, false>(O, rf[ks], Cs, LDA, ks);
                }
                store_acc<NT>(O, stg, o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V, rsv, vw, n);
                if (float *ck = window_checkpoint(p, c_begin, c, c_end)) /* a time window's start state */
#pragma unroll
                    for (int s = 0; s < NK; s++)
#pragma unroll
                        for (int e = 0; e < 4; e++) ck[sidx(s, e)] = S[s][e];
            } else {
                /* S ← γ_n S + Fᵀ R:  Sᵀ ← γ_n Sᵀ + (Rᵀ diag(f)) K */
                scale_cols();
                decay_state();
                chain_mma<NK, NT / 2, true>(S, [&](int ks, uint32_t (&a)[4]) { acc_afrag<NT>(X, ks, a); }, Ks, L::LDK);
            }
        } else {
            /* R̄ᵀ = S̄⁺ᵀ Fᵀ + Ōᵀ C_q: first S̄⁺ᵀ Kᵀ, its token columns scaled by f, then Ōᵀ C_q */
            chain_mma<NT, KS / 16, false>(X, [&](int ks, uint32_t (&a)[4]) { acc_afrag<NK>(S, ks, a); }, Ks, L::LDK);
            scale_cols();
            chain_mma<NT, NT / 2, true>(X, [&](int ks, uint32_t (&a)[4]) { smem_afrag_t(Xs, L::LDV, 16 * warp, ks, a); },
                                        Cs, LDA);
            store_acc<NT>(X, stg, PR + ch * MAXBT * VV, VV, vw, n);
            /* S̄ ← γ_n S̄⁺ + Q_gᵀ Ō − Wᵀ R̄:  S̄ᵀ ← γ_n S̄ᵀ + (Ōᵀ diag(scale·γ)) Q − R̄ᵀ W */
            decay_state();
            chain_mma<NK, NT / 2, true>(S, [&](int ks, uint32_t (&a)[4]) {
                smem_afrag_t(Xs, L::LDV, 16 * warp, ks, a);
                /* a[0], a[1]: tokens 16ks + 2t (+1); a[2], a[3]: + 8 */
                const int j0 = 16 * ks + 2 * t, j1 = j0 + 8;
                const float s0 = p.scale * gexp(p, Gs[j0]), s1 = p.scale * gexp(p, Gs[j0 + 1]);
                const float s2 = p.scale * gexp(p, Gs[j1]), s3 = p.scale * gexp(p, Gs[j1 + 1]);
#pragma unroll
                for (int q2 = 0; q2 < 4; q2++) {
                    const float2 x = unpack_bf2(a[q2]);
                    a[q2] = q2 < 2 ? pack_bf2(x.x * s0, x.y * s1) : pack_bf2(x.x * s2, x.y * s3);
                }
            }, Qs, L::LDK);
            chain_mma<NK, NT / 2, true>(S, [&](int ks, uint32_t (&a)[4]) { acc_afrag<NT>(X, ks, a, -1.f); }, Ws, L::LDK);
        }
    }
    float *const out = rev ? dh0 : ht; /* the pair's forward blocks get ht = NULL */
    if (out) {
#pragma unroll
        for (int s = 0; s < NK; s++)
#pragma unroll
            for (int e = 0; e < 4; e++) out[sidx(s, e)] = S[s][e];
    }
}

/* The value columns per block (0: the chains do not apply). Each block is one chain on one SM (more chains than SMs
 * would run as waves). By default the chains run where the mma.sync scan pair would take 64-column tiles (its
 * slowest chain step: two 8-warp blocks of each scan per SM) and the 128-column chains fit the SMs: DeltaNet and GDN
 * (4,4096,16) on the H200. Where the pair takes 16-column tiles (longer sequences, fewer heads), its chains are
 * shorter per step than these (docs/PERF.md, session 16). force.chain = 1 takes them wherever they fit (64 columns
 * where those fit, the tests), = 2 with 128-column blocks wherever V = 128 fits (the tests of the default's blocks),
 * = 0 never. */
int chain_scan_bvc(const Prob &p, rewy_dtype dt, bool vec) {
    if (vec || !std::is_same<state_t, bf16>::value) return 0;
    if (dt != REWY_BF16 || p.BT != MAXBT || !w_shape_ok(dt, p.BT, p.K, p.Kp) || !u_shape_ok(p.V)) return 0;
    const int force = p.plan.force.chain;
    const long sh = (long)p.N * p.HV, sms = p.plan.sms;
    if (force == 0 || sms == 0) return 0;
    int bvc = 0;
    if (force == 1) bvc = 2 * sh * (p.V / 64) <= sms ? 64 : p.V == 128 && 2 * sh <= sms ? 128 : 0;
    else if (force == 2) bvc = p.V == 128 && 2 * sh <= sms ? 128 : 0; /* the default's 8-warp blocks, on the tests' shapes */
    else bvc = p.V == 128 && 2 * sh <= sms && scan_bv(p) == 64 ? 128 : 0;
    /* two stages of tiles must fit the device's shared memory (A100: 163 KB) */
    return bvc > 0 && chain_smem(p.Kp, bvc) <= p.plan.smem_optin ? bvc : 0;
}

/* Whether those chains' full chunks of aligned rows come in by bulk copies (Plan::chain_bulk; at issue in the kernel):
 * an sm_90a binary (Plan::wgmma: the sm_90 code that has them); force.chain_bulk = 0 keeps lean_tile's cp.async (the
 * tests of that path on Hopper; the sm_80 code has only it). */
bool chain_scan_bulk(const Prob &p) { return p.plan.chain_bvc > 0 && p.plan.wgmma && p.plan.force.chain_bulk != 0; }

cudaError_t launch_chain_pair(const Prob &p, int bvc, const void *q, const void *k, const float *GB, const bf16 *W,
                              const cq_t *Cq, const float *h0, state_t *Sc, rp_t *R, const void *do_, const float *dht,
                              float *dh0, state_t *Sbar, rp_t *PR, cudaStream_t s) {
    if (bvc != 64 && bvc != 128) return cudaErrorInvalidValue;
    /* full chunks take lean_tile's copies where the caller's q, k, dO are 16-B aligned (rows are: K, V of 64 or 128) */
    const bool lean = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)do_) & 15) == 0;
    /* the warp-specialized pair (chain_ws.cu), whose copies need those alignments */
    if (p.plan.chain_ws && lean)
        return launch_chain_pair_ws(p, q, k, GB, W, Cq, h0, Sc, R, do_, dht, dh0, Sbar, PR, s);
    auto go = [&](auto ks, auto bv) -> cudaError_t {
        constexpr int KS = decltype(ks)::value, BVC = decltype(bv)::value;
        constexpr size_t sm = ChainLayout<KS, BVC>::TOTAL;
        const int nb = p.N * p.HV * ceil_div(p.V, BVC);
        auto fire = [&](auto vv) {
            constexpr int VV = decltype(vv)::value;
            cudaError_t e = ensure_smem<chain_pair_kernel<KS, BVC, VV, true>>(sm);
            if (e != cudaSuccess) return e;
            chain_pair_kernel<KS, BVC, VV, true><<<2 * nb, BVC * 2, sm, s>>>(
                p, (const bf16 *)q, (const bf16 *)k, GB, W, R /* U */, Cq, h0, Sc, R, (const bf16 *)do_, dht, dh0, Sbar, PR,
                nb, lean, p.plan.chain_bulk && lean, nullptr, nullptr);
            return cudaGetLastError();
        };
        if constexpr (BVC == 128) return fire(std::integral_constant<int, 128>{});
        else return p.V == 64 ? fire(std::integral_constant<int, 64>{}) : fire(std::integral_constant<int, 128>{});
    };
    using K64 = std::integral_constant<int, 64>;
    using K128 = std::integral_constant<int, 128>;
    using B64 = std::integral_constant<int, 64>;
    using B128 = std::integral_constant<int, 128>;
    if (p.Kp == 64) return bvc == 64 ? go(K64{}, B64{}) : go(K64{}, B128{});
    return bvc == 64 ? go(K128{}, B64{}) : go(K128{}, B128{});
}

/* The forward pass (the plan's fwd_chain: value columns per block, 0: not taken): the forward chain above alone with
 * the output in its steps, on blocks of BVC = 16 to 128 columns (one warp per 16): o, ht, and S_c and R where
 * policy A saves them. After kkt_inverse (G, A, C_q) it is the whole forward: two kernels. The block width:
 * a warp's step is the same at every width, and a block's K, W, Q and C_q tiles serve all its columns, so the widest
 * whose grid fills the SMs in one wave (blocks per SM by shared memory: one at 32 and 64 columns with K = 128);
 * where none does, the narrowest on small grids (the most SMs) and the widest on large ones (the fewest waves, the
 * fewest tile copies), and 128 where that cuts the block rounds (below). By default it runs only on the large
 * grids, where 16-column blocks would fill the SMs (then at 64 or 128 columns): there it beat kkt's fused-output
 * scan in the forward pass on the H200 (session 25, GPU-bound, GDN / DeltaNet: (4,4096,16) 0.571 → 0.471 / 0.522 → 0.413 ms, (8,2048,32) 0.958 → 0.918 / 0.904 → 0.801,
 * (16,1024,16) 0.508 → 0.487 / 0.480 → 0.428); on the small grids its one-warp 16-column blocks lost ((1,8192,16)
 * 0.402 → 0.499, (2,16384,8) 0.775 → 0.951, (1,2048,4) 0.110 → 0.124 for GDN). Where the shape allows (as the
 * policy-R chains: bf16, chunk 64, K and V of 64 or 128), o is 16-B aligned (the staged stores; NULL: a size
 * query, whose layout does not depend on this choice) and the tiles fit; force.fwd_chain = 1 takes it there at the
 * rule's width (small grids too: the tests' shapes), 16, 32 or 64 at that width, 128 at V's (8-warp blocks where
 * V = 128), 0 never. */
int chain_forward_bvc(const Prob &p, rewy_dtype dt, bool vec, const void *o) {
    if (vec || !std::is_same<state_t, bf16>::value || !std::is_same<rp_t, bf16>::value) return 0;
    if (dt != REWY_BF16 || p.BT != MAXBT || !w_shape_ok(dt, p.BT, p.K, p.Kp) || !u_shape_ok(p.V)) return 0;
    if (((uintptr_t)o & 15) != 0) return 0;
    const int force = p.plan.force.fwd_chain;
    if (force == 0) return 0;
    auto smem = [&](int bvc) { return chain_smem(p.Kp, bvc); };
    const long sh = (long)p.N * p.HV, sms = p.plan.sms;
    auto blocks = [&](int bvc) { return sh * (p.V / bvc); };
    if (force == REWY_TEST_AUTO && (sms == 0 || blocks(16) < sms)) return 0; /* the small grids: the fused scan */
    auto one_wave = [&](int bvc) {
        const size_t per = p.plan.smem_sm / (smem(bvc) + p.plan.smem_rsv);
        return blocks(bvc) <= sms * (long)(per > 0 ? per : 1);
    };
    int bvc = 0;
    if (force == 16 || force == 32 || force == 64) bvc = force; /* the tests' widths */
    else if (force == 128) bvc = p.V; /* 8-warp blocks where V = 128, else V's width */
    else {
        for (int w = 64; w >= 16 && !bvc; w /= 2)
            if (blocks(w) >= sms && one_wave(w)) bvc = w;
        if (!bvc) bvc = blocks(16) < sms ? 16 : 64;
        /* 8-warp blocks at V = 128 where they fill the SMs: a block of 128 columns took 1.5× the time of one of 64
         * (H100, session 31: two warps a scheduler hide more of the chain's latency, and the tiles serve twice the
         * columns), so they win where they take fewer than 2/3 of the block rounds (never where they leave SMs idle),
         * and where their 207 KB fit (not an A100's 163) */
        auto rounds = [&](int w) { return (blocks(w) + sms - 1) / sms; };
        if (bvc == 64 && p.V == 128 && blocks(128) >= sms && 3 * rounds(128) <= 2 * rounds(64) &&
            smem(128) <= p.plan.smem_optin)
            bvc = 128;
    }
    return smem(bvc) <= p.plan.smem_optin ? bvc : 0;
}

cudaError_t launch_chain_forward(const Prob &p, int bvc, const void *q, const void *k, const void *v, const float *GB,
                                 const bf16 *Ab, const cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R, void *o,
                                 cudaStream_t s) {
    if ((bvc != 16 && bvc != 32 && bvc != 64 && bvc != 128) || p.V % bvc) return cudaErrorInvalidValue;
    if (((uintptr_t)o & 15) != 0) return cudaErrorInvalidValue; /* chain_forward_bvc declines it */
    /* full chunks take lean_tile's copies where the caller's q, k and v are 16-B aligned */
    const bool lean = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0;
    auto go = [&](auto ks, auto bv, auto vv) -> cudaError_t {
        constexpr int KS = decltype(ks)::value, BVC = decltype(bv)::value, VV = decltype(vv)::value;
        constexpr size_t sm = ChainLayout<KS, BVC>::TOTAL;
        cudaError_t e = ensure_smem<chain_pair_kernel<KS, BVC, VV, false>>(sm);
        if (e != cudaSuccess) return e;
        const int nb = p.N * p.HV * ceil_div(p.V, BVC);
        chain_pair_kernel<KS, BVC, VV, false><<<nb, BVC * 2, sm, s>>>(p, (const bf16 *)q, (const bf16 *)k, GB, Ab,
                                                                      (const bf16 *)v, Cq, h0, Sc, R, nullptr, nullptr,
                                                                      nullptr, nullptr, nullptr, 0, lean, false, ht,
                                                                      (bf16 *)o);
        return cudaGetLastError();
    };
    auto by_v = [&](auto ks, auto bv) {
        using V64 = std::integral_constant<int, 64>;
        using V128 = std::integral_constant<int, 128>;
        if constexpr (decltype(bv)::value == 128) return go(ks, bv, V128{}); /* V = 128 only */
        else return p.V == 64 ? go(ks, bv, V64{}) : go(ks, bv, V128{});
    };
    auto by_bv = [&](auto ks) {
        return bvc == 128 ? by_v(ks, std::integral_constant<int, 128>{})
               : bvc == 64 ? by_v(ks, std::integral_constant<int, 64>{})
               : bvc == 32 ? by_v(ks, std::integral_constant<int, 32>{}) : by_v(ks, std::integral_constant<int, 16>{});
    };
    return p.Kp == 64 ? by_bv(std::integral_constant<int, 64>{}) : by_bv(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
