/* pointwise.c — add, scale and the sum of squares (gradient norm). */
#include "kernels/cpu/cpu_internal.h"

#define TD_PW_MIN 65536 /* below this, one thread */

/* out = a + b, n elements; out may alias a or b (same index only). */
td_status td_cpu_add(td_kernels *k, float *out, const float *a, const float *b,
                     int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > TD_PW_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  return TD_OK;
}

/* x *= s, n elements. */
td_status td_cpu_scale(td_kernels *k, float *x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > TD_PW_MIN)
  for (int64_t i = 0; i < n; i++) x[i] *= s;
  return TD_OK;
}

/* *out = Σ x², n elements, accumulated in double. */
td_status td_cpu_sumsq(td_kernels *k, const float *x, int64_t n, double *out) {
  double acc = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : acc) if (n > TD_PW_MIN)
  for (int64_t i = 0; i < n; i++) acc += (double)x[i] * (double)x[i];
  *out = acc;
  return TD_OK;
}
