/* variant_time.c: device time of one scalar-gate call (GDN or DeltaNet, bf16, K = V = 128, policy R, ReWY, h0 and
 * the final-state gradient given) under the forced plan choices of the REWY_CUDA_* variables (tests/cuda_force.h),
 * with q, k normalised per token and GDN's gates as FLA's models make them (g = −A·dt, A in [1, 16] per head, dt
 * log-uniform in [0.001, 0.1]): the C-level measurement of a plan variant before it becomes the default (issue 24).
 * Nothing is checked here; test_cuda runs the same forced choices against the fp64 oracle.
 *   make CUDA=1 BUILD=build/cuda-on build/cuda-on/bench/dev/variant_time
 *   REWY_CUDA_CHAIN=2 build/cuda-on/bench/dev/variant_time gdn 4 4096 16
 * Prints the median of 20 timed calls each way (CUDA events around one call) and the mean of 20 calls back to
 * back with one sync (GPU-bound). A fifth argument `once` runs one forward and one backward and nothing else (for ncu's
 * per-kernel times: bench/dev/s22_candidates.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "rewy.h"
#include "cuda_force.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define RK(x) do { rewy_status s_ = (x); if (s_ != REWY_OK) { fprintf(stderr, "%s: %s\n", #x, rewy_strerror(s_)); exit(1); } } while (0)

enum { REPS = 20 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}
static double normal(void) { return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()); }

static uint16_t to_bf16(float x) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static void *dev(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 256));
    return p;
}
/* n bf16 values, rows of `row` elements: Gaussian (normalised per row where norm), or σ(Gaussian) */
static void *bf16_tensor(size_t n, int row, int norm, int sigmoid) {
    uint16_t *h = malloc(n * 2);
    float *x = malloc((size_t)row * sizeof(float));
    for (size_t r = 0; r < n / row; r++) {
        double s = 0.0;
        for (int i = 0; i < row; i++) {
            x[i] = (float)normal();
            if (sigmoid) x[i] = 1.f / (1.f + expf(-x[i]));
            s += (double)x[i] * x[i];
        }
        for (int i = 0; i < row; i++) h[r * row + i] = to_bf16(norm ? (float)(x[i] / sqrt(s)) : x[i]);
    }
    void *d = dev(n * 2);
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    free(x);
    return d;
}
static float *f32_tensor(size_t n, float scale) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = scale * (float)normal();
    float *d = dev(n * sizeof(float));
    CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* median of REPS event-timed calls, then the mean of REPS calls back to back */
#define TIME(label, call)                                                                                              \
    do {                                                                                                               \
        float t[REPS], gb;                                                                                             \
        for (int i = 0; i < 3; i++) RK(call);                                                                          \
        for (int i = 0; i < REPS; i++) {                                                                               \
            CK(cudaEventRecord(e0, 0));                                                                                \
            RK(call);                                                                                                  \
            CK(cudaEventRecord(e1, 0));                                                                                \
            CK(cudaEventSynchronize(e1));                                                                              \
            CK(cudaEventElapsedTime(&t[i], e0, e1));                                                                   \
        }                                                                                                              \
        qsort(t, REPS, sizeof(float), cmp);                                                                            \
        CK(cudaEventRecord(e0, 0));                                                                                    \
        for (int i = 0; i < REPS; i++) RK(call);                                                                       \
        CK(cudaEventRecord(e1, 0));                                                                                    \
        CK(cudaEventSynchronize(e1));                                                                              \
        CK(cudaEventElapsedTime(&gb, e0, e1));                                                                         \
        printf("  %-9s median %.3f ms, GPU-bound %.3f ms\n", label, t[REPS / 2], gb / REPS);                           \
    } while (0)

