/* common.cuh: shared pieces of the CUDA backend (scalar-gate operators: DeltaNet, GDN).
 *
 *  - Prob: the problem description every kernel receives by value.
 *  - element loads/stores for fp32 / bf16 / fp16.
 *  - bgemm: a block-wide matrix product from shared memory on the tensor cores
 *    (mma.sync m16n8k8, tf32 operands, fp32 accumulation; sm_80 and sm_90a).
 *
 * Conventions (MATH.md §2): a chunk has n ≤ BT ≤ 64 valid rows; shared-memory tiles always
 * have 64 rows, rows ≥ n are zero. G is the chunk-local cumulative natural-log gate (fp32,
 * rows ≥ n repeat G_{n-1}); γ = exp(G). Q is scale·q.
 */
#ifndef REWY_CUDA_COMMON_CUH
#define REWY_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>
#include <type_traits>
#include <utility>
#include "rewy.h"
#include "gates.h" /* the log-gate floor: every cumsum G adds rewy_gate_floor(g) */
#include "rewy_test.h" /* rewy_test_force: the plan's test-only override */
#include "windows.h" /* the time windows' index arithmetic */

namespace rewy_cuda {

constexpr int MAXBT = 64;     /* largest chunk; smem tiles have this many rows */
constexpr int LDN = MAXBT + 4; /* leading dimension of n×n tiles (pad ≡ 4 mod 32: ≤ 2-way bank conflicts) */
constexpr int BV = 32;        /* value-column tile of the scans (16 where the grid would leave SMs idle) */
constexpr int LDA = MAXBT + 8; /* scans: n×n tiles (≡ 8 mod 32 words: conflict-free paired loads) */
constexpr int LDX = MAXBT + 8; /* scans: transposed [BV][token] tiles */
/* scans: K/Q tiles in the input type; transposed state tiles [BV][Kp+8] fp32 */
template <class T> __host__ __device__ inline int scan_ldk(int Kp) { return Kp + (sizeof(T) == 4 ? 4 : 8); }
template <class T> __host__ __device__ inline int scan_ldvt(int bv = BV) { return sizeof(T) == 4 ? bv + 4 : bv + 8; }
__host__ __device__ inline int scan_lds(int Kp) { return Kp + 8; }
constexpr int WBAR_SMEM_MAX_KP = 128; /* WY pullback: W̄ in shared memory up to this K (2-byte inputs), else workspace */
__host__ __device__ inline bool wbar_in_smem(int Kp, int elem_bytes) { return Kp <= WBAR_SMEM_MAX_KP && elem_bytes == 2; }

/* Chunk table entry: first token (row of the [B*T] token axis), valid rows, sequence, chunk in sequence. */
struct ChunkInfo { int tok0, n, seq, idx; };

/* The plan (docs/DESIGN.md, "The plan"): every kernel choice and tile size of one call, taken once by
 * make_plan (backend_common.cuh) from the config, the device (asked once, here) and the caller's pointers
 * (their alignment), before the layout (the size queries') and every launch read it. Each choice has its
 * reason next to the function that takes it for make_plan (named below); the launchers read only these
 * fields. Host only: the kernels receive it inside Prob and never read it. force: the test-only override
 * (rewy_test.h), all REWY_TEST_AUTO in the library's own calls. */
struct Plan {
    int sms;                       /* the device: SMs (0 if it cannot be read), */
    size_t smem_sm, smem_rsv;      /* shared memory per SM and reserved per block, */
    size_t smem_optin;             /* the largest dynamic shared memory per block (opt-in), */
    int wgmma;                     /* and whether the library's wgmma code runs on it (wgmma_binary_ok) */
    rewy_test_force force;
    int recurrent;                 /* the plain fp32 token recurrence (recurrent.cu) instead of the chunk path: K < 16
                                    * (plan_recurrent); then none of the choices below is taken (all 0) */
    int scan_bv;                   /* the scans' value tile, 16, 32 or 64 (plan_scan_bv) */
    int scan_8w, pair_8w;          /* 64-column scans / the scan pair as 8-warp blocks where two fit (plan_scan_8w) */
    int scan_wg, bwd_scan_wg;      /* the wgmma forward / reverse scans (state_scan_wg_ok, bwd_state_scan_wg_ok) */
    int scan_wg2;                  /* their 64-column tiles as two warpgroups per block (plan_scan_wg2) */
    int fuse_output;               /* the forward scan computes o (state_scan_fuses_output) */
    int scan_wu;                   /* with W, U from kkt_inverse (state_scan_uses_wu) */
    int beside_kkt;                /* starting beside kkt_inverse (state_scan_beside_kkt) */
    int bwd_w;                     /* policy R's reverse scan runs the W chain (bwd_scan_uses_w) */
    int chain_bvc;                 /* policy R's register chains: value columns per block, 0: not (chain_scan_bvc) */
    int chain_bulk;                /* and their full chunks by bulk copies on sm_90 (chain_scan_bulk) */
    int chain_ws;                  /* those chains as the warp-specialized wgmma pair (chain_scan_ws; chain_bvc = 128) */
    int fwd_chain;                 /* the forward pass's register chain with its output: value columns per block, 0:
                                    * not (chain_forward_bvc; taken before fuse_output, which it excludes) */
    int fwd_ws;                    /* that chain as the warp-specialized wgmma kernel (chain_forward_ws; fwd_chain: its
                                    * value tile, 64 or 128) */
    int pb_ws;                     /* the scalar-gate ReWY pullback as the warp-specialized wgmma kernel (pullback_ws) */
    int rev_ws;                    /* the reverse scan and that pullback as one fused warp-specialized kernel (reverse_ws) */
    int win;                       /* policy R's time windows: chunks per window, 0: none (plan_windows, backend_common.cuh) */
    int nwin = 1;                  /* and how many over the longest sequence (1: none, also in a plan made as {}) */
    int seg;                       /* those windows run at once, as the segments of a sequence split (MATH §11d;
                                    * plan_segments, backend_common.cuh): the backward of every segment in one launch */
    int fwd_seg;                   /* and the forward's (MATH §11b): local walks, combine, then the warp-specialized
                                    * chain over every segment at once (plan_fwd_segments) */
    int rec_vt;                    /* the value columns of policy R's recompute blocks before the fused pass (chain_ws.cu's
                                    * recompute form): 64 where two blocks a sequence (segment) and head still fit the SMs
                                    * in one wave, else 128 */
    int rev_rf;                    /* policy R's fused pass forms R from S_c itself, so the recompute stores S_c alone
                                    * (policy A's pass loads the R its forward saved; reverse_ws.cu's header) */
    int rev_pair;                  /* that pass as two blocks a walk, each with the whole chain and every other chunk's
                                    * pullback (rev_pair_fits, backend_common.cuh; reverse_ws.cu's header) */
};

struct Prob {
    int B, T, H, HV, K, V, BT, G; /* G = HV / H */
    int N;                        /* sequences */
    int NC;                       /* chunk-table entries (≥ chunks in use; extra ones have n = 0) */
    int Kp;                       /* K rounded up to 32 */
    int gated;                    /* GDN: 1; DeltaNet: 0 */
    int svf;                      /* states [V,K] */
    int zero_h0;                  /* no initial state: each sequence starts from S = 0 (rewy_first_gate_grad) */
    int a16;                      /* the saved A = (I + L)⁻¹ in bf16, not fp32 (Layout::a16; a16_of, copy_a_tile) */
    Plan plan;                    /* host only: this call's choices */
    float scale;
    const ChunkInfo *ctab;        /* [NC] */
    const int *coff;              /* [N+1] chunk offset of each sequence */
    /* One time window (Plan::win; DESIGN.md, "Memory"): the scans walk the local chunks [win_lo, win_hi) of every
     * sequence (0, INT_MAX: all of them). win_len > 0 (the backward of a window): the per-chunk workspace regions
     * hold the window's chunks only, local chunk j of sequence sq at slot sq·win_len + j − win_lo, and the
     * parallel stages run over the slots. */
    int win_lo, win_hi, win_len;
    /* The forward pass under time windows (Plan::win): its one walk of every sequence also leaves the state after
     * each ck_win-th chunk but the sequence's last in ck, fp32 [window][N·HV][K][V] (the ht layout): checkpoint w is
     * window w + 1's start, from which the backward recomputes it. NULL: none (the backward, and no windows). */
    float *ck;
    int ck_win;
};

/* Prob's views of the window index arithmetic (windows.h, shared with its host model).
 * The chunks [b, e) of sequence sq that a scan walks: the whole sequence, or its part in the window */
__device__ __forceinline__ void seq_chunks(const Prob &p, int sq, int &b, int &e) {
    win_seq_chunks(p.coff[sq], p.coff[sq + 1], p.win_lo, p.win_hi, b, e);
}
/* where the forward's step of chunk c (of a walk over [c_begin, c_end), one whole sequence) leaves a time window's
 * checkpoint (Prob::ck), else NULL */
__device__ __forceinline__ float *window_checkpoint(const Prob &p, int c_begin, int c, int c_end) {
    if (!p.ck) return nullptr;
    const int w = win_checkpoint(c_begin, c, c_end, p.ck_win);
    return w < 0 ? nullptr : p.ck + (size_t)w * p.N * p.HV * p.K * p.V;
}
/* the parallel stages' grid over chunks: every chunk-table entry, or the window's slots */
__host__ __device__ inline int chunk_slots(const Prob &p) { return p.win_len ? p.N * p.win_len : p.NC; }
/* the chunk of slot x (−1: past its sequence's end) */
__device__ __forceinline__ int slot_chunk(const Prob &p, int x) {
    return p.win_len ? win_slot_chunk(p.coff, p.win_lo, p.win_len, x) : x;
}
/* the workspace slot of chunk c, whose table entry is ci (c itself outside a window's backward) */
__device__ __forceinline__ int chunk_slot(const Prob &p, int c, const ChunkInfo &ci) {
    return p.win_len ? win_chunk_slot(ci.seq, ci.idx, p.win_lo, p.win_len) : c;
}

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Vector-gate operands of the two scans (MATH §2), written per chunk and value head by
 * vec_factors.cu so that the sequential scans do no per-feature exponentials:
 *   E = b⊙k⊙γ, F = k⊙e^{G_n−G}, Q_g = q⊙γ (the consumer applies scale): factor_t [NC*HV][BT][Kp],
 *   rows ≥ n and features ≥ K zero; lam = γ_n: fp32 [NC*HV][Kp]; w: GDN2's write gate (input dtype,
 *   [B*T][HV][V]) or NULL (KDA: β, from the GB table). Bounded by |k|, |q| for log gates ≤ 0, so the
 *   input type holds them; fp32 inputs store them in bf16 (the chunk states are bf16 already). */
