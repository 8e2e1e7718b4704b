/* chunk_plan.cu: chunk → sequence table, built on the device from cu_seqlens (no host sync).
 * Without cu_seqlens every sequence has T tokens and B sequences. Entries past the last chunk
 * in use get n = 0 (their blocks return at once). */
#include "kernels.cuh"
#include <cub/block/block_scan.cuh>

namespace rewy_cuda {

constexpr int PLAN_THREADS = 512;

__global__ void __launch_bounds__(PLAN_THREADS) chunk_plan_kernel(Prob p, const int32_t *cu, ChunkInfo *ctab, int *coff) {
    typedef cub::BlockScan<int, PLAN_THREADS> Scan;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ int carry;
    if (threadIdx.x == 0) carry = 0;
    __syncthreads();
    for (int base = 0; base < p.N; base += PLAN_THREADS) {
        const int s = base + threadIdx.x;
        int bos = 0, len = 0;
        if (s < p.N) {
            bos = cu ? cu[s] : s * p.T;
            len = cu ? cu[s + 1] - cu[s] : p.T;
        }
        const int nch = ceil_div(len, p.BT);
        int off, total;
        Scan(tmp).ExclusiveSum(nch, off, total);
        off += carry;
        if (s < p.N) {
            coff[s] = off;
            for (int c = 0; c < nch; c++) {
                ChunkInfo ci;
                ci.tok0 = bos + c * p.BT;
                ci.n = min(p.BT, len - c * p.BT);
                ci.seq = s;
                ci.idx = c;
                if (off + c < p.NC) ctab[off + c] = ci;
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) carry += total;
        __syncthreads();
    }
    const int used = carry;
    if (threadIdx.x == 0) coff[p.N] = used;
    for (int c = used + threadIdx.x; c < p.NC; c += PLAN_THREADS) {
        ChunkInfo ci = {0, 0, 0, 0};
        ctab[c] = ci;
    }
}

cudaError_t launch_chunk_plan(const Prob &p, const int32_t *cu_seqlens, ChunkInfo *ctab, int *coff, cudaStream_t s) {
    chunk_plan_kernel<<<1, PLAN_THREADS, 0, s>>>(p, cu_seqlens, ctab, coff);
    return cudaGetLastError();
}

} // namespace rewy_cuda
