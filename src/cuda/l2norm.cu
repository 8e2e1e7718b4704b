/* l2norm.cu: rewy_l2norm_forward / _backward on the GPU, the row-wise normalisation FLA fuses into
 * its kernels (use_qk_l2norm_in_kernel). rewy.h gives the formulas:
 *     forward   y = x · r,  r = rsqrt(Σ x² + eps)     (r to rstd for the backward)
 *     backward  dx = r · (dy − y · (y · dy))          (from y and r, which the caller keeps anyway)
 * Replaces 6 PyTorch kernels forward and about 12 backward, with their fp32 temporaries, by one pass
 * each. Two kernels, the fast one and the plain one side by side:
 *   l2norm_vec_kernel  G lanes per row, 16-byte vectors held in registers: one read of every input,
 *                      one write (rows 16-byte aligned, dim a multiple of the vector, at most 4·32
 *                      vectors; dim = 128 bf16 is 16 lanes of one vector each, 4 rows per thread).
 *   l2norm_kernel      any dim or alignment: a warp per row strides it twice (the second read hits L1).
 * Both sum in fp32 in a fixed order (each lane its elements, then a butterfly), so results repeat bit
 * for bit. Each element is read before it is written by the same lane, so an output may be one of
 * the inputs. In FLA's layers (4 × 4096 × 16 rows of 128, H200) the plain kernel took 75 µs a call,
 * about twice FLA's own l2norm: 2-byte loads keep too few bytes in flight. The plain reference on the
 * CPU: src/cpu/l2norm.c. */
#include "common.cuh"
#include "cuda_backend.h"

namespace rewy_cuda {

constexpr int L2_WARPS = 8;

template <class T>
__global__ void __launch_bounds__(32 * L2_WARPS)
    l2norm_kernel(int64_t rows, int dim, float eps, const T *x, float *rstd, const T *dy, T *out) {
    const int lane = threadIdx.x & 31;
    const int64_t stride = (int64_t)gridDim.x * L2_WARPS;
    for (int64_t r = (int64_t)blockIdx.x * L2_WARPS + threadIdx.x / 32; r < rows; r += stride) {
        const size_t off = (size_t)r * (size_t)dim;
        float s = 0.0f;   /* forward: Σ x²; backward: y · dy (x is y there) */
        for (int j = lane; j < dim; j += 32) {
            const float a = ld(x + off + j);
            s += a * (dy ? ld(dy + off + j) : a);
        }
        for (int m = 16; m; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        if (dy) {
            const float rs = rstd[r];
            for (int j = lane; j < dim; j += 32) st(out + off + j, rs * (ld(dy + off + j) - ld(x + off + j) * s));
        } else {
            const float rs = rsqrtf(s + eps);
            if (rstd && lane == 0) rstd[r] = rs;
            for (int j = lane; j < dim; j += 32) st(out + off + j, ld(x + off + j) * rs);
        }
    }
}

constexpr int L2_THREADS = 256, L2_MAXVEC = 4;

template <class T> union Vec16 {
    uint4 u;
    T e[16 / sizeof(T)];
};

/* G lanes per row; each lane holds L2_MAXVEC 16-byte vectors of inputs: RPT = 4 rows of one vector each
 * (rows of at most G vectors: dim 128 bf16 or fp32), or RPT = 1 row of up to 4. All loads of an iteration
 * are issued before the first sum needs them: 16 to 32 in-flight bytes per element of the thread's share
 * keep enough requests outstanding to approach the DRAM bandwidth (one vector a lane did not: 2.9 TB/s). */
template <class T, int G, int RPT>
__global__ void __launch_bounds__(L2_THREADS)
    l2norm_vec_kernel(int64_t rows, int dim, float eps, const T *x, float *rstd, const T *dy, T *out) {
    constexpr int E = 16 / sizeof(T), NV = L2_MAXVEC / RPT;   /* elements per vector, vectors per row */
    constexpr int WROWS = 32 / G, ROWS = L2_THREADS / 32 * WROWS * RPT;   /* rows per warp slice, per block */
    const int lane = threadIdx.x % G, nvec = dim / E;
    const int64_t first = (int64_t)blockIdx.x * ROWS + threadIdx.x / 32 * WROWS * RPT;   /* the warp's rows */
    /* The loop runs while the warp's first row exists (the same test for all 32 lanes, so every shuffle
     * has all of them); a row past the last one loads nothing and stores nothing. Slice rr of a warp is
     * WROWS consecutive rows, so each load instruction of the warp reads 512 contiguous bytes. */
    for (int64_t w0 = first; w0 < rows; w0 += (int64_t)gridDim.x * ROWS) {
        Vec16<T> a[RPT][NV], d[RPT][NV];
        float s[RPT];   /* forward: Σ x²; backward: y · dy */
        size_t off[RPT];   /* row r's first element, SIZE_MAX past the last row */
        int64_t r[RPT];
#pragma unroll
        for (int rr = 0; rr < RPT; rr++) {
            r[rr] = w0 + rr * WROWS + (threadIdx.x % 32) / G;
            off[rr] = r[rr] < rows ? (size_t)r[rr] * (size_t)dim : SIZE_MAX;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                const int c = lane + i * G;
                if (off[rr] == SIZE_MAX || c >= nvec) continue;
                a[rr][i].u = *reinterpret_cast<const uint4 *>(x + off[rr] + (size_t)c * E);
                if (dy) d[rr][i].u = *reinterpret_cast<const uint4 *>(dy + off[rr] + (size_t)c * E);
            }
        }
#pragma unroll
        for (int rr = 0; rr < RPT; rr++) {
            s[rr] = 0.0f;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                if (off[rr] == SIZE_MAX || lane + i * G >= nvec) continue;
#pragma unroll
                for (int j = 0; j < E; j++) {
                    const float xa = ld(&a[rr][i].e[j]);
                    s[rr] += xa * (dy ? ld(&d[rr][i].e[j]) : xa);
                }
            }
#pragma unroll
            for (int m = G / 2; m; m >>= 1) s[rr] += __shfl_xor_sync(0xffffffffu, s[rr], m);
        }
#pragma unroll
        for (int rr = 0; rr < RPT; rr++) {
            if (off[rr] == SIZE_MAX) continue;
            const float rs = dy ? rstd[r[rr]] : rsqrtf(s[rr] + eps);
            if (!dy && rstd && lane == 0) rstd[r[rr]] = rs;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                const int c = lane + i * G;
                if (c >= nvec) continue;
                Vec16<T> o;
#pragma unroll
                for (int j = 0; j < E; j++)
                    st(&o.e[j], dy ? rs * (ld(&d[rr][i].e[j]) - ld(&a[rr][i].e[j]) * s[rr]) : ld(&a[rr][i].e[j]) * rs);
                *reinterpret_cast<uint4 *>(out + off[rr] + (size_t)c * E) = o.u;
            }
        }
    }
}

