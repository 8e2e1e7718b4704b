/* kkt_inverse.cu: per chunk and value head (MATH §2, scalar gate):
 *   G   = chunk-local cumsum of g (gate_cumsum, fused here; fp32, natural log)
 *   L   = 𝓛_<(E Yᵀ),  L_ij = β_i (k_i·k_j) e^{G_i − G_j}     (tensor cores, tf32)
 *   A   = (I + L)⁻¹  by forward substitution, fp32 (stored in fp32, or in bf16 where Prob::a16: the saved A's format)
 *   C_q = 𝓛_≤(Q_g Yᵀ), (C_q)_ij = (scale q_i·k_j) e^{G_i − G_j}
 *   W = A E, U = A Z (bf16, kkt_wu) where the forward asks (WuOut: the fused-output scan's two-product chain)
 * Grid (NC, HV), 256 threads. Outputs A and C_q (cq_t, bf16) are [chunk][hv][BT][BT] (zero outside the valid rows);
 * GB [chunk][hv][2][BT] holds G (rows ≥ n repeat G_{n-1}) and β as fp32 (0 on rows ≥ n) for the later stages.
 * kkt_inverse_kernel is the general path (fp32 inputs, other chunk sizes and K); kkt_fast_kernel below is the
 * 2-byte, chunk-64, Kp ∈ {64, 128, 256} path. */
#include "kernels.cuh"
#include "tri_inverse.cuh"

namespace rewy_cuda {

constexpr int KKT_THREADS = 256;

/* The chunk-local cumulative gate G_i = Σ_{j ≤ i} floor(g_j) (MATH §2; the floor of gates.h) by one warp:
 * lane l holds rows 2l and 2l + 1 (rows ≥ n add 0, so they repeat G_{n−1}; DeltaNet's G is 0). Returns the
 * lane's two values. */
__device__ __forceinline__ float2 chunk_gate_cumsum(const Prob &p, const float *g, int tok0, int n, int hv, int lane) {
    const int i0 = 2 * lane;
    float a = 0.f, b = 0.f;
    if (p.gated) {
        if (i0 < n) a = rewy_gate_floor(g[(size_t)(tok0 + i0) * p.HV + hv]);
        if (i0 + 1 < n) b = rewy_gate_floor(g[(size_t)(tok0 + i0 + 1) * p.HV + hv]);
    }
    float s = a + b;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float u = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) s += u;
    }
    const float ex = s - (a + b);
    return make_float2(ex + a, ex + a + b);
}

template <class T>
__global__ void __launch_bounds__(KKT_THREADS)
kkt_inverse_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, float *GB, float *Aout, cq_t *Cq) {
    extern __shared__ float sm[];
    const ChunkInfo ci = p.ctab[blockIdx.x];
    const int n = ci.n;
    if (n == 0) return;
    const int hv = blockIdx.y, h = hv / p.G, ldk = p.Kp + 8, BT = p.BT;
    const bool needA = Aout != nullptr;
    T *Ks = reinterpret_cast<T *>(sm);                      /* [BT][Kp+8] input type */
    T *Qs = Ks + MAXBT * ldk;
    float *Ls = reinterpret_cast<float *>(Qs + (Cq ? MAXBT * ldk : 0));
    float *As = Ls + MAXBT * LDN;
    float *Gs = As + MAXBT * LDN;
    float *bs = Gs + MAXBT;

    const size_t rs = (size_t)p.H * p.K;
    copy_tile<T>(Ks, ldk, BT, p.Kp, k + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
    if (Cq) copy_tile<T>(Qs, ldk, BT, p.Kp, q + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
    cp_async_wait();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, i0 = 2 * lane;
        const float2 G2 = chunk_gate_cumsum(p, g, ci.tok0, n, hv, lane);
        Gs[i0] = G2.x;
        Gs[i0 + 1] = G2.y;
    }
    for (int i = threadIdx.x; i < MAXBT; i += blockDim.x)
        bs[i] = i < n ? ld<T>(beta + (size_t)(ci.tok0 + i) * p.HV + hv) : 0.f;
    __syncthreads();
    if (GB) {
        float *dst = GB + ((size_t)blockIdx.x * p.HV + hv) * 2 * BT;
        for (int i = threadIdx.x; i < BT; i += blockDim.x) {
            dst[i] = Gs[i];
            dst[BT + i] = bs[i];
        }
    }

    const size_t nn = (size_t)BT * BT, base = ((size_t)blockIdx.x * p.HV + hv) * nn;
    if (Cq) {
        cq_t *dst = Cq + base;
        bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Qs, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
            st<cq_t>(dst + i * BT + j, (i < n && j <= i) ? p.scale * c * gexp(p, Gs[i] - Gs[j]) : 0.f);
        });
    }
    if (!needA) return;
    bgemm<KKT_THREADS / 32>(BT, BT, p.Kp, Ks, ldk, 1, Ks, 1, ldk, [&](int i, int j, float c) {
        Ls[i * LDN + j] = (i < n && j < i) ? bs[i] * c * gexp(p, Gs[i] - Gs[j]) : 0.f;
    });
    for (int e = threadIdx.x; e < BT * BT; e += blockDim.x) {
        const int i = e / BT, j = e - i * BT;
        As[i * LDN + j] = (i == j && i < n) ? 1.f : 0.f;
    }
    __syncthreads();
    tri_inverse_rows(Ls, As, n); /* forward substitution (tri_inverse.cuh) */
    float4 *dst = reinterpret_cast<float4 *>(Aout + base);
    for (int e = threadIdx.x; e < BT * BT / 4; e += blockDim.x) {
        const int i = e / (BT / 4), j = (e - i * (BT / 4)) * 4;
        dst[e] = *reinterpret_cast<const float4 *>(As + i * LDN + j);
    }
}


