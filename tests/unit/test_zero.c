/* test_zero.c — the collective layer (parallel/td_coll.h) and the ZeRO engine
 * (parallel/td_zero.h) on their own, over MPI_COMM_WORLD (dp = world), CPU
 * back-end. Run as mpiexec -n W test_zero for any W (CTest: 1, 2, 3, 4, 8).
 *
 * Collectives: all-reduce f32/f64 with MPI_SUM and MPI_MAX, broadcast from
 * the last rank, on the world and on a split communicator, zero-length
 * buffers, MPI_COMM_NULL, a NULL stats pointer, and the byte/call counters
 * (ring volume 2(p−1)/p·bytes for all-reduce, bytes for broadcast, nothing on
 * one rank or for zero elements); the staged all-reduce on a buffer of the
 * CPU back-end (td_coll_allreduce_f32_staged).
 *
 * Engine: for every space below and every stage 0–3, an engine over a
 * synthetic local space with uneven tensors and units (sizes not divisible
 * by dp, empty units, units smaller than dp so some ranks hold zero-length
 * parts of them, a space smaller than dp·16 so whole shards are padding),
 * parameters set from a host buffer, then three optimizer steps of 1, 3 and 1
 * micro-batches. Each micro-batch acquires/releases the units in forward
 * order, then in backward order adding known gradients
 * g = f(rank, index, micro, step) — multiples of 1/128, so every sum over
 * ranks and micro-batches is exact in float — into the unit gradient
 * pointers. Two access patterns: "sequential" (one unit at a time) and
 * "trainer" (unit 0 held for the whole pass and its gradient written at both
 * ends, the last unit in the middle, as app/model/model.c does), with the
 * persistent units {0, last} or none. After each step:
 *   - the owned gradients equal the exact sum over ranks and micro-batches
 *     (bitwise), and at stage 0 the full gradient buffer too;
 *   - td_zero_grad_sumsq equals Σ g² over the in_norm tensors (1e-12);
 *   - td_zero_scale_grads scales the owned gradients (bitwise);
 *   - after td_zero_adamw the owned parameters and moments equal a host
 *     reference computed with the back-end's AdamW (kernels/td_kernels.h) on
 *     the full space, tensor by tensor (bitwise: the update is elementwise);
 *     td_zero_params_full (stages 0–2) equals it on [0, n);
 *   - every parameter pointer given out by td_zero_acquire (stage 3: the
 *     gathered unit) equals the reference while the unit is held;
 *   - the bytes counted by the engine per step equal the ring volumes
 *     (stage 0: all-reduce 2(p−1)/p·4n; stage 1: reduce-scatter (p−1)/p·4n +
 *     all-gather (p−1)/p·4·npad; stage 2: reduce-scatter per micro-batch;
 *     stage 3: reduce-scatter per micro-batch, all-gather at least once per
 *     unit), plus the 8-byte norm all-reduce.
 * Also: td_zero_owned ranges partition [0, n) in rank order; td_zero_bytes
 * follows the shard rule S = ceil(n/dp) rounded up to 16; at stages 2–3 a
 * gradient slot is reused only after TD_ZERO_BLOCK_SLOTS later launches
 * (td_zero_slot_reuse_min: the slot launched longest ago goes first) and the
 * working buffers stay within 3 × 4 bytes × the persistent units +
 * 16 × 4 bytes × the largest other unit (the "embed-heavy" space: working
 * buffers sized by the largest unit would exceed it); after the steps, a
 * forward-only pass + td_zero_end_forward sees the updated parameters; the
 * final parameters are bitwise identical across stages; and parameters set
 * again (td_zero_set_params, or written into the owned/full buffer followed by
 * td_zero_gather_params) are what a later td_zero_acquire gives out.
 *
 * Under TD_TEST_DCOMM=1 every engine gets a device communicator over the
 * world (kernels/td_dcomm.h; here its test implementation, MPI's
 * non-blocking collectives completed only when joined): the code written for
 * NCCL, every check above the same, bit for bit.
 *
 * Offload: under TD_TEST_OFFLOAD=1 every engine offloads its optimizer
 * (opts.offload, opts.host = the same CPU back-end): the masters, moments
 * and the gradients' copy in host buffers of 16 bytes per owned element
 * (td_zero_host_bytes), no moments in the back-end's memory, AdamW on the
 * host, the parameters uploaded and gathered — every check above the same,
 * bit for bit (CTest zero_offload, also with staging and device
 * collectives).
 *
 * Staging: under TD_TEST_STAGED=1 the CPU back-end reports host_memory 0 and
 * the engine hands MPI only its host staging copies (parallel/zero.c); every
 * check above must hold unchanged, bit for bit, the working bytes counting
 * the copies (at dp > 1 one of the full buffer at stages 0–2 and one of the
 * gradient shard at stage 1; at stages 2–3 those of the slots) exactly as a
 * size query with opts.staged does. CTest zero_staged_np2.
 *
 * Every check is agreed over all ranks (in batches); rank 0 prints one line per check and
 * "N passed, M failed"; the exit status is non-zero on any failure. */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "parallel/td_zero.h"
#include "td_error.h"

static int g_pass, g_fail, g_rank, g_size;
static struct td_dcomm *g_dc; /* TD_TEST_DCOMM=1: the engines' device communicator */
static int g_offload;         /* TD_TEST_OFFLOAD=1: the engines offload the optimizer */

/* Checks are agreed over all ranks in batches (one all-reduce per batch, not
 * per check: at 8 ranks on 2 cores every collective is slow); rank 0 prints
 * them in order at the flush. The failing rank gives its detail on stderr at
 * once. */
#define MAXPEND 128
static char g_name[MAXPEND][200];
static int g_ok[MAXPEND], g_npend;

