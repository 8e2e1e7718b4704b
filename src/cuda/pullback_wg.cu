/* pullback_wg.cu: the scalar-gate ReWY pullback (pullback.cu's math, term for term: its header names every term) on
 * Hopper's warpgroup products, for bf16, chunk 64, K ≤ 128, V ≤ 128 (multiples of 8), sm_90a. A persistent grid of
 * one block an SM (two warpgroups); a block walks its items, an item being one (chunk slot, value head): the value
 * heads of a key head's group one after another (they share K and Q and add into q̄, k̄), then its next slot.
 *
 * Why: pullback_fast_kernel is one 16-warp block an SM whose phases (the exposed first copies, the V slabs, the n×n
 * coefficients, the K-side products, the stores) run one after another with nothing beside them (Nsight, session
 * 31: issue slots 40 % busy, DRAM 40 %); the kernel reads about 200 KB a chunk and head and is bound by waiting for
 * them. Here every tile of an item is resident at once (P, Ō, R, V [64][128] and S̄⁺, S_c [K][128]: 128 KB at K = 128),
 * and the next item's copies are issued as soon as this item's last reader of each tile is done: R and V after pass A,
 * the rest after pass B, so they run during the K-side products, the epilogue and the next item's wait. K, Q and the
 * gates have two stages. Each product is one wgmma group per warpgroup.
 *
 * Warpgroup w owns the K-wide results' features f0 = w·KS/2 … (N = KS/2 columns of every m64 accumulator), so that a
 * thread holds only three of them, each started by a V-long product and finished by K-side ones:
 *   B̂ = −γ ⊙ (P S_cᵀ) + Γ K,   Ŷ = e^{G_n−G} ⊙ (R S̄⁺ᵀ) + Γ_βᵀ K + Γ_H'ᵀ Q,   Q̂ = scale·γ ⊙ (Ō S_cᵀ) + Γ_H' K
 *   k̄ = β ⊙ B̂ + Ŷ,  q̄ = Q̂,  β̄ = ⟨k, B̂⟩ + ⟨P, v⟩,  Ḡ = ⟨k, β ⊙ B̂ − Ŷ⟩ + ⟨q, Q̂⟩  (Ŷ = pullback_fast's Ĉ + F̂)
 * The n×n coefficients D = P Rᵀ (warpgroup 0) and H_q = Ō Rᵀ (warpgroup 1) are formed first, masked and decayed into
 * three bf16 tiles (Γ, Γ_β = diag(β) Γ, Γ_H' = scale·Γ_H); Γ_βᵀ and Γ_H'ᵀ are the same tiles read MN-major.
 *
 * An item, with the barriers and the next item's copies (cp.async groups: RV, then A = P, Ō, S̄⁺, gates, K and Q, then
 * B = S_c):
 *   top     wait for this item's RV and A groups; fence; __syncthreads
 *   pass A  D or H_q, R S̄⁺ᵀ (products); dv = β P, ⟨P, v⟩ beside them; Γ, Γ_β, Γ_H' (fenced); F̂ = e^{G_n−G} R S̄⁺ᵀ
 *   B_A     wait for this item's B group (S_c); fence; __syncthreads; then the next item's R and V (RV)
 *   pass B  P S_cᵀ, Ō S_cᵀ (products); ⟨S̄⁺, S_c⟩ beside them
 *   B_B     __syncthreads; then the next item's A and B groups
 *   K-side  the 16 products over the chunk's tokens; the epilogue from the registers; the row sums and the in-chunk
 *           suffix sum of Ḡ as pullback_fast_kernel's; __syncthreads
 * A copy into a tile is issued after the barrier that ends its last read; the gates and K, Q of the next item go to
 * the other stage (K, Q only when the key head changes), whose last reader finished before this item's top. */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

constexpr int PW_THREADS = 256; /* two warpgroups */
constexpr int PW_V = 128;       /* the V extent of the tiles (zero beyond V) */

