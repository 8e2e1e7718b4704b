/* test_errors.c: every error path of rewy.h. Each bad argument must give its status, and
 * rewy_validate_fwd / rewy_validate_bwd must name it in the message. Runs under ASan/UBSan
 * too, so a bad input must never crash or read out of bounds.
 *
 * The real call is made only after validate has rejected the arguments: if validation ever
 * wrongly accepts a bad argument, the test fails without letting the call scribble memory. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "rewy.h"
#include "testutil.h"

/* Every tensor buffer of the fixture has this many bytes: far more than any shape used here
 * needs (largest: 2 sequences × 4 value heads × 32 × 32 fp32 states = 32 KiB). */
#define BUF_BYTES (128 * 1024)
#define FX_T 70

typedef struct fixture {
    rewy_op op;
    rewy_dtype dt;
    void *q, *k, *v, *beta, *b, *w, *o, *do_, *dq, *dk, *dv, *dbeta, *db, *dw;
    float *g, *h0, *ht, *dht, *dg, *dh0;
    void *saved, *fws, *bws;
    size_t saved_bytes, fws_bytes, bws_bytes;
    int32_t cu[4];
    rewy_fwd_params fp;     /* a valid forward */
    rewy_bwd_params bp;     /* a valid backward reading what fp wrote */
} fixture;

static void *buf(void) {
    void *p = aligned_alloc(64, BUF_BYTES);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    memset(p, 0, BUF_BYTES);
    return p;
}

static void *buf_n(size_t n) {
    size_t r = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, r ? r : 64);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    memset(p, 0, r ? r : 64);
    return p;
}

static void fill(void *p, rewy_dtype t, size_t n, float base, float step) {
    for (size_t i = 0; i < n; i++) rewy_store(p, t, i, base + step * (float)(i % 7));
}

static void base_cfg(rewy_config *c, rewy_op op, rewy_dtype dt) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->backend = REWY_BACKEND_CPU;
    c->dtype = dt;
    c->B = 1;
    c->T = FX_T;
    c->H = 2;
    c->HV = 2;
    c->K = 32;
    c->V = 32;
    c->chunk_size = 64;
    c->policy = REWY_POLICY_R;
    c->bwd_algo = REWY_BWD_REWY;
}

/* Builds valid params for op and runs the forward so that f.saved holds a real header. */
static void fixture_init(test_counts *tc, fixture *x, rewy_op op, rewy_dtype dt) {
    memset(x, 0, sizeof *x);
    x->op = op;
    x->dt = dt;
    void **bufs[] = {&x->q, &x->k, &x->v, &x->beta, &x->b, &x->w, &x->o, &x->do_,
                     &x->dq, &x->dk, &x->dv, &x->dbeta, &x->db, &x->dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) *bufs[i] = buf();
    float **fbufs[] = {&x->g, &x->h0, &x->ht, &x->dht, &x->dg, &x->dh0};
    for (size_t i = 0; i < sizeof fbufs / sizeof fbufs[0]; i++) *fbufs[i] = buf();
    size_t n = BUF_BYTES / 4;
    fill(x->q, dt, n, 0.05f, 0.01f);
    fill(x->k, dt, n, -0.05f, 0.02f);
    fill(x->v, dt, n, 0.3f, -0.1f);
    fill(x->do_, dt, n, -0.2f, 0.07f);
    fill(x->beta, dt, n, 0.5f, 0.01f);
    fill(x->b, dt, n, 0.5f, 0.02f);
    fill(x->w, dt, n, 0.4f, 0.03f);
    fill(x->g, REWY_F32, n, -0.1f, -0.01f);
    fill(x->h0, REWY_F32, n, 0.01f, 0.01f);
    fill(x->dht, REWY_F32, n, -0.01f, 0.01f);

    rewy_config c;
    base_cfg(&c, op, dt);
    rewy_status s1 = rewy_saved_size(&c, &x->saved_bytes);
    rewy_status s2 = rewy_fwd_workspace_size(&c, &x->fws_bytes);
    rewy_status s3 = rewy_bwd_workspace_size(&c, &x->bws_bytes);
    CHECK(tc, s1 == REWY_OK && s2 == REWY_OK && s3 == REWY_OK, "size queries on a valid config: %s %s %s",
          rewy_strerror(s1), rewy_strerror(s2), rewy_strerror(s3));
    x->saved = buf_n(x->saved_bytes);
    x->fws = buf_n(x->fws_bytes);
    x->bws = buf_n(x->bws_bytes);

    rewy_fwd_params *f = &x->fp;
    f->cfg = c;
    f->q = x->q;
    f->k = x->k;
    f->v = x->v;
    f->g = op == REWY_OP_DELTANET ? NULL : x->g;
    f->beta = op == REWY_OP_GDN2 ? NULL : x->beta;
    f->b = op == REWY_OP_GDN2 ? x->b : NULL;
    f->w = op == REWY_OP_GDN2 ? x->w : NULL;
    f->h0 = x->h0;
    f->o = x->o;
    f->ht = x->ht;
    f->saved = x->saved;
    f->saved_bytes = x->saved_bytes;
    f->workspace = x->fws;
    f->workspace_bytes = x->fws_bytes;

    char msg[256] = "";
    rewy_status v = rewy_validate_fwd(f, msg, sizeof msg);
    CHECK(tc, v == REWY_OK, "%s: valid forward rejected: %s (%s)", rewy_strerror(v), msg, "fixture");
    rewy_status s = v == REWY_OK ? rewy_forward(f) : v;
    CHECK(tc, s == REWY_OK, "fixture forward failed: %s", rewy_strerror(s));

    rewy_bwd_params *b = &x->bp;
    b->cfg = c;
    b->q = f->q;
    b->k = f->k;
    b->v = f->v;
    b->g = f->g;
    b->beta = f->beta;
    b->b = f->b;
    b->w = f->w;
    b->h0 = f->h0;
    b->saved = x->saved;
    b->saved_bytes = x->saved_bytes;
    b->do_ = x->do_;
    b->dht = x->dht;
    b->dq = x->dq;
    b->dk = x->dk;
    b->dv = x->dv;
    b->dg = op == REWY_OP_DELTANET ? NULL : x->dg;
    b->dbeta = op == REWY_OP_GDN2 ? NULL : x->dbeta;
    b->db = op == REWY_OP_GDN2 ? x->db : NULL;
    b->dw = op == REWY_OP_GDN2 ? x->dw : NULL;
    b->dh0 = x->dh0;
    b->workspace = x->bws;
    b->workspace_bytes = x->bws_bytes;
    v = rewy_validate_bwd(b, msg, sizeof msg);
    CHECK(tc, v == REWY_OK, "valid backward rejected: %s (%s)", rewy_strerror(v), msg);
}

