/* pullback_ws.cu: the scalar-gate ReWY pullback (pullback.cu's math, term for term: its header names every term) as a
 * warp-specialized persistent block on Hopper's warpgroup products and tensor copies, for bf16, chunk 64, K = V = 128,
 * sm_90a. One block an SM walks its items, an item being one (chunk slot, value head): the value heads of a key head's
 * group one after another (they share K and Q and add into q̄, k̄), then its next slot.
 *
 * Why: pullback_fast_kernel (16 mma.sync warps) waits on its copies phase after phase; session 36's two-warpgroup form
 * of this math (commit 9cd3bf5) was slower still, its math warps issuing their own copies. Here one producer warp
 * issues every copy (tma.cuh's boxes, a zero-filling cp.async for a sequence's tail chunk) into the stages below, and
 * the two math warpgroups only wait on mbarriers and compute, so the next item's bytes stream in while this one's
 * products, epilogue and stores run. A chunk and value head reads about 160 KB, writes 48 KB and does 12.6 MFLOP: the
 * kernel is bound by bytes and latency, not products, and what it needs is copies always in flight (measurements:
 * docs/PERF.md, session 38).
 *
 * Shared memory: two slab stages (V columns 64·s …: P, Ō, R, V boxes and S̄⁺, S_c as two boxes each, 64 KB), K and Q
 * (one stage, 32 KB), the three Γ tiles (boxes, written here), the gates of two items. Slab s of every item goes to
 * stage s. Barriers: full[s] (the producer's copies of a slab: an arrival by each of its lanes, lane 0's with the bytes
 * of its tensor copies, so that each lane's own tail copies are published by its own arrival), empty[s] (every math
 * thread is done reading a slab: an arrival each, as its own reads are what the next copy must follow; one a warp
 * after a warp barrier is as correct, but racecheck reports it), kq full and kq empty likewise for K and Q (loaded
 * once a key head, released after the group's last value head).
 *
 * Warpgroup w owns the K-wide results' features 64·w … (one box of K, Q, S̄⁺, S_c), so that a thread holds four
 * m64n64 accumulators over the item:
 *   X  = D = P Rᵀ (w = 0) or H_q = Ō Rᵀ (w = 1), over V;
 *   B̂ = −γ ⊙ (P S_cᵀ) + Γ K,   Ŷ = e^{G_n−G} ⊙ (R S̄⁺ᵀ) + Γ_βᵀ K + Γ_H'ᵀ Q,   Q̂ = scale·γ ⊙ (Ō S_cᵀ) + Γ_H' K;
 *   k̄ = β ⊙ B̂ + Ŷ,  q̄ = Q̂,  β̄ = ⟨k, B̂⟩ + ⟨P, v⟩,  Ḡ = ⟨k, β ⊙ B̂ − Ŷ⟩ + ⟨q, Q̂⟩  (Ŷ = pullback_fast's Ĉ + F̂).
 * An item, math side: for each slab, wait full[s]; the four V-long products (X, F, Bh, Qh) beside dv = β P, ⟨P, v⟩ and
 * ⟨S̄⁺, S_c⟩; release it (empty[s]). Then Γ = 𝓛_<(−D) ⊙ e^{G_i−G_j}, Γ_β = diag(β) Γ, Γ_H' = scale·𝓛_≤(H_q) ⊙ e^{G_i−G_j}
 * into their boxes (Γ_βᵀ and Γ_H'ᵀ read MN-major); wait kq full; the four K-side products; the epilogue (dq, dk, the
 * row sums, the in-chunk suffix sum of Ḡ as pullback_fast_kernel's). */
#include "kernels.cuh"
#include "ws.cuh"

