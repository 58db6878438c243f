/* test_kernels.c — every op of the CPU back-end against a plain float64
 * reference on random inputs (odd sizes included), forward and backward, and
 * every backward against central differences of the float64 forward on the
 * scalar loss L = Σ out·R. Prints one line per check and "N passed, M failed";
 * exits non-zero on any failure.
 *   test_kernels          the checks (a few seconds)
 *   test_kernels --bench  also the gemm rate and the attention time */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_simd.h"
#include "kernels/cpu/td_cpu.h"
#include "kernels/td_kernels.h"

static int g_pass, g_fail;

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
/* Uniform in [-1, 1), never exactly 0 (xorshift64*). */
static double urand(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  double u = (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
  double r = 2.0 * u - 1.0;
  return r == 0.0 ? 0.5 : r;
}

static void *xmalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_kernels: out of memory\n");
    exit(2);
  }
  return p;
}
#define NEWF(n) ((float *)xmalloc((size_t)(n) * sizeof(float)))
#define NEWD(n) ((double *)xmalloc((size_t)(n) * sizeof(double)))

static void fill(float *f, double *d, int64_t n, double amp) {
  for (int64_t i = 0; i < n; i++) {
    float v = (float)(amp * urand());
    if (f) f[i] = v;
    if (d) d[i] = v;
  }
}

static void report(int ok, const char *name, double err, double tol) {
  if (ok) g_pass++;
  else g_fail++;
  printf("%-4s %-58s err %.2e (tol %.0e)\n", ok ? "ok" : "FAIL", name, err, tol);
}

/* max_i |got−ref| / (1 + |ref|) ≤ tol; NaN fails. */
static void check_close(const char *name, const float *got, const double *ref, int64_t n,
                        double tol) {
  double worst = 0.0;
  int nan = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(got[i]) && isfinite(ref[i])) nan = 1;
    double e = fabs((double)got[i] - ref[i]) / (1.0 + fabs(ref[i]));
    if (e > worst || e != e) worst = e;
  }
  report(!nan && worst <= tol, name, worst, tol);
}

static void check_status(const char *name, td_status s) {
  if (s != TD_OK) {
    printf("FAIL %s: %s\n%s", name, td_error_message(), td_error_trace());
    td_error_clear();
    g_fail++;
  }
}
#define CK(call) check_status(#call, (call))

/* Central differences in double: g[i] = (L(x+h e_i) − L(x−h e_i)) / 2h. */
typedef double (*loss_fn)(void *ctx);
static void fd_grad(loss_fn f, void *ctx, double *x, int64_t n, double *g) {
  const double h = 1e-5;
  for (int64_t i = 0; i < n; i++) {
    double xi = x[i];
    x[i] = xi + h;
    double lp = f(ctx);
    x[i] = xi - h;
    double lm = f(ctx);
    x[i] = xi;
    g[i] = (lp - lm) / (2.0 * h);
  }
}

static double dot(const double *a, const double *b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* ---- gemm, bias --------------------------------------------------------------- */

static void test_gemm(td_kernels *k, int64_t M, int64_t N, int64_t K) {
  float *A = NEWF(M * K), *B = NEWF(K * N), *C = NEWF(M * N);
  double *Ad = NEWD(M * K), *Bd = NEWD(K * N), *C0 = NEWD(M * N), *R = NEWD(M * N);
  fill(A, Ad, M * K, 1.0);
  fill(B, Bd, K * N, 1.0);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int beta = 0; beta < 2; beta++) {
        fill(C, C0, M * N, 1.0);
        for (int64_t m = 0; m < M; m++)
          for (int64_t n = 0; n < N; n++) {
            double s = beta ? C0[m * N + n] : 0.0;
            for (int64_t kk = 0; kk < K; kk++)
              s += (ta ? Ad[kk * M + m] : Ad[m * K + kk]) *
                   (tb ? Bd[n * K + kk] : Bd[kk * N + n]);
            R[m * N + n] = s;
          }
        CK(k->gemm(k, ta, tb, M, N, K, A, TD_DTYPE_F32, B, TD_DTYPE_F32, (float)beta, C, TD_DTYPE_F32));
        char name[96];
        snprintf(name, sizeof name, "gemm %c%c M=%lld N=%lld K=%lld beta=%d",
                 ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N,
                 (long long)K, beta);
        check_close(name, C, R, M * N, 2e-6 * (double)K);
      }
  free(A), free(B), free(C), free(Ad), free(Bd), free(C0), free(R);
}

typedef struct {
  int64_t M, N;
  double *x, *b, *R;
} bias_ctx;
static double bias_loss(void *p) {
  bias_ctx *c = p;
  double L = 0.0;
  for (int64_t m = 0; m < c->M; m++)
    for (int64_t n = 0; n < c->N; n++) L += (c->x[m * c->N + n] + c->b[n]) * c->R[m * c->N + n];
  return L;
}

static void test_bias(td_kernels *k, int64_t M, int64_t N) {
  float *out = NEWF(M * N), *b = NEWF(N), *db = NEWF(N), *dout = NEWF(M * N);
  double *outd = NEWD(M * N), *bd = NEWD(N), *dbd = NEWD(N), *R = NEWD(M * N), *g = NEWD(N);
  char name[96];
  fill(out, outd, M * N, 1.0);
  fill(b, bd, N, 1.0);
  fill(dout, R, M * N, 1.0);
  fill(db, dbd, N, 1.0);
  double *x0 = NEWD(M * N);
  memcpy(x0, outd, (size_t)(M * N) * sizeof(double));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) outd[m * N + n] += bd[n];
  CK(k->bias_fwd(k, out, b, TD_DTYPE_F32, M, N));
  snprintf(name, sizeof name, "bias_fwd M=%lld N=%lld", (long long)M, (long long)N);
  check_close(name, out, outd, M * N, 1e-6);
  double *db0 = NEWD(N);
  memcpy(db0, dbd, (size_t)N * sizeof(double));
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) dbd[n] += R[m * N + n];
  CK(k->bias_bwd(k, db, dout, M, N));
  snprintf(name, sizeof name, "bias_bwd M=%lld N=%lld", (long long)M, (long long)N);
  check_close(name, db, dbd, N, 1e-5);
  bias_ctx c = {M, N, x0, bd, R};
  fd_grad(bias_loss, &c, bd, N, g);
  for (int64_t n = 0; n < N; n++) g[n] += db0[n];
  snprintf(name, sizeof name, "bias_bwd finite differences M=%lld N=%lld", (long long)M,
           (long long)N);
  check_close(name, db, g, N, 1e-4);
  free(out), free(b), free(db), free(dout), free(outd), free(bd), free(dbd), free(R);
  free(g), free(x0), free(db0);
}

/* ---- embedding ------------------------------------------------------------------ */

typedef struct {
  int64_t B, T, C, v0, Vs;
  const int32_t *tok;
  double *wte, *wpe, *R; /* wpe may be NULL */
} emb_ctx;
static void emb_ref(const emb_ctx *c, double *out) {
  for (int64_t n = 0; n < c->B * c->T; n++)
    for (int64_t j = 0; j < c->C; j++) {
      int64_t v = c->tok[n] - c->v0;
      double s = (v >= 0 && v < c->Vs) ? c->wte[v * c->C + j] : 0.0;
      if (c->wpe) s += c->wpe[(n % c->T) * c->C + j];
      out[n * c->C + j] = s;
    }
}
static double emb_loss(void *p) {
  emb_ctx *c = p;
  int64_t n = c->B * c->T * c->C;
  double *o = NEWD(n);
  emb_ref(c, o);
  double L = dot(o, c->R, n);
  free(o);
  return L;
}

