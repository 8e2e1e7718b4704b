/* ws.cuh: what the warp-specialized blocks share (chain_ws.cu's chains, pullback_ws.cu's pullback): named barriers,
 * the operand readings of warpgroup products over tma.cuh's swizzled boxes and over the blocks' own tiles, and the
 * zero-filling copy of a sequence's tail chunk. */
#ifndef REWY_CUDA_WS_CUH
#define REWY_CUDA_WS_CUH
#include "scan_wg.cuh"
#include "tma.cuh"

namespace rewy_cuda {

constexpr int GB_BYTES = 2 * MAXBT * 4; /* a chunk's G and β (the GB table's entry) */

/* The pullback's blocks (pullback_ws.cu, reverse_ws.cu): two math warpgroups and a producer warpgroup, of which one warp
 * copies; a V slab of a chunk (value columns 64·s …): P, Ō, R, V (one box each: tokens × 64 columns), S̄⁺ and S_c (two
 * boxes each: features 0–63, 64–127) */
constexpr int WS_MATH = 256, WS_NT = WS_MATH + 128;
/* the block's mbarriers, 8 B apart from mb: barrier i takes counts[i] arrivals (32: the producer warp's lanes, lane 0's
 * with the bytes; WS_MATH: every math thread after its own last reads), set up by thread 0 before the block barrier that
 * precedes their first use */
#if __CUDA_ARCH__ >= 900
template <int N> __device__ __forceinline__ void ws_mbar_init(unsigned mb, const int (&counts)[N]) {
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) mbar_init(mb + 8 * i, counts[i]);
        mbar_init_fence();
    }
    __syncthreads();
}
#endif
/* The register split (every thread of its warpgroup runs it): the producer warpgroup gives its registers to the math
 * warpgroups (ptxas counts the block in whole warpgroups: 168 a thread for all, where the math spills) and only its
 * first warp stays (ws_producer_copies: false for the three that leave); the math warpgroups take 232 */
__device__ __forceinline__ bool ws_producer_copies() {
    wg_setmaxnreg_dec<40>();
    return (int)threadIdx.x < WS_MATH + 32;
}
__device__ __forceinline__ void ws_math_regs() { wg_setmaxnreg_inc<232>(); }
struct WsSlab {
    static constexpr int B = TMA_BOX;
    static constexpr int oP = 0, oO = B, oR = 2 * B, oV = 3 * B, oSb = 4 * B, oSc = 6 * B, BYTES = 8 * B;
};

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

/* A warpgroup's accumulator fragment (wg_row, wg_col: warp q rows 16q … 16q + 15) in bf16 pairs, v[e / 2] = elements e,
 * e + 1, to and from a tile of 64 columns: the fragment's 8 × 8 pieces are stmatrix/ldmatrix's, so a warp moves four of
 * them an instruction, each lane naming one piece's 16-byte row. NB: the fragment's 8-column blocks, from block b0 of
 * the tile (even). Two layouts of a [row][64 columns] bf16 tile:
 *   SW = true:  a box with the 128-B swizzle (tma.cuh's sw128: 128-B rows, the 16-B chunk b of row r at b ^ (r % 8));
 *   SW = false: core matrices, cm_k<64>(row, column) = cm_mn<64>(column, row) (wgmma.cuh: 8 × 8 pieces of 128 B).
 * In place of a store (or load) a pair with its address arithmetic: 16 and their offsets became four instructions and
 * an add or XOR each (session 46's profile: the fused reverse pass spent about a third of its instructions moving
 * fragments to and from shared memory). */
