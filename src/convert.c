/* convert.c: rewy_convert, the element conversions (fp32 <-> bf16 / fp16) offered to C callers
 * that prepare inputs or read outputs. The roundings are dtype.h's, the same ones the CPU
 * backend applies to its own loads and stores, so a caller's bf16 data and the library's agree. */
#include <stdint.h>
#include "dtype.h"

static int dtype_known(rewy_dtype t) { return t == REWY_F32 || t == REWY_BF16 || t == REWY_F16; }

rewy_status rewy_convert(rewy_dtype dst_dtype, void *dst, rewy_dtype src_dtype, const void *src, size_t n) {
    if (!dtype_known(dst_dtype) || !dtype_known(src_dtype)) return REWY_ERR_BAD_DTYPE;
    if (n == 0) return REWY_OK;
    if (!dst || !src) return REWY_ERR_NULL_POINTER;
    if ((uintptr_t)dst % rewy_dtype_size(dst_dtype) || (uintptr_t)src % rewy_dtype_size(src_dtype))
        return REWY_ERR_MISALIGNED;
    /* Through fp32 in blocks: widening to fp32 is exact, so every element is rounded once, also
     * from bf16 to fp16 and back. The fixed block keeps the loads and stores vectorised. */
    enum { BLOCK = 1024 };
    float buf[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        int m = n - i < BLOCK ? (int)(n - i) : BLOCK;
        rewy_load_n(buf, src, src_dtype, i, m);
        rewy_store_n(dst, dst_dtype, i, buf, m);
    }
    return REWY_OK;
}
