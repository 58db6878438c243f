/* flash.c — fused causal grouped-query attention (FlashAttention-2, Dao
 * 2023) on the CPU, forward and backward: nothing of size T·Tk is ever
 * written.
 *
 * Forward: the query rows of one (sequence, head) in tiles of BR rows, the
 * keys and values in tiles of BC; for each query tile the key tiles its rows
 * can see are visited in order, and each row keeps a running maximum m, a
 * running sum l of exp(s − m) and an output accumulator, rescaled by
 * exp(m_old − m_new) when a tile raises the maximum (the online softmax).
 * What is kept for backward is the output and one log-sum-exp per row,
 * lse = m + log l, (B, NH, T) floats.
 *
 * Backward, from the output O, its gradient dO and lse: D = rowsum(dO ∘ O)
 * first (without O — a model that kept it in bf16 — D = Σ_j P_j·dP_j from
 * the probabilities made again, exactly what Σ_j dS_j = 0 needs); every probability tile is made again as P = exp(s − lse), and
 * dS = P ∘ (dO·Vᵀ − D)/√HS. Two passes keep it deterministic without atomics
 * or per-thread partial sums: one over key tiles (dK = Σ dSᵀ·Q, dV = Σ Pᵀ·dO,
 * summing the query heads of the group and their query tiles in a fixed
 * order), one over query tiles (dQ = Σ dS·K over the key tiles in order).
 * Each output element is computed by one thread in one order, so the result
 * is the same bit for bit at every thread count. The price is P and dP made
 * twice (7 tile products for the 5 of one pass).
 *
 * Masks: query row t of sequence b (position p = td_pos_at(pos, t)) sees the
 * keys j with lo ≤ j ≤ p, lo = doc[b·T + t] (the first key of its document)
 * or 0 without document masks. Tiles no row of a query tile can see are
 * skipped, not computed. With positions (context parallelism) the query
 * rows are two runs of consecutive positions; query tiles never straddle
 * them, so a tile's keys are one range.
 *
 * Tiles are sized for the L1/L2 caches (BR = BC = 64 floats wide rows; HS up
 * to TD_FLASH_MAX_HS), the products are register-blocked row loops that the
 * compiler vectorises (AVX-512, AVX2 or SSE clones), and OpenMP runs over
 * (batch, head, tile). Probabilities below FLT_MIN are 0, as in the
 * materialised kernel (attention.c), for the same reason (subnormals). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/td_bf16.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_simd.h"

enum { BR = 64, BC = 64 };

/* What every tile routine reads: the operands of one call. */
typedef struct {
  const float *q, *kk, *v;
  const int32_t *doc;
  const td_pos *pos;
  int64_t ldq, ldkv, B, T, NH, KV, HS, G, Tk, C;
  float scale;
  int64_t ntiles;     /* query tiles of one (b, h) */
  int64_t tile_t0[2]; /* the runs of query rows: [t0, t0 + len) */
  int64_t tile_len[2];
  int64_t run_tiles[2]; /* tiles of each run */
  int bf; /* bf16 products (td_kernels_flash_bf16): operands rounded as staged */
} fa_call;

static int mk_wide(void);

static void fa_setup(fa_call *f, const float *q, const float *kk, const float *v, int64_t ldq,
                     int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                     const td_pos *pos, const int32_t *doc, td_dtype mt) {
  memset(f, 0, sizeof *f);
  (void)mk_wide(); /* decided here, outside the OpenMP regions */
  f->bf = td_kernels_flash_bf16(mt, HS);
  f->q = q, f->kk = kk, f->v = v, f->doc = doc, f->pos = pos;
  f->ldq = ldq, f->ldkv = ldkv, f->B = B, f->T = T, f->NH = NH, f->KV = KV, f->HS = HS;
  f->G = NH / KV, f->Tk = td_pos_len(pos, T), f->C = NH * HS;
  f->scale = 1.0f / sqrtf((float)HS);
  int64_t half = pos ? pos->half : T;
  f->tile_t0[0] = 0, f->tile_len[0] = half;
  f->tile_t0[1] = half, f->tile_len[1] = T - half;
  for (int r = 0; r < 2; r++) f->run_tiles[r] = (f->tile_len[r] + BR - 1) / BR;
  f->ntiles = f->run_tiles[0] + f->run_tiles[1];
}

/* Query tile i of a (b, h): rows [*t0, *t0 + *nr). */
static void fa_tile(const fa_call *f, int64_t i, int64_t *t0, int64_t *nr) {
  int r = i < f->run_tiles[0] ? 0 : 1;
  int64_t k = r == 0 ? i : i - f->run_tiles[0];
  *t0 = f->tile_t0[r] + k * BR;
  int64_t end = f->tile_t0[r] + f->tile_len[r];
  *nr = end - *t0 < BR ? end - *t0 : BR;
}

static inline int64_t fa_lo(const fa_call *f, int64_t b, int64_t t) {
  return f->doc ? f->doc[b * f->T + t] : 0;
}

/* The keys rows [t0, t0 + nr) of sequence b can see, together: [*lo, *hi]. */
static void fa_keys(const fa_call *f, int64_t b, int64_t t0, int64_t nr, int64_t *lo,
                    int64_t *hi) {
  int64_t l = fa_lo(f, b, t0);
  for (int64_t t = t0 + 1; t < t0 + nr && f->doc; t++) {
    int64_t x = fa_lo(f, b, t);
    l = x < l ? x : l;
  }
  *lo = l;
  *hi = td_pos_at(f->pos, t0 + nr - 1); /* positions increase inside a run */
}

