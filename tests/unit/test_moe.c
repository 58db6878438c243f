/* test_moe.c — the mixture-of-experts ops of a back-end (td_kernels.h,
 * "mixture of experts") against a float64 reference written here from
 * their definitions (Mixtral's router: softmax over the E experts, the K
 * largest, weights renormalised over the K; Switch's capacity: an expert
 * keeps its first `cap` slots in token order):
 *   - moe_route: probs, lse, psum within 1e-6 (relative), idx exactly —
 *     rows of equal logits included, where the lower expert must win —, w;
 *   - moe_plan: count, off, pos, perm exactly, with and without a capacity;
 *   - moe_gather exactly; moe_combine, moe_combine_bwd (dye in float32 and
 *     bf16, dw), moe_scatter against float64 sums;
 *   - moe_route_bwd against central differences of the float64 loss
 *     L = Σ r·w + Σ_e gP[e]·Σ_n probs[n, e] + zc/2·Σ_n lse[n]², the K
 *     choices held fixed;
 *   - the same bits at 1 and 2 threads (CPU), and TD_ERR_USAGE for K > E
 *     and for an expert index out of range.
 * Run as test_moe [DEVICE] (cpu, the default, or cuda); exit 0 only when
 * every check passes. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/td_bf16.h"
#include "kernels/td_kernels.h"

static int g_pass, g_fail;

static void report(int ok, const char *what, double err, double tol) {
  if (ok) g_pass++;
  else g_fail++;
  if (!ok || getenv("TD_TEST_VERBOSE"))
    printf("%-4s %-60s err %.2e (tol %.0e)\n", ok ? "ok" : "FAIL", what, err, tol);
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* [-1, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 4503599627370496.0 - 1.0;
}

static void *xcalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* A buffer on the back-end holding `bytes` from host (NULL: zeroed). */
static void *dev(td_kernels *k, const void *host, size_t bytes) {
  void *d = NULL;
  if (k->alloc(k, &d, bytes ? bytes : 4, "test buffer") != TD_OK) {
    fprintf(stderr, "alloc: %s\n", td_error_message());
    exit(1);
  }
  if (host && bytes && k->to_device(k, d, host, bytes) != TD_OK) exit(1);
  return d;
}

static void *back(td_kernels *k, const void *d, size_t bytes) {
  void *h = xcalloc(bytes);
  if (bytes && (k->sync(k) != TD_OK || k->to_host(k, h, d, bytes) != TD_OK)) exit(1);
  return h;
}

static int ok_status(td_status s, const char *what) {
  if (s == TD_OK) return 1;
  printf("FAIL %s: %s\n", what, td_error_message());
  g_fail++;
  return 0;
}

/* ---- the float64 reference ---------------------------------------------------- */

typedef struct {
  int64_t N, E, K, C, cap;
  double *probs, *lse, *w, *psum;
  int32_t *idx, *count, *off, *pos, *perm;
} ref;

/* Softmax, lse and w of row n of float logits l (idx given). */
static void ref_row(const float *l, int64_t E, int64_t K, const int32_t *ix, double *p,
                    double *lse, double *w) {
  double mx = -INFINITY, s = 0.0;
  for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
  for (int64_t e = 0; e < E; e++) s += p[e] = exp((double)l[e] - mx);
  for (int64_t e = 0; e < E; e++) p[e] /= s;
  *lse = mx + log(s);
  double t = 0.0;
  for (int64_t j = 0; j < K; j++) t += p[ix[j]];
  for (int64_t j = 0; j < K; j++) w[j] = p[ix[j]] / t;
}

