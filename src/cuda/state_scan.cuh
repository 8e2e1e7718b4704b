/* state_scan.cuh (one block's work; the launch: state_scan.cu, and bwd_state_scan.cu's pair with the
 * reverse scan under policy R): the forward chunk scan (MATH §2):
 *   store S_c (the chunk's incoming state) and
 *   R   = A (Z − E S)          (= U − W S without forming W, U)
 *   S  ← Λ S + Fᵀ R             F_j = k_j ⊙ e^{G_n − G_j}
 * The output O = Q_g S_c + C_q R is output.cu's, in parallel over chunks afterwards, except where the
 * scan fuses it (FO, state_scan_fuses_output): on the bf16 mma.sync path of scalar gates, where the grid
 * is a few long chains (about one block per SM) and each chunk step is latency-bound, the two output
 * products ride along with the chain's: Q S_c beside E S (same state operand), C_q R beside the state
 * update (R as a second bf16 tile, unscaled). The forward then skips output.cu and, under policy R,
 * stores neither S_c nor R.
 * One block per (sequence, value head, tile of 16, 32 or 64 value columns: scan_bv); the state tile S
 * (fp32) is carried across the chunks of its sequence. Columns of S are independent, so V tiles run in
 * parallel. The backward (policy R) runs the same scan to recompute S_c and R.
 *
 * Two gate kinds, one kernel:
 *   scalar (DeltaNet, GDN): E and F are k scaled per row (β_i γ_i, e^{G_n−G_i}), which the products'
 *     epilogues apply; the K tile is double-buffered (the next chunk's loads while this one computes).
 *   vector (KDA, GDN2; VEC): E, F and Λ = Diag(γ_n) come precomputed per chunk (VecOps, from
 *     vec_factors.cu); Z = β v (KDA) or w ⊙ v (GDN2).
 * WU (with FO, where state_scan_uses_wu): kkt_inverse wrote W = A E and U = A Z, and the chain is
 * R = U − W S, S ← Λ S + Fᵀ R: two dependent products and two barriers per chunk instead of three.
 * Loads go through cp.async and are issued for chunk c+1 as soon as chunk c has consumed the buffer,
 * so only the first chunk's loads are exposed.
 * Beside kkt_inverse (WU with so.ready, state_scan_beside_kkt): on small grids the scan starts while kkt_fast
 * still runs (one kkt block per SM beside the scan block) and waits per chunk on kkt's ready flags, so that
 * kkt's time hides behind the chain instead of preceding it. */
#ifndef REWY_CUDA_STATE_SCAN_CUH
#define REWY_CUDA_STATE_SCAN_CUH

#include "kernels.cuh"

