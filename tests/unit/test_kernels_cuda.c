/* test_kernels_cuda.c — every op of the CUDA back-end against the CPU
 * back-end (the reference) on the same random inputs, odd sizes included:
 * each op runs on both tables, the CUDA result comes back to the host and is
 * compared. The position-aware ops (gqa, rope, embed) also run on one
 * rank's rows of context parallelism (td_pos, both ranks of cp = 2).
 *   float32 outputs   max|cuda − cpu| ≤ 1e-5 · max|cpu| over the tensor (the
 *                     two sum in different orders; float32 rounding of sums
 *                     of up to a few hundred terms stays far below)
 *   bf16 outputs      |cuda − cpu| ≤ step(cpu) + 1e-5 · max|cpu|, step(c) the
 *                     bf16 spacing at |c| (2^(e−7) for |c| in [2^e, 2^(e+1))):
 *                     the back-ends' float32 values, a few ulps apart, may
 *                     round to neighbouring bf16 values (half a step, the
 *                     earlier bound, refused exactly that)
 *   casts, copy2d     bitwise (round to nearest even on both; a copy)
 *   sumsq             1e-12 relative (double accumulation on both)
 * and the ops that reduce over rows (embed_bwd, bias_bwd, layernorm_bwd,
 * attention_bwd) bitwise equal when run twice on the device from the same
 * starting values (no atomics: exact resumption needs it). Exits 77
 * (skipped) when the build has no CUDA back-end, or when no CUDA device is
 * visible and none is expected; when a GPU is visible (/dev/nvidia0, or
 * nvidia-smi -L lists one) or the emulated device is expected (TD_CUDAEMU=1,
 * set by the cudaemu test registration), a module that does not load or
 * finds no device is a failure. Prints one line per check and
 * "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/td_bf16.h"
#include "kernels/td_kernels.h"

static int g_pass, g_fail;
static const double TOL = 1e-5;
static td_kernels *g_cpu, *g_gpu;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* uniform in [-1, 1) (xorshift64*) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return 2.0 * (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 1.0;
}

static void *xmalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_kernels_cuda: out of memory\n");
    exit(2);
  }
  return p;
}

static void fail_status(const char *what) {
  printf("FAIL %s: %s\n%s", what, td_error_message(), td_error_trace());
  td_error_clear();
  g_fail++;
}
/* Run the call; a failure is a failed check (and the test goes on). */
#define CK(call)                           \
  do {                                     \
    td_status ck__ = (call);               \
    if (ck__ != TD_OK) fail_status(#call); \
  } while (0)

/* ---- host and device buffers --------------------------------------------------- */

/* A tensor held three times: the host copy the CPU back-end works on, its
 * device twin for the CUDA back-end, and the device result read back. */
typedef struct {
  void *h, *d, *back;
  int64_t n;
  td_dtype t;
} buf;

static buf mk(int64_t n, td_dtype t) {
  buf b = {0};
  size_t bytes = (size_t)(n > 0 ? n : 1) * td_dtype_size(t);
  b.n = n;
  b.t = t;
  b.h = xmalloc(bytes);
  b.back = xmalloc(bytes);
  CK(g_gpu->alloc(g_gpu, &b.d, bytes, "test tensor"));
  return b;
}

/* Uniform values in [-amp, amp) (bf16: rounded), on both sides. */
static buf rnd(int64_t n, td_dtype t, double amp) {
  buf b = mk(n, t);
  for (int64_t i = 0; i < n; i++) {
    float v = (float)(amp * urand());
    if (t == TD_DTYPE_BF16)
      ((td_bf16 *)b.h)[i] = td_bf16_from_f32(v);
    else
      ((float *)b.h)[i] = v;
  }
  CK(g_gpu->to_device(g_gpu, b.d, b.h, (size_t)n * td_dtype_size(t)));
  return b;
}

/* The host copy pushed to the device again (after the host side changed). */
static void push(buf *b) {
  CK(g_gpu->to_device(g_gpu, b->d, b->h, (size_t)b->n * td_dtype_size(b->t)));
}

/* A copy of the host values now (the starting values of an accumulating op,
 * before the CPU side adds into them), and the device set back to it. */
static void *keep(const buf *b) {
  size_t bytes = (size_t)b->n * td_dtype_size(b->t);
  void *c = xmalloc(bytes);
  memcpy(c, b->h, bytes);
  return c;
}
static void restore(buf *b, void *kept) {
  CK(g_gpu->to_device(g_gpu, b->d, kept, (size_t)b->n * td_dtype_size(b->t)));
  free(kept);
}

static void drop(buf *b) {
  free(b->h);
  free(b->back);
  g_gpu->free(g_gpu, b->d);
  memset(b, 0, sizeof *b);
}

static double val(const void *p, td_dtype t, int64_t i) {
  return t == TD_DTYPE_BF16 ? (double)td_bf16_to_f32(((const td_bf16 *)p)[i])
                            : (double)((const float *)p)[i];
}

/* The spacing of bf16 values at |c|: 2^(e−7) for |c| in [2^e, 2^(e+1)). */
static double bf16_step(double c) {
  int e;
  if (c == 0.0 || !isfinite(c)) return 0.0;
  frexp(c, &e); /* |c| in [2^(e−1), 2^e) */
  return ldexp(1.0, e - 8);
}

static void report(int ok, const char *name, double err, double tol) {
  if (ok)
    g_pass++;
  else
    g_fail++;
  printf("%-4s %-60s err %.2e (tol %.0e)\n", ok ? "ok" : "FAIL", name, err, tol);
}

/* The CUDA result of b read back and compared with the CPU's (the bounds of
 * the file comment). */
static void cmp(const char *name, buf *b) {
  size_t bytes = (size_t)b->n * td_dtype_size(b->t);
  CK(g_gpu->to_host(g_gpu, b->back, b->d, bytes));
  double mx = 0.0, worst = 0.0;
  int bad = 0;
  for (int64_t i = 0; i < b->n; i++) mx = fmax(mx, fabs(val(b->h, b->t, i)));
  double floor = mx > 0.0 ? TOL * mx : 1e-30;
  for (int64_t i = 0; i < b->n; i++) {
    double c = val(b->h, b->t, i), g = val(b->back, b->t, i);
    if (isnan(c) != isnan(g)) bad = 1;
    if (isnan(c)) continue;
    double bound = (b->t == TD_DTYPE_BF16 ? bf16_step(c) : 0.0) + floor;
    double e = fabs(g - c) / bound;
    if (!(e <= worst)) worst = e; /* NaN too */
  }
  report(!bad && worst <= 1.0, name, worst * TOL, TOL);
}

/* Bitwise equality of the CUDA result with the CPU's (casts). */
static void cmp_bits(const char *name, buf *b) {
  size_t bytes = (size_t)b->n * td_dtype_size(b->t);
  CK(g_gpu->to_host(g_gpu, b->back, b->d, bytes));
  int64_t diff = 0;
  for (size_t i = 0; i < bytes; i++) diff += ((unsigned char *)b->h)[i] != ((unsigned char *)b->back)[i];
  report(diff == 0, name, (double)diff, 0.0);
}

/* The device result now, kept to compare a second run with bitwise. */
static void *snap(buf *b) {
  size_t bytes = (size_t)b->n * td_dtype_size(b->t);
  void *s = xmalloc(bytes);
  CK(g_gpu->to_host(g_gpu, s, b->d, bytes));
  return s;
}
static void same_bits(const char *name, buf *b, void *before) {
  size_t bytes = (size_t)b->n * td_dtype_size(b->t);
  CK(g_gpu->to_host(g_gpu, b->back, b->d, bytes));
  report(memcmp(before, b->back, bytes) == 0, name, 0.0, 0.0);
  free(before);
}

static const char *tn(td_dtype t) { return t == TD_DTYPE_BF16 ? "bf16" : "f32"; }

/* ---- the ops -------------------------------------------------------------------- */

static void test_cast(void) {
  int64_t n = 10007;
  buf x = rnd(n, TD_DTYPE_F32, 3.0);
  ((float *)x.h)[0] = NAN, ((float *)x.h)[1] = INFINITY, ((float *)x.h)[2] = -0.0f;
  ((float *)x.h)[3] = 1.00390625f; /* a tie: 1 + 2^-8 rounds to even (1) */
  push(&x);
  buf y = mk(n, TD_DTYPE_BF16), z = mk(n, TD_DTYPE_F32);
  CK(g_cpu->cast(g_cpu, y.h, TD_DTYPE_BF16, x.h, TD_DTYPE_F32, n));
  CK(g_gpu->cast(g_gpu, y.d, TD_DTYPE_BF16, x.d, TD_DTYPE_F32, n));
  /* NaN payloads may differ between the two roundings: compare it as NaN */
  CK(g_gpu->to_host(g_gpu, y.back, y.d, (size_t)n * 2));
  int nan_ok = isnan(td_bf16_to_f32(((td_bf16 *)y.back)[0]));
  ((td_bf16 *)y.h)[0] = 0x7fc0;
  td_bf16 one = 0x7fc0;
  CK(g_gpu->to_device(g_gpu, y.d, &one, 2));
  report(nan_ok, "cast f32->bf16 NaN stays NaN", 0, 0);
  cmp_bits("cast f32->bf16 (odd n, Inf, -0, a tie)", &y);
  CK(g_cpu->cast(g_cpu, z.h, TD_DTYPE_F32, y.h, TD_DTYPE_BF16, n));
  CK(g_gpu->cast(g_gpu, z.d, TD_DTYPE_F32, y.d, TD_DTYPE_BF16, n));
  cmp_bits("cast bf16->f32", &z);
  drop(&x), drop(&y), drop(&z);
}

static void test_gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, td_dtype at,
                           td_dtype bt, td_dtype ct, float beta) {
  char name[128];
  buf A = rnd(M * K, at, 1.0), B = rnd(K * N, bt, 1.0), C = rnd(M * N, ct, 1.0);
  CK(g_cpu->gemm(g_cpu, ta, tb, M, N, K, A.h, at, B.h, bt, beta, C.h, ct));
  CK(g_gpu->gemm(g_gpu, ta, tb, M, N, K, A.d, at, B.d, bt, beta, C.d, ct));
  snprintf(name, sizeof name, "gemm %c%c %lldx%lldx%lld %s.%s->%s beta %g", ta ? 'T' : 'N',
           tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K, tn(at), tn(bt), tn(ct),
           (double)beta);
  cmp(name, &C);
  drop(&A), drop(&B), drop(&C);
}

