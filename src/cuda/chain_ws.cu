/* chain_ws.cu: the forward pass's chain with its output (MATH §2, the A-and-V form of chain_scan.cu's forward pass)
 * as one warp-specialized block per (sequence, value head, 128 value columns) on Hopper's warpgroup products, for
 * scalar gates, bf16, chunk 64, K of 64 or 128, V = 128 (sm_90a):
 *   store S_c;   Y = diag(β)(V − γ ⊙ K S);   R = A Y;   O = diag(scale·γ) Q S + C_q R;
 *   S ← γ_n S + Kᵀ diag(f) R,   f_j = e^{G_n − G_j} (j < n),
 * with A in bf16 (kkt_inverse's wu.Ab) and C_q from kkt_inverse.
 *
 * Why roles: a step of chain_scan.cu's chains is a sequence of short phases (copies, products, epilogues, barriers)
 * that every warp walks in turn, and neither fewer instructions (wgmma) nor bulk copies shortened it (PERF.md,
 * sessions 22, 31, 33). Here each warpgroup has one job, so the phases of different jobs overlap:
 *   the state warpgroups (KPC/64 of them: features 64·w …) hold S in registers (64 a thread), write its bf16 copy,
 *     issue the next chunk's copies and run the state update Kᵀ R̃;
 *   the R warpgroup forms K S, the bracket Y, R = A Y and R̃ = diag(f) R;
 *   the O warpgroup forms Q S while K S runs, and C_q R while the state update runs, and stores o.
 * Only K S → Y → A Y → Kᵀ R̃ is the chain; Q S, C_q R, o's stores and the copies run beside it.
 *
 * Per chunk (named barriers; NT = all threads):
 *   BAR_S (NT)            the chunk's tiles and S's bf16 copy are in; the R and O warpgroups are done with the chunk
 *                         before (so the other stage and R's tiles are free)
 *   R warpgroup           K S → Y (BAR_Y: its own four warps) → A Y → R, R̃ → arrive BAR_P
 *   O warpgroup           Q S (QS_LATE: after K S, BAR_K) → arrive BAR_F (S's copy is read) → wait BAR_P → C_q R → o
 *   state warpgroups      issue the next chunk's copies → wait BAR_P → S ← γ_n S + Kᵀ R̃ → wait BAR_F → S's copy
 * Operands in shared memory (wgmma.cuh's layouts, scan_wg.cuh's strides): K, Q [token][feature] K-major (K read
 * MN-major as Kᵀ); A, C_q [token][token] K-major; V, Y, R, R̃ and S's copy as two 64-column halves, MN-major.
 * Two stages of the chunk tiles (K, Q, V, A, C_q, G, β): 209 KB at K = 128. */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

template <int KPC> struct WsLayout {
    static constexpr int MB = KPC / 64;                  /* state warpgroups */
    static constexpr int NT = 128 * (MB + 2);            /* threads: the state warpgroups, then R's, then O's */
    static constexpr int KT = MAXBT * KPC * 2;           /* a [64][KPC] bf16 tile (K, Q) */
    static constexpr int HT = MAXBT * 64 * 2;            /* a [64][64] bf16 tile (a V half, A, C_q, Y …) */
    /* a stage: K, Q, V (two halves), A, C_q, G and β */
    static constexpr int oK = 0, oQ = KT, oV = 2 * KT, oA = oV + 2 * HT, oC = oA + HT, oGB = oC + HT;
    static constexpr int STAGE = oGB + 2 * MAXBT * 4;
    /* S's bf16 copy (two halves of [KPC][64]), Y, R and R̃ (two halves each) */
    static constexpr int SH = KPC * 64 * 2;
    static constexpr int oS = 2 * STAGE, oY = oS + 2 * SH, oR = oY + 2 * HT, oP = oR + 2 * HT, TOTAL = oP + 2 * HT;
    static_assert(STAGE % 128 == 0, "WsLayout: stages 128-B aligned");
};

