/* cuda_backend.h: what src/api.c calls when cfg.backend == REWY_BACKEND_CUDA.
 * api.c has validated every argument before these run; they may assume a valid call.
 * Compiled in only with REWY_WITH_CUDA (make CUDA=1). Plain C declarations. */
#ifndef REWY_CUDA_BACKEND_H
#define REWY_CUDA_BACKEND_H

#include "rewy.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t rewy_cuda_saved_size(const rewy_config *cfg);
size_t rewy_cuda_fwd_workspace_size(const rewy_config *cfg);
size_t rewy_cuda_bwd_workspace_size(const rewy_config *cfg);
rewy_status rewy_cuda_forward(const rewy_fwd_params *p);
rewy_status rewy_cuda_backward(const rewy_bwd_params *p);

#ifdef __cplusplus
}
#endif
#endif