/* ==== The fast path: 2-byte inputs, chunk 64, Kp = KS ∈ {64, 128, 256} ====
 * Same outputs as kkt_inverse_kernel. K and Q are staged once (row-major, k contiguous: both operands
 * of K Kᵀ and Q Kᵀ load with one 32-bit shared load per pair, conflict-free at KS+8). The lower
 * triangles of L and C_q are 2 × 4 warp strips of 16 rows (tri_piece: 4 to 6 column blocks of 8, one per warp),
 * accumulated in registers over the whole K (pf_mma, bf16/fp16 exact in tf32, fp32 accumulation); the masks, β_i and
 * e^{G_i − G_j} are applied per fragment element (the exponent is ≤ 0 on the kept elements, so −1000
 * resets stay finite; the rest are selected away). C_q goes from the fragments straight to global
 * memory (bf16 pairs), its upper zeros by 16-B stores. L stays in registers over one barrier and
 * then goes over the dead K/Q tiles; A = (I + L)⁻¹ by blocks (tri_inverse.cuh: five barriers instead
 * of 63), fp32 throughout. Shared memory: max(K and Q tiles, two 64×68 fp32 tiles) + G, β. */
constexpr int LDA16 = MAXBT + 8; /* the saved bf16 A's tile in shared memory (WA): 36 words a row, conflict-free pairs */
template <int KS, class T, int VS = 0, bool WA = false>
__host__ __device__ constexpr int kkt_fast_region() {
    /* VS > 0 (W, U): K survives the inverse, so L goes over Q alone and A after it, then V [64][VS+8];
     * WA (W from the saved A, bf16: Prob::a16): K, Q, then A [64][LDA16] (and V with VS > 0: U too, for the register
     * chains) */
    return WA ? 2 * MAXBT * (KS + 8) * (int)sizeof(T) + MAXBT * LDA16 * 2 + (VS > 0 ? MAXBT * (VS + 8) * (int)sizeof(T) : 0)
           : VS > 0 ? MAXBT * (KS + 8) * (int)sizeof(T) + 2 * MAXBT * LDN * 4 + MAXBT * (VS + 8) * (int)sizeof(T)
           : 2 * MAXBT * (KS + 8) * (int)sizeof(T) > 2 * MAXBT * LDN * 4 ? 2 * MAXBT * (KS + 8) * (int)sizeof(T)
                                                                       : 2 * MAXBT * LDN * 4;
}

/* the block's shared memory: the region and the G, β table after it */
template <int KS, class T, int VS = 0, bool WA = false> constexpr size_t kkt_fast_smem() {
    return kkt_fast_region<KS, T, VS, WA>() + 2 * MAXBT * sizeof(float);
}

