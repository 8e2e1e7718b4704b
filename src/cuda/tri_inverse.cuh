/* tri_inverse.cuh: pieces shared by the fast intra kernels (kkt_inverse.cu, vec_intra.cu), chunk 64,
 * 256 threads:
 *
 *  - tri_tile: the 20 warp tiles of 16 rows × 8 columns that cover the lower triangle (diagonal
 *    included) of a 64×64 matrix: row tile r (rows 16r…16r+15) takes column blocks 0 … 2r+1.
 *    Everything right of them (columns ≥ 16r+16) is zero in L and C_q.
 *  - tri_inverse64: A = (I + L)⁻¹ for strictly lower L (64×64; L and A stay fp32, MATH §10) by blocks
 *    instead of 63 sequential rows:
 *      P0  the four 16×16 diagonal blocks A_bb = (I + L_bb)⁻¹: one thread per column, forward
 *          substitution in registers (no barriers; L rows are broadcast reads);
 *      P1  T = L_10 A_00,  T' = L_32 A_22;          P2  A_10 = −A_11 T,  A_32 = −A_33 T'
 *      P3  T2 = L[32:64, 0:32] A[0:32, 0:32];       P4  A[32:64, 0:32] = −A[32:64, 32:64] T2
 *    (doubling: the 32×32 diagonal halves are inverted by P0–P2, the lower-left quadrant by P3–P4).
 *    P1–P4 on the tensor cores, one 16 × 8 tile a warp, fp32 operands as tf32 hi/lo pairs (tri_mma3); T2's products
 *    that need no A_10 (L[32:64, 0:16] A_00, L[32:64, 16:32] A_11) run in P1 and P2 on the warps T and A_10 leave
 *    idle, so P3 adds only L[32:64, 16:32] A_10.
 *    Five barriers in all. Two 64×LDN fp32 buffers: Ls (L on entry) and As. On return the diagonal
 *    blocks of A lie in As and its strictly lower blocks in Ls (each L block is dead before the A block
 *    that replaces it is written); tri_store_A writes the dense 64×64 result.
 *    Rows ≥ n: L is zero there, so (I + L)⁻¹ is the identity there; the diagonal of those rows is set
 *    to 0 in P0 (A is zero outside the valid rows), which leaves the valid rows unchanged. */
#ifndef REWY_CUDA_TRI_INVERSE_CUH
#define REWY_CUDA_TRI_INVERSE_CUH

#include "common.cuh"

namespace rewy_cuda {

constexpr int TRI_TILES = 20;

/* u ∈ [0, 20) → the tile's first row i0 and first column j0 */
__device__ __forceinline__ void tri_tile(int u, int &i0, int &j0) {
    const int r = u < 2 ? 0 : (u < 6 ? 1 : (u < 12 ? 2 : 3));
    i0 = 16 * r;
    j0 = 8 * (u - r * (r + 1));
}

/* This warp's tasks of the intra kernels (256 threads): tasks warp, warp + 8, …, warp + 32 of
 * [L tiles 0..nL) | C_q tiles 0..nT−nL), each a tri_tile; calls f(m, isL, i0, j0) with the task's slot m
 * (a compile-time index once the loop is unrolled, so per-slot register arrays stay in registers). */
template <class F>
__device__ __forceinline__ void tri_for_tasks(int nL, int nT, F f) {
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < 5; m++) {
        const int task = warp + 8 * m;
        if (task < nT) {
            const bool isL = task < nL;
            int i0, j0;
            tri_tile(isL ? task : task - nL, i0, j0);
            f(m, isL, i0, j0);
        }
    }
}

/* Row strips of a 64×64 lower triangle (diagonal blocks included): row tile rt (rows 16rt…16rt+15) has 2rt + 2
 * column blocks of 8. A warp's strip loads each k step's A fragment once for all of its blocks; tri_for_tasks'
 * 16×8 tasks loaded it once per block and paid each task's setup (the fast kkt's 40 tasks: about 30 instructions
 * per mma, Nsight, session 30). Four strips cover the 20 blocks, 4 to 6 blocks each, as two pieces
 * (row tile, first column, blocks): */
struct TriPiece {
    int rt, j0, nb;
};
/* slot 0: rows 48…63, columns 0…31;  slot 1: rows 48…63, columns 32…63;
 * slot 2: rows 32…47, columns 0…31, and rows 0…15, columns 0…15;  slot 3: rows 16…31, columns 0…31, and rows
 * 32…47, columns 32…47. The first piece has 4 blocks (pf_mma<4>), the second 0 or 2 (pf_mma<2>). */
