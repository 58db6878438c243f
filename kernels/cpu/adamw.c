/* adamw.c — AdamW, step for step as torch.optim.AdamW (1.13,
 * _single_tensor_adamw): the step's scalars are formed in double as Python
 * does, rounded to float once, and applied in float in torch's order. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

#define TD_ADAMW_CHUNK 16384 /* elements per task */

/* The update on [0, n): sqrtf without errno so that the loop vectorises
 * (v ≥ 0, so errno could never be set anyway). No FMA contraction on the
 * baseline target, so every product is rounded as torch's are. */
__attribute__((optimize("-fno-math-errno"))) static void adamw_chunk(
    float *p, const float *g, float *m, float *v, int64_t n, float decay, float b1,
    float a1, float b2, float a2, float neg_step, float bc2_sqrt, float eps) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i];
    float pi = p[i] * decay;
    float mi = m[i] * b1 + gi * a1;
    float vi = v[i] * b2 + gi * gi * a2;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + neg_step * mi / denom;
  }
}

/* p, g, m, v (n); step t ≥ 1:
 *   p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
 *   p += −(lr/(1−β1ᵗ))·m / (√v/√(1−β2ᵗ) + eps). */
td_status td_cpu_adamw(td_kernels *k, float *p, const float *g, float *m, float *v,
                       int64_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t t) {
  TD_REQUIRE(t >= 1, TD_ERR_USAGE, "adamw: step must be >= 1, got %lld", (long long)t);
  double bc1 = 1.0 - pow((double)beta1, (double)t);
  double bc2 = 1.0 - pow((double)beta2, (double)t);
  const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
  const float b1 = beta1, a1 = (float)(1.0 - (double)beta1);
  const float b2 = beta2, a2 = (float)(1.0 - (double)beta2);
  const float neg_step = (float)(-((double)lr / bc1));
  const float bc2_sqrt = (float)sqrt(bc2);
  int64_t nch = (n + TD_ADAMW_CHUNK - 1) / TD_ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (nch > 4)
  for (int64_t c = 0; c < nch; c++) {
    int64_t i0 = c * TD_ADAMW_CHUNK;
    int64_t len = n - i0 < TD_ADAMW_CHUNK ? n - i0 : TD_ADAMW_CHUNK;
    adamw_chunk(p + i0, g + i0, m + i0, v + i0, len, decay, b1, a1, b2, a2, neg_step,
                bc2_sqrt, eps);
  }
  return TD_OK;
}