/* W = A diag(βγ) K and U = A diag(β) V (MATH §2: W = A E, U = A Z for scalar gates, γ_j = e^{G_j}) from the
 * finished inverse, rounded to bf16 as FLA's recompute_w_u rounds them. Warp w: rows 16·(w % 4) of both,
 * columns from (w / 4)·KS/2 of W and (w / 4)·VS/2 of U. A is lower triangular by 16-row blocks, so row block
 * bi needs only k blocks 0…bi: diagonal blocks in As, the ones below in Ls (tri_inverse64's layout, as
 * tri_store_A reads it). A's fragments come from fp32 with the column scale applied before rounding; K and V
 * enter as they were loaded ([token][feature]: the k = token operand through ldmatrix.trans). The results
 * are staged over K and V and leave as 16-B rows. VS = 0: W alone (from a dense A: Ls = As). AT, LDT: A's element type
 * and row stride (fp32 at LDN from the inverse; the saved bf16 A at LDA16, WA). H200, DeltaNet (2,16384,8): kkt
 * 0.085 → 0.215 ms with both products' accumulators live (97 registers, two blocks per SM); one at a time: PERF.md
 * session 12. */
template <int KS, int VS, class AT = float, int LDT = LDN>
__device__ __forceinline__ void kkt_wu(const Prob &p, __nv_bfloat16 *Ks, __nv_bfloat16 *Vs, const AT *Ls,
                                       const AT *As, const float *Gs, const float *bs, int n, __nv_bfloat16 *W,
                                       __nv_bfloat16 *U) {
    constexpr int LDK = KS + 8, LDV = VS + 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int bi = warp & 3, i0 = 16 * bi;
    const int m = lane >> 3, boff = (lane & 7) + (m & 1) * 8; /* ldmatrix.trans rows of B (k = token) */
    auto pack = [](float x, float y) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        return *reinterpret_cast<const uint32_t *>(&h);
    };
    /* this warp's 16 × N/2 block of A diag(β ⊙ γ^GAM) B (B = K: GAM, W; B = V: U), staged over B itself
     * once every warp has read it (one accumulator set live at a time: three blocks per SM) */
    auto product = [&](auto nc, auto gam, __nv_bfloat16 *B, int ldb) {
        constexpr int N = decltype(nc)::value, NS = N / 16;
        const int j0 = (warp >> 2) * (N / 2);
        float acc[NS][4] = {};
        for (int bj = 0; bj <= bi; bj++) {
            const AT *Ab = bj == bi ? As : Ls;
            const int k0 = 16 * bj;
            uint32_t f[4];
#pragma unroll
            for (int q = 0; q < 4; q++) { /* a fragment: rows g (q even), g + 8 (q odd); k 2t, 2t+1 (+8 for q ≥ 2) */
                const int i = i0 + g + (q & 1) * 8, j = k0 + 2 * t + (q >> 1) * 8;
                float2 a = make_float2(0.f, 0.f);
                if (i < n) {
                    if constexpr (std::is_same<AT, float>::value) a = *reinterpret_cast<const float2 *>(Ab + i * LDT + j);
                    else a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(Ab + i * LDT + j));
                }
                float s0 = bs[j], s1 = bs[j + 1];
                if (decltype(gam)::value) {
                    s0 *= gexp(p, Gs[j]);
                    s1 *= gexp(p, Gs[j + 1]);
                }
                f[q] = pack(a.x * s0, a.y * s1);
            }
#pragma unroll
            for (int s = 0; s < NS; s += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, B + (k0 + boff) * ldb + j0 + 8 * s + (m >> 1) * 8);
                mma_bf16(acc[s], f, b[0], b[1]);
                mma_bf16(acc[s + 1], f, b[2], b[3]);
            }
        }
        __syncthreads(); /* every warp is done reading B */