template <int KS> struct PwLayout {
    static constexpr int NW = KS / 2;           /* K-wide result columns per warpgroup */
    static constexpr int TT = MAXBT * PW_V * 2; /* a [64][128] bf16 tile (P, Ō, R, V) */
    static constexpr int ST = KS * PW_V * 2;    /* a [KS][128] tile (S̄⁺, S_c) */
    static constexpr int oP = 0, oO = TT, oR = 2 * TT, oV = 3 * TT, oSb = 4 * TT, oSc = oSb + ST;
    static constexpr int KQ = MAXBT * KS * 2;   /* a [64][KS] tile (K, Q) */
    static constexpr int oKQ = oSc + ST;        /* stage z: K at oKQ + 2·z·KQ, Q after it */
    static constexpr int GT = MAXBT * MAXBT * 2; /* a [64][64] bf16 Γ tile */
    static constexpr int oG = oKQ + 4 * KQ, oGb = oG + GT, oH = oGb + GT;
    /* G, β [2][64] a stage; then per-warpgroup β̄ and Ḡ row terms [2][64] each, ⟨P, v⟩ by row [64], block sums [16] */
    static constexpr int oGB = oH + GT, oRed = oGB + 2 * 2 * MAXBT * 4, TOTAL = oRed + (5 * MAXBT + 16) * 4;
    static_assert(oKQ % 128 == 0 && oG % 128 == 0, "PwLayout: 128-B aligned tiles");
};

/* rows [0, nv) and columns [0, V) of a [ROWS][128] bf16 tile (row r at src + r·rs) as cm_k<128>(r, column), zero
 * elsewhere, by the block's threads: eight consecutive threads fill one core matrix (8 rows × 16 B), so the shared
 * writes do not conflict, and a warp reads 64 contiguous bytes of each of its 8 rows */
template <int ROWS>
__device__ __forceinline__ void pw_copy(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t rs, int nv, int V) {
#pragma unroll
    for (int m = 0; m < ROWS * 16 / PW_THREADS; m++) {
        const int x = threadIdx.x + PW_THREADS * m, r = (x >> 7) * 8 + (x & 7), c8 = ((x >> 3) & 15) * 8;
        const bool ok = r < nv && c8 < V;
        cp_async16(dst + cm_k<PW_V>(r, c8), ok ? src + (size_t)r * rs + c8 : src, ok);
    }
}

/* x = A Bᵀ over the 128 columns: A [64][128] and B [N][128], both cm_k<128> (K-major: k runs along the columns) */
template <int N> __device__ __forceinline__ void pw_v_mma(float (&x)[N / 2], uint32_t alo, uint32_t blo) {
    static_for<0, PW_V / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value, OFF = 2 * cm_k<PW_V>(0, k0), SBO = PW_V / 8 * 128;
        wg_mma<__nv_bfloat16, N, 0, 0, OFF, SBO, OFF, SBO>(x, alo, blo, k0);
    });
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

