/* xent.cu — softmax cross-entropy on one vocabulary shard, in the three
 * calls of td_kernels.h whose row results the caller all-reduces in
 * between, on the CUDA back-end (kernels/cpu/xent.c). Padding columns
 * j ≥ Vvalid are never read as logits. A row whose max is −inf (no real
 * column on any shard) gets sumexp 0 and gradient 0 (but the target's −scale,
 * as on the CPU). exp's argument is clamped to [−87, 88] as the CPU's exp
 * clamps it (cpu_simd.h). */
#include "kernels/cuda/cuda_internal.cuh"

#define TD_XENT_TINY 1.17549435e-38f /* FLT_MIN */

/* rowmax[n] = max_{j<V} logits[n, j] (−inf if V = 0; NaN entries ignored);
 * logits (N, Vs), rowmax (N). One block per row, TD_CUDA_THREADS threads,
 * each thread strides over the V real columns; td_block_max. */
static __global__ void xent_rowmax_kernel(float *__restrict__ rowmax,
                                          const float *__restrict__ logits, int64_t Vs,
                                          int64_t V) {
  int64_t n = blockIdx.x;
  const float *l = logits + n * Vs;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = l[j] > mx ? l[j] : mx;
  mx = td_block_max(mx);
  if (threadIdx.x == 0) rowmax[n] = mx;
}

/* sumexp[n] = Σ_{j<V} exp(logits[n, j] − rowmax[n]) (0 when rowmax is −inf
 * or V = 0); tlogit[n] = logits[n, t(n)−v0] when 0 ≤ t(n)−v0 < V, else 0.
 * logits (N, Vs), rowmax, targets, sumexp, tlogit (N). One block per row,
 * TD_CUDA_THREADS threads, each thread strides over the V real columns;
 * td_block_sum. */
static __global__ void xent_sumexp_kernel(float *__restrict__ sumexp, float *__restrict__ tlogit,
                                          const float *__restrict__ logits,
                                          const float *__restrict__ rowmax,
                                          const int32_t *__restrict__ targets, int64_t v0,
                                          int64_t Vs, int64_t V) {
  int64_t n = blockIdx.x;
  const float *l = logits + n * Vs;
  float mx = rowmax[n];
  bool none = mx == -INFINITY || V == 0; /* the same for the whole block */
  float s = 0.0f;
  if (!none)
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += td_expf(l[j] - mx);
  s = td_block_sum(s);
  if (threadIdx.x == 0) {
    sumexp[n] = none ? 0.0f : s;
    int64_t j = (int64_t)targets[n] - v0;
    tlogit[n] = (j >= 0 && j < V) ? l[j] : 0.0f;
  }
}

/* dlogits[n, j] = f·exp(l − mx) (0 when l − mx < −87 or the value is below
 * FLT_MIN) for j < V', 0 for j ≥ V', minus scale at j = t(n)−v0 when
 * 0 ≤ t(n)−v0 < V; f = scale/sumexp[n], and V' = 0 when the row has no real
 * column (mx = −inf or sumexp ≤ 0, f then 0), V otherwise. dlogits, logits
 * (N, Vs), may alias (no __restrict__: each element is read before it is
 * written, by the same thread); rowmax, sumexp, targets (N). One block per
 * row, TD_CUDA_THREADS threads, each thread strides over all Vs columns. */
static __global__ void xent_bwd_kernel(float *dlogits, const float *logits,
                                       const float *__restrict__ rowmax,
                                       const float *__restrict__ sumexp,
                                       const int32_t *__restrict__ targets, int64_t v0,
                                       float scale, int64_t Vs, int64_t V) {
  int64_t n = blockIdx.x;
  const float *l = logits + n * Vs;
  float *d = dlogits + n * Vs;
  float mx = rowmax[n], se = sumexp[n];
  /* a target < 0 (masked out of the loss) has no gradient */
  float f = (mx == -INFINITY || !(se > 0.0f) || targets[n] < 0) ? 0.0f : scale / se;
  int64_t Vr = f == 0.0f ? 0 : V;
  int64_t jt = (int64_t)targets[n] - v0;
  for (int64_t j = threadIdx.x; j < Vs; j += blockDim.x) {
    float g = 0.0f;
    if (j < Vr) {
      float x = l[j] - mx;
      g = x < -87.0f ? 0.0f : f * td_expf(x);
      g = g < TD_XENT_TINY ? 0.0f : g;
    }
    if (j == jt && jt < V) g -= scale;
    d[j] = g;
  }
}

/* rowmax (N), logits (N, Vs). */
td_status td_cuda_xent_rowmax(td_kernels *k, float *rowmax, const float *logits, int64_t N,
                              int64_t Vs, int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
  TD_REQUIRE(N <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED, "xent: %lld rows exceed the grid limit",
             (long long)N);
  if (N == 0) return TD_OK;
  xent_rowmax_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      rowmax, logits, Vs, Vvalid);
  TD_CUDA_LAUNCHED("xent_rowmax");
  return TD_OK;
}

/* sumexp, tlogit, rowmax, targets (N), logits (N, Vs). */
td_status td_cuda_xent_sumexp(td_kernels *k, float *sumexp, float *tlogit,
                              const float *logits, const float *rowmax,
                              const int32_t *targets, int64_t v0, int64_t N, int64_t Vs,
                              int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
  TD_REQUIRE(N <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED, "xent: %lld rows exceed the grid limit",
             (long long)N);
  if (N == 0) return TD_OK;
  xent_sumexp_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      sumexp, tlogit, logits, rowmax, targets, v0, Vs, Vvalid);
  TD_CUDA_LAUNCHED("xent_sumexp");
  return TD_OK;
}

/* dlogits, logits (N, Vs), may alias; rowmax, sumexp, targets (N). */
td_status td_cuda_xent_bwd(td_kernels *k, float *dlogits, const float *logits,
                           const float *rowmax, const float *sumexp, const int32_t *targets,
                           int64_t v0, float scale, int64_t N, int64_t Vs, int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
  TD_REQUIRE(N <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED, "xent: %lld rows exceed the grid limit",
             (long long)N);
  if (N == 0 || Vs == 0) return TD_OK;
  xent_bwd_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      dlogits, logits, rowmax, sumexp, targets, v0, scale, Vs, Vvalid);
  TD_CUDA_LAUNCHED("xent_bwd");
  return TD_OK;
}