#pragma unroll
        for (int s = 0; s < NS; s++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                *reinterpret_cast<uint32_t *>(B + (i0 + g + 8 * h) * ldb + j0 + 8 * s + 2 * t) = pack(acc[s][2 * h], acc[s][2 * h + 1]);
    };
    /* the staged [64][N] tile out as 16-B rows */
    auto store = [&](auto nc, const __nv_bfloat16 *S, int lds, __nv_bfloat16 *dst) {
        constexpr int N = decltype(nc)::value;
        for (int e = threadIdx.x; e < MAXBT * N / 8; e += blockDim.x) {
            const int i = e / (N / 8), j = (e % (N / 8)) * 8;
            reinterpret_cast<uint4 *>(dst)[e] = *reinterpret_cast<const uint4 *>(S + i * lds + j);
        }
    };
    product(std::integral_constant<int, KS>{}, std::true_type{}, Ks, LDK);      /* W = A diag(βγ) K */
    if constexpr (VS > 0) product(std::integral_constant<int, VS>{}, std::false_type{}, Vs, LDV); /* U = A diag(β) V */
    else __syncthreads(); /* (with U, its first barrier ends W's staging) */
    store(std::integral_constant<int, KS>{}, Ks, LDK, W);
    if constexpr (VS > 0) {
        __syncthreads();
        store(std::integral_constant<int, VS>{}, Vs, LDV, U);
    }
}

