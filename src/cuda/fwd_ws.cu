/* fwd_ws.cu: the forward pass's sequential stage (MATH §2) as a warp-specialized block on Hopper's warpgroup products
 * (sm_90a), for scalar gates (DeltaNet, GDN), bf16, chunk 64, K and V of 64 or 128, after kkt_inverse has written G,
 * A, C_q, W = A E and U = A Z. Per (sequence, value head, 64 value columns), chunks in order, the state S (K × 64,
 * fp32) in the registers of one warpgroup:
 *   R = U − W S;   O = diag(scale·γ) Q S + C_q R;   S ← γ_n S + Kᵀ R̃,  R̃ = diag(e^{G_n − G_j}) R (0 on rows ≥ n)
 * The products are split over warpgroups by what they feed, so that only the chain's own steps sit on it:
 *   WG0 (chain)   S → its bf16 copy Ss (the B operand of W S and Q S);  S ← γ_n S + Kᵀ R̃
 *   WG1 (R)       R = U − W S;  R̃ → Rs, R → Ro (bf16, the B operands of Kᵀ R̃ and C_q R)
 *   WG2 (output)  O = scale·γ ⊙ (Q S) + C_q R, stored
 *   a copy warp   every chunk's K, W, Q, U, C_q and gate tiles, one chunk ahead, into two stages
 * so that a chunk step's critical path is the spill, W S, R's epilogue and Kᵀ R̃ (two products), while the output's
 * two products and all the copies run beside it (FlashQLA's Hopper forward is built the same way: a loader warp group
 * and math warp groups per stage; read for its structure only). The register chain (chain_scan.cu) does all of a
 * step in each of its warps: its loop is ~2,300 instructions a warp, the copies' issue and addresses among them.
 *
 * Hand-offs are named barriers (bar.arrive by the producing side, bar.sync by the consuming one; the count is both
 * sides' threads), one generation per chunk:
 *   FULL[s]   the copy warp's tiles of stage s are in            copy warp → WG0, WG1, WG2      (416 threads)
 *   EMPTY[s]  every warpgroup is done with stage s                WG0, WG1, WG2 → copy warp      (416)
 *   B_S       Ss holds this chunk's S                             WG0 → WG1, WG2                 (384)
 *   B_R       Rs, Ro hold this chunk's R̃, R                       WG1 → WG0, WG2                 (384)
 *   B_F       the output is done with Ss and Ro                   WG2 → WG0 (before its next spill) (256)
 * No generation can be overtaken: WG0 spills chunk c + 1 only after B_F of chunk c, which WG2 gives after B_S and
 * B_R of chunk c; WG1 writes R of chunk c + 1 only after B_S of chunk c + 1; the copy warp refills a stage only
 * after its EMPTY, and the warpgroups take a stage's next FULL only after giving its EMPTY. Every arrival has its
 * wait, the last chunks' EMPTY and B_F included (the copy warp and WG0 drain them), so no barrier is left mid-count.
 * Generic stores that a product reads (Ss, Rs, Ro) are fenced to the async proxy before their barrier; so are the
 * copy warp's tiles, once its cp.async copies have landed.
 *
 * Shared memory (wgmma.cuh's no-swizzle layouts), 161 KB at K = 128: two stages of K, W, Q (cm_k<KPC>), U
 * (cm_mn<64>), C_q (cm_k<64>) and G, β; then Ss (cm_mn<64>, KPC rows), Rs and Ro (cm_mn<64>, 64 rows). One block
 * per SM. Policy R only (S_c and R are not stored); the plan's fwd_ws, test-forced until measured. */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

constexpr int WS_BV = 64;                   /* value columns per block */
constexpr int WS_THREADS = 3 * 128 + 32;    /* three math warpgroups and the copy warp */
enum { WS_FULL = 1, WS_EMPTY = 3, WS_BS = 5, WS_BR = 6, WS_BF = 7 }; /* named barriers (0 is __syncthreads) */

