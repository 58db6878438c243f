/* test_vocab_xent.c — the vocabulary-parallel cross-entropy (docs/architecture.md,
 * "Model": the cross-entropy runs on vocabulary shards without ever gathering
 * the full logits), exactly as app/model/model.c forms it:
 *
 *   rowmax  = xent_rowmax(shard)            → all-reduce MPI_MAX over tp
 *   sumexp, tlogit = xent_sumexp(shard)     → all-reduce SUM of both over tp
 *   loss(n) = log(sumexp) + rowmax − tlogit (in double, as the model does)
 *   dlogits = xent_bwd(shard, scale)
 *
 * Run as mpiexec -n P test_vocab_xent [DEVICE] (P = 1, 2, 3, 4, ...; DEVICE
 * defaults to "cpu"). For every tp dividing P, the world is split into P/tp
 * groups of tp consecutive ranks (as tp_comm is); each group draws its own
 * global logits (N rows, V columns), the same on every rank of the group.
 * Rank r of a group holds the padded shard the model uses: Vs = ceil(V/tp),
 * columns [r·Vs, r·Vs + Vs) ∩ [0, V), the rest of the Vs columns padding
 * (filled with 1e4 here, so a kernel that read it would be caught). V is
 * chosen not divisible by tp (3, 5, 7, 97, 251, 1001; also 250), so the last
 * shard is short and with V < tp·(tp−1) some shards are empty (Vvalid = 0).
 *
 * Rows mix ordinary logits, ±80 extremes (target alone at +80 among −80s:
 * loss ≈ 0; target at −80 among +80s: loss ≈ 160 + log(V−1); all +80; all
 * −80; the row max in another shard than the target), and targets that sweep
 * the first and last column of every shard, 0 and V−1. Every rank computes
 * an unsharded float64 reference of the whole problem and checks:
 *   - per-row loss: |loss − ref| ≤ 1e-6·max(1, |ref|); mean loss rel ≤ 1e-6;
 *   - every rank of the group holds bit-identical losses (the replicated
 *     parts of the model must not drift apart);
 *   - its gradient shard: max |d − ref| ≤ 1e-6 (scale 1 and 1/N), padding
 *     columns exactly 0, with dlogits a separate buffer (pre-filled with
 *     garbage; logits left untouched) and aliasing the logits as the model
 *     calls it.
 * Rank 0 prints one line per failed check (others on stderr too) and
 * "N passed, M failed" summed over all ranks; the exit status is non-zero on
 * any failure on any rank. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "td_error.h"

static long g_pass, g_fail;
static int g_rank;
static int g_printed;

#define EXPECT(cond, ...)                                                         \
  do {                                                                            \
    if (cond) {                                                                   \
      ++g_pass;                                                                   \
    } else {                                                                      \
      ++g_fail;                                                                   \
      if (g_printed++ < 40) {                                                     \
        fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__);    \
        fprintf(stderr, __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                      \
      }                                                                           \
    }                                                                             \
  } while (0)

/* Counter-based uniform in [0, 1): the same on every rank for the same key. */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static double urand(uint64_t seed, uint64_t i) {
  return (double)(mix64(seed * 0x100000001b3ull ^ mix64(i)) >> 11) * 0x1.0p-53;
}

enum { K_RANDOM, K_WIDE, K_TARGET_HIGH, K_TARGET_LOW, K_ALL_HIGH, K_ALL_LOW, K_MAX_ELSEWHERE,
       K_TINY_SPREAD, K_KINDS };
static const char *kind_name[K_KINDS] = {"random[-4,4]", "random[-80,80]", "target +80, rest -80",
                                         "target -80, rest +80", "all +80", "all -80",
                                         "+80 off-target", "random[-1e-3,1e-3]"};