/* chunk c of value head hv */
template <class T, int KS, int VS, bool WA>
__device__ __forceinline__ void kkt_fast_chunk(const Prob &p, const T *q, const T *k, const float *g, const T *beta,
                                               float *GB, float *Aout, cq_t *Cq, const T *v, const WuOut &wu, int c,
                                               int hv) {
    extern __shared__ __align__(16) char smc[];
    constexpr int LDK = KS + 8;
    constexpr int REG = kkt_fast_region<KS, T, VS, WA>();
    constexpr bool WU = VS > 0 && !WA; /* also W and U (kkt_wu) from the inverse; A is then always asked */
    static_assert(!WA || std::is_same<T, __nv_bfloat16>::value, "W is for the bf16 reverse scan");
    static_assert(!WU || std::is_same<T, __nv_bfloat16>::value, "W, U are for the bf16 fused-output scan");
    static_assert(KKT_THREADS == 256, "tri_inverse64 and the tile split assume 8 warps");
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n;
    if (n == 0) return;
    const int h = hv / p.G, tid = threadIdx.x;
    const bool needA = Aout != nullptr;
    T *Ks = reinterpret_cast<T *>(smc);  /* [64][KS+8] */
    T *Qs = Ks + MAXBT * LDK;            /* [64][KS+8] */
    /* over Ks/Qs once the products are done; with W, U over Qs only (K is read again), then V's tile */
    float *Ls = reinterpret_cast<float *>(WU ? smc + MAXBT * LDK * sizeof(T) : smc), *As = Ls + MAXBT * LDN;
    __nv_bfloat16 *Ad = reinterpret_cast<__nv_bfloat16 *>(Qs + MAXBT * LDK); /* WA: the saved bf16 A, [64][LDA16] */
    T *Vs = WA ? reinterpret_cast<T *>(Ad + MAXBT * LDA16) : reinterpret_cast<T *>(As + MAXBT * LDN);
    float *Gs = reinterpret_cast<float *>(smc + REG), *bs = Gs + MAXBT;

    /* G, β and A by chunk; C_q, W, U by workspace slot (the backward's window) */
    const size_t rs = (size_t)p.H * p.K, ch = (size_t)c * p.HV + hv, cw = (size_t)chunk_slot(p, c, ci) * p.HV + hv;
    if (needA || Cq || WA) { /* compile-time tiles: the index arithmetic once per tile, not per 16-B vector */
        copy_tile_k<T, MAXBT, KS, KKT_THREADS>(Ks, LDK, MAXBT, KS, k + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
        if (Cq)
            copy_tile_k<T, MAXBT, KS, KKT_THREADS>(Qs, LDK, MAXBT, KS, q + ((size_t)ci.tok0 * p.H + h) * p.K, rs, n, 0, p.K);
        if (VS > 0)
            copy_tile_k<T, MAXBT, VS, KKT_THREADS>(Vs, VS + 8, MAXBT, VS, v + ((size_t)ci.tok0 * p.HV + hv) * p.V,
                                                   (size_t)p.HV * p.V, n, 0, p.V);
        if (WA)
            copy_tile_k<__nv_bfloat16, MAXBT, MAXBT, KKT_THREADS>(Ad, LDA16, MAXBT, MAXBT, a16_of(wu.A) + ch * MAXBT * MAXBT,
                                                                  MAXBT, MAXBT, 0, MAXBT);
    }
    /* G: chunk_gate_cumsum (rows ≥ n repeat G_{n-1}); β (0 on rows ≥ n); GB directly */
    float *gbd = GB ? GB + ch * 2 * MAXBT : nullptr;
    if (tid < 32) {
        const int lane = tid, i0 = 2 * lane;
        const float2 G2 = chunk_gate_cumsum(p, g, ci.tok0, n, hv, lane);
        Gs[i0] = G2.x;
        Gs[i0 + 1] = G2.y;
        if (gbd) {
            gbd[i0] = G2.x;
            gbd[i0 + 1] = G2.y;
        }
    } else if (tid >= 64 && tid < 64 + MAXBT) {
        const int i = tid - 64;
        const float bv = i < n ? ld<T>(beta + (size_t)(ci.tok0 + i) * p.HV + hv) : 0.f;
        bs[i] = bv;
        if (gbd) gbd[MAXBT + i] = bv;
    }
    if (!needA && !Cq && !WA) return;
    cp_async_wait();
    __syncthreads();

    /* L = 𝓛_<(β K Kᵀ ⊙ Γ) and C_q = 𝓛_≤(scale Q Kᵀ ⊙ Γ) by row strips (tri_piece): warps 0–3 the four strips of L,
     * 4–7 those of C_q (A NULL: warps 0–3 C_q) */
    const int warp = tid >> 5;
    /* without C_q (the forward chain forms it) all eight warps take L: warps 0–3 the strips' first pieces, 4–7 their
     * second ones (the critical path 4 column blocks instead of 6) */
    const bool split = needA && !Cq;
    const bool isL = needA && (split || warp < 4), isC = Cq && (needA ? warp >= 4 : warp < 4);
    cq_t *cqd = Cq ? Cq + cw * MAXBT * MAXBT : nullptr;
    float acc0[4][4] = {}, acc1[4][4] = {}; /* the strip's two pieces (4 and 0 or 2 column blocks) */
    const int slot = warp & 3;
    const TriPiece p0 = tri_piece(slot, 0), p1 = tri_piece(slot, 1);
    /* the masks, β_i (L) or the scale (C_q) and the decay e^{G_i − G_j} of each element, then C_q out */
    auto finish = [&](auto nb, float (&acc)[4][4], const TriPiece &pc) {
        constexpr int NB = decltype(nb)::value;
        pf_each<NB>(16 * pc.rt, pc.j0, acc, [&](int i, int j, int s, int e) {
            const bool keep = i < n && (isL ? j < i : j <= i);
            acc[s][e] = keep ? (isL ? bs[i] : p.scale) * acc[s][e] * gexp(p, Gs[i] - Gs[j]) : 0.f;
        });
        if (isC) tri_put_strip<NB>(cqd, 16 * pc.rt, pc.j0, acc, MAXBT);
    };
    /* f(blocks, accumulators, piece) for both pieces of this warp's strip */
    auto each_piece = [&](auto f) {
        if (!split || warp < 4) f(std::integral_constant<int, 4>{}, acc0, p0);
        if (p1.nb && (!split || warp >= 4)) f(std::integral_constant<int, 2>{}, acc1, p1);
    };
    if (isL || isC) {
        const T *Lop = isL ? Ks : Qs; /* the strip's left operand: K (L) or Q (C_q); the right one is K */
        each_piece([&](auto nb, float (&acc)[4][4], const TriPiece &pc) {
            pf_mma<decltype(nb)::value, true, true>(acc, KS, Lop, LDK, 1, Ks, 1, LDK, 16 * pc.rt, pc.j0);
        });
        each_piece(finish);
    }
    if (Cq) tri_store_upper_zeros(cqd);
    if constexpr (WA) { /* the backward: W (and U) from the saved A (K is intact: no L was formed) */
        kkt_wu<KS, VS, __nv_bfloat16, LDA16>(p, Ks, Vs, Ad, Ad, Gs, bs, n, wu.W + cw * MAXBT * KS,
                                             VS > 0 ? wu.U + cw * MAXBT * VS : nullptr);
        return;
    }
    if (!needA) return;
    __syncthreads(); /* every read of Ks/Qs is done: L goes over them */
    if (isL)
        each_piece([&](auto nb, float (&acc)[4][4], const TriPiece &pc) {
            tri_put_strip<decltype(nb)::value>(Ls, 16 * pc.rt, pc.j0, acc, LDN);
        });
    __syncthreads();
    tri_inverse64(Ls, As, n);
    /* the saved A's format: fp32, or bf16 (Prob::a16), which the forward chains' A-and-V form reads */
    if (p.a16) tri_store_A(nullptr, Ls, As, n, reinterpret_cast<__nv_bfloat16 *>(Aout) + ch * MAXBT * MAXBT);
    else tri_store_A(Aout + ch * MAXBT * MAXBT, Ls, As, n);
    if constexpr (WU)
        kkt_wu<KS, VS>(p, Ks, Vs, Ls, As, Gs, bs, n, wu.W + cw * MAXBT * KS, wu.U + cw * MAXBT * VS);
}

/* Grid (NC, HV): one chunk per block. With wu.ready (W, U; the scan runs beside, state_scan_beside_kkt): one
 * block per SM walks the chunks in the order the scans consume them, and flags each one when it is stored.
 * Blocks an SM: W, U take 70 KB of shared memory, three; otherwise four (64 registers, no spills; session 42, H100,
 * with L's eight warps above: GDN's forward kkt at (8,2048,32) 227 → 189 µs, the forward 3–7 % faster on the large
 * grids; five spilled) */
template <class T, int KS, int VS = 0, bool WA = false>
__global__ void __launch_bounds__(KKT_THREADS, VS > 0 ? 3 : 4)
kkt_fast_kernel(Prob p, const T *q, const T *k, const float *g, const T *beta, float *GB, float *Aout, cq_t *Cq,
                const T *v, WuOut wu) {
    if (VS == 0 || !wu.ready) {
        const int c = slot_chunk(p, blockIdx.x); /* the grid: chunk_slots */
        if (c >= 0) kkt_fast_chunk<T, KS, VS, WA>(p, q, k, g, beta, GB, Aout, Cq, v, wu, c, blockIdx.y);
        return;
    }
    pdl_launch_dependents(); /* every block is resident: the scan may start */
    const int per_rank = p.N * p.HV;
    for (int t = blockIdx.x; t < p.NC * p.HV; t += gridDim.x) {
        /* uniform sequences: rank j of every sequence before rank j + 1; else chunk-major */
        int c, hv;
        if (wu.seq_nc > 0) {
            const int j = t / per_rank, r = t - j * per_rank;
            c = (r / p.HV) * wu.seq_nc + j;
            hv = r % p.HV;
        } else {
            c = t / p.HV;
            hv = t % p.HV;
        }
        kkt_fast_chunk<T, KS, VS, WA>(p, q, k, g, beta, GB, Aout, Cq, v, wu, c, hv);
        __syncthreads(); /* every thread's stores are issued, and the shared memory is free for the next chunk */
        if (threadIdx.x == 0) set_ready(wu.ready + (size_t)c * p.HV + hv);
    }
}

template <class T>
static cudaError_t run(const Prob &p, const void *q, const void *k, const float *g, const void *beta, float *GB,
                       float *A, cq_t *Cq, const void *v, const WuOut &wu, cudaStream_t s) {
    if constexpr (sizeof(T) == 2) {
        if (fast_kp<T>(p)) {
            auto go = [&](auto ks, auto vs, auto wa) -> cudaError_t {
                constexpr int KS = decltype(ks)::value, VS = decltype(vs)::value;
                constexpr bool WA = decltype(wa)::value;
                constexpr size_t sm = kkt_fast_smem<KS, T, VS, WA>();
                cudaError_t e = ensure_smem<kkt_fast_kernel<T, KS, VS, WA>>(sm);
                if (e != cudaSuccess) return e;
                dim3 grid(chunk_slots(p), p.HV);
                if (wu.ready) { /* the plan's beside_kkt: one block per SM, room for a scan block beside each */
                    e = prefer_shared((const void *)kkt_fast_kernel<T, KS, VS, WA>);
                    if (e != cudaSuccess) return e;
                    const long tasks = (long)p.NC * p.HV, sms = p.plan.sms;
                    grid = dim3((unsigned)(sms < tasks ? sms : tasks));
                }
                kkt_fast_kernel<T, KS, VS, WA><<<grid, KKT_THREADS, sm, s>>>(
                    p, (const T *)q, (const T *)k, g, (const T *)beta, GB, A, Cq, (const T *)v, wu);
                return cudaGetLastError();
            };
            using I0 = std::integral_constant<int, 0>;
            using NO = std::false_type;
            if constexpr (std::is_same<T, __nv_bfloat16>::value) {
                using I64 = std::integral_constant<int, 64>;
                using I128 = std::integral_constant<int, 128>;
                auto with_u = [&](auto wa) { /* W and U: K and V of 64 or 128 */
                    if (p.Kp == 64) return p.V == 64 ? go(I64{}, I64{}, wa) : go(I64{}, I128{}, wa);
                    return p.V == 64 ? go(I128{}, I64{}, wa) : go(I128{}, I128{}, wa);
                };
                if (wu.W && wu.A) { /* from the saved A: W alone (bwd_scan_uses_w), or W and U (chain_scan_bvc) */
                    if (A || (wu.U && !v) || !p.a16) return cudaErrorInvalidValue; /* (the saved A is bf16 on this path) */
                    if (wu.U) return with_u(std::true_type{});
                    return p.Kp == 64 ? go(I64{}, I0{}, std::true_type{}) : go(I128{}, I0{}, std::true_type{});
                }
                if (wu.W) { /* state_scan_uses_wu: with U, A asked */
                    if (!A || !v || !wu.U) return cudaErrorInvalidValue;
                    return with_u(NO{});
                }
            }
            auto go0 = [&](auto ks) { return go(ks, I0{}, NO{}); };
            if (p.Kp == 64) return go0(std::integral_constant<int, 64>{});
            if (p.Kp == 128) return go0(std::integral_constant<int, 128>{});
            return go0(std::integral_constant<int, 256>{});
        }
    }
    if (p.win_len) return cudaErrorInvalidValue; /* a window's backward takes the fast path only (plan_windows) */
    if (p.a16) return cudaErrorInvalidValue;      /* the bf16 saved A is the fast path's (Layout::a16 says where) */
    const int ldk = p.Kp + 8;
    const size_t smem = sizeof(T) * (size_t)MAXBT * ldk * (Cq ? 2 : 1) + sizeof(float) * (2 * MAXBT * LDN + 2 * MAXBT);
    auto kern = kkt_inverse_kernel<T>;
    cudaError_t e = ensure_smem<kkt_inverse_kernel<T>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV);
    kern<<<grid, KKT_THREADS, smem, s>>>(p, (const T *)q, (const T *)k, g, (const T *)beta, GB, A, Cq);
    return cudaGetLastError();
}

size_t kkt_beside_smem(const Prob &p) {
    using T = __nv_bfloat16;
    if (p.Kp == 64) return p.V == 64 ? kkt_fast_smem<64, T, 64>() : kkt_fast_smem<64, T, 128>();
    return p.V == 64 ? kkt_fast_smem<128, T, 64>() : kkt_fast_smem<128, T, 128>();
}

cudaError_t launch_kkt_inverse(const Prob &p, rewy_dtype dt, const void *q, const void *k, const float *g,
                               const void *beta, float *GB, float *A, cq_t *Cq, cudaStream_t s, const void *v,
                               const WuOut &wu) {
    if (wu.W && (!w_shape_ok(dt, p.BT, p.K, p.Kp) || (wu.U && !u_shape_ok(p.V)))) return cudaErrorInvalidValue;
    if (wu.ready && !wu.U) return cudaErrorInvalidValue; /* the flags are the forward's, with W and U */
    return with_dtype(dt, [&](auto t) { return run<decltype(t)>(p, q, k, g, beta, GB, A, Cq, v, wu, s); });
}

} // namespace rewy_cuda