/* named barriers (bar.sync / bar.arrive with a thread count; 0 is __syncthreads) */
__device__ __forceinline__ void ws_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void ws_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* x (+)= A · B for one 64-column half: A [64][KD] K-major (alo), B [KD][64] MN-major (blo), k over KD; ACC: add to x */
template <int KD, bool ACC> __device__ __forceinline__ void ws_product(float (&x)[32], uint32_t alo, uint32_t blo) {
    using W = WgStrides<KD, 64>;
    static_for<0, KD / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value;
        wg_mma<__nv_bfloat16, 64, 0, 1, 2 * cm_k<KD>(0, k0), W::K_SBO, 2 * cm_mn<64>(0, k0), W::N_SBO>(x, alo, blo,
                                                                                                       ACC || k0 > 0);
    });
}
/* s += Xᵀ B for one 64-column half of feature block MBI: X [token][feature] read MN-major (xtlo), B [token][64] (blo) */
template <int KPC, int MBI> __device__ __forceinline__ void ws_state_add(float (&s)[32], uint32_t xtlo, uint32_t blo) {
    using W = WgStrides<KPC, 64>;
    static_for<0, MAXBT / 16>([&](auto ks) {
        constexpr int k0 = 16 * decltype(ks)::value;
        wg_mma<__nv_bfloat16, 64, 1, 1, 2 * cm_k<KPC>(k0, 64 * MBI), W::KT_SBO, 2 * cm_mn<64>(0, k0), W::N_SBO>(s, xtlo,
                                                                                                                blo, 1);
    });
}

/* f(hf, e, d) for every state element (hf, e) a thread holds (feature wg_row(e) of its block, column 64·hf + wg_col(e)),
 * d its offset in a [K][V] state (SVF: [V][K]) from the thread's first element (e = 0, hf = 0), with V = 128 and
 * K = KPC: all offsets compile-time, so that the element loops keep one base address (64 addresses hoisted out of
 * the chunk loop spilled) */
template <int KPC, bool SVF, class F> __device__ __forceinline__ void ws_state_elems(F &&f) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int e = 0; e < 32; e++) {
            const int dr = 8 * ((e >> 1) & 1), dc = 64 * hf + 8 * (e >> 2) + (e & 1);
            f(hf, e, SVF ? dc * KPC + dr : dr * 128 + dc);
        }
}

/* QS_LATE: the O warpgroup issues Q S once K S is complete (BAR_K), so that the chain's K S has the tensor cores to
 * itself; else both at once (a variant under measurement: force.fwd_ws = 2 / 1) */
