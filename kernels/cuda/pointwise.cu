/* pointwise.cu — the CUDA back-end's element-wise ops (cast, copy2d, add, scale), the
 * sum of squares of the gradient norm, the bias of the linear layers forward
 * and backward, and td_cuda_colsum_add, the ordered column sum that every
 * backward column reduction ends with (colsum.cuh). Mirrors
 * kernels/cpu/pointwise.c and the bias ops of kernels/cpu/matmul.c. */
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_internal.cuh"

#define TD_SUMSQ_BLOCKS 1024 /* blocks of the first sumsq pass, at most */
#define TD_SUMSQ_WARPS (TD_CUDA_THREADS / 32)

/* dst[i] = src[i] converted (bf16 rounds to nearest even); dst, src (n), of
 * different types (no overlap). One thread per element. */
template <typename D, typename S>
static __global__ void cast_kernel(D *__restrict__ dst, const S *__restrict__ src, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) td_st(dst, i, td_ld(src, i));
}

/* dst[r, c] = src[r, c]; dst (rows, cols) of row stride ldd, src of row
 * stride lds, no overlap. One thread per element, c fastest. */
static __global__ void copy2d_kernel(float *__restrict__ dst, int64_t ldd,
                                     const float *__restrict__ src, int64_t lds, int64_t rows,
                                     int64_t cols) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  int64_t r = i / cols, c = i % cols;
  dst[r * ldd + c] = src[r * lds + c];
}

/* out = a + b; out, a, b (n), out may alias a or b (no __restrict__: each
 * element is read before it is written, by the same thread). One thread per
 * element. */
static __global__ void add_kernel(float *out, const float *a, const float *b, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

/* x *= s; x (n). One thread per element. */
static __global__ void scale_kernel(float *__restrict__ x, float s, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

/* part[w] = Σ x² (double) over warp w's grid-stride share of x; x (n),
 * part (gridDim.x · TD_SUMSQ_WARPS), warp w = blockIdx.x·TD_SUMSQ_WARPS + warp
 * in block. TD_CUDA_THREADS threads a block, each striding over x by the
 * whole grid; lanes summed by td_warp_sum_f64. The grid size depends on n
 * only, so the partials do too. */
static __global__ void sumsq_part_kernel(double *__restrict__ part, const float *__restrict__ x,
                                         int64_t n) {
  double acc = 0.0;
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    double v = (double)x[i];
    acc += v * v;
  }
  acc = td_warp_sum_f64(acc);
  if ((threadIdx.x & 31) == 0)
    part[(int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)] = acc;
}

/* *out = Σ part (np doubles) in a fixed order: one block of one warp, lane l
 * sums part[l], part[l+32], ... in order, then td_warp_sum_f64. */
static __global__ void sumsq_final_kernel(double *__restrict__ out,
                                          const double *__restrict__ part, int64_t np) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < np; i += 32) acc += part[i];
  acc = td_warp_sum_f64(acc);
  if (threadIdx.x == 0) *out = acc;
}

/* out (M,N) += bias (N) on every row; bias of type P. One thread per element
 * of out. */
template <typename P>
static __global__ void bias_fwd_kernel(float *__restrict__ out, const P *__restrict__ bias,
                                       int64_t M, int64_t N) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < M * N) out[i] += td_ld(bias, i % N);
}

/* part[p, j] = Σ_{m in chunk p} dout[m, j], rows in order; dout (M,N), part
 * (P, N), chunk p = rows [p·R, min(M, (p+1)·R)). Grid (ceil(N/TD_CUDA_THREADS),
 * P) of TD_CUDA_THREADS threads, one column a thread. */
static __global__ void bias_bwd_part_kernel(float *__restrict__ part,
                                            const float *__restrict__ dout, int64_t M,
                                            int64_t N, int64_t R) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  int64_t m0 = (int64_t)blockIdx.y * R, m1 = m0 + R < M ? m0 + R : M;
  float acc = 0.0f;
  for (int64_t m = m0; m < m1; m++) acc += dout[m * N + j];
  part[(int64_t)blockIdx.y * N + j] = acc;
}

/* dst[j] += Σ_p part[p, j], p = 0 .. np−1 in order; dst (N), part (np, N).
 * One thread per column. */
static __global__ void colsum_add_kernel(float *__restrict__ dst, const float *__restrict__ part,
                                         int64_t np, int64_t N) {
  int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= N) return;
  float acc = 0.0f;
  for (int64_t p = 0; p < np; p++) acc += part[p * N + j];
  dst[j] += acc;
}

td_status td_cuda_colsum_add(td_kernels *k, float *dst, const float *part, int64_t nparts,
                             int64_t N) {
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N, TD_CUDA_THREADS, "colsum", &nb));
  if (N == 0) return TD_OK;
  colsum_add_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(dst, part, nparts, N);
  TD_CUDA_LAUNCHED("colsum_add");
  return TD_OK;
}

/* dst = src converted, n elements; the same type is a copy (dst may then
 * equal src), f32 <-> bf16 a kernel (dst must not overlap src). */