static void ref_make(ref *r, const float *logits, int64_t N, int64_t E, int64_t K,
                     int64_t cap) {
  r->N = N, r->E = E, r->K = K, r->cap = cap;
  r->probs = xcalloc((size_t)(N * E) * 8), r->lse = xcalloc((size_t)N * 8);
  r->w = xcalloc((size_t)(N * K) * 8), r->psum = xcalloc((size_t)E * 8);
  r->idx = xcalloc((size_t)(N * K) * 4), r->count = xcalloc((size_t)E * 4);
  r->off = xcalloc((size_t)(E + 1) * 4), r->pos = xcalloc((size_t)(N * K) * 4);
  r->perm = xcalloc((size_t)(N * K) * 4);
  for (int64_t n = 0; n < N; n++) {
    const float *l = logits + n * E;
    int32_t *ix = r->idx + n * K;
    /* the K largest, largest first; among equal logits the lower expert */
    for (int64_t j = 0; j < K; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; e++) {
        int used = 0;
        for (int64_t i = 0; i < j; i++) used |= ix[i] == e;
        if (used) continue;
        if (best < 0 || l[e] > l[best]) best = e;
      }
      ix[j] = (int32_t)best;
    }
    ref_row(l, E, K, ix, r->probs + n * E, &r->lse[n], r->w + n * K);
    for (int64_t e = 0; e < E; e++) r->psum[e] += r->probs[n * E + e];
  }
  for (int64_t s = 0; s < N * K; s++) r->count[r->idx[s]]++;
  for (int64_t e = 0; e < E; e++)
    r->off[e + 1] = r->off[e] + (cap > 0 && r->count[e] > cap ? (int32_t)cap : r->count[e]);
  int32_t *kept = xcalloc((size_t)E * 4);
  for (int64_t s = 0; s < N * K; s++) {
    int32_t e = r->idx[s];
    if (cap > 0 && kept[e] >= cap) {
      r->pos[s] = -1;
    } else {
      r->pos[s] = r->off[e] + kept[e]++;
      r->perm[r->pos[s]] = (int32_t)s;
    }
  }
  free(kept);
}

static void ref_free(ref *r) {
  free(r->probs), free(r->lse), free(r->w), free(r->psum), free(r->idx);
  free(r->count), free(r->off), free(r->pos), free(r->perm);
}

