/* chain_ws.cu: the chunk chains (MATH §2, §3) as warp-specialized blocks on Hopper's warpgroup products (sm_90a), for
 * scalar gates (DeltaNet, GDN), bf16, chunk 64, K and V of 64 or 128, on the W, U and C_q that kkt_inverse writes.
 * One block per (sequence, value head, 64 value columns): three warpgroups that split a chunk step by what each
 * product feeds, and a copy warp that loads each chunk's tiles one chunk ahead into two stages. FlashQLA's Hopper
 * kernels are built the same way (a loader warp group and math warp groups per stage; read for their structure only).
 * The chains' register and mma.sync forms (chain_scan.cu, state_scan.cuh) do all of a step in every warp: the copies'
 * issue and addresses, the epilogues and the products that do not feed the chain sit on its critical path there.
 *
 * Forward (fwd_ws_kernel; Plan::fwd_ws for the forward pass, with the output; Plan::bwd_ws for policy R's recompute,
 * REC: S_c and R stored instead), chunks in order, the state S (K × 64, fp32) in WG0's registers:
 *   R = U − W S;   O = diag(scale·γ) Q S + C_q R;   S ← γ_n S + Kᵀ R̃,  R̃ = diag(e^{G_n − G_j}) R (0 on rows ≥ n)
 *   WG0 (chain)   S → its bf16 copy Ss (the B operand of W S and Q S);  S ← γ_n S + Kᵀ R̃
 *   WG1 (R)       R = U − W S;  R̃ → Rs, R → Ro (bf16, the B operands of Kᵀ R̃ and C_q R)
 *   WG2           the output, Q S as soon as S is copied and C_q R once R is, stored; REC: S_c and R stored
 * Reverse (bwd_ws_kernel; Plan::bwd_ws), the W form of MATH §3 (as chain_scan.cu's reverse chain), chunks from the
 * last, the adjoint S̄ (K × 64, fp32) in WG0's registers:
 *   R̄ = diag(f) K S̄⁺ + C_qᵀ Ō  (f_j = e^{G_n − G_j}, 0 on rows ≥ n);   S̄ ← γ_n S̄⁺ + Qᵀ (scale·γ ⊙ Ō) − Wᵀ R̄
 *   WG0 (chain)   S̄⁺ → its bf16 copy Sbs;  S̄ ← γ_n S̄⁺ + Qᵀ Ō' (once Ō' is in) − Wᵀ R̄ (once R̄ is in)
 *   WG1 (R̄)       C_qᵀ Ō (before S̄⁺ is in), K S̄⁺;  −R̄ → Rs (the B operand of Wᵀ R̄); then, off the chain,
 *                 P = Aᵀ R̄ (tf32, Aᵀ copied into the stage) stored for the pullback (WY: R̄ stored instead)
 *   WG2           Ō' = scale·γ ⊙ Ō into the stage (the B operand of Qᵀ Ō'); S̄⁺ stored for the pullback
 * and dh0 = S̄ at the walk's end (the register chains leave P = Aᵀ R̄ to a pass after them, pullback_p.cu).
 * A chunk step's critical path is then the copy of the state, one product with it (W S or K S̄⁺), an epilogue and
 * the state update (Kᵀ R̃ or Wᵀ R̄): two products of 0.5 M multiply-adds, about 0.15 µs each at one SM's peak.
 *
 * Hand-offs are named barriers (bar.arrive by the producing side, bar.sync by the consuming one; the count is both
 * sides' threads), one generation per chunk:
 *   FULL[s]   the copy warp's tiles of stage s are in            copy warp → WG0, WG1, WG2      (416 threads)
 *   EMPTY[s]  every warpgroup is done with stage s                WG0, WG1, WG2 → copy warp      (416)
 *   B_S       the state's copy (Ss, Sbs) holds this chunk's       WG0 → WG1, WG2                 (384)
 *   B_R       forward: Rs, Ro hold R̃, R;  reverse: Rs holds −R̄    WG1 → WG0 (and WG2, forward)   (384; reverse 256)
 *   B_F       WG2 is done with the state's copy (and Ro)          WG2 → WG0 (before its next copy) (256)
 *   B_O       reverse: Ō' is in the stage                         WG2 → WG0                      (256)
 *   B_T       reverse: WG1's own tf32 copy of R̄ is in (for P)      WG1 → WG1                      (128)
 * No generation can be overtaken: WG0 copies the next chunk's state only after B_F and B_R of this one, that is
 * after WG1 and WG2 have passed this B_S; WG1 writes the next Rs only after the next B_S; the copy warp refills a
 * stage only after its EMPTY, and the warpgroups take a stage's next FULL only after giving its EMPTY. FULL is a
 * bar.sync of all three warpgroups, so no warpgroup starts a chunk before every other has finished the one before:
 * in the reverse, WG2 gives the next B_O only after WG0 has passed this one. Every arrival has its wait (the copy warp
 * and WG0 drain the last chunks' EMPTY and B_F), so no barrier is left mid-count. (That meeting at FULL also keeps
 * each warpgroup's work of a chunk inside that chunk's step; decoupling it, one FULL per warpgroup, would need the
 * state's copy and the R tiles double-buffered and B_S, B_R, B_F per parity.)
 * Generic stores that a product reads (the state's copy, Rs, Ro, Ō') are fenced to the async proxy before their
 * barrier; so are the copy warp's tiles, once its cp.async copies have landed. bench/dev/ws_protocol.py checks this
 * protocol as written here (count-based barriers under random schedules, wgmma reads live from issue to wait): a
 * change to it goes there first. (Session 27's desk reviews also checked the layouts and math with an fp64 emulation
 * of the kernels' own offsets and descriptors, against the token recurrence and its adjoint, time windows included.)
 *
 * Shared memory (wgmma.cuh's no-swizzle layouts): two stages of the chunk's tiles, then the state's copy (cm_mn<64>,
 * KPC rows) and the R tiles (cm_mn<64>, 64 rows; the reverse's tf32 R̄ cm_t<64>); 161 KB (forward) and 217 KB
 * (reverse, with Aᵀ in its stages) at K = 128: one block per SM, 416 threads, no register limit that binds (95–126
 * registers, no spill). Test-forced until measured (the plan's fwd_ws, bwd_ws); policy R: the forward pass stores
 * neither S_c nor R. */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