static void test_embed(td_kernels *k, int64_t B, int64_t T, int64_t C, int64_t v0,
                       int64_t Vs, int with_wpe) {
  int64_t N = B * T, V = v0 + Vs + 3; /* tokens also outside the shard */
  int32_t *tok = xmalloc((size_t)N * sizeof(int32_t));
  float *wte = NEWF(Vs * C), *wpe = NEWF(T * C), *out = NEWF(N * C), *dout = NEWF(N * C);
  float *dwte = NEWF(Vs * C), *dwpe = NEWF(T * C);
  double *wted = NEWD(Vs * C), *wped = NEWD(T * C), *outd = NEWD(N * C), *R = NEWD(N * C);
  double *dwte0 = NEWD(Vs * C), *dwpe0 = NEWD(T * C), *g = NEWD(Vs * C), *gp = NEWD(T * C);
  char name[112], tag[64];
  snprintf(tag, sizeof tag, "B=%lld T=%lld C=%lld v0=%lld Vs=%lld%s", (long long)B,
           (long long)T, (long long)C, (long long)v0, (long long)Vs, with_wpe ? "" : " no wpe");
  for (int64_t n = 0; n < N; n++) tok[n] = (int32_t)((g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (int32_t)V;
  tok[0] = (int32_t)v0; /* repeated tokens collide in dwte */
  if (N > 1) tok[N - 1] = (int32_t)v0;
  fill(wte, wted, Vs * C, 1.0);
  fill(wpe, wped, T * C, 1.0);
  fill(dout, R, N * C, 1.0);
  fill(dwte, dwte0, Vs * C, 1.0);
  fill(dwpe, dwpe0, T * C, 1.0);
  emb_ctx c = {B, T, C, v0, Vs, tok, wted, with_wpe ? wped : NULL, R};
  emb_ref(&c, outd);
  CK(k->embed_fwd(k, out, tok, wte, v0, Vs, with_wpe ? wpe : NULL, TD_DTYPE_F32, B, T, C, NULL));
  snprintf(name, sizeof name, "embed_fwd %s", tag);
  check_close(name, out, outd, N * C, 1e-6);
  CK(k->embed_bwd(k, dwte, with_wpe ? dwpe : NULL, dout, tok, v0, Vs, B, T, C, NULL));
  /* float64 reference backward */
  double *rw = NEWD(Vs * C), *rp = NEWD(T * C);
  memcpy(rw, dwte0, (size_t)(Vs * C) * sizeof(double));
  memcpy(rp, dwpe0, (size_t)(T * C) * sizeof(double));
  for (int64_t n = 0; n < N; n++) {
    int64_t v = tok[n] - v0;
    for (int64_t j = 0; j < C; j++) {
      if (v >= 0 && v < Vs) rw[v * C + j] += R[n * C + j];
      if (with_wpe) rp[(n % T) * C + j] += R[n * C + j];
    }
  }
  snprintf(name, sizeof name, "embed_bwd dwte %s", tag);
  check_close(name, dwte, rw, Vs * C, 1e-5);
  if (with_wpe) {
    snprintf(name, sizeof name, "embed_bwd dwpe %s", tag);
    check_close(name, dwpe, rp, T * C, 1e-5);
  } else {
    snprintf(name, sizeof name, "embed_bwd dwpe untouched when NULL %s", tag);
    check_close(name, dwpe, dwpe0, T * C, 0.0);
  }
  fd_grad(emb_loss, &c, wted, Vs * C, g);
  for (int64_t i = 0; i < Vs * C; i++) g[i] += dwte0[i];
  snprintf(name, sizeof name, "embed_bwd dwte finite differences %s", tag);
  check_close(name, dwte, g, Vs * C, 1e-4);
  if (with_wpe) {
    fd_grad(emb_loss, &c, wped, T * C, gp);
    for (int64_t i = 0; i < T * C; i++) gp[i] += dwpe0[i];
    snprintf(name, sizeof name, "embed_bwd dwpe finite differences %s", tag);
    check_close(name, dwpe, gp, T * C, 1e-4);
  }
  free(tok), free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
  free(wted), free(wped), free(outd), free(R), free(dwte0), free(dwpe0), free(g), free(gp);
  free(rw), free(rp);
}

/* ---- layernorm ------------------------------------------------------------------------ */

typedef struct {
  int64_t N, C;
  double *x, *w, *b, *R;
} ln_ctx;
static void ln_ref(const ln_ctx *c, double *out, double *mean, double *rstd) {
  for (int64_t n = 0; n < c->N; n++) {
    const double *x = c->x + n * c->C;
    double mu = 0.0, var = 0.0;
    for (int64_t j = 0; j < c->C; j++) mu += x[j];
    mu /= (double)c->C;
    for (int64_t j = 0; j < c->C; j++) var += (x[j] - mu) * (x[j] - mu);
    var /= (double)c->C;
    double r = 1.0 / sqrt(var + 1e-5);
    for (int64_t j = 0; j < c->C; j++) out[n * c->C + j] = (x[j] - mu) * r * c->w[j] + c->b[j];
    if (mean) mean[n] = mu;
    if (rstd) rstd[n] = r;
  }
}
static double ln_loss(void *p) {
  ln_ctx *c = p;
  double *o = NEWD(c->N * c->C);
  ln_ref(c, o, NULL, NULL);
  double L = dot(o, c->R, c->N * c->C);
  free(o);
  return L;
}

static void test_layernorm(td_kernels *k, int64_t N, int64_t C, int fd) {
  int64_t n = N * C;
  float *x = NEWF(n), *w = NEWF(C), *b = NEWF(C), *out = NEWF(n), *mean = NEWF(N), *rstd = NEWF(N);
  float *dout = NEWF(n), *dx = NEWF(n), *dw = NEWF(C), *db = NEWF(C);
  double *xd = NEWD(n), *wd = NEWD(C), *bd = NEWD(C), *outd = NEWD(n), *md = NEWD(N), *rd = NEWD(N);
  double *R = NEWD(n), *dx0 = NEWD(n), *dw0 = NEWD(C), *db0 = NEWD(C);
  double *gx = NEWD(n), *gw = NEWD(C), *gb = NEWD(C);
  char name[96], tag[40];
  snprintf(tag, sizeof tag, "N=%lld C=%lld", (long long)N, (long long)C);
  fill(x, xd, n, 2.0);
  for (int64_t i = 0; i < n; i++) x[i] += 0.5f, xd[i] = x[i]; /* non-zero mean */
  fill(w, wd, C, 1.0);
  fill(b, bd, C, 1.0);
  fill(dout, R, n, 1.0);
  fill(dx, dx0, n, 1.0);
  fill(dw, dw0, C, 1.0);
  fill(db, db0, C, 1.0);
  ln_ctx c = {N, C, xd, wd, bd, R};
  ln_ref(&c, outd, md, rd);
  CK(k->layernorm_fwd(k, out, TD_DTYPE_F32, mean, rstd, x, w, b, TD_DTYPE_F32, N, C));
  snprintf(name, sizeof name, "layernorm_fwd out %s", tag);
  check_close(name, out, outd, n, 1e-5);
  snprintf(name, sizeof name, "layernorm_fwd mean %s", tag);
  check_close(name, mean, md, N, 1e-6);
  snprintf(name, sizeof name, "layernorm_fwd rstd %s", tag);
  check_close(name, rstd, rd, N, 1e-5);
  CK(k->layernorm_bwd(k, dx, dw, db, dout, x, w, TD_DTYPE_F32, mean, rstd, N, C));
  /* float64 reference backward */
  double *rx = NEWD(n), *rw = NEWD(C), *rb = NEWD(C);
  memcpy(rw, dw0, (size_t)C * sizeof(double));
  memcpy(rb, db0, (size_t)C * sizeof(double));
  for (int64_t r = 0; r < N; r++) {
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < C; j++) {
      double xh = (xd[r * C + j] - md[r]) * rd[r], gg = R[r * C + j] * wd[j];
      sg += gg, sgx += gg * xh;
      rw[j] += R[r * C + j] * xh;
      rb[j] += R[r * C + j];
    }
    for (int64_t j = 0; j < C; j++) {
      double xh = (xd[r * C + j] - md[r]) * rd[r];
      rx[r * C + j] = dx0[r * C + j] + rd[r] * (R[r * C + j] * wd[j] - sg / C - xh * sgx / C);
    }
  }
  snprintf(name, sizeof name, "layernorm_bwd dx %s", tag);
  check_close(name, dx, rx, n, 1e-5);
  snprintf(name, sizeof name, "layernorm_bwd dw %s", tag);
  check_close(name, dw, rw, C, 1e-5);
  snprintf(name, sizeof name, "layernorm_bwd db %s", tag);
  check_close(name, db, rb, C, 1e-5);
  if (!fd) goto out;
  fd_grad(ln_loss, &c, xd, n, gx);
  fd_grad(ln_loss, &c, wd, C, gw);
  fd_grad(ln_loss, &c, bd, C, gb);
  for (int64_t i = 0; i < n; i++) gx[i] += dx0[i];
  for (int64_t i = 0; i < C; i++) gw[i] += dw0[i], gb[i] += db0[i];
  snprintf(name, sizeof name, "layernorm_bwd dx finite differences %s", tag);
  check_close(name, dx, gx, n, 1e-4);
  snprintf(name, sizeof name, "layernorm_bwd dw finite differences %s", tag);
  check_close(name, dw, gw, C, 1e-4);
  snprintf(name, sizeof name, "layernorm_bwd db finite differences %s", tag);
  check_close(name, db, gb, C, 1e-4);
out:
  free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dx);
  free(dw), free(db), free(xd), free(wd), free(bd), free(outd), free(md), free(rd), free(R);
  free(dx0), free(dw0), free(db0), free(gx), free(gw), free(gb), free(rx), free(rw), free(rb);
}

/* ---- RMSNorm --------------------------------------------------------------------------- */

typedef struct {
  int64_t N, C;
  double eps;
  double *x, *w, *R;
} rms_ctx;
static void rms_ref(const rms_ctx *c, double *out, double *rstd) {
  for (int64_t n = 0; n < c->N; n++) {
    const double *x = c->x + n * c->C;
    double ss = 0.0;
    for (int64_t j = 0; j < c->C; j++) ss += x[j] * x[j];
    double r = 1.0 / sqrt(ss / (double)c->C + c->eps);
    for (int64_t j = 0; j < c->C; j++) out[n * c->C + j] = x[j] * r * c->w[j];
    if (rstd) rstd[n] = r;
  }
}
static double rms_loss(void *p) {
  rms_ctx *c = p;
  double *o = NEWD(c->N * c->C);
  rms_ref(c, o, NULL);
  double L = dot(o, c->R, c->N * c->C);
  free(o);
  return L;
}

static void test_rmsnorm(td_kernels *k, int64_t N, int64_t C, float eps, int fd) {
  int64_t n = N * C;
  float *x = NEWF(n), *w = NEWF(C), *out = NEWF(n), *rstd = NEWF(N);
  float *dout = NEWF(n), *dx = NEWF(n), *dw = NEWF(C);
  double *xd = NEWD(n), *wd = NEWD(C), *outd = NEWD(n), *rd = NEWD(N);
  double *R = NEWD(n), *dx0 = NEWD(n), *dw0 = NEWD(C), *gx = NEWD(n), *gw = NEWD(C);
  double *rx = NEWD(n), *rw = NEWD(C);
  char name[96], tag[48];
  snprintf(tag, sizeof tag, "N=%lld C=%lld eps=%g", (long long)N, (long long)C, (double)eps);
  fill(x, xd, n, 2.0);
  for (int64_t i = 0; i < n; i++) x[i] += 0.5f, xd[i] = x[i]; /* non-zero mean */
  fill(w, wd, C, 1.0);
  fill(dout, R, n, 1.0);
  fill(dx, dx0, n, 1.0); /* dx, dw accumulate onto these */
  fill(dw, dw0, C, 1.0);
  rms_ctx c = {N, C, (double)eps, xd, wd, R};
  rms_ref(&c, outd, rd);
  CK(k->rmsnorm_fwd(k, out, TD_DTYPE_F32, rstd, x, w, TD_DTYPE_F32, eps, N, C));
  snprintf(name, sizeof name, "rmsnorm_fwd out %s", tag);
  check_close(name, out, outd, n, 1e-5);
  snprintf(name, sizeof name, "rmsnorm_fwd rstd %s", tag);
  check_close(name, rstd, rd, N, 1e-5);
  CK(k->rmsnorm_bwd(k, dx, dw, dout, x, w, TD_DTYPE_F32, rstd, N, C));
  /* float64 reference backward: x̂ = x·r, g = dout·w,
   * dx = dx0 + r·(g − x̂·mean(g·x̂)), dw = dw0 + Σ_n dout·x̂ */
  memcpy(rw, dw0, (size_t)C * sizeof(double));
  for (int64_t r = 0; r < N; r++) {
    double sgx = 0.0;
    for (int64_t j = 0; j < C; j++) {
      double xh = xd[r * C + j] * rd[r];
      sgx += R[r * C + j] * wd[j] * xh;
      rw[j] += R[r * C + j] * xh;
    }
    for (int64_t j = 0; j < C; j++) {
      double xh = xd[r * C + j] * rd[r];
      rx[r * C + j] = dx0[r * C + j] + rd[r] * (R[r * C + j] * wd[j] - xh * sgx / (double)C);
    }
  }
  snprintf(name, sizeof name, "rmsnorm_bwd dx (+=) %s", tag);
  check_close(name, dx, rx, n, 1e-5);
  snprintf(name, sizeof name, "rmsnorm_bwd dw (+=) %s", tag);
  check_close(name, dw, rw, C, 1e-5);
  if (fd) {
    fd_grad(rms_loss, &c, xd, n, gx);
    fd_grad(rms_loss, &c, wd, C, gw);
    for (int64_t i = 0; i < n; i++) gx[i] += dx0[i];
    for (int64_t i = 0; i < C; i++) gw[i] += dw0[i];
    snprintf(name, sizeof name, "rmsnorm_bwd dx finite differences %s", tag);
    check_close(name, dx, gx, n, 1e-4);
    snprintf(name, sizeof name, "rmsnorm_bwd dw finite differences %s", tag);
    check_close(name, dw, gw, C, 1e-4);
  }
  free(x), free(w), free(out), free(rstd), free(dout), free(dx), free(dw), free(xd), free(wd);
  free(outd), free(rd), free(R), free(dx0), free(dw0), free(gx), free(gw), free(rx), free(rw);
}

/* ---- attention ------------------------------------------------------------------------- */

/* q (B,T,·) rows of stride ldq holding NH heads; kk, v rows of stride ldkv
 * holding KV heads; query head h reads key/value head h / (NH/KV). */
