/* vec_intra.cu: the vector-gate intra stage (MATH §2, §6), per chunk and value head:
 *   G   = chunk-local cumsum of g, per feature (fp32, natural log)
 *   c_d = (max_i G_id + min_i G_id)/2   midpoint center per feature; α = e^{G−c}, ζ = e^{c−G}
 *   L   = 𝓛_<((b⊙k⊙α)(k⊙ζ)ᵀ),   A = (I + L)⁻¹ (forward substitution, fp32)
 *   C_q = 𝓛_≤((Q⊙α)(k⊙ζ)ᵀ),     Q = scale·q
 * The centered products run on the tensor cores over 32-feature slabs, accumulated in fp32 in
 * shared memory. When max_d (max_i G_id − min_i G_id)/2 > VEC_CENTER_LIMIT the chunk cannot take one
 * center: vec_intra_fast_kernel then takes the blocked factors of MATH §6 (16-token blocks, decay between
 * blocks split at block ends, every factor ≤ 1 for log gates ≤ 0; src/cpu/chunk_common.c's INTRA_BLOCKED,
 * same rules and limit), still on the tensor cores; vec_intra_kernel (the general path) takes the exact
 * pairwise path L_ij = Σ_d b_id k_id k_jd e^{G_id − G_jd} (i > j: exponent ≤ 0 for log gates ≤ 0).
 * Either way −1000 resets stay finite.
 * Grid (NC, HV), 256 threads. Outputs zero outside the valid rows, like kkt_inverse.cu.
 * vec_intra_kernel is the general path (fp32 inputs, other chunk sizes and K); vec_intra_fast_kernel
 * below is the 2-byte, chunk-64, Kp ∈ {64, 128} path. */
#include "vec_kernels.cuh"
#include "tri_inverse.cuh"

