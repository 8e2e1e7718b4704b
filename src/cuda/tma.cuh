/* tma.cuh: tile copies by Hopper's tensor memory accelerator (TMA) into the 128-byte-swizzled layout that the
 * warpgroup products read directly (wgmma.cuh).
 *
 * Why: a math warp that issues its own cp.async copies spends issue slots and registers on addresses, and its 16-byte
 * rows land in eight different core matrices per eight lanes (session 36's Nsight reading, docs/DESIGN.md). One
 * thread issues a TMA copy of a whole box; the copy engine writes it and completes on an mbarrier (common.cuh's
 * mbar_* helpers), so the math warps only wait.
 *
 * The layout. A row-major bf16 matrix is a 2-D map (columns, rows) of 64 × 64 boxes; a box lands as 64 rows of 128 B
 * (8 KB, 1024-B aligned), the 16-byte chunk j of row r at chunk j ^ (r % 8) of that row (sw128 below). A tile of 128
 * columns is two boxes 8 KB apart. wgmma reads such a box with the swizzle in its descriptor (wg_desc_hi's WG_SW128):
 * K-major with SBO 1024 B (8 rows) and a k16 step of +32 B inside the row, MN-major with SBO 1024 B and a k16 step of
 * +2048 B (16 rows); checked on the device against a CPU product by bench/dev/wgmma_tma_probe.cu. Rows past the
 * matrix's end come in as zeros; a chunk that ends a sequence inside the matrix still reads the next sequence's rows,
 * so the kernels zero rows from n on themselves. (An unswizzled core-matrix layout by one 3-D copy needs strides the
 * copy engine does not take: the probe's note.) */
#ifndef REWY_CUDA_TMA_CUH
#define REWY_CUDA_TMA_CUH

#include <cuda.h> /* CUtensorMap and its encoder's types only: the encoder is found through the runtime, no -lcuda */
#include "common.cuh"

namespace rewy_cuda {

constexpr int TMA_BOX = 64 * 64 * 2; /* a box's bytes */

/* element offset of (r, c) in a tile of 64 rows of such boxes (column c of box c / 64) */
__host__ __device__ constexpr int sw128(int r, int c) {
    return (c >> 6) * 64 * 64 + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

#if __CUDA_ARCH__ >= 900
/* the box of map m at (column c, row r) into shared memory at dst (1024-B aligned), completing on mbarrier mb */
__device__ __forceinline__ void tma_box(unsigned dst, const CUtensorMap *m, int c, int r, unsigned mb) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(m), "r"(c), "r"(r), "r"(mb) : "memory");
}
/* the box of map m at (column c, row r) into the L2 cache, no completion (a hint: the box's later copy finds it there) */
__device__ __forceinline__ void tma_prefetch_box(const CUtensorMap *m, int c, int r) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(m), "r"(c), "r"(r) : "memory");
}
/* bytes (a multiple of 16) at src (16-B aligned) into the L2 cache, likewise */
__device__ __forceinline__ void bulk_prefetch_l2(const void *src, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
/* the boxes of a tile of C columns from column c on, 8 KB apart */
template <int C> __device__ __forceinline__ void tma_tile(unsigned dst, const CUtensorMap *m, int c, int r, unsigned mb) {
#pragma unroll
    for (int j = 0; j < C / 64; j++) tma_box(dst + j * TMA_BOX, m, c + 64 * j, r, mb);
}
#endif

/* the box at shared memory src (1024-B aligned, written before by this block and fenced for the async proxy) to map m
 * at (column c, row r), in this thread's bulk group; tma_store_commit closes the group, tma_store_drain waits until
 * every committed store of this thread has read its box (the box may then be written again). Defined on every
 * architecture, so that code shared with sm_80 compiles; only sm_90 code issues them. */
__device__ __forceinline__ void tma_store_box(const CUtensorMap *m, int c, int r, unsigned src) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(m), "r"(c), "r"(r), "r"(src) : "memory");
#else
    (void)m, (void)c, (void)r, (void)src;
#endif
}
__device__ __forceinline__ void tma_store_commit() {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tma_store_drain() {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}
/* The host side: cuTensorMapEncodeTiled, asked from the runtime once per launch (no state kept between calls) */
struct TmaEncoder {
    typedef CUresult (*Fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                           const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                           CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    Fn fn = nullptr;
    TmaEncoder() {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (Fn)f;
    }
    /* m: the bf16 matrix at base, [rows][cols] with row stride ld elements, in 64 × 64 boxes. False where the copy
     * engine cannot take it (no encoder, base or stride not 16-B multiples, sizes past its limits or the copies'
     * 32-bit signed coordinates): the callers check the same conditions first, so this is their last guard. */
    bool map(CUtensorMap *m, const void *base, uint64_t rows, uint64_t cols, uint64_t ld) const {
        if (!fn || ((uintptr_t)base & 15) || cols % 64 || ld % 8 || rows == 0 || rows >> 31 || cols >> 31 || ld >> 38)
            return false;
        const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * 2};
        const cuuint32_t box[2] = {64, 64}, es[2] = {1, 1};
        return fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(base), dims, strides, box, es,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    }
};

} // namespace rewy_cuda
#endif
