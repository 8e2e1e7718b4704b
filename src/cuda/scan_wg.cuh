/* scan_wg.cuh: what the two wgmma scans (state_scan_wg.cu, bwd_state_scan_wg.cu) share: the descriptor
 * strides of their operand tiles, the state held in a warpgroup's registers, the tile copies of a chunk, and
 * the three product shapes of a chunk step. Only bf16 (the scans' fast path). */
#ifndef REWY_CUDA_SCAN_WG_CUH
#define REWY_CUDA_SCAN_WG_CUH

#include "wgmma.cuh"

namespace rewy_cuda {

using wg_bf16 = __nv_bfloat16;

/* descriptor strides (bytes) of the scans' operand tiles */
template <int KPC, int BVT> struct WgStrides {
    static constexpr int K_LBO = 128, K_SBO = KPC / 8 * 128;   /* K or Q tile cm_k<KPC>, read K-major: k = feature */
    static constexpr int KT_LBO = KPC / 8 * 128, KT_SBO = 128; /* the same tile read MN-major (Kᵀ): k = token */
    static constexpr int N_LBO = BVT / 8 * 128, N_SBO = 128;   /* [row][column] tiles cm_mn<BVT> (B operands) */
    static constexpr int T_LBO = 128, T_SBO = MAXBT / 4 * 128; /* 64 × 64 tf32 tiles cm_t<64> */
};

/* ---- the state: MB row blocks of 64 features; element e of block mb is feature 64·mb + wg_row(e), column
 * v0 + wg_col(e) (wgmma.cuh's accumulator layout) */

/* s ← src (h0 or dht in the API layout; zero outside K × V or when src is NULL) */
template <int MB, int NA>
__device__ __forceinline__ void wg_state_load(float (&s)[MB][NA], const float *src, const Prob &p, size_t sbase, int v0) {
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int e = 0; e < NA; e++) {
            const int kk = 64 * mb + wg_row(e), j = v0 + wg_col(e);
            s[mb][e] = (src && kk < p.K && j < p.V) ? src[sbase + st_idx(p, kk, j)] : 0.f;
        }
}
/* The start of the segments' homogeneous walks (MATH §11a, §11c): s ← the identity (a K × K state, V = K) and the
 * warpgroup's input tile (V or Ō, [64][BVT] bf16, never copied in such a walk) zero, so that nothing flows in */
template <int BVT, int MB, int NA>
__device__ __forceinline__ void wg_homogeneous_start(float (&s)[MB][NA], wg_bf16 *tile, int v0) {
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int e = 0; e < NA; e++) s[mb][e] = 64 * mb + wg_row(e) == v0 + wg_col(e) ? 1.f : 0.f;
    for (int e = threadIdx.x & 127; e < MAXBT * BVT / 8; e += 128)
        reinterpret_cast<uint4 *>(tile)[e] = make_uint4(0, 0, 0, 0);
}
template <int MB, int NA>
__device__ __forceinline__ void wg_state_save(const float (&s)[MB][NA], float *dst, const Prob &p, size_t sbase, int v0) {
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int e = 0; e < NA; e++) {
            const int kk = 64 * mb + wg_row(e), j = v0 + wg_col(e);
            if (kk < p.K && j < p.V) dst[sbase + st_idx(p, kk, j)] = s[mb][e];
        }
}
/* the once-per-chunk bf16 copy of the state: the B operand [feature][column] (cm_mn<BVT>) of K S */
template <int MB, int NA, int BVT>
__device__ __forceinline__ void wg_state_spill(const float (&s)[MB][NA], wg_bf16 *Ss) {
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int e = 0; e < NA; e += 2)
            *reinterpret_cast<__nv_bfloat162 *>(Ss + cm_mn<BVT>(wg_col(e), 64 * mb + wg_row(e))) =
                __floats2bfloat162_rn(s[mb][e], s[mb][e + 1]);
}

/* ---- the tile copies of a chunk (cp.async, 16-byte rows; zero outside the chunk's valid rows and columns) */