template <class T> using factor_t = typename std::conditional<sizeof(T) == 4, __nv_bfloat16, T>::type;
struct VecOps {
    const void *E, *F, *Qg;
    const float *lam;
    const void *w;
};

template <class T> __device__ __forceinline__ float ld(const T *p);
template <> __device__ __forceinline__ float ld<float>(const float *p) { return *p; }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
template <> __device__ __forceinline__ float ld<__half>(const __half *p) { return __half2float(*p); }

template <class T> __device__ __forceinline__ void st(T *p, float x);
template <> __device__ __forceinline__ void st<float>(float *p, float x) { *p = x; }
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }
template <> __device__ __forceinline__ void st<__half>(__half *p, float x) { *p = __float2half(x); }

/* Chunk-state storage type in workspace / saved buffers (S_c, S̄⁺): bf16, as FLA stores its h. (An fp32
 * build variant, REWY_CUDA_STATE_FP32, was dropped once the bf16-only kernels stopped compiling with it.) */
typedef __nv_bfloat16 state_t;
/* Storage type of the per-token chunk intermediates R (forward scan) and P or R̄ (reverse scan), as
 * FLA stores its v_new and dv: they are written once and read by the output and the pullback, whose
 * products with them then run on bf_mma (bf16 operands, fp32 accumulation) and read half the bytes.
 * They were fp32 before; the scans already rounded them to bf16 for their own products. */
typedef state_t rp_t;
/* Storage type of C_q (MATH §2: the masked, decayed scale·Q Kᵀ of a chunk), the operand of the output's
 * C_q R and the reverse scan's C_qᵀ Ō: bf16, as FLA rounds its A_qk to the input type before those
 * products; with bf16 R and Ō both then run on bf_mma, and C_q takes half the bytes and shared memory. */
typedef state_t cq_t;

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Operand element (fp32, bf16 or fp16) as float. */
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float ldf(const __half *p) { return __half2float(*p); }
/* x[m] = a[m] for 8 contiguous elements (16-byte aligned for two-byte types: one vector load instead of eight
 * scalar ones), and Σ a[m]·b[m] over them */
