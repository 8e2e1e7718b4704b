/* test_determinism.c: the CUDA backend's results repeat bit for bit (issue 25, item 6).
 *
 * The CUDA path uses no atomics and no order-dependent reductions: every output and gradient is
 * a fixed function of the inputs and the config, whatever the stream, the run or what the buffers
 * held before (FLA's gradients vary from run to run, its issue #889). For every case below, under
 * both saving policies and both pullbacks, forward + backward run four times:
 *
 *   1. on stream s1, outputs, saved buffer and workspaces filled with 0xff bytes first;
 *   2. on a second stream s2 (created with a different priority), filled with 0x5a;
 *   3. on s1 again, filled with 0x00 (an element a kernel forgets to write, or a value read from
 *      an unwritten workspace slot, then differs from run 1);
 *   4. on the legacy default stream (stream = NULL), filled with 0xa5;
 *
 * and runs 2-4 must equal run 1 in every byte of o, ht, dq, dk, dv, dg, dβ, db, dw and dh0.
 * The cases: each operator on packed varlen sequences with grouped heads (bf16), K = V = 128 in
 * fp32 with chunk 32, fp16 with chunk 16, K ≠ V and state_v_first, K = V = 256, and the large
 * benchmark-like grids where the library picks its fused kernels by default. Accuracy is
 * test_cuda's and test_random's; the inputs here only need to be in range.
 *
 * --quick (or REWY_TEST_QUICK=1): the first case only, each operator, policy and pullback, runs 1
 * and 2 only (for compute-sanitizer, which test-cuda runs on every device test). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_force.h" /* the REWY_CUDA_* variants of make test-cuda's loop */
#include "dtype.h"
#include "rewy.h"
#include "testutil.h"

#define MAX_SEQS 8

typedef struct spec {
    const char *name;
    rewy_dtype dt;
    int B, T, H, HV, K, V, chunk, vfirst, h0, dht;
    int nseq, lens[MAX_SEQS];
    int ops;    /* bit per rewy_op */
} spec;

#define ALL_OPS 15
#define SCALAR_OPS 3    /* DeltaNet, GDN: the register chains' default grids */
#define VECTOR_OPS 12   /* KDA, GDN2 */

static const spec specs[] = {
    {"varlen gva", REWY_BF16, 1, 0, 2, 4, 64, 48, 64, 0, 1, 1, 5, {1, 15, 64, 65, 300}, ALL_OPS},
    {"fp32 K128 c32", REWY_F32, 2, 130, 2, 2, 128, 128, 32, 0, 1, 1, 0, {0}, ALL_OPS},
    {"fp16 c16 vfirst", REWY_F16, 1, 100, 1, 2, 100, 60, 16, 1, 0, 1, 0, {0}, ALL_OPS},
    {"K256 T1000", REWY_BF16, 1, 1000, 2, 2, 256, 256, 64, 0, 1, 0, 0, {0}, ALL_OPS},
    {"(4,4096,16) K128", REWY_BF16, 4, 4096, 16, 16, 128, 128, 64, 0, 0, 0, 0, {0}, SCALAR_OPS},
    {"(2,4096,16) K128", REWY_BF16, 2, 4096, 16, 16, 128, 128, 64, 0, 0, 0, 0, {0}, VECTOR_OPS},
    {"(1,8192,16) K64 gva", REWY_BF16, 1, 8192, 8, 16, 64, 64, 64, 0, 1, 1, 0, {0}, ALL_OPS},
};

/* ------------------------------------------------------------------ one problem on the device */

typedef struct named { const char *name; void *p; size_t bytes; } named;

typedef struct problem {
    rewy_config cfg;
    int32_t cu_h[MAX_SEQS + 1];
    int32_t *cu;
    void *q, *k, *v, *beta, *b, *w, *do_;
    float *g, *h0, *dht;
    /* outputs (outs[] names them) and the buffers the library writes besides */
    named outs[10];
    int nouts;
    void *saved, *fws, *bws;
    size_t saved_bytes, fws_bytes, bws_bytes, out_bytes;
    void *allocs[32];
    int nallocs, failed;
} problem;

static void *dalloc(problem *p, size_t bytes) {
    void *x = NULL;
    if (p->nallocs == 32 || cudaMalloc(&x, bytes ? bytes : 1) != cudaSuccess) { p->failed = 1; return NULL; }
    p->allocs[p->nallocs++] = x;
    return x;
}

static void free_problem(problem *p) {
    for (int i = 0; i < p->nallocs; i++) cudaFree(p->allocs[i]);
    p->nallocs = 0;
}

/* xorshift64: cheap values in range (the large cases have 10^8 of them) */
static double uniform(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (double)(*s >> 11) * 0x1.0p-53;
}