namespace rewy_cuda {

constexpr int VI_THREADS = 256;
constexpr int VI_NW = VI_THREADS / 32;

template <class T>
__global__ void __launch_bounds__(VI_THREADS)
vec_intra_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, const T *b, float *Gout,
                 float *Aout, cq_t *Cq) {
    extern __shared__ __align__(16) float sm[];
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    if (n == 0) return;
    const int hv = blockIdx.y, h = hv / p.G, BT = p.BT, Kp = p.Kp, tid = threadIdx.x;
    const bool needA = Aout != nullptr;
    float *Gs = sm;                       /* [64][Kp] G */
    float *mid = Gs + MAXBT * Kp;         /* [Kp] center */
    float *red = mid + Kp;                /* [32] */
    float *Xa = red + 32;                 /* [64][VLDK] b⊙k⊙α */
    float *Kz = Xa + MAXBT * VLDK;        /* [64][VLDK] k⊙ζ */
    float *Qa = Kz + MAXBT * VLDK;        /* [64][VLDK] Q⊙α */
    float *Ls = Qa + MAXBT * VLDK;        /* [64][LDN] */
    float *As = Ls + MAXBT * LDN;         /* [64][LDN] */
    float *Cs = As + MAXBT * LDN;         /* [64][LDN] */

    const size_t tok0 = (size_t)ci.tok0;
    const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
    const size_t rsk = (size_t)p.H * p.K;

    /* per-feature cumsum of the floored gates (one thread per feature: same order as the CPU), range and
     * midpoint */
    float hmax = 0.f;
    for (int d = tid; d < Kp; d += blockDim.x) {
        float s = 0.f, lo = 0.f, hi = 0.f;
        for (int i = 0; i < BT; i++) {
            if (i < n && d < p.K) s += rewy_gate_floor(g[((tok0 + i) * p.HV + hv) * p.K + d]);
            Gs[i * Kp + d] = s;
            if (i == 0) lo = hi = s;
            else if (i < n) {
                lo = fminf(lo, s);
                hi = fmaxf(hi, s);
            }
        }
        mid[d] = 0.5f * (hi + lo);
        hmax = fmaxf(hmax, 0.5f * (hi - lo));
    }
    for (int o = 16; o > 0; o >>= 1) hmax = fmaxf(hmax, __shfl_xor_sync(0xffffffffu, hmax, o));
    if ((tid & 31) == 0) red[tid >> 5] = hmax;
    __syncthreads();
    float half_range = 0.f;
    for (int w = 0; w < VI_NW; w++) half_range = fmaxf(half_range, red[w]);
    const bool centered = vec_centered(p, half_range);
    if (Gout) {
        float *dst = Gout + ((size_t)blockIdx.x * p.HV + hv) * BT * Kp;
        for (int e = tid; e < BT * Kp; e += blockDim.x) dst[e] = Gs[e];
    }
    if (!needA && !Cq) return;

    for (int e = tid; e < MAXBT * LDN; e += blockDim.x) {
        Ls[e] = 0.f;
        Cs[e] = 0.f;
    }
    if (centered) {
        for (int k0 = 0; k0 < Kp; k0 += VKB) {
            __syncthreads();
            for (int e = tid; e < BT * VKB; e += blockDim.x) {
                const int i = e / VKB, dd = e - i * VKB, d = k0 + dd;
                float xa = 0.f, kz = 0.f, qa = 0.f;
                if (i < n && d < p.K) {
                    const float G = Gs[i * Kp + d], kv = ld<T>(kc + i * rsk + d);
                    const float a = expf(G - mid[d]);
                    kz = kv * expf(mid[d] - G);
                    if (needA) xa = vg_erase<T>(p, beta, b, tok0 + i, hv, d) * kv * a;
                    if (Cq) qa = p.scale * ld<T>(qc + i * rsk + d) * a;
                }
                Xa[i * VLDK + dd] = xa;
                Kz[i * VLDK + dd] = kz;
                Qa[i * VLDK + dd] = qa;
            }
            __syncthreads();
            /* B(k=d, j) = Kz[j][d]: k contiguous */
            if (needA)
                bgemm<VI_NW>(BT, BT, VKB, Xa, VLDK, 1, Kz, 1, VLDK, [&](int i, int j, float c) { Ls[i * LDN + j] += c; });
            if (Cq)
                bgemm<VI_NW>(BT, BT, VKB, Qa, VLDK, 1, Kz, 1, VLDK, [&](int i, int j, float c) { Cs[i * LDN + j] += c; });
        }
        __syncthreads();
    } else {
        /* exact pairwise exponents (strong decay, hard resets): every e^{G_i − G_j}, j ≤ i, is ≤ 1 */
        __syncthreads();
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            if (i >= n || j > i) continue;
            float sl = 0.f, sc = 0.f;
            for (int d = 0; d < p.K; d++) {
                const float f = expf(Gs[i * Kp + d] - Gs[j * Kp + d]) * ld<T>(kc + j * rsk + d);
                if (needA && j < i) sl += vg_erase<T>(p, beta, b, tok0 + i, hv, d) * ld<T>(kc + i * rsk + d) * f;
                if (Cq) sc += ld<T>(qc + i * rsk + d) * f;
            }
            Ls[i * LDN + j] = sl;
            Cs[i * LDN + j] = p.scale * sc;
        }
        __syncthreads();
    }
    const size_t nn = (size_t)BT * BT, base = ((size_t)blockIdx.x * p.HV + hv) * nn;
    if (Cq) {
        cq_t *dst = Cq + base;
        for (int e = tid; e < BT * BT; e += blockDim.x) {
            const int i = e / BT, j = e - i * BT;
            st<cq_t>(dst + e, (i < n && j <= i) ? Cs[i * LDN + j] : 0.f);
        }
    }
    if (!needA) return;
    for (int e = tid; e < MAXBT * MAXBT; e += blockDim.x) {
        const int i = e / MAXBT, j = e - i * MAXBT;
        if (!(i < n && j < i)) Ls[i * LDN + j] = 0.f;
        As[i * LDN + j] = (i == j && i < n) ? 1.f : 0.f;
    }
    __syncthreads();
    tri_inverse_rows(Ls, As, n); /* forward substitution (tri_inverse.cuh) */
    float *dst = Aout + base;
    for (int e = tid; e < BT * BT; e += blockDim.x) {
        const int i = e / BT, j = e - i * BT;
        dst[e] = As[i * LDN + j];
    }
}


/* ==== The fast path: 2-byte inputs, chunk 64, Kp = KS ∈ {64, 128} ====
 * Same outputs as vec_intra_kernel, and the CPU's rules (cumsum order, midpoint centers, one decision
 * per chunk: half range ≤ VEC_CENTER_LIMIT → centered products; else blocked factors, MATH §6, as
 * INTRA_BLOCKED of src/cpu/chunk_common.c; exact pairwise exponents throughout only for gates that rise
 * (g > 0) by more than the limit, as INTRA_PAIRWISE).
 *  - g arrives by cp.async into the fp32 G tile (rows ≥ n and features ≥ K zero, so rows ≥ n repeat
 *    G_{n-1} and min/max over all 64 rows equal those over the valid ones); one thread per feature
 *    scans it in place (same order as the CPU); G goes out by float4.
 *  - centered: 32-feature slabs. k, q, b of the slab are held in registers (loaded one slab ahead, the
 *    first before the scan), α = e^{G−c}, ζ = e^{c−G} formed once per element into three fp32 slab
 *    tiles (b⊙K⊙α, K⊙ζ, Q⊙α; [64][40]: k-contiguous operands, conflict-free fragment loads), and the
 *    lower triangles of L and C_q (2 × 20 warp tiles of 16×8, tri_tile) accumulate in registers over
 *    the slabs (pf_mma, tf32, fp32 accumulation) — no shared-memory read-modify-write.
 *  - strong gates (blocked): the same fragments and slab tiles, two operand sets per slab (see the blocked
 *    loop): the diagonal 16×16 blocks with their own block centers, the tiles left of them through the
 *    block ends ε. Same shared memory and 3 blocks per SM as the centered path.
 *  - pairwise exponents per fragment element (plain loops, k, q, b from global memory) only for the
 *    diagonal tiles of a block whose own half range is over the limit, and for rising gates (both rare).
 *  - C_q from the fragments straight to global memory; L over the dead tiles after one barrier;
 *    A = (I + L)⁻¹ by blocks in fp32 (tri_inverse.cuh).
 *  - fo.E not NULL: the scans' factors E = b⊙k⊙γ, F = k⊙e^{G_n−G}, Q_g = q⊙γ, λ = γ_n and the β table
 *    (vec_factors.cu's outputs, same formulas) from the same registers in the same slab pass, on both
 *    paths: vec_factors would read G, k, q, b again. */
