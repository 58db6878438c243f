/* attention.c — causal grouped-query attention (LLaMA) and, as its special
 * case, GPT-2's multi-head attention on a packed qkv, forward and backward.
 *
 * The four kinds of products (Q·Kᵀ, att·V and their gradients) run as
 * batched strided matmuls over the (B, KV) grid, one per position g of a
 * query head inside its group (query head h = kv·G + g, G = NH/KV), reading
 * the per-head slices of q, kk, v and writing the per-head slices of out,
 * dq, dk, dv in place: no copies, and no loop over heads but the one over
 * g (G products of each kind, one when KV = NH). dK and dV sum over the G
 * query heads of a group: the first product overwrites (beta 0), the others
 * accumulate (beta 1). Each product is cut into a few row blocks that skip
 * most of the masked half (mm_causal); the softmax and its backward are
 * vectorised row loops that touch only the causal part.
 *
 * With positions (td_pos, context parallelism) the T query rows are two runs
 * of consecutive positions, rows [0, half) from p0 and rows [half, T) from
 * p1, against all Tk keys of the sequence: each run is a causal product of
 * its own, shifted by its first position, and dK, dV add the runs' products
 * as they add the group's. Without positions there is one run, at 0, and the
 * products are exactly those of causal attention. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_simd.h"

/* A (batch0=B, batch1=KV) product of shape (M,N,K) over strided operands. */
static void mm_desc(td_cpu_mm *d, int64_t B, int64_t KV, int64_t M, int64_t N,
                    int64_t K, const int64_t sa[4], const int64_t sb[4],
                    const int64_t sc[4], float alpha) {
  memset(d, 0, sizeof *d);
  d->batch0 = B;
  d->batch1 = KV;
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
 * C skip, for a run of query rows at positions off, off+1, ...: Q·Kᵀ-like
 * products (C rows: the run's queries) need only columns n < off + r1;
 * att·V-like products (C row t sums over the keys k ≤ off + t) need only
 * k < off + r1; attᵀ·dout-like products (C rows: keys j, summing over the
 * run's queries t with off + t ≥ j) need only t ≥ r0 − off. */
typedef enum { CAUSAL_N_PREFIX, CAUSAL_K_PREFIX, CAUSAL_K_SUFFIX } causal_kind;

/* Row blocks per causal product: P blocks do (P+1)/2P of the full work. */
static int64_t causal_blocks(int64_t T) {
  int64_t P = T / 64;
  return P < 1 ? 1 : P > 4 ? 4 : P;
}

/* Run the full product d of one run of queries at positions off, off+1, ...
 * (the prefix kinds: M = the run's rows; the K suffix: M = the Tk keys, K =
 * the run's rows) as causal_blocks(M) row blocks, each cut to the part the
 * mask can reach. Skipped C entries (past the mask, N prefix only) are left
 * as they were: the softmax rows overwrite them, and so the N prefix is only
 * run with beta 0. The K prefix and suffix write every entry of C, skipping
 * only terms that are exactly 0 (masked probabilities and their gradients),
 * so they honour beta 1: dK and dV accumulate over the query heads of a
 * group and over the runs through them. A block of keys no query of the run
 * reaches has K = 0: C = beta·C. */
static td_status mm_causal(td_kernels *k, const td_cpu_mm *full, causal_kind kind,
                           int64_t off, const float *A, const float *B, float *C) {
  int64_t M = full->M, P = causal_blocks(M);
  if (kind == CAUSAL_N_PREFIX && full->beta != 0.0f)
    TD_FAIL(TD_ERR_INTERNAL, "attention: a causal N-prefix product with beta %g",
            (double)full->beta);
  for (int64_t p = 0; p < P; p++) {
    int64_t r0 = M * p / P, r1 = M * (p + 1) / P;
    td_cpu_mm d = *full;
    const float *a = A + r0 * full->sa[2], *b = B;
    d.M = r1 - r0;
    if (kind == CAUSAL_N_PREFIX) {
      d.N = off + r1;
    } else if (kind == CAUSAL_K_PREFIX) {
      d.K = off + r1;
    } else {
      int64_t skip = r0 - off < 0 ? 0 : r0 - off > full->K ? full->K : r0 - off;
      d.K = full->K - skip;
      a += skip * full->sa[3];
      b += skip * full->sb[2];
    }
    TD_CHECK(td_cpu_mm_run(k, &d, a, b, C + r0 * full->sc[2]));
  }
  return TD_OK;
}

/* The runs of query rows of consecutive positions: rows [t0[i], t0[i] + len[i])
 * at positions off[i], off[i]+1, ...; one run at 0 without positions. */
typedef struct {
  int n;
  int64_t t0[2], len[2], off[2];
} att_runs;

static att_runs runs_of(const td_pos *pos, int64_t T) {
  if (!pos) return (att_runs){1, {0, 0}, {T, 0}, {0, 0}};
  return (att_runs){2, {0, pos->half}, {pos->half, T - pos->half}, {pos->p0, pos->p1}};
}

/* Probabilities and their gradients below FLT_MIN are flushed to 0: once
 * attention sharpens, exp(s − max) underflows into subnormals, and every
 * product that reads them (att·V, attᵀ·dout, dpre·K, dpreᵀ·Q) then runs on
 * microcode assists — measured 30x slower on this CPU. The flush changes
 * results by less than 1.2e-38 per entry. */
#define TD_ATT_TINY 1.17549435e-38f /* FLT_MIN */

/* One row of the causal softmax, in place: row (Tk) holds the scaled scores
 * s_j, of which the first n are visible (n = position + 1);
 * row_j = exp(s_j − max_{i<n} s_i) / Σ_{i<n} exp(s_i − max) for j < n, 0 for
 * j ≥ n; entries below FLT_MIN are 0. */
TD_CPU_CLONES static void softmax_row(float *row, int64_t n, int64_t Tk) {
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
  for (int64_t j = n; j < Tk; j++) row[j] = 0.0f;
}

/* q (B, T, NH·HS) rows of stride ldq at the positions td_pos_at(pos, t);
 * kk, v (B, Tk, KV·HS) rows of stride ldkv; att (B, NH, T, Tk); out
 * (B, T, NH·HS) dense. With G = NH/KV and query head h = kv·G + g:
 * att[b,h] = softmax_causal(Q[b,h]·K[b,kv]ᵀ/√HS),
 * out[b,:,h·HS:(h+1)·HS] = att[b,h]·V[b,kv]. */
td_status td_cpu_gqa_fwd(td_kernels *k, float *out, float *att, const float *q,
                         const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                         int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                         const td_pos *pos) {
  td_cpu_mm d;
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_CHECK(td_kernels_pos_args("gqa_fwd", pos, T));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  int64_t C = NH * HS, G = NH / KV, Tk = td_pos_len(pos, T), TT = T * Tk;
  float scale = 1.0f / sqrtf((float)HS);
  att_runs ru = runs_of(pos, T);
  /* Over (b, kv) at one g: Q (T, HS) of head kv·G + g; Kᵀ (HS, Tk): element
   * (d, j) = K[j, d]; att and out of head kv·G + g. */
  const int64_t sq[4] = {T * ldq, G * HS, ldq, 1}, skt[4] = {Tk * ldkv, HS, 1, ldkv};
  const int64_t satt[4] = {NH * TT, G * TT, Tk, 1}, sv[4] = {Tk * ldkv, HS, ldkv, 1};
  const int64_t sout[4] = {T * C, G * HS, C, 1};

  for (int i = 0; i < ru.n; i++) { /* att = Q·Kᵀ/√HS */
    int64_t t0 = ru.t0[i];
    mm_desc(&d, B, KV, ru.len[i], Tk, HS, sq, skt, satt, scale);
    for (int64_t g = 0; g < G; g++)
      TD_CHECK(mm_causal(k, &d, CAUSAL_N_PREFIX, ru.off[i], q + t0 * ldq + g * HS, kk,
                         att + t0 * Tk + g * TT));
  }
  int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, 8)
  for (int64_t r = 0; r < rows; r++) softmax_row(att + r * Tk, td_pos_at(pos, r % T) + 1, Tk);
  for (int i = 0; i < ru.n; i++) { /* out = att·V */
    int64_t t0 = ru.t0[i];
    mm_desc(&d, B, KV, ru.len[i], HS, Tk, satt, sv, sout, 1.0f);
    for (int64_t g = 0; g < G; g++)
      TD_CHECK(mm_causal(k, &d, CAUSAL_K_PREFIX, ru.off[i], att + t0 * Tk + g * TT, v,
                         out + t0 * C + g * HS));
  }
  return TD_OK;
}

/* qkv (B, T, 3C) with C = NH·HS; att (B, NH, T, T); out (B, T, C): the GQA
 * case q = qkv, kk = qkv + C, v = qkv + 2C, row stride 3C, KV = NH. */
td_status td_cpu_attention_fwd(td_kernels *k, float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t NH, int64_t HS) {
  int64_t C = NH * HS;
  if (NH == 0) return TD_OK;
  TD_CHECK(td_cpu_gqa_fwd(k, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                          HS, NULL));
  return TD_OK;
}

/* One row of the softmax backward, in place on datt (Tk), n visible keys:
 * dpre_j = scale·a_j·(datt_j − Σ_{i<n} a_i·datt_i) for j < n, 0 for j ≥ n;
 * |dpre_j| below FLT_MIN is 0. */
TD_CPU_CLONES static void softmax_bwd_row(float *drow, const float *arow, int64_t n,
                                          int64_t Tk, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; j++) dot += arow[j] * drow[j];
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float g = scale * arow[j] * (drow[j] - dot);
    drow[j] = fabsf(g) < TD_ATT_TINY ? 0.0f : g;
  }
  for (int64_t j = n; j < Tk; j++) drow[j] = 0.0f;
}

