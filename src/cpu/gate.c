/* gate.c: rewy_gate_forward / _backward on the CPU (FLA's in-kernel gate, rewy.h gives the formulas):
 *   forward   y = −exp(A_log[h]) · softplus(g + dt_bias[h][k])
 *   backward  dg = dy · (−exp(A_log[h])) · σ(g + dt_bias[h][k]);  dA_log, ddt_bias: sums over the rows
 * Rows in parallel for the forward; the backward's sums run per row slice (rewy_gate_slices, a count fixed
 * by the shape), slices in parallel, each into its own row of the scratch, then the slices in order: the
 * same bits for any thread count. The CUDA kernels: src/cuda/gate.cu. */
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "dtype.h"
#include "gates.h"
#include "cpu/chunk.h"

rewy_status rewy_cpu_gate(rewy_dtype dtype, int64_t rows, int heads, int dim, const void *g, const float *A_log,
                          const float *dt_bias, float *y, const float *dy, void *dg, float *dA_log, float *ddt_bias,
                          float *ws, void *stream) {
    (void)stream;
    const int64_t cols = (int64_t)heads * dim;
    if (!ws) {   /* the forward (the backward always has its scratch) */
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            for (int h = 0; h < heads; h++) {
                const float negA = -expf(A_log[h]);
                for (int k = 0; k < dim; k++) {
                    const int64_t c = (int64_t)h * dim + k;
                    const size_t e = (size_t)r * (size_t)cols + (size_t)c;
                    y[e] = negA * rewy_softplus20(rewy_load(g, dtype, e) + (dt_bias ? dt_bias[c] : 0.0f));
                }
            }
        return REWY_OK;
    }
    const int64_t n = rewy_gate_slices(rows);
    float *sdg = ws, *sdy = ws + (size_t)n * (size_t)cols;   /* [slice][column]: Σ dg, Σ dy·y */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float *a = sdg + (size_t)i * (size_t)cols, *b = sdy + (size_t)i * (size_t)cols;
        for (int64_t c = 0; c < cols; c++) a[c] = b[c] = 0.0f;
        for (int64_t r = rewy_gate_slice_start(rows, i, n); r < rewy_gate_slice_start(rows, i + 1, n); r++)
            for (int h = 0; h < heads; h++) {
                const float negA = -expf(A_log[h]);
                for (int k = 0; k < dim; k++) {
                    const int64_t c = (int64_t)h * dim + k;
                    const size_t e = (size_t)r * (size_t)cols + (size_t)c;
                    const float x = rewy_load(g, dtype, e) + (dt_bias ? dt_bias[c] : 0.0f);
                    const float d = dy[e] * negA * rewy_softplus20_grad(x);
                    rewy_store(dg, dtype, e, d);
                    a[c] += d;
                    b[c] += dy[e] * (negA * rewy_softplus20(x));
                }
            }
    }
    for (int h = 0; h < heads; h++) {
        float sa = 0.0f;
        for (int k = 0; k < dim; k++) {
            const int64_t c = (int64_t)h * dim + k;
            float s1 = 0.0f, s2 = 0.0f;
            for (int64_t i = 0; i < n; i++) {
                s1 += sdg[(size_t)i * (size_t)cols + (size_t)c];
                s2 += sdy[(size_t)i * (size_t)cols + (size_t)c];
            }
            if (ddt_bias) ddt_bias[c] = s1;
            sa += s2;
        }
        if (dA_log) dA_log[h] = sa;
    }
    return REWY_OK;
}
