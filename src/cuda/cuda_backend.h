/* cuda_backend.h: the CUDA backend's side of backend.h (compiled in only with REWY_WITH_CUDA, make
 * CUDA=1): rewy_cuda_backend_ops (cuda_backend.cu) is what api.c reaches, after validating every
 * argument. Here also the kernels' index limits and the saved-record kernels (chunk_plan.cu). */
#ifndef REWY_CUDA_BACKEND_H
#define REWY_CUDA_BACKEND_H

#include <cuda_runtime.h>
#include "backend.h"

/* The CUDA kernels index tokens and chunk rows ([NC·HV][BT] tables) with 32-bit ints, and launch
 * grids with the value heads (or the query/key heads) on the y dimension. The size queries refuse
 * shapes beyond these with REWY_ERR_BAD_SHAPE and a message naming the limit. */
#define REWY_CUDA_MAX_TOKENS 2147483647LL    /* B·T */
#define REWY_CUDA_MAX_CHUNK_ROWS 2147483647LL /* NC·HV·BT */
#define REWY_CUDA_MAX_HEADS 65535             /* H and HV: gridDim.y */

namespace rewy_cuda {

/* The forward's last kernel: writes its rewy_saved_record (by value) to dst in the saved buffer. */
cudaError_t launch_record_write(const rewy_saved_record &r, rewy_saved_record *dst, cudaStream_t s);
/* The backward's first kernel: compares the saved record with want (this backward's). On a
 * difference it prints what differs (device printf) and traps: the backward's kernels never run on
 * a saved buffer of another config, and the stream reports the error (cudaErrorLaunchFailure or
 * cudaErrorIllegalInstruction) at the caller's next synchronisation. */
cudaError_t launch_record_check(const rewy_saved_record &want, const rewy_saved_record *saved, cudaStream_t s);

} // namespace rewy_cuda

/* rewy_backend_ops.l2norm (l2norm.cu) */
rewy_status rewy_cuda_l2norm(rewy_dtype dtype, int64_t rows, int dim, float eps, const void *x, void *rstd,
                             const void *dy, void *out, void *stream);
rewy_status rewy_cuda_gate(rewy_dtype dtype, int64_t rows, int heads, int dim, const void *g, const float *A_log,
                           const float *dt_bias, float *y, const float *dy, void *dg, float *dA_log, float *ddt_bias,
                           float *ws, void *stream);
#endif