int main(int argc, char **argv) {
    const int gdn = argc < 2 || strcmp(argv[1], "delta") != 0;
    const int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 4096, H = argc > 4 ? atoi(argv[4]) : 16;
    const int K = 128, V = 128;
    if (B < 1 || T < 1 || H < 1) {
        fprintf(stderr, "usage: variant_time [gdn|delta] [B T H [once|time [A]]]\n");
        return 2;
    }
    rewy_config c;
    memset(&c, 0, sizeof c);
    c.op = gdn ? REWY_OP_GDN : REWY_OP_DELTANET;
    c.backend = REWY_BACKEND_CUDA;
    c.dtype = REWY_BF16;
    c.B = B; c.T = T; c.H = H; c.HV = H; c.K = K; c.V = V;
    c.policy = argc > 6 && strcmp(argv[6], "A") == 0 ? REWY_POLICY_A : REWY_POLICY_R;
    c.bwd_algo = REWY_BWD_REWY;
    const size_t tok = (size_t)B * T, nqk = tok * H * K, nv = tok * H * V, ns = (size_t)B * H * K * V;

    float *g = NULL;
    if (gdn) { /* FLA's GDN init: A = exp(A_log) in [1, 16], dt log-uniform in [0.001, 0.1] */
        float *h = malloc(tok * H * sizeof(float));
        for (size_t t = 0; t < tok; t++)
            for (int i = 0; i < H; i++) {
                const double A = 1.0 + 15.0 * (double)i / (H > 1 ? H - 1 : 1);
                h[t * H + i] = (float)(-A * exp(log(0.001) + uniform() * (log(0.1) - log(0.001))));
            }
        g = dev(tok * H * sizeof(float));
        CK(cudaMemcpy(g, h, tok * H * sizeof(float), cudaMemcpyHostToDevice));
        free(h);
    }
    void *q = bf16_tensor(nqk, K, 1, 0), *k = bf16_tensor(nqk, K, 1, 0), *v = bf16_tensor(nv, V, 0, 0);
    void *beta = bf16_tensor(tok * H, 1, 0, 1), *do_ = bf16_tensor(nv, V, 0, 0);
    float *h0 = f32_tensor(ns, 0.1f), *dht = f32_tensor(ns, 0.1f);
    size_t saved_b, fwd_b, bwd_b;
    RK(forced_sizes(&c, &saved_b, &fwd_b, &bwd_b));

    rewy_fwd_params f;
    memset(&f, 0, sizeof f);
    f.cfg = c;
    f.q = q; f.k = k; f.v = v; f.g = g; f.beta = beta; f.h0 = h0;
    f.o = dev(nv * 2);
    f.ht = dev(ns * sizeof(float));
    f.saved = dev(saved_b); f.saved_bytes = saved_b;
    f.workspace = dev(fwd_b); f.workspace_bytes = fwd_b;

    rewy_bwd_params b;
    memset(&b, 0, sizeof b);
    b.cfg = c;
    b.q = q; b.k = k; b.v = v; b.g = g; b.beta = beta; b.h0 = h0;
    b.saved = f.saved; b.saved_bytes = saved_b;
    b.do_ = do_; b.dht = dht;
    b.dq = dev(nqk * 2); b.dk = dev(nqk * 2); b.dv = dev(nv * 2);
    b.dg = gdn ? dev(tok * H * sizeof(float)) : NULL;
    b.dbeta = dev(tok * H * 2);
    b.dh0 = dev(ns * sizeof(float));
    b.workspace = dev(bwd_b); b.workspace_bytes = bwd_b;

    rewy_test_plan pl;
    const rewy_test_force fo = env_force();
    RK(rewy_test_get_plan(&c, &fo, &pl));
    printf("%s B=%d T=%d H=%d K=V=128 bf16, policy %c: scan_bv %d 8w %d wg %d/%d fuse_output %d wu %d beside %d "
           "bwd_w %d chain %d fwd_chain %d win %d; saved %.1f MiB, ws fwd %.1f / bwd %.1f MiB (the plan's own layout: "
           "saved %.1f, bwd %.1f MiB)\n",
           gdn ? "GDN" : "DeltaNet", B, T, H, c.policy == REWY_POLICY_A ? 'A' : 'R', pl.scan_bv, pl.scan_8w, pl.scan_wg, pl.bwd_scan_wg, pl.fuse_output,
           pl.scan_wu, pl.beside_kkt, pl.bwd_w, pl.chain_bvc, pl.fwd_chain, pl.win, saved_b / 1048576.0, fwd_b / 1048576.0,
           bwd_b / 1048576.0, pl.saved_bytes / 1048576.0, pl.bwd_bytes / 1048576.0);
    if (argc > 5 && strcmp(argv[5], "once") == 0) {
        RK(forced_forward(&f));
        RK(forced_backward(&b));
        CK(cudaDeviceSynchronize());
        return 0;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    TIME("forward", forced_forward(&f));
    TIME("backward", forced_backward(&b));
    CK(cudaDeviceSynchronize());
    return 0;
}