/* x's [token][feature] tile of chunk cj, key head h (K or Q), as cm_k<KPC> (K-major), by the block's NT threads */
template <int KPC, int NT>
__device__ __forceinline__ void wg_copy_kq(wg_bf16 *dst, const wg_bf16 *x, const Prob &p, const ChunkInfo &cj, int h) {
    const size_t rs = (size_t)p.H * p.K;
    const wg_bf16 *src = x + (size_t)cj.tok0 * rs + (size_t)h * p.K;
#pragma unroll 1 /* unrolled, the copies' addresses were kept in registers across the chunk loop */
    for (int m = 0; m < MAXBT * KPC / 8 / NT; m++) {
        const int q = threadIdx.x + NT * m, r = q / (KPC / 8), f = (q % (KPC / 8)) * 8;
        const bool ok = r < cj.n && f < p.K;
        cp_async16(dst + cm_k<KPC>(r, f), ok ? src + (size_t)r * rs + f : x, ok);
    }
}
/* columns [v0, v0 + BVT) of x's [token][value] tile of chunk cj, value head hv (V or Ō), as cm_mn<BVT>
 * (MN-major), by the calling warpgroup */
template <int BVT>
__device__ __forceinline__ void wg_copy_cols(wg_bf16 *dst, const wg_bf16 *x, const Prob &p, const ChunkInfo &cj, int hv,
                                             int v0) {
    const size_t rs = (size_t)p.HV * p.V;
    const wg_bf16 *src = x + (size_t)cj.tok0 * rs + (size_t)hv * p.V + v0;
#pragma unroll 1
    for (int m = 0; m < MAXBT * BVT / 8 / 128; m++) {
        const int q = (threadIdx.x & 127) + 128 * m, r = q / (BVT / 8), c = (q % (BVT / 8)) * 8;
        const bool ok = r < cj.n && v0 + c < p.V;
        cp_async16(dst + cm_mn<BVT>(c, r), ok ? src + (size_t)r * rs + c : x, ok);
    }
}
/* The saved A of chunk cj, value head hv, for the wgmma scans: always bf16 on their problems (bf16, scalar gates, chunk
 * 64: Prob::a16; their launches check), as this thread's V vectors of 8 (vector q = t + NT·m: row q / 8, columns
 * 8·(q % 8) …): all loads first, then f(row, column, 8 values widened) for each, so that one load latency is exposed,
 * not one a vector (plain loads, covered, as cp.async's copies, by the proxy fence and barrier after the copies' wait;
 * one at a time they cost bwd_state_scan_wg 174 → 254 µs at GDN (1,8192,16), H100, session 51) */
template <int NT, class F>
__device__ __forceinline__ void wg_widen_a16(const float *A, const Prob &p, int hv, int cj, int t, F f) {
    constexpr int V = MAXBT * MAXBT / 8 / NT;
    static_assert(V * 8 * NT == MAXBT * MAXBT, "NT divides the tile's vectors");
    const uint4 *src = reinterpret_cast<const uint4 *>(a16_of(A) + ((size_t)cj * p.HV + hv) * MAXBT * MAXBT);
    uint4 u[V];
#pragma unroll
    for (int m = 0; m < V; m++) u[m] = src[t + NT * m];
#pragma unroll
    for (int m = 0; m < V; m++) {
        const int q = t + NT * m;
        const float4 lo = widen_bf16x4(make_uint2(u[m].x, u[m].y)), hi = widen_bf16x4(make_uint2(u[m].z, u[m].w));
        const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        f(q / 8, 8 * (q % 8), x);
    }
}
/* Aᵀ of chunk cj, value head hv as the tf32 K-major tile cm_t<64> (element (j, i) = A[i][j]: tf32 operands must be
 * K-major), by NT threads (t: this one's index among them) */
template <int NT>
__device__ __forceinline__ void wg_copy_at(float *dst, const float *A, const Prob &p, int hv, int cj, int t) {
    wg_widen_a16<NT>(A, p, hv, cj, t, [&](int i, int j0, const float (&x)[8]) {
#pragma unroll
        for (int e = 0; e < 8; e++) dst[cm_t<MAXBT>(j0 + e, i)] = x[e];
    });
}
/* The bf16 saved A (Prob::a16) of chunk cj, value head hv as the K-major tile cm_k<64> (element (i, j) = A[i][j]),
 * the A operand of A X (state_scan_wg), by the block's NT threads, one 16-byte cp.async a row's 8 elements */