static void flush_checks(void) {
  int all[MAXPEND];
  if (g_npend == 0) return;
  MPI_Allreduce(g_ok, all, g_npend, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  for (int i = 0; i < g_npend; ++i) {
    if (all[i]) ++g_pass;
    else ++g_fail;
    if (g_rank == 0) printf("%s %s\n", all[i] ? "ok  " : "FAIL", g_name[i]);
  }
  if (g_rank == 0) fflush(stdout);
  g_npend = 0;
}

/* Record a check (the local verdict is returned; flush_checks agrees). */
static int check(int ok, const char *detail, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int check(int ok, const char *detail, const char *fmt, ...) {
  if (g_npend == MAXPEND) flush_checks();
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_name[g_npend], sizeof g_name[0], fmt, ap);
  va_end(ap);
  if (!ok && detail && detail[0]) fprintf(stderr, "[rank %d] %s: %s\n", g_rank, g_name[g_npend], detail);
  g_ok[g_npend++] = ok != 0;
  return ok;
}

/* A check every rank must agree on at once (it decides what runs next). */
static int check_now(int ok, const char *detail, const char *name) {
  check(ok, detail, "%s", name);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  flush_checks();
  return all;
}

static int close_rel(double a, double b, double rel) {
  double d = fabs(a - b), m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  return d <= rel * (m > 0 ? m : 1.0);
}

/* Compare got[0..n) with want[0..n) bit for bit; on a mismatch describe the first. */
static int same_floats(const float *got, const float *want, int64_t n, int64_t base, char *detail,
                       size_t cap) {
  for (int64_t i = 0; i < n; ++i)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      int64_t bad = 0;
      double worst = 0;
      for (int64_t j = i; j < n; ++j)
        if (memcmp(&got[j], &want[j], sizeof(float)) != 0) {
          ++bad;
          double d = fabs((double)got[j] - (double)want[j]);
          if (d > worst) worst = d;
        }
      snprintf(detail, cap, "element %lld: got %.9g, expected %.9g (%lld of %lld differ, max |diff| %g)",
               (long long)(base + i), got[i], want[i], (long long)bad, (long long)n, worst);
      return 0;
    }
  return 1;
}

/* ======================================================================== */
/* Collectives                                                              */
/* ======================================================================== */

static void test_coll(MPI_Comm comm, const char *cname) {
  int p = 1, r = 0;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  char d[512] = "";
  td_coll_stats s;
  memset(&s, 0, sizeof s);
  const int64_t n = 1003;
  float *f = malloc(n * sizeof *f);
  double *x = malloc(n * sizeof *x);
  double ring = 2.0 * (p - 1) / p;

  /* f32 sum */
  for (int64_t i = 0; i < n; ++i) f[i] = (float)r + 0.5f * (float)i;
  td_status st = td_coll_allreduce_f32(comm, f, n, MPI_SUM, &s);
  int ok = st == TD_OK;
  for (int64_t i = 0; ok && i < n; ++i) {
    float want = (float)(p * (p - 1) / 2) + (float)p * 0.5f * (float)i;
    if (f[i] != want) {
      ok = 0;
      snprintf(d, sizeof d, "element %lld: %g, expected %g", (long long)i, f[i], want);
    }
  }
  check(ok, d, "coll %s: allreduce f32 sum of %lld", cname, (long long)n);
  double want_b = p > 1 ? ring * n * 4.0 : 0.0;
  int64_t want_c = p > 1 ? 1 : 0;
  snprintf(d, sizeof d, "bytes %.1f calls %lld, expected %.1f, %lld", s.bytes[TD_COLL_ALLREDUCE],
           (long long)s.calls[TD_COLL_ALLREDUCE], want_b, (long long)want_c);
  check(close_rel(s.bytes[TD_COLL_ALLREDUCE], want_b, 1e-12) && s.calls[TD_COLL_ALLREDUCE] == want_c,
        d, "coll %s: allreduce f32 counts 2(p-1)/p*bytes", cname);

  /* f32 max */
  for (int64_t i = 0; i < n; ++i) f[i] = (float)((r * 31 + i) % 97) - 40.0f;
  st = td_coll_allreduce_f32(comm, f, n, MPI_MAX, &s);
  ok = st == TD_OK;
  for (int64_t i = 0; ok && i < n; ++i) {
    float want = -1e30f;
    for (int q = 0; q < p; ++q) {
      float v = (float)((q * 31 + i) % 97) - 40.0f;
      if (v > want) want = v;
    }
    if (f[i] != want) {
      ok = 0;
      snprintf(d, sizeof d, "element %lld: %g, expected %g", (long long)i, f[i], want);
    }
  }
  check(ok, d, "coll %s: allreduce f32 max", cname);

  /* f64 sum and max */
  td_coll_stats s2;
  memset(&s2, 0, sizeof s2);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.25 * r + (double)i;
  st = td_coll_allreduce_f64(comm, x, n, MPI_SUM, &s2);
  ok = st == TD_OK;
  for (int64_t i = 0; ok && i < n; ++i) {
    double want = 0.25 * p * (p - 1) / 2 + (double)p * i;
    if (x[i] != want) {
      ok = 0;
      snprintf(d, sizeof d, "element %lld: %.17g, expected %.17g", (long long)i, x[i], want);
    }
  }
  check(ok, d, "coll %s: allreduce f64 sum", cname);
  check(close_rel(s2.bytes[TD_COLL_ALLREDUCE], p > 1 ? ring * n * 8.0 : 0.0, 1e-12), "",
        "coll %s: allreduce f64 counts 2(p-1)/p*8n bytes", cname);
  for (int64_t i = 0; i < n; ++i) x[i] = (r == (int)(i % p)) ? 1e300 : -(double)r;
  st = td_coll_allreduce_f64(comm, x, n, MPI_MAX, &s2);
  ok = st == TD_OK;
  for (int64_t i = 0; ok && i < n; ++i)
    if (x[i] != 1e300) ok = 0, snprintf(d, sizeof d, "element %lld: %g", (long long)i, x[i]);
  check(ok, d, "coll %s: allreduce f64 max", cname);

  /* broadcast from the last rank */
  td_coll_stats s3;
  memset(&s3, 0, sizeof s3);
  for (int64_t i = 0; i < n; ++i) f[i] = r == p - 1 ? 1.5f * (float)i - 7.0f : -1.0f;
  st = td_coll_bcast_f32(comm, f, n, p - 1, &s3);
  ok = st == TD_OK;
  for (int64_t i = 0; ok && i < n; ++i)
    if (f[i] != 1.5f * (float)i - 7.0f) ok = 0, snprintf(d, sizeof d, "element %lld: %g", (long long)i, f[i]);
  check(ok, d, "coll %s: bcast f32 from rank %d", cname, p - 1);
  check(close_rel(s3.bytes[TD_COLL_BCAST], p > 1 ? 4.0 * n : 0.0, 1e-12) &&
            s3.calls[TD_COLL_BCAST] == (p > 1 ? 1 : 0),
        "", "coll %s: bcast counts 4n bytes", cname);

  /* zero-length buffers (NULL and not), MPI_COMM_NULL, NULL stats: succeed, count nothing */
  td_coll_stats s4;
  memset(&s4, 0, sizeof s4);
  ok = td_coll_allreduce_f32(comm, NULL, 0, MPI_SUM, &s4) == TD_OK;
  ok &= td_coll_allreduce_f32(comm, f, 0, MPI_MAX, &s4) == TD_OK;
  ok &= td_coll_allreduce_f64(comm, NULL, 0, MPI_SUM, &s4) == TD_OK;
  ok &= td_coll_bcast_f32(comm, NULL, 0, 0, &s4) == TD_OK;
  float one = (float)r;
  ok &= td_coll_allreduce_f32(MPI_COMM_NULL, &one, 1, MPI_SUM, &s4) == TD_OK && one == (float)r;
  ok &= td_coll_bcast_f32(MPI_COMM_NULL, &one, 1, 0, &s4) == TD_OK && one == (float)r;
  double tb = -1, tm = -1;
  td_coll_stats_total(&s4, &tb, &tm);
  int64_t calls = 0;
  for (int kk = 0; kk < TD_COLL_KINDS; ++kk) calls += s4.calls[kk];
  snprintf(d, sizeof d, "bytes %g calls %lld", tb, (long long)calls);
  check(ok && tb == 0.0 && calls == 0, d, "coll %s: zero-length buffers and MPI_COMM_NULL count nothing",
        cname);
  float y = 2.0f;
  ok = td_coll_allreduce_f32(comm, &y, 1, MPI_SUM, NULL) == TD_OK && y == 2.0f * (float)p;
  check(ok, "", "coll %s: NULL stats accepted", cname);

  /* totals */
  td_coll_stats_total(&s, &tb, &tm);
  double want_t = s.bytes[TD_COLL_ALLREDUCE];
  check(tb == want_t && tm >= 0.0 && s.ms[TD_COLL_ALLREDUCE] >= 0.0, "",
        "coll %s: td_coll_stats_total sums the kinds", cname);
  free(f);
  free(x);
}

