/* gate.cu: rewy_gate_forward / _backward on the GPU, FLA's in-kernel gate as a pass of its own (rewy.h
 * gives the formulas):
 *   forward   y = −exp(A_log[h]) · softplus(x),  x = g + dt_bias[h][k]
 *   backward  dg = dy · (−exp(A_log[h])) · σ(x);  dA_log[h] = Σ dy·y,  ddt_bias[h][k] = Σ_rows dg (fp32)
 * In PyTorch the gate of a [B,T,HV,K] KDA or GDN2 layer took about twenty elementwise and reduction passes
 * over fp32 copies of it, forward and backward (1.1 ms a layer call in FLA's KDA model at B = 4, T = 4096,
 * H200). Here: one pass forward (read g, write y), one backward (read g and dy, write dg) plus a small pass
 * over the partial sums.
 *   gate_fwd_kernel    E elements a thread (E = 4: one 8- or 16-byte load of g, a 16-byte store of y).
 *   gate_bwd_kernel    a block owns 32·E columns and one row slice (rewy_gate_slices: a count fixed by
 *                      the shape): 8 warps stride its rows, each thread keeping its columns' sums; the 8
 *                      rows of sums are added in order into the slice's row of the scratch.
 *   gate_sum_kernel    one block a head: each column's slices in order, then the head's columns (a fixed
 *                      tree) for dA_log. Every sum has an order fixed by the shape: results repeat bit for bit.
 * E = 1 where the columns are not a multiple of 4 or a pointer is not aligned for the vectors. The plain
 * reference: src/cpu/gate.c. */
#include "common.cuh"
#include "cuda_backend.h"
#include "backend.h"
#include "gates.h"

namespace rewy_cuda {

constexpr int GATE_THREADS = 256, GATE_ROWS = 8; /* backward: 32 column lanes × 8 row lanes */

template <class T, int E> struct alignas(sizeof(T) * E) GateVec {
    T e[E];
};

template <class T, int E>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_fwd_kernel(int64_t nvec, int64_t cols, int dim, const T *g, const float *A_log, const float *dt_bias, float *y) {
    for (int64_t v = (int64_t)blockIdx.x * GATE_THREADS + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * GATE_THREADS) {
        const int64_t e0 = v * E, c0 = e0 % cols;   /* cols % E == 0: a vector stays in one row */
        const GateVec<T, E> x = *reinterpret_cast<const GateVec<T, E> *>(g + e0);
        GateVec<float, E> out;
#pragma unroll
        for (int j = 0; j < E; j++) {
            const float xb = ld(&x.e[j]) + (dt_bias ? dt_bias[c0 + j] : 0.0f);
            out.e[j] = -expf(A_log[(c0 + j) / dim]) * rewy_softplus20(xb);
        }
        *reinterpret_cast<GateVec<float, E> *>(y + e0) = out;
    }
}

template <class T, int E>
__global__ void __launch_bounds__(32 * GATE_ROWS)
    gate_bwd_kernel(int64_t rows, int64_t cols, int dim, const T *g, const float *A_log, const float *dt_bias,
                    const float *dy, T *dg, float *ws) {
    __shared__ float part[2][GATE_ROWS][32 * E];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t cv = (int64_t)blockIdx.x * 32 + tx, c0 = cv * E, n = gridDim.y, slice = blockIdx.y;
    const bool col_ok = c0 < cols;
    float negA[E], bias[E], s1[E], s2[E];
#pragma unroll
    for (int j = 0; j < E; j++) {
        negA[j] = col_ok ? -expf(A_log[(c0 + j) / dim]) : 0.0f;
        bias[j] = col_ok && dt_bias ? dt_bias[c0 + j] : 0.0f;
        s1[j] = s2[j] = 0.0f;
    }
    const int64_t r1 = rewy_gate_slice_start(rows, slice + 1, n);
    for (int64_t r = rewy_gate_slice_start(rows, slice, n) + ty; col_ok && r < r1; r += GATE_ROWS) {
        const size_t e0 = (size_t)r * (size_t)cols + (size_t)c0;
        const GateVec<T, E> x = *reinterpret_cast<const GateVec<T, E> *>(g + e0);
        const GateVec<float, E> d = *reinterpret_cast<const GateVec<float, E> *>(dy + e0);
        GateVec<T, E> out;
#pragma unroll
        for (int j = 0; j < E; j++) {
            const float xb = ld(&x.e[j]) + bias[j];
            const float gd = d.e[j] * negA[j] * rewy_softplus20_grad(xb);
            st(&out.e[j], gd);
            s1[j] += gd;
            s2[j] += d.e[j] * (negA[j] * rewy_softplus20(xb));
        }
        *reinterpret_cast<GateVec<T, E> *>(dg + e0) = out;
    }
#pragma unroll
    for (int j = 0; j < E; j++) {
        part[0][ty][tx * E + j] = s1[j];
        part[1][ty][tx * E + j] = s2[j];
    }
    __syncthreads();
    if (ty < 2 && col_ok) {   /* warp 0: Σ dg, warp 1: Σ dy·y, the 8 row lanes in order */
#pragma unroll
        for (int j = 0; j < E; j++) {
            float s = 0.0f;
            for (int w = 0; w < GATE_ROWS; w++) s += part[ty][w][tx * E + j];
            ws[((size_t)ty * (size_t)n + (size_t)slice) * (size_t)cols + (size_t)c0 + j] = s;
        }
    }
}

__global__ void __launch_bounds__(GATE_THREADS)
    gate_sum_kernel(int64_t cols, int dim, int64_t n, const float *ws, float *dA_log, float *ddt_bias) {
    __shared__ float red[GATE_THREADS];
    const int h = blockIdx.x, tid = threadIdx.x;
    float sa = 0.0f;
    for (int k = tid; k < dim; k += GATE_THREADS) {
        const size_t c = (size_t)h * (size_t)dim + (size_t)k;
        float a = 0.0f, b = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            a += ws[(size_t)i * (size_t)cols + c];
            b += ws[((size_t)n + (size_t)i) * (size_t)cols + c];
        }
        if (ddt_bias) ddt_bias[c] = a;
        sa += b;
    }
    red[tid] = sa;
    __syncthreads();
    for (int m = GATE_THREADS / 2; m > 0; m >>= 1) {
        if (tid < m) red[tid] += red[tid + m];
        __syncthreads();
    }
    if (tid == 0 && dA_log) dA_log[h] = red[0];
}

