/* test_flash.c — the fused (flash) attention of a back-end, forward and
 * backward, against a float64 reference written from the definition
 * (softmax over the visible keys, its analytic gradient, and central
 * differences of the float64 forward on L = Σ out·R at small shapes), and
 * against the back-end's materialised attention (gqa_fwd/gqa_bwd) where
 * both apply, and on a device against the CPU back-end's fused kernels
 * (1e-5). Shapes: T not a multiple of the tile (1, 7, 63, 65, 130, 300),
 * head sizes 24 and 80, kv_heads 1, 2 and heads, padded row strides,
 * context-parallel positions (cp 2 and 4), document masks, the backward
 * without the forward's output (D from the probabilities, as for a model
 * that kept it in bf16); dK summing to 0 over the keys (a key bias's
 * gradient). And determinism: the same bits at 1, 2 and 3 threads and from
 * run to run. Cases with bf16 products (mt = TD_DTYPE_BF16, head sizes
 * multiple of 16: the device's tensor cores, the CPU the same math):
 * against the reference of the bf16-rounded operands at bounds that allow
 * for the rounded probabilities (1e-2 forward, 2e-2 backward, dK's sum over
 * the keys 1e-4: dS goes in as two bf16 parts), a device against the CPU
 * at 5e-4; HS 24 stays float32.
 * Prints one line per check and
 * "N passed, M failed"; exits non-zero on any failure.
 *   test_flash [cpu|cuda]   (default cpu; cuda: 77 without a device) */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/td_kernels.h"

static int g_pass, g_fail;
static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static double urand(void) { /* uniform in [-1, 1) (xorshift64*) */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return 2.0 * (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0 - 1.0;
}

static void *xcalloc(size_t n, size_t es) {
  void *p = calloc(n ? n : 1, es);
  if (!p) {
    fprintf(stderr, "test_flash: out of memory\n");
    exit(2);
  }
  return p;
}
#define NEWF(n) ((float *)xcalloc((size_t)(n), sizeof(float)))
#define NEWD(n) ((double *)xcalloc((size_t)(n), sizeof(double)))

static void report(int ok, const char *name, double err, double tol) {
  ok ? g_pass++ : g_fail++;
  printf("%-4s %-70s err %.2e (tol %.0e)\n", ok ? "ok" : "FAIL", name, err, tol);
}

/* max |got − ref| / (1 + |ref|) over n; NaN fails */
static double rel_err(const float *got, const double *ref, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]) / (1.0 + fabs(ref[i]));
    if (!(e <= worst)) worst = e; /* NaN sticks */
  }
  return worst;
}

static int ck(const char *what, td_status s) {
  if (s == TD_OK) return 1;
  printf("FAIL %s: %s\n", what, td_error_message());
  td_error_clear();
  g_fail++;
  return 0;
}

/* One case: shapes, strides, positions, document masks. */
typedef struct {
  int64_t B, T, NH, KV, HS, padq, padkv;
  int cp;      /* 0: no positions; else this rank (1) of cp ranks' positions */
  int docs;    /* document masks: documents of random lengths */
  int noout; /* backward without the forward's output: D from the probabilities */
  int bf16;  /* the products in bf16 (mt = TD_DTYPE_BF16: a device's tensor cores) */
} fcase;

/* The operands in float64 (and the float copies the kernels read). */
typedef struct {
  fcase c;
  int64_t Tk, ldq, ldkv, C;
  td_pos pos, *pp;
  int32_t *doc;
  double *q, *k, *v, *R; /* R: dout */
} fref;

static int64_t lo_of(const fref *r, int64_t b, int64_t t) { return r->doc ? r->doc[b * r->c.T + t] : 0; }