template <int KS>
__global__ void __launch_bounds__(PW_THREADS, 1)
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
    const int tid = threadIdx.x, w = tid >> 7, lane = tid & 31;
    T *const Ps = reinterpret_cast<T *>(smc + L::oP), *const Os = reinterpret_cast<T *>(smc + L::oO);
    T *const Rs = reinterpret_cast<T *>(smc + L::oR), *const Vs = reinterpret_cast<T *>(smc + L::oV);
    T *const Sbs = reinterpret_cast<T *>(smc + L::oSb), *const Scs = reinterpret_cast<T *>(smc + L::oSc);
    T *const Gm = reinterpret_cast<T *>(smc + L::oG), *const Gb = reinterpret_cast<T *>(smc + L::oGb);
    T *const Hm = reinterpret_cast<T *>(smc + L::oH);
    float *const rowb = reinterpret_cast<float *>(smc + L::oRed); /* [2][64] β̄ row terms by warpgroup */
    float *const rowg = rowb + 2 * MAXBT;                          /* [2][64] Ḡ row terms */
    float *const rowp = rowg + 2 * MAXBT;                          /* [64] ⟨P, v⟩, then Ḡ's row totals */
    float *const red = rowp + MAXBT;                               /* [16] block sums */
    auto kq_stage = [&](int z) { return reinterpret_cast<T *>(smc + L::oKQ + 2 * z * L::KQ); }; /* K; Q at + MAXBT·KS */
    auto gate_stage = [&](int z) { return reinterpret_cast<float *>(smc + L::oGB + z * 2 * MAXBT * 4); };
    const int f0 = NW * w, i0 = wg_row(0); /* this warpgroup's features; this thread's rows i0, i0 + 8 */
    const size_t rsv = (size_t)p.HV * p.V;
    const float sc = p.scale;
    const bool gated = p.gated && dg; /* whether Ḡ is wanted: its terms are skipped otherwise (DeltaNet) */

    /* the items: unit u = (slot u % nslot, key head u / nslot), value heads r = 0 … G−1 of its group */
    const int nslot = chunk_slots(p), nunit = nslot * p.H;
    auto unit_chunk = [&](int u) { /* the unit's chunk, −1 for an empty slot or chunk */
        const int c = slot_chunk(p, u % nslot);
        return c >= 0 && p.ctab[c].n > 0 ? c : -1;
    };
    auto next_unit = [&](int u) {
        for (u += gridDim.x; u < nunit; u += gridDim.x)
            if (unit_chunk(u) >= 0) return u;
        return nunit;
    };
    /* item (u, r)'s tiles: R and V (rv), or P, Ō, S̄⁺, its gates into stage gz, K and Q into stage kz (kq), committed, then
     * S_c committed */
    auto issue = [&](int u, int r, bool rv, int gz, int kz, bool kq) {
        const int c = unit_chunk(u), h = u / nslot, hv = h * p.G + r;
        const ChunkInfo ci = p.ctab[c];
        const PbSlices<T> hs = pb_slices<T>(p, (size_t)(u % nslot) * p.HV + hv, ci.tok0, hv, R, PR, Sc, Sbar, do_, v);
        if (rv) {
            pw_copy<MAXBT>(Rs, hs.R, p.V, ci.n, p.V);
            pw_copy<MAXBT>(Vs, hs.v, rsv, ci.n, p.V);
            cp_async_commit();
            return;
        }
        pw_copy<MAXBT>(Ps, hs.PR, p.V, ci.n, p.V);
        pw_copy<MAXBT>(Os, hs.dO, rsv, ci.n, p.V);
        pw_copy<KS>(Sbs, hs.Sb, p.V, p.K, p.V);
        wg_copy_gates(gate_stage(gz), GB, p, hv, c);
        if (kq) {
            wg_copy_kq<KS, PW_THREADS>(kq_stage(kz), k, p, ci, h);
            wg_copy_kq<KS, PW_THREADS>(kq_stage(kz) + MAXBT * KS, q, p, ci, h);
        }
        cp_async_commit();
        pw_copy<KS>(Scs, hs.Sc, p.V, p.K, p.V);
        cp_async_commit();
    };

    int u = blockIdx.x < nunit && unit_chunk(blockIdx.x) >= 0 ? blockIdx.x : next_unit(blockIdx.x);
    if (u >= nunit) return;
    int r = 0, kz = 0, gz = 0;
    issue(u, 0, true, 0, 0, true);
    issue(u, 0, false, 0, 0, true);
    for (;;) {
        const int c = unit_chunk(u), h = u / nslot, hv = h * p.G + r;
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n, tok0 = ci.tok0;
        /* the next item, whose copies this one issues */
        const int u2 = r + 1 < p.G ? u : next_unit(u), r2 = r + 1 < p.G ? r + 1 : 0;
        const bool more = u2 < nunit, newkq = r2 == 0;
        const T *const Ks = kq_stage(kz), *const Qs = Ks + MAXBT * KS;
        const float *const Gs = gate_stage(gz), *const bs = Gs + MAXBT;
        /* K and Q read MN-major from this warpgroup's features (the K-side products' B operands) */
        const uint32_t kxlo = wg_lo<KS / 8 * 128>(Ks + cm_k<KS>(0, f0)), qxlo = wg_lo<KS / 8 * 128>(Qs + cm_k<KS>(0, f0));

        cp_async_wait_group<1>(); /* RV and A; S_c may still be in flight */
        wg_proxy_fence();
        __syncthreads();

        /* ---- pass A: D = P Rᵀ (warpgroup 0) or H_q = Ō Rᵀ (warpgroup 1), R S̄⁺ᵀ; dv = β P, ⟨P, v⟩ ---- */
        float X[32], F[NE];
        float pv = 0.f; /* ⟨P, v⟩ over this thread's columns of row tid / 4 */
        wg_arrive();
        pw_v_mma<MAXBT>(X, wg_lo<128>(w ? Os : Ps), wg_lo<128>(Rs));
        pw_v_mma<NW>(F, wg_lo<128>(Rs), wg_lo<128>(Sbs + cm_k<PW_V>(f0, 0)));
        wg_commit();
        { /* beside the products: four 16-byte core rows of row tid / 4 per thread */
            const int i = tid >> 2;
            if (i < n) {
                const float bi = bs[i];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const int c8 = ((tid & 3) + 4 * m) * 8;
                    if (c8 >= p.V) break;
                    float pf[8], vf[8];
                    ld8(Ps + cm_k<PW_V>(i, c8), pf);
                    ld8(Vs + cm_k<PW_V>(i, c8), vf);
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        pv += pf[e] * vf[e];
                        pf[e] *= bi;
                    }
                    st8(dv + (size_t)(tok0 + i) * rsv + (size_t)hv * p.V + c8, pf);
                }
            }
        }
        wg_wait();
        { /* Γ = 𝓛_<(−D) ⊙ e^{G_i−G_j} and Γ_β = diag(β) Γ (warpgroup 0), Γ_H' = scale·𝓛_≤(H_q) ⊙ e^{G_i−G_j}
           * (warpgroup 1), as cm_k<64>(i, j) in bf16 (the previous item's K-side products, their last readers, ended
           * before its closing barrier) */
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
        cp_async_wait_group<0>(); /* S_c */
        wg_proxy_fence();         /* S_c's copies, and the Γ tiles for the K-side products */
        __syncthreads();          /* B_A: R and V are read no more in this item */
        if (more) issue(u2, r2, true, 0, 0, false);

        /* ---- pass B: P S_cᵀ, Ō S_cᵀ; ⟨S̄⁺, S_c⟩ for Ḡ_n ---- */
        float Bh[NE], Qh[NE];
        float lam = 0.f;
        {
            const uint32_t slo = wg_lo<128>(Scs + cm_k<PW_V>(f0, 0));
            wg_arrive();
            pw_v_mma<NW>(Bh, wg_lo<128>(Ps), slo);
            pw_v_mma<NW>(Qh, wg_lo<128>(Os), slo);
            wg_commit();
            if (gated) /* the same layout, so elementwise by position */
#pragma unroll 1
                for (int x = tid; x < KS * PW_V / 8; x += PW_THREADS) lam += dot8(Scs + 8 * x, Sbs + 8 * x);
            wg_wait();
        }
        __syncthreads(); /* B_B: P, Ō, S̄⁺ and S_c are read no more in this item */
        if (more) issue(u2, r2, false, gz ^ 1, newkq ? kz ^ 1 : kz, newkq);

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
            const int i = wg_row(e), f = f0 + wg_col(e), hi = (e >> 1) & 1;
            const float bb = hi ? b1 : b0;
            const float2 kk = __bfloat1622float2(*reinterpret_cast<const T2 *>(Ks + cm_k<KS>(i, f)));
            const float dk0 = bb * Bh[e] + F[e], dk1 = bb * Bh[e + 1] + F[e + 1];
            sb[hi] += kk.x * Bh[e] + kk.y * Bh[e + 1];
            if (gated) {
                const float2 qq = __bfloat1622float2(*reinterpret_cast<const T2 *>(Qs + cm_k<KS>(i, f)));
                sg[hi] += kk.x * (bb * Bh[e] - F[e]) + kk.y * (bb * Bh[e + 1] - F[e + 1]) + qq.x * Qh[e] + qq.y * Qh[e + 1];
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
        for (int z = 0; z < 2; z++) {
            sb[z] += __shfl_xor_sync(0xffffffffu, sb[z], 1);
            sb[z] += __shfl_xor_sync(0xffffffffu, sb[z], 2);
            sg[z] += __shfl_xor_sync(0xffffffffu, sg[z], 1);
            sg[z] += __shfl_xor_sync(0xffffffffu, sg[z], 2);
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
                const float y = __shfl_down_sync(0xffffffffu, t, o);
                if (lane + o < 32) t += y;
            }
            const float s0 = expf(Gs[n - 1]) * sums.x + sums.y;
            const size_t th = (size_t)(tok0 + i) * p.HV + hv; /* a floored gate's ḡ is 0 (gates.h) */
            if (i < n) dg[th] = rewy_gate_grad(graw[th], s0 + t, p.zero_h0 && ci.idx == 0 && i == 0);
            if (i + 1 < n) dg[th + p.HV] = rewy_gate_grad(graw[th + p.HV], s0 + t - a, 0);
        }
        __syncthreads(); /* the row sums, the Γ tiles, this stage of the gates and K, Q are free */
        if (!more) break;
        if (newkq) kz ^= 1;
        gz ^= 1;
        u = u2;
        r = r2;
    }