/* dq, dk, dv (=) the gradients wrt q, kk, v (their layouts and strides: dk,
 * dv (B, Tk, ·)) given dout (B, T, NH·HS); att (B, NH, T, Tk) from the
 * forward; scratch (B, NH, T, Tk) holds datt, then dpre (pre-softmax). Per
 * head h = kv·G + g: dV[kv] = Σ_g attᵀ·dout, datt = dout·V[kv]ᵀ,
 * dpre = softmax'(datt)/√HS, dQ[h] = dpre·K[kv], dK[kv] = Σ_g dpreᵀ·Q[h],
 * the sums over g also over the runs of query rows (the first product
 * overwrites). Every element of the heads of dq, dk, dv is written (=): keys
 * no query sees get 0; the columns past the heads are not touched. */
td_status td_cpu_gqa_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *scratch,
                         const float *dout, const float *q, const float *kk, const float *v,
                         const float *att, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                         int64_t NH, int64_t KV, int64_t HS, const td_pos *pos) {
  td_cpu_mm d;
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_CHECK(td_kernels_pos_args("gqa_bwd", pos, T));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  int64_t C = NH * HS, G = NH / KV, Tk = td_pos_len(pos, T), TT = T * Tk;
  float scale = 1.0f / sqrtf((float)HS);
  att_runs ru = runs_of(pos, T);
  const int64_t sq[4] = {T * ldq, G * HS, ldq, 1};      /* Q, dQ of head kv·G + g */
  const int64_t skv[4] = {Tk * ldkv, HS, ldkv, 1};      /* K, V, dK, dV of head kv */
  const int64_t skvt[4] = {Tk * ldkv, HS, 1, ldkv};     /* Vᵀ */
  const int64_t sdout[4] = {T * C, G * HS, C, 1};
  const int64_t stt[4] = {NH * TT, G * TT, Tk, 1};      /* att, scratch */
  const int64_t sttt[4] = {NH * TT, G * TT, 1, Tk};     /* attᵀ, scratchᵀ */

  for (int64_t g = 0; g < G; g++) /* dV = Σ_g Σ_runs attᵀ·dout */
    for (int i = 0; i < ru.n; i++) {
      int64_t t0 = ru.t0[i];
      mm_desc(&d, B, KV, Tk, HS, ru.len[i], sttt, sdout, skv, 1.0f);
      d.beta = g > 0 || i > 0 ? 1.0f : 0.0f;
      TD_CHECK(mm_causal(k, &d, CAUSAL_K_SUFFIX, ru.off[i], att + t0 * Tk + g * TT,
                         dout + t0 * C + g * HS, dv));
    }
  for (int i = 0; i < ru.n; i++) { /* datt = dout·Vᵀ */
    int64_t t0 = ru.t0[i];
    mm_desc(&d, B, KV, ru.len[i], Tk, HS, sdout, skvt, stt, 1.0f);
    for (int64_t g = 0; g < G; g++)
      TD_CHECK(mm_causal(k, &d, CAUSAL_N_PREFIX, ru.off[i], dout + t0 * C + g * HS, v,
                         scratch + t0 * Tk + g * TT));
  }
  int64_t rows = B * NH * T;
#pragma omp parallel for schedule(static, 8)
  for (int64_t r = 0; r < rows; r++)
    softmax_bwd_row(scratch + r * Tk, att + r * Tk, td_pos_at(pos, r % T) + 1, Tk, scale);
  for (int i = 0; i < ru.n; i++) { /* dQ = dpre·K */
    int64_t t0 = ru.t0[i];
    mm_desc(&d, B, KV, ru.len[i], HS, Tk, stt, skv, sq, 1.0f);
    for (int64_t g = 0; g < G; g++)
      TD_CHECK(mm_causal(k, &d, CAUSAL_K_PREFIX, ru.off[i], scratch + t0 * Tk + g * TT, kk,
                         dq + t0 * ldq + g * HS));
  }
  for (int64_t g = 0; g < G; g++) /* dK = Σ_g Σ_runs dpreᵀ·Q */
    for (int i = 0; i < ru.n; i++) {
      int64_t t0 = ru.t0[i];
      mm_desc(&d, B, KV, Tk, HS, ru.len[i], sttt, sq, skv, 1.0f);
      d.beta = g > 0 || i > 0 ? 1.0f : 0.0f;
      TD_CHECK(mm_causal(k, &d, CAUSAL_K_SUFFIX, ru.off[i], scratch + t0 * Tk + g * TT,
                         q + t0 * ldq + g * HS, dk));
    }
  return TD_OK;
}

/* dqkv (B, T, 3C) = ∂/∂qkv given dout (B, T, C): the GQA case dq = dqkv,
 * dk = dqkv + C, dv = dqkv + 2C, row stride 3C, KV = NH. */
td_status td_cpu_attention_bwd(td_kernels *k, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *att,
                               int64_t B, int64_t T, int64_t NH, int64_t HS) {
  int64_t C = NH * HS;
  if (NH == 0) return TD_OK;
  TD_CHECK(td_cpu_gqa_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, scratch, dout, qkv, qkv + C,
                          qkv + 2 * C, att, 3 * C, 3 * C, B, T, NH, NH, HS, NULL));
  return TD_OK;
}
