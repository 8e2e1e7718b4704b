/* wgmma_probe.cu: does one warpgroup's wgmma make a scan's chunk step shorter than mma.sync does?
 *
 * The scans (state_scan.cuh, bwd_state_scan.cuh) are chains of small dependent products per chunk; FLA's
 * chunk-state kernels run them as one 4-warp CTA per (sequence, head, 64 columns) on wgmma, four per SM.
 * Before building such a scan (PERF.md, session 7's "next for issue 3"), this probe answers two questions
 * on the device, standalone (no library):
 *   1. correctness of the shared-memory layout and descriptors used here: C = A·B, A [64×128], B [128×64]
 *      bf16, fp32 accumulators, against a CPU reference, for both readings of the descriptor's two
 *      offsets (variant 0: LBO = K-adjacent core matrices, SBO = M/N-adjacent, as the PTX manual says;
 *      variant 1: swapped) — the printout says which one matches;
 *   2. the time of a dependent chain S ← A·S + S (64×64 state, 64-deep inner dimension, bf16 copy of S
 *      as the B operand each step, as a scan does) with one warpgroup on wgmma against the same chain on
 *      mma.sync (four warps, each 16 rows of S), with 1 and 4 CTAs per SM.
 * Build (sm_90a): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o wgmma_probe bench/dev/wgmma_probe.cu
 * Run in session 8 (H200): variant 0 matches (rel. err 6e-8 against the CPU product; variant 1 gives 1.3); a
 * dependent 64×64×64 chain step takes 0.31 µs on wgmma against 0.62 on mma.sync with one CTA per SM, 0.81
 * against 1.30 with four (PERF.md history, session 8). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

typedef __nv_bfloat16 bf16;

/* ---- canonical no-swizzle K-major layout: core matrices of 8 rows × 16 B (8 bf16) stored as 128-B blocks,
 * block (r/8, k/8) at ((r/8)·(K/8) + k/8)·128 B: K-adjacent blocks 128 B apart, row-adjacent (K/8)·128 B */
__host__ __device__ inline int cm_off(int r, int k, int K) { return ((r >> 3) * (K >> 3) + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7); }

__device__ inline uint64_t smem_desc(const void *p, int lbo, int sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32); /* swizzle 0 */
}
__device__ inline void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ inline void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ inline void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* d[32] (+)= A(64×16) · B(16×64): both K-major descriptors; acc = 0 overwrites */
__device__ inline void wgmma_64x64x16(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}
/* accumulator element e of this thread: row 16·warp + lane/4 (+8 for e&2), column 8·(e/4) + 2·(lane%4) + (e&1) */
__device__ inline void acc_rc(int e, int &r, int &c) {
    const int w = (threadIdx.x >> 5) & 3, l = threadIdx.x & 31;
    r = 16 * w + (l >> 2) + ((e & 2) ? 8 : 0);
    c = 8 * (e >> 2) + 2 * (l & 3) + (e & 1);
}

/* 1. C = A·B; A [64][128] row-major, Bt [64][128] (B's columns, K contiguous), C [64][64] */
__global__ void __launch_bounds__(128) gemm_probe(const bf16 *A, const bf16 *Bt, float *C, int variant) {
    __shared__ __align__(128) bf16 As[64 * 128], Bs[64 * 128];
    for (int e = threadIdx.x; e < 64 * 128; e += 128) {
        const int r = e / 128, k = e % 128;
        As[cm_off(r, k, 128)] = A[e];
        Bs[cm_off(r, k, 128)] = Bt[e];
    }
    proxy_fence();
    __syncthreads();
    const int lbo = variant ? (128 / 8) * 128 : 128, sbo = variant ? 128 : (128 / 8) * 128;
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.f;
    wg_fence();
    for (int k0 = 0; k0 < 128; k0 += 16) /* a k16 step: two K-adjacent core matrices on */
        wgmma_64x64x16(d, smem_desc(As + cm_off(0, k0, 128), lbo, sbo), smem_desc(Bs + cm_off(0, k0, 128), lbo, sbo), k0 > 0);
    wg_commit();
    wg_wait0();
    for (int e = 0; e < 32; e++) {
        int r, c;
        acc_rc(e, r, c);
        C[r * 64 + c] = d[e];
    }
}

