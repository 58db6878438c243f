/* attention.c — causal multi-head self-attention, forward and backward.
 *
 * The four kinds of products (Q·Kᵀ, att·V and their gradients) run as one
 * batched strided matmul each over the (B, NH) grid, reading the per-head
 * slices of qkv and writing the per-head slices of out/dqkv in place: no
 * copies, no per-head loop. Each product is cut into a few row blocks that
 * skip most of the masked half (mm_causal); the softmax and its backward are
 * vectorised row loops that touch only the causal part. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_simd.h"

/* A (batch0=B, batch1=NH) product of shape (M,N,K) over strided operands. */
static void mm_desc(td_cpu_mm *d, int64_t B, int64_t NH, int64_t M, int64_t N,
                    int64_t K, const int64_t sa[4], const int64_t sb[4],
                    const int64_t sc[4], float alpha) {
  memset(d, 0, sizeof *d);
  d->batch0 = B;
  d->batch1 = NH;
  d->M = M;
  d->N = N;
  d->K = K;
  for (int i = 0; i < 4; i++) {
    d->sa[i] = sa[i];
    d->sb[i] = sb[i];
    d->sc[i] = sc[i];
  }
  d->alpha = alpha;
  d->beta = 0.0f;
}

/* Which part of a product the causal mask lets a block of rows [r0, r1) of
 * C skip: Q·Kᵀ-like products need only columns n < r1; att·V-like products
 * (C row t sums over k ≤ t) need only k < r1; attᵀ·dout-like products (C row
 * j sums over t ≥ j) need only k ≥ r0. */
typedef enum { CAUSAL_N_PREFIX, CAUSAL_K_PREFIX, CAUSAL_K_SUFFIX } causal_kind;

/* Row blocks per causal product: P blocks do (P+1)/2P of the full work. */
static int64_t causal_blocks(int64_t T) {
  int64_t P = T / 64;
  return P < 1 ? 1 : P > 4 ? 4 : P;
}

/* Run the full (T-row) product d as causal_blocks(T) row blocks, each cut to
 * the part the mask can reach. Skipped C entries (above the diagonal, N
 * prefix only) are left as they were: the softmax rows overwrite them. */
static td_status mm_causal(td_kernels *k, const td_cpu_mm *full, causal_kind kind,
                           const float *A, const float *B, float *C) {
  int64_t T = full->M, P = causal_blocks(T);
  for (int64_t p = 0; p < P; p++) {
    int64_t r0 = T * p / P, r1 = T * (p + 1) / P;
    td_cpu_mm d = *full;
    const float *a = A + r0 * full->sa[2], *b = B;
    d.M = r1 - r0;
    if (kind == CAUSAL_N_PREFIX) {
      d.N = r1;
    } else if (kind == CAUSAL_K_PREFIX) {
      d.K = r1;
    } else {
      d.K = T - r0;
      a += r0 * full->sa[3];
      b += r0 * full->sb[2];
    }
    TD_CHECK(td_cpu_mm_run(k, &d, a, b, C + r0 * full->sc[2]));
  }
  return TD_OK;
}

/* Probabilities and their gradients below FLT_MIN are flushed to 0: once
 * attention sharpens, exp(s − max) underflows into subnormals, and every
 * product that reads them (att·V, attᵀ·dout, dpre·K, dpreᵀ·Q) then runs on
 * microcode assists — measured 30x slower on this CPU. The flush changes
 * results by less than 1.2e-38 per entry. */
#define TD_ATT_TINY 1.17549435e-38f /* FLT_MIN */

/* One row of the causal softmax, in place: row (T) holds the scaled scores
 * s_j; row_j = exp(s_j − max_{i≤t} s_i) / Σ_{i≤t} exp(s_i − max) for j ≤ t,
 * 0 for j > t; entries below FLT_MIN are 0. */
TD_CPU_CLONES static void softmax_row(float *row, int64_t t, int64_t T) {
  int64_t n = t + 1;
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; j++) {
    float x = row[j] - mx;
    float e = x < -87.0f ? 0.0f : td_cpu_expf(x); /* below: clamped, not 0 */
    row[j] = e;
    s += e;
  }
  float inv = 1.0f / s;
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float a = row[j] * inv;
    row[j] = a < TD_ATT_TINY ? 0.0f : a;
  }
  for (int64_t j = n; j < T; j++) row[j] = 0.0f;
}

/* qkv (B, T, 3C) with C = NH·HS; att (B, NH, T, T); out (B, T, C).
 * att = softmax_causal(Q·Kᵀ/√HS), out[b,t,h·HS:(h+1)·HS] = att[b,h]·V[b,h]. */
