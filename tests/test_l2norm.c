/* test_l2norm.c: rewy_l2norm_forward / _backward on the CPU backend against the fp64 formula
 * (rewy.h): the forward from x, the backward from y and r, for fp32/bf16/fp16/fp64, odd widths, in place,
 * and near-zero rows; under ASan too. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rewy.h"
#include "check/rng.h"
#include "testutil.h"

static size_t esize(rewy_dtype t) { return t == REWY_F64 ? 8 : t == REWY_F32 ? 4 : 2; }

static void to_double(rewy_dtype t, const void *p, size_t n, double *out) {
    if (t == REWY_F64) { memcpy(out, p, n * 8); return; }
    float *f = malloc(n * sizeof *f + 1);
    rewy_convert(REWY_F32, f, t, p, n);
    for (size_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
}

/* n values drawn as doubles, stored as t (via rewy_convert for bf16/fp16), and the stored values back as doubles */
static void *make(rewy_dtype t, size_t n, rng *r, double *back) {
    void *p = malloc(n * esize(t) + 1);
    float *f = malloc(n * sizeof *f + 1);
    for (size_t i = 0; i < n; i++) f[i] = (float)(2.0 * rng_uniform(r) - 1.0) * (i < 8 ? 1e-4f : 1.0f);
    if (t == REWY_F64)
        for (size_t i = 0; i < n; i++) ((double *)p)[i] = f[i];
    else
        rewy_convert(t, p, REWY_F32, f, n);
    to_double(t, p, n, back);
    free(f);
    return p;
}

int main(void) {
    test_counts tc = {0, 0};
    rng r = {12345};
    const rewy_dtype types[] = {REWY_F32, REWY_BF16, REWY_F16, REWY_F64};
    const double tol[] = {2e-6, 8e-3, 1e-3, 1e-12};
    const int dims[] = {1, 8, 33, 128, 257};
    for (int ti = 0; ti < 4; ti++)
        for (int di = 0; di < 5; di++) {
            const rewy_dtype t = types[ti];
            const int dim = dims[di];
            const int64_t rows = 19;
            const size_t n = (size_t)rows * dim;
            double *x = malloc(n * 8), *dy = malloc(n * 8), *y = malloc(n * 8), *dx = malloc(n * 8), *ref = malloc(n * 8);
            void *xs = make(t, n, &r, x), *dys = make(t, n, &r, dy), *out = malloc(n * esize(t));
            const float eps = 1e-6f;
            /* fp64 references; dx's error relative to ‖r·dy‖, the size of its terms (dim 1 cancels them to ≈ 0) */
            double ey = 0, ny = 0, edx = 0, ndx = 0;
            double rstd[19];   /* float [rows], or double [rows] for REWY_F64 */
            void *ys = malloc(n * esize(t));
            rewy_status s1 = rewy_l2norm_forward(REWY_BACKEND_CPU, t, rows, dim, eps, xs, ys, rstd, NULL);
            to_double(t, ys, n, y);
            rewy_status s2 = rewy_l2norm_backward(REWY_BACKEND_CPU, t, rows, dim, ys, rstd, dys, out, NULL);
            to_double(t, out, n, dx);
            for (int64_t row = 0; row < rows; row++) {
                double ss = 0, sd = 0;
                for (int j = 0; j < dim; j++) {
                    ss += x[row * dim + j] * x[row * dim + j];
                    sd += x[row * dim + j] * dy[row * dim + j];
                }
                const double rs = 1 / sqrt(ss + (double)eps);
                for (int j = 0; j < dim; j++) {
                    const size_t i = (size_t)row * dim + j;
                    const double yr = x[i] * rs, dr = rs * dy[i] - rs * rs * rs * x[i] * sd;
                    ey += (y[i] - yr) * (y[i] - yr); ny += yr * yr;
                    edx += (dx[i] - dr) * (dx[i] - dr); ndx += rs * dy[i] * rs * dy[i];
                    ref[i] = yr;
                }
            }
            CHECK(&tc, s1 == REWY_OK && s2 == REWY_OK, "status %d %d", s1, s2);
            CHECK(&tc, sqrt(ey / ny) <= tol[ti], "dtype %d dim %d: y rel %.2e", t, dim, sqrt(ey / ny));
            CHECK(&tc, sqrt(edx / ndx) <= 2 * tol[ti], "dtype %d dim %d: dx rel %.2e", t, dim, sqrt(edx / ndx));
            /* in place: y over x gives the same bits as out of place */
            void *again = malloc(n * esize(t));
            rewy_l2norm_forward(REWY_BACKEND_CPU, t, rows, dim, eps, xs, again, NULL, NULL);
            rewy_l2norm_forward(REWY_BACKEND_CPU, t, rows, dim, eps, xs, xs, NULL, NULL);
            CHECK(&tc, memcmp(again, xs, n * esize(t)) == 0, "dtype %d dim %d: in place differs", t, dim);
            free(again); free(ys); free(x); free(dy); free(y); free(dx); free(ref); free(xs); free(dys); free(out);
        }
    /* errors */
    float buf[8] = {0}, rs[2] = {1, 1};
    CHECK(&tc, rewy_l2norm_forward(REWY_BACKEND_CPU, REWY_F32, 2, 0, 1e-6f, buf, buf, rs, NULL) == REWY_ERR_BAD_SHAPE, "dim 0");
    CHECK(&tc, rewy_l2norm_forward(REWY_BACKEND_CPU, REWY_F32, INT64_MAX, 4, 1e-6f, buf, buf, rs, NULL) == REWY_ERR_BAD_SHAPE,
          "rows*dim beyond size_t");
    CHECK(&tc, rewy_l2norm_forward(REWY_BACKEND_CPU, REWY_F32, 2, 4, INFINITY, buf, buf, rs, NULL) == REWY_ERR_BAD_SHAPE, "eps inf");
    CHECK(&tc, rewy_l2norm_backward(REWY_BACKEND_CPU, REWY_F32, 2, 4, buf, rs, NULL, buf, NULL) == REWY_ERR_NULL_POINTER,
          "dy NULL");
    CHECK(&tc, rewy_l2norm_backward(REWY_BACKEND_CPU, REWY_F32, 2, 4, buf, NULL, buf, buf, NULL) == REWY_ERR_NULL_POINTER,
          "rstd NULL in the backward");
    CHECK(&tc, rewy_l2norm_forward(REWY_BACKEND_CPU, REWY_F32, 0, 4, 1e-6f, NULL, NULL, NULL, NULL) == REWY_OK, "rows 0");
    return test_finish(&tc);
}