static void test_gemm(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      test_gemm_case(ta, tb, 37, 53, 61, TD_DTYPE_F32, TD_DTYPE_F32, TD_DTYPE_F32, 0.0f);
      test_gemm_case(ta, tb, 37, 53, 61, TD_DTYPE_BF16, TD_DTYPE_BF16, TD_DTYPE_F32, 1.0f);
    }
  test_gemm_case(0, 1, 130, 257, 96, TD_DTYPE_F32, TD_DTYPE_F32, TD_DTYPE_F32, 1.0f);
  test_gemm_case(0, 1, 130, 257, 96, TD_DTYPE_BF16, TD_DTYPE_BF16, TD_DTYPE_BF16, 0.0f);
  test_gemm_case(1, 0, 64, 48, 333, TD_DTYPE_BF16, TD_DTYPE_BF16, TD_DTYPE_BF16, 1.0f);
  test_gemm_case(0, 0, 29, 31, 17, TD_DTYPE_BF16, TD_DTYPE_F32, TD_DTYPE_F32, 0.0f);
  test_gemm_case(0, 0, 29, 31, 17, TD_DTYPE_F32, TD_DTYPE_F32, TD_DTYPE_BF16, 1.0f);
  test_gemm_case(0, 0, 5, 7, 0, TD_DTYPE_F32, TD_DTYPE_F32, TD_DTYPE_F32, 0.0f);
  test_gemm_case(0, 0, 1, 1, 1, TD_DTYPE_F32, TD_DTYPE_F32, TD_DTYPE_F32, 0.0f);
}

