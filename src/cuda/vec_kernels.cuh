/* vec_kernels.cuh: the CUDA stages of the vector-gate operators (KDA, GDN2), MATH §2–§6.
 *
 * cuda_backend.cu sends KDA and GDN2 here (verified on an H200: tests/cuda/test_cuda.c).
 *
 * Differences from the scalar-gate stages (kernels.cuh), all of them feature-local:
 *   - G is a per-feature cumulative log decay: Gc [chunk][hv][BT][Kp] fp32 (rows ≥ n repeat
 *     G_{n-1}, features ≥ K are 0), saved by the forward in place of the scalar GB table.
 *   - E = b⊙k⊙γ, Q_g = q⊙γ, F = k⊙e^{G_n−G} and Λ = Diag(γ_n) are written per chunk by
 *     vec_factors.cu (in the input type: bounded for log gates ≤ 0), and the scans of the scalar
 *     path read them in their VEC mode; the pullback forms what it needs in fp32 from G.
 *   - The intra products (L, C_q, and the four backward contractions of §6) use centered factors
 *     α = e^{G−c}, ζ = e^{c−G} with the per-feature midpoint c of the chunk, exactly as the CPU
 *     reference (src/cpu/chunk_common.c). When half the chunk's widest per-feature range exceeds
 *     VEC_CENTER_LIMIT (natural log; = REWY_CENTER_LIMIT of the CPU, less half |ln scale|: vec_centered) the forward's
 *     fast intra (vec_intra_fast_kernel) takes the blocked factors of MATH §6 (the CPU's INTRA_BLOCKED);
 *     the general intra kernel and the pullbacks take the exact pairwise path e^{G_i−G_j} (i ≥ j, so ≤ 1
 *     for log gates ≤ 0). Either way −1000 resets stay finite.
 *     G sums the floored gates (gates.h): −inf is a reset, |G| ≤ resets × 30 + the rest.
 *   - Gates: KDA has β [T,HV] (erase = write = β); GDN2 has b [T,HV,K] and w [T,HV,V]. Every
 *     launcher takes (beta, b, w); b != NULL selects GDN2.
 * Every fp32 working matrix (L, A, C_q, D, H_q) stays fp32; products are tf32 tensor-core
 * products with fp32 accumulation (bgemm of common.cuh), like the scalar path.
 */
#ifndef REWY_CUDA_VEC_KERNELS_CUH
#define REWY_CUDA_VEC_KERNELS_CUH

#include "common.cuh"