template <int KPC, bool QS_LATE>
__global__ void __launch_bounds__(WsLayout<KPC>::NT, 1)
chain_ws_kernel(Prob p, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, const float *GB,
                const __nv_bfloat16 *Ab, const cq_t *Cq, const float *h0, float *ht, state_t *Sc, rp_t *R,
                __nv_bfloat16 *o) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WsLayout<KPC>;
    /* the named barriers (the file-top comment); SC + w: state warpgroup w's own */
    constexpr int WS_BAR_S = 1, WS_BAR_P = 2, WS_BAR_F = 3, WS_BAR_Y = 4, WS_BAR_K = 5, WS_BAR_SC = 6;
    constexpr int MB = L::MB, NT = L::NT, NL = 128 * MB; /* NL: the state warpgroups, which also issue the copies */
    extern __shared__ __align__(128) char smc[];
    const int wg = threadIdx.x >> 7, tid = threadIdx.x;
    const int nvt = p.V / 128, sh = blockIdx.x / nvt, sq = sh / p.HV, hv = sh % p.HV, h = hv / p.G;
    const int v0 = (blockIdx.x % nvt) * 128;
    int c_begin, c_end;
    seq_chunks(p, sq, c_begin, c_end);
    if (c_end <= c_begin) return; /* the whole block */
    const int nch = c_end - c_begin;
    const size_t rsv = (size_t)p.HV * p.V, sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    auto stage = [&](int b) { return smc + b * L::STAGE; };
    T *const Sb = reinterpret_cast<T *>(smc + L::oS); /* half hf: Sb + hf · KPC · 64 */
    T *const Yb = reinterpret_cast<T *>(smc + L::oY), *const Rb = reinterpret_cast<T *>(smc + L::oR);
    T *const Pb = reinterpret_cast<T *>(smc + L::oP); /* R̃; the halves of Y, R, R̃ at + hf · 64 · 64 */
    using W = WgStrides<KPC, 64>;
    using W64 = WgStrides<64, 64>;

    if (wg < MB) {
        /* ---- a state warpgroup: features 64·wg + wg_row(e), columns v0 + 64·hf + wg_col(e) */
        float s[2][32];
        auto feat = [&](int e) { return 64 * wg + wg_row(e); };
        /* this thread's first element in a state (h0, ht, the windows' checkpoints) */
        const size_t s0 = sbase + st_idx(p, feat(0), v0 + wg_col(0));
        auto load_state = [&](const float *src) {
            auto ld1 = [&](int hf, int e, int d) { s[hf][e] = src ? src[d] : 0.f; };
            src = src ? src + s0 : src;
            if (p.svf) ws_state_elems<KPC, true>(ld1);
            else ws_state_elems<KPC, false>(ld1);
        };
        auto save_state = [&](float *dst) {
            auto st1 = [&](int hf, int e, int d) { dst[d] = s[hf][e]; };
            dst += s0;
            if (p.svf) ws_state_elems<KPC, true>(st1);
            else ws_state_elems<KPC, false>(st1);
        };
        load_state(h0);
        /* chunk c's tiles into stage b: K, Q (cm_k<KPC>), V's halves (cm_mn<64>), A and C_q (cm_k<64>), G and β; rows
         * from n on are zero (A, C_q and β are zero there already) */
        auto issue = [&](int c, int b) {
            const ChunkInfo cj = p.ctab[c];
            char *st = stage(b);
            wg_copy_kq<KPC, NL>(reinterpret_cast<T *>(st + L::oK), k, p, cj, h);
            wg_copy_kq<KPC, NL>(reinterpret_cast<T *>(st + L::oQ), q, p, cj, h);
            const T *vs = v + (size_t)cj.tok0 * rsv + (size_t)hv * p.V + v0;
#pragma unroll 1
            for (int m = 0; m < MAXBT * 128 / 8 / NL; m++) {
                const int x = tid + NL * m, r = x / 16, c8 = (x % 16) * 8, hf = c8 >> 6;
                const bool ok = r < cj.n;
                cp_async16(reinterpret_cast<T *>(st + L::oV) + hf * 64 * 64 + cm_mn<64>(c8 & 63, r),
                           ok ? vs + (size_t)r * rsv + c8 : v, ok);
            }
            const size_t cw = (size_t)c * p.HV + hv;
            const T *as = Ab + cw * MAXBT * MAXBT;
            const cq_t *cs = Cq + cw * MAXBT * MAXBT;
#pragma unroll 1
            for (int m = 0; m < MAXBT * MAXBT / 8 / NL; m++) {
                const int x = tid + NL * m, r = x / 8, c8 = (x % 8) * 8;
                cp_async16(reinterpret_cast<T *>(st + L::oA) + cm_k<64>(r, c8), as + r * MAXBT + c8, true);
                cp_async16(reinterpret_cast<cq_t *>(st + L::oC) + cm_k<64>(r, c8), cs + r * MAXBT + c8, true);
            }
            wg_copy_gates(reinterpret_cast<float *>(st + L::oGB), GB, p, hv, c);
            cp_async_commit();
        };
        issue(c_begin, 0);
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            /* S's copy: the B operand of K S and Q S (the O warpgroup read the last one: BAR_F) */
            if (it > 0) ws_sync(WS_BAR_F, NL + 128);
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int e = 0; e < 32; e += 2)
                    *reinterpret_cast<__nv_bfloat162 *>(Sb + hf * KPC * 64 + cm_mn<64>(wg_col(e), feat(e))) =
                        __floats2bfloat162_rn(s[hf][e], s[hf][e + 1]);
            if (Sc) { /* policy A saves S_c: this warpgroup's rows, from the copy */
                ws_sync(WS_BAR_SC + wg, 128);
                state_t *sd = Sc + ((size_t)c * p.HV + hv) * p.K * p.V + (size_t)64 * wg * p.V;
#pragma unroll 1
                for (int hf = 0; hf < 2; hf++)
                    wg_store_rows<64, 64>(sd, Sb + hf * KPC * 64 + 64 * 64 * wg, 64, p.V, v0 + 64 * hf);
            }
            cp_async_wait_group<0>();
            wg_proxy_fence();
            ws_sync(WS_BAR_S, NT); /* chunk c's tiles and S's copy are in */
            if (it + 1 < nch) issue(c + 1, b ^ 1);
            const float *Gs = reinterpret_cast<const float *>(st + L::oGB);
            const float gn = gexp(p, Gs[p.ctab[c].n - 1]);
            ws_sync(WS_BAR_P, NT); /* R̃ is in */
            /* S ← γ_n S + Kᵀ R̃ */
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int e = 0; e < 32; e++) s[hf][e] *= gn;
            /* Kᵀ's rows of this warpgroup's features: the tile read from feature 64·wg on (one descriptor start for
             * every warpgroup, so no branch on wg around the products) */
            const uint32_t ktlo = wg_lo<W::KT_LBO>(st + L::oK + 2 * cm_k<KPC>(0, 64) * wg);
            wg_arrive();
