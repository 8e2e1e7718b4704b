/* kkt_inverse.cu: per chunk and value head (MATH §2, scalar gate):
 *   G   = chunk-local cumsum of g (gate_cumsum, fused here; fp32, natural log)
 *   L   = 𝓛_<(E Yᵀ),  L_ij = β_i (k_i·k_j) e^{G_i − G_j}     (tensor cores, tf32)
 *   A   = (I + L)⁻¹  by forward substitution, fp32
 *   C_q = 𝓛_≤(Q_g Yᵀ), (C_q)_ij = (scale q_i·k_j) e^{G_i − G_j}
 * Grid (NC, HV), 256 threads. Outputs A, C_q are [chunk][hv][BT][BT] fp32 (zero outside the valid rows);
 * GB [chunk][hv][2][BT] holds G (rows ≥ n repeat G_{n-1}) and β as fp32 (0 on rows ≥ n) for the later stages. */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int KKT_THREADS = 256;

template <class T>
__global__ void __launch_bounds__(KKT_THREADS)
kkt_inverse_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, float *GB, float *Aout, float *Cq) {
    extern __shared__ float sm[];
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    if (n == 0) return;
    const int hv = blockIdx.y, h = hv / p.G, ldk = p.Kp + 8, BT = p.BT;
    const bool needA = Aout != nullptr;
    T *Ks = reinterpret_cast<T *>(sm);                      /* [BT][Kp+8] input type */
    T *Qs = Ks + MAXBT * ldk;
    float *Ls = reinterpret_cast<float *>(Qs + (Cq ? MAXBT * ldk : 0));
    float *As = Ls + MAXBT * LDN;
    float *Gs = As + MAXBT * LDN;
    float *bs = Gs + MAXBT;

    const size_t rs = (size_t)p.H * p.K;
    copy_tile<T>(Ks, ldk, BT, p.Kp, k + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
    if (Cq) copy_tile<T>(Qs, ldk, BT, p.Kp, q + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
    cp_async_wait();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, i0 = 2 * lane;
        float a = 0.f, b = 0.f;
        if (p.gated) {
            if (i0 < n) a = g[(size_t)(ci.tok0 + i0) * p.HV + hv];
            if (i0 + 1 < n) b = g[(size_t)(ci.tok0 + i0 + 1) * p.HV + hv];
        }
        float s = a + b;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float u = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += u;
        }
        const float ex = s - (a + b);
        Gs[i0] = ex + a;
        Gs[i0 + 1] = ex + a + b;
    }
    for (int i = threadIdx.x; i < MAXBT; i += blockDim.x)
        bs[i] = i < n ? ld<T>(beta + (size_t)(ci.tok0 + i) * p.HV + hv) : 0.f;
    __syncthreads();
    if (GB) {
        float *dst = GB + ((size_t)blockIdx.x * p.HV + hv) * 2 * BT;
        for (int i = threadIdx.x; i < BT; i += blockDim.x) {
            dst[i] = Gs[i];
            dst[BT + i] = bs[i];
        }
    }

    const size_t nn = (size_t)BT * BT, base = ((size_t)blockIdx.x * p.HV + hv) * nn;
    if (Cq) {
        float *dst = Cq + base;
        bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Qs, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
            dst[i * BT + j] = (i < n && j <= i) ? p.scale * c * expf(Gs[i] - Gs[j]) : 0.f;
        });
    }
    if (!needA) return;
    bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Ks, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
        Ls[i * LDN + j] = (i < n && j < i) ? bs[i] * c * expf(Gs[i] - Gs[j]) : 0.f;
    });
    for (int e = threadIdx.x; e < BT * BT; e += blockDim.x) {
        const int i = e / BT, j = e - i * BT;
        As[i * LDN + j] = (i == j && i < n) ? 1.f : 0.f;
    }
    __syncthreads();
    /* forward substitution, one row at a time: A_ij = −L_ij − Σ_{j<m<i} L_im A_mj  (4 threads per column) */
    {
        const int j = threadIdx.x >> 2, part = threadIdx.x & 3;
        for (int i = 1; i < n; i++) {
            float s = 0.f;
            if (j < i)
                for (int m = j + 1 + part; m < i; m += 4) s += Ls[i * LDN + m] * As[m * LDN + j];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if (part == 0 && j < i) As[i * LDN + j] = -Ls[i * LDN + j] - s;
            __syncthreads();
        }
    }
    float4 *dst = reinterpret_cast<float4 *>(Aout + base);
    for (int e = threadIdx.x; e < BT * BT / 4; e += blockDim.x) {
        const int i = e / (BT / 4), j = (e - i * (BT / 4)) * 4;
        dst[e] = *reinterpret_cast<const float4 *>(As + i * LDN + j);
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const float *g, const void *beta, float *GB,
                       float *A, float *Cq, cudaStream_t s) {
    const int ldk = p.Kp + 8;
    const size_t smem = sizeof(T) * (size_t)MAXBT * ldk * (Cq ? 2 : 1) + sizeof(float) * (2 * MAXBT * LDN + 2 * MAXBT);
    auto kern = kkt_inverse_kernel<T>;
    cudaError_t e = ensure_smem<kkt_inverse_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    kern<<<grid, KKT_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, g, (const T *)beta, GB, A, Cq);
    return cudaGetLastError();
}

cudaError_t launch_kkt_inverse(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                               const void *beta, float *GB, float *A, float *Cq, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, q, k, g, beta, GB, A, Cq, s); });
}

} // namespace rewy_cuda