template <class T> __device__ __forceinline__ void ld8(const T *a, float (&x)[8]) {
    if constexpr (sizeof(T) == 2) {
        const uint4 u = *reinterpret_cast<const uint4 *>(a);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int m = 0; m < 8; m++) x[m] = ldf(e + m);
    } else {
#pragma unroll
        for (int m = 0; m < 8; m++) x[m] = ldf(a + m);
    }
}
/* a[m] = x[m] for 8 contiguous elements (one 16-byte store for two-byte types; 16-byte aligned) */
template <class T> __device__ __forceinline__ void st8(T *a, const float (&x)[8]) {
    if constexpr (sizeof(T) == 2) {
        uint4 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int m = 0; m < 8; m++) st<T>(e + m, x[m]);
        *reinterpret_cast<uint4 *>(a) = u;
    } else {
#pragma unroll
        for (int m = 0; m < 8; m++) st<T>(a + m, x[m]);
    }
}
/* the sum over the four lanes that share a row of an mma / wgmma accumulator fragment (lanes 4r … 4r + 3) */
__device__ __forceinline__ float sum4(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
/* the sums of x and of y over the NW warps of a block (or of a named barrier's threads, warps 0 … NW − 1) at once: each
 * warp's sums into red (2·NW floats), sync(), then every thread adds them up. GUARD: a sync() before the writes too,
 * where threads of an earlier call may still read red (a caller with a barrier between those reads and this call
 * leaves it out) */
template <int NW, bool GUARD, class Sync> __device__ __forceinline__ float2 block_sum2(float x, float y, float *red, Sync &&sync) {
    for (int o = 16; o > 0; o >>= 1) {
        x += __shfl_xor_sync(0xffffffffu, x, o);
        y += __shfl_xor_sync(0xffffffffu, y, o);
    }
    if (GUARD) sync();
    if ((threadIdx.x & 31) == 0) {
        red[threadIdx.x >> 5] = x;
        red[NW + (threadIdx.x >> 5)] = y;
    }
    sync();
    float2 s = make_float2(0.f, 0.f);
    for (int w = 0; w < NW; w++) {
        s.x += red[w];
        s.y += red[NW + w];
    }
    return s;
}
template <class T> __device__ __forceinline__ float dot8(const T *a, const T *b) {
    float x[8], y[8], s = 0.f;
    ld8(a, x);
    ld8(b, y);
#pragma unroll
    for (int m = 0; m < 8; m++) s += x[m] * y[m];
    return s;
}

/* Two operand values at k and k+1 (stride = distance between them) as tf32 bit patterns.
 * fp32 is passed as is (the tensor core ignores the low 13 mantissa bits); bf16/fp16 convert exactly.
 * KC: k is contiguous (stride 1), one 64/32-bit shared load for both. */
template <bool KC>
__device__ __forceinline__ void ld_pair(const float *p, int stride, uint32_t &x0, uint32_t &x1) {
    if (KC) {
        const float2 v = *reinterpret_cast<const float2 *>(p);
        x0 = __float_as_uint(v.x);
        x1 = __float_as_uint(v.y);
    } else {
        x0 = __float_as_uint(p[0]);
        x1 = __float_as_uint(p[stride]);
    }
}
template <bool KC>
__device__ __forceinline__ void ld_pair(const __nv_bfloat16 *p, int stride, uint32_t &x0, uint32_t &x1) {
    if (KC) {
        const uint32_t w = *reinterpret_cast<const uint32_t *>(p);
        x0 = w << 16;
        x1 = w & 0xffff0000u;
    } else {
        x0 = (uint32_t)(*reinterpret_cast<const unsigned short *>(p)) << 16;
        x1 = (uint32_t)(*reinterpret_cast<const unsigned short *>(p + stride)) << 16;
    }
}
template <bool KC>
__device__ __forceinline__ void ld_pair(const __half *p, int stride, uint32_t &x0, uint32_t &x1) {
    float2 f;
    if (KC) f = __half22float2(*reinterpret_cast<const __half2 *>(p));
    else f = make_float2(__half2float(p[0]), __half2float(p[stride]));
    x0 = __float_as_uint(f.x);
    x1 = __float_as_uint(f.y);
}

/* ---- bf16 products with ldmatrix (the scans' fast path for bf16 inputs) ----
 * mma.sync m16n8k16 takes bf16 operands straight from ldmatrix: one instruction loads a 16×16 A
 * fragment or two 8-column B blocks, where the tf32 path spends a shared load and an unpack per pair.
 * An fp32 operand (the state, R, P) goes in as two bf16 tiles, hi = bf16(x) and lo = bf16(x − hi):
 * hi + lo carries 16 mantissa bits, more than tf32's 10, and the tensor cores have time to spare. */
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t &r0, uint32_t &r1, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t &r0, uint32_t &r1, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* x as the pair hi = bf16(x), lo = bf16(x − hi), stored at element e of two bf16 tiles (hi only when
 * lo is null) */
__device__ __forceinline__ void st_hilo(__nv_bfloat16 *hi, __nv_bfloat16 *lo, int e, float x) {
    const __nv_bfloat16 h = __float2bfloat16(x);
    hi[e] = h;
    if (lo) lo[e] = __float2bfloat16(x - __bfloat162float(h));
}
/* The scans' fp32 B operands (state, R, γ⊙Ō, P) enter their bf16 products as one bf16 tile, as FLA's
 * do: on the H200 the scans run 8–13 % faster than with a hi/lo pair (two products each), and the
 * worst error over the CUDA test matrix goes from 0.35 to 0.45 of MATH §10's tolerance.
 * -DREWY_CUDA_SCAN_HILO keeps the pair (fp32-like operands). The state itself stays fp32. */
#ifdef REWY_CUDA_SCAN_HILO
constexpr bool SCAN_LO = true;
#else
constexpr bool SCAN_LO = false;
#endif
__device__ __forceinline__ __nv_bfloat16 *scan_lo(__nv_bfloat16 *lo) { return SCAN_LO ? lo : nullptr; }
/* the scans' bf16 products on warp tiles of NS column blocks: two k chains (bf_mma's KI) when NS ≤ 2, where
 * one warp's mma per k step are too few to hide each other's latency (a scan step is a chain of them) */
template <int NS> constexpr int SCAN_KI = NS <= 2 ? 2 : 1;
/* e^x of a scalar-gate decay exponent (G sums, differences): DeltaNet (p.gated = 0, G = 0) takes the exact 1
 * without the exponential, a uniform branch (its scans and kkt spent 4–8 % of their instructions on e^0).
 * ex2.approx.ftz of x·log2 e: relative error about |x|·2⁻²⁴ + 2⁻²², under 4e-6 for x ≥ −30 (the gate floor), far inside
 * MATH §10; the chains' steps are shorter by the ~10 instructions of expf (docs/DESIGN.md, session 23). The ftz form takes
 * two instructions where __expf's takes five (a range test and two fix-up products for a result under 2⁻¹²⁶, which
 * flushes to 0 here: a decay that small is 0 to every sum it enters); at GDN (8,2048,32) the fused reverse pass spent 8 %
 * of its instructions on gexp (session 46's profile). */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float gexp(const Prob &p, float x) { return p.gated ? ex2_ftz(x * 1.4426950408889634f) : 1.f; }
/* acc += this warp's 16 × 8·NS tile of A·B, A and B bf16 in shared memory, Kd % 16 == 0:
 *   A(i, k): AT = false: A[i*lda + k] (k contiguous); AT = true: A[k*lda + i] (stored transposed, ldmatrix.trans)
 *   B(k, j): BK = false: Bh[j*ldb + k] (k contiguous); BK = true: Bh[k*ldb + j] (ldmatrix.trans);
 *            + Bl(k, j) when Bl is given (an fp32 operand as hi + lo)
 * rows i0…i0+15, columns j0…j0+8·NS−1; lda, ldb multiples of 8 (16-B rows for ldmatrix).
 * KI = 2: even and odd k steps accumulate separately (twice the independent mma chains; narrow tiles). */
template <int NS, bool AT, bool BK = false, int KI = 1>
__device__ __forceinline__ void bf_mma(float (&acc)[4][4], int Kd, const __nv_bfloat16 *A, int lda, int i0,
                                       const __nv_bfloat16 *Bh, const __nv_bfloat16 *Bl, int ldb, int j0) {
    const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
    /* the row each lane points ldmatrix at: A's four 8×8 blocks are (rows 0-7 | 8-15) × (k 0-7 | 8-15) */
    const __nv_bfloat16 *ap = AT ? A + (r + (m >> 1) * 8) * lda + i0 + (m & 1) * 8
                                 : A + (i0 + r + (m & 1) * 8) * lda + (m >> 1) * 8;
    const int astep = AT ? 16 * lda : 16;
    /* B: blocks (columns s, k 0-7), (s, k 8-15), (s+1, k 0-7), (s+1, k 8-15); x2 (a lone last column
     * block): the first two, from lanes 0-15. Steps: column block bstep, k step of 16 kstep. */
    const int boff = BK ? (r + (m & 1) * 8) * ldb + j0 + (m >> 1) * 8 : (j0 + r + (m >> 1) * 8) * ldb + (m & 1) * 8;
    const int boff2 = BK ? (r + (m & 1) * 8) * ldb + j0 : (j0 + r) * ldb + (m & 1) * 8;
    const int bstep = BK ? 8 : 8 * ldb, kstep = BK ? 16 * ldb : 16;
    auto step = [&](int k0, float (&c)[4][4]) {
        uint32_t a[4];
        if (AT) ldsm_x4_t(a, ap + (k0 / 16) * astep);
        else ldsm_x4(a, ap + k0);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const __nv_bfloat16 *B = h ? Bl : Bh;
            if (h && !Bl) break;
#pragma unroll
            for (int s = 0; s + 1 < NS; s += 2) {
                uint32_t b[4];
                if (BK) ldsm_x4_t(b, B + boff + s * bstep + (k0 / 16) * kstep);
                else ldsm_x4(b, B + boff + s * bstep + k0);
                mma_bf16(c[s], a, b[0], b[1]);
                mma_bf16(c[s + 1], a, b[2], b[3]);
            }
            if constexpr (NS & 1) {
                uint32_t b0, b1;
                if (BK) ldsm_x2_t(b0, b1, B + boff2 + (NS - 1) * bstep + (k0 / 16) * kstep);
                else ldsm_x2(b0, b1, B + boff2 + (NS - 1) * bstep + k0);
                mma_bf16(c[NS - 1], a, b0, b1);
            }
        }
    };
    if constexpr (KI == 1) {
#pragma unroll 2
        for (int k0 = 0; k0 < Kd; k0 += 16) step(k0, acc);
    } else {
        /* two independent chains (even and odd k steps), added at the end: a narrow tile's few mma per
         * k step otherwise wait on each other's accumulator */
        float odd[4][4] = {};
        int k0 = 0;
#pragma unroll 2
        for (; k0 + 16 < Kd; k0 += 32) {
            step(k0, acc);
            step(k0 + 16, odd);
        }
        if (k0 < Kd) step(k0, acc);
#pragma unroll
        for (int s2 = 0; s2 < NS; s2++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[s2][e] += odd[s2][e];
    }
}

/* bf16 × bf16 products whose operands ldmatrix can read (k-contiguous or transposed rows of a multiple of
 * 8 elements, 16-B aligned bases, Kd % 16 == 0) go to bf_mma: same sums (bf16 products are exact in
 * tf32 too), a quarter of the instructions. Returns false (nothing done) otherwise. */
template <int NS, bool AKC, bool BKC, class TA, class TB>
__device__ __forceinline__ bool try_bf_mma(float (&acc)[4][4], int Kd, const TA *A, int ars, int acs, const TB *B,
                                           int brs, int bcs, int i0, int j0) {
    if constexpr (std::is_same<TA, __nv_bfloat16>::value && std::is_same<TB, __nv_bfloat16>::value) {
        const int lda = AKC ? ars : acs, ldb = BKC ? bcs : brs;
        const bool ok = (Kd & 15) == 0 && (lda & 7) == 0 && (ldb & 7) == 0 && (AKC || ars == 1) && (BKC || bcs == 1) &&
                        ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B)) & 15) == 0;
        if (ok) {
            bf_mma<NS, !AKC, !BKC>(acc, Kd, A, lda, i0, B, nullptr, ldb, j0);
            return true;
        }
    }
    return false;
}

/* C = A·B over the whole block (NW warps). A(i,k) = A[i*ars + k*acs] (M×Kd), B(k,j) = B[k*brs + j*bcs]
 * (Kd×N); M % 16 == 0, N % 8 == 0, Kd % 8 == 0; operands in shared memory (fp32, bf16 or fp16 elements;
 * tf32 operands, exact for bf16/fp16), fp32 accumulation on the tensor cores (mma.sync m16n8k8).
 * Each lane takes the k pair (2t, 2t+1) of every 8-wide k step for the mma slots (t, t+4) of both A
 * and B (the sum over k is unchanged), so k-contiguous operands load both with one instruction.
 * Narrow warp tiles accumulate even and odd k steps separately (warp_tile): twice the independent
 * mma chains per warp, which is what bounds these small products (latency, not issue).
 * epi(i, j, c) is called exactly once per output element by the thread that owns it; the owner of
 * (i, j) depends only on (M, N), so products of one shape may update the same element without a barrier. */
/* One warp's 16 × 8·NS tile over the whole k range. NS is a compile-time count of 8-wide column
 * blocks: no guard sits between the loads and the mma (a guarded mma costs a WARPSYNC and the
 * operand conversion once per guard; this is most of what a product costs otherwise). */
template <int NS, bool AKC, bool BKC, class TA, class TB>
__device__ __forceinline__ void warp_tile(int Kd, const TA *a0p, const TA *a1p, int acs, const TB *bp, int brs,
                                          int bcs, float (&acc)[4][4]) {
    /* with one or two column blocks, even and odd k steps go to separate accumulators (twice the
     * independent mma chains); with three or four there are chains enough, and registers matter more */
    constexpr bool SPLIT = NS <= 2;
    float odd[SPLIT ? NS : 1][4];
#pragma unroll
    for (int s = 0; s < (SPLIT ? NS : 1); s++) odd[s][0] = odd[s][1] = odd[s][2] = odd[s][3] = 0.f;
    auto step = [&](int k0, auto &c) {
        uint32_t a[4];
        ld_pair<AKC>(a0p + k0 * acs, acs, a[0], a[2]);
        ld_pair<AKC>(a1p + k0 * acs, acs, a[1], a[3]);
#pragma unroll
        for (int s = 0; s < NS; s++) {
            uint32_t b0, b1;
            ld_pair<BKC>(bp + k0 * brs + s * 8 * bcs, brs, b0, b1);
            mma_tf32(c[s], a, b0, b1);
        }
    };
    int k0 = 0;
#pragma unroll 2
    for (; k0 + 16 <= Kd; k0 += 16) {
        step(k0, acc);
        if constexpr (SPLIT) step(k0 + 8, odd);
        else step(k0 + 8, acc);
    }
    if (k0 < Kd) step(k0, acc);
    if constexpr (SPLIT) {
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[s][r] += odd[s][r];
    }
}

