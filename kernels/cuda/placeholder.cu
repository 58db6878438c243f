/* placeholder.cu — stand-in for the CUDA back-end until its kernels exist.
 * It proves the toolchain end to end (a device is visible, cuBLAS makes a
 * handle, NCCL links) and then declines with TD_ERR_UNSUPPORTED. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/td_cuda.h"

extern "C" td_status td_kernels_cuda_create(int threads, td_kernels **out) {
  *out = NULL;
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess)
    TD_FAIL(TD_ERR_CUDA, "cudaGetDeviceCount failed: %s", cudaGetErrorString(ce));
  if (ndev == 0) TD_FAIL(TD_ERR_CUDA, "no CUDA device visible");

  cublasHandle_t h = NULL;
  cublasStatus_t cs = cublasCreate(&h);
  if (cs != CUBLAS_STATUS_SUCCESS)
    TD_FAIL(TD_ERR_CUDA, "cublasCreate failed: %s", cublasGetStatusString(cs));
  cublasDestroy(h);

  int nccl_version = 0;
  ncclResult_t nr = ncclGetVersion(&nccl_version);
  if (nr != ncclSuccess)
    TD_FAIL(TD_ERR_CUDA, "ncclGetVersion failed: %s", ncclGetErrorString(nr));

  TD_FAIL(TD_ERR_UNSUPPORTED,
          "CUDA kernels are not implemented yet (found %d device(s), NCCL %d)", ndev,
          nccl_version);
}