namespace rewy_cuda {

struct PsLayout : WsSlab {
    static constexpr int STAGE = BYTES; /* a slab stage (ws.cuh's slab) */
    static constexpr int oK = 2 * STAGE, oQ = oK + 2 * B;                  /* [64 tokens][128 features], two boxes */
    static constexpr int oG = oQ + 2 * B, oGb = oG + B, oH = oGb + B;      /* Γ, Γ_β, Γ_H' */
    static constexpr int oGB = oH + B;                                     /* the gates of items it & 1: G, then β */
    static constexpr int oRed = oGB + 2 * GB_BYTES;   /* β̄, Ḡ row terms [2][64] each, ⟨P, v⟩ by row [64], sums [16] */
    static constexpr int oMB = oRed + (5 * MAXBT + 16) * 4; /* mbarriers: full[2], empty[2], kq full, kq empty */
    static constexpr int TOTAL = oMB + 6 * 8;
    static constexpr unsigned SLAB_BYTES = 8 * B, SLAB_ROW_BYTES = 4 * B; /* of which P, Ō, R, V (a tail's: cp.async) */
};

/* the maps: k, q [token][H·K]; v, o (dO) [token][HV·V]; r, p (R, P) [slot·HV·64][V]; sc, sb (S_c, S̄⁺) [slot·HV·K][V] */
struct PsMaps {
    CUtensorMap k, q, v, o, r, p, sc, sb;
};

__global__ void __launch_bounds__(WS_NT, 1)
pullback_ws_kernel(Prob p, const __grid_constant__ PsMaps m, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                   const __nv_bfloat16 *v, const float *GB, const __nv_bfloat16 *do_, const rp_t *R, const rp_t *PR,
                   float *acc, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv, __nv_bfloat16 *dbeta,
                   const float *graw, float *dg) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using T2 = __nv_bfloat162;
    using L = PsLayout;
    constexpr int KD = 128, BAR = 1; /* BAR: the math warpgroups' named barrier */
    extern __shared__ __align__(1024) char smc[]; /* the copied boxes: 1024-B aligned */
    const int tid = threadIdx.x;
    const unsigned mb = smem_u32(smc + L::oMB);
    const unsigned full0 = mb, empty0 = mb + 16, kq_full = mb + 32, kq_empty = mb + 40; /* full[s]: full0 + 8·s … */
    auto stage = [&](int s) { return smc + s * L::STAGE; };
    auto gates = [&](int it) { return reinterpret_cast<float *>(smc + L::oGB + (it & 1) * GB_BYTES); };
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;

    /* the items: unit u = (slot u % nslot, key head u / nslot), value heads r = 0 … G−1 of its group; both roles walk
     * the same sequence */
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
    const int u0 = (int)blockIdx.x < nunit && unit_chunk(blockIdx.x) >= 0 ? (int)blockIdx.x : next_unit(blockIdx.x);
    if (u0 >= nunit) return; /* the whole block */
    ws_mbar_init(mb, {32, 32, WS_MATH, WS_MATH, 32, WS_MATH}); /* full[2], empty[2], kq full, kq empty */