/* C = A·B over the whole block (NW warps). A(i,k) = A[i*ars + k*acs] (M×Kd), B(k,j) = B[k*brs + j*bcs]
 * (Kd×N); M % 16 == 0, N % 8 == 0, Kd % 8 == 0; operands in shared memory (fp32, bf16 or fp16 elements;
 * tf32 operands, exact for bf16/fp16), fp32 accumulation on the tensor cores (mma.sync m16n8k8).
 * Each lane takes the k pair (2t, 2t+1) of every 8-wide k step for the mma slots (t, t+4) of both A
 * and B (the sum over k is unchanged), so k-contiguous operands load both with one instruction.
 * Narrow warp tiles accumulate even and odd k steps separately (warp_tile): twice the independent
 * mma chains per warp, which is what bounds these small products (latency, not issue).
 * epi(i, j, c) is called exactly once per output element by the thread that owns it; the owner of
 * (i, j) depends only on (M, N), so products of one shape may update the same element without a barrier. */
template <int NW, bool AKC, bool BKC, class TA, class TB, class Epi>
__device__ __forceinline__ void bgemm_impl(int M, int N, int Kd, const TA *A, int ars, int acs,
                                           const TB *B, int brs, int bcs, Epi &epi) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    /* warp tiles of 16×32, or 16×16 or 16×8 when that is what it takes to keep every warp busy */
    const int mt = M >> 4;
    const int wn = mt * ((N + 31) >> 5) >= NW ? 4 : (mt * ((N + 15) >> 4) >= NW ? 2 : 1);
    const int nt = (N + 8 * wn - 1) / (8 * wn);
    for (int tile = warp; tile < mt * nt; tile += NW) {
        const int i0 = (tile % mt) << 4, j0 = (tile / mt) * 8 * wn;
        const int nsub = min(wn, (N - j0) >> 3);
        float acc[4][4];
#pragma unroll
        for (int s = 0; s < 4; s++) acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = 0.f;
        const TA *a0p = A + (i0 + g) * ars + 2 * t * acs, *a1p = a0p + 8 * ars;
        const TB *bp = B + 2 * t * brs + (j0 + g) * bcs;
        /* nsub is uniform over the warp; each case is a separate unguarded loop */
        if (nsub == 4 && try_bf_mma<4, AKC, BKC>(acc, Kd, A, ars, acs, B, brs, bcs, i0, j0)) {
        } else if (nsub == 2 && try_bf_mma<2, AKC, BKC>(acc, Kd, A, ars, acs, B, brs, bcs, i0, j0)) {
        } else if (nsub == 1 && try_bf_mma<1, AKC, BKC>(acc, Kd, A, ars, acs, B, brs, bcs, i0, j0)) {
        } else if (nsub == 4) warp_tile<4, AKC, BKC>(Kd, a0p, a1p, acs, bp, brs, bcs, acc);
        else if (nsub == 2) warp_tile<2, AKC, BKC>(Kd, a0p, a1p, acs, bp, brs, bcs, acc);
        else if (nsub == 3) warp_tile<3, AKC, BKC>(Kd, a0p, a1p, acs, bp, brs, bcs, acc);
        else warp_tile<1, AKC, BKC>(Kd, a0p, a1p, acs, bp, brs, bcs, acc);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            if (s < nsub) {
                const int j = j0 + s * 8 + 2 * t;
                epi(i0 + g, j, acc[s][0]);
                epi(i0 + g, j + 1, acc[s][1]);
                epi(i0 + g + 8, j, acc[s][2]);
                epi(i0 + g + 8, j + 1, acc[s][3]);
            }
        }
    }
}

template <int NW, class TA, class TB, class Epi>
__device__ __forceinline__ void bgemm(int M, int N, int Kd, const TA *A, int ars, int acs,
                                      const TB *B, int brs, int bcs, Epi epi) {
    if (acs == 1) {
        if (brs == 1) bgemm_impl<NW, true, true>(M, N, Kd, A, ars, acs, B, brs, bcs, epi);
        else bgemm_impl<NW, true, false>(M, N, Kd, A, ars, acs, B, brs, bcs, epi);
    } else {
        if (brs == 1) bgemm_impl<NW, false, true>(M, N, Kd, A, ars, acs, B, brs, bcs, epi);
        else bgemm_impl<NW, false, false>(M, N, Kd, A, ars, acs, B, brs, bcs, epi);
    }
}

/* ---- one warp's tile of a product, kept in registers (the fast pullbacks) ----
 * Warp tiles of 16 rows × 8·NS columns as mma fragments: lane (g, t) = (lane/4, lane%4) holds
 * rows i0+g (slots 0, 1) and i0+g+8 (slots 2, 3), columns j0+8s+2t (slots 0, 2) and +1 (1, 3). */
/* acc += this warp's 16×(8·NS) tile of A·B (operands as in bgemm; AKC/BKC: k contiguous) */
template <int NS, bool AKC, bool BKC, class TA, class TB>
__device__ __forceinline__ void pf_mma(float (&acc)[4][4], int Kd, const TA *A, int ars, int acs, const TB *B, int brs,
                                       int bcs, int i0, int j0) {
    if (try_bf_mma<NS, AKC, BKC>(acc, Kd, A, ars, acs, B, brs, bcs, i0, j0)) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const TA *a0p = A + (i0 + g) * ars + 2 * t * acs;
    warp_tile<NS, AKC, BKC>(Kd, a0p, a0p + 8 * ars, acs, B + 2 * t * brs + (j0 + g) * bcs, brs, bcs, acc);
}
/* acc += diag(s) · (this warp's tile of A·B): s_lo for rows g, s_hi for rows g + 8 */
template <int NS, bool AKC, bool BKC, class TA, class TB>
__device__ __forceinline__ void pf_mma_rows(float (&acc)[4][4], float s_lo, float s_hi, int Kd, const TA *A, int ars,
                                            int acs, const TB *B, int brs, int bcs, int i0, int j0) {
    float tmp[4][4] = {};
    pf_mma<NS, AKC, BKC>(tmp, Kd, A, ars, acs, B, brs, bcs, i0, j0);
#pragma unroll
    for (int s = 0; s < NS; s++) {
        acc[s][0] += s_lo * tmp[s][0];
        acc[s][1] += s_lo * tmp[s][1];
        acc[s][2] += s_hi * tmp[s][2];
        acc[s][3] += s_hi * tmp[s][3];
    }
}
/* calls f(i, j, s, e) for every element of a warp accumulator: row i, column j, column block s, slot e */
template <int NS, class F>
__device__ __forceinline__ void pf_each(int i0, int j0, float (&acc)[4][4], F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int s = 0; s < NS; s++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(i0 + g + (e >> 1) * 8, j0 + 8 * s + 2 * t + (e & 1), s, e);
}

/* ---- global → shared tile copies ----
 * copy_tile: rows [0, rows) × cols [0, ncols) of dst (same element type as src, row stride ldd) get
 * src[i*rs + c0 + j] for i < n and c0 + j < cmax, zero elsewhere. Aligned cases (16 B vectors of 8
 * elements) go through cp.async (no registers, all copies in flight at once); call cp_async_wait()
 * and __syncthreads() before reading. Other cases fall back to plain loads. ldd*sizeof(T) % 16 == 0. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int sz = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(sz));
}
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}
/* Pipelined copies (the fast pullbacks' V slabs): cp_async_commit() closes the thread's copies issued
 * since the last commit into a group (an empty group is legal and complete at once);
 * cp_async_wait_group<N>() waits until at most the N newest committed groups of this thread are still
 * in flight. Like cp_async_wait(), it covers only this thread's copies: a __syncthreads() must follow
 * before other threads read the tiles. */
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Bulk copies (sm_90: cp.async.bulk, the copy engine moves a row of up to a few hundred bytes on one instruction)
 * completing on an mbarrier in shared memory: every thread that issues copies into a buffer first arrives on its
 * mbarrier with the bytes it is about to issue (mbar_expect; the barrier counts one arrival per such thread), so the
 * barrier's phase ends once all of them arrived and all those bytes landed; mbar_wait(parity) waits for the phase of
 * that parity, and makes the bytes visible to the waiting thread. Sizes and both addresses must be multiples of 16 B.
 * The generic proxy's reads of a buffer must be ordered before the async proxy's writes into it: the issuing threads
 * pass a block barrier after the last reads, then bulk_fence. */
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(unsigned mb, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mb), "r"(arrivals) : "memory");
}
/* after every mbar_init of the block, before the block barrier that precedes the barriers' first use */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect(unsigned mb, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mb), "r"(bytes) : "memory");
}
/* a plain arrival (no bytes): a consumer's "done with this buffer" on a barrier that counts its arrivals */
__device__ __forceinline__ void mbar_arrive(unsigned mb) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mb) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned mb, unsigned parity) {
    /* labels are local to the braces' block, so every inlined copy may repeat them */
    asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n"
                 ::"r"(mb), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_g2s(unsigned dst, const void *src, unsigned bytes, unsigned mb) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(mb) : "memory");
}
#endif

