/* l2norm.c: rewy_l2norm_forward / _backward on the CPU (the row-wise normalisation FLA fuses
 * into its kernels as use_qk_l2norm_in_kernel; rewy.h gives the formulas). One row at a time,
 * rows in parallel; the sums in fp32 like the CUDA kernels (fp64 for REWY_F64). */
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "dtype.h"
#include "cpu/chunk.h"

static void l2norm_f64(int64_t rows, int dim, double eps, const double *x, const double *dy, double *out) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim;
        double ss = 0, sd = 0;
        for (int j = 0; j < dim; j++) {
            ss += xr[j] * xr[j];
            if (dy) sd += xr[j] * dy[r * dim + j];
        }
        const double rs = 1.0 / sqrt(ss + eps);
        for (int j = 0; j < dim; j++)   /* (reads before it writes each element: out may alias x or dy) */
            out[r * dim + j] = dy ? rs * dy[r * dim + j] - rs * rs * rs * xr[j] * sd : xr[j] * rs;
    }
}

rewy_status rewy_cpu_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, const void *dy,
                            void *out, void *stream) {
    (void)stream;
    if (dtype == REWY_F64) {
        l2norm_f64(rows, dim, eps, (const double *)x, (const double *)dy, (double *)out);
        return REWY_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)dim;
        float ss = 0.0f, sd = 0.0f;
        for (int j = 0; j < dim; j++) {
            const float xj = rewy_load(x, dtype, off + j);
            ss += xj * xj;
            if (dy) sd += xj * rewy_load(dy, dtype, off + j);
        }
        const float rs = 1.0f / sqrtf(ss + eps);
        for (int j = 0; j < dim; j++) {
            const float xj = rewy_load(x, dtype, off + j);
            rewy_store(out, dtype, off + j, dy ? rs * rewy_load(dy, dtype, off + j) - rs * rs * rs * xj * sd : xj * rs);
        }
    }
    return REWY_OK;
}
