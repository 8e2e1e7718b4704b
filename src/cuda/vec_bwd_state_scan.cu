/* vec_bwd_state_scan.cu: the reverse chunk scan for vector gates (MATH §3, §4b (1), §5), per
 * (sequence, value head, 32 columns of V), chunks in reverse order, S̄ (K×32, fp32) in shared memory:
 *   store S̄⁺ (gradient of the chunk's outgoing state) for the pullback
 *   R̄  = C_qᵀ Ō + F S̄⁺              F = k⊙e^{G_n − G}
 *   P  = Aᵀ R̄                         ReWY product (1)
 *   S̄ ← Λ S̄⁺ + Q_gᵀ Ō − Eᵀ P          Λ = Diag(γ_n) per row; S̄_res = −EᵀP supplied here, once
 * Stores P (ReWY) or R̄ (WY), and dh0 = S̄ at each sequence start. F, Q_g, E are formed per
 * 32-feature slab in fp32 (as vec_state_scan.cu). */
#include "vec_kernels.cuh"

namespace rewy_cuda {

constexpr int VB_THREADS = 256;
constexpr int VB_NW = VB_THREADS / 32;
constexpr int VB_LDO = BV + 4; /* Ō tile [64][BV+4] fp32 */

template <class T>
__global__ void __launch_bounds__(VB_THREADS)
vec_bwd_state_scan_kernel(Prob p, const T *q, const T *k, const T *beta, const T *b, const float *Gc, const float *A,
                          const float *Cq, const T *do_, const float *dht, float *dh0, state_t *Sbar, float *PR,
                          int wy) {
    extern __shared__ __align__(16) float sm[];
    const int sq = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * BV, h = hv / p.G, BT = p.BT, Kp = p.Kp;
    const int lds = scan_lds(Kp), tid = threadIdx.x;
    float *Sbt = sm;                  /* [BV][Kp+8] S̄ᵀ */
    float *As = Sbt + BV * lds;       /* [64][LDA] */
    float *Cs = As + MAXBT * LDA;     /* [64][LDA] */
    float *Rbt = Cs + MAXBT * LDA;    /* [BV][LDX] R̄ᵀ */
    float *Pst = Rbt + BV * LDX;      /* [BV][LDX] Pᵀ */
    float *Ot = Pst + BV * LDX;       /* [64][VB_LDO] Ō */
    float *Sq = Ot + MAXBT * VB_LDO;  /* [64][VLDK] F, then Q_g slab */
    float *Se = Sq + MAXBT * VLDK;    /* [64][VLDK] E slab */
    float *lam = Se + MAXBT * VLDK;   /* [Kp] γ_n */

    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    for (int e = tid; e < Kp * BV; e += blockDim.x) {
        const int j = e / Kp, kk = e - j * Kp;
        Sbt[j * lds + kk] = (dht && kk < p.K && v0 + j < p.V) ? dht[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
    const size_t rsk = (size_t)p.H * p.K, rsv = (size_t)p.HV * p.V;
    const int c_begin = p.coff[sq], c_last = p.coff[sq + 1] - 1;
    for (int c = c_last; c >= c_begin; c--) {
        const ChunkInfo ci = p.ctab[c];
        const int n = ci.n;
        const size_t tok0 = (size_t)ci.tok0, ch = (size_t)c * p.HV + hv;
        const float *Gch = Gc + ch * BT * Kp;
        const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
        __syncthreads();
        copy_tile<float>(As, LDA, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        copy_tile<float>(Cs, LDA, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
        for (int e = tid; e < BT * BV; e += blockDim.x) {
            const int i = e / BV, j = e - i * BV;
            Ot[i * VB_LDO + j] = (i < n && v0 + j < p.V) ? ld<T>(do_ + (tok0 + i) * rsv + (size_t)hv * p.V + v0 + j) : 0.f;
        }
        for (int d = tid; d < Kp; d += blockDim.x) lam[d] = expf(Gch[(size_t)(n - 1) * Kp + d]);
        {
            state_t *dst = Sbar + ch * p.K * p.V;
            for (int e = tid; e < p.K * BV; e += blockDim.x) {
                const int kk = e / BV, j = e - kk * BV;
                if (v0 + j < p.V) st<state_t>(dst + (size_t)kk * p.V + v0 + j, Sbt[j * lds + kk]);
            }
        }
        cp_async_wait();
        __syncthreads();
        /* R̄ = C_qᵀ Ō: A(i,k) = C_q[k][i], B(k,j) = Ō[k][j] */
        bgemm<VB_NW>(BT, BV, BT, Cs, 1, LDA, Ot, VB_LDO, 1, [&](int i, int j, float cc) { Rbt[j * LDX + i] = cc; });
        /*   + F S̄⁺, F slab by slab */
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float x = 0.f;
                if (i < n && d < p.K)
                    x = ld<T>(kc + i * rsk + d) * expf(Gch[(size_t)(n - 1) * Kp + d] - Gch[(size_t)i * Kp + d]);
                Sq[i * VLDK + dd] = x;
            }
            __syncthreads();
            bgemm<VB_NW>(BT, BV, VKB, Sq, VLDK, 1, Sbt + k0, 1, lds, [&](int i, int j, float cc) { Rbt[j * LDX + i] += cc; });
        }
        __syncthreads();
        /* P = Aᵀ R̄ */
        bgemm<VB_NW>(BT, BV, BT, As, 1, LDA, Rbt, 1, LDX, [&](int i, int j, float cc) { Pst[j * LDX + i] = cc; });
        __syncthreads();
        {
            const float *src = wy ? Rbt : Pst;
            float *dst = PR + ch * BT * p.V;
            for (int e = tid; e < n * BV; e += blockDim.x) {
                const int i = e / BV, j = e - i * BV;
                if (v0 + j < p.V) dst[(size_t)i * p.V + v0 + j] = src[j * LDX + i];
            }
        }
        /* S̄ ← Λ S̄⁺ + Q_gᵀ Ō − Eᵀ P, rows k0.. of S̄ per slab (both products have the same shape, so
         * each element has one owner thread and the two epilogues need no barrier between them) */
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float xq = 0.f, xe = 0.f;
                if (i < n && d < p.K) {
                    const float gi = expf(Gch[(size_t)i * Kp + d]);
                    xq = p.scale * ld<T>(qc + i * rsk + d) * gi;
                    xe = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * ld<T>(kc + i * rsk + d) * gi;
                }
                Sq[i * VLDK + dd] = xq;
                Se[i * VLDK + dd] = xe;
            }
            __syncthreads();
            bgemm<VB_NW>(VKB, BV, BT, Sq, 1, VLDK, Ot, VB_LDO, 1, [&](int i, int j, float cc) {
                Sbt[j * lds + k0 + i] = lam[k0 + i] * Sbt[j * lds + k0 + i] + cc;
            });
            bgemm<VB_NW>(VKB, BV, BT, Se, 1, VLDK, Pst, 1, LDX, [&](int i, int j, float cc) { Sbt[j * lds + k0 + i] -= cc; });
        }
    }
    __syncthreads();
    if (dh0) {
        for (int e = tid; e < p.K * BV; e += blockDim.x) {
            const int kk = e / BV, j = e - kk * BV;
            if (v0 + j < p.V) dh0[sbase + st_idx(p, kk, v0 + j)] = Sbt[j * lds + kk];
        }
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *beta, const void *b, const float *Gc,
                       const float *A, const float *Cq, const void *do_, const float *dht, float *dh0, state_t *Sbar,
                       float *PR, int wy, cudaStream_t s) {
    const size_t smem = sizeof(float) * ((size_t)BV * scan_lds(p.Kp) + 2 * (size_t)MAXBT * LDA + 2 * (size_t)BV * LDX +
                                         (size_t)MAXBT * VB_LDO + 2 * (size_t)MAXBT * VLDK + p.Kp);
    cudaError_t e = ensure_smem<vec_bwd_state_scan_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.N, p.HV, ceil_div(p.V, BV));
    vec_bwd_state_scan_kernel<T><<<grid, VB_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, (const T *)beta,
                                                                (const T *)b, Gc, A, Cq, (const T *)do_, dht, dh0,
                                                                Sbar, PR, wy);
    return cudaGetLastError();
}

cudaError_t launch_vec_bwd_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *beta,
                                      const void *b, const float *Gc, const float *A, const float *Cq,
                                      const void *do_, const float *dht, float *dh0, state_t *Sbar, float *PR,
                                      int wy, cudaStream_t s) {
    switch (dt) {
    case REWY_BF16: return run<__nv_bfloat16>(p, q, k, beta, b, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    case REWY_F16: return run<__half>(p, q, k, beta, b, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    default: return run<float>(p, q, k, beta, b, Gc, A, Cq, do_, dht, dh0, Sbar, PR, wy, s);
    }
}

} // namespace rewy_cuda