/* The fast pullbacks' V-slab tiles (pullback.cu, vec_pullback.cu), one bit each in a buffer set:
 * PR (P, or R̄ in WY), V, R, Ō, S_c, S̄⁺. The early ones (PR, V) are read only before a slab's mid
 * barrier, so a single buffer of them can take the next slab's copy from there on. */
enum { SL_PR, SL_V, SL_R, SL_O, SL_SC, SL_SB, SL_NT };
constexpr unsigned SL_ALL = (1u << SL_NT) - 1u, SL_EARLY = (1u << SL_PR) | (1u << SL_V);
/* double-buffered sets in order of preference (the first whose layout fits is used): all, the late four,
 * Ō + S_c + S̄⁺, S_c + S̄⁺, none */
constexpr int SL_NPREF = 5;
__host__ __device__ constexpr unsigned sl_db_pref(int i) {
    return i == 0 ? SL_ALL
         : i == 1 ? SL_ALL & ~SL_EARLY
         : i == 2 ? (1u << SL_O) | (1u << SL_SC) | (1u << SL_SB)
         : i == 3 ? (1u << SL_SC) | (1u << SL_SB)
                  : 0u;
}

template <class T>
__device__ __forceinline__ void copy_tile(T *dst, int ldd, int rows, int ncols, const T *src, size_t rs, int n,
                                          int c0, int cmax) {
    constexpr int EPV = 16 / sizeof(T); /* elements per 16 B */
    const bool vec = ((reinterpret_cast<uintptr_t>(src) & 15) == 0) && (rs % EPV == 0) && (c0 % EPV == 0) &&
                     (cmax % EPV == 0) && (ncols % EPV == 0);
    if (vec) {
        const int gv = ncols / EPV, total = rows * gv;
        for (int e = threadIdx.x; e < total; e += blockDim.x) {
            const int i = e / gv, c = (e - i * gv) * EPV;
            const bool ok = i < n && c0 + c < cmax;
            cp_async16(dst + i * ldd + c, ok ? (const void *)(src + (size_t)i * rs + c0 + c) : (const void *)src, ok);
        }
    } else {
        for (int e = threadIdx.x; e < rows * ncols; e += blockDim.x) {
            const int i = e / ncols, j = e - i * ncols;
            T x;
            if (i < n && c0 + j < cmax) x = src[(size_t)i * rs + c0 + j];
            else x = T(0.f);
            dst[i * ldd + j] = x;
        }
    }
}

/* copy_tile into a tile of another element type (the general kernels' fp32 tiles of R, P): plain loads,
 * converted; the same as copy_tile when the types agree. Visible to the block after __syncthreads(). */
template <class D, class S>
__device__ __forceinline__ void copy_tile_to(D *dst, int ldd, int rows, int ncols, const S *src, size_t rs, int n, int c0,
                                             int cmax) {
    if constexpr (std::is_same<D, S>::value) {
        copy_tile<D>(dst, ldd, rows, ncols, src, rs, n, c0, cmax);
    } else {
        for (int e = threadIdx.x; e < rows * ncols; e += blockDim.x) {
            const int i = e / ncols, j = e - i * ncols;
            st<D>(dst + i * ldd + j, (i < n && c0 + j < cmax) ? ldf(src + (size_t)i * rs + c0 + j) : 0.f);
        }
    }
}

/* copy_tile for a compile-time ROWS × NCOLS tile (the fast paths' per-chunk tiles): each thread's 16-B
 * vectors sit in one column, NT / (vectors per row) rows apart, so the index arithmetic is done once per
 * tile instead of once per vector (the general loop's division made the copies a fifth of a scan's
 * instructions). ROWS = 0 or NCOLS = 0: the general copy_tile; so is a source that is not 16-B aligned. */
template <class T, int ROWS, int NCOLS, int NT>
__device__ __forceinline__ void copy_tile_k(T *dst, int ldd, int rows, int ncols, const T *src, size_t rs, int n,
                                            int c0, int cmax) {
    constexpr int EPV = 16 / sizeof(T), GV = NCOLS / EPV > 0 ? NCOLS / EPV : 1; /* vectors per row */
    if constexpr (ROWS > 0 && NCOLS > 0 && NCOLS % EPV == 0 && NT % GV == 0) {
        constexpr int RSTEP = NT / GV, ITER = (ROWS + RSTEP - 1) / RSTEP;
        const bool vec = ((reinterpret_cast<uintptr_t>(src) & 15) == 0) && (rs % EPV == 0) && (c0 % EPV == 0) &&
                         (cmax % EPV == 0);
        if (vec) {
            const int i = threadIdx.x / GV, c = (threadIdx.x % GV) * EPV;
            const bool cok = c0 + c < cmax;
            const T *sp = src + (size_t)i * rs + c0 + c;
            T *dp = dst + i * ldd + c;
#pragma unroll
            for (int m = 0; m < ITER; m++) {
                if (ROWS % RSTEP != 0 && i + m * RSTEP >= ROWS) break;
                const bool ok = cok && i + m * RSTEP < n;
                cp_async16(dp + m * RSTEP * ldd, ok ? (const void *)(sp + (size_t)m * RSTEP * rs) : (const void *)src, ok);
            }
            return;
        }
    }
    copy_tile<T>(dst, ldd, rows, ncols, src, rs, n, c0, cmax);
}

/* What the pullbacks read of one chunk and value head: R and P (R̄ under WY) [BT][V] and S_c, S̄⁺ [K][V] at workspace
 * entry x (slot · HV + hv), dO and v [tokens][HV][V] from the chunk's first token */
template <class T> struct PbSlices {
    const rp_t *R, *PR;
    const state_t *Sc, *Sb;
    const T *dO, *v;
};
template <class T>
__device__ __forceinline__ PbSlices<T> pb_slices(const Prob &p, size_t x, size_t tok0, int hv, const rp_t *R,
                                                 const rp_t *PR, const state_t *Sc, const state_t *Sb, const T *dO,
                                                 const T *v) {
    const size_t rows = x * p.BT * p.V, st = x * p.K * p.V, tk = tok0 * p.HV * p.V + (size_t)hv * p.V;
    return {R + rows, PR + rows, Sc + st, Sb + st, dO + tk, v + tk};
}

/* The fast pullbacks' V-slab copies (pullback.cu, vec_pullback.cu): the tiles of slab sl named in `set`
 * (bits SL_*) into the buffers slab sl uses, at byte offsets slab[tile][sl & 1] of smc. Slabs are BVS
 * columns wide; rp_t tiles (P or R̄, R) have rows of LDR elements, input-type ones (V, Ō) and S_c, S̄⁺ LDH.
 * hs: the chunk and value head's slices (pb_slices); n valid rows. */
/* slab[t][b] (b = 0, 1) with no runtime array index: indexed at run time, the layout's offset table (a
 * constexpr or a kernel parameter) is copied to local memory (vec_pullback_fast: a 144–160 B stack
 * frame and 16 % more time, measured) */
__device__ __forceinline__ int slab_at(const int (&slab)[SL_NT][2], int t, int b) { return b ? slab[t][1] : slab[t][0]; }

template <class T, int BVS, int LDR, int LDH, int KS, int NT>
__device__ __forceinline__ void copy_slab(char *smc, const int (&slab)[SL_NT][2], unsigned set, int sl, const Prob &p,
                                          int n, const PbSlices<T> &hs) {
    const int v0 = sl * BVS, b = sl & 1;
    const size_t rsv = (size_t)p.HV * p.V;
    auto rp = [&](int t) { return reinterpret_cast<rp_t *>(smc + slab_at(slab, t, b)); };
    auto in = [&](int t) { return reinterpret_cast<T *>(smc + slab_at(slab, t, b)); };
    auto sta = [&](int t) { return reinterpret_cast<state_t *>(smc + slab_at(slab, t, b)); };
    /* compile-time tiles (NT threads): the general copy_tile's index arithmetic (a division per 16-B vector) ran in
     * every slab; H100, GDN (4,4096,16): pullback_fast 158.9 → 155.6 µs a window (session 30) */
    if (set & (1u << SL_PR)) copy_tile_k<rp_t, MAXBT, BVS, NT>(rp(SL_PR), LDR, MAXBT, BVS, hs.PR, p.V, n, v0, p.V);
    if (set & (1u << SL_V)) copy_tile_k<T, MAXBT, BVS, NT>(in(SL_V), LDH, MAXBT, BVS, hs.v, rsv, n, v0, p.V);
    if (set & (1u << SL_R)) copy_tile_k<rp_t, MAXBT, BVS, NT>(rp(SL_R), LDR, MAXBT, BVS, hs.R, p.V, n, v0, p.V);
    if (set & (1u << SL_O)) copy_tile_k<T, MAXBT, BVS, NT>(in(SL_O), LDH, MAXBT, BVS, hs.dO, rsv, n, v0, p.V);
    if (set & (1u << SL_SC)) copy_tile_k<state_t, KS, BVS, NT>(sta(SL_SC), LDH, KS, BVS, hs.Sc, p.V, p.K, v0, p.V);
    if (set & (1u << SL_SB)) copy_tile_k<state_t, KS, BVS, NT>(sta(SL_SB), LDH, KS, BVS, hs.Sb, p.V, p.K, v0, p.V);
}

