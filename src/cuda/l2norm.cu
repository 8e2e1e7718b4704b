/* l2norm.cu: rewy_l2norm_forward / _backward on the GPU, the row-wise normalisation FLA fuses into
 * its kernels (use_qk_l2norm_in_kernel). rewy.h gives the formulas:
 *     forward   y = x · r,  r = rsqrt(Σ x² + eps)     (r to rstd for the backward)
 *     backward  dx = r · (dy − y · (y · dy))          (from y and r, which the caller keeps anyway)
 * One warp per row: the lanes stride the row summing in fp32, a butterfly gives every lane the sum
 * in a fixed order (bitwise repeatable), then the same lanes read and write their elements again
 * (the row is in L1 by then). Each element is read before it is written by the same lane, so an
 * output may be one of the inputs. Replaces 6 PyTorch kernels forward and about 12 backward, with
 * their fp32 temporaries, by one pass each. The plain reference: src/cpu/l2norm.c. */
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

} // namespace rewy_cuda

using namespace rewy_cuda;

/* rewy_backend_ops.l2norm for the CUDA backend (arguments validated by api.c, rows > 0). */
rewy_status rewy_cuda_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                             const void *dy, void *out, void *stream) {
    const int64_t blocks = (rows + L2_WARPS - 1) / L2_WARPS;
    const unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));   /* a stride loop covers the rest */
    cudaError_t e = with_dtype(dtype, [&](auto t) {
        using T = decltype(t);
        l2norm_kernel<T><<<grid, 32 * L2_WARPS, 0, (cudaStream_t)stream>>>(rows, dim, eps, (const T *)x,
                                                                           (float *)rstd, (const T *)dy, (T *)out);
        return cudaGetLastError();
    });
    return e == cudaSuccess ? REWY_OK : REWY_ERR_BACKEND;
}