/* The products: one register-blocked micro-kernel, C (M × N) (+)= A (M × K)
 * · B (K × N), all row-major with leading dimensions, N a multiple of 16
 * (tiles are padded: HSP columns, zero past HS). Blocks of MR rows × 32 or
 * 16 columns stay in registers over the whole K loop (GCC vector types:
 * one AVX-512 register per 16 floats, two AVX2 or four SSE ones on the
 * other clones). Rows past M reuse row M − 1 and are not stored. */
typedef float v16 __attribute__((vector_size(64)));
/* the same, at any float's alignment: loads and stores through it */
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));
#define LD16(p) ((v16)(*(const v16u *)(p)))
#define ST16(p, v) (*(v16u *)(p) = (v))
enum { MR = 8, MR4 = 4 }; /* rows of a register block (32 or 16 columns; 64) */

/* ta 0: A (M × K) row-major; ta 1: A stored transposed, (K × M), so that
 * C += Aᵀ·B without copying the transpose (the backward's Pᵀ·dO and dSᵀ·Q
 * straight from the score tiles). The same products in the same order
 * either way: the same bits as transposing first. */
__attribute__((always_inline)) static inline void mk_body(
    float *restrict C, int64_t ldc, const float *restrict A, int64_t lda,
    const float *restrict B, int64_t ldb, int64_t M, int64_t N, int64_t K, int acc, int ta) {
  /* 64 columns at a time in blocks of MR4 rows: one broadcast of A feeds
   * four FMAs (the narrower blocks below, two), so broadcasts take fewer
   * of the vector pipes' slots; the columns left (N mod 64) below */
  int64_t n64 = N / 64 * 64;
  for (int64_t j = 0; j < n64; j += 64)
    for (int64_t i = 0; i < M; i += MR4) {
      const float *a[MR4];
      int64_t col[MR4];
#pragma GCC unroll 4
      for (int r = 0; r < MR4; r++) {
        col[r] = i + r < M ? i + r : M - 1;
        a[r] = A + col[r] * lda;
      }
      v16 c[MR4][4];
#pragma GCC unroll 4
      for (int r = 0; r < MR4; r++) c[r][0] = c[r][1] = c[r][2] = c[r][3] = (v16){0};
      for (int64_t k = 0; k < K; k++) {
        const float *bk = B + k * ldb + j;
        v16 b0 = LD16(bk), b1 = LD16(bk + 16), b2 = LD16(bk + 32), b3 = LD16(bk + 48);
#pragma GCC unroll 4
        for (int r = 0; r < MR4; r++) {
          float x = ta ? A[k * lda + col[r]] : a[r][k];
          c[r][0] += x * b0, c[r][1] += x * b1, c[r][2] += x * b2, c[r][3] += x * b3;
        }
      }
      int64_t mr = M - i < MR4 ? M - i : MR4;
      for (int r = 0; r < mr; r++) {
        float *o = C + (i + r) * ldc + j;
        for (int q = 0; q < 4; q++) ST16(o + 16 * q, acc ? LD16(o + 16 * q) + c[r][q] : c[r][q]);
      }
    }
  if (n64 == N) return;
  for (int64_t i = 0; i < M; i += MR) {
    const float *a[MR];
    int64_t col[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      col[r] = i + r < M ? i + r : M - 1;
      a[r] = A + col[r] * lda;
    }
#define AT(r, k) (ta ? A[(k) * lda + col[r]] : a[r][k])
    int64_t mr = M - i < MR ? M - i : MR, j = n64;
    for (; j + 32 <= N; j += 32) {
      v16 c[MR], d[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) c[r] = (v16){0}, d[r] = (v16){0};
      for (int64_t k = 0; k < K; k++) {
        v16 b0 = LD16(B + k * ldb + j), b1 = LD16(B + k * ldb + j + 16);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
          float x = AT(r, k);
          c[r] += x * b0, d[r] += x * b1;
        }
      }
      for (int r = 0; r < mr; r++) {
        float *o = C + (i + r) * ldc + j;
        ST16(o, acc ? LD16(o) + c[r] : c[r]);
        ST16(o + 16, acc ? LD16(o + 16) + d[r] : d[r]);
      }
    }
    for (; j < N; j += 16) {
      v16 c[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) c[r] = (v16){0};
      for (int64_t k = 0; k < K; k++) {
        v16 b0 = LD16(B + k * ldb + j);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) c[r] += AT(r, k) * b0;
      }
      for (int r = 0; r < mr; r++) {
        float *o = C + (i + r) * ldc + j;
        ST16(o, acc ? LD16(o) + c[r] : c[r]);
      }
    }
#undef AT
  }
}

