/* state_scan.cu: the launch of state_scan_kernel (the block, and the stage's description: state_scan.cuh) */
#include "state_scan.cuh"

namespace rewy_cuda {

template <class T, bool VEC, int KPC, int BVT, int NT, bool FO, bool WU>
__global__ void __launch_bounds__(NT, NT == 512 ? 1 : 2) /* the registers must not decide it */
state_scan_kernel(Prob p, const T *k, const T *v, const float *GB, const float *A, VecOps vo, const float *h0,
                  float *ht, state_t *Sc, rp_t *Rout, ScanOut so) {
    state_scan_block<T, VEC, KPC, BVT, NT, FO, WU>(blockIdx.x, p, k, v, GB, A, vo, h0, ht, Sc, Rout, so);
}

template <class T, bool VEC, int KPC, int BVT, bool FO = false, bool WU = false>
static cudaError_t run(const Prob &p, const void *k, const void *v, const float *GB, const float *A, const VecOps &vo,
                       const float *h0, float *ht, state_t *Sc, rp_t *R, cudaStream_t s, const ScanOut &so = {}) {
    const size_t smem = state_scan_smem<T, VEC, KPC, BVT, FO>(p, vo);
    auto go = [&](auto nt) {
        constexpr int NT = decltype(nt)::value;
        cudaError_t e = ensure_smem<state_scan_kernel<T, VEC, KPC, BVT, NT, FO, WU>>(smem);
        if (e != cudaSuccess) return e;
        if (so.ready)
            return launch_beside(state_scan_kernel<T, VEC, KPC, BVT, NT, FO, WU>, scan_grid(p, BVT), NT, smem, s, p,
                                 (const T *)k, (const T *)v, GB, A, vo, h0, ht, Sc, R, so);
        state_scan_kernel<T, VEC, KPC, BVT, NT, FO, WU><<<scan_grid(p, BVT), NT, smem, s>>>(
            p, (const T *)k, (const T *)v, GB, A, vo, h0, ht, Sc, R, so);
        return cudaGetLastError();
    };
    if constexpr (BVT == 64 && scan_half<T, KPC>() == 2)
        if (scan_8w<T, KPC, BVT>(p, smem)) return go(std::integral_constant<int, 256>{});
    return go(std::integral_constant<int, scan_threads<BVT>()>{});
}

/* The fused output (state_scan.cuh, FO): bf16 scalar gates on the mma.sync fast path (chunk 64, K of 64 or
 * 128; the wgmma scans of large grids keep output.cu), where the grid has at least one block per two SMs.
 * H200, GDN forward, fused against output.cu: (4,4096,16) 0.591 against 0.657 ms, (2,16384,8) 0.936 against
 * 0.961, (1,8192,16) equal; (1,2048,4), 32 blocks, 0.140 against 0.128 (there the output kernel runs on the
 * idle SMs). force.scan_out = 0 / 1 forces it off / on (the tests run the matrix both ways). */
bool state_scan_fuses_output(const Prob &p, rewy_dtype dt, bool vec) {
    if (vec || dt != REWY_BF16 || SCAN_LO || p.BT != MAXBT || (p.Kp != 64 && p.Kp != 128)) return false;
    if (p.plan.scan_wg || p.plan.fwd_chain) return false;
    if (p.plan.force.scan_out != REWY_TEST_AUTO) return p.plan.force.scan_out != 0;
    return 2L * scan_grid(p, scan_bv(p)).x >= (long)p.plan.sms;
}

/* W and U from kkt_inverse (R = U − W S, two products per chunk; FLA's chain) for a scan that fuses the output
 * (the plan's fuse_output) where K, V allow them (w_shape_ok, u_shape_ok). force.scan_wu = 0 keeps A (Z − E S).
 * Measured: docs/PERF.md, session 12. */
bool state_scan_uses_wu(const Prob &p, rewy_dtype dt) {
    if (!p.plan.fuse_output || !w_shape_ok(dt, p.BT, p.K, p.Kp) || !u_shape_ok(p.V)) return false;
    return p.plan.force.scan_wu != 0;
}

/* Beside kkt_inverse: where the scan's grid is 16-column tiles of at most one block per SM (each chain as short as it
 * gets, and kkt's 0.2 ms of 0.86 at DeltaNet (2,16384,8) ran before it), where the device runs the library's sm_90a
 * code (plan.wgmma: there kkt's blocks signal the programmatic dependent launch; an sm_80 binary would not), and a
 * kkt block fits beside a scan block in an SM's shared memory (the registers fit by the launch bounds: 256 threads of
 * at most 128 and 256 of at most 85). Only for a scan with W, U (the plan's scan_wu). Measured: docs/PERF.md,
 * session 13. force.scan_beside = 0 keeps the scan after kkt. */
bool state_scan_beside_kkt(const Prob &p) {
    if (!p.plan.scan_wu || !p.plan.wgmma || scan_bv(p) != 16 || (long)scan_grid(p, 16).x > (long)p.plan.sms) return false;
    if (p.plan.force.scan_beside == 0) return false;
    using T = __nv_bfloat16;
    const size_t scan = p.Kp == 64 ? state_scan_smem<T, false, 64, 16, true>(p, VecOps{})
                                   : state_scan_smem<T, false, 128, 16, true>(p, VecOps{});
    return blocks_fit_sm(p.plan, scan, kkt_beside_smem(p));
}

cudaError_t launch_state_scan(const Prob &p, rewy_dtype dt, const void *k, const void *v, const float *GB,
                              const float *A, const VecOps *vo, const float *h0, float *ht, state_t *Sc, rp_t *R,
                              cudaStream_t s, const ScanOut *so) {
    if (so) { /* the plan's fuse_output */
        using T = __nv_bfloat16;
        return with_scan_tiles<T>(p, [&](auto kp, auto bv) -> cudaError_t {
            constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value;
            if constexpr (KPC == 64 || KPC == 128) {
                if (so->W) return run<T, false, KPC, BVT, true, true>(p, k, v, GB, A, VecOps{}, h0, ht, Sc, R, s, *so);
                return run<T, false, KPC, BVT, true>(p, k, v, GB, A, VecOps{}, h0, ht, Sc, R, s, *so);
            }
            return cudaErrorInvalidValue;
        });
    }
    if (p.plan.scan_wg) return launch_state_scan_wg(p, k, v, GB, A, h0, ht, Sc, R, s);
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
