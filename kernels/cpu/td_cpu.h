/* td_cpu.h — what the CPU back-end offers beyond the ops table: a gemm
 * rate probe for benchmarks. */
#ifndef TD_CPU_H
#define TD_CPU_H

#include <stdint.h>

#include "kernels/td_kernels.h"

/* Measure the gemm rate of back-end k on the three products of a linear
 * layer: forward C(M,N) = A(M,K)·B(K,N), and the two backward products
 * dA(M,K) = dC·Bᵀ (transB) and dB(K,N) += Aᵀ·dC (transA, beta 1).
 * One warm-up round, then `reps` timed rounds; *gflops = 3·2·M·N·K·reps /
 * seconds / 1e9. Buffers are allocated with k->alloc and freed. */
td_status td_cpu_gemm_rate(td_kernels *k, int64_t M, int64_t N, int64_t K, int reps,
                           double *gflops);

#endif
