/* pullback_p.cu: P = Aᵀ R̄, ReWY's product (1) (MATH §4b), per chunk and value head in parallel over the chunks (or a window's
 * slots), written over R̄ in PR. Where the reverse scan runs FLA's dhu chain (bwd_scan_uses_w) its state update needs
 * Wᵀ R̄ instead of Eᵀ P, so P leaves the chain: the scan stores R̄, and this pass forms P for the ReWY pullback
 * (the WY pullback starts from R̄ itself). Grid (NC, HV), 256 threads, value slabs of 64 columns.
 *
 * A is the saved one: fp32 (MATH §10), or bf16 where the layout saves it so (Prob::a16: the forward's chain took
 * that A, so the gradient is the one of the forward computed). R̄ is bf16 (rp_t): the product runs on bf_mma as
 * Pᵀ = R̄ᵀ A with A as a hi/lo pair of bf16 tiles (16 mantissa bits, more than tf32's 10; lo = 0 for the bf16 A), both
 * operands through ldmatrix.trans, and P leaves
 * through a transposed staging tile in 16-B rows. H200, DeltaNet (2,16384,8): 0.075 ms, against 0.127 as the
 * general tf32 product it replaced (PERF.md, session 12). */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int PP_THREADS = 256;
constexpr int PP_BV = 64, PP_LD = PP_BV + 8;

__global__ void __launch_bounds__(PP_THREADS) p_from_rbar_kernel(Prob p, const float *A, rp_t *PR) {
    const int c = slot_chunk(p, blockIdx.x); /* the grid: chunk_slots (a window's backward: R̄ by slot) */
    if (c < 0) return;
    const int n = p.ctab[c].n, hv = blockIdx.y, BT = p.BT;
    if (n == 0) return;
    rp_t *pr = PR + ((size_t)blockIdx.x * p.HV + hv) * BT * p.V;
    const size_t at = ((size_t)c * p.HV + hv) * BT * BT;
    using bf16 = __nv_bfloat16;
    __shared__ __align__(16) bf16 Ah[MAXBT * PP_LD], Al[MAXBT * PP_LD]; /* A [k][i] as hi + lo */
    __shared__ __align__(16) bf16 Rs[MAXBT * PP_LD];                    /* R̄ slab [k][j] */
    __shared__ __align__(16) bf16 Ps[MAXBT * PP_LD];                    /* P slab [i][j] */
    for (int e = threadIdx.x; e < MAXBT * MAXBT / 4; e += PP_THREADS) {
        const int k = e / (MAXBT / 4), i = (e % (MAXBT / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (k < BT && i < BT) /* the saved A, fp32 or bf16 (Prob::a16: then lo is 0) */
            x = p.a16 ? widen_bf16x4(*reinterpret_cast<const uint2 *>(a16_of(A) + at + k * BT + i))
                      : *reinterpret_cast<const float4 *>(A + at + k * BT + i);
        const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int u = 0; u < 4; u++) st_hilo(Ah, Al, k * PP_LD + i + u, xs[u]);
    }
    const int warp = threadIdx.x >> 5, j0 = 16 * (warp & 3), i0 = 32 * (warp >> 2);
    for (int v0 = 0; v0 < p.V; v0 += PP_BV) {
        /* rows ≥ n of R̄ are not written by the scan: zero-filled here (A's columns ≥ n are zero, 0·NaN is not) */
        copy_tile<rp_t>(Rs, PP_LD, MAXBT, PP_BV, pr, p.V, n, v0, p.V);
        cp_async_wait();
        __syncthreads();
        /* Pᵀ(j, i) = Σ_k R̄(k, j) A(k, i): R̄ stored [k][j] (A side, transposed), A [k][i] (B side, k-major) */
        float acc[4][4] = {};
        bf_mma<4, true, true>(acc, MAXBT, Rs, PP_LD, j0, Ah, Al, PP_LD, i0);
        pf_each<4>(j0, i0, acc, [&](int j, int i, int s, int e) { Ps[i * PP_LD + j] = __float2bfloat16(acc[s][e]); });
        __syncthreads();
        const int nv = p.V - v0 < PP_BV ? p.V - v0 : PP_BV;
        if (nv == PP_BV && p.V % 8 == 0) {
            for (int e = threadIdx.x; e < n * (PP_BV / 8); e += PP_THREADS) {
                const int i = e / (PP_BV / 8), j = (e % (PP_BV / 8)) * 8;
                *reinterpret_cast<uint4 *>(pr + (size_t)i * p.V + v0 + j) = *reinterpret_cast<const uint4 *>(Ps + i * PP_LD + j);
            }
        } else {
            for (int e = threadIdx.x; e < n * PP_BV; e += PP_THREADS) {
                const int i = e / PP_BV, j = e % PP_BV;
                if (j < nv) pr[(size_t)i * p.V + v0 + j] = Ps[i * PP_LD + j];
            }
        }
        __syncthreads(); /* Rs and Ps are refilled for the next slab */
    }
}

cudaError_t launch_p_from_rbar(const Prob &p, const float *A, rp_t *PR, cudaStream_t s) {
    if (p.BT > MAXBT) return cudaErrorInvalidValue;
    p_from_rbar_kernel<<<dim3(chunk_slots(p), p.HV), PP_THREADS, 0, s>>>(p, A, PR);
    return cudaGetLastError();
}

} // namespace rewy_cuda
