/* bwd_state_scan_wg.cu: the reverse chunk scan (MATH §3, §4b (1), §5; the stage: bwd_state_scan.cuh) on
 * Hopper's warpgroup products, for scalar gates (DeltaNet, GDN), bf16 inputs, chunk 64, K of 64 or 128.
 * Chunks in reverse order, S̄ (KPC × BVT, fp32) in the registers of one warpgroup:
 *   store S̄⁺;   R̄ = diag(f) K S̄⁺ + C_qᵀ Ō   (f_j = e^{G_n − G_j}: F = diag(f) K);   P = Aᵀ R̄ (stored, or R̄ for WY)
 *   S̄ ← e^{G_n} S̄⁺ + Q_gᵀ Ō − Eᵀ P,  with Q_gᵀ Ō = Qᵀ (scale·e^{G}⊙Ō) and Eᵀ P = Kᵀ (β e^{G}⊙P)
 * C_q = 𝓛_≤(scale·Q Kᵀ ⊙ e^{G_i − G_j}) is formed here from the chunk's Q and K tiles (one 64 × 64 × K
 * product per chunk, split over the warpgroups by columns, issued before the state spill so the two overlap)
 * rather than read: the backward then needs no C_q launch before the scans (under policy R it was a 0.11 ms
 * kkt pass at GDN (8,2048,32), reading Q and K once more).
 * As in state_scan_wg.cu: NWG warpgroups per block (two at 64 columns) share the K, Q, Aᵀ, C_q and gate
 * tiles of their (sequence, head); each keeps its Ō tile and one region for S̄⁺ (bf16, B of K S̄⁺), then R̄
 * (tf32, B of Aᵀ R̄), then −βe^{G}⊙P (bf16, B of Kᵀ P'). Ō is rescaled in place to scale·e^{G}⊙Ō once
 * C_qᵀ Ō has read it. A is copied transposed (tf32 operands must be K-major: Aᵀ[j][i] with i contiguous).
 * Qᵀ Ō' is issued before Aᵀ R̄ so that the two run together. K and Q have one buffer each (two would not
 * leave room for two blocks per SM): K's copy for the next chunk starts after the chunk's last product.
 * The sequence split's local walks (segments.cu, MATH §11d step 1) run here too: with Sbar NULL the walk stores nothing
 * but its end state (X̄ from dht = 0), and a second grid of homogeneous blocks walks from S̄ = I with Ō = 0 (never
 * copied: its tile stays zero) to Tᵀ, unless the forward left its maps T (tskip: those blocks return at once). */
#include <limits.h>
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

template <int KPC, int BVT, int NWG> struct WgBscanLayout { /* byte offsets in dynamic shared memory */
    static constexpr int KT = MAXBT * KPC * 2;
    static constexpr int SRB = KPC * BVT * 2 > BVT * MAXBT * 4 ? KPC * BVT * 2 : BVT * MAXBT * 4;
    static constexpr int WGB = MAXBT * BVT * 2 + SRB; /* one warpgroup's Ō and S̄⁺ / R̄ / P' */
    static constexpr int K = 0, Q = KT, AT = 2 * KT, CQ = AT + MAXBT * MAXBT * 4, GB = CQ + MAXBT * MAXBT * 2,
                         WG = GB + 4 * MAXBT * 4, BYTES = WG + NWG * WGB;
    static constexpr int O = 0, SR = MAXBT * BVT * 2; /* inside a warpgroup's part */
};