/* The same products for machines with 16 vector registers (AVX2: a v16 is
 * two of them; the blocks above, 16 or more v16 accumulators, spill to the
 * stack there and ran at a fifth of the gemm rate): 6 rows × 16 columns
 * in twelve 8-float accumulators, named one by one so that the compiler
 * keeps them in registers, two of B and one broadcast. Each element is the
 * same sum over k in order, so both bodies give the same bits. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LD8(p) ((v8)(*(const v8u *)(p)))
#define ST8(p, v) (*(v8u *)(p) = (v))
__attribute__((always_inline)) static inline void mk_body_narrow(
    float *restrict C, int64_t ldc, const float *restrict A, int64_t lda,
    const float *restrict B, int64_t ldb, int64_t M, int64_t N, int64_t K, int acc, int ta) {
  for (int64_t j = 0; j < N; j += 16)
    for (int64_t i = 0; i < M; i += 6) {
      int64_t r0 = i, r1 = i + 1 < M ? i + 1 : M - 1, r2 = i + 2 < M ? i + 2 : M - 1,
              r3 = i + 3 < M ? i + 3 : M - 1, r4 = i + 4 < M ? i + 4 : M - 1,
              r5 = i + 5 < M ? i + 5 : M - 1;
      /* A(r, k): row r's k-th, from a row-major A or a transposed one */
      int64_t sr = ta ? 1 : lda, sk = ta ? lda : 1;
      const float *a0 = A + r0 * sr, *a1 = A + r1 * sr, *a2 = A + r2 * sr, *a3 = A + r3 * sr,
                  *a4 = A + r4 * sr, *a5 = A + r5 * sr;
      v8 c0 = {0}, d0 = {0}, c1 = {0}, d1 = {0}, c2 = {0}, d2 = {0};
      v8 c3 = {0}, d3 = {0}, c4 = {0}, d4 = {0}, c5 = {0}, d5 = {0};
      for (int64_t k = 0; k < K; k++) {
        const float *bk = B + k * ldb + j;
        v8 b0 = LD8(bk), b1 = LD8(bk + 8);
        float x;
        x = a0[k * sk], c0 += x * b0, d0 += x * b1;
        x = a1[k * sk], c1 += x * b0, d1 += x * b1;
        x = a2[k * sk], c2 += x * b0, d2 += x * b1;
        x = a3[k * sk], c3 += x * b0, d3 += x * b1;
        x = a4[k * sk], c4 += x * b0, d4 += x * b1;
        x = a5[k * sk], c5 += x * b0, d5 += x * b1;
      }
      v8 cs[6][2] = {{c0, d0}, {c1, d1}, {c2, d2}, {c3, d3}, {c4, d4}, {c5, d5}};
      int64_t mr = M - i < 6 ? M - i : 6;
      for (int r = 0; r < mr; r++) {
        float *o = C + (i + r) * ldc + j;
        ST8(o, acc ? LD8(o) + cs[r][0] : cs[r][0]);
        ST8(o + 8, acc ? LD8(o + 8) + cs[r][1] : cs[r][1]);
      }
    }
}

/* Whether the wide blocks fit the registers: AVX-512's 32 (x86 only; the
 * narrow blocks elsewhere). Test only: TD_TEST_FLASH_BLOCKS=wide|narrow
 * picks one, so that both run on every machine. Read once, before any
 * OpenMP region's calls. */
static int mk_wide(void) {
  static int wide = -1;
  if (wide >= 0) return wide;
  const char *e = getenv("TD_TEST_FLASH_BLOCKS");
  if (e && (strcmp(e, "wide") == 0 || strcmp(e, "narrow") == 0)) {
    wide = strcmp(e, "wide") == 0;
    return wide;
  }
#if defined(__GNUC__) && defined(__x86_64__)
  wide = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
  wide = 0;
#endif
  return wide;
}

TD_CPU_CLONES static void mk_impl(float *restrict C, int64_t ldc, const float *restrict A,
                                  int64_t lda, const float *restrict B, int64_t ldb, int64_t M,
                                  int64_t N, int64_t K, int acc, int ta, int wide) {
  if (wide) mk_body(C, ldc, A, lda, B, ldb, M, N, K, acc, ta);
  else if (ta) mk_body_narrow(C, ldc, A, lda, B, ldb, M, N, K, acc, 1);
  else mk_body_narrow(C, ldc, A, lda, B, ldb, M, N, K, acc, 0);
}

static void mk(float *restrict C, int64_t ldc, const float *restrict A, int64_t lda,
               const float *restrict B, int64_t ldb, int64_t M, int64_t N, int64_t K, int acc) {
  mk_impl(C, ldc, A, lda, B, ldb, M, N, K, acc, 0, mk_wide());
}

static void mk_ta(float *restrict C, int64_t ldc, const float *restrict A, int64_t lda,
                  const float *restrict B, int64_t ldb, int64_t M, int64_t N, int64_t K,
                  int acc) {
  mk_impl(C, ldc, A, lda, B, ldb, M, N, K, acc, 1, mk_wide());
}

/* dst (nc × BR) = the first nr columns... the transpose of src's (nr × BC)
 * tile's first nc columns. */
static void transpose(float *restrict dst, const float *restrict src, int64_t nr, int64_t nc,
                      int bf) {
  for (int64_t i = 0; i < nr; i++)
    for (int64_t c = 0; c < nc; c++)
      dst[c * BR + i] = bf ? td_bf16_round(src[i * BC + c]) : src[i * BC + c];
}

/* The mask of a score tile (S NULL: only the answer): S[i, c] = −inf where
 * key j0 + c is past nc or outside [lo(t0 + i), pos(t0 + i)]. Returns
 * whether any entry is visible; a tile with none is skipped before its
 * products. */
static int tile_mask(const fa_call *f, float *S, int64_t b, int64_t t0, int64_t nr, int64_t j0,
                     int64_t nc) {
  int any = 0;
  for (int64_t i = 0; i < nr; i++) {
    int64_t lo = fa_lo(f, b, t0 + i) - j0, hi = td_pos_at(f->pos, t0 + i) - j0;
    hi = hi >= nc ? nc - 1 : hi;
    any |= lo <= hi;
    if (!S || (lo <= 0 && hi >= BC - 1)) continue; /* the whole row visible */
    float *s = S + i * BC;
    for (int64_t c = 0; c < BC; c++)
      if (c < lo || c > hi) s[c] = -INFINITY;
  }
  return any;
}