template <bool SW> struct WgFragLanes {
    unsigned base; /* this lane's row of the tile: its byte address (SW = false: with its block parity) */
    int y;         /* SW: the lane's block parity with its row's swizzle phase, block b at 16-B chunk b ^ y */
    __device__ __forceinline__ WgFragLanes(const void *tile) {
        const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
        const int row = 16 * ((threadIdx.x >> 5) & 3) + r + 8 * (m & 1);
        if constexpr (SW) {
            base = smem_u32(tile) + row * 128;
            y = (m >> 1) ^ r;
        } else {
            base = smem_u32(tile) + (row >> 3) * 1024 + (m >> 1) * 128 + r * 16;
            y = 0;
        }
    }
    __device__ __forceinline__ unsigned at(int b) const { return SW ? base + ((b ^ y) << 4) : base + b * 128; } /* b even */
};
template <int NB = 8, bool SW = true>
__device__ __forceinline__ void wg_box_store(void *tile, const __nv_bfloat162 (&v)[NB * 2], int b0 = 0) {
    const WgFragLanes<SW> l(tile);
#pragma unroll
    for (int k = 0; k < NB / 2; k++) {
        const uint32_t *u = reinterpret_cast<const uint32_t *>(v + 4 * k);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(l.at(b0 + 2 * k)),
                     "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
    }
}
template <int NB = 8, bool SW = true>
__device__ __forceinline__ void wg_box_load(__nv_bfloat162 (&v)[NB * 2], const void *tile, int b0 = 0) {
    const WgFragLanes<SW> l(tile);
#pragma unroll
    for (int k = 0; k < NB / 2; k++) {
        uint32_t *u = reinterpret_cast<uint32_t *>(v + 4 * k);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "r"(l.at(b0 + 2 * k)) : "memory");
    }
}
/* x's elements in bf16 pairs (rounded to nearest), as given or scaled by the factor of their row half (e & 2: rows + 8) */
template <int N> __device__ __forceinline__ void wg_pack(__nv_bfloat162 (&v)[N / 2], const float (&x)[N]) {
#pragma unroll
    for (int e = 0; e < N; e += 2) v[e / 2] = __floats2bfloat162_rn(x[e], x[e + 1]);
}
template <int N> __device__ __forceinline__ void wg_pack(__nv_bfloat162 (&v)[N / 2], const float (&x)[N], float f0, float f1) {
#pragma unroll
    for (int e = 0; e < N; e += 2) {
        const float f = e & 2 ? f1 : f0;
        v[e / 2] = __floats2bfloat162_rn(f * x[e], f * x[e + 1]);
    }
}

/* x (+)= A B over KD / 16 k steps, N columns, issue only: alo = wg_lo<LA::LBO>(A's tile), blo = wg_lo<LB::LBO>(B's) */
template <class LA, class LB, int KD, int N = 64>
__device__ __forceinline__ void ws_mma(float (&x)[N / 2], uint32_t alo, uint32_t blo, bool acc) {
    static_for<0, KD / 16>([&](auto ks) {
        constexpr int st = decltype(ks)::value;
        wg_mma<__nv_bfloat16, N, LA::T, LB::T, LA::off(st), LA::SBO, LB::off(st), LB::SBO>(x, alo, blo, acc || st > 0);
    });
}

/* The masked decay of a warpgroup's accumulator fragment over a chunk's 64 rows, its first E elements at columns
 * j0 + wg_col(e), by element pairs: put(e, keep_e, d_e, keep_e+1, d_e+1) for even e, with d = e^{G_i − G_j}
 * (i = wg_row(e), j = j0 + wg_col(e)) and keep = (j + strict ≤ i < n): C_q (strict 0), Γ (1), Γ_H' (0). Every element
 * takes its exponential, of 0 where masked (so none overflows; an exponential behind a branch per element took 40 % of
 * the forward block's O warpgroup, session 35), and put selects on its product (keep ? x·d : 0), so that a non-finite x
 * stays so where kept and vanishes where masked. The gates are read first, before put's stores: the compiler cannot
 * move shared reads past stores through generic pointers, so reads between them would wait one by one. */
