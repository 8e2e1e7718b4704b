/* vec_intra.cu: the vector-gate intra stage (MATH §2, §6), per chunk and value head:
 *   G   = chunk-local cumsum of g, per feature (fp32, natural log)
 *   c_d = (max_i G_id + min_i G_id)/2   midpoint center per feature; α = e^{G−c}, ζ = e^{c−G}
 *   L   = 𝓛_<((b⊙k⊙α)(k⊙ζ)ᵀ),   A = (I + L)⁻¹ (forward substitution, fp32)
 *   C_q = 𝓛_≤((Q⊙α)(k⊙ζ)ᵀ),     Q = scale·q
 * The centered products run on the tensor cores over 32-feature slabs, accumulated in fp32 in
 * shared memory. When max_d (max_i G_id − min_i G_id)/2 > VEC_CENTER_LIMIT the chunk takes the exact
 * pairwise path L_ij = Σ_d b_id k_id k_jd e^{G_id − G_jd} (i > j: exponent ≤ 0 for log gates ≤ 0),
 * so −1000 resets stay finite (same rule and limit as src/cpu/chunk_common.c).
 * Grid (NC, HV), 256 threads. Outputs zero outside the valid rows, like kkt_inverse.cu. */
#include "vec_kernels.cuh"

namespace rewy_cuda {

constexpr int VI_THREADS = 256;
constexpr int VI_NW = VI_THREADS / 32;

template <class T>
__global__ void __launch_bounds__(VI_THREADS)
vec_intra_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, const T *b, float *Gout,
                 float *Aout, float *Cq) {
    extern __shared__ __align__(16) float sm[];
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    if (n == 0) return;
    const int hv = blockIdx.y, h = hv / p.G, BT = p.BT, Kp = p.Kp, tid = threadIdx.x;
    const bool needA = Aout != nullptr;
    float *Gs = sm;                       /* [64][Kp] G */
    float *mid = Gs + MAXBT * Kp;         /* [Kp] center */
    float *red = mid + Kp;                /* [32] */
    float *Xa = red + 32;                 /* [64][VLDK] b⊙k⊙α */
    float *Kz = Xa + MAXBT * VLDK;        /* [64][VLDK] k⊙ζ */
    float *Qa = Kz + MAXBT * VLDK;        /* [64][VLDK] Q⊙α */
    float *Ls = Qa + MAXBT * VLDK;        /* [64][LDN] */
    float *As = Ls + MAXBT * LDN;         /* [64][LDN] */
    float *Cs = As + MAXBT * LDN;         /* [64][LDN] */

    const size_t tok0 = (size_t)ci.tok0;
    const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
    const size_t rsk = (size_t)p.H * p.K;

    /* per-feature cumsum (one thread per feature: same order as the CPU), range and midpoint */
    float hmax = 0.f;
    for (int d = tid; d < Kp; d += blockDim.x) {
        float s = 0.f, lo = 0.f, hi = 0.f;
        for (int i = 0; i < BT; i++) {
            if (i < n && d < p.K) s += g[((tok0 + i) * p.HV + hv) * p.K + d];
            Gs[i * Kp + d] = s;
            if (i == 0) lo = hi = s;
            else if (i < n) {
                lo = fminf(lo, s);
                hi = fmaxf(hi, s);
            }
        }
        mid[d] = 0.5f * (hi + lo);
        hmax = fmaxf(hmax, 0.5f * (hi - lo));
    }
    for (int o = 16; o > 0; o >>= 1) hmax = fmaxf(hmax, __shfl_xor_sync(0xffffffffu, hmax, o));
    if ((tid & 31) == 0) red[tid >> 5] = hmax;
    __syncthreads();
    float half_range = 0.f;
    for (int w = 0; w < VI_NW; w++) half_range = fmaxf(half_range, red[w]);
    const bool centered = half_range <= VEC_CENTER_LIMIT;
    if (Gout) {
        float *dst = Gout + ((size_t)blockIdx.x * p.HV + hv) * BT * Kp;
        for (int e = tid; e < BT * Kp; e += blockDim.x) dst[e] = Gs[e];
    }
    if (!needA && !Cq) return;

    for (int e = tid; e < MAXBT * LDN; e += blockDim.x) {
        Ls[e] = 0.f;
        Cs[e] = 0.f;
    }
    if (centered) {
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float xa = 0.f, kz = 0.f, qa = 0.f;
                if (i < n && d < p.K) {
                    const float G = Gs[i * Kp + d], kv = ld<T>(kc + i * rsk + d);
                    const float a = expf(G - mid[d]);
                    kz = kv * expf(mid[d] - G);
                    if (needA) xa = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * kv * a;
                    if (Cq) qa = p.scale * ld<T>(qc + i * rsk + d) * a;
                }
                Xa[i * VLDK + dd] = xa;
                Kz[i * VLDK + dd] = kz;
                Qa[i * VLDK + dd] = qa;
            }
            __syncthreads();
            /* B(k=d, j) = Kz[j][d]: k contiguous */
            if (needA)
                bgemm<VI_NW>(BT, BT, VKB, Xa, VLDK, 1, Kz, 1, VLDK, [&](int i, int j, float c) { Ls[i * LDN + j] += c; });
            if (Cq)
                bgemm<VI_NW>(BT, BT, VKB, Qa, VLDK, 1, Kz, 1, VLDK, [&](int i, int j, float c) { Cs[i * LDN + j] += c; });
        }
        __syncthreads();
    } else {
        /* exact pairwise exponents (strong decay, hard resets): every e^{G_i − G_j}, j ≤ i, is ≤ 1 */
        __syncthreads();
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            if (i >= n || j > i) continue;
            float sl = 0.f, sc = 0.f;
            for (int d = 0; d < p.K; d++) {
                const float f = expf(Gs[i * Kp + d] - Gs[j * Kp + d]) * ld<T>(kc + j * rsk + d);
                if (needA && j < i) sl += vg_erase<T>(p, beta, b, tok0 + i, hv, d) * ld<T>(kc + i * rsk + d) * f;
                if (Cq) sc += ld<T>(qc + i * rsk + d) * f;
            }
            Ls[i * LDN + j] = sl;
            Cs[i * LDN + j] = p.scale * sc;
        }
        __syncthreads();
    }
    const size_t nn = (size_t)BT * BT, base = ((size_t)blockIdx.x * p.HV + hv) * nn;
    if (Cq) {
        float *dst = Cq + base;
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            dst[e] = (i < n && j <= i) ? Cs[i * LDN + j] : 0.f;
        }
    }
    if (!needA) return;
    for (int e = tid; e < MAXBT * MAXBT; e += blockDim.x) {
        const int i = e / MAXBT, j = e - i * MAXBT;
        if (!(i < n && j < i)) Ls[i * LDN + j] = 0.f;
        As[i * LDN + j] = (i == j && i < n) ? 1.f : 0.f;
    }
    __syncthreads();
    /* forward substitution, one row at a time: A_ij = −L_ij − Σ_{j<m<i} L_im A_mj (4 threads per column) */
    {
        const int j = tid >> 2, part = tid & 3;
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
    float *dst = Aout + base;
    for (int e = tid; e < BT * BT; e += blockDim.x) {
        const int i = e / BT, j = e - i * BT;
        dst[e] = As[i * LDN + j];
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const float *g, const void *beta, const void *b,
                       float *Gc, float *A, float *Cq, cudaStream_t s) {
    const size_t smem = sizeof(float) * ((size_t)MAXBT * p.Kp + p.Kp + 32 + 3 * (size_t)MAXBT * VLDK +
                                         3 * (size_t)MAXBT * LDN);
    cudaError_t e = ensure_smem<vec_intra_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    vec_intra_kernel<T><<<grid, VI_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, g, (const T *)beta,
                                                       (const T *)b, Gc, A, Cq);
    return cudaGetLastError();
}

cudaError_t launch_vec_intra(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                             const void *beta, const void *b, float *Gc, float *A, float *Cq, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, q, k, g, beta, b, Gc, A, Cq, s); });
}

} // namespace rewy_cuda