/* P = exp(scale·S − lse row) in place, −inf and underflow to 0 (the
 * backward's probabilities from the forward's log-sum-exp). */
TD_CPU_CLONES static void tile_prob(float *S, const float *lse, int64_t nr, float scale) {
  for (int64_t i = 0; i < nr; i++) {
    float *s = S + i * BC, l = lse[i];
#pragma omp simd
    for (int c = 0; c < BC; c++) {
      float x = scale * s[c] - l; /* −inf stays −inf */
      s[c] = x < -87.0f ? 0.0f : td_cpu_expf(x);
    }
  }
}

/* dS = scale · P ∘ (dP − D row), in place on dP; |dS| below FLT_MIN is 0. */
TD_CPU_CLONES static void tile_ds(float *dP, const float *P, const float *D, int64_t nr,
                                  float scale) {
  for (int64_t i = 0; i < nr; i++) {
    float *g = dP + i * BC, dd = D[i];
    const float *p = P + i * BC;
#pragma omp simd
    for (int c = 0; c < BC; c++) {
      float x = scale * p[c] * (g[c] - dd);
      g[c] = fabsf(x) < 1.17549435e-38f ? 0.0f : x;
    }
  }
}

/* The online softmax of one row of a score tile under bf16 products, as
 * the device's tensor-core forward makes it: in two halves of BC/2 keys
 * (its key tiles), each half's probabilities exp(s − m) taken against the
 * running maximum m after that half and rounded to bf16 (P·V's operand),
 * the sum l of the unrounded ones; the first half's rounded values then
 * scaled by the second half's rescale factor (in float32), which is what
 * the device's rescaled output accumulator amounts to. The rounding of P
 * depends on the maximum it is taken against, so the halves must be the
 * device's tiles for the two back-ends to compute the same P. */
static void row_softmax_bf16(float *s, float *m, float *l, float *o, int64_t HSP, float scale) {
  enum { H = BC / 2 };
  float mcur = *m, lcur = *l, a12 = 1.0f, alpha[2];
  for (int h = 0; h < 2; h++) {
    float *x = s + h * H, mx = mcur, sum = 0.0f;
    for (int c = 0; c < H; c++) mx = x[c] * scale > mx ? x[c] * scale : mx;
    alpha[h] = mx == mcur ? 1.0f : mcur - mx < -87.0f ? 0.0f : td_cpu_expf(mcur - mx);
    for (int c = 0; c < H; c++) {
      float e = 0.0f;
      if (mx != -INFINITY) {
        float y = scale * x[c] - mx; /* −inf (masked) stays −inf */
        e = y < -87.0f ? 0.0f : td_cpu_expf(y);
      }
      sum += e;
      x[c] = td_bf16_round(e);
    }
    lcur = lcur * alpha[h] + sum;
    mcur = mx;
    a12 *= alpha[h];
  }
  if (alpha[1] != 1.0f)
    for (int c = 0; c < H; c++) s[c] *= alpha[1];
  if (a12 != 1.0f)
    for (int64_t d = 0; d < HSP; d++) o[d] *= a12;
  *m = mcur, *l = lcur;
}

/* The online softmax of a score tile's nr rows (float32 products): each
 * row's maximum m and sum l updated, its scores replaced by exp(s − m),
 * and its output row rescaled by exp(m_old − m_new) when the maximum rose.
 * Compiled per instruction set (the caller is not): the exponentials are
 * most of the forward's non-product work. */
TD_CPU_CLONES static void tile_softmax(float *S, float *m, float *l, float *O, int64_t nr,
                                       int64_t HSP, float scale) {
  for (int64_t i = 0; i < nr; i++) {
    float *s = S + i * BC, mx = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int c = 0; c < BC; c++) mx = s[c] > mx ? s[c] : mx;
    mx *= scale;
    mx = m[i] > mx ? m[i] : mx;
    if (mx == -INFINITY) { /* nothing visible yet */
      for (int c = 0; c < BC; c++) s[c] = 0.0f;
      continue;
    }
    float alpha = m[i] - mx < -87.0f ? 0.0f : td_cpu_expf(m[i] - mx); /* m −inf: 0 */
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < BC; c++) {
      float x = scale * s[c] - mx;
      float e = x < -87.0f ? 0.0f : td_cpu_expf(x);
      s[c] = e;
      sum += e;
    }
    l[i] = l[i] * alpha + sum;
    m[i] = mx;
    if (alpha != 1.0f) {
      float *o = O + i * HSP;
#pragma omp simd
      for (int64_t d = 0; d < HSP; d++) o[d] *= alpha;
    }
  }
}

/* A tile's nr rows rounded to bf16 (bf16 products). */
static void tile_round(float *S, int64_t nr) {
  for (int64_t i = 0; i < nr * BC; i++) S[i] = td_bf16_round(S[i]);
}

/* Rows [t0, t0 + n) of head column block `col` (HS floats from column
 * col·HS) of a (B, T, ·) array of row stride ld, sequence b, into dst
 * (BR rows of HSP floats: columns past HS and rows past n are 0). */
static void load_rows(float *dst, const float *src, int64_t ld, int64_t b, int64_t T,
                      int64_t t0, int64_t n, int64_t col, int64_t HS, int64_t HSP, int bf) {
  for (int64_t i = 0; i < BR; i++) {
    float *o = dst + i * HSP;
    if (i < n) memcpy(o, src + (b * T + t0 + i) * ld + col * HS, (size_t)HS * sizeof(float));
    memset(o + (i < n ? HS : 0), 0, (size_t)(i < n ? HSP - HS : HSP) * sizeof(float));
    for (int64_t d = 0; bf && i < n && d < HS; d++) o[d] = td_bf16_round(o[d]);
  }
}