/* out (B, T, C) and lse (B, NH, T) in float64 */
static void ref_fwd(const fref *r, const double *q, const double *k, const double *v, double *out,
                    double *lse) {
  int64_t B = r->c.B, T = r->c.T, NH = r->c.NH, HS = r->c.HS, G = NH / r->c.KV;
  double *p = NEWD(r->Tk);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        int64_t lo = lo_of(r, b, t), hi = td_pos_at(r->pp, t);
        const double *qr = q + (b * T + t) * r->ldq + h * HS;
        double mx = -INFINITY, s = 0.0;
        for (int64_t j = lo; j <= hi; j++) {
          const double *kr = k + (b * r->Tk + j) * r->ldkv + (h / G) * HS;
          double d = 0.0;
          for (int64_t e = 0; e < HS; e++) d += qr[e] * kr[e];
          p[j] = d / sqrt((double)HS);
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = lo; j <= hi; j++) s += (p[j] = exp(p[j] - mx));
        if (lse) lse[(b * NH + h) * T + t] = mx + log(s);
        for (int64_t e = 0; e < HS; e++) {
          double o = 0.0;
          for (int64_t j = lo; j <= hi; j++) o += p[j] / s * v[(b * r->Tk + j) * r->ldkv + (h / G) * HS + e];
          out[(b * T + t) * r->C + h * HS + e] = o;
        }
      }
  free(p);
}

/* The analytic gradients of L = Σ out·R, with D from `o` (the output the
 * kernel is given, or exact). */
static void ref_bwd(const fref *r, const double *o, const double *lse, double *dq, double *dk,
                    double *dv) {
  int64_t B = r->c.B, T = r->c.T, NH = r->c.NH, HS = r->c.HS, G = NH / r->c.KV;
  double sc = 1.0 / sqrt((double)HS);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t t = 0; t < T; t++) {
        int64_t lo = lo_of(r, b, t), hi = td_pos_at(r->pp, t), kv = h / G;
        const double *qr = r->q + (b * T + t) * r->ldq + h * HS, *g = r->R + (b * T + t) * r->C + h * HS;
        const double *orow = o + (b * T + t) * r->C + h * HS;
        double D = 0.0;
        for (int64_t e = 0; e < HS; e++) D += g[e] * orow[e];
        for (int64_t j = lo; j <= hi; j++) {
          const double *kr = r->k + (b * r->Tk + j) * r->ldkv + kv * HS;
          const double *vr = r->v + (b * r->Tk + j) * r->ldkv + kv * HS;
          double s = 0.0, dp = 0.0;
          for (int64_t e = 0; e < HS; e++) s += qr[e] * kr[e], dp += g[e] * vr[e];
          double P = exp(s * sc - lse[(b * NH + h) * T + t]), ds = P * (dp - D) * sc;
          for (int64_t e = 0; e < HS; e++) {
            dq[(b * T + t) * r->ldq + h * HS + e] += ds * kr[e];
            dk[(b * r->Tk + j) * r->ldkv + kv * HS + e] += ds * qr[e];
            dv[(b * r->Tk + j) * r->ldkv + kv * HS + e] += P * g[e];
          }
        }
      }
}

static double loss_of(const fref *r, const double *q, const double *k, const double *v) {
  int64_t n = r->c.B * r->c.T * r->C;
  double *out = NEWD(n), L = 0.0;
  ref_fwd(r, q, k, v, out, NULL);
  for (int64_t i = 0; i < n; i++) L += out[i] * r->R[i];
  free(out);
  return L;
}

/* Device buffers (the back-end's memory) from host floats and back. */
static float *dev(td_kernels *k, const void *host, size_t bytes) {
  void *p = NULL;
  if (!ck("alloc", k->alloc(k, &p, bytes ? bytes : 4, "test"))) exit(1);
  if (host && !ck("to_device", k->to_device(k, p, host, bytes))) exit(1);
  return p;
}
static void back(td_kernels *k, void *host, const void *d, size_t bytes) {
  ck("to_host", k->to_host(k, host, d, bytes));
  ck("sync", k->sync(k));
}

typedef struct {
  float *out, *lse, *dq, *dk, *dv; /* host copies of the results */
} fres;