/* A device tensor of n elements of type t, each lo + (hi − lo)·u. */
static void *upload(problem *p, size_t n, rewy_dtype t, double lo, double hi, uint64_t *s) {
    size_t es = rewy_dtype_size(t);
    void *h = malloc(n ? n * es : 1);
    void *d = dalloc(p, n * es);
    if (!h) { p->failed = 1; return d; }
    for (size_t i = 0; i < n; i++) rewy_store(h, t, i, (float)(lo + (hi - lo) * uniform(s)));
    if (d && cudaMemcpy(d, h, n * es, cudaMemcpyHostToDevice) != cudaSuccess) p->failed = 1;
    free(h);
    return d;
}

static void add_out(problem *p, const char *name, void *d, size_t bytes) {
    p->outs[p->nouts++] = (named){name, d, bytes};
    p->out_bytes += bytes;
}

/* Inputs and outputs of one spec and operator (shared by its policies and algorithms). */
static int setup(problem *p, const spec *s, rewy_op op, uint64_t seed) {
    memset(p, 0, sizeof *p);
    rewy_config *c = &p->cfg;
    c->op = op; c->backend = REWY_BACKEND_CUDA; c->dtype = s->dt;
    c->B = s->B; c->T = s->T; c->H = s->H; c->HV = s->HV; c->K = s->K; c->V = s->V;
    c->chunk_size = s->chunk; c->state_v_first = s->vfirst;
    int N = s->B;
    if (s->nseq) {
        for (int i = 0; i < s->nseq; i++) p->cu_h[i + 1] = p->cu_h[i] + s->lens[i];
        c->B = 1; c->T = p->cu_h[s->nseq]; c->num_seqs = N = s->nseq;
        p->cu = dalloc(p, sizeof(int32_t) * (size_t)(s->nseq + 1));
        if (p->cu) cudaMemcpy(p->cu, p->cu_h, sizeof(int32_t) * (size_t)(s->nseq + 1), cudaMemcpyHostToDevice);
        c->cu_seqlens = p->cu; c->cu_seqlens_host = p->cu_h;
    }
    const size_t bt = (size_t)c->B * (size_t)c->T, es = rewy_dtype_size(s->dt);
    const size_t nq = bt * (size_t)c->H * (size_t)c->K, nv = bt * (size_t)c->HV * (size_t)c->V;
    const size_t ng = op == REWY_OP_DELTANET ? 0 : op == REWY_OP_GDN ? bt * (size_t)c->HV : bt * (size_t)c->HV * (size_t)c->K;
    const size_t nbeta = op == REWY_OP_GDN2 ? 0 : bt * (size_t)c->HV;
    const size_t nb = op == REWY_OP_GDN2 ? bt * (size_t)c->HV * (size_t)c->K : 0, nw = op == REWY_OP_GDN2 ? nv : 0;
    const size_t ns = (size_t)N * (size_t)c->HV * (size_t)c->K * (size_t)c->V;
    /* q, k rows of about unit norm, v and do of unit scale, gates in the normal range, states × 0.1 */
    const double qk = 1.7320508 / sqrt((double)c->K);
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    p->q = upload(p, nq, s->dt, -qk, qk, &st);
    p->k = upload(p, nq, s->dt, -qk, qk, &st);
    p->v = upload(p, nv, s->dt, -1.7, 1.7, &st);
    p->do_ = upload(p, nv, s->dt, -1.7, 1.7, &st);
    if (ng) p->g = upload(p, ng, REWY_F32, -0.2, -0.001, &st);
    if (nbeta) p->beta = upload(p, nbeta, s->dt, 0.1, 0.9, &st);
    if (nb) { p->b = upload(p, nb, s->dt, 0.1, 0.9, &st); p->w = upload(p, nw, s->dt, 0.1, 0.9, &st); }
    if (s->h0) p->h0 = upload(p, ns, REWY_F32, -0.17, 0.17, &st);
    if (s->dht) p->dht = upload(p, ns, REWY_F32, -0.17, 0.17, &st);

    add_out(p, "o", dalloc(p, nv * es), nv * es);
    add_out(p, "ht", dalloc(p, ns * 4), ns * 4);
    add_out(p, "dq", dalloc(p, nq * es), nq * es);
    add_out(p, "dk", dalloc(p, nq * es), nq * es);
    add_out(p, "dv", dalloc(p, nv * es), nv * es);
    add_out(p, "dh0", dalloc(p, ns * 4), ns * 4);   /* given even without h0: the gradient at a zero state */
    if (ng) add_out(p, "dg", dalloc(p, ng * 4), ng * 4);
    if (nbeta) add_out(p, "dbeta", dalloc(p, nbeta * es), nbeta * es);
    if (nb) { add_out(p, "db", dalloc(p, nb * es), nb * es); add_out(p, "dw", dalloc(p, nw * es), nw * es); }
    /* the uploads (pageable cudaMemcpy on the legacy stream) landed before the non-blocking streams read them */
    if (cudaDeviceSynchronize() != cudaSuccess) p->failed = 1;
    return p->failed;
}

