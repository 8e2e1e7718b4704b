/* chunk.h: the CPU chunk backend (fp32 compute, CBLAS products, OpenMP over heads).
 *
 * Every operator is run in the generic vector form of MATH §1 (g [n][K], b [n][K],
 * w [n][V]); DeltaNet, GDN and KDA broadcast their scalars into it. What differs between
 * operators is only how decayed products are formed (the "intra" strategy):
 *   scalar gate (DeltaNet, GDN): one n×n decay matrix Γ_ij = exp(G_i − G_j) (§7);
 *   vector gate (KDA, GDN2):     centered factors α = exp(G − c), ζ = exp(c − G) (§6);
 *                                when the chunk's gate range is too wide for them (strong
 *                                decay, −1000 resets), blocked factors: 16-token blocks, each
 *                                decay between blocks split at block ends into factors ≤ 1,
 *                                centered factors (or exact pairwise exponents) inside a block.
 */
#ifndef REWY_CPU_CHUNK_H
#define REWY_CPU_CHUNK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "rewy.h"

/* Largest |G − c| (natural log) for which centered factors are used: α, ζ ≤ e^40 keeps
 * every product of two factors below fp32's e^88 and every needed value above underflow. */
#define REWY_CENTER_LIMIT 40.0f

/* The half range a chunk may have and still take centered factors, for query scale s: the scale
 * is folded into q (MATH §6), so (s·q⊙α)(k⊙ζ)ᵀ reaches |s| e^{2·half range}. Half of |ln |s||
 * comes off the limit, keeping that product inside the same e^80 (s = 1e30: half range ≤ 5.5;
 * a large s would otherwise overflow the factors, a tiny one underflow them). s = 0: pairwise. */
static inline float center_limit(float s) { return REWY_CENTER_LIMIT - 0.5f * fabsf(logf(fabsf(s))); }

/* How a chunk forms its decayed products (MATH §6, §7):
 *   INTRA_SCALAR    one n×n decay matrix Γ (scalar gates);
 *   INTRA_CENTERED  one center per feature for the whole chunk: every product is one matrix product;
 *   INTRA_BLOCKED   the chunk's half range is over center_limit: blocks of INTRA_BLOCK tokens, the
 *                   decay between blocks factored at block ends (every factor ≤ 1 for gates ≤ 0),
 *                   a center per block inside it (or pairwise exponents, per block: diag_pairwise);
 *   INTRA_PAIRWISE  every exponent formed per pair: only for gates that rise (g > 0, outside MATH §1's
 *                   g ≤ 0) by more than the blocked factors can hold. */
typedef enum intra_mode { INTRA_SCALAR, INTRA_CENTERED, INTRA_BLOCKED, INTRA_PAIRWISE } intra_mode;

/* Blocked mode: tokens per block, and the most blocks a chunk (BT ≤ 64) has. */
#define INTRA_BLOCK 16
#define INTRA_MAX_BLOCKS 4

