/* td_cuda.h — the entry points of the CUDA back-end's module
 * (libtrident_cuda.so, built with TD_ENABLE_CUDA), which kernels/registry.c
 * loads on first use and looks up by these names. Usable from C and from
 * the back-end's C++/CUDA files: the C headers it pulls in carry no
 * extern "C" of their own, so it wraps them. */
#ifndef TD_CUDA_H
#define TD_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/td_kernels.h"

/* Create the CUDA back-end on the current device (td_kernels_cuda_select
 * picks it first); `threads` is not used (host threads stay as set). */
td_status td_kernels_cuda_create(int threads, td_kernels **out);
/* Devices visible to this process (0 when CUDA cannot start). */
int td_kernels_cuda_devices(void);
/* Make device `ordinal` current for this process (before create). */
td_status td_kernels_cuda_select(int ordinal);
/* The current device's streaming multiprocessors and memory (bytes); 0 when
 * CUDA cannot tell, else 1. */
int td_kernels_cuda_info(int *sms, double *mem_bytes);
/* 1 when the module was built with NCCL (device collectives), else 0. */
int td_kernels_cuda_nccl(void);
/* Peak device bytes the back-end has held (its allocations and workspaces). */
size_t td_kernels_cuda_peak_bytes(const td_kernels *k);

#ifdef __cplusplus
}
#endif

#endif
