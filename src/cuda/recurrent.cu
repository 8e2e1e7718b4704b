/* recurrent.cu: the plain fp32 token recurrence (MATH §1) and its exact reverse mode, the path the plan takes for
 * K < 16 (recurrent.cuh says why and how; recurrent_step.h holds the per-column arithmetic).
 *
 * One block per (sequence, value head): gridDim = (N, HV); one thread per value column j, blockDim = V rounded up
 * to a warp. KMAX sizes the per-thread arrays: 16 for the plan's K < 16 (registers, loops unrolled); 256 for the
 * tests' forced runs at any K (rewy_test_force::recurrent; loops rolled, arrays in local memory). */
#include "recurrent.cuh"

namespace rewy_cuda {
namespace {

constexpr int REC_THREADS = 256;   /* V ≤ 256: at most 8 warps */
constexpr int REC_PART_FLOATS = 8192; /* the backward's per-warp partials: at most 32 KB (one token's at K = 256) */

struct RecSeq { size_t bos; int len; };
__device__ __forceinline__ RecSeq rec_seq(const RecArgs &a, int n) {
    if (a.cu) return {(size_t)a.cu[n], a.cu[n + 1] - a.cu[n]};
    return {(size_t)n * (size_t)a.T, a.T};
}

/* Element (i, j) (key feature, value column) of the caller's state (n, hv): [K][V], or [V][K] (state_v_first). */
__device__ __forceinline__ size_t rec_state_idx(const RecArgs &a, int n, int hv, int i, int j) {
    const size_t base = ((size_t)n * a.HV + hv) * (size_t)a.K * a.V;
    return base + (a.svf ? (size_t)j * a.K + i : (size_t)i * a.V + j);
}

/* Token tok's inputs for value head hv and column j (recurrent_step.h, RecIn): MATH §1's table maps the operator's
 * arguments to g, b, w; the gate is floored (src/gates.h) before exp; v_j, w_j are 0 for a thread past V. */
template <class T, int KMAX>
__device__ __forceinline__ void rec_load(const RecArgs &a, size_t tok, int hv, int j, bool active, RecIn<KMAX> &in) {
    const size_t qk = (tok * a.H + hv / a.G) * a.K; /* q, k [.,H,K] */
    const size_t th = tok * a.HV + hv;               /* [.,HV] */
    const bool gdn2 = a.op == REWY_OP_GDN2;
    const float beta = gdn2 ? 0.f : ld<T>((const T *)a.beta + th);
    const float gs = a.op == REWY_OP_GDN ? a.g[th] : 0.f;
REC_UNROLL
    for (int i = 0; i < KMAX; i++)
        if (i < a.K) {
            const float ki = ld<T>((const T *)a.k + qk + i);
            const float gi = a.op == REWY_OP_KDA || gdn2 ? a.g[th * a.K + i] : gs; /* DeltaNet: 0 */
            const float bi = gdn2 ? ld<T>((const T *)a.b + th * a.K + i) : beta;
            in.q[i] = a.scale * ld<T>((const T *)a.q + qk + i);
            in.k[i] = ki;
            in.a[i] = expf(rewy_gate_floor(gi));
            in.e[i] = bi * ki;
        }
    in.v = active ? ld<T>((const T *)a.v + th * a.V + j) : 0.f;
    in.w = !active ? 0.f : gdn2 ? ld<T>((const T *)a.w + th * a.V + j) : beta;
}

/* Forward: o, ht, and the fp32 checkpoint before every chunk (the backward's restart points). The columns never
 * talk to each other. */
template <class T, int KMAX> __global__ void __launch_bounds__(REC_THREADS) rec_fwd_kernel(RecArgs a) {
    const int n = blockIdx.x, hv = blockIdx.y, j = threadIdx.x;
    if (j >= a.V) return;
    const RecSeq sq = rec_seq(a, n);
    const size_t KV = (size_t)a.K * a.V;
    float s[KMAX]; /* S[:, j] */
REC_UNROLL
    for (int i = 0; i < KMAX; i++) s[i] = i < a.K && a.h0 ? a.h0[rec_state_idx(a, n, hv, i, j)] : 0.f;
    const int ck0 = a.coff[n];
    for (int t = 0; t < sq.len; t++) {
        if (t % a.BT == 0) {
            float *ck = a.ckpt + ((size_t)(ck0 + t / a.BT) * a.HV + hv) * KV + j;
REC_UNROLL
            for (int i = 0; i < KMAX; i++)
                if (i < a.K) ck[(size_t)i * a.V] = s[i];
        }
        const size_t tok = sq.bos + (size_t)t;
        RecIn<KMAX> in;
        rec_load<T, KMAX>(a, tok, hv, j, true, in);
        const float o = rec_fwd_step<KMAX>(a.K, s, in);
        st<T>((T *)a.o + (tok * a.HV + hv) * a.V + j, o);
    }
    if (a.ht) {
REC_UNROLL
        for (int i = 0; i < KMAX; i++)
            if (i < a.K) a.ht[rec_state_idx(a, n, hv, i, j)] = s[i];
    }
}

/* rec_finalize's reads and writes for token tok of value head hv (recurrent_step.h): q̄, k̄ to the caller's dq, dk
 * (G = 1) or to the fp32 partials per value head (G > 1, summed by rec_group_sum_kernel). */
template <class T> struct RecIO {
    const RecArgs &a;
    size_t qk, th; /* [.,H,K] row start, [.,HV] index */
    __device__ float k(int i) const { return ld<T>((const T *)a.k + qk + i); }
    __device__ float b(int i) const {
        return a.op == REWY_OP_GDN2 ? ld<T>((const T *)a.b + th * a.K + i) : ld<T>((const T *)a.beta + th);
    }
    __device__ float g(int i) const { return a.op == REWY_OP_GDN ? a.g[th] : a.g[th * a.K + i]; }
    __device__ void dq(int i, float x) const {
        if (a.accq) a.accq[th * a.K + i] = x;
        else st<T>((T *)a.dq + qk + i, x);
    }
    __device__ void dk(int i, float x) const {
        if (a.acck) a.acck[th * a.K + i] = x;
        else st<T>((T *)a.dk + qk + i, x);
    }
    __device__ void db(int i, float x) const { st<T>((T *)a.db + th * a.K + i, x); }
    __device__ void dg(int i, float x) const {
        if (a.op == REWY_OP_GDN) a.dg[th] = x;
        else a.dg[th * a.K + i] = x;
    }
    __device__ void dbeta(float x) const { st<T>((T *)a.dbeta + th, x); }
};

/* Backward. Chunks in reverse; per chunk the token states S_{t−1}[:, j] are recomputed from its checkpoint into
 * this block's workspace slice (each thread its own column: no barrier), then its tokens in reverse. Every token's
 * column terms of the RecSlots sums are reduced per warp (shuffles, fixed tree) into part[slot][warp][·]; every RS
 * tokens (and at the sequence's first) the block syncs and one thread per buffered token sums the warps in order
 * and writes that token's gradients (rec_finalize). Threads past V take part with zero terms. */
template <class T, int KMAX> __global__ void __launch_bounds__(REC_THREADS) rec_bwd_kernel(RecArgs a, int RS) {
    extern __shared__ float part[]; /* [RS][nw][nq] */
    const int n = blockIdx.x, hv = blockIdx.y, j = threadIdx.x, lane = j & 31, warp = j >> 5, nw = blockDim.x >> 5;
    const bool active = j < a.V;
    const RecSlots sl = {a.K};
    const int nq = sl.count();
    const RecSeq sq = rec_seq(a, n);
    const size_t KV = (size_t)a.K * a.V;
    float ds[KMAX]; /* S̄[:, j] */
REC_UNROLL
    for (int i = 0; i < KMAX; i++) ds[i] = i < a.K && active && a.dht ? a.dht[rec_state_idx(a, n, hv, i, j)] : 0.f;
    float *states = a.states + ((size_t)n * a.HV + hv) * (size_t)a.BT * KV + j; /* [BT][K][V], column j */
    const int ck0 = a.coff[n], nch = (sq.len + a.BT - 1) / a.BT;
    int nbuf = 0;
    size_t tok_top = 0; /* the token of part's slot 0; slot x holds token tok_top − x */
    for (int c = nch - 1; c >= 0; c--) {
        const int t0 = c * a.BT, nc = min(a.BT, sq.len - t0);
        if (active) { /* S_{t−1} for the chunk's tokens, from its checkpoint */
            const float *ck = a.ckpt + ((size_t)(ck0 + c) * a.HV + hv) * KV + j;
            float s[KMAX];
REC_UNROLL
            for (int i = 0; i < KMAX; i++) s[i] = i < a.K ? ck[(size_t)i * a.V] : 0.f;
            for (int tt = 0; tt < nc; tt++) {
REC_UNROLL
                for (int i = 0; i < KMAX; i++)
                    if (i < a.K) states[(size_t)tt * KV + (size_t)i * a.V] = s[i];
                if (tt + 1 < nc) {
                    RecIn<KMAX> in;
                    rec_load<T, KMAX>(a, sq.bos + (size_t)(t0 + tt), hv, j, true, in);
                    rec_fwd_step<KMAX>(a.K, s, in);
                }
            }
        }
        for (int tt = nc - 1; tt >= 0; tt--) {
            const size_t tok = sq.bos + (size_t)(t0 + tt), th = tok * a.HV + hv;
            if (nbuf == 0) tok_top = tok;
            RecIn<KMAX> in;
            rec_load<T, KMAX>(a, tok, hv, j, active, in);
            float sp[KMAX];
REC_UNROLL
            for (int i = 0; i < KMAX; i++) sp[i] = i < a.K && active ? states[(size_t)tt * KV + (size_t)i * a.V] : 0.f;
            const float dO = active ? ld<T>((const T *)a.do_ + th * a.V + j) : 0.f;
            float *slot = part + ((size_t)nbuf * nw + warp) * nq;
            auto red = [&](int q, float x) {
                x = active ? x : 0.f;
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
                if (lane == 0) slot[q] = x;
            };
            float dv, dw;
            rec_bwd_step<KMAX>(a.K, sp, ds, in, dO, dv, dw, red);
            if (active) {
                st<T>((T *)a.dv + th * a.V + j, dv);
                if (a.op == REWY_OP_GDN2) st<T>((T *)a.dw + th * a.V + j, dw);
            }
            if (++nbuf == RS || (c == 0 && tt == 0)) {
                __syncthreads();
                for (int x = threadIdx.x; x < nbuf; x += blockDim.x) {
                    const size_t tx = tok_top - (size_t)x;
                    const RecIO<T> io = {a, (tx * a.H + hv / a.G) * a.K, tx * a.HV + hv};
                    rec_finalize(a.K, a.op, nw, part + (size_t)x * nw * nq, a.scale, io);
                }
                __syncthreads();
                nbuf = 0;
            }
        }
    }
    if (a.dh0 && active) {
REC_UNROLL
        for (int i = 0; i < KMAX; i++)
            if (i < a.K) a.dh0[rec_state_idx(a, n, hv, i, j)] = ds[i];
    }
}

/* Grouped value heads: q̄ (or k̄) of query/key head h = the sum of its value heads' partials hv = h·G … h·G + G − 1,
 * in that order. acc [rows][HV][K] fp32 → out [rows][H][K] in the input type. */
template <class T>
__global__ void rec_group_sum_kernel(const float *acc, void *out, size_t rows, int H, int G, int K) {
    const size_t total = rows * (size_t)H * K;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += (size_t)gridDim.x * blockDim.x) {
        const size_t i = x % K, th = x / K; /* th = tok·H + h; its value heads start at row th·G of [rows·HV] */
        const float *p = acc + th * G * K + i;
        float s = p[0];
        for (int gi = 1; gi < G; gi++) s += p[(size_t)gi * K];
        st<T>((T *)out + x, s);
    }
}

int rec_warps(int V) { return (V + 31) / 32; }

template <int KMAX> cudaError_t rec_forward(const RecArgs &a, rewy_dtype dt, cudaStream_t s) {
    const dim3 grid(a.N, a.HV), block(32 * rec_warps(a.V));
    switch (dt) {
    case REWY_F32: rec_fwd_kernel<float, KMAX><<<grid, block, 0, s>>>(a); break;
    case REWY_BF16: rec_fwd_kernel<__nv_bfloat16, KMAX><<<grid, block, 0, s>>>(a); break;
    case REWY_F16: rec_fwd_kernel<__half, KMAX><<<grid, block, 0, s>>>(a); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <int KMAX> cudaError_t rec_backward(const RecArgs &a, rewy_dtype dt, cudaStream_t s) {
    const int nw = rec_warps(a.V), nq = RecSlots{a.K}.count();
    int RS = REC_PART_FLOATS / (nw * nq);
    RS = RS < 1 ? 1 : RS > 64 ? 64 : RS;
    const size_t smem = sizeof(float) * (size_t)RS * nw * nq; /* ≤ 33 KB: no opt-in */
    const dim3 grid(a.N, a.HV), block(32 * nw);
    switch (dt) {
    case REWY_F32: rec_bwd_kernel<float, KMAX><<<grid, block, smem, s>>>(a, RS); break;
    case REWY_BF16: rec_bwd_kernel<__nv_bfloat16, KMAX><<<grid, block, smem, s>>>(a, RS); break;
    case REWY_F16: rec_bwd_kernel<__half, KMAX><<<grid, block, smem, s>>>(a, RS); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <class T> cudaError_t rec_group_sums(const RecArgs &a, cudaStream_t s) {
    const size_t rows = a.cu ? (size_t)a.T : (size_t)a.N * a.T, total = rows * a.H * a.K;
    size_t blocks = (total + 255) / 256;
    if (blocks > (1u << 20)) blocks = 1u << 20;
    rec_group_sum_kernel<T><<<(unsigned)blocks, 256, 0, s>>>(a.accq, a.dq, rows, a.H, a.G, a.K);
    rec_group_sum_kernel<T><<<(unsigned)blocks, 256, 0, s>>>(a.acck, a.dk, rows, a.H, a.G, a.K);
    return cudaGetLastError();
}

} // namespace

cudaError_t launch_recurrent_forward(const RecArgs &a, rewy_dtype dt, cudaStream_t s) {
    return a.K <= 16 ? rec_forward<16>(a, dt, s) : rec_forward<256>(a, dt, s);
}

cudaError_t launch_recurrent_backward(const RecArgs &a, rewy_dtype dt, cudaStream_t s) {
    const cudaError_t e = a.K <= 16 ? rec_backward<16>(a, dt, s) : rec_backward<256>(a, dt, s);
    if (e != cudaSuccess || !a.accq) return e;
    switch (dt) {
    case REWY_F32: return rec_group_sums<float>(a, s);
    case REWY_BF16: return rec_group_sums<__nv_bfloat16>(a, s);
    case REWY_F16: return rec_group_sums<__half>(a, s);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace rewy_cuda
