/* library_types.h — the emulated CUDA device's data-type enumeration
 * (cudaDataType_t / cudaDataType), as CUDA 13's library_types.h declares it
 * for the math libraries (cuBLASLt takes it), with NVIDIA's numeric values.
 * cuda_runtime.h includes it, as the toolkit's does. Test code only
 * (tests/cudaemu): never part of a real build, where the toolkit's header
 * is used. */
#ifndef TD_CUDAEMU_LIBRARY_TYPES_H
#define TD_CUDAEMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
  CUDA_R_16F = 2,         /* half */
  CUDA_C_16F = 6,         /* pair of halves */
  CUDA_R_16BF = 14,       /* __nv_bfloat16 */
  CUDA_C_16BF = 15,       /* pair of __nv_bfloat16 */
  CUDA_R_32F = 0,         /* float */
  CUDA_C_32F = 4,         /* pair of floats */
  CUDA_R_64F = 1,         /* double */
  CUDA_C_64F = 5,         /* pair of doubles */
  CUDA_R_4I = 16,         /* signed 4-bit int */
  CUDA_C_4I = 17,
  CUDA_R_4U = 18,         /* unsigned 4-bit int */
  CUDA_C_4U = 19,
  CUDA_R_8I = 3,          /* signed 8-bit int */
  CUDA_C_8I = 7,
  CUDA_R_8U = 8,          /* unsigned 8-bit int */
  CUDA_C_8U = 9,
  CUDA_R_16I = 20,        /* signed 16-bit int */
  CUDA_C_16I = 21,
  CUDA_R_16U = 22,        /* unsigned 16-bit int */
  CUDA_C_16U = 23,
  CUDA_R_32I = 10,        /* signed 32-bit int */
  CUDA_C_32I = 11,
  CUDA_R_32U = 12,        /* unsigned 32-bit int */
  CUDA_C_32U = 13,
  CUDA_R_64I = 24,        /* signed 64-bit int */
  CUDA_C_64I = 25,
  CUDA_R_64U = 26,        /* unsigned 64-bit int */
  CUDA_C_64U = 27,
  CUDA_R_8F_E4M3 = 28,    /* fp8 e4m3 */
  CUDA_R_8F_UE4M3 = CUDA_R_8F_E4M3,
  CUDA_R_8F_E5M2 = 29,    /* fp8 e5m2 */
  CUDA_R_8F_UE8M0 = 30,   /* fp8 e8m0 (exponent only) */
  CUDA_R_6F_E2M3 = 31,    /* fp6 e2m3 */
  CUDA_R_6F_E3M2 = 32,    /* fp6 e3m2 */
  CUDA_R_4F_E2M1 = 33     /* fp4 e2m1 */
} cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;

/* Library version fields (cublasLtGetProperty and the like). */
typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
typedef enum libraryPropertyType_t libraryPropertyType_t;

#endif