/* Run the kernels once on device copies of the float operands. */
static int run_flash(td_kernels *k, const fref *r, const float *q, const float *kk, const float *v,
                     const float *dout, fres *o) {
  const fcase *c = &r->c;
  int64_t nq = c->B * c->T * r->ldq, nkv = c->B * r->Tk * r->ldkv, no = c->B * c->T * r->C;
  int64_t nl = c->B * c->NH * c->T;
  float *Q = dev(k, q, nq * 4), *K = dev(k, kk, nkv * 4), *V = dev(k, v, nkv * 4);
  float *G = dev(k, dout, no * 4), *O = dev(k, NULL, no * 4), *L = dev(k, NULL, nl * 4);
  float *dQ = dev(k, q, nq * 4), *dK = dev(k, kk, nkv * 4), *dV = dev(k, v, nkv * 4); /* "=" */
  float *D = dev(k, NULL, nl * 4);
  int32_t *doc = r->doc ? (int32_t *)dev(k, r->doc, c->B * c->T * 4) : NULL;
  td_dtype mt = c->bf16 ? TD_DTYPE_BF16 : TD_DTYPE_F32;
  int ok = ck("flash_fwd", k->flash_fwd(k, O, L, Q, K, V, r->ldq, r->ldkv, c->B, c->T, c->NH,
                                         c->KV, c->HS, r->pp, doc, mt));
  ok = ok && ck("flash_bwd", k->flash_bwd(k, dQ, dK, dV, D, G, c->noout ? NULL : O, L, Q, K, V,
                                          r->ldq, r->ldkv, c->B, c->T, c->NH, c->KV, c->HS, r->pp,
                                          doc, mt));
  if (ok) {
    back(k, o->out, O, no * 4);
    back(k, o->lse, L, nl * 4);
    back(k, o->dq, dQ, nq * 4);
    back(k, o->dk, dK, nkv * 4);
    back(k, o->dv, dV, nkv * 4);
  }
  void *bufs[] = {Q, K, V, G, O, L, dQ, dK, dV, D, doc};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) k->free(k, bufs[i]);
  return ok;
}

static fres res_new(const fref *r) {
  const fcase *c = &r->c;
  fres o = {NEWF(c->B * c->T * r->C), NEWF(c->B * c->NH * c->T), NEWF(c->B * c->T * r->ldq),
            NEWF(c->B * r->Tk * r->ldkv), NEWF(c->B * r->Tk * r->ldkv)};
  return o;
}
static void res_free(fres *o) { free(o->out), free(o->lse), free(o->dq), free(o->dk), free(o->dv); }
static int res_same(const fref *r, const fres *a, const fres *b) {
  const fcase *c = &r->c;
  size_t no = (size_t)(c->B * c->T * r->C), nl = (size_t)(c->B * c->NH * c->T);
  size_t nq = (size_t)(c->B * c->T * r->ldq), nkv = (size_t)(c->B * r->Tk * r->ldkv);
  return !memcmp(a->out, b->out, no * 4) && !memcmp(a->lse, b->lse, nl * 4) &&
         !memcmp(a->dq, b->dq, nq * 4) && !memcmp(a->dk, b->dk, nkv * 4) &&
         !memcmp(a->dv, b->dv, nkv * 4);
}

/* One case against the float64 reference (and finite differences when fd),
 * the materialised kernels (when they apply: no document masks) and itself
 * again (on the CPU also at 1, 2 and 3 OpenMP threads). */
static td_kernels *g_cpu; /* the CPU back-end, when k is another: compared with it too */

/* float → bf16 → float, round to nearest even (finite values) */
static float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}
static float same(float x) { return x; }

