/* state_scan.cu: the forward chunk scan, fused with the output (MATH §2):
 *   R   = A (Z − E S)          (= U − W S without forming W, U)
 *   O   = Q_g S + C_q R         (output.cu's job, fused: S never leaves the chip in the forward)
 *   S  ← Λ S + Fᵀ R             F_j = k_j e^{G_n − G_j}
 * One block per (sequence, value head, 32-column tile of V); the state tile S (K×32, fp32) lives in
 * shared memory across the chunks of its sequence. Columns of S are independent, so V tiles run in
 * parallel. Also used by the backward (policy R) to recompute S_c and R (o = NULL). */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int SCAN_THREADS = 128;
constexpr int SCAN_NW = SCAN_THREADS / 32;

template <class T>
__global__ void __launch_bounds__(SCAN_THREADS)
state_scan_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const float *Gc, const float *A,
                  const float *Cq, const float *h0, T *o, float *ht, state_t *Sc, float *Rout) {
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G, ldk = p.Kp + 8, BT = p.BT;
    const bool out = o != nullptr;
    float *S = sm;                                      /* [Kp][LDV] fp32 state tile */
    float *As = S + p.Kp * LDV;                         /* [64][LDN] */
    float *Cs = As + MAXBT * LDN;                       /* (output only) */
    float *X = Cs + (out ? MAXBT * LDN : 0);            /* [64][LDV] */
    float *Rr = X + MAXBT * LDV;
    float *Gs = Rr + MAXBT * LDV;
    float *bs = Gs + MAXBT;
    T *Ks = reinterpret_cast<T *>(bs + MAXBT);          /* [64][Kp+8] input type */
    T *Qs = Ks + MAXBT * ldk;                           /* (output only) */
    T *Vs = Qs + (out ? MAXBT * ldk : 0);               /* [64][LDVT] */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = threadIdx.x; e < p.Kp * BV; e += blockDim.x) {
        const int kk = e / BV, j = e - kk * BV;
        S[kk * LDV + j] = (h0 && kk < p.K && v0 + j < p.V) ? h0[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int c_end = p.coff[sq + 1];
    for (int c = p.coff[sq]; c < c_end; c++) {
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n, tok0 = ci.tok0;
        const size_t ch = (size_t)c * p.HV + hv;
        copy_tile<T>(Ks, ldk, BT, p.Kp, k + ((size_t)tok0 * p.H + h) * p.K, rsk, n, 0, p.K);
        if (out) copy_tile<T>(Qs, ldk, BT, p.Kp, q + ((size_t)tok0 * p.H + h) * p.K, rsk, n, 0, p.K);
        copy_tile<T>(Vs, LDVT, BT, BV, v + (size_t)tok0 * rsv + (size_t)hv * p.V, rsv, n, v0, p.V);
        copy_tile<float>(As, LDN, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        if (out) copy_tile<float>(Cs, LDN, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
        for (int i = threadIdx.x; i < MAXBT; i += blockDim.x) {
            const int ii = min(i, n - 1);
            Gs[i] = (p.gated && Gc) ? Gc[(size_t)(tok0 + ii) * p.HV + hv] : 0.f;
            bs[i] = i < n ? ld<T>(beta + (size_t)(tok0 + i) * p.HV + hv) : 0.f;
        }
        if (Sc) {
            state_t *dst = Sc + ch * p.K * p.V;
            for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, S[kk * LDV + j]);
            }
        }
        cp_async_wait();
        __syncthreads();
        /* X = Z − E S,  Z = β v */
        bgemm<SCAN_NW>(BT, BV, p.Kp, Ks, ldk, 1, S, LDV, 1, [&](int i, int j, float cc) {
            X[i * LDV + j] = bs[i] * (ldf(Vs + i * LDVT + j) - expf(Gs[i]) * cc);
        });
        __syncthreads();
        /* R = A X */
        bgemm<SCAN_NW>(BT, BV, BT, As, LDN, 1, X, LDV, 1, [&](int i, int j, float cc) { Rr[i * LDV + j] = cc; });
        __syncthreads();
        if (Rout) {
            float *dst = Rout + ch * BT * p.V;
            for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) dst[(size_t)i * p.V + v0 + j] = Rr[i * LDV + j];
            }
        }
        if (out) {
            /* O = Q_g S + C_q R */
            bgemm<SCAN_NW>(BT, BV, p.Kp, Qs, ldk, 1, S, LDV, 1, [&](int i, int j, float cc) {
                X[i * LDV + j] = p.scale * expf(Gs[i]) * cc;
            });
            __syncthreads();
            T *dst = o + (size_t)hv * p.V + v0;
            bgemm<SCAN_NW>(BT, BV, BT, Cs, LDN, 1, Rr, LDV, 1, [&](int i, int j, float cc) {
                if (i < n && v0 + j < p.V) st<T>(dst + (size_t)(tok0 + i) * rsv + j, X[i * LDV + j] + cc);
            });
            __syncthreads();
        }
        /* S ← Λ S + Kᵀ diag(e^{G_n − G_j}) R */
        const float gl = Gs[n - 1];
        for (int e = threadIdx.x; e < n * BV; e += blockDim.x) {
            const int i = e / BV, j = e - i * BV;
            Rr[i * LDV + j] *= expf(gl - Gs[i]);
        }
        __syncthreads();
        const float gn = expf(gl);
        bgemm<SCAN_NW>(p.Kp, BV, BT, Ks, 1, ldk, Rr, LDV, 1, [&](int i, int j, float cc) {
            S[i * LDV + j] = gn * S[i * LDV + j] + cc;
        });
        __syncthreads();
    }
    if (ht) {
        for (int e = threadIdx.x; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) ht[sbase + st_idx(p, kk, v0 + j)] = S[kk * LDV + j];
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const void *beta, const float *Gc,
                       const float *A, const float *Cq, const float *h0, void *o, float *ht, state_t *Sc, float *R,
                       cudaStream_t s) {
    const bool out = o != nullptr;
    const int ldk = p.Kp + 8;
    const size_t smem = sizeof(float) * ((size_t)p.Kp * LDV + (size_t)MAXBT * LDN * (out ? 2 : 1) + 2 * MAXBT * LDV +
                                         2 * MAXBT) +
                        sizeof(T) * ((size_t)MAXBT * ldk * (out ? 2 : 1) + (size_t)MAXBT * LDVT);
    auto kern = state_scan_kernel<T>;
    cudaError_t e = ensure_smem<state_scan_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    kern<<<grid, SCAN_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v, (const T *)beta, Gc, A, Cq, h0,
                                          (T *)o, ht, Sc, R);
    return cudaGetLastError();
}

cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                              const void *beta, const float *Gc, const float *A, const float *Cq, const float *h0,
                              void *o, float *ht, state_t *Sc, float *R, cudaStream_t s) {
    switch (dt) {
    case REWY_BF16: return run<__nv_bfloat16>(p, q, k, v, beta, Gc, A, Cq, h0, o, ht, Sc, R, s);
    case REWY_F16: return run<__half>(p, q, k, v, beta, Gc, A, Cq, h0, o, ht, Sc, R, s);
    default: return run<float>(p, q, k, v, beta, Gc, A, Cq, h0, o, ht, Sc, R, s);
    }
}

} // namespace rewy_cuda