using T16 = __nv_bfloat16;
constexpr int WS_BV = 64;                /* value columns per block */
constexpr int WS_THREADS = 3 * 128 + 32; /* three math warpgroups and the copy warp */
/* named barriers (0 is __syncthreads): FULL and EMPTY per stage, then the hand-offs of the header */
enum { WS_FULL = 1, WS_EMPTY = 3, WS_BS = 5, WS_BR = 6, WS_BF = 7, WS_BO = 8, WS_BT = 9 }; /* BT: WG1's own (R̄ in tf32) */

__device__ __forceinline__ void nbar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nbar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* ---- the copy warp's tiles (cp.async, 16-byte rows; rows ≥ n zero) ---- */
/* [token][feature] rows (K, Q of key head h; W, [64][K] a chunk) as cm_k<KPC> */
template <int KPC> __device__ __forceinline__ void ws_rows_k(T16 *dst, const T16 *src, size_t rs, int n, int lane) {
#pragma unroll 4
    for (int qq = lane; qq < MAXBT * KPC / 8; qq += 32) {
        const int r = qq / (KPC / 8), f = (qq % (KPC / 8)) * 8;
        const bool ok = r < n;
        cp_async16(dst + cm_k<KPC>(r, f), ok ? src + (size_t)r * rs + f : src, ok);
    }
}
/* 64 columns of [token][value] rows (U, Ō; src at the block's first column) as cm_mn<64> */
__device__ __forceinline__ void ws_cols(T16 *dst, const T16 *src, size_t rs, int n, int lane) {
#pragma unroll 4
    for (int qq = lane; qq < MAXBT * WS_BV / 8; qq += 32) {
        const int r = qq / (WS_BV / 8), f = (qq % (WS_BV / 8)) * 8;
        const bool ok = r < n;
        cp_async16(dst + cm_mn<WS_BV>(f, r), ok ? src + (size_t)r * rs + f : src, ok);
    }
}
/* C_q ([64][64] a chunk, row i, column j) as cm_k<64>(i, j). (The reverse's Aᵀ goes in with scan_wg.cuh's wg_copy_at,
 * 4-byte copies whose warp-wide stores meet 8 of the 32 banks: a mapping of 8 columns × 4 tokens a warp would spread
 * them, if the copy warp shows on the step's time.) */