constexpr int VIF_SL = 32;           /* feature slab */
constexpr int VIF_LDO = VIF_SL + 8;  /* slab tiles [64][40] fp32 (≡ 8 mod 32 words: conflict-free 64-bit fragment loads) */
constexpr int VIF_NB = MAXBT / 16;   /* blocks of 16 tokens (blocked path) = the row blocks of tri_tile */
constexpr int VIF_NRED = 2 + VIF_NB; /* per-warp maxima: chunk half range, rise, block half ranges */

template <int KS>
struct VifLayout {
    static constexpr int LDG = KS + 4;
    static constexpr int Gs = 0;                                /* fp32 [64][KS+4] */
    static constexpr int Xa = Gs + MAXBT * LDG * 4;             /* fp32 [64][40] each: Xa, Kz, Qa */
    static constexpr int Kz = Xa + MAXBT * VIF_LDO * 4;
    static constexpr int Qa = Kz + MAXBT * VIF_LDO * 4;
    static constexpr int mid = Qa + MAXBT * VIF_LDO * 4;        /* fp32 [KS] chunk center */
    static constexpr int midB = mid + KS * 4;                   /* fp32 [4][KS] block centers (blocked path) */
    static constexpr int brow = midB + VIF_NB * KS * 4;         /* fp32 [64] row gate β (KDA) */
    static constexpr int red = brow + MAXBT * 4;                /* fp32 [8][VIF_NRED] */
    static constexpr int total = red + 8 * VIF_NRED * 4;
    static_assert(2 * MAXBT * LDN * 4 <= mid, "Ls and As fit over the G tile and the slab tiles");
    /* the blocked path's second operand set, over the three slab tiles (floats from Xa) */
    static constexpr int Rb = 0;                                /* [96][40] K ⊙ e^{ε_{I−1} − G}, I = 1, 2, 3 */
    static constexpr int XLb = 6 * 16 * VIF_LDO;                /* [48][40] b⊙K ⊙ e^{G − ε_{I−1}}, rows 16…63 */
    static constexpr int XQb = XLb + 3 * 16 * VIF_LDO;          /* [48][40] scale·Q ⊙ e^{G − ε_{I−1}}, rows 16…63 */
    static_assert(XQb + 3 * 16 * VIF_LDO <= 3 * MAXBT * VIF_LDO, "the blocked operands fit over Xa, Kz, Qa");
};

/* 4 features (d0 … d0+3) of row `row` as bf16/fp16 bits in a uint2; zero for rows ≥ n, features ≥ K */
template <class T>
__device__ __forceinline__ uint2 vif_ld4(const T *base, size_t rs, int row, int n, int d0, int K, bool vec4) {
    uint2 r = make_uint2(0u, 0u);
    if (row < n) {
        const T *src = base + (size_t)row * rs + d0;
        if (vec4) {
            if (d0 < K) r = *reinterpret_cast<const uint2 *>(src);
        } else {
            unsigned short h[4];
#pragma unroll
            for (int e = 0; e < 4; e++) h[e] = d0 + e < K ? *reinterpret_cast<const unsigned short *>(src + e) : 0;
            r.x = h[0] | ((unsigned)h[1] << 16);
            r.y = h[2] | ((unsigned)h[3] << 16);
        }
    }
    return r;
}
template <class T>
__device__ __forceinline__ float vif_el(uint2 v, int e) {
    const unsigned w = e < 2 ? v.x : v.y;
    const unsigned short h = (unsigned short)((e & 1) ? (w >> 16) : (w & 0xffffu));
    return ld<T>(reinterpret_cast<const T *>(&h));
}

