/* state_scan_wg.cu: the forward chunk scan (MATH §2; the stage: state_scan.cuh) on Hopper's warpgroup
 * products, for scalar gates (DeltaNet, GDN), bf16 inputs, chunk 64, K of 64 or 128 (K % 8 == 0):
 *   store S_c;   X = Z − E S = diag(β) (V − diag(e^{G}) K S);   R = A X (stored; bf16 operands: the saved A is bf16
 *   on this path, Layout::a16, and X is rounded as the forward chain rounds Y);
 *   S ← e^{G_n} S + Kᵀ diag(e^{G_n − G_j}) R
 * One warpgroup (4 warps) per (sequence, value head, tile of BVT value columns), the state's KPC × BVT
 * fp32 tile in its registers as the accumulator of the third product, the other two in registers too.
 * Why: the mma.sync scans are chains of dependent products whose warps issue ~0.4 instructions per cycle
 * (Nsight); one wgmma instruction does a warpgroup's 64 × BVT × 16 step, and its chain step measured
 * half as long as mma.sync's (bench/dev/wgmma_probe.cu: 0.31 against 0.62 µs for a 64³ product).
 * Shared memory is small enough (65 KB at K = 128, 64 columns) for three chains per SM.
 *
 * Operands in shared memory (wgmma.cuh's layouts):
 *   K   [token][feature] K-major, two buffers: A of K S (k = feature) and, read MN-major, of Kᵀ R̃ (k = token)
 *   S   bf16 [feature][column] MN-major: B of K S (the once-per-chunk copy of the register state)
 *   X   bf16 [token][column] MN-major: B of A X, in S's space
 *   A   bf16 [token][token] K-major (the saved bf16 A by cp.async: a tf32 product widened it first, session 51)
 *   R̃   bf16 [token][column] MN-major: B of Kᵀ R̃
 * V, G, β are read by the epilogues. Each chunk: five barriers of 128 threads, three product groups.
 * (The forward segments' local walks ran here until session 52; chain_ws.cu's recompute form took them, 14–19 %
 * faster: docs/PERF.md.) */
#include "kernels.cuh"
#include "scan_wg.cuh"