/* The saved buffer and the workspaces of one policy and algorithm (freed by free_buffers). */
static int setup_buffers(problem *p, rewy_policy pol, rewy_bwd_algo algo) {
    p->cfg.policy = pol;
    p->cfg.bwd_algo = algo;
    if (forced_sizes(&p->cfg, &p->saved_bytes, &p->fws_bytes, &p->bws_bytes)) return 1;
    size_t sizes[3] = {p->saved_bytes, p->fws_bytes, p->bws_bytes};
    void **bufs[3] = {&p->saved, &p->fws, &p->bws};
    for (int i = 0; i < 3; i++)
        if (cudaMalloc(bufs[i], sizes[i] ? sizes[i] : 1) != cudaSuccess) { *bufs[i] = NULL; return 1; }
    return 0;
}

static void free_buffers(problem *p) {
    cudaFree(p->saved); cudaFree(p->fws); cudaFree(p->bws);
    p->saved = p->fws = p->bws = NULL;
}

static void *out(const problem *p, const char *name) {
    for (int i = 0; i < p->nouts; i++)
        if (!strcmp(p->outs[i].name, name)) return p->outs[i].p;
    return NULL;
}

/* Forward + backward on `stream`, every buffer the library writes filled with `fill` first;
 * all outputs copied into host (out_bytes). Returns a status, or −1 on a CUDA error. */
