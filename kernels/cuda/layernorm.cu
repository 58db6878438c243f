/* layernorm.cu — LayerNorm over the last dimension (eps 1e-5), forward and
 * backward, on the CUDA back-end; the formulas of kernels/cpu/layernorm.c
 * (row statistics in float, two passes: the mean, then Σ(x−μ)²). The dw/db
 * sums over rows are deterministic: chunk partials in the workspace, then
 * the ordered column sum of colsum.cuh. */
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_internal.cuh"

#define TD_LN_EPS 1e-5f

/* out = (x − μ)·r·w + b per row, μ = Σx/C, r = 1/√(Σ(x−μ)²/C + eps);
 * out (N, C) of type O, x (N, C), w, b (C) of type P, mean, rstd (N).
 * One block per row, TD_CUDA_THREADS threads, each thread strides over C;
 * the two sums through td_block_sum. */
template <typename O, typename P>
static __global__ void ln_fwd_kernel(O *__restrict__ out, float *__restrict__ mean,
                                     float *__restrict__ rstd, const float *__restrict__ x,
                                     const P *__restrict__ w, const P *__restrict__ b,
                                     int64_t C) {
  int64_t n = blockIdx.x;
  const float *xr = x + n * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  float mu = td_block_sum(s) / (float)C;
  float v = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (xr[c] - mu) * (xr[c] - mu);
  float r = 1.0f / sqrtf(td_block_sum(v) / (float)C + TD_LN_EPS);
  if (threadIdx.x == 0) {
    mean[n] = mu;
    rstd[n] = r;
  }
  O *o = out + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    td_st(o, c, (xr[c] - mu) * r * td_ld(w, c) + td_ld(b, c));
}

/* dx += r·(g − mean(g) − x̂·mean(g·x̂)) per row, x̂ = (x − μ)·r, g = dout·w;
 * dx, dout, x (N, C), w (C) of type P, mean, rstd (N). One block per row,
 * TD_CUDA_THREADS threads, each thread strides over C; the two row sums
 * through td_block_sum. */
template <typename P>
static __global__ void ln_bwd_dx_kernel(float *__restrict__ dx, const float *__restrict__ dout,
                                        const float *__restrict__ x, const P *__restrict__ w,
                                        const float *__restrict__ mean,
                                        const float *__restrict__ rstd, int64_t C) {
  int64_t n = blockIdx.x;
  const float *d = dout + n * C, *xr = x + n * C;
  float *dxr = dx + n * C;
  float mu = mean[n], r = rstd[n];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float g = d[c] * td_ld(w, c);
    sg += g;
    sgx += g * (xr[c] - mu) * r;
  }
  sg = td_block_sum(sg) / (float)C;
  sgx = td_block_sum(sgx) / (float)C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float xh = (xr[c] - mu) * r;
    dxr[c] += r * (d[c] * td_ld(w, c) - sg - xh * sgx);
  }
}

/* pw[p, c] = Σ_{n in chunk p} dout[n,c]·(x[n,c] − μ_n)·r_n and
 * pb[p, c] = Σ_{n in chunk p} dout[n,c], rows in order; dout, x (N, C),
 * mean, rstd (N), pw, pb (P, C), chunk p = rows [p·R, min(N, (p+1)·R)).
 * Grid (ceil(C/TD_CUDA_THREADS), P) of TD_CUDA_THREADS threads, one column a
 * thread. */
static __global__ void ln_bwd_part_kernel(float *__restrict__ pw, float *__restrict__ pb,
                                          const float *__restrict__ dout,
                                          const float *__restrict__ x,
                                          const float *__restrict__ mean,
                                          const float *__restrict__ rstd, int64_t N, int64_t C,
                                          int64_t R) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int64_t n0 = (int64_t)blockIdx.y * R, n1 = n0 + R < N ? n0 + R : N;
  float aw = 0.0f, ab = 0.0f;
  for (int64_t n = n0; n < n1; n++) {
    float d = dout[n * C + c];
    aw += d * (x[n * C + c] - mean[n]) * rstd[n];
    ab += d;
  }
  pw[(int64_t)blockIdx.y * C + c] = aw;
  pb[(int64_t)blockIdx.y * C + c] = ab;
}

template <typename O, typename P>
static void ln_fwd_launch(cudaStream_t st, unsigned rows, void *out, float *mean, float *rstd,
                          const float *x, const void *w, const void *b, int64_t C) {
  ln_fwd_kernel<<<rows, TD_CUDA_THREADS, 0, st>>>((O *)out, mean, rstd, x, (const P *)w,
                                                  (const P *)b, C);
}

/* out (N, C) of type ot, x (N, C); w, b (C) of type pt; mean, rstd (N). */
td_status td_cuda_layernorm_fwd(td_kernels *k, void *out, td_dtype ot, float *mean,
                                float *rstd, const float *x, const void *w, const void *b,
                                td_dtype pt, int64_t N, int64_t C) {
  TD_CHECK(td_cuda_rows_args("layernorm", N, C));
  if (N == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  unsigned rows = (unsigned)N;
  if (ot == TD_DTYPE_BF16 && pt == TD_DTYPE_BF16)
    ln_fwd_launch<__nv_bfloat16, __nv_bfloat16>(st, rows, out, mean, rstd, x, w, b, C);
  else if (ot == TD_DTYPE_BF16)
    ln_fwd_launch<__nv_bfloat16, float>(st, rows, out, mean, rstd, x, w, b, C);
  else if (pt == TD_DTYPE_BF16)
    ln_fwd_launch<float, __nv_bfloat16>(st, rows, out, mean, rstd, x, w, b, C);
  else
    ln_fwd_launch<float, float>(st, rows, out, mean, rstd, x, w, b, C);
  TD_CUDA_LAUNCHED("layernorm_fwd");
  return TD_OK;
}

/* dx, dout, x (N, C); dw, db (C) +=; w (C) of type pt; mean, rstd (N). */
td_status td_cuda_layernorm_bwd(td_kernels *k, float *dx, float *dw, float *db,
                                const float *dout, const float *x, const void *w,
                                td_dtype pt, const float *mean, const float *rstd, int64_t N,
                                int64_t C) {
  TD_CHECK(td_cuda_rows_args("layernorm", N, C));
  if (N == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (pt == TD_DTYPE_BF16)
    ln_bwd_dx_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, st>>>(
        dx, dout, x, (const __nv_bfloat16 *)w, mean, rstd, C);
  else
    ln_bwd_dx_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, st>>>(dx, dout, x, (const float *)w,
                                                              mean, rstd, C);
  TD_CUDA_LAUNCHED("layernorm_bwd_dx");

  int64_t R = td_colsum_rows(N), P = (N + R - 1) / R;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(C, TD_CUDA_THREADS, "layernorm_bwd", &nb));
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(2 * P * C) * sizeof(float), &ws));
  float *pw = (float *)ws, *pb = pw + P * C;
  ln_bwd_part_kernel<<<dim3(nb, (unsigned)P), TD_CUDA_THREADS, 0, st>>>(pw, pb, dout, x, mean,
                                                                        rstd, N, C, R);
  TD_CUDA_LAUNCHED("layernorm_bwd_part");
  TD_CHECK(td_cuda_colsum_add(k, dw, pw, P, C));
  TD_CHECK(td_cuda_colsum_add(k, db, pb, P, C));
  return TD_OK;
}