template <int KPC, int BVT, int NWG>
__global__ void __launch_bounds__(128 * NWG, NWG == 2 ? 2 : 1)
bwd_state_scan_wg_kernel(Prob p, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *GB, const float *A,
                         const __nv_bfloat16 *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                         int hom0, float *tout, const int *tskip) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WgBscanLayout<KPC, BVT, NWG>;
    constexpr int NT = 128 * NWG, MB = KPC / 64, NA = BVT / 2;
    extern __shared__ __align__(128) char smc[];
    T *const Ks = reinterpret_cast<T *>(smc + L::K), *const Qs = reinterpret_cast<T *>(smc + L::Q);
    float *const Ats = reinterpret_cast<float *>(smc + L::AT);
    T *const Cs = reinterpret_cast<T *>(smc + L::CQ);
    float *const GBs = reinterpret_cast<float *>(smc + L::GB);
    const int wgi = threadIdx.x >> 7;
    char *const wgs = smc + L::WG + wgi * L::WGB;
    T *const Os = reinterpret_cast<T *>(wgs + L::O);
    T *const Ss = reinterpret_cast<T *>(wgs + L::SR), *const Ps = Ss, *const Po = Ps + MAXBT * BVT; /* P', P */
    float *const Rs = reinterpret_cast<float *>(wgs + L::SR);

    /* blocks from hom0 on: the homogeneous walk (segments, MATH §11c), from S̄ = I with Ō = 0, whose end state is Tᵀ */
    const bool hom = (int)blockIdx.x >= hom0;
    if (hom && tskip && *tskip) return; /* the forward's maps stand in (the combine reads them transposed) */
    const ScanBlock blk = ScanBlock::get<BVT * NWG>(p, hom ? blockIdx.x - hom0 : blockIdx.x);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0 + wgi * BVT, h = hv / p.G, tid = threadIdx.x;

    /* cp.async copies of chunk cj's tiles (scan_wg.cuh; Aᵀ here) */
    auto issue_kq = [&](T *dst, const T *x, const ChunkInfo &cj) { wg_copy_kq<KPC, NT>(dst, x, p, cj, h); };
    auto issue_o = [&](const ChunkInfo &cj) {
        if (!hom) wg_copy_cols<BVT>(Os, do_, p, cj, hv, v0);
    };
    auto issue_at = [&](int cj) { wg_copy_at<NT>(Ats, A, p, hv, cj, tid); };
    auto issue_gb = [&](float *dst, int cj) { wg_copy_gates(dst, GB, p, hv, cj); };

    /* S̄: feature 64·mb + wg_row(e), column wg_col(e); from dht */
    float s[MB][NA];
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    if (hom) wg_homogeneous_start<BVT>(s, Os, v0);
    else wg_state_load(s, dht, p, sbase, v0);

    const bool store = Sbar && wy; /* R̄ stored (WY); without S̄⁺ (the local walks) nothing is */
    const int c_begin = p.coff[sq], c_last = p.coff[sq + 1] - 1;
    ChunkInfo ci = {}, cn = {};
    if (c_last >= c_begin) {
        ci = p.ctab[c_last];
        cn = c_last - 1 >= c_begin ? p.ctab[c_last - 1] : ci;
        issue_kq(Ks, k, ci);
        issue_kq(Qs, q, ci);
        issue_o(ci);
        issue_at(c_last);
        issue_gb(GBs, c_last);
        cp_async_commit();
    }
    using W = WgStrides<KPC, BVT>; /* descriptor strides of the operand tiles */
    constexpr int C_LBO = MAXBT / 8 * 128, C_SBO = 128; /* C_qᵀ: MN-major view of cm_k<64> */
    const uint32_t klo = wg_lo<W::K_LBO>(Ks), ktlo = wg_lo<W::KT_LBO>(Ks), qtlo = wg_lo<W::KT_LBO>(Qs);
    const uint32_t slo = wg_lo<W::N_LBO>(Ss), olo = wg_lo<W::N_LBO>(Os), clo = wg_lo<C_LBO>(Cs);
    /* C_q: this warpgroup's NCQ columns j ∈ [wgi·NCQ, …), Q (A, K-major) times the K rows j (B, K-major) */
    constexpr int NCQ = MAXBT / NWG;
    const uint32_t qlo = wg_lo<W::K_LBO>(Qs), kjlo = klo + ((2 * cm_k<KPC>(wgi * NCQ, 0)) >> 4);
    const uint32_t alo = wg_lo<W::T_LBO>(Ats), rlo = wg_lo<W::T_LBO>(Rs);
    int cur = 0;
    for (int c = c_last; c >= c_begin; c--) {
        const int n = ci.n;
        const bool has_next = c - 1 >= c_begin;
        const ChunkInfo cnn = c - 2 >= c_begin ? p.ctab[c - 2] : cn;
        const size_t ch = (size_t)c * p.HV + hv;
        const float *const Gs = GBs + cur * 2 * MAXBT, *const bs = Gs + MAXBT;
        cp_async_wait_group<0>();
        __syncthreads(); /* chunk c's tiles are in */
        if (has_next) {
            issue_gb(GBs + (cur ^ 1) * 2 * MAXBT, c - 1);
            cp_async_commit();
        }
        /* C_q's columns of this warpgroup (issued first: the state spill runs beside it) */
        float cq[NCQ / 2];
        wg_arrive();
        static_for<0, KPC / 16>([&](auto ks) {
            constexpr int k0 = 16 * decltype(ks)::value;
            wg_mma<T, NCQ, 0, 0, 2 * cm_k<KPC>(0, k0), W::K_SBO, 2 * cm_k<KPC>(0, k0), W::K_SBO>(cq, qlo, kjlo, k0);
        });
        wg_commit();
        /* S̄⁺ in bf16: the B operand of K S̄⁺, and from there the saved states (wg_store_state) */
        state_t *const Sd = Sbar ? Sbar + ch * p.K * p.V : nullptr;
        wg_state_spill<MB, NA, BVT>(s, Ss);
        wg_wait();
        /* (C_q)_ij = scale (q_i·k_j) e^{G_i − G_j} for j ≤ i < n (the exponent ≤ 0 where kept), into Cs as
         * cm_k<64>(i, j), read MN-major as C_qᵀ */
#pragma unroll
        for (int e = 0; e < NCQ / 2; e += 2) {
            const int i = wg_row(e), j = wgi * NCQ + wg_col(e);
            const bool row = i < n;
            const float c0 = row && j <= i ? p.scale * cq[e] * gexp(p, Gs[i] - Gs[j]) : 0.f;
            const float c1 = row && j + 1 <= i ? p.scale * cq[e + 1] * gexp(p, Gs[i] - Gs[j + 1]) : 0.f;
            *reinterpret_cast<__nv_bfloat162 *>(Cs + cm_k<MAXBT>(i, j)) = __floats2bfloat162_rn(c0, c1);
        }
        wg_proxy_fence();
        __syncthreads();
        /* R̄ = diag(f) (K S̄⁺) + C_qᵀ Ō */
        float r[NA];
        wg_arrive();
        wg_k_times_state<KPC, BVT>(r, klo, slo);
        if (Sd) wg_store_rows<KPC, BVT>(Sd, Ss, p.K, p.V, v0); /* while the product runs */
        wg_commit();
        wg_wait();
        const float gl = Gs[n - 1];
#pragma unroll
        for (int e = 0; e < NA; e++) {
            const int i = wg_row(e);
            r[e] *= i < n ? gexp(p, gl - Gs[i]) : 0.f;
        }
        wg_arrive();
        static_for<0, MAXBT / 16>([&](auto ks) {
            constexpr int k0 = 16 * decltype(ks)::value;
            wg_mma<T, BVT, 1, 1, 2 * cm_k<MAXBT>(k0, 0), C_SBO, 2 * cm_mn<BVT>(0, k0), W::N_SBO>(r, clo, olo, 1);
        });
        wg_commit();
        wg_wait();
        __syncthreads(); /* every warp is done with S̄⁺, Ō and C_q */
        /* R̄ as tf32 (B of Aᵀ R̄), stored for WY; S̄⁺ decays; Ō ← scale·e^{G}⊙Ō in place */
        rp_t *const PRc = store ? PR + ch * MAXBT * p.V + v0 : nullptr;
#pragma unroll
        for (int e = 0; e < NA; e += 2) {
            const int i = wg_row(e), j = wg_col(e);
            Rs[cm_t<MAXBT>(j, i)] = __uint_as_float(to_tf32(r[e]));
            Rs[cm_t<MAXBT>(j + 1, i)] = __uint_as_float(to_tf32(r[e + 1]));
            if (store && i < n && v0 + j < p.V) {
                rp_t *d = PRc + (size_t)i * p.V + j;
                if constexpr (sizeof(rp_t) == 2) *reinterpret_cast<__nv_bfloat162 *>(d) = __floats2bfloat162_rn(r[e], r[e + 1]);
                else d[0] = r[e], d[1] = r[e + 1];
            }
        }
        const float gn = gexp(p, gl);
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int e = 0; e < NA; e++) s[mb][e] *= gn;
#pragma unroll
        for (int m = 0; m < MAXBT * BVT / 2 / 128; m++) { /* element pairs of the cm_mn tile; token from the offset */
            const int o2 = 2 * ((tid & 127) + 128 * m), i = (o2 >> 6) / (BVT / 8) * 8 + ((o2 & 63) >> 3);
            __nv_bfloat162 *po = reinterpret_cast<__nv_bfloat162 *>(Os + o2);
            const float2 ov = __bfloat1622float2(*po);
            const float sc = p.scale * gexp(p, Gs[i]);
            *po = __floats2bfloat162_rn(sc * ov.x, sc * ov.y);
        }
        wg_proxy_fence();
        __syncthreads();
        /* S̄ += Qᵀ Ō' (issued first: it runs with Aᵀ R̄);  P = Aᵀ R̄ (tf32) */
        wg_arrive();
        wg_state_add<KPC, BVT, MB>(s, qtlo, olo);
        wg_commit();
        float pp[NA];
        wg_arrive();
        wg_tf32_product<BVT>(pp, alo, rlo);
        wg_commit();
        wg_wait();
        __syncthreads(); /* every warp is done with R̄, Q, Ō', Aᵀ */
        if (has_next) {
            issue_kq(Qs, q, cn);
            issue_o(cn);
            issue_at(c - 1);
            cp_async_commit();
        }
        /* P' = −β e^{G} ⊙ P, the B operand of Kᵀ P', and P in bf16 beside it for its store (ReWY) */
