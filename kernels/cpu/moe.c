/* moe.c — the mixture-of-experts ops on the CPU (td_kernels.h, "mixture of
 * experts"): the router (softmax, top-K, renormalised weights) and its
 * backward, the experts' order of the routed slots (with a capacity), and
 * the gathers and sums that move rows between the tokens' order and the
 * experts'. Every sum runs in one fixed order (a row's slots j = 0…K−1, a
 * row's elements, the rows of a column in row order), so no result depends
 * on the thread count; the CUDA back-end keeps the same orders. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "common/td_bf16.h"
#include "kernels/cpu/cpu_internal.h"

/* Row n's K choices: the largest logits first, a tie to the lower expert
 * (a strict comparison in expert order keeps the first of equals). */
static void top_k(const float *l, int64_t E, int64_t K, int32_t *ix) {
  for (int64_t j = 0; j < K; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++) {
      int taken = 0;
      for (int64_t i = 0; i < j; i++) taken |= ix[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    ix[j] = (int32_t)best;
  }
}

td_status td_cpu_moe_route(td_kernels *k, float *probs, float *lse, int32_t *idx, float *w,
                           float *psum, const float *logits, int64_t N, int64_t E, int64_t K) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_route", N, E, K, 0, 0));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *l = logits + n * E;
    float *p = probs + n * E, mx = -INFINITY, sum = 0.0f;
    for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= sum;
    lse[n] = mx + logf(sum);
    int32_t *ix = idx + n * K;
    top_k(l, E, K, ix);
    float s = 0.0f;
    for (int64_t j = 0; j < K; j++) s += p[ix[j]];
    for (int64_t j = 0; j < K; j++) w[n * K + j] = p[ix[j]] / s;
  }
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < E; e++) {
    float s = 0.0f;
    for (int64_t n = 0; n < N; n++) s += probs[n * E + e];
    psum[e] = s;
  }
  return TD_OK;
}

td_status td_cpu_moe_plan(td_kernels *k, int32_t *pos, int32_t *perm, int32_t *off,
                          int32_t *count, const int32_t *idx, int64_t N, int64_t E, int64_t K,
                          int64_t cap) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_plan", N, E, K, 0, cap));
  int64_t S = N * K;
  for (int64_t s = 0; s < S; s++)
    TD_REQUIRE(idx[s] >= 0 && idx[s] < E, TD_ERR_USAGE,
               "moe_plan: slot %lld names expert %d of %lld", (long long)s, (int)idx[s],
               (long long)E);
  memset(count, 0, (size_t)E * sizeof *count);
  for (int64_t s = 0; s < S; s++) count[idx[s]]++;
  off[0] = 0;
  for (int64_t e = 0; e < E; e++)
    off[e + 1] = off[e] + (cap > 0 && count[e] > cap ? (int32_t)cap : count[e]);
  /* an expert's slots in slot order: its next row is off[e] plus the slots
   * it has kept so far (counted again from 0 in count's place) */
  int32_t *seen = NULL;
  TD_CHECK(td_alloc((void **)&seen, (size_t)E * sizeof *seen, "moe_plan: per-expert cursors"));
  for (int64_t s = 0; s < S; s++) {
    int32_t e = idx[s];
    if (cap > 0 && seen[e] >= cap) {
      pos[s] = -1;
      continue;
    }
    int32_t r = off[e] + seen[e]++;
    pos[s] = r, perm[r] = (int32_t)s;
  }
  td_free(seen);
  return TD_OK;
}

td_status td_cpu_moe_gather(td_kernels *k, void *xe, const void *x, td_dtype t,
                            const int32_t *perm, int64_t rows, int64_t C, int64_t K) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_gather", rows, 1, 1, C, 0));
  TD_REQUIRE(K >= 1, TD_ERR_USAGE, "moe_gather: K must be >= 1, got %lld", (long long)K);
  size_t es = td_dtype_size(t), row = (size_t)C * es;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++)
    memcpy((char *)xe + (size_t)r * row, (const char *)x + (size_t)(perm[r] / K) * row, row);
  return TD_OK;
}

