/* test_kernels_bf16.c — the bf16 side of the CPU ops table against a float64
 * reference computed from the UNROUNDED float32 inputs, each within a bound
 * derived from where bf16 rounds (u = 2^-8, the bf16 unit roundoff; e =
 * 2^-24, float32's):
 *   cast         |bf16(x) − x| ≤ u·|x|, ties to even, NaN/±Inf kept, and
 *                bf16 → float32 → bf16 the identity
 *   gemm         |c − c64| ≤ (2u + u² + K·e)·Σ_k |a_k|·|b_k|   (operands rounded,
 *                float32 sums) + u·|c64| when C is bf16 (rounded once, after the sum)
 *   bias_fwd     |o − o64| ≤ u·|b| + e·(|o64| + |b|)
 *   embed_fwd    |o − o64| ≤ u·(|wte| + |wpe|) + e·|o64|
 *   layernorm    |o − o64| ≤ u·(|x̂·w| + |b|) + u·|o64| (bf16 out) + 1e-5·(1 + |o64|)
 *                (x̂ = (x−μ)·rstd; the float32 statistics as in the fp32 test)
 *   layernorm_bwd with bf16 w: against float64 on the rounded w (the only
 *                bf16 input is read exactly) at the fp32 test's 1e-5
 *   gelu_fwd     bf16 out: |o − o64| ≤ u·|o64| + 1e-6·(1 + |o64|)
 *   rmsnorm, swiglu_fwd (LLaMA) with bf16 w and/or bf16 out: against the
 *                float32 kernel on the same (widened) inputs, |o − o32| ≤ u·|o32|
 *                and bitwise bf16(o32) (the same float32 arithmetic, rounded
 *                once on store); rmsnorm_bwd with bf16 w against float64 on
 *                the rounded w at the fp32 test's 1e-5
 * on random inputs with odd sizes, for the back-end's own bf16 matmul path
 * and, in the same run, for the widened one (TD_CPU_BF16_MATMUL=widen).
 * Prints one line per check and "N passed, M failed"; exits non-zero on a
 * failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/td_bf16.h"
#include "kernels/td_kernels.h"

static int g_pass, g_fail;
static const double U = 1.0 / 256.0, E = 1.0 / 16777216.0;

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* uniform in [-1, 1) (xorshift64*) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  double u = (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
  return 2.0 * u - 1.0;
}

static void *xmalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_kernels_bf16: out of memory\n");
    exit(2);
  }
  return p;
}
#define NEWF(n) ((float *)xmalloc((size_t)(n) * sizeof(float)))
#define NEWH(n) ((td_bf16 *)xmalloc((size_t)(n) * sizeof(td_bf16)))
#define NEWD(n) ((double *)xmalloc((size_t)(n) * sizeof(double)))

/* f (and its bf16 rounding h, when given) = amp·uniform. */
static void fill(float *f, td_bf16 *h, int64_t n, double amp) {
  for (int64_t i = 0; i < n; i++) {
    f[i] = (float)(amp * urand());
    if (h) h[i] = td_bf16_from_f32(f[i]);
  }
}

/* worst of |got − ref| / bound over n elements; NaN fails */
static void check_bound(const char *name, const double *got, const double *ref,
                        const double *bound, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double r = fabs(got[i] - ref[i]) / (bound[i] > 0 ? bound[i] : 1e-300);
    if (!(r <= worst)) worst = r; /* NaN too */
  }
  int ok = worst <= 1.0;
  if (ok) g_pass++;
  else g_fail++;
  printf("%-4s %-64s err/bound %.2e\n", ok ? "ok" : "FAIL", name, worst);
}

static void check_true(const char *name, int ok) {
  if (ok) g_pass++;
  else g_fail++;
  printf("%-4s %s\n", ok ? "ok" : "FAIL", name);
}

static void ck(const char *what, td_status s) {
  if (s != TD_OK) {
    printf("FAIL %s: %s\n", what, td_error_message());
    td_error_clear();
    g_fail++;
  }
}
#define CK(call) ck(#call, (call))

