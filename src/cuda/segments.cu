/* segments.cu: the small stages of policy R's sequence split (MATH §11d; Plan::seg; the stage sequence and the reason are
 * backend_common.cuh's, "Segments", and DESIGN.md's). Segment w of sequence sq is local chunks [w·win, (w+1)·win) of it
 * (windows.h: a time window), numbered x = sq·nwin + w, so that the segments' chunk offsets run on like sequences' and
 * the scans and the fused reverse pass take them as sequences of their own; a segment's states sit at (x·HV + hv)·K·V.
 *   seg_offsets  its chunk offsets (a segment past its sequence's end is empty: its walks leave their start state)
 *   seg_starts   the state each segment's recompute starts from: the caller's h0 (zero without it) for the first, else
 *                the forward's checkpoint at its first chunk (Prob::ck, written where the segment is not empty)
 *   seg_combine  §11d step 2: S̄ at each segment's end, from the last: dht (zero without it), then
 *                S̄_end(w − 1) = S̄_start(w) = Tᵀ_w S̄_end(w) + X̄_w, where X̄_w is segment w's reverse walk from zero and
 *                Tᵀ_w its walk from the identity with Ō = 0 (launch_bwd_state_scan_wg's two grids); S̄_end(w) over X̄_w,
 *                which each thread reads just before at the same places (X̄_0 is not needed) */
#include "kernels.cuh"

namespace rewy_cuda {

namespace {
constexpr int SEG_NT = 256;

__global__ void __launch_bounds__(SEG_NT) seg_offsets_kernel(Prob p, int win, int nwin, int *sco) {
    const int x = blockIdx.x * SEG_NT + threadIdx.x;
    if (x <= p.N * nwin) sco[x] = win_seg_offset(p.coff, p.N, nwin, win, x);
}

__global__ void __launch_bounds__(SEG_NT) seg_starts_kernel(Prob p, int nwin, const float *h0, const float *ck,
                                                            float *start) {
    const size_t per = (size_t)p.HV * p.K * p.V, total = (size_t)p.N * nwin * per;
    for (size_t i = (size_t)blockIdx.x * SEG_NT + threadIdx.x; i < total; i += (size_t)gridDim.x * SEG_NT) {
        const size_t x = i / per, off = x / nwin * per + i % per; /* (sq·HV + hv)·K·V + element */
        const int w = (int)(x % nwin), k0 = win_start_checkpoint(w);
        start[i] = k0 >= 0 ? ck[(size_t)k0 * p.N * per + off] : h0 ? h0[off] : 0.f;
    }
}

/* One block per (sequence, value head, 32 value columns); K = V = 128. Tᵀ whole in shared memory (rows padded to 132
 * floats: 16-B rows, and the four row groups of a warp on two banks), S̄'s columns beside it; each thread a 4 × 4
 * tile of the product, in fp32 (§10: states in fp32). */
constexpr int SK = 128, SCW = 32, SLDM = SK + 4;
constexpr size_t SEG_COMBINE_SMEM = sizeof(float) * (SK * SLDM + SK * SCW);

__global__ void __launch_bounds__(SEG_NT) seg_combine_kernel(Prob p, int nwin, const float *dht, const float *tt,
                                                             float *xe) {
    extern __shared__ __align__(16) float sm[];
    float *const Ms = sm, *const Ss = sm + SK * SLDM;
    constexpr int NVT = SK / SCW;
    const int t = threadIdx.x, sh = blockIdx.x / NVT, sq = sh / p.HV, hv = sh % p.HV, v0 = (blockIdx.x % NVT) * SCW;
    const int r0 = 4 * (t >> 3), j0 = 4 * (t & 7);
    const size_t KV = (size_t)p.K * p.V;
    /* element e of S̄'s columns in shared memory, at state offset col(e) (st_idx: either state layout) */
    auto col = [&](int e) { return st_idx(p, e / SCW, v0 + e % SCW); };
    for (int e = t; e < SK * SCW; e += SEG_NT) Ss[e] = dht ? dht[((size_t)sq * p.HV + hv) * KV + col(e)] : 0.f;
    __syncthreads();
    for (int w = nwin - 1; w >= 0; w--) {
        const size_t b = ((size_t)(sq * nwin + w) * p.HV + hv) * KV;
        float acc[4][4] = {};
        if (w > 0) { /* Tᵀ_w S̄_end(w), this thread's 4 × 4 tile */
            for (int e = t; e < SK * SK; e += SEG_NT) {
                const int kk = e / SK, m = e % SK;
                Ms[kk * SLDM + m] = tt[b + st_idx(p, kk, m)];
            }
            __syncthreads();
#pragma unroll 2
            for (int m = 0; m < SK; m += 4) {
                float4 a[4], s[4];
#pragma unroll
                for (int r = 0; r < 4; r++) a[r] = *reinterpret_cast<const float4 *>(Ms + (r0 + r) * SLDM + m);
#pragma unroll
                for (int u = 0; u < 4; u++) s[u] = *reinterpret_cast<const float4 *>(Ss + (m + u) * SCW + j0);
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float ar[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        acc[r][0] += ar[u] * s[u].x;
                        acc[r][1] += ar[u] * s[u].y;
                        acc[r][2] += ar[u] * s[u].z;
                        acc[r][3] += ar[u] * s[u].w;
                    }
                }
            }
            __syncthreads(); /* every thread is done with this S̄ and Tᵀ */
        }
        /* the tile's S̄_end(w) out over X̄_w, read first; S̄_end(w − 1) = Tᵀ_w S̄_end(w) + X̄_w in */
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const size_t at = b + st_idx(p, r0 + r, v0 + j0 + c);
                float &sv = Ss[(r0 + r) * SCW + j0 + c];
                const float x = w > 0 ? xe[at] : 0.f;
                xe[at] = sv;
                sv = acc[r][c] + x;
            }
        __syncthreads();
    }
}
} // namespace

cudaError_t launch_seg_offsets(const Prob &p, int win, int nwin, int *sco, cudaStream_t s) {
    seg_offsets_kernel<<<ceil_div(p.N * nwin + 1, SEG_NT), SEG_NT, 0, s>>>(p, win, nwin, sco);
    return cudaGetLastError();
}

cudaError_t launch_seg_starts(const Prob &p, int nwin, const float *h0, const float *ck, float *start, cudaStream_t s) {
    const size_t total = (size_t)p.N * nwin * p.HV * p.K * p.V;
    const size_t blocks = (total + SEG_NT - 1) / SEG_NT;
    seg_starts_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), SEG_NT, 0, s>>>(p, nwin, h0, ck, start);
    return cudaGetLastError();
}

cudaError_t launch_seg_combine(const Prob &p, int nwin, const float *dht, const float *tt, float *xe, cudaStream_t s) {
    if (p.K != SK || p.V != SK) return cudaErrorInvalidValue;
    cudaError_t e = ensure_smem<seg_combine_kernel>(SEG_COMBINE_SMEM);
    if (e != cudaSuccess) return e;
    seg_combine_kernel<<<p.N * p.HV * (SK / SCW), SEG_NT, SEG_COMBINE_SMEM, s>>>(p, nwin, dht, tt, xe);
    return cudaGetLastError();
}

} // namespace rewy_cuda
