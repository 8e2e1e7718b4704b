/* tma_probe.cu: can a cluster's blocks share their chunk tiles through TMA multicast, and what does a chunk
 * step's copy then cost?
 *
 * The small-grid scans (state_scan.cuh, bwd_state_scan.cuh) run V/BVT blocks per (sequence, head), and each of
 * them copies the same K, Q, A, C_q tiles every chunk with 16-byte cp.async: 28–30 % of the forward scan's
 * instructions (Nsight, PERF.md session 11). The plan for a next scan: the V/BVT blocks of a (sequence, head)
 * as one cluster, each block issuing one 2-D tensor-map copy per step, multicast to the whole cluster, into
 * 128-byte-swizzled tiles. This probe answers, standalone (no library):
 *   1. correctness: after each step, every block's shared tiles hold the chunk's K, Q (two 64-column boxes
 *      each), A (fp32, two 32-column boxes) and C_q (one box), at the 128-byte-swizzle addresses
 *      row·128 + ((16-byte chunk) XOR (row mod 8))·16 that ldmatrix would have to use;
 *   2. the time per chunk step of the copies alone (no products), pipelined over two buffers (an mbarrier
 *      for "full", a cluster barrier for "every block is done with the buffer"; copies two steps ahead),
 *      against every block copying all tiles itself with cp.async (256 threads, one step ahead, as the
 *      scans do now). Without products both loops are latency-bound: the numbers bound a step's copy cost,
 *      they do not measure the issue slots the copies take from a scan's products.
 * Shapes as DeltaNet (2,16384,8): 16 (sequence, head) chains of 256 chunks, clusters of 8 blocks.
 * Build (sm_90a): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o tma_probe bench/dev/tma_probe.cu
 * Run in session 11 (H200): 0 mismatches (the swizzle formula holds for the bf16 and fp32 boxes, 3-D and 2-D maps,
 * multicast to 8 blocks). Per step, copies only: 128 blocks, TMA 1.68 µs, cp.async 1.62; 16 blocks, TMA 0.72,
 * cp.async 1.06. At the scans' grid the copies are bound by the total traffic into the SMs (128 × 56 KB per
 * step ≈ 4.3 TB/s), which multicast does not lower; at 16 blocks TMA's latency is the lower. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm90_probe.cuh"

typedef __nv_bfloat16 bf16;
constexpr int NSEQ = 2, H = 8, TS = 16384, KD = 128, BT = 64, NCH = TS / BT, CL = 8, NT = 256;
constexpr int BOX = 8192;              /* every box: 64 rows × 128 B */
constexpr int NBOX = 7;                /* K lo/hi, Q lo/hi, A lo/hi, C_q */
constexpr int STAGE = NBOX * BOX;      /* one buffer's bytes */

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* one box of a 3-D (K) or 2-D (A, C_q) map into dst of every block of the cluster (mask 0xff) */
__device__ __forceinline__ void tma3_mc(void *dst, const CUtensorMap *tm, int c0, int c1, int c2, uint64_t *mb) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
                 ::"r"(su32(dst)), "l"(tm), "r"(c0), "r"(c1), "r"(c2), "r"(su32(mb)), "h"((unsigned short)0xff) : "memory");
}
__device__ __forceinline__ void tma2_mc(void *dst, const CUtensorMap *tm, int c0, int c1, uint64_t *mb) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 ::"r"(su32(dst)), "l"(tm), "r"(c0), "r"(c1), "r"(su32(mb)), "h"((unsigned short)0xff) : "memory");
}

struct Maps { CUtensorMap k, q, a, c; };

/* Block rank r of the cluster issues box r of the step: 0, 1 K's column halves; 2, 3 Q's; 4, 5 A's; 6 C_q. */
__device__ void issue(const Maps &m, char *buf, uint64_t *mb, unsigned r, int sq, int h, int t) {
    const int tok = sq * TS + t * BT, tile = (sq * H + h) * NCH + t;
    char *dst = buf + r * BOX;
    if (r < 2) tma3_mc(dst, &m.k, r * 64, h, tok, mb);
    else if (r < 4) tma3_mc(dst, &m.q, (r - 2) * 64, h, tok, mb);
    else if (r < 6) tma2_mc(dst, &m.a, (r - 4) * 32, tile * BT, mb);
    else if (r == 6) tma2_mc(dst, &m.c, 0, tile * BT, mb);
}

