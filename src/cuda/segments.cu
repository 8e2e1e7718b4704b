/* segments.cu: the small stages of policy R's sequence split (MATH §11d; Plan::seg; the stage sequence and the reason are
 * backend_common.cuh's, "Segments", and DESIGN.md's). Segment w of sequence sq is local chunks [w·win, (w+1)·win) of it
 * (windows.h: a time window), numbered x = sq·nwin + w, so that the segments' chunk offsets run on like sequences' and
 * the scans and the fused reverse pass take them as sequences of their own; a segment's states sit at (x·HV + hv)·K·V.
 *   seg_offsets  its chunk offsets (a segment past its sequence's end is empty: its walks leave their start state)
 *   seg_starts   the state each segment's recompute starts from: the caller's h0 (zero without it) for the first, else
 *                the forward's checkpoint at its first chunk (Prob::ck, written where the segment is not empty)
 *   seg_combine  §11d step 2: S̄ at each segment's end, from the last: dht (zero without it), then
 *                S̄_end(w − 1) = S̄_start(w) = Tᵀ_w S̄_end(w) + X̄_w, where X̄_w is segment w's reverse walk from zero and
 *                Tᵀ_w the transpose of the forward's map T_w (saved by its segment walks), or where the forward left none
 *                (it walked whole sequences) the backward's own walk from the identity with Ō = 0
 *                (launch_bwd_state_scan_wg's two grids); S̄_end(w) over X̄_w, which each thread reads just before at the
 *                same places (X̄_0 is not needed)
 * and the forward's (MATH §11b; Plan::fwd_seg):
 *   seg_walks    (chain_ws.cu's recompute form) step 1: each segment's end state X_w from its start (h0 for the first, else zero)
 *                and its map T_w (the walk from S = I with V = 0), those the combines read
 *   seg_combine  (FWD) step 2: S at each segment's start, from the first: h0 (zero without it), then
 *                S_start(w + 1) = T_w S_start(w) + X_w, where X_0 is the first segment's end itself; S_start(w) over
 *                X_w, and into the checkpoints (Prob::ck, the backward's segment starts) */
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

/* One block per (sequence, value head, 16 value columns); K = V = 128. The map (Tᵀ or T) whole in shared memory as it is
 * stored (rows padded to 132 floats: 16-B rows), the state's columns beside it; each thread a 2 × 4 tile of the product,
 * in fp32 (§10: states in fp32). 16 columns, not 32: the segments run where B·HV is small, so a block a 32-column tile
 * left most SMs idle (64 blocks at (1,8192,16)), and each step's product is the chain of the walk. The two directions
 * are one walk over the segments:
 *   backward (FWD false): from S̄ = dht, w = nwin − 1 … 0:  S̄_end(w) out; S̄ ← Tᵀ_w S̄ + X̄_w (w > 0)
 *   forward (FWD true):   from S = X_0, with h0 out at 0, w = 1 … nwin − 1:  S_start(w) out; S ← T_w S + X_w (w < nwin − 1)
 * s0: dht, or the forward's h0; tt: the maps (the backward's Tᵀ); xe: X̄ or X in, the states out; ck: the forward's
 * checkpoints; backward: where *tok is nonzero, the forward's maps T in t instead of tt, read transposed (Tᵀ_w is the
 * adjoint of the same map: MATH §11c).
 * The map is copied as stored (coalesced), so its shared rows are the product's rows (M_im at row i: "row form") or its
 * summed index (at row m: "k form") as the layout and the transposition say; the product reads either form with
 * conflict-free vector loads, so no transposition goes through shared memory. */
constexpr int SK = 128, SCW = 16, SLDM = SK + 4;
constexpr int SCG = SCW / 4, STR = SK * SCW / (4 * SEG_NT); /* column groups of 4; rows a thread */
static_assert(STR == 2, "the k form's loads are float2: two rows a thread");
constexpr size_t SEG_COMBINE_SMEM = sizeof(float) * (SK * SLDM + SK * SCW);