#pragma unroll
            for (int hf = 0; hf < 2; hf++) ws_state_add<KPC, 0>(s[hf], ktlo, wg_lo<W64::N_LBO>(Pb + hf * 64 * 64));
            wg_commit();
            wg_wait();
            if (float *ck = window_checkpoint(p, c_begin, c, c_end)) save_state(ck); /* a time window's start state */
        }
        if (ht) save_state(ht);
    } else if (wg == MB) {
        /* ---- the R warpgroup: tokens wg_row(e), columns 64·hf + wg_col(e) */
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NT);
            const int n = p.ctab[c].n;
            const float *Gs = reinterpret_cast<const float *>(st + L::oGB), *bs = Gs + MAXBT;
            const T *Vs = reinterpret_cast<const T *>(st + L::oV);
            float x[2][32];
            /* K S */
            const uint32_t klo = wg_lo<W::K_LBO>(st + L::oK);
            wg_arrive();
#pragma unroll
            for (int hf = 0; hf < 2; hf++) ws_product<KPC, false>(x[hf], klo, wg_lo<W::N_LBO>(Sb + hf * KPC * 64));
            wg_commit();
            wg_wait();
            if (QS_LATE) ws_arrive(WS_BAR_K, 256);
            /* Y = diag(β)(V − γ ⊙ K S), the B operand of A Y; a thread's rows are i0 and i0 + 8 */
            const int i0 = wg_row(0);
            const float g0 = gexp(p, Gs[i0]), g1 = gexp(p, Gs[i0 + 8]), b0 = bs[i0], b1 = bs[i0 + 8];
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int e = 0; e < 32; e += 2) {
                    const int j = cm_mn<64>(wg_col(e), wg_row(e)) + hf * 64 * 64;
                    const float gi = e & 2 ? g1 : g0, bi = e & 2 ? b1 : b0;
                    const float2 vv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Vs + j));
                    *reinterpret_cast<__nv_bfloat162 *>(Yb + j) =
                        __floats2bfloat162_rn(bi * (vv.x - gi * x[hf][e]), bi * (vv.y - gi * x[hf][e + 1]));
                }
            wg_proxy_fence();
            ws_sync(WS_BAR_Y, 128);
            /* R = A Y */
            const uint32_t alo = wg_lo<W64::K_LBO>(st + L::oA);
            wg_arrive();
#pragma unroll
            for (int hf = 0; hf < 2; hf++) ws_product<64, false>(x[hf], alo, wg_lo<W64::N_LBO>(Yb + hf * 64 * 64));
            wg_commit();
            wg_wait();
            /* R (the B operand of C_q R) and R̃ = diag(f) R (of Kᵀ R̃; zero on rows from n on) */
            const float gl = Gs[n - 1];
            const float f0 = i0 < n ? gexp(p, gl - Gs[i0]) : 0.f, f1 = i0 + 8 < n ? gexp(p, gl - Gs[i0 + 8]) : 0.f;
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int e = 0; e < 32; e += 2) {
                    const int j = cm_mn<64>(wg_col(e), wg_row(e)) + hf * 64 * 64;
                    const float f = e & 2 ? f1 : f0;
                    *reinterpret_cast<__nv_bfloat162 *>(Rb + j) = __floats2bfloat162_rn(x[hf][e], x[hf][e + 1]);
                    *reinterpret_cast<__nv_bfloat162 *>(Pb + j) = __floats2bfloat162_rn(f * x[hf][e], f * x[hf][e + 1]);
                }
            wg_proxy_fence();
            if (R) { /* policy A saves R: from its copy, once all four warps wrote it */
                ws_sync(WS_BAR_Y, 128);
                rp_t *rd = R + ((size_t)c * p.HV + hv) * MAXBT * p.V;
#pragma unroll 1
                for (int hf = 0; hf < 2; hf++) wg_store_rows<MAXBT, 64>(rd, Rb + hf * 64 * 64, n, p.V, v0 + 64 * hf);
            }
            ws_arrive(WS_BAR_P, NT);
        }
    } else {
        /* ---- the O warpgroup: tokens wg_row(e), columns 64·hf + wg_col(e) */
        for (int it = 0; it < nch; it++) {
            const int c = c_begin + it, b = it & 1;
            const char *st = stage(b);
            ws_sync(WS_BAR_S, NT);
            const ChunkInfo ci = p.ctab[c];
            const float *Gs = reinterpret_cast<const float *>(st + L::oGB);
            float x[2][32];
            /* Q S, beside K S or after it */
            if (QS_LATE) ws_sync(WS_BAR_K, 256);
            const uint32_t qlo = wg_lo<W::K_LBO>(st + L::oQ);
            wg_arrive();
#pragma unroll
            for (int hf = 0; hf < 2; hf++) ws_product<KPC, false>(x[hf], qlo, wg_lo<W::N_LBO>(Sb + hf * KPC * 64));
            wg_commit();
            wg_wait();
            if (it + 1 < nch) ws_arrive(WS_BAR_F, NL + 128); /* S's copy is read */
            /* O = diag(scale·γ) Q S + C_q R, once R is in; a thread's rows are i0 and i0 + 8 */
            const int i0 = wg_row(0);
            const float q0 = p.scale * gexp(p, Gs[i0]), q1 = p.scale * gexp(p, Gs[i0 + 8]);
#pragma unroll
            for (int e = 0; e < 32; e++) {
                x[0][e] *= e & 2 ? q1 : q0;
                x[1][e] *= e & 2 ? q1 : q0;
            }
            ws_sync(WS_BAR_P, NT);
            const uint32_t clo = wg_lo<W64::K_LBO>(st + L::oC);
            wg_arrive();
#pragma unroll
            for (int hf = 0; hf < 2; hf++) ws_product<64, true>(x[hf], clo, wg_lo<W64::N_LBO>(Rb + hf * 64 * 64));
            wg_commit();
            wg_wait();
            /* the thread's two rows of o (rows from n on: none), columns at compile-time offsets */
            T *const od0 = o + (size_t)(ci.tok0 + i0) * rsv + (size_t)hv * p.V + v0 + wg_col(0), *const od1 = od0 + 8 * rsv;
            const bool w0 = i0 < ci.n, w1 = i0 + 8 < ci.n;
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
#pragma unroll
                for (int e = 0; e < 32; e += 2)
                    if (e & 2 ? w1 : w0)
                        *reinterpret_cast<__nv_bfloat162 *>((e & 2 ? od1 : od0) + 64 * hf + 8 * (e >> 2)) =
                            __floats2bfloat162_rn(x[hf][e], x[hf][e + 1]);
        }
    }