td_status td_cuda_cast(td_kernels *k, void *dst, td_dtype dt, const void *src, td_dtype st,
                       int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "cast: element count %lld < 0", (long long)n);
  td_cuda_state *s = td_cuda_st(k);
  if (n == 0) return TD_OK;
  if (dt == st) {
    if (dst != src)
      TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)n * td_dtype_size(dt),
                                    cudaMemcpyDeviceToDevice, s->stream));
    return TD_OK;
  }
  TD_REQUIRE(dst != src, TD_ERR_USAGE, "cast: in place between different types");
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "cast", &nb));
  if (dt == TD_DTYPE_BF16)
    cast_kernel<<<nb, TD_CUDA_THREADS, 0, s->stream>>>((__nv_bfloat16 *)dst, (const float *)src,
                                                       n);
  else
    cast_kernel<<<nb, TD_CUDA_THREADS, 0, s->stream>>>((float *)dst,
                                                       (const __nv_bfloat16 *)src, n);
  TD_CUDA_LAUNCHED("cast");
  return TD_OK;
}

/* dst row r = src row r, cols floats of rows rows, row strides ldd and lds;
 * a kernel rather than cudaMemcpy2DAsync, which the emulated device lacks. */
td_status td_cuda_copy2d(td_kernels *k, float *dst, int64_t ldd, const float *src, int64_t lds,
                         int64_t rows, int64_t cols) {
  TD_CHECK(td_kernels_copy2d_args(rows, cols, ldd, lds));
  unsigned nb;
  TD_CHECK(td_cuda_blocks(rows * cols, TD_CUDA_THREADS, "copy2d", &nb));
  if (rows == 0 || cols == 0) return TD_OK;
  copy2d_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(dst, ldd, src, lds, rows,
                                                                    cols);
  TD_CUDA_LAUNCHED("copy2d");
  return TD_OK;
}

/* out = a + b, n elements; out may alias a or b. */
td_status td_cuda_add(td_kernels *k, float *out, const float *a, const float *b, int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "add: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "add", &nb));
  if (n == 0) return TD_OK;
  add_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(out, a, b, n);
  TD_CUDA_LAUNCHED("add");
  return TD_OK;
}

/* x *= s, n elements. */
td_status td_cuda_scale(td_kernels *k, float *x, float s, int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "scale: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "scale", &nb));
  if (n == 0) return TD_OK;
  scale_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(x, s, n);
  TD_CUDA_LAUNCHED("scale");
  return TD_OK;
}

/* *out (host) = Σ x², n elements, in double: per-warp partials of a grid
 * whose size depends on n only, summed in a fixed order by one warp, then
 * copied to the host through the pinned s->host_f64. Waits for the stream. */
td_status td_cuda_sumsq(td_kernels *k, const float *x, int64_t n, double *out) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "sumsq: element count %lld < 0", (long long)n);
  td_cuda_state *s = td_cuda_st(k);
  *out = 0.0;
  if (n == 0) return TD_OK;
  int64_t nblk = (n + TD_CUDA_THREADS - 1) / TD_CUDA_THREADS;
  if (nblk > TD_SUMSQ_BLOCKS) nblk = TD_SUMSQ_BLOCKS;
  int64_t np = nblk * TD_SUMSQ_WARPS;
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(np + 1) * sizeof(double), &ws));
  double *part = (double *)ws, *res = part + np;
  sumsq_part_kernel<<<(unsigned)nblk, TD_CUDA_THREADS, 0, s->stream>>>(part, x, n);
  TD_CUDA_LAUNCHED("sumsq_part");
  sumsq_final_kernel<<<1, 32, 0, s->stream>>>(res, part, np);
  TD_CUDA_LAUNCHED("sumsq_final");
  TD_CUDA_CHECK(cudaMemcpyAsync(s->host_f64, res, sizeof(double), cudaMemcpyDeviceToHost,
                                s->stream));
  TD_CUDA_CHECK(cudaStreamSynchronize(s->stream));
  *out = *s->host_f64;
  return TD_OK;
}

/* out (M,N) += bias (N, type pt) on every row. */
td_status td_cuda_bias_fwd(td_kernels *k, float *out, const void *bias, td_dtype pt,
                           int64_t M, int64_t N) {
  TD_REQUIRE(M >= 0 && N >= 0, TD_ERR_USAGE, "bias: expected M, N >= 0, got M=%lld N=%lld",
             (long long)M, (long long)N);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(M * N, TD_CUDA_THREADS, "bias_fwd", &nb));
  if (M == 0 || N == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (pt == TD_DTYPE_BF16)
    bias_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(out, (const __nv_bfloat16 *)bias, M, N);
  else
    bias_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(out, (const float *)bias, M, N);
  TD_CUDA_LAUNCHED("bias_fwd");
  return TD_OK;
}

/* dbias (N) += Σ_m dout (M,N): chunk partials in the workspace, then the
 * ordered column sum (colsum.cuh). */
td_status td_cuda_bias_bwd(td_kernels *k, float *dbias, const float *dout, int64_t M,
                           int64_t N) {
  TD_REQUIRE(M >= 0 && N >= 0, TD_ERR_USAGE, "bias: expected M, N >= 0, got M=%lld N=%lld",
             (long long)M, (long long)N);
  if (M == 0 || N == 0) return TD_OK;
  int64_t R = td_colsum_rows(M), P = (M + R - 1) / R;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N, TD_CUDA_THREADS, "bias_bwd", &nb));
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(P * N) * sizeof(float), &ws));
  float *part = (float *)ws;
  bias_bwd_part_kernel<<<dim3(nb, (unsigned)P), TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      part, dout, M, N, R);
  TD_CUDA_LAUNCHED("bias_bwd_part");
  TD_CHECK(td_cuda_colsum_add(k, dbias, part, P, N));
  return TD_OK;
}
