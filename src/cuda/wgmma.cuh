/* wgmma.cuh: Hopper warpgroup products (sm_90a) for the scans, and the shared-memory layouts they read.
 *
 * One warpgroup (4 warps, 128 threads) computes D[64][N] (+)= A[64][k] · B[k][N] per instruction, A and B
 * read from shared memory through 64-bit descriptors, D in registers. Layouts here are the no-swizzle
 * "core matrix" ones: 8 rows × 16 bytes per 128-byte core matrix. An operand is K-major when each 16-byte
 * row runs along k, MN-major (the instruction's transpose bit; 2-byte types only) when it runs along m or n.
 * In both, the descriptor's leading byte offset (LBO) is the stride between core matrices adjacent in k and
 * the stride byte offset (SBO) between those adjacent in m / n (checked on the H200 by
 * bench/dev/wgmma_layout_probe.cu, against a CPU product, for both majors and for tf32).
 *
 * Accumulator ownership (m64nN, fp32): thread t of the warpgroup holds element e ∈ [0, N/2) at
 *   row 16·(t/32) + (t%32)/4 + 8·((e/2)%2),  column 8·(e/4) + 2·(t%4) + e%2,
 * the layout of mma.sync's m16n8 fragments stacked over the four warps.
 *
 * Everything here exists only where the compiler targets sm_90a (REWY_WGMMA); elsewhere the kernels that
 * use it compile to an empty body and their launchers never run them (wg_kernel_ok). */
#ifndef REWY_CUDA_WGMMA_CUH
#define REWY_CUDA_WGMMA_CUH

#include "common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define REWY_WGMMA 1
#else
#define REWY_WGMMA 0
#endif
/* wg_kernel_ok cannot tell sm_90 code from sm_90a code (both report version 90), and sm_90 code has these kernels'
 * products compiled away: a build for sm_90 must name sm_90a (the Makefile's NVARCH does) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1000 && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "rewy's wgmma kernels need sm_90a code for Hopper: build with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace rewy_cuda {

/* ---- layouts: element offsets inside a tile of core matrices ----
 * Two-byte operand X[mn][k] with KD columns of k, K-major: core (mn/8, k/8) at ((mn/8)·(KD/8) + k/8)·64
 * elements, row mn%8, element k%8. LBO = 128 B, SBO = (KD/8)·128 B. */
template <int KD> __host__ __device__ constexpr int cm_k(int mn, int k) {
    return ((mn >> 3) * (KD >> 3) + (k >> 3)) * 64 + (mn & 7) * 8 + (k & 7);
}
/* Two-byte operand X[mn][k] with MD values of mn, MN-major: core (k/8, mn/8) at ((k/8)·(MD/8) + mn/8)·64,
 * row k%8, element mn%8. LBO = (MD/8)·128 B, SBO = 128 B. The K-major tile cm_k<KD> read with m and k
 * exchanged is exactly this layout with MD = KD: one K tile in shared memory is both K (k = feature) and
 * Kᵀ (k = token). */
template <int MD> __host__ __device__ constexpr int cm_mn(int mn, int k) {
    return ((k >> 3) * (MD >> 3) + (mn >> 3)) * 64 + (k & 7) * 8 + (mn & 7);
}
/* tf32 operand X[mn][k] with KD columns of k, K-major (the only major tf32 takes): core (mn/8, k/4) at
 * ((mn/8)·(KD/4) + k/4)·32 floats. LBO = 128 B, SBO = (KD/4)·128 B. */
template <int KD> __host__ __device__ constexpr int cm_t(int mn, int k) {
    return ((mn >> 3) * (KD >> 2) + (k >> 2)) * 32 + (mn & 7) * 4 + (k & 3);
}

/* A descriptor is 64 bits: the start address / 16 (bits 0–13), LBO / 16 (16–29), SBO / 16 (32–45), no swizzle.
 * The products below take its low word for a tile's start (wg_lo: one register per tile) and add the step's
 * offset and the high word as immediates inside the asm: descriptors formed in C++ were hoisted out of the
 * chunk loop by the compiler, two registers each, dozens of them (188–255 registers, spills at 128). */
template <int LBO> __device__ __forceinline__ uint32_t wg_lo(const void *p) {
    return (((uint32_t)__cvta_generic_to_shared(p) & 0x3FFFF) >> 4) | ((uint32_t)(LBO >> 4) << 16);
}

/* for (i = 0; i < N; i++) f(integral_constant<i>): compile-time step offsets for the products */
template <int I, int N, class F> __device__ __forceinline__ void static_for(F &&f) {
    if constexpr (I < N) {
        f(std::integral_constant<int, I>{});
        static_for<I + 1, N>(f);
    }
}

/* Shared-memory writes by ordinary stores become visible to wgmma (the async proxy) only after this fence,
 * then the block barrier. */