static void fixture_free(fixture *x) {
    void *all[] = {x->q, x->k, x->v, x->beta, x->b, x->w, x->o, x->do_, x->dq, x->dk, x->dv,
                   x->dbeta, x->db, x->dw, x->g, x->h0, x->ht, x->dht, x->dg, x->dh0,
                   x->saved, x->fws, x->bws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* The message names `name` as a whole identifier (an identifier may continue with '_',
 * so "workspace" is named by "workspace_bytes" and "do" by "do_"). */
static int names(const char *msg, const char *name) {
    size_t n = strlen(name);
    for (const char *p = msg; (p = strstr(p, name)) != NULL; p++) {
        int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = !isalnum((unsigned char)p[n]);
        if (before && after) return 1;
    }
    return 0;
}

/* Short status names for failure lines (rewy_strerror's sentences are long). */
static const char *st(rewy_status s) {
    static const char *const names[REWY_STATUS_COUNT] = {
        "OK", "NULL_POINTER", "MISALIGNED", "BAD_SHAPE", "UNSUPPORTED_DIM", "BAD_CHUNK",
        "BAD_DTYPE", "BAD_OP", "BAD_SEQLENS", "BAD_ENUM", "WORKSPACE", "BACKEND", "MISMATCH"};
    return (unsigned)s < REWY_STATUS_COUNT ? names[s] : "?";
}

static const char *op_str(rewy_op op) {
    static const char *const s[] = {"deltanet", "gdn", "kda", "gdn2"};
    return (unsigned)op < 4 ? s[op] : "?";
}

/* alts lists accepted names separated by '|', e.g. "B|cu_seqlens". */
static int names_any(const char *msg, const char *alts) {
    char tmp[64];
    while (*alts) {
        size_t n = strcspn(alts, "|");
        if (n < sizeof tmp) {
            memcpy(tmp, alts, n);
            tmp[n] = 0;
            if (names(msg, tmp)) return 1;
        }
        alts += n;
        if (*alts == '|') alts++;
    }
    return 0;
}

/* What validate said: status want and a NUL-terminated message that names `name`. Returns
 * whether validate refused, so that the caller checks the real call refuses alike. */
static int expect_validate(test_counts *tc, const char *dir, const char *what, rewy_op op,
                           rewy_status v, const char *msg, size_t len, rewy_status want,
                           const char *name) {
    CHECK(tc, v == want, "%s %s [%s]: validate gave %s, want %s (\"%s\")", dir, what, op_str(op),
          st(v), st(want), memchr(msg, 0, len) ? msg : "<unterminated>");
    if (!memchr(msg, 0, len)) {
        CHECK(tc, 0, "%s %s: message not NUL-terminated", dir, what);
        return 0;
    }
    if (want != REWY_OK)
        CHECK(tc, names_any(msg, name), "%s %s [%s]: message \"%s\" does not name %s", dir, what,
              op_str(op), msg, name);
    return v != REWY_OK;
}

static void expect_fwd(test_counts *tc, const char *what, const rewy_fwd_params *p, rewy_status want,
                       const char *name) {
    char msg[256];
    memset(msg, 'X', sizeof msg);
    rewy_status v = rewy_validate_fwd(p, msg, sizeof msg);
    if (expect_validate(tc, "fwd", what, p->cfg.op, v, msg, sizeof msg, want, name)) {
        rewy_status s = rewy_forward(p);
        CHECK(tc, s == want, "fwd %s: rewy_forward gave %s, want %s", what, st(s), st(want));
    }
}

static void expect_bwd(test_counts *tc, const char *what, const rewy_bwd_params *p, rewy_status want,
                       const char *name) {
    char msg[256];
    memset(msg, 'X', sizeof msg);
    rewy_status v = rewy_validate_bwd(p, msg, sizeof msg);
    if (expect_validate(tc, "bwd", what, p->cfg.op, v, msg, sizeof msg, want, name)) {
        rewy_status s = rewy_backward(p);
        CHECK(tc, s == want, "bwd %s: rewy_backward gave %s, want %s", what, st(s), st(want));
    }
}

/* A config-level error must also come out of the three size queries. */
static void expect_cfg(test_counts *tc, const char *what, const rewy_fwd_params *p, rewy_status want,
                       const char *name) {
    size_t bytes = 0;
    rewy_status s1 = rewy_saved_size(&p->cfg, &bytes);
    rewy_status s2 = rewy_fwd_workspace_size(&p->cfg, &bytes);
    rewy_status s3 = rewy_bwd_workspace_size(&p->cfg, &bytes);
    CHECK(tc, s1 == want && s2 == want && s3 == want, "cfg %s: size queries gave %s/%s/%s, want %s", what,
          st(s1), st(s2), st(s3), st(want));
    expect_fwd(tc, what, p, want, name);
}

static const char *byte_offset(const void *p, size_t off) { return (const char *)p + off; }

/* ---------------------------------------------------------------- gates */

/* The gate inputs, named alike in both params structs, and which operators read each
 * (MATH §1): g all but DeltaNet, β all but GDN2, b and w GDN2 only. */
enum { GATE_G, GATE_BETA, GATE_B, GATE_W, GATE_COUNT };
static const char *const gate_name[GATE_COUNT] = {"g", "beta", "b", "w"};
static const char *const gate_grad[GATE_COUNT] = {"dg", "dbeta", "db", "dw"};

static int op_reads(rewy_op op, int gate) {
    switch (gate) {
    case GATE_G: return op != REWY_OP_DELTANET;
    case GATE_BETA: return op != REWY_OP_GDN2;
    default: return op == REWY_OP_GDN2;
    }
}

/* Points gate i of a rewy_fwd_params or rewy_bwd_params at ptr; clears its gradient. */
#define SET_GATE(p, i, ptr)                                                                \
    ((i) == GATE_G ? (void)((p).g = (const float *)(ptr)) : (i) == GATE_BETA ? (void)((p).beta = (ptr)) \
     : (i) == GATE_B ? (void)((p).b = (ptr)) : (void)((p).w = (ptr)))
#define CLEAR_GRAD(p, i)                                                                   \
    ((i) == GATE_G ? (void)((p).dg = NULL) : (i) == GATE_BETA ? (void)((p).dbeta = NULL)   \
     : (i) == GATE_B ? (void)((p).db = NULL) : (void)((p).dw = NULL))

typedef struct gate_case { char what[48]; int gate; const void *ptr; rewy_status want; } gate_case;

/* Every gate case of x's operator, for both calls: a gate it reads left NULL or misaligned
 * (one byte off for 16-bit types, two for fp32 and the fp32 g), a gate it does not read
 * given. Returns how many (at most 2 · GATE_COUNT). */
static int gate_cases(const fixture *x, gate_case *out) {
    const void *bufs[GATE_COUNT] = {x->g, x->beta, x->b, x->w};
    const size_t off = x->dt == REWY_F32 ? 2 : 1;
    int n = 0;
    for (int i = 0; i < GATE_COUNT; i++) {
        gate_case *c = &out[n++];
        c->gate = i;
        c->want = REWY_ERR_BAD_OP;
        c->ptr = op_reads(x->op, i) ? NULL : bufs[i];
        snprintf(c->what, sizeof c->what, op_reads(x->op, i) ? "%s NULL" : "%s given to %s",
                 gate_name[i], op_str(x->op));
        if (!op_reads(x->op, i)) continue;
        c = &out[n++];
        c->gate = i;
        c->want = REWY_ERR_MISALIGNED;
        c->ptr = byte_offset(bufs[i], i == GATE_G ? 2 : off);
        snprintf(c->what, sizeof c->what, "%s misaligned", gate_name[i]);
    }
    return n;
}

/* ---------------------------------------------------------------- forward arguments */

static void test_fwd_pointers(test_counts *tc, fixture *x) {
    rewy_fwd_params p;
#define FWD_CASE(what, stmt, want, name) do { p = x->fp; stmt; expect_fwd(tc, what, &p, want, name); } while (0)
    FWD_CASE("valid", (void)0, REWY_OK, "");
    FWD_CASE("q NULL", p.q = NULL, REWY_ERR_NULL_POINTER, "q");
    FWD_CASE("k NULL", p.k = NULL, REWY_ERR_NULL_POINTER, "k");
    FWD_CASE("v NULL", p.v = NULL, REWY_ERR_NULL_POINTER, "v");
    FWD_CASE("o NULL", p.o = NULL, REWY_ERR_NULL_POINTER, "o");
    if (x->saved_bytes) FWD_CASE("saved NULL", p.saved = NULL, REWY_ERR_NULL_POINTER, "saved");
    if (x->fws_bytes) FWD_CASE("workspace NULL", p.workspace = NULL, REWY_ERR_NULL_POINTER, "workspace");
    FWD_CASE("h0 NULL (optional)", p.h0 = NULL, REWY_OK, "");
    FWD_CASE("ht NULL (optional)", p.ht = NULL, REWY_OK, "");

    /* Gates: required ones missing or misaligned, and ones the operator does not have. */
    gate_case gc[2 * GATE_COUNT];
    for (int i = 0, n = gate_cases(x, gc); i < n; i++)
        FWD_CASE(gc[i].what, SET_GATE(p, gc[i].gate, gc[i].ptr), gc[i].want, gate_name[gc[i].gate]);

    /* Misaligned pointers: one byte off for 16-bit types, two for fp32. */
    size_t off = x->dt == REWY_F32 ? 2 : 1;
    FWD_CASE("q misaligned", p.q = byte_offset(x->q, off), REWY_ERR_MISALIGNED, "q");
    FWD_CASE("k misaligned", p.k = byte_offset(x->k, off), REWY_ERR_MISALIGNED, "k");
    FWD_CASE("v misaligned", p.v = byte_offset(x->v, off), REWY_ERR_MISALIGNED, "v");
    FWD_CASE("o misaligned", p.o = (void *)byte_offset(x->o, off), REWY_ERR_MISALIGNED, "o");
    FWD_CASE("h0 misaligned", p.h0 = (const float *)byte_offset(x->h0, 2), REWY_ERR_MISALIGNED, "h0");
    FWD_CASE("ht misaligned", p.ht = (float *)byte_offset(x->ht, 2), REWY_ERR_MISALIGNED, "ht");
    if (x->saved_bytes)
        FWD_CASE("saved not 16-byte aligned", p.saved = (void *)byte_offset(x->saved, 8),
                 REWY_ERR_MISALIGNED, "saved");
    if (x->fws_bytes)
        FWD_CASE("workspace not 16-byte aligned", p.workspace = (void *)byte_offset(x->fws, 8),
                 REWY_ERR_MISALIGNED, "workspace");

    /* Buffers smaller than their size query. */
    if (x->fws_bytes)
        FWD_CASE("workspace too small", p.workspace_bytes = x->fws_bytes - 1, REWY_ERR_WORKSPACE, "workspace");
    if (x->saved_bytes)
        FWD_CASE("saved too small", p.saved_bytes = x->saved_bytes - 1, REWY_ERR_WORKSPACE, "saved");
#undef FWD_CASE
}

static void test_fwd_config(test_counts *tc, fixture *x) {
    rewy_fwd_params p;
#define CFG_CASE(what, stmt, want, name) do { p = x->fp; stmt; expect_cfg(tc, what, &p, want, name); } while (0)
    CFG_CASE("T = 0", p.cfg.T = 0, REWY_ERR_BAD_SHAPE, "T");
    CFG_CASE("T < 0", p.cfg.T = -5, REWY_ERR_BAD_SHAPE, "T");
    CFG_CASE("K = 0", p.cfg.K = 0, REWY_ERR_BAD_SHAPE, "K");
    CFG_CASE("V = 0", p.cfg.V = 0, REWY_ERR_BAD_SHAPE, "V");
    CFG_CASE("B = 0", p.cfg.B = 0, REWY_ERR_BAD_SHAPE, "B");
    CFG_CASE("H = 0", p.cfg.H = 0, REWY_ERR_BAD_SHAPE, "H");
    CFG_CASE("HV < 0", p.cfg.HV = -2, REWY_ERR_BAD_SHAPE, "HV");
    CFG_CASE("K = 257", p.cfg.K = 257, REWY_ERR_UNSUPPORTED_DIM, "K");
    CFG_CASE("V = 512", p.cfg.V = 512, REWY_ERR_UNSUPPORTED_DIM, "V");
    CFG_CASE("HV = 3, H = 2", p.cfg.HV = 3, REWY_ERR_BAD_SHAPE, "HV");
    CFG_CASE("HV = 1, H = 2", p.cfg.HV = 1, REWY_ERR_BAD_SHAPE, "HV");
    CFG_CASE("chunk 48", p.cfg.chunk_size = 48, REWY_ERR_BAD_CHUNK, "chunk_size");
    CFG_CASE("chunk 128", p.cfg.chunk_size = 128, REWY_ERR_BAD_CHUNK, "chunk_size");
    CFG_CASE("chunk -16", p.cfg.chunk_size = -16, REWY_ERR_BAD_CHUNK, "chunk_size");
    CFG_CASE("dtype 7", p.cfg.dtype = (rewy_dtype)7, REWY_ERR_BAD_DTYPE, "dtype");
    CFG_CASE("dtype -1", p.cfg.dtype = (rewy_dtype)-1, REWY_ERR_BAD_DTYPE, "dtype");
    CFG_CASE("op 9", p.cfg.op = (rewy_op)9, REWY_ERR_BAD_OP, "op");
    CFG_CASE("policy 5", p.cfg.policy = (rewy_policy)5, REWY_ERR_BAD_ENUM, "policy");
    CFG_CASE("scale NaN", p.cfg.scale = NAN, REWY_ERR_BAD_SHAPE, "scale");
    CFG_CASE("backend 7", p.cfg.backend = (rewy_backend)7, REWY_ERR_BAD_ENUM, "backend");
    if (!rewy_has_cuda())
        CFG_CASE("CUDA backend not compiled in", p.cfg.backend = REWY_BACKEND_CUDA, REWY_ERR_BACKEND, "backend");
    /* Defaults are valid: HV = 0 means H, chunk 0 means 64, every legal chunk size. */
    CFG_CASE("HV = 0", p.cfg.HV = 0, REWY_OK, "");
    CFG_CASE("chunk 0", p.cfg.chunk_size = 0, REWY_OK, "");
    CFG_CASE("chunk 16", p.cfg.chunk_size = 16, REWY_OK, "");
    CFG_CASE("chunk 32", p.cfg.chunk_size = 32, REWY_OK, "");
#undef CFG_CASE
}

/* Packed sequences. T = 70 split as [0, 30, 70]; h0/ht hold 2 sequences (buffers are large). */
static void test_fwd_seqlens(test_counts *tc, fixture *x) {
    int32_t cu[5];
    rewy_fwd_params p;
#define SEQ_CASE(what, a, b_, c_, d_, n, stmt, want, name) do {                 \
        p = x->fp; cu[0] = a; cu[1] = b_; cu[2] = c_; cu[3] = d_; cu[4] = FX_T;   \
        p.cfg.cu_seqlens = cu; p.cfg.num_seqs = n; stmt;                         \
        expect_cfg(tc, what, &p, want, name); } while (0)
    SEQ_CASE("valid varlen", 0, 30, FX_T, 0, 2, (void)0, REWY_OK, "");
    SEQ_CASE("valid varlen with host copy", 0, 30, FX_T, 0, 2, p.cfg.cu_seqlens_host = cu, REWY_OK, "");
    SEQ_CASE("cu_seqlens[0] != 0", 1, 30, FX_T, 0, 2, (void)0, REWY_ERR_BAD_SEQLENS, "cu_seqlens");
    SEQ_CASE("cu_seqlens repeats", 0, 30, 30, FX_T, 3, (void)0, REWY_ERR_BAD_SEQLENS, "cu_seqlens");
    SEQ_CASE("cu_seqlens decreasing", 0, 40, 30, FX_T, 3, (void)0, REWY_ERR_BAD_SEQLENS, "cu_seqlens");
    SEQ_CASE("cu_seqlens ends before T", 0, 30, FX_T - 1, 0, 2, (void)0, REWY_ERR_BAD_SEQLENS, "cu_seqlens");
    SEQ_CASE("cu_seqlens ends after T", 0, 30, FX_T + 1, 0, 2, (void)0, REWY_ERR_BAD_SEQLENS, "cu_seqlens");
    SEQ_CASE("B = 2 with cu_seqlens", 0, 30, FX_T, 0, 2, p.cfg.B = 2, REWY_ERR_BAD_SEQLENS, "B|cu_seqlens");
    SEQ_CASE("num_seqs = 0", 0, 30, FX_T, 0, 0, (void)0, REWY_ERR_BAD_SEQLENS, "num_seqs");
    SEQ_CASE("cu_seqlens NULL, host copy given", 0, 30, FX_T, 0, 2,
             (p.cfg.cu_seqlens_host = cu, p.cfg.cu_seqlens = NULL), REWY_ERR_NULL_POINTER, "cu_seqlens");
    SEQ_CASE("num_seqs < 0", 0, 30, FX_T, 0, -1, (void)0, REWY_ERR_BAD_SEQLENS, "num_seqs");
#undef SEQ_CASE
}

static void test_msg_buffer(test_counts *tc, fixture *x) {
    rewy_fwd_params p = x->fp;
    p.cfg.T = 0;
    CHECK(tc, rewy_validate_fwd(&p, NULL, 0) == REWY_ERR_BAD_SHAPE, "validate with msg NULL");
    char small[8];
    memset(small, 'X', sizeof small);
    CHECK(tc, rewy_validate_fwd(&p, small, 1) == REWY_ERR_BAD_SHAPE && small[0] == 0 && small[1] == 'X',
          "msg_len 1 must give an empty string and write nothing else");
    memset(small, 'X', sizeof small);
    rewy_validate_fwd(&p, small, sizeof small);
    CHECK(tc, memchr(small, 0, sizeof small) != NULL, "a long message must be truncated and terminated");
    char big[256];
    CHECK(tc, rewy_validate_fwd(NULL, big, sizeof big) == REWY_ERR_NULL_POINTER, "validate_fwd(NULL)");
    CHECK(tc, rewy_validate_bwd(NULL, big, sizeof big) == REWY_ERR_NULL_POINTER, "validate_bwd(NULL)");
    CHECK(tc, rewy_forward(NULL) == REWY_ERR_NULL_POINTER, "rewy_forward(NULL)");
    CHECK(tc, rewy_backward(NULL) == REWY_ERR_NULL_POINTER, "rewy_backward(NULL)");
    size_t bytes;
    CHECK(tc, rewy_saved_size(NULL, &bytes) == REWY_ERR_NULL_POINTER, "rewy_saved_size(NULL cfg)");
    CHECK(tc, rewy_fwd_workspace_size(NULL, &bytes) == REWY_ERR_NULL_POINTER, "fwd_workspace_size(NULL)");
    CHECK(tc, rewy_bwd_workspace_size(NULL, &bytes) == REWY_ERR_NULL_POINTER, "bwd_workspace_size(NULL)");
    CHECK(tc, rewy_saved_size(&x->fp.cfg, NULL) == REWY_ERR_NULL_POINTER, "rewy_saved_size(bytes NULL)");
    CHECK(tc, rewy_fwd_workspace_size(&x->fp.cfg, NULL) == REWY_ERR_NULL_POINTER, "fwd_workspace_size(bytes NULL)");
    CHECK(tc, rewy_bwd_workspace_size(&x->fp.cfg, NULL) == REWY_ERR_NULL_POINTER, "bwd_workspace_size(bytes NULL)");
}

/* ---------------------------------------------------------------- backward arguments */

static void test_bwd(test_counts *tc, fixture *x) {
    rewy_bwd_params p;
    size_t off = x->dt == REWY_F32 ? 2 : 1;
#define BWD_CASE(what, stmt, want, name) do { p = x->bp; stmt; expect_bwd(tc, what, &p, want, name); } while (0)
    BWD_CASE("valid", (void)0, REWY_OK, "");
    BWD_CASE("other algo than the forward's (WY)", p.cfg.bwd_algo = REWY_BWD_WY, REWY_OK, "");
    BWD_CASE("dht NULL (optional)", p.dht = NULL, REWY_OK, "");
    BWD_CASE("q NULL", p.q = NULL, REWY_ERR_NULL_POINTER, "q");
    BWD_CASE("k NULL", p.k = NULL, REWY_ERR_NULL_POINTER, "k");
    BWD_CASE("v NULL", p.v = NULL, REWY_ERR_NULL_POINTER, "v");
    BWD_CASE("do NULL", p.do_ = NULL, REWY_ERR_NULL_POINTER, "do");
    BWD_CASE("saved NULL", p.saved = NULL, REWY_ERR_NULL_POINTER, "saved");
    BWD_CASE("dq NULL", p.dq = NULL, REWY_ERR_NULL_POINTER, "dq");
    BWD_CASE("dk NULL", p.dk = NULL, REWY_ERR_NULL_POINTER, "dk");
    BWD_CASE("dv NULL", p.dv = NULL, REWY_ERR_NULL_POINTER, "dv");
    BWD_CASE("dh0 NULL with h0", p.dh0 = NULL, REWY_ERR_NULL_POINTER, "dh0");
    if (x->bws_bytes) BWD_CASE("workspace NULL", p.workspace = NULL, REWY_ERR_NULL_POINTER, "workspace");
    /* Gates as in the forward, and the gradient of every gate the operator reads. */
    gate_case gc[2 * GATE_COUNT];
    for (int i = 0, n = gate_cases(x, gc); i < n; i++)
        BWD_CASE(gc[i].what, SET_GATE(p, gc[i].gate, gc[i].ptr), gc[i].want, gate_name[gc[i].gate]);
    for (int i = 0; i < GATE_COUNT; i++) {
        char what[32];
        snprintf(what, sizeof what, "%s NULL", gate_grad[i]);
        if (op_reads(x->op, i)) BWD_CASE(what, CLEAR_GRAD(p, i), REWY_ERR_NULL_POINTER, gate_grad[i]);
    }
    BWD_CASE("q misaligned", p.q = byte_offset(x->q, off), REWY_ERR_MISALIGNED, "q");
    BWD_CASE("do misaligned", p.do_ = byte_offset(x->do_, off), REWY_ERR_MISALIGNED, "do");
    BWD_CASE("dk misaligned", p.dk = (void *)byte_offset(x->dk, off), REWY_ERR_MISALIGNED, "dk");
    BWD_CASE("dh0 misaligned", p.dh0 = (float *)byte_offset(x->dh0, 2), REWY_ERR_MISALIGNED, "dh0");
    BWD_CASE("dht misaligned", p.dht = (const float *)byte_offset(x->dht, 2), REWY_ERR_MISALIGNED, "dht");
    if (x->bws_bytes) {
        BWD_CASE("workspace not 16-byte aligned", p.workspace = (void *)byte_offset(x->bws, 8),
                 REWY_ERR_MISALIGNED, "workspace");
        BWD_CASE("workspace too small", p.workspace_bytes = x->bws_bytes - 1, REWY_ERR_WORKSPACE, "workspace");
    }
    if (x->saved_bytes) BWD_CASE("saved too small", p.saved_bytes = x->saved_bytes - 1, REWY_ERR_WORKSPACE, "saved");
    BWD_CASE("bwd_algo 5", p.cfg.bwd_algo = (rewy_bwd_algo)5, REWY_ERR_BAD_ENUM, "bwd_algo");
    BWD_CASE("policy 5", p.cfg.policy = (rewy_policy)5, REWY_ERR_BAD_ENUM, "policy");
    BWD_CASE("T = 0", p.cfg.T = 0, REWY_ERR_BAD_SHAPE, "T");
    BWD_CASE("K = 300", p.cfg.K = 300, REWY_ERR_UNSUPPORTED_DIM, "K");
    BWD_CASE("chunk 48", p.cfg.chunk_size = 48, REWY_ERR_BAD_CHUNK, "chunk_size");
    BWD_CASE("dtype 4", p.cfg.dtype = (rewy_dtype)4, REWY_ERR_BAD_DTYPE, "dtype");
    if (!rewy_has_cuda())
        BWD_CASE("CUDA backend not compiled in", p.cfg.backend = REWY_BACKEND_CUDA, REWY_ERR_BACKEND, "backend");

    /* The saved buffer's header records the forward's config: a backward that differs from it
     * (in anything but bwd_algo) is refused. These changes keep every buffer size the same or
     * smaller, so only the header can catch them. */
    BWD_CASE("scale differs from the forward", p.cfg.scale = 0.5f, REWY_ERR_MISMATCH, "scale");
    BWD_CASE("state_v_first differs", p.cfg.state_v_first = 1, REWY_ERR_MISMATCH, "state_v_first");
    BWD_CASE("T differs (smaller)", p.cfg.T = FX_T - 1, REWY_ERR_MISMATCH, "T");
    BWD_CASE("h0 given to the forward only", (p.h0 = NULL, p.dh0 = NULL), REWY_ERR_MISMATCH, "h0");
    {
        /* A buffer no forward has written. */
        void *blank = calloc(1, x->saved_bytes ? x->saved_bytes : 1);
        if (blank) BWD_CASE("saved not written by a forward", p.saved = blank, REWY_ERR_MISMATCH, "saved");
        free(blank);
    }
#undef BWD_CASE
}

/* A backward must see the forward's cu_seqlens values (issue 25 item 3): the saved record holds a
 * hash of them. With other boundaries of the same count and total the buffers are the same size,
 * and before the record the backward ran and returned dk off by up to 4.0. */
static void test_bwd_seqlens(test_counts *tc, fixture *x) {
    int32_t cu_f[3] = {0, 30, FX_T}, cu_same[3] = {0, 30, FX_T}, cu_b[3] = {0, 50, FX_T};
    rewy_fwd_params f = x->fp;
    f.cfg.cu_seqlens = cu_f;
    f.cfg.num_seqs = 2;
    rewy_status s = rewy_forward(&f);
    CHECK(tc, s == REWY_OK, "varlen forward: %s", st(s));
    rewy_bwd_params p;
#define BWD_SEQ(what, cu, n, want, name) do {                                             p = x->bp; p.cfg.cu_seqlens = cu; p.cfg.num_seqs = n;                              expect_bwd(tc, what, &p, want, name); } while (0)
    BWD_SEQ("same cu_seqlens values, another array", cu_same, 2, REWY_OK, "");
    BWD_SEQ("cu_seqlens values differ from the forward's", cu_b, 2, REWY_ERR_MISMATCH, "cu_seqlens");
    BWD_SEQ("fixed length after a varlen forward", NULL, 0, REWY_ERR_MISMATCH, "num_seqs");
    p = x->bp; /* the host copy is what is hashed when given */
    p.cfg.cu_seqlens = cu_f;
    p.cfg.cu_seqlens_host = cu_b;
    p.cfg.num_seqs = 2;
    expect_bwd(tc, "cu_seqlens_host values differ", &p, REWY_ERR_MISMATCH, "cu_seqlens");
#undef BWD_SEQ
    s = rewy_forward(&x->fp); /* leave the fixture's saved buffer as it was */
    CHECK(tc, s == REWY_OK, "fixture forward again: %s", st(s));
}

/* ---------------------------------------------------------------- misc API */

static void test_strings(test_counts *tc) {
    for (int s = 0; s < REWY_STATUS_COUNT; s++) {
        const char *m = rewy_strerror((rewy_status)s);
        CHECK(tc, m && m[0], "rewy_strerror(%d) empty", s);
        for (int u = 0; u < s; u++) {
            const char *n = rewy_strerror((rewy_status)u);
            CHECK(tc, !(m && n && strcmp(m, n) == 0), "rewy_strerror(%d) == rewy_strerror(%d): \"%s\"", s, u, m);
        }
    }
    const char *m = rewy_strerror(REWY_STATUS_COUNT);
    CHECK(tc, m && m[0], "rewy_strerror(out of range) empty");
    m = rewy_strerror((rewy_status)-1);
    CHECK(tc, m && m[0], "rewy_strerror(-1) empty");
    CHECK(tc, strcmp(rewy_version(), REWY_VERSION_STRING) == 0, "rewy_version() = %s, want %s",
          rewy_version(), REWY_VERSION_STRING);
}

static double flops_formula(rewy_bwd_algo algo, double n, double K, double V) { /* MATH §9 */
    if (algo == REWY_BWD_REWY) return 2 * n * n * V + 2 * n * n * V + 2 * n * K * V;
    return 2 * n * K * V + 2 * n * n * V + 2 * n * n * K + 4 * n * n * n + 2 * n * n * V + 2 * n * n * K;
}

static void test_flops(test_counts *tc) {
    double r = rewy_pullback_flops(REWY_BWD_REWY, 64, 128, 128);
    double w = rewy_pullback_flops(REWY_BWD_WY, 64, 128, 128);
    CHECK(tc, r == 4194304.0, "ReWY pullback at n=64, K=V=128: %.0f FLOP, want 4194304", r);
    CHECK(tc, w == 7340032.0, "WY pullback at n=64, K=V=128: %.0f FLOP, want 7340032", w);
    double red = 100.0 * (1.0 - r / w);
    CHECK(tc, fabs(red - 42.9) < 0.05, "reduction %.2f%%, want 42.9%%", red);
    static const int shapes[][3] = {{16, 32, 32}, {32, 60, 100}, {64, 256, 64}, {1, 1, 1}};
    for (int i = 0; i < 4; i++) {
        int n = shapes[i][0], K = shapes[i][1], V = shapes[i][2];
        for (int a = 0; a < 2; a++) {
            rewy_bwd_algo algo = a ? REWY_BWD_WY : REWY_BWD_REWY;
            double got = rewy_pullback_flops(algo, n, K, V), want = flops_formula(algo, n, K, V);
            CHECK(tc, got == want, "pullback flops algo %d n=%d K=%d V=%d: %.0f, want %.0f", a, n, K, V, got, want);
        }
    }
}

int main(void) {
    test_counts tc = {0, 0};
    test_strings(&tc);
    test_flops(&tc);
    static const rewy_op ops[] = {REWY_OP_DELTANET, REWY_OP_GDN, REWY_OP_KDA, REWY_OP_GDN2};
    for (int i = 0; i < 4; i++) {
        fixture x;
        fixture_init(&tc, &x, ops[i], REWY_BF16);
        test_fwd_pointers(&tc, &x);
        test_bwd(&tc, &x);
        if (ops[i] == REWY_OP_GDN) {
            test_fwd_config(&tc, &x);
            test_fwd_seqlens(&tc, &x);
            test_bwd_seqlens(&tc, &x);
            test_msg_buffer(&tc, &x);
        }
        fixture_free(&x);
    }
    /* fp32 and fp16 element types: alignment is per element size. */
    static const rewy_dtype dts[] = {REWY_F32, REWY_F16};
    for (int i = 0; i < 2; i++) {
        fixture x;
        fixture_init(&tc, &x, REWY_OP_KDA, dts[i]);
        test_fwd_pointers(&tc, &x);
        fixture_free(&x);
    }
    return test_finish(&tc);
}
