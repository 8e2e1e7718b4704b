/* bwd_state_scan.cu: the reverse chunk scan (MATH §3, §4b (1), §5), per (sequence, value head,
 * 32-column tile of V), chunks in reverse order, S̄ (K×32, fp32) in shared memory:
 *   store S̄⁺ (gradient of the chunk's outgoing state) for the pullback
 *   R̄  = C_qᵀ Ō + F S̄⁺             both uses of R
 *   P  = Aᵀ R̄                        ReWY product (1), shared by the scan and the pullback
 *   S̄ ← Q_gᵀ Ō + Λ S̄⁺ − Eᵀ P        (S̄_res supplied here, once)
 * Stores P (ReWY) or R̄ (WY: its pullback starts from R̄), and dh0 = S̄ at each sequence start. */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int BSCAN_THREADS = 128;
constexpr int BSCAN_NW = BSCAN_THREADS / 32;
constexpr int BSCAN_SHARE_KQ_KP = 128;

template <class T>
__global__ void __launch_bounds__(BSCAN_THREADS)
bwd_state_scan_kernel(Prob p, const T *q, const T *k, const T *beta, const float *Gc, const float *A,
                      const float *Cq, const T *do_, const float *dht, float *dh0, state_t *Sbar, float *PR, int wy) {
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G, ldk = p.Kp + 8, BT = p.BT;
    const bool share = p.Kp > BSCAN_SHARE_KQ_KP; /* large K: Q reuses K's buffer (reloaded in the chunk) */
    float *Sb = sm;                  /* [Kp][LDV] */
    float *As = Sb + p.Kp * LDV;     /* [64][LDN] */
    float *Cs = As + MAXBT * LDN;
    float *Rb = Cs + MAXBT * LDN;    /* [64][LDV]: R̄, then γ ⊙ Ō */
    float *Ps = Rb + MAXBT * LDV;
    float *Gs = Ps + MAXBT * LDV;
    float *bs = Gs + MAXBT;
    T *Ks = reinterpret_cast<T *>(bs + MAXBT);   /* [64][Kp+8] */
    T *Qs = share ? Ks : Ks + MAXBT * ldk;
    T *Os = Qs + MAXBT * ldk;                    /* [64][LDVT] */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = threadIdx.x; e < p.Kp * BV; e += blockDim.x) {
        const int kk = e / BV, j = e - kk * BV;
        Sb[kk * LDV + j] = (dht && kk < p.K && v0 + j < p.V) ? dht[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int c_begin = p.coff[sq];
    for (int c = p.coff[sq + 1] - 1; c >= c_begin; c--) {
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n, tok0 = ci.tok0;
        const size_t ch = (size_t)c * p.HV + hv;
        copy_tile<T>(Ks, ldk, BT, p.Kp, k + ((size_t)tok0 * p.H + h) * p.K, rsk, n, 0, p.K);
        if (!share) copy_tile<T>(Qs, ldk, BT, p.Kp, q + ((size_t)tok0 * p.H + h) * p.K, rsk, n, 0, p.K);
        copy_tile<T>(Os, LDVT, BT, BV, do_ + (size_t)tok0 * rsv + (size_t)hv * p.V, rsv, n, v0, p.V);
        copy_tile<float>(As, LDN, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        copy_tile<float>(Cs, LDN, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
        for (int i = threadIdx.x; i < MAXBT; i += blockDim.x) {
            const int ii = min(i, n - 1);
            Gs[i] = (p.gated && Gc) ? Gc[(size_t)(tok0 + ii) * p.HV + hv] : 0.f;
            bs[i] = i < n ? ld<T>(beta + (size_t)(tok0 + i) * p.HV + hv) : 0.f;
        }
        {
            state_t *dst = Sbar + ch * p.K * p.V;
            for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, Sb[kk * LDV + j]);
            }
        }
        cp_async_wait();
        __syncthreads();
        const float gl = Gs[n - 1];
        /* R̄ = F S̄⁺ + C_qᵀ Ō */
        bgemm<BSCAN_NW>(BT, BV, p.Kp, Ks, ldk, 1, Sb, LDV, 1, [&](int i, int j, float cc) {
            Rb[i * LDV + j] = i < n ? expf(gl - Gs[i]) * cc : 0.f;
        });
        __syncthreads();
        bgemm<BSCAN_NW>(BT, BV, BT, Cs, 1, LDN, Os, LDVT, 1, [&](int i, int j, float cc) { Rb[i * LDV + j] += cc; });
        __syncthreads();
        /* P = Aᵀ R̄ */
        bgemm<BSCAN_NW>(BT, BV, BT, As, 1, LDN, Rb, LDV, 1, [&](int i, int j, float cc) { Ps[i * LDV + j] = cc; });
        __syncthreads();
        {
            const float *src = wy ? Rb : Ps;
            float *dst = PR + ch * BT * p.V;
            for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) dst[(size_t)i * p.V + v0 + j] = src[i * LDV + j];
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < BT * BV; e += blockDim.x) {
            const int i = e / BV, j = e - i * BV;
            const float gi = expf(Gs[i]);
            Rb[i * LDV + j] = gi * ldf(Os + i * LDVT + j);
            Ps[i * LDV + j] *= bs[i] * gi;
        }
        __syncthreads();
        /* S̄ ← Λ S̄⁺ − Eᵀ P + Q_gᵀ Ō */
        const float gn = expf(gl);
        bgemm<BSCAN_NW>(p.Kp, BV, BT, Ks, 1, ldk, Ps, LDV, 1, [&](int i, int j, float cc) {
            Sb[i * LDV + j] = gn * Sb[i * LDV + j] - cc;
        });
        __syncthreads();
        if (share) {
            copy_tile<T>(Qs, ldk, BT, p.Kp, q + ((size_t)tok0 * p.H + h) * p.K, rsk, n, 0, p.K);
            cp_async_wait();
            __syncthreads();
        }
        bgemm<BSCAN_NW>(p.Kp, BV, BT, Qs, 1, ldk, Rb, LDV, 1, [&](int i, int j, float cc) {
            Sb[i * LDV + j] += p.scale * cc;
        });
        __syncthreads();
    }
    if (dh0) {
        for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) dh0[sbase + st_idx(p, kk, v0 + j)] = Sb[kk * LDV + j];
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *beta, const float *Gc, const float *A,
                       const float *Cq, const void *do_, const float *dht, float *dh0, state_t *Sbar, float *PR, int wy,
                       cudaStream_t s) {
    const int ldk = p.Kp + 8;
    const int nkq = p.Kp > BSCAN_SHARE_KQ_KP ? 1 : 2;
    const size_t smem = sizeof(float) * ((size_t)p.Kp * LDV + 2 * (size_t)MAXBT * LDN + 2 * (size_t)MAXBT * LDV +
                                         2 * MAXBT) +
                        sizeof(T) * (nkq * (size_t)MAXBT * ldk + (size_t)MAXBT * LDVT);
    auto kern = bwd_state_scan_kernel<T>;
    cudaError_t e = ensure_smem<bwd_state_scan_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    kern<<<grid, BSCAN_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)beta, Gc, A, Cq, (const T *)do_,
                                           dht, dh0, Sbar, PR, wy);
    return cudaGetLastError();
}

cudaError_t launch_bwd_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *beta,
                                  const float *Gc, const float *A, const float *Cq, const void *do_,
                                  const float *dht, float *dh0, state_t *Sbar, float *PR, int wy, cudaStream_t s) {
    switch (dt) {
    case REWY_BF16: return run<__nv_bfloat16>(p, q, k, beta, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    case REWY_F16: return run<__half>(p, q, k, beta, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    default: return run<float>(p, q, k, beta, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    }
}

} // namespace rewy_cuda