__device__ __forceinline__ TriPiece tri_piece(int slot, int k) {
    if (k == 0) return slot == 0 ? TriPiece{3, 0, 4} : slot == 1 ? TriPiece{3, 32, 4} : slot == 2 ? TriPiece{2, 0, 4} : TriPiece{1, 0, 4};
    return slot == 2 ? TriPiece{0, 0, 2} : slot == 3 ? TriPiece{2, 32, 2} : TriPiece{0, 0, 0};
}

/* one warp's 16×8 mma tile (NS = 1 fragment, pf_mma layout) → dst with row stride ld
 * (Ls: ld = LDN in shared memory; C_q: ld = 64 in global memory) */
__device__ __forceinline__ void tri_put_tile(float *dst, int i0, int j0, const float (&acc)[4][4], int ld = LDN) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    *reinterpret_cast<float2 *>(dst + (i0 + g) * ld + j0 + 2 * t) = make_float2(acc[0][0], acc[0][1]);
    *reinterpret_cast<float2 *>(dst + (i0 + g + 8) * ld + j0 + 2 * t) = make_float2(acc[0][2], acc[0][3]);
}
/* the same into a bf16 matrix (C_q as cq_t) */
__device__ __forceinline__ void tri_put_tile(__nv_bfloat16 *dst, int i0, int j0, const float (&acc)[4][4], int ld) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    *reinterpret_cast<__nv_bfloat162 *>(dst + (i0 + g) * ld + j0 + 2 * t) = __floats2bfloat162_rn(acc[0][0], acc[0][1]);
    *reinterpret_cast<__nv_bfloat162 *>(dst + (i0 + g + 8) * ld + j0 + 2 * t) = __floats2bfloat162_rn(acc[0][2], acc[0][3]);
}

/* a warp's 16 × 8·NB strip (pf_mma layout) → dst with row stride ld: tri_put_tile per column block */
template <int NB, class E>
__device__ __forceinline__ void tri_put_strip(E *dst, int i0, int j0, const float (&acc)[4][4], int ld) {
#pragma unroll
    for (int s = 0; s < NB; s++) {
        float one[4][4];
#pragma unroll
        for (int e = 0; e < 4; e++) one[0][e] = acc[s][e];
        tri_put_tile(dst, i0, j0 + 8 * s, one, ld);
    }
}

/* c += X Y on one warp's 16 × 8 tile (mma.sync m16n8k8's layouts: lane (g, t) = (lane / 4, lane % 4) holds c at rows
 * g, g + 8 and columns 2t, 2t + 1): X 16 rows × KD at x, Y KD rows × 8 at y, both row-major at stride LDN, fp32. Each
 * operand as a tf32 pair hi + lo (lo = tf32(x − hi)) and three products a step, lo·hi + hi·lo + hi·hi: about fp32's
 * accuracy (MATH §10: A stays fp32). CUDA-core FMAs (a thread's 1 × 4 slice) read four times their operands' bytes
 * from shared memory, and kkt is bound by its shared-memory pipe, the inverse's products its largest reader (session
 * 50's profile). */
template <int KD>
__device__ __forceinline__ void tri_mma3(float (&c)[4], const float *x, const float *y) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int k = 0; k < KD; k += 8) {
        const float av[4] = {x[g * LDN + k + t], x[(g + 8) * LDN + k + t], x[g * LDN + k + t + 4],
                             x[(g + 8) * LDN + k + t + 4]};
        const float bv[2] = {y[(k + t) * LDN + g], y[(k + t + 4) * LDN + g]};
        uint32_t ah[4], al[4], bh[2], bl[2];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            ah[e] = to_tf32(av[e]);
            al[e] = to_tf32(av[e] - __uint_as_float(ah[e]));
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
            bh[e] = to_tf32(bv[e]);
            bl[e] = to_tf32(bv[e] - __uint_as_float(bh[e]));
        }
        mma_tf32(c, al, bh[0], bh[1]); /* the small terms first */
        mma_tf32(c, ah, bl[0], bl[1]);
        mma_tf32(c, ah, bh[0], bh[1]);
    }
}
/* a warp's 16 × 8 tile c (tri_mma3's layout) times f to dst (row stride LDN); and c from src */
__device__ __forceinline__ void tri_put_c(float *dst, const float (&c)[4], float f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    *reinterpret_cast<float2 *>(dst + g * LDN + 2 * t) = make_float2(f * c[0], f * c[1]);
    *reinterpret_cast<float2 *>(dst + (g + 8) * LDN + 2 * t) = make_float2(f * c[2], f * c[3]);
}
__device__ __forceinline__ void tri_get_c(float (&c)[4], const float *src) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const float2 a = *reinterpret_cast<const float2 *>(src + g * LDN + 2 * t);
    const float2 b = *reinterpret_cast<const float2 *>(src + (g + 8) * LDN + 2 * t);
    c[0] = a.x;
    c[1] = a.y;
    c[2] = b.x;
    c[3] = b.y;
}