static void test_case(td_kernels *k, fcase c, int fd) {
  /* the products in bf16: every back-end, for head sizes multiple of 16 */
  int dev_bf16 = td_kernels_flash_bf16(c.bf16 ? TD_DTYPE_BF16 : TD_DTYPE_F32, c.HS);
  /* bounds: float32 products, or bf16 ones (P, dS rounded to 8 bits) */
  double t_fwd = dev_bf16 ? 1e-2 : 2e-6, t_bwd = dev_bf16 ? 2e-2 : 1e-5;
  double t_sum = dev_bf16 ? 1e-4 : 1e-5, t_mat = dev_bf16 ? 3e-2 : 2e-5;
  double t_cpu = dev_bf16 ? 5e-4 : 1e-5; /* the same math: a P near a bf16 tie may round apart */
  fref r;
  memset(&r, 0, sizeof r);
  r.c = c;
  r.C = c.NH * c.HS, r.ldq = r.C + c.padq, r.ldkv = c.KV * c.HS + c.padkv;
  r.Tk = c.T;
  if (c.cp) { /* rank 1 of cp: chunks 1 and 2·cp − 2 of 2·cp, T/2 rows each */
    int64_t h = c.T / 2;
    r.pos = (td_pos){(int64_t)c.cp * c.T, h, h, (2 * c.cp - 2) * h, NULL};
    r.pp = &r.pos, r.Tk = r.pos.Tk;
  }
  int64_t B = c.B, T = c.T, nq = B * T * r.ldq, nkv = B * r.Tk * r.ldkv, no = B * T * r.C;
  int64_t nl = B * c.NH * T;
  if (c.docs) { /* documents of 1 to 40 positions over the whole sequence */
    r.doc = xcalloc((size_t)(B * T), sizeof(int32_t));
    int64_t *start = xcalloc((size_t)r.Tk, sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) {
      int64_t s = 0, left = 0;
      for (int64_t p = 0; p < r.Tk; p++) {
        if (left == 0) s = p, left = 1 + (int64_t)((urand() + 1.0) * 20.0);
        start[p] = s, left--;
      }
      for (int64_t t = 0; t < T; t++) r.doc[b * T + t] = (int32_t)start[td_pos_at(r.pp, t)];
    }
    free(start);
  }
  float *q = NEWF(nq), *kk = NEWF(nkv), *v = NEWF(nkv), *g = NEWF(no);
  r.q = NEWD(nq), r.k = NEWD(nkv), r.v = NEWD(nkv), r.R = NEWD(no);
  /* bf16 products: the reference takes the operands as a device rounds
   * them (P and dS it cannot: the bounds below allow for those) */
  float (*in)(float) = dev_bf16 && c.bf16 ? bf16_round : same;
  for (int64_t i = 0; i < nq; i++) r.q[i] = in(q[i] = (float)(2.0 * urand()));
  for (int64_t i = 0; i < nkv; i++) r.k[i] = in(kk[i] = (float)(2.0 * urand()));
  for (int64_t i = 0; i < nkv; i++) r.v[i] = in(v[i] = (float)urand());
  for (int64_t i = 0; i < no; i++) r.R[i] = in(g[i] = (float)urand());
  for (int64_t i = 0; i < nq; i++) /* padding: must survive the "=" of dq, dk, dv */
    if (i % r.ldq >= r.C) q[i] = 7.0f, r.q[i] = 7.0;
  for (int64_t i = 0; i < nkv; i++)
    if (i % r.ldkv >= c.KV * c.HS) kk[i] = v[i] = 7.0f, r.k[i] = r.v[i] = 7.0;
  char tag[160], name[220];
  snprintf(tag, sizeof tag, "B=%lld T=%lld NH=%lld KV=%lld HS=%lld pad=%lld,%lld%s%s%s%s",
           (long long)B, (long long)T, (long long)c.NH, (long long)c.KV, (long long)c.HS,
           (long long)c.padq, (long long)c.padkv, c.cp == 2 ? " cp2" : c.cp == 4 ? " cp4" : "",
           c.docs ? " docs" : "", c.noout ? " no-out" : "",
           !c.bf16 ? "" : dev_bf16 ? " bf16-products" : " bf16 (float32: HS % 16)");

  fres o = res_new(&r);
  if (!run_flash(k, &r, q, kk, v, g, &o)) goto done;
  double *out = NEWD(no), *lse = NEWD(nl);
  double *dq = NEWD(nq), *dk = NEWD(nkv), *dv = NEWD(nkv);
  ref_fwd(&r, r.q, r.k, r.v, out, lse);
  snprintf(name, sizeof name, "flash_fwd out %s", tag);
  double e = rel_err(o.out, out, no);
  report(e <= t_fwd, name, e, t_fwd);
  snprintf(name, sizeof name, "flash_fwd lse %s", tag);
  e = rel_err(o.lse, lse, nl);
  report(e <= t_fwd, name, e, t_fwd);
  ref_bwd(&r, out, lse, dq, dk, dv);
  /* padding columns of the reference: what the kernel must leave */
  for (int64_t i = 0; i < nq; i++)
    if (i % r.ldq >= r.C) dq[i] = 7.0;
  for (int64_t i = 0; i < nkv; i++)
    if (i % r.ldkv >= c.KV * c.HS) dk[i] = dv[i] = 7.0;
  const char *nm[3] = {"dq", "dk", "dv"};
  const float *got[3] = {o.dq, o.dk, o.dv};
  const double *want[3] = {dq, dk, dv};
  int64_t n3[3] = {nq, nkv, nkv};
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof name, "flash_bwd %s %s", nm[i], tag);
    e = rel_err(got[i], want[i], n3[i]);
    report(e <= t_bwd, name, e, t_bwd);
  }
  { /* Σ_j dS_j = 0 per query row, so Σ over the keys of dK vanishes (what a
     * key bias's gradient is): |Σ_j dK_j| ≤ 1e-5 · Σ_j |dK_j| per column */
    double worst = 0.0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t col = 0; col < c.KV * c.HS; col++) {
        double sum = 0.0, mag = 0.0;
        for (int64_t j = 0; j < r.Tk; j++) {
          double x = o.dk[(b * r.Tk + j) * r.ldkv + col];
          sum += x, mag += fabs(x);
        }
        double rel = mag > 0 ? fabs(sum) / mag : 0.0;
        worst = rel > worst ? rel : worst;
      }
    snprintf(name, sizeof name, "flash_bwd dk sums to 0 over the keys %s", tag);
    report(worst <= t_sum, name, worst, t_sum);
  }
  if (fd && !dev_bf16) { /* the gradients of the definition itself */
    double h = 1e-6, *x[3] = {r.q, r.k, r.v};
    for (int i = 0; i < 3; i++) {
      double *gd = NEWD(n3[i]);
      for (int64_t j = 0; j < n3[i]; j++) {
        int64_t w = i == 0 ? r.ldq : r.ldkv, width = i == 0 ? r.C : c.KV * c.HS;
        if (j % w >= width) { gd[j] = 7.0; continue; }
        double keep = x[i][j];
        x[i][j] = keep + h;
        double lp = loss_of(&r, r.q, r.k, r.v);
        x[i][j] = keep - h;
        double lm = loss_of(&r, r.q, r.k, r.v);
        x[i][j] = keep;
        gd[j] = (lp - lm) / (2 * h);
      }
      snprintf(name, sizeof name, "flash_bwd %s finite differences %s", nm[i], tag);
      e = rel_err(got[i], gd, n3[i]);
      report(e <= 1e-4, name, e, 1e-4);
      free(gd);
    }
  }
  if (!c.docs && k->gqa_fwd) { /* the materialised kernels */
    float *att = NEWF(B * c.NH * T * r.Tk), *scr = NEWF(B * c.NH * T * r.Tk), *mo = NEWF(no);
    float *mq = NEWF(nq), *mk = NEWF(nkv), *mv = NEWF(nkv);
    float *Q = dev(k, q, nq * 4), *K = dev(k, kk, nkv * 4), *V = dev(k, v, nkv * 4);
    float *G = dev(k, g, no * 4), *O = dev(k, NULL, no * 4);
    float *A = dev(k, NULL, B * c.NH * T * r.Tk * 4), *S = dev(k, NULL, B * c.NH * T * r.Tk * 4);
    float *dQ = dev(k, q, nq * 4), *dK = dev(k, kk, nkv * 4), *dV = dev(k, v, nkv * 4);
    if (ck("gqa_fwd", k->gqa_fwd(k, O, A, Q, K, V, r.ldq, r.ldkv, B, T, c.NH, c.KV, c.HS, r.pp)) &&
        ck("gqa_bwd", k->gqa_bwd(k, dQ, dK, dV, S, G, Q, K, V, A, r.ldq, r.ldkv, B, T, c.NH,
                                 c.KV, c.HS, r.pp))) {
      back(k, mo, O, no * 4), back(k, mq, dQ, nq * 4);
      back(k, mk, dK, nkv * 4), back(k, mv, dV, nkv * 4);
      double *md = NEWD(nq > nkv ? nq : nkv);
      const float *mat[4] = {mo, mq, mk, mv}, *fl[4] = {o.out, o.dq, o.dk, o.dv};
      int64_t n4[4] = {no, nq, nkv, nkv};
      const char *n4m[4] = {"out", "dq", "dk", "dv"};
      for (int i = 0; i < 4; i++) {
        for (int64_t j = 0; j < n4[i]; j++) md[j] = mat[i][j];
        snprintf(name, sizeof name, "flash = materialised %s %s", n4m[i], tag);
        e = rel_err(fl[i], md, n4[i]);
        report(e <= t_mat, name, e, t_mat);
      }
      free(md);
    }
    void *bufs[] = {Q, K, V, G, O, A, S, dQ, dK, dV};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) k->free(k, bufs[i]);
    free(att), free(scr), free(mo), free(mq), free(mk), free(mv);
  }
  if (g_cpu) { /* a device's kernels against the CPU's */
    fres h = res_new(&r);
    if (run_flash(g_cpu, &r, q, kk, v, g, &h)) {
      const float *dv_[5] = {o.out, o.lse, o.dq, o.dk, o.dv}, *cv_[5] = {h.out, h.lse, h.dq, h.dk, h.dv};
      int64_t n5[5] = {no, nl, nq, nkv, nkv};
      const char *n5m[5] = {"out", "lse", "dq", "dk", "dv"};
      for (int i = 0; i < 5; i++) {
        double *cd = NEWD(n5[i]);
        for (int64_t j = 0; j < n5[i]; j++) cd[j] = cv_[i][j];
        double tol = t_cpu;
        snprintf(name, sizeof name, "flash %s = cpu %s %s", k->name, n5m[i], tag);
        e = rel_err(dv_[i], cd, n5[i]);
        report(e <= tol, name, e, tol);
        free(cd);
      }
    }
    res_free(&h);
  }
  { /* deterministic: the same bits again, and at other thread counts */
    fres again = res_new(&r);
    int same = run_flash(k, &r, q, kk, v, g, &again) && res_same(&r, &o, &again);
    int cpu = strcmp(k->name, "cpu") == 0, keep = omp_get_max_threads();
    for (int n = 1; cpu && n <= 3 && same; n++) {
      omp_set_num_threads(n);
      same = run_flash(k, &r, q, kk, v, g, &again) && res_same(&r, &o, &again);
    }
    omp_set_num_threads(keep);
    snprintf(name, sizeof name, "flash bitwise the same run to run%s %s",
             cpu ? " and at 1-3 threads" : "", tag);
    report(same, name, 0, 0);
    res_free(&again);
  }
  free(out), free(lse), free(dq), free(dk), free(dv);