/* Global problem: logits (N, V) float, targets (N). */
static void make_problem(uint64_t seed, int64_t N, int64_t V, int tp, float *L, int32_t *tgt,
                         int *kind) {
  int64_t Vs = (V + tp - 1) / tp;
  /* Target sweep: 0, V−1, and the first and last real column of every shard. */
  int64_t sweep[2 + 2 * 64], ns = 0;
  sweep[ns++] = 0;
  sweep[ns++] = V - 1;
  for (int r = 0; r < tp && r < 64; ++r) {
    int64_t a = (int64_t)r * Vs, b = a + Vs - 1 < V - 1 ? a + Vs - 1 : V - 1;
    if (a < V) {
      sweep[ns++] = a;
      sweep[ns++] = b;
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    int k = (int)(n % K_KINDS);
    kind[n] = k;
    int64_t t;
    if (n / K_KINDS % 2 == 0)
      t = sweep[(n / K_KINDS / 2 + n) % ns];
    else
      t = (int64_t)(urand(seed, (uint64_t)(N * V + n)) * (double)V);
    if (t >= V) t = V - 1;
    tgt[n] = (int32_t)t;
    float *row = L + n * V;
    for (int64_t j = 0; j < V; ++j) {
      double u = urand(seed, (uint64_t)(n * V + j));
      float x;
      switch (k) {
        case K_RANDOM: x = (float)(8.0 * u - 4.0); break;
        case K_WIDE: x = (float)(160.0 * u - 80.0); break;
        case K_TARGET_HIGH: x = j == t ? 80.0f : -80.0f; break;
        case K_TARGET_LOW: x = j == t ? -80.0f : 80.0f; break;
        case K_ALL_HIGH: x = 80.0f; break;
        case K_ALL_LOW: x = -80.0f; break;
        case K_MAX_ELSEWHERE: x = (float)(8.0 * u - 4.0); break;
        default: x = (float)(2e-3 * u - 1e-3); break;
      }
      row[j] = x;
    }
    if (k == K_MAX_ELSEWHERE && V > 1) {
      /* the maximum in the shard "opposite" the target's (another shard when tp > 1) */
      int64_t j = (t + V / 2 + Vs / 2) % V;
      if (j == t) j = (t + 1) % V;
      row[j] = 80.0f;
    }
  }
}

/* Float64 reference of the whole problem: loss (N), grad (N, V) for scale. */
static void reference(const float *L, const int32_t *tgt, int64_t N, int64_t V, double scale,
                      double *loss, double *grad) {
  for (int64_t n = 0; n < N; ++n) {
    const float *row = L + n * V;
    double m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = row[j] > m ? row[j] : m;
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j) s += exp((double)row[j] - m);
    double lse = m + log(s);
    loss[n] = lse - (double)row[tgt[n]];
    for (int64_t j = 0; j < V; ++j)
      grad[n * V + j] = scale * (exp((double)row[j] - lse) - (j == tgt[n] ? 1.0 : 0.0));
  }
}