namespace rewy_cuda {

/* Byte offsets in dynamic shared memory. NWG warpgroups share the K, A and gate tiles of their (sequence,
 * head); each has its own V tile and one S / X / R̃ region (S, then X once K S is read, then R̃ once A X is). */
template <int KPC, int BVT, int NWG> struct WgScanLayout {
    static constexpr int KT = MAXBT * KPC * 2;
    static constexpr int SXB = KPC * BVT * 2 > BVT * MAXBT * 4 ? KPC * BVT * 2 : BVT * MAXBT * 4;
    static constexpr int WGB = MAXBT * BVT * 2 + SXB;  /* one warpgroup's V and S / X / R̃ */
    static constexpr int K0 = 0, A = 2 * KT, GB = A + MAXBT * MAXBT * 2, WG = GB + 4 * MAXBT * 4, BYTES = WG + NWG * WGB;
    static constexpr int V = 0, SX = MAXBT * BVT * 2;   /* inside a warpgroup's part */
};

template <int KPC, int BVT, int NWG>
__global__ void __launch_bounds__(128 * NWG, NWG == 2 ? 2 : 1) state_scan_wg_kernel(Prob p, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                                                            const float *GB, const float *A, const float *h0,
                                                            float *ht, state_t *Sc, rp_t *Rout) {
#if REWY_WGMMA
    using T = __nv_bfloat16;
    using L = WgScanLayout<KPC, BVT, NWG>;
    constexpr int NT = 128 * NWG;
    constexpr int MB = KPC / 64, NA = BVT / 2; /* state: MB row blocks of 64 features; NA registers each */
    extern __shared__ __align__(128) char smc[];
    T *const Kb0 = reinterpret_cast<T *>(smc + L::K0), *const Kb1 = Kb0 + MAXBT * KPC;
    T *const As = reinterpret_cast<T *>(smc + L::A);
    float *const GBs = reinterpret_cast<float *>(smc + L::GB);
    const int wgi = threadIdx.x >> 7; /* this thread's warpgroup */
    char *const wgs = smc + L::WG + wgi * L::WGB;
    T *const Vs = reinterpret_cast<T *>(wgs + L::V);
    T *const Ss = reinterpret_cast<T *>(wgs + L::SX), *const Rs = Ss, *const Ro = Rs + MAXBT * BVT; /* R̃, R */
    T *const Xs = reinterpret_cast<T *>(wgs + L::SX);

    const ScanBlock blk = ScanBlock::get<BVT * NWG>(p, blockIdx.x);
    const int sq = blk.sq, hv = blk.hv, v0 = blk.v0 + wgi * BVT, h = hv / p.G;

    /* cp.async copies of chunk cj's tiles (scan_wg.cuh; A here: the bf16 tile as cm_k<64>, wg_copy_a16) */
    auto issue_k = [&](T *dst, const ChunkInfo &cj) { wg_copy_kq<KPC, NT>(dst, k, p, cj, h); };
    auto issue_v = [&](const ChunkInfo &cj) { wg_copy_cols<BVT>(Vs, v, p, cj, hv, v0); };
    auto issue_a = [&](int cj) { wg_copy_a16<NT>(As, A, p, hv, cj); };
    auto issue_gb = [&](float *dst, int cj) { wg_copy_gates(dst, GB, p, hv, cj); };

    /* the state: feature 64·mb + wg_row(e), column wg_col(e) */
    float s[MB][NA];
    const size_t sbase = ((size_t)sq * p.HV + hv) * p.K * p.V;
    wg_state_load(s, h0, p, sbase, v0);

    int c_begin, c_end; /* the sequence, or its part in the window (a windowed forward; never a window's backward) */
    seq_chunks(p, sq, c_begin, c_end);
    ChunkInfo ci = {}, cn = {};
    if (c_begin < c_end) {
        ci = p.ctab[c_begin];
        cn = c_begin + 1 < c_end ? p.ctab[c_begin + 1] : ci;
        issue_k(Kb0, ci);
        issue_v(ci);
        issue_a(c_begin);
        issue_gb(GBs, c_begin);
        cp_async_commit();
    }
    using W = WgStrides<KPC, BVT>; /* descriptor strides of the operand tiles */
    int kb = 0, cur = 0;
    for (int c = c_begin; c < c_end; c++) {
        const int n = ci.n;
        const bool has_next = c + 1 < c_end;
        const ChunkInfo cnn = c + 2 < c_end ? p.ctab[c + 2] : cn;
        const size_t ch = (size_t)c * p.HV + hv;
        T *const Kc = kb ? Kb1 : Kb0;
        const float *const Gs = GBs + cur * 2 * MAXBT, *const bs = Gs + MAXBT;
        cp_async_wait_group<0>();
        __syncthreads(); /* chunk c's tiles are in; the previous chunk's products are complete in every warp */
        if (has_next) {
            issue_k(kb ? Kb0 : Kb1, cn);
            issue_gb(GBs + (cur ^ 1) * 2 * MAXBT, c + 1);
            cp_async_commit();
        }
        /* S_c in bf16: the B operand of K S, and from there the saved states (wg_store_state) */
        state_t *const Sd = Sc ? Sc + ch * p.K * p.V : nullptr;
        wg_state_spill<MB, NA, BVT>(s, Ss);
        wg_proxy_fence();
        __syncthreads();
        /* X' = K S (64 tokens × BVT, k over the features) */
        float x[NA];
        const uint32_t klo = wg_lo<W::K_LBO>(Kc), ktlo = wg_lo<W::KT_LBO>(Kc), slo = wg_lo<W::N_LBO>(Ss);
        wg_arrive();
        wg_k_times_state<KPC, BVT>(x, klo, slo);
        if (Sd) wg_store_rows<KPC, BVT>(Sd, Ss, p.K, p.V, v0); /* while the product runs */
        wg_commit();
        wg_wait();
        __syncthreads(); /* every warp is done reading S before X overwrites it */
        /* X = diag(β) (V − diag(e^{G}) X') in bf16, the B operand of A X */
#pragma unroll
        for (int e = 0; e < NA; e += 2) {
            const int i = wg_row(e), j = wg_col(e);
            const float2 vv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Vs + cm_mn<BVT>(j, i)));
            const float gi = gexp(p, Gs[i]), bi = bs[i];
            *reinterpret_cast<__nv_bfloat162 *>(Xs + cm_mn<BVT>(j, i)) =
                __floats2bfloat162_rn(bi * (vv.x - gi * x[e]), bi * (vv.y - gi * x[e + 1]));
        }
        wg_proxy_fence();
        __syncthreads(); /* X is in; V is consumed */
        if (has_next) {
            issue_v(cn);
            cp_async_commit();
        }
        /* R = A X (k over the tokens: A K-major, X MN-major, as chain_ws's A Y) */
        const uint32_t alo = wg_lo<W::K_LBO>(As), xlo = wg_lo<W::N_LBO>(Xs);
        wg_arrive();
        wg_k_times_state<MAXBT, BVT>(x, alo, xlo);
        wg_commit();
        wg_wait();
        __syncthreads(); /* every warp is done reading X before R̃ overwrites it */
        /* R̃ = diag(e^{G_n − G_j}) R (zero on rows ≥ n), the B operand of Kᵀ R̃, and R in bf16 beside it for its
         * store (wg_store_rows, while Kᵀ R̃ runs) */
        const float gl = Gs[n - 1];
#pragma unroll
        for (int e = 0; e < NA; e += 2) {
            const int i = wg_row(e), j = wg_col(e);
            const float f = i < n ? gexp(p, gl - Gs[i]) : 0.f;
            *reinterpret_cast<__nv_bfloat162 *>(Rs + cm_mn<BVT>(j, i)) = __floats2bfloat162_rn(f * x[e], f * x[e + 1]);
            if (Rout) *reinterpret_cast<__nv_bfloat162 *>(Ro + cm_mn<BVT>(j, i)) = __floats2bfloat162_rn(x[e], x[e + 1]);
        }
        wg_proxy_fence();
        __syncthreads(); /* R̃ is in; A is consumed */
        if (has_next) {
            issue_a(c + 1);
            cp_async_commit();
        }
        /* S ← e^{G_n} S + Kᵀ R̃ (MB row blocks of 64 features, k over the tokens) */
        const float gn = gexp(p, gl);
#pragma unroll
        for (int mb = 0; mb < MB; mb++)
#pragma unroll
            for (int e = 0; e < NA; e++) s[mb][e] *= gn;
        const uint32_t rlo = wg_lo<W::N_LBO>(Rs);
        wg_arrive();
        wg_state_add<KPC, BVT, MB>(s, ktlo, rlo);
        if (Rout) wg_store_rows<MAXBT, BVT>(Rout + ch * MAXBT * p.V, Ro, n, p.V, v0);
        wg_commit();
        wg_wait();
        kb ^= 1;
        cur ^= 1;
        ci = cn;
        cn = cnn;
    }
    if (ht) wg_state_save(s, ht, p, sbase, v0);
