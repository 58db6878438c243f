/* pointwise.c — add, scale, the sum of squares (gradient norm), casts and
 * the strided copy of row blocks. */
#include <string.h>

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

/* dst = src converted, n elements; float32 -> bf16 rounds to nearest even. */
td_status td_cpu_cast(td_kernels *k, void *dst, td_dtype dt, const void *src, td_dtype st,
                      int64_t n) {
  if (dt == st) {
    if (n > 0 && dst != src) memcpy(dst, src, (size_t)n * td_dtype_size(dt));
    return TD_OK;
  }
  if (dt == TD_DTYPE_BF16) {
    td_bf16 *o = dst;
    const float *x = src;
#pragma omp parallel for simd schedule(static) if (n > TD_PW_MIN)
    for (int64_t i = 0; i < n; i++) o[i] = td_bf16_from_f32(x[i]);
  } else {
    float *o = dst;
    const td_bf16 *x = src;
#pragma omp parallel for simd schedule(static) if (n > TD_PW_MIN)
    for (int64_t i = 0; i < n; i++) o[i] = td_bf16_to_f32(x[i]);
  }
  return TD_OK;
}

/* dst row r = src row r, cols floats of rows rows, row strides ldd and lds
 * floats; no overlap. */
td_status td_cpu_copy2d(td_kernels *k, float *dst, int64_t ldd, const float *src, int64_t lds,
                        int64_t rows, int64_t cols) {
  TD_CHECK(td_kernels_copy2d_args(rows, cols, ldd, lds));
  if (rows == 0 || cols == 0) return TD_OK;
#pragma omp parallel for schedule(static) if (rows * cols > TD_PW_MIN)
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
  return TD_OK;
}

const float *td_cpu_param_f32(const void *p, td_dtype pt, float *tmp, int64_t n) {
  if (pt == TD_DTYPE_F32) return p;
  const td_bf16 *h = p;
  for (int64_t i = 0; i < n; i++) tmp[i] = td_bf16_to_f32(h[i]);
  return tmp;
}