/* the copy pipeline alone over a sequence's chunks; check: compare the tiles of the first steps with global */
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT, 1)
tma_kernel(const __grid_constant__ Maps m, const bf16 *k, const bf16 *q, const float *A, const bf16 *C, int check,
           unsigned *bad) {
    extern __shared__ __align__(1024) char smraw[];
    char *sm = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(smraw) + 1023) & ~uintptr_t(1023));
    uint64_t *full = reinterpret_cast<uint64_t *>(sm + 2 * STAGE);
    const unsigned r = cluster_rank();
    const int sh = blockIdx.x / CL, sq = sh / H, h = sh % H;
    if (threadIdx.x == 0) {
        mb_init(&full[0], 1);
        mb_init(&full[1], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        mb_arm(&full[0], STAGE);
        mb_arm(&full[1], STAGE);
    }
    cluster_sync(); /* every block's barriers exist and are armed before any copy lands */
    if (threadIdx.x == 0) {
        issue(m, sm, &full[0], r, sq, h, 0);
        issue(m, sm + STAGE, &full[1], r, sq, h, 1);
    }
    unsigned errs = 0;
    for (int t = 0; t < NCH; t++) { /* step t reads buffer t & 1; step t + 2's copies refill it */
        const int b = t & 1;
        mb_wait(&full[b], (t >> 1) & 1);
        if (check && t < 3) { /* the consumer's reads: verify the swizzled tiles */
            const char *bb = sm + b * STAGE;
            const int tok0 = sq * TS + t * BT, tile = (sq * H + h) * NCH + t;
            for (int e = threadIdx.x; e < BT * KD; e += NT) {
                const int i = e / KD, d = e % KD, half = d / 64, by = (d % 64) * 2;
                const size_t g = ((size_t)(tok0 + i) * H + h) * KD + d;
                if (*reinterpret_cast<const uint16_t *>(bb + half * BOX + swz(i, by)) != *reinterpret_cast<const uint16_t *>(k + g)) errs++;
                if (*reinterpret_cast<const uint16_t *>(bb + (2 + half) * BOX + swz(i, by)) != *reinterpret_cast<const uint16_t *>(q + g)) errs++;
            }
            for (int e = threadIdx.x; e < BT * BT; e += NT) {
                const int i = e / BT, j = e % BT;
                const size_t g = ((size_t)tile * BT + i) * BT + j;
                if (*reinterpret_cast<const float *>(bb + (4 + j / 32) * BOX + swz(i, (j % 32) * 4)) != A[g]) errs++;
                if (*reinterpret_cast<const uint16_t *>(bb + 6 * BOX + swz(i, j * 2)) != *reinterpret_cast<const uint16_t *>(C + g)) errs++;
            }
        }
        __syncthreads(); /* this block is done with buffer b */
        if (threadIdx.x == 0 && t + 2 < NCH) mb_arm(&full[b], STAGE); /* before any peer's copy into it */
        cluster_sync();  /* every block of the cluster is done with buffer b and has armed its barrier */
        if (threadIdx.x == 0 && t + 2 < NCH) issue(m, sm + b * STAGE, &full[b], r, sq, h, t + 2);
    }
    cluster_sync(); /* no block leaves while a peer's copy may still land in it */
    if (errs) atomicAdd(bad, errs);
}

/* the scans' way: every block copies all seven boxes' data itself (unswizzled, padded rows) with cp.async */
__global__ void __launch_bounds__(NT, 1) cpasync_kernel(const bf16 *k, const bf16 *q, const float *A, const bf16 *C) {
    extern __shared__ __align__(16) char sm[];
    const int sh = blockIdx.x / CL, sq = sh / H, h = sh % H;
    auto issue_cp = [&](int t, int b) {
        char *bb = sm + b * (STAGE + 8 * 1024);
        const int tok0 = sq * TS + t * BT, tile = (sq * H + h) * NCH + t;
        for (int e = threadIdx.x; e < BT * 16; e += NT) { /* K, Q: 64 rows × 16 vectors, rows of 272 B */
            const int i = e / 16, c = e % 16;
            const size_t g = ((size_t)(tok0 + i) * H + h) * KD + c * 8;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(su32(bb + i * 272 + c * 16)), "l"(k + g));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(su32(bb + 17408 + i * 272 + c * 16)), "l"(q + g));
            const size_t ga = ((size_t)tile * BT + i) * BT + c * 4; /* A: rows of 288 B */
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(su32(bb + 34816 + i * 288 + c * 16)), "l"(A + ga));
            if (c < 8) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(su32(bb + 53248 + i * 144 + c * 16)), "l"(C + ((size_t)tile * BT + i) * BT + c * 8));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    issue_cp(0, 0);
    for (int t = 0; t < NCH; t++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        if (t + 1 < NCH) issue_cp(t + 1, (t + 1) & 1);
    }
}

