/* pullback_wg.cu: the scalar-gate ReWY pullback (pullback.cu's math, term for term: its header names every term) on
 * Hopper's warpgroup products, for bf16, chunk 64, K ≤ 128, V a multiple of 32 (sm_90a). One block of two warpgroups
 * per (chunk slot, key head), walking the HV/H value heads of its group.
 *
 * Why: pullback_fast_kernel spends a chunk in 16 warps' mma.sync tiles, each product followed by its epilogue and a
 * barrier (Nsight, session 31: issue slots 40 % busy, DRAM 40 %). Here each product is one wgmma group per warpgroup,
 * issued asynchronously, so the thread-wise work (dv, ⟨P, v⟩, ⟨S̄⁺, S_c⟩) and the next slab's copies run beside it.
 * The block takes 106 KB and about 200 registers a thread: one block an SM. Two did not fit the registers (at 128 a
 * thread ptxas spilled 400 B at K = 128 and serialized the products).
 *
 * Warpgroup w owns the K-wide results' features f0 = w·KS/2 … (N = KS/2 columns of every m64 accumulator), so that a
 * thread holds only three of them, each started by a V-long product and finished by K-side ones:
 *   B̂ = −γ ⊙ (P S_cᵀ) + Γ K,   Ŷ = e^{G_n−G} ⊙ (R S̄⁺ᵀ) + Γ_βᵀ K + Γ_H'ᵀ Q,   Q̂ = scale·γ ⊙ (Ō S_cᵀ) + Γ_H' K
 *   k̄ = β ⊙ B̂ + Ŷ,  q̄ = Q̂,  β̄ = ⟨k, B̂⟩ + ⟨P, v⟩,  Ḡ = ⟨k, β ⊙ B̂ − Ŷ⟩ + ⟨q, Q̂⟩  (Ŷ = pullback_fast's Ĉ + F̂)
 * The n×n coefficients D = P Rᵀ (warpgroup 0) and H_q = Ō Rᵀ (warpgroup 1) are formed first, masked and decayed into
 * three bf16 tiles (Γ, Γ_β = diag(β) Γ, Γ_H' = scale·Γ_H); Γ_βᵀ and Γ_H'ᵀ are the same tiles read MN-major.
 *
 * The V axis in 32-column slabs, double-buffered (slab s + 1's copies run during slab s), in two passes:
 *   pass A (slabs 0 … NS−1): P, R, Ō, V, S̄⁺ → D or H_q, R S̄⁺ᵀ, dv = β P, ⟨P, v⟩;  then Γ, Γ_β, Γ_H' and F̂
 *   pass B (slabs NS … 2NS−1): P, Ō, S_c (and S̄⁺ for ⟨S̄⁺, S_c⟩) → P S_cᵀ, Ō S_cᵀ
 * so that at most three accumulators (96 registers at K = 128) are live at once; P and Ō are read twice (the second
 * time mostly from L2). Then the 16 K-side products, the epilogue from the registers, the row sums and the in-chunk
 * suffix sum of Ḡ as pullback_fast_kernel's.
 * Per slab s:  [slab s + 1's copies into buffer (s + 1) & 1] commit;  wait for slab s's;  fence;  __syncthreads (B1);
 *   issue the slab's products;  the thread-wise work;  wait for the products;  __syncthreads (B2: buffer s & 1 free).
 * A copy into a buffer is issued after the B2 that ended its last reads; the Γ tiles, written after pass A, are
 * fenced there and read after pass B's barriers. */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

constexpr int PW_THREADS = 256; /* two warpgroups */
constexpr int PW_BV = 32;       /* the V slab */