static int run(problem *p, cudaStream_t stream, unsigned char fill, unsigned char *host) {
    void *bufs[] = {p->saved, p->fws, p->bws};
    size_t sizes[] = {p->saved_bytes, p->fws_bytes, p->bws_bytes};
    for (int i = 0; i < 3; i++)
        if (sizes[i] && cudaMemsetAsync(bufs[i], fill, sizes[i], stream) != cudaSuccess) return -1;
    for (int i = 0; i < p->nouts; i++)
        if (cudaMemsetAsync(p->outs[i].p, fill, p->outs[i].bytes, stream) != cudaSuccess) return -1;
    rewy_fwd_params f;
    memset(&f, 0, sizeof f);
    f.cfg = p->cfg;
    f.cfg.stream = stream;
    f.q = p->q; f.k = p->k; f.v = p->v; f.g = p->g; f.beta = p->beta; f.b = p->b; f.w = p->w; f.h0 = p->h0;
    f.o = out(p, "o"); f.ht = out(p, "ht");
    f.saved = p->saved; f.saved_bytes = p->saved_bytes; f.workspace = p->fws; f.workspace_bytes = p->fws_bytes;
    rewy_status s = forced_forward(&f);
    if (s != REWY_OK) return (int)s;
    rewy_bwd_params b;
    memset(&b, 0, sizeof b);
    b.cfg = f.cfg;
    b.q = p->q; b.k = p->k; b.v = p->v; b.g = p->g; b.beta = p->beta; b.b = p->b; b.w = p->w; b.h0 = p->h0;
    b.saved = p->saved; b.saved_bytes = p->saved_bytes; b.do_ = p->do_; b.dht = p->dht;
    b.dq = out(p, "dq"); b.dk = out(p, "dk"); b.dv = out(p, "dv"); b.dg = out(p, "dg"); b.dbeta = out(p, "dbeta");
    b.db = out(p, "db"); b.dw = out(p, "dw"); b.dh0 = out(p, "dh0");
    b.workspace = p->bws; b.workspace_bytes = p->bws_bytes;
    s = forced_backward(&b);
    if (s != REWY_OK) return (int)s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return -1;
    for (int i = 0; i < p->nouts; i++) {
        if (cudaMemcpy(host, p->outs[i].p, p->outs[i].bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
        host += p->outs[i].bytes;
    }
    return 0;
}

static const char *op_name(rewy_op op) {
    static const char *const names[] = {"deltanet", "gdn", "kda", "gdn2"};
    return names[op];
}

/* Runs 2-4 of one case against run 1, output by output. first and again: out_bytes of host memory. */
static void one_case(test_counts *tc, problem *p, const spec *s, rewy_policy pol, rewy_bwd_algo algo, int quick,
                     cudaStream_t s1, cudaStream_t s2, unsigned char *first, unsigned char *again) {
    char desc[160];
    snprintf(desc, sizeof desc, "%s %s policy %s %s", op_name(p->cfg.op), s->name,
             pol == REWY_POLICY_A ? "A" : "R", algo == REWY_BWD_WY ? "WY" : "ReWY");
    int rc = setup_buffers(p, pol, algo);
    CHECK(tc, rc == 0, "%s: saved buffer or workspace: size query or allocation failed", desc);
    if (rc) { free_buffers(p); return; }
    /* --quick: the first two (the sanitizers look for memory errors and races, not repeats) */
    const struct { cudaStream_t st; unsigned char fill; const char *what; } runs[4] = {
        {s1, 0xff, "s1"}, {s2, 0x5a, "a second stream"}, {s1, 0x00, "s1 again"}, {NULL, 0xa5, "the default stream"}};
    const int nruns = quick ? 2 : 4;
    int failed_before = tc->failed;
    rc = run(p, runs[0].st, runs[0].fill, first);
    CHECK(tc, rc == 0, "%s: first run returned %d (%s)", desc, rc,
          rc > 0 ? rewy_strerror((rewy_status)rc) : cudaGetErrorString(cudaGetLastError()));
    for (int r = 1; r < nruns && rc == 0; r++) {
        rc = run(p, runs[r].st, runs[r].fill, again);
        CHECK(tc, rc == 0, "%s: run on %s returned %d (%s)", desc, runs[r].what, rc,
              rc > 0 ? rewy_strerror((rewy_status)rc) : cudaGetErrorString(cudaGetLastError()));
        if (rc) break;
        size_t off = 0;
        for (int i = 0; i < p->nouts; i++) {
            const named *o = &p->outs[i];
            size_t ndiff = 0, first_diff = 0;
            if (memcmp(first + off, again + off, o->bytes) != 0)
                for (size_t j = 0; j < o->bytes; j++)
                    if (first[off + j] != again[off + j] && !ndiff++) first_diff = j;
            CHECK(tc, ndiff == 0, "%s: %s on %s differs from the first run in %zu bytes (first at byte %zu of %zu)",
                  desc, o->name, runs[r].what, ndiff, first_diff, o->bytes);
            off += o->bytes;
        }
    }
    printf("  %-52s %s\n", desc, tc->failed != failed_before ? "DIFFERS" : quick ? "bitwise equal in 2 runs"
                                                                                : "bitwise equal in 4 runs");
    free_buffers(p);
}

int main(int argc, char **argv) {
    int quick = test_quick() || (argc > 1 && strcmp(argv[1], "--quick") == 0);
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "test_determinism: no CUDA device\n");
        return 1;
    }
    if (!rewy_has_cuda()) { fprintf(stderr, "test_determinism: library built without CUDA\n"); return 1; }
    printf("test_determinism on %s (sm_%d%d), %s\n", prop.name, prop.major, prop.minor, quick ? "quick" : "full");
    test_counts tc = {0, 0};
    int lo = 0, hi = 0;
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    cudaStream_t s1 = NULL, s2 = NULL;
    CHECK(&tc, cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess &&
               cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, hi) == cudaSuccess, "streams");
    int ncases = 0;
    static problem p;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        if (quick && i > 0) continue;
        for (int op = 0; op < 4; op++) {
            if (!(specs[i].ops >> op & 1)) continue;
            int rc = setup(&p, &specs[i], (rewy_op)op, 1000 + 16 * i + (size_t)op);
            CHECK(&tc, rc == 0, "%s %s: setup failed (allocation or copy)", op_name((rewy_op)op), specs[i].name);
            /* pinned: the large cases copy a few GB back in all */
            unsigned char *first = NULL, *again = NULL;
            if (!rc) {
                int hrc = cudaMallocHost((void **)&first, p.out_bytes) != cudaSuccess ||
                          cudaMallocHost((void **)&again, p.out_bytes) != cudaSuccess;
                CHECK(&tc, hrc == 0, "%s %s: host allocation failed", op_name((rewy_op)op), specs[i].name);
                rc = hrc;
            }
            for (int pol = 0; pol < 2 && !rc; pol++)
                for (int algo = 0; algo < 2; algo++) {
                    one_case(&tc, &p, &specs[i], (rewy_policy)pol, (rewy_bwd_algo)algo, quick, s1, s2, first,
                             again);
                    ncases++;
                }
            cudaFreeHost(first);
            cudaFreeHost(again);
            free_problem(&p);
        }
    }
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    CHECK(&tc, cudaDeviceSynchronize() == cudaSuccess, "CUDA error at the end");
    printf("test_determinism: %d cases (x %d runs: %s, differently filled buffers)\n", ncases, quick ? 2 : 4,
           quick ? "two streams" : "two streams, the default stream");
    return test_finish(&tc);
}