static void test_bias(void) {
  int64_t M = 77, N = 131;
  for (int p = 0; p < 2; p++) {
    td_dtype pt = p ? TD_DTYPE_BF16 : TD_DTYPE_F32;
    buf out = rnd(M * N, TD_DTYPE_F32, 1.0), b = rnd(N, pt, 1.0);
    CK(g_cpu->bias_fwd(g_cpu, out.h, b.h, pt, M, N));
    CK(g_gpu->bias_fwd(g_gpu, out.d, b.d, pt, M, N));
    cmp(p ? "bias_fwd bf16 bias" : "bias_fwd", &out);
    drop(&out), drop(&b);
  }
  buf dout = rnd(M * N, TD_DTYPE_F32, 1.0), db = rnd(N, TD_DTYPE_F32, 1.0);
  void *db0 = keep(&db);
  CK(g_cpu->bias_bwd(g_cpu, db.h, dout.h, M, N));
  CK(g_gpu->bias_bwd(g_gpu, db.d, dout.d, M, N));
  cmp("bias_bwd (+=)", &db);
  void *s = snap(&db);
  restore(&db, db0); /* the second run starts where the first did */
  CK(g_gpu->bias_bwd(g_gpu, db.d, dout.d, M, N));
  same_bits("bias_bwd twice: bitwise", &db, s);
  drop(&dout), drop(&db);
}

static void test_embed(void) {
  int64_t B = 3, T = 37, C = 45, V = 101, v0 = 17, Vs = 50, n = B * T;
  for (int p = 0; p < 2; p++) {
    td_dtype pt = p ? TD_DTYPE_BF16 : TD_DTYPE_F32;
    buf tok = mk(n, TD_DTYPE_F32); /* int32 storage, 4 bytes as float32 */
    for (int64_t i = 0; i < n; i++) ((int32_t *)tok.h)[i] = (int32_t)((urand() + 1.0) * 0.5 * V) % 23 + (i % 5 == 0 ? 60 : 10);
    push(&tok);
    buf wte = rnd(Vs * C, pt, 1.0), wpe = rnd(T * C, pt, 1.0), out = mk(n * C, TD_DTYPE_F32);
    for (int w = 0; w < 2; w++) {
      CK(g_cpu->embed_fwd(g_cpu, out.h, tok.h, wte.h, v0, Vs, w ? wpe.h : NULL, pt, B, T, C,
                          NULL));
      CK(g_gpu->embed_fwd(g_gpu, out.d, tok.d, wte.d, v0, Vs, w ? wpe.d : NULL, pt, B, T, C,
                          NULL));
      cmp(p ? (w ? "embed_fwd bf16, shard, wpe" : "embed_fwd bf16, shard, no wpe")
            : (w ? "embed_fwd shard, wpe" : "embed_fwd shard, no wpe"),
          &out);
    }
    if (!p) {
      buf dout = rnd(n * C, TD_DTYPE_F32, 1.0), dwte = rnd(Vs * C, TD_DTYPE_F32, 1.0);
      buf dwpe = rnd(T * C, TD_DTYPE_F32, 1.0);
      void *dwte0 = keep(&dwte);
      CK(g_cpu->embed_bwd(g_cpu, dwte.h, dwpe.h, dout.h, tok.h, v0, Vs, B, T, C, NULL));
      CK(g_gpu->embed_bwd(g_gpu, dwte.d, dwpe.d, dout.d, tok.d, v0, Vs, B, T, C, NULL));
      cmp("embed_bwd dwte (+=, repeated tokens, shard)", &dwte);
      cmp("embed_bwd dwpe (+=)", &dwpe);
      void *s = snap(&dwte);
      restore(&dwte, dwte0); /* the second run starts where the first did */
      CK(g_gpu->embed_bwd(g_gpu, dwte.d, NULL, dout.d, tok.d, v0, Vs, B, T, C, NULL));
      same_bits("embed_bwd twice: bitwise", &dwte, s);
      drop(&dout), drop(&dwte), drop(&dwpe);
    }
    drop(&tok), drop(&wte), drop(&wpe), drop(&out);
  }
}

