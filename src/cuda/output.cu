/* output.cu: the chunk output (MATH §2), fully parallel over chunks once the scan has stored
 * every chunk's incoming state S_c and its corrections R:
 *   O = Q_g S_c + C_q R          Q_g = scale·q⊙γ
 * Scalar gates form Q_g from q and the per-row γ_i = e^{G_i} (GB table); vector gates (vo != NULL)
 * read the precomputed q⊙γ of vec_factors.cu. Keeping this out of the sequential scan leaves the
 * scan two products per chunk on its critical path instead of four.
 *
 * Two kernels, side by side (the launcher chooses):
 *  - output_fast_kernel: 2-byte inputs, chunk 64, K ≤ 128, V % 8 == 0, where its shared memory fits.
 *    One block per (chunk, value head) over all of V; O stays in registers (see below).
 *  - output_kernel: everything else. One block per (chunk, value head, 64 columns of V). */
#include "kernels.cuh"

namespace rewy_cuda {

constexpr int OUT_THREADS = 256;
constexpr int OUT_NW = OUT_THREADS / 32;
constexpr int OBV = 64;       /* V columns per block */
constexpr int OLD = OBV + 4;  /* fp32 [64][OLD] tiles */
constexpr int OLDS = OBV + 8; /* state_t [Kp][OLDS] tile */

template <class T, bool VEC>
__global__ void __launch_bounds__(OUT_THREADS)
output_kernel(Prob p, const T *q, const float *GB, const cq_t *Cq, const state_t *Sc, const rp_t *R,
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
    copy_tile_to(Cs, LDA, BT, BT, Cq + ch * BT * BT, BT, BT, 0, BT);
    copy_tile_to(Rs, OLD, BT, OBV, R + ch * BT * p.V, p.V, n, v0, p.V);
    if (!VEC) copy_tile<float>(Gs, 2 * BT, 1, 2 * BT, GB + ch * 2 * BT, 2 * BT, 1, 0, 2 * BT);
    cp_async_wait();
    __syncthreads();
    /* Q_g S_c (scale and, for scalar gates, γ_i in the epilogue) */
    bgemm<OUT_NW>(BT, OBV, Kp, Qs, ldq, 1, Ss, OLDS, 1, [&](int i, int j, float cc) {
        Os[i * OLD + j] = (VEC ? p.scale : p.scale * gexp(p, Gs[i])) * cc;
    });
    /* + C_q R: same (M, N) as the product above, so each thread adds to the elements it wrote */
    T *dst = o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V + v0;
    bgemm<OUT_NW>(BT, OBV, BT, Cs, LDA, 1, Rs, OLD, 1, [&](int i, int j, float cc) {
        if (i < n && v0 + j < p.V) st<T>(dst + (size_t)i * rsv + j, Os[i * OLD + j] + cc);
    });
}

/* ==== The fast path: 2-byte inputs, chunk 64, K ≤ 128 (KS = 64 or 128), V a multiple of 8 ====
 * One block of 8 warps per (chunk, value head). Q_g ([64][KS], input type) and C_q ([64][64] cq_t)
 * are loaded once; S_c ([KS][64] state_t) and R ([64][64] rp_t) come in 64-column V slabs,
 * double-buffered (slab s+1 is copied with cp.async while slab s is computed). Per slab, warp w
 * owns the 16×32 tile of O at rows 16(w%4)…, columns 32(w/4)… and accumulates it in registers:
 *   acc = C_q R                                   (pf_mma)
 *   acc += diag(scale·γ_i) (Q S_c)                (pf_mma_rows; vector gates: Q = Q_g, diag(scale))
 * then stores o (input type) straight from the fragments, rows < n and columns < V only.
 * Operands: A = Q (k = feature contiguous), C_q (k = token contiguous); B = S_c stored [K][V] and
 * R stored [token][V], k strided: with bf16 inputs every operand is bf16 and both products run on
 * bf_mma (ldmatrix.trans reads the strided B tiles); otherwise tf32 with ld_pair's two loads per k pair. */
constexpr int OF_THREADS = 256;
constexpr int OF_NW = OF_THREADS / 32;
constexpr int OF_BV = 64;                /* V slab */
constexpr int OF_NS = OF_BV / 2 / 8;     /* 8-column blocks per warp: 4 row tiles × 2 column halves */
/* S_c and R slabs [KS or 64][..]: 72 16-bit (banks 8t + g/2) or 68 fp32 (banks 8t + g) */
constexpr int OF_LDS = sizeof(state_t) == 4 ? OF_BV + 4 : OF_BV + 8;
constexpr int OF_LDR = sizeof(rp_t) == 4 ? OF_BV + 4 : OF_BV + 8;
static_assert(OF_NW == 8 && OF_NS == 4, "warp tiling of the 64×64 slab: 4 row tiles × 2 column halves");

/* byte offsets of the fast output kernel's shared memory (every tile row a multiple of 16 B) */
struct OfLayout {
    int Qs, Cs, Ss, Rs, buf, total; /* Ss, Rs: slab buffer 0; buffer 1 at + buf */
};
__host__ __device__ inline OfLayout of_layout(int KS) {
    OfLayout L = {};
    int o = 0;
    L.Qs = o; o += MAXBT * (KS + 8) * 2;           /* Q_g or q [64][KS+8], 2-byte */
    L.Cs = o; o += MAXBT * LDA * (int)sizeof(cq_t); /* C_q [64][72] cq_t */
    L.Ss = o; o += KS * OF_LDS * (int)sizeof(state_t);  /* S_c slab [KS][OF_LDS] state_t */
    L.Rs = o; o += MAXBT * OF_LDR * (int)sizeof(rp_t); /* R slab [64][OF_LDR] rp_t */
    L.buf = o - L.Ss;
    o += L.buf;                                         /* the second slab buffer */
    L.total = o;
    return L;
}

template <class T, bool VEC, int KS>
__global__ void __launch_bounds__(OF_THREADS)
output_fast_kernel(Prob p, const T *q, const float *GB, const cq_t *Cq, const state_t *Sc, const rp_t *R,
                   const T *Qg, T *o) {
    static_assert(sizeof(T) == 2 && (KS == 64 || KS == 128), "fast output: 2-byte inputs, KS = 64 or 128");
    extern __shared__ __align__(16) char smc[];
    constexpr int LDQ = KS + 8; /* 2-byte elements: (KS+8)/2 ≡ 4 words mod 32, A pair loads on banks 4g + t */
    const OfLayout L = of_layout(KS);
    const int c = blockIdx.x, hv = blockIdx.y, h = hv / p.G, warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const ChunkInfo ci = p.ctab[c];
    const int n = ci.n;
    if (n == 0) return; /* block-uniform, before any barrier */
    const size_t ch = (size_t)c * p.HV + hv, rsv = (size_t)p.HV * p.V;
    T *Qs = reinterpret_cast<T *>(smc + L.Qs);
    cq_t *Cs = reinterpret_cast<cq_t *>(smc + L.Cs);
    const state_t *Scc = Sc + ch * p.K * p.V;
    const rp_t *Rc = R + ch * MAXBT * p.V;

    /* S_c rows [0, K) (rows K..KS zero), R rows [0, n) (rows ≥ n zero), columns [v0, v0+64) ∩ [0, V) */
    auto load_slab = [&](int v0, int b) {
        copy_tile<state_t>(reinterpret_cast<state_t *>(smc + L.Ss + b * L.buf), OF_LDS, KS, OF_BV, Scc, p.V, p.K, v0, p.V);
        copy_tile<rp_t>(reinterpret_cast<rp_t *>(smc + L.Rs + b * L.buf), OF_LDR, MAXBT, OF_BV, Rc, p.V, n, v0, p.V);
        cp_async_commit();
    };
    /* group 0: Q (rows ≥ n and features ≥ K zero; Q_g is zero there already), C_q, slab 0 */
    if (VEC)
        copy_tile<T>(Qs, LDQ, MAXBT, KS, Qg + ch * MAXBT * p.Kp, p.Kp, MAXBT, 0, p.Kp);
    else
        copy_tile<T>(Qs, LDQ, MAXBT, KS, q + ((size_t)ci.tok0 * p.H + h) * p.K, (size_t)p.H * p.K, n, 0, p.K);
    copy_tile<cq_t>(Cs, LDA, MAXBT, MAXBT, Cq + ch * MAXBT * MAXBT, MAXBT, MAXBT, 0, MAXBT);
    load_slab(0, 0);

    const int i0 = (warp & 3) * 16, j0 = (warp >> 2) * (OF_BV / 2);
    /* row scalings of Q S_c for this lane's rows i0+g (slots 0, 1) and i0+g+8 (slots 2, 3) */
    float s_lo = p.scale, s_hi = p.scale;
    if (!VEC) {
        const float *Gc = GB + ch * 2 * MAXBT; /* [2][64]: G (rows ≥ n repeat G_{n-1}), β */
        s_lo *= gexp(p, __ldg(Gc + i0 + g));
        s_hi *= gexp(p, __ldg(Gc + i0 + g + 8));
    }
    /* paired stores: element offsets of (i, j), (i, j+1) with v0 + j even are even when V is */
    const bool pair = (reinterpret_cast<uintptr_t>(o) & 3) == 0 && (p.V & 1) == 0;
    typedef typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type T2;
    T *ob = o + (size_t)ci.tok0 * rsv + (size_t)hv * p.V;

    const int nslab = ceil_div(p.V, OF_BV);
    for (int sl = 0; sl < nslab; sl++) {
        const int v0 = sl * OF_BV, b = sl & 1;
        if (sl + 1 < nslab) { /* buffer b^1 was last read in iteration sl-1, before its closing barrier */
            load_slab(v0 + OF_BV, b ^ 1);
            cp_async_wait_group<1>();
        } else {
            cp_async_wait_group<0>();
        }
        __syncthreads();
        const state_t *Ss = reinterpret_cast<const state_t *>(smc + L.Ss + b * L.buf);
        const rp_t *Rs = reinterpret_cast<const rp_t *>(smc + L.Rs + b * L.buf);
        float acc[4][4] = {};
        /* C_q R: A(i, k) = Cs[i*LDA + k], B(k, j) = Rs[k*OF_LDR + j] */
        pf_mma<OF_NS, true, false>(acc, MAXBT, Cs, LDA, 1, Rs, OF_LDR, 1, i0, j0);
        /* + diag(s) Q S_c: A(i, k) = Qs[i*LDQ + k], B(k, j) = Ss[k*OF_LDS + j] (bf16 inputs and chunk states:
         * a bf16 product, see try_bf_mma) */
        pf_mma_rows<OF_NS, true, false>(acc, s_lo, s_hi, KS, Qs, LDQ, 1, Ss, OF_LDS, 1, i0, j0);
        pf_each<OF_NS>(i0, j0, acc, [&](int i, int j, int s, int e) {
            if ((e & 1) || i >= n || v0 + j >= p.V) return; /* slot pairs (e, e+1) = columns (j, j+1) */
            T *d = ob + (size_t)i * rsv + v0 + j;
            if (pair) { /* V even, v0 + j even < V: v0 + j + 1 < V */
                T2 x;
                st<T>(reinterpret_cast<T *>(&x), acc[s][e]);
                st<T>(reinterpret_cast<T *>(&x) + 1, acc[s][e + 1]);
                *reinterpret_cast<T2 *>(d) = x;
            } else {
                st<T>(d, acc[s][e]);
                if (v0 + j + 1 < p.V) st<T>(d + 1, acc[s][e + 1]);
            }
        });
        if (sl + 2 < nslab) __syncthreads(); /* the next iteration refills buffer b */
    }
}

template <class T, bool VEC>
static cudaError_t run(const Prob &p, const void *q, const float *GB, const cq_t *Cq, const state_t *Sc,
                       const rp_t *R, const void *Qg, void *o, cudaStream_t s) {
    using QT = typename std::conditional<VEC, factor_t<T>, T>::type;
    if constexpr (sizeof(T) == 2) {
        /* the fast path (see output_fast_kernel) where its tiles apply and its shared memory fits */
        if (p.BT == MAXBT && p.K <= 128 && p.V % 8 == 0 &&
            (size_t)of_layout(p.K <= 64 ? 64 : 128).total <= p.plan.smem_optin) {
            auto go = [&](auto ks) {
                constexpr int KS = decltype(ks)::value;
                const size_t sm = of_layout(KS).total;
                cudaError_t e = ensure_smem<output_fast_kernel<T, VEC, KS>>(sm);
                if (e != cudaSuccess) return e;
                output_fast_kernel<T, VEC, KS><<<dim3(p.NC, p.HV), OF_THREADS, sm, s>>>(
                    p, (const T *)q, GB, Cq, Sc, R, (const T *)Qg, (T *)o);
                return cudaGetLastError();
            };
            if (p.K <= 64) return go(std::integral_constant<int, 64>{});
            return go(std::integral_constant<int, 128>{});
        }
    }
    const size_t smem = sizeof(float) * ((size_t)MAXBT * LDA + 2 * (size_t)MAXBT * OLD + 2 * MAXBT) +
                        sizeof(QT) * (size_t)MAXBT * scan_ldk<QT>(p.Kp) + sizeof(state_t) * (size_t)p.Kp * OLDS;
    cudaError_t e = ensure_smem<output_kernel<T, VEC>>(smem);
    if (e != cudaSuccess) return e;
    dim3 grid(p.NC, p.HV, ceil_div(p.V, OBV));
    output_kernel<T, VEC><<<grid, OUT_THREADS, smem, s>>>(p, (const T *)q, GB, Cq, Sc, R, (const factor_t<T> *)Qg,
                                                          (T *)o);
    return cudaGetLastError();
}

cudaError_t launch_output(const Prob &p, rewy_dtype dt, const void *q, const float *GB, const cq_t *Cq,
                          const state_t *Sc, const rp_t *R, const VecOps *vo, void *o, cudaStream_t s) {
    return with_dtype(dt, [&](auto t) {
        using T = decltype(t);
        return vo ? run<T, true>(p, q, GB, Cq, Sc, R, vo->Qg, o, s) : run<T, false>(p, q, GB, Cq, Sc, R, nullptr, o, s);
    });
}

} // namespace rewy_cuda