typedef struct {
  int64_t B, T, NH, KV, HS, ldq, ldkv;
  double *q, *kk, *v, *R;
} gqa_ctx;
/* out (B,T,NH·HS), att (B,NH,T,T) or NULL. */
static void gqa_ref(const gqa_ctx *c, double *out, double *att) {
  int64_t B = c->B, T = c->T, NH = c->NH, HS = c->HS, C = NH * HS, G = NH / c->KV;
  double *p = NEWD(T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const double *q = c->q + (b * T + t) * c->ldq + h * HS;
        double mx = -INFINITY, s = 0.0;
        for (int64_t j = 0; j <= t; j++) {
          p[j] = dot(q, c->kk + (b * T + j) * c->ldkv + (h / G) * HS, HS) / sqrt((double)HS);
          if (p[j] > mx) mx = p[j];
        }
        for (int64_t j = 0; j <= t; j++) s += (p[j] = exp(p[j] - mx));
        for (int64_t j = 0; j < T; j++) {
          double a = j <= t ? p[j] / s : 0.0;
          if (att) att[((b * NH + h) * T + t) * T + j] = a;
          p[j] = a;
        }
        for (int64_t d = 0; d < HS; d++) {
          double o = 0.0;
          for (int64_t j = 0; j <= t; j++)
            o += p[j] * c->v[(b * T + j) * c->ldkv + (h / G) * HS + d];
          out[(b * T + t) * C + h * HS + d] = o;
        }
      }
  free(p);
}
static double gqa_loss(void *p) {
  gqa_ctx *c = p;
  int64_t n = c->B * c->T * c->NH * c->HS;
  double *o = NEWD(n);
  gqa_ref(c, o, NULL);
  double L = dot(o, c->R, n);
  free(o);
  return L;
}
/* float64 reference backward given dout = R: dq, dk, dv in the layouts of
 * q, kk, v (their head columns; the rest is not written). */
static void gqa_ref_bwd(const gqa_ctx *c, const double *att, double *dq, double *dk,
                        double *dv) {
  int64_t B = c->B, T = c->T, NH = c->NH, HS = c->HS, C = NH * HS, G = NH / c->KV;
  double *da = NEWD(T), sc = 1.0 / sqrt((double)HS);
  for (int64_t r = 0; r < B * T; r++) { /* the head columns; the rest untouched */
    memset(dq + r * c->ldq, 0, (size_t)C * sizeof(double));
    memset(dk + r * c->ldkv, 0, (size_t)(c->KV * HS) * sizeof(double));
    memset(dv + r * c->ldkv, 0, (size_t)(c->KV * HS) * sizeof(double));
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        const double *a = att + ((b * NH + h) * T + t) * T;
        const double *dout = c->R + (b * T + t) * C + h * HS;
        int64_t kvo = (h / G) * HS;
        double s = 0.0;
        for (int64_t j = 0; j <= t; j++) {
          da[j] = dot(dout, c->v + (b * T + j) * c->ldkv + kvo, HS);
          double *dvj = dv + (b * T + j) * c->ldkv + kvo;
          for (int64_t d = 0; d < HS; d++) dvj[d] += a[j] * dout[d];
          s += a[j] * da[j];
        }
        const double *q = c->q + (b * T + t) * c->ldq + h * HS;
        double *dqt = dq + (b * T + t) * c->ldq + h * HS;
        for (int64_t j = 0; j <= t; j++) {
          double dp = a[j] * (da[j] - s) * sc;
          const double *kj = c->kk + (b * T + j) * c->ldkv + kvo;
          double *dkj = dk + (b * T + j) * c->ldkv + kvo;
          for (int64_t d = 0; d < HS; d++) dqt[d] += dp * kj[d], dkj[d] += dp * q[d];
        }
      }
  free(da);
}

/* GPT-2's packed qkv (B,T,3C): the case KV = NH, q, k, v at column 0, C, 2C
 * of rows of stride 3C. */
static gqa_ctx att_ctx(int64_t B, int64_t T, int64_t NH, int64_t HS, double *qkv, double *R) {
  int64_t C = NH * HS;
  return (gqa_ctx){B, T, NH, NH, HS, 3 * C, 3 * C, qkv, qkv + C, qkv + 2 * C, R};
}

static void test_attention(td_kernels *k, int64_t B, int64_t T, int64_t NH, int64_t HS,
                           int fd) {
  int64_t C = NH * HS, nq = B * T * 3 * C, no = B * T * C, na = B * NH * T * T;
  float *qkv = NEWF(nq), *out = NEWF(no), *att = NEWF(na), *dout = NEWF(no);
  float *dqkv = NEWF(nq), *scr = NEWF(na);
  double *qd = NEWD(nq), *outd = NEWD(no), *attd = NEWD(na), *R = NEWD(no);
  double *rq = NEWD(nq), *g = NEWD(nq);
  char name[96], tag[48];
  snprintf(tag, sizeof tag, "B=%lld T=%lld NH=%lld HS=%lld", (long long)B, (long long)T,
           (long long)NH, (long long)HS);
  fill(qkv, qd, nq, 1.5);
  fill(dout, R, no, 1.0);
  for (int64_t i = 0; i < na; i++) att[i] = 7.0f; /* must be overwritten, 0 above diag */
  for (int64_t i = 0; i < nq; i++) dqkv[i] = 7.0f; /* "=": must be overwritten */
  for (int64_t i = 0; i < na; i++) scr[i] = 7.0f;  /* workspace: never read first */
  gqa_ctx c = att_ctx(B, T, NH, HS, qd, R);
  gqa_ref(&c, outd, attd);
  CK(k->attention_fwd(k, out, att, qkv, B, T, NH, HS));
  snprintf(name, sizeof name, "attention_fwd out %s", tag);
  check_close(name, out, outd, no, 1e-5);
  snprintf(name, sizeof name, "attention_fwd att %s", tag);
  check_close(name, att, attd, na, 1e-5);
  CK(k->attention_bwd(k, dqkv, scr, dout, qkv, att, B, T, NH, HS));
  gqa_ref_bwd(&c, attd, rq, rq + C, rq + 2 * C);
  snprintf(name, sizeof name, "attention_bwd dqkv %s", tag);
  check_close(name, dqkv, rq, nq, 2e-5);
  if (fd) {
    fd_grad(gqa_loss, &c, qd, nq, g);
    snprintf(name, sizeof name, "attention_bwd finite differences %s", tag);
    check_close(name, dqkv, g, nq, 1e-4);
  }
  free(qkv), free(out), free(att), free(dout), free(dqkv), free(scr), free(qd), free(outd);
  free(attd), free(R), free(rq), free(g);
}

/* Peaked attention (large scores): probabilities and their gradients that
 * would be subnormal are flushed to 0 (subnormal operands slow every later
 * product ~30x), and results still match the float64 reference. */
static int is_subnormal(float x) { return x != 0.0f && fabsf(x) < 1.17549435e-38f; }

static void test_attention_tiny(td_kernels *k) {
  const int64_t B = 1, T = 67, NH = 2, HS = 8, C = NH * HS;
  int64_t nq = B * T * 3 * C, no = B * T * C, na = B * NH * T * T;
  float *qkv = NEWF(nq), *out = NEWF(no), *att = NEWF(na), *dout = NEWF(no);
  float *dqkv = NEWF(nq), *scr = NEWF(na);
  double *qd = NEWD(nq), *outd = NEWD(no), *attd = NEWD(na), *R = NEWD(no), *rq = NEWD(nq);
  fill(qkv, qd, nq, 12.0); /* scores up to ~400: exp(s − max) underflows */
  fill(dout, R, no, 1.0);
  gqa_ctx c = att_ctx(B, T, NH, HS, qd, R);
  gqa_ref(&c, outd, attd);
  int64_t tiny_ref = 0, sub = 0, bad = 0;
  for (int64_t i = 0; i < na; i++) tiny_ref += attd[i] > 0.0 && attd[i] < 1.17549435e-38;
  CK(k->attention_fwd(k, out, att, qkv, B, T, NH, HS));
  for (int64_t i = 0; i < na; i++) {
    sub += is_subnormal(att[i]);
    bad += attd[i] < 1.17549435e-38 && att[i] != 0.0f;
  }
  report(tiny_ref > 0 && sub == 0 && bad == 0,
         "attention_fwd: probabilities below FLT_MIN are 0 (no subnormals)", (double)sub, 0);
  /* scores of ~400 carry float rounding of ~2e-5 (absolute), so exp does too */
  check_close("attention_fwd out, peaked scores", out, outd, no, 2e-4);
  CK(k->attention_bwd(k, dqkv, scr, dout, qkv, att, B, T, NH, HS));
  gqa_ref_bwd(&c, attd, rq, rq + C, rq + 2 * C);
  check_close("attention_bwd dqkv, peaked scores", dqkv, rq, nq, 2e-4);
  free(qkv), free(out), free(att), free(dout), free(dqkv), free(scr), free(qd), free(outd);
  free(attd), free(R), free(rq);
}

/* ---- grouped-query attention ----------------------------------------------------------- */

/* The entries of (rows × width) inside rows of stride ld, as a dense copy. */
static void heads_f(float *dst, const float *src, int64_t rows, int64_t width, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * width, src + r * ld, (size_t)width * sizeof(float));
}
static void heads_d(double *dst, const double *src, int64_t rows, int64_t width, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * width, src + r * ld, (size_t)width * sizeof(double));
}
/* 1 if every entry past `width` in rows of stride ld is still 7. */
static int pad_kept(const float *x, int64_t rows, int64_t width, int64_t ld) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = width; j < ld; j++)
      if (x[r * ld + j] != 7.0f) return 0;
  return 1;
}