__device__ __forceinline__ void ws_cq(cq_t *dc, const cq_t *sc, int n, int lane) {
#pragma unroll 4
    for (int qq = lane; qq < MAXBT * MAXBT / 8; qq += 32) {
        const int r = qq / (MAXBT / 8), f = (qq % (MAXBT / 8)) * 8;
        const bool ok = r < n;
        cp_async16(dc + cm_k<MAXBT>(r, f), ok ? sc + (size_t)r * MAXBT + f : sc, ok);
    }
}
/* the end of the copy warp's chunk: the chunk's G, β (GB, 128 floats), all its copies landed and fenced to the async
 * proxy, then FULL */
__device__ __forceinline__ void ws_stage_full(int st, float *dg, const float *sg, int lane) {
    cp_async16(dg + 4 * lane, sg + 4 * lane, true);
    cp_async_commit();
    cp_async_wait_group<0>();
    wg_proxy_fence();
    nbar_arrive(WS_FULL + st, WS_THREADS);
}

/* WG0's opening of a chunk step, both chains: the stage is in (FULL), WG2 is done with the last chunk's copy of the
 * state (B_F), the state goes out as its bf16 copy (B_S: the B operand of WG1's product, and what WG2 reads), and it
 * decays by γ_n = e^{G_{n−1}} (G from the stage) for the update's products to add to */
template <int MB, int NA>
__device__ __forceinline__ void ws_state_out(const Prob &p, float (&s)[MB][NA], T16 *copy, const float *Gs, int n, int st,
                                             int j) {
    nbar_sync(WS_FULL + st, WS_THREADS);
    if (j > 0) nbar_sync(WS_BF, 256);
    wg_state_spill<MB, NA, WS_BV>(s, copy);
    wg_proxy_fence();
    nbar_arrive(WS_BS, 384);
    const float gn = gexp(p, Gs[n - 1]);
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int e = 0; e < NA; e++) s[mb][e] *= gn;
}

/* a warpgroup's 64 × 64 accumulator (wgmma.cuh's layout), rows i < n, into a bf16 matrix at dst (its row 0, the block's
 * first column) of row stride ld: two columns a store, from the registers */
__device__ __forceinline__ void ws_store_rows(T16 *dst, size_t ld, const float (&x)[WS_BV / 2], int n) {
#pragma unroll
    for (int e = 0; e < WS_BV / 2; e += 2) {
        const int i = wg_row(e), jc = wg_col(e);
        if (i < n) *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)i * ld + jc) = __floats2bfloat162_rn(x[e], x[e + 1]);
    }
}

/* byte offsets in dynamic shared memory. Forward stage: K, W, Q (cm_k<KPC>), U (cm_mn<64>), C_q (cm_k<64>), G, β;
 * reverse stage: K, W, Q, C_q, Ō and Ō' (cm_mn<64>; Ō' written by WG2), G, β. Then the state's copy and the R tiles. */
template <int KPC, bool REV> struct WsLayout {
    static constexpr int KT = MAXBT * KPC * 2, NT = MAXBT * WS_BV * 2, CT = MAXBT * MAXBT * 2, FT = MAXBT * MAXBT * 4;
    static constexpr int K = 0, W = KT, Q = 2 * KT, CQ = 3 * KT, U = CQ + CT, O = U, OP = O + NT;
    static constexpr int AT = OP + NT, GB = REV ? AT + FT : U + NT; /* reverse: Aᵀ (tf32 cm_t<64>, for P = Aᵀ R̄) */
    static constexpr int STAGE = (GB + 2 * MAXBT * 4 + 127) / 128 * 128;
    /* then the state's copy, Rs; forward: Ro (bf16 R); reverse: R̄ as tf32 [column][token] (cm_t<64>), WG1's own */
    static constexpr int SS = 2 * STAGE, RS = SS + KPC * WS_BV * 2, RO = RS + NT, BYTES = RO + (REV ? FT : NT);
};