#pragma unroll
        for (int e = 0; e < NA; e += 2) {
            const int i = wg_row(e), j = wg_col(e);
            if (!wy) *reinterpret_cast<__nv_bfloat162 *>(Po + cm_mn<BVT>(j, i)) = __floats2bfloat162_rn(pp[e], pp[e + 1]);
            const float f = -bs[i] * gexp(p, Gs[i]);
            *reinterpret_cast<__nv_bfloat162 *>(Ps + cm_mn<BVT>(j, i)) = __floats2bfloat162_rn(f * pp[e], f * pp[e + 1]);
        }
        wg_proxy_fence();
        __syncthreads();
        /* S̄ += Kᵀ P' */
        wg_arrive();
        wg_state_add<KPC, BVT, MB>(s, ktlo, slo);
        if (Sbar && !wy) wg_store_rows<MAXBT, BVT>(PR + ch * MAXBT * p.V, Po, n, p.V, v0); /* while Kᵀ P' runs */
        wg_commit();
        wg_wait();
        if (has_next) {
            __syncthreads(); /* every warp is done with K */
            issue_kq(Ks, k, cn);
            cp_async_commit();
        }
        cur ^= 1;
        ci = cn;
        cn = cnn;
    }
    if (float *const out = hom ? tout : dh0) wg_state_save(s, out, p, sbase, v0);
