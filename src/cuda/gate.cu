/* gate.cu: rewy_gate_forward / _backward on the GPU, FLA's in-kernel gate as a pass of its own (rewy.h
 * gives the formulas):
 *   forward   y = −exp(A_log[h]) · softplus(x),  x = g + dt_bias[h][k]
 *   backward  dg = dy · (−exp(A_log[h])) · σ(x);  dA_log[h] = Σ dy·y,  ddt_bias[h][k] = Σ_rows dg (fp32)
 * In PyTorch the gate of a [B,T,HV,K] KDA or GDN2 layer took about twenty elementwise and reduction passes
 * over fp32 copies of it, forward and backward (1.1 ms a layer call in FLA's KDA model at B = 4, T = 4096,
 * H200). Here: one pass forward (read g, write y), one backward (read g and dy, write dg) plus a small pass
 * over the partial sums.
 *   gate_fwd_kernel    E elements a thread (E = 4: one 8- or 16-byte load of g, a 16-byte store of y).
 *   gate_bwd_kernel    a block owns CW·E columns (CW = 32, fewer for narrow rows) and one row slice
 *                      (rewy_gate_slices: a count fixed by the shape): 256 / CW row lanes stride its rows, each
 *                      thread keeping its columns' sums; the row lanes' sums are added in order into the
 *                      slice's row of the scratch.
 *   gate_sum_kernel    one block a head: each column's slices in parts, each part and then the parts in
 *                      order, then the head's columns (a fixed tree) for dA_log. Every sum has an order fixed
 *                      by the shape: results repeat bit for bit.
 * E = 1 where the columns are not a multiple of 4 or a pointer is not aligned for the vectors. The plain
 * reference: src/cpu/gate.c. */
#include "common.cuh"
#include "cuda_backend.h"
#include "backend.h"
#include "gates.h"

namespace rewy_cuda {

constexpr int GATE_THREADS = 256;

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

/* A block: CW column vectors (32, or the power of two ≥ the row's vectors where a row has fewer: GDN's gate is HV
 * columns wide, and at 32 its blocks left 28 of 32 lanes idle and walked each slice's rows 8 at a time, 23 µs a
 * call at HV = 16, B·T = 16384) × GATE_THREADS / CW row lanes, which stride the slice's rows; then each column's
 * row lanes are added in order into the slice's row of the scratch. */
template <class T, int E>
__global__ void __launch_bounds__(GATE_THREADS)
    gate_bwd_kernel(int64_t rows, int64_t cols, int dim, int cw, const T *g, const float *A_log, const float *dt_bias,
                    const float *dy, T *dg, float *ws) {
    __shared__ float part[2][GATE_THREADS * E]; /* [table][row lane][cw · E] */
    const int tx = threadIdx.x % cw, ty = threadIdx.x / cw, nrl = GATE_THREADS / cw;
    const int64_t cv = (int64_t)blockIdx.x * cw + tx, c0 = cv * E, n = gridDim.y, slice = blockIdx.y;
    const bool col_ok = c0 < cols;
    float negA[E], bias[E], s1[E], s2[E];
#pragma unroll
    for (int j = 0; j < E; j++) {
        negA[j] = col_ok ? -expf(A_log[(c0 + j) / dim]) : 0.0f;
        bias[j] = col_ok && dt_bias ? dt_bias[c0 + j] : 0.0f;
        s1[j] = s2[j] = 0.0f;
    }
    const int64_t r1 = rewy_gate_slice_start(rows, slice + 1, n);
    for (int64_t r = rewy_gate_slice_start(rows, slice, n) + ty; col_ok && r < r1; r += nrl) {
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
        part[0][(ty * cw + tx) * E + j] = s1[j];
        part[1][(ty * cw + tx) * E + j] = s2[j];
    }
    __syncthreads();
    /* row lanes 0 and 1 add up Σ dg and Σ dy·y: each its column vector's row lanes, in order */
    if (ty < 2 && col_ok) {
#pragma unroll
        for (int j = 0; j < E; j++) {
            float s = 0.0f;
            for (int w = 0; w < nrl; w++) s += part[ty][(w * cw + tx) * E + j];
            ws[((size_t)ty * (size_t)n + (size_t)slice) * (size_t)cols + (size_t)c0 + j] = s;
        }
    }
}

/* One block a head: each column's n slices in P parts of consecutive slices (P threads a column, P · dim ≤
 * GATE_THREADS; one thread summing GDN's 128 slices alone took 31 µs a call), each part in order, then the parts
 * in order; then the head's columns (a fixed tree) for dA_log. */
__global__ void __launch_bounds__(GATE_THREADS)
    gate_sum_kernel(int64_t cols, int dim, int64_t n, const float *ws, float *dA_log, float *ddt_bias) {
    __shared__ float red[GATE_THREADS], pa[GATE_THREADS], pb[GATE_THREADS];
    const int h = blockIdx.x, tid = threadIdx.x;
    const int64_t pmax = dim >= GATE_THREADS ? 1 : GATE_THREADS / dim;
    const int P = (int)(pmax < n ? pmax : n), cpr = GATE_THREADS / P; /* parts; columns a round */
    float sa = 0.0f;
    for (int k0 = 0; k0 < dim; k0 += cpr) {
        const int k = k0 + tid % cpr, part = tid / cpr;
        float a = 0.0f, b = 0.0f;
        if (k < dim && part < P) {
            const size_t c = (size_t)h * (size_t)dim + (size_t)k;
            for (int64_t i = n * part / P; i < n * (part + 1) / P; i++) {
                a += ws[(size_t)i * (size_t)cols + c];
                b += ws[((size_t)n + (size_t)i) * (size_t)cols + c];
            }
        }
        __syncthreads(); /* the previous round's parts are read */
        pa[tid] = a;
        pb[tid] = b;
        __syncthreads();
        if (tid < cpr && k0 + tid < dim) {
            float x = 0.0f, y = 0.0f;
            for (int q = 0; q < P; q++) {
                x += pa[q * cpr + tid];
                y += pb[q * cpr + tid];
            }
            if (ddt_bias) ddt_bias[(size_t)h * (size_t)dim + (size_t)(k0 + tid)] = x;
            sa += y;
        }
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
            int cw = 1; /* column vectors a block: 32, or the power of two that holds a narrower row */
            while (cw < 32 && cw < ncv) cw *= 2;
            if ((ncv + cw - 1) / cw > INT32_MAX) return cudaErrorInvalidConfiguration;   /* grid.x: reported, not wrapped */
            const dim3 grid((unsigned)((ncv + cw - 1) / cw), (unsigned)n);
            gate_bwd_kernel<T, E><<<grid, GATE_THREADS, 0, s>>>(rows, cols, dim, cw, (const T *)g, A_log, dt_bias, dy,
                                                                (T *)dg, ws);
            gate_sum_kernel<<<heads, GATE_THREADS, 0, s>>>(cols, dim, n, ws, dA_log, ddt_bias);
            return cudaGetLastError();
        };
        return v4 ? run(std::integral_constant<int, 4>{}) : run(std::integral_constant<int, 1>{});
    });
    return e == cudaSuccess ? REWY_OK : REWY_ERR_BACKEND;
}
