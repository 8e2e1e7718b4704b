/* recurrent_step.h: one token of the plain fp32 recurrence (MATH §1) and of its exact reverse mode, for
 * one value column j of one (sequence, value head): the per-thread arithmetic of recurrent.cu, shared
 * with its host emulation (tests/cuda/emu_recurrent.cpp), which runs it on the CPU against the fp64
 * oracle. Plain C++ (host) and CUDA C++ (host and device); no CUDA headers needed.
 *
 * A thread holds S[:, j], the K entries of its column of the state, in registers. Per token, with
 * q̃ = scale·q, a = exp(floor(g)) (src/gates.h), e = b ⊙ k:
 *
 *     S⁻[:, j] = a ⊙ S[:, j]                    decay
 *     r_j      = w_j v_j − Σ_i S⁻[i, j] e_i      correction
 *     S[:, j]  = S⁻[:, j] + k r_j                write
 *     o_j      = Σ_i S[i, j] q̃_i                 read
 *
 * Every column is independent in the forward. The reverse mode of column j (state adjoint S̄[:, j]) is
 * independent too; only the gradients of the per-token inputs shared by the columns (q, k, g, b or β)
 * sum over j. rec_bwd_step hands each column's term of those sums to a reducer, in a fixed order of
 * slots (RecSlots), and rec_finalize turns the column sums into the caller's gradients (MATH §5's
 * per-operator reductions). Every product with an accumulation is an explicit fmaf, so the host
 * emulation does the same arithmetic as the kernels (expf may differ in the last bit). */
#ifndef REWY_CUDA_RECURRENT_STEP_H
#define REWY_CUDA_RECURRENT_STEP_H

#include <math.h>
#include "gates.h"
#include "rewy.h" /* rewy_op */

#ifdef __CUDACC__
#define REC_HD __host__ __device__ __forceinline__
/* the K loops: unrolled for the plan's KMAX = 16 (the arrays then live in registers); a forced run's KMAX = 256 keeps
 * them rolled (its arrays are in local memory anyway, and 4·256 unrolled warp reductions would take minutes to compile) */
#define REC_UNROLL _Pragma("unroll (KMAX <= 16 ? KMAX : 1)")
#else
#define REC_HD inline
#define REC_UNROLL
#endif

namespace rewy_cuda {

/* The K below which the plan takes the recurrence (Plan::recurrent, plan_recurrent): with 1–15 features
 * the chunk form is a difference of large terms whose bf16 intermediates fail MATH §10 (docs/DESIGN.md). */
constexpr int REC_K_LIMIT = 16;

/* One token's inputs as a thread uses them: q̃ = scale·q, k, a = exp(floor(g)), e = b ⊙ k (K each),
 * and its column's v_j, w_j (0 for a thread past V). KMAX ≥ K: the register arrays' size. */
template <int KMAX> struct RecIn {
    float q[KMAX], k[KMAX], a[KMAX], e[KMAX];
    float v, w;
};

/* The column sums a backward token needs, as slots of the reducer: 4K + 1 of them. */
struct RecSlots {
    int K;
    REC_HD int qbar(int i) const { return i; }           /* A_i = Σ_j S_t[i, j] ō_j              (q̄ = scale·A)   */
    REC_HD int kbar(int i) const { return K + i; }       /* B_i = Σ_j S̄_t[i, j] r_j              (k̄ = B + b ⊙ ē) */
    REC_HD int ebar(int i) const { return 2 * K + i; }   /* C_i = Σ_j S⁻[i, j] r̄_j               (ē = −C)        */
    REC_HD int gbar(int i) const { return 3 * K + i; }   /* D_i = Σ_j S̄⁻[i, j] S⁻[i, j]           (ḡ_i)           */
    REC_HD int wsum() const { return 4 * K; }            /* E = Σ_j w̄_j = Σ_j r̄_j v_j            (β̄'s write part) */
    REC_HD int count() const { return 4 * K + 1; }
};

/* The forward token on column s (K entries, updated in place): returns o_j. */
template <int KMAX> REC_HD float rec_fwd_step(int K, float *s, const RecIn<KMAX> &in) {
    float dot = 0.f;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            s[i] *= in.a[i];                 /* S⁻ = Diag(a) S */
            dot = fmaf(s[i], in.e[i], dot);  /* S⁻ᵀ e */
        }
    const float r = fmaf(in.w, in.v, -dot); /* r = w v − S⁻ᵀ e */
    float o = 0.f;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            s[i] = fmaf(in.k[i], r, s[i]);   /* S = S⁻ + k r */
            o = fmaf(s[i], in.q[i], o);      /* o = Sᵀ q̃ */
        }
    return o;
}

