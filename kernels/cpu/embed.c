/* embed.c — token + position embedding, forward and backward. */
#include "kernels/cpu/cpu_internal.h"

/* out[n,:] = wte[tok[n]−v0,:] (0 if the token is outside [v0, v0+Vs))
 *          + wpe[p(n mod T),:] (if wpe), p = td_pos_at(pos, ·). out (B·T, C),
 * tokens (B·T), wte (Vs, C), wpe (Tk, C) or NULL; wte and wpe of type pt
 * (bf16: widened row by row). */
td_status td_cpu_embed_fwd(td_kernels *k, float *out, const int32_t *tokens,
                           const void *wtep, int64_t v0, int64_t Vs, const void *wpep,
                           td_dtype pt, int64_t B, int64_t T, int64_t C, const td_pos *pos) {
  TD_CHECK(td_kernels_pos_args("embed_fwd", pos, T));
  int64_t N = B * T;
  if (pt == TD_DTYPE_BF16) {
    const td_bf16 *wte = wtep, *wpe = wpep;
#pragma omp parallel for schedule(static) if (N * C > 32768)
    for (int64_t n = 0; n < N; n++) {
      float *o = out + n * C;
      int64_t v = (int64_t)tokens[n] - v0;
      const td_bf16 *e = (v >= 0 && v < Vs) ? wte + v * C : NULL;
      const td_bf16 *p = wpe ? wpe + td_pos_tok(pos, T, n) * C : NULL;
      for (int64_t c = 0; c < C; c++)
        o[c] = (e ? td_bf16_to_f32(e[c]) : 0.0f) + (p ? td_bf16_to_f32(p[c]) : 0.0f);
    }
    return TD_OK;
  }
  const float *wte = wtep, *wpe = wpep;
#pragma omp parallel for schedule(static) if (N * C > 32768)
  for (int64_t n = 0; n < N; n++) {
    float *o = out + n * C;
    int64_t v = (int64_t)tokens[n] - v0;
    const float *e = (v >= 0 && v < Vs) ? wte + v * C : NULL;
    const float *p = wpe ? wpe + td_pos_tok(pos, T, n) * C : NULL;
    if (e && p) {
#pragma omp simd
      for (int64_t c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else if (e) {
#pragma omp simd
      for (int64_t c = 0; c < C; c++) o[c] = e[c];
    } else if (p) {
#pragma omp simd
      for (int64_t c = 0; c < C; c++) o[c] = p[c];
    } else {
      for (int64_t c = 0; c < C; c++) o[c] = 0.0f;
    }
  }
  return TD_OK;
}

#define TD_EMBED_COLS 64 /* columns per task of the scatter */

/* dwte (Vs, C) += Σ_{n: tok[n] = v0+v} dout[n,:];  dwpe (Tk, C): row
 * td_pos_at(pos, t) += Σ_b dout[b,t,:] (distinct rows: the positions
 * increase). Rows of dwte collide when tokens repeat, so threads own column
 * blocks and walk the tokens in order: no races, and the sum order does not
 * depend on the thread count. */
td_status td_cpu_embed_bwd(td_kernels *k, float *dwte, float *dwpe, const float *dout,
                           const int32_t *tokens, int64_t v0, int64_t Vs, int64_t B,
                           int64_t T, int64_t C, const td_pos *pos) {
  TD_CHECK(td_kernels_pos_args("embed_bwd", pos, T));
  int64_t N = B * T;
  int64_t nblk = (C + TD_EMBED_COLS - 1) / TD_EMBED_COLS;
#pragma omp parallel for schedule(static) if (N * C > 32768)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * TD_EMBED_COLS;
    int64_t cn = C - c0 < TD_EMBED_COLS ? C - c0 : TD_EMBED_COLS;
    for (int64_t n = 0; n < N; n++) {
      int64_t v = (int64_t)tokens[n] - v0;
      if (v < 0 || v >= Vs) continue;
      float *g = dwte + v * C + c0;
      const float *d = dout + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < cn; c++) g[c] += d[c];
    }
  }
  if (dwpe && pos && pos->doc) {
    /* packed documents: rows repeat across sequences and documents; threads
     * own column blocks and add in (t, b) order (the order below for
     * distinct rows) */
#pragma omp parallel for schedule(static) if (N * C > 32768)
    for (int64_t blk = 0; blk < nblk; blk++) {
      int64_t c0 = blk * TD_EMBED_COLS;
      int64_t cn = C - c0 < TD_EMBED_COLS ? C - c0 : TD_EMBED_COLS;
      for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < B; b++) {
          float *g = dwpe + td_pos_tok(pos, T, b * T + t) * C + c0;
          const float *d = dout + (b * T + t) * C + c0;
#pragma omp simd
          for (int64_t c = 0; c < cn; c++) g[c] += d[c];
        }
    }
  } else if (dwpe) {
#pragma omp parallel for schedule(static) if (N * C > 32768)
    for (int64_t t = 0; t < T; t++) {
      float *g = dwpe + td_pos_at(pos, t) * C;
      for (int64_t b = 0; b < B; b++) {
        const float *d = dout + (b * T + t) * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) g[c] += d[c];
      }
    }
  }
  return TD_OK;
}
