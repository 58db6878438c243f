/* matmul.c — gemm, bias and the matmul plan cache of the CPU back-end.
 *
 * Every product (the ops table's gemm and attention's batched products) is a
 * td_cpu_mm: C = alpha·A·B + beta·C over strided operands. Its executable
 * form (a oneDNN primitive, or nothing for CBLAS) is built once per distinct
 * descriptor and kept in a chained hash table; the scratchpad is one buffer
 * shared by all plans, grown to the largest need. After warm-up nothing here
 * allocates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/td_cpu.h"

struct td_cpu_plan {
  td_cpu_mm key;
  uint64_t hash;
  void *impl;
  td_cpu_plan *next;
};

/* FNV-1a over the descriptor's bytes (keys are memset before filling). */
static uint64_t mm_hash(const td_cpu_mm *d) {
  const unsigned char *p = (const unsigned char *)d;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *d; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void td_cpu_mm_cache_clear(td_cpu_state *s) {
  if (!s->buckets) return;
  for (int64_t b = 0; b < s->nbuckets; b++) {
    td_cpu_plan *p = s->buckets[b];
    while (p) {
      td_cpu_plan *next = p->next;
      td_cpu_mm_impl_destroy(p->impl);
      td_free(p);
      p = next;
    }
    s->buckets[b] = NULL;
  }
  s->nplans = 0;
}

/* Find d's plan, creating it (and growing the scratchpad) on a miss. */
static td_status mm_plan_get(td_cpu_state *s, const td_cpu_mm *d, td_cpu_plan **out) {
  td_status st = TD_OK;
  td_cpu_plan *p = NULL;
  void *impl = NULL;
  size_t need = 0;
  uint64_t h = mm_hash(d);
  td_cpu_plan **head = &s->buckets[h & (uint64_t)(s->nbuckets - 1)];
  for (p = *head; p; p = p->next)
    if (p->hash == h && memcmp(&p->key, d, sizeof *d) == 0) {
      *out = p;
      return TD_OK;
    }
  TD_CHECK_GOTO(td_cpu_mm_impl_create(s, d, &impl, &need));
  TD_CHECK_GOTO(td_cpu_grow(&s->scratch, &s->scratch_bytes, need, "matmul scratchpad"));
  TD_CHECK_GOTO(td_alloc((void **)&p, sizeof *p, "matmul plan"));
  p->key = *d;
  p->hash = h;
  p->impl = impl;
  p->next = *head;
  *head = p;
  s->nplans++;
  impl = NULL;
  *out = p;
done:
  if (impl) td_cpu_mm_impl_destroy(impl);
  return st;
}

/* Zero C (M,N) with strides sc over the batch grid: beta = 0 with K = 0. */
static void mm_zero_c(const td_cpu_mm *d, void *C) {
  size_t es = td_dtype_size((td_dtype)d->ct);
  for (int64_t b0 = 0; b0 < d->batch0; b0++)
    for (int64_t b1 = 0; b1 < d->batch1; b1++)
      for (int64_t m = 0; m < d->M; m++)
        for (int64_t n = 0; n < d->N; n++)
          memset((char *)C + (size_t)(b0 * d->sc[0] + b1 * d->sc[1] + m * d->sc[2] +
                                      n * d->sc[3]) * es,
                 0, es);
}

/* Elements from an operand's first to its last (strides are positive). */
static int64_t mm_span(const td_cpu_mm *d, const int64_t st[4], int64_t rows, int64_t cols) {
  return (d->batch0 - 1) * st[0] + (d->batch1 - 1) * st[1] + (rows - 1) * st[2] +
         (cols - 1) * st[3] + 1;
}

static td_status mm_run_plan(td_kernels *k, const td_cpu_mm *d, const void *A, const void *B,
                             void *C) {
  td_cpu_state *s = k->state;
  td_cpu_plan *p = NULL;
  TD_CHECK(mm_plan_get(s, d, &p));
  TD_CHECK(td_cpu_mm_impl_run(s, p->impl, d, A, B, C, s->scratch));
  return TD_OK;
}

/* bf16 operands on an engine without bf16 products: widen them to float32
 * (exact), multiply in float32 (the same products, accumulated in float32),
 * round a bf16 C back. */
static td_status mm_run_widened(td_kernels *k, const td_cpu_mm *d, const void *A,
                                const void *B, void *C) {
  td_cpu_state *s = k->state;
  int64_t na = d->at == TD_DTYPE_BF16 ? mm_span(d, d->sa, d->M, d->K) : 0;
  int64_t nb = d->bt == TD_DTYPE_BF16 ? mm_span(d, d->sb, d->K, d->N) : 0;
  int64_t nc = d->ct == TD_DTYPE_BF16 ? mm_span(d, d->sc, d->M, d->N) : 0;
  size_t need = (size_t)(na + nb + nc) * sizeof(float);
  TD_CHECK(td_cpu_grow(&s->widen, &s->widen_bytes, need,
                       "bf16 matmul: float32 copies of the operands"));
  float *wa = s->widen, *wb = wa + na, *wc = wb + nb;
  td_cpu_mm f = *d;
  f.at = f.bt = f.ct = TD_DTYPE_F32;
  if (na) TD_CHECK(td_cpu_cast(k, wa, TD_DTYPE_F32, A, TD_DTYPE_BF16, na));
  if (nb) TD_CHECK(td_cpu_cast(k, wb, TD_DTYPE_F32, B, TD_DTYPE_BF16, nb));
  /* C too, when bf16: the gaps of a strided C round-trip exactly */
  if (nc) TD_CHECK(td_cpu_cast(k, wc, TD_DTYPE_F32, C, TD_DTYPE_BF16, nc));
  TD_CHECK(mm_run_plan(k, &f, na ? wa : A, nb ? wb : B, nc ? wc : C));
  if (nc) TD_CHECK(td_cpu_cast(k, C, TD_DTYPE_BF16, wc, TD_DTYPE_F32, nc));
  return TD_OK;
}

td_status td_cpu_mm_run(td_kernels *k, const td_cpu_mm *d, const void *A, const void *B,
                        void *C) {
  td_cpu_state *s = k->state;
  if (d->M == 0 || d->N == 0 || d->batch0 == 0 || d->batch1 == 0) return TD_OK;
  if (d->K == 0) {
    if (d->beta == 0.0f) mm_zero_c(d, C);
    return TD_OK;
  }
  if (d->at != TD_DTYPE_F32 || d->bt != TD_DTYPE_F32 || d->ct != TD_DTYPE_F32) {
    TD_REQUIRE(s->bf16 > 0, TD_ERR_UNSUPPORTED,
               "bf16 matmul needs the oneDNN matmul engine; this trident uses %s "
               "(training.precision: fp32, or rebuild with oneDNN)",
               td_cpu_mm_engine_name);
    /* native bf16 products (oneDNN on AVX512-BF16) take bf16·bf16 only: a
     * mixed pair, or float32 operands into a bf16 C, go through float32 (the
     * same numbers) as on an engine without them */
    if (s->bf16 == 1 || d->at != d->bt || (d->at == TD_DTYPE_F32 && d->ct == TD_DTYPE_BF16))
      return mm_run_widened(k, d, A, B, C);
  }
  return mm_run_plan(k, d, A, B, C);
}

/* C (M,N) = op(A)·op(B) + beta·C; A (M,K) or (K,M) when transA; B (K,N) or
 * (N,K) when transB; all dense row-major, of types at, bt, ct. */
td_status td_cpu_gemm(td_kernels *k, int transA, int transB, int64_t M, int64_t N,
                      int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                      float beta, void *C, td_dtype ct) {
  td_cpu_mm d;
  TD_REQUIRE(M >= 0 && N >= 0 && K >= 0, TD_ERR_USAGE,
             "gemm: sizes must be >= 0, got M=%lld N=%lld K=%lld", (long long)M,
             (long long)N, (long long)K);
  TD_REQUIRE(beta == 0.0f || beta == 1.0f, TD_ERR_USAGE,
             "gemm: beta must be 0 or 1, got %g", (double)beta);
  memset(&d, 0, sizeof d);
  d.batch0 = d.batch1 = 1;
  d.M = M;
  d.N = N;
  d.K = K;
  d.sa[2] = transA ? 1 : K; /* A(m,k) at m·K + k, or k·M + m when stored (K,M) */
  d.sa[3] = transA ? M : 1;
  d.sb[2] = transB ? 1 : N; /* B(k,n) at k·N + n, or n·K + k when stored (N,K) */
  d.sb[3] = transB ? K : 1;
  d.sc[2] = N;
  d.sc[3] = 1;
  d.alpha = 1.0f;
  d.beta = beta;
  d.at = at, d.bt = bt, d.ct = ct;
  TD_CHECK(td_cpu_mm_run(k, &d, A, B, C));
  return TD_OK;
}

/* out (M,N) += bias (N, type pt) on every row. */
td_status td_cpu_bias_fwd(td_kernels *k, float *out, const void *bp, td_dtype pt, int64_t M,
                          int64_t N) {
  float *tmp = NULL;
  if (pt != TD_DTYPE_F32 && !(tmp = malloc((size_t)(N + 1) * sizeof(float))))
    TD_FAIL(TD_ERR_NOMEM, "bias: out of memory for %lld parameters", (long long)N);
  const float *bias = td_cpu_param_f32(bp, pt, tmp, N);
#pragma omp parallel for schedule(static) if (M * N > 32768)
  for (int64_t m = 0; m < M; m++) {
    float *o = out + m * N;
#pragma omp simd
    for (int64_t n = 0; n < N; n++) o[n] += bias[n];
  }
  free(tmp);
  return TD_OK;
}

#define TD_BIAS_COLS 128 /* columns per task of bias_bwd */

/* dbias (N) += Σ_m dout (M,N). Threads own column blocks, so the sum order
 * (rows in order) does not depend on the thread count. */
td_status td_cpu_bias_bwd(td_kernels *k, float *dbias, const float *dout, int64_t M,
                          int64_t N) {
  int64_t nblk = (N + TD_BIAS_COLS - 1) / TD_BIAS_COLS;
#pragma omp parallel for schedule(static) if (M * N > 32768)
  for (int64_t blk = 0; blk < nblk; blk++) {
    float acc[TD_BIAS_COLS];
    int64_t n0 = blk * TD_BIAS_COLS;
    int64_t nn = N - n0 < TD_BIAS_COLS ? N - n0 : TD_BIAS_COLS;
    for (int64_t j = 0; j < nn; j++) acc[j] = 0.0f;
    for (int64_t m = 0; m < M; m++) {
      const float *d = dout + m * N + n0;
#pragma omp simd
      for (int64_t j = 0; j < nn; j++) acc[j] += d[j];
    }
    for (int64_t j = 0; j < nn; j++) dbias[n0 + j] += acc[j];
  }
  return TD_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One round of the three products of a linear layer (see td_cpu.h). */
static td_status rate_round(td_kernels *k, int64_t M, int64_t N, int64_t K,
                            const float *A, const float *B, float *C, float *dA,
                            float *dB) {
  const td_dtype f = TD_DTYPE_F32;
  TD_CHECK(k->gemm(k, 0, 0, M, N, K, A, f, B, f, 0.0f, C, f));  /* C = A·B     */
  TD_CHECK(k->gemm(k, 0, 1, M, K, N, C, f, B, f, 0.0f, dA, f)); /* dA = dC·Bᵀ  */
  TD_CHECK(k->gemm(k, 1, 0, K, N, M, A, f, C, f, 1.0f, dB, f)); /* dB += Aᵀ·dC */
  return TD_OK;
}

td_status td_cpu_gemm_rate(td_kernels *k, int64_t M, int64_t N, int64_t K, int reps,
                           double *gflops) {
  td_status st = TD_OK;
  float *A = NULL, *B = NULL, *C = NULL, *dA = NULL, *dB = NULL;
  *gflops = 0.0;
  TD_REQUIRE(M > 0 && N > 0 && K > 0 && reps > 0, TD_ERR_USAGE,
             "gemm rate: sizes and reps must be > 0, got M=%lld N=%lld K=%lld reps=%d",
             (long long)M, (long long)N, (long long)K, reps);
  TD_CHECK_GOTO(k->alloc(k, (void **)&A, (size_t)(M * K) * sizeof(float), "rate A"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&B, (size_t)(K * N) * sizeof(float), "rate B"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&C, (size_t)(M * N) * sizeof(float), "rate C"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&dA, (size_t)(M * K) * sizeof(float), "rate dA"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&dB, (size_t)(K * N) * sizeof(float), "rate dB"));
  {
    /* Small non-zero values: no denormals, no growth through dB += . */
    float *h = NULL;
    TD_CHECK_GOTO(td_alloc((void **)&h, (size_t)(M * K > K * N ? M * K : K * N) * sizeof(float),
                           "rate fill"));
    for (int64_t i = 0; i < M * K; i++) h[i] = 1e-2f * (float)((i * 7919) % 97 - 48);
    st = k->to_device(k, A, h, (size_t)(M * K) * sizeof(float));
    for (int64_t i = 0; i < K * N && st == TD_OK; i++)
      h[i] = 1e-2f * (float)((i * 104729) % 89 - 44);
    if (st == TD_OK) st = k->to_device(k, B, h, (size_t)(K * N) * sizeof(float));
    td_free(h);
    TD_CHECK_GOTO(st);
  }
  TD_CHECK_GOTO(rate_round(k, M, N, K, A, B, C, dA, dB));
  TD_CHECK_GOTO(k->sync(k));
  double t0 = now_s();
  for (int r = 0; r < reps; r++) TD_CHECK_GOTO(rate_round(k, M, N, K, A, B, C, dA, dB));
  TD_CHECK_GOTO(k->sync(k));
  double dt = now_s() - t0;
  *gflops = 6.0 * (double)M * (double)N * (double)K * reps / (dt > 0 ? dt : 1e-12) * 1e-9;
done:
  if (A) k->free(k, A);
  if (B) k->free(k, B);
  if (C) k->free(k, C);
  if (dA) k->free(k, dA);
  if (dB) k->free(k, dB);
  return st;
}