/* ---- cast ------------------------------------------------------------------------ */

static void test_cast(td_kernels *k) {
  int64_t n = 1001;
  float *x = NEWF(n + 6), *back = NEWF(n + 6);
  td_bf16 *h = NEWH(n + 6), *h2 = NEWH(n + 6);
  double *got = NEWD(n), *ref = NEWD(n), *bnd = NEWD(n);
  fill(x, NULL, n, 1e3);
  for (int64_t i = 0; i < n; i += 7) x[i] *= 1e-30f; /* tiny and subnormal-ish too */
  x[n] = 1.0f + 1.0f / 256.0f;        /* a tie: to even, 1.0 */
  x[n + 1] = 1.0f + 3.0f / 256.0f;    /* a tie: to even, 1 + 4/256 */
  x[n + 2] = NAN;
  x[n + 3] = INFINITY;
  x[n + 4] = -INFINITY;
  x[n + 5] = 3.0e38f;                 /* rounds to +Inf? no: max bf16 is 3.39e38 */
  CK(k->cast(k, h, TD_DTYPE_BF16, x, TD_DTYPE_F32, n + 6));
  CK(k->cast(k, back, TD_DTYPE_F32, h, TD_DTYPE_BF16, n + 6));
  CK(k->cast(k, h2, TD_DTYPE_BF16, back, TD_DTYPE_F32, n + 6));
  for (int64_t i = 0; i < n; i++) {
    got[i] = back[i], ref[i] = x[i], bnd[i] = U * fabs((double)x[i]) * (1 + 1e-12);
  }
  check_bound("cast f32->bf16->f32 n=1001: |r - x| <= u|x|", got, ref, bnd, n);
  check_true("cast: ties to even (1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6)",
             back[n] == 1.0f && back[n + 1] == 1.0f + 4.0f / 256.0f);
  check_true("cast: NaN stays NaN, +-Inf stay +-Inf, 3e38 stays finite",
             isnan(back[n + 2]) && back[n + 3] == INFINITY && back[n + 4] == -INFINITY &&
                 isfinite(back[n + 5]));
  check_true("cast: bf16 -> f32 -> bf16 is the identity",
             memcmp(h, h2, (size_t)(n + 2) * sizeof *h) == 0);
  free(x), free(back), free(h), free(h2), free(got), free(ref), free(bnd);
}

/* ---- gemm ------------------------------------------------------------------------ */

static void test_gemm(td_kernels *k, const char *path, int64_t M, int64_t N, int64_t K,
                      int ta, int tb, float beta, td_dtype ct) {
  float *A = NEWF(M * K), *B = NEWF(K * N), *C0 = NEWF(M * N);
  td_bf16 *Ah = NEWH(M * K), *Bh = NEWH(K * N), *Ch = NEWH(M * N);
  float *Cf = NEWF(M * N);
  double *got = NEWD(M * N), *ref = NEWD(M * N), *bnd = NEWD(M * N);
  fill(A, Ah, M * K, 1.0);
  fill(B, Bh, K * N, 1.0);
  fill(C0, Ch, M * N, 1.0);
  for (int64_t i = 0; i < M * N; i++) C0[i] = td_bf16_to_f32(Ch[i]); /* a bf16-exact C */
  memcpy(Cf, C0, (size_t)(M * N) * sizeof(float));
  void *C = ct == TD_DTYPE_BF16 ? (void *)Ch : (void *)Cf;
  CK(k->gemm(k, ta, tb, M, N, K, Ah, TD_DTYPE_BF16, Bh, TD_DTYPE_BF16, beta, C, ct));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = 0.0, sa = 0.0;
      for (int64_t kk = 0; kk < K; kk++) {
        double a = ta ? A[kk * M + m] : A[m * K + kk];
        double b = tb ? B[n * K + kk] : B[kk * N + n];
        s += a * b;
        sa += fabs(a * b);
      }
      double r = s + (beta != 0.0f ? (double)C0[m * N + n] : 0.0);
      double sum_abs = sa + (beta != 0.0f ? fabs((double)C0[m * N + n]) : 0.0);
      ref[m * N + n] = r;
      bnd[m * N + n] = ((2 * U + U * U) * sa + (double)(K + 1) * E * sum_abs) * 1.01 +
                       (ct == TD_DTYPE_BF16 ? U * fabs(r) * 1.01 : 0.0) + 1e-30;
      got[m * N + n] = ct == TD_DTYPE_BF16 ? td_bf16_to_f32(Ch[m * N + n]) : Cf[m * N + n];
    }
  char name[160];
  snprintf(name, sizeof name, "gemm %s M=%lld N=%lld K=%lld t=%d%d beta=%g C=%s", path,
           (long long)M, (long long)N, (long long)K, ta, tb, (double)beta,
           ct == TD_DTYPE_BF16 ? "bf16" : "f32");
  check_bound(name, got, ref, bnd, M * N);
  free(A), free(B), free(C0), free(Ah), free(Bh), free(Ch), free(Cf), free(got), free(ref),
      free(bnd);
}