    if (tid >= WS_MATH) {
        if (!ws_producer_copies()) return;
        /* ---- the producer warp: lane 0 issues the tensor copies; a tail chunk's token rows (P, Ō, R, V, K, Q) come by
         * every lane's zero-filling cp.async, waited on and fenced before the lane's arrival publishes them */
        const int lane = tid & 31;
        int it = 0, ku = 0;
        for (int u = u0, un; u < nunit; u = un, ku++) {
            un = next_unit(u); /* early: its chunk-table reads are global loads */
            const int c = unit_chunk(u), h = u / nslot;
            const ChunkInfo ci = p.ctab[c];
            const bool tail = ci.n < MAXBT;
            ChunkInfo wi = ci; /* a workspace tile's rows (P, R): from its own first row */
            wi.tok0 = 0;
            for (int r = 0; r < p.G; r++, it++) {
                const int hv = h * p.G + r;
                const int x = (u % nslot) * p.HV + hv; /* the workspace index (slot, value head) */
#pragma unroll 1
                for (int s = 0; s < 2; s++) {
                    char *const st = stage(s);
                    const unsigned f = full0 + 8 * s;
                    if (it > 0) mbar_wait(empty0 + 8 * s, (it - 1) & 1); /* the previous item's slab s is read */
                    if (tail) {
                        ws_copy_tail<64, 32>(st + L::oP, PR + (size_t)x * MAXBT * p.V, p.V, 64 * s, wi, lane);
                        ws_copy_tail<64, 32>(st + L::oO, do_, rsv, (size_t)hv * p.V + 64 * s, ci, lane);
                        ws_copy_tail<64, 32>(st + L::oR, R + (size_t)x * MAXBT * p.V, p.V, 64 * s, wi, lane);
                        ws_copy_tail<64, 32>(st + L::oV, v, rsv, (size_t)hv * p.V + 64 * s, ci, lane);
                        ws_rows_done();
                    }
                    if (lane != 0) mbar_arrive(f);
                    else {
                        const unsigned sa = smem_u32(st);
                        bulk_fence(); /* the math warps' reads of this stage (released on empty[s]) before these writes */
                        mbar_expect(f, (tail ? L::SLAB_BYTES - L::SLAB_ROW_BYTES : L::SLAB_BYTES) + (s == 0 ? GB_BYTES : 0));
                        if (!tail) {
                            tma_box(sa + L::oP, &m.p, 64 * s, x * MAXBT, f);
                            tma_box(sa + L::oO, &m.o, hv * p.V + 64 * s, ci.tok0, f);
                            tma_box(sa + L::oR, &m.r, 64 * s, x * MAXBT, f);
                            tma_box(sa + L::oV, &m.v, hv * p.V + 64 * s, ci.tok0, f);
                        }
#pragma unroll
                        for (int w = 0; w < 2; w++) {
                            tma_box(sa + L::oSb + w * L::B, &m.sb, 64 * s, x * KD + 64 * w, f);
                            tma_box(sa + L::oSc + w * L::B, &m.sc, 64 * s, x * KD + 64 * w, f);
                        }
                        if (s == 0) bulk_g2s(smem_u32(gates(it)), GB + ((size_t)c * p.HV + hv) * 2 * MAXBT, GB_BYTES, f);
                    }
                }
                if (r == 0) { /* K and Q of the key head, once the previous unit's last value head is done with them */
                    if (ku > 0) mbar_wait(kq_empty, (ku - 1) & 1);
                    if (tail) {
                        ws_copy_tail<KD, 32>(smc + L::oK, k, rsk, (size_t)h * p.K, ci, lane);
                        ws_copy_tail<KD, 32>(smc + L::oQ, q, rsk, (size_t)h * p.K, ci, lane);
                        ws_rows_done();
                    }
                    if (lane != 0) mbar_arrive(kq_full);
                    else {
                        bulk_fence();
                        mbar_expect(kq_full, tail ? 0u : 4u * L::B);
                        if (!tail) {
                            tma_tile<KD>(smem_u32(smc + L::oK), &m.k, h * KD, ci.tok0, kq_full);
                            tma_tile<KD>(smem_u32(smc + L::oQ), &m.q, h * KD, ci.tok0, kq_full);
                        }
                    }
                }
            }
        }
        return;
    }

