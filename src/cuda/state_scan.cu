/* state_scan.cu: the forward chunk scan, fused with the output (MATH §2):
 *   R   = A (Z − E S)          (= U − W S without forming W, U)
 *   O   = Q_g S + C_q R         (output.cu's job, fused: S never leaves the chip in the forward)
 *   S  ← Λ S + Fᵀ R             F_j = k_j e^{G_n − G_j}
 * One block per (sequence, value head, 32-column tile of V); the state tile S (K×32, fp32) lives in
 * shared memory across the chunks of its sequence. Columns of S are independent, so V tiles run in
 * parallel. Also used by the backward (policy R) to recompute S_c and R (o = NULL).
 * Loads go through cp.async and are issued for chunk c+1 as soon as chunk c has consumed the buffer
 * (K and Q alternate between two buffers), so only the first chunk's loads are exposed. */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int SCAN_THREADS = 256;
constexpr int SCAN_NW = SCAN_THREADS / 32;

template <class T>
__global__ void __launch_bounds__(SCAN_THREADS)
state_scan_kernel(Prob p, const T *q, const T *k, const T *v, const float *GB, const float *A,
                  const float *Cq, const float *h0, T *o, float *ht, state_t *Sc, float *Rout) {
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G, BT = p.BT;
    const int ldk = scan_ldk<T>(p.Kp), ldvt = scan_ldvt<T>(), lds = scan_lds(p.Kp);
    const bool out = o != nullptr;
    /* Tiles that feed the B side of the products are stored transposed ([column][k]) so that both
     * operands are k-contiguous for the tensor-core loads: St = Sᵀ, Xt = Xᵀ, Rt = Rᵀ. */
    float *St = sm;                                     /* [BV][Kp+8] fp32 state tile, transposed */
    float *As = St + BV * lds;                          /* [64][LDA] */
    float *Cs = As + MAXBT * LDA;                       /* (output only) */
    float *Xt = Cs + (out ? MAXBT * LDA : 0);           /* [BV][LDX] */
    float *Rt = Xt + BV * LDX;                          /* [BV][LDX] */
    float *GBs = Rt + BV * LDX;                         /* [2 buffers][2][64]: G, β */
    T *KQ0 = reinterpret_cast<T *>(GBs + 4 * MAXBT);    /* two [64][ldk] buffers: K and Q alternate */
    T *KQ1 = KQ0 + MAXBT * ldk;
    T *Vs = KQ1 + MAXBT * ldk;                          /* [64][ldvt] */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = threadIdx.x; e < p.Kp * BV; e += blockDim.x) {
        const int j = e / p.Kp, kk = e - j * p.Kp;
        St[j * lds + kk] = (h0 && kk < p.K && v0 + j < p.V) ? h0[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    auto issue_k = [&](T *dst, const ChunkInfo &cj) {
        copy_tile<T>(dst, ldk, BT, p.Kp, k + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_q = [&](T *dst, const ChunkInfo &cj) {
        copy_tile<T>(dst, ldk, BT, p.Kp, q + ((size_t)cj.tok0 * p.H + h) * p.K, rsk, cj.n, 0, p.K);
    };
    auto issue_v = [&](const ChunkInfo &cj) {
        copy_tile<T>(Vs, ldvt, BT, BV, v + (size_t)cj.tok0 * rsv + (size_t)hv * p.V, rsv, cj.n, v0, p.V);
    };
    auto issue_nn = [&](float *dst, const float *src, int cj) {
        copy_tile<float>(dst, LDA, BT, BT, src + ((size_t)cj * p.HV + hv) * BT * BT, BT, BT, 0, BT);
    };
    auto issue_gb = [&](float *dst, int cj) {
        copy_tile<float>(dst, 2 * BT, 1, 2 * BT, GB + ((size_t)cj * p.HV + hv) * 2 * BT, 2 * BT, 1, 0, 2 * BT);
    };
    const int c_begin = p.coff[sq], c_end = p.coff[sq + 1];
    if (c_begin < c_end) {
        const ChunkInfo c0i = p.ctab[c_begin];
        issue_k(KQ0, c0i);
        if (out) issue_q(KQ1, c0i);
        issue_v(c0i);
        issue_nn(As, A, c_begin);
        if (out) issue_nn(Cs, Cq, c_begin);
        issue_gb(GBs, c_begin);
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
        const float *Gs = GBs + cur * 2 * MAXBT, *bs = Gs + BT;
        cp_async_wait();
        __syncthreads();
        if (has_next) {
            issue_gb(GBs + (cur ^ 1) * 2 * MAXBT, c + 1);
            if (!out) issue_k(Qs, cn);
        }
        if (Sc) {
            state_t *dst = Sc + ch * p.K * p.V;
            for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, St[j * lds + kk]);
            }
        }
        /* X = Z − E S,  Z = β v */
        bgemm<SCAN_NW>(BT, BV, p.Kp, Ks, ldk, 1, St, 1, lds, [&](int i, int j, float cc) {
            Xt[j * LDX + i] = bs[i] * (ldf(Vs + i * ldvt + j) - expf(Gs[i]) * cc);
        });
        __syncthreads();
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
            bgemm<SCAN_NW>(BT, BV, p.Kp, Qs, ldk, 1, St, 1, lds, [&](int i, int j, float cc) {
                Xt[j * LDX + i] = p.scale * expf(Gs[i]) * cc;
            });
            __syncthreads();
            T *dst = o + (size_t)hv * p.V + v0;
            bgemm<SCAN_NW>(BT, BV, BT, Cs, LDA, 1, Rt, 1, LDX, [&](int i, int j, float cc) {
                if (i < n && v0 + j < p.V) st<T>(dst + (size_t)(tok0 + i) * rsv + j, Xt[j * LDX + i] + cc);
            });
            __syncthreads();
            if (has_next) {
                issue_k(Qs, cn);
                issue_nn(Cs, Cq, c + 1);
            }
        }
        /* S ← Λ S + Kᵀ diag(e^{G_n − G_j}) R */
        const float gl = Gs[n - 1];
        for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
            const int j = e / n, i = e - j * n;
            Rt[j * LDX + i] *= expf(gl - Gs[i]);
        }
        __syncthreads();
        const float gn = expf(gl);
        bgemm<SCAN_NW>(p.Kp, BV, BT, Ks, 1, ldk, Rt, 1, LDX, [&](int i, int j, float cc) {
            St[j * lds + i] = gn * St[j * lds + i] + cc;
        });
        __syncthreads();
        if (out && has_next) issue_q(Ks, cn);
        kb ^= 1;
        cur ^= 1;
    }
    if (ht) {
        for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) ht[sbase + st_idx(p, kk, v0 + j)] = St[j * lds + kk];
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const float *GB, const float *A,
                       const float *Cq, const float *h0, void *o, float *ht, state_t *Sc, float *R, cudaStream_t s) {
    const bool out = o != nullptr;
    const size_t smem = sizeof(float) * ((size_t)BV * scan_lds(p.Kp) + (size_t)MAXBT * LDA * (out ? 2 : 1) +
                                         2 * (size_t)BV * LDX + 4 * MAXBT) +
                        sizeof(T) * (2 * (size_t)MAXBT * scan_ldk<T>(p.Kp) + (size_t)MAXBT * scan_ldvt<T>());
    auto kern = state_scan_kernel<T>;
    cudaError_t e = ensure_smem<state_scan_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    kern<<<grid, SCAN_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, GB, A, Cq, h0, (T *)o, ht, Sc, R);
    return cudaGetLastError();
}

cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                              const void *beta, const float *GB, const float *A, const float *Cq, const float *h0,
                              void *o, float *ht, state_t *Sc, float *R, cudaStream_t s) {
    (void)beta; /* β comes from GB */
    switch (dt) {
    case REWY_BF16: return run<__nv_bfloat16>(p, q, k, v, GB, A, Cq, h0, o, ht, Sc, R, s);
    case REWY_F16: return run<__half>(p, q, k, v, GB, A, Cq, h0, o, ht, Sc, R, s);
    default: return run<float>(p, q, k, v, GB, A, Cq, h0, o, ht, Sc, R, s);
    }
}

} // namespace rewy_cuda
