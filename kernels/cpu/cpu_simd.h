/* cpu_simd.h — a branch-free float exp that the compiler vectorises
 * inside `#pragma omp simd` loops (libm's expf is a scalar call).
 * Private to kernels/cpu/; static inline because they only pay inlined. */
#ifndef TD_CPU_SIMD_H
#define TD_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

/* exp(x) = 2ⁿ·eʳ, n = round(x·log2 e), r = x − n·ln 2 ∈ [−ln2/2, ln2/2],
 * eʳ by the Cephes expf polynomial (max rel. error ≈ 2 ulp). x is clamped
 * to [−87, 88], so exp(−inf) gives ≈1.6e−38 rather than 0: callers that care
 * about −inf handle it themselves. */
static inline float td_cpu_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5·2²³: round to int */
  float n = t - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* 2ⁿ as float bits, n ∈ [−126, 127], read from t's own bits (its low
   * mantissa bits hold n + 2²², the magic number's) in unsigned arithmetic:
   * nothing converts a NaN x to int or shifts a negative value (both
   * undefined in C); the NaN, which the clamps pass, reaches the result
   * through p */
  uint32_t tb;
  memcpy(&tb, &t, sizeof tb);
  uint32_t e = (tb - 0x4B400000u + 127u) << 23;
  float s;
  memcpy(&s, &e, sizeof s);
  return p * s;
}

#endif