/* ---- bias, embedding, gelu ------------------------------------------------------------ */

static void test_bias(td_kernels *k, int64_t M, int64_t N) {
  float *out = NEWF(M * N), *b = NEWF(N);
  td_bf16 *bh = NEWH(N);
  double *got = NEWD(M * N), *ref = NEWD(M * N), *bnd = NEWD(M * N);
  fill(out, NULL, M * N, 1.0);
  fill(b, bh, N, 1.0);
  for (int64_t i = 0; i < M * N; i++) ref[i] = (double)out[i] + b[i % N];
  CK(k->bias_fwd(k, out, bh, TD_DTYPE_BF16, M, N));
  for (int64_t i = 0; i < M * N; i++) {
    got[i] = out[i];
    bnd[i] = (U * fabs((double)b[i % N]) + E * (fabs(ref[i]) + fabs((double)b[i % N]))) * 1.01 + 1e-30;
  }
  check_bound("bias_fwd bf16 bias M=37 N=29", got, ref, bnd, M * N);
  free(out), free(b), free(bh), free(got), free(ref), free(bnd);
}

static void test_embed(td_kernels *k) {
  int64_t B = 3, T = 7, C = 33, Vs = 19, v0 = 5, n = B * T;
  int32_t tok[21];
  float *wte = NEWF(Vs * C), *wpe = NEWF(T * C), *out = NEWF(n * C);
  td_bf16 *wteh = NEWH(Vs * C), *wpeh = NEWH(T * C);
  double *got = NEWD(n * C), *ref = NEWD(n * C), *bnd = NEWD(n * C);
  fill(wte, wteh, Vs * C, 1.0);
  fill(wpe, wpeh, T * C, 1.0);
  for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 7) % 30); /* some outside the shard */
  CK(k->embed_fwd(k, out, tok, wteh, v0, Vs, wpeh, TD_DTYPE_BF16, B, T, C, NULL));
  for (int64_t i = 0; i < n; i++)
    for (int64_t c = 0; c < C; c++) {
      int64_t v = tok[i] - v0;
      double e = v >= 0 && v < Vs ? wte[v * C + c] : 0.0, p = wpe[(i % T) * C + c];
      ref[i * C + c] = e + p;
      got[i * C + c] = out[i * C + c];
      bnd[i * C + c] = (U * (fabs(e) + fabs(p)) + E * fabs(e + p)) * 1.01 + 1e-30;
    }
  check_bound("embed_fwd bf16 wte/wpe B=3 T=7 C=33 shard [5,24)", got, ref, bnd, n * C);
  free(wte), free(wpe), free(out), free(wteh), free(wpeh), free(got), free(ref), free(bnd);
}

