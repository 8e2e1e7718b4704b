/* test_gate.c: rewy_gate_forward / _backward on the CPU backend against the fp64 formula (rewy.h), for
 * fp32/bf16/fp16 g, with and without dt_bias, softplus on both sides of its threshold (x > 20), row counts
 * around the slice size (rewy_gate_slices), GDN's dim 1; bitwise repeats; the errors of the entry points.
 * Under ASan too. (The CUDA kernels: tests/python/test_transforms.py on the device.) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rewy.h"
#include "check/rng.h"
#include "testutil.h"

static size_t esize(rewy_dtype t) { return t == REWY_F32 ? 4 : 2; }

static double sp64(double x) { return x > 20 ? x : log1p(exp(x)); }
static double sig64(double x) { return x > 20 ? 1.0 : 1.0 / (1.0 + exp(-x)); }

static double rel(const double *x, const double *ref, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) { e += (x[i] - ref[i]) * (x[i] - ref[i]); r += ref[i] * ref[i]; }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

static void run(test_counts *tc, rng *r, rewy_dtype t, int64_t rows, int heads, int dim, int bias, double tol) {
    const size_t cols = (size_t)heads * dim, n = (size_t)rows * cols;
    float *gf = malloc(n * 4 + 4), *A = malloc(heads * 4), *db = malloc(cols * 4), *dy = malloc(n * 4 + 4);
    float *y = malloc(n * 4 + 4), *dAl = malloc(heads * 4), *ddb = malloc(cols * 4), *dgf = malloc(n * 4 + 4);
    void *g = malloc(n * esize(t) + 4), *dg = malloc(n * esize(t) + 4), *dg2 = malloc(n * esize(t) + 4);
    double *y64 = malloc(n * 8 + 8), *dg64 = malloc(n * 8 + 8), *yc = malloc(n * 8 + 8), *dgc = malloc(n * 8 + 8);
    double *dA64 = calloc(heads, 8), *ddb64 = calloc(cols, 8), *dAc = malloc(heads * 8), *ddbc = malloc(cols * 8);
    for (size_t i = 0; i < n; i++) gf[i] = (float)(8.0 * rng_uniform(r) - 5.0) + (i % 13 == 0 ? 20.0f : 0.0f);
    for (size_t i = 0; i < n; i++) dy[i] = (float)(2.0 * rng_uniform(r) - 1.0);
    for (int h = 0; h < heads; h++) A[h] = (float)log(1.0 + 15.0 * rng_uniform(r));
    for (size_t c = 0; c < cols; c++) db[c] = (float)(rng_uniform(r) - 0.5);
    rewy_convert(t, g, REWY_F32, gf, n);
    rewy_convert(REWY_F32, gf, t, g, n);   /* the values as stored */
    for (size_t i = 0; i < n; i++) {
        const size_t c = i % cols;
        const double negA = -exp((double)A[c / dim]), x = (double)gf[i] + (bias ? db[c] : 0.0);
        y64[i] = negA * sp64(x);
        dg64[i] = dy[i] * negA * sig64(x);
        dA64[c / dim] += dy[i] * y64[i];
        ddb64[c] += dg64[i];
    }
    size_t wsb = 0;
    CHECK(tc, rewy_gate_workspace_size(rows, heads, dim, &wsb) == REWY_OK && wsb > 0, "workspace size");
    float *ws = aligned_alloc(16, (wsb + 15) / 16 * 16);
    rewy_status s1 = rewy_gate_forward(REWY_BACKEND_CPU, t, rows, heads, dim, g, A, bias ? db : NULL, y, NULL);
    rewy_status s2 = rewy_gate_backward(REWY_BACKEND_CPU, t, rows, heads, dim, g, A, bias ? db : NULL, dy, dg, dAl,
                                        ddb, ws, wsb, NULL);
    CHECK(tc, s1 == REWY_OK && s2 == REWY_OK, "gate status %d %d", s1, s2);
    rewy_convert(REWY_F32, dgf, t, dg, n);
    for (size_t i = 0; i < n; i++) { yc[i] = y[i]; dgc[i] = dgf[i]; }
    for (int h = 0; h < heads; h++) dAc[h] = dAl[h];
    for (size_t c = 0; c < cols; c++) ddbc[c] = ddb[c];
    const double ey = rel(yc, y64, n), eg = rel(dgc, dg64, n), eA = rel(dAc, dA64, heads), eb = rel(ddbc, ddb64, cols);
    CHECK(tc, ey <= 1e-6 && eg <= tol && eA <= 1e-5 && (!bias || eb <= 1e-5),
          "dtype %d rows %ld heads %d dim %d bias %d: y %.2e dg %.2e dA_log %.2e ddt_bias %.2e", t, (long)rows, heads,
          dim, bias, ey, eg, eA, eb);
    /* the same bits again, and with the sums not asked for */
    float *dA2 = malloc(heads * 4), *ddb2 = malloc(cols * 4);
    rewy_gate_backward(REWY_BACKEND_CPU, t, rows, heads, dim, g, A, bias ? db : NULL, dy, dg2, dA2, ddb2, ws, wsb, NULL);
    CHECK(tc, !memcmp(dg, dg2, n * esize(t)) && !memcmp(dAl, dA2, heads * 4) && !memcmp(ddb, ddb2, cols * 4),
          "bitwise repeat");
    CHECK(tc, rewy_gate_backward(REWY_BACKEND_CPU, t, rows, heads, dim, g, A, NULL, dy, dg2, NULL, NULL, ws, wsb,
                                 NULL) == REWY_OK, "sums not asked for");
    free(gf); free(A); free(db); free(dy); free(y); free(dAl); free(ddb); free(dgf); free(g); free(dg); free(dg2);
    free(y64); free(dg64); free(yc); free(dgc); free(dA64); free(ddb64); free(dAc); free(ddbc); free(ws); free(dA2);
    free(ddb2);
}