/* Places the V-slab tiles from byte offset o: tile i (sz[i] bytes) gets buffer 0, and buffer 1 where
 * bit i of db is set (else slab[i][1] = slab[i][0]); returns the offset after them */
__host__ __device__ constexpr int place_slabs(int (&slab)[SL_NT][2], const int (&sz)[SL_NT], unsigned db, int o) {
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < SL_NT; i++) {
            if (b == 0 || ((db >> i) & 1u)) {
                slab[i][b] = o;
                o += sz[i];
            } else {
                slab[i][b] = slab[i][0];
            }
        }
    return o;
}

/* Which V-slab tiles take their next copy where, given the double-buffered set db (bits SL_*):
 * double-buffered ones at the top of the slab before (into the other buffer); single ones read to the
 * slab's end ("late") at the top of their own slab; single early ones (PR, V) from the mid barrier B2. */
__host__ __device__ constexpr unsigned slab_late(unsigned db) { return SL_ALL & ~db & ~SL_EARLY; }
__host__ __device__ constexpr unsigned slab_early(unsigned db) { return SL_EARLY & ~(db & SL_ALL); }
/* The top of V slab sl in the fast pullbacks (the schedule: pullback.cu's header): slab sl's single-buffered
 * late tiles, then slab sl+1's double-buffered ones into the other buffers, one cp.async group each; waits
 * for this thread's copies of slab sl, then B1 (everyone's). issue(set, slab) makes the copies. */
template <class Issue>
__device__ __forceinline__ void slab_top(Issue &issue, unsigned db, int sl, int ns) {
    if (sl > 0 && slab_late(db)) issue(slab_late(db), sl); /* their buffers' last reader, slab sl−1, ended at its B3 */
    cp_async_commit();
    if (sl + 1 < ns) issue(db & SL_ALL, sl + 1); /* buffer (sl+1)&1: last read by slab sl−1, before its B3 */
    cp_async_commit();
    cp_async_wait_group<1>(); /* only slab sl+1's copies may still run */
    __syncthreads();          /* B1 */
}

/* Slab sl's buffers of those tiles (buffer b = sl & 1), as copy_slab filled them */
template <class T> struct SlabTiles {
    rp_t *PR;
    const rp_t *R;
    const T *O, *V;
    const state_t *Sc, *Sb;
};
template <class T> __device__ __forceinline__ SlabTiles<T> slab_tiles(char *smc, const int (&slab)[SL_NT][2], int b) {
    auto at = [&](int t) { return smc + slab_at(slab, t, b); };
    return {reinterpret_cast<rp_t *>(at(SL_PR)), reinterpret_cast<const rp_t *>(at(SL_R)),
            reinterpret_cast<const T *>(at(SL_O)), reinterpret_cast<const T *>(at(SL_V)),
            reinterpret_cast<const state_t *>(at(SL_SC)), reinterpret_cast<const state_t *>(at(SL_SB))};
}

/* acc ← diag(s) acc for a warp tile: s_lo on rows g (slots 0, 1), s_hi on rows g + 8 (slots 2, 3) */
template <int NS>
__device__ __forceinline__ void pf_scale_rows(float (&acc)[4][4], float s_lo, float s_hi) {
#pragma unroll
    for (int s = 0; s < NS; s++) {
        acc[s][0] *= s_lo;
        acc[s][1] *= s_lo;
        acc[s][2] *= s_hi;
        acc[s][3] *= s_hi;
    }
}

/* Calls f(T{}) with the element type of dt (bf16, fp16, else fp32): every launcher's dtype switch. */
template <class Fn> inline cudaError_t with_dtype(rewy_dtype dt, Fn f) {
    switch (dt) {
    case REWY_BF16: return f(__nv_bfloat16{});
    case REWY_F16: return f(__half{});
    default: return f(float{});
    }
}

/* The fast path's shapes: chunk 64, K padded to 64, 128 or 256 (the scans', kkt's, and so the bf16 saved A's:
 * Layout::a16) */
inline bool fast_shape(int BT, int Kp) { return BT == MAXBT && (Kp == 64 || Kp == 128 || Kp == 256); }
/* The scans' compile-time fast path: those shapes with a 2-byte input type. Anything else runs the general
 * instantiation (0). */
template <class T> inline int fast_kp(const Prob &p) { return sizeof(T) == 2 && fast_shape(p.BT, p.Kp) ? p.Kp : 0; }
/* Calls f(std::integral_constant<int, KPC>{}) with the fast-path KPC of p (0 = general). */
template <class T, class Fn> inline cudaError_t with_fast_kp(const Prob &p, Fn f) {
    if constexpr (sizeof(T) == 2) {
        switch (fast_kp<T>(p)) {
        case 64: return f(std::integral_constant<int, 64>{});
        case 128: return f(std::integral_constant<int, 128>{});
        case 256: return f(std::integral_constant<int, 256>{});
        default: break;
        }
    }
    return f(std::integral_constant<int, 0>{});
}

/* The shapes for which kkt_fast forms W = A E (bf16, chunk 64, K = Kp of 64 or 128) and, with V of 64 or 128,
 * U = A Z: the two-product chains (state_scan_uses_wu, bwd_scan_uses_w). The size query, those predicates and
 * kkt_inverse's launcher all ask here. */
inline bool w_shape_ok(rewy_dtype dt, int BT, int K, int Kp) {
    return dt == REWY_BF16 && BT == MAXBT && (K == 64 || K == 128) && K == Kp;
}
inline bool u_shape_ok(int V) { return V == 64 || V == 128; }

/* The scans' value-column tile. A scan block walks one sequence's chunks one after another, so its
 * time is a chain of small products per chunk, and every block of a (sequence, head) reads the same
 * K, A, C_q (factor) tiles: at 32 columns the scans were bound by L2 throughput (Nsight, H200: 83 %).
 * 64 columns (one 16-warp block per SM instead of two of 8 warps: the same warps per SM) halve those
 * reads per value column; they are taken when the grid still covers about the SMs. When sequences ×
 * value heads × V/32 blocks would leave SMs idle, 16-column tiles put twice as many chains on the
 * GPU, each half as long (8 columns measured no better on the H200). */
inline int plan_scan_bv(const Prob &p) {
    /* force.scan_bv = 16, 32 or 64 forces a tile (the tests run the matrix with each) */
    const int f = p.plan.force.scan_bv;
    if (f == 16 || f == 32 || f == 64) return f;
    const int sms = p.plan.sms;
    if (sms == 0) return BV;
    const long sh = (long)p.N * p.HV;
    if (4 * sh * ceil_div(p.V, 64) >= 3L * sms) return 64;
    return sh * ceil_div(p.V, BV) < sms ? 16 : BV;
}
inline int scan_bv(const Prob &p) { return p.plan.scan_bv; }
/* The wgmma scans' 64-column tiles as two warpgroups per block where V is a multiple of 128 (wgmma.cuh,
 * with_wg_tiles); force.scan_wg2 = 0 keeps one. */
inline int plan_scan_wg2(const Prob &p) { return scan_bv(p) == 64 && p.V % 128 == 0 && p.plan.force.scan_wg2 != 0; }
/* threads of a scan block: 8 warps for 16- and 32-column tiles (two blocks per SM), 16 for 64 (one; or 8,
 * two per SM: scan_8w) */
template <int BVT> __host__ __device__ constexpr int scan_threads() { return BVT == 64 ? 512 : 256; }
/* 2 on the scans' bf16 fast path without hi/lo pairs (K of 64 or 128, bf16 inputs): their bf16 tiles of
 * fp32 values (state, R, P, R̄) take half the words of the fp32 slots they replace; else 1 */
template <class T, int KPC> constexpr int scan_half() {
    return (KPC == 64 || KPC == 128) && std::is_same<T, __nv_bfloat16>::value && !SCAN_LO ? 2 : 1;
}

/* A scan block's place: blocks are numbered with the value tile fastest, so the V / BVT blocks of one
 * (sequence, value head), and the G value heads of one key head, run at the same time and read their
 * shared tiles (K, Q, A, C_q, factors) once from DRAM and then from L2. One flat grid dimension:
 * sequences × heads may pass the 65535 limit of y and z. */
struct ScanBlock {
    int sq, hv, v0;
    template <int BVT> __device__ static ScanBlock get(const Prob &p, int b) {
        const int nvt = ceil_div(p.V, BVT), sh = b / nvt;
        return {sh / p.HV, sh % p.HV, (b % nvt) * BVT};
    }
};
/* The saved A (MATH §2's (I + L)⁻¹, [chunk][hv][BT][BT]) is fp32, or bf16 where the layout says (Prob::a16: the
 * scalar gates' bf16 path, whose forward chain and fused reverse pass take A in bf16 anyway, so kkt writes that copy
 * alone). Its pointer travels as const float *; a16_of gives the bf16 view. */