/* The forward chain (header): o (REC = false) or S_c and R by workspace slot (REC: policy R's recompute, U read from
 * R's region and R written over it, chunk by chunk). */
template <int KPC, bool REC>
__global__ void __launch_bounds__(WS_THREADS, 1)
fwd_ws_kernel(Prob p, const T16 *q, const T16 *k, const float *GB, const T16 *W, const T16 *U, const cq_t *Cq,
              const float *h0, float *ht, T16 *o, state_t *Sc, rp_t *R) {
#if REWY_WGMMA
    using L = WsLayout<KPC, false>;
    using WS = WgStrides<KPC, WS_BV>; /* the K-side tiles against the 64-column ones */
    using W64 = WgStrides<64, WS_BV>; /* C_q (k over the tokens) */
    constexpr int MB = KPC / 64, NA = WS_BV / 2;
    extern __shared__ __align__(128) char smc[];
    T16 *const Ss = reinterpret_cast<T16 *>(smc + L::SS), *const Rs = reinterpret_cast<T16 *>(smc + L::RS);
    T16 *const Ro = reinterpret_cast<T16 *>(smc + L::RO);
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
            const size_t ch = (size_t)c * p.HV + hv, cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
            if (j >= 2) nbar_sync(WS_EMPTY + st, WS_THREADS); /* chunk c − 2 is done with the stage */
            char *sb = stage(st);
            ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::K), k + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk, ci.n, lane);
            ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::W), W + cw * MAXBT * KPC, KPC, ci.n, lane);
            if (!REC) ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::Q), q + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk, ci.n, lane);
            ws_cols(reinterpret_cast<T16 *>(sb + L::U), U + cw * MAXBT * p.V + v0, p.V, ci.n, lane);
            if (!REC) ws_cq(reinterpret_cast<cq_t *>(sb + L::CQ), Cq + cw * MAXBT * MAXBT, ci.n, lane);
            ws_stage_full(st, reinterpret_cast<float *>(sb + L::GB), GB + ch * 2 * MAXBT, lane);
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
            ws_state_out(p, s, Ss, Gs, n, st, j); /* S → Ss; S ← γ_n S */
            nbar_sync(WS_BR, 384);                /* R̃ is in Rs */
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

    for (int j = 0; j < nch; j++) { /* ---- WG1: R;  WG2: the output, or the stores of S_c and R ---- */
        const int c = c_begin + j, st = j & 1;
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n;
        const char *sb = stage(st);
        const float *Gs = reinterpret_cast<const float *>(sb + L::GB);
        const size_t cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
        float x[NA];
        nbar_sync(WS_FULL + st, WS_THREADS);
        nbar_sync(WS_BS, 384);
        if (REC && wg == 2) { /* S_c and R for the pullback, from their bf16 copies */
            wg_store_rows<KPC, WS_BV>(Sc + cw * p.K * p.V, Ss, p.K, p.V, v0);
            nbar_sync(WS_BR, 384);
            wg_store_rows<MAXBT, WS_BV>(R + cw * MAXBT * p.V, Ro, n, p.V, v0);
            nbar_arrive(WS_BF, 256);
            nbar_arrive(WS_EMPTY + st, WS_THREADS);
            continue;
        }
        /* x = W S (WG1) or Q S (WG2): [64 tokens][64 columns], k over the features */
        wg_arrive();
        wg_k_times_state<KPC, WS_BV>(x, wg_lo<WS::K_LBO>(sb + (wg == 1 ? L::W : L::Q)), slo);
        wg_commit();
        wg_wait();
        if (wg == 1) {
            /* R = U − W S, and R̃ = e^{G_n − G_i} R (0 on rows ≥ n), as the bf16 B operands of Kᵀ R̃ and C_q R */
            const T16 *Us = reinterpret_cast<const T16 *>(sb + L::U);
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
            wg_mma<T16, WS_BV, 0, 1, 2 * cm_k<MAXBT>(0, k0), W64::K_SBO, 2 * cm_mn<WS_BV>(0, k0), W64::N_SBO>(x, cqlo, rolo, 1);
        });
        wg_commit();
        wg_wait();
        nbar_arrive(WS_BF, 256);
        nbar_arrive(WS_EMPTY + st, WS_THREADS);
        ws_store_rows(o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0, rsv, x, n);
    }
