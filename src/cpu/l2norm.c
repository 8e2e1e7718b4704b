/* l2norm.c: rewy_l2norm_forward / _backward on the CPU (the row-wise normalisation FLA fuses
 * into its kernels as use_qk_l2norm_in_kernel; rewy.h gives the formulas). One row at a time,
 * rows in parallel; the sums in fp32 like the CUDA kernels (fp64 for REWY_F64).
 *   forward   y = x · r,  r = 1 / sqrt(Σ x² + eps)          (r kept for the backward)
 *   backward  dx = r · (dy − y · (y · dy))                   (from y and r: the caller keeps y) */
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "dtype.h"
#include "cpu/chunk.h"

static void l2norm_f64(int64_t rows, int dim, double eps, const double *x, double *rstd, const double *dy,
                       double *out) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * dim;
        double s = 0;
        if (dy) {
            for (int j = 0; j < dim; j++) s += xr[j] * dy[r * dim + j];
            for (int j = 0; j < dim; j++)   /* (reads before it writes each element: out may alias x or dy) */
                out[r * dim + j] = rstd[r] * (dy[r * dim + j] - xr[j] * s);
        } else {
            for (int j = 0; j < dim; j++) s += xr[j] * xr[j];
            const double rs = 1.0 / sqrt(s + eps);
            if (rstd) rstd[r] = rs;
            for (int j = 0; j < dim; j++) out[r * dim + j] = xr[j] * rs;
        }
    }
}

/* x is the forward's input, or the backward's y */
rewy_status rewy_cpu_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                            const void *dy, void *out, void *stream) {
    (void)stream;
    if (dtype == REWY_F64) {
        l2norm_f64(rows, dim, eps, (const double *)x, (double *)rstd, (const double *)dy, (double *)out);
        return REWY_OK;
    }
    float *rs_out = (float *)rstd;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const size_t off = (size_t)r * (size_t)dim;
        float s = 0.0f;
        if (dy) {
            for (int j = 0; j < dim; j++) s += rewy_load(x, dtype, off + j) * rewy_load(dy, dtype, off + j);
            const float rs = rs_out[r];
            for (int j = 0; j < dim; j++)
                rewy_store(out, dtype, off + j, rs * (rewy_load(dy, dtype, off + j) - rewy_load(x, dtype, off + j) * s));
        } else {
            for (int j = 0; j < dim; j++) {
                const float xj = rewy_load(x, dtype, off + j);
                s += xj * xj;
            }
            const float rs = 1.0f / sqrtf(s + eps);
            if (rs_out) rs_out[r] = rs;
            for (int j = 0; j < dim; j++) rewy_store(out, dtype, off + j, rewy_load(x, dtype, off + j) * rs);
        }
    }
    return REWY_OK;
}