/* ======================================================================== */
/* The ZeRO engine                                                          */
/* ======================================================================== */

#define MAXT 64
#define MAXU 32

typedef struct {
  char name[64];
  int64_t n;
  int nt;
  td_zero_tensor t[MAXT];
  int nu;
  int64_t ub[MAXU], ue[MAXU];
  int trainer;        /* access pattern: app/model/model.c's (unit 0 held, last unit first in backward) */
  int persistent;     /* persistent units {0, nu-1} (else none) */
  double bucket_bytes;
} space;

static void add_tensor(space *s, int64_t numel, int decay, int in_norm) {
  td_zero_tensor *t = &s->t[s->nt++];
  t->offset = s->n, t->numel = numel, t->decay = decay, t->in_norm = in_norm;
  s->n += numel;
}
/* Close the unit started at `begin` (the tensors added since). */
static void add_unit(space *s, int64_t begin) {
  s->ub[s->nu] = begin, s->ue[s->nu] = s->n;
  s->nu++;
}
static void add_empty_unit(space *s) {
  s->ub[s->nu] = INT64_MAX, s->ue[s->nu] = 0; /* what app/model/model.c gives other stages' units */
  s->nu++;
}

/* "uneven": 1237 elements, units of 361, 253, (empty), 1, 400, 215, 7. */
static space space_uneven(int trainer, int persistent) {
  space s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "uneven n=1237 %s%s", trainer ? "trainer" : "sequential",
           persistent ? "+persistent" : "");
  s.trainer = trainer, s.persistent = persistent, s.bucket_bytes = 1e9;
  int64_t b = s.n;
  add_tensor(&s, 300, 1, 1), add_tensor(&s, 61, 0, 1);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 3, 0, 1), add_tensor(&s, 250, 1, 1);
  add_unit(&s, b), b = s.n;
  add_empty_unit(&s);
  add_tensor(&s, 1, 0, 0);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 400, 1, 1);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 5, 0, 0), add_tensor(&s, 210, 1, 1);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 7, 0, 1);
  add_unit(&s, b);
  return s;
}

/* "tiny": 37 elements (< dp·16 from dp 3 on: whole shards are padding), units 20, 1, 2, 14. */
static space space_tiny(int trainer, int persistent) {
  space s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "tiny n=37 %s%s", trainer ? "trainer" : "sequential",
           persistent ? "+persistent" : "");
  s.trainer = trainer, s.persistent = persistent, s.bucket_bytes = 64; /* many buckets */
  int64_t b = s.n;
  add_tensor(&s, 20, 1, 1);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 1, 0, 1);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 2, 1, 0);
  add_unit(&s, b), b = s.n;
  add_tensor(&s, 14, 1, 1);
  add_unit(&s, b);
  return s;
}