#else
    (void)p, (void)q, (void)k, (void)GB, (void)W, (void)U, (void)Cq, (void)h0, (void)ht, (void)o, (void)Sc, (void)R;
#endif
}

/* The reverse chain (header), W form: S̄⁺ and P (PF) or R̄ by workspace slot, dh0 at the walk's end (a time window's carry:
 * dht and dh0 the same buffer, each element read and written by the same thread). PF (ReWY): WG1 also forms
 * P = Aᵀ R̄ once it has handed −R̄ to WG0, off the chain (tf32: A is fp32 by contract, MATH §10), and stores P in
 * R̄'s place, so no P pass follows (pullback_p.cu; 76 µs at GDN (4,4096,16), session 22). */
template <int KPC, bool PF>
__global__ void __launch_bounds__(WS_THREADS, 1)
bwd_ws_kernel(Prob p, const T16 *q, const T16 *k, const float *GB, const float *A, const T16 *W, const cq_t *Cq,
              const T16 *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR) {
#if REWY_WGMMA
    using L = WsLayout<KPC, true>;
    using WS = WgStrides<KPC, WS_BV>;
    constexpr int MB = KPC / 64, NA = WS_BV / 2;
    constexpr int C_LBO = MAXBT / 8 * 128, C_SBO = 128; /* C_qᵀ: the MN-major view of cm_k<64> (bwd_state_scan_wg.cu) */
    extern __shared__ __align__(128) char smc[];
    T16 *const Sbs = reinterpret_cast<T16 *>(smc + L::SS), *const Rs = reinterpret_cast<T16 *>(smc + L::RS);
    float *const Rt = reinterpret_cast<float *>(smc + L::RO);
    auto stage = [&](int st) { return smc + st * L::STAGE; };

    const ScanBlock blk = ScanBlock::get<WS_BV>(p, blockIdx.x);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0, h = hv / p.G, wg = threadIdx.x >> 7;
    int c_begin, c_end;
    seq_chunks(p, sq, c_begin, c_end);
    const int nch = c_end - c_begin;
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;

    if (wg == 3) { /* ---- the copy warp: the chunks from the last, one ahead ---- */
        const int lane = threadIdx.x & 31;
        for (int j = 0; j < nch; j++) {
            const int c = c_end - 1 - j, st = j & 1;
            const ChunkInfo ci = p.ctab[c];
            const size_t ch = (size_t)c * p.HV + hv, cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
            if (j >= 2) nbar_sync(WS_EMPTY + st, WS_THREADS);
            char *sb = stage(st);
            ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::K), k + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk, ci.n, lane);
            ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::W), W + cw * MAXBT * KPC, KPC, ci.n, lane);
            ws_rows_k<KPC>(reinterpret_cast<T16 *>(sb + L::Q), q + (size_t)ci.tok0 * rsk + (size_t)h * p.K, rsk, ci.n, lane);
            ws_cols(reinterpret_cast<T16 *>(sb + L::O), do_ + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0, rsv, ci.n, lane);
            ws_cq(reinterpret_cast<cq_t *>(sb + L::CQ), Cq + cw * MAXBT * MAXBT, ci.n, lane);
            if (PF) wg_copy_at<32>(reinterpret_cast<float *>(sb + L::AT), A, p, hv, c, lane);
            ws_stage_full(st, reinterpret_cast<float *>(sb + L::GB), GB + ch * 2 * MAXBT, lane);
        }
        for (int j = nch > 2 ? nch - 2 : 0; j < nch; j++) nbar_sync(WS_EMPTY + (j & 1), WS_THREADS);
        return;
    }

    const uint32_t slo = wg_lo<WS::N_LBO>(Sbs), rslo = wg_lo<WS::N_LBO>(Rs);
    if (wg == 0) { /* ---- WG0: the adjoint state ---- */
        float s[MB][NA];
        const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
        wg_state_load(s, dht, p, sbase, v0);
        for (int j = 0; j < nch; j++) {
            const int st = j & 1, n = p.ctab[c_end - 1 - j].n;
            const char *sb = stage(st);
            const float *Gs = reinterpret_cast<const float *>(sb + L::GB);
            ws_state_out(p, s, Sbs, Gs, n, st, j); /* S̄⁺ → Sbs; S̄ ← γ_n S̄⁺ */
            nbar_sync(WS_BO, 256);                 /* Ō' is in (formed while S̄⁺ was copied) */
            wg_arrive();
            wg_state_add<KPC, WS_BV, MB>(s, wg_lo<WS::KT_LBO>(sb + L::Q), wg_lo<WS::N_LBO>(sb + L::OP)); /* + Qᵀ Ō' */
            wg_commit();
            nbar_sync(WS_BR, 256); /* −R̄ is in Rs */
            wg_wait();
            wg_arrive();
            wg_state_add<KPC, WS_BV, MB>(s, wg_lo<WS::KT_LBO>(sb + L::W), rslo); /* − Wᵀ R̄ */
            wg_commit();
            wg_wait();
            nbar_arrive(WS_EMPTY + st, WS_THREADS);
        }
        if (nch > 0) nbar_sync(WS_BF, 256);
        if (dh0) wg_state_save(s, dh0, p, sbase, v0);
        return;
    }

    for (int j = 0; j < nch; j++) { /* ---- WG1: R̄;  WG2: Ō' and the store of S̄⁺ ---- */
        const int c = c_end - 1 - j, st = j & 1;
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n;
        char *sb = stage(st);
        const float *Gs = reinterpret_cast<const float *>(sb + L::GB);
        const size_t cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
        nbar_sync(WS_FULL + st, WS_THREADS);
        if (wg == 2) {
            /* Ō' = scale·γ ⊙ Ō, the B operand of Qᵀ Ō', in the stage (its last reader, WG0 two chunks ago, gave EMPTY) */
            const T16 *Os = reinterpret_cast<const T16 *>(sb + L::O);
            T16 *Op = reinterpret_cast<T16 *>(sb + L::OP);
#pragma unroll 4
            for (int m = 0; m < MAXBT * WS_BV / 2 / 128; m++) { /* element pairs of the cm_mn tile; the token from the offset */
                const int o2 = 2 * ((threadIdx.x & 127) + 128 * m), i = (o2 >> 6) / (WS_BV / 8) * 8 + ((o2 & 63) >> 3);
                const float2 ov = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Os + o2));
                const float sc = p.scale * gexp(p, Gs[i]);
                *reinterpret_cast<__nv_bfloat162 *>(Op + o2) = __floats2bfloat162_rn(sc * ov.x, sc * ov.y);
            }
            wg_proxy_fence();
            nbar_arrive(WS_BO, 256);
            nbar_sync(WS_BS, 384);
            wg_store_rows<KPC, WS_BV>(Sbar + cw * p.K * p.V, Sbs, p.K, p.V, v0); /* S̄⁺ for the pullback */
            nbar_arrive(WS_BF, 256);
            nbar_arrive(WS_EMPTY + st, WS_THREADS);
            continue;
        }
        /* WG1: y = C_qᵀ Ō (no state in it: issued before S̄⁺ is in), then x = K S̄⁺ */
        float x[NA], y[NA];
        const uint32_t clo = wg_lo<C_LBO>(sb + L::CQ), olo = wg_lo<WS::N_LBO>(sb + L::O);
        wg_arrive();
        static_for<0, MAXBT / 16>([&](auto ks) {
            constexpr int k0 = 16 * decltype(ks)::value;
            wg_mma<T16, WS_BV, 1, 1, 2 * cm_k<MAXBT>(k0, 0), C_SBO, 2 * cm_mn<WS_BV>(0, k0), WS::N_SBO>(y, clo, olo, k0);
        });
        wg_commit();
        nbar_sync(WS_BS, 384);
        wg_arrive();
        wg_k_times_state<KPC, WS_BV>(x, wg_lo<WS::K_LBO>(sb + L::K), slo);
        wg_commit();
        wg_wait();
        /* R̄ = f ⊙ x + y (f_i = e^{G_n − G_i}, 0 on rows ≥ n): −R̄ → Rs, the B operand of Wᵀ R̄; R̄ stored, or P */
        const float gl = Gs[n - 1];