    /* ---- the math warpgroups: four m64n64 accumulators a thread */
    ws_math_regs();
    const int w = tid >> 7, lane = tid & 31;
    T *const Gm = reinterpret_cast<T *>(smc + L::oG), *const Gb = reinterpret_cast<T *>(smc + L::oGb);
    T *const Hm = reinterpret_cast<T *>(smc + L::oH);
    const T *const Ks = reinterpret_cast<const T *>(smc + L::oK), *const Qs = reinterpret_cast<const T *>(smc + L::oQ);
    float *const rowb = reinterpret_cast<float *>(smc + L::oRed); /* [2][64] β̄ row terms by warpgroup */
    float *const rowg = rowb + 2 * MAXBT;                          /* [2][64] Ḡ row terms */
    float *const rowp = rowg + 2 * MAXBT;                          /* [64] ⟨P, v⟩ */
    float *const red = rowp + MAXBT;                               /* [16] block sums */
    const int i0 = wg_row(0), f0 = 64 * w; /* this thread's rows i0, i0 + 8; this warpgroup's features */
    const bool gated = p.gated && dg; /* whether Ḡ is wanted: its terms are skipped otherwise (DeltaNet) */
    /* K and Q read MN-major from this warpgroup's features (the K-side products' B operands) */
    const uint32_t kxlo = wg_lo<OpSt::LBO>(smc + L::oK + w * L::B), qxlo = wg_lo<OpSt::LBO>(smc + L::oQ + w * L::B);
    int it = 0, ku = 0;
    for (int u = u0, un; u < nunit; u = un, ku++) {
        un = next_unit(u); /* early, as the producer's */
        const int c = unit_chunk(u), h = u / nslot;
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n, tok0 = ci.tok0;
        for (int r = 0; r < p.G; r++, it++) {
            const int hv = h * p.G + r;
            const float *const Gs = gates(it), *const bs = Gs + MAXBT;
            /* the raw gates of rows 2·lane, 2·lane + 1 for the suffix sum at the end, loaded now: read there, their
             * latency held the other warps at the item's closing barrier */
            float gr0 = 0.f, gr1 = 0.f;
            const size_t th = (size_t)(tok0 + 2 * lane) * p.HV + hv;
            if (gated && tid < 32) {
                if (2 * lane < n) gr0 = graw[th];
                if (2 * lane + 1 < n) gr1 = graw[th + p.HV];
            }

            /* ---- the V slabs: X = D or H_q, F = R S̄⁺ᵀ, Bh = P S_cᵀ, Qh = Ō S_cᵀ; dv = β P, ⟨P, v⟩, ⟨S̄⁺, S_c⟩ beside */
            float X[32], F[32], Bh[32], Qh[32];
            float pv = 0.f, lam = 0.f;
#pragma unroll
            for (int s = 0; s < 2; s++) {
                const char *const st = stage(s);
                mbar_wait(full0 + 8 * s, it & 1);
                __syncwarp(); /* converged before the products (else ptxas serializes every wgmma of the kernel) */
                const uint32_t plo = wg_lo<OpSk::LBO>(st + L::oP), olo = wg_lo<OpSk::LBO>(st + L::oO);
                const uint32_t rlo = wg_lo<OpSk::LBO>(st + L::oR);
                const uint32_t sblo = wg_lo<OpSk::LBO>(st + L::oSb + w * L::B), sclo = wg_lo<OpSk::LBO>(st + L::oSc + w * L::B);
                wg_arrive();
                ws_mma<OpSk, OpSk, 64>(X, w ? olo : plo, rlo, s > 0);
                ws_mma<OpSk, OpSk, 64>(F, rlo, sblo, s > 0);
                ws_mma<OpSk, OpSk, 64>(Bh, plo, sclo, s > 0);
                ws_mma<OpSk, OpSk, 64>(Qh, olo, sclo, s > 0);
                wg_commit();
                { /* beside the products: row tid / 4, two 8-column pieces a thread */
                    const int i = tid >> 2;
                    const T *const Ps = reinterpret_cast<const T *>(st + L::oP), *const Vs = reinterpret_cast<const T *>(st + L::oV);
                    if (i < n) {
                        const float bi = bs[i];
                        float pf[2][8], vf[2][8]; /* both pieces read before the stores (as G below) */
#pragma unroll
                        for (int m8 = 0; m8 < 2; m8++) {
                            const int c8 = ((tid & 3) + 4 * m8) * 8;
                            ld8(Ps + sw128(i, c8), pf[m8]);
                            ld8(Vs + sw128(i, c8), vf[m8]);
                        }
#pragma unroll
                        for (int m8 = 0; m8 < 2; m8++) {
#pragma unroll
                            for (int e = 0; e < 8; e++) {
                                pv += pf[m8][e] * vf[m8][e];
                                pf[m8][e] *= bi;
                            }
                            st8(dv + (size_t)(tok0 + i) * rsv + (size_t)hv * p.V + 64 * s + ((tid & 3) + 4 * m8) * 8, pf[m8]);
                        }
                    }
                    if (gated)
                        lam += ws_slab_dot<WS_MATH>(reinterpret_cast<const T *>(st + L::oSb), reinterpret_cast<const T *>(st + L::oSc), tid);
                }
                wg_wait();
                mbar_arrive(empty0 + 8 * s); /* this thread is done with slab s */
            }

            /* ---- Γ, Γ_β (warpgroup 0) or Γ_H' (warpgroup 1) into their boxes (the previous item's K-side products, their
             * last readers, ended before its closing barrier); the V-long products' row scalings */
            ws_gamma_tiles(p, X, Gs, bs, n, w, i0, Gm, Gb, Hm);
            ws_scale_rows(p, F, Bh, Qh, Gs, n, i0);
            ws_sync(BAR, WS_MATH); /* every Γ tile is in */
            mbar_wait(kq_full, ku & 1);
            __syncwarp();
            const float endp = gated ? ws_endpoint(F, Ks, f0) : 0.f;
            ws_kside(Bh, F, Qh, Gm, Gb, Hm, kxlo, qxlo); /* ---- the K-side products ---- */

            /* ---- k̄ = β B̂ + Ŷ, q̄ = Q̂ and the row terms of β̄, Ḡ, from the registers ---- */
            const float b0 = bs[i0], b1 = bs[i0 + 8];
            float sb[2] = {0.f, 0.f}, sg[2] = {0.f, 0.f};
            T2 kr[16], qr[16]; /* K and Q at this thread's places, read before the stores below (as G above) */
            ws_kq_frags(kr, qr, Ks, Qs, w, gated);
#pragma unroll
            for (int e = 0; e < 32; e += 2) {
                const int i = wg_row(e), f = f0 + wg_col(e), hi = (e >> 1) & 1;
                const float bb = hi ? b1 : b0;
                const float2 kk = __bfloat1622float2(kr[e / 2]);
                const float dk0 = bb * Bh[e] + F[e], dk1 = bb * Bh[e + 1] + F[e + 1];
                sb[hi] += kk.x * Bh[e] + kk.y * Bh[e + 1];
                if (gated) {
                    const float2 qq = __bfloat1622float2(qr[e / 2]);
                    sg[hi] += kk.x * (bb * Bh[e] - F[e]) + kk.y * (bb * Bh[e + 1] - F[e + 1]) + qq.x * Qh[e] + qq.y * Qh[e + 1];
                }
                if (i >= n) continue;
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
            if (r == p.G - 1) mbar_arrive(kq_empty); /* this thread's last reads of K and Q for the unit */
#pragma unroll
            for (int z = 0; z < 2; z++) {
                sb[z] = sum4(sb[z]);
                sg[z] = sum4(sg[z]);
            }
            pv = sum4(pv);
            if ((lane & 3) == 0) {
                rowb[w * MAXBT + i0] = sb[0];
                rowb[w * MAXBT + i0 + 8] = sb[1];
                rowg[w * MAXBT + i0] = sg[0];
                rowg[w * MAXBT + i0 + 8] = sg[1];
                rowp[tid >> 2] = pv;
            }
            /* (meets the math warps: the row terms are in; the item's Γ barrier is between the last call's reads of red and
             * these writes) */
            const float2 sums = block_sum2<WS_MATH / 32, false>(lam, endp, red, [] { ws_sync(BAR, WS_MATH); });
            /* the first warp finishes the item alone, lane l at rows 2l, 2l + 1: dβ, and dg_i = Ḡ_n's state term +
             * Σ_{m ≥ i} (row terms), a suffix scan. The others go on to the next item: its Γ barrier is where every
             * warp's reads of this item's row terms, sums and Γ tiles are behind everyone, and its gates buffer comes
             * back only after this warp released the next item's first slab. */
            if (tid < 32) {
                const int i = 2 * lane;
                if (dbeta) {
                    if (i < n) st<T>(dbeta + th, rowp[i] + rowb[i] + rowb[MAXBT + i]);
                    if (i + 1 < n) st<T>(dbeta + th + p.HV, rowp[i + 1] + rowb[i + 1] + rowb[MAXBT + i + 1]);
                }
            }
            if (gated && tid < 32) {
                const int i = 2 * lane;
                const float a = i < n ? rowg[i] + rowg[MAXBT + i] : 0.f, a2 = i + 1 < n ? rowg[i + 1] + rowg[MAXBT + i + 1] : 0.f;
                const float2 d = ws_gate_grads(a, a2, sums, Gs[n - 1], gr0, gr1, p.zero_h0 && ci.idx == 0 && i == 0);
                if (i < n) dg[th] = d.x;
                if (i + 1 < n) dg[th + p.HV] = d.y;
            }
        }
    }
#else
    (void)p, (void)m, (void)q, (void)k, (void)v, (void)GB, (void)do_, (void)R, (void)PR, (void)acc, (void)dq, (void)dk,
        (void)dv, (void)dbeta, (void)graw, (void)dg;
#endif
}

/* Whether the scalar-gate pullback runs as this kernel (Plan::pb_ws): ReWY, bf16 (and bf16 chunk states, R and P),
 * chunk 64, K = V = 128, an sm_90a binary, the tiles in the device's shared memory, and 16-B aligned q, k, v, dO, dv with
 * 4-B aligned dq, dk (NULL in a size query: no region depends on this choice). By default wherever it applies: it beat
 * pullback_fast_kernel at every suite shape (H100, session 38: the kernel 1,114 → 815 µs at GDN (8,2048,32), 152 → 115
 * µs a window at (4,4096,16); GPU-bound backward GDN 2.112 → 1.827 and 1.324 → 1.182 ms, PERF.md). force.pb_ws = 0
 * keeps pullback_fast_kernel (the tests of it at these sizes), 1 is the default's choice. */
bool pullback_ws(const Prob &p, rewy_dtype dt, bool vec, bool wy, const void *q, const void *k, const void *v,
                 const void *do_, const void *dq, const void *dk, const void *dv) {
    if (wy || p.K != 128 || p.Kp != 128 || !ws_shapes_ok(p, dt, vec, PsLayout::TOTAL)) return false;
    if ((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)do_ | (uintptr_t)dv) & 15) || (((uintptr_t)dq | (uintptr_t)dk) & 3))
        return false;
    return p.plan.force.pb_ws != 0;
}

