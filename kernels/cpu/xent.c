/* xent.c — softmax cross-entropy on one vocabulary shard, in three calls
 * whose row results the caller all-reduces in between (td_kernels.h).
 * Padding columns j ≥ Vvalid are never read as logits. A row whose max is
 * −inf (no real column on any shard) gets sumexp 0 and gradient 0. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_simd.h"

/* rowmax (N) = max_{j<Vvalid} logits[n,j]; logits (N, Vs). */
TD_CPU_CLONES static float row_max(const float *l, int64_t V) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
  return mx;
}

td_status td_cpu_xent_rowmax(td_kernels *k, float *rowmax, const float *logits,
                             int64_t N, int64_t Vs, int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
#pragma omp parallel for schedule(static) if (N * Vvalid > 32768)
  for (int64_t n = 0; n < N; n++) rowmax[n] = row_max(logits + n * Vs, Vvalid);
  return TD_OK;
}

/* Σ_{j<V} exp(l_j − mx). */
TD_CPU_CLONES static float row_sumexp(const float *l, int64_t V, float mx) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < V; j++) s += td_cpu_expf(l[j] - mx);
  return s;
}

/* sumexp (N) = Σ_{j<Vvalid} exp(logits[n,j] − rowmax[n]);
 * tlogit (N) = logits[n, t(n)−v0] when that column is real here, else 0. */
td_status td_cpu_xent_sumexp(td_kernels *k, float *sumexp, float *tlogit,
                             const float *logits, const float *rowmax,
                             const int32_t *targets, int64_t v0, int64_t N,
                             int64_t Vs, int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
#pragma omp parallel for schedule(static) if (N * Vvalid > 32768)
  for (int64_t n = 0; n < N; n++) {
    const float *l = logits + n * Vs;
    float mx = rowmax[n];
    sumexp[n] = (mx == -INFINITY || Vvalid == 0) ? 0.0f : row_sumexp(l, Vvalid, mx);
    int64_t j = (int64_t)targets[n] - v0;
    tlogit[n] = (j >= 0 && j < Vvalid) ? l[j] : 0.0f;
  }
  return TD_OK;
}

/* d_j = scale·exp(l_j − mx)/se for j < Vvalid, 0 for padding (aliasing ok).
 * Values below FLT_MIN are flushed to 0: subnormal entries of dlogits would
 * slow both LM-head backward products (microcode assists) for no accuracy. */
TD_CPU_CLONES static void row_softmax_grad(float *d, const float *l, int64_t Vs,
                                           int64_t V, float mx, float scale_se) {
#pragma omp simd
  for (int64_t j = 0; j < V; j++) {
    float x = l[j] - mx;
    float g = x < -87.0f ? 0.0f : scale_se * td_cpu_expf(x);
    d[j] = g < 1.17549435e-38f ? 0.0f : g; /* FLT_MIN */
  }
  for (int64_t j = V; j < Vs; j++) d[j] = 0.0f;
}

/* dlogits (N, Vs) = scale·(softmax − onehot(t(n)−v0)) on real columns, 0 on
 * padding; dlogits may alias logits. */
td_status td_cpu_xent_bwd(td_kernels *k, float *dlogits, const float *logits,
                          const float *rowmax, const float *sumexp,
                          const int32_t *targets, int64_t v0, float scale, int64_t N,
                          int64_t Vs, int64_t Vvalid) {
  TD_CHECK(td_kernels_xent_args(N, Vs, Vvalid));
#pragma omp parallel for schedule(static) if (N * Vs > 32768)
  for (int64_t n = 0; n < N; n++) {
    float mx = rowmax[n], se = sumexp[n];
    /* No real column anywhere (or an empty sum): probabilities are 0; a
     * target < 0 (masked out of the loss) has no gradient. */
    float f = (mx == -INFINITY || !(se > 0.0f) || targets[n] < 0) ? 0.0f : scale / se;
    row_softmax_grad(dlogits + n * Vs, logits + n * Vs, Vs, f == 0.0f ? 0 : Vvalid, mx, f);
    int64_t j = (int64_t)targets[n] - v0;
    if (j >= 0 && j < Vvalid) dlogits[n * Vs + j] -= scale;
  }
  return TD_OK;
}