/* The same rows transposed: dst (HS × BC), element (d, c) = row c's d;
 * columns past n are 0. */
static void load_cols(float *dst, const float *src, int64_t ld, int64_t b, int64_t T,
                      int64_t t0, int64_t n, int64_t col, int64_t HS, int bf) {
  for (int64_t d = 0; d < HS; d++) {
    float *o = dst + d * BC;
    const float *x = src + (b * T + t0) * ld + col * HS + d;
    int64_t c = 0;
    for (; c < n; c++) o[c] = bf ? td_bf16_round(x[c * ld]) : x[c * ld];
    for (; c < BC; c++) o[c] = 0.0f;
  }
}

/* Per-thread tiles: TD_FLASH_TILES of BR (= BC) rows × max(HSP, BC) floats. */
enum { TD_FLASH_TILES = 12 };

static int64_t tile_floats(int64_t HSP) { return (int64_t)BR * (HSP > BC ? HSP : BC); }

/* Every thread's own floats (per_thread each, from a 64-byte boundary) in
 * the back-end's workspace, grown to the largest call and kept: a fresh
 * allocation every call was freshly mapped pages, faulted in and cleared
 * (5% of a training step at T 4096). *stride: floats between threads. */
static td_status thread_space(td_kernels *k, int64_t per_thread, int nthr, float **base,
                              int64_t *stride) {
  td_cpu_state *s = k->state;
  *stride = (per_thread + 15) / 16 * 16;
  size_t need = (size_t)*stride * (size_t)nthr * sizeof(float);
  TD_CHECK(td_cpu_grow(&s->flash_thr, &s->flash_thr_bytes, need, "flash attention tiles"));
  *base = s->flash_thr;
  return TD_OK;
}

/* The keys and values of every (b, kv), packed by key tile once per call
 * (the query tiles read them again and again): kt and vt transposed
 * (HS × BC a tile), kr and vr as rows (BC × HSP a tile, zero past HS and
 * past the last key). NULL members are not made. They live in the
 * back-end's workspace (td_cpu_state.flash), grown to the largest call and
 * kept: freshly mapped pages every call cost a page fault per 4 KiB. Its
 * size is the keys' and values' (B·Tk·KV·HS floats each, padded), the same
 * order as the layer's own K and V. */
typedef struct {
  float *kt, *vt, *kr, *vr;
  int64_t nkt, HSP;
} fa_pack;

/* want: "tTrR" letters for kt, vt, kr, vr (t/r for keys, T/R for values) */
static td_status fa_pack_make(td_kernels *k, fa_pack *p, const fa_call *f, const char *want) {
  td_cpu_state *s = k->state;
  memset(p, 0, sizeof *p);
  p->nkt = (f->Tk + BC - 1) / BC, p->HSP = (f->HS + 15) / 16 * 16;
  int64_t units = f->B * f->KV * p->nkt, HS = f->HS, HSP = p->HSP;
  size_t nt = (size_t)(units * HS * BC), nr = (size_t)(units * BC * HSP), need = 0;
  const char *keys = "tTrR";
  for (int i = 0; i < 4; i++)
    if (strchr(want, keys[i])) need += i < 2 ? nt : nr;
  TD_CHECK(td_cpu_grow(&s->flash, &s->flash_bytes, need * sizeof(float),
                       "flash attention workspace"));
  float **dst[4] = {&p->kt, &p->vt, &p->kr, &p->vr}, *at = s->flash;
  for (int i = 0; i < 4; i++)
    if (strchr(want, keys[i])) *dst[i] = at, at += i < 2 ? nt : nr;
#pragma omp parallel for schedule(static)
  for (int64_t u = 0; u < units; u++) {
    int64_t b = u / (f->KV * p->nkt), kv = u / p->nkt % f->KV, j0 = u % p->nkt * BC;
    int64_t nc = f->Tk - j0 < BC ? f->Tk - j0 : BC;
    if (p->kt) load_cols(p->kt + u * HS * BC, f->kk, f->ldkv, b, f->Tk, j0, nc, kv, HS, f->bf);
    if (p->vt) load_cols(p->vt + u * HS * BC, f->v, f->ldkv, b, f->Tk, j0, nc, kv, HS, f->bf);
    if (p->kr) load_rows(p->kr + u * BC * HSP, f->kk, f->ldkv, b, f->Tk, j0, nc, kv, HS, HSP, f->bf);
    if (p->vr) load_rows(p->vr + u * BC * HSP, f->v, f->ldkv, b, f->Tk, j0, nc, kv, HS, HSP, f->bf);
  }
  return TD_OK;
}

/* Tile j0 of (b, kv) in a packed array of tiles of `size` floats. */
static inline const float *fa_tile_of(const fa_pack *p, const float *base, const fa_call *f,
                                      int64_t b, int64_t kv, int64_t j0, int64_t size) {
  return base + ((b * f->KV + kv) * p->nkt + j0 / BC) * size;
}

/* Shared checks of both directions; doc rows must lie inside their masks. */
static td_status fa_args(const char *op, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                         int64_t NH, int64_t KV, int64_t HS, const td_pos *pos,
                         const int32_t *doc) {
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_CHECK(td_kernels_pos_args(op, pos, T));
  for (int64_t b = 0; doc && b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      int64_t lo = doc[b * T + t], p = td_pos_at(pos, t);
      if (lo < 0 || lo > p)
        TD_FAIL(TD_ERR_USAGE,
                "%s: document start %lld of row %lld of sequence %lld is outside [0, %lld]", op,
                (long long)lo, (long long)t, (long long)b, (long long)p);
    }
  return TD_OK;
}