/* out (N, C) = Σ_j a_j·y[pos[n·K + j]] over row n's kept slots, j in order:
 * a_j = w[n·K + j], or 1 without w (moe_combine and moe_scatter). */
static void rows_sum(float *out, const float *y, const float *w, const int32_t *pos, int64_t N,
                     int64_t K, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float *o = out + n * C;
    memset(o, 0, (size_t)C * sizeof *o);
    for (int64_t j = 0; j < K; j++) {
      int32_t r = pos[n * K + j];
      if (r < 0) continue;
      const float *v = y + (int64_t)r * C;
      if (w) {
        float a = w[n * K + j];
        for (int64_t c = 0; c < C; c++) o[c] += a * v[c];
      } else {
        for (int64_t c = 0; c < C; c++) o[c] += v[c];
      }
    }
  }
}

td_status td_cpu_moe_combine(td_kernels *k, float *out, const float *ye, const float *w,
                             const int32_t *pos, int64_t N, int64_t K, int64_t C) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_combine", N, K, K, C, 0));
  rows_sum(out, ye, w, pos, N, K, C);
  return TD_OK;
}

td_status td_cpu_moe_combine_bwd(td_kernels *k, void *dye, td_dtype dt, float *dw,
                                 const float *dout, const float *ye, const float *w,
                                 const int32_t *pos, int64_t N, int64_t K, int64_t C) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_combine_bwd", N, K, K, C, 0));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *g = dout + n * C;
    for (int64_t j = 0; j < K; j++) {
      int64_t s = n * K + j;
      int32_t r = pos[s];
      if (r < 0) {
        dw[s] = 0.0f;
        continue;
      }
      const float *y = ye + (int64_t)r * C;
      float d = 0.0f, a = w[s];
      for (int64_t c = 0; c < C; c++) d += g[c] * y[c];
      dw[s] = d;
      if (dt == TD_DTYPE_BF16) {
        uint16_t *o = (uint16_t *)dye + (int64_t)r * C;
        for (int64_t c = 0; c < C; c++) o[c] = td_bf16_from_f32(a * g[c]);
      } else {
        float *o = (float *)dye + (int64_t)r * C;
        for (int64_t c = 0; c < C; c++) o[c] = a * g[c];
      }
    }
  }
  return TD_OK;
}

td_status td_cpu_moe_scatter(td_kernels *k, float *dx, const float *dxe, const int32_t *pos,
                             int64_t N, int64_t K, int64_t C) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_scatter", N, K, K, C, 0));
  rows_sum(dx, dxe, NULL, pos, N, K, C);
  return TD_OK;
}

/* Per row: w_j = p_{i_j}/S (S the chosen probabilities' sum) gives
 * dp_{i_j} = (dw_j − Σ_m dw_m·w_m)/S; every p_e also gets gP[e]; through
 * the softmax dl_e = p_e·(dp_e − Σ_f p_f·dp_f), and lse adds zc·lse·p_e. */
td_status td_cpu_moe_route_bwd(td_kernels *k, float *dlogits, const float *dw,
                               const float *probs, const float *lse, const int32_t *idx,
                               const float *w, const float *gP, float zc, int64_t N, int64_t E,
                               int64_t K) {
  (void)k;
  TD_CHECK(td_kernels_moe_args("moe_route_bwd", N, E, K, 0, 0));
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const float *p = probs + n * E, *g = dw + n * K, *wn = w + n * K;
    const int32_t *ix = idx + n * K;
    float *dl = dlogits + n * E, S = 0.0f, a = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < K; j++) S += p[ix[j]];
    for (int64_t j = 0; j < K; j++) a += g[j] * wn[j];
    for (int64_t e = 0; e < E; e++) dl[e] = gP ? gP[e] : 0.0f; /* dp, then dl */
    for (int64_t j = 0; j < K; j++) dl[ix[j]] += (g[j] - a) / S;
    for (int64_t e = 0; e < E; e++) dot += p[e] * dl[e];
    float z = zc * lse[n];
    for (int64_t e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - dot) + z * p[e];
  }
  return TD_OK;
}
