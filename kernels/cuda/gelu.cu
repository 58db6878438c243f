/* gelu.cu — GELU, tanh approximation, forward and backward, on the CUDA
 * back-end; the formulas of kernels/cpu/gelu.c: with e = exp(2u) and
 * q = 2/(e+1), 1 + tanh u = e·q and 1 − tanh²u = e·q², free of
 * cancellation in either tail. The exp argument is clamped to [−87, 88] as
 * the CPU's exp clamps it (cpu_simd.h), so e stays finite and e·q never
 * becomes ∞·0. */
#include "kernels/cuda/cuda_internal.cuh"

#define TD_GELU_K 0.7978845608028654f /* √(2/π) */
#define TD_GELU_C 0.044715f

/* out = ½·x·(1 + tanh u), u = √(2/π)·(x + 0.044715·x³); out (n) of type O,
 * x (n); a float32 out may alias x (no __restrict__: each element is read
 * before it is written, by the same thread). One thread per element. */
template <typename O>
static __global__ void gelu_fwd_kernel(O *out, const float *x, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float xi = x[i];
  float u = TD_GELU_K * (xi + TD_GELU_C * xi * xi * xi);
  float e = td_expf(2.0f * u);
  float q = 2.0f / (e + 1.0f);
  td_st(out, i, 0.5f * xi * (e * q));
}

/* dx = dout·(½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715·x²));
 * dx, x, dout (n); dx may alias dout (no __restrict__, as above). One thread
 * per element. */
static __global__ void gelu_bwd_kernel(float *dx, const float *x, const float *dout,
                                       int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float xi = x[i];
  float u = TD_GELU_K * (xi + TD_GELU_C * xi * xi * xi);
  float e = td_expf(2.0f * u);
  float q = 2.0f / (e + 1.0f);
  float onepth = e * q; /* 1 + tanh u */
  float du = TD_GELU_K * (1.0f + 3.0f * TD_GELU_C * xi * xi);
  dx[i] = dout[i] * (0.5f * onepth + 0.5f * xi * (onepth * q) * du);
}

/* out (n, type ot), x (n); a float32 out may alias x. */
td_status td_cuda_gelu_fwd(td_kernels *k, void *out, td_dtype ot, const float *x, int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "gelu: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "gelu_fwd", &nb));
  if (n == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (ot == TD_DTYPE_BF16)
    gelu_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)out, x, n);
  else
    gelu_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((float *)out, x, n);
  TD_CUDA_LAUNCHED("gelu_fwd");
  return TD_OK;
}

/* dx, x, dout (n); dx may alias dout. */
td_status td_cuda_gelu_bwd(td_kernels *k, float *dx, const float *x, const float *dout,
                           int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "gelu: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "gelu_bwd", &nb));
  if (n == 0) return TD_OK;
  gelu_bwd_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(dx, x, dout, n);
  TD_CUDA_LAUNCHED("gelu_bwd");
  return TD_OK;
}