static void test_gqa(td_kernels *k, int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                     int64_t padq, int64_t padkv, int fd) {
  int64_t C = NH * HS, Ckv = KV * HS, ldq = C + padq, ldkv = Ckv + padkv, BT = B * T;
  int64_t nq = BT * ldq, nkv = BT * ldkv, no = BT * C, na = B * NH * T * T;
  float *q = NEWF(nq), *kk = NEWF(nkv), *v = NEWF(nkv), *out = NEWF(no), *att = NEWF(na);
  float *dout = NEWF(no), *dq = NEWF(nq), *dk = NEWF(nkv), *dv = NEWF(nkv), *scr = NEWF(na);
  float *hq = NEWF(BT * C), *hkv = NEWF(BT * Ckv);
  double *qd = NEWD(nq), *kd = NEWD(nkv), *vd = NEWD(nkv), *outd = NEWD(no), *attd = NEWD(na);
  double *R = NEWD(no), *rq = NEWD(nq), *rk = NEWD(nkv), *rv = NEWD(nkv);
  double *gq = NEWD(nq), *gk = NEWD(nkv), *gv = NEWD(nkv);
  double *dq_h = NEWD(BT * C), *dkv_h = NEWD(BT * Ckv);
  char name[112], tag[80];
  snprintf(tag, sizeof tag, "B=%lld T=%lld NH=%lld KV=%lld HS=%lld ldq=%lld ldkv=%lld",
           (long long)B, (long long)T, (long long)NH, (long long)KV, (long long)HS,
           (long long)ldq, (long long)ldkv);
  fill(q, qd, nq, 1.5);
  fill(kk, kd, nkv, 1.5);
  fill(v, vd, nkv, 1.5);
  fill(dout, R, no, 1.0);
  for (int64_t i = 0; i < na; i++) att[i] = 7.0f, scr[i] = 7.0f; /* overwritten; never read */
  for (int64_t i = 0; i < nq; i++) dq[i] = 7.0f; /* "=": heads overwritten, padding kept */
  for (int64_t i = 0; i < nkv; i++) dk[i] = dv[i] = 7.0f;
  gqa_ctx c = {B, T, NH, KV, HS, ldq, ldkv, qd, kd, vd, R};
  gqa_ref(&c, outd, attd);
  CK(k->gqa_fwd(k, out, att, q, kk, v, ldq, ldkv, B, T, NH, KV, HS, NULL));
  snprintf(name, sizeof name, "gqa_fwd out %s", tag);
  check_close(name, out, outd, no, 1e-5);
  snprintf(name, sizeof name, "gqa_fwd att %s", tag);
  check_close(name, att, attd, na, 1e-5);
  CK(k->gqa_bwd(k, dq, dk, dv, scr, dout, q, kk, v, att, ldq, ldkv, B, T, NH, KV, HS, NULL));
  gqa_ref_bwd(&c, attd, rq, rk, rv);
  heads_f(hq, dq, BT, C, ldq);
  heads_d(dq_h, rq, BT, C, ldq);
  snprintf(name, sizeof name, "gqa_bwd dq %s", tag);
  check_close(name, hq, dq_h, BT * C, 2e-5);
  heads_f(hkv, dk, BT, Ckv, ldkv);
  heads_d(dkv_h, rk, BT, Ckv, ldkv);
  snprintf(name, sizeof name, "gqa_bwd dk %s", tag);
  check_close(name, hkv, dkv_h, BT * Ckv, 2e-5);
  heads_f(hkv, dv, BT, Ckv, ldkv);
  heads_d(dkv_h, rv, BT, Ckv, ldkv);
  snprintf(name, sizeof name, "gqa_bwd dv %s", tag);
  check_close(name, hkv, dkv_h, BT * Ckv, 2e-5);
  snprintf(name, sizeof name, "gqa_bwd leaves the columns past the heads %s", tag);
  report(pad_kept(dq, BT, C, ldq) && pad_kept(dk, BT, Ckv, ldkv) && pad_kept(dv, BT, Ckv, ldkv),
         name, 0, 0);
  if (fd) {
    fd_grad(gqa_loss, &c, qd, nq, gq);
    fd_grad(gqa_loss, &c, kd, nkv, gk);
    fd_grad(gqa_loss, &c, vd, nkv, gv);
    heads_d(dq_h, gq, BT, C, ldq);
    snprintf(name, sizeof name, "gqa_bwd dq finite differences %s", tag);
    check_close(name, hq, dq_h, BT * C, 1e-4);
    heads_f(hkv, dk, BT, Ckv, ldkv);
    heads_d(dkv_h, gk, BT, Ckv, ldkv);
    snprintf(name, sizeof name, "gqa_bwd dk finite differences %s", tag);
    check_close(name, hkv, dkv_h, BT * Ckv, 1e-4);
    heads_f(hkv, dv, BT, Ckv, ldkv);
    heads_d(dkv_h, gv, BT, Ckv, ldkv);
    snprintf(name, sizeof name, "gqa_bwd dv finite differences %s", tag);
    check_close(name, hkv, dkv_h, BT * Ckv, 1e-4);
  }
  free(q), free(kk), free(v), free(out), free(att), free(dout), free(dq), free(dk), free(dv);
  free(scr), free(hq), free(hkv), free(qd), free(kd), free(vd), free(outd), free(attd), free(R);
  free(rq), free(rk), free(rv), free(gq), free(gk), free(gv), free(dq_h), free(dkv_h);
}

/* Bad group shapes and strides are refused with TD_ERR_USAGE. */
static void test_gqa_usage(td_kernels *k) {
  float buf[64] = {0}, att[16] = {0};
  int ok = k->gqa_fwd(k, buf, att, buf, buf, buf, 8, 4, 1, 2, 3, 2, 2, NULL) == TD_ERR_USAGE;
  td_error_clear(); /* 3 query heads, 2 key/value heads */
  ok &= k->gqa_fwd(k, buf, att, buf, buf, buf, 7, 4, 1, 2, 4, 2, 2, NULL) == TD_ERR_USAGE;
  td_error_clear(); /* ldq below NH·HS */
  ok &= k->gqa_fwd(k, buf, att, buf, buf, buf, 8, 4, 1, 2, 4, 0, 2, NULL) == TD_ERR_USAGE;
  td_error_clear(); /* KV = 0 */
  report(ok, "gqa refuses NH % KV != 0, KV = 0, ld below the width", 0, 0);
}

/* xent_bwd on logits spread over ~200: softmax terms below FLT_MIN are 0. */
static void test_xent_tiny(td_kernels *k) {
  const int64_t N = 5, V = 70;
  float *lg = NEWF(N * V), *dl = NEWF(N * V), *mx = NEWF(N), *se = NEWF(N), *tl = NEWF(N);
  int32_t tgt[5] = {0, 3, 69, 10, 1};
  for (int64_t i = 0; i < N * V; i++) lg[i] = -3.0f * (float)(i % V) + (float)(i / V);
  CK(k->xent_rowmax(k, mx, lg, N, V, V));
  CK(k->xent_sumexp(k, se, tl, lg, mx, tgt, 0, N, V, V));
  CK(k->xent_bwd(k, dl, lg, mx, se, tgt, 0, 0.5f, N, V, V));
  int64_t sub = 0;
  double worst = 0.0;
  for (int64_t n = 0; n < N; n++) {
    double m = mx[n], s = 0.0;
    for (int64_t j = 0; j < V; j++) s += exp((double)lg[n * V + j] - m);
    for (int64_t j = 0; j < V; j++) {
      double r = 0.5 * (exp((double)lg[n * V + j] - m) / s - (j == tgt[n]));
      double e = fabs((double)dl[n * V + j] - r);
      worst = e > worst ? e : worst;
      sub += is_subnormal(dl[n * V + j]);
    }
  }
  report(sub == 0 && worst <= 1e-6, "xent_bwd: terms below FLT_MIN are 0 (no subnormals)",
         worst, 1e-6);
  free(lg), free(dl), free(mx), free(se), free(tl);
}

/* ---- gelu, pointwise --------------------------------------------------------------------- */

static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static void test_gelu(td_kernels *k, int64_t n) {
  float *x = NEWF(n), *out = NEWF(n), *dout = NEWF(n), *dx = NEWF(n);
  double *xd = NEWD(n), *od = NEWD(n), *R = NEWD(n), *g = NEWD(n), *rd = NEWD(n);
  char name[64];
  fill(x, xd, n, 6.0); /* covers the tails (tanh saturates) */
  fill(dout, R, n, 1.0);
  for (int64_t i = 0; i < n; i++) od[i] = gelu_d(xd[i]);
  CK(k->gelu_fwd(k, out, TD_DTYPE_F32, x, n));
  snprintf(name, sizeof name, "gelu_fwd n=%lld", (long long)n);
  check_close(name, out, od, n, 1e-6);
  for (int64_t i = 0; i < n; i++) {
    double u = sqrt(2.0 / M_PI) * (xd[i] + 0.044715 * xd[i] * xd[i] * xd[i]);
    double th = tanh(u);
    rd[i] = R[i] * (0.5 * (1 + th) + 0.5 * xd[i] * (1 - th * th) * sqrt(2.0 / M_PI) *
                                          (1 + 3 * 0.044715 * xd[i] * xd[i]));
  }
  CK(k->gelu_bwd(k, dx, x, dout, n));
  snprintf(name, sizeof name, "gelu_bwd n=%lld", (long long)n);
  check_close(name, dx, rd, n, 1e-6);
  /* L = Σ gelu(x_i)·R_i is separable: central differences element by element. */
  for (int64_t i = 0; i < n; i++)
    g[i] = R[i] * (gelu_d(xd[i] + 1e-5) - gelu_d(xd[i] - 1e-5)) / 2e-5;
  snprintf(name, sizeof name, "gelu_bwd finite differences n=%lld", (long long)n);
  check_close(name, dx, g, n, 1e-4);
  free(x), free(out), free(dout), free(dx), free(xd), free(od), free(R), free(g), free(rd);
}

/* ---- RoPE, SwiGLU ------------------------------------------------------------------------ */

/* x (B·T rows of stride ld) rotated in float64 by sgn·a, a = t·theta^(−2i/HS),
 * in place; the columns past H·HS are left as they are. */
static void rope_ref(double *x, int64_t B, int64_t T, int64_t H, int64_t HS, int64_t ld,
                     double theta, double sgn) {
  int64_t half = HS / 2;
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t h = 0; h < H; h++) {
      double *p = x + r * ld + h * HS;
      for (int64_t i = 0; i < half; i++) {
        double a = sgn * (double)(r % T) * pow(theta, -2.0 * (double)i / (double)HS);
        double u = p[i], v = p[i + half];
        p[i] = u * cos(a) - v * sin(a);
        p[i + half] = v * cos(a) + u * sin(a);
      }
    }
}

static void test_rope(td_kernels *k, int64_t B, int64_t T, int64_t H, int64_t HS, int64_t ld,
                      float theta) {
  int64_t n = B * T * ld;
  float *x = NEWF(n), *y = NEWF(n);
  double *xd = NEWD(n), *r = NEWD(n), *x0 = NEWD(n);
  char name[112], tag[80];
  snprintf(tag, sizeof tag, "B=%lld T=%lld H=%lld HS=%lld ld=%lld theta=%g", (long long)B,
           (long long)T, (long long)H, (long long)HS, (long long)ld, (double)theta);
  fill(x, xd, n, 1.0);
  for (int64_t i = 0; i < n; i++)
    if (i % ld >= H * HS) x[i] = 7.0f, xd[i] = 7.0; /* past the heads: untouched */
  memcpy(x0, xd, (size_t)n * sizeof(double));
  memcpy(y, x, (size_t)n * sizeof(float));
  memcpy(r, xd, (size_t)n * sizeof(double));
  rope_ref(r, B, T, H, HS, ld, theta, 1.0);
  CK(k->rope(k, y, B, T, H, HS, ld, theta, 0, NULL));
  snprintf(name, sizeof name, "rope %s", tag);
  check_close(name, y, r, n, 1e-6);
  int pad_ok = 1;
  for (int64_t i = 0; i < n; i++) pad_ok &= i % ld < H * HS || y[i] == 7.0f;
  snprintf(name, sizeof name, "rope leaves the columns past H*HS %s", tag);
  report(pad_ok, name, 0, 0);
  CK(k->rope(k, y, B, T, H, HS, ld, theta, 1, NULL));
  snprintf(name, sizeof name, "rope inverse(forward) = identity %s", tag);
  check_close(name, y, x0, n, 1e-6);
  memcpy(y, x, (size_t)n * sizeof(float));
  memcpy(r, xd, (size_t)n * sizeof(double));
  rope_ref(r, B, T, H, HS, ld, theta, -1.0);
  CK(k->rope(k, y, B, T, H, HS, ld, theta, 1, NULL));
  snprintf(name, sizeof name, "rope inverse %s", tag);
  check_close(name, y, r, n, 1e-6);
  free(x), free(y), free(xd), free(r), free(x0);
}

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