static void test_norms(void) {
  int64_t N = 67, C = 257;
  for (int p = 0; p < 2; p++)
    for (int o = 0; o < 2; o++) {
      char name[96];
      td_dtype pt = p ? TD_DTYPE_BF16 : TD_DTYPE_F32, ot = o ? TD_DTYPE_BF16 : TD_DTYPE_F32;
      buf x = rnd(N * C, TD_DTYPE_F32, 2.0), w = rnd(C, pt, 1.0), b = rnd(C, pt, 1.0);
      for (int64_t i = 0; i < N * C; i++) ((float *)x.h)[i] += (float)(i / C) * 0.25f;
      push(&x);
      buf out = mk(N * C, ot), mean = mk(N, TD_DTYPE_F32), rstd = mk(N, TD_DTYPE_F32);
      CK(g_cpu->layernorm_fwd(g_cpu, out.h, ot, mean.h, rstd.h, x.h, w.h, b.h, pt, N, C));
      CK(g_gpu->layernorm_fwd(g_gpu, out.d, ot, mean.d, rstd.d, x.d, w.d, b.d, pt, N, C));
      snprintf(name, sizeof name, "layernorm_fwd w %s out %s", tn(pt), tn(ot));
      cmp(name, &out);
      cmp("layernorm_fwd mean", &mean);
      cmp("layernorm_fwd rstd", &rstd);
      buf dout = rnd(N * C, TD_DTYPE_F32, 1.0), dx = rnd(N * C, TD_DTYPE_F32, 1.0);
      buf dw = rnd(C, TD_DTYPE_F32, 1.0), db = rnd(C, TD_DTYPE_F32, 1.0);
      if (o == 0) {
        void *dw0 = keep(&dw);
        CK(g_cpu->layernorm_bwd(g_cpu, dx.h, dw.h, db.h, dout.h, x.h, w.h, pt, mean.h, rstd.h,
                                N, C));
        CK(g_gpu->layernorm_bwd(g_gpu, dx.d, dw.d, db.d, dout.d, x.d, w.d, pt, mean.d, rstd.d,
                                N, C));
        snprintf(name, sizeof name, "layernorm_bwd dx (+=) w %s", tn(pt));
        cmp(name, &dx);
        cmp("layernorm_bwd dw (+=)", &dw);
        cmp("layernorm_bwd db (+=)", &db);
        void *s = snap(&dw);
        restore(&dw, dw0); /* the second run starts where the first did */
        CK(g_gpu->layernorm_bwd(g_gpu, dx.d, dw.d, db.d, dout.d, x.d, w.d, pt, mean.d, rstd.d,
                                N, C));
        same_bits("layernorm_bwd twice: dw bitwise", &dw, s);
      }
      /* RMSNorm on the same inputs */
      CK(g_cpu->rmsnorm_fwd(g_cpu, out.h, ot, rstd.h, x.h, w.h, pt, 1e-6f, N, C));
      CK(g_gpu->rmsnorm_fwd(g_gpu, out.d, ot, rstd.d, x.d, w.d, pt, 1e-6f, N, C));
      snprintf(name, sizeof name, "rmsnorm_fwd w %s out %s", tn(pt), tn(ot));
      cmp(name, &out);
      cmp("rmsnorm_fwd rstd", &rstd);
      if (o == 0) {
        push(&dx), push(&dw);
        CK(g_cpu->rmsnorm_bwd(g_cpu, dx.h, dw.h, dout.h, x.h, w.h, pt, rstd.h, N, C));
        CK(g_gpu->rmsnorm_bwd(g_gpu, dx.d, dw.d, dout.d, x.d, w.d, pt, rstd.d, N, C));
        cmp("rmsnorm_bwd dx (+=)", &dx);
        cmp("rmsnorm_bwd dw (+=)", &dw);
      }
      drop(&x), drop(&w), drop(&b), drop(&out), drop(&mean), drop(&rstd);
      drop(&dout), drop(&dx), drop(&dw), drop(&db);
    }
}