__device__ __forceinline__ void nbar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nbar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

template <int KPC> struct WsLayout { /* byte offsets in dynamic shared memory */
    static constexpr int KT = MAXBT * KPC * 2, NT = MAXBT * WS_BV * 2;
    static constexpr int K = 0, W = KT, Q = 2 * KT, U = 3 * KT, CQ = U + NT, GB = CQ + MAXBT * MAXBT * 2;
    static constexpr int STAGE = (GB + 2 * MAXBT * 4 + 127) / 128 * 128;
    static constexpr int SS = 2 * STAGE, RS = SS + KPC * WS_BV * 2, RO = RS + NT, BYTES = RO + NT;
};

template <int KPC>
__global__ void __launch_bounds__(WS_THREADS, 1)
fwd_ws_kernel(Prob p, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *GB, const __nv_bfloat16 *W,
              const __nv_bfloat16 *U, const cq_t *Cq, const float *h0, float *ht, __nv_bfloat16 *o) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WsLayout<KPC>;
    using WS = WgStrides<KPC, WS_BV>;  /* the K-side tiles against the 64-column ones */
    using W64 = WgStrides<64, WS_BV>;  /* C_q (k over the tokens) */
    constexpr int MB = KPC / 64, NA = WS_BV / 2;
    extern __shared__ __align__(128) char smc[];
    T *const Ss = reinterpret_cast<T *>(smc + L::SS), *const Rs = reinterpret_cast<T *>(smc + L::RS);
    T *const Ro = reinterpret_cast<T *>(smc + L::RO);
    auto stage = [&](int st) { return smc + st * L::STAGE; };

    const ScanBlock blk = ScanBlock::get<WS_BV>(p, blockIdx.x);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0, h = hv / p.G, wg = threadIdx.x >> 7;
    int c_begin, c_end; /* the sequence, or its part in a time window */
    seq_chunks(p, sq, c_begin, c_end);
    const int nch = c_end - c_begin;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;

    if (wg == 3) { /* ---- the copy warp: chunk c's tiles into stage (c − c_begin) & 1, one chunk ahead ---- */
        const int lane = threadIdx.x & 31;
        for (int j = 0; j < nch; j++) {
            const int c = c_begin + j, st = j & 1;
            const ChunkInfo ci = p.ctab[c];
            const int n = ci.n;
            const size_t ch = (size_t)c * p.HV + hv, cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
            if (j >= 2) nbar_sync(WS_EMPTY + st, WS_THREADS); /* chunk c − 2 is done with the stage */
            char *sb = stage(st);
            /* [token][feature] rows of K, Q (key head h) and W (kkt's, [64][K]) as cm_k<KPC>; rows ≥ n zero */
            auto rows_k = [&](int off, const T *src, size_t rs) {
                T *dst = reinterpret_cast<T *>(sb + off);
#pragma unroll 4
                for (int qq = lane; qq < MAXBT * KPC / 8; qq += 32) {
                    const int r = qq / (KPC / 8), f = (qq % (KPC / 8)) * 8;
                    const bool ok = r < n;
                    cp_async16(dst + cm_k<KPC>(r, f), ok ? src + (size_t)r * rs + f : src, ok);
                }
            };
            rows_k(L::K, k + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk);
            rows_k(L::W, W + cw * MAXBT * KPC, KPC);
            rows_k(L::Q, q + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk);
            { /* U's 64 columns from v0 ([64][V] a chunk) as cm_mn<64>; C_q ([64][64]) as cm_k<64> */
                T *du = reinterpret_cast<T *>(sb + L::U);
                cq_t *dc = reinterpret_cast<cq_t *>(sb + L::CQ);
                const T *su = U + cw * MAXBT * p.V + v0;
                const cq_t *sc = Cq + cw * MAXBT * MAXBT;
#pragma unroll 4
                for (int qq = lane; qq < MAXBT * WS_BV / 8; qq += 32) {
                    const int r = qq / (WS_BV / 8), f = (qq % (WS_BV / 8)) * 8;
                    const bool ok = r < n;
                    cp_async16(du + cm_mn<WS_BV>(f, r), ok ? su + (size_t)r * p.V + f : su, ok);
                    cp_async16(dc + cm_k<MAXBT>(r, f), ok ? sc + (size_t)r * MAXBT + f : sc, ok);
                }
            }
            cp_async16(reinterpret_cast<float *>(sb + L::GB) + 4 * lane, GB + ch * 2 * MAXBT + 4 * lane, true);
            cp_async_commit();
            cp_async_wait_group<0>();
            wg_proxy_fence();
            nbar_arrive(WS_FULL + st, WS_THREADS);
        }
        for (int j = nch > 2 ? nch - 2 : 0; j < nch; j++) nbar_sync(WS_EMPTY + (j & 1), WS_THREADS); /* drain */
        return;
    }

    const uint32_t slo = wg_lo<WS::N_LBO>(Ss), rslo = wg_lo<WS::N_LBO>(Rs), rolo = wg_lo<W64::N_LBO>(Ro);
    if (wg == 0) { /* ---- WG0: the state ---- */
        float s[MB][NA];
        const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
        wg_state_load(s, h0, p, sbase, v0);
        for (int j = 0; j < nch; j++) {
            const int st = j & 1, n = p.ctab[c_begin + j].n;
            const char *sb = stage(st);
            const float *Gs = reinterpret_cast<const float *>(sb + L::GB);
            nbar_sync(WS_FULL + st, WS_THREADS);
            if (j > 0) nbar_sync(WS_BF, 256); /* the output is done with the last chunk's Ss */
            wg_state_spill<MB, NA, WS_BV>(s, Ss);
            wg_proxy_fence();
            nbar_arrive(WS_BS, 384);
            const float gn = gexp(p, Gs[n - 1]);
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int e = 0; e < NA; e++) s[mb][e] *= gn;
            nbar_sync(WS_BR, 384); /* R̃ is in Rs */
            wg_arrive();
            wg_state_add<KPC, WS_BV, MB>(s, wg_lo<WS::KT_LBO>(sb + L::K), rslo); /* S += Kᵀ R̃ */
            wg_commit();
            wg_wait();
            nbar_arrive(WS_EMPTY + st, WS_THREADS);
        }
        if (nch > 0) nbar_sync(WS_BF, 256); /* the last chunk's */
        if (ht) wg_state_save(s, ht, p, sbase, v0);
        return;
    }

    for (int j = 0; j < nch; j++) { /* ---- WG1: R;  WG2: the output ---- */
        const int st = j & 1;
        const ChunkInfo ci = p.ctab[c_begin + j];
        const int n = ci.n;
        const char *sb = stage(st);
        const float *Gs = reinterpret_cast<const float *>(sb + L::GB);
        float x[NA];
        nbar_sync(WS_FULL + st, WS_THREADS);
        nbar_sync(WS_BS, 384);
        /* x = W S (WG1) or Q S (WG2): [64 tokens][64 columns], k over the features */
        wg_arrive();
        wg_k_times_state<KPC, WS_BV>(x, wg_lo<WS::K_LBO>(sb + (wg == 1 ? L::W : L::Q)), slo);
        wg_commit();
        wg_wait();
        if (wg == 1) {
            /* R = U − W S, and R̃ = e^{G_n − G_i} R (0 on rows ≥ n), as the bf16 B operands of Kᵀ R̃ and C_q R */
            const T *Us = reinterpret_cast<const T *>(sb + L::U);
            const float gl = Gs[n - 1];
#pragma unroll
            for (int e = 0; e < NA; e += 2) {
                const int i = wg_row(e), jc = wg_col(e);
                const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Us + cm_mn<WS_BV>(jc, i)));
                const float r0 = u.x - x[e], r1 = u.y - x[e + 1], f = i < n ? gexp(p, gl - Gs[i]) : 0.f;
                *reinterpret_cast<__nv_bfloat162 *>(Rs + cm_mn<WS_BV>(jc, i)) = __floats2bfloat162_rn(f * r0, f * r1);
                *reinterpret_cast<__nv_bfloat162 *>(Ro + cm_mn<WS_BV>(jc, i)) = __floats2bfloat162_rn(r0, r1);
            }
            wg_proxy_fence();
            nbar_arrive(WS_BR, 384);
            nbar_arrive(WS_EMPTY + st, WS_THREADS);
            continue;
        }
        /* WG2: O = scale·γ ⊙ (Q S) + C_q R */