#define CK(call)                                                                      \
  do {                                                                                \
    td_status s_ = (call);                                                            \
    if (s_ != TD_OK) {                                                                \
      EXPECT(0, "%s failed: %s (%s)", #call, td_status_name(s_), td_error_message()); \
      td_error_clear();                                                               \
      ok = 0;                                                                         \
      goto done;                                                                      \
    }                                                                                 \
  } while (0)

/* One case on group comm `tp_comm` (size tp, this rank r). Returns 0 when a
 * kernel or collective call failed (the group then agrees to stop). */
static int run_case(td_kernels *k, MPI_Comm tp_comm, uint64_t seed, int64_t N, int64_t V,
                    int alias, float scale) {
  int tp = 1, r = 0, ok = 1;
  MPI_Comm_size(tp_comm, &tp);
  MPI_Comm_rank(tp_comm, &r);
  int64_t Vs = (V + tp - 1) / tp, v0 = (int64_t)r * Vs;
  int64_t vvalid = V - v0 < Vs ? (V - v0 > 0 ? V - v0 : 0) : Vs; /* as app/model/model.c */
  char what[160];
  snprintf(what, sizeof what, "tp=%d rank %d V=%lld N=%lld Vs=%lld v0=%lld Vvalid=%lld %s scale=%g",
           tp, r, (long long)V, (long long)N, (long long)Vs, (long long)v0, (long long)vvalid,
           alias ? "aliased" : "separate", (double)scale);

  float *L = malloc(sizeof(float) * (size_t)(N * V));
  int32_t *tgt = malloc(sizeof(int32_t) * (size_t)N);
  int *kind = malloc(sizeof(int) * (size_t)N);
  double *rloss = malloc(sizeof(double) * (size_t)N);
  double *rgrad = malloc(sizeof(double) * (size_t)(N * V));
  float *hs = malloc(sizeof(float) * (size_t)(N * Vs)); /* host shard */
  float *hd = malloc(sizeof(float) * (size_t)(N * Vs));
  float *hrow = malloc(sizeof(float) * (size_t)(3 * N)); /* rowmax | sumexp | tlogit */
  double *loss = malloc(sizeof(double) * (size_t)N);
  float *dl = NULL, *dd = NULL, *drow = NULL;
  int32_t *dt = NULL;
  make_problem(seed, N, V, tp, L, tgt, kind);
  reference(L, tgt, N, V, (double)scale, rloss, rgrad);

  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < Vs; ++j) hs[n * Vs + j] = j < vvalid ? L[n * V + v0 + j] : 1.0e4f;
  CK(k->alloc(k, (void **)&dl, sizeof(float) * (size_t)(N * Vs), "logits"));
  CK(k->alloc(k, (void **)&dd, sizeof(float) * (size_t)(N * Vs), "dlogits"));
  CK(k->alloc(k, (void **)&drow, sizeof(float) * (size_t)(3 * N), "rowstats"));
  CK(k->alloc(k, (void **)&dt, sizeof(int32_t) * (size_t)N, "targets"));
  CK(k->to_device(k, dl, hs, sizeof(float) * (size_t)(N * Vs)));
  CK(k->to_device(k, dt, tgt, sizeof(int32_t) * (size_t)N));
  for (int64_t i = 0; i < N * Vs; ++i) hd[i] = 7.0f;
  CK(k->to_device(k, dd, hd, sizeof(float) * (size_t)(N * Vs)));
  float *rowmax = drow, *sumexp = drow + N, *tlogit = drow + 2 * N;

  /* forward: max → MPI_MAX, Σexp and target logit → SUM */
  CK(k->xent_rowmax(k, rowmax, dl, N, Vs, vvalid));
  CK(k->sync(k));
  CK(k->to_host(k, hrow, rowmax, sizeof(float) * (size_t)N));
  if (vvalid == 0)
    for (int64_t n = 0; n < N; ++n)
      EXPECT(hrow[n] == -INFINITY, "%s: local rowmax of an empty shard is %g, not -inf", what,
             (double)hrow[n]);
  CK(td_coll_allreduce_f32(tp_comm, hrow, N, MPI_MAX, NULL));
  CK(k->to_device(k, rowmax, hrow, sizeof(float) * (size_t)N));
  CK(k->xent_sumexp(k, sumexp, tlogit, dl, rowmax, dt, v0, N, Vs, vvalid));
  CK(k->sync(k));
  CK(k->to_host(k, hrow + N, sumexp, sizeof(float) * (size_t)(2 * N)));
  CK(td_coll_allreduce_f32(tp_comm, hrow + N, 2 * N, MPI_SUM, NULL));
  CK(k->to_device(k, sumexp, hrow + N, sizeof(float) * (size_t)(2 * N)));
  double mean = 0.0, rmean = 0.0;
  int bad_rows = 0;
  for (int64_t n = 0; n < N; ++n) {
    loss[n] = log((double)hrow[N + n]) + (double)hrow[n] - (double)hrow[2 * N + n];
    mean += loss[n] / (double)N;
    rmean += rloss[n] / (double)N;
    double err = fabs(loss[n] - rloss[n]);
    int good = isfinite(loss[n]) && err <= 1e-6 * fmax(1.0, fabs(rloss[n]));
    if (!good && bad_rows++ < 4)
      EXPECT(0, "%s: row %lld (%s, target %d): loss %.9g, reference %.9g (err %.2e)", what,
             (long long)n, kind_name[kind[n]], tgt[n], loss[n], rloss[n], err);
  }
  EXPECT(bad_rows == 0, "%s: %d rows with a wrong loss", what, bad_rows);
  EXPECT(fabs(mean - rmean) <= 1e-6 * fabs(rmean), "%s: mean loss %.9g, reference %.9g (rel %.2e)",
         what, mean, rmean, fabs(mean - rmean) / fabs(rmean));
  /* every rank of the group holds the same bits */
  {
    double *mx = malloc(sizeof(double) * (size_t)N), *mn = malloc(sizeof(double) * (size_t)N);
    MPI_Allreduce(loss, mx, (int)N, MPI_DOUBLE, MPI_MAX, tp_comm);
    MPI_Allreduce(loss, mn, (int)N, MPI_DOUBLE, MPI_MIN, tp_comm);
    int same = 1;
    for (int64_t n = 0; n < N; ++n) same &= memcmp(&mx[n], &mn[n], sizeof(double)) == 0;
    EXPECT(same, "%s: the ranks of the group disagree on the loss", what);
    free(mx);
    free(mn);
  }

  /* backward */
  float *out = alias ? dl : dd;
  CK(k->xent_bwd(k, out, dl, rowmax, sumexp, dt, v0, scale, N, Vs, vvalid));
  CK(k->sync(k));
  CK(k->to_host(k, hd, out, sizeof(float) * (size_t)(N * Vs)));
  double worst = 0.0;
  int64_t wn = 0, wj = 0;
  int pad_bad = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < Vs; ++j) {
      float d = hd[n * Vs + j];
      if (j >= vvalid) {
        pad_bad += d != 0.0f;
        continue;
      }
      double e = fabs((double)d - rgrad[n * V + v0 + j]);
      if (!(e <= worst)) {
        worst = isnan(e) ? INFINITY : e;
        wn = n;
        wj = j;
      }
    }
  EXPECT(worst <= 1e-6, "%s: gradient max abs err %.3e at row %lld (%s) column %lld: %.9g vs %.9g",
         what, worst, (long long)wn, kind_name[kind[wn]], (long long)(v0 + wj),
         (double)hd[wn * Vs + wj], rgrad[wn * V + v0 + wj]);
  EXPECT(pad_bad == 0, "%s: %d padding gradient entries are not 0", what, pad_bad);
  /* the gradient summed over the whole vocabulary is 0 per row (softmax − onehot) */
  {
    double *rs = calloc((size_t)N, sizeof(double));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < vvalid; ++j) rs[n] += hd[n * Vs + j];
    MPI_Allreduce(MPI_IN_PLACE, rs, (int)N, MPI_DOUBLE, MPI_SUM, tp_comm);
    double w = 0.0;
    for (int64_t n = 0; n < N; ++n) w = fmax(w, fabs(rs[n]));
    EXPECT(w <= 1e-5 * fmax(1.0, (double)V / 100.0) * (double)scale,
           "%s: gradient rows sum to %.3e, not 0", what, w);
    free(rs);
  }
  if (!alias) {
    CK(k->to_host(k, hd, dl, sizeof(float) * (size_t)(N * Vs)));
    EXPECT(memcmp(hd, hs, sizeof(float) * (size_t)(N * Vs)) == 0,
           "%s: xent_bwd with a separate output changed the logits", what);
  }