__device__ __forceinline__ const __nv_bfloat16 *a16_of(const float *A) { return reinterpret_cast<const __nv_bfloat16 *>(A); }
/* four bf16 as loaded (8 bytes) widened to fp32, exactly (the bf16 A's readers that multiply in fp32 or tf32) */
__device__ __forceinline__ float4 widen_bf16x4(uint2 u) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x)),
                 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
/* chunk entry ch's A as fp32 [BT][BT] rows (stride ld, 16-B aligned) by NT threads: the fp32 A by cp.async
 * (copy_tile_k), the bf16 A widened (exact) by plain loads and stores, visible after the barrier that follows the
 * copies' wait, as the cp.async ones are */
template <int CR, int NT>
__device__ __forceinline__ void copy_a_tile(float *dst, int ld, const float *A, const Prob &p, size_t ch, int BT) {
    if (!p.a16) {
        copy_tile_k<float, CR, CR, NT>(dst, ld, BT, BT, A + ch * BT * BT, BT, BT, 0, BT);
        return;
    }
    const uint2 *src = reinterpret_cast<const uint2 *>(a16_of(A) + ch * BT * BT);
#pragma unroll 1
    for (int e = threadIdx.x; e < BT * BT / 4; e += NT) { /* four elements a thread at a time: few registers */
        const int i = e / (BT / 4), j = (e % (BT / 4)) * 4;
        *reinterpret_cast<float4 *>(dst + i * ld + j) = widen_bf16x4(src[e]);
    }
}

/* The copies of chunk cj's tiles that both scans take (cp.async; CR > 0: the fast path's compile-time
 * shapes): an n×n tile (C_q cq_t, row stride LDA; A by scan_copy_a), the G/β table and, for vector gates (VEC), Λ = γ_n,
 * a factor tile (E, F or Q_g) */
template <int CR, int NT, class E>
__device__ __forceinline__ void scan_copy_nn(E *dst, const E *src, const Prob &p, int hv, int BT, int cj) {
    copy_tile_k<E, CR, CR, NT>(dst, LDA, BT, BT, src + ((size_t)cj * p.HV + hv) * BT * BT, BT, BT, 0, BT);
}
template <int CR, int NT>
__device__ __forceinline__ void scan_copy_a(float *dst, const float *A, const Prob &p, int hv, int BT, int cj) {
    copy_a_tile<CR, NT>(dst, LDA, A, p, (size_t)cj * p.HV + hv, BT);
}
template <bool VEC>
__device__ __forceinline__ void scan_copy_gates(float *gb, float *lam, const float *GB, const float *vlam, const Prob &p,
                                                int hv, int BT, int Kp, int cj) {
    copy_tile<float>(gb, 2 * BT, 1, 2 * BT, GB + ((size_t)cj * p.HV + hv) * 2 * BT, 2 * BT, 1, 0, 2 * BT);
    if (VEC) copy_tile<float>(lam, Kp, 1, Kp, vlam + ((size_t)cj * p.HV + hv) * Kp, Kp, 1, 0, Kp);
}
template <class FT, int CR, int CK, int NT>
__device__ __forceinline__ void scan_copy_factor(FT *dst, int ldfe, const void *src, const Prob &p, int hv, int BT,
                                                 int Kp, int cj) {
    copy_tile_k<FT, CR, CK, NT>(dst, ldfe, BT, Kp, static_cast<const FT *>(src) + ((size_t)cj * p.HV + hv) * BT * Kp, Kp,
                                BT, 0, Kp);
}
inline dim3 scan_grid(const Prob &p, int bvt) { return dim3((unsigned)p.N * p.HV * ceil_div(p.V, bvt)); }

/* Whether a scan of 64-column tiles whose block takes smem bytes runs as 8-warp blocks, two per SM, instead
 * of one 16-warp block per SM: where two such blocks fit an SM's shared memory and the grid has at least two
 * blocks per SM. Two chains per SM then share what one 16-warp chain had (GDN forward scan at (8,2048,32),
 * H200: 0.727 → 0.636 ms); a smaller grid keeps 16 warps per chain, since 8 run one chain slower (0.671 →
 * 0.764 ms at (4,4096,16), 128 blocks). force.scan_8w = 1 / 0 forces it where it fits (the tests'
 * shapes are too small to take it). Only 64-column tiles on the halved bf16 path (scan_half) have it.
 * scan_8w_fits: the shared-memory test alone (the scan pair, whose grid is the two scans' together).
 * plan_scan_8w: make_plan's Plan::scan_8w (the grid test, or the force); Plan::pair_8w = the force is not 0. */
inline int plan_scan_8w(const Prob &p) {
    const int f = p.plan.force.scan_8w;
    return f != REWY_TEST_AUTO ? f != 0 : (long)scan_grid(p, 64).x >= 2L * p.plan.sms;
}
/* Whether a block taking a bytes of dynamic shared memory and one taking b fit one SM together (each also takes
 * the per-block reserve); false where the device could not be asked (the plan's smem_sm is then 0) */
inline bool blocks_fit_sm(const Plan &pl, size_t a, size_t b) { return a + b + 2 * pl.smem_rsv <= pl.smem_sm; }
template <class T, int KPC, int BVT> inline bool scan_8w_fits(const Prob &p, size_t smem) {
    if constexpr (BVT != 64 || scan_half<T, KPC>() != 2) return false;
    return p.plan.pair_8w && blocks_fit_sm(p.plan, smem, smem);
}
template <class T, int KPC, int BVT> inline bool scan_8w(const Prob &p, size_t smem) {
    return scan_8w_fits<T, KPC, BVT>(p, smem) && p.plan.scan_8w;
}

/* Calls f(KPC, BVT) (integral constants) with the scans' fast-path K (with_fast_kp) and value tile
 * (scan_bv); the 16- and 64-column tiles are instantiated on the fast path with K ≤ 128 only. */
template <class T, class Fn> inline cudaError_t with_scan_tiles(const Prob &p, Fn f) {
    const int bv = scan_bv(p);
    return with_fast_kp<T>(p, [&](auto kp) {
        constexpr int KPC = decltype(kp)::value;
        if constexpr (KPC == 64 || KPC == 128) {
            if (bv == 16) return f(kp, std::integral_constant<int, 16>{});
            if (bv == 64) return f(kp, std::integral_constant<int, 64>{});
        }
        return f(kp, std::integral_constant<int, BV>{});
    });
}

/* Chunk geometry every backend layout starts from: value heads, chunk size, K padded to
 * the 32-wide slabs, sequences, and total chunks (exact with cu_seqlens_host; without it
 * an upper bound, since the device copy of cu_seqlens cannot be read without a sync). */
struct Geometry { int NC, N, HV, BT, Kp; };

inline Geometry geometry(const rewy_config *c) {
    Geometry g = {};
    g.HV = c->HV ? c->HV : c->H;
    g.BT = c->chunk_size ? c->chunk_size : 64;
    g.Kp = (c->K + 31) / 32 * 32;
    if (c->cu_seqlens) {
        g.N = c->num_seqs;
        if (c->cu_seqlens_host) {
            long nc = 0;
            for (int s = 0; s < c->num_seqs; s++)
                nc += (c->cu_seqlens_host[s + 1] - c->cu_seqlens_host[s] + g.BT - 1) / g.BT;
            g.NC = (int)(nc > 0 ? nc : 1);
        } else {
            g.NC = (c->T + g.BT - 1) / g.BT + c->num_seqs;
        }
    } else {
        g.N = c->B;
        g.NC = c->B * ((c->T + g.BT - 1) / g.BT);
    }
    return g;
}

/* The current device's largest dynamic shared memory per block (opt-in), 0 if it cannot be read (ensure_smem
 * asks at each launch). The choices read the plan's copy, Plan::smem_optin: fast paths whose tiles do not fit
 * (e.g. an A100's 163 KB) fall back to the general kernels. */
inline size_t smem_optin() {
    int dev = 0, mx = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&mx, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    return (size_t)mx;
}

/* Lets a kernel take smem bytes of dynamic shared memory: above the default 48 KB the kernel must opt in,
 * here per launch and without any cache (no global state), as FlashAttention's launchers do; the call
 * is not stream-ordered, so it is legal under stream capture. It always asks for the device's whole
 * opt-in size, so threads launching one kernel with different smem never undo each other's setting.
 * Fails if the device cannot give smem. */
template <auto kern>
inline cudaError_t ensure_smem(size_t smem) {
    if (smem <= 48 * 1024) return cudaSuccess;
    const size_t mx = smem_optin();
    if (smem > mx) return cudaErrorInvalidValue;
    return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mx);
}

/* ==== A producer kernel and its consumer side by side (the forward's kkt_fast and state scan) ====
 * The consumer is launched with programmatic dependent launch (sm_90: it may start once every block of the
 * producer has run griddepcontrol.launch_dependents) and waits per chunk on a ready flag that the producer
 * sets after the chunk's stores; the flags are zeroed before the producer starts. The producer never waits,
 * and all of its blocks are resident before any consumer block starts, so the consumer's waits always end.
 * Without PDL (an sm_80 device or binary) the same launches run one after the other and every flag is set
 * when the consumer starts. */
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
/* the producer: after a __syncthreads() that follows every thread's stores of the item (the fence is cumulative) */
__device__ __forceinline__ void set_ready(int *f) {
    __threadfence();
    asm volatile("st.relaxed.gpu.global.s32 [%0], %1;\n" ::"l"(f), "r"(1) : "memory");
}
/* the consumer's early look (a relaxed L2 read: its value is used a chunk step later, so the read never
 * stalls the chain); a 1 read here orders the copies that follow it through the block barrier between them */
