/* ws.cuh: what the warp-specialized blocks share (chain_ws.cu's chains, pullback_ws.cu's pullback): named barriers,
 * the operand readings of warpgroup products over tma.cuh's swizzled boxes and over the blocks' own tiles, and the
 * zero-filling copy of a sequence's tail chunk. */
#ifndef REWY_CUDA_WS_CUH
#define REWY_CUDA_WS_CUH
#include "scan_wg.cuh"
#include "tma.cuh"

namespace rewy_cuda {

constexpr int GB_BYTES = 2 * MAXBT * 4; /* a chunk's G and β (the GB table's entry) */

/* named barriers (bar.sync / bar.arrive with a thread count; 0 is __syncthreads) */
__device__ __forceinline__ void ws_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void ws_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* ---- the products. How a product reads an operand tile (wgmma.cuh): the transpose bit (1: MN-major), the
 * descriptor's LBO and SBO, and the byte offset of k16 step s. The stages' tiles come by tensor copies in 64-column
 * boxes with the 128-B swizzle (tma.cuh); the tiles the block writes itself are wgmma.cuh's cm_mn<64> halves, and C_q's
 * cm_k<64> in the forward block. */
template <int T_, int LBO_, int SBO_, int STEP_, int BOX_STEPS = 0> struct WsOp {
    static constexpr int T = T_, LBO = LBO_, SBO = SBO_;
    static constexpr int off(int s) { return BOX_STEPS ? s / BOX_STEPS * TMA_BOX + s % BOX_STEPS * STEP_ : s * STEP_; }
};
/* a copied tile read K-major (m or n = its rows): K, Q, W, A as A; K as the B of Q Kᵀ. Four k16 steps a box */
using OpSk = WsOp<0, 16, 1024 | WG_SW128, 32, 4>;
/* a copied tile read MN-major (k = its rows), one box wide in m or n: Kᵀ, Qᵀ, Wᵀ, C_qᵀ as A; Ō, Ō_g as B */
using OpSt = WsOp<1, TMA_BOX, 1024 | WG_SW128, 2048>;
using OpN = WsOp<1, 1024, 128, 2048>; /* a cm_mn<64> half read as B (k = its rows): S's copy, Y, R, R̃, −R̄ */
using OpK = WsOp<0, 128, 1024, 256>;  /* the forward block's C_q, cm_k<64> read K-major: the A of C_q R */

/* x (+)= A B over KD / 16 k steps, N columns, issue only: alo = wg_lo<LA::LBO>(A's tile), blo = wg_lo<LB::LBO>(B's) */
template <class LA, class LB, int KD, int N = 64>
__device__ __forceinline__ void ws_mma(float (&x)[N / 2], uint32_t alo, uint32_t blo, bool acc) {
    static_for<0, KD / 16>([&](auto ks) {
        constexpr int st = decltype(ks)::value;
        wg_mma<__nv_bfloat16, N, LA::T, LB::T, LA::off(st), LA::SBO, LB::off(st), LB::SBO>(x, alo, blo, acc || st > 0);
    });
}

/* A chunk that ends its sequence (n < 64) would bring the next sequence's tokens by a tensor copy, and the products take
 * rows ≥ n as zero (common.cuh's convention, and no NaN of another sequence may enter a product). So its token tiles
 * (K, Q, V or Ō) come by cp.async with zero fill instead, by NL threads (t: this one's index among them; the chains'
 * state warpgroups, the pullback's producer warp), into the same swizzled boxes: of the [token][ld] matrix x, chunk
 * cj's rows [0, n) of columns [col, col + C), zero from row n on (a workspace tile: cj.tok0 = 0, x its first row). (Zeroing those rows after the tensor copy was correct but racecheck reported the zeroing against the later
 * reads behind the block barrier; session 37.) Each issuing thread waits for its own copies (ws_stage_wait) before the
 * barrier that publishes them, as chain_scan.cu's copies do. */
template <int C, int NL>
__device__ __forceinline__ void ws_copy_tail(char *tile, const __nv_bfloat16 *x, size_t ld, size_t col, const ChunkInfo &cj,
                                             int t = threadIdx.x) {
    const __nv_bfloat16 *src = x + (size_t)cj.tok0 * ld + col;
#pragma unroll 1
    for (int i = t; i < MAXBT * C / 8; i += NL) {
        const int r = i / (C / 8), c8 = i % (C / 8) * 8;
        const bool ok = r < cj.n;
        cp_async16(tile + 2 * sw128(r, c8), ok ? src + (size_t)r * ld + c8 : src, ok);
    }
}

/* ---- the host side. The shapes every ws kernel takes: scalar gates, bf16 inputs (and bf16 chunk states and R), chunk
 * 64, K of 64 or 128, V = 128, an sm_90a binary, and smem (the kernel's layout at this K) within the device's shared
 * memory */
inline bool ws_shapes_ok(const Prob &p, rewy_dtype dt, bool vec, size_t smem) {
    if (vec || !std::is_same<state_t, __nv_bfloat16>::value || !std::is_same<rp_t, __nv_bfloat16>::value) return false;
    return dt == REWY_BF16 && p.BT == MAXBT && w_shape_ok(dt, p.BT, p.K, p.Kp) && p.V == 128 && p.plan.wgmma &&
           smem <= p.plan.smem_optin;
}

/* the maps of the caller's [token][heads · D] q, k (D = K) and v or dO (D = V) */
inline bool ws_token_map(const TmaEncoder &enc, CUtensorMap *m, const Prob &p, const void *x, int heads, int d) {
    return enc.map(m, x, (uint64_t)p.B * p.T, (uint64_t)heads * d, (uint64_t)heads * d);
}
/* and of a workspace of [rows][C] tiles (kkt's A, W, C_q; the recompute's U; R, P, S_c, S̄⁺) */
inline bool ws_slot_map(const TmaEncoder &enc, CUtensorMap *m, const void *x, uint64_t rows, int C) {
    return enc.map(m, x, rows, C, C);
}

} // namespace rewy_cuda
#endif