template <class T, int KS>
__global__ void __launch_bounds__(VI_THREADS, 3)
vec_intra_fast_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, const T *b, float *Gout,
                      float *Aout, cq_t *Cq, FactorOut fo) {
    extern __shared__ __align__(16) char smc[];
    using L = VifLayout<KS>;
    constexpr int LDG = L::LDG, LDO = VIF_LDO, SL = VIF_SL;
    static_assert(VI_THREADS == 256 && KS <= VI_THREADS, "8 warps; one thread per feature in the scan");
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    const int hv = blockIdx.y, h = hv / p.G, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t tok0 = (size_t)ci.tok0, ch = (size_t)blockIdx.x * p.HV + hv;
    const bool wantF = fo.E != nullptr;
    T *Eo = wantF ? static_cast<T *>(fo.E) + ch * MAXBT * KS : nullptr;
    T *Fo = wantF ? static_cast<T *>(fo.F) + ch * MAXBT * KS : nullptr;
    T *Qo = wantF ? static_cast<T *>(fo.Qg) + ch * MAXBT * KS : nullptr;
    if (wantF && tid < MAXBT) { /* the β table (G row zero; b present: β row 1), like vec_factors */
        fo.GB[ch * 2 * MAXBT + tid] = 0.f;
        fo.GB[ch * 2 * MAXBT + MAXBT + tid] = (tid < n && !b) ? ld<T>(beta + (tok0 + tid) * p.HV + hv) : 1.f;
    }
    if (n == 0) { /* an unused chunk: zero factors, as vec_factors writes them */
        if (wantF && tid < KS) fo.lam[ch * KS + tid] = 0.f;
        if (wantF)
            for (int e = tid; e < MAXBT * KS / 4; e += VI_THREADS) {
                reinterpret_cast<uint2 *>(Eo)[e] = make_uint2(0u, 0u);
                reinterpret_cast<uint2 *>(Fo)[e] = make_uint2(0u, 0u);
                reinterpret_cast<uint2 *>(Qo)[e] = make_uint2(0u, 0u);
            }
        return;
    }
    const bool needA = Aout != nullptr;
    float *Gs = reinterpret_cast<float *>(smc + L::Gs);
    float *Xa = reinterpret_cast<float *>(smc + L::Xa), *Kz = reinterpret_cast<float *>(smc + L::Kz);
    float *Qa = reinterpret_cast<float *>(smc + L::Qa), *mid = reinterpret_cast<float *>(smc + L::mid);
    float *midB = reinterpret_cast<float *>(smc + L::midB);
    float *brow = reinterpret_cast<float *>(smc + L::brow), *red = reinterpret_cast<float *>(smc + L::red);
    float *Ls = reinterpret_cast<float *>(smc), *As = Ls + MAXBT * LDN; /* after the products */

    const size_t rsk = (size_t)p.H * p.K, rsb = (size_t)p.HV * p.K;
    const T *kc = k + (tok0 * p.H + h) * p.K, *qc = q + (tok0 * p.H + h) * p.K;
    const T *bc = b ? b + (tok0 * p.HV + hv) * p.K : nullptr;
    const bool wantL = needA, wantC = Cq != nullptr;
    const bool wantQ = wantC || wantF, wantB = (wantL || wantF) && bc; /* raw q, b needed */

    copy_tile<float>(Gs, LDG, MAXBT, KS, g + (tok0 * p.HV + hv) * p.K, rsb, n, 0, p.K);
    if (tid < MAXBT) brow[tid] = (!bc && tid < n) ? ld<T>(beta + (tok0 + tid) * p.HV + hv) : 0.f;

    /* this thread's transform elements: rows ri and ri + 32, features 4·rc … 4·rc+3 of each slab */
    const int ri = tid >> 3, rc = tid & 7;
    const bool vec4 = (p.K % 4 == 0) && ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(q) |
                                          reinterpret_cast<uintptr_t>(b)) & 7) == 0;
    uint2 rk[2], rq[2], rb[2];
    auto load_raw = [&](int k0) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = ri + 32 * r, d0 = k0 + 4 * rc;
            rk[r] = vif_ld4<T>(kc, rsk, row, n, d0, p.K, vec4);
            rq[r] = wantQ ? vif_ld4<T>(qc, rsk, row, n, d0, p.K, vec4) : make_uint2(0u, 0u);
            rb[r] = wantB ? vif_ld4<T>(bc, rsb, row, n, d0, p.K, vec4) : make_uint2(0u, 0u);
        }
    };
    if (wantL || wantC || wantF) load_raw(0);
    cp_async_wait();
    __syncthreads();

    /* per-feature cumsum of the floored gates in place (rows ≥ n add 0), midpoint, half range; for the
     * blocked path also each 16-row block's midpoint and half range (rows ≥ n repeat G_{n−1}: the same
     * min/max as over the block's valid rows) and the rise (the total of positive increments of G, as
     * chunk_load: 0 for gates ≤ 0) */
    float hx[VIF_NRED] = {}; /* half range, rise, block half ranges */
    if (tid < KS) {
        const int d = tid;
        float s = 0.f, lo = 0.f, hi = 0.f, rise = 0.f;
#pragma unroll
        for (int bI = 0; bI < VIF_NB; bI++) {
            float blo = 0.f, bhi = 0.f;
#pragma unroll 8
            for (int ii = 0; ii < 16; ii++) {
                const int i = 16 * bI + ii;
                const float prev = s;
                s += rewy_gate_floor(Gs[i * LDG + d]);
                Gs[i * LDG + d] = s;
                if (i > 0) rise += fmaxf(s - prev, 0.f);
                lo = i == 0 ? s : fminf(lo, s);
                hi = i == 0 ? s : fmaxf(hi, s);
                blo = ii == 0 ? s : fminf(blo, s);
                bhi = ii == 0 ? s : fmaxf(bhi, s);
            }
            midB[bI * KS + d] = 0.5f * (bhi + blo);
            hx[2 + bI] = 0.5f * (bhi - blo);
        }
        mid[d] = 0.5f * (hi + lo);
        hx[0] = 0.5f * (hi - lo);
        hx[1] = rise;
        if (wantF) fo.lam[ch * KS + d] = d < p.K ? expf(s) : 0.f; /* s = G_{n−1}: rows ≥ n add 0 */
    }
