// Host SIMT emulator for rewy's CUDA kernels: one std::thread per CUDA thread, std::barrier for
// __syncthreads and for warp collectives (shfl, mma.m16n8k8 tf32). Test-only.
#pragma once
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <barrier>
#include <thread>
#include <vector>
#include <algorithm>
#include <limits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
using std::min; using std::max;
inline thread_local dim3 threadIdx;
inline dim3 blockIdx, blockDim, gridDim;
inline float *emu_smem;
inline std::barrier<> *g_bar;
inline std::barrier<> *w_bar[32];
inline float w_f[32][32];
inline uint32_t w_a[32][32][4], w_b[32][32][2];
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float x, int o) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    w_f[w][l] = x; w_bar[w]->arrive_and_wait();
    float r = w_f[w][l ^ o]; w_bar[w]->arrive_and_wait();
    return r;
}
inline uint32_t __float_as_uint(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