/* The loss route_bwd differentiates, at double logits L, the choices idx fixed. */
static double route_loss(const double *L, int64_t N, int64_t E, int64_t K, const int32_t *idx,
                         const double *rw, const double *gP, double zc) {
  double tot = 0.0;
  double *p = xcalloc((size_t)E * 8);
  for (int64_t n = 0; n < N; n++) {
    const double *l = L + n * E;
    double mx = -INFINITY, s = 0.0, t = 0.0;
    for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < E; e++) s += p[e] = exp(l[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= s;
    double lse = mx + log(s);
    for (int64_t j = 0; j < K; j++) t += p[idx[n * K + j]];
    for (int64_t j = 0; j < K; j++) tot += rw[n * K + j] * p[idx[n * K + j]] / t;
    for (int64_t e = 0; e < E; e++) tot += gP[e] * p[e];
    tot += 0.5 * zc * lse * lse;
  }
  free(p);
  return tot;
}

/* ---- one shape ---------------------------------------------------------------- */

/* max |a − b| / max(1, max |b|) */
static double rel_err(const float *a, const double *b, int64_t n) {
  double e = 0.0, m = 1.0;
  for (int64_t i = 0; i < n; i++) m = fabs(b[i]) > m ? fabs(b[i]) : m;
  for (int64_t i = 0; i < n; i++) e = fabs(a[i] - b[i]) > e ? fabs(a[i] - b[i]) : e;
  return e / m;
}

static void test_shape(td_kernels *k, int64_t N, int64_t E, int64_t K, int64_t C, int64_t cap,
                       int ties) {
  char name[160];
  float *logits = xcalloc((size_t)(N * E) * 4);
  for (int64_t i = 0; i < N * E; i++) logits[i] = (float)(2.0 * urand());
  for (int64_t n = 0; ties && n < N; n++) {
    float *l = logits + n * E;
    if (n % 3 == 0)
      for (int64_t e = 0; e < E; e++) l[e] = 0.5f; /* all equal: experts 0..K−1 */
    else if (n % 3 == 1 && E >= 4)
      l[E - 1] = l[1] = 3.0f, l[E - 2] = l[2] = 2.5f; /* two tied pairs at the top */
  }
  ref r;
  ref_make(&r, logits, N, E, K, cap);
  size_t fe = (size_t)(N * E) * 4, fk = (size_t)(N * K) * 4;
  float *d_logits = dev(k, logits, fe), *d_probs = dev(k, NULL, fe);
  float *d_lse = dev(k, NULL, (size_t)N * 4), *d_w = dev(k, NULL, fk);
  float *d_psum = dev(k, NULL, (size_t)E * 4);
  int32_t *d_idx = dev(k, NULL, fk);
  snprintf(name, sizeof name, "N %lld E %lld K %lld C %lld cap %lld%s", (long long)N,
           (long long)E, (long long)K, (long long)C, (long long)cap, ties ? " ties" : "");
  char what[240];
  if (!ok_status(k->moe_route(k, d_probs, d_lse, d_idx, d_w, d_psum, d_logits, N, E, K),
                 "moe_route"))
    return;
  float *probs = back(k, d_probs, fe), *lse = back(k, d_lse, (size_t)N * 4);
  float *w = back(k, d_w, fk), *psum = back(k, d_psum, (size_t)E * 4);
  int32_t *idx = back(k, d_idx, fk);
  double e;
  snprintf(what, sizeof what, "route probs (%s)", name);
  e = rel_err(probs, r.probs, N * E);
  report(e <= 1e-6, what, e, 1e-6);
  snprintf(what, sizeof what, "route lse (%s)", name);
  e = rel_err(lse, r.lse, N);
  report(e <= 1e-6, what, e, 1e-6);
  snprintf(what, sizeof what, "route w (%s)", name);
  e = rel_err(w, r.w, N * K);
  report(e <= 1e-6, what, e, 1e-6);
  snprintf(what, sizeof what, "route psum (%s)", name);
  e = rel_err(psum, r.psum, E);
  report(e <= 1e-6, what, e, 1e-6);
  int bad = 0;
  for (int64_t s = 0; s < N * K; s++) bad += idx[s] != r.idx[s];
  snprintf(what, sizeof what, "route idx exact (%s)", name);
  report(bad == 0, what, bad, 0);

  /* the plan, from the reference's choices (the same as the kernel's when
   * the check above passed) */
  int32_t *d_pos = dev(k, NULL, fk), *d_perm = dev(k, NULL, fk);
  int32_t *d_off = dev(k, NULL, (size_t)(E + 1) * 4), *d_count = dev(k, NULL, (size_t)E * 4);
  int32_t *d_ridx = dev(k, r.idx, fk);
  if (!ok_status(k->moe_plan(k, d_pos, d_perm, d_off, d_count, d_ridx, N, E, K, cap),
                 "moe_plan"))
    return;
  int32_t *pos = back(k, d_pos, fk), *perm = back(k, d_perm, fk);
  int32_t *off = back(k, d_off, (size_t)(E + 1) * 4), *count = back(k, d_count, (size_t)E * 4);
  bad = 0;
  for (int64_t x = 0; x < E; x++) bad += count[x] != r.count[x];
  for (int64_t x = 0; x <= E; x++) bad += off[x] != r.off[x];
  for (int64_t s = 0; s < N * K; s++) bad += pos[s] != r.pos[s];
  for (int64_t q = 0; q < r.off[E]; q++) bad += perm[q] != r.perm[q];
  snprintf(what, sizeof what, "plan count/off/pos/perm exact (%s, %d kept)", name, r.off[E]);
  report(bad == 0, what, bad, 0);

  /* the row movers, in float32 and bf16 */
  int64_t rows = r.off[E];
  float *x = xcalloc((size_t)(N * C) * 4), *ye = xcalloc((size_t)(rows * C) * 4 + 4);
  float *dout = xcalloc((size_t)(N * C) * 4), *dxe = xcalloc((size_t)(rows * C) * 4 + 4);
  for (int64_t i = 0; i < N * C; i++) x[i] = (float)urand(), dout[i] = (float)urand();
  for (int64_t i = 0; i < rows * C; i++) ye[i] = (float)urand(), dxe[i] = (float)urand();
  float *d_ye = dev(k, ye, (size_t)(rows * C) * 4), *d_dout = dev(k, dout, (size_t)(N * C) * 4);
  float *d_dxe = dev(k, dxe, (size_t)(rows * C) * 4), *d_rw = dev(k, NULL, fk);
  float *wf = xcalloc(fk);
  for (int64_t s = 0; s < N * K; s++) wf[s] = (float)r.w[s];
  if (k->to_device(k, d_rw, wf, fk) != TD_OK) exit(1);
  for (int dt = 0; dt < 2; dt++) {
    td_dtype t = dt ? TD_DTYPE_BF16 : TD_DTYPE_F32;
    size_t es = td_dtype_size(t);
    void *xt = xcalloc((size_t)(N * C) * es);
    for (int64_t i = 0; i < N * C; i++) {
      if (dt) ((uint16_t *)xt)[i] = td_bf16_from_f32(x[i]);
      else ((float *)xt)[i] = x[i];
    }
    void *d_x = dev(k, xt, (size_t)(N * C) * es), *d_xe = dev(k, NULL, (size_t)(rows * C) * es);
    if (!ok_status(k->moe_gather(k, d_xe, d_x, t, d_perm, rows, C, K), "moe_gather")) return;
    char *xe = back(k, d_xe, (size_t)(rows * C) * es);
    bad = 0;
    for (int64_t q = 0; q < rows; q++)
      bad += memcmp(xe + (size_t)(q * C) * es, (char *)xt + (size_t)(r.perm[q] / K * C) * es,
                    (size_t)C * es) != 0;
    snprintf(what, sizeof what, "gather %s exact (%s)", dt ? "bf16" : "fp32", name);
    report(bad == 0, what, bad, 0);

    void *d_dye = dev(k, NULL, (size_t)(rows * C) * es);
    float *d_dw = dev(k, NULL, fk);
    if (!ok_status(k->moe_combine_bwd(k, d_dye, t, d_dw, d_dout, d_ye, d_rw, d_pos, N, K, C),
                   "moe_combine_bwd"))
      return;
    char *dye = back(k, d_dye, (size_t)(rows * C) * es);
    float *dw = back(k, d_dw, fk);
    double edye = 0.0, edw = 0.0;
    for (int64_t s = 0; s < N * K; s++) {
      int64_t n = s / K, q = r.pos[s];
      double d = 0.0;
      for (int64_t c = 0; q >= 0 && c < C; c++) {
        d += (double)dout[n * C + c] * ye[q * C + c];
        double want = (double)wf[s] * dout[n * C + c];
        double got = dt ? td_bf16_to_f32(((uint16_t *)dye)[q * C + c]) : ((float *)dye)[q * C + c];
        double err = fabs(got - want) / (fabs(want) > 1e-30 ? fabs(want) : 1.0);
        edye = err > edye ? err : edye;
      }
      double err = fabs(dw[s] - d) / (fabs(d) > 1.0 ? fabs(d) : 1.0);
      edw = err > edw ? err : edw;
    }
    double tol = dt ? 4e-3 : 1e-6;
    snprintf(what, sizeof what, "combine_bwd dye %s (%s)", dt ? "bf16" : "fp32", name);
    report(edye <= tol, what, edye, tol);
    snprintf(what, sizeof what, "combine_bwd dw %s (%s)", dt ? "bf16" : "fp32", name);
    report(edw <= 1e-5, what, edw, 1e-5);
    free(xt), free(xe), free(dye), free(dw);
    k->free(k, d_x), k->free(k, d_xe), k->free(k, d_dye), k->free(k, d_dw);
  }
  float *d_out = dev(k, NULL, (size_t)(N * C) * 4), *d_dx = dev(k, NULL, (size_t)(N * C) * 4);
  if (!ok_status(k->moe_combine(k, d_out, d_ye, d_rw, d_pos, N, K, C), "moe_combine")) return;
  if (!ok_status(k->moe_scatter(k, d_dx, d_dxe, d_pos, N, K, C), "moe_scatter")) return;
  float *out = back(k, d_out, (size_t)(N * C) * 4), *dx = back(k, d_dx, (size_t)(N * C) * 4);
  double eo = 0.0, ex = 0.0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      double o = 0.0, g = 0.0;
      for (int64_t j = 0; j < K; j++) {
        int64_t q = r.pos[n * K + j];
        if (q < 0) continue;
        o += (double)wf[n * K + j] * ye[q * C + c];
        g += dxe[q * C + c];
      }
      eo = fabs(out[n * C + c] - o) > eo ? fabs(out[n * C + c] - o) : eo;
      ex = fabs(dx[n * C + c] - g) > ex ? fabs(dx[n * C + c] - g) : ex;
    }
  snprintf(what, sizeof what, "combine (%s)", name);
  report(eo <= 1e-6 * (double)K, what, eo, 1e-6 * (double)K);
  snprintf(what, sizeof what, "scatter (%s)", name);
  report(ex <= 1e-6 * (double)K, what, ex, 1e-6 * (double)K);

  /* the router's backward against central differences */
  double *rw = xcalloc((size_t)(N * K) * 8), *gP = xcalloc((size_t)E * 8), zc = 0.37;
  float *rwf = xcalloc(fk), *gPf = xcalloc((size_t)E * 4);
  for (int64_t s = 0; s < N * K; s++) rwf[s] = (float)urand(), rw[s] = rwf[s];
  for (int64_t x2 = 0; x2 < E; x2++) gPf[x2] = (float)(0.1 * urand()), gP[x2] = gPf[x2];
  float *d_g = dev(k, rwf, fk), *d_gP = dev(k, gPf, (size_t)E * 4), *d_dl = dev(k, NULL, fe);
  if (!ok_status(k->moe_route_bwd(k, d_dl, d_g, d_probs, d_lse, d_idx, d_w, d_gP, (float)zc, N,
                                  E, K),
                 "moe_route_bwd"))
    return;
  float *dl = back(k, d_dl, fe);
  double *L = xcalloc((size_t)(N * E) * 8), efd = 0.0, h = 1e-5;
  for (int64_t i = 0; i < N * E; i++) L[i] = logits[i];
  for (int64_t i = 0; i < N * E; i++) {
    double l0 = L[i];
    L[i] = l0 + h;
    double up = route_loss(L, N, E, K, r.idx, rw, gP, zc);
    L[i] = l0 - h;
    double dn = route_loss(L, N, E, K, r.idx, rw, gP, zc);
    L[i] = l0;
    double fd = (up - dn) / (2.0 * h);
    efd = fabs(dl[i] - fd) > efd ? fabs(dl[i] - fd) : efd;
  }
  snprintf(what, sizeof what, "route_bwd vs central differences (%s)", name);
  report(efd <= 2e-5, what, efd, 2e-5);

  free(logits), free(probs), free(lse), free(w), free(psum), free(idx), free(pos), free(perm);
  free(off), free(count), free(x), free(ye), free(dout), free(dxe), free(wf), free(out), free(dx);
  free(rw), free(gP), free(rwf), free(gPf), free(dl), free(L);
  void *bufs[] = {d_logits, d_probs, d_lse, d_w, d_psum, d_idx, d_pos, d_perm, d_off, d_count,
                  d_ridx, d_ye, d_dout, d_dxe, d_rw, d_out, d_dx, d_g, d_gP, d_dl};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) k->free(k, bufs[i]);
  ref_free(&r);
}

