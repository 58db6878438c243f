/* td_cuda.h — entry point of the CUDA back-end (compiled only with
 * TD_HAVE_CUDA; registered in kernels/registry.c). Usable from C and from
 * the back-end's C++/CUDA files: the C headers it pulls in carry no
 * extern "C" of their own, so it wraps them. */
#ifndef TD_CUDA_H
#define TD_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/td_kernels.h"

/* Create the CUDA back-end on the current device; `threads` sets the host
 * OpenMP threads (0: leave as is). */
td_status td_kernels_cuda_create(int threads, td_kernels **out);

#ifdef __cplusplus
}
#endif

#endif