#pragma unroll
        for (int e = 0; e < NA; e += 2) {
            const int i = wg_row(e), jc = wg_col(e);
            const float f = i < n ? gexp(p, gl - Gs[i]) : 0.f;
            x[e] = f * x[e] + y[e];
            x[e + 1] = f * x[e + 1] + y[e + 1];
            *reinterpret_cast<__nv_bfloat162 *>(Rs + cm_mn<WS_BV>(jc, i)) = __floats2bfloat162_rn(-x[e], -x[e + 1]);
            if (PF) { /* R̄ as the tf32 B operand of Aᵀ R̄ */
                Rt[cm_t<MAXBT>(jc, i)] = __uint_as_float(to_tf32(x[e]));
                Rt[cm_t<MAXBT>(jc + 1, i)] = __uint_as_float(to_tf32(x[e + 1]));
            }
        }
        wg_proxy_fence();
        nbar_arrive(WS_BR, 256);
        if (PF) { /* P = Aᵀ R̄ (k over the tokens), once all of WG1's R̄ is in */
            nbar_sync(WS_BT, 128);
            wg_arrive();
            wg_tf32_product<WS_BV>(x, wg_lo<WgStrides<64, WS_BV>::T_LBO>(sb + L::AT),
                                   wg_lo<WgStrides<64, WS_BV>::T_LBO>(Rt));
            wg_commit();
            wg_wait();
        }
        nbar_arrive(WS_EMPTY + st, WS_THREADS);
        ws_store_rows(PR + cw * MAXBT * p.V + v0, p.V, x, n); /* P, or R̄ (WY) */
    }