template <int E, class Put>
__device__ __forceinline__ void ws_masked_decay(const Prob &p, const float *Gs, int n, int j0, int strict, Put put) {
    const float gr[2] = {Gs[wg_row(0)], Gs[wg_row(2)]};
    float gc[E / 2]; /* gc[2b + a]: column j0 + wg_col(4b + a) */
#pragma unroll
    for (int b = 0; b < E / 2; b++) gc[b] = Gs[j0 + wg_col(2 * (b & ~1) + (b & 1))];
#pragma unroll
    for (int e = 0; e < E; e += 2) {
        const int i = wg_row(e), j = j0 + wg_col(e);
        const float gi = gr[(e >> 1) & 1];
        const bool k0 = i < n && j + strict <= i, k1 = i < n && j + 1 + strict <= i;
        put(e, k0, gexp(p, k0 ? gi - gc[e / 4 * 2] : 0.f), k1, gexp(p, k1 ? gi - gc[e / 4 * 2 + 1] : 0.f));
    }
}

/* ---- the ReWY pullback's per-chunk pieces that pullback_ws.cu and reverse_ws.cu share (pullback_ws.cu's header names
 * the terms). Warpgroup w owns the K-wide results' features 64·w …; i0 = wg_row(0), the thread's rows i0 and i0 + 8;
 * Gs, bs: the chunk's G and β in shared memory; n: its rows. */

/* Γ = 𝓛_<(−D) ⊙ e^{G_i−G_j} and Γ_β = diag(β) Γ (w = 0, X = D), Γ_H' = scale·𝓛_≤(H_q) ⊙ e^{G_i−G_j} (w = 1, X = H_q), into
 * the bf16 boxes Gm, Gb, Hm (ws_masked_decay). */
__device__ __forceinline__ void ws_gamma_tiles(const Prob &p, const float (&X)[32], const float *Gs, const float *bs, int n,
                                               int w, int i0, __nv_bfloat16 *Gm, __nv_bfloat16 *Gb, __nv_bfloat16 *Hm) {
    using T2 = __nv_bfloat162;
    const float b0 = bs[i0], b1 = bs[i0 + 8];
    const float sgn = w ? p.scale : -1.f;
    float x[32]; /* the masked, decayed tile */
    ws_masked_decay<32>(p, Gs, n, 0, w == 0, [&](int e, bool k0, float d0, bool k1, float d1) {
        x[e] = k0 ? sgn * X[e] * d0 : 0.f;
        x[e + 1] = k1 ? sgn * X[e + 1] * d1 : 0.f;
    });
    T2 v[16];
    wg_pack(v, x);
    wg_box_store(w == 0 ? Gm : Hm, v);
    if (w == 0) {
        wg_pack(v, x, b0, b1);
        wg_box_store(Gb, v);
    }
    wg_proxy_fence(); /* for the K-side products */
}
/* the row scalings of the V-long products: F̂ = e^{G_n−G} ⊙ (R S̄⁺ᵀ), −γ ⊙ (P S_cᵀ), scale·γ ⊙ (Ō S_cᵀ) */
__device__ __forceinline__ void ws_scale_rows(const Prob &p, float (&F)[32], float (&Bh)[32], float (&Qh)[32],
                                              const float *Gs, int n, int i0) {
    const float gl = Gs[n - 1];
    const float e0 = i0 < n ? gexp(p, gl - Gs[i0]) : 0.f, e1 = i0 + 8 < n ? gexp(p, gl - Gs[i0 + 8]) : 0.f;
    const float y0 = gexp(p, Gs[i0]), y1 = gexp(p, Gs[i0 + 8]);
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const bool hi = e & 2;
        F[e] *= hi ? e1 : e0;
        Bh[e] *= hi ? -y1 : -y0;
        Qh[e] *= p.scale * (hi ? y1 : y0);
    }
}
/* Ḡ_n's endpoint term Σ_i ⟨k_i, F̂_i⟩ over this thread's elements (Ks: the K tile, f0 = 64·w) */
__device__ __forceinline__ float ws_endpoint(const float (&F)[32], const __nv_bfloat16 *Ks, int f0) {
    float endp = 0.f;
    __nv_bfloat162 kv[16];
    wg_box_load(kv, Ks + f0 * 64); /* feature box f0 / 64 */
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const float2 kk = __bfloat1622float2(kv[e / 2]);
        endp += kk.x * F[e] + kk.y * F[e + 1];
    }
    return endp;
}
/* K and Q at this thread's places of feature box w (the k̄, q̄ epilogue's; Q's only where gated, else K's) */
__device__ __forceinline__ void ws_kq_frags(__nv_bfloat162 (&kr)[16], __nv_bfloat162 (&qr)[16], const __nv_bfloat16 *Ks,
                                            const __nv_bfloat16 *Qs, int w, bool gated) {
    wg_box_load(kr, Ks + w * 64 * 64);
    if (gated) wg_box_load(qr, Qs + w * 64 * 64);
    else
#pragma unroll
        for (int e = 0; e < 16; e++) qr[e] = kr[e];
}
/* the K-side products (issued and waited for): B̂ += Γ K, Ŷ += Γ_βᵀ K + Γ_H'ᵀ Q, Q̂ += Γ_H' K (kxlo, qxlo: K and Q read MN-major from
 * this warpgroup's features) */