namespace rewy_cuda {

constexpr int VKB = 32;              /* feature slab width (Kp is a multiple of 32: no partial slabs) */
constexpr int VLDK = VKB + 4;        /* fp32 [64][VLDK] slab tiles */
constexpr int VLDS = VKB + 8;        /* state_t [32][VLDS] slab tiles (16-B rows for bf16 and fp32) */
constexpr float VEC_CENTER_LIMIT = 40.0f; /* largest |G − c| for centered factors (natural log) */

/* Centered factors for a chunk of this half range? The scale is folded into q, so (scale·q⊙α)(k⊙ζ)ᵀ
 * reaches |scale|·e^{2·half range}: half of |ln |scale|| comes off the limit, keeping that product
 * inside the same e^80 (scale 1e30: half range ≤ 5.5, where e^40 would overflow; a tiny scale would
 * underflow). The CPU's center_limit (src/cpu/chunk.h) is the same rule. */
__device__ __forceinline__ bool vec_centered(const Prob &p, float half_range) {
    return half_range <= VEC_CENTER_LIMIT - 0.5f * fabsf(logf(fabsf(p.scale)));
}

/* Erase gate b_{t,d} and write gate w_{t,e} of token `tok` (absolute row of the token axis). */
template <class T>
__device__ __forceinline__ float vg_erase(const Prob &p, const T *beta, const T *b, size_t tok, int hv, int d) {
    return b ? ld<T>(b + (tok * p.HV + hv) * p.K + d) : ld<T>(beta + tok * p.HV + hv);
}
template <class T>
__device__ __forceinline__ float vg_write(const Prob &p, const T *beta, const T *w, size_t tok, int hv, int e) {
    return w ? ld<T>(w + (tok * p.HV + hv) * p.V + e) : ld<T>(beta + tok * p.HV + hv);
}

/* The scans' vector-gate operands as one writer produces them (vec_factors, or vec_intra's fast path):
 * E, F, Q_g factor_t [NC*HV][BT][Kp], lam fp32 [NC*HV][Kp], GB fp32 [NC*HV][2][BT]; see VecOps. */
struct FactorOut {
    void *E, *F, *Qg;
    float *lam, *GB;
};

/* One element of those factors (MATH §2), for both writers: E = b·k·γ, F = k·e^{G_n − G}, Q_g = q·γ
 * with γ = e^G; b is the erase gate (KDA: β), Gn = G_{n−1} of the feature. */
struct FactorEl { float e, f, q; };
__device__ __forceinline__ FactorEl factor_el(float k, float b, float q, float G, float Gn) {
    const float ga = expf(G);
    return {b * k * ga, k * expf(Gn - G), q * ga};
}

/* vec_intra.cu: per (chunk, value head): G = per-feature chunk-local cumsum of g (written to Gc
 * when not NULL); L = 𝓛_<((b⊙k⊙α)(k⊙ζ)ᵀ), A = (I+L)⁻¹ (when A is not NULL); C_q = 𝓛_≤((Q⊙α)(k⊙ζ)ᵀ)
 * (when Cq is not NULL); blocked factors (fast path) or pairwise exponents instead when the chunk's gate
 * range is too wide. */
cudaError_t launch_vec_intra(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                             const void *beta, const void *b, float *Gc, float *A, cq_t *Cq,
                             const FactorOut *fo, cudaStream_t s);

/* Whether launch_vec_intra takes this problem on its fast path, which can also write the scans'
 * factors (fo, the outputs of launch_vec_factors below) from the G, k, q, b it already holds: that
 * saves vec_factors' second read of G, k, q wherever intra runs anyway (the forward, the policy-R
 * recompute). Elsewhere fo must be NULL and vec_factors writes them. */
bool vec_intra_fuses_factors(const Prob &p, rewy_dtype dt);

/* vec_factors.cu: per (chunk, value head) the scans' vector-gate operands (common.cuh VecOps):
 * E = b⊙k⊙γ, F = k⊙e^{G_n−G}, Q_g = q⊙γ (factor_t [NC*HV][BT][Kp]), lam = γ_n (fp32 [NC*HV][Kp]) and
 * the per-chunk β table GB (fp32 [NC*HV][2][BT], G row zero) from the saved per-feature G (Gc).
 * The scans themselves are state_scan.cu and bwd_state_scan.cu (kernels.cuh), shared with the
 * scalar-gate operators. */
cudaError_t launch_vec_factors(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *beta,
                               const void *b, const float *Gc, const FactorOut &fo, cudaStream_t s);

/* vec_pullback.cu: per (chunk, value head): the local pullback (ReWY or WY), matrix intra (§6),
 * the feature-local chain rule (§5), endpoint terms and the reverse in-chunk cumsum of Ḡ.
 * Wbar: WY scratch [NC*HV][BT][Kp] fp32. acc: when HV > H, fp32 q̄, k̄ partials 2×[NC*HV][BT][Kp],
 * summed over each value-head group by a second kernel (deterministic, no atomics).
 * 2-byte inputs with chunk 64, K ≤ 128 and V % 8 == 0 take vec_pullback_fast_kernel (16 warps, the
 * K-wide results in registers, W̄ in shared memory: Wbar unused); anything else the general kernel. */
cudaError_t launch_vec_pullback(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v,
                                const void *beta, const void *b, const void *w, const float *Gc, const float *A,
                                const void *do_, const state_t *Sc, const state_t *Sbar, const rp_t *R,
                                const rp_t *PR, int wy, float *Wbar, float *acc, void *dq, void *dk, void *dv,
                                void *dbeta, void *db, void *dw, const float *g, float *dg, cudaStream_t s);

} // namespace rewy_cuda

/* vec_backend.cu: the five backend entry points for KDA / GDN2 (same contract as cuda_backend.h).
 * cuda_backend.cu dispatches to them with the call's plan (call_plan, made once per call there, as for the scalar
 * gates). The sizes depend on one choice of the plan for vector gates: Plan::recurrent (K < 16: the recurrence's
 * layout). */
size_t rewy_cuda_vec_saved_size(const rewy_config *cfg, const rewy_cuda::Plan &pl);
size_t rewy_cuda_vec_fwd_workspace_size(const rewy_config *cfg, const rewy_cuda::Plan &pl);
size_t rewy_cuda_vec_bwd_workspace_size(const rewy_config *cfg, const rewy_cuda::Plan &pl);
rewy_status rewy_cuda_vec_forward(const rewy_fwd_params *p, const rewy_cuda::Plan &pl);
rewy_status rewy_cuda_vec_backward(const rewy_bwd_params *p, const rewy_cuda::Plan &pl);

#endif