/* The router's outputs at 1 and at 2 threads, bit for bit (CPU). */
static void test_threads(td_kernels *k) {
  int64_t N = 301, E = 8, K = 2;
  float *l = xcalloc((size_t)(N * E) * 4);
  for (int64_t i = 0; i < N * E; i++) l[i] = (float)(3.0 * urand());
  float *out[2][4];
  int32_t *ix[2];
  for (int t = 0; t < 2; t++) {
    omp_set_num_threads(t + 1);
    out[t][0] = xcalloc((size_t)(N * E) * 4), out[t][1] = xcalloc((size_t)N * 4);
    out[t][2] = xcalloc((size_t)(N * K) * 4), out[t][3] = xcalloc((size_t)E * 4);
    ix[t] = xcalloc((size_t)(N * K) * 4);
    ok_status(k->moe_route(k, out[t][0], out[t][1], ix[t], out[t][2], out[t][3], l, N, E, K),
              "moe_route (threads)");
  }
  int same = memcmp(out[0][0], out[1][0], (size_t)(N * E) * 4) == 0 &&
             memcmp(out[0][1], out[1][1], (size_t)N * 4) == 0 &&
             memcmp(out[0][2], out[1][2], (size_t)(N * K) * 4) == 0 &&
             memcmp(out[0][3], out[1][3], (size_t)E * 4) == 0 &&
             memcmp(ix[0], ix[1], (size_t)(N * K) * 4) == 0;
  report(same, "route: the same bits at 1 and 2 threads", !same, 0);
  for (int t = 0; t < 2; t++) {
    for (int i = 0; i < 4; i++) free(out[t][i]);
    free(ix[t]);
  }
  free(l);
}

