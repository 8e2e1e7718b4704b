/* chunk_plan.cu: chunk → sequence table, built on the device from cu_seqlens (no host sync).
 * Without cu_seqlens every sequence has T tokens and B sequences. Entries past the last chunk
 * in use get n = 0 (their blocks return at once). */
#include "kernels.cuh"
#include "cuda_backend.h"
#include <cub/block/block_scan.cuh>
#include <stdio.h>

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

/* The saved record (backend.h): written by the forward's last kernel, compared by the backward's first.
 * One thread each: the record is 80 bytes. */
__global__ void record_write_kernel(rewy_saved_record r, rewy_saved_record *dst) { *dst = r; }

__global__ void record_check_kernel(rewy_saved_record want, const rewy_saved_record *saved) {
    const rewy_saved_record f = *saved;
    bool magic = true;
    for (int i = 0; i < 8; i++) magic = magic && f.magic[i] == want.magic[i];
    if (!magic) {
        printf("rewy_backward (CUDA): saved was not written by rewy_forward with this config (no record where it "
               "would be): REWY_ERR_MISMATCH\n");
        __trap();
    }
    const char *names[] = {"op", "dtype", "B", "T", "H", "HV", "K", "V", "chunk_size", "num_seqs", "policy",
                           "state_v_first", "h0 given", "time window (chunks; the plan's, of another GPU?)"};
    const int32_t fv[] = {f.op, f.dtype, f.B, f.T, f.H, f.HV, f.K, f.V, f.chunk_size, f.num_seqs, f.policy,
                          f.state_v_first, f.has_h0, f.time_window};
    const int32_t bv[] = {want.op, want.dtype, want.B, want.T, want.H, want.HV, want.K, want.V, want.chunk_size,
                          want.num_seqs, want.policy, want.state_v_first, want.has_h0, want.time_window};
    for (int i = 0; i < 14; i++)
        if (fv[i] != bv[i]) {
            printf("rewy_backward (CUDA): %s differs from the forward's (%d here, %d in saved): REWY_ERR_MISMATCH\n",
                   names[i], bv[i], fv[i]);
            __trap();
        }
    if (f.scale != want.scale) {
        printf("rewy_backward (CUDA): scale differs from the forward's (%g here, %g in saved): REWY_ERR_MISMATCH\n",
               (double)want.scale, (double)f.scale);
        __trap();
    }
    if (f.seqlens_hash != want.seqlens_hash) {
        printf("rewy_backward (CUDA): cu_seqlens values differ from the forward's (hash %016llx here, %016llx in "
               "saved): REWY_ERR_MISMATCH\n", (unsigned long long)want.seqlens_hash, (unsigned long long)f.seqlens_hash);
        __trap();
    }
}

cudaError_t launch_record_write(const rewy_saved_record &r, rewy_saved_record *dst, cudaStream_t s) {
    record_write_kernel<<<1, 1, 0, s>>>(r, dst);
    return cudaGetLastError();
}

cudaError_t launch_record_check(const rewy_saved_record &want, const rewy_saved_record *saved, cudaStream_t s) {
    record_check_kernel<<<1, 1, 0, s>>>(want, saved);
    return cudaGetLastError();
}

} // namespace rewy_cuda
