/* swiglu.cu — the SwiGLU gate of the LLaMA MLP, forward and backward, on the
 * CUDA back-end; the formulas of kernels/cpu/swiglu.c. The sigmoid is formed
 * from e = exp(−|g|) ≤ 1 only (exp's argument clamped below at −87 as the
 * CPU's exp clamps it): σ(g) = 1/(1+e) for g ≥ 0, e/(1+e) for g < 0, and
 * 1 − σ(g) is the other one of the two. Results below FLT_MIN in magnitude
 * are flushed to 0, as on the CPU. */
#include "kernels/cuda/cuda_internal.cuh"

#define TD_SWIGLU_TINY 1.17549435e-38f /* FLT_MIN */

/* x, or 0 when |x| < FLT_MIN. */
static __device__ __forceinline__ float flush_tiny(float x) {
  return fabsf(x) < TD_SWIGLU_TINY ? 0.0f : x;
}

/* out = silu(g)·u = g·σ(g)·u; out (n) of type O, g, u (n); a float32 out may
 * alias g or u (no __restrict__: each element is read before it is written,
 * by the same thread). One thread per element. */
template <typename O>
static __global__ void swiglu_fwd_kernel(O *out, const float *g, const float *u, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i];
  float e = td_expf(-fabsf(gi));
  float q = 1.0f / (1.0f + e);
  float sig = gi >= 0.0f ? q : e * q;
  td_st(out, i, flush_tiny(gi * sig * u[i]));
}

/* du = dout·silu(g); dg = dout·u·σ(g)·(1 + g·(1 − σ(g))); dg, du, dout, g,
 * u (n); dg and du may alias any of the inputs (no __restrict__: a thread
 * reads all of element i before writing it). One thread per element. */
static __global__ void swiglu_bwd_kernel(float *dg, float *du, const float *dout,
                                         const float *g, const float *u, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i], ui = u[i], di = dout[i];
  float e = td_expf(-fabsf(gi));
  float q = 1.0f / (1.0f + e);
  float sig = gi >= 0.0f ? q : e * q;  /* σ(g) */
  float sigc = gi >= 0.0f ? e * q : q; /* 1 − σ(g) */
  float silu = gi * sig;
  float dgi = flush_tiny(di * ui * (sig * (1.0f + gi * sigc)));
  float dui = flush_tiny(di * silu);
  dg[i] = dgi;
  du[i] = dui;
}

/* out (n, type ot), g, u (n); a float32 out may alias g or u. */
td_status td_cuda_swiglu_fwd(td_kernels *k, void *out, td_dtype ot, const float *g,
                             const float *u, int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "swiglu: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "swiglu_fwd", &nb));
  if (n == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (ot == TD_DTYPE_BF16)
    swiglu_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)out, g, u, n);
  else
    swiglu_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((float *)out, g, u, n);
  TD_CUDA_LAUNCHED("swiglu_fwd");
  return TD_OK;
}

/* dg, du, dout, g, u (n); dg and du may alias any of the inputs (same
 * elements), not each other. */
td_status td_cuda_swiglu_bwd(td_kernels *k, float *dg, float *du, const float *dout,
                             const float *g, const float *u, int64_t n) {
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "swiglu: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "swiglu_bwd", &nb));
  if (n == 0) return TD_OK;
  swiglu_bwd_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(dg, du, dout, g, u, n);
  TD_CUDA_LAUNCHED("swiglu_bwd");
  return TD_OK;
}