static void test_swiglu(td_kernels *k, int64_t n, double amp) {
  float *g = NEWF(n), *u = NEWF(n), *out = NEWF(n), *dout = NEWF(n), *dg = NEWF(n), *du = NEWF(n);
  double *gd = NEWD(n), *ud = NEWD(n), *od = NEWD(n), *R = NEWD(n);
  double *rg = NEWD(n), *ru = NEWD(n), *fg = NEWD(n);
  char name[96];
  fill(g, gd, n, amp);
  fill(u, ud, n, 2.0);
  fill(dout, R, n, 1.0);
  static const float ext[] = {30.0f, -30.0f, 100.0f, -100.0f, 1e4f, -1e4f, 0.0f, -0.0f};
  for (int64_t i = 0; i < n && i < (int64_t)(sizeof ext / sizeof ext[0]); i++)
    g[i] = ext[i], gd[i] = ext[i]; /* the sigmoid must not overflow */
  for (int64_t i = 0; i < n; i++) {
    double s = 1.0 / (1.0 + exp(-gd[i]));
    od[i] = gd[i] * s * ud[i];
    rg[i] = R[i] * ud[i] * s * (1.0 + gd[i] * (1.0 - s));
    ru[i] = R[i] * gd[i] * s;
  }
  CK(k->swiglu_fwd(k, out, TD_DTYPE_F32, g, u, n));
  snprintf(name, sizeof name, "swiglu_fwd n=%lld |g|<=%g", (long long)n, amp);
  check_close(name, out, od, n, 1e-6);
  CK(k->swiglu_bwd(k, dg, du, dout, g, u, n));
  snprintf(name, sizeof name, "swiglu_bwd dg n=%lld |g|<=%g", (long long)n, amp);
  check_close(name, dg, rg, n, 1e-6);
  snprintf(name, sizeof name, "swiglu_bwd du n=%lld |g|<=%g", (long long)n, amp);
  check_close(name, du, ru, n, 1e-6);
  /* L = Σ silu(g_i)·u_i·R_i is separable: central differences element by element. */
  for (int64_t i = 0; i < n; i++)
    fg[i] = R[i] * ud[i] * (silu_d(gd[i] + 1e-5) - silu_d(gd[i] - 1e-5)) / 2e-5;
  snprintf(name, sizeof name, "swiglu_bwd dg finite differences n=%lld |g|<=%g", (long long)n,
           amp);
  check_close(name, dg, fg, n, 1e-4);
  /* in place: dg over g, du over u (swiglu.c allows outputs over the inputs) */
  CK(k->swiglu_bwd(k, g, u, dout, g, u, n));
  snprintf(name, sizeof name, "swiglu_bwd in place dg n=%lld", (long long)n);
  check_close(name, g, rg, n, 1e-6);
  snprintf(name, sizeof name, "swiglu_bwd in place du n=%lld", (long long)n);
  check_close(name, u, ru, n, 1e-6);
  free(g), free(u), free(out), free(dout), free(dg), free(du), free(gd), free(ud), free(od);
  free(R), free(rg), free(ru), free(fg);
}

static void test_pointwise(td_kernels *k, int64_t n) {
  float *a = NEWF(n), *b = NEWF(n), *o = NEWF(n);
  double *ad = NEWD(n), *bd = NEWD(n), *r = NEWD(n);
  char name[64];
  fill(a, ad, n, 1.0);
  fill(b, bd, n, 1.0);
  for (int64_t i = 0; i < n; i++) r[i] = ad[i] + bd[i];
  CK(k->add(k, o, a, b, n));
  snprintf(name, sizeof name, "add n=%lld", (long long)n);
  check_close(name, o, r, n, 1e-7);
  CK(k->add(k, a, a, b, n)); /* out aliases a */
  snprintf(name, sizeof name, "add aliased n=%lld", (long long)n);
  check_close(name, a, r, n, 1e-7);
  for (int64_t i = 0; i < n; i++) r[i] = (double)b[i] * (double)-0.37f;
  CK(k->scale(k, b, -0.37f, n));
  snprintf(name, sizeof name, "scale n=%lld", (long long)n);
  check_close(name, b, r, n, 1e-7);
  double s = 0.0, got = -1.0;
  for (int64_t i = 0; i < n; i++) s += (double)b[i] * (double)b[i];
  CK(k->sumsq(k, b, n, &got));
  snprintf(name, sizeof name, "sumsq n=%lld", (long long)n);
  report(fabs(got - s) <= 1e-12 * s, name, fabs(got - s) / (s > 0 ? s : 1), 1e-12);
  free(a), free(b), free(o), free(ad), free(bd), free(r);
}

/* ---- cross-entropy on vocabulary shards --------------------------------------------------- */

#define XS 3 /* shards: [0,12) real, [12,20) real + 4 padding, [20,20) padding only */
static const int64_t xs_v0[XS] = {0, 12, 20}, xs_Vs[XS] = {12, 12, 4}, xs_Vv[XS] = {12, 8, 0};

typedef struct {
  int64_t N, V;
  double *l; /* (N, V) real logits */
  const int32_t *tgt;
  double scale;
} xent_ctx;
static double xent_loss(void *p) {
  xent_ctx *c = p;
  double L = 0.0;
  for (int64_t n = 0; n < c->N; n++) {
    const double *l = c->l + n * c->V;
    double mx = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < c->V; j++) mx = l[j] > mx ? l[j] : mx;
    for (int64_t j = 0; j < c->V; j++) s += exp(l[j] - mx);
    L += c->scale * (log(s) + mx - l[c->tgt[n]]);
  }
  return L;
}

static void test_xent(td_kernels *k, int64_t N) {
  const int64_t V = 20;
  const float scale = 1.0f / (float)N;
  float *lg[XS], *dl[XS], *mx[XS], *se[XS], *tl[XS];
  int32_t *tgt = xmalloc((size_t)N * sizeof(int32_t));
  double *ld = NEWD(N * V), *g = NEWD(N * V), *rmax = NEWD(N), *rse = NEWD(N), *rloss = NEWD(N);
  float *gmax = NEWF(N), *gse = NEWF(N), *gtl = NEWF(N), *loss = NEWF(N), *dfull = NEWF(N * V);
  double *dref = NEWD(N * V);
  char name[96];
  fill(NULL, ld, N * V, 8.0);
  for (int64_t n = 0; n < N; n++) tgt[n] = (int32_t)((n * 7 + 3) % V);
  for (int s = 0; s < XS; s++) {
    lg[s] = NEWF(N * xs_Vs[s]);
    dl[s] = NEWF(N * xs_Vs[s]);
    mx[s] = NEWF(N);
    se[s] = NEWF(N);
    tl[s] = NEWF(N);
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < xs_Vs[s]; j++)
        lg[s][n * xs_Vs[s] + j] = j < xs_Vv[s] ? (float)ld[n * V + xs_v0[s] + j]
                                               : 1e30f; /* padding must never count */
  }
  for (int64_t i = 0; i < N * V; i++) ld[i] = (double)(float)ld[i];
  /* float64 reference */
  for (int64_t n = 0; n < N; n++) {
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < V; j++) m = ld[n * V + j] > m ? ld[n * V + j] : m;
    for (int64_t j = 0; j < V; j++) s += exp(ld[n * V + j] - m);
    rmax[n] = m, rse[n] = s, rloss[n] = log(s) + m - ld[n * V + tgt[n]];
    for (int64_t j = 0; j < V; j++)
      dref[n * V + j] = scale * (exp(ld[n * V + j] - m) / s - (j == tgt[n]));
  }
  /* the three calls per shard, with the caller's all-reduces in between */
  for (int64_t n = 0; n < N; n++) gmax[n] = -INFINITY, gse[n] = 0.0f, gtl[n] = 0.0f;
  for (int s = 0; s < XS; s++) {
    CK(k->xent_rowmax(k, mx[s], lg[s], N, xs_Vs[s], xs_Vv[s]));
    for (int64_t n = 0; n < N; n++) gmax[n] = mx[s][n] > gmax[n] ? mx[s][n] : gmax[n];
  }
  int empty_ok = 1;
  for (int64_t n = 0; n < N; n++) empty_ok &= mx[2][n] == -INFINITY;
  report(empty_ok, "xent_rowmax is -inf on a shard without real columns", 0, 0);
  for (int s = 0; s < XS; s++) {
    CK(k->xent_sumexp(k, se[s], tl[s], lg[s], gmax, tgt, xs_v0[s], N, xs_Vs[s], xs_Vv[s]));
    for (int64_t n = 0; n < N; n++) gse[n] += se[s][n], gtl[n] += tl[s][n];
  }
  for (int64_t n = 0; n < N; n++) loss[n] = logf(gse[n]) + gmax[n] - gtl[n];
  snprintf(name, sizeof name, "xent rowmax (3 shards, padding) N=%lld", (long long)N);
  check_close(name, gmax, rmax, N, 1e-7);
  snprintf(name, sizeof name, "xent sumexp (3 shards, padding) N=%lld", (long long)N);
  check_close(name, gse, rse, N, 1e-6);
  snprintf(name, sizeof name, "xent loss (3 shards, padding) N=%lld", (long long)N);
  check_close(name, loss, rloss, N, 1e-6);
  for (int s = 0; s < XS; s++) {
    memcpy(dl[s], lg[s], (size_t)(N * xs_Vs[s]) * sizeof(float));
    /* in place: dlogits aliases logits */
    CK(k->xent_bwd(k, dl[s], dl[s], gmax, gse, tgt, xs_v0[s], scale, N, xs_Vs[s], xs_Vv[s]));
    for (int64_t n = 0; n < N; n++)
      for (int64_t j = 0; j < xs_Vs[s]; j++) {
        if (j < xs_Vv[s]) dfull[n * V + xs_v0[s] + j] = dl[s][n * xs_Vs[s] + j];
        else if (dl[s][n * xs_Vs[s] + j] != 0.0f) empty_ok = 0;
      }
  }
  report(empty_ok, "xent_bwd leaves padding columns at 0", 0, 0);
  snprintf(name, sizeof name, "xent_bwd (3 shards, in place) N=%lld", (long long)N);
  check_close(name, dfull, dref, N * V, 1e-6);
  xent_ctx c = {N, V, ld, tgt, scale};
  fd_grad(xent_loss, &c, ld, N * V, g);
  snprintf(name, sizeof name, "xent_bwd finite differences N=%lld", (long long)N);
  check_close(name, dfull, g, N * V, 1e-5);

  /* A row with no real column anywhere: rowmax −inf, sumexp 0, gradient 0. */
  {
    float l4[4] = {1e30f, 1e30f, 1e30f, 1e30f}, m1 = 0, s1 = -1, t1 = -1, d4[4];
    int32_t t0 = 2;
    CK(k->xent_rowmax(k, &m1, l4, 1, 4, 0));
    CK(k->xent_sumexp(k, &s1, &t1, l4, &m1, &t0, 0, 1, 4, 0));
    CK(k->xent_bwd(k, d4, l4, &m1, &s1, &t0, 0, 1.0f, 1, 4, 0));
    int ok = m1 == -INFINITY && s1 == 0.0f && t1 == 0.0f;
    for (int j = 0; j < 4; j++) ok &= d4[j] == 0.0f;
    report(ok, "xent row without real columns: -inf, 0, 0, no NaN", 0, 0);
    /* real columns but the all-reduced max is −inf: no NaN either */
    float l2[2] = {0.5f, -0.25f}, minf = -INFINITY, zero = 0.0f, d2[2];
    CK(k->xent_sumexp(k, &s1, &t1, l2, &minf, &t0, 0, 1, 2, 2));
    CK(k->xent_bwd(k, d2, l2, &minf, &zero, &t0, 0, 1.0f, 1, 2, 2));
    ok = s1 == 0.0f && d2[0] == 0.0f && d2[1] == 0.0f;
    report(ok, "xent with rowmax -inf: sumexp 0, gradient 0, no NaN", 0, 0);
  }
  for (int s = 0; s < XS; s++) free(lg[s]), free(dl[s]), free(mx[s]), free(se[s]), free(tl[s]);
  free(tgt), free(ld), free(g), free(rmax), free(rse), free(rloss), free(gmax), free(gse);
  free(gtl), free(loss), free(dfull), free(dref);
}