static double gelu64(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_gelu(td_kernels *k, int64_t n) {
  float *x = NEWF(n);
  td_bf16 *o = NEWH(n);
  double *got = NEWD(n), *ref = NEWD(n), *bnd = NEWD(n);
  fill(x, NULL, n, 6.0);
  CK(k->gelu_fwd(k, o, TD_DTYPE_BF16, x, n));
  for (int64_t i = 0; i < n; i++) {
    ref[i] = gelu64(x[i]);
    got[i] = td_bf16_to_f32(o[i]);
    bnd[i] = U * fabs(ref[i]) * 1.01 + 1e-6 * (1 + fabs(ref[i]));
  }
  check_bound("gelu_fwd bf16 out n=10007", got, ref, bnd, n);
  free(x), free(o), free(got), free(ref), free(bnd);
}

/* ---- LayerNorm ------------------------------------------------------------------------- */

static void test_layernorm(td_kernels *k, int64_t N, int64_t C, td_dtype ot) {
  float *x = NEWF(N * C), *w = NEWF(C), *b = NEWF(C), *mean = NEWF(N), *rstd = NEWF(N);
  td_bf16 *wh = NEWH(C), *bh = NEWH(C), *oh = NEWH(N * C);
  float *of = NEWF(N * C);
  double *got = NEWD(N * C), *ref = NEWD(N * C), *bnd = NEWD(N * C);
  fill(x, NULL, N * C, 2.0);
  for (int64_t i = 0; i < N * C; i++) x[i] += 0.5f; /* a non-zero mean */
  fill(w, wh, C, 1.5);
  fill(b, bh, C, 0.5);
  CK(k->layernorm_fwd(k, ot == TD_DTYPE_BF16 ? (void *)oh : (void *)of, ot, mean, rstd, x, wh, bh,
                      TD_DTYPE_BF16, N, C));
  for (int64_t n = 0; n < N; n++) {
    double mu = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; c++) mu += x[n * C + c];
    mu /= (double)C;
    for (int64_t c = 0; c < C; c++) v += (x[n * C + c] - mu) * (x[n * C + c] - mu);
    double r = 1.0 / sqrt(v / (double)C + 1e-5);
    for (int64_t c = 0; c < C; c++) {
      double xh = (x[n * C + c] - mu) * r, o = xh * w[c] + b[c];
      int64_t i = n * C + c;
      ref[i] = o;
      got[i] = ot == TD_DTYPE_BF16 ? td_bf16_to_f32(oh[i]) : of[i];
      bnd[i] = (U * (fabs(xh * w[c]) + fabs((double)b[c])) + (ot == TD_DTYPE_BF16 ? U * fabs(o) : 0.0)) *
                   1.01 +
               1e-5 * (1 + fabs(o));
    }
  }
  char name[128];
  snprintf(name, sizeof name, "layernorm_fwd bf16 w,b out=%s N=%lld C=%lld",
           ot == TD_DTYPE_BF16 ? "bf16" : "f32", (long long)N, (long long)C);
  check_bound(name, got, ref, bnd, N * C);

  /* backward with the bf16 w: float64 on the rounded w */
  float *dout = NEWF(N * C), *dx = NEWF(N * C), *dw = NEWF(C), *db = NEWF(C);
  double *gdx = NEWD(N * C), *rdx = NEWD(N * C), *bdx = NEWD(N * C);
  fill(dout, NULL, N * C, 1.0);
  CK(k->layernorm_bwd(k, dx, dw, db, dout, x, wh, TD_DTYPE_BF16, mean, rstd, N, C));
  for (int64_t n = 0; n < N; n++) {
    double mu = mean[n], r = rstd[n], sg = 0.0, sgx = 0.0;
    for (int64_t c = 0; c < C; c++) {
      double g = (double)dout[n * C + c] * td_bf16_to_f32(wh[c]);
      sg += g;
      sgx += g * (x[n * C + c] - mu) * r;
    }
    sg /= (double)C, sgx /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      int64_t i = n * C + c;
      double xh = (x[i] - mu) * r;
      rdx[i] = r * ((double)dout[i] * td_bf16_to_f32(wh[c]) - sg - xh * sgx);
      gdx[i] = dx[i];
      bdx[i] = 1e-5 * (1 + fabs(rdx[i]));
    }
  }
  snprintf(name, sizeof name, "layernorm_bwd dx, bf16 w N=%lld C=%lld", (long long)N, (long long)C);
  check_bound(name, gdx, rdx, bdx, N * C);
  free(x), free(w), free(b), free(mean), free(rstd), free(wh), free(bh), free(oh), free(of);
  free(got), free(ref), free(bnd), free(dout), free(dx), free(dw), free(db), free(gdx), free(rdx),
      free(bdx);
}