/* "blocks": a small transformer-like space: embeddings, 5 blocks of 8 tensors, ln_f. */
static space space_blocks(void) {
  space s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "blocks n=%s trainer+persistent", "17k");
  s.trainer = 1, s.persistent = 1, s.bucket_bytes = 4096;
  int64_t b = s.n;
  add_tensor(&s, 5003, 1, 1), add_tensor(&s, 257, 1, 1);
  add_unit(&s, b);
  for (int l = 0; l < 5; ++l) {
    b = s.n;
    add_tensor(&s, 33, 0, 1), add_tensor(&s, 33, 0, 1);
    add_tensor(&s, 1000 + 7 * l, 1, 1), add_tensor(&s, 31, 0, 1);
    add_tensor(&s, 2001, 1, 1), add_tensor(&s, 17, 0, 1);
    add_tensor(&s, 5, 0, l % 2), add_tensor(&s, 3, 1, 1);
    add_unit(&s, b);
  }
  b = s.n;
  add_tensor(&s, 33, 0, 1), add_tensor(&s, 33, 0, 1);
  add_unit(&s, b);
  return s;
}

/* "embed-heavy": a large embedding unit (as GPT-2's wte, vocab × dim) and
 * small blocks, so working buffers sized by the largest unit would be many
 * embeddings: 20000 + 4 blocks of ~600 + a final unit of 66. */
static space space_embed_heavy(void) {
  space s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "embed-heavy n=%s trainer+persistent", "22k");
  s.trainer = 1, s.persistent = 1, s.bucket_bytes = 4096;
  int64_t b = s.n;
  add_tensor(&s, 19937, 1, 1), add_tensor(&s, 63, 1, 1);
  add_unit(&s, b);
  for (int l = 0; l < 4; ++l) {
    b = s.n;
    add_tensor(&s, 33, 0, 1), add_tensor(&s, 500 + l, 1, 1), add_tensor(&s, 67, 0, 1);
    add_unit(&s, b);
  }
  b = s.n;
  add_tensor(&s, 33, 0, 1), add_tensor(&s, 33, 0, 1);
  add_unit(&s, b);
  return s;
}

static int uempty(const space *s, int u) { return s->ub[u] >= s->ue[u]; }

/* The known gradient: a multiple of 1/64 in [−1/8, 1/8]. */
static float gval(int rank, int64_t i, int micro, int step) {
  return (float)((rank * 7 + i * 13 + micro * 5 + step * 3) % 17 - 8) / 64.0f;
}

typedef struct {
  const space *sp;
  td_zero *z;
  const float *pref; /* parameters the acquired units must show */
  int64_t bad, acquires, errors;
  char detail[512];
} pass_ctx;

static void note_error(pass_ctx *c, const char *what, int u) {
  if (c->errors++ == 0)
    snprintf(c->detail, sizeof c->detail, "%s(unit %d) failed: %s", what, u, td_error_message());
  td_error_clear();
}

static void check_unit_params(pass_ctx *c, int u, const float *p) {
  const space *s = c->sp;
  if (uempty(s, u)) return;
  c->acquires++;
  if (!p) {
    if (c->bad++ == 0) snprintf(c->detail, sizeof c->detail, "unit %d: NULL parameter pointer", u);
    return;
  }
  for (int64_t i = 0; i < s->ue[u] - s->ub[u]; ++i)
    if (memcmp(&p[i], &c->pref[s->ub[u] + i], sizeof(float)) != 0) {
      if (c->bad++ == 0)
        snprintf(c->detail, sizeof c->detail, "unit %d element %lld: acquired %.9g, expected %.9g",
                 u, (long long)(s->ub[u] + i), p[i], c->pref[s->ub[u] + i]);
      return;
    }
}

static void acq(pass_ctx *c, int u, int bwd, float **p, float **g) {
  *p = NULL;
  if (g) *g = NULL;
  if (td_zero_acquire(c->z, u, bwd, (void **)p, g) != TD_OK) note_error(c, "td_zero_acquire", u);
  check_unit_params(c, u, *p);
}
static void rel(pass_ctx *c, int u, int bwd) {
  if (td_zero_release(c->z, u, bwd) != TD_OK) note_error(c, "td_zero_release", u);
}

static void add_grads(pass_ctx *c, int u, float *g, int j, int step, float frac) {
  const space *s = c->sp;
  if (uempty(s, u) || !g) return;
  for (int64_t i = 0; i < s->ue[u] - s->ub[u]; ++i) g[i] += frac * gval(g_rank, s->ub[u] + i, j, step);
}

static void forward(pass_ctx *c) {
  const space *s = c->sp;
  float *p = NULL, *p0 = NULL;
  if (!s->trainer) {
    for (int u = 0; u < s->nu; ++u) acq(c, u, 0, &p, NULL), rel(c, u, 0);
    return;
  }
  int U = s->nu - 1;
  acq(c, 0, 0, &p0, NULL);
  for (int u = 1; u < U; ++u) acq(c, u, 0, &p, NULL), rel(c, u, 0);
  acq(c, U, 0, &p, NULL);
  check_unit_params(c, 0, p0); /* still valid while held */
  rel(c, U, 0);
  rel(c, 0, 0);
}