/* 4 elements a thread where the columns are a multiple of 4 and every array is aligned for its vectors */
static bool gate_vec4(int64_t cols, size_t el, const void *g, const void *y, const void *dy, const void *dg,
                      const void *dt_bias) {
    const uintptr_t a16 = ((uintptr_t)y | (uintptr_t)dy | (uintptr_t)dt_bias) & 15u;
    const uintptr_t ag = ((uintptr_t)g | (uintptr_t)dg) & (4 * el - 1);
    return cols % 4 == 0 && !a16 && !ag;
}

} // namespace rewy_cuda

using namespace rewy_cuda;

/* rewy_backend_ops.gate for the CUDA backend (arguments validated by api.c). */
rewy_status rewy_cuda_gate(rewy_dtype dtype, int64_t rows, int heads, int dim, const void *g, const float *A_log,
                           const float *dt_bias, float *y, const float *dy, void *dg, float *dA_log, float *ddt_bias,
                           float *ws, void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    const int64_t cols = (int64_t)heads * dim;
    cudaError_t e = with_dtype(dtype, [&](auto t) {
        using T = decltype(t);
        const bool v4 = gate_vec4(cols, sizeof(T), g, y, dy, dg, dt_bias);
        auto run = [&](auto ev) {
            constexpr int E = decltype(ev)::value;
            if (!ws) {   /* the forward (the backward always has its scratch) */
                const int64_t nvec = rows * cols / E, blocks = (nvec + GATE_THREADS - 1) / GATE_THREADS;
                gate_fwd_kernel<T, E><<<(unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), GATE_THREADS, 0, s>>>(
                    nvec, cols, dim, (const T *)g, A_log, dt_bias, y);
                return cudaGetLastError();
            }
            const int64_t n = rewy_gate_slices(rows), ncv = (cols + E - 1) / E;
            if ((ncv + 31) / 32 > INT32_MAX) return cudaErrorInvalidConfiguration;   /* grid.x: reported, not wrapped */
            const dim3 grid((unsigned)((ncv + 31) / 32), (unsigned)n);
            gate_bwd_kernel<T, E><<<grid, 32 * GATE_ROWS, 0, s>>>(rows, cols, dim, (const T *)g, A_log, dt_bias, dy,
                                                                  (T *)dg, ws);
            gate_sum_kernel<<<heads, GATE_THREADS, 0, s>>>(cols, dim, n, ws, dA_log, ddt_bias);
            return cudaGetLastError();
        };
        return v4 ? run(std::integral_constant<int, 4>{}) : run(std::integral_constant<int, 1>{});
    });
    return e == cudaSuccess ? REWY_OK : REWY_ERR_BACKEND;
}