/* ---- LLaMA: RMSNorm, SwiGLU ----------------------------------------------------------- */

/* got (bf16) against the float32 result r32: within u·|r32| (round to
 * nearest) and, counted separately, bitwise the rounding of r32. */
static void check_vs_f32(const char *name, const td_bf16 *got, const float *r32, int64_t n) {
  double *g = NEWD(n), *r = NEWD(n), *b = NEWD(n);
  int64_t same = 0;
  for (int64_t i = 0; i < n; i++) {
    g[i] = td_bf16_to_f32(got[i]);
    r[i] = r32[i];
    b[i] = U * fabs((double)r32[i]) * (1 + 1e-12) + 1e-38;
    same += got[i] == td_bf16_from_f32(r32[i]);
  }
  check_bound(name, g, r, b, n);
  char nm[160];
  snprintf(nm, sizeof nm, "%s: bitwise bf16(f32 kernel) (%lld of %lld)", name, (long long)same,
           (long long)n);
  check_true(nm, same == n);
  free(g), free(r), free(b);
}

static void test_rmsnorm(td_kernels *k, int64_t N, int64_t C) {
  const float eps = 1e-5f;
  float *x = NEWF(N * C), *w = NEWF(C), *wr = NEWF(C), *o32 = NEWF(N * C), *of = NEWF(N * C);
  float *r32 = NEWF(N), *r16 = NEWF(N);
  td_bf16 *wh = NEWH(C), *oh = NEWH(N * C);
  char name[128];
  fill(x, NULL, N * C, 2.0);
  for (int64_t i = 0; i < N * C; i++) x[i] += 0.5f;
  fill(w, wh, C, 1.5);
  for (int64_t c = 0; c < C; c++) wr[c] = td_bf16_to_f32(wh[c]); /* the values bf16 w holds */
  CK(k->rmsnorm_fwd(k, o32, TD_DTYPE_F32, r32, x, wr, TD_DTYPE_F32, eps, N, C));
  CK(k->rmsnorm_fwd(k, oh, TD_DTYPE_BF16, r16, x, wh, TD_DTYPE_BF16, eps, N, C));
  snprintf(name, sizeof name, "rmsnorm_fwd bf16 w, bf16 out N=%lld C=%lld", (long long)N,
           (long long)C);
  check_vs_f32(name, oh, o32, N * C);
  CK(k->rmsnorm_fwd(k, of, TD_DTYPE_F32, r16, x, wh, TD_DTYPE_BF16, eps, N, C));
  snprintf(name, sizeof name, "rmsnorm_fwd bf16 w, f32 out = f32 kernel N=%lld C=%lld",
           (long long)N, (long long)C);
  check_true(name, memcmp(of, o32, (size_t)(N * C) * sizeof(float)) == 0 &&
                       memcmp(r16, r32, (size_t)N * sizeof(float)) == 0);

  /* backward with the bf16 w: float64 on the rounded w */
  float *dout = NEWF(N * C), *dx = NEWF(N * C), *dw = NEWF(C);
  double *gdx = NEWD(N * C), *rdx = NEWD(N * C), *bdx = NEWD(N * C);
  fill(dout, NULL, N * C, 1.0);
  CK(k->rmsnorm_bwd(k, dx, dw, dout, x, wh, TD_DTYPE_BF16, r32, N, C));
  for (int64_t n = 0; n < N; n++) {
    double r = r32[n], sgx = 0.0;
    for (int64_t c = 0; c < C; c++) sgx += (double)dout[n * C + c] * wr[c] * x[n * C + c] * r;
    sgx /= (double)C;
    for (int64_t c = 0; c < C; c++) {
      int64_t i = n * C + c;
      rdx[i] = r * ((double)dout[i] * wr[c] - (double)x[i] * r * sgx);
      gdx[i] = dx[i];
      bdx[i] = 1e-5 * (1 + fabs(rdx[i]));
    }
  }
  snprintf(name, sizeof name, "rmsnorm_bwd dx, bf16 w N=%lld C=%lld", (long long)N, (long long)C);
  check_bound(name, gdx, rdx, bdx, N * C);
  free(x), free(w), free(wr), free(o32), free(of), free(r32), free(r16), free(wh), free(oh);
  free(dout), free(dx), free(dw), free(gdx), free(rdx), free(bdx);
}