/* 2a. the chain on wgmma: S ← A·S + S, NSTEP steps; one warpgroup per CTA, each CTA its own chain */
__global__ void __launch_bounds__(128) chain_wgmma(const bf16 *A, float *out, int nstep) {
    __shared__ __align__(128) bf16 As[64 * 64], St[64 * 64]; /* A [m][k]; St = Sᵀ [n][k]: K-major B */
    for (int e = threadIdx.x; e < 64 * 64; e += 128) As[cm_off(e / 64, e % 64, 64)] = A[e];
    float s[32], d[32];
    for (int e = 0; e < 32; e++) {
        int r, c;
        acc_rc(e, r, c);
        s[e] = (r == c) ? 1.f : 0.f;
    }
    for (int it = 0; it < nstep; it++) {
        for (int e = 0; e < 32; e++) { /* bf16 copy of S as the B operand: element (k = r, n = c) */
            int r, c;
            acc_rc(e, r, c);
            St[cm_off(c, r, 64)] = __float2bfloat16(s[e]);
        }
        proxy_fence();
        __syncthreads();
        wg_fence();
        for (int k0 = 0; k0 < 64; k0 += 16)
            wgmma_64x64x16(d, smem_desc(As + cm_off(0, k0, 64), 128, 8 * 128), smem_desc(St + cm_off(0, k0, 64), 128, 8 * 128),
                           k0 > 0);
        wg_commit();
        wg_wait0();
        for (int e = 0; e < 32; e++) s[e] = 0.5f * (s[e] + d[e]);
        __syncthreads(); /* St is rewritten next step */
    }
    for (int e = 0; e < 32; e++) {
        int r, c;
        acc_rc(e, r, c);
        out[(size_t)blockIdx.x * 4096 + r * 64 + c] = s[e];
    }
}

/* 2b. the same chain on mma.sync m16n8k16: warp w owns rows 16w…16w+15 of S (8 column blocks) */
__device__ inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__global__ void __launch_bounds__(128) chain_mma(const bf16 *A, float *out, int nstep) {
    constexpr int LD = 64 + 8;
    __shared__ __align__(16) bf16 As[64 * LD], St[64 * LD]; /* A [m][k]; St = Sᵀ [n][k] */
    for (int e = threadIdx.x; e < 64 * 64; e += 128) As[(e / 64) * LD + e % 64] = A[e];
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, t = l & 3;
    float s[8][4], d[8][4];
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int r = 16 * w + g + ((e & 2) ? 8 : 0), c = 8 * j + 2 * t + (e & 1);
            s[j][e] = (r == c) ? 1.f : 0.f;
        }
    for (int it = 0; it < nstep; it++) {
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                const int r = 16 * w + g + ((e & 2) ? 8 : 0), c = 8 * j + 2 * t + (e & 1);
                St[c * LD + r] = __float2bfloat16(s[j][e]);
            }
        __syncthreads();
        for (int j = 0; j < 8; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
        for (int k0 = 0; k0 < 64; k0 += 16) {
            uint32_t a[4];
            const bf16 *ap = As + (16 * w + g) * LD + k0 + 2 * t;
            a[0] = *reinterpret_cast<const uint32_t *>(ap);
            a[1] = *reinterpret_cast<const uint32_t *>(ap + 8 * LD);
            a[2] = *reinterpret_cast<const uint32_t *>(ap + 8);
            a[3] = *reinterpret_cast<const uint32_t *>(ap + 8 * LD + 8);
            for (int j = 0; j < 8; j++) {
                const bf16 *bp = St + (8 * j + g) * LD + k0 + 2 * t;
                mma16816(d[j], a, *reinterpret_cast<const uint32_t *>(bp), *reinterpret_cast<const uint32_t *>(bp + 8));
            }
        }
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) s[j][e] = 0.5f * (s[j][e] + d[j][e]);
        __syncthreads();
    }
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int r = 16 * w + g + ((e & 2) ? 8 : 0), c = 8 * j + 2 * t + (e & 1);
            out[(size_t)blockIdx.x * 4096 + r * 64 + c] = s[j][e];
        }
}

