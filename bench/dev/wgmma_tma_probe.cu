/* wgmma_tma_probe.cu: the two pieces a TMA-fed warp-specialized kernel needs (session 36's lesson, docs/DESIGN.md:
 * the pullback's and the fused reverse kernel's math warps must not issue their own copies), checked standalone before
 * any kernel is built on them:
 *   1. layouts: 64 × 64 bf16 tiles brought by 2-D tensor-map copies with the 128-byte swizzle feed wgmma directly.
 *      Three operand forms, as the kernels read them: A and B both K-major (P Rᵀ, P S_cᵀ: D = A Bᵀ), B MN-major (Γ K:
 *      the K tile [token][feature] read with k = token), A MN-major (Γᵀ K). For the MN-major forms it tries each
 *      candidate (LBO, SBO) and prints which ones reproduce a CPU product, as wgmma_layout_probe.cu did for the
 *      unswizzled layouts the library uses now.
 *   2. the pipeline: one block an SM, a producer warp streaming 8 KB tiles through a ring of S stages (an mbarrier
 *      "full" with the bytes expected, one "empty" that the consumer warpgroup's 128 threads arrive on) and a consumer
 *      warpgroup running one m64n64k64 product per tile. It prints the HBM bandwidth the whole GPU reaches for S = 2, 4,
 *      8 against the H100's 3.35 TB/s: what a kernel that must stream about 200 KB a chunk and head (the pullback) can
 *      expect when its math warps never copy.
 * Build (sm_90a): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o wgmma_tma_probe bench/dev/wgmma_tma_probe.cu
 * Run in session 37 (H100): every 128-B-swizzled form reproduces the CPU product with SBO = 1024 (K-major: the k16 step
 * +32 B; MN-major: +2048 B, and the LBO is not read, as the tiles are one swizzle atom wide in m / n). The same call
 * tried the library's unswizzled core-matrix layout by one 3-D copy a tile, dims (8 elements, rows, column groups) with
 * strides (row, 16 B): the encoder accepted the map and the copy faulted (illegal memory access), as the copy engine
 * takes nested strides only (cuda.h: each dimension's stride includes the previous one's). The library's tensor copies
 * (src/cuda/tma.cuh) therefore use these swizzled boxes. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm90_probe.cuh"

typedef __nv_bfloat16 bf16;
constexpr int TILE = 64 * 64 * 2; /* one 64 × 64 bf16 box: 64 rows of 128 B */