#pragma unroll
        for (int e = 0; e < NA; e++) x[e] *= p.scale * gexp(p, Gs[wg_row(e)]);
        nbar_sync(WS_BR, 384); /* R is in Ro */
        const uint32_t cqlo = wg_lo<W64::K_LBO>(sb + L::CQ);
        wg_arrive();
        static_for<0, MAXBT / 16>([&](auto ks) {
            constexpr int k0 = 16 * decltype(ks)::value;
            wg_mma<T, WS_BV, 0, 1, 2 * cm_k<MAXBT>(0, k0), W64::K_SBO, 2 * cm_mn<WS_BV>(0, k0), W64::N_SBO>(x, cqlo, rolo, 1);
        });
        wg_commit();
        wg_wait();
        nbar_arrive(WS_BF, 256);
        nbar_arrive(WS_EMPTY + st, WS_THREADS);
#pragma unroll
        for (int e = 0; e < NA; e += 2) { /* two columns a store (the register layout) */
            const int i = wg_row(e), jc = wg_col(e);
            if (i < n)
                *reinterpret_cast<__nv_bfloat162 *>(o + (size_t)(ci.tok0 + i) * rsv + (size_t)hv * p.V + v0 + jc) =
                    __floats2bfloat162_rn(x[e], x[e + 1]);
        }
    }
