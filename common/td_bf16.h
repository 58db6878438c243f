/* td_bf16.h — bfloat16 <-> float32 on the host, the rounding every back-end
 * keeps to: round to nearest, ties to even; NaN stays NaN (quiet). A bf16
 * is the upper 16 bits of a float32, so widening is exact. */
#ifndef TD_BF16_H
#define TD_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t td_bf16;

static inline td_bf16 td_bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (td_bf16)((u >> 16) | 0x40u); /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (td_bf16)(u >> 16);
}

static inline float td_bf16_to_f32(td_bf16 h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* f rounded to bf16 and widened back: the value a bf16 store keeps. */
static inline float td_bf16_round(float f) { return td_bf16_to_f32(td_bf16_from_f32(f)); }

#endif