#else
    (void)p, (void)q, (void)k, (void)v, (void)GB, (void)Ab, (void)Cq, (void)h0, (void)ht, (void)Sc, (void)R, (void)o;
#endif
}

/* Whether the forward pass's chain runs as this kernel (Plan::fwd_ws; the plan then also takes fwd_chain's stages:
 * kkt's G, A in bf16 and C_q). Where: the forward chain's shapes (bf16, chunk 64, K of 64 or 128) with V = 128, an
 * sm_90a binary, 16-B aligned q, k, v and o (NULL in a size query: the layout does not depend on this choice), and
 * the tiles in the device's shared memory. Not yet the default anywhere (force.fwd_ws = 1 or 2 (QS_LATE) takes it where it applies,
 * 0 never): its measurements decide (docs/PERF.md). */
bool chain_forward_ws(const Prob &p, rewy_dtype dt, bool vec, const void *q, const void *k, const void *v, const void *o) {
    if (vec || !std::is_same<state_t, __nv_bfloat16>::value || !std::is_same<rp_t, __nv_bfloat16>::value) return false;
    if (dt != REWY_BF16 || p.BT != MAXBT || !w_shape_ok(dt, p.BT, p.K, p.Kp) || p.V != 128 || !p.plan.wgmma) return false;
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)o) & 15) return false;
    const size_t smem = p.Kp == 64 ? WsLayout<64>::TOTAL : WsLayout<128>::TOTAL;
    if (smem > p.plan.smem_optin) return false;
    return p.plan.force.fwd_ws == 1 || p.plan.force.fwd_ws == 2;
}

cudaError_t launch_chain_forward_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                                    const __nv_bfloat16 *Ab, const cq_t *Cq, const float *h0, float *ht, state_t *Sc,
                                    rp_t *R, void *o, cudaStream_t s) {
    if (p.V != 128 || (p.Kp != 64 && p.Kp != 128)) return cudaErrorInvalidValue;
    auto go = [&](auto kp, auto late) -> cudaError_t {
        constexpr int KPC = decltype(kp)::value;
        constexpr bool LATE = decltype(late)::value;
        constexpr size_t smem = WsLayout<KPC>::TOTAL;
        cudaError_t e = ensure_smem<chain_ws_kernel<KPC, LATE>>(smem);
        if (e != cudaSuccess) return e;
        chain_ws_kernel<KPC, LATE><<<p.N * p.HV * (p.V / 128), WsLayout<KPC>::NT, smem, s>>>(
            p, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, GB, Ab, Cq, h0, ht, Sc, R,
            (__nv_bfloat16 *)o);
        return cudaGetLastError();
    };
    auto by_k = [&](auto late) {
        return p.Kp == 64 ? go(std::integral_constant<int, 64>{}, late) : go(std::integral_constant<int, 128>{}, late);
    };
    return p.plan.force.fwd_ws == 2 ? by_k(std::true_type{}) : by_k(std::false_type{});
}

} // namespace rewy_cuda