static void test_pointwise(void) {
  int64_t n = 100003;
  for (int o = 0; o < 2; o++) {
    td_dtype ot = o ? TD_DTYPE_BF16 : TD_DTYPE_F32;
    buf x = rnd(n, TD_DTYPE_F32, 6.0), u = rnd(n, TD_DTYPE_F32, 3.0), out = mk(n, ot);
    CK(g_cpu->gelu_fwd(g_cpu, out.h, ot, x.h, n));
    CK(g_gpu->gelu_fwd(g_gpu, out.d, ot, x.d, n));
    cmp(o ? "gelu_fwd out bf16" : "gelu_fwd", &out);
    CK(g_cpu->swiglu_fwd(g_cpu, out.h, ot, x.h, u.h, n));
    CK(g_gpu->swiglu_fwd(g_gpu, out.d, ot, x.d, u.d, n));
    cmp(o ? "swiglu_fwd out bf16" : "swiglu_fwd", &out);
    drop(&x), drop(&u), drop(&out);
  }
  buf x = rnd(n, TD_DTYPE_F32, 6.0), u = rnd(n, TD_DTYPE_F32, 3.0);
  buf dout = rnd(n, TD_DTYPE_F32, 1.0), dx = mk(n, TD_DTYPE_F32), du = mk(n, TD_DTYPE_F32);
  CK(g_cpu->gelu_bwd(g_cpu, dx.h, x.h, dout.h, n));
  CK(g_gpu->gelu_bwd(g_gpu, dx.d, x.d, dout.d, n));
  cmp("gelu_bwd", &dx);
  CK(g_cpu->swiglu_bwd(g_cpu, dx.h, du.h, dout.h, x.h, u.h, n));
  CK(g_gpu->swiglu_bwd(g_gpu, dx.d, du.d, dout.d, x.d, u.d, n));
  cmp("swiglu_bwd dg", &dx);
  cmp("swiglu_bwd du", &du);
  CK(g_cpu->add(g_cpu, dx.h, x.h, u.h, n));
  CK(g_gpu->add(g_gpu, dx.d, x.d, u.d, n));
  cmp("add", &dx);
  CK(g_cpu->add(g_cpu, x.h, x.h, u.h, n));
  CK(g_gpu->add(g_gpu, x.d, x.d, u.d, n));
  cmp("add in place (out = a)", &x);
  CK(g_cpu->scale(g_cpu, x.h, 0.37f, n));
  CK(g_gpu->scale(g_gpu, x.d, 0.37f, n));
  cmp("scale", &x);
  for (int64_t m = 0; m < 3; m++) {
    int64_t len = m == 0 ? n : m == 1 ? 1 : 0;
    double sc = 0.0, sg = -1.0;
    CK(g_cpu->sumsq(g_cpu, x.h, len, &sc));
    CK(g_gpu->sumsq(g_gpu, x.d, len, &sg));
    double e = fabs(sg - sc) / (sc > 0 ? sc : 1.0);
    char name[64];
    snprintf(name, sizeof name, "sumsq n=%lld (double)", (long long)len);
    report(e <= 1e-12, name, e, 1e-12);
  }
  drop(&x), drop(&u), drop(&dout), drop(&dx), drop(&du);
}

static void test_rope(void) {
  int64_t B = 2, T = 41, H = 3, HS = 18, ld = H * HS + 11;
  for (int inv = 0; inv < 2; inv++) {
    buf x = rnd(B * T * ld, TD_DTYPE_F32, 1.0);
    CK(g_cpu->rope(g_cpu, x.h, B, T, H, HS, ld, 10000.0f, inv, NULL));
    CK(g_gpu->rope(g_gpu, x.d, B, T, H, HS, ld, 10000.0f, inv, NULL));
    cmp(inv ? "rope inverse (ld > H·HS: the rest untouched)" : "rope (ld > H·HS)", &x);
    drop(&x);
  }
}

