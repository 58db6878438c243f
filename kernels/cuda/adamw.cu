/* adamw.cu — AdamW on the CUDA back-end, step for step as kernels/cpu/adamw.c
 * (torch.optim.AdamW 1.13, _single_tensor_adamw): the step's scalars are
 * formed on the host in double by the CPU's expressions, rounded to float
 * once, and applied in float in torch's order with explicitly rounded
 * operations (no contraction into FMA), as the CPU's SSE lanes do: the
 * results are the CPU's bit for bit. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

/* p = p·decay + neg_step·m' / (√v' / bc2_sqrt + eps), m' = b1·m + a1·g,
 * v' = b2·v + a2·g², g = g·gscale (all float32, each operation rounded);
 * p, g, m, v (n). One thread per element. */
static __global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                                    float *__restrict__ m, float *__restrict__ v, int64_t n,
                                    float gscale, float decay, float b1, float a1, float b2,
                                    float a2, float neg_step, float bc2_sqrt, float eps) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = __fmul_rn(g[i], gscale);
  float pi = __fmul_rn(p[i], decay);
  float mi = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(gi, a1));
  float vi = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(__fmul_rn(gi, gi), a2));
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
  m[i] = mi;
  v[i] = vi;
  p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(neg_step, mi), denom));
}

/* p, g, m, v (n); step t ≥ 1; g·gscale is the gradient:
 *   p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
 *   p += −(lr/(1−β1ᵗ))·m / (√v/√(1−β2ᵗ) + eps). */
td_status td_cuda_adamw(td_kernels *k, float *p, const float *g, float *m, float *v,
                        int64_t n, float gscale, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t) {
  TD_REQUIRE(t >= 1, TD_ERR_USAGE, "adamw: step must be >= 1, got %lld", (long long)t);
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "adamw: element count %lld < 0", (long long)n);
  unsigned nb;
  TD_CHECK(td_cuda_blocks(n, TD_CUDA_THREADS, "adamw", &nb));
  if (n == 0) return TD_OK;
  float decay = (float)(1.0 - (double)lr * (double)weight_decay);
  float a1 = (float)(1.0 - (double)beta1);
  float a2 = (float)(1.0 - (double)beta2);
  float neg_step = (float)(-((double)lr / (1.0 - pow((double)beta1, (double)t))));
  float bc2_sqrt = (float)sqrt(1.0 - pow((double)beta2, (double)t));
  adamw_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      p, g, m, v, n, gscale, decay, beta1, a1, beta2, a2, neg_step, bc2_sqrt, eps);
  TD_CUDA_LAUNCHED("adamw");
  return TD_OK;
}
