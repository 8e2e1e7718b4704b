/* vec_state_scan.cu: the forward chunk scan for vector gates (MATH §2), fused with the output:
 *   X = Z − E S,  R = A X            Z = w⊙v, E = b⊙k⊙γ (γ = e^G per feature)
 *   O = Q_g S + C_q R                 Q_g = scale·q⊙γ
 *   S ← Λ S + Fᵀ R                    Λ = Diag(γ_n) (a per-row decay of S), F = k⊙e^{G_n − G}
 * One block per (sequence, value head, 32 columns of V), the state tile (K×32, fp32, transposed)
 * in shared memory across the chunks of its sequence, as state_scan.cu. E, Q_g and F are formed
 * per 32-feature slab in fp32 from k, q, the gates and the saved G right before their product
 * (all bounded by |k|, |q| for log gates ≤ 0), so the K-contractions accumulate slab by slab.
 * Also the policy-R recompute of the backward (o = NULL; stores S_c and R).
 * Plain loads, no prefetch: this is the correctness-first version (see docs, issue 4). */
#include "vec_kernels.cuh"

namespace rewy_cuda {

constexpr int VS_THREADS = 256;
constexpr int VS_NW = VS_THREADS / 32;

template <class T>
__global__ void __launch_bounds__(VS_THREADS)
vec_state_scan_kernel(Prob p, const T *q, const T *k, const T *v, const T *beta, const T *b, const T *w,
                      const float *Gc, const float *A, const float *Cq, const float *h0, T *o, float *ht,
                      state_t *Sc, float *Rout) {
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G, BT = p.BT, Kp = p.Kp;
    const int lds = scan_lds(Kp), tid = threadIdx.x;
    const bool out = o != nullptr;
    float *St = sm;                              /* [BV][Kp+8] Sᵀ */
    float *As = St + BV * lds;                   /* [64][LDA] */
    float *Cs = As + MAXBT * LDA;                /* [64][LDA] (output only) */
    float *Xt = Cs + (out ? MAXBT * LDA : 0);    /* [BV][LDX] Xᵀ, then Oᵀ */
    float *Rt = Xt + BV * LDX;                   /* [BV][LDX] Rᵀ */
    float *Sl = Rt + BV * LDX;                   /* [64][VLDK] E / Q_g / F slab */
    float *lam = Sl + MAXBT * VLDK;              /* [Kp] γ_n */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = tid; e < Kp * BV; e += blockDim.x) {
        const int j = e / Kp, kk = e - j * Kp;
        St[j * lds + kk] = (h0 && kk < p.K && v0 + j < p.V) ? h0[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int c_begin = p.coff[sq], c_end = p.coff[sq + 1];
    for (int c = c_begin; c < c_end; c++) {
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n;
        const size_t tok0 = (size_t)ci.tok0, ch = (size_t)c * p.HV + hv;
        const float *Gch = Gc + ch * BT * Kp;
        const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
        __syncthreads(); /* the previous chunk is done with every tile */
        copy_tile<float>(As, LDA, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        if (out) copy_tile<float>(Cs, LDA, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
        for (int e = tid; e < BT * BV; e += blockDim.x) {
            const int i = e / BV, j = e - i * BV;
            float z = 0.f;
            if (i < n && v0 + j < p.V)
                z = vg_write<T>(p, beta, w, tok0 + i, hv, v0 + j) * ld<T>(v + (tok0 + i) * rsv + (size_t)hv * p.V + v0 + j);
            Xt[j * LDX + i] = z;
        }
        for (int d = tid; d < Kp; d += blockDim.x) lam[d] = expf(Gch[(size_t)(n - 1) * Kp + d]);
        if (Sc) {
            state_t *dst = Sc + ch * p.K * p.V;
            for (int e = tid; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, St[j * lds + kk]);
            }
        }
        cp_async_wait();
        /* X = Z − E S, E slab by slab */
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float x = 0.f;
                if (i < n && d < p.K)
                    x = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * ld<T>(kc + i * rsk + d) * expf(Gch[(size_t)i * Kp + d]);
                Sl[i * VLDK + dd] = x;
            }
            __syncthreads();
            bgemm<VS_NW>(BT, BV, VKB, Sl, VLDK, 1, St + k0, 1, lds, [&](int i, int j, float cc) { Xt[j * LDX + i] -= cc; });
        }
        __syncthreads();
        /* R = A X */
        bgemm<VS_NW>(BT, BV, BT, As, LDA, 1, Xt, 1, LDX, [&](int i, int j, float cc) { Rt[j * LDX + i] = cc; });
        __syncthreads();
        if (Rout) {
            float *dst = Rout + ch * BT * p.V;
            for (int e = tid; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) dst[(size_t)i * p.V + v0 + j] = Rt[j * LDX + i];
            }
        }
        if (out) {
            /* O = C_q R + Q_g S */
            bgemm<VS_NW>(BT, BV, BT, Cs, LDA, 1, Rt, 1, LDX, [&](int i, int j, float cc) { Xt[j * LDX + i] = cc; });
            for (int k0 = 0; k0 < Kp; k0 += VKB) {
                __syncthreads();
                for (int e = tid; e < BT * VKB; e += blockDim.x) {
                    const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                    float x = 0.f;
                    if (i < n && d < p.K) x = p.scale * ld<T>(qc + i * rsk + d) * expf(Gch[(size_t)i * Kp + d]);
                    Sl[i * VLDK + dd] = x;
                }
                __syncthreads();
                bgemm<VS_NW>(BT, BV, VKB, Sl, VLDK, 1, St + k0, 1, lds, [&](int i, int j, float cc) { Xt[j * LDX + i] += cc; });
            }
            __syncthreads();
            T *dst = o + (size_t)hv * p.V + v0;
            for (int e = tid; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) st<T>(dst + (tok0 + i) * rsv + j, Xt[j * LDX + i]);
            }
        }
        /* S ← Λ S + Fᵀ R, F slab by slab (rows k0.. of S depend only on rows k0.. of the old S) */
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float x = 0.f;
                if (i < n && d < p.K)
                    x = ld<T>(kc + i * rsk + d) * expf(Gch[(size_t)(n - 1) * Kp + d] - Gch[(size_t)i * Kp + d]);
                Sl[i * VLDK + dd] = x;
            }
            __syncthreads();
            /* A(i = feature, k = token) = Sl[token][feature] */
            bgemm<VS_NW>(VKB, BV, BT, Sl, 1, VLDK, Rt, 1, LDX, [&](int i, int j, float cc) {
                St[j * lds + k0 + i] = lam[k0 + i] * St[j * lds + k0 + i] + cc;
            });
        }
    }
    __syncthreads();
    if (ht) {
        for (int e = tid; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) ht[sbase + st_idx(p, kk, v0 + j)] = St[j * lds + kk];
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *v, const void *beta, const void *b,
                       const void *w, const float *Gc, const float *A, const float *Cq, const float *h0, void *o,
                       float *ht, state_t *Sc, float *R, cudaStream_t s) {
    const bool out = o != nullptr;
    const size_t smem = sizeof(float) * ((size_t)BV * scan_lds(p.Kp) + (size_t)MAXBT * LDA * (out ? 2 : 1) +
                                         2 * (size_t)BV * LDX + (size_t)MAXBT * VLDK + p.Kp);
    cudaError_t e = ensure_smem<vec_state_scan_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    vec_state_scan_kernel<T><<<grid, VS_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)v,
                                                            (const T *)beta, (const T *)b, (const T *)w, Gc, A, Cq,
                                                            h0, (T *)o, ht, Sc, R);
    return cudaGetLastError();
}

cudaError_t launch_vec_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                                  const void *beta, const void *b, const void *w, const float *Gc, const float *A,
                                  const float *Cq, const float *h0, void *o, float *ht, state_t *Sc, float *R,
                                  cudaStream_t s) {
    switch (dt) {
    case REWY_BF16: return run<__nv_bfloat16>(p, q, k, v, beta, b, w, Gc, A, Cq, h0, o, ht, Sc, R, s);
    case REWY_F16: return run<__half>(p, q, k, v, beta, b, w, Gc, A, Cq, h0, o, ht, Sc, R, s);
    default: return run<float>(p, q, k, v, beta, b, w, Gc, A, Cq, h0, o, ht, Sc, R, s);
    }
}

} // namespace rewy_cuda
