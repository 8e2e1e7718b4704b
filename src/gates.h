/* gates.h: the floor on the per-token log gate, shared by the CPU backend and the CUDA kernels.
 *
 * Every place that forms the chunk-local cumsum G (MATH §2) adds floor(g) = max(g, −L) instead of
 * g. A token whose gate is at or below −L is a reset: e^{−L} = 9.4e-14 is invisible next to fp32's
 * 2^−24 = 6.0e-8 (a term carried through the reset would have to be over 3e5 times larger than
 * the terms after it to reach half an ulp), so the results equal those of the true gate to fp32
 * precision. (A floor of 104 would make e^{−L} round to exactly 0, bit-exact resets, but it raises
 * |G| and measured 4x the error of mixed strong and weak gates: docs/MATH.md §10.)
 * What the floor buys:
 *   - g = −inf is an exact reset instead of −inf − (−inf) = NaN in every G_i − G_j;
 *   - |G| ≤ (resets in the chunk) × L + (the sum of the other gates), so the small gates after a
 *     reset keep their bits: the cumsum's rounding is ulp(|G|), not ulp(1e30);
 *   - the backward's gradient of a floored gate is the floor's, 0 (rewy_gate_floor_grad). The true
 *     gradient is e^g times a bounded sum, below e^{−L} relative to its neighbours: 0 to fp32
 *     precision, and exactly 0 at g = −inf.
 * NaN is not hidden: NaN < −L is false, so a NaN gate enters G unchanged (no fmaxf here, which
 * would return −L for a NaN). */
#ifndef REWY_GATES_H
#define REWY_GATES_H

#include <math.h>
#include <stdint.h>

/* L, natural log. */
#define REWY_GATE_FLOOR 30.0f

#ifdef __CUDACC__
#define REWY_GATE_FN static __host__ __device__ __forceinline__
#else
#define REWY_GATE_FN static inline
#endif

/* rewy_gate_backward's row slices (rewy_gate_workspace_size): partial sums per slice of about 128 rows, at
 * most 128 slices, so that both backends sum in an order fixed by the shape, whatever the thread count.
 * The scratch holds two [slices][heads·dim] fp32 tables (Σ dg and Σ dy·y per column). */
#define REWY_GATE_MAX_SLICES 128
REWY_GATE_FN int64_t rewy_gate_slices(int64_t rows) {
    const int64_t s = (rows + 127) / 128;
    return s < 1 ? 1 : s > REWY_GATE_MAX_SLICES ? REWY_GATE_MAX_SLICES : s;
}
/* the rows of slice i of n: [rows·i/n, rows·(i+1)/n) */
REWY_GATE_FN int64_t rewy_gate_slice_start(int64_t rows, int64_t i, int64_t n) { return rows / n * i + (rows % n) * i / n; }

/* softplus with torch's threshold (x above 20: x), as FLA's gate activation uses it, and its derivative
 * σ(x) (1 above 20): rewy_gate_forward / _backward on both backends. */
REWY_GATE_FN float rewy_softplus20(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
REWY_GATE_FN float rewy_softplus20_grad(float x) {
    if (x > 20.0f) return 1.0f;
    const float z = expf(x);
    return z / (z + 1.0f);
}

/* The log gate that enters the cumsum G. */
REWY_GATE_FN float rewy_gate_floor(float g) { return g < -REWY_GATE_FLOOR ? -REWY_GATE_FLOOR : g; }

/* ḡ as returned for a gate g whose floored value has gradient dg: 0 where the floor is flat. */
REWY_GATE_FN float rewy_gate_floor_grad(float g, float dg) { return g < -REWY_GATE_FLOOR ? 0.0f : dg; }

/* ḡ of token i of chunk idx of its sequence: the first token of a sequence that starts from a zero
 * state (no h0) only decays that zero state, so its ḡ is exactly 0. Its reverse cumsum of Ḡ is a sum of
 * terms that cancel in exact arithmetic; with bf16 operands the residual is about 1e-3 of the terms
 * (seen on the GPU: 2e-5..4e-4 where the oracle has 0, all sequences of length 1), so write the 0. */
REWY_GATE_FN float rewy_gate_grad(float g, float dg, int first_of_zero_start) {
    return first_of_zero_start ? 0.0f : rewy_gate_floor_grad(g, dg);
}

#endif