static float bfr(float x) { return __bfloat162float(__float2bfloat16(x)); }

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    srand(7);
    /* 1. correctness of the layout and descriptors */
    const int M = 64, N = 64, K = 128;
    bf16 *hA = (bf16 *)malloc(M * K * 2), *hB = (bf16 *)malloc(N * K * 2);
    float *ref = (float *)calloc(M * N, 4), *hC = (float *)malloc(M * N * 4);
    for (int i = 0; i < M * K; i++) hA[i] = __float2bfloat16((float)rand() / RAND_MAX - 0.5f);
    for (int i = 0; i < N * K; i++) hB[i] = __float2bfloat16((float)rand() / RAND_MAX - 0.5f);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double a = 0;
            for (int k = 0; k < K; k++) a += (double)__bfloat162float(hA[m * K + k]) * __bfloat162float(hB[n * K + k]);
            ref[m * N + n] = (float)a;
        }
    bf16 *dA, *dB;
    float *dC;
    CK(cudaMalloc(&dA, M * K * 2));
    CK(cudaMalloc(&dB, N * K * 2));
    CK(cudaMalloc(&dC, M * N * 4));
    CK(cudaMemcpy(dA, hA, M * K * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB, N * K * 2, cudaMemcpyHostToDevice));
    for (int v = 0; v < 2; v++) {
        CK(cudaMemset(dC, 0xff, M * N * 4)); /* poisoned: NaN where nothing is written */
        gemm_probe<<<1, 128>>>(dA, dB, dC, v);
        CK(cudaGetLastError());
        CK(cudaMemcpy(hC, dC, M * N * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        int bad = 0;
        for (int i = 0; i < M * N; i++) {
            if (!isfinite(hC[i])) bad++;
            num += (hC[i] - ref[i]) * (double)(hC[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        printf("gemm variant %d (%s): rel err %.3e, non-finite %d\n", v, v ? "LBO/SBO swapped" : "LBO = K step",
               sqrt(num / den), bad);
    }
    /* 2. the chain: time per step, one chain per SM and four per SM */
    float *hAc = (float *)malloc(64 * 64 * 4);
    bf16 *hAb = (bf16 *)malloc(64 * 64 * 2);
    for (int i = 0; i < 64 * 64; i++) {
        hAc[i] = bfr(((float)rand() / RAND_MAX - 0.5f) / 8.f);
        hAb[i] = __float2bfloat16(hAc[i]);
    }
    bf16 *dAc;
    float *dout;
    const int nstep = 256, maxcta = 4 * sms;
    CK(cudaMalloc(&dAc, 64 * 64 * 2));
    CK(cudaMalloc(&dout, (size_t)maxcta * 4096 * 4));
    CK(cudaMemcpy(dAc, hAb, 64 * 64 * 2, cudaMemcpyHostToDevice));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float *o1 = (float *)malloc(4096 * 4), *o2 = (float *)malloc(4096 * 4);
    for (int per_sm = 1; per_sm <= 4; per_sm *= 4) {
        const int ncta = per_sm * sms;
        float t[2];
        for (int kind = 0; kind < 2; kind++) {
            for (int rep = 0; rep < 2; rep++) { /* the second run is timed */
                CK(cudaEventRecord(a));
                if (kind == 0) chain_wgmma<<<ncta, 128>>>(dAc, dout, nstep);
                else chain_mma<<<ncta, 128>>>(dAc, dout, nstep);
                CK(cudaEventRecord(b));
                CK(cudaEventSynchronize(b));
                CK(cudaGetLastError());
                CK(cudaEventElapsedTime(&t[kind], a, b));
            }
            CK(cudaMemcpy(kind ? o2 : o1, dout, 4096 * 4, cudaMemcpyDeviceToHost));
        }
        double num = 0, den = 0;
        for (int i = 0; i < 4096; i++) {
            num += (o1[i] - o2[i]) * (double)(o1[i] - o2[i]);
            den += (double)o2[i] * o2[i];
        }
        printf("chain, %d CTA(s) per SM, %d steps: wgmma %.2f us/step, mma.sync %.2f us/step; rel diff %.2e\n", per_sm, nstep,
               1e3 * t[0] / nstep, 1e3 * t[1] / nstep, sqrt(num / den));
    }
    return 0;
}
