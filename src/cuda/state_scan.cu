/* state_scan.cu: the forward chunk scan, fused with the output (MATH §2):
 *   R   = A (Z − E S)          (= U − W S without forming W, U)
 *   O   = Q_g S + C_q R         (output.cu's job, fused: S never leaves the chip in the forward)
 *   S  ← Λ S + Fᵀ R             F_j = k_j ⊙ e^{G_n − G_j}
 * One block per (sequence, value head, 32-column tile of V); the state tile S (K×32, fp32) lives in
 * shared memory across the chunks of its sequence. Columns of S are independent, so V tiles run in
 * parallel. Also used by the backward (policy R) to recompute S_c and R (o = NULL).
 *
 * Two gate kinds, one kernel:
 *   scalar (DeltaNet, GDN): E, F, Q_g are k, k, q scaled per row (β_i γ_i, e^{G_n−G_i}, γ_i), which
 *     the products' epilogues apply; K and Q tiles alternate between two buffers.
 *   vector (KDA, GDN2; VEC): E, F, Q_g and Λ = Diag(γ_n) come precomputed per chunk (VecOps, from
 *     vec_factors.cu); Z = β v (KDA) or w ⊙ v (GDN2).
 * Loads go through cp.async and are issued for chunk c+1 as soon as chunk c has consumed the buffer,
 * so only the first chunk's loads are exposed. */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int SCAN_THREADS = 256;
constexpr int SCAN_NW = SCAN_THREADS / 32;