static void errors(test_counts *tc) {
    float g[8] = {0}, A[2] = {0}, y[8];
    _Alignas(16) float ws[4096];
    size_t b = 0;
    const rewy_backend cpu = REWY_BACKEND_CPU;
    CHECK(tc, rewy_gate_workspace_size(2, 2, 2, NULL) == REWY_ERR_NULL_POINTER, "size: NULL");
    CHECK(tc, rewy_gate_workspace_size(-1, 2, 2, &b) == REWY_ERR_BAD_SHAPE, "size: rows < 0");
    CHECK(tc, rewy_gate_workspace_size(2, 0, 2, &b) == REWY_ERR_BAD_SHAPE, "size: heads 0");
    CHECK(tc, rewy_gate_workspace_size(INT64_MAX / 2, 1 << 30, 1 << 30, &b) == REWY_ERR_BAD_SHAPE, "size: overflow");
    CHECK(tc, rewy_gate_workspace_size(0, 2, 2, &b) == REWY_OK && b == 2 * 4 * 4, "size of rows 0: one slice");
    CHECK(tc, rewy_gate_workspace_size(100000, 4, 32, &b) == REWY_OK && b == 2 * 4 * 128 * 128, "size: 128 slices");
    CHECK(tc, rewy_gate_forward(cpu, REWY_F64, 2, 2, 2, g, A, NULL, y, NULL) == REWY_ERR_BAD_DTYPE, "fp64");
    CHECK(tc, rewy_gate_forward(7, REWY_F32, 2, 2, 2, g, A, NULL, y, NULL) == REWY_ERR_BAD_ENUM, "backend");
    CHECK(tc, rewy_gate_forward(cpu, REWY_F32, 2, 2, 2, NULL, A, NULL, y, NULL) == REWY_ERR_NULL_POINTER, "g NULL");
    CHECK(tc, rewy_gate_forward(cpu, REWY_F32, 2, 2, 2, g, NULL, NULL, y, NULL) == REWY_ERR_NULL_POINTER, "A NULL");
    CHECK(tc, rewy_gate_forward(cpu, REWY_F32, 2, 2, 2, (char *)g + 1, A, NULL, y, NULL) == REWY_ERR_MISALIGNED,
          "g misaligned");
    CHECK(tc, rewy_gate_forward(cpu, REWY_F32, 0, 2, 2, NULL, NULL, NULL, NULL, NULL) == REWY_OK, "rows 0");
    CHECK(tc, rewy_gate_backward(cpu, REWY_F32, 2, 2, 2, g, A, NULL, y, g, NULL, NULL, ws, 8, NULL) ==
              REWY_ERR_WORKSPACE, "workspace too small");
    CHECK(tc, rewy_gate_backward(cpu, REWY_F32, 2, 2, 2, g, A, NULL, y, g, NULL, NULL, NULL, 4096, NULL) ==
              REWY_ERR_NULL_POINTER, "workspace NULL");
    CHECK(tc, rewy_gate_backward(cpu, REWY_F32, 2, 2, 2, g, A, NULL, y, g, NULL, NULL, (char *)ws + 4, 4000, NULL) ==
              REWY_ERR_MISALIGNED, "workspace misaligned");
    float dA[2] = {1, 1}, ddb[4] = {1, 1, 1, 1};
    CHECK(tc, rewy_gate_backward(cpu, REWY_F32, 0, 2, 2, NULL, A, NULL, NULL, NULL, dA, ddb, ws, sizeof ws, NULL) ==
                  REWY_OK && dA[0] == 0 && dA[1] == 0 && ddb[3] == 0, "rows 0: the sums are 0");
#ifndef REWY_WITH_CUDA
    CHECK(tc, rewy_gate_forward(REWY_BACKEND_CUDA, REWY_F32, 2, 2, 2, g, A, NULL, y, NULL) == REWY_ERR_BACKEND,
          "no CUDA");
#endif
}

int main(void) {
    test_counts tc = {0, 0};
    rng r = {777};
    const rewy_dtype types[] = {REWY_F32, REWY_BF16, REWY_F16};
    const double tol[] = {1e-6, 8e-3, 1e-3};   /* dg is rounded to the input type */
    const int64_t rows[] = {1, 127, 128, 129, 1000, 20000};
    for (int ti = 0; ti < 3; ti++)
        for (int ri = 0; ri < 6; ri++) {
            run(&tc, &r, types[ti], rows[ri], 3, 5, ri % 2, tol[ti]);
            run(&tc, &r, types[ti], rows[ri], 4, 1, 1, tol[ti]);   /* GDN: [rows][HV] */
        }
    run(&tc, &r, REWY_BF16, 300, 2, 128, 1, 8e-3);
    errors(&tc);
    return test_finish(&tc);
}