static void backward(pass_ctx *c, int j, int step) {
  const space *s = c->sp;
  float *p = NULL, *g = NULL;
  if (!s->trainer) {
    for (int u = s->nu - 1; u >= 0; --u) {
      acq(c, u, 1, &p, &g);
      add_grads(c, u, g, j, step, 1.0f);
      check_unit_params(c, u, p);
      rel(c, u, 1);
    }
    return;
  }
  int U = s->nu - 1;
  float *p0 = NULL, *g0 = NULL;
  acq(c, 0, 1, &p0, &g0);
  acq(c, U, 1, &p, &g);
  add_grads(c, U, g, j, step, 1.0f);
  add_grads(c, 0, g0, j, step, 0.5f); /* the LM head's share of the tied embedding */
  rel(c, U, 1);
  for (int u = U - 1; u >= 1; --u) {
    acq(c, u, 1, &p, &g);
    add_grads(c, u, g, j, step, 1.0f);
    check_unit_params(c, u, p);
    rel(c, u, 1);
  }
  add_grads(c, 0, g0, j, step, 0.5f); /* the embedding's share */
  check_unit_params(c, 0, p0);
  rel(c, 0, 1);
}

/* Check the owned range [b, e) of `got` (indexed from b) against ref[b..e). */
static int check_owned(const float *got, const float *ref, int64_t b, int64_t e, const char *fmt_name,
                       const char *label) {
  char d[512] = "";
  int ok = e <= b || (got && same_floats(got, ref + b, e - b, b, d, sizeof d));
  if (!ok && !got) snprintf(d, sizeof d, "NULL pointer");
  return check(ok, d, "%s: %s", label, fmt_name);
}