/* One chunk of one value head: n ≤ BT tokens, row-major fp32 matrices. */
typedef struct chunk {
    int n, K, V;
    intra_mode mode;
    float *q;      /* n×K  scale · q */
    float *k;      /* n×K */
    float *v;      /* n×V */
    float *G;      /* n×K  chunk-local cumulative log decay */
    float *b;      /* n×K  erase gate */
    float *w;      /* n×V  write gate */
    float *be;     /* n×K  b ⊙ k (erase direction before decay) */
    float *Z;      /* n×V  w ⊙ v */
    float *gam;    /* n×K  γ = exp(G) */
    float *tail;   /* n×K  exp(G_n − G) */
    float *E;      /* n×K  b ⊙ k ⊙ γ */
    float *Qg;     /* n×K  q ⊙ γ */
    float *F;      /* n×K  k ⊙ exp(G_n − G)  (= Y Λ) */
    float *lam;    /* K    γ_n */
    float *Gam;    /* n×n  exp(G_i − G_j), i ≥ j (scalar mode) */
    float *alpha;  /* n×K  exp(G − c) (centered mode; blocked mode: c is the row's block's center) */
    float *kz;     /* n×K  k ⊙ exp(c − G) = k ⊙ ζ (same center as alpha) */
    /* Blocked mode. ε_J = G at the last token of block J (its "end"). For i in block I > J ∋ j:
     * e^{G_i − G_j} = from_prev_end_i ⊙ between_ends_{I,J} ⊙ to_own_end_j, each a decay over a run
     * of tokens, so each ≤ 1 for gates ≤ 0. */
    float *from_prev_end; /* n×K  e^{G_i − ε_{I−1}}, row i of block I ≥ 1 (block 0's rows unused) */
    float *to_own_end;    /* n×K  e^{ε_J − G_j}, row j of block J (the last block's rows unused) */
    float *between_ends;  /* INTRA_MAX_BLOCKS²×K  e^{ε_{I−1} − ε_J} at [I·INTRA_MAX_BLOCKS + J], I > J
                           * (1 for I = J + 1: no whole block between) */
    int nblk;             /* blocks in the chunk: ⌈n / INTRA_BLOCK⌉ */
    unsigned diag_pairwise; /* bit I: diagonal block I's own half range is over center_limit, so its
                             * products take pairwise exponents (decays beyond ~5 per token) */
    float *lo, *hi, *mid; /* K  range of G per feature and its midpoint, the center c (blocked mode:
                           * scratch for each block's) */
} chunk;

/* Where one sequence lives in the packed token axis. */
typedef struct seq_span { int64_t tok0; int len; int64_t chunk0; } seq_span;

/* A running position in the sequence list: sequence s starts at chunk chunk0. A varlen
 * sequence's first chunk is the sum of the chunk counts before it, so looking it up from
 * scratch costs O(s); walking with a cursor keeps a pass over all N sequences O(N). */
typedef struct seq_cursor { int s; int64_t chunk0; } seq_cursor;

/* A bump allocator over caller memory: the backend never calls malloc. */
typedef struct arena { char *base; size_t used, cap; } arena;
float *arena_floats(arena *a, size_t n);
size_t chunk_floats(int BT, int K, int V);
void chunk_alloc(chunk *c, arena *a, int BT, int K, int V);

/* Everything the CPU kernels need, resolved once from the config. */
typedef struct problem {
    rewy_op op;
    rewy_dtype dt;
    int B, T, H, HV, K, V, BT, N;   /* N sequences */
    float scale;
    int vector_gate;                 /* KDA, GDN2 */
    int state_v_first;
    rewy_policy policy;
    int Tmax;                        /* longest sequence */
    int64_t NC;                      /* total chunks over all sequences */
} problem;

int problem_init(problem *pb, const rewy_config *cfg);
/* Sequence s. cur starts at {0, 0} and is advanced to s (restarted if s is behind it):
 * calls in increasing s cost O(1) each, amortised. */
seq_span problem_seq(const problem *pb, const rewy_config *cfg, seq_cursor *cur, int s);

/* Load chunk rows [t0, t0+n) of value head hv from the inputs, and derive G, E, Q_g, F, Λ
 * and the intra factors. */
void chunk_load(chunk *c, const problem *pb, int n, long t0, int hv, const void *q, const void *k,
                const void *v, const float *g, const void *beta, const void *b, const void *w);

/* Decayed products (MATH §6), masks applied by the caller or by `incl`:
 *   coef:    C_ij = Σ_d X_id k_jd exp(G_id − G_jd) for j < i (j ≤ i if incl), else 0
 *   apply:   out_i = Σ_j D_ij k_j ⊙ exp(G_i − G_j)         (= γ ⊙ (D Y), D lower)
 *   apply_t: out_j = Σ_i D_ij X_i ⊙ exp(G_i − G_j)          (= (Dᵀ (X ⊙ γ)) ⊘ γ)
 * apply/apply_t add into out. tmp: n×max(K,n) scratch. */
void intra_coef(const chunk *c, const float *X, int incl, float *C, float *tmp);
void intra_apply(const chunk *c, const float *D, float *out, float *tmp);
void intra_apply_t(const chunk *c, const float *D, const float *X, float *out, float *tmp);

/* C = alpha op(A) op(B) + beta C, row-major, through CBLAS. */
void mm(int transA, int transB, int M, int N, int Kd, float alpha, const float *A, int lda,
        const float *B, int ldb, float beta, float *C, int ldc);