static void test_swiglu(td_kernels *k, int64_t n) {
  float *g = NEWF(n), *u = NEWF(n), *o32 = NEWF(n);
  td_bf16 *oh = NEWH(n);
  fill(g, NULL, n, 30.0);
  fill(u, NULL, n, 2.0);
  CK(k->swiglu_fwd(k, o32, TD_DTYPE_F32, g, u, n));
  CK(k->swiglu_fwd(k, oh, TD_DTYPE_BF16, g, u, n));
  check_vs_f32("swiglu_fwd bf16 out n=10007 |g|<=30", oh, o32, n);
  free(g), free(u), free(o32), free(oh);
}

/* ---- main -------------------------------------------------------------------------------- */

static void run_all(td_kernels *k, const char *path) {
  static const int64_t shapes[][3] = {{37, 29, 51}, {1, 64, 17}, {65, 3, 1000}, {128, 96, 80}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++)
      test_gemm(k, path, shapes[s][0], shapes[s][1], shapes[s][2], t >> 1, t & 1,
                (float)(t == 3), s == 2 ? TD_DTYPE_BF16 : TD_DTYPE_F32);
  test_gemm(k, path, 33, 47, 65, 0, 0, 1.0f, TD_DTYPE_BF16);
  test_gemm(k, path, 33, 47, 65, 1, 0, 0.0f, TD_DTYPE_BF16);
}

int main(void) {
  td_kernels *k = NULL;
  if (td_kernels_cpu_create(2, &k) != TD_OK) {
    printf("FAIL: CPU back-end: %s\n", td_error_message());
    return 1;
  }
  if (!k->bf16_matmul) {
    printf("SKIP: this build's matmul engine (%s) has no bf16 (trident refuses "
           "training.precision: bf16 at check time)\n",
           k->matmul_name);
    td_kernels_destroy(&k);
    return 77;
  }
  const char *path = k->bf16_matmul == 2 ? "native" : "widened";
  printf("# CPU back-end, %s matmul, bf16 products: %s\n", k->matmul_name, path);
  test_cast(k);
  run_all(k, path);
  test_bias(k, 37, 29);
  test_embed(k);
  test_gelu(k, 10007);
  test_layernorm(k, 13, 77, TD_DTYPE_BF16);
  test_layernorm(k, 5, 768, TD_DTYPE_F32);
  test_rmsnorm(k, 13, 77);
  test_rmsnorm(k, 5, 768);
  test_swiglu(k, 10007);
  td_kernels_destroy(&k);
  if (strcmp(path, "native") == 0) { /* the fallback path too, in the same run */
    setenv("TD_CPU_BF16_MATMUL", "widen", 1);
    if (td_kernels_cpu_create(2, &k) != TD_OK || k->bf16_matmul != 1) {
      printf("FAIL: TD_CPU_BF16_MATMUL=widen did not select the widened path\n");
      g_fail++;
    } else {
      run_all(k, "widened");
    }
    td_kernels_destroy(&k);
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