int main() {
    const EncodeFn enc = probe_encoder();
    const size_t nk = (size_t)NSEQ * TS * H * KD, na = (size_t)NSEQ * H * NCH * BT * BT;
    bf16 *hk = (bf16 *)malloc(nk * 2), *hq = (bf16 *)malloc(nk * 2), *hc = (bf16 *)malloc(na * 2);
    float *ha = (float *)malloc(na * 4);
    for (size_t i = 0; i < nk; i++) { hk[i] = __float2bfloat16((float)((i * 7919) % 1000) / 1000.f); hq[i] = __float2bfloat16((float)((i * 104729) % 997) / 997.f); }
    for (size_t i = 0; i < na; i++) { ha[i] = (float)((i * 31) % 4093) / 4093.f; hc[i] = __float2bfloat16((float)((i * 17) % 509) / 509.f); }
    bf16 *k, *q, *C;
    float *A;
    unsigned *bad;
    CK(cudaMalloc(&k, nk * 2)); CK(cudaMalloc(&q, nk * 2)); CK(cudaMalloc(&C, na * 2)); CK(cudaMalloc(&A, na * 4));
    CK(cudaMalloc(&bad, 4)); CK(cudaMemset(bad, 0, 4));
    CK(cudaMemcpy(k, hk, nk * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(q, hq, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(C, hc, na * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(A, ha, na * 4, cudaMemcpyHostToDevice));
    Maps m;
    { /* K, Q: [token][head][128] bf16 as dims {128, H, tokens}; box {64, 1, 64}, 128-byte swizzle */
        cuuint64_t dims[3] = {KD, H, (cuuint64_t)NSEQ * TS}, str[2] = {KD * 2, (cuuint64_t)H * KD * 2};
        cuuint32_t box[3] = {64, 1, 64}, es[3] = {1, 1, 1};
        for (int w = 0; w < 2; w++) {
            CUresult e = enc(w ? &m.q : &m.k, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, w ? (void *)q : (void *)k, dims, str, box, es,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
            if (e != CUDA_SUCCESS) { printf("encode K/Q: %d\n", (int)e); return 1; }
        }
    }
    { /* A: [tile·64 rows][64] fp32, boxes {32, 64}; C_q: [rows][64] bf16, box {64, 64} */
        cuuint64_t dims[2] = {BT, (cuuint64_t)NSEQ * H * NCH * BT}, sa[1] = {BT * 4}, sc[1] = {BT * 2};
        cuuint32_t ba[2] = {32, 64}, bc[2] = {64, 64}, es[2] = {1, 1};
        CUresult e = enc(&m.a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, A, dims, sa, ba, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                         CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        CUresult e2 = enc(&m.c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, C, dims, sc, bc, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (e != CUDA_SUCCESS || e2 != CUDA_SUCCESS) { printf("encode A/C: %d %d\n", (int)e, (int)e2); return 1; }
    }
    const int grid = NSEQ * H * CL;
    const size_t smt = 2 * STAGE + 1024 + 64, smc = 2 * (STAGE + 8 * 1024);
    CK(cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smt));
    CK(cudaFuncSetAttribute(cpasync_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smc));
    tma_kernel<<<grid, NT, smt>>>(m, k, q, A, C, 1, bad);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    unsigned hb = 0;
    CK(cudaMemcpy(&hb, bad, 4, cudaMemcpyDeviceToHost));
    printf("TMA multicast, 128-B swizzle: %u mismatches in the first 3 steps of %d blocks\n", hb, grid);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    /* all 16 chains (about one block per SM), then 2 (8 blocks): if the time per step falls with the grid, the
     * copies were bound by the GPU's total L2-to-SM traffic, not by their latency */
    for (int g : {grid, 2 * CL})
        for (int v = 0; v < 2; v++) {
            float best = 1e9f;
            for (int rep = 0; rep < 5; rep++) {
                CK(cudaEventRecord(e0));
                if (v == 0) tma_kernel<<<g, NT, smt>>>(m, k, q, A, C, 0, bad);
                else cpasync_kernel<<<g, NT, smc>>>(k, q, A, C);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (ms < best) best = ms;
            }
            printf("%s: %.3f ms for %d steps = %.2f us per step (copies only, %d blocks)\n",
                   v ? "cp.async, every block" : "TMA multicast, one box per block", best, NCH, 1000.f * best / NCH, g);
        }
    return 0;
}
