/* bwd_state_scan.cu: the launch of bwd_state_scan_kernel (the block, and the stage's description:
 * bwd_state_scan.cuh), alone or paired with policy R's recompute scan (scan_pair_kernel). */
#include "bwd_state_scan.cuh"
#include "state_scan.cuh"

namespace rewy_cuda {

/* NT = 256 with 64-column tiles: two blocks per SM (scan_8w), whose registers must not decide it */
template <class T, bool VEC, int KPC, int BVT, int NT>
__global__ void __launch_bounds__(NT, BVT == 64 && NT == 256 ? 2 : 1)
bwd_state_scan_kernel(Prob p, const T *q, const T *k, const float *GB, const float *A, const cq_t *Cq, VecOps vo,
                      const T *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy) {
    bwd_state_scan_block<T, VEC, KPC, BVT, NT>(blockIdx.x, p, q, k, GB, A, Cq, vo, do_, dht, dh0, Sbar, PR, wy);
}

template <class T, bool VEC, int KPC, int BVT>
static cudaError_t run(const Prob &p, const void *q, const void *k, const float *GB, const float *A, const cq_t *Cq,
                       const VecOps &vo, const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                       cudaStream_t s) {
    const size_t smem = bwd_state_scan_smem<T, VEC, KPC, BVT>(p, vo);
    auto go = [&](auto nt) {
        constexpr int NT = decltype(nt)::value;
        cudaError_t e = ensure_smem<bwd_state_scan_kernel<T, VEC, KPC, BVT, NT>>(smem);
        if (e != cudaSuccess) return e;
        bwd_state_scan_kernel<T, VEC, KPC, BVT, NT><<<scan_grid(p, BVT), NT, smem, s>>>(
            p, (const T *)q, (const T *)k, GB, A, Cq, vo, (const T *)do_, dht, dh0, Sbar, PR, wy);
        return cudaGetLastError();
    };
    if constexpr (BVT == 64 && scan_half<T, KPC>() == 2)
        if (scan_8w<T, KPC, BVT>(p, smem)) return go(std::integral_constant<int, 256>{});
    return go(std::integral_constant<int, scan_threads<BVT>()>{});
}

/* Policy R's recompute scan (S_c, R) and the reverse scan in one launch. They share no data: the reverse scan
 * reads q, k, A, C_q and Ō, never S_c or R. On long sequences each grid is a few blocks per SM, each a chain of
 * chunks that leaves the SM mostly idle; launched together, the two chains of an SM overlap (the reverse
 * scan's blocks first: they are the longer). Tiles of 16 and 64 columns, whose register budgets the two
 * blocks share (at 32 the reverse scan takes up to 201 registers and runs alone). 64-column tiles pair as
 * 8-warp blocks, two per SM, where two fit (scan_8w_fits): as 16-warp blocks, one per SM, a pair grid larger
 * than the SMs ran as two waves (DeltaNet (4,4096,16), 256 blocks, H200: backward 1.41 → 1.27 ms). Not where
 * either scan alone runs as 8-warp blocks (scan_8w: a grid of two blocks per SM, which the pair would not
 * overlap anyway). */
template <class T, bool VEC, int KPC, int BVT, int NT, bool WF = false>
__global__ void __launch_bounds__(NT, NT == 512 ? 1 : 2)
scan_pair_kernel(Prob p, const T *q, const T *k, const T *v, const float *GB, const float *A, const cq_t *Cq, VecOps vo,
                 const float *h0, state_t *Sc, rp_t *R, const T *do_, const float *dht, float *dh0, state_t *Sbar,
                 rp_t *PR, int wy, int nb, const __nv_bfloat16 *W) {
    if ((int)blockIdx.x < nb)
        bwd_state_scan_block<T, VEC, KPC, BVT, NT, WF>(blockIdx.x, p, q, k, GB, A, Cq, vo, do_, dht, dh0, Sbar, PR, wy, W);
    else state_scan_block<T, VEC, KPC, BVT, NT>(blockIdx.x - nb, p, k, v, GB, A, vo, h0, nullptr, Sc, R);
}

/* The reverse scan's W chain (bwd_state_scan.cuh, WF) where the policy-R pair runs 16-column mma.sync blocks on the
 * bf16 fast path with K = Kp: the small grids, whose chunk steps are latency-bound. force.scan_wf = 0 keeps P in
 * the chain. Measured: docs/PERF.md, session 12. */
bool bwd_scan_uses_w(const Prob &p, rewy_dtype dt, bool vec) {
    if (vec || SCAN_LO || !w_shape_ok(dt, p.BT, p.K, p.Kp)) return false;
    if (p.plan.scan_wg || p.plan.bwd_scan_wg) return false;
    if (scan_bv(p) != 16) return false;
    return p.plan.force.scan_wf != 0;
}

cudaError_t launch_scan_pair(const Prob &p, rewy_dtype dt, const void *q, const void *k, const void *v, const float *GB,
                             const float *A, const cq_t *Cq, const VecOps *vo, const float *h0, state_t *Sc, rp_t *R,
                             const void *do_, const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy,
                             cudaStream_t s, const __nv_bfloat16 *W) {
    const VecOps none = {};
    const VecOps &ops = vo ? *vo : none;
    return with_dtype(dt, [&](auto t) {
        using T = decltype(t);
        return with_scan_tiles<T>(p, [&](auto kp, auto bv) -> cudaError_t {
            constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value;
            /* where a wgmma scan runs, the two scans are separate launches (the pair is of mma.sync blocks) */
            const bool wg = p.plan.scan_wg || p.plan.bwd_scan_wg;
            if constexpr (BVT != BV) if (!wg) {
                auto go = [&](auto vc) {
                    constexpr bool VEC = decltype(vc)::value;
                    /* W: the reverse scan's W chain (bwd_scan_uses_w: bf16 scalar gates at 16 columns) */
                    constexpr bool WFOK = !VEC && BVT == 16 && scan_half<T, KPC>() == 2 &&
                                          std::is_same<T, __nv_bfloat16>::value && (KPC == 64 || KPC == 128);
                    const size_t sf = state_scan_smem<T, VEC, KPC, BVT>(p, ops);
                    const size_t sb = W && WFOK ? bwd_state_scan_smem<T, VEC, KPC, BVT, WFOK>(p, ops)
                                                : bwd_state_scan_smem<T, VEC, KPC, BVT>(p, ops);
                    const size_t smem = sf > sb ? sf : sb;
                    auto launch = [&](auto nt) {
                        constexpr int NT = decltype(nt)::value;
                        const int nb = (int)scan_grid(p, BVT).x;
                        auto fire = [&](auto wf) {
                            constexpr bool WF = decltype(wf)::value;
                            cudaError_t e = ensure_smem<scan_pair_kernel<T, VEC, KPC, BVT, NT, WF>>(smem);
                            if (e != cudaSuccess) return e;
                            scan_pair_kernel<T, VEC, KPC, BVT, NT, WF><<<2 * nb, NT, smem, s>>>(
                                p, (const T *)q, (const T *)k, (const T *)v, GB, A, Cq, ops, h0, Sc, R, (const T *)do_, dht,
                                dh0, Sbar, PR, wy, nb, W);
                            return cudaGetLastError();
                        };
                        if constexpr (WFOK)
                            if (W) return fire(std::true_type{});
                        if (W) return cudaErrorInvalidValue; /* the caller asked bwd_scan_uses_w */
                        return fire(std::false_type{});
                    };
                    if constexpr (BVT == 64 && scan_half<T, KPC>() == 2)
                        if (scan_8w_fits<T, KPC, BVT>(p, smem)) return launch(std::integral_constant<int, 256>{});
                    return launch(std::integral_constant<int, scan_threads<BVT>()>{});
                };
                auto pair = [&](auto vc) {
                    constexpr bool VEC = decltype(vc)::value;
                    return !scan_8w<T, KPC, BVT>(p, state_scan_smem<T, VEC, KPC, BVT>(p, ops)) &&
                           !scan_8w<T, KPC, BVT>(p, bwd_state_scan_smem<T, VEC, KPC, BVT>(p, ops));
                };
                if (vo ? pair(std::true_type{}) : pair(std::false_type{}))
                    return vo ? go(std::true_type{}) : go(std::false_type{});
            }
            if (W) return cudaErrorInvalidValue; /* the W chain is the pair's (bwd_scan_uses_w) */
            cudaError_t e = launch_state_scan(p, dt, k, v, GB, A, vo, h0, nullptr, Sc, R, s);
            if (e != cudaSuccess) return e;
            return launch_bwd_state_scan(p, dt, q, k, GB, A, Cq, vo, do_, dht, dh0, Sbar, PR, wy, s);
        });
    });
}

cudaError_t launch_bwd_state_scan(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *GB,
                                  const float *A, const cq_t *Cq, const VecOps *vo, const void *do_,
                                  const float *dht, float *dh0, state_t *Sbar, rp_t *PR, int wy, cudaStream_t s) {
    if (p.plan.bwd_scan_wg) /* forms C_q itself */
        return launch_bwd_state_scan_wg(p, q, k, GB, A, do_, dht, dh0, Sbar, PR, wy, s);
    const VecOps none = {};
    return with_dtype(dt, [&](auto t) {
        using T = decltype(t);
        return with_scan_tiles<T>(p, [&](auto kp, auto bv) {
            constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value;
            return vo ? run<T, true, KPC, BVT>(p, q, k, GB, A, Cq, *vo, do_, dht, dh0, Sbar, PR, wy, s)
                      : run<T, false, KPC, BVT>(p, q, k, GB, A, Cq, none, do_, dht, dh0, Sbar, PR, wy, s);
        });
    });
}

} // namespace rewy_cuda