#else
    (void)p, (void)k, (void)v, (void)GB, (void)A, (void)h0, (void)ht, (void)Sc, (void)Rout;
#endif
}

/* Whether the wgmma scan takes this problem: bf16, scalar gates, chunk 64, K padded to 64 or 128 with
 * K % 8 == 0 and V % 8 == 0 (16-byte row copies), 16-byte aligned k and v, a binary with sm_90a code, and
 * a grid of at least 1.5 two-warpgroup blocks per SM. On smaller grids a scan is a few long chains and one
 * warpgroup runs a chain slower than the 8- and 16-warp mma.sync blocks do (H200, forward at (4,4096,16):
 * 0.97 against 0.65 ms; (2,16384,8): 1.24 against 0.93), while at (8,2048,32), four chains per SM, it runs
 * the forward in 1.06 against 1.17 ms. force.scan_wg = 0 / 1 forces the mma.sync / the wgmma scan (the
 * tests run the matrix with both). */
bool state_scan_wg_ok(const Prob &p, rewy_dtype dt, const void *k, const void *v, bool vec) {
    if (vec || sizeof(state_t) != 2 || dt != REWY_BF16 || p.BT != MAXBT || (p.Kp != 64 && p.Kp != 128) || p.K % 8 || p.V % 8) return false;
    if ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) return false;
    if (!p.plan.wgmma) return false;
    if (p.plan.force.scan_wg != REWY_TEST_AUTO) return p.plan.force.scan_wg != 0;
    return 2L * p.N * p.HV * ceil_div(p.V, 128) >= 3L * p.plan.sms;
}

/* one kernel stands for all: the library's .cu files are compiled for the same architectures */
bool wgmma_binary_ok() { return wg_kernel_ok<state_scan_wg_kernel<128, 64, 1>>(); }

cudaError_t launch_state_scan_wg(const Prob &p, const void *k, const void *v, const float *GB, const float *A,
                                 const float *h0, float *ht, state_t *Sc, rp_t *R, cudaStream_t s) {
    if (!p.a16) return cudaErrorInvalidValue; /* the bf16 saved A (state_scan_wg_ok's problems have it) */
    auto go = [&](auto kp, auto bv, auto nwg) {
        constexpr int KPC = decltype(kp)::value, BVT = decltype(bv)::value, NWG = decltype(nwg)::value;
        constexpr size_t smem = WgScanLayout<KPC, BVT, NWG>::BYTES;
        cudaError_t e = ensure_smem<state_scan_wg_kernel<KPC, BVT, NWG>>(smem);
        if (e != cudaSuccess) return e;
        state_scan_wg_kernel<KPC, BVT, NWG><<<scan_grid(p, BVT * NWG), 128 * NWG, smem, s>>>(
            p, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, GB, A, h0, ht, Sc, R);
        return cudaGetLastError();
    };
    return with_wg_tiles(p, go);
}

} // namespace rewy_cuda