#pragma unroll
    for (int v = 0; v < VIF_NRED; v++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) hx[v] = fmaxf(hx[v], __shfl_xor_sync(0xffffffffu, hx[v], o));
        if (lane == 0) red[warp * VIF_NRED + v] = hx[v];
    }
    __syncthreads();
    float half_range = 0.f;
#pragma unroll
    for (int w = 0; w < VI_THREADS / 32; w++) half_range = fmaxf(half_range, red[w * VIF_NRED]);
    /* one opaque integer: otherwise the compiler keeps half_range and the limit alive to re-test them
     * wherever `centered` is used, and spills them (registers bound this kernel) */
    int centered_i = vec_centered(p, half_range) ? 1 : 0;
    asm("" : "+r"(centered_i));
    const bool centered = centered_i != 0;
    /* Not centered: blocked factors (MATH §6, src/cpu/chunk_common.c's INTRA_BLOCKED) unless the gates
     * rise by more than the limit (outside MATH §1's g ≤ 0): then pairwise throughout, as INTRA_PAIRWISE.
     * The CPU's rule: rise ≤ max(limit, 0). Returns 0 (not blocked) or 16 | dpair, where bit I of dpair:
     * diagonal block I's own half range is over the limit, its tiles take pairwise exponents
     * (blocked_factors' diag_pairwise). Read again from `red` where needed (red is not overwritten):
     * registers are what bounds this kernel (80 at 3 blocks per SM). */
    auto block_mode = [&]() -> unsigned {
        float x[VIF_NRED - 1] = {};
#pragma unroll
        for (int w = 0; w < VI_THREADS / 32; w++)
#pragma unroll
            for (int v = 1; v < VIF_NRED; v++) x[v - 1] = fmaxf(x[v - 1], red[w * VIF_NRED + v]);
        if (centered || !(x[0] <= 0.f || vec_centered(p, x[0]))) return 0u;
        unsigned m = 16u;
#pragma unroll
        for (int bI = 0; bI < VIF_NB; bI++) m |= vec_centered(p, x[1 + bI]) ? 0u : 1u << bI;
        return m;
    };
    if (Gout) {
        float4 *dst = reinterpret_cast<float4 *>(Gout + ch * MAXBT * KS);
        for (int e = tid; e < MAXBT * KS / 4; e += VI_THREADS) {
            const int i = e / (KS / 4), c4 = e % (KS / 4);
            dst[e] = *reinterpret_cast<const float4 *>(Gs + i * LDG + 4 * c4);
        }
    }
    if (!wantL && !wantC && !wantF) return;
    const bool mma = centered && (wantL || wantC); /* the centered products run in the slab pass */
    const bool blk = block_mode() && (wantL || wantC); /* the blocked ones in their own slab pass */

    /* tasks w, w+8, …, w+32 of [L tiles 0..19 | C_q tiles 0..19] (A NULL: C_q tiles only) */
    const int nL = wantL ? TRI_TILES : 0, nT = nL + (wantC ? TRI_TILES : 0);
    float acc[5][4][4];
