/* kkt_inverse.cu: per chunk and value head (MATH §2, scalar gate):
 *   G   = chunk-local cumsum of g (gate_cumsum, fused here; fp32, natural log)
 *   L   = 𝓛_<(E Yᵀ),  L_ij = β_i (k_i·k_j) e^{G_i − G_j}     (tensor cores, tf32)
 *   A   = (I + L)⁻¹  by forward substitution, fp32
 *   C_q = 𝓛_≤(Q_g Yᵀ), (C_q)_ij = (scale q_i·k_j) e^{G_i − G_j}
 * Grid (NC, HV), 256 threads. Outputs A (fp32) and C_q (cq_t, bf16) are [chunk][hv][BT][BT] (zero outside the valid rows);
 * GB [chunk][hv][2][BT] holds G (rows ≥ n repeat G_{n-1}) and β as fp32 (0 on rows ≥ n) for the later stages.
 * kkt_inverse_kernel is the general path (fp32 inputs, other chunk sizes and K); kkt_fast_kernel below is the
 * 2-byte, chunk-64, Kp ∈ {64, 128, 256} path. */
#include "kernels.cuh"
#include "tri_inverse.cuh"

namespace rewy_cuda {

constexpr int KKT_THREADS = 256;

/* The chunk-local cumulative gate G_i = Σ_{j ≤ i} g_j (MATH §2) by one warp: lane l holds rows 2l and
 * 2l + 1 (rows ≥ n add 0, so they repeat G_{n−1}; DeltaNet's G is 0). Returns the lane's two values. */
__device__ __forceinline__ float2 chunk_gate_cumsum(const Prob &p, const float *g, int tok0, int n, int hv, int lane) {
    const int i0 = 2 * lane;
    float a = 0.f, b = 0.f;
    if (p.gated) {
        if (i0 < n) a = g[(size_t)(tok0 + i0) * p.HV + hv];
        if (i0 + 1 < n) b = g[(size_t)(tok0 + i0 + 1) * p.HV + hv];
    }
    float s = a + b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float u = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) s += u;
    }
    const float ex = s - (a + b);
    return make_float2(ex + a, ex + a + b);
}

template <class T>
__global__ void __launch_bounds__(KKT_THREADS)
kkt_inverse_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, float *GB, float *Aout, cq_t *Cq) {
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
        const float2 G2 = chunk_gate_cumsum(p, g, ci.tok0, n, hv, lane);
        Gs[i0] = G2.x;
        Gs[i0 + 1] = G2.y;
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
        cq_t *dst = Cq + base;
        bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Qs, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
            st<cq_t>(dst + i * BT + j, (i < n && j <= i) ? p.scale * c * gexp(p, Gs[i] - Gs[j]) : 0.f);
        });
    }
    if (!needA) return;
    bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Ks, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
        Ls[i * LDN + j] = (i < n && j < i) ? bs[i] * c * gexp(p, Gs[i] - Gs[j]) : 0.f;
    });
    for (int e = threadIdx.x; e < BT * BT; e += blockDim.x) {
        const int i = e / BT, j = e - i * BT;
        As[i * LDN + j] = (i == j && i < n) ? 1.f : 0.f;
    }
    __syncthreads();
    tri_inverse_rows(Ls, As, n); /* forward substitution (tri_inverse.cuh) */
    float4 *dst = reinterpret_cast<float4 *>(Aout + base);
    for (int e = threadIdx.x; e < BT * BT / 4; e += blockDim.x) {
        const int i = e / (BT / 4), j = (e - i * (BT / 4)) * 4;
        dst[e] = *reinterpret_cast<const float4 *>(As + i * LDN + j);
    }
}


/* ==== The fast path: 2-byte inputs, chunk 64, Kp = KS ∈ {64, 128, 256} ====
 * Same outputs as kkt_inverse_kernel. K and Q are staged once (row-major, k contiguous: both operands
 * of K Kᵀ and Q Kᵀ load with one 32-bit shared load per pair, conflict-free at KS+8). The lower
 * triangles of L and C_q are 2 × 20 warp tiles of 16×8 (tri_tile), five per warp, accumulated in
 * registers over the whole K (pf_mma, bf16/fp16 exact in tf32, fp32 accumulation); the masks, β_i and
 * e^{G_i − G_j} are applied per fragment element (the exponent is ≤ 0 on the kept elements, so −1000
 * resets stay finite; the rest are selected away). C_q goes from the fragments straight to global
 * memory (bf16 pairs), its upper zeros by 16-B stores. L stays in registers over one barrier and
 * then goes over the dead K/Q tiles; A = (I + L)⁻¹ by blocks (tri_inverse.cuh: five barriers instead
 * of 63), fp32 throughout. Shared memory: max(K and Q tiles, two 64×68 fp32 tiles) + G, β. */
template <int KS, class T>
__host__ __device__ constexpr int kkt_fast_region() {
    return 2 * MAXBT * (KS + 8) * (int)sizeof(T) > 2 * MAXBT * LDN * 4 ? 2 * MAXBT * (KS + 8) * (int)sizeof(T)
                                                                       : 2 * MAXBT * LDN * 4;
}