__device__ __forceinline__ void ws_kside(float (&Bh)[32], float (&F)[32], float (&Qh)[32], const void *Gm, const void *Gb,
                                         const void *Hm, uint32_t kxlo, uint32_t qxlo) {
    wg_arrive();
    ws_mma<OpSk, OpSt, MAXBT>(Bh, wg_lo<OpSk::LBO>(Gm), kxlo, true);
    ws_mma<OpSt, OpSt, MAXBT>(F, wg_lo<OpSt::LBO>(Gb), kxlo, true);
    ws_mma<OpSt, OpSt, MAXBT>(F, wg_lo<OpSt::LBO>(Hm), qxlo, true);
    ws_mma<OpSk, OpSt, MAXBT>(Qh, wg_lo<OpSk::LBO>(Hm), kxlo, true);
    wg_commit();
    wg_wait();
}
/* ⟨S̄⁺, S_c⟩ over a slab's two feature boxes (a, b: the same layout, so elementwise by position), by NT threads */
template <int NT> __device__ __forceinline__ float ws_slab_dot(const __nv_bfloat16 *a, const __nv_bfloat16 *b, int t) {
    float x = 0.f;
#pragma unroll
    for (int y = 0; y < 2 * TMA_BOX / 16 / NT; y++) x += dot8(a + 8 * (t + NT * y), b + 8 * (t + NT * y));
    return x;
}
/* dg of rows 2·lane, 2·lane + 1 (d0, d1) from the row terms a, a2 of those rows: Ḡ_n's state term (e^{G_n} ⟨S̄⁺, S_c⟩ +
 * the endpoint term; sums) plus the suffix sum of the row terms over the chunk (a warp's scan). gr0, gr1: the raw gates. */
__device__ __forceinline__ float2 ws_gate_grads(float a, float a2, float2 sums, float gn_log, float gr0, float gr1, bool first) {
    const int lane = threadIdx.x & 31;
    float t = a + a2;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_down_sync(0xffffffffu, t, o);
        if (lane + o < 32) t += y;
    }
    const float s0 = expf(gn_log) * sums.x + sums.y; /* a floored gate's ḡ is 0 (gates.h) */
    return make_float2(rewy_gate_grad(gr0, s0 + t, first), rewy_gate_grad(gr1, s0 + t - a, 0));
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

/* a producer lane's cp.async copies (tail rows) landed and visible to the products, before the arrival that publishes
 * them */
__device__ __forceinline__ void ws_rows_done() {
    cp_async_commit();
    cp_async_wait_group<0>();
    wg_proxy_fence();
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
/* and of the saved A in bf16 (Prob::a16; [chunk][hv][64][64]), the A of R = A Y in every chain that reads it */
inline bool ws_a_map(const TmaEncoder &enc, CUtensorMap *m, const Prob &p, const void *A) {
    return ws_slot_map(enc, m, A, (uint64_t)p.NC * p.HV * MAXBT, MAXBT);
}

} // namespace rewy_cuda
#endif