#pragma unroll
    for (int m = 0; m < 5; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[m][0][e] = 0.f;

    /* E, F, Q_g of this thread's 4 features d0… of row `row` (its raw slot r) for the scans (zero rows ≥ n,
     * features ≥ K: k, q, b load 0) */
    auto put_factors = [&](int r, int row, int d0, const float (&Gv)[4], float br) {
        const float4 N4 = *reinterpret_cast<const float4 *>(Gs + (MAXBT - 1) * LDG + d0); /* G_{n−1} */
        const float Nv[4] = {N4.x, N4.y, N4.z, N4.w};
        uint2 eo, fo_, qo;
        T *et = reinterpret_cast<T *>(&eo), *ft = reinterpret_cast<T *>(&fo_), *qt = reinterpret_cast<T *>(&qo);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const FactorEl x = factor_el(vif_el<T>(rk[r], e), bc ? vif_el<T>(rb[r], e) : br,
                                         vif_el<T>(rq[r], e), Gv[e], Nv[e]);
            st<T>(et + e, x.e);
            st<T>(ft + e, x.f);
            st<T>(qt + e, x.q);
        }
        const int o = row * KS + d0;
        *reinterpret_cast<uint2 *>(Eo + o) = eo;
        *reinterpret_cast<uint2 *>(Fo + o) = fo_;
        *reinterpret_cast<uint2 *>(Qo + o) = qo;
    };

    if (blk) {
        const unsigned dpair = block_mode() & 15u;
        /* Blocked (MATH §6, the GPU form of src/cpu/chunk_common.c's INTRA_BLOCKED): blocks I = 0…3 of 16
         * tokens, the row blocks of tri_tile; ε_J = G at row 16J + 15 (the end of block J; rows ≥ n repeat
         * G_{n−1}, so for a tail too). Per 32-feature slab, two operand sets over the same slab tiles (so the
         * shared memory and the 3 blocks per SM of the centered path stay):
         *  1. the diagonal tiles (j0 ≥ i0), with the block's own midpoint center c_I (per feature, over
         *     its 16 rows): Xa = b⊙K⊙e^{G−c_I}, Qa = scale·Q⊙e^{G−c_I}, Kz = K⊙e^{c_I−G}, each factor
         *     ≤ e^{the block's half range} ≤ e^limit; a block whose own half range is over the limit
         *     (dpair) gets zero operands and no product here: its tiles take pairwise exponents below.
         *  2. the tiles left of the diagonal blocks (j0 < i0, so I = i0/16 ≥ 1 and j0 + 7 < 16I): for row i
         *     in block I and column j < 16I, e^{G_i − G_j} = e^{G_i − ε_{I−1}} · e^{ε_{I−1} − G_j}. Both
         *     exponents are G at a later token minus G at an earlier one, sums of log gates ≤ 0: both
         *     factors lie in (0, 1] (≤ e^rise ≤ e^limit for rising gates that pass the rule above), so
         *     nothing overflows whatever the chunk's range, and a factor underflows only where the decay
         *     it is part of does.
         *       left  (one per row, rows 16…63):  XLb_i = b_i⊙k_i ⊙ e^{G_i − ε_{I−1}}   (for L)
         *                                         XQb_i = scale·q_i ⊙ e^{G_i − ε_{I−1}}  (for C_q)
         *       right (one per block row I = 1, 2, 3; rows j < 16I): Rb_I[j] = k_j ⊙ e^{ε_{I−1} − G_j}
         *     (the CPU forms the right factor as e^{ε_J − G_j} · e^{ε_{I−1} − ε_J}: the same value.)
         *     Rb_I lies at rows 8I(I−1) … 8I(I−1) + 16I − 1 of the Rb region (16 + 32 + 48 rows), then XLb,
         *     XQb (48 rows each): 192 rows of 40 floats, exactly the three slab tiles Xa, Kz, Qa.
         * Four barriers per slab instead of two; each warp has two diagonal and three other tiles.
         * This loop is separate from the centered one so that its registers do not weigh on that one. */
        float *Rb = Xa + L::Rb, *XLb = Xa + L::XLb - 16 * LDO, *XQb = Xa + L::XQb - 16 * LDO; /* XLb, XQb: row i at i */
        for (int k0 = 0; k0 < KS; k0 += SL) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = ri + 32 * r, d0 = k0 + 4 * rc, I = row >> 4;
                const float4 G4 = *reinterpret_cast<const float4 *>(Gs + row * LDG + d0);
                const float4 M4 = *reinterpret_cast<const float4 *>(midB + I * KS + d0);
                const float Gv[4] = {G4.x, G4.y, G4.z, G4.w}, Mv[4] = {M4.x, M4.y, M4.z, M4.w};
                const float br = brow[row];
                if (wantF) put_factors(r, row, d0, Gv, br);
                const bool zero = (dpair >> I) & 1u; /* a pairwise diagonal block */
                float xa[4], kz[4], qa[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = Gv[e] - Mv[e], a = expf(x), z = expf(-x);
                    const float kv = vif_el<T>(rk[r], e);
                    kz[e] = zero ? 0.f : kv * z;
                    xa[e] = zero ? 0.f : (bc ? vif_el<T>(rb[r], e) : br) * kv * a;
                    qa[e] = zero ? 0.f : p.scale * vif_el<T>(rq[r], e) * a;
                }
                const int o = row * LDO + 4 * rc;
                *reinterpret_cast<float4 *>(Kz + o) = make_float4(kz[0], kz[1], kz[2], kz[3]);
                if (wantL) *reinterpret_cast<float4 *>(Xa + o) = make_float4(xa[0], xa[1], xa[2], xa[3]);
                if (wantC) *reinterpret_cast<float4 *>(Qa + o) = make_float4(qa[0], qa[1], qa[2], qa[3]);
            }
            __syncthreads();
            tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
                if (j0 >= i0 && !((dpair >> (i0 >> 4)) & 1u))
                    pf_mma<1, true, true>(acc[m], SL, isL ? Xa : Qa, LDO, 1, Kz, 1, LDO, i0, j0);
            });
            __syncthreads();
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = ri + 32 * r, d0 = k0 + 4 * rc, I = row >> 4;
                const float4 G4 = *reinterpret_cast<const float4 *>(Gs + row * LDG + d0);
                const float Gv[4] = {G4.x, G4.y, G4.z, G4.w};
                if (I >= 1) {
                    const float4 E4 = *reinterpret_cast<const float4 *>(Gs + (16 * I - 1) * LDG + d0); /* ε_{I−1} */
                    const float Ev[4] = {E4.x, E4.y, E4.z, E4.w};
                    const float br = brow[row];
                    float xl[4], xq[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float f = expf(Gv[e] - Ev[e]);
                        xl[e] = (bc ? vif_el<T>(rb[r], e) : br) * vif_el<T>(rk[r], e) * f;
                        xq[e] = p.scale * vif_el<T>(rq[r], e) * f;
                    }
                    const int o = row * LDO + 4 * rc;
                    if (wantL) *reinterpret_cast<float4 *>(XLb + o) = make_float4(xl[0], xl[1], xl[2], xl[3]);
                    if (wantC) *reinterpret_cast<float4 *>(XQb + o) = make_float4(xq[0], xq[1], xq[2], xq[3]);
                }