__device__ __forceinline__ void mb_arrive(uint64_t *mb) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(su32(mb)) : "memory");
}
/* box (c0 = column, c1 = row) of a 2-D map into dst (1024-B aligned for the 128-B swizzle), completing on mb */
__device__ __forceinline__ void tma2(void *dst, const CUtensorMap *tm, int c0, int c1, uint64_t *mb) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(su32(dst)), "l"(tm), "r"(c0), "r"(c1), "r"(su32(mb)) : "memory");
}
/* a wgmma descriptor with the 128-byte swizzle (layout type 1 in bits 62–63) */
__device__ __forceinline__ uint64_t desc128(const void *p, int lbo, int sbo) {
    const uint32_t a = su32(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}
template <int TA, int TB> __device__ __forceinline__ void mma(float (&d)[32], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " REGS32 ", %32, %33, 1, 1, 1, %34, %35;\n"
                 : ACC32 : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit_wait() {
    asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* the accumulator element e of thread t: row, column (the library's wgmma.cuh) */
__device__ __forceinline__ int acc_row(int t, int e) { return 16 * (t >> 5) + ((t & 31) >> 2) + ((e & 2) ? 8 : 0); }
__device__ __forceinline__ int acc_col(int t, int e) { return 8 * (e >> 2) + 2 * (t & 3) + (e & 1); }

struct Maps { CUtensorMap a, b, bt, at; };

/* ---- 1. layouts. mode 0: D = A Bᵀ (A [m][k], B [n][k], both K-major); 1: D = A Bt (Bt [k][n] MN-major, TB = 1);
 * 2: D = At^T B^T (At [k][m] MN-major, TA = 1; B [n][k] K-major). K-major: a k16 step is +32 B inside the swizzled
 * 128-B rows, SBO = 1024 (8 rows); MN-major: a k16 step is +2048 B (16 rows of 128 B), (lbo, sbo) the candidate. */
template <int MODE> __global__ void layout_probe(const __grid_constant__ Maps m, float *D, int lbo, int sbo) {
    __shared__ __align__(1024) bf16 s[4][64 * 64];
    __shared__ uint64_t mb;
    const int t = threadIdx.x;
    if (t == 0) {
        mb_init(&mb, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (t == 0) {
        mb_arm(&mb, 4 * TILE);
        tma2(s[0], &m.a, 0, 0, &mb);
        tma2(s[1], &m.b, 0, 0, &mb);
        tma2(s[2], &m.bt, 0, 0, &mb);
        tma2(s[3], &m.at, 0, 0, &mb);
    }
    mb_wait(&mb, 0);
    float d[32];
    for (int e = 0; e < 32; e++) d[e] = 0.f;
    wg_fence();
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint64_t ak = desc128((char *)s[0] + 32 * k, 16, 1024), bk = desc128((char *)s[1] + 32 * k, 16, 1024);
        if constexpr (MODE == 0) mma<0, 0>(d, ak, bk);
        else if constexpr (MODE == 1) mma<0, 1>(d, ak, desc128((char *)s[2] + 2048 * k, lbo, sbo));
        else mma<1, 0>(d, desc128((char *)s[3] + 2048 * k, lbo, sbo), bk);
    }
    wg_commit_wait();
    for (int e = 0; e < 32; e++) D[acc_row(t, e) * 64 + acc_col(t, e)] = d[e];
}

/* ---- 2. the pipeline: block b streams tiles b, b + G, … of X ([ntile·64 rows][64] bf16) through S stages */
template <int S>
__global__ void __launch_bounds__(160, 1) stream(const __grid_constant__ CUtensorMap x, int ntile, const bf16 *W, float *out) {
    extern __shared__ __align__(1024) char sm[];
    bf16 *ring = reinterpret_cast<bf16 *>(sm);                   /* S tiles */
    bf16 *Ws = reinterpret_cast<bf16 *>(sm + S * TILE);          /* a resident 64 × 64 B operand (K-major) */
    uint64_t *full = reinterpret_cast<uint64_t *>(sm + (S + 1) * TILE), *empty = full + S;
    const int t = threadIdx.x;
    if (t == 0) {
        for (int i = 0; i < S; i++) {
            mb_init(&full[i], 1);
            mb_init(&empty[i], 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    for (int e = t; e < 64 * 64; e += blockDim.x) Ws[swz(e >> 6, 2 * (e & 63)) / 2] = W[e]; /* as the copies lay tiles */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (t >= 128) { /* the producer warp: one thread issues */
        if (t == 128)
            for (int i = 0, tile = blockIdx.x; tile < ntile; i++, tile += gridDim.x) {
                const int st = i % S;
                if (i >= S) mb_wait(&empty[st], ((i / S) - 1) & 1);
                mb_arm(&full[st], TILE);
                tma2(ring + st * 64 * 64, &x, 0, tile * 64, &full[st]);
            }
        return;
    }
    float d[32];
    for (int e = 0; e < 32; e++) d[e] = 0.f;
    for (int i = 0, tile = blockIdx.x; tile < ntile; i++, tile += gridDim.x) {
        const int st = i % S;
        mb_wait(&full[st], (i / S) & 1);
        wg_fence();
#pragma unroll
        for (int k = 0; k < 4; k++)
            mma<0, 0>(d, desc128((char *)(ring + st * 64 * 64) + 32 * k, 16, 1024), desc128((char *)Ws + 32 * k, 16, 1024));
        wg_commit_wait();
        mb_arrive(&empty[st]);
    }
    float sum = 0.f;
    for (int e = 0; e < 32; e++) sum += d[e];
    atomicAdd(out, sum); /* keeps the products */
}

static EncodeFn enc;
/* a [rows][64] bf16 row-major matrix as a 2-D map of 64 × 64 boxes, 128-B swizzle */
static CUtensorMap map2(void *p, size_t rows) {
    CUtensorMap m;
    cuuint64_t dims[2] = {64, rows}, str[1] = {128};
    cuuint32_t box[2] = {64, 64}, es[2] = {1, 1};
    CUresult e = enc(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, str, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (e != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: %d\n", (int)e); exit(1); }
    return m;
}

template <int S> static void time_stream(const CUtensorMap &x, int ntile, const bf16 *W, float *out, int sms) {
    const size_t smem = (S + 1) * TILE + 2 * S * 8;
    CK(cudaFuncSetAttribute(stream<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    stream<S><<<sms, 160, smem>>>(x, ntile, W, out); /* warm-up */
    CK(cudaEventRecord(e0));
    for (int r = 0; r < 5; r++) stream<S><<<sms, 160, smem>>>(x, ntile, W, out);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= 5;
    printf("stream S=%d: %d tiles of 8 KB over %d blocks, %.3f ms, %.2f TB/s\n", S, ntile, sms, ms,
           (double)ntile * TILE / (ms * 1e-3) / 1e12);
}

int main() {
    enc = probe_encoder();
    /* 1. layouts */
    float hA[64 * 64], hB[64 * 64], ref[3][64 * 64];
    bf16 hAb[64 * 64], hBb[64 * 64], hBt[64 * 64], hAt[64 * 64];
    for (int i = 0; i < 64 * 64; i++) {
        hA[i] = __bfloat162float(__float2bfloat16((float)((i * 7919) % 1013) / 1013.f - 0.5f));
        hB[i] = __bfloat162float(__float2bfloat16((float)((i * 104729) % 997) / 997.f - 0.5f));
    }
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < 64; c++) {
            hAb[r * 64 + c] = __float2bfloat16(hA[r * 64 + c]); /* A [m][k] */
            hBb[r * 64 + c] = __float2bfloat16(hB[r * 64 + c]); /* B [n][k] */
            hBt[c * 64 + r] = __float2bfloat16(hB[r * 64 + c]); /* Bt [k][n] = B [n][k] */
            hAt[c * 64 + r] = __float2bfloat16(hA[r * 64 + c]); /* At [k][m] = A [m][k] */
        }
    for (int i = 0; i < 64; i++) /* every mode computes D[i][j] = Σ_k A[i][k] B[j][k] */
        for (int j = 0; j < 64; j++) {
            double s = 0;
            for (int k = 0; k < 64; k++) s += (double)hA[i * 64 + k] * hB[j * 64 + k];
            ref[0][i * 64 + j] = ref[1][i * 64 + j] = ref[2][i * 64 + j] = (float)s;
        }
    bf16 *dA, *dB, *dBt, *dAt;
    float *dD;
    CK(cudaMalloc(&dA, TILE)); CK(cudaMalloc(&dB, TILE)); CK(cudaMalloc(&dBt, TILE)); CK(cudaMalloc(&dAt, TILE));
    CK(cudaMalloc(&dD, 64 * 64 * 4));
    CK(cudaMemcpy(dA, hAb, TILE, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, hBb, TILE, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dBt, hBt, TILE, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dAt, hAt, TILE, cudaMemcpyHostToDevice));
    Maps m = {map2(dA, 64), map2(dB, 64), map2(dBt, 64), map2(dAt, 64)};
    const int cand[][2] = {{16, 1024}, {1024, 16}, {1024, 1024}, {16, 2048}, {2048, 1024}, {1024, 2048}, {8192, 1024}}; /* (1024, 8192) reads past the tiles */
    for (int mode = 0; mode < 3; mode++)
        for (int c = 0; c < (mode ? 7 : 1); c++) {
            CK(cudaMemset(dD, 0, 64 * 64 * 4));
            if (mode == 0) layout_probe<0><<<1, 128>>>(m, dD, cand[c][0], cand[c][1]);
            else if (mode == 1) layout_probe<1><<<1, 128>>>(m, dD, cand[c][0], cand[c][1]);
            else layout_probe<2><<<1, 128>>>(m, dD, cand[c][0], cand[c][1]);
            CK(cudaDeviceSynchronize());
            float hD[64 * 64], err = 0.f;
            CK(cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost));
            for (int i = 0; i < 64 * 64; i++) err = fmaxf(err, fabsf(hD[i] - ref[mode][i]));
            printf("layout mode %d (%s) lbo %5d sbo %5d: max |err| %.3e %s\n", mode,
                   mode == 0 ? "A, B K-major" : mode == 1 ? "B MN-major" : "A MN-major", mode ? cand[c][0] : 16,
                   mode ? cand[c][1] : 1024, err, err < 1e-3f ? "OK" : "");
        }
    /* 2. the pipeline over 1 GiB of tiles */
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int ntile = 131072; /* 1 GiB */
    bf16 *X;
    float *out;
    CK(cudaMalloc(&X, (size_t)ntile * TILE)); CK(cudaMemset(X, 0, (size_t)ntile * TILE));
    CK(cudaMalloc(&out, 4)); CK(cudaMemset(out, 0, 4));
    const CUtensorMap xm = map2(X, (size_t)ntile * 64);
    time_stream<2>(xm, ntile, dA, out, sms);
    time_stream<4>(xm, ntile, dA, out, sms);
    time_stream<8>(xm, ntile, dA, out, sms);
    return 0;
}