template <int NT>
__device__ __forceinline__ void wg_copy_a16(wg_bf16 *dst, const float *A, const Prob &p, int hv, int cj) {
    const wg_bf16 *src = a16_of(A) + ((size_t)cj * p.HV + hv) * MAXBT * MAXBT;
#pragma unroll 1
    for (int m = 0; m < MAXBT * MAXBT / 8 / NT; m++) {
        const int q = threadIdx.x + NT * m, r = q / (MAXBT / 8), c = (q % (MAXBT / 8)) * 8;
        cp_async16(dst + cm_k<MAXBT>(r, c), src + r * MAXBT + c, true);
    }
}
/* G, β of chunk cj, value head hv (the GB table) */
__device__ __forceinline__ void wg_copy_gates(float *dst, const float *GB, const Prob &p, int hv, int cj) {
    const int t = threadIdx.x;
    if (t < 2 * MAXBT / 4) cp_async16(dst + 4 * t, GB + ((size_t)cj * p.HV + hv) * 2 * MAXBT + 4 * t, true);
}

/* ---- the products of a chunk step (issue only: wg_arrive before, wg_commit / wg_wait after) */

/* x = K S: [64 tokens][BVT], k over the KPC features (K tile klo K-major, state copy slo); ACC: x += K S. Any
 * [64][KPC] K-major tile times a [KPC][BVT] MN-major one (chain_ws.cu: also A Y, C_q R over KPC = 64 tokens) */
template <int KPC, int BVT, bool ACC = false>
__device__ __forceinline__ void wg_k_times_state(float (&x)[BVT / 2], uint32_t klo, uint32_t slo) {
    using W = WgStrides<KPC, BVT>;
    static_for<0, KPC / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value;
        wg_mma<wg_bf16, BVT, 0, 1, 2 * cm_k<KPC>(0, k0), W::K_SBO, 2 * cm_mn<BVT>(0, k0), W::N_SBO>(x, klo, slo,
                                                                                                    ACC || k0 > 0);
    });
}
/* s += Xᵀ B for the 64 features from 64·MBI on: X a [token][feature] tile read MN-major (xtlo: K, Q, W; C_q), B
 * [token][column] cm_mn<BVT> (blo) */
template <int KPC, int BVT, int MBI = 0>
__device__ __forceinline__ void wg_state_add_block(float (&s)[BVT / 2], uint32_t xtlo, uint32_t blo) {
    using W = WgStrides<KPC, BVT>;
    static_for<0, MAXBT / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value;
        wg_mma<wg_bf16, BVT, 1, 1, 2 * cm_k<KPC>(k0, 64 * MBI), W::KT_SBO, 2 * cm_mn<BVT>(0, k0), W::N_SBO>(s, xtlo, blo, 1);
    });
}
/* the same for MB blocks of 64 features */
template <int KPC, int BVT, int MB>
__device__ __forceinline__ void wg_state_add(float (&s)[MB][BVT / 2], uint32_t xtlo, uint32_t blo) {
    static_for<0, MB>([&](auto mbc) { wg_state_add_block<KPC, BVT, decltype(mbc)::value>(s[decltype(mbc)::value], xtlo, blo); });
}
/* x = A B in tf32: A [64][64] (alo), B [BVT columns][64] (blo), both cm_t<64> */
template <int BVT>
__device__ __forceinline__ void wg_tf32_product(float (&x)[BVT / 2], uint32_t alo, uint32_t blo) {
    using W = WgStrides<64, BVT>;
    static_for<0, MAXBT / 8>([&](auto ks) {
        constexpr int k0 = 8 * decltype(ks)::value;
        wg_mma_tf32<BVT, 4 * cm_t<MAXBT>(0, k0), W::T_SBO, 4 * cm_t<MAXBT>(0, k0), W::T_SBO>(x, alo, blo, k0);
    });
}

} // namespace rewy_cuda
#endif