template <bool FWD>
__global__ void __launch_bounds__(SEG_NT) seg_combine_kernel(Prob p, int nwin, const float *s0, const float *tt,
                                                             const float *t_fwd, const int *tok, float *xe, float *ck) {
    extern __shared__ __align__(16) float sm[];
    float *const Ms = sm, *const Ss = sm + SK * SLDM;
    constexpr int NVT = SK / SCW;
    const int t = threadIdx.x, sh = blockIdx.x / NVT, sq = sh / p.HV, hv = sh % p.HV, v0 = (blockIdx.x % NVT) * SCW;
    const int r0 = STR * (t / SCG), j0 = 4 * (t % SCG);
    const size_t KV = (size_t)p.K * p.V, s0b = ((size_t)sq * p.HV + hv) * KV;
    auto seg = [&](int w) { return ((size_t)(sq * nwin + w) * p.HV + hv) * KV; }; /* segment w's state */
    /* element e of the state's columns in shared memory, at state offset col(e) (st_idx: either state layout) */
    auto col = [&](int e) { return st_idx(p, e / SCW, v0 + e % SCW); };
    for (int e = t; e < SK * SCW; e += SEG_NT) {
        const float x0 = s0 ? s0[s0b + col(e)] : 0.f;
        if (FWD) { /* the first segment's end (where a later segment reads it), and its start (h0) out in its place */
            float &x = xe[seg(0) + col(e)];
            if (nwin > 1) Ss[e] = x;
            x = x0;
        } else {
            Ss[e] = x0;
        }
    }
    /* the walk's steps: every one but the last applies its segment's map (bwd: w > 0; fwd: w < nwin − 1). The next map
     * (64 floats a thread) and this step's X̄_w or X_w are loaded into registers before the product, so that their
     * latency hides behind it; the map goes to shared memory once every thread is done with the one before. */
    const int steps = nwin - (FWD ? 1 : 0);
    auto wof = [&](int i) { return FWD ? 1 + i : nwin - 1 - i; };
    constexpr int NPRE = SK * SK / SEG_NT;
    float pre[NPRE];
    /* element u of a thread's share: stored row t / SK + 2u, column t % SK of the map (a coalesced copy); the stored
     * order is the product's (row form) for the state layout's own maps, swapped (k form) in the other layout or for
     * the forward's T read as Tᵀ */
    constexpr int RSTEP = SEG_NT / SK;
    const int mrow = t / SK, mcol = t % SK;
    const bool fwd_maps = !FWD && tok && *tok, kform = p.svf != fwd_maps;
    const float *const maps = fwd_maps ? t_fwd : tt;
    auto fetch = [&](int w) {
        const float *const src = maps + seg(w) + mrow * SK + mcol;
#pragma unroll
        for (int u = 0; u < NPRE; u++) pre[u] = src[u * RSTEP * SK];
    };
    auto put = [&] {
#pragma unroll
        for (int u = 0; u < NPRE; u++) Ms[(mrow + RSTEP * u) * SLDM + mcol] = pre[u];
    };
    /* acc += M S on this thread's tile: a[r][u] = M_{r0+r, m+u}, from row r0 + r (row form) or rows m + u (k form) */
    auto product = [&](auto kf, float (&acc)[STR][4]) {
#pragma unroll 2
        for (int m = 0; m < SK; m += 4) {
            float a[STR][4];
            float4 s[4];
#pragma unroll
            for (int u = 0; u < 4; u++) s[u] = *reinterpret_cast<const float4 *>(Ss + (m + u) * SCW + j0);
            if constexpr (decltype(kf)::value) {
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const float2 c = *reinterpret_cast<const float2 *>(Ms + (m + u) * SLDM + r0);
                    a[0][u] = c.x;
                    a[1][u] = c.y;
                }
            } else {
#pragma unroll
                for (int r = 0; r < STR; r++) {
                    const float4 c = *reinterpret_cast<const float4 *>(Ms + (r0 + r) * SLDM + m);
                    a[r][0] = c.x; a[r][1] = c.y; a[r][2] = c.z; a[r][3] = c.w;
                }
            }
#pragma unroll
            for (int r = 0; r < STR; r++)
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    acc[r][0] += a[r][u] * s[u].x;
                    acc[r][1] += a[r][u] * s[u].y;
                    acc[r][2] += a[r][u] * s[u].z;
                    acc[r][3] += a[r][u] * s[u].w;
                }
        }
    };
    if (steps > 1) {
        fetch(wof(0));
        put();
    }
    __syncthreads();
    for (int i = 0; i < steps; i++) {
        const int w = wof(i);
        const bool map = i + 1 < steps, next = i + 2 < steps;
        const size_t b = seg(w);
        float acc[STR][4] = {}, x[STR][4] = {};
        if (map) {
#pragma unroll
            for (int r = 0; r < STR; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) x[r][c] = xe[b + st_idx(p, r0 + r, v0 + j0 + c)];
        }
        if (next) fetch(wof(i + 1));
        if (map) { /* the map of segment w times the state, this thread's tile */
            if (kform) product(std::true_type{}, acc);
            else product(std::false_type{}, acc);
        }
        __syncthreads(); /* every thread is done with this state and map */
        /* the tile's state out over X̄_w or X_w (and the forward's checkpoint); the next state in */
        float *const cw = FWD && ck ? ck + (size_t)win_start_checkpoint(w) * p.N * p.HV * KV + s0b : nullptr;
#pragma unroll
        for (int r = 0; r < STR; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const size_t at = st_idx(p, r0 + r, v0 + j0 + c);
                float &sv = Ss[(r0 + r) * SCW + j0 + c];
                xe[b + at] = sv;
                if (cw) cw[at] = sv;
                sv = acc[r][c] + x[r][c];
            }
        if (next) put();
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

/* one block per (sequence, value head, 16 value columns), either direction */
template <bool FWD>
static cudaError_t launch_combine(const Prob &p, int nwin, const float *s0, const float *tt, const float *t,
                                  const int *tok, float *xe, float *ck, cudaStream_t s) {
    if (p.K != SK || p.V != SK) return cudaErrorInvalidValue;
    cudaError_t e = ensure_smem<seg_combine_kernel<FWD>>(SEG_COMBINE_SMEM);
    if (e != cudaSuccess) return e;
    seg_combine_kernel<FWD><<<p.N * p.HV * (SK / SCW), SEG_NT, SEG_COMBINE_SMEM, s>>>(p, nwin, s0, tt, t, tok, xe, ck);
    return cudaGetLastError();
}

cudaError_t launch_seg_combine(const Prob &p, int nwin, const float *dht, const float *tt, const float *t, const int *tok,
                               float *xe, cudaStream_t s) {
    return launch_combine<false>(p, nwin, dht, tt, t, tok, xe, nullptr, s);
}

cudaError_t launch_seg_combine_fwd(const Prob &p, int nwin, const float *h0, const float *t, float *xs, float *ck,
                                   cudaStream_t s) {
    return launch_combine<true>(p, nwin, h0, t, nullptr, nullptr, xs, ck, s);
}

} // namespace rewy_cuda
