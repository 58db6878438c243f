/* rmsnorm.c — RMSNorm over the last dimension (LLaMA), forward and
 * backward. Row sums in float with vectorised partial sums, as layernorm.c;
 * the dw reduction over rows is owned by column blocks (deterministic). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

#define TD_RMS_COLS 128 /* columns per task of the dw reduction */

/* r = 1/√(Σx²/C + eps). */
TD_CPU_CLONES static float rms_rstd(const float *x, float eps, int64_t C) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; c++) s += x[c] * x[c];
  return 1.0f / sqrtf(s / (float)C + eps);
}

/* One row: o = x·r·w, float32 or rounded to bf16. */
TD_CPU_CLONES static void rms_fwd_row(float *o, float *rstd, const float *x, const float *w,
                                      float eps, int64_t C) {
  float r = rms_rstd(x, eps, C);
  *rstd = r;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = x[c] * r * w[c];
}

TD_CPU_CLONES static void rms_fwd_row16(td_bf16 *o, float *rstd, const float *x,
                                        const float *w, float eps, int64_t C) {
  float r = rms_rstd(x, eps, C);
  *rstd = r;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = td_bf16_from_f32(x[c] * r * w[c]);
}

/* out (N, C) of type ot, x (N, C); w (C) of type pt; rstd (N). */
td_status td_cpu_rmsnorm_fwd(td_kernels *k, void *out, td_dtype ot, float *rstd,
                             const float *x, const void *wp, td_dtype pt, float eps,
                             int64_t N, int64_t C) {
  float *tmp = NULL;
  TD_REQUIRE(N >= 0 && C > 0 && eps >= 0.0f, TD_ERR_USAGE,
             "rmsnorm: expected N >= 0, C > 0, eps >= 0, got N=%lld C=%lld eps=%g",
             (long long)N, (long long)C, (double)eps);
  if (pt != TD_DTYPE_F32 && !(tmp = malloc((size_t)(C + 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "rmsnorm: out of memory for %lld parameters", (long long)C);
  const float *w = td_cpu_param_f32(wp, pt, tmp, C);
  if (ot == TD_DTYPE_BF16) {
    td_bf16 *o = out;
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int64_t n = 0; n < N; n++) rms_fwd_row16(o + n * C, rstd + n, x + n * C, w, eps, C);
  } else {
    float *o = out;
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int64_t n = 0; n < N; n++) rms_fwd_row(o + n * C, rstd + n, x + n * C, w, eps, C);
  }
  free(tmp);
  return TD_OK;
}

/* One row of dx: with x̂ = x·r and g = dout·w, dx += r·(g − x̂·mean(g·x̂)). */
TD_CPU_CLONES static void rms_bwd_row(float *dx, const float *dout, const float *x,
                                      const float *w, float r, int64_t C) {
  float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
  for (int64_t c = 0; c < C; c++) sgx += dout[c] * w[c] * x[c] * r;
  sgx /= (float)C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) dx[c] += r * (dout[c] * w[c] - x[c] * r * sgx);
}

/* Columns [c0, c0+cn) of dw += Σ_n dout·x̂, rows in order. */
TD_CPU_CLONES static void rms_bwd_cols(float *dw, const float *dout, const float *x,
                                       const float *rstd, int64_t N, int64_t C, int64_t c0,
                                       int64_t cn) {
  float aw[TD_RMS_COLS];
  for (int64_t c = 0; c < cn; c++) aw[c] = 0.0f;
  for (int64_t n = 0; n < N; n++) {
    const float *d = dout + n * C + c0, *xr = x + n * C + c0;
    float r = rstd[n];
#pragma omp simd
    for (int64_t c = 0; c < cn; c++) aw[c] += d[c] * xr[c] * r;
  }
  for (int64_t c = 0; c < cn; c++) dw[c0 + c] += aw[c];
}

/* dx, dout, x (N, C); dw, w (C; w of type pt); rstd (N). dw: threads own
 * column blocks, so its sums do not depend on the thread count. */
td_status td_cpu_rmsnorm_bwd(td_kernels *k, float *dx, float *dw, const float *dout,
                             const float *x, const void *wp, td_dtype pt, const float *rstd,
                             int64_t N, int64_t C) {
  float *tmp = NULL;
  TD_REQUIRE(N >= 0 && C > 0, TD_ERR_USAGE, "rmsnorm: expected N >= 0, C > 0, got N=%lld C=%lld",
             (long long)N, (long long)C);
  if (pt != TD_DTYPE_F32 && !(tmp = malloc((size_t)(C + 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "rmsnorm: out of memory for %lld parameters", (long long)C);
  const float *w = td_cpu_param_f32(wp, pt, tmp, C);
  int64_t nblk = (C + TD_RMS_COLS - 1) / TD_RMS_COLS;
#pragma omp parallel if (N * C > 16384)
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; n++)
      rms_bwd_row(dx + n * C, dout + n * C, x + n * C, w, rstd[n], C);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * TD_RMS_COLS;
      rms_bwd_cols(dw, dout, x, rstd, N, C, c0, C - c0 < TD_RMS_COLS ? C - c0 : TD_RMS_COLS);
    }
  }
  free(tmp);
  return TD_OK;
}