/* ---- AdamW ----------------------------------------------------------------------------------- */

static void test_adamw(td_kernels *k, int64_t n) {
  float *p = NEWF(n), *g = NEWF(n), *m = NEWF(n), *v = NEWF(n);
  double *pd = NEWD(n), *gd = NEWD(n), *md = NEWD(n), *vd = NEWD(n);
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  char name[64];
  fill(p, pd, n, 1.0);
  for (int64_t t = 1; t <= 5; t++) {
    fill(g, gd, n, t == 3 ? 1e-6 : 1.0);
    float gs = t == 4 ? 0.375f : 1.0f; /* a clipping coefficient on step 4 */
    CK(k->adamw(k, p, g, m, v, n, gs, lr, b1, b2, eps, wd, t));
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    for (int64_t i = 0; i < n; i++) {
      gd[i] *= gs;
      pd[i] *= 1.0 - (double)lr * wd;
      md[i] = b1 * md[i] + (1.0 - b1) * gd[i];
      vd[i] = b2 * vd[i] + (1.0 - b2) * gd[i] * gd[i];
      pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
    }
  }
  snprintf(name, sizeof name, "adamw p after 5 steps n=%lld", (long long)n);
  check_close(name, p, pd, n, 1e-6);
  snprintf(name, sizeof name, "adamw m after 5 steps n=%lld", (long long)n);
  check_close(name, m, md, n, 1e-6);
  /* the fused clip scale is the separate scaling pass bit for bit, with p, m,
   * v equally aligned and m one float off */
  for (int shift = 0; shift < 2; shift++) {
    float *buf[2][3], *x[2][3], *gg = NEWF(n), *gsc = NEWF(n);
    for (int j = 0; j < 2; j++)
      for (int a = 0; a < 3; a++) {
        buf[j][a] = NEWF(n + 1);
        x[j][a] = buf[j][a] + (a == 1 ? shift : 0);
      }
    for (int64_t i = 0; i < n; i++) {
      gg[i] = gsc[i] = (float)sin(0.37 * (double)i) * 2.0f;
      for (int j = 0; j < 2; j++) {
        x[j][0][i] = (float)cos(0.11 * (double)i);
        x[j][1][i] = 0.01f * gg[i];
        x[j][2][i] = 0.001f * gg[i] * gg[i];
      }
    }
    CK(k->scale(k, gsc, 0.6180339f, n));
    CK(k->adamw(k, x[0][0], gsc, x[0][1], x[0][2], n, 1.0f, lr, b1, b2, eps, wd, 2));
    CK(k->adamw(k, x[1][0], gg, x[1][1], x[1][2], n, 0.6180339f, lr, b1, b2, eps, wd, 2));
    int same = 1;
    for (int a = 0; a < 3; a++) same &= memcmp(x[0][a], x[1][a], (size_t)n * sizeof(float)) == 0;
    snprintf(name, sizeof name, "adamw gscale = scale pass, bitwise (n=%lld, %s)", (long long)n,
             shift ? "m misaligned" : "aligned");
    report(same, name, 0.0, 0.0);
    free(gg), free(gsc);
    for (int j = 0; j < 2; j++)
      for (int a = 0; a < 3; a++) free(buf[j][a]);
  }
  snprintf(name, sizeof name, "adamw v after 5 steps n=%lld", (long long)n);
  check_close(name, v, vd, n, 1e-6);
  free(p), free(g), free(m), free(v), free(pd), free(gd), free(md), free(vd);
}

/* ---- positions (context parallelism) ------------------------------------------------------ */

/* The load-balanced layout of context parallelism: the Tk positions cut into
 * 2·cp chunks of c = Tk/(2·cp) rows, rank i holding chunks i and 2cp−1−i as
 * its T = 2c rows. */
static td_pos cp_pos(int64_t Tk, int64_t cp, int64_t i) {
  int64_t c = Tk / (2 * cp);
  return (td_pos){Tk, c, i * c, (2 * cp - 1 - i) * c, NULL};
}

/* dst (B, T, width) = the rows of src (B, Tk, width) at the positions of pos,
 * rows of stride ld in both. */
static void pos_rows(float *dst, const float *src, int64_t B, int64_t T, int64_t width,
                     int64_t ld, const td_pos *pos) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      memcpy(dst + (b * T + t) * ld, src + (b * pos->Tk + td_pos_at(pos, t)) * ld,
             (size_t)width * sizeof(float));
}
static void to_d(double *dst, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = src[i];
}

/* Attention of each of cp ranks on its rows (pos) against all Tk keys equals
 * the full attention (pos NULL) at those rows: out, att and dq rows; dk and dv
 * summed over the ranks equal the full ones; keys past a rank's last
 * position get exactly 0 in its dk, dv; the padding columns are kept. */
static void test_gqa_pos(td_kernels *k, int64_t B, int64_t Tk, int64_t NH, int64_t KV,
                         int64_t HS, int64_t cp, int64_t padq, int64_t padkv) {
  int64_t C = NH * HS, Ckv = KV * HS, ldq = C + padq, ldkv = Ckv + padkv, T = Tk / cp;
  int64_t nq = B * Tk * ldq, nkv = B * Tk * ldkv, no = B * Tk * C, na = B * NH * Tk * Tk;
  float *q = NEWF(nq), *kk = NEWF(nkv), *v = NEWF(nkv), *dout = NEWF(no);
  float *out = NEWF(no), *att = NEWF(na), *scr = NEWF(na);
  float *dq = NEWF(nq), *dk = NEWF(nkv), *dv = NEWF(nkv);
  float *qr = NEWF(B * T * ldq), *doutr = NEWF(B * T * C), *outr = NEWF(B * T * C);
  float *attr = NEWF(B * NH * T * Tk), *scrr = NEWF(B * NH * T * Tk);
  float *dqr = NEWF(B * T * ldq), *dkr = NEWF(nkv), *dvr = NEWF(nkv);
  float *want = NEWF(B * T * C), *wq = NEWF(B * T * ldq), *hkv = NEWF(B * Tk * Ckv);
  double *ref = NEWD(B * T * C), *dks = NEWD(B * Tk * Ckv), *dvs = NEWD(B * Tk * Ckv);
  double worst_out = 0, worst_att = 0, worst_dq = 0;
  int zero_ok = 1, pad_ok = 1;
  char name[128], tag[96];
  snprintf(tag, sizeof tag, "B=%lld Tk=%lld NH=%lld KV=%lld HS=%lld cp=%lld", (long long)B,
           (long long)Tk, (long long)NH, (long long)KV, (long long)HS, (long long)cp);
  fill(q, NULL, nq, 1.5);
  fill(kk, NULL, nkv, 1.5);
  fill(v, NULL, nkv, 1.5);
  fill(dout, NULL, no, 1.0);
  CK(k->gqa_fwd(k, out, att, q, kk, v, ldq, ldkv, B, Tk, NH, KV, HS, NULL));
  CK(k->gqa_bwd(k, dq, dk, dv, scr, dout, q, kk, v, att, ldq, ldkv, B, Tk, NH, KV, HS, NULL));
  for (int64_t i = 0; i < cp; i++) {
    td_pos pos = cp_pos(Tk, cp, i);
    int64_t last = td_pos_at(&pos, T - 1);
    pos_rows(qr, q, B, T, ldq, ldq, &pos);
    pos_rows(doutr, dout, B, T, C, C, &pos);
    for (int64_t j = 0; j < B * NH * T * Tk; j++) attr[j] = 7.0f, scrr[j] = 7.0f;
    for (int64_t j = 0; j < B * T * ldq; j++) dqr[j] = 7.0f; /* "=": heads overwritten */
    for (int64_t j = 0; j < nkv; j++) dkr[j] = dvr[j] = 7.0f;
    CK(k->gqa_fwd(k, outr, attr, qr, kk, v, ldq, ldkv, B, T, NH, KV, HS, &pos));
    CK(k->gqa_bwd(k, dqr, dkr, dvr, scrr, doutr, qr, kk, v, attr, ldq, ldkv, B, T, NH, KV, HS,
                  &pos));
    /* The full results at the rank's rows, compared as check_close does. */
    pos_rows(want, out, B, T, C, C, &pos);
    to_d(ref, want, B * T * C);
    for (int64_t j = 0; j < B * T * C; j++)
      worst_out = fmax(worst_out, fabs(outr[j] - ref[j]) / (1.0 + fabs(ref[j])));
    for (int64_t bh = 0; bh < B * NH; bh++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < Tk; j++) {
          double r = att[(bh * Tk + td_pos_at(&pos, t)) * Tk + j];
          worst_att = fmax(worst_att, fabs(attr[(bh * T + t) * Tk + j] - r) / (1.0 + fabs(r)));
        }
    pos_rows(wq, dq, B, T, C, ldq, &pos);
    for (int64_t r = 0; r < B * T; r++)
      for (int64_t j = 0; j < C; j++) {
        double g = dqr[r * ldq + j], w = wq[r * ldq + j];
        worst_dq = fmax(worst_dq, fabs(g - w) / (1.0 + fabs(w)));
      }
    for (int64_t b = 0; b < B; b++)
      for (int64_t j = 0; j < Tk; j++)
        for (int64_t c = 0; c < Ckv; c++) {
          float dkj = dkr[(b * Tk + j) * ldkv + c], dvj = dvr[(b * Tk + j) * ldkv + c];
          dks[(b * Tk + j) * Ckv + c] += dkj;
          dvs[(b * Tk + j) * Ckv + c] += dvj;
          if (j > last) zero_ok &= dkj == 0.0f && dvj == 0.0f;
        }
    pad_ok &= pad_kept(dqr, B * T, C, ldq) && pad_kept(dkr, B * Tk, Ckv, ldkv) &&
              pad_kept(dvr, B * Tk, Ckv, ldkv);
  }
  snprintf(name, sizeof name, "gqa_fwd pos: out rows = full %s", tag);
  report(worst_out <= 1e-5, name, worst_out, 1e-5);
  snprintf(name, sizeof name, "gqa_fwd pos: att rows = full %s", tag);
  report(worst_att <= 1e-5, name, worst_att, 1e-5);
  snprintf(name, sizeof name, "gqa_bwd pos: dq rows = full %s", tag);
  report(worst_dq <= 1e-5, name, worst_dq, 1e-5);
  heads_f(hkv, dk, B * Tk, Ckv, ldkv);
  snprintf(name, sizeof name, "gqa_bwd pos: dk summed over ranks = full %s", tag);
  check_close(name, hkv, dks, B * Tk * Ckv, 1e-5);
  heads_f(hkv, dv, B * Tk, Ckv, ldkv);
  snprintf(name, sizeof name, "gqa_bwd pos: dv summed over ranks = full %s", tag);
  check_close(name, hkv, dvs, B * Tk * Ckv, 1e-5);
  snprintf(name, sizeof name, "gqa_bwd pos: unseen keys 0, padding kept %s", tag);
  report(zero_ok && pad_ok, name, 0, 0);
  free(q), free(kk), free(v), free(dout), free(out), free(att), free(scr), free(dq), free(dk);
  free(dv), free(qr), free(doutr), free(outr), free(attr), free(scrr), free(dqr), free(dkr);
  free(dvr), free(want), free(wq), free(hkv), free(ref), free(dks), free(dvs);
}

