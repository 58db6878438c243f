/* swiglu.c — the SwiGLU gate of the LLaMA MLP, forward and backward, on the
 * vectorised exp of cpu_simd.h. The sigmoid is formed from e = exp(−|g|) ≤ 1
 * only, so nothing overflows for any g: σ(g) = 1/(1+e) for g ≥ 0, e/(1+e)
 * for g < 0, and 1 − σ(g) = σ(−g) is the other one of the two, free of
 * cancellation in either tail. Results below FLT_MIN in magnitude are
 * flushed to 0, as in attention.c: σ(g) ≈ e^g makes them for gates far
 * below 0, and subnormal operands would slow the matmuls that read them. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_simd.h"

#define TD_SWIGLU_CHUNK 4096           /* elements per task */
#define TD_SWIGLU_TINY 1.17549435e-38f /* FLT_MIN */

/* x, or 0 when |x| < FLT_MIN. */
static inline float flush_tiny(float x) { return fabsf(x) < TD_SWIGLU_TINY ? 0.0f : x; }

/* out = silu(g)·u = g·σ(g)·u; n elements. */
TD_CPU_CLONES static void swiglu_fwd_chunk(float *out, const float *g, const float *u,
                                           int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i];
    float e = td_cpu_expf(-fabsf(gi));
    float q = 1.0f / (1.0f + e);
    float sig = gi >= 0.0f ? q : e * q;
    out[i] = flush_tiny(gi * sig * u[i]);
  }
}

TD_CPU_CLONES static void swiglu_fwd_chunk16(td_bf16 *out, const float *g, const float *u,
                                             int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i];
    float e = td_cpu_expf(-fabsf(gi));
    float q = 1.0f / (1.0f + e);
    float sig = gi >= 0.0f ? q : e * q;
    out[i] = td_bf16_from_f32(flush_tiny(gi * sig * u[i]));
  }
}

/* du = dout·silu(g); dg = dout·u·silu'(g), silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
 * Every input of element i is read before its outputs are written. */
TD_CPU_CLONES static void swiglu_bwd_chunk(float *dg, float *du, const float *dout,
                                           const float *g, const float *u, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i], ui = u[i], di = dout[i];
    float e = td_cpu_expf(-fabsf(gi));
    float q = 1.0f / (1.0f + e);
    float sig = gi >= 0.0f ? q : e * q;   /* σ(g) */
    float sigc = gi >= 0.0f ? e * q : q;  /* 1 − σ(g) */
    float silu = gi * sig;
    dg[i] = flush_tiny(di * ui * (sig * (1.0f + gi * sigc)));
    du[i] = flush_tiny(di * silu);
  }
}

/* out (n, type ot), g, u (n); a float32 out may alias g or u. */
td_status td_cpu_swiglu_fwd(td_kernels *k, void *out, td_dtype ot, const float *g,
                            const float *u, int64_t n) {
  int64_t nch = (n + TD_SWIGLU_CHUNK - 1) / TD_SWIGLU_CHUNK;
#pragma omp parallel for schedule(static) if (nch > 1)
  for (int64_t c = 0; c < nch; c++) {
    int64_t i0 = c * TD_SWIGLU_CHUNK, len = n - i0 < TD_SWIGLU_CHUNK ? n - i0 : TD_SWIGLU_CHUNK;
    if (ot == TD_DTYPE_BF16)
      swiglu_fwd_chunk16((td_bf16 *)out + i0, g + i0, u + i0, len);
    else
      swiglu_fwd_chunk((float *)out + i0, g + i0, u + i0, len);
  }
  return TD_OK;
}

/* dg, du, dout, g, u (n); dg and du may alias any of the inputs (same
 * elements), not each other. */
td_status td_cpu_swiglu_bwd(td_kernels *k, float *dg, float *du, const float *dout,
                            const float *g, const float *u, int64_t n) {
  int64_t nch = (n + TD_SWIGLU_CHUNK - 1) / TD_SWIGLU_CHUNK;
#pragma omp parallel for schedule(static) if (nch > 1)
  for (int64_t c = 0; c < nch; c++) {
    int64_t i0 = c * TD_SWIGLU_CHUNK;
    swiglu_bwd_chunk(dg + i0, du + i0, dout + i0, g + i0, u + i0,
                     n - i0 < TD_SWIGLU_CHUNK ? n - i0 : TD_SWIGLU_CHUNK);
  }
  return TD_OK;
}
