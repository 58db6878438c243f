/* rope.c — rotary position embedding (LLaMA; Hugging Face's rotate-half
 * layout), in place, forward and inverse. The angles a = t·theta^(−2i/HS)
 * are formed and their cosines and sines evaluated in double, once per call
 * into a (T, HS/2) table (then rounded to float); every row of every batch
 * and head reads it. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

/* One head (HS floats) at one position: with c = cs[i], s = sn[i] and the
 * pair (x_i, x_{i+HS/2}) = (a, b): (a·c − b·s, b·c + a·s); sn negated for the
 * inverse. */
TD_CPU_CLONES static void rope_head(float *x, const float *cs, const float *sn, int64_t half) {
  float *y = x + half;
#pragma omp simd
  for (int64_t i = 0; i < half; i++) {
    float a = x[i], b = y[i];
    x[i] = a * cs[i] - b * sn[i];
    y[i] = b * cs[i] + a * sn[i];
  }
}

/* x: B·T rows of stride ld floats, each starting with H heads of HS floats;
 * row b·T + t is position t. In place. */
td_status td_cpu_rope(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                      int64_t ld, float theta, int inverse) {
  TD_REQUIRE(B >= 0 && T >= 0 && H >= 0 && HS >= 0 && HS % 2 == 0, TD_ERR_USAGE,
             "rope: expected sizes >= 0 and an even head size, got B=%lld T=%lld H=%lld HS=%lld",
             (long long)B, (long long)T, (long long)H, (long long)HS);
  TD_REQUIRE(ld >= H * HS, TD_ERR_USAGE, "rope: row stride %lld < H·HS = %lld", (long long)ld,
             (long long)(H * HS));
  TD_REQUIRE(theta > 0.0f, TD_ERR_USAGE, "rope: theta must be > 0, got %g", (double)theta);
  int64_t half = HS / 2, rows = B * T;
  if (rows == 0 || H == 0 || half == 0) return TD_OK;
  /* inv (HS/2) = theta^(−2i/HS); cs, sn (T, HS/2) = cos a, ±sin a at position t, pair i */
  double *inv = malloc((size_t)half * sizeof(double) + (size_t)(2 * T * half) * sizeof(float));
  if (!inv)
    TD_FAIL(TD_ERR_NOMEM, "rope: out of memory for a %lld x %lld angle table", (long long)T,
            (long long)half);
  float *cs = (float *)(inv + half), *sn = cs + T * half;
  double sgn = inverse ? -1.0 : 1.0;
  for (int64_t i = 0; i < half; i++) inv[i] = pow((double)theta, -2.0 * (double)i / (double)HS);
#pragma omp parallel if (T * half + rows * H * HS > 16384)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < half; i++) {
        double a = (double)t * inv[i];
        cs[t * half + i] = (float)cos(a);
        sn[t * half + i] = (float)(sgn * sin(a));
      }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      int64_t t = r % T;
      for (int64_t h = 0; h < H; h++)
        rope_head(x + r * ld + h * HS, cs + t * half, sn + t * half, half);
    }
  }
  free(inv);
  return TD_OK;
}