template <int KS> struct PwLayout {
    static constexpr int NW = KS / 2;            /* K-wide result columns per warpgroup */
    static constexpr int TT = MAXBT * PW_BV * 2; /* a [64][32] bf16 slab tile (P, R, Ō, V) */
    static constexpr int ST = KS * PW_BV * 2;    /* a [KS][32] slab tile (S_c, S̄⁺) */
    /* a slab buffer: pass A P, Ō, R, V, S̄⁺; pass B P, Ō, S_c (at bS) and S̄⁺ (over R and V, adjacent) */
    static constexpr int bP = 0, bO = TT, bR = 2 * TT, bV = 3 * TT, bS = 4 * TT, BUF = 4 * TT + ST;
    static_assert(bV == bR + TT && ST <= 2 * TT, "pass B's S̄⁺ goes over R and V");
    static constexpr int GT = MAXBT * MAXBT * 2; /* a [64][64] bf16 Γ tile */
    static constexpr int oG = 2 * BUF, oGb = oG + GT, oH = oGb + GT;
    static constexpr int oK = oH + GT, oQ = oK + MAXBT * KS * 2, oGB = oQ + MAXBT * KS * 2;
    /* G, β [2][64]; then per-warpgroup β̄ and Ḡ row terms [2][64] each, ⟨P, v⟩ by row [64], block sums [16] */
    static constexpr int oRed = oGB + 2 * MAXBT * 4, TOTAL = oRed + (5 * MAXBT + 16) * 4;
    static_assert(BUF % 128 == 0 && oK % 128 == 0, "PwLayout: 128-B aligned tiles");
};

/* rows [0, nv) of a [ROWS][32] bf16 slab (row r at src + r·rs) as cm_k<32>(r, column), zero from row nv on, by the
 * block's threads: eight consecutive threads fill one core matrix (8 rows × 16 B), so the shared writes do not
 * conflict, and a warp reads 64 contiguous bytes of each of its 8 rows */
template <int ROWS>
__device__ __forceinline__ void pw_copy_slab(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t rs, int nv) {
    static_assert(ROWS * 4 % PW_THREADS == 0, "pw_copy_slab: whole rounds");
#pragma unroll
    for (int m = 0; m < ROWS * 4 / PW_THREADS; m++) {
        const int x = threadIdx.x + PW_THREADS * m, r = (x >> 5) * 8 + (x & 7), c8 = ((x >> 3) & 3) * 8;
        const bool ok = r < nv;
        cp_async16(dst + cm_k<PW_BV>(r, c8), ok ? src + (size_t)r * rs + c8 : src, ok);
    }
}

/* x (+)= A Bᵀ over one slab: A [64][32] and B [N][32], both cm_k<32> (K-major: k runs along the slab's columns),
 * two k16 steps; acc = 0 overwrites x */
template <int N> __device__ __forceinline__ void pw_slab_mma(float (&x)[N / 2], uint32_t alo, uint32_t blo, int acc) {
    constexpr int SBO = PW_BV / 8 * 128, K1 = 2 * cm_k<PW_BV>(0, 16);
    wg_mma<__nv_bfloat16, N, 0, 0, 0, SBO, 0, SBO>(x, alo, blo, acc);
    wg_mma<__nv_bfloat16, N, 0, 0, K1, SBO, K1, SBO>(x, alo, blo, 1);
}

/* x += A X over the chunk's 64 tokens: A = Γ (TA = 0) or Γᵀ (TA = 1) from a [64][64] tile cm_k<64>(i, j) (glo:
 * wg_lo<TA ? 1024 : 128>), X = K or Q [token][feature] cm_k<KS> read MN-major from the warpgroup's first feature (xlo) */
template <int KS, int N, int TA> __device__ __forceinline__ void pw_tok_mma(float (&x)[N / 2], uint32_t glo, uint32_t xlo) {
    static_for<0, MAXBT / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value;
        constexpr int AOFF = TA ? 2 * cm_k<MAXBT>(k0, 0) : 2 * cm_k<MAXBT>(0, k0), ASBO = TA ? 128 : MAXBT / 8 * 128;
        wg_mma<__nv_bfloat16, N, TA, 1, AOFF, ASBO, 2 * cm_k<KS>(k0, 0), 128>(x, glo, xlo, 1);
    });
}