template <class T, int KS>
__global__ void __launch_bounds__(KKT_THREADS)
kkt_fast_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, float *GB, float *Aout, cq_t *Cq) {
    extern __shared__ __align__(16) char smc[];
    constexpr int LDK = KS + 8;
    constexpr int REG = kkt_fast_region<KS, T>();
    static_assert(KKT_THREADS == 256, "tri_inverse64 and the tile split assume 8 warps");
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    if (n == 0) return;
    const int hv = blockIdx.y, h = hv / p.G, tid = threadIdx.x;
    const bool needA = Aout != nullptr;
    T *Ks = reinterpret_cast<T *>(smc);  /* [64][KS+8] */
    T *Qs = Ks + MAXBT * LDK;            /* [64][KS+8] */
    float *Ls = reinterpret_cast<float *>(smc), *As = Ls + MAXBT * LDN; /* over Ks/Qs once the products are done */
    float *Gs = reinterpret_cast<float *>(smc + REG), *bs = Gs + MAXBT;

    const size_t rs = (size_t)p.H * p.K, ch = (size_t)blockIdx.x * p.HV + hv;
    if (needA || Cq) {
        copy_tile<T>(Ks, LDK, MAXBT, KS, k + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
        if (Cq) copy_tile<T>(Qs, LDK, MAXBT, KS, q + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
    }
    /* G: chunk_gate_cumsum (rows ≥ n repeat G_{n-1}); β (0 on rows ≥ n); GB directly */
    float *gbd = GB ? GB + ch * 2 * MAXBT : nullptr;
    if (tid < 32) {
        const int lane = tid, i0 = 2 * lane;
        const float2 G2 = chunk_gate_cumsum(p, g, ci.tok0, n, hv, lane);
        Gs[i0] = G2.x;
        Gs[i0 + 1] = G2.y;
        if (gbd) {
            gbd[i0] = G2.x;
            gbd[i0 + 1] = G2.y;
        }
    } else if (tid >= 64 && tid < 64 + MAXBT) {
        const int i = tid - 64;
        const float bv = i < n ? ld<T>(beta + (size_t)(ci.tok0 + i) * p.HV + hv) : 0.f;
        bs[i] = bv;
        if (gbd) gbd[MAXBT + i] = bv;
    }
    if (!needA && !Cq) return;
    cp_async_wait();
    __syncthreads();

    /* tasks w, w+8, …, w+32 of [L tiles 0..19 | C_q tiles 0..19] (A NULL: C_q tiles only) */
    const int nL = needA ? TRI_TILES : 0, nT = nL + (Cq ? TRI_TILES : 0);
    cq_t *cqd = Cq ? Cq + ch * MAXBT * MAXBT : nullptr;
    float accL[3][4][4];
    tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
        float acc[4][4] = {};
        pf_mma<1, true, true>(acc, KS, isL ? Ks : Qs, LDK, 1, Ks, 1, LDK, i0, j0);
        pf_each<1>(i0, j0, acc, [&](int i, int j, int s, int e) {
            const bool keep = i < n && (isL ? j < i : j <= i);
            acc[s][e] = keep ? (isL ? bs[i] : p.scale) * acc[s][e] * gexp(p, Gs[i] - Gs[j]) : 0.f;
        });
        if (isL) {
            if (m < 3) { /* task < 20 ⇒ m ≤ 2 */
#pragma unroll
                for (int e = 0; e < 4; e++) accL[m < 3 ? m : 0][0][e] = acc[0][e];
            }
        } else {
            tri_put_tile(cqd, i0, j0, acc, MAXBT);
        }
    });
    if (Cq) tri_store_upper_zeros(cqd);
    if (!needA) return;
    __syncthreads(); /* every read of Ks/Qs is done: L goes over them */
    tri_finish_A(Aout + ch * MAXBT * MAXBT, Ls, As, n, nL, accL);
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const float *g, const void *beta, float *GB,
                       float *A, cq_t *Cq, cudaStream_t s) {
    if constexpr (sizeof(T) == 2) {
        if (p.BT == MAXBT && (p.Kp == 64 || p.Kp == 128 || p.Kp == 256)) {
            auto go = [&](auto ks) -> cudaError_t {
                constexpr int KS = decltype(ks)::value;
                constexpr size_t sm = kkt_fast_region<KS, T>() + 2 * MAXBT * sizeof(float);
                cudaError_t e = ensure_smem<kkt_fast_kernel<T, KS>>(sm);
                if (e != cudaSuccess) return e;
                kkt_fast_kernel<T, KS><<<dim3(p.NC, p.HV), KKT_THREADS, sm, s>>>(
                    p, (const T *)q, (const T *)k, g, (const T *)beta, GB, A, Cq);
                return cudaGetLastError();
            };
            if (p.Kp == 64) return go(std::integral_constant<int, 64>{});
            if (p.Kp == 128) return go(std::integral_constant<int, 128>{});
            return go(std::integral_constant<int, 256>{});
        }
    }
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
                               const void *beta, float *GB, float *A, cq_t *Cq, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, q, k, g, beta, GB, A, Cq, s); });
}

} // namespace rewy_cuda
