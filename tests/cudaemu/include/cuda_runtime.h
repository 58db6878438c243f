/* cuda_runtime.h — the emulated CUDA device's runtime API: the subset of
 * NVIDIA's CUDA runtime that trident's CUDA back-end (kernels/cuda/) and
 * the library stand-ins of tests/cudaemu use, with NVIDIA's names, numeric
 * values and signatures, implemented on the CPU by tests/cudaemu/src/.
 * Test code only: the .cu sources are compiled as C++ against it (see
 * tests/cudaemu/NOTES.md); a real build uses the toolkit's header.
 *
 * Host API: errors (codes of CUDA 13's driver_types.h, texts of
 * cudaGetErrorString), devices, device and pinned memory, copies and sets,
 * streams and events. Device code (C++ only): the execution-space
 * qualifiers, the built-in index variables, __syncthreads, the warp
 * shuffles and the launch entry cudaemu::launch that the build-time rewrite
 * of `kernel<<<grid, block, shmem, stream>>>(args)` calls
 * (cudaemu_device.h). */
#ifndef TD_CUDAEMU_CUDA_RUNTIME_H
#define TD_CUDAEMU_CUDA_RUNTIME_H

#include <library_types.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define CUDART_VERSION 13000
#define TD_CUDAEMU 1 /* this is the emulated device */

/* A default argument in C++ only, as the toolkit's __dv(v). */
#ifdef __cplusplus
#define TD_CUDAEMU_DV(v) = v
#else
#define TD_CUDAEMU_DV(v)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (driver_types.h) ------------------------------------------------ */
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidHostPointer = 16,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorMissingConfiguration = 52,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorSymbolNotFound = 500,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchTimeout = 702,
  cudaErrorContextIsDestroyed = 709,
  cudaErrorAssert = 710,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  cudaErrorTimeout = 909,
  cudaErrorUnknown = 999
} cudaError_t;

const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
/* The calling host thread's last error, reset to cudaSuccess (a sticky
 * error of the current device stays: it is returned again). */
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

/* ---- devices ---------------------------------------------------------------- */
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
/* Device attributes: the multiprocessor count only (the emulated device's
 * TD_CUDAEMU_SMS, default 8); others are cudaErrorInvalidValue. */
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
#ifndef __cplusplus
typedef enum cudaDeviceAttr cudaDeviceAttr;
#endif
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);

/* ---- memory ----------------------------------------------------------------- */
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
#ifndef __cplusplus
typedef enum cudaMemcpyKind cudaMemcpyKind;
#endif

#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);

/* ---- streams and events ----------------------------------------------------- */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01 /* no implicit synchronisation with stream 0 */
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04

cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags TD_CUDAEMU_DV(0));
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags);

cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream TD_CUDAEMU_DV(0));
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

typedef void (*cudaHostFn_t)(void *userData);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);

/* ---- copies and sets ---------------------------------------------------------- */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream TD_CUDAEMU_DV(0));
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream TD_CUDAEMU_DV(0));

#ifdef __cplusplus
} /* extern "C" */

/* The typed overloads the toolkit's cuda_runtime.h adds for C++. */
template <class T>
static inline cudaError_t cudaMalloc(T **devPtr, size_t size) {
  return ::cudaMalloc((void **)(void *)devPtr, size);
}
template <class T>
static inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
  return ::cudaMallocHost((void **)(void *)ptr, size);
}

#include <cudaemu_device.h>
#endif

#endif
