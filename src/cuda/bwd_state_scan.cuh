/* bwd_state_scan.cuh (one block's work; the launches: bwd_state_scan.cu): the reverse chunk scan (MATH §3,
 * §4b (1), §5), per (sequence, value head, tile of 16, 32 or 64 value columns: scan_bv), chunks in reverse
 * order, S̄ (K × tile, fp32) carried across chunks:
 *   store S̄⁺ (gradient of the chunk's outgoing state) for the pullback
 *   R̄  = C_qᵀ Ō + F S̄⁺             both uses of R
 *   P  = Aᵀ R̄                        ReWY product (1), shared by the scan and the pullback
 *   S̄ ← Q_gᵀ Ō + Λ S̄⁺ − Eᵀ P        (S̄_res supplied here, once)
 * Stores P (ReWY) or R̄ (WY: its pullback starts from R̄), and dh0 = S̄ at each sequence start.
 * Scalar gates: F, Q_g, E are k, q, k scaled per row, applied around the products. Vector gates
 * (VEC): F, Q_g, E and Λ = Diag(γ_n) come precomputed per chunk (VecOps, vec_factors.cu), in three
 * single-buffered tiles, each reloaded for the next chunk as soon as its product is done.
 *
 * WF (bf16 scalar gates at 16 columns, where bwd_scan_uses_w): FLA's dhu chain. With W = A E from kkt_inverse,
 * Eᵀ P = Wᵀ R̄, so S̄ ← Q_gᵀ Ō + Λ S̄⁺ − Wᵀ R̄ needs no P: two dependent products and two barriers per chunk
 * instead of three and four (K double-buffered, Q and W issued after the first barrier, so nothing waits on a
 * third). The scan stores R̄, and P = Aᵀ R̄ is formed afterwards in parallel over the
 * chunks (launch_p_from_rbar) where the pullback takes P (ReWY). */
#ifndef REWY_CUDA_BWD_STATE_SCAN_CUH
#define REWY_CUDA_BWD_STATE_SCAN_CUH

#include "kernels.cuh"

