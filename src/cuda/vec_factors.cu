/* vec_factors.cu: the vector-gate factors of MATH §2 that the two scans read, per chunk and value
 * head, so that the sequential scans do no per-feature exponentials (state_scan.cu and
 * bwd_state_scan.cu in their VEC mode):
 *   E = b ⊙ k ⊙ γ,   F = k ⊙ e^{G_n − G},   Q_g = q ⊙ γ   (γ = e^G; the scans apply scale)
 *   lam = γ_n   (Λ = Diag(γ_n), the per-row decay of the state)
 *   GB  = the scalar path's per-chunk table [2][BT]: G row 0 (unused), β row (KDA's erase = write gate)
 * All exponents are ≤ 0 for log gates ≤ 0, so the factors are bounded by |k|, |q| and hold in the
 * input type (factor_t: bf16 for fp32 inputs). Rows ≥ n and features ≥ K are zero.
 * Grid (NC, HV), 256 threads; elementwise, feature index fastest (coalesced); eight features per thread
 * with 16-B accesses where K allows (2-byte inputs, K a multiple of 32 dividing into the block). */
#include "vec_kernels.cuh"

namespace rewy_cuda {

template <class T>
__global__ void __launch_bounds__(256)
vec_factors_kernel(Prob p, const T *q, const T *k, const T *beta, const T *b, const float *Gc, factor_t<T> *E,
                   factor_t<T> *F, factor_t<T> *Qg, float *lam, float *GB) {
    using FT = factor_t<T>;
    const int c = blockIdx.x, hv = blockIdx.y, h = hv / p.G, BT = p.BT, Kp = p.Kp;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n;
    const size_t ch = (size_t)c * p.HV + hv, tok0 = (size_t)ci.tok0;
    const float *G = Gc + ch * BT * Kp;
    const size_t rsk = (size_t)p.H * p.K;
    const bool vec8 = sizeof(T) == 2 && p.K == Kp && Kp % 8 == 0 && 256 % (Kp / 8) == 0 &&
                      ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                        reinterpret_cast<uintptr_t>(b)) & 15) == 0 && rsk % 8 == 0;
    if constexpr (sizeof(T) == 2) {
        if (vec8) { /* eight features per thread: 16-B loads and stores, γ_n read once per thread */
            const int gv = Kp / 8, d0 = (threadIdx.x % gv) * 8, rstep = blockDim.x / gv;
            float gn[8];
#pragma unroll
            for (int m = 0; m < 8; m++) gn[m] = n > 0 ? G[(size_t)(n - 1) * Kp + d0 + m] : 0.f;
            for (int i = threadIdx.x / gv; i < BT; i += rstep) {
                float e8[8] = {}, f8[8] = {}, q8[8] = {}; /* rows past the chunk's end: zeros */
                if (i < n) {
                    const size_t tok = tok0 + i, kq = tok * rsk + (size_t)h * p.K + d0;
                    float kx[8], qx[8], bx[8];
                    ld8(k + kq, kx);
                    ld8(q + kq, qx);
                    if (b) ld8(b + (tok * p.HV + hv) * p.K + d0, bx);
                    const float bs = b ? 0.f : ld<T>(beta + tok * p.HV + hv);
                    const float4 g0 = *reinterpret_cast<const float4 *>(G + (size_t)i * Kp + d0);
                    const float4 g1 = *reinterpret_cast<const float4 *>(G + (size_t)i * Kp + d0 + 4);
                    const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                    for (int m = 0; m < 8; m++) {
                        const FactorEl x = factor_el(kx[m], b ? bx[m] : bs, qx[m], g[m], gn[m]);
                        e8[m] = x.e;
                        f8[m] = x.f;
                        q8[m] = x.q;
                    }
                }
                const size_t o = ch * BT * Kp + (size_t)i * Kp + d0;
                st8(E + o, e8);
                st8(F + o, f8);
                st8(Qg + o, q8);
            }
        }
    }
    for (int e = vec8 ? BT * Kp : threadIdx.x; e < BT * Kp; e += blockDim.x) { /* any K: one element per thread */
        const int i = e / Kp, d = e - i * Kp;
        float ev = 0.f, fv = 0.f, qv = 0.f;
        if (i < n && d < p.K) {
            const size_t tok = tok0 + i;
            const float bv = b ? ld<T>(b + (tok * p.HV + hv) * p.K + d) : ld<T>(beta + tok * p.HV + hv);
            const FactorEl x = factor_el(ld<T>(k + tok * rsk + (size_t)h * p.K + d), bv,
                                         ld<T>(q + tok * rsk + (size_t)h * p.K + d), G[(size_t)i * Kp + d],
                                         G[(size_t)(n - 1) * Kp + d]);
            ev = x.e;
            fv = x.f;
            qv = x.q;
        }
        const size_t o = ch * BT * Kp + e;
        st<FT>(E + o, ev);
        st<FT>(F + o, fv);
        st<FT>(Qg + o, qv);
    }
    for (int d = threadIdx.x; d < Kp; d += blockDim.x)
        lam[ch * Kp + d] = (n > 0 && d < p.K) ? expf(G[(size_t)(n - 1) * Kp + d]) : 0.f;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) {
        GB[ch * 2 * BT + i] = 0.f;
        GB[ch * 2 * BT + BT + i] = (i < n && !b) ? ld<T>(beta + (tok0 + i) * p.HV + hv) : 1.f;
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const void *beta, const void *b, const float *Gc,
                       const FactorOut &fo, cudaStream_t s) {
    using FT = factor_t<T>;
    dim3 grid(p.NC, p.HV);
    vec_factors_kernel<T><<<grid, 256, 0, s>>>(p, (const T *)q, (const T *)k, (const T *)beta, (const T *)b, Gc,
                                               (FT *)fo.E, (FT *)fo.F, (FT *)fo.Qg, fo.lam, fo.GB);
    return cudaGetLastError();
}

cudaError_t launch_vec_factors(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *beta,
                               const void *b, const float *Gc, const FactorOut &fo, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, q, k, beta, b, Gc, fo, s); });
}

} // namespace rewy_cuda