#else
    (void)p, (void)q, (void)k, (void)GB, (void)A, (void)W, (void)Cq, (void)do_, (void)dht, (void)dh0, (void)Sbar, (void)PR;
#endif
}

/* Whether the warp-specialized chains take this problem: bf16 (single bf16 copies of the state, as the register chains;
 * not with -DREWY_CUDA_SCAN_HILO), scalar gates, chunk 64, K and V of 64 or 128 (kkt's W and U), policy R, 16-byte
 * aligned q, k and o (the forward) or do (the backward), a binary with sm_90a code. Not yet a default (written
 * without a device, session 27): only where the test-only override asks (force.fwd_ws, force.bwd_ws = 1). */
static bool ws_ok(const Prob &p, rewy_dtype dt, bool vec, bool policy_a, int force, const void *a, const void *b,
                  const void *c, size_t smem) {
    if (force != 1 || vec || policy_a || SCAN_LO || !p.plan.wgmma) return false;
    if (!std::is_same<state_t, T16>::value || !std::is_same<rp_t, T16>::value) return false;
    if (!w_shape_ok(dt, p.BT, p.K, p.Kp) || !u_shape_ok(p.V)) return false;
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) return false;
    return smem <= p.plan.smem_optin;
}
template <bool REV> static size_t ws_smem(int Kp) {
    return Kp == 64 ? WsLayout<64, REV>::BYTES : WsLayout<128, REV>::BYTES;
}
int fwd_ws_ok(const Prob &p, rewy_dtype dt, bool vec, bool policy_a, const void *q, const void *k, const void *o) {
    return ws_ok(p, dt, vec, policy_a, p.plan.force.fwd_ws, q, k, o, ws_smem<false>(p.Kp));
}
int bwd_ws_ok(const Prob &p, rewy_dtype dt, bool vec, bool policy_a, const void *q, const void *k, const void *do_) {
    return ws_ok(p, dt, vec, policy_a, p.plan.force.bwd_ws, q, k, do_, ws_smem<true>(p.Kp));
}