/* The vector kernel's lanes per row for (dim, type): one vector a lane up to 32 vectors (the fewest of
 * 4, 8, 16, 32 lanes that hold the row), then 32 lanes of up to L2_MAXVEC; 0 where it does not apply
 * (dim not a multiple of the vector, longer than 32 · L2_MAXVEC vectors, or rows not 16-byte aligned). */
static int l2norm_lanes(int dim, size_t elem, const void *x, const void *dy, const void *out) {
    const size_t E = 16 / elem;
    const uintptr_t mis = ((uintptr_t)x | (uintptr_t)dy | (uintptr_t)out) & 15u;
    if (mis || dim % E) return 0;
    const int nvec = dim / (int)E;
    if (nvec > 32 * L2_MAXVEC) return 0;
    return nvec <= 4 ? 4 : nvec <= 8 ? 8 : nvec <= 16 ? 16 : 32;
}

} // namespace rewy_cuda

using namespace rewy_cuda;

/* rewy_backend_ops.l2norm for the CUDA backend (arguments validated by api.c, rows > 0). */
rewy_status rewy_cuda_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                             const void *dy, void *out, void *stream) {
    auto grid_for = [&](int64_t rows_per_block) {   /* a stride loop covers what a capped grid leaves */
        const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
        return (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    };
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = with_dtype(dtype, [&](auto t) {
        using T = decltype(t);
        const T *xt = (const T *)x, *dyt = (const T *)dy;
        float *rs = (float *)rstd;
        T *ot = (T *)out;
        const int lanes = l2norm_lanes(dim, sizeof(T), x, dy, out);
        const bool one = lanes > 0 && dim / (int)(16 / sizeof(T)) <= lanes;   /* one vector a lane: 4 rows a thread */
        auto vec = [&](auto g, auto rpt) {
            constexpr int G = decltype(g)::value, RPT = decltype(rpt)::value;
            l2norm_vec_kernel<T, G, RPT><<<grid_for(L2_THREADS / G * RPT), L2_THREADS, 0, s>>>(rows, dim, eps, xt, rs,
                                                                                                dyt, ot);
        };
        using I1 = std::integral_constant<int, 1>;
        using I4 = std::integral_constant<int, 4>;
        switch (lanes) {
        case 4: vec(std::integral_constant<int, 4>{}, I4{}); break;
        case 8: vec(std::integral_constant<int, 8>{}, I4{}); break;
        case 16: vec(std::integral_constant<int, 16>{}, I4{}); break;
        case 32:
            if (one) vec(std::integral_constant<int, 32>{}, I4{});
            else vec(std::integral_constant<int, 32>{}, I1{});
            break;
        default: l2norm_kernel<T><<<grid_for(L2_WARPS), 32 * L2_WARPS, 0, s>>>(rows, dim, eps, xt, rs, dyt, ot);
        }
        return cudaGetLastError();
    });
    return e == cudaSuccess ? REWY_OK : REWY_ERR_BACKEND;
}