#else
    (void)p, (void)q, (void)k, (void)v, (void)GB, (void)do_, (void)Sc, (void)Sbar, (void)R, (void)PR, (void)acc, (void)dq,
        (void)dk, (void)dv, (void)dbeta, (void)graw, (void)dg;
#endif
}

/* Whether the scalar-gate pullback runs as this kernel (Plan::pb_wg): ReWY, bf16, chunk 64, K ≤ 128 and V ≤ 128 (both
 * multiples of 8), an sm_90a binary, the tiles in the device's shared memory (218 KB at K = 128), and 16-B aligned q, k,
 * v, dO, dv with 4-B aligned dq, dk (NULL in a size query: no region depends on this choice). force.pb_wg = 1 takes it
 * wherever it applies, 0 never; by default not yet: it has not been measured against pullback_fast_kernel. */
bool pullback_wg(const Prob &p, rewy_dtype dt, bool vec, bool wy, const void *q, const void *k, const void *v,
                 const void *do_, const void *dq, const void *dk, const void *dv) {
    if (vec || wy || dt != REWY_BF16 || p.BT != MAXBT || p.K > 128 || p.K % 8 || p.V > PW_V || p.V % 8 || !p.plan.wgmma)
        return false;
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
    const int nunit = chunk_slots(p) * p.H; /* a persistent grid: one block an SM walks every gridDim.x-th unit */
    const int grid = p.plan.sms > 0 && p.plan.sms < nunit ? p.plan.sms : nunit;
    auto go = [&](auto ks) -> cudaError_t {
        constexpr int KS = decltype(ks)::value;
        constexpr size_t smem = PwLayout<KS>::TOTAL;
        cudaError_t e = ensure_smem<pullback_wg_kernel<KS>>(smem);
        if (e != cudaSuccess) return e;
        pullback_wg_kernel<KS><<<grid, PW_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, GB,
                                                             (const T *)do_, Sc, Sbar, R, PR, acc, (T *)dq, (T *)dk,
                                                             (T *)dv, (T *)dbeta, graw, dg);
        return cudaGetLastError();
    };
    return p.K <= 64 ? go(std::integral_constant<int, 64>{}) : go(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