/* blocks an SM the registers are capped for (a build flag of the session-36 measurement: 2 caps them at 128) */
#ifndef REWY_CUDA_PB_WG_BLOCKS
#define REWY_CUDA_PB_WG_BLOCKS 1
#endif
template <int KS>
__global__ void __launch_bounds__(PW_THREADS, REWY_CUDA_PB_WG_BLOCKS)
pullback_wg_kernel(Prob p, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, const float *GB,
                   const __nv_bfloat16 *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR,
                   float *acc, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv, __nv_bfloat16 *dbeta,
                   const float *graw, float *dg) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = PwLayout<KS>;
    using T2 = __nv_bfloat162;
    constexpr int NW = L::NW, NE = NW / 2;
    extern __shared__ __align__(128) char smc[];
    const int c = slot_chunk(p, blockIdx.x), h = blockIdx.y, tid = threadIdx.x, w = tid >> 7, lane = tid & 31;
    if (c < 0) return; /* the grid: chunk_slots */
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n, tok0 = ci.tok0;
    if (n == 0) return;
    T *const Ks = reinterpret_cast<T *>(smc + L::oK), *const Qs = reinterpret_cast<T *>(smc + L::oQ);
    T *const Gm = reinterpret_cast<T *>(smc + L::oG), *const Gb = reinterpret_cast<T *>(smc + L::oGb);
    T *const Hm = reinterpret_cast<T *>(smc + L::oH);
    float *const Gs = reinterpret_cast<float *>(smc + L::oGB), *const bs = Gs + MAXBT;
    float *const rowb = reinterpret_cast<float *>(smc + L::oRed); /* [2][64] β̄ row terms by warpgroup */
    float *const rowg = rowb + 2 * MAXBT;                          /* [2][64] Ḡ row terms */
    float *const rowp = rowg + 2 * MAXBT;                          /* [64] ⟨P, v⟩, then Ḡ's row totals */
    float *const red = rowp + MAXBT;                               /* [16] block sums */
    const int f0 = NW * w, i0 = wg_row(0); /* this warpgroup's features; this thread's rows i0, i0 + 8 */
    const int NS = p.V / PW_BV;
    const size_t rsv = (size_t)p.HV * p.V;
    const float sc = p.scale;
    const bool gated = p.gated && dg; /* whether Ḡ is wanted: its terms are skipped otherwise (DeltaNet) */
    /* K and Q read MN-major from this warpgroup's features (the K-side products' B operands) */
    const uint32_t kxlo = wg_lo<KS / 8 * 128>(Ks + cm_k<KS>(0, f0)), qxlo = wg_lo<KS / 8 * 128>(Qs + cm_k<KS>(0, f0));
    auto buf = [&](int s) { return smc + (s & 1) * L::BUF; };

    for (int r = 0; r < p.G; r++) {
        const int hv = h * p.G + r;
        /* G, β by chunk; R, P, S_c, S̄⁺ by workspace slot (blockIdx.x) */
        const PbSlices<T> hs = pb_slices<T>(p, (size_t)blockIdx.x * p.HV + hv, tok0, hv, R, PR, Sc, Sbar, do_, v);
        /* slab s's tiles into buffer s & 1 */
        auto issue = [&](int s) {
            char *b = buf(s);
            const int v0 = (s < NS ? s : s - NS) * PW_BV;
            pw_copy_slab<MAXBT>(reinterpret_cast<T *>(b + L::bP), hs.PR + v0, p.V, n);
            pw_copy_slab<MAXBT>(reinterpret_cast<T *>(b + L::bO), hs.dO + v0, rsv, n);
            if (s < NS) {
                pw_copy_slab<MAXBT>(reinterpret_cast<T *>(b + L::bR), hs.R + v0, p.V, n);
                pw_copy_slab<MAXBT>(reinterpret_cast<T *>(b + L::bV), hs.v + v0, rsv, n);
                pw_copy_slab<KS>(reinterpret_cast<T *>(b + L::bS), hs.Sb + v0, p.V, p.K);
            } else {
                pw_copy_slab<KS>(reinterpret_cast<T *>(b + L::bS), hs.Sc + v0, p.V, p.K);
                if (gated) pw_copy_slab<KS>(reinterpret_cast<T *>(b + L::bR), hs.Sb + v0, p.V, p.K);
            }
            cp_async_commit();
        };
        /* B1 of slab s: its copies (and the gates', K's, Q's) are in and visible to the products */
        auto top = [&](int s) {
            if (s + 1 < 2 * NS) {
                issue(s + 1);
                cp_async_wait_group<1>();
            } else {
                cp_async_wait_group<0>();
            }
            wg_proxy_fence();
            __syncthreads();
        };
        wg_copy_gates(Gs, GB, p, hv, c);
        if (r == 0) { /* one K and Q for the group's value heads */
            wg_copy_kq<KS, PW_THREADS>(Ks, k, p, ci, h);
            wg_copy_kq<KS, PW_THREADS>(Qs, q, p, ci, h);
        }
        cp_async_commit();
        issue(0);

        /* ---- pass A: D = P Rᵀ (warpgroup 0) or H_q = Ō Rᵀ (warpgroup 1), R S̄⁺ᵀ, dv = β P, ⟨P, v⟩ ---- */
        float X[32], F[NE];
        float pv = 0.f; /* ⟨P, v⟩ over this thread's 8 columns of row tid / 4 in every slab */
#pragma unroll 1
        for (int s = 0; s < NS; s++) {
            top(s);
            const char *b = buf(s);
            const uint32_t plo = wg_lo<128>(b + L::bP), rlo = wg_lo<128>(b + L::bR), olo = wg_lo<128>(b + L::bO);
            wg_arrive();
            pw_slab_mma<MAXBT>(X, w ? olo : plo, rlo, s);
            pw_slab_mma<NW>(F, rlo, wg_lo<128>(b + L::bS + 2 * cm_k<PW_BV>(f0, 0)), s);
            wg_commit();
            { /* beside the products: dv = β P and ⟨P, v⟩, one 16-byte core row per thread */
                const int i = tid >> 2, c8 = (tid & 3) * 8;
                if (i < n) {
                    float pf[8], vf[8];
                    ld8(reinterpret_cast<const T *>(b + L::bP) + cm_k<PW_BV>(i, c8), pf);
                    ld8(reinterpret_cast<const T *>(b + L::bV) + cm_k<PW_BV>(i, c8), vf);
                    const float bi = bs[i];
#pragma unroll
                    for (int m = 0; m < 8; m++) {
                        pv += pf[m] * vf[m];
                        pf[m] *= bi;
                    }
                    st8(dv + (size_t)(tok0 + i) * rsv + (size_t)hv * p.V + s * PW_BV + c8, pf);
                }
            }
            wg_wait();
            __syncthreads(); /* B2 */
        }
        { /* Γ = 𝓛_<(−D) ⊙ e^{G_i−G_j} and Γ_β = diag(β) Γ (warpgroup 0), Γ_H' = scale·𝓛_≤(H_q) ⊙ e^{G_i−G_j}
             * (warpgroup 1), as cm_k<64>(i, j) in bf16 */
            const float g0 = Gs[i0], g1 = Gs[i0 + 8], b0 = bs[i0], b1 = bs[i0 + 8];
            const int strict = w == 0;
            const float sgn = w ? sc : -1.f;
    #pragma unroll
            for (int e = 0; e < 32; e += 2) {
                const int i = wg_row(e), j = wg_col(e);
                const float gi = e & 2 ? g1 : g0;
                const bool k0 = i < n && j + strict <= i, k1 = i < n && j + 1 + strict <= i;
                const float x0 = k0 ? sgn * X[e] * gexp(p, gi - Gs[j]) : 0.f;
                const float x1 = k1 ? sgn * X[e + 1] * gexp(p, gi - Gs[j + 1]) : 0.f;
                if (w == 0) {
                    const float bi = e & 2 ? b1 : b0;
                    *reinterpret_cast<T2 *>(Gm + cm_k<MAXBT>(i, j)) = __floats2bfloat162_rn(x0, x1);
                    *reinterpret_cast<T2 *>(Gb + cm_k<MAXBT>(i, j)) = __floats2bfloat162_rn(bi * x0, bi * x1);
                } else {
                    *reinterpret_cast<T2 *>(Hm + cm_k<MAXBT>(i, j)) = __floats2bfloat162_rn(x0, x1);
                }
            }
            wg_proxy_fence(); /* read by the K-side products after pass B's barriers */
        }
        /* F̂ = e^{G_n−G} ⊙ (R S̄⁺ᵀ), and its part of Ḡ_n's endpoint term, Σ_i ⟨k_i, F̂_i⟩ */
        float endp = 0.f;
        {
            const float gl = Gs[n - 1];
            const float e0 = i0 < n ? gexp(p, gl - Gs[i0]) : 0.f, e1 = i0 + 8 < n ? gexp(p, gl - Gs[i0 + 8]) : 0.f;
#pragma unroll
            for (int e = 0; e < NE; e++) F[e] *= e & 2 ? e1 : e0;
            if (gated)
#pragma unroll
                for (int e = 0; e < NE; e += 2) {
                    const float2 kk = __bfloat1622float2(*reinterpret_cast<const T2 *>(Ks + cm_k<KS>(wg_row(e), f0 + wg_col(e))));
                    endp += kk.x * F[e] + kk.y * F[e + 1];
                }
        }

        /* ---- pass B: P S_cᵀ, Ō S_cᵀ; ⟨S̄⁺, S_c⟩ for Ḡ_n ---- */
        float Bh[NE], Qh[NE];
        float lam = 0.f;
#pragma unroll 1
        for (int s = NS; s < 2 * NS; s++) {
            top(s);
            const char *b = buf(s);
            const uint32_t slo = wg_lo<128>(b + L::bS + 2 * cm_k<PW_BV>(f0, 0));
            wg_arrive();
            pw_slab_mma<NW>(Bh, wg_lo<128>(b + L::bP), slo, s - NS);
            pw_slab_mma<NW>(Qh, wg_lo<128>(b + L::bO), slo, s - NS);
            wg_commit();
            if (gated) /* S_c at bS, S̄⁺ at bR: the same layout, so elementwise by position */
#pragma unroll 1
                for (int x = tid; x < KS * PW_BV / 8; x += PW_THREADS)
                    lam += dot8(reinterpret_cast<const T *>(b + L::bS) + 8 * x, reinterpret_cast<const T *>(b + L::bR) + 8 * x);
            wg_wait();
            __syncthreads(); /* B2 */
        }

        /* ---- the K-side products: B̂ = −γ ⊙ (P S_cᵀ) + Γ K, Ŷ = F̂ + Γ_βᵀ K + Γ_H'ᵀ Q, Q̂ = scale·γ ⊙ (Ō S_cᵀ) + Γ_H' K ---- */
        const float b0 = bs[i0], b1 = bs[i0 + 8];
        {
            const float y0 = gexp(p, Gs[i0]), y1 = gexp(p, Gs[i0 + 8]);
#pragma unroll
            for (int e = 0; e < NE; e++) {
                const float y = e & 2 ? y1 : y0;
                Bh[e] *= -y;
                Qh[e] *= sc * y;
            }
        }
        wg_arrive();
        pw_tok_mma<KS, NW, 0>(Bh, wg_lo<128>(Gm), kxlo);
        pw_tok_mma<KS, NW, 1>(F, wg_lo<MAXBT / 8 * 128>(Gb), kxlo);
        pw_tok_mma<KS, NW, 1>(F, wg_lo<MAXBT / 8 * 128>(Hm), qxlo);
        pw_tok_mma<KS, NW, 0>(Qh, wg_lo<128>(Hm), kxlo);
        wg_commit();
        wg_wait();

        /* ---- k̄ = β B̂ + Ŷ, q̄ = Q̂ and the row terms of β̄, Ḡ, from the registers ---- */
        float sb[2] = {0.f, 0.f}, sg[2] = {0.f, 0.f};
#pragma unroll
        for (int e = 0; e < NE; e += 2) {
            const int i = wg_row(e), f = f0 + wg_col(e), u = (e >> 1) & 1;
            const float bb = u ? b1 : b0;
            const float2 kk = __bfloat1622float2(*reinterpret_cast<const T2 *>(Ks + cm_k<KS>(i, f)));
            const float dk0 = bb * Bh[e] + F[e], dk1 = bb * Bh[e + 1] + F[e + 1];
            sb[u] += kk.x * Bh[e] + kk.y * Bh[e + 1];
            if (gated) {
                const float2 qq = __bfloat1622float2(*reinterpret_cast<const T2 *>(Qs + cm_k<KS>(i, f)));
                sg[u] += kk.x * (bb * Bh[e] - F[e]) + kk.y * (bb * Bh[e + 1] - F[e + 1]) + qq.x * Qh[e] + qq.y * Qh[e + 1];
            }
            if (i >= n || f >= p.K) continue;
            const size_t o = ((size_t)(tok0 + i) * p.H + h) * p.K + f;
            if (p.G == 1) {
                *reinterpret_cast<T2 *>(dk + o) = __floats2bfloat162_rn(dk0, dk1);
                *reinterpret_cast<T2 *>(dq + o) = __floats2bfloat162_rn(Qh[e], Qh[e + 1]);
            } else { /* GVA: q̄, k̄ summed over the group's value heads in fp32 scratch, written at the last */
                const size_t ab = (((size_t)c * p.H + h) * MAXBT + i) * p.Kp + f;
                float2 *aq = reinterpret_cast<float2 *>(acc + ab);
                float2 *ak = reinterpret_cast<float2 *>(acc + (size_t)p.NC * p.H * MAXBT * p.Kp + ab);
                float2 x = make_float2(Qh[e], Qh[e + 1]), y = make_float2(dk0, dk1);
                if (r > 0) {
                    const float2 xa = *aq, ya = *ak;
                    x.x += xa.x, x.y += xa.y, y.x += ya.x, y.y += ya.y;
                }
                if (r == p.G - 1) {
                    *reinterpret_cast<T2 *>(dq + o) = __floats2bfloat162_rn(x.x, x.y);
                    *reinterpret_cast<T2 *>(dk + o) = __floats2bfloat162_rn(y.x, y.y);
                } else {
                    *aq = x;
                    *ak = y;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            sb[u] += __shfl_xor_sync(0xffffffffu, sb[u], 1);
            sb[u] += __shfl_xor_sync(0xffffffffu, sb[u], 2);
            sg[u] += __shfl_xor_sync(0xffffffffu, sg[u], 1);
            sg[u] += __shfl_xor_sync(0xffffffffu, sg[u], 2);
        }
        pv += __shfl_xor_sync(0xffffffffu, pv, 1);
        pv += __shfl_xor_sync(0xffffffffu, pv, 2);
        if ((lane & 3) == 0) {
            rowb[w * MAXBT + i0] = sb[0];
            rowb[w * MAXBT + i0 + 8] = sb[1];
            rowg[w * MAXBT + i0] = sg[0];
            rowg[w * MAXBT + i0 + 8] = sg[1];
            rowp[tid >> 2] = pv;
        }
        const float2 sums = block_sum2<PW_THREADS / 32>(lam, endp, red); /* (synchronizes the block) */
        if (tid < MAXBT) {
            const int i = tid;
            if (dbeta && i < n) st<T>(dbeta + (size_t)(tok0 + i) * p.HV + hv, rowp[i] + rowb[i] + rowb[MAXBT + i]);
            rowp[i] = rowg[i] + rowg[MAXBT + i]; /* Ḡ row terms, for the suffix sum below */
        }
        __syncthreads();
        if (gated && tid < 32) { /* dg_i = Ḡ_n's state term + Σ_{m ≥ i} (row terms): a suffix scan, lane l rows 2l, 2l+1 */
            const int i = 2 * lane;
            const float a = i < n ? rowp[i] : 0.f, a2 = i + 1 < n ? rowp[i + 1] : 0.f;
            float t = a + a2;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float u = __shfl_down_sync(0xffffffffu, t, o);
                if (lane + o < 32) t += u;
            }
            const float s0 = expf(Gs[n - 1]) * sums.x + sums.y;
            const size_t th = (size_t)(tok0 + i) * p.HV + hv; /* a floored gate's ḡ is 0 (gates.h) */
            if (i < n) dg[th] = rewy_gate_grad(graw[th], s0 + t, p.zero_h0 && ci.idx == 0 && i == 0);
            if (i + 1 < n) dg[th + p.HV] = rewy_gate_grad(graw[th + p.HV], s0 + t - a, 0);
        }
        __syncthreads(); /* Gs, the row sums and the buffers are free for the next value head */
    }
#else
    (void)p, (void)q, (void)k, (void)v, (void)GB, (void)do_, (void)Sc, (void)Sbar, (void)R, (void)PR, (void)acc, (void)dq,
        (void)dk, (void)dv, (void)dbeta, (void)graw, (void)dg;
#endif
}