/* A = (I + L)⁻¹ (see the header). Call with blockDim.x == 256 after a barrier that completes Ls;
 * returns after a barrier. Ls needs L only at j < i of the lower blocks (what tri_tile covers). */
__device__ __forceinline__ void tri_inverse64(float *Ls, float *As, int n) {
    const int tid = threadIdx.x;
    /* P0: A_bb column jj: a_ii = δ_ii,jj − Σ_{m<ii} L_im a_m (a_m = 0 for m < jj) */
    if (tid < 64) {
        const int o = (tid >> 4) * 16, jj = tid & 15;
        const float dg = (o + jj < n) ? 1.f : 0.f;
        float a[16];
#pragma unroll
        for (int ii = 0; ii < 16; ii++) {
            const float *lr = Ls + (o + ii) * LDN + o;
            float l[16];
#pragma unroll
            for (int m = 0; m < ii; m += 4) {
                const float4 v = *reinterpret_cast<const float4 *>(lr + m);
                l[m] = v.x;
                l[m + 1] = v.y;
                l[m + 2] = v.z;
                l[m + 3] = v.w;
            }
            float s = 0.f;
#pragma unroll
            for (int m = 0; m < ii; m++) s = fmaf(l[m], a[m], s);
            a[ii] = ii == jj ? dg : (ii < jj ? 0.f : -s);
            As[(o + ii) * LDN + o + jj] = a[ii];
        }
    }
    __syncthreads();
    /* P1–P4 on the tensor cores, one 16 × 8 tile a warp (tri_mma3) */
    const int w = tid >> 5;
    /* P1: warps 0–3: T = L_{b+1,b} A_bb into As block (b+1, b), b = 0, 2 (its 8-column half w & 1; the A block is
     *     written in P2, into Ls); warps 4–7: the part of T2 = L[32:64, 0:32] A[0:32, 0:32] (P3) that needs A_00 alone,
     *     L[32:64, 0:16] A_00, into As rows 32…63, columns 0…15 (free: As holds the diagonal blocks and T) */
    if (w < 4) {
        const int o = 32 * (w >> 1), j = o + 8 * (w & 1);
        float c[4] = {};
        tri_mma3<16>(c, Ls + (o + 16) * LDN + o, As + o * LDN + j);
        tri_put_c(As + (o + 16) * LDN + j, c, 1.f);
    } else {
        const int i = 32 + 16 * ((w - 4) >> 1), j = 8 * (w & 1);
        float c[4] = {};
        tri_mma3<16>(c, Ls + i * LDN, As + j);
        tri_put_c(As + i * LDN + j, c, 1.f);
    }
    __syncthreads();
    /* P2: warps 0–3: A_{b+1,b} = −A_{b+1,b+1} T into Ls block (b+1, b) (L_{b+1,b} is dead); warps 4–7: T2's columns
     *     16…31, L[32:64, 16:32] A_11 (whole: A[0:16, 16:32] is zero) */
    if (w < 4) {
        const int o = 32 * (w >> 1), j = o + 8 * (w & 1);
        float c[4] = {};
        tri_mma3<16>(c, As + (o + 16) * LDN + o + 16, As + (o + 16) * LDN + j);
        tri_put_c(Ls + (o + 16) * LDN + j, c, -1.f);
    } else {
        const int i = 32 + 16 * ((w - 4) >> 1), j = 16 + 8 * (w & 1);
        float c[4] = {};
        tri_mma3<16>(c, Ls + i * LDN + 16, As + 16 * LDN + j);
        tri_put_c(As + i * LDN + j, c, 1.f);
    }
    __syncthreads();
    /* P3: T2's columns 0…15 += L[32:64, 16:32] A_10 (A_10 from P2, in Ls), warps 0–3; T2 is then whole in As rows
     * 32…63, columns 0…31 */
    if (w < 4) {
        const int i = 32 + 16 * (w >> 1), j = 8 * (w & 1);
        float c[4];
        tri_get_c(c, As + i * LDN + j);
        tri_mma3<16>(c, Ls + i * LDN + 16, Ls + 16 * LDN + j);
        tri_put_c(As + i * LDN + j, c, 1.f);
    }
    __syncthreads();
    /* P4: A[32:64, 0:32] = −A[32:64, 32:64] T2 into Ls (L[32:64, 0:32] is dead), A[32:64, 32:64] = [A_22 0; A_32 A_33]
     * (A_22, A_33 in As, A_32 in Ls); warps 0–3 rows 32…47, 4–7 rows 48…63, 8 columns each */
    {
        const int j = 8 * (w & 3);
        float c[4] = {};
        if (w < 4) {
            tri_mma3<16>(c, As + 32 * LDN + 32, As + 32 * LDN + j); /* A_22 · T2[0:16] */
        } else {
            tri_mma3<16>(c, Ls + 48 * LDN + 32, As + 32 * LDN + j); /* A_32 · T2[0:16] */
            tri_mma3<16>(c, As + 48 * LDN + 48, As + 48 * LDN + j); /* A_33 · T2[16:32] */
        }
        tri_put_c(Ls + (32 + 16 * (w >> 2)) * LDN + j, c, -1.f);
    }
    __syncthreads();
}

