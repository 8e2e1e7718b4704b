/* output.cu: the chunk output (MATH §2), fully parallel over chunks once the scan has stored
 * every chunk's incoming state S_c and its corrections R:
 *   O = Q_g S_c + C_q R          Q_g = scale·q⊙γ
 * Scalar gates form Q_g from q and the per-row γ_i = e^{G_i} (GB table); vector gates (vo != NULL)
 * read the precomputed q⊙γ of vec_factors.cu. One block per (chunk, value head, 64 columns of V).
 * Keeping this out of the sequential scan leaves the scan two products per chunk on its critical
 * path instead of four. */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int OUT_THREADS = 256;
constexpr int OUT_NW = OUT_THREADS / 32;
constexpr int OBV = 64;       /* V columns per block */
constexpr int OLD = OBV + 4;  /* fp32 [64][OLD] tiles */
constexpr int OLDS = OBV + 8; /* state_t [Kp][OLDS] tile */

template <class T, bool VEC>
__global__ void __launch_bounds__(OUT_THREADS)
output_kernel(Prob p, const T *q, const float *GB, const float *Cq, const state_t *Sc, const float *R,
              const factor_t<T> *Qg, T *o) {
    using QT = typename std::conditional<VEC, factor_t<T>, T>::type;
    extern __shared__ __align__(16) float sm[];
    const int c = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * OBV, h = hv / p.G, BT = p.BT, Kp = p.Kp;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n;
    if (n == 0) return;
    const int ldq = scan_ldk<QT>(Kp);
    const size_t ch = (size_t)c * p.HV + hv, rsv = (size_t)p.HV * p.V;
    float *Cs = sm;                    /* [64][LDA] C_q */
    float *Rs = Cs + MAXBT * LDA;      /* [64][OLD] R */
    float *Os = Rs + MAXBT * OLD;      /* [64][OLD] Q_g S_c */
    float *Gs = Os + MAXBT * OLD;      /* [2][64] G, β */
    QT *Qs = reinterpret_cast<QT *>(Gs + 2 * MAXBT);   /* [64][ldq] */
    state_t *Ss = reinterpret_cast<state_t *>(Qs + MAXBT * ldq); /* [Kp][OLDS] S_c */

    if (VEC)
        copy_tile<QT>(Qs, ldq, BT, Kp, reinterpret_cast<const QT *>(Qg) + ch * BT * Kp, Kp, BT, 0, Kp);
    else
        copy_tile<QT>(Qs, ldq, BT, Kp, reinterpret_cast<const QT *>(q) + ((size_t)ci.tok0 * p.H + h) * p.K,
                      (size_t)p.H * p.K, n, 0, p.K);
    copy_tile<state_t>(Ss, OLDS, Kp, OBV, Sc + ch * p.K * p.V, p.V, p.K, v0, p.V);
    copy_tile<float>(Cs, LDA, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
    copy_tile<float>(Rs, OLD, BT, OBV, R + ch * BT * p.V, p.V, n, v0, p.V);
    if (!VEC) copy_tile<float>(Gs, 2 * BT, 1, 2 * BT, GB + ch * 2 * BT, 2 * BT, 1, 0, 2 * BT);
    cp_async_wait();
    __syncthreads();
    /* Q_g S_c (scale and, for scalar gates, γ_i in the epilogue) */
    bgemm<OUT_NW>(BT, OBV, Kp, Qs, ldq, 1, Ss, OLDS, 1, [&](int i, int j, float cc) {
        Os[i * OLD + j] = (VEC ? p.scale : p.scale * expf(Gs[i])) * cc;
    });
    /* + C_q R: same (M, N) as the product above, so each thread adds to the elements it wrote */
    T *dst = o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0;
    bgemm<OUT_NW>(BT, OBV, BT, Cs, LDA, 1, Rs, OLD, 1, [&](int i, int j, float cc) {
        if (i < n && v0 + j < p.V) st<T>(dst + (size_t)i * rsv + j, Os[i * OLD + j] + cc);
    });
}

template <class T, bool VEC>
static cudaError_t run(const Prob &p, const void *q, const float *GB, const float *Cq, const state_t *Sc,
                       const float *R, const void *Qg, void *o, cudaStream_t s) {
    using QT = typename std::conditional<VEC, factor_t<T>, T>::type;
    const size_t smem = sizeof(float) * ((size_t)MAXBT * LDA + 2 * (size_t)MAXBT * OLD + 2 * MAXBT) +
                        sizeof(QT) * (size_t)MAXBT * scan_ldk<QT>(p.Kp) + sizeof(state_t) * (size_t)p.Kp * OLDS;
    cudaError_t e = ensure_smem<output_kernel<T, VEC>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV, ceil_div(p.V, OBV));
    output_kernel<T, VEC><<<grid, OUT_THREADS, smem, s>>>(p, (const T *)q, GB, Cq, Sc, R, (const factor_t<T> *)Qg,
                                                          (T *)o);
    return cudaGetLastError();
}

cudaError_t launch_output(const Prob &p, rewy_dtype dt, const void *q, const float *GB, const float *Cq,
                          const state_t *Sc, const float *R, const VecOps *vo, void *o, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) {
        using T = decltype(t);
        return vo ? run<T, true>(p, q, GB, Cq, Sc, R, vo->Qg, o, s) : run<T, false>(p, q, GB, Cq, Sc, R, nullptr, o, s);
    });
}

} // namespace rewy_cuda