#pragma unroll
                for (int J = 1; J < VIF_NB; J++) { /* the block rows below this row's block */
                    if (J <= I) continue;
                    const float4 E4 = *reinterpret_cast<const float4 *>(Gs + (16 * J - 1) * LDG + d0); /* ε_{J−1} */
                    const float Ev[4] = {E4.x, E4.y, E4.z, E4.w};
                    float kr[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) kr[e] = vif_el<T>(rk[r], e) * expf(Ev[e] - Gv[e]);
                    *reinterpret_cast<float4 *>(Rb + (8 * J * (J - 1) + row) * LDO + 4 * rc) =
                        make_float4(kr[0], kr[1], kr[2], kr[3]);
                }
            }
            if (k0 + SL < KS) load_raw(k0 + SL); /* the next slab's k, q, b, under this one's products */
            __syncthreads();
            tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
                if (j0 < i0) {
                    const int I = i0 >> 4;
                    pf_mma<1, true, true>(acc[m], SL, isL ? XLb : XQb, LDO, 1, Rb + 8 * I * (I - 1) * LDO, 1, LDO,
                                          i0, j0);
                }
            });
            __syncthreads();
        }
    } else if (mma || wantF) {
        for (int k0 = 0; k0 < KS; k0 += SL) {
            /* the slab's operands from the registers (the previous slab's products are done: barrier) */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = ri + 32 * r, d0 = k0 + 4 * rc;
                const float4 G4 = *reinterpret_cast<const float4 *>(Gs + row * LDG + d0);
                const float4 M4 = *reinterpret_cast<const float4 *>(mid + d0);
                const float Gv[4] = {G4.x, G4.y, G4.z, G4.w}, Mv[4] = {M4.x, M4.y, M4.z, M4.w};
                const float br = brow[row];
                if (wantF) put_factors(r, row, d0, Gv, br);
                if (!mma) continue;
                float xa[4], kz[4], qa[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = Gv[e] - Mv[e], a = expf(x), z = expf(-x);
                    const float kv = vif_el<T>(rk[r], e);
                    kz[e] = kv * z;
                    xa[e] = (bc ? vif_el<T>(rb[r], e) : br) * kv * a;
                    qa[e] = p.scale * vif_el<T>(rq[r], e) * a;
                }
                const int o = row * LDO + 4 * rc;
                *reinterpret_cast<float4 *>(Kz + o) = make_float4(kz[0], kz[1], kz[2], kz[3]);
                if (wantL) *reinterpret_cast<float4 *>(Xa + o) = make_float4(xa[0], xa[1], xa[2], xa[3]);
                if (wantC) *reinterpret_cast<float4 *>(Qa + o) = make_float4(qa[0], qa[1], qa[2], qa[3]);
            }
            if (k0 + SL < KS) load_raw(k0 + SL);
            if (!mma) continue;
            __syncthreads();
            tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
                pf_mma<1, true, true>(acc[m], SL, isL ? Xa : Qa, LDO, 1, Kz, 1, LDO, i0, j0);
            });
            __syncthreads();
        }
    }
    if (!wantL && !wantC) return;
    const unsigned bmode = centered ? 0u : block_mode(); /* again (see block_mode) */
    const bool blocked = bmode != 0u;
    const unsigned dpair = bmode & 15u;
    if (!centered && (!blocked || dpair)) {
        /* exact pairwise exponents: the whole chunk (gates that rise too much for the block factors), or
         * the diagonal tiles of the blocks whose own half range is over the limit (strong decay inside a
         * block). Every e^{G_i − G_j}, j ≤ i, is ≤ 1 for log gates ≤ 0. */
        tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
            if (blocked && !(j0 >= i0 && ((dpair >> (i0 >> 4)) & 1u))) return;
            pf_each<1>(i0, j0, acc[m], [&](int i, int j, int s, int e) {
                float sum = 0.f;
                if (i < n && (isL ? j < i : j <= i)) {
                    const T *ki = kc + i * rsk, *kj = kc + j * rsk, *qi = qc + i * rsk;
                    for (int d = 0; d < p.K; d++) {
                        const float f = expf(Gs[i * LDG + d] - Gs[j * LDG + d]) * ld<T>(kj + d);
                        if (isL) sum += (bc ? ld<T>(bc + i * rsb + d) : brow[i]) * ld<T>(ki + d) * f;
                        else sum += ld<T>(qi + d) * f;
                    }
                    if (!isL) sum *= p.scale;
                }
                acc[m][s][e] = sum;
            });
        });
    }

    /* masks; C_q out from the fragments, L kept for the inverse */
    cq_t *cqd = wantC ? Cq + ch * MAXBT * MAXBT : nullptr;
    tri_for_tasks(nL, nT, [&](int m, bool isL, int i0, int j0) {
        pf_each<1>(i0, j0, acc[m], [&](int i, int j, int s, int e) {
            if (!(i < n && (isL ? j < i : j <= i))) acc[m][s][e] = 0.f;
        });
        if (!isL) tri_put_tile(cqd, i0, j0, acc[m], MAXBT);
    });
    if (wantC) tri_store_upper_zeros(cqd);
    if (!wantL) return;
    __syncthreads(); /* the G tile and the slab tiles are dead: L goes over them */
    tri_finish_A(Aout + ch * MAXBT * MAXBT, Ls, As, n, nL, acc); /* L tasks are < 20: acc[0..2] */
}