/* RoPE of a rank's rows (pos) equals RoPE of the whole sequence at those
 * rows, bit for bit (the same table entries, the same arithmetic), forward
 * and inverse. */
static void test_rope_pos(td_kernels *k, int64_t B, int64_t Tk, int64_t H, int64_t HS,
                          int64_t ld, int64_t cp) {
  int64_t T = Tk / cp;
  float *x = NEWF(B * Tk * ld), *y = NEWF(B * Tk * ld), *xr = NEWF(B * T * ld);
  float *want = NEWF(B * T * ld);
  double *d = NEWD(B * T * ld);
  char name[112];
  fill(x, NULL, B * Tk * ld, 1.0);
  for (int inv = 0; inv < 2; inv++) {
    memcpy(y, x, (size_t)(B * Tk * ld) * sizeof(float));
    CK(k->rope(k, y, B, Tk, H, HS, ld, 10000.0f, inv, NULL));
    for (int64_t i = 0; i < cp; i++) {
      td_pos pos = cp_pos(Tk, cp, i);
      pos_rows(xr, x, B, T, ld, ld, &pos);
      CK(k->rope(k, xr, B, T, H, HS, ld, 10000.0f, inv, &pos));
      pos_rows(want, y, B, T, ld, ld, &pos);
      to_d(d, want, B * T * ld);
      snprintf(name, sizeof name, "rope%s pos = full at the positions, exact: Tk=%lld cp=%lld "
               "rank %lld", inv ? " inverse" : "", (long long)Tk, (long long)cp, (long long)i);
      check_close(name, xr, d, B * T * ld, 0.0);
    }
  }
  free(x), free(y), free(xr), free(want), free(d);
}

/* The embedding of a rank's rows (pos) equals the full one at those rows
 * (exact: the same sums); dwpe of each rank fills the rows of its positions
 * with the full dwpe's (exact: one rank per position) and leaves the others;
 * dwte summed over the ranks equals the full dwte. */
static void test_embed_pos(td_kernels *k, int64_t B, int64_t Tk, int64_t C, int64_t cp) {
  int64_t T = Tk / cp, V = 23, N = B * Tk;
  int32_t *tok = xmalloc((size_t)N * sizeof(int32_t));
  int32_t *tokr = xmalloc((size_t)N * sizeof(int32_t));
  float *wte = NEWF(V * C), *wpe = NEWF(Tk * C), *out = NEWF(N * C), *outr = NEWF(N * C);
  float *dout = NEWF(N * C), *doutr = NEWF(N * C), *dwte = NEWF(V * C), *dwpe = NEWF(Tk * C);
  float *dwter = NEWF(V * C), *dwper = NEWF(Tk * C), *want = NEWF(N * C);
  double *dwtes = NEWD(V * C), *dwpes = NEWD(Tk * C);
  double worst = 0.0;
  int kept = 1;
  char name[112];
  for (int64_t n = 0; n < N; n++) tok[n] = (int32_t)(n * 7 % V);
  fill(wte, NULL, V * C, 1.0);
  fill(wpe, NULL, Tk * C, 1.0);
  fill(dout, NULL, N * C, 1.0);
  CK(k->embed_fwd(k, out, tok, wte, 0, V, wpe, TD_DTYPE_F32, B, Tk, C, NULL));
  CK(k->embed_bwd(k, dwte, dwpe, dout, tok, 0, V, B, Tk, C, NULL));
  for (int64_t i = 0; i < cp; i++) {
    td_pos pos = cp_pos(Tk, cp, i);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) tokr[b * T + t] = tok[b * Tk + td_pos_at(&pos, t)];
    pos_rows(doutr, dout, B, T, C, C, &pos);
    CK(k->embed_fwd(k, outr, tokr, wte, 0, V, wpe, TD_DTYPE_F32, B, T, C, &pos));
    pos_rows(want, out, B, T, C, C, &pos);
    for (int64_t j = 0; j < B * T * C; j++) worst = fmax(worst, fabs(outr[j] - want[j]));
    memset(dwter, 0, (size_t)(V * C) * sizeof(float));
    for (int64_t j = 0; j < Tk * C; j++) dwper[j] = 7.0f; /* rows not reached: kept */
    for (int64_t t = 0; t < T; t++)
      memset(dwper + td_pos_at(&pos, t) * C, 0, (size_t)C * sizeof(float));
    CK(k->embed_bwd(k, dwter, dwper, doutr, tokr, 0, V, B, T, C, &pos));
    for (int64_t j = 0; j < V * C; j++) dwtes[j] += dwter[j];
    for (int64_t p = 0, t = 0; p < Tk; p++) {
      int reached = t < T && td_pos_at(&pos, t) == p;
      for (int64_t c = 0; c < C; c++) {
        if (reached) dwpes[p * C + c] += dwper[p * C + c];
        else kept &= dwper[p * C + c] == 7.0f;
      }
      t += reached;
    }
  }
  snprintf(name, sizeof name, "embed_fwd pos = full at the positions, exact: Tk=%lld cp=%lld",
           (long long)Tk, (long long)cp);
  report(worst == 0.0, name, worst, 0);
  snprintf(name, sizeof name, "embed_bwd pos: dwpe of the ranks = full, exact, Tk=%lld cp=%lld",
           (long long)Tk, (long long)cp);
  check_close(name, dwpe, dwpes, Tk * C, 0.0);
  snprintf(name, sizeof name, "embed_bwd pos: dwpe rows of other ranks untouched Tk=%lld cp=%lld",
           (long long)Tk, (long long)cp);
  report(kept, name, 0, 0);
  snprintf(name, sizeof name, "embed_bwd pos: dwte summed over ranks = full Tk=%lld cp=%lld",
           (long long)Tk, (long long)cp);
  check_close(name, dwte, dwtes, V * C, 1e-5);
  free(tok), free(tokr), free(wte), free(wpe), free(out), free(outr), free(dout), free(doutr);
  free(dwte), free(dwpe), free(dwter), free(dwper), free(want), free(dwtes), free(dwpes);
}

/* td_kernels_pos_args takes NULL and a valid layout and refuses the broken
 * ones with TD_ERR_USAGE, as do the ops given them. */
static void test_pos_usage(td_kernels *k) {
  static const td_pos bad[] = {
      {16, 4, 4, 6, NULL},  /* p0 + half > p1: the runs overlap */
      {16, 9, 0, 9, NULL},  /* half > T */
      {16, 4, -1, 8, NULL}, /* p0 < 0 */
      {16, 4, 0, 13, NULL}, /* the second run ends past Tk */
  };
  const td_pos good = {16, 4, 4, 8, NULL};
  float buf[512] = {0}, att[512] = {0};
  int ok = td_kernels_pos_args("test", NULL, 8) == TD_OK;
  ok &= td_kernels_pos_args("test", &good, 8) == TD_OK;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ok &= td_kernels_pos_args("test", &bad[i], 8) == TD_ERR_USAGE;
    td_error_clear();
  }
  ok &= k->gqa_fwd(k, buf, att, buf, buf, buf, 4, 4, 1, 8, 2, 2, 2, &bad[0]) == TD_ERR_USAGE;
  td_error_clear();
  ok &= k->rope(k, buf, 1, 8, 1, 4, 4, 10000.0f, 0, &bad[0]) == TD_ERR_USAGE;
  td_error_clear();
  ok &= k->embed_fwd(k, buf, (const int32_t *)buf, buf, 0, 1, buf, TD_DTYPE_F32, 1, 8, 4,
                     &bad[0]) == TD_ERR_USAGE;
  td_error_clear();
  report(ok, "td_kernels_pos_args and the ops refuse overlapping, out-of-range positions", 0, 0);
}

/* copy2d copies the cols of each row and nothing past them; refuses a stride
 * below the width. */
static void test_copy2d(td_kernels *k, int64_t rows, int64_t cols, int64_t ldd, int64_t lds) {
  float *src = NEWF(rows * lds), *dst = NEWF(rows * ldd);
  int64_t bad = 0;
  char name[96];
  fill(src, NULL, rows * lds, 1.0);
  for (int64_t i = 0; i < rows * ldd; i++) dst[i] = 7.0f;
  CK(k->copy2d(k, dst, ldd, src, lds, rows, cols));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ldd; c++)
      bad += dst[r * ldd + c] != (c < cols ? src[r * lds + c] : 7.0f);
  snprintf(name, sizeof name, "copy2d rows=%lld cols=%lld ldd=%lld lds=%lld", (long long)rows,
           (long long)cols, (long long)ldd, (long long)lds);
  report(bad == 0, name, (double)bad, 0);
  int refused = k->copy2d(k, dst, cols - 1, src, lds, rows, cols) == TD_ERR_USAGE;
  td_error_clear();
  report(refused, "copy2d refuses a row stride below cols", 0, 0);
  free(src), free(dst);
}

/* ---- memory ops, registry ---------------------------------------------------------------------- */

static void test_memory(td_kernels *k) {
  float *d = NULL, h[37], back[37];
  int ok = 1;
  CK(k->alloc(k, (void **)&d, sizeof h, "test buffer"));
  for (int i = 0; i < 37; i++) ok &= d[i] == 0.0f, h[i] = (float)i + 0.5f;
  CK(k->to_device(k, d, h, sizeof h));
  CK(k->to_host(k, back, d, sizeof h));
  CK(k->sync(k));
  ok &= memcmp(h, back, sizeof h) == 0;
  CK(k->zero(k, d, sizeof h));
  for (int i = 0; i < 37; i++) ok &= d[i] == 0.0f;
  k->free(k, d);
  report(ok, "memory: alloc zeroed, to_device/to_host, zero", 0, 0);
}

static void test_registry(void) {
  td_kernels *k = NULL;
  td_status s = td_kernels_create("cpu", 0, &k);
  int ok = s == TD_OK && k && strcmp(k->name, "cpu") == 0;
  td_kernels_destroy(&k);
  ok &= k == NULL;
  td_kernels_destroy(&k); /* NULL is fine */
  s = td_kernels_create("tpu", 0, &k);
  ok &= s == TD_ERR_USAGE && k == NULL;
  td_error_clear();
#ifndef TD_HAVE_CUDA
  s = td_kernels_create("cuda", 0, &k);
  ok &= s == TD_ERR_UNSUPPORTED && strstr(td_error_message(), "without CUDA") != NULL;
#else
  /* Where a CUDA device is usable (a GPU, or the emulated device of
   * tests/cudaemu) the CUDA back-end is made; without one it declines: no
   * device (TD_ERR_CUDA), or its module cannot load (TD_ERR_UNSUPPORTED). */
  int gpus = td_kernels_gpu_count();
  s = td_kernels_create("cuda", 0, &k);
  printf("     cuda (%d devices): %s\n", gpus, s == TD_OK ? "created" : td_error_message());
  if (gpus > 0)
    ok &= s == TD_OK && k && strcmp(k->name, "cuda") == 0;
  else
    ok &= (s == TD_ERR_CUDA || s == TD_ERR_UNSUPPORTED) && k == NULL;
  td_kernels_destroy(&k);
#endif
  td_error_clear();
  report(ok, "registry: cpu, unknown device, cuda made or declined", 0, 0);
}