td_status td_cpu_flash_fwd(td_kernels *k, float *out, float *lse, const float *q,
                           const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                           int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                           const td_pos *pos, const int32_t *doc, td_dtype mt) {
  TD_CHECK(fa_args("flash_fwd", ldq, ldkv, B, T, NH, KV, HS, pos, doc));
  TD_REQUIRE(mt == TD_DTYPE_F32 || mt == TD_DTYPE_BF16, TD_ERR_USAGE,
             "%s: the products' type must be float32 or bf16", "flash_fwd"); /* float32 here either way */
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  fa_call f;
  fa_setup(&f, q, kk, v, ldq, ldkv, B, T, NH, KV, HS, pos, doc, mt);
  int64_t units = B * NH * f.ntiles, HSP = (HS + 15) / 16 * 16, W = tile_floats(HSP);
  fa_pack pk;
  TD_CHECK(fa_pack_make(k, &pk, &f, "tR"));
  int nthr = omp_get_max_threads();
  float *space = NULL;
  int64_t stride = 0;
  TD_CHECK(thread_space(k, TD_FLASH_TILES * W, nthr, &space, &stride));
#pragma omp parallel num_threads(nthr)
  {
    float *w = space + (int64_t)omp_get_thread_num() * stride;
    memset(w, 0, (size_t)(TD_FLASH_TILES * W) * sizeof(float));
    float *Qt = w, *S = w + 3 * W, *O = w + 4 * W;
    const float *Kt, *Vr;
    float m[BR], l[BR];
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; u++) {
      int64_t b = u / (NH * f.ntiles), h = u / f.ntiles % NH, it = u % f.ntiles;
      int64_t kv = h / f.G, t0, nr, lo, hi;
      fa_tile(&f, it, &t0, &nr);
      fa_keys(&f, b, t0, nr, &lo, &hi);
      load_rows(Qt, q, ldq, b, T, t0, nr, h, HS, HSP, f.bf);
      memset(O, 0, (size_t)(BR * HSP) * sizeof(float));
      for (int64_t i = 0; i < nr; i++) m[i] = -INFINITY, l[i] = 0.0f;
      for (int64_t j0 = lo / BC * BC; j0 <= hi; j0 += BC) {
        int64_t nc = f.Tk - j0 < BC ? f.Tk - j0 : BC;
        if (!tile_mask(&f, NULL, b, t0, nr, j0, nc)) continue;
        Kt = fa_tile_of(&pk, pk.kt, &f, b, kv, j0, HS * BC);
        Vr = fa_tile_of(&pk, pk.vr, &f, b, kv, j0, BC * HSP);
        mk(S, BC, Qt, HSP, Kt, BC, nr, BC, HS, 0); /* Q·Kᵀ */
        tile_mask(&f, S, b, t0, nr, j0, nc);
        for (int64_t i = 0; f.bf && i < nr; i++)
          row_softmax_bf16(S + i * BC, &m[i], &l[i], O + i * HSP, HSP, f.scale);
        if (!f.bf) tile_softmax(S, m, l, O, nr, HSP, f.scale);
        mk(O, HSP, S, BC, Vr, HSP, nr, HSP, nc, 1); /* O += P·V */
      }
      for (int64_t i = 0; i < nr; i++) {
        float inv = 1.0f / l[i], *o = out + (b * T + t0 + i) * f.C + h * HS;
        for (int64_t d = 0; d < HS; d++) o[d] = O[i * HSP + d] * inv;
        lse[(b * NH + h) * T + t0 + i] = m[i] + logf(l[i]);
      }
    }
  }
  return TD_OK;
}

/* The backward's tiles of query rows [t0, t0 + nr) (Qt, Gt: Q and dO, as
 * load_rows left them) against key tile j0 of (b, kv): S = P =
 * exp(Q·Kᵀ/√HS − lse) masked, and dP = dO·Vᵀ. 0 (nothing computed) when the
 * mask hides the whole tile. */
static int tile_p_dp(const fa_call *f, const fa_pack *pk, const float *Qt, const float *Gt,
                     const float *L, int64_t b, int64_t kv, int64_t t0, int64_t nr, int64_t j0,
                     float *S, float *dP) {
  int64_t nc = f->Tk - j0 < BC ? f->Tk - j0 : BC, HS = f->HS, HSP = pk->HSP;
  if (!tile_mask(f, NULL, b, t0, nr, j0, nc)) return 0;
  mk(S, BC, Qt, HSP, fa_tile_of(pk, pk->kt, f, b, kv, j0, HS * BC), BC, nr, BC, HS, 0);
  tile_mask(f, S, b, t0, nr, j0, nc);
  tile_prob(S, L + t0, nr, f->scale);
  mk(dP, BC, Gt, HSP, fa_tile_of(pk, pk->vt, f, b, kv, j0, HS * BC), BC, nr, BC, HS, 0);
  return 1;
}

/* A thread's tiles for the backward (tile_floats each). */
typedef struct {
  float *Qt, *Gt, *S, *dP, *Acc, *Pt;
} fa_bwd_tiles;

/* Query tile it of head h of sequence b against the key tiles it sees, in
 * order: its dQ (=, rows of dq) as Σ dS·K, and with dKall and dVall (the
 * one-pass sweep: the key/value head's whole-sequence sums, BC·HSP floats a
 * key tile) also dV += Pᵀ·dO and dK += dSᵀ·Q at the key tiles' rows. */