done:
  res_free(&o);
  free(q), free(kk), free(v), free(g), free(r.q), free(r.k), free(r.v), free(r.R), free(r.doc);
}

/* Document starts outside [0, position] are refused (TD_ERR_USAGE). */
static void test_usage(td_kernels *k) {
  if (strcmp(k->name, "cpu") != 0) return; /* the device's doc array is not read on the host */
  float buf[64] = {0};
  int32_t doc[2] = {0, 2}; /* row 1 (position 1) cannot start at 2 */
  int ok = k->flash_fwd(k, buf, buf, buf, buf, buf, 4, 4, 1, 2, 2, 2, 2, NULL, doc,
                        TD_DTYPE_F32) == TD_ERR_USAGE;
  td_error_clear();
  ok &= k->flash_fwd(k, buf, buf, buf, buf, buf, 4, 4, 1, 2, 3, 2, 2, NULL, NULL, TD_DTYPE_F32) ==
        TD_ERR_USAGE;
  td_error_clear();
  ok &= k->flash_fwd(k, buf, buf, buf, buf, buf, 4, 4, 1, 2, 2, 2, 2, NULL, NULL, (td_dtype)7) ==
        TD_ERR_USAGE;
  td_error_clear();
  report(ok, "flash refuses a document start past its row, NH % KV != 0, an unknown products type", 0, 0);
}