static bool fast_path(const Prob &p, rewy_dtype dt) {
    return (dt == REWY_BF16 || dt == REWY_F16) && p.BT == MAXBT && (p.Kp == 64 || p.Kp == 128);
}

bool vec_intra_fuses_factors(const Prob &p, rewy_dtype dt) { return fast_path(p, dt); }

template <class T>
static cudaError_t run(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g, const void *beta,
                       const void *b, float *Gc, float *A, cq_t *Cq, const FactorOut *fo, cudaStream_t s) {
    if (fo && !fast_path(p, dt)) return cudaErrorInvalidValue; /* vec_factors' job (vec_intra_fuses_factors) */
    if constexpr (sizeof(T) == 2) {
        if (fast_path(p, dt)) {
            auto go = [&](auto ks) -> cudaError_t {
                constexpr int KS = decltype(ks)::value;
                constexpr size_t sm = VifLayout<KS>::total;
                cudaError_t e = ensure_smem<vec_intra_fast_kernel<T, KS>>(sm);
                if (e != cudaSuccess) return e;
                vec_intra_fast_kernel<T, KS><<<dim3(p.NC, p.HV), VI_THREADS, sm, s>>>(
                    p, (const T *)q, (const T *)k, g, (const T *)beta, (const T *)b, Gc, A, Cq,
                    fo ? *fo : FactorOut{});
                return cudaGetLastError();
            };
            if (p.Kp == 64) return go(std::integral_constant<int, 64>{});
            return go(std::integral_constant<int, 128>{});
        }
    }
    const size_t smem = sizeof(float) * ((size_t)MAXBT * p.Kp + p.Kp + 32 + 3 * (size_t)MAXBT * VLDK +
                                         3 * (size_t)MAXBT * LDN);
    cudaError_t e = ensure_smem<vec_intra_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    vec_intra_kernel<T><<<grid, VI_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, g, (const T *)beta,
                                                       (const T *)b, Gc, A, Cq);
    return cudaGetLastError();
}

cudaError_t launch_vec_intra(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                             const void *beta, const void *b, float *Gc, float *A, cq_t *Cq,
                             const FactorOut *fo, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, dt, q, k, g, beta, b, Gc, A, Cq, fo, s); });
}

} // namespace rewy_cuda