static void qtile_bwd(const fa_call *f, const fa_pack *pk, const fa_bwd_tiles *x, int64_t b,
                      int64_t h, int64_t it, const float *lse, const float *delta,
                      const float *dout, float *dq, float *dKall, float *dVall) {
  int64_t T = f->T, NH = f->NH, HS = f->HS, HSP = pk->HSP, kv = h / f->G, t0, nr, lo, hi;
  const float *L = lse + (b * NH + h) * T, *D = delta + (b * NH + h) * T;
  fa_tile(f, it, &t0, &nr);
  fa_keys(f, b, t0, nr, &lo, &hi);
  load_rows(x->Qt, f->q, f->ldq, b, T, t0, nr, h, HS, HSP, f->bf);
  load_rows(x->Gt, dout, f->C, b, T, t0, nr, h, HS, HSP, f->bf);
  memset(x->Acc, 0, (size_t)(BR * HSP) * sizeof(float));
  for (int64_t j0 = lo / BC * BC; j0 <= hi; j0 += BC) {
    int64_t nc = f->Tk - j0 < BC ? f->Tk - j0 : BC;
    if (!tile_p_dp(f, pk, x->Qt, x->Gt, L, b, kv, t0, nr, j0, x->S, x->dP)) continue;
    if (dVall && f->bf) { /* P rounded to bf16 for the product only */
      transpose(x->Pt, x->S, nr, nc, 1);
      mk(dVall + j0 * HSP, HSP, x->Pt, BR, x->Gt, HSP, nc, HSP, nr, 1); /* dV += Pᵀ·dO */
    } else if (dVall) {
      mk_ta(dVall + j0 * HSP, HSP, x->S, BC, x->Gt, HSP, nc, HSP, nr, 1);
    }
    tile_ds(x->dP, x->S, D + t0, nr, f->scale);
    /* dK's dS stays float32 (the device's hi + lo bf16 parts); dQ's is
     * rounded under bf16 products: dK's product first, from the float32 dS */
    if (dKall) mk_ta(dKall + j0 * HSP, HSP, x->dP, BC, x->Qt, HSP, nc, HSP, nr, 1); /* dK += dSᵀ·Q */
    if (f->bf) tile_round(x->dP, nr);
    const float *Kr = fa_tile_of(pk, pk->kr, f, b, kv, j0, BC * HSP);
    mk(x->Acc, HSP, x->dP, BC, Kr, HSP, nr, HSP, nc, 1); /* dQ += dS·K */
  }
  for (int64_t i = 0; i < nr; i++)
    memcpy(dq + (b * T + t0 + i) * f->ldq + h * HS, x->Acc + i * HSP, (size_t)HS * sizeof(float));
}

td_status td_cpu_flash_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                           const float *dout, const float *out, const float *lse,
                           const float *q, const float *kk, const float *v, int64_t ldq,
                           int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                           int64_t HS, const td_pos *pos, const int32_t *doc, td_dtype mt) {
  TD_CHECK(fa_args("flash_bwd", ldq, ldkv, B, T, NH, KV, HS, pos, doc));
  TD_REQUIRE(mt == TD_DTYPE_F32 || mt == TD_DTYPE_BF16, TD_ERR_USAGE,
             "%s: the products' type must be float32 or bf16", "flash_bwd"); /* float32 here either way */
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  fa_call f;
  fa_setup(&f, q, kk, v, ldq, ldkv, B, T, NH, KV, HS, pos, doc, mt);
  int64_t C = f.C, rows = B * NH * T;
  /* bf16 products: D from the probabilities, as the device's tensor-core
   * kernels make it (O from rounded probabilities would not make Σ_j dS_j
   * vanish) */
  if (f.bf) out = NULL;
  /* D = rowsum(dO ∘ O), (B, NH, T) — from O when given */
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t b = r / (NH * T), h = r / T % NH, t = r % T, at = (b * T + t) * C + h * HS;
    float s = 0.0f;
    for (int64_t d = 0; out && d < HS; d++) s += dout[at + d] * out[at + d];
    delta[r] = s;
  }
  int64_t HSP = (HS + 15) / 16 * 16, W = tile_floats(HSP), nkt = (f.Tk + BC - 1) / BC;
  /* One pass when there are enough (b, kv) pairs to keep the threads busy:
   * a pair owns its key/value head's dK, dV and its query heads' dQ, so
   * one sweep over its query tiles sums all three (dK, dV in per-thread
   * whole-sequence buffers) — the same products on the same tiles, each
   * sum in the same order as the two passes, so the same bits, with 5 tile
   * products instead of 7 and each Q, dO tile loaded once. Else two
   * passes, for parallelism over tiles. */
  int one = B * KV >= 2 * (int64_t)omp_get_max_threads();
  int64_t qunits = B * NH * f.ntiles, kunits = B * KV * nkt;
  fa_pack pk;
  TD_CHECK(fa_pack_make(k, &pk, &f, "tTr"));
  /* per thread: the tiles and, one pass, dK and dV of the whole sequence
   * (the unit's key/value head) */
  int nthr = omp_get_max_threads();
  int64_t per = TD_FLASH_TILES * W + (one ? 2 * nkt * BC * HSP : 0), stride = 0;
  float *space = NULL;
  TD_CHECK(thread_space(k, per, nthr, &space, &stride));