namespace rewy_cuda {

constexpr size_t BSCAN_SHARE_KQ_BYTES = 512;

/* NT: the block's threads, scan_threads<BVT>(), or 256 where scan_8w. WF: the chain with W (Wg, [chunk][hv][64][K]
 * bf16) in place of A; PR then receives R̄ whatever wy says. */
template <class T, bool VEC, int KPC, int BVT, int NT = scan_threads<BVT>(), bool WF = false>
__device__ __forceinline__ void bwd_state_scan_block(const int bid, const Prob &p, const T *q, const T *k, const float *GB,
                                                     const float *A, const cq_t *Cq, VecOps vo, const T *do_,
                                                     const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                                                     const __nv_bfloat16 *Wg = nullptr) {
    using FT = factor_t<T>;
    constexpr int NW = NT / 32;
    extern __shared__ __align__(16) float sm[];
    const ScanBlock blk = ScanBlock::get<BVT>(p, bid);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0, h = hv / p.G;
    /* KPC > 0: the fast path, K padded to KPC and chunk 64 known at compile time (constant loop
     * bounds and strides in every product); KPC = 0: any K and chunk size */
    const int BT = KPC ? MAXBT : p.BT, Kp = KPC ? KPC : p.Kp;
    const int ldk = scan_ldk<T>(Kp), ldfe = scan_ldk<FT>(Kp), ldvt = scan_ldvt<T>(BVT), lds = scan_lds(Kp);
    /* fp32 inputs with K > 128: one K/Q buffer (Q reloaded inside the chunk, no K/Q prefetch) */
    const bool share = !VEC && sizeof(T) * Kp > BSCAN_SHARE_KQ_BYTES;
    /* REG (fast path, K ≤ 128): S̄ lives in registers, warp w holding rows 16·(w % RT)… and one of
     * CG column groups of the K × BVT tile, so the two products that update it accumulate in place
     * (no shared-memory read-modify-write) and S̄⁺ is stored from registers; shared memory gets one
     * copy per chunk, the B operand of F S̄⁺ */
    constexpr bool REG = KPC == 64 || KPC == 128;
    /* BF (REG with bf16 inputs): F S̄⁺, Q_gᵀ Ō and Eᵀ P run as bf16 products (bf_mma) with S̄⁺, γ⊙Ō
     * and P as bf16 tiles (hi/lo pairs with REWY_CUDA_SCAN_HILO) in the space of Sbt, Xo, Pst; so does C_qᵀ Ō
     * (C_q is cq_t); Aᵀ R̄ stays tf32 (A fp32) */
    constexpr bool BF = REG && std::is_same<T, __nv_bfloat16>::value;
    using bf16 = __nv_bfloat16;
    using ST = StateTiles<REG ? KPC : 128, REG ? BVT : 32, NW>;
    constexpr int NS = ST::NS;
    const ST tiles;
    typename ST::Frag Sf = {};
    /* B-side tiles transposed ([column][k]): Sbt = S̄ᵀ, Rbt = R̄ᵀ, Pst = Pᵀ (scaled by βγ for scalar
     * gates), Xo = (γ⊙Ō)ᵀ (Ōᵀ for vector gates) */
    /* HALF = 2 (BF without hi/lo pairs): S̄⁺, R̄ and βγ⊙P are single bf16 tiles (half the words of the
     * fp32 slots), and γ⊙Ō is formed in place in Os after C_qᵀ Ō (no Xo tile): 108 KB for a 64-column
     * tile with scalar gates, so two 8-warp blocks fit an SM (scan_8w) */
    constexpr int HALF = scan_half<T, KPC>();
    static_assert(!WF || (BF && !VEC && HALF == 2), "the W chain is on the bf16 scalar-gate fast path");
    float *Sbt = sm;                 /* [BVT][Kp+8] */
    float *As = Sbt + BVT * lds / HALF; /* [64][LDA] */
    cq_t *Cs = reinterpret_cast<cq_t *>(As + MAXBT * LDA);
    float *Rbt = reinterpret_cast<float *>(Cs + MAXBT * LDA); /* [BVT][LDX] */
    float *Pst = Rbt + BVT * LDX / HALF;
    float *Xo = Pst + BVT * LDX / HALF;
    float *GBs = Xo + (HALF == 2 && !WF ? 0 : BVT * LDX); /* [2][2][64]; WF: γ⊙Ō in Xo (Os is reloaded early) */
    float *lam = GBs + 4 * MAXBT;    /* VEC: [2][Kp] γ_n */
    T *KQ0 = reinterpret_cast<T *>(lam + (VEC ? 2 * Kp : 0)); /* scalar: [64][ldk] ×2 (×1 when sharing) */
    T *KQ1 = (VEC || share) ? KQ0 : KQ0 + MAXBT * ldk;
    T *Os = KQ1 + (VEC ? 0 : MAXBT * ldk);              /* [64][ldvt] */
    FT *Fs = reinterpret_cast<FT *>(Os + MAXBT * ldvt);  /* VEC: F, Q_g, E [64][ldfe] */
    T *Qw = reinterpret_cast<T *>(Fs);                   /* WF: Q [64][ldk] (K double-buffered in KQ0, KQ1) */
    FT *Qv = Fs + MAXBT * ldfe;
    FT *Es = Qv + MAXBT * ldfe;
    bf16 *Sh = reinterpret_cast<bf16 *>(Sbt), *Sl = Sh + BVT * lds; /* BF: hi/lo tiles */
    bf16 *Xh = reinterpret_cast<bf16 *>(Xo), *Xl = Xh + BVT * LDX;
    bf16 *Ph = reinterpret_cast<bf16 *>(Pst), *Pl = Ph + BVT * LDX;
    using RB = typename std::conditional<HALF == 2, bf16, float>::type; /* R̄ᵀ's element type */
    RB *Rb = reinterpret_cast<RB *>(Rbt);
    T *Wt = reinterpret_cast<T *>(As); /* WF: W [64][ldk] in A's space */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    if constexpr (REG) tiles.load(Sf, p, dht, sbase, v0);
    else state_from<BVT>(Sbt, lds, Kp, p, dht, sbase, v0);
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    constexpr int CR = REG ? MAXBT : 0, CK = REG ? KPC : 0, CV = REG ? BVT : 0; /* compile-time copy shapes */
    auto issue_k = [&](T *dst, const ChunkInfo &cj) {
        copy_tile_k<T, CR, CK, NT>(dst, ldk, BT, Kp, k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_q = [&](T *dst, const ChunkInfo &cj) {
        copy_tile_k<T, CR, CK, NT>(dst, ldk, BT, Kp, q + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_o = [&](const ChunkInfo &cj) {
        copy_tile_k<T, CR, CV, NT>(Os, ldvt, BT, BVT, do_ + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv,
                                              cj.n, v0, p.V);
    };
    auto issue_nn = [&](auto *dst, const auto *src, int cj) { scan_copy_nn<CR, NT>(dst, src, p, hv, BT, cj); };
    auto issue_w = [&](int c) { /* WF: chunk c's W tile ([chunk][hv][64][K], K = Kp: a factor tile's layout) */
        if constexpr (WF) scan_copy_factor<T, CR, CK, NT>(Wt, ldk, Wg, p, hv, BT, Kp, c);
    };
    auto issue_gb = [&](int buf, int cj) {
        scan_copy_gates<VEC>(GBs + buf * 2 * MAXBT, lam + buf * Kp, GB, vo.lam, p, hv, BT, Kp, cj);
    };
    auto issue_f = [&](FT *dst, const void *src, int cj) { /* VEC: a precomputed factor tile */
        scan_copy_factor<FT, CR, CK, NT>(dst, ldfe, src, p, hv, BT, Kp, cj);
    };
    int c_begin, c_last; /* the sequence, or its part in the window */
    seq_chunks(p, sq, c_begin, c_last);
    c_last--;
    /* this chunk's and the next one's (in this reverse walk: c − 1) table entries in registers, c − 2's
     * loaded an iteration ahead (as in state_scan_block) */
    ChunkInfo ci = {}, cn = {};
    if (c_last >= c_begin) {
        ci = p.ctab[c_last];
        cn = c_last - 1 >= c_begin ? p.ctab[c_last - 1] : ci;
        if (VEC) {
            issue_f(Fs, vo.F, c_last);
            issue_f(Qv, vo.Qg, c_last);
            issue_f(Es, vo.E, c_last);
        } else {
            issue_k(KQ0, ci);
            if (!share && !WF) issue_q(KQ1, ci);
        }
        issue_o(ci);
        if (!WF) scan_copy_a<CR, NT>(As, A, p, hv, BT, c_last); /* WF: Q and W are issued inside the step */
        issue_nn(Cs, Cq, chunk_slot(p, c_last, ci)); /* C_q, W: the backward's own, by workspace slot */
        issue_gb(0, c_last);
    }
    int kb = 0, cur = 0;
    for (int c = c_last; c >= c_begin; c--) {
        const int n = ci.n;
        const bool has_next = c - 1 >= c_begin;
        const ChunkInfo cnn = c - 2 >= c_begin ? p.ctab[c - 2] : cn;
        const size_t ch = (size_t)chunk_slot(p, c, ci) * p.HV + hv; /* S̄⁺, P or R̄: by workspace slot */
        T *Ks = kb ? KQ1 : KQ0, *Qs = WF ? Qw : kb ? KQ0 : KQ1;
        const float *Gs = GBs + cur * 2 * MAXBT, *bs = Gs + BT, *lm = lam + cur * Kp;
        /* S̄⁺: the shared copy for F S̄⁺, and the saved one for the pullback */
        if constexpr (BF) tiles.spill(Sf, Sh, Sl, lds, Sbar + ch * p.K * p.V, p.K, p.V, v0);
        else if constexpr (REG) tiles.spill(Sf, Sbt, lds, Sbar + ch * p.K * p.V, p.K, p.V, v0);
        cp_async_wait();
        __syncthreads();
        if constexpr (WF) {
            /* this chunk's Q and W (read by the state update, after the second barrier: their single buffers were
             * last read by the previous step's update, before the barrier above), then the next chunk's K into the
             * other K buffer (last read before the previous step's second barrier) with its gates. So every copy
             * but Q and W has a whole step to land, and the step needs no barrier after its update. */
            issue_q(Qw, ci);
            issue_w(chunk_slot(p, c, ci));
            cp_async_commit();
            if (has_next) issue_k(kb ? KQ0 : KQ1, cn);
        }
        if (has_next) issue_gb(cur ^ 1, c - 1);
        if constexpr (WF) cp_async_commit();
        if constexpr (!REG) store_state_tile<BVT>(Sbar + ch * p.K * p.V, Sbt, lds, p.K, p.V, v0);
        const float gl = Gs[n - 1];
        /* γ⊙Ō (scale too on the REG path; Ō for vector gates): one row per thread (blockDim is a multiple of
         * BT), one exponential per thread; into Xo, or (HALF) in place in Os once C_qᵀ Ō has read it */
        auto scale_o = [&](auto put) {
            const int i = threadIdx.x % BT;
            const float gi = (VEC ? 1.f : gexp(p, Gs[i])) * (REG ? p.scale : 1.f);
            for (int j = threadIdx.x / BT; j < BVT; j += NT / BT) put(i, j, gi * ldf(Os + i * ldvt + j));
        };
        if constexpr (HALF == 1 || WF) { /* WF: beside C_qᵀ Ō (both read Os), so that Os is free after R̄ */
            scale_o([&](int i, int j, float x) {
                if constexpr (BF) st_hilo(Xh, scan_lo(Xl), j * LDX + i, x);
                else Xo[j * LDX + i] = x;
            });
        }
        /* R̄ = F S̄⁺ + C_qᵀ Ō: two products of one shape, so each thread adds to what it wrote */
        if constexpr (BF) {
            /* one register tile per warp for both: rows 16·(w % 4), BVT/(NW/4) columns from (w / 4)·… */
            constexpr int NSX = BVT / (NW / 4) / 8;
            const int warp = threadIdx.x >> 5, xi0 = (warp & 3) * 16, xj0 = (warp >> 2) * 8 * NSX;
            float acc[4][4] = {};
            bf_mma<NSX, false, false, 2>(acc, KPC, VEC ? Fs : Ks, VEC ? ldfe : ldk, xi0, Sh, scan_lo(Sl), lds, xj0);
            if (!VEC) { /* F = diag(e^{G_n − G}) K */
                const int r = xi0 + ((threadIdx.x & 31) >> 2);
                pf_scale_rows<NSX>(acc, r < n ? gexp(p, gl - Gs[r]) : 0.f, r + 8 < n ? gexp(p, gl - Gs[r + 8]) : 0.f);
            }
            pf_mma<NSX, false, false>(acc, BT, Cs, 1, LDA, Os, ldvt, 1, xi0, xj0);
            if constexpr (WF) { /* R̄ for the pullback (or P from it); −R̄ for the state update's Wᵀ R̄ */
                rp_t *Rc = PR + ch * BT * p.V + v0;
                pf_each<NSX>(xi0, xj0, acc, [&](int i, int j, int s2, int e) {
                    if (i < n && v0 + j < p.V) st<rp_t>(Rc + (size_t)i * p.V + j, acc[s2][e]);
                    st<RB>(Rb + j * LDX + i, -acc[s2][e]);
                });
            } else {
                pf_each<NSX>(xi0, xj0, acc, [&](int i, int j, int s2, int e) { st<RB>(Rb + j * LDX + i, acc[s2][e]); });
            }
        } else if (VEC) {
            bgemm<NW>(BT, BVT, Kp, Fs, ldfe, 1, Sbt, 1, lds, [&](int i, int j, float cc) { Rbt[j * LDX + i] = cc; });
        } else {
            bgemm<NW>(BT, BVT, Kp, Ks, ldk, 1, Sbt, 1, lds, [&](int i, int j, float cc) {
                Rbt[j * LDX + i] = i < n ? gexp(p, gl - Gs[i]) * cc : 0.f;
            });
        }
        if constexpr (!BF)
            bgemm<NW>(BT, BVT, BT, Cs, 1, LDA, Os, ldvt, 1, [&](int i, int j, float cc) { Rbt[j * LDX + i] += cc; });
        if constexpr (WF) cp_async_wait_group<1>(); /* Q and W (the next K and gates may still run) */
        __syncthreads();
        if (has_next) {
            if (VEC) issue_f(Fs, vo.F, c - 1);
            issue_nn(Cs, Cq, chunk_slot(p, c - 1, cn));
            if (HALF == 1 || WF) issue_o(cn); /* HALF: Os is read to the end of the chunk */
        }
        if constexpr (HALF == 2 && !WF) scale_o([&](int i, int j, float x) { st<T>(Os + i * ldvt + j, x); });
        /* P = Aᵀ R̄; stored as P (ReWY) or R̄ (WY) for the pullback, kept as βγ⊙P for Eᵀ P (scalar gates) */
        if constexpr (!WF) {
            rp_t *PRc = PR + ch * BT * p.V + v0;
            bgemm<NW>(BT, BVT, BT, As, 1, LDA, Rb, 1, LDX, [&](int i, int j, float cc) {
                if (i < n && v0 + j < p.V) st<rp_t>(PRc + (size_t)i * p.V + j, wy ? ldf(Rb + j * LDX + i) : cc);
                const float pv = (REG ? -1.f : 1.f) * (VEC ? cc : bs[i] * gexp(p, Gs[i]) * cc);
                if constexpr (BF) st_hilo(Ph, scan_lo(Pl), j * LDX + i, pv);
                else Pst[j * LDX + i] = pv;
            });
            __syncthreads();
            if (has_next) scan_copy_a<CR, NT>(As, A, p, hv, BT, c - 1);
        }
        /* S̄ ← Λ S̄⁺ + Q_gᵀ Ō − Eᵀ P */
        const float gn = gexp(p, gl);
        if constexpr (REG) {
            /* S̄ ← Λ S̄⁺ + (scale·Q_g)ᵀ Ō − Eᵀ P, in the registers (Xo carries the scale, Pst the sign) */
            const int r = tiles.row_lo();
            tiles.scale_rows(Sf, VEC ? lm[r] : gn, VEC ? lm[r + 8] : gn);
            tiles.each(Sf, [&](float (&a)[4][4], int ti, int tj) {
                if constexpr (WF) { /* (scale·γ⊙Ō)ᵀ in Xh, −R̄ᵀ in Rb: + Q_gᵀ Ō − Wᵀ R̄ */
                    bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, Qs, ldk, ti, Xh, nullptr, LDX, tj);
                    bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, Wt, ldk, ti, Rb, nullptr, LDX, tj);
                } else if constexpr (HALF == 2) { /* γ⊙Ō in Os ([token][column]: k-major B, ldmatrix.trans) */
                    bf_mma<NS, true, true, SCAN_KI<NS>>(a, MAXBT, VEC ? Qv : Qs, VEC ? ldfe : ldk, ti, Os, nullptr, ldvt, tj);
                    bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, VEC ? Es : Ks, VEC ? ldfe : ldk, ti, Ph, nullptr, LDX, tj);
                } else if constexpr (BF) {
                    bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, VEC ? Qv : Qs, VEC ? ldfe : ldk, ti, Xh, scan_lo(Xl), LDX, tj);
                    bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, VEC ? Es : Ks, VEC ? ldfe : ldk, ti, Ph, scan_lo(Pl), LDX, tj);
                } else if constexpr (VEC) {
                    pf_mma<NS, false, true>(a, BT, Qv, 1, ldfe, Xo, 1, LDX, ti, tj);
                    pf_mma<NS, false, true>(a, BT, Es, 1, ldfe, Pst, 1, LDX, ti, tj);
                } else {
                    pf_mma<NS, false, true>(a, BT, Qs, 1, ldk, Xo, 1, LDX, ti, tj);
                    pf_mma<NS, false, true>(a, BT, Ks, 1, ldk, Pst, 1, LDX, ti, tj);
                }
            });
            if constexpr (!WF) {
                __syncthreads();
                if (has_next) {
                    if constexpr (VEC) {
                        issue_f(Qv, vo.Qg, c - 1);
                        issue_f(Es, vo.E, c - 1);
                    } else {
                        issue_k(Qs, cn);
                        issue_q(Ks, cn);
                    }
                    if (HALF == 2) issue_o(cn);
                }
            }
            kb ^= 1;
        } else if (VEC) {
            bgemm<NW>(Kp, BVT, BT, Qv, 1, ldfe, Xo, 1, LDX, [&](int i, int j, float cc) {
                Sbt[j * lds + i] = lm[i] * Sbt[j * lds + i] + p.scale * cc;
            });
            __syncthreads();
            if (has_next) issue_f(Qv, vo.Qg, c - 1);
            bgemm<NW>(Kp, BVT, BT, Es, 1, ldfe, Pst, 1, LDX, [&](int i, int j, float cc) { Sbt[j * lds + i] -= cc; });
            __syncthreads();
            if (has_next) issue_f(Es, vo.E, c - 1);
        } else if (!share) {
            bgemm<NW>(Kp, BVT, BT, Qs, 1, ldk, Xo, 1, LDX, [&](int i, int j, float cc) {
                Sbt[j * lds + i] = gn * Sbt[j * lds + i] + p.scale * cc;
            });
            __syncthreads();
            if (has_next) issue_k(Qs, cn);
            bgemm<NW>(Kp, BVT, BT, Ks, 1, ldk, Pst, 1, LDX, [&](int i, int j, float cc) { Sbt[j * lds + i] -= cc; });
            __syncthreads();
            if (has_next) issue_q(Ks, cn);
            kb ^= 1;
        } else {
            bgemm<NW>(Kp, BVT, BT, Ks, 1, ldk, Pst, 1, LDX, [&](int i, int j, float cc) {
                Sbt[j * lds + i] = gn * Sbt[j * lds + i] - cc;
            });
            __syncthreads();
            issue_q(Ks, ci);
            cp_async_wait();
            __syncthreads();
            bgemm<NW>(Kp, BVT, BT, Ks, 1, ldk, Xo, 1, LDX, [&](int i, int j, float cc) {
                Sbt[j * lds + i] += p.scale * cc;
            });
            __syncthreads();
            if (has_next) issue_k(Ks, cn);
        }
        cur ^= 1;
        ci = cn;
        cn = cnn;
    }
    if (REG && dh0) {
        tiles.save(Sf, p, dh0, sbase, v0);
    } else if (dh0) {
        /* the shared tile is written and read by other threads than state_from's and the loop's: with no chunk to
         * walk (a time window empty for this sequence) nothing else orders them, and dh0 is then dht's own carry */
        __syncthreads();
        state_to<BVT>(Sbt, lds, p, dh0, sbase, v0);
    }
}

template <class T, bool VEC, int KPC, int BVT, bool WF = false>
inline size_t bwd_state_scan_smem(const Prob &p, const VecOps &vo) {
    using FT = factor_t<T>;
    constexpr int HALF = scan_half<T, KPC>();
    size_t smem = sizeof(float) * ((size_t)BVT * scan_lds(p.Kp) / HALF + (size_t)MAXBT * LDA +
                                   2 * (size_t)BVT * LDX / HALF + (HALF == 2 && !WF ? 0 : (size_t)BVT * LDX) + 4 * MAXBT) +
                  sizeof(cq_t) * (size_t)MAXBT * LDA + sizeof(T) * (size_t)MAXBT * scan_ldvt<T>(BVT);
    if (VEC)
        smem += sizeof(float) * 2 * p.Kp + sizeof(FT) * 3 * (size_t)MAXBT * scan_ldk<FT>(p.Kp);
    else
        smem += sizeof(T) * (sizeof(T) * p.Kp > BSCAN_SHARE_KQ_BYTES ? 1 : WF ? 3 : 2) * (size_t)MAXBT * scan_ldk<T>(p.Kp);
    return smem;
}

} // namespace rewy_cuda
#endif