/* The backward token on column j: sp = S_{t−1}[:, j] (the state before the token, K entries), ds = S̄_t[:, j]
 * on entry (the gradient of the state after the token, from the later tokens and dht), S̄_{t−1}[:, j] on exit.
 * dO = ō_j. Writes v̄_j to dv and w̄_j = r̄_j v_j to dw, and passes the column's term of each RecSlots sum to
 * red(slot, x), in the order of the slots within each group and the groups in the order q̄, k̄, ē, ḡ, w̄. */
template <int KMAX, class Red>
REC_HD void rec_bwd_step(int K, const float *sp, float *ds, const RecIn<KMAX> &in, float dO, float &dv, float &dw,
                         Red &red) {
    const RecSlots sl = {K};
    float sm[KMAX]; /* S⁻ */
    float dot = 0.f;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            sm[i] = sp[i] * in.a[i];
            dot = fmaf(sm[i], in.e[i], dot);
        }
    const float r = fmaf(in.w, in.v, -dot);
    /* o = S_tᵀ q̃:  q̄ = scale · S_t ō,  S̄_t += q̃ ōᵀ */
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            red(sl.qbar(i), fmaf(in.k[i], r, sm[i]) * dO);
            ds[i] = fmaf(in.q[i], dO, ds[i]);
        }
    /* S_t = S⁻ + k rᵀ:  k̄ = S̄_t r,  r̄ = S̄_tᵀ k,  S̄⁻ = S̄_t (+ the r term below) */
    float rbar = 0.f;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            red(sl.kbar(i), ds[i] * r);
            rbar = fmaf(in.k[i], ds[i], rbar);
        }
    /* r = w ⊙ v − S⁻ᵀ e:  w̄ = r̄ v,  v̄ = r̄ w,  ē = −S⁻ r̄,  S̄⁻ −= e r̄ᵀ */
    dv = rbar * in.w;
    dw = rbar * in.v;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            red(sl.ebar(i), sm[i] * rbar);
            ds[i] = fmaf(-in.e[i], rbar, ds[i]);
        }
    /* S⁻ = Diag(a) S_{t−1}:  ḡ_i = Σ_j S̄⁻[i, j] S⁻[i, j]  (d a / d g = a),  S̄_{t−1} = Diag(a) S̄⁻ */
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < K) {
            red(sl.gbar(i), ds[i] * sm[i]);
            ds[i] *= in.a[i];
        }
    red(sl.wsum(), dw);
}

/* One token's gradients from the column sums: part holds nw partial sums (one per warp, in warp order), each
 * RecSlots::count() floats, summed in that order. io reads the token's key k(i), erase gate b(i) (β for DeltaNet,
 * GDN, KDA) and log gate g(i) (GDN: its scalar; never asked for DeltaNet), and takes the results: dq(i, ·) =
 * scale·A, dk(i, ·) = B + b ⊙ ē for every operator; by operator (rewy_op): GDN2 db(i, ·) = ē ⊙ k and
 * dg(i, ·); KDA dg(i, ·) and dbeta(·); GDN dg(0, Σ_i ḡ_i) and dbeta(·); DeltaNet dbeta(·). β̄ = Σ_K b̄ + Σ_V w̄
 * (MATH §5), in that order. A gate below the floor gets ḡ = 0 (rewy_gate_floor_grad; GDN: its one gate). */
template <class IO> REC_HD void rec_finalize(int K, int op, int nw, const float *part, float scale, const IO &io) {
    const RecSlots sl = {K};
    const int nq = sl.count();
    auto sum = [&](int slot) {
        float x = part[slot];
        for (int w = 1; w < nw; w++) x += part[(size_t)w * nq + slot];
        return x;
    };
    float bsum = 0.f, gsum = 0.f;
    for (int i = 0; i < K; i++) {
        const float ebar = -sum(sl.ebar(i)), ki = io.k(i);
        io.dq(i, scale * sum(sl.qbar(i)));
        io.dk(i, fmaf(io.b(i), ebar, sum(sl.kbar(i))));
        const float bbar = ebar * ki, gb = sum(sl.gbar(i));
        bsum += bbar;
        gsum += gb;
        if (op == REWY_OP_GDN2) io.db(i, bbar);
        if (op == REWY_OP_KDA || op == REWY_OP_GDN2) io.dg(i, rewy_gate_floor_grad(io.g(i), gb));
    }
    if (op == REWY_OP_GDN) io.dg(0, rewy_gate_floor_grad(io.g(0), gsum)); /* ḡ = Σ_K */
    if (op != REWY_OP_GDN2) io.dbeta(bsum + sum(sl.wsum()));              /* DeltaNet, GDN, KDA */
}

} // namespace rewy_cuda

#endif