#pragma omp parallel num_threads(nthr)
  {
    float *w = space + (int64_t)omp_get_thread_num() * stride;
    memset(w, 0, (size_t)(TD_FLASH_TILES * W) * sizeof(float));
    float *dKV = one ? w + TD_FLASH_TILES * W : NULL;
    float *Qt = w, *Gt = w + W;
    float *S = w + 5 * W, *dP = w + 6 * W, *Acc = w + 7 * W, *Pt = w + 8 * W;
    float *dK = w + 9 * W, *dV = w + 10 * W;
    /* without O: D = Σ_j P_j·dP_j over the key tiles in order, per query tile */
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < (out ? 0 : qunits); u++) {
      int64_t b = u / (NH * f.ntiles), h = u / f.ntiles % NH, it = u % f.ntiles;
      int64_t kv = h / f.G, t0, nr, lo, hi;
      const float *L = lse + (b * NH + h) * T;
      float *D = delta + (b * NH + h) * T;
      fa_tile(&f, it, &t0, &nr);
      fa_keys(&f, b, t0, nr, &lo, &hi);
      load_rows(Qt, q, ldq, b, T, t0, nr, h, HS, HSP, f.bf);
      load_rows(Gt, dout, C, b, T, t0, nr, h, HS, HSP, f.bf);
      for (int64_t j0 = lo / BC * BC; j0 <= hi; j0 += BC) {
        if (!tile_p_dp(&f, &pk, Qt, Gt, L, b, kv, t0, nr, j0, S, dP)) continue;
        for (int64_t i = 0; i < nr; i++) {
          float s = 0.0f;
          for (int c = 0; c < BC; c++) s += S[i * BC + c] * dP[i * BC + c];
          D[t0 + i] += s;
        }
      }
    }
    fa_bwd_tiles x = {Qt, Gt, S, dP, Acc, Pt};
    /* dQ over query tiles: Σ over the key tiles in order of dS·K */
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < (one ? 0 : qunits); u++)
      qtile_bwd(&f, &pk, &x, u / (NH * f.ntiles), u / f.ntiles % NH, u % f.ntiles, lse,
                       delta, dout, dq, NULL, NULL);
    /* dK, dV over key tiles: Σ over the group's heads, then their query
     * tiles in order, of dSᵀ·Q and Pᵀ·dO; keys no query sees get 0 */
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < (one ? 0 : kunits); u++) {
      int64_t b = u / (KV * nkt), kv = u / nkt % KV, j0 = u % nkt * BC;
      int64_t nc = f.Tk - j0 < BC ? f.Tk - j0 : BC;
      memset(dK, 0, (size_t)(BC * HSP) * sizeof(float));
      memset(dV, 0, (size_t)(BC * HSP) * sizeof(float));
      for (int64_t g = 0; g < f.G; g++) {
        int64_t h = kv * f.G + g;
        const float *L = lse + (b * NH + h) * T, *D = delta + (b * NH + h) * T;
        for (int64_t it = 0; it < f.ntiles; it++) {
          int64_t t0, nr, lo, hi;
          fa_tile(&f, it, &t0, &nr);
          fa_keys(&f, b, t0, nr, &lo, &hi);
          if (hi < j0 || lo >= j0 + nc || !tile_mask(&f, NULL, b, t0, nr, j0, nc)) continue;
          load_rows(Qt, q, ldq, b, T, t0, nr, h, HS, HSP, f.bf);
          load_rows(Gt, dout, C, b, T, t0, nr, h, HS, HSP, f.bf);
          tile_p_dp(&f, &pk, Qt, Gt, L, b, kv, t0, nr, j0, S, dP);
          if (f.bf) {
            transpose(Pt, S, nr, nc, 1);
            mk(dV, HSP, Pt, BR, Gt, HSP, nc, HSP, nr, 1); /* dV += Pᵀ·dO */
          } else {
            mk_ta(dV, HSP, S, BC, Gt, HSP, nc, HSP, nr, 1);
          }
          tile_ds(dP, S, D + t0, nr, f.scale);
          mk_ta(dK, HSP, dP, BC, Qt, HSP, nc, HSP, nr, 1); /* dK += dSᵀ·Q */
        }
      }
      for (int64_t c = 0; c < nc; c++) {
        memcpy(dk + (b * f.Tk + j0 + c) * ldkv + kv * HS, dK + c * HSP, (size_t)HS * sizeof(float));
        memcpy(dv + (b * f.Tk + j0 + c) * ldkv + kv * HS, dV + c * HSP, (size_t)HS * sizeof(float));
      }
    }
    /* One pass: a unit is a (b, kv); over its query heads and their query
     * tiles in order, each tile's Q and dO loaded once, against the key
     * tiles it sees in order: dQ of the tile summed over the key tiles
     * (as the dQ pass does), dK and dV of every key tile summed over (head,
     * query tile) in the key-tile pass's order, in whole-sequence buffers */
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < (one ? B * KV : 0); u++) {
      int64_t b = u / KV, kv = u % KV;
      float *dKall = dKV, *dVall = dKV + nkt * BC * HSP;
      memset(dKV, 0, (size_t)(2 * nkt * BC * HSP) * sizeof(float));
      for (int64_t g = 0; g < f.G; g++)
        for (int64_t it = 0; it < f.ntiles; it++)
          qtile_bwd(&f, &pk, &x, b, kv * f.G + g, it, lse, delta, dout, dq, dKall, dVall);
      for (int64_t j = 0; j < f.Tk; j++) {
        memcpy(dk + (b * f.Tk + j) * ldkv + kv * HS, dKall + j * HSP, (size_t)HS * sizeof(float));
        memcpy(dv + (b * f.Tk + j) * ldkv + kv * HS, dVall + j * HSP, (size_t)HS * sizeof(float));
      }
    }
  }
  return TD_OK;
}