/* Bad arguments: TD_ERR_USAGE naming the op. */
static void test_errors(td_kernels *k) {
  float *b = dev(k, NULL, 64 * 4);
  int32_t *ib = dev(k, NULL, 64 * 4);
  td_status s = k->moe_route(k, b, b, ib, b, b, b, 2, 2, 3);
  report(s == TD_ERR_USAGE && strstr(td_error_message(), "moe_route"), "route: K > E refused",
         s, 0);
  td_error_clear();
  int32_t bad[4] = {0, 1, 5, 0};
  int32_t *d_bad = dev(k, bad, sizeof bad);
  s = k->moe_plan(k, ib, ib, ib, ib, d_bad, 2, 4, 2, 0);
  report(s == TD_ERR_USAGE && strstr(td_error_message(), "expert 5 of 4"),
         "plan: an expert index out of range refused", s, 0);
  td_error_clear();
  k->free(k, b), k->free(k, ib), k->free(k, d_bad);
}

int main(int argc, char **argv) {
  const char *device = argc > 1 ? argv[1] : "cpu";
  td_kernels *k = NULL;
  if (td_kernels_create(device, 0, &k) != TD_OK) {
    printf("SKIP %s back-end: %s\n", device, td_error_message());
    return 77;
  }
  test_shape(k, 37, 8, 2, 24, 0, 0);
  test_shape(k, 37, 8, 2, 24, 0, 1);
  test_shape(k, 64, 8, 2, 16, 10, 1); /* capacity 10 of ~16 a expert: drops */
  test_shape(k, 29, 4, 1, 8, 0, 1);   /* Switch: top-1 */
  test_shape(k, 13, 6, 6, 5, 0, 1);   /* every expert chosen */
  test_shape(k, 50, 16, 4, 12, 7, 0);
  test_shape(k, 1, 3, 2, 1, 1, 0);
  test_shape(k, 0, 4, 2, 8, 0, 0); /* no tokens */
  if (strcmp(device, "cpu") == 0) test_threads(k);
  test_errors(k);
  td_kernels_destroy(&k);
  printf("test_moe %s: %d passed, %d failed\n", device, g_pass, g_fail);
  return g_fail ? 1 : 0;
}
