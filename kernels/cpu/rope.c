/* rope.c — rotary position embedding (LLaMA; Hugging Face's rotate-half
 * layout), in place, forward and inverse. The angles a = p·theta^(−2i/HS)
 * of the positions p < Tk of the sequence are formed and their cosines and
 * sines evaluated in double into a (Tk, HS/2) table (then rounded to float),
 * made once per (Tk, HS, theta) and kept in the back-end's state; every row
 * of every batch and head reads the line of its position. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

/* One head (HS floats) at one position: with c = cs[i], s = sg·sn[i] and
 * the pair (x_i, x_{i+HS/2}) = (a, b): (a·c − b·s, b·c + a·s); sg = −1 for
 * the inverse. */
TD_CPU_CLONES static void rope_head(float *x, const float *cs, const float *sn, float sg,
                                    int64_t half) {
  float *y = x + half;
#pragma omp simd
  for (int64_t i = 0; i < half; i++) {
    float a = x[i], b = y[i], si = sg * sn[i];
    x[i] = a * cs[i] - b * si;
    y[i] = b * cs[i] + a * si;
  }
}

/* The (T, HS/2) cosines and sines of a = t·theta^(−2i/HS) for the positions
 * t < T, from double angles, kept in the back-end's state: every call of a
 * run asks for the same table (q and k, forward and backward, every layer). */
static td_status rope_table(td_cpu_state *s, int64_t T, int64_t half, float theta,
                            const float **cs, const float **sn) {
  if (!s->rope || s->rope_T != T || s->rope_half != half || s->rope_theta != theta) {
    td_free(s->rope);
    s->rope = NULL;
    s->rope_T = s->rope_half = 0;
    TD_CHECK(td_alloc((void **)&s->rope, (size_t)(2 * T * half) * sizeof(float),
                      "rope angle table"));
    float *c = s->rope, *sv = c + T * half;
#pragma omp parallel for schedule(static) if (T * half > 16384)
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < half; i++) {
        double ang = (double)t * pow((double)theta, -2.0 * (double)i / (double)(2 * half));
        c[t * half + i] = (float)cos(ang);
        sv[t * half + i] = (float)sin(ang);
      }
    s->rope_T = T, s->rope_half = half, s->rope_theta = theta;
  }
  *cs = s->rope, *sn = s->rope + T * half;
  return TD_OK;
}

/* x: B·T rows of stride ld floats, each starting with H heads of HS floats;
 * row b·T + t is position td_pos_at(pos, t) of Tk = td_pos_len(pos, T). In
 * place. */
td_status td_cpu_rope(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                      int64_t ld, float theta, int inverse, const td_pos *pos) {
  TD_CHECK(td_kernels_rope_args(B, T, H, HS, ld, theta));
  TD_CHECK(td_kernels_pos_args("rope", pos, T));
  int64_t half = HS / 2, rows = B * T;
  if (rows == 0 || H == 0 || half == 0) return TD_OK;
  const float *cs = NULL, *sn = NULL;
  TD_CHECK(rope_table(k->state, td_pos_len(pos, T), half, theta, &cs, &sn));
  float sg = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (rows * H * HS > 16384)
  for (int64_t r = 0; r < rows; r++) {
    int64_t p = td_pos_tok(pos, T, r);
    for (int64_t h = 0; h < H; h++)
      rope_head(x + r * ld + h * HS, cs + p * half, sn + p * half, sg, half);
  }
  return TD_OK;
}