namespace rewy_cuda {

/* whether the forward scan double-buffers A and V (DAV in state_scan_block) */
template <bool VEC, int KPC, int BVT, bool FO, bool WU> constexpr bool dav_scan() {
    return !VEC && !WU && !FO && BVT <= 32 && (KPC == 64 || KPC == 128);
}

/* NT: the block's threads, scan_threads<BVT>(), or 256 where scan_8w. WU (with FO): R = U − W S from kkt_inverse's
 * W and U (so.W, so.U) in the tiles of A and V, FLA's chain of two products per chunk instead of three */
template <class T, bool VEC, int KPC, int BVT, int NT = scan_threads<BVT>(), bool FO = false, bool WU = false>
__device__ __forceinline__ void state_scan_block(const int bid, const Prob &p, const T *k, const T *v, const float *GB,
                                                 const float *A, VecOps vo, const float *h0, float *ht, state_t *Sc,
                                                 rp_t *Rout, const ScanOut so = {}) {
    using FT = factor_t<T>;
    constexpr int NW = NT / 32;
    extern __shared__ __align__(16) float sm[];
    const ScanBlock blk = ScanBlock::get<BVT>(p, bid);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0, h = hv / p.G;
    /* KPC > 0: the fast path, K padded to KPC and chunk 64 known at compile time (constant loop
     * bounds and strides in every product); KPC = 0: any K and chunk size */
    const int BT = KPC ? MAXBT : p.BT, Kp = KPC ? KPC : p.Kp;
    const int ldk = scan_ldk<T>(Kp), ldfe = scan_ldk<FT>(Kp), ldvt = scan_ldvt<T>(BVT), lds = scan_lds(Kp);
    const T *wg = static_cast<const T *>(vo.w);
    /* Tiles that feed the B side of the products are stored transposed ([column][k]) so that both
     * operands are k-contiguous for the tensor-core loads: St = Sᵀ, Xt = Xᵀ, Rt = Rᵀ. */
    constexpr int HALF = scan_half<T, KPC>(); /* 2: St and Rt hold one bf16 copy only (BF below) */
    float *St = sm;                                     /* [BVT][Kp+8] fp32 state tile, transposed */
    float *As = St + BVT * lds / HALF;                  /* [64][LDA] */
    float *Xt = As + MAXBT * LDA;                       /* [BVT][LDX] */
    float *Rt = Xt + BVT * LDX;                          /* [BVT][LDX] */
    float *GBs = Rt + BVT * LDX / HALF;                 /* [2 buffers][2][64]: G, β */
    float *lam = GBs + 4 * MAXBT;                       /* VEC: [2 buffers][Kp] γ_n */
    T *K0 = reinterpret_cast<T *>(lam + (VEC ? 2 * Kp : 0)); /* scalar: two [64][ldk] K buffers */
    T *K1 = K0 + (VEC ? 0 : MAXBT * ldk);
    T *Vs = K1 + (VEC ? 0 : MAXBT * ldk);               /* [64][ldvt] */
    T *Ws = Vs + MAXBT * ldvt;                          /* VEC with w: [64][ldvt] */
    FT *Es = reinterpret_cast<FT *>(Ws + (VEC && wg ? MAXBT * ldvt : 0)); /* VEC: E, F [64][ldfe] */
    FT *Fs = Es + MAXBT * ldfe;
    /* FO (scalar gates, so Ws, Es, Fs take no space): two [64][ldk] Q buffers (with K's), two [64][LDA] C_q
     * buffers (with G, β), and R unscaled as bf16 [BVT][LDX] (hi; lo too with SCAN_LO) for C_q R */
    T *Q0 = Ws, *Q1 = Q0 + (FO ? MAXBT * ldk : 0);
    cq_t *Cq0 = reinterpret_cast<cq_t *>(Q1 + (FO ? MAXBT * ldk : 0)), *Cq1 = Cq0 + (FO ? MAXBT * LDA : 0);

    /* REG (fast path, K ≤ 128): S lives in registers (StateTiles), the update S ← Λ S + Fᵀ R accumulates
     * in place and S_c is stored from registers; St is the once-per-chunk shared copy for E S.
     * BF (REG with bf16 inputs): E S and Fᵀ R run as bf16 products (bf_mma) with S and R as bf16 tiles
     * (hi/lo pairs with REWY_CUDA_SCAN_HILO, common.cuh) in the space of St and Rt; R = A X stays a
     * tf32 product (A is fp32 by contract). */
    constexpr bool REG = KPC == 64 || KPC == 128;
    constexpr bool BF = REG && std::is_same<T, __nv_bfloat16>::value;
    static_assert(!FO || (BF && !VEC), "the fused output is on the bf16 scalar-gate fast path only");
    static_assert(!WU || FO, "W, U ride with the fused output");
    T *Wt = reinterpret_cast<T *>(As); /* WU: W [64][ldk] bf16 in A's space (U takes V's) */
    /* DAV (scalar gates, A (Z − E S), no fused output, 16 or 32 columns, K of 64 or 128: the policy-R pair's
     * recompute, whose reverse half sets the pair's shared memory): A and V double-buffered in the space FO and VEC would take, so that the
     * next chunk's copies are issued after the first barrier and have a whole step to land (single-buffered,
     * they are issued after the third and the chain waits on them at the next step's first barrier) */
    constexpr bool DAV = dav_scan<VEC, KPC, BVT, FO, WU>();
    float *As1 = DAV ? reinterpret_cast<float *>(Ws) : As;
    T *Vs1 = DAV ? reinterpret_cast<T *>(As1 + MAXBT * LDA) : Vs;
    auto a_buf = [&](int b) { return b ? As1 : As; };
    auto v_buf = [&](int b) { return b ? Vs1 : Vs; };
    using bf16 = __nv_bfloat16;
    bf16 *Ruh = reinterpret_cast<bf16 *>(Cq1 + (FO ? MAXBT * LDA : 0)), *Rul = Ruh + BVT * LDX; /* FO: R */
    bf16 *Sh = reinterpret_cast<bf16 *>(St), *Sl = Sh + BVT * lds; /* BF: S as hi/lo, [BVT][Kp+8] each */
    bf16 *Rh = reinterpret_cast<bf16 *>(Rt), *Rl = Rh + BVT * LDX; /* BF: diag(e^{G_n − G}) R as hi/lo */
    using ST = StateTiles<REG ? KPC : 128, REG ? BVT : 32, NW>;
    constexpr int NS = ST::NS;
    const ST tiles;
    typename ST::Frag Sf = {};
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    if constexpr (REG) tiles.load(Sf, p, h0, sbase, v0);
    else state_from<BVT>(St, lds, Kp, p, h0, sbase, v0);
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    constexpr int CR = REG ? MAXBT : 0, CK = REG ? KPC : 0, CV = REG ? BVT : 0; /* compile-time copy shapes */
    auto issue_k = [&](T *dst, const ChunkInfo &cj) {
        copy_tile_k<T, CR, CK, NT>(dst, ldk, BT, Kp, k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    /* FO: chunk cj's Q into the Q buffer beside K's, and its C_q into the buffer beside its G, β */
    auto issue_out = [&](int buf, const ChunkInfo &cj, int c) {
        if constexpr (FO) {
            copy_tile_k<T, CR, CK, NT>(buf ? Q1 : Q0, ldk, BT, Kp, static_cast<const T *>(so.q) + ((size_t)cj.tok0 * p.H + h) * p.K,
                                       rsk, cj.n, 0, p.K);
            scan_copy_nn<CR, NT>(buf ? Cq1 : Cq0, so.Cq, p, hv, BT, c);
        }
    };
    auto issue_v = [&](const ChunkInfo &cj, T *vdst) {
        copy_tile_k<T, CR, CV, NT>(vdst, ldvt, BT, BVT, v + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n,
                                             v0, p.V);
        if (VEC && wg)
            copy_tile_k<T, CR, CV, NT>(Ws, ldvt, BT, BVT, wg + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv,
                                                 cj.n, v0, p.V);
    };
    /* chunk c's A and V tiles (WU: W and U) into buffer b (DAV; else the one buffer) */
    auto issue_av = [&](int c, const ChunkInfo &cj, int b) {
        if constexpr (WU) { /* W: [chunk][hv][64][K], K = Kp (a factor tile's layout); U: [chunk][hv][64][V] */
            scan_copy_factor<T, CR, CK, NT>(Wt, ldk, so.W, p, hv, BT, Kp, c);
            copy_tile_k<T, CR, CV, NT>(Vs, ldvt, BT, BVT, so.U + ((size_t)c * p.HV + hv) * MAXBT * p.V, p.V, cj.n, v0, p.V);
        } else {
            scan_copy_a<CR, NT>(a_buf(b), A, p, hv, BT, c);
            issue_v(cj, v_buf(b));
        }
    };
    auto issue_gb = [&](int buf, int cj) {
        scan_copy_gates<VEC>(GBs + buf * 2 * MAXBT, lam + buf * Kp, GB, vo.lam, p, hv, BT, Kp, cj);
    };
    auto issue_f = [&](FT *dst, const void *src, int cj) { /* VEC: a precomputed factor tile */
        scan_copy_factor<FT, CR, CK, NT>(dst, ldfe, src, p, hv, BT, Kp, cj);
    };
    int c_begin, c_end; /* the sequence, or its part in the window */
    seq_chunks(p, sq, c_begin, c_end);
    /* beside kkt_inverse (so.ready, state_scan_beside_kkt): chunk c's GB, C_q, W, U are read only once its flag
     * is set. Thread 0 reads the flag a step ahead (rnext: chunk c + 1's at step c) and waits only where it
     * was not yet set, before the barrier that precedes the copies. */
    const int *rdy = WU ? so.ready : nullptr;
    auto ready = [&](int c) { return rdy + (size_t)c * p.HV + hv; };
    int rnext = 1;
    /* this chunk's and the next one's table entries in registers, c + 2's loaded an iteration ahead: loaded
     * where it was needed, the entry was a dependent global load on the chain (6 % of the stall samples at
     * GDN (2,16384,8), Nsight) */
    ChunkInfo ci = {}, cn = {};
    if (c_begin < c_end) {
        if (rdy) {
            if (threadIdx.x == 0) {
                wait_ready(ready(c_begin));
                if (c_begin + 1 < c_end) rnext = peek_ready(ready(c_begin + 1));
            }
            __syncthreads();
        }
        ci = p.ctab[c_begin];
        cn = c_begin + 1 < c_end ? p.ctab[c_begin + 1] : ci;
        if (VEC) {
            issue_f(Es, vo.E, c_begin);
            issue_f(Fs, vo.F, c_begin);
        } else {
            issue_k(K0, ci);
        }
        issue_av(c_begin, ci, 0);
        issue_gb(0, c_begin);
        issue_out(0, ci, c_begin);
    }
    int kb = 0, cur = 0;
    for (int c = c_begin; c < c_end; c++) {
        const int n = ci.n;
        const bool has_next = c + 1 < c_end;
        const ChunkInfo cnn = c + 2 < c_end ? p.ctab[c + 2] : cn;
        const size_t ch = (size_t)chunk_slot(p, c, ci) * p.HV + hv; /* S_c, R: by workspace slot (a window's backward) */
        T *Ks = kb ? K1 : K0;
        const float *Ac = DAV ? a_buf(cur) : As;
        const T *Vc = DAV ? v_buf(cur) : Vs;
        const float *Gs = GBs + cur * 2 * MAXBT, *bs = Gs + BT, *lm = lam + cur * Kp;
        if constexpr (BF) tiles.spill(Sf, Sh, Sl, lds, Sc ? Sc + ch * p.K * p.V : nullptr, p.K, p.V, v0);
        else if constexpr (REG) tiles.spill(Sf, St, lds, Sc ? Sc + ch * p.K * p.V : nullptr, p.K, p.V, v0);
        if (rdy && has_next && threadIdx.x == 0 && !rnext) wait_ready(ready(c + 1));
        cp_async_wait();
        __syncthreads();
        if (has_next) {
            issue_gb(cur ^ 1, c + 1);
            if (!VEC) issue_k(kb ? K0 : K1, cn);
            issue_out(cur ^ 1, cn, c + 1);
            if constexpr (DAV) issue_av(c + 1, cn, cur ^ 1); /* buffer cur^1: last read before the previous B3 */
        }
        if (!REG && Sc) store_state_tile<BVT>(Sc + ch * p.K * p.V, St, lds, p.K, p.V, v0);
        /* X = Z − E S,  Z = β v (w ⊙ v for GDN2); scalar gates: E = diag(βγ) K, applied here to (K S)_ij = cc */
        auto put_x = [&](int i, int j, float cc) {
            const float x = ldf(Vc + i * ldvt + j);
            Xt[j * LDX + i] = VEC ? x * (wg ? ldf(Ws + i * ldvt + j) : bs[i]) - cc : bs[i] * (x - gexp(p, Gs[i]) * cc);
        };
        /* R = A X (or U − W S): stored as is (for the output and the pullback); kept on chip as
         * diag(e^{G_n − G_j}) R for scalar gates, the row scaling that turns Kᵀ into Fᵀ */
        const float gl = Gs[n - 1];
        rp_t *Rc = Rout ? Rout + ch * BT * p.V + v0 : nullptr;
        auto put_r = [&](int i, int j, float cc) {
            if (Rc && i < n && v0 + j < p.V) st<rp_t>(Rc + (size_t)i * p.V + j, cc);
            const float r = VEC ? cc : (i < n ? gexp(p, gl - Gs[i]) * cc : 0.f);
            if constexpr (BF) st_hilo(Rh, scan_lo(Rl), j * LDX + i, r);
            else Rt[j * LDX + i] = r;
            if constexpr (FO) st_hilo(Ruh, scan_lo(Rul), j * LDX + i, cc);
        };
        /* BF: warp w's tile of the 64 × BVT results (X or R, and FO's O): rows 16·(w % 4), BVT/(NW/4) columns
         * from (w / 4)·BVT/(NW/4) */
        constexpr int NSX = BF ? BVT / (NW / 4) / 8 : 1;
        const int warp = threadIdx.x >> 5, xi0 = (warp & 3) * 16, xj0 = (warp >> 2) * 8 * NSX;
        float oacc[4][4] = {}; /* FO: O = Q_g S_c + C_q R */
        if constexpr (WU) {
            /* R = U − W S (W = A E, U = A Z): the chunk's third product A X is kkt_inverse's, off the chain */
            float acc[4][4] = {};
            bf_mma<NSX, false, false, 2>(acc, KPC, Wt, ldk, xi0, Sh, scan_lo(Sl), lds, xj0);
            bf_mma<NSX, false, false, 2>(oacc, KPC, cur ? Q1 : Q0, ldk, xi0, Sh, scan_lo(Sl), lds, xj0);
            pf_each<NSX>(xi0, xj0, acc, [&](int i, int j, int s, int e) { put_r(i, j, ldf(Vs + i * ldvt + j) - acc[s][e]); });
        } else if constexpr (BF) {
            float acc[4][4] = {};
            bf_mma<NSX, false, false, 2>(acc, KPC, VEC ? Es : Ks, VEC ? ldfe : ldk, xi0, Sh, scan_lo(Sl), lds, xj0);
            if constexpr (FO) bf_mma<NSX, false, false, 2>(oacc, KPC, cur ? Q1 : Q0, ldk, xi0, Sh, scan_lo(Sl), lds, xj0);
            pf_each<NSX>(xi0, xj0, acc, [&](int i, int j, int s, int e) { put_x(i, j, acc[s][e]); });
        } else if (VEC) {
            bgemm<NW>(BT, BVT, Kp, Es, ldfe, 1, St, 1, lds, put_x);
        } else {
            bgemm<NW>(BT, BVT, Kp, Ks, ldk, 1, St, 1, lds, put_x);
        }
        __syncthreads();
        if (VEC && has_next) issue_f(Es, vo.E, c + 1);
        if constexpr (!WU) {
            bgemm<NW>(BT, BVT, BT, Ac, LDA, 1, Xt, 1, LDX, put_r); /* R = A X */
            __syncthreads();
        }
        if (has_next && !DAV) issue_av(c + 1, cn, 0);
        if (rdy && threadIdx.x == 0 && c + 2 < c_end) rnext = peek_ready(ready(c + 2));
        if constexpr (REG) {
            /* S ← Λ S + Fᵀ R in the registers. Scalar gates need no barrier after it: the next chunk's
             * K goes to the other buffer, and St / Rt are rewritten only after the next barriers */
            const int r = tiles.row_lo();
            tiles.scale_rows(Sf, VEC ? lm[r] : gexp(p, gl), VEC ? lm[r + 8] : gexp(p, gl));
            const T *FR = VEC ? Fs : Ks; /* on this path the factor type is T */
            tiles.each(Sf, [&](float (&a)[4][4], int ti, int tj) {
                if constexpr (BF) bf_mma<NS, true, false, SCAN_KI<NS>>(a, MAXBT, FR, VEC ? ldfe : ldk, ti, Rh, scan_lo(Rl), LDX, tj);
                else pf_mma<NS, false, true>(a, BT, FR, 1, VEC ? ldfe : ldk, Rt, 1, LDX, ti, tj);
            });
            if constexpr (FO) {
                /* O = scale·γ_i (Q S_c)_i + C_q R on the rows of the chunk. C_q's buffer and Ru are rewritten only
                 * after the next chunk's first barrier. */
                pf_each<NSX>(xi0, xj0, oacc, [&](int i, int, int s, int e) { oacc[s][e] *= p.scale * gexp(p, Gs[i]); });
                bf_mma<NSX, false, false, 2>(oacc, MAXBT, cur ? Cq1 : Cq0, LDA, xi0, Ruh, scan_lo(Rul), LDX, xj0);
                T *oc = static_cast<T *>(so.o) + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0;
                pf_each<NSX>(xi0, xj0, oacc, [&](int i, int j, int s, int e) {
                    if (i < n && v0 + j < p.V) st<T>(oc + (size_t)i * rsv + j, oacc[s][e]);
                });
            }
            if constexpr (VEC) {
                __syncthreads();
                if (has_next) issue_f(Fs, vo.F, c + 1);
            } else {
                kb ^= 1;
            }
        } else if (VEC) {
            /* S ← Diag(γ_n) S + Fᵀ R */
            bgemm<NW>(Kp, BVT, BT, Fs, 1, ldfe, Rt, 1, LDX, [&](int i, int j, float cc) {
                St[j * lds + i] = lm[i] * St[j * lds + i] + cc;
            });
            __syncthreads();
            if (has_next) issue_f(Fs, vo.F, c + 1);
        } else {
            /* S ← Λ S + Kᵀ diag(e^{G_n − G_j}) R */
            const float gn = gexp(p, gl);
            bgemm<NW>(Kp, BVT, BT, Ks, 1, ldk, Rt, 1, LDX, [&](int i, int j, float cc) {
                St[j * lds + i] = gn * St[j * lds + i] + cc;
            });
            __syncthreads();
            kb ^= 1;
        }
        /* a time window's checkpoint: the state after this chunk (the non-REG tile is rewritten only after the next
         * step's barriers) */
        if (float *ck = window_checkpoint(p, c_begin, c, c_end)) {
            if constexpr (REG) tiles.save(Sf, p, ck, sbase, v0);
            else state_to<BVT>(St, lds, p, ck, sbase, v0);
        }
        cur ^= 1;
        ci = cn;
        cn = cnn;
    }
    if (REG && ht) {
        tiles.save(Sf, p, ht, sbase, v0);
    } else if (ht) {
        __syncthreads(); /* with no chunk to walk (an empty time window) nothing else orders state_from's stores */
        state_to<BVT>(St, lds, p, ht, sbase, v0);
    }
}

template <class T, bool VEC, int KPC, int BVT, bool FO = false> inline size_t state_scan_smem(const Prob &p, const VecOps &vo) {
    using FT = factor_t<T>;
    constexpr int HALF = scan_half<T, KPC>();
    size_t smem = sizeof(float) * ((size_t)BVT * scan_lds(p.Kp) / HALF + (size_t)MAXBT * LDA + (size_t)BVT * LDX +
                                   (size_t)BVT * LDX / HALF + 4 * MAXBT) +
                  sizeof(T) * (size_t)MAXBT * scan_ldvt<T>(BVT);
    if (VEC)
        smem += sizeof(float) * 2 * p.Kp + sizeof(T) * (vo.w ? (size_t)MAXBT * scan_ldvt<T>(BVT) : 0) +
                sizeof(FT) * 2 * (size_t)MAXBT * scan_ldk<FT>(p.Kp);
    else
        smem += sizeof(T) * 2 * (size_t)MAXBT * scan_ldk<T>(p.Kp);
    if (dav_scan<VEC, KPC, BVT, FO, false>()) /* the second A and V buffers */
        smem += sizeof(float) * (size_t)MAXBT * LDA + sizeof(T) * (size_t)MAXBT * scan_ldvt<T>(BVT);
    if (FO) /* Q buffers, C_q buffers, R (and its lo half with REWY_CUDA_SCAN_HILO) */
        smem += sizeof(T) * 2 * (size_t)MAXBT * scan_ldk<T>(p.Kp) + sizeof(cq_t) * 2 * (size_t)MAXBT * LDA +
                sizeof(__nv_bfloat16) * (SCAN_LO ? 2 : 1) * (size_t)BVT * LDX;
    return smem;
}

} // namespace rewy_cuda
#endif
