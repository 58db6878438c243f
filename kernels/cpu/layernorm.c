/* layernorm.c — LayerNorm over the last dimension (eps 1e-5), forward and
 * backward. Row statistics in float with vectorised (16-way) partial sums. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

#define TD_LN_EPS 1e-5f
#define TD_LN_COLS 128 /* columns per task of the dw/db reduction */

/* Row statistics: μ = Σx/C, σ² = Σ(x−μ)²/C, r = 1/√(σ²+eps). */
TD_CPU_CLONES static void ln_stats(float *mean, float *rstd, const float *x, int64_t C) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; c++) s += x[c];
  float mu = s / (float)C;
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < C; c++) v += (x[c] - mu) * (x[c] - mu);
  *mean = mu;
  *rstd = 1.0f / sqrtf(v / (float)C + TD_LN_EPS);
}

/* One row: o = (x−μ)·r·w + b, float32 or rounded to bf16. */
TD_CPU_CLONES static void ln_fwd_row(float *o, float *mean, float *rstd, const float *x,
                                     const float *w, const float *b, int64_t C) {
  ln_stats(mean, rstd, x, C);
  float mu = *mean, r = *rstd;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = (x[c] - mu) * r * w[c] + b[c];
}

TD_CPU_CLONES static void ln_fwd_row16(td_bf16 *o, float *mean, float *rstd, const float *x,
                                       const float *w, const float *b, int64_t C) {
  ln_stats(mean, rstd, x, C);
  float mu = *mean, r = *rstd;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) o[c] = td_bf16_from_f32((x[c] - mu) * r * w[c] + b[c]);
}

/* out (N, C) of type ot, x (N, C); w, b (C) of type pt; mean, rstd (N). */
td_status td_cpu_layernorm_fwd(td_kernels *k, void *out, td_dtype ot, float *mean,
                               float *rstd, const float *x, const void *wp, const void *bp,
                               td_dtype pt, int64_t N, int64_t C) {
  float *tmp = NULL;
  if (pt != TD_DTYPE_F32 && !(tmp = malloc((size_t)(2 * C + 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "layernorm: out of memory for %lld parameters", (long long)C);
  const float *w = td_cpu_param_f32(wp, pt, tmp, C), *b = td_cpu_param_f32(bp, pt, tmp + C, C);
  if (ot == TD_DTYPE_BF16) {
    td_bf16 *o = out;
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int64_t n = 0; n < N; n++) ln_fwd_row16(o + n * C, mean + n, rstd + n, x + n * C, w, b, C);
  } else {
    float *o = out;
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int64_t n = 0; n < N; n++) ln_fwd_row(o + n * C, mean + n, rstd + n, x + n * C, w, b, C);
  }
  free(tmp);
  return TD_OK;
}

/* One row of dx: with x̂ = (x−μ)·r and g = dout·w,
 * dx += r·(g − mean(g) − x̂·mean(g·x̂)). */
TD_CPU_CLONES static void ln_bwd_row(float *dx, const float *dout, const float *x,
                                     const float *w, float mu, float r, int64_t C) {
  float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t c = 0; c < C; c++) {
    float g = dout[c] * w[c];
    sg += g;
    sgx += g * (x[c] - mu) * r;
  }
  sg /= (float)C;
  sgx /= (float)C;
#pragma omp simd
  for (int64_t c = 0; c < C; c++) {
    float xh = (x[c] - mu) * r;
    dx[c] += r * (dout[c] * w[c] - sg - xh * sgx);
  }
}

/* Columns [c0, c0+cn) of dw += Σ_n dout·x̂ and db += Σ_n dout. */
TD_CPU_CLONES static void ln_bwd_cols(float *dw, float *db, const float *dout,
                                      const float *x, const float *mean,
                                      const float *rstd, int64_t N, int64_t C,
                                      int64_t c0, int64_t cn) {
  float aw[TD_LN_COLS], ab[TD_LN_COLS];
  for (int64_t c = 0; c < cn; c++) aw[c] = ab[c] = 0.0f;
  for (int64_t n = 0; n < N; n++) {
    const float *d = dout + n * C + c0, *xr = x + n * C + c0;
    float mu = mean[n], r = rstd[n];
#pragma omp simd
    for (int64_t c = 0; c < cn; c++) {
      aw[c] += d[c] * (xr[c] - mu) * r;
      ab[c] += d[c];
    }
  }
  for (int64_t c = 0; c < cn; c++) {
    dw[c0 + c] += aw[c];
    db[c0 + c] += ab[c];
  }
}

/* dx, dout, x (N, C) ; dw, db, w (C; w of type pt); mean, rstd (N). dw/db:
 * threads own column blocks, so their sums do not depend on the thread count. */
td_status td_cpu_layernorm_bwd(td_kernels *k, float *dx, float *dw, float *db,
                               const float *dout, const float *x, const void *wp,
                               td_dtype pt, const float *mean, const float *rstd, int64_t N,
                               int64_t C) {
  float *tmp = NULL;
  if (pt != TD_DTYPE_F32 && !(tmp = malloc((size_t)(C + 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "layernorm: out of memory for %lld parameters", (long long)C);
  const float *w = td_cpu_param_f32(wp, pt, tmp, C);
  int64_t nblk = (C + TD_LN_COLS - 1) / TD_LN_COLS;
#pragma omp parallel if (N * C > 16384)
  {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; n++)
      ln_bwd_row(dx + n * C, dout + n * C, x + n * C, w, mean[n], rstd[n], C);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * TD_LN_COLS;
      ln_bwd_cols(dw, db, dout, x, mean, rstd, N, C, c0,
                  C - c0 < TD_LN_COLS ? C - c0 : TD_LN_COLS);
    }
  }
  free(tmp);
  return TD_OK;
}
