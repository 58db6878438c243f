/* rmsnorm.cu — RMSNorm over the last dimension (LLaMA), forward and
 * backward, on the CUDA back-end; the formulas of kernels/cpu/rmsnorm.c (row
 * sums in float). The dw sum over rows is deterministic: chunk partials in
 * the workspace, then the ordered column sum of colsum.cuh. */
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_internal.cuh"

/* out = x·r·w per row, r = 1/√(Σx²/C + eps); out (N, C) of type O, x (N, C),
 * w (C) of type P, rstd (N). One block per row, TD_CUDA_THREADS threads, each
 * thread strides over C; Σx² through td_block_sum. */
template <typename O, typename P>
static __global__ void rms_fwd_kernel(O *__restrict__ out, float *__restrict__ rstd,
                                      const float *__restrict__ x, const P *__restrict__ w,
                                      float eps, int64_t C) {
  int64_t n = blockIdx.x;
  const float *xr = x + n * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xr[c] * xr[c];
  float r = 1.0f / sqrtf(td_block_sum(s) / (float)C + eps);
  if (threadIdx.x == 0) rstd[n] = r;
  O *o = out + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) td_st(o, c, xr[c] * r * td_ld(w, c));
}

/* dx += r·(g − x̂·mean(g·x̂)) per row, x̂ = x·r, g = dout·w; dx, dout, x
 * (N, C), w (C) of type P, rstd (N). One block per row, TD_CUDA_THREADS
 * threads, each thread strides over C; Σ g·x̂ through td_block_sum. */
template <typename P>
static __global__ void rms_bwd_dx_kernel(float *__restrict__ dx, const float *__restrict__ dout,
                                         const float *__restrict__ x, const P *__restrict__ w,
                                         const float *__restrict__ rstd, int64_t C) {
  int64_t n = blockIdx.x;
  const float *d = dout + n * C, *xr = x + n * C;
  float *dxr = dx + n * C;
  float r = rstd[n];
  float sgx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sgx += d[c] * td_ld(w, c) * xr[c] * r;
  sgx = td_block_sum(sgx) / (float)C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dxr[c] += r * (d[c] * td_ld(w, c) - xr[c] * r * sgx);
}

/* pw[p, c] = Σ_{n in chunk p} dout[n,c]·x[n,c]·r_n, rows in order; dout, x
 * (N, C), rstd (N), pw (P, C), chunk p = rows [p·R, min(N, (p+1)·R)).
 * Grid (ceil(C/TD_CUDA_THREADS), P) of TD_CUDA_THREADS threads, one column a
 * thread. */
static __global__ void rms_bwd_part_kernel(float *__restrict__ pw,
                                           const float *__restrict__ dout,
                                           const float *__restrict__ x,
                                           const float *__restrict__ rstd, int64_t N,
                                           int64_t C, int64_t R) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int64_t n0 = (int64_t)blockIdx.y * R, n1 = n0 + R < N ? n0 + R : N;
  float aw = 0.0f;
  for (int64_t n = n0; n < n1; n++) aw += dout[n * C + c] * x[n * C + c] * rstd[n];
  pw[(int64_t)blockIdx.y * C + c] = aw;
}

template <typename O, typename P>
static void rms_fwd_launch(cudaStream_t st, unsigned rows, void *out, float *rstd,
                           const float *x, const void *w, float eps, int64_t C) {
  rms_fwd_kernel<<<rows, TD_CUDA_THREADS, 0, st>>>((O *)out, rstd, x, (const P *)w, eps, C);
}

/* out (N, C) of type ot, x (N, C); w (C) of type pt; rstd (N). */
td_status td_cuda_rmsnorm_fwd(td_kernels *k, void *out, td_dtype ot, float *rstd,
                              const float *x, const void *w, td_dtype pt, float eps,
                              int64_t N, int64_t C) {
  TD_REQUIRE(N >= 0 && C > 0 && eps >= 0.0f, TD_ERR_USAGE,
             "rmsnorm: expected N >= 0, C > 0, eps >= 0, got N=%lld C=%lld eps=%g",
             (long long)N, (long long)C, (double)eps);
  TD_REQUIRE(N <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED,
             "rmsnorm: %lld rows exceed the grid limit", (long long)N);
  if (N == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  unsigned rows = (unsigned)N;
  if (ot == TD_DTYPE_BF16 && pt == TD_DTYPE_BF16)
    rms_fwd_launch<__nv_bfloat16, __nv_bfloat16>(st, rows, out, rstd, x, w, eps, C);
  else if (ot == TD_DTYPE_BF16)
    rms_fwd_launch<__nv_bfloat16, float>(st, rows, out, rstd, x, w, eps, C);
  else if (pt == TD_DTYPE_BF16)
    rms_fwd_launch<float, __nv_bfloat16>(st, rows, out, rstd, x, w, eps, C);
  else
    rms_fwd_launch<float, float>(st, rows, out, rstd, x, w, eps, C);
  TD_CUDA_LAUNCHED("rmsnorm_fwd");
  return TD_OK;
}

/* dx, dout, x (N, C); dw (C) +=; w (C) of type pt; rstd (N). */
td_status td_cuda_rmsnorm_bwd(td_kernels *k, float *dx, float *dw, const float *dout,
                              const float *x, const void *w, td_dtype pt, const float *rstd,
                              int64_t N, int64_t C) {
  TD_CHECK(td_cuda_rows_args("rmsnorm", N, C));
  if (N == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (pt == TD_DTYPE_BF16)
    rms_bwd_dx_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, st>>>(
        dx, dout, x, (const __nv_bfloat16 *)w, rstd, C);
  else
    rms_bwd_dx_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, st>>>(dx, dout, x, (const float *)w,
                                                               rstd, C);
  TD_CUDA_LAUNCHED("rmsnorm_bwd_dx");

  int64_t R = td_colsum_rows(N), P = (N + R - 1) / R;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(C, TD_CUDA_THREADS, "rmsnorm_bwd", &nb));
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(P * C) * sizeof(float), &ws));
  float *pw = (float *)ws;
  rms_bwd_part_kernel<<<dim3(nb, (unsigned)P), TD_CUDA_THREADS, 0, st>>>(pw, dout, x, rstd, N,
                                                                         C, R);
  TD_CUDA_LAUNCHED("rmsnorm_bwd_part");
  TD_CHECK(td_cuda_colsum_add(k, dw, pw, P, C));
  return TD_OK;
}