template <int KPC, bool REC>
static cudaError_t fire_fwd(const Prob &p, const void *q, const void *k, const float *GB, const T16 *W, const T16 *U,
                            const cq_t *Cq, const float *h0, float *ht, void *o, state_t *Sc, rp_t *R, cudaStream_t s) {
    constexpr size_t smem = WsLayout<KPC, false>::BYTES;
    cudaError_t e = ensure_smem<fwd_ws_kernel<KPC, REC>>(smem);
    if (e != cudaSuccess) return e;
    fwd_ws_kernel<KPC, REC><<<scan_grid(p, WS_BV), WS_THREADS, smem, s>>>(p, (const T16 *)q, (const T16 *)k, GB, W, U, Cq,
                                                                            h0, ht, (T16 *)o, Sc, R);
    return cudaGetLastError();
}
cudaError_t launch_fwd_ws(const Prob &p, const void *q, const void *k, const float *GB, const T16 *W, const T16 *U,
                          const cq_t *Cq, const float *h0, float *ht, void *o, cudaStream_t s) {
    return p.Kp == 64 ? fire_fwd<64, false>(p, q, k, GB, W, U, Cq, h0, ht, o, nullptr, nullptr, s)
                      : fire_fwd<128, false>(p, q, k, GB, W, U, Cq, h0, ht, o, nullptr, nullptr, s);
}
cudaError_t launch_bwd_ws(const Prob &p, const void *q, const void *k, const float *GB, const float *A, const T16 *W,
                          const cq_t *Cq, const float *h0, state_t *Sc, rp_t *R, const void *do_, const float *dht,
                          float *dh0, state_t *Sbar, rp_t *PR, int wy, cudaStream_t s) {
    /* policy R's recompute (R's region holds U, from kkt_inverse, and takes R chunk by chunk), then the reverse chain:
     * two launches, one block per SM each (their grids would not share the SMs) */
    cudaError_t e = p.Kp == 64 ? fire_fwd<64, true>(p, q, k, GB, W, R, Cq, h0, nullptr, nullptr, Sc, R, s)
                               : fire_fwd<128, true>(p, q, k, GB, W, R, Cq, h0, nullptr, nullptr, Sc, R, s);
    if (e != cudaSuccess) return e;
    auto go = [&](auto kp, auto pf) { /* pf: P in the kernel (ReWY), else R̄ (WY: its pullback starts from R̄) */
        constexpr int KPC = decltype(kp)::value;
        constexpr bool PF = decltype(pf)::value;
        constexpr size_t smem = WsLayout<KPC, true>::BYTES;
        cudaError_t e2 = ensure_smem<bwd_ws_kernel<KPC, PF>>(smem);
        if (e2 != cudaSuccess) return e2;
        bwd_ws_kernel<KPC, PF><<<scan_grid(p, WS_BV), WS_THREADS, smem, s>>>(p, (const T16 *)q, (const T16 *)k, GB, A, W, Cq,
                                                                              (const T16 *)do_, dht, dh0, Sbar, PR);
        return cudaGetLastError();
    };
    using K64 = std::integral_constant<int, 64>;
    using K128 = std::integral_constant<int, 128>;
    if (wy) return p.Kp == 64 ? go(K64{}, std::false_type{}) : go(K128{}, std::false_type{});
    return p.Kp == 64 ? go(K64{}, std::true_type{}) : go(K128{}, std::true_type{});
}

} // namespace rewy_cuda