__device__ __forceinline__ int peek_ready(const int *f) {
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
    return v;
}
/* the consumer's wait; a flag that never comes (a bug, not an input) traps after seconds instead of hanging */
__device__ __forceinline__ void wait_ready(const int *f) {
    for (unsigned i = 0;; i++) {
        int v;
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
        if (v) return;
        if (i > (1u << 26)) __trap();
        __nanosleep(64);
    }
}
/* Both kernels prefer the whole unified L1 as shared memory, so that their blocks can share an SM (an SM runs
 * one carveout at a time). Not stream-ordered, so legal under capture, like ensure_smem. */
inline cudaError_t prefer_shared(const void *kern) {
    return cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}
/* the consumer's launch (PDL) */
template <class... P, class... A>
inline cudaError_t launch_beside(void (*kern)(P...), dim3 grid, int nt, size_t smem, cudaStream_t s, A &&...args) {
    cudaError_t e = prefer_shared((const void *)kern);
    if (e != cudaSuccess) return e;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(nt);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kern, std::forward<A>(args)...);
}

/* Rows [0, K) × columns [v0, v0 + BVT) of a [K][V] chunk-state matrix (state_t) from the block's
 * transposed fp32 tile Xt[j * ld + kk]. Eight columns per 16-byte store where V allows (this store
 * runs once per chunk in both scans, and one element per store cost a quarter of a scan's
 * instructions); feature index fastest across threads, so the shared-memory reads are conflict-free. */
template <int BVT = BV>
__device__ __forceinline__ void store_state_tile(state_t *dst, const float *Xt, int ld, int K, int V, int v0) {
    if constexpr (sizeof(state_t) == 2) {
        if (V % 8 == 0) {
            for (int e = threadIdx.x; e < K * (BVT / 8); e += blockDim.x) {
                const int kk = e % K, j = (e / K) * 8;
                if (v0 + j >= V) continue;
                uint4 pk;
                __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&pk);
#pragma unroll
                for (int m = 0; m < 4; m++)
                    h[m] = __floats2bfloat162_rn(Xt[(j + 2 * m) * ld + kk], Xt[(j + 2 * m + 1) * ld + kk]);
                *reinterpret_cast<uint4 *>(dst + (size_t)kk * V + v0 + j) = pk;
            }
            return;
        }
    }
    for (int e = threadIdx.x; e < K * BVT; e += blockDim.x) {
        const int kk = e / BVT, j = e - kk * BVT;
        if (v0 + j < V) st<state_t>(dst + (size_t)kk * V + v0 + j, Xt[j * ld + kk]);
    }
}

/* State element (kk, vv) of a [K,V] (or [V,K] when svf) matrix. */
__device__ __forceinline__ size_t st_idx(const Prob &p, int kk, int vv) {
    return p.svf ? (size_t)vv * p.K + kk : (size_t)kk * p.V + vv;
}

/* The general scans' state tile in shared memory, transposed (St[j * lds + kk], Kp × BVT): from the API's
 * h0 / dht (zero outside K × V or when src is NULL) and to its ht / dh0. */
template <int BVT>
__device__ __forceinline__ void state_from(float *St, int lds, int Kp, const Prob &p, const float *src, size_t sbase,
                                           int v0) {
    for (int e = threadIdx.x; e < Kp * BVT; e += blockDim.x) {
        const int j = e / Kp, kk = e - j * Kp;
        St[j * lds + kk] = (src && kk < p.K && v0 + j < p.V) ? src[sbase + st_idx(p, kk, v0 + j)] : 0.f;
    }
}
template <int BVT>
__device__ __forceinline__ void state_to(const float *St, int lds, const Prob &p, float *dst, size_t sbase, int v0) {
    for (int e = threadIdx.x; e < p.K * BVT; e += blockDim.x) {
        const int kk = e / BVT, j = e - kk * BVT;
        if (v0 + j < p.V) dst[sbase + st_idx(p, kk, v0 + j)] = St[j * lds + kk];
    }
}

/* ---- the scans' state tile in registers (fast path, K ≤ 128) ----
 * A K × BVT state tile held as warp fragments: warp w owns rows 16·(w % RT)… (RT = K/16 row tiles over
 * NW warps) and column group w / RT; a group wider than 32 columns is held as M tiles of 32 (M > 1
 * with few warps: 8 warps on a 64-column tile at K = 128). The products that update the state
 * accumulate into these registers (each(), one warp tile at a time); once per chunk the tile goes to
 * shared memory (the B operand of the chunk's first product, [column][k]) and, when dst is given, to
 * the saved chunk states ([K][V], state_t). */
template <int KPC, int BVT, int NW> struct StateTiles {
    static constexpr int RT = KPC / 16, CG = NW / RT, CW = BVT / CG; /* column-group width */
    static constexpr int NS = CW / 8 < 4 ? CW / 8 : 4, M = CW / (8 * NS);
    static_assert(NW % RT == 0 && NS >= 1 && M * 8 * NS == CW, "state tile must split over the warps");
    typedef float Frag[M][4][4];
    int i0, j0;
    __device__ StateTiles() {
        const int warp = threadIdx.x >> 5;
        i0 = (warp % RT) * 16;
        j0 = (warp / RT) * CW;
    }
    /* f(acc, i0, j0) for each of this warp's tiles (16 rows × 8·NS columns) */
    template <class F> __device__ void each(Frag &Sf, F f) const {
#pragma unroll
        for (int m = 0; m < M; m++) f(Sf[m], i0, j0 + m * 8 * NS);
    }
    /* f(kk, j, x&) for every element this lane holds */
    template <class F> __device__ void elems(Frag &Sf, F f) const {
#pragma unroll
        for (int m = 0; m < M; m++)
            pf_each<NS>(i0, j0 + m * 8 * NS, Sf[m], [&](int kk, int j, int s, int e) { f(kk, j, s, e, Sf[m]); });
    }
    /* Sf ← src[(kk, v0 + j)] (h0 or dht in the API layout; zero outside K × V or when src is NULL) */
    __device__ void load(Frag &Sf, const Prob &p, const float *src, size_t sbase, int v0) const {
        elems(Sf, [&](int kk, int j, int s, int e, float (&a)[4][4]) {
            a[s][e] = (src && kk < p.K && v0 + j < p.V) ? src[sbase + st_idx(p, kk, v0 + j)] : 0.f;
        });
    }
    __device__ void save(const Frag &Sf, const Prob &p, float *dst, size_t sbase, int v0) const {
        elems(const_cast<Frag &>(Sf), [&](int kk, int j, int s, int e, float (&a)[4][4]) {
            if (kk < p.K && v0 + j < p.V) dst[sbase + st_idx(p, kk, v0 + j)] = a[s][e];
        });
    }
    /* St[j * lds + kk] = S, and dst[kk * V + j] (columns j, j+1 in one store where V allows) */
    __device__ void spill(const Frag &Sf, float *St, int lds, state_t *dst, int K, int V, int v0) const {
        spill_by(Sf, [&](int kk, int j, float x) { St[j * lds + kk] = x; }, dst, K, V, v0);
    }
    /* the same with the shared copy as bf16 hi/lo tiles (bf_mma's B operand) */
    __device__ void spill(const Frag &Sf, __nv_bfloat16 *Sh, __nv_bfloat16 *Sl, int lds, state_t *dst, int K, int V,
                          int v0) const {
        spill_by(Sf, [&](int kk, int j, float x) { st_hilo(Sh, scan_lo(Sl), j * lds + kk, x); }, dst, K, V, v0);
    }
    template <class Put>
    __device__ void spill_by(const Frag &Sf, Put put, state_t *dst, int K, int V, int v0) const {
        elems(const_cast<Frag &>(Sf), [&](int kk, int j, int s, int e, float (&a)[4][4]) {
            put(kk, j, a[s][e]);
            if (!dst || (e & 1) || kk >= K) return;
            state_t *d = dst + (size_t)kk * V + v0 + j;
            if constexpr (sizeof(state_t) == 2) {
                if ((V & 1) == 0 && v0 + j + 1 < V) {
                    *reinterpret_cast<__nv_bfloat162 *>(d) = __floats2bfloat162_rn(a[s][e], a[s][e + 1]);
                    return;
                }
            }
            if (v0 + j < V) st<state_t>(d, a[s][e]);
            if (v0 + j + 1 < V) st<state_t>(d + 1, a[s][e + 1]);
        });
    }
    /* Sf ← diag(d) Sf with d_lo for rows g, d_hi for rows g + 8 of the warp's tile */
    __device__ void scale_rows(Frag &Sf, float d_lo, float d_hi) const {
#pragma unroll
        for (int m = 0; m < M; m++) pf_scale_rows<NS>(Sf[m], d_lo, d_hi);
    }
    __device__ int row_lo() const { return i0 + ((threadIdx.x & 31) >> 2); }
};

} // namespace rewy_cuda


#endif