/* A = (I + L)⁻¹ for strictly lower L (n×n, unit lower triangular result), in place allowed. */
void unit_lower_inverse(int n, const float *L, float *A);

/* States: internal [K][V]; user layout [K][V] or [V][K]. */
void state_load(const problem *pb, const float *src, float *S);
void state_store(const problem *pb, const float *S, float *dst);

/* Threads to use: one scratch slot each, no more than the workspace holds or there are
 * work items (≥ 1). */
int cpu_slots(size_t workspace_bytes, size_t slot_bytes, int64_t items);

/* The backend's work (api.c has validated everything); api.c reaches them through
 * rewy_cpu_backend_ops (cpu_backend.c, backend.h). The sizes are exact, or SIZE_MAX when they
 * do not fit in size_t. */
size_t rewy_cpu_saved_size(const rewy_config *cfg);
size_t rewy_cpu_fwd_workspace_size(const rewy_config *cfg);
size_t rewy_cpu_bwd_workspace_size(const rewy_config *cfg);
rewy_status rewy_cpu_forward(const rewy_fwd_params *p);
rewy_status rewy_cpu_backward(const rewy_bwd_params *p);
/* rewy_backend_ops.l2norm (src/cpu/l2norm.c) */
rewy_status rewy_cpu_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                            const void *dy, void *out, void *stream);
rewy_status rewy_cpu_gate(rewy_dtype dtype, int64_t rows, int heads, int dim, const void *g, const float *A_log,
                          const float *dt_bias, float *y, const float *dy, void *dg, float *dA_log, float *ddt_bias,
                          float *ws, void *stream);

/* REWY_F64 (f64.c): the exact fp64 recurrence instead of the chunk kernels; the saved
 * buffer is the header alone. Called by the entry points above. */
size_t cpu_f64_workspace_size(const rewy_config *cfg, int backward);
rewy_status cpu_f64_forward(const rewy_fwd_params *p);
rewy_status cpu_f64_backward(const rewy_bwd_params *p);

/* Saved-buffer header: the forward's rewy_saved_record (backend.h: config, h0 given, cu_seqlens
 * hash), so the backward can check that it got the same ones. Padded to SAVED_HEADER_BYTES. */
#define SAVED_HEADER_BYTES 128
#define SAVED_MAGIC "rewyCPU"

/* Offsets (in floats, after the header) of what the forward saves:
 * A [tok][HV][BT] always; under policy A also S_c [chunk][HV][K][V], R [tok][HV][V],
 * W [tok][HV][K]. */
typedef struct saved_layout { size_t A, S, R, W, floats; } saved_layout;
saved_layout saved_layout_of(const problem *pb);

/* Forward scan of one value head of one sequence. Writes o (if non-NULL) and the final
 * state, and keeps what the backward needs: A per chunk (always), and S_c, R, W (into
 * the S_all/R_all/W_all arrays when non-NULL). Shared by the forward and the policy-R
 * recompute. */
typedef struct head_io {
    float *A;       /* A rows of this head's first token, stride ldA per token */
    float *S_all;   /* chunk states S_c (chunk stride ldS), or NULL */
    float *R_all;   /* R rows (stride ldR), or NULL */
    float *W_all;   /* W rows (stride ldW), or NULL */
    long ldA, ldS, ldR, ldW;
} head_io;

/* One value head of one sequence through the forward scan. When A_ready is set, A is read
 * (the policy-R recompute); otherwise L and A = (I+L)⁻¹ are formed and written. S: the
 * incoming state [K][V], updated in place to the final state. o may be NULL. c: the
 * caller's chunk buffers (chunk_alloc); on return they hold the sequence's last chunk, where
 * the backward's reverse scan starts. */
void head_forward(const problem *pb, seq_span sp, int hv, const void *q, const void *k,
                  const void *v, const float *g, const void *beta, const void *b, const void *w,
                  float *S, void *o, head_io io, int A_ready, chunk *c, arena scratch);
/* Scratch of head_forward: the chunk's buffers and its own. */
size_t head_forward_floats(int BT, int K, int V);

#endif
