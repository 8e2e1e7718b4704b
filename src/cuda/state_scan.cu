/* state_scan.cu: the launch of state_scan_kernel (the block, and the stage's description: state_scan.cuh) */
#include "state_scan.cuh"

namespace rewy_cuda {

template <class T, bool VEC, int KPC, int BVT, int NT>
__global__ void __launch_bounds__(NT, NT == 512 ? 1 : 2) /* the registers must not decide it */
state_scan_kernel(Prob p, const T *k, const T *v, const float *GB, const float *A, VecOps vo, const float *h0,
                  float *ht, state_t *Sc, rp_t *Rout) {
    state_scan_block<T, VEC, KPC, BVT, NT>(blockIdx.x, p, k, v, GB, A, vo, h0, ht, Sc, Rout);
}

template <class T, bool VEC, int KPC, int BVT>
static cudaError_t run(const Prob &p, const void *k, const void *v, const float *GB, const float *A, const VecOps &vo,
                       const float *h0, float *ht, state_t *Sc, rp_t *R, cudaStream_t s) {
    const size_t smem = state_scan_smem<T, VEC, KPC, BVT>(p, vo);
    auto go = [&](auto nt) {
        constexpr int NT = decltype(nt)::value;
        cudaError_t e = ensure_smem<state_scan_kernel<T, VEC, KPC, BVT, NT>>(smem);
        if (e != cudaSuccess) return e;
        state_scan_kernel<T, VEC, KPC, BVT, NT><<<scan_grid(p, BVT), NT, smem, s>>>(p, (const T *)k, (const T *)v, GB, A,
                                                                                  vo, h0, ht, Sc, R);
        return cudaGetLastError();
    };
    if constexpr (BVT == 64 && scan_half<T, KPC>() == 2)
        if (scan_8w<T, KPC, BVT>(p, smem)) return go(std::integral_constant<int, 256>{});
    return go(std::integral_constant<int, scan_threads<BVT>()>{});
}

cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *k, const void *v, const float *GB,
                              const float *A, const VecOps *vo, const float *h0, float *ht, state_t *Sc, rp_t *R,
                              cudaStream_t s) {
    if (state_scan_wg_ok(p, dt, k, v, vo)) return launch_state_scan_wg(p, k, v, GB, A, h0, ht, Sc, R, s);
    const VecOps none = {};
    return with_dtype(dt, [&](auto t) {
        using T = decltype(t);
        return with_scan_tiles<T>(p, [&](auto kp, auto bv) {
            constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value;
            return vo ? run<T, true, KPC, BVT>(p, k, v, GB, A, *vo, h0, ht, Sc, R, s)
                      : run<T, false, KPC, BVT>(p, k, v, GB, A, none, h0, ht, Sc, R, s);
        });
    });
}

} // namespace rewy_cuda