static void test_attention(void) {
  int64_t B = 2, T = 67, NH = 6, HS = 16;
  for (int kvc = 0; kvc < 3; kvc++) {
    char name[96];
    int64_t KV = kvc == 0 ? NH : kvc == 1 ? 2 : 1, C = NH * HS;
    int packed = kvc == 0;
    int64_t ldq = packed ? 3 * C : C + 5, ldkv = packed ? 3 * C : KV * HS + 3;
    buf q = rnd(B * T * ldq, TD_DTYPE_F32, 1.5), kk = rnd(B * T * ldkv, TD_DTYPE_F32, 1.5);
    buf v = rnd(B * T * ldkv, TD_DTYPE_F32, 1.0), out = mk(B * T * C, TD_DTYPE_F32);
    buf att = mk(B * NH * T * T, TD_DTYPE_F32), scr = mk(B * NH * T * T, TD_DTYPE_F32);
    buf dout = rnd(B * T * C, TD_DTYPE_F32, 1.0);
    buf dq = rnd(B * T * ldq, TD_DTYPE_F32, 1.0), dk = rnd(B * T * ldkv, TD_DTYPE_F32, 1.0);
    buf dv = rnd(B * T * ldkv, TD_DTYPE_F32, 1.0);
    if (packed) {
      CK(g_cpu->attention_fwd(g_cpu, out.h, att.h, q.h, B, T, NH, HS));
      CK(g_gpu->attention_fwd(g_gpu, out.d, att.d, q.d, B, T, NH, HS));
    } else {
      CK(g_cpu->gqa_fwd(g_cpu, out.h, att.h, q.h, kk.h, v.h, ldq, ldkv, B, T, NH, KV, HS,
                        NULL));
      CK(g_gpu->gqa_fwd(g_gpu, out.d, att.d, q.d, kk.d, v.d, ldq, ldkv, B, T, NH, KV, HS,
                        NULL));
    }
    snprintf(name, sizeof name, "%s fwd att (NH %lld, KV %lld)",
             packed ? "attention" : "gqa", (long long)NH, (long long)KV);
    cmp(name, &att);
    snprintf(name, sizeof name, "%s fwd out", packed ? "attention" : "gqa");
    cmp(name, &out);
    /* backward from the same (CPU) probabilities on both sides */
    push(&att);
    if (packed) {
      CK(g_cpu->attention_bwd(g_cpu, dq.h, scr.h, dout.h, q.h, att.h, B, T, NH, HS));
      CK(g_gpu->attention_bwd(g_gpu, dq.d, scr.d, dout.d, q.d, att.d, B, T, NH, HS));
      cmp("attention bwd dqkv", &dq);
      void *s = snap(&dq);
      CK(g_gpu->attention_bwd(g_gpu, dq.d, scr.d, dout.d, q.d, att.d, B, T, NH, HS));
      same_bits("attention bwd twice: bitwise", &dq, s);
    } else {
      CK(g_cpu->gqa_bwd(g_cpu, dq.h, dk.h, dv.h, scr.h, dout.h, q.h, kk.h, v.h, att.h, ldq,
                        ldkv, B, T, NH, KV, HS, NULL));
      CK(g_gpu->gqa_bwd(g_gpu, dq.d, dk.d, dv.d, scr.d, dout.d, q.d, kk.d, v.d, att.d, ldq,
                        ldkv, B, T, NH, KV, HS, NULL));
      snprintf(name, sizeof name, "gqa bwd dq (KV %lld; padding columns untouched)",
               (long long)KV);
      cmp(name, &dq);
      cmp("gqa bwd dk (summed over the group)", &dk);
      cmp("gqa bwd dv (summed over the group)", &dv);
    }
    drop(&q), drop(&kk), drop(&v), drop(&out), drop(&att), drop(&scr), drop(&dout);
    drop(&dq), drop(&dk), drop(&dv);
  }
}

/* ---- positions (context parallelism) -------------------------------------------- */

/* Rank i of cp in the load-balanced layout: chunks i and 2cp−1−i of
 * c = Tk/(2·cp) rows each (T = 2c rows). */
static td_pos cp_pos(int64_t Tk, int64_t cp, int64_t i) {
  int64_t c = Tk / (2 * cp);
  return (td_pos){Tk, c, i * c, (2 * cp - 1 - i) * c, NULL};
}

/* gqa fwd and bwd, rope and embed fwd and bwd of a rank's rows (pos, both
 * ranks of cp = 2) against all Tk positions, on both back-ends. */