cudaError_t launch_pullback_ws(const Prob &p, const void *q, const void *k, const void *v, const float *GB,
                               const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R, const rp_t *PR,
                               float *acc, void *dq, void *dk, void *dv, void *dbeta, const float *graw, float *dg,
                               cudaStream_t s) {
    using T = __nv_bfloat16;
    if (p.K != 128 || p.Kp != 128 || p.V != 128) return cudaErrorInvalidValue;
    const TmaEncoder enc;
    PsMaps m{};
    const uint64_t rows = (uint64_t)chunk_slots(p) * p.HV * MAXBT; /* the workspaces' rows */
    if (!ws_token_map(enc, &m.k, p, k, p.H, p.K) || !ws_token_map(enc, &m.q, p, q, p.H, p.K) ||
        !ws_token_map(enc, &m.v, p, v, p.HV, p.V) || !ws_token_map(enc, &m.o, p, do_, p.HV, p.V) ||
        !ws_slot_map(enc, &m.r, R, rows, p.V) || !ws_slot_map(enc, &m.p, PR, rows, p.V) ||
        !ws_slot_map(enc, &m.sc, Sc, rows / MAXBT * p.K, p.V) || !ws_slot_map(enc, &m.sb, Sbar, rows / MAXBT * p.K, p.V))
        return cudaErrorInvalidValue;
    const int nunit = chunk_slots(p) * p.H; /* a persistent grid: one block an SM walks every gridDim.x-th unit */
    const int grid = p.plan.sms > 0 && p.plan.sms < nunit ? p.plan.sms : nunit;
    constexpr size_t smem = PsLayout::TOTAL;
    cudaError_t e = ensure_smem<pullback_ws_kernel>(smem);
    if (e != cudaSuccess) return e;
    pullback_ws_kernel<<<grid, WS_NT, smem, s>>>(p, m, (const T *)q, (const T *)k, (const T *)v, GB, (const T *)do_, R, PR,
                                                 acc, (T *)dq, (T *)dk, (T *)dv, (T *)dbeta, graw, dg);
    return cudaGetLastError();
}

} // namespace rewy_cuda