/* Whether the scalar-gate pullback runs as this kernel (Plan::pb_wg): ReWY, bf16, chunk 64, K ≤ 128 (a multiple of 8),
 * V a multiple of 32, an sm_90a binary, the tiles in the device's shared memory, and 16-B aligned q, k, v, dO, dv with
 * 4-B aligned dq, dk (NULL in a size query: no region depends on this choice). force.pb_wg = 1 takes it wherever it
 * applies, 0 never; by default not yet: it has not been measured against pullback_fast_kernel. */
bool pullback_wg(const Prob &p, rewy_dtype dt, bool vec, bool wy, const void *q, const void *k, const void *v,
                 const void *do_, const void *dq, const void *dk, const void *dv) {
    if (vec || wy || dt != REWY_BF16 || p.BT != MAXBT || p.K > 128 || p.K % 8 || p.V % PW_BV || !p.plan.wgmma) return false;
    if (!std::is_same<state_t, __nv_bfloat16>::value || !std::is_same<rp_t, __nv_bfloat16>::value) return false;
    if ((size_t)(p.K <= 64 ? PwLayout<64>::TOTAL : PwLayout<128>::TOTAL) > p.plan.smem_optin) return false;
    if ((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)do_ | (uintptr_t)dv) & 15) || (((uintptr_t)dq | (uintptr_t)dk) & 3))
        return false;
    return p.plan.force.pb_wg == 1;
}

cudaError_t launch_pullback_wg(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                               const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR,
                               float *acc, void *dq, void *dk, void *dv, void *dbeta, const float *graw, float *dg,
                               cudaStream_t s) {
    using T = __nv_bfloat16;
    auto go = [&](auto ks) -> cudaError_t {
        constexpr int KS = decltype(ks)::value;
        constexpr size_t smem = PwLayout<KS>::TOTAL;
        cudaError_t e = ensure_smem<pullback_wg_kernel<KS>>(smem);
        if (e == cudaSuccess) e = prefer_shared((const void *)pullback_wg_kernel<KS>); /* two blocks an SM */
        if (e != cudaSuccess) return e;
        pullback_wg_kernel<KS><<<dim3(chunk_slots(p), p.H), PW_THREADS, smem, s>>>(
            p, (const T *)q, (const T *)k, (const T *)v, GB, (const T *)do_, Sc, Sbar, R, PR, acc, (T *)dq, (T *)dk,
            (T *)dv, (T *)dbeta, graw, dg);
        return cudaGetLastError();
    };
    return p.K <= 64 ? go(std::integral_constant<int, 64>{}) : go(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