td_status td_cpu_attention_fwd(td_kernels *k, float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t NH, int64_t HS) {
  td_cpu_mm d;
  int64_t C = NH * HS, C3 = 3 * C, TT = T * T;
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  float scale = 1.0f / sqrtf((float)HS);
  /* Q (T, HS) per head; Kᵀ (HS, T): element (d, j) = K[j, d]. */
  const int64_t sq[4] = {T * C3, HS, C3, 1}, skt[4] = {T * C3, HS, 1, C3};
  const int64_t satt[4] = {NH * TT, TT, T, 1}, sv[4] = {T * C3, HS, C3, 1};
  const int64_t sout[4] = {T * C, HS, C, 1};

  mm_desc(&d, B, NH, T, T, HS, sq, skt, satt, scale); /* att = Q·Kᵀ/√HS */
  TD_CHECK(mm_causal(k, &d, CAUSAL_N_PREFIX, qkv, qkv + C, att));
  int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, 8)
  for (int64_t r = 0; r < rows; r++) softmax_row(att + r * T, r % T, T);
  mm_desc(&d, B, NH, T, HS, T, satt, sv, sout, 1.0f); /* out = att·V */
  TD_CHECK(mm_causal(k, &d, CAUSAL_K_PREFIX, att, qkv + 2 * C, out));
  return TD_OK;
}

/* One row of the softmax backward, in place on datt (T):
 * dpre_j = scale·a_j·(datt_j − Σ_{i≤t} a_i·datt_i) for j ≤ t, 0 for j > t;
 * |dpre_j| below FLT_MIN is 0. */
TD_CPU_CLONES static void softmax_bwd_row(float *drow, const float *arow, int64_t t,
                                          int64_t T, float scale) {
  int64_t n = t + 1;
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; j++) dot += arow[j] * drow[j];
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float g = scale * arow[j] * (drow[j] - dot);
    drow[j] = fabsf(g) < TD_ATT_TINY ? 0.0f : g;
  }
  for (int64_t j = n; j < T; j++) drow[j] = 0.0f;
}

/* dqkv (B, T, 3C) = ∂/∂qkv given dout (B, T, C); att (B, NH, T, T) from the
 * forward; scratch (B, NH, T, T) holds datt, then dpre (pre-softmax).
 * dV = attᵀ·dout, datt = dout·Vᵀ, dpre = softmax'(datt)/√HS,
 * dQ = dpre·K, dK = dpreᵀ·Q. Every element of dqkv is written (=). */
td_status td_cpu_attention_bwd(td_kernels *k, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *att,
                               int64_t B, int64_t T, int64_t NH, int64_t HS) {
  td_cpu_mm d;
  int64_t C = NH * HS, C3 = 3 * C, TT = T * T;
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  float scale = 1.0f / sqrtf((float)HS);
  const int64_t shead[4] = {T * C3, HS, C3, 1};   /* Q, K, V or dQ, dK, dV */
  const int64_t sheadt[4] = {T * C3, HS, 1, C3};  /* Vᵀ */
  const int64_t sdout[4] = {T * C, HS, C, 1};
  const int64_t stt[4] = {NH * TT, TT, T, 1};     /* att, scratch */
  const int64_t sttt[4] = {NH * TT, TT, 1, T};    /* attᵀ, scratchᵀ */

  mm_desc(&d, B, NH, T, HS, T, sttt, sdout, shead, 1.0f); /* dV = attᵀ·dout */
  TD_CHECK(mm_causal(k, &d, CAUSAL_K_SUFFIX, att, dout, dqkv + 2 * C));
  mm_desc(&d, B, NH, T, T, HS, sdout, sheadt, stt, 1.0f); /* datt = dout·Vᵀ */
  TD_CHECK(mm_causal(k, &d, CAUSAL_N_PREFIX, dout, qkv + 2 * C, scratch));
  int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, 8)
  for (int64_t r = 0; r < rows; r++)
    softmax_bwd_row(scratch + r * T, att + r * T, r % T, T, scale);
  mm_desc(&d, B, NH, T, HS, T, stt, shead, shead, 1.0f); /* dQ = dpre·K */
  TD_CHECK(mm_causal(k, &d, CAUSAL_K_PREFIX, scratch, qkv + C, dqkv));
  mm_desc(&d, B, NH, T, HS, T, sttt, shead, shead, 1.0f); /* dK = dpreᵀ·Q */
  TD_CHECK(mm_causal(k, &d, CAUSAL_K_SUFFIX, scratch, qkv, dqkv + C));
  return TD_OK;
}
