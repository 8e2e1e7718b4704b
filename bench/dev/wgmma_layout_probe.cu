/* wgmma_layout_probe.cu: which no-swizzle descriptor offsets the transposed (MN-major) bf16 operands and the
 * tf32 operands of wgmma take, checked against a CPU product (the forward-scan kernel on wgmma uses all three).
 * Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/dev/wgmma_layout_probe.cu */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm90_probe.cuh"
typedef __nv_bfloat16 bf16;
__device__ inline uint64_t desc(const void *p, int lbo, int sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
template <int TA, int TB> __device__ inline void mma_bf(float (&d)[32], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " REGS32 ", %32, %33, 1, 1, 1, %34, %35;\n"
                 : ACC32 : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
__device__ inline void mma_tf(float (&d)[32], uint64_t a, uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " REGS32 ", %32, %33, 1, 1, 1;\n" : ACC32 : "l"(a), "l"(b));
}
/* bf16 64×64 operand X[mn][k] (K = 64): K-major core (mn/8, k/8) at ((mn/8)·8 + k/8)·64 elements, rows of k;
 * MN-major core at ((k/8)·8 + mn/8)·64, rows of mn */
__device__ inline int off_k(int mn, int k) { return ((mn >> 3) * 8 + (k >> 3)) * 64 + (mn & 7) * 8 + (k & 7); }
__device__ inline int off_mn(int mn, int k) { return ((k >> 3) * 8 + (mn >> 3)) * 64 + (k & 7) * 8 + (mn & 7); }
/* tf32 64×64 K-major: core (mn/8, k/4) at ((mn/8)·16 + k/4)·32 floats */
__device__ inline int off_tf(int mn, int k) { return ((mn >> 3) * 16 + (k >> 2)) * 32 + (mn & 7) * 4 + (k & 3); }

/* C[m][n] = Σ_k A[m][k] B[k][n]; mode 0: A MN-major, B K-major; 1: A K-major, B MN-major; 2: tf32 both K-major.
 * v: 0 = LBO K-direction, SBO MN-direction for the MN-major operand; 1 swapped */
__global__ void probe(const float *A, const float *B, float *C, int mode, int v) {
    __shared__ __align__(128) bf16 As[64 * 64], Bs[64 * 64];
    __shared__ __align__(128) float At[64 * 64], Bt[64 * 64];
    for (int e = threadIdx.x; e < 4096; e += 128) {
        const int r = e / 64, k = e % 64; /* A[r][k], B[k][r] as (mn = r, k) */
        As[mode == 0 ? off_mn(r, k) : off_k(r, k)] = __float2bfloat16(A[r * 64 + k]);
        Bs[mode == 1 ? off_mn(r, k) : off_k(r, k)] = __float2bfloat16(B[k * 64 + r]);
        At[off_tf(r, k)] = A[r * 64 + k];
        Bt[off_tf(r, k)] = B[k * 64 + r];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.f;
    const int kl = 128, ks = 8 * 128;        /* K-major: LBO = K step, SBO = MN step */
    const int ml = v ? 128 : 8 * 128, ms = v ? 8 * 128 : 128; /* MN-major: candidate */
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if (mode == 2) {
        for (int k0 = 0; k0 < 64; k0 += 8) mma_tf(d, desc(At + off_tf(0, k0), 128, 16 * 128), desc(Bt + off_tf(0, k0), 128, 16 * 128));
    } else if (mode == 0) {
        for (int k0 = 0; k0 < 64; k0 += 16) mma_bf<1, 0>(d, desc(As + off_mn(0, k0), ml, ms), desc(Bs + off_k(0, k0), kl, ks));
    } else {
        for (int k0 = 0; k0 < 64; k0 += 16) mma_bf<0, 1>(d, desc(As + off_k(0, k0), kl, ks), desc(Bs + off_mn(0, k0), ml, ms));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    for (int e = 0; e < 32; e++) {
        const int r = 16 * w + (l >> 2) + ((e & 2) ? 8 : 0), c = 8 * (e >> 2) + 2 * (l & 3) + (e & 1);
        C[r * 64 + c] = d[e];
    }
}
int main() {
    float hA[4096], hB[4096], ref[4096], hC[4096];
    srand(3);
    for (int i = 0; i < 4096; i++) {
        hA[i] = __bfloat162float(__float2bfloat16((float)rand() / RAND_MAX - 0.5f));
        hB[i] = __bfloat162float(__float2bfloat16((float)rand() / RAND_MAX - 0.5f));
    }
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
            double a = 0;
            for (int k = 0; k < 64; k++) a += (double)hA[m * 64 + k] * hB[k * 64 + n];
            ref[m * 64 + n] = (float)a;
        }
    float *dA, *dB, *dC;
    CK(cudaMalloc(&dA, 16384)); CK(cudaMalloc(&dB, 16384)); CK(cudaMalloc(&dC, 16384));
    CK(cudaMemcpy(dA, hA, 16384, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, hB, 16384, cudaMemcpyHostToDevice));
    const char *names[3] = {"bf16 A MN-major (trans-a), B K-major", "bf16 A K-major, B MN-major (trans-b)", "tf32 A, B K-major"};
    for (int mode = 0; mode < 3; mode++)
        for (int v = 0; v < (mode == 2 ? 1 : 2); v++) {
            CK(cudaMemset(dC, 0xff, 16384));
            probe<<<1, 128>>>(dA, dB, dC, mode, v);
            CK(cudaGetLastError());
            CK(cudaMemcpy(hC, dC, 16384, cudaMemcpyDeviceToHost));
            double num = 0, den = 0;
            for (int i = 0; i < 4096; i++) { num += (hC[i] - ref[i]) * (double)(hC[i] - ref[i]); den += (double)ref[i] * ref[i]; }
            printf("%s, %s: rel err %.3e\n", names[mode], mode == 2 ? "LBO K, SBO MN" : v ? "MN-major LBO = MN step, SBO = K step" : "MN-major LBO = K step, SBO = MN step", sqrt(num / den));
        }
    return 0;
}
