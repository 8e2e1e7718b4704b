/* gdn_cpu.c: rewy from C. One Gated DeltaNet (GDN) forward and backward on the CPU in bf16,
 * the inputs made as floats and converted with rewy_convert. Build and run against an install:
 *
 *     make install PREFIX=$HOME/.local                  (in the rewy repository)
 *     export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig
 *     cc -std=c11 gdn_cpu.c -o gdn_cpu $(pkg-config --cflags --libs rewy) && ./gdn_cpu
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#include <rewy.h>

enum { B = 2, T = 300, H = 4, K = 64, V = 64 };

/* 64-byte aligned memory (the library wants element alignment, 16 B for workspaces) */
static void *alloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* uniform in [lo, hi), from a small fixed-seed generator */
static float uniform(uint32_t *seed, float lo, float hi) {
    *seed = *seed * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
}

/* n bf16 values: drawn as floats in [lo, hi), then rounded with rewy_convert. With unit
 * keys (unit = 1) each entry is ±1/√K, so every key has length 1 and the delta rule's
 * erase I − β k kᵀ stays a contraction. */
static uint16_t *bf16_input(size_t n, float lo, float hi, int unit, uint32_t *seed) {
    float *x = alloc(n * sizeof *x);
    uint16_t *h = alloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        x[i] = unit ? (uniform(seed, -1, 1) < 0 ? -0.125f : 0.125f) : uniform(seed, lo, hi);
    rewy_status s = rewy_convert(REWY_BF16, h, REWY_F32, x, n);
    if (s != REWY_OK) { fprintf(stderr, "rewy_convert: %s\n", rewy_strerror(s)); exit(1); }
    free(x);
    return h;
}

/* Prints the mean |x| of n floats and one of them; returns how many are not finite. */
static size_t summary(const char *name, const float *x, size_t n) {
    double sum = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += !isfinite(x[i]);
        sum += x[i] < 0 ? -x[i] : x[i];
    }
    printf("%-6s mean |x| %.4e   x[%zu] %+.4e\n", name, sum / (double)n, n / 3, x[n / 3]);
    return bad;
}

/* The same for n bf16 values, widened to float with rewy_convert. */
static size_t bf16_summary(const char *name, const uint16_t *h, size_t n) {
    float *x = alloc(n * sizeof *x);
    rewy_status s = rewy_convert(REWY_F32, x, REWY_BF16, h, n);
    if (s != REWY_OK) { fprintf(stderr, "rewy_convert: %s\n", rewy_strerror(s)); exit(1); }
    size_t bad = summary(name, x, n);
    free(x);
    return bad;
}

int main(void) {
    rewy_config cfg = {0};          /* zero: chunk 64, scale K^-1/2, policy R, the ReWY backward */
    cfg.op = REWY_OP_GDN;
    cfg.backend = REWY_BACKEND_CPU;
    cfg.dtype = REWY_BF16;
    cfg.B = B; cfg.T = T; cfg.H = H; cfg.K = K; cfg.V = V;

    size_t saved_bytes, fwd_ws, bwd_ws;
    rewy_status s = rewy_saved_size(&cfg, &saved_bytes);
    if (s == REWY_OK) s = rewy_fwd_workspace_size(&cfg, &fwd_ws);
    if (s == REWY_OK) s = rewy_bwd_workspace_size(&cfg, &bwd_ws);
    if (s != REWY_OK) { fprintf(stderr, "size query: %s\n", rewy_strerror(s)); return 1; }

    const size_t nk = (size_t)B * T * H * K, nv = (size_t)B * T * H * V, nh = (size_t)B * T * H;
    uint32_t seed = 1;
    uint16_t *q = bf16_input(nk, -1, 1, 0, &seed), *k = bf16_input(nk, 0, 0, 1, &seed);
    uint16_t *v = bf16_input(nv, -1, 1, 0, &seed), *beta = bf16_input(nh, 0.2f, 0.9f, 0, &seed);
    uint16_t *dO = bf16_input(nv, -1, 1, 0, &seed);
    float *g = alloc(nh * sizeof *g);                   /* GDN's log decay per token and head */
    for (size_t i = 0; i < nh; i++) g[i] = uniform(&seed, -0.1f, 0);
    uint16_t *o = alloc(nv * 2), *dq = alloc(nk * 2), *dk = alloc(nk * 2), *dv = alloc(nv * 2);
    uint16_t *dbeta = alloc(nh * 2);
    float *dg = alloc(nh * sizeof *dg), *ht = alloc((size_t)B * H * K * V * sizeof *ht);
    void *saved = alloc(saved_bytes), *ws = alloc(fwd_ws > bwd_ws ? fwd_ws : bwd_ws);

    rewy_fwd_params f = {.cfg = cfg, .q = q, .k = k, .v = v, .g = g, .beta = beta,
                         .o = o, .ht = ht, .saved = saved, .saved_bytes = saved_bytes,
                         .workspace = ws, .workspace_bytes = fwd_ws};
    s = rewy_forward(&f);
    if (s != REWY_OK) {
        char why[256] = "";
        rewy_validate_fwd(&f, why, sizeof why);        /* names the argument that failed */
        fprintf(stderr, "rewy_forward: %s: %s\n", rewy_strerror(s), why);
        return 1;
    }

    rewy_bwd_params b = {.cfg = cfg, .q = q, .k = k, .v = v, .g = g, .beta = beta,
                         .saved = saved, .saved_bytes = saved_bytes, .do_ = dO,
                         .dq = dq, .dk = dk, .dv = dv, .dg = dg, .dbeta = dbeta,
                         .workspace = ws, .workspace_bytes = bwd_ws};
    s = rewy_backward(&b);
    if (s != REWY_OK) {
        char why[256] = "";
        rewy_validate_bwd(&b, why, sizeof why);
        fprintf(stderr, "rewy_backward: %s: %s\n", rewy_strerror(s), why);
        return 1;
    }

    printf("rewy %s: GDN forward and backward, B=%d T=%d H=%d K=%d V=%d, bf16 on the CPU\n",
           rewy_version(), B, T, H, K, V);
    size_t bad = bf16_summary("o", o, nv) + summary("ht", ht, (size_t)B * H * K * V) +
                 bf16_summary("dq", dq, nk) + bf16_summary("dk", dk, nk) + bf16_summary("dv", dv, nv) +
                 summary("dg", dg, nh) + bf16_summary("dbeta", dbeta, nh);
    printf("%s\n", bad ? "FAILED: values that are not finite" : "all finite");

    void *bufs[] = {q, k, v, beta, dO, g, o, dq, dk, dv, dbeta, dg, ht, saved, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    return bad ? 1 : 0;
}