template <class T, bool VEC, int KPC>
__global__ void __launch_bounds__(SCAN_THREADS)
state_scan_kernel(Prob p, const T *q, const T *k, const T *v, const float *GB, const float *A,
                  const float *Cq, VecOps vo, const float *h0, T *o, float *ht, state_t *Sc, float *Rout) {
    using FT = factor_t<T>;
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G;
    /* KPC > 0: the fast path, K padded to KPC and chunk 64 known at compile time (constant loop
     * bounds and strides in every product); KPC = 0: any K and chunk size */
    const int BT = KPC ? MAXBT : p.BT, Kp = KPC ? KPC : p.Kp;
    const int ldk = scan_ldk<T>(Kp), ldfe = scan_ldk<FT>(Kp), ldvt = scan_ldvt<T>(), lds = scan_lds(Kp);
    const bool out = o != nullptr;
    const T *wg = static_cast<const T *>(vo.w);
    /* Tiles that feed the B side of the products are stored transposed ([column][k]) so that both
     * operands are k-contiguous for the tensor-core loads: St = Sᵀ, Xt = Xᵀ, Rt = Rᵀ. */
    float *St = sm;                                     /* [BV][Kp+8] fp32 state tile, transposed */
    float *As = St + BV * lds;                          /* [64][LDA] */
    float *Cs = As + MAXBT * LDA;                       /* (output only) */
    float *Xt = Cs + (out ? MAXBT * LDA : 0);           /* [BV][LDX] */
    float *Rt = Xt + BV * LDX;                          /* [BV][LDX] */
    float *GBs = Rt + BV * LDX;                         /* [2 buffers][2][64]: G, β */
    float *lam = GBs + 4 * MAXBT;                       /* VEC: [2 buffers][Kp] γ_n */
    T *KQ0 = reinterpret_cast<T *>(lam + (VEC ? 2 * Kp : 0)); /* scalar: two [64][ldk] buffers, K and Q alternate */
    T *KQ1 = KQ0 + (VEC ? 0 : MAXBT * ldk);
    T *Vs = KQ1 + (VEC ? 0 : MAXBT * ldk);              /* [64][ldvt] */
    T *Ws = Vs + MAXBT * ldvt;                          /* VEC with w: [64][ldvt] */
    FT *Es = reinterpret_cast<FT *>(Ws + (VEC && wg ? MAXBT * ldvt : 0)); /* VEC: E, F, Q_g [64][ldfe] */
    FT *Fs = Es + MAXBT * ldfe;
    FT *Qv = Fs + MAXBT * ldfe;

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = threadIdx.x; e < Kp * BV; e += blockDim.x) {
        const int j = e / Kp, kk = e - j * Kp;
        St[j * lds + kk] = (h0 && kk < p.K && v0 + j < p.V) ? h0[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    auto issue_k = [&](T *dst, const ChunkInfo &cj) {
        copy_tile<T>(dst, ldk, BT, Kp, k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_q = [&](T *dst, const ChunkInfo &cj) {
        copy_tile<T>(dst, ldk, BT, Kp, q + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_v = [&](const ChunkInfo &cj) {
        copy_tile<T>(Vs, ldvt, BT, BV, v + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n, v0, p.V);
        if (VEC && wg) copy_tile<T>(Ws, ldvt, BT, BV, wg + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n, v0, p.V);
    };
    auto issue_nn = [&](float *dst, const float *src, int cj) {
        copy_tile<float>(dst, LDA, BT, BT, src + ((size_t)cj * p.HV + hv) * BT * BT, BT, BT, 0, BT);
    };
    auto issue_gb = [&](int buf, int cj) {
        copy_tile<float>(GBs + buf * 2 * MAXBT, 2 * BT, 1, 2 * BT, GB + ((size_t)cj * p.HV + hv) * 2 * BT, 2 * BT, 1, 0,
                         2 * BT);
        if (VEC) copy_tile<float>(lam + buf * Kp, Kp, 1, Kp, vo.lam + ((size_t)cj * p.HV + hv) * Kp, Kp, 1, 0, Kp);
    };
    auto issue_f = [&](FT *dst, const void *src, int cj) { /* VEC: a precomputed factor tile */
        copy_tile<FT>(dst, ldfe, BT, Kp, static_cast<const FT *>(src) + ((size_t)cj * p.HV + hv) * BT * Kp, Kp, BT, 0, Kp);
    };
    const int c_begin = p.coff[sq], c_end = p.coff[sq + 1];
    if (c_begin < c_end) {
        const ChunkInfo c0i = p.ctab[c_begin];
        if (VEC) {
            issue_f(Es, vo.E, c_begin);
            issue_f(Fs, vo.F, c_begin);
            if (out) issue_f(Qv, vo.Qg, c_begin);
        } else {
            issue_k(KQ0, c0i);
            if (out) issue_q(KQ1, c0i);
        }
        issue_v(c0i);
        issue_nn(As, A, c_begin);
        if (out) issue_nn(Cs, Cq, c_begin);
        issue_gb(0, c_begin);
    }
    int kb = 0, cur = 0;
    for (int c = c_begin; c < c_end; c++) {
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n, tok0 = ci.tok0;
        const bool has_next = c + 1 < c_end;
        ChunkInfo cn = ci;
        if (has_next) cn = p.ctab[c + 1];
        const size_t ch = (size_t)c * p.HV + hv;
        T *Ks = kb ? KQ1 : KQ0, *Qs = kb ? KQ0 : KQ1;
        const float *Gs = GBs + cur * 2 * MAXBT, *bs = Gs + BT, *lm = lam + cur * Kp;
        cp_async_wait();
        __syncthreads();
        if (has_next) {
            issue_gb(cur ^ 1, c + 1);
            if (!VEC && !out) issue_k(Qs, cn);
        }
        if (Sc) {
            state_t *dst = Sc + ch * p.K * p.V;
            for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, St[j * lds + kk]);
            }
        }
        /* X = Z − E S,  Z = β v (w ⊙ v for GDN2) */
        if (VEC) {
            bgemm<SCAN_NW>(BT, BV, Kp, Es, ldfe, 1, St, 1, lds, [&](int i, int j, float cc) {
                const float z = ldf(Vs + i * ldvt + j) * (wg ? ldf(Ws + i * ldvt + j) : bs[i]);
                Xt[j * LDX + i] = z - cc;
            });
        } else {
            bgemm<SCAN_NW>(BT, BV, Kp, Ks, ldk, 1, St, 1, lds, [&](int i, int j, float cc) {
                Xt[j * LDX + i] = bs[i] * (ldf(Vs + i * ldvt + j) - expf(Gs[i]) * cc);
            });
        }
        __syncthreads();
        if (VEC && has_next) issue_f(Es, vo.E, c + 1);
        /* R = A X */
        bgemm<SCAN_NW>(BT, BV, BT, As, LDA, 1, Xt, 1, LDX, [&](int i, int j, float cc) { Rt[j * LDX + i] = cc; });
        __syncthreads();
        if (has_next) {
            issue_nn(As, A, c + 1);
            issue_v(cn);
        }
        if (Rout) {
            float *dst = Rout + ch * BT * p.V;
            for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) dst[(size_t)i * p.V + v0 + j] = Rt[j * LDX + i];
            }
            __syncthreads(); /* Rt is rescaled in place below by other threads */
        }
        if (out) {
            /* O = Q_g S + C_q R */
            if (VEC) {
                bgemm<SCAN_NW>(BT, BV, Kp, Qv, ldfe, 1, St, 1, lds, [&](int i, int j, float cc) {
                    Xt[j * LDX + i] = p.scale * cc;
                });
            } else {
                bgemm<SCAN_NW>(BT, BV, Kp, Qs, ldk, 1, St, 1, lds, [&](int i, int j, float cc) {
                    Xt[j * LDX + i] = p.scale * expf(Gs[i]) * cc;
                });
            }
            __syncthreads();
            T *dst = o + (size_t)hv * p.V + v0;
            bgemm<SCAN_NW>(BT, BV, BT, Cs, LDA, 1, Rt, 1, LDX, [&](int i, int j, float cc) {
                if (i < n && v0 + j < p.V) st<T>(dst + (size_t)(tok0 + i) * rsv + j, Xt[j * LDX + i] + cc);
            });
            __syncthreads();
            if (has_next) {
                if (VEC) issue_f(Qv, vo.Qg, c + 1);
                else issue_k(Qs, cn);
                issue_nn(Cs, Cq, c + 1);
            }
        }
        if (VEC) {
            /* S ← Diag(γ_n) S + Fᵀ R */
            bgemm<SCAN_NW>(Kp, BV, BT, Fs, 1, ldfe, Rt, 1, LDX, [&](int i, int j, float cc) {
                St[j * lds + i] = lm[i] * St[j * lds + i] + cc;
            });
            __syncthreads();
            if (has_next) issue_f(Fs, vo.F, c + 1);
        } else {
            /* S ← Λ S + Kᵀ diag(e^{G_n − G_j}) R */
            const float gl = Gs[n - 1];
            for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
                const int j = e / n, i = e - j * n;
                Rt[j * LDX + i] *= expf(gl - Gs[i]);
            }
            __syncthreads();
            const float gn = expf(gl);
            bgemm<SCAN_NW>(Kp, BV, BT, Ks, 1, ldk, Rt, 1, LDX, [&](int i, int j, float cc) {
                St[j * lds + i] = gn * St[j * lds + i] + cc;
            });
            __syncthreads();
            if (out && has_next) issue_q(Ks, cn);
            kb ^= 1;
        }
        cur ^= 1;
    }
    if (ht) {
        for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) ht[sbase + st_idx(p, kk, v0 + j)] = St[j * lds + kk];
        }
    }
}