/* Zero-run: one engine for (space, stage); `final` receives the final parameters. */
static void run_engine(const space *sp, int stage, td_kernels *k, float *final) {
  char label[160];
  snprintf(label, sizeof label, "zero%d %s", stage, sp->name);
  const int64_t n = sp->n;
  const int p = g_size;
  int64_t S = ((n + p - 1) / p + 15) / 16 * 16;
  if (S == 0) S = 16;
  const int64_t npad = S * p;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.75f;

  td_zero_opts o;
  memset(&o, 0, sizeof o);
  o.stage = stage;
  o.dp_comm = MPI_COMM_WORLD;
  o.bucket_bytes = sp->bucket_bytes;
  o.n = n;
  o.ntensors = sp->nt;
  o.tensors = sp->t;
  o.nunits = sp->nu;
  o.unit_begin = sp->ub;
  o.unit_end = sp->ue;
  o.persistent_units[0] = sp->persistent ? 0 : -1;
  o.persistent_units[1] = sp->persistent ? sp->nu - 1 : -1;
  o.dcomm = g_dc;
  o.offload = g_offload;
  o.host = g_offload ? k : NULL;
  td_coll_stats stats;
  memset(&stats, 0, sizeof stats);
  td_zero *z = NULL;
  td_status st = td_zero_create(&o, k, &stats, &z);
  char cname[200];
  snprintf(cname, sizeof cname, "%s: td_zero_create", label);
  if (!check_now(st == TD_OK && z, td_error_message(), cname)) {
    td_error_clear();
    td_zero_destroy(&z);
    return;
  }

  float *pref = calloc((size_t)n + 1, sizeof(float)), *mref = calloc((size_t)n + 1, sizeof(float));
  float *vref = calloc((size_t)n + 1, sizeof(float)), *gref = calloc((size_t)n + 1, sizeof(float));
  float *host = calloc((size_t)n + 1, sizeof(float));
  for (int64_t i = 0; i < n; ++i) pref[i] = (float)((i * 37) % 101 - 50) / 128.0f;
  check(td_zero_set_params(z, pref) == TD_OK, td_error_message(), "%s: td_zero_set_params", label);
  td_error_clear();

  /* ownership: a partition of [0, n) in rank order, shards of S */
  int64_t ob = -1, oe = -1;
  td_zero_owned(z, &ob, &oe);
  int64_t *all = malloc(2 * sizeof(int64_t) * (size_t)p), mine[2] = {ob, oe};
  MPI_Allgather(mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T, MPI_COMM_WORLD);
  int ok = all[0] == 0 && all[2 * (p - 1) + 1] == n;
  char d[512] = "";
  for (int r = 0; r < p; ++r) {
    int64_t b = all[2 * r], e = all[2 * r + 1];
    int64_t wb = (int64_t)r * S < n ? (int64_t)r * S : n, we = (int64_t)(r + 1) * S < n ? (int64_t)(r + 1) * S : n;
    if (b > e || (r > 0 && b != all[2 * r - 1]) || b != wb || e != we) {
      ok = 0;
      snprintf(d, sizeof d, "rank %d owns [%lld, %lld), expected [%lld, %lld)", r, (long long)b,
               (long long)e, (long long)wb, (long long)we);
    }
  }
  check(ok, d, "%s: td_zero_owned partitions [0, %lld) into shards of S=%lld", label, (long long)n,
        (long long)S);
  free(all);

  /* memory accounting: the shard rule */
  int64_t bp = -1, bg = -1, bo = -1, bw = -1;
  td_zero_bytes(z, &bp, &bg, &bo, &bw);
  int64_t wp = 4 * (stage < 3 ? npad : S), wg = 4 * ((stage < 2 ? npad : 0) + (stage >= 1 ? S : 0));
  int64_t wo = g_offload ? 0 : 8 * (stage == 0 ? npad : S);
  if (g_offload) { /* masters, moments, gradients' copy: on the host, counted apart */
    int64_t hb = td_zero_host_bytes(z), want = 16 * (stage == 0 ? npad : S);
    snprintf(d, sizeof d, "host %lld bytes, expected %lld", (long long)hb, (long long)want);
    check(hb == want, d, "%s: offload: td_zero_host_bytes = 16 bytes per owned element", label);
  }
  /* staging adds host copies to the work bytes: bw_dev, the back-end's
   * share, from a size query without staging; a size query with
   * opts.staged must count exactly what the staged engine allocated */
  int staged = !k->host_memory;
  int64_t bw_dev = bw;
  if (staged) {
    td_zero_opts qo = o;
    int64_t q[2][4] = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
    for (int i = 0; i < 2; ++i) {
      td_zero *qz = NULL;
      qo.staged = i;
      if (td_zero_create(&qo, NULL, NULL, &qz) == TD_OK)
        td_zero_bytes(qz, &q[i][0], &q[i][1], &q[i][2], &q[i][3]);
      td_error_clear();
      td_zero_destroy(&qz);
    }
    bw_dev = q[0][3];
    /* the copies of the full buffer (stages 0–2) and the gradient shard (stage 1), at dp > 1 */
    int64_t ws = 4 * ((stage <= 2 && p > 1 ? npad : 0) + (stage == 1 && p > 1 ? S : 0));
    snprintf(d, sizeof d, "work %lld, size query with staging %lld, without %lld (+%lld expected%s)",
             (long long)bw, (long long)q[1][3], (long long)bw_dev, (long long)ws,
             stage >= 2 ? " + the slots' copies" : "");
    check(q[1][3] == bw && (stage >= 2 ? bw - bw_dev > ws : bw - bw_dev == ws) &&
              q[1][0] == bp && q[1][1] == bg && q[1][2] == bo,
          d, "%s: staging copies counted as work, as the size query counts them", label);
  }
  snprintf(d, sizeof d,
           "param %lld grad %lld optim %lld work %lld, expected %lld %lld %lld (work %s)",
           (long long)bp, (long long)bg, (long long)bo, (long long)bw_dev, (long long)wp,
           (long long)wg, (long long)wo, stage >= 2 ? "> 0" : "0");
  check(bp == wp && bg == wg && bo == wo && (stage >= 2 ? bw_dev > 0 : bw_dev == 0), d,
        "%s: td_zero_bytes follows the shard rule", label);
  check((td_zero_params_full(z) != NULL) == (stage < 3) && (td_zero_grads_full(z) != NULL) == (stage < 2),
        "", "%s: full buffers exist exactly where the stage keeps them", label);

  pass_ctx c;
  memset(&c, 0, sizeof c);
  c.sp = sp, c.z = z, c.pref = pref;
  int64_t units_n = 0;
  for (int u = 0; u < sp->nu; ++u)
    if (!uempty(sp, u)) units_n += sp->ue[u] - sp->ub[u];

  const int micro_of[3] = {1, 3, 1};
  for (int step = 1; step <= 3; ++step) {
    int micro = micro_of[step - 1];
    char sl[200];
    snprintf(sl, sizeof sl, "%s step %d (%d micro)", label, step, micro);
    td_coll_stats before = stats;
    c.bad = c.acquires = c.errors = 0;
    c.detail[0] = '\0';
    if (td_zero_begin_step(z, micro) != TD_OK) note_error(&c, "td_zero_begin_step", -1);
    for (int j = 0; j < micro; ++j) {
      if (td_zero_begin_micro(z, j) != TD_OK) note_error(&c, "td_zero_begin_micro", -1);
      forward(&c);
      backward(&c, j, step);
    }
    if (td_zero_finish_grads(z) != TD_OK) note_error(&c, "td_zero_finish_grads", -1);
    check(c.errors == 0 && c.bad == 0 && c.acquires > 0, c.detail,
          "%s: acquired parameters equal the reference (%lld acquires)", sl, (long long)c.acquires);

    /* the reference gradients: exact sums */
    for (int64_t i = 0; i < n; ++i) {
      float g = 0.0f;
      for (int r = 0; r < p; ++r)
        for (int j = 0; j < micro; ++j) g += gval(r, i, j, step);
      gref[i] = g;
    }
    td_zero_owned(z, &ob, &oe);
    check_owned(td_zero_owned_grads(z), gref, ob, oe, "owned gradients = exact sum over ranks", sl);
    if (stage == 0) check_owned(td_zero_grads_full(z), gref, 0, n, "full gradients = exact sum", sl);

    double ss = -1.0, want = 0.0;
    st = td_zero_grad_sumsq(z, &ss);
    for (int t = 0; t < sp->nt; ++t)
      if (sp->t[t].in_norm)
        for (int64_t i = sp->t[t].offset; i < sp->t[t].offset + sp->t[t].numel; ++i)
          want += (double)gref[i] * gref[i];
    snprintf(d, sizeof d, "%.17g, expected %.17g (%s)", ss, want, st == TD_OK ? "ok" : td_error_message());
    check(st == TD_OK && close_rel(ss, want, 1e-12), d, "%s: grad_sumsq = sum of g^2 over in_norm tensors", sl);
    td_error_clear();

    st = td_zero_scale_grads(z, gscale);
    for (int64_t i = 0; i < n; ++i) gref[i] *= gscale;
    check_owned(st == TD_OK ? td_zero_owned_grads(z) : NULL, gref, ob, oe, "scale_grads", sl);

    st = td_zero_adamw(z, 0.5f, lr, b1, b2, eps, wd, step); /* and a clip coefficient */
    check(st == TD_OK, td_error_message(), "%s: td_zero_adamw", sl);
    td_error_clear();
    for (int t = 0; t < sp->nt; ++t) {
      const td_zero_tensor *x = &sp->t[t];
      k->adamw(k, pref + x->offset, gref + x->offset, mref + x->offset, vref + x->offset, x->numel,
               0.5f, lr, b1, b2, eps, x->decay ? wd : 0.0f, step);
    }
    check_owned(td_zero_owned_params(z), pref, ob, oe, "owned parameters after AdamW = host reference", sl);
    check_owned(td_zero_owned_exp_avg(z), mref, ob, oe, "owned exp_avg = host reference", sl);
    check_owned(td_zero_owned_exp_avg_sq(z), vref, ob, oe, "owned exp_avg_sq = host reference", sl);
    if (stage < 3) check_owned(td_zero_params_full(z), pref, 0, n, "full parameters after AdamW", sl);

    /* bytes counted this step vs the ring volumes */
    double f1 = (double)(p - 1) / p, dar = stats.bytes[TD_COLL_ALLREDUCE] - before.bytes[TD_COLL_ALLREDUCE];
    double drs = stats.bytes[TD_COLL_REDUCE_SCATTER] - before.bytes[TD_COLL_REDUCE_SCATTER];
    double dag = stats.bytes[TD_COLL_ALLGATHER] - before.bytes[TD_COLL_ALLGATHER];
    double norm_b = 2.0 * f1 * 8.0, w_ar = norm_b, w_rs = 0, w_ag = 0;
    if (stage == 0) w_ar += 2.0 * f1 * 4.0 * units_n;
    if (stage == 1) w_rs = f1 * 4.0 * units_n, w_ag = f1 * 4.0 * npad;
    if (stage == 2) w_rs = micro * f1 * 4.0 * units_n, w_ag = f1 * 4.0 * npad;
    if (stage == 3) w_rs = micro * f1 * 4.0 * units_n, w_ag = f1 * 4.0 * units_n; /* at least */
    snprintf(d, sizeof d, "allreduce %.1f reduce_scatter %.1f allgather %.1f, expected %.1f %.1f %.1f%s",
             dar, drs, dag, w_ar, w_rs, w_ag, stage == 3 ? " (allgather at least)" : "");
    ok = close_rel(dar, w_ar, 1e-9) && close_rel(drs, w_rs, 1e-9) &&
         (stage == 3 ? dag >= w_ag * (1 - 1e-9) : close_rel(dag, w_ag, 1e-9));
    check(ok, d, "%s: bytes counted = ring volumes", sl);
  }

  /* a forward-only pass (evaluation) sees the updated parameters */
  c.bad = c.acquires = c.errors = 0;
  c.detail[0] = '\0';
  forward(&c);
  if (td_zero_end_forward(z) != TD_OK) note_error(&c, "td_zero_end_forward", -1);
  check(c.errors == 0 && c.bad == 0, c.detail, "%s: forward-only pass after the steps sees the updated parameters",
        label);

  /* the final parameters, assembled from the owned ranges */
  {
    int *cnt = malloc(sizeof(int) * (size_t)p), *dis = malloc(sizeof(int) * (size_t)p);
    int mc = (int)(oe - ob);
    MPI_Allgather(&mc, 1, MPI_INT, cnt, 1, MPI_INT, MPI_COMM_WORLD);
    dis[0] = 0;
    for (int r = 1; r < p; ++r) dis[r] = dis[r - 1] + cnt[r - 1];
    float dummy = 0;
    const float *op = td_zero_owned_params(z);
    MPI_Allgatherv(mc > 0 ? op : &dummy, mc, MPI_FLOAT, final, cnt, dis, MPI_FLOAT, MPI_COMM_WORLD);
    free(cnt);
    free(dis);
  }

  /* parameters set again: a later acquire gives the new values */
  for (int64_t i = 0; i < n; ++i) host[i] = pref[i] * 0.5f + 0.25f;
  c.bad = c.acquires = c.errors = 0;
  c.detail[0] = '\0';
  c.pref = host;
  if (td_zero_set_params(z, host) != TD_OK) note_error(&c, "td_zero_set_params", -1);
  forward(&c);
  if (td_zero_end_forward(z) != TD_OK) note_error(&c, "td_zero_end_forward", -1);
  check(c.errors == 0 && c.bad == 0, c.detail,
        "%s: td_zero_set_params after use: acquire gives the new parameters", label);

  /* parameters loaded as a checkpoint does: the owned range (stage 0: whole), then gather */
  for (int64_t i = 0; i < n; ++i) host[i] = pref[i] * -0.5f + 0.125f;
  c.bad = c.acquires = c.errors = 0;
  c.detail[0] = '\0';
  if (stage == 0) /* offload: the host masters cover the whole space at stage 0 */
    memcpy(g_offload ? td_zero_owned_params(z) - ob : td_zero_params_full(z), host,
           (size_t)n * sizeof(float));
  else if (oe > ob) memcpy(td_zero_owned_params(z), host + ob, (size_t)(oe - ob) * sizeof(float));
  if (td_zero_gather_params(z) != TD_OK) note_error(&c, "td_zero_gather_params", -1);
  forward(&c);
  if (td_zero_end_forward(z) != TD_OK) note_error(&c, "td_zero_end_forward", -1);
  check(c.errors == 0 && c.bad == 0, c.detail,
        "%s: owned parameters loaded + td_zero_gather_params: acquire gives them", label);
  if (stage < 3) check_owned(td_zero_params_full(z), host, 0, n, "full parameters after gather_params", label);

  if (stage >= 2) {
    /* gradient slots: the oldest reduction's slot is reused first, so each
     * reduction has at least TD_ZERO_BLOCK_SLOTS launches' time to finish */
    int nblock = 0;
    int64_t pmax = 0, bmax = 0;
    for (int u = 0; u < sp->nu; ++u) {
      if (uempty(sp, u)) continue;
      int pers = sp->persistent && (u == 0 || u == sp->nu - 1);
      int64_t e = sp->ue[u] - sp->ub[u];
      if (pers) pmax += e;
      if (!pers) nblock++, bmax = e > bmax ? e : bmax;
    }
    int64_t reuse = td_zero_slot_reuse_min(z);
    snprintf(d, sizeof d, "smallest reuse distance %lld launches (%d block units)",
             reuse == INT64_MAX ? -1LL : (long long)reuse, nblock);
    /* (the trainer's pattern without persistent units keeps unit 0 in a block
     * slot all pass, leaving one to rotate: not a configuration it uses) */
    if (sp->persistent || !sp->trainer)
      check(reuse >= TD_ZERO_BLOCK_SLOTS && (nblock <= TD_ZERO_BLOCK_SLOTS || reuse != INT64_MAX),
            d, "%s: a gradient slot is reused only after %d later launches", label,
            TD_ZERO_BLOCK_SLOTS);
    /* working buffers sized per use: at most three buffers per persistent
     * unit (gathered copy, gradient, reduce-scatter share: the embedding's
     * size counts three times, never more) and 16 block-sized ones */
    int64_t bound = 3 * 4 * pmax + 16 * 4 * bmax;
    snprintf(d, sizeof d, "work %lld bytes, bound 3·4·%lld (persistent units) + 16·4·%lld = %lld",
             (long long)bw_dev, (long long)pmax, (long long)bmax, (long long)bound);
    check(bw_dev <= bound, d, "%s: working buffers within 3 persistent + 16 block units", label);
  }
  td_zero_destroy(&z);
  check(z == NULL, "", "%s: td_zero_destroy", label);
  free(pref), free(mref), free(vref), free(gref), free(host);
  flush_checks();
}