static void test_pos(void) {
  int64_t B = 2, Tk = 68, NH = 6, KV = 2, HS = 16, C = NH * HS, cp = 2, T = Tk / cp;
  int64_t ldq = C + 5, ldkv = KV * HS + 3;
  for (int64_t i = 0; i < cp; i++) {
    char name[96];
    td_pos pos = cp_pos(Tk, cp, i);
    buf q = rnd(B * T * ldq, TD_DTYPE_F32, 1.5), kk = rnd(B * Tk * ldkv, TD_DTYPE_F32, 1.5);
    buf v = rnd(B * Tk * ldkv, TD_DTYPE_F32, 1.0), out = mk(B * T * C, TD_DTYPE_F32);
    buf att = mk(B * NH * T * Tk, TD_DTYPE_F32), scr = mk(B * NH * T * Tk, TD_DTYPE_F32);
    buf dout = rnd(B * T * C, TD_DTYPE_F32, 1.0), dq = rnd(B * T * ldq, TD_DTYPE_F32, 1.0);
    buf dk = rnd(B * Tk * ldkv, TD_DTYPE_F32, 1.0), dv = rnd(B * Tk * ldkv, TD_DTYPE_F32, 1.0);
    CK(g_cpu->gqa_fwd(g_cpu, out.h, att.h, q.h, kk.h, v.h, ldq, ldkv, B, T, NH, KV, HS, &pos));
    CK(g_gpu->gqa_fwd(g_gpu, out.d, att.d, q.d, kk.d, v.d, ldq, ldkv, B, T, NH, KV, HS, &pos));
    snprintf(name, sizeof name, "gqa fwd att, pos (cp 2, rank %lld, T %lld of Tk %lld)",
             (long long)i, (long long)T, (long long)Tk);
    cmp(name, &att);
    cmp("gqa fwd out, pos", &out);
    push(&att); /* backward from the same (CPU) probabilities on both sides */
    CK(g_cpu->gqa_bwd(g_cpu, dq.h, dk.h, dv.h, scr.h, dout.h, q.h, kk.h, v.h, att.h, ldq, ldkv,
                      B, T, NH, KV, HS, &pos));
    CK(g_gpu->gqa_bwd(g_gpu, dq.d, dk.d, dv.d, scr.d, dout.d, q.d, kk.d, v.d, att.d, ldq, ldkv,
                      B, T, NH, KV, HS, &pos));
    cmp("gqa bwd dq, pos", &dq);
    cmp("gqa bwd dk, pos (keys no query sees: 0)", &dk);
    cmp("gqa bwd dv, pos (keys no query sees: 0)", &dv);
    drop(&q), drop(&kk), drop(&v), drop(&out), drop(&att), drop(&scr), drop(&dout);
    drop(&dq), drop(&dk), drop(&dv);

    int64_t H = 3, RS = 18, ld = H * RS + 7;
    for (int inv = 0; inv < 2; inv++) {
      buf x = rnd(B * T * ld, TD_DTYPE_F32, 1.0);
      CK(g_cpu->rope(g_cpu, x.h, B, T, H, RS, ld, 10000.0f, inv, &pos));
      CK(g_gpu->rope(g_gpu, x.d, B, T, H, RS, ld, 10000.0f, inv, &pos));
      snprintf(name, sizeof name, "rope%s, pos (rank %lld)", inv ? " inverse" : "",
               (long long)i);
      cmp(name, &x);
      drop(&x);
    }

    int64_t EC = 45, V = 29, n = B * T;
    buf tok = mk(n, TD_DTYPE_F32); /* int32 storage */
    for (int64_t j = 0; j < n; j++) ((int32_t *)tok.h)[j] = (int32_t)(j * 11 % V);
    push(&tok);
    for (int p = 0; p < 2; p++) {
      td_dtype pt = p ? TD_DTYPE_BF16 : TD_DTYPE_F32;
      buf wte = rnd(V * EC, pt, 1.0), wpe = rnd(Tk * EC, pt, 1.0), eo = mk(n * EC, TD_DTYPE_F32);
      CK(g_cpu->embed_fwd(g_cpu, eo.h, tok.h, wte.h, 0, V, wpe.h, pt, B, T, EC, &pos));
      CK(g_gpu->embed_fwd(g_gpu, eo.d, tok.d, wte.d, 0, V, wpe.d, pt, B, T, EC, &pos));
      cmp(p ? "embed_fwd bf16, pos" : "embed_fwd, pos", &eo);
      drop(&wte), drop(&wpe), drop(&eo);
    }
    buf edout = rnd(n * EC, TD_DTYPE_F32, 1.0), dwte = rnd(V * EC, TD_DTYPE_F32, 1.0);
    buf dwpe = rnd(Tk * EC, TD_DTYPE_F32, 1.0);
    CK(g_cpu->embed_bwd(g_cpu, dwte.h, dwpe.h, edout.h, tok.h, 0, V, B, T, EC, &pos));
    CK(g_gpu->embed_bwd(g_gpu, dwte.d, dwpe.d, edout.d, tok.d, 0, V, B, T, EC, &pos));
    cmp("embed_bwd dwte (+=), pos", &dwte);
    cmp("embed_bwd dwpe (+= at the positions, other rows kept), pos", &dwpe);
    drop(&tok), drop(&edout), drop(&dwte), drop(&dwpe);
  }
}

static void test_copy2d(void) {
  int64_t rows = 131, cols = 37, lds = 50, ldd = 41;
  buf src = rnd(rows * lds, TD_DTYPE_F32, 1.0), dst = rnd(rows * ldd, TD_DTYPE_F32, 1.0);
  CK(g_cpu->copy2d(g_cpu, dst.h, ldd, src.h, lds, rows, cols));
  CK(g_gpu->copy2d(g_gpu, dst.d, ldd, src.d, lds, rows, cols));
  cmp_bits("copy2d (the rest of each row kept)", &dst);
  drop(&src), drop(&dst);
}