__device__ __forceinline__ void wg_proxy_fence() {
#if REWY_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* wg_arrive before a product group (orders the accumulator registers' earlier writes), wg_commit after it,
 * wg_wait() until this warpgroup's products are complete (registers and shared operands free). */
__device__ __forceinline__ void wg_arrive() {
#if REWY_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if REWY_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait() {
#if REWY_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

/* A warp-specialized block's register split (every thread of the warpgroup executes it): a warpgroup that only issues
 * copies gives registers back, the math warpgroups take them; the block's total must stay within the register file */
template <int N> __device__ __forceinline__ void wg_setmaxnreg_dec() {
#if REWY_WGMMA
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void wg_setmaxnreg_inc() {
#if REWY_WGMMA
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
/* the accumulator element e of this thread: row and column (layout above) */
__device__ __forceinline__ int wg_row(int e) { return 16 * ((threadIdx.x >> 5) & 3) + ((threadIdx.x & 31) >> 2) + ((e & 2) ? 8 : 0); }
__device__ __forceinline__ int wg_col(int e) { return 8 * (e >> 2) + 2 * (threadIdx.x & 3) + (e & 1); }

/* A descriptor's high word from the SBO a product's template names: the SBO in bytes, plus WG_SW128 for a tile in the
 * 128-byte swizzle of tensor copies (tma.cuh; the layout type 1 in bits 62–63) */
constexpr int WG_SW128 = 1 << 24;
constexpr int wg_desc_hi(int sbo) { return ((sbo & 0xFFFFF) >> 4) | (sbo & WG_SW128 ? 1 << 30 : 0); }

/* D[64][N] (+)= A · B, one k step: k16 for two-byte types (TA, TB: the transpose bits, 1 = MN-major), k8 for
 * tf32 (both K-major). alo, blo: wg_lo of the operand tiles; AOFF, BOFF: this step's start offset in bytes
 * from them; ASBO, BSBO: the tiles' SBO in bytes (| WG_SW128: swizzled). acc = 0 overwrites D. N ∈ {16, 32, 64}. */
#define REWY_WG_D8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define REWY_WG_D16 REWY_WG_D8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define REWY_WG_D32 REWY_WG_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
    "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define REWY_WG_R8 "%0,%1,%2,%3,%4,%5,%6,%7"
#define REWY_WG_R16 REWY_WG_R8 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define REWY_WG_R32 REWY_WG_R16 ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
/* the descriptors from the operands after the D registers: alo, blo, acc, AOFF/16, ASBO/16, BOFF/16, BSBO/16 */
#define REWY_WG_DESC(A0, A1, A2, A3, A4, A5, A6)                                                                   \
    "{\n.reg .pred p;\n.reg .b32 la, lb, ha, hb;\n.reg .b64 da, db;\nsetp.ne.b32 p, %" #A2 ", 0;\n"                \
    "add.s32 la, %" #A0 ", %" #A3 ";\nmov.b32 ha, %" #A4 ";\nmov.b64 da, {la, ha};\n"                               \
    "add.s32 lb, %" #A1 ", %" #A5 ";\nmov.b32 hb, %" #A6 ";\nmov.b64 db, {lb, hb};\n"
#define REWY_WG_IN "r"(alo), "r"(blo), "r"(acc), "n"(AOFF >> 4), "n"(wg_desc_hi(ASBO)), "n"(BOFF >> 4), "n"(wg_desc_hi(BSBO))
#define REWY_WG_2B(N, ty, DREGS, RLIST, A0, A1, A2, A3, A4, A5, A6, A7, A8)                                        \
    asm volatile(REWY_WG_DESC(A0, A1, A2, A3, A4, A5, A6)                                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." ty "." ty " {" RLIST "}, da, db, p, 1, 1, %" #A7 \
                 ", %" #A8 ";\n}\n"                                                                                \
                 : DREGS : REWY_WG_IN, "n"(TA), "n"(TB))
#define REWY_WG_TF(N, DREGS, RLIST, A0, A1, A2, A3, A4, A5, A6)                                                    \
    asm volatile(REWY_WG_DESC(A0, A1, A2, A3, A4, A5, A6)                                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" RLIST "}, da, db, p, 1, 1;\n}\n"      \
                 : DREGS : REWY_WG_IN)

template <class T, int N, int TA, int TB, int AOFF, int ASBO, int BOFF, int BSBO>
__device__ __forceinline__ void wg_mma(float (&d)[N / 2], uint32_t alo, uint32_t blo, int acc) {
#if REWY_WGMMA
    static_assert(N == 16 || N == 32 || N == 64, "wg_mma: N of 16, 32 or 64");
    constexpr bool BF = std::is_same<T, __nv_bfloat16>::value;
    static_assert(BF || std::is_same<T, __half>::value, "wg_mma: bf16 or f16 operands");
    if constexpr (BF) {
        if constexpr (N == 16) REWY_WG_2B(16, "bf16", REWY_WG_D8, REWY_WG_R8, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        else if constexpr (N == 32) REWY_WG_2B(32, "bf16", REWY_WG_D16, REWY_WG_R16, 16, 17, 18, 19, 20, 21, 22, 23, 24);
        else REWY_WG_2B(64, "bf16", REWY_WG_D32, REWY_WG_R32, 32, 33, 34, 35, 36, 37, 38, 39, 40);
    } else {
        if constexpr (N == 16) REWY_WG_2B(16, "f16", REWY_WG_D8, REWY_WG_R8, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        else if constexpr (N == 32) REWY_WG_2B(32, "f16", REWY_WG_D16, REWY_WG_R16, 16, 17, 18, 19, 20, 21, 22, 23, 24);
        else REWY_WG_2B(64, "f16", REWY_WG_D32, REWY_WG_R32, 32, 33, 34, 35, 36, 37, 38, 39, 40);
    }
#else
    (void)d, (void)alo, (void)blo, (void)acc;
#endif
}
template <int N, int AOFF, int ASBO, int BOFF, int BSBO>
__device__ __forceinline__ void wg_mma_tf32(float (&d)[N / 2], uint32_t alo, uint32_t blo, int acc) {
#if REWY_WGMMA
    static_assert(N == 16 || N == 32 || N == 64, "wg_mma_tf32: N of 16, 32 or 64");
    if constexpr (N == 16) REWY_WG_TF(16, REWY_WG_D8, REWY_WG_R8, 8, 9, 10, 11, 12, 13, 14);
    else if constexpr (N == 32) REWY_WG_TF(32, REWY_WG_D16, REWY_WG_R16, 16, 17, 18, 19, 20, 21, 22);
    else REWY_WG_TF(64, REWY_WG_D32, REWY_WG_R32, 32, 33, 34, 35, 36, 37, 38);
#else
    (void)d, (void)alo, (void)blo, (void)acc;
#endif
}

/* Whether kern's loaded binary carries the wgmma code: SASS for sm_90 compiled from a ≥ 9.0 virtual
 * architecture (the Makefile's sm_90a). On an A100, or from a JIT of sm_80 PTX, it does not. */
template <auto kern> inline bool wg_kernel_ok() {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, kern) != cudaSuccess) return false;
    return a.binaryVersion >= 90 && a.binaryVersion < 100 && a.ptxVersion >= 90;
}

/* A warpgroup's ROWS × BVT tile, held in shared memory as the MN-major bf16 operand cm_mn<BVT>(column, row),
 * to rows [0, nrows) of a row-major matrix dst of V columns, at column v0: one 16-byte core row (a row, 8
 * columns) per store. The scans store S_c / S̄⁺ (rows: features) and R / P (rows: tokens) this way from the
 * copies their products read, instead of from the registers (two columns per store: half-used sectors, and
 * 64-bit addresses that spilled at 128 registers; forward scan at (8,2048,32): 0.52 → 0.39 ms). */
template <int ROWS, int BVT>
__device__ __forceinline__ void wg_store_rows(state_t *dst, const __nv_bfloat16 *src, int nrows, int V, int v0) {
    static_assert(sizeof(state_t) == 2, "the wgmma scans store bf16 chunk states and R, P");
#pragma unroll 1
    for (int m = 0; m < ROWS * BVT / 8 / 128; m++) {
        const int qq = (threadIdx.x & 127) + 128 * m, core = qq >> 3;
        const int r = core / (BVT / 8) * 8 + (qq & 7), c8 = core % (BVT / 8) * 8;
        if (r < nrows && v0 + c8 < V)
            *reinterpret_cast<uint4 *>(dst + (size_t)r * V + v0 + c8) = *reinterpret_cast<const uint4 *>(src + 8 * qq);
    }
}

/* Calls go(KPC, BVT, NWG) (integral constants) with the wgmma scans' tiles: K padded to 64 or 128, the
 * value tile of scan_bv, and NWG = 2 warpgroups per block (one per 64 columns, sharing the (sequence, head)'s
 * K-side tiles: four chains per SM) at 64 columns where V is a multiple of 128 (plan_scan_wg2, common.cuh:
 * make_plan's Plan::scan_wg2); force.scan_wg2 = 0 keeps one warpgroup per block. */
template <class Go> inline cudaError_t with_wg_tiles(const Prob &p, Go go) {
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    const int bv = scan_bv(p);
    const bool two = p.plan.scan_wg2;
    auto with_bv = [&](auto kp) {
        if (bv == 16) return go(kp, std::integral_constant<int, 16>{}, I1{});
        if (bv == 32) return go(kp, std::integral_constant<int, 32>{}, I1{});
        if (two) return go(kp, std::integral_constant<int, 64>{}, I2{});
        return go(kp, std::integral_constant<int, 64>{}, I1{});
    };
    return p.Kp == 64 ? with_bv(std::integral_constant<int, 64>{}) : with_bv(std::integral_constant<int, 128>{});
}

} // namespace rewy_cuda
#endif