/* ---- benchmark (--bench) ------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(td_kernels *k) {
  double gf = 0.0;
  CK(td_cpu_gemm_rate(k, 1024, 1152, 384, 20, &gf));
  printf("bench gemm M=1024 N=1152 K=384 (fwd + 2 bwd): %.1f GFLOP/s [%s]\n", gf,
         k->matmul_name);
  CK(td_cpu_gemm_rate(k, 1024, 50304, 768, 2, &gf));
  printf("bench gemm M=1024 N=50304 K=768 (fwd + 2 bwd): %.1f GFLOP/s\n", gf);
  const int64_t B = 4, NH = 6, T = 256, HS = 64, C = NH * HS;
  float *qkv = NEWF(B * T * 3 * C), *out = NEWF(B * T * C), *att = NEWF(B * NH * T * T);
  float *dout = NEWF(B * T * C), *dqkv = NEWF(B * T * 3 * C), *scr = NEWF(B * NH * T * T);
  fill(qkv, NULL, B * T * 3 * C, 1.0);
  fill(dout, NULL, B * T * C, 1.0);
  CK(k->attention_fwd(k, out, att, qkv, B, T, NH, HS));
  CK(k->attention_bwd(k, dqkv, scr, dout, qkv, att, B, T, NH, HS));
  const int reps = 20;
  double t0 = now_s();
  for (int r = 0; r < reps; r++) CK(k->attention_fwd(k, out, att, qkv, B, T, NH, HS));
  double t1 = now_s();
  for (int r = 0; r < reps; r++)
    CK(k->attention_bwd(k, dqkv, scr, dout, qkv, att, B, T, NH, HS));
  double t2 = now_s();
  printf("bench attention B=4 NH=6 T=256 HS=64: fwd %.2f ms, bwd %.2f ms, total %.2f ms\n",
         (t1 - t0) / reps * 1e3, (t2 - t1) / reps * 1e3, (t2 - t0) / reps * 1e3);
  /* the same query heads in 3 groups of 2 (q, k, v read from qkv, ld 3C) */
  CK(k->gqa_fwd(k, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, 3, HS, NULL));
  CK(k->gqa_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, scr, dout, qkv, qkv + C, qkv + 2 * C, att,
                3 * C, 3 * C, B, T, NH, 3, HS, NULL));
  t0 = now_s();
  for (int r = 0; r < reps; r++)
    CK(k->gqa_fwd(k, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, 3, HS, NULL));
  t1 = now_s();
  for (int r = 0; r < reps; r++)
    CK(k->gqa_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, scr, dout, qkv, qkv + C, qkv + 2 * C, att,
                  3 * C, 3 * C, B, T, NH, 3, HS, NULL));
  t2 = now_s();
  printf("bench gqa B=4 NH=6 KV=3 T=256 HS=64: fwd %.2f ms, bwd %.2f ms, total %.2f ms\n",
         (t1 - t0) / reps * 1e3, (t2 - t1) / reps * 1e3, (t2 - t0) / reps * 1e3);
  const int64_t n = 1024 * 1536, nv = 256 * 50304;
  float *x = NEWF(nv), *y = NEWF(nv), *z = NEWF(nv), *w = NEWF(nv);
  fill(x, NULL, n, 3.0);
  t0 = now_s();
  for (int r = 0; r < reps; r++) CK(k->gelu_fwd(k, y, TD_DTYPE_F32, x, n));
  t1 = now_s();
  for (int r = 0; r < reps; r++) CK(k->gelu_bwd(k, y, x, z, n));
  t2 = now_s();
  printf("bench gelu n=%lld: fwd %.3f ms, bwd %.3f ms\n", (long long)n,
         (t1 - t0) / reps * 1e3, (t2 - t1) / reps * 1e3);
  fill(x, NULL, nv, 5.0);
  int32_t *tg = xmalloc(256 * sizeof(int32_t));
  t0 = now_s();
  for (int r = 0; r < 5; r++) {
    CK(k->xent_rowmax(k, y, x, 256, 50304, 50257));
    CK(k->xent_sumexp(k, z, w, x, y, tg, 0, 256, 50304, 50257));
    CK(k->xent_bwd(k, x, x, y, z, tg, 0, 1.0f, 256, 50304, 50257));
  }
  t1 = now_s();
  printf("bench xent N=256 V=50304: %.2f ms (3 calls)\n", (t1 - t0) / 5 * 1e3);
  const int64_t np = 124 * 1000 * 1000 / 8;
  float *p = NEWF(np), *g = NEWF(np), *m = NEWF(np), *v = NEWF(np);
  CK(k->adamw(k, p, g, m, v, np, 1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1));
  t0 = now_s();
  for (int r = 0; r < 5; r++)
    CK(k->adamw(k, p, g, m, v, np, 0.5f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, r + 2));
  t1 = now_s();
  printf("bench adamw n=%lld: %.2f ms (%.2f ns/param)\n", (long long)np, (t1 - t0) / 5 * 1e3,
         (t1 - t0) / 5 / (double)np * 1e9);
  free(qkv), free(out), free(att), free(dout), free(dqkv), free(scr), free(x), free(y);
  free(z), free(w), free(tg), free(p), free(g), free(m), free(v);
}

/* td_cpu_expf against exp in double over its whole clamped range (2 ulp
 * by its polynomial; 4 allowed), and at the edges: a NaN stays NaN (the
 * sanitizer build also checks that nothing undefined runs on the way),
 * ±inf and huge arguments give the clamps' finite values */
static void test_expf(void) {
  double worst = 0.0;
  for (int i = 0; i <= 1000000; i++) {
    float x = -87.0f + 175.0f * (float)i / 1000000.0f;
    double e = exp((double)x);
    double rel = fabs((double)td_cpu_expf(x) - e) / e;
    if (rel > worst) worst = rel;
  }
  report(worst <= 4.0 * 5.96e-8, "td_cpu_expf over [-87, 88] (rel)", worst, 4.0 * 5.96e-8);
  float nan = NAN;
  report(isnan(td_cpu_expf(nan)) && isnan(td_cpu_expf(-nan)), "td_cpu_expf(NaN) is NaN", 0.0, 0.0);
  float hi = td_cpu_expf(INFINITY), lo = td_cpu_expf(-INFINITY);
  report(isfinite(hi) && hi > 1e38f && lo > 0.0f && lo < 1e-37f,
         "td_cpu_expf(+-inf) clamped finite", 0.0, 0.0);
}

int main(int argc, char **argv) {
  td_kernels *k = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (td_kernels_cpu_create(0, &k) != TD_OK) {
    printf("FAIL td_kernels_cpu_create: %s\n%s", td_error_message(), td_error_trace());
    return 1;
  }
  printf("back-end %s, matmul %s\n", k->name, k->matmul_name);
  test_memory(k);
  test_registry();
  test_expf();

  static const int64_t gs[][3] = {{1, 1, 1}, {7, 13, 5}, {13, 7, 33}, {33, 65, 17},
                                  {64, 48, 32}, {129, 67, 257}};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) test_gemm(k, gs[i][0], gs[i][1], gs[i][2]);
  test_gemm(k, 7, 13, 0); /* K = 0: C = beta·C */
  test_bias(k, 7, 13);
  test_bias(k, 33, 300);

  test_embed(k, 2, 7, 12, 0, 11, 1);
  test_embed(k, 3, 13, 20, 5, 9, 1);
  test_embed(k, 2, 5, 12, 3, 6, 0);

  test_layernorm(k, 5, 12, 1);
  test_layernorm(k, 13, 20, 1);
  test_layernorm(k, 64, 300, 0); /* column blocks with a tail; no FD (slow) */

  test_attention(k, 2, 7, 2, 4, 1);
  test_attention(k, 2, 13, 3, 5, 1);
  test_attention(k, 1, 1, 2, 3, 1);
  test_attention(k, 2, 67, 3, 64, 0);
  test_attention(k, 1, 193, 2, 8, 0); /* causal row blocks: 3 uneven */
  test_attention(k, 2, 256, 1, 16, 0); /* causal row blocks: 4 */
  test_attention_tiny(k);

  test_rmsnorm(k, 5, 12, 1e-5f, 1);
  test_rmsnorm(k, 13, 20, 1e-6f, 1);
  test_rmsnorm(k, 64, 300, 1e-5f, 0); /* column blocks with a tail; no FD (slow) */
  test_rope(k, 3, 5, 4, 8, 4 * 8 + 3, 10000.0f);
  test_rope(k, 2, 64, 3, 16, 3 * 16 + 5, 10000.0f);
  test_rope(k, 2, 64, 2, 32, 2 * 32 + 7, 500000.0f);
  test_rope(k, 1, 8192, 1, 32, 32, 500000.0f); /* angles up to 8191 rad */
  test_rope(k, 2, 3, 2, 2, 4, 10000.0f);
  test_swiglu(k, 13, 6.0);
  test_swiglu(k, 9001, 30.0);
  test_gqa(k, 2, 7, 4, 2, 4, 3, 5, 1);
  test_gqa(k, 2, 5, 4, 1, 3, 0, 2, 1);
  test_gqa(k, 1, 6, 4, 4, 2, 1, 0, 1);
  test_gqa(k, 2, 67, 4, 2, 16, 5, 3, 0);
  test_gqa(k, 1, 193, 4, 1, 8, 1, 1, 0); /* causal row blocks: 3 uneven */
  test_gqa(k, 2, 256, 4, 4, 16, 8, 8, 0); /* causal row blocks: 4 */
  test_gqa(k, 1, 130, 6, 2, 32, 0, 0, 0);
  test_gqa_usage(k);
  for (int64_t cp = 2; cp <= 4; cp += 2) { /* Tk = 16: c = 4, then 2 */
    test_gqa_pos(k, 2, 16, 3, 3, 4, cp, 3, 5); /* GPT-2-like: KV = NH */
    test_gqa_pos(k, 2, 16, 4, 2, 4, cp, 0, 2);
  }
  test_gqa_pos(k, 2, 12, 4, 2, 6, 2, 1, 1); /* c = 3 */
  test_gqa_pos(k, 2, 12, 3, 3, 4, 3, 0, 0);  /* c = 2, three ranks */
  test_gqa_pos(k, 1, 512, 4, 2, 8, 2, 0, 0); /* causal row blocks: 2 per run, 4 over keys */
  test_rope_pos(k, 2, 16, 3, 8, 3 * 8 + 5, 2);
  test_rope_pos(k, 2, 24, 2, 16, 2 * 16, 4);
  test_embed_pos(k, 2, 16, 12, 2);
  test_embed_pos(k, 3, 24, 20, 4);
  test_pos_usage(k);
  test_copy2d(k, 5, 3, 4, 7);
  test_copy2d(k, 1000, 100, 103, 128); /* > 65536 elements: threaded */

  test_gelu(k, 1);
  test_gelu(k, 20);
  test_gelu(k, 9001);
  test_pointwise(k, 13);
  test_pointwise(k, 100003);

  test_xent(k, 7);
  test_xent(k, 13);
  test_xent_tiny(k);

  test_adamw(k, 13);
  test_adamw(k, 100003);

  if (argc > 1 && strcmp(argv[1], "--bench") == 0) bench(k);
  td_kernels_destroy(&k);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