static void test_xent(void) {
  int64_t N = 37, Vs = 131, Vvalid = 120, v0 = 200;
  buf lg = rnd(N * Vs, TD_DTYPE_F32, 8.0), tg = mk(N, TD_DTYPE_F32);
  for (int64_t i = 0; i < N; i++)
    ((int32_t *)tg.h)[i] = (int32_t)(i % 3 == 0 ? 7 + i : v0 + (i * 13) % Vvalid);
  push(&tg);
  buf mx = mk(N, TD_DTYPE_F32), se = mk(N, TD_DTYPE_F32), tl = mk(N, TD_DTYPE_F32);
  buf dl = mk(N * Vs, TD_DTYPE_F32);
  CK(g_cpu->xent_rowmax(g_cpu, mx.h, lg.h, N, Vs, Vvalid));
  CK(g_gpu->xent_rowmax(g_gpu, mx.d, lg.d, N, Vs, Vvalid));
  cmp("xent_rowmax (padding ignored)", &mx);
  CK(g_cpu->xent_sumexp(g_cpu, se.h, tl.h, lg.h, mx.h, tg.h, v0, N, Vs, Vvalid));
  CK(g_gpu->xent_sumexp(g_gpu, se.d, tl.d, lg.d, mx.d, tg.d, v0, N, Vs, Vvalid));
  cmp("xent_sumexp sumexp", &se);
  cmp("xent_sumexp target logit (off-shard 0)", &tl);
  CK(g_cpu->xent_bwd(g_cpu, dl.h, lg.h, mx.h, se.h, tg.h, v0, 0.25f, N, Vs, Vvalid));
  CK(g_gpu->xent_bwd(g_gpu, dl.d, lg.d, mx.d, se.d, tg.d, v0, 0.25f, N, Vs, Vvalid));
  cmp("xent_bwd", &dl);
  CK(g_cpu->xent_bwd(g_cpu, lg.h, lg.h, mx.h, se.h, tg.h, v0, 0.25f, N, Vs, Vvalid));
  CK(g_gpu->xent_bwd(g_gpu, lg.d, lg.d, mx.d, se.d, tg.d, v0, 0.25f, N, Vs, Vvalid));
  cmp("xent_bwd in place", &lg);
  drop(&lg), drop(&tg), drop(&mx), drop(&se), drop(&tl), drop(&dl);
}

static void test_adamw(void) {
  int64_t n = 30011;
  buf p = rnd(n, TD_DTYPE_F32, 1.0), g = rnd(n, TD_DTYPE_F32, 0.1);
  buf m = rnd(n, TD_DTYPE_F32, 0.01), v = mk(n, TD_DTYPE_F32);
  for (int64_t i = 0; i < n; i++) ((float *)v.h)[i] = (float)(1e-4 * (urand() + 1.0));
  push(&v);
  for (int64_t t = 1; t <= 3; t++) {
    float gs = t == 2 ? 0.375f : 1.0f; /* a clipping coefficient on one step */
    CK(g_cpu->adamw(g_cpu, p.h, g.h, m.h, v.h, n, gs, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t));
    CK(g_gpu->adamw(g_gpu, p.d, g.d, m.d, v.d, n, gs, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t));
  }
  cmp("adamw p after 3 steps", &p);
  cmp("adamw m", &m);
  cmp("adamw v", &v);
  drop(&p), drop(&g), drop(&m), drop(&v);
}

/* Why a CUDA device should be usable here, or NULL: the emulated device is
 * expected (TD_CUDAEMU=1), or a GPU is visible to the driver (/dev/nvidia0,
 * or a "GPU " line from nvidia-smi -L). */
static const char *device_expected(void) {
  const char *emu = getenv("TD_CUDAEMU");
  if (emu && strcmp(emu, "1") == 0) return "the emulated device is expected (TD_CUDAEMU=1)";
  if (access("/dev/nvidia0", F_OK) == 0) return "a GPU is visible (/dev/nvidia0)";
  FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
  int gpu = 0;
  if (p) {
    char line[256];
    while (fgets(line, sizeof line, p))
      if (strncmp(line, "GPU ", 4) == 0) gpu = 1;
    pclose(p);
  }
  return gpu ? "a GPU is visible (nvidia-smi -L)" : NULL;
}

int main(void) {
#ifndef TD_HAVE_CUDA
  printf("SKIP: this build has no CUDA back-end (configure with -DTD_ENABLE_CUDA=ON)\n");
  return 77;
#else
  if (td_kernels_gpu_count() == 0) {
    const char *why = device_expected();
    if (!why) {
      printf("SKIP: no CUDA device visible\n");
      return 77;
    }
    td_kernels *k = NULL;
    td_status st = td_kernels_create("cuda", 0, &k); /* its message says why */
    printf("FAIL: %s, but the CUDA back-end has no device: %s\n", why,
           st != TD_OK ? td_error_message() : "the module loaded and reports 0 devices");
    td_kernels_destroy(&k);
    return 1;
  }
  if (td_kernels_create("cpu", 0, &g_cpu) != TD_OK || td_kernels_create("cuda", 0, &g_gpu) != TD_OK) {
    printf("FAIL creating the back-ends: %s\n%s", td_error_message(), td_error_trace());
    return 1;
  }
  test_cast();
  test_gemm();
  test_bias();
  test_embed();
  test_norms();
  test_pointwise();
  test_rope();
  test_attention();
  test_pos();
  test_copy2d();
  test_xent();
  test_adamw();
  printf("CUDA back-end peak device memory %.1f MiB\n",
         (double)g_gpu->device_peak(g_gpu) / 1048576.0);
  td_kernels_destroy(&g_gpu);
  td_kernels_destroy(&g_cpu);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
#endif
}