#else
    (void)p, (void)q, (void)k, (void)GB, (void)W, (void)U, (void)Cq, (void)h0, (void)ht, (void)o;
#endif
}

/* Whether the warp-specialized forward takes this problem (the plan's fwd_ws): bf16, scalar gates, chunk 64, K and V
 * of 64 or 128 (kkt's W and U), policy R, 16-byte aligned q, k and o, a binary with sm_90a code. Not yet a default
 * (written without a device, session 27): only where the test-only override asks (force.fwd_ws = 1). */
int fwd_ws_ok(const Prob &p, rewy_dtype dt, bool vec, bool policy_a, const void *q, const void *k, const void *o) {
    if (p.plan.force.fwd_ws != 1 || vec || policy_a || !p.plan.wgmma) return 0;
    if (!std::is_same<state_t, __nv_bfloat16>::value || !w_shape_ok(dt, p.BT, p.K, p.Kp) || !u_shape_ok(p.V)) return 0;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)o) & 15) return 0;
    return (size_t)(p.Kp == 64 ? WsLayout<64>::BYTES : WsLayout<128>::BYTES) <= p.plan.smem_optin;
}

cudaError_t launch_fwd_ws(const Prob &p, const void *q, const void *k, const float *GB, const __nv_bfloat16 *W,
                          const __nv_bfloat16 *U, const cq_t *Cq, const float *h0, float *ht, void *o, cudaStream_t s) {
    auto go = [&](auto kp) {
        constexpr int KPC = decltype(kp)::value;
        constexpr size_t smem = WsLayout<KPC>::BYTES;
        cudaError_t e = ensure_smem<fwd_ws_kernel<KPC>>(smem);
        if (e != cudaSuccess) return e;
        fwd_ws_kernel<KPC><<<scan_grid(p, WS_BV), WS_THREADS, smem, s>>>(
            p, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, GB, W, U, Cq, h0, ht, (__nv_bfloat16 *)o);
        return cudaGetLastError();
    };
    return p.Kp == 64 ? go(std::integral_constant<int, 64>{}) : go(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
