/* sm90_probe.cuh: what the standalone Hopper probes of bench/dev share (tma_probe.cu, wgmma_layout_probe.cu,
 * wgmma_tma_probe.cu): the CUDA error check, the tensor-map encoder, mbarrier helpers and the m64n64 accumulator
 * operand lists. (The library's own: src/cuda/tma.cuh, common.cuh; the probes build without the library.) */
#ifndef REWY_BENCH_SM90_PROBE_CUH
#define REWY_BENCH_SM90_PROBE_CUH
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

/* cuTensorMapEncodeTiled, found through the runtime (no -lcuda) */
typedef CUresult (*EncodeFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                             const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                             CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static inline EncodeFn probe_encoder() {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult qr;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr));
    if (!fn || qr != cudaDriverEntryPointSuccess) { printf("no cuTensorMapEncodeTiled\n"); exit(1); }
    return (EncodeFn)fn;
}

__device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mb_init(uint64_t *mb, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(su32(mb)), "r"(n) : "memory");
}
/* arrive, expecting `bytes` more of asynchronous copies on this phase */
__device__ __forceinline__ void mb_arm(uint64_t *mb, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(su32(mb)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mb_wait(uint64_t *mb, unsigned parity) {
    unsigned done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(su32(mb)), "r"(parity) : "memory");
    } while (!done);
}

/* byte offset of (row, byte b of the row) in a 128-byte-swizzled box (rows of 128 B) */
__host__ __device__ inline int swz(int row, int b) { return row * 128 + ((((b >> 4) ^ (row & 7))) << 4) + (b & 15); }

/* a m64n64 fp32 accumulator d[32] as wgmma's register operands */
#define ACC32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define REGS32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#endif