/* the dense A ([64][64] fp32, 16-B aligned; where dst is given) from tri_inverse64's result: zero above the diagonal
 * blocks and on rows ≥ n; and from the same reads, where dst_bf is given, a bf16 copy (the forward chain's A-and-V
 * form reads A as a bf16 operand; four elements per 8-B store; the saved A of the scalar gates' bf16 path, Prob::a16,
 * is that copy alone) */
__device__ __forceinline__ void tri_store_A(float *dst, const float *Ls, const float *As, int n,
                                            __nv_bfloat16 *dst_bf = nullptr) {
    for (int e = threadIdx.x; e < MAXBT * MAXBT / 4; e += blockDim.x) {
        const int i = e >> 4, j = (e & 15) << 2, bi = i >> 4, bj = j >> 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < n && bi >= bj) v = *reinterpret_cast<const float4 *>((bi == bj ? As : Ls) + i * LDN + j);
        if (dst) reinterpret_cast<float4 *>(dst)[e] = v;
        if (dst_bf) {
            const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
            reinterpret_cast<uint2 *>(dst_bf)[e] =
                make_uint2(*reinterpret_cast<const uint32_t *>(&a), *reinterpret_cast<const uint32_t *>(&b));
        }
    }
}

/* The common end of both intra kernels: the L tiles each warp holds (tasks warp, warp + 8, warp + 16 of
 * the nL tri_tile tasks, in accL[0..2]) into Ls, then A = (I+L)⁻¹ into dst. Call after a barrier that
 * frees Ls; returns after tri_store_A. */
template <int M>
__device__ __forceinline__ void tri_finish_A(float *dst, float *Ls, float *As, int n, int nL,
                                             const float (&accL)[M][4][4]) {
    static_assert(M >= 3, "up to three L tasks per warp");
    tri_for_tasks(nL, nL, [&](int m, bool, int i0, int j0) {
        if (m < 3) tri_put_tile(Ls, i0, j0, accL[m < 3 ? m : 0]); /* L tasks are < 20: m ≤ 2 */
    });
    __syncthreads();
    tri_inverse64(Ls, As, n);
    tri_store_A(dst, Ls, As, n);
}

/* zeros of a [64][64] lower-triangular output right of the tri_tile tiles (columns ≥ 16r + 16) */
template <class E> __device__ __forceinline__ void tri_store_upper_zeros(E *dst) {
    constexpr int EPV = 16 / sizeof(E); /* elements per 16-B store */
    for (int e = threadIdx.x; e < MAXBT * MAXBT / EPV; e += blockDim.x) {
        const int i = e / (MAXBT / EPV), j = (e % (MAXBT / EPV)) * EPV;
        if (j >= (i & ~15) + 16) reinterpret_cast<uint4 *>(dst)[e] = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* The general intra kernels' A = (I + L)⁻¹ (any chunk size, n ≤ 64 valid rows; 256 threads, four per
 * column): Ls holds L strictly lower (LDN), As the identity on rows < n. Forward substitution one row
 * at a time, A_ij = −L_ij − Σ_{j<m<i} L_im A_mj; the fast kernels use tri_inverse64's blocks instead. */
__device__ __forceinline__ void tri_inverse_rows(const float *Ls, float *As, int n) {
    const int j = threadIdx.x >> 2, part = threadIdx.x & 3;
    for (int i = 1; i < n; i++) {
        float s = 0.f;
        if (j < i)
            for (int m = j + 1 + part; m < i; m += 4) s += Ls[i * LDN + m] * As[m * LDN + j];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (part == 0 && j < i) As[i * LDN + j] = -Ls[i * LDN + j] - s;
        __syncthreads();
    }
}

} // namespace rewy_cuda

#endif
