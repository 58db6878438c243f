/* colsum.cuh — the deterministic column sum of the CUDA back-end's backward
 * passes (bias_bwd, layernorm_bwd, rmsnorm_bwd): a first pass of the op's own
 * kernel cuts the M rows into P chunks of R rows and writes one partial row
 * per chunk (each column summed over the chunk's rows in order), then
 * td_cuda_colsum_add adds the P partial rows, in chunk order, into the
 * gradient. No float atomics: the same inputs give the same bits. R and P
 * depend on M only. Not included outside kernels/cuda/. */
#ifndef TD_CUDA_COLSUM_CUH
#define TD_CUDA_COLSUM_CUH

#include "kernels/cuda/cuda_internal.cuh"

#define TD_COLSUM_MIN_ROWS 32   /* rows per chunk, at least */
#define TD_COLSUM_MAX_PARTS 256 /* chunks, at most (also the grid's y extent) */

/* Rows per chunk for M rows (M > 0); the chunk count is ceil(M / R) ≤ 256. */
static inline int64_t td_colsum_rows(int64_t M) {
  int64_t r = (M + TD_COLSUM_MAX_PARTS - 1) / TD_COLSUM_MAX_PARTS;
  return r < TD_COLSUM_MIN_ROWS ? TD_COLSUM_MIN_ROWS : r;
}

/* dst (N) += Σ_p part[p, :] for p = 0 .. nparts−1 in order; part (nparts, N)
 * on the device. Queued on the back-end's stream (pointwise.cu). */
td_status td_cuda_colsum_add(td_kernels *k, float *dst, const float *part, int64_t nparts,
                             int64_t N);

#endif