#else
    (void)p, (void)q, (void)k, (void)GB, (void)A, (void)do_, (void)dht, (void)dh0, (void)Sbar, (void)PR, (void)wy;
    (void)hom0, (void)tout, (void)tskip;
#endif
}

/* Whether the wgmma reverse scan takes this problem: as state_scan_wg_ok (the same grids), with q and
 * do 16-byte aligned. force.scan_wg forces both wgmma scans on or off. */
bool bwd_state_scan_wg_ok(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *do_, bool vec) {
    if (sizeof(state_t) != 2 || ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(do_)) & 15)) return false;
    return state_scan_wg_ok(p, dt, k, do_, vec);
}

cudaError_t launch_bwd_state_scan_wg(const Prob &p, const void *q, const void *k, const float *GB, const float *A,
                                     const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                                     cudaStream_t s, float *tout, const int *tskip) {
    using bf16 = __nv_bfloat16;
    if (!p.a16) return cudaErrorInvalidValue; /* the bf16 saved A (bwd_state_scan_wg_ok's problems have it; wg_copy_at) */
    auto go = [&](auto kp, auto bv, auto nwg) {
        constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value, NWG = decltype(nwg)::value;
        constexpr size_t smem = WgBscanLayout<KPC, BVT, NWG>::BYTES;
        cudaError_t e = ensure_smem<bwd_state_scan_wg_kernel<KPC, BVT, NWG>>(smem);
        if (e != cudaSuccess) return e;
        /* tout: the homogeneous blocks after the ordinary ones (their V is K: K = V) */
        const unsigned nb = scan_grid(p, BVT * NWG).x;
        if (tout && p.K != p.V) return cudaErrorInvalidValue;
        bwd_state_scan_wg_kernel<KPC, BVT, NWG><<<tout ? 2 * nb : nb, 128 * NWG, smem, s>>>(
            p, (const bf16 *)q, (const bf16 *)k, GB, A, (const bf16 *)do_, dht, dh0, Sbar, PR, wy, tout ? (int)nb : INT_MAX,
            tout, tskip);
        return cudaGetLastError();
    };
    return with_wg_tiles(p, go);
}

} // namespace rewy_cuda