/* td_coll_allreduce_f32_staged on a buffer of back-end k: the sum of the
 * f32 all-reduce above, whether k's memory is host memory or (under
 * TD_TEST_STAGED=1) goes through the host copy. */
static void test_coll_staged(td_kernels *k) {
  int p = g_size, r = g_rank;
  const int64_t n = 1003;
  float *dev = NULL, *h = malloc(n * sizeof *h), *stage = malloc(n * sizeof *stage);
  td_coll_stats s;
  memset(&s, 0, sizeof s);
  for (int64_t i = 0; i < n; ++i) h[i] = (float)r + 0.5f * (float)i;
  td_status st = k->alloc(k, (void **)&dev, n * sizeof(float), "staged all-reduce test");
  if (st == TD_OK) st = k->to_device(k, dev, h, n * sizeof(float));
  if (st == TD_OK) st = td_coll_allreduce_f32_staged(MPI_COMM_WORLD, k, dev, stage, n, MPI_SUM, &s);
  if (st == TD_OK) st = k->to_host(k, h, dev, n * sizeof(float));
  char d[512] = "";
  int ok = st == TD_OK;
  if (!ok) snprintf(d, sizeof d, "%s", td_error_message());
  for (int64_t i = 0; ok && i < n; ++i) {
    float want = (float)(p * (p - 1) / 2) + (float)p * 0.5f * (float)i;
    if (h[i] != want) {
      ok = 0;
      snprintf(d, sizeof d, "element %lld: %g, expected %g", (long long)i, h[i], want);
    }
  }
  ok = ok && s.calls[TD_COLL_ALLREDUCE] == (p > 1 ? 1 : 0);
  check(ok, d, "coll: allreduce f32 staged (%s memory) sum of %lld",
        k->host_memory ? "host" : "staged", (long long)n);
  td_error_clear();
  if (dev) k->free(k, dev);
  free(h);
  free(stage);
}

