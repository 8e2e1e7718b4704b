/* common.cuh: shared pieces of the CUDA backend (scalar-gate operators: DeltaNet, GDN).
 *
 *  - Prob: the problem description every kernel receives by value.
 *  - element loads/stores for fp32 / bf16 / fp16.
 *  - bgemm: a block-wide matrix product from shared memory on the tensor cores
 *    (mma.sync m16n8k8, tf32 operands, fp32 accumulation; sm_80 and sm_90a).
 *
 * Conventions (MATH.md §2): a chunk has n ≤ BT ≤ 64 valid rows; shared-memory tiles always
 * have 64 rows, rows ≥ n are zero. G is the chunk-local cumulative natural-log gate (fp32,
 * rows ≥ n repeat G_{n-1}); γ = exp(G). Q is scale·q.
 */
#ifndef REWY_CUDA_COMMON_CUH
#define REWY_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "rewy.h"

namespace rewy_cuda {

constexpr int MAXBT = 64;     /* largest chunk; smem tiles have this many rows */
constexpr int LDN = MAXBT + 4; /* leading dimension of n×n tiles (pad ≡ 4 mod 32: ≤ 2-way bank conflicts) */
constexpr int BV = 32;        /* value-column tile of the scans and the pullback */
constexpr int LDV = BV + 4;
constexpr int BK = 32;        /* key-column tile of the pullback */
constexpr int LDK = BK + 4;

/* Chunk table entry: first token (row of the [B*T] token axis), valid rows, sequence, chunk in sequence. */
struct ChunkInfo { int tok0, n, seq, idx; };

struct Prob {
    int B, T, H, HV, K, V, BT, G; /* G = HV / H */
    int N;                        /* sequences */
    int NC;                       /* chunk-table entries (≥ chunks in use; extra ones have n = 0) */
    int Kp;                       /* K rounded up to 32 */
    int gated;                    /* GDN: 1; DeltaNet: 0 */
    int svf;                      /* states [V,K] */
    float scale;
    const ChunkInfo *ctab;        /* [NC] */
    const int *coff;              /* [N+1] chunk offset of each sequence */
};

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <class T> __device__ __forceinline__ float ld(const T *p);
template <> __device__ __forceinline__ float ld<float>(const float *p) { return *p; }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
template <> __device__ __forceinline__ float ld<__half>(const __half *p) { return __half2float(*p); }

template <class T> __device__ __forceinline__ void st(T *p, float x);
template <> __device__ __forceinline__ void st<float>(float *p, float x) { *p = x; }
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }
template <> __device__ __forceinline__ void st<__half>(__half *p, float x) { *p = __float2half(x); }

/* Chunk-state storage type in workspace / saved buffers (S_c, S̄⁺). */
#ifndef REWY_CUDA_STATE_FP32
typedef __nv_bfloat16 state_t;
#else
typedef float state_t;
#endif

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* C = A·B over the whole block (NW warps). A(i,k) = A[i*ars + k*acs] (M×Kd), B(k,j) = B[k*brs + j*bcs]
 * (Kd×N); M % 16 == 0, N % 8 == 0, Kd % 8 == 0; operands in shared memory, fp32 (rounded to tf32).
 * epi(i, j, c) is called exactly once per output element by the thread that owns it.
 * kmax(i0) (optional via KLIM) lets causal products skip k-steps: only k < klim(i0+16) are summed. */
template <int NW, class Epi>
__device__ __forceinline__ void bgemm(int M, int N, int Kd, const float *A, int ars, int acs,
                                      const float *B, int brs, int bcs, Epi epi) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int mt = M >> 4, nt = (N + 31) >> 5;
    for (int tile = warp; tile < mt * nt; tile += NW) {
        const int i0 = (tile % mt) << 4, j0 = (tile / mt) << 5;
        const int nsub = min(4, (N - j0) >> 3);
        float acc[4][4];
#pragma unroll
        for (int s = 0; s < 4; s++) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.f;
        const float *a0p = A + (i0 + g) * ars + t * acs, *a1p = a0p + 8 * ars;
        const float *bp = B + t * brs + (j0 + g) * bcs;
        for (int k0 = 0; k0 < Kd; k0 += 8) {
            uint32_t a[4];
            a[0] = to_tf32(a0p[k0 * acs]);
            a[1] = to_tf32(a1p[k0 * acs]);
            a[2] = to_tf32(a0p[(k0 + 4) * acs]);
            a[3] = to_tf32(a1p[(k0 + 4) * acs]);
#pragma unroll
            for (int s = 0; s < 4; s++) {
                if (s < nsub) {
                    const float *b = bp + k0 * brs + s * 8 * bcs;
                    mma_tf32(acc[s], a, to_tf32(b[0]), to_tf32(b[4 * brs]));
                }
            }
        }
#pragma unroll
        for (int s = 0; s < 4; s++) {
            if (s < nsub) {
                const int j = j0 + s * 8 + 2 * t;
                epi(i0 + g, j, acc[s][0]);
                epi(i0 + g, j + 1, acc[s][1]);
                epi(i0 + g + 8, j, acc[s][2]);
                epi(i0 + g + 8, j + 1, acc[s][3]);
            }
        }
    }
}

/* Load rows [0, 64) × cols [c0, c0+ncols) of a token-major array into smem (fp32, row stride ldd), zero outside
 * rows < n and cols < cmax; each value multiplied by mul. src points at row 0, column 0; rs = row stride. */
template <class T>
__device__ __forceinline__ void load_tile(float *dst, int ldd, int ncols, const T *src, size_t rs, int n, int c0,
                                          int cmax, float mul = 1.f) {
    for (int e = threadIdx.x; e < MAXBT * ncols; e += blockDim.x) {
        const int i = e / ncols, j = e - i * ncols, c = c0 + j;
        float x = 0.f;
        if (i < n && c < cmax) x = ld<T>(src + (size_t)i * rs + c) * mul;
        dst[i * ldd + j] = x;
    }
}

/* State element (kk, vv) of a [K,V] (or [V,K] when svf) matrix. */
__device__ __forceinline__ size_t st_idx(const Prob &p, int kk, int vv) {
    return p.svf ? (size_t)vv * p.K + kk : (size_t)kk * p.V + vv;
}

} // namespace rewy_cuda

#define REWY_CUDA_SMEM_ALIGN(x) (((x) + 3) & ~3)

#endif