int main(int argc, char **argv) {
  const char *device = argc > 1 ? argv[1] : "cpu";
  td_kernels *k = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(device, "cuda") == 0 && td_kernels_gpu_count() == 0) {
    printf("test_flash: no CUDA device visible; skipped\n");
    return 77;
  }
  if (td_kernels_create(device, 0, &k) != TD_OK) {
    printf("FAIL td_kernels_create(%s): %s\n", device, td_error_message());
    return 1;
  }
  if (strcmp(device, "cpu") != 0 && td_kernels_cpu_create(0, &g_cpu) != TD_OK) {
    printf("FAIL td_kernels_cpu_create: %s\n", td_error_message());
    return 1;
  }
  if (!k->flash_fwd || !k->flash_bwd) {
    printf("FAIL the %s back-end has no fused attention\n", device);
    return 1;
  }
  /* B T NH KV HS padq padkv cp docs noout bf16 */
  static const fcase cases[] = {
      {1, 1, 2, 1, 3, 0, 0, 0, 0, 0, 0},    {2, 7, 4, 2, 4, 3, 5, 0, 0, 0, 0},
      {2, 5, 4, 1, 3, 0, 2, 0, 1, 0, 0},    {1, 8, 3, 3, 4, 1, 0, 2, 0, 0, 0},
      {2, 8, 4, 2, 4, 0, 1, 4, 1, 1, 0},    {2, 63, 3, 3, 24, 0, 0, 0, 0, 0, 0},
      {1, 65, 4, 2, 24, 2, 3, 0, 1, 0, 0},  {2, 130, 2, 1, 80, 0, 0, 0, 0, 0, 0},
      {1, 130, 4, 4, 80, 5, 0, 0, 1, 1, 0}, {1, 300, 2, 2, 16, 0, 0, 2, 0, 0, 0},
      {1, 256, 4, 2, 32, 0, 0, 4, 1, 0, 0}, {2, 200, 3, 3, 64, 0, 0, 0, 0, 1, 0},
      {1, 300, 6, 2, 8, 0, 0, 0, 0, 0, 0},  {1, 64, 2, 1, 64, 0, 0, 0, 0, 0, 0},
      /* bf16 products (the CUDA back-end's tensor cores for HS % 16 == 0) */
      {2, 63, 4, 2, 16, 0, 0, 0, 0, 1, 1},  {1, 130, 4, 4, 64, 3, 0, 0, 1, 1, 1},
      {1, 128, 4, 2, 32, 0, 0, 4, 1, 1, 1}, {2, 100, 2, 1, 128, 0, 0, 2, 0, 1, 1},
      {1, 70, 2, 2, 48, 0, 4, 0, 0, 0, 1},  {1, 65, 4, 2, 24, 0, 0, 0, 0, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    test_case(k, cases[i], cases[i].T <= 8);
  test_usage(k);
  td_kernels_destroy(&k);
  td_kernels_destroy(&g_cpu);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
