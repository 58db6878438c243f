/* cuda_bf16.h — bfloat16 on the emulated CUDA device: the __nv_bfloat16
 * storage type and the conversions trident's kernels use, with the results
 * of NVIDIA's cuda_bf16.h on sm_80 and newer (cvt.rn.bf16.f32): round to
 * nearest, ties to even; every NaN becomes the canonical NaN 0x7FFF;
 * widening to float is exact. Test code only (tests/cudaemu). */
#ifndef TD_CUDAEMU_CUDA_BF16_H
#define TD_CUDAEMU_CUDA_BF16_H

#include <cuda_runtime.h>
#include <string.h>

#ifdef __cplusplus
struct __nv_bfloat16_raw {
  unsigned short x;
};

/* Two bytes, the upper half of a float32: trivially copyable, so device
 * buffers of it may be reinterpreted as the toolkit's can. */
struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  inline __nv_bfloat16(float f);
  inline operator float() const;
  constexpr operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};

/* float -> bf16, round to nearest even; NaN -> 0x7FFF. */
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned int u;
  memcpy(&u, &f, sizeof u);
  __nv_bfloat16_raw r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = 0x7fffu;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    r.x = (unsigned short)(u >> 16);
  }
  return __nv_bfloat16(r);
}
/* __float2bfloat16 rounds to nearest even as well. */
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

/* bf16 -> float, exact. */
inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned int u = (unsigned int)h.__x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

inline __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
inline __nv_bfloat16::operator float() const { return __bfloat162float(*this); }

static_assert(sizeof(__nv_bfloat16) == 2, "__nv_bfloat16 is two bytes");
#endif

#endif