done:
  k->free(k, dl);
  k->free(k, dd);
  k->free(k, drow);
  k->free(k, dt);
  free(L);
  free(tgt);
  free(kind);
  free(rloss);
  free(rgrad);
  free(hs);
  free(hd);
  free(hrow);
  free(loss);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, tp_comm);
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char *device = argc > 1 ? argv[1] : "cpu";
  td_kernels *k = NULL;
  td_status st = td_kernels_create(device, 1, &k);
  int have = st == TD_OK, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_have) {
    if (g_rank == 0)
      fprintf(stderr, "test_vocab_xent: no '%s' back-end: %s\n", device, td_error_message());
    td_kernels_destroy(&k);
    MPI_Finalize();
    return 1;
  }

  static const int64_t vocabs[] = {3, 5, 7, 97, 250, 251, 1001};
  const int64_t N = 2 * 2 * K_KINDS + 3; /* every kind with swept and random targets */
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp) continue;
    MPI_Comm tp_comm;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank / tp, g_rank % tp, &tp_comm);
    int stop = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs && !stop; ++vi) {
      int64_t V = vocabs[vi];
      if (tp > 1 && V % tp == 0 && V != 250) continue; /* shards not padded: less to test */
      for (int variant = 0; variant < 2 && !stop; ++variant) {
        uint64_t seed = 1000003ull * (uint64_t)V + 7919ull * (uint64_t)(g_rank / tp) + (uint64_t)tp;
        float scale = variant == 0 ? 1.0f : 1.0f / (float)N;
        if (!run_case(k, tp_comm, seed + (uint64_t)variant, N, V, variant, scale)) stop = 1;
      }
    }
    MPI_Comm_free(&tp_comm);
  }

  long counts[2] = {g_pass, g_fail}, total[2] = {0, 0};
  MPI_Reduce(counts, total, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  long fails = g_fail, any = 0;
  MPI_Allreduce(&fails, &any, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) printf("test_vocab_xent (%d ranks, %s): %ld passed, %ld failed\n", world,
                          device, total[0], total[1]);
  td_kernels_destroy(&k);
  MPI_Finalize();
  return any ? 1 : 0;
}
