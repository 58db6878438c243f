/* emu_internal.h — the emulated CUDA runtime's interface to the library
 * stand-ins of tests/cudaemu (cuBLASLt, cub, NCCL). Test code only: never
 * part of a real build. The runtime (runtime.cpp and friends) implements it;
 * cublaslt.cpp, cub and nccl.cpp call only this and the public CUDA API of
 * include/cuda_runtime.h. */
#ifndef TD_CUDAEMU_INTERNAL_H
#define TD_CUDAEMU_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>

#include <functional>

namespace cudaemu {

/* Queue `fn` on stream `s` (0: the default stream of the calling thread's
 * current device). It runs later on the stream's own worker thread, after
 * everything queued on `s` before it, with device memory accessible. `what`
 * names the operation in error messages ("ncclAllReduce", "cublasLtMatmul").
 * A non-success return of `fn` becomes the device's sticky asynchronous
 * error, reported by the next synchronising call, as a failed kernel would
 * be. Returns cudaErrorInvalidResourceHandle for a destroyed or foreign
 * stream; cudaSuccess once queued. */
cudaError_t enqueue(cudaStream_t s, std::function<cudaError_t()> fn, const char *what);

/* Where [p, p + bytes) lives: the ordinal (>= 0) of the device whose live
 * allocation contains all of it; -1 if p is not in any device allocation
 * (host memory, pinned or not); -2 if p is inside a device allocation but
 * the range runs past its end (or p is inside freed device memory). */
int where(const void *p, size_t bytes);

/* The calling thread's current device (cudaSetDevice) and the number of
 * emulated devices on this node (TD_CUDAEMU_DEVICES; by default the number
 * of MPI ranks on the node, as the launcher reports it, else 1). */
int current_device();
int device_count();

/* The device a stream belongs to. */
int stream_device(cudaStream_t s);

/* This emulated node's name (the host name): with a device ordinal it
 * identifies one GPU, for NCCL's duplicate-GPU refusal. */
const char *node_name();

} // namespace cudaemu

#endif