static void test_engine(const space *sp, td_kernels *k) {
  float *fin[4];
  for (int s = 0; s < 4; ++s) {
    fin[s] = calloc((size_t)sp->n + 1, sizeof(float));
    run_engine(sp, s, k, fin[s]);
  }
  for (int s = 1; s < 4; ++s) {
    char d[512] = "";
    int ok = same_floats(fin[s], fin[0], sp->n, 0, d, sizeof d);
    check(ok, d, "%s: final parameters of stage %d identical to stage 0", sp->name, s);
  }
  for (int s = 0; s < 4; ++s) free(fin[s]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_rank == 0) printf("test_zero: %d rank%s (dp = %d)\n", g_size, g_size == 1 ? "" : "s", g_size);

  /* collectives: the world, and halves of it */
  test_coll(MPI_COMM_WORLD, "world");
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
  test_coll(half, "split");
  MPI_Comm_free(&half);
  check(strcmp(td_coll_kind_name(TD_COLL_ALLREDUCE), "allreduce") == 0 &&
            strcmp(td_coll_kind_name(TD_COLL_REDUCE_SCATTER), "reduce_scatter") == 0 &&
            strcmp(td_coll_kind_name(TD_COLL_KINDS), "?") == 0,
        "", "coll: kind names");

  td_kernels *k = NULL;
  if (!check_now(td_kernels_cpu_create(1, &k) == TD_OK, td_error_message(), "CPU back-end")) {
    MPI_Finalize();
    return 1;
  }
  space spaces[] = {space_uneven(0, 0), space_uneven(1, 1), space_uneven(1, 0),
                    space_tiny(0, 0),   space_tiny(1, 1),   space_blocks(),
                    space_embed_heavy()};
  test_coll_staged(k);
  const char *off = getenv("TD_TEST_OFFLOAD");
  g_offload = off && strcmp(off, "1") == 0;
  if (g_offload && g_rank == 0) printf("test_zero: engines offload the optimizer to the host\n");
  const char *dc = getenv("TD_TEST_DCOMM");
  if (dc && strcmp(dc, "1") == 0) {
    td_status st = td_dcomm_create(MPI_COMM_WORLD, k, TD_DCOMM_TEST_MPI, "data-parallel", &g_dc);
    check_now(st == TD_OK && g_dc, td_error_message(), "device communicator (test implementation)");
    if (g_rank == 0) printf("test_zero: engines on device collectives (%s)\n", g_dc ? "mpi" : "none");
  }
  for (size_t i = 0; i < sizeof spaces / sizeof spaces[0]; ++i) test_engine(&spaces[i], k);
  td_dcomm_destroy(&g_dc);
  td_kernels_destroy(&k);

  flush_checks();
  if (g_rank == 0) printf("%d passed, %d failed\n", g_pass, g_fail);
  MPI_Finalize();
  return g_fail ? 1 : 0;
}