template <class T, bool VEC, int KPC>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const float *GB, const float *A,
                       const float *Cq, const VecOps &vo, const float *h0, void *o, float *ht, state_t *Sc, float *R,
                       cudaStream_t s) {
    using FT = factor_t<T>;
    const bool out = o != nullptr;
    size_t smem = sizeof(float) * ((size_t)BV * scan_lds(p.Kp) + (size_t)MAXBT * LDA * (out ? 2 : 1) +
                                   2 * (size_t)BV * LDX + 4 * MAXBT) +
                  sizeof(T) * (size_t)MAXBT * scan_ldvt<T>();
    if (VEC)
        smem += sizeof(float) * 2 * p.Kp + sizeof(T) * (vo.w ? (size_t)MAXBT * scan_ldvt<T>() : 0) +
                sizeof(FT) * 3 * (size_t)MAXBT * scan_ldk<FT>(p.Kp);
    else
        smem += sizeof(T) * 2 * (size_t)MAXBT * scan_ldk<T>(p.Kp);
    cudaError_t e = ensure_smem<state_scan_kernel<T, VEC, KPC>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    state_scan_kernel<T, VEC, KPC><<<grid, SCAN_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, GB, A, Cq,
                                                               vo, h0, (T *)o, ht, Sc, R);
    return cudaGetLastError();
}

template <bool VEC>
static cudaError_t dispatch(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v, const float *GB,
                            const float *A, const float *Cq, const VecOps &vo, const float *h0, void *o, float *ht,
                            state_t *Sc, float *R, cudaStream_t s) {
    switch (dt) {
    case REWY_BF16: return with_fast_kp<__nv_bfloat16>(p, [&](auto kp) { return run<__nv_bfloat16, VEC, decltype(kp)::value>(p, q, k, v, GB, A, Cq, vo, h0, o, ht, Sc, R, s); });
    case REWY_F16: return with_fast_kp<__half>(p, [&](auto kp) { return run<__half, VEC, decltype(kp)::value>(p, q, k, v, GB, A, Cq, vo, h0, o, ht, Sc, R, s); });
    default: return with_fast_kp<float>(p, [&](auto kp) { return run<float, VEC, decltype(kp)::value>(p, q, k, v, GB, A, Cq, vo, h0, o, ht, Sc, R, s); });
    }
}

cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                              const float *GB, const float *A, const float *Cq, const VecOps *vo,
                              const float *h0, void *o, float *ht, state_t *Sc, float *R, cudaStream_t s) {
    if (vo) return dispatch<true>(p, dt, q, k, v, GB, A, Cq, *vo, h0, o, ht, Sc, R, s);
    return dispatch<false>(p, dt, q, k, v, GB, A, Cq, VecOps{}, h0, o, ht, Sc, R, s);
}

} // namespace rewy_cuda
