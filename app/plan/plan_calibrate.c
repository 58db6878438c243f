/* plan_calibrate.c — `trident plan --calibrate`: measure this machine into a
 * cluster file (td_plan.h). Every rank measures at the same time, as training
 * runs them:
 *   - matmul rate per precision through the kernel table's gemm (the CPU
 *     back-end, the threads OMP_NUM_THREADS gives), large and small shapes;
 *   - memory bandwidth (a copy of 64 MiB, read + write);
 *   - MPI between ranks 0 and 1: point-to-point (ping-pong) and all-reduce
 *     latency and bandwidth, small and 4 MiB messages;
 *   - the process's resident baseline (MPI, libraries, the back-end) before
 *     any of trident's buffers: device.baseline_mib.
 * Every time is the fastest of its repetitions (compute repetitions last
 * 20 ms or more): the machine undisturbed. On a shared host the others'
 * interruptions only add time, and they come and go (a 1 ms gemm's median
 * swung 2× between calibrations); tests/bench/plan_bench.py measures
 * training the same way (the least disturbed of its rounds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/plan/td_plan.h"
#include "common/td_log.h"
#include "kernels/td_kernels.h"
#include "parallel/td_mpi.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A /proc/self/status or /proc/meminfo field in bytes (kB lines); 0 if absent. */
static double proc_kb(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  char line[256];
  double v = 0;
  size_t n = strlen(key);
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0) {
      v = atof(line + n) * 1024.0;
      break;
    }
  fclose(f);
  return v;
}

#define REPS 7

/* Seconds of the fastest of REPS repetitions of `inner` calls. */
static double fastest(const double *ts, int n) {
  double m = ts[0];
  for (int i = 1; i < n; ++i) m = ts[i] < m ? ts[i] : m;
  return m;
}

/* Calls of a `once`-second operation that make a repetition of 20 ms. */
static int inner_of(double once) {
  return once >= 0.02 ? 1 : (int)(0.02 / (once > 1e-6 ? once : 1e-6)) + 1;
}

/* FLOP/s of C (M,N) = A (M,K) · B (K,N) in dtype t, every rank at once:
 * the fastest of REPS repetitions of 20 ms or more after a warm-up, the
 * slowest rank's. Collective on comm. */
static td_status gemm_rate(td_kernels *k, MPI_Comm comm, td_dtype t, int64_t M, int64_t N,
                           int64_t K, double *out) {
  td_status st = TD_OK;
  void *A = NULL, *B = NULL;
  float *C = NULL, *tmp = NULL;
  size_t es = td_dtype_size(t);
  int64_t big = M * K > K * N ? M * K : K * N;
  TD_CHECK_GOTO(k->alloc(k, &A, (size_t)(M * K) * es, "calibrate A"));
  TD_CHECK_GOTO(k->alloc(k, &B, (size_t)(K * N) * es, "calibrate B"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&C, (size_t)(M * N) * 4, "calibrate C"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&tmp, (size_t)big * 4, "calibrate fill"));
  for (int64_t i = 0; i < big; ++i) tmp[i] = (float)((i * 7919) % 1001) / 1001.0f - 0.5f;
  TD_CHECK_GOTO(k->cast(k, A, t, tmp, TD_DTYPE_F32, M * K));
  TD_CHECK_GOTO(k->cast(k, B, t, tmp, TD_DTYPE_F32, K * N));
  double ts[REPS];
  int inner = 1;
  for (int r = -1; r < REPS; ++r) {
    MPI_Barrier(comm);
    double t0 = td_now();
    for (int i = 0; i < inner; ++i)
      TD_CHECK_GOTO(k->gemm(k, 0, 0, M, N, K, A, t, B, t, 0.0f, C, TD_DTYPE_F32));
    TD_CHECK_GOTO(k->sync(k));
    double dt = td_now() - t0;
    if (r < 0) { /* the warm-up sizes the repetitions (the same on every rank) */
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
      inner = inner_of(dt);
    } else {
      ts[r] = dt / inner;
    }
  }
  double mine = fastest(ts, REPS), worst;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  *out = 2.0 * (double)M * (double)N * (double)K / worst;
done:
  k->free(k, A), k->free(k, B), k->free(k, C), k->free(k, tmp);
  return st;
}

/* Median seconds of a ping-pong (ranks 0 and 1; others wait) and of an
 * all-reduce of n bytes. Collective on comm. */
static td_status mpi_times(MPI_Comm comm, int rank, int64_t n, double *pingpong, double *allred) {
  char *a = calloc((size_t)n, 1), *b = calloc((size_t)n, 1);
  double tp[21], ta[21];
  const int reps = 21;
  int cnt;
  if (!a || !b) {
    free(a), free(b);
    TD_FAIL(TD_ERR_NOMEM, "out of memory (calibration buffers of %lld bytes)", (long long)n);
  }
  td_status st = td_mpi_count(n / 4, &cnt);
  for (int r = -2; st == TD_OK && r < reps; ++r) {
    MPI_Barrier(comm);
    double t0 = td_now();
    if (rank == 0) {
      MPI_Send(a, (int)n, MPI_BYTE, 1, 7, comm);
      MPI_Recv(b, (int)n, MPI_BYTE, 1, 7, comm, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(b, (int)n, MPI_BYTE, 0, 7, comm, MPI_STATUS_IGNORE);
      MPI_Send(a, (int)n, MPI_BYTE, 0, 7, comm);
    }
    double t1 = td_now();
    MPI_Barrier(comm);
    double t2 = td_now();
    MPI_Allreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, comm);
    double t3 = td_now();
    if (r >= 0) tp[r] = t1 - t0, ta[r] = t3 - t2;
  }
  /* the fastest repetition: the link itself, without the scheduler's
   * pre-emptions of a shared, oversubscribed host (a median here swung from
   * 0.2 µs to 4 ms between runs on 2 shared cores) */
  qsort(tp, (size_t)reps, sizeof *tp, cmp_d), qsort(ta, (size_t)reps, sizeof *ta, cmp_d);
  double m[2] = {tp[0], ta[0]};
  MPI_Bcast(m, 2, MPI_DOUBLE, 0, comm);
  *pingpong = m[0], *allred = m[1];
  free(a), free(b);
  return st;
}

/* A reduce-scatter and an all-gather of n floats over every rank of comm,
 * called as trident's ZeRO engine calls them (MPI_Ireduce_scatter,
 * MPI_Iallgatherv, then the wait): the fastest of 5 into rs, ag. Collective
 * on comm. */
static td_status kind_times(MPI_Comm comm, int size, int64_t n, double *rs, double *ag) {
  td_status st = TD_OK;
  float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
  int *counts = calloc((size_t)size, sizeof *counts);
  int *displs = calloc((size_t)size, sizeof *displs);
  double best[2] = {1e30, 1e30};
  int rank;
  if (!a || !b || !counts || !displs) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory (calibration)");
  TD_MPI_CHECK_GOTO(MPI_Comm_rank(comm, &rank));
  for (int i = 0; i < size; ++i) counts[i] = (int)(n / size), displs[i] = i * (int)(n / size);
  for (int r = -1; r < 5; ++r) {
    double t[2];
    MPI_Request req;
    MPI_Barrier(comm);
    double t0 = td_now();
    TD_MPI_CHECK_GOTO(MPI_Ireduce_scatter(a, b, counts, MPI_FLOAT, MPI_SUM, comm, &req));
    TD_MPI_CHECK_GOTO(MPI_Wait(&req, MPI_STATUS_IGNORE));
    t[0] = td_now() - t0;
    MPI_Barrier(comm);
    t0 = td_now();
    TD_MPI_CHECK_GOTO(MPI_Iallgatherv(a + displs[rank], counts[rank], MPI_FLOAT, b, counts, displs,
                             MPI_FLOAT, comm, &req));
    TD_MPI_CHECK_GOTO(MPI_Wait(&req, MPI_STATUS_IGNORE));
    t[1] = td_now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, comm);
    if (r >= 0) best[0] = fmin(best[0], t[0]), best[1] = fmin(best[1], t[1]);
  }
  *rs = best[0], *ag = best[1];
done:
  free(a), free(b), free(counts), free(displs);
  return st;
}

/* How much of a nonblocking all-reduce proceeds while the rank computes, as
 * trident's ZeRO engine runs its gradient buckets: a 64 MiB MPI_Iallreduce
 * started, then gemms of about the same length with an MPI_Test after each
 * (the engine polls between layers), then the wait. The fastest of 5 of
 * the all-reduce alone, the gemms alone and both; links.overlap = (comm +
 * compute − both) / min(comm, compute). Collective on comm. */
static td_status overlap_of(td_kernels *k, MPI_Comm comm, td_calibration *cal) {
  td_status st = TD_OK;
  const int64_t n = (int64_t)16 << 20, M = 512, N = 768, K = 768; /* 16 Mi floats */
  float *a = NULL, *b = NULL, *A = NULL, *B = NULL, *C = NULL;
  double best[3] = {1e30, 1e30, 1e30};
  int cnt, calls = 1;
  TD_CHECK(td_mpi_count(n, &cnt));
  TD_CHECK_GOTO(k->alloc(k, (void **)&a, (size_t)n * 4, "calibrate overlap"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&b, (size_t)n * 4, "calibrate overlap"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&A, (size_t)(M * K) * 4, "calibrate A"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&B, (size_t)(K * N) * 4, "calibrate B"));
  TD_CHECK_GOTO(k->alloc(k, (void **)&C, (size_t)(M * N) * 4, "calibrate C"));
  for (int r = -1; r < 5; ++r) {
    double t[3];
    MPI_Barrier(comm);
    double t0 = td_now();
    TD_MPI_CHECK_GOTO(MPI_Allreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, comm));
    t[0] = td_now() - t0;
    MPI_Barrier(comm);
    t0 = td_now();
    for (int i = 0; i < calls; ++i)
      TD_CHECK_GOTO(k->gemm(k, 0, 0, M, N, K, A, TD_DTYPE_F32, B, TD_DTYPE_F32, 0.0f, C,
                            TD_DTYPE_F32));
    TD_CHECK_GOTO(k->sync(k));
    t[1] = td_now() - t0;
    MPI_Barrier(comm);
    t0 = td_now();
    MPI_Request req;
    int done = 0;
    TD_MPI_CHECK_GOTO(MPI_Iallreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, comm, &req));
    for (int i = 0; i < calls; ++i) {
      TD_CHECK_GOTO(k->gemm(k, 0, 0, M, N, K, A, TD_DTYPE_F32, B, TD_DTYPE_F32, 0.0f, C,
                            TD_DTYPE_F32));
      TD_CHECK_GOTO(k->sync(k));
      if (!done) TD_MPI_CHECK_GOTO(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    }
    TD_MPI_CHECK_GOTO(MPI_Wait(&req, MPI_STATUS_IGNORE));
    t[2] = td_now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, t, 3, MPI_DOUBLE, MPI_MAX, comm);
    if (r < 0) { /* the warm-up: as many gemms as the all-reduce takes */
      calls = (int)(t[0] / (t[1] / calls)) + 1;
      continue;
    }
    for (int j = 0; j < 3; ++j) best[j] = fmin(best[j], t[j]);
  }
  cal->ov_comm_s = best[0], cal->ov_compute_s = best[1], cal->ov_both_s = best[2];
done:
  k->free(k, a), k->free(k, b), k->free(k, A), k->free(k, B), k->free(k, C);
  return st;
}

td_status td_plan_calibrate(MPI_Comm comm, td_cluster *c, td_calibration *cal) {
  td_status st = TD_OK;
  td_kernels *k = NULL;
  char *src = NULL, *dst = NULL;
  int rank, size, node_size;
  MPI_Comm node = MPI_COMM_NULL;
  memset(c, 0, sizeof *c);
  memset(cal, 0, sizeof *cal);
  TD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TD_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size < 2)
    TD_FAIL(TD_ERR_USAGE, "trident plan --calibrate measures MPI between ranks: run it under "
            "mpiexec -n 2 (or more; one node), found %d rank", size);
  /* the baseline: resident bytes now, before any buffer of ours */
  double base = proc_kb("/proc/self/status", "VmRSS:"), base_max;
  MPI_Allreduce(&base, &base_max, 1, MPI_DOUBLE, MPI_MAX, comm);
  TD_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  TD_MPI_CHECK(MPI_Comm_size(node, &node_size));
  MPI_Comm_free(&node);
  snprintf(c->name, sizeof c->name, "calibrated");
  c->nodes = size / node_size > 0 ? size / node_size : 1;
  c->devices_per_node = node_size;
  c->mem_bytes = proc_kb("/proc/meminfo", "MemTotal:") / node_size;
  c->baseline = base_max;

  TD_CHECK_GOTO(td_kernels_cpu_create(0, &k));
  const char *thr = getenv("OMP_NUM_THREADS");
  snprintf(c->device, sizeof c->device, "CPU, OMP_NUM_THREADS=%s per rank (%s)",
           thr ? thr : "unset", td_kernels_cpu_bf16() ? "oneDNN" : "CBLAS");
  /* large shapes: a layer's products (C→C, C→4C, 4C→C) at 512 and 1024
   * rows, widths 384 and 768; small: 64 rows */
  static const int64_t large[4][3] = {{512, 384, 384}, {512, 1536, 384}, {512, 384, 1536},
                                      {1024, 768, 768}};
  static const int64_t small[2][3] = {{64, 768, 768}, {64, 384, 384}};
  /* three passes a few seconds apart, the fastest of each: a shared host's
   * slow spells last seconds (a whole pass at half speed was seen) */
  for (int pass = 0; pass < 3; ++pass) {
    for (int p = 0; p < 2; ++p) {
      td_dtype t = p ? TD_DTYPE_BF16 : TD_DTYPE_F32;
      if (p && !td_kernels_cpu_bf16()) {
        cal->large[p] = cal->large[0], cal->small[p] = cal->small[0];
        continue; /* bf16 after fp32 in every pass: the fp32 figures are final by the last */
      }
      double r[4];
      for (int i = 0; i < 4; ++i)
        TD_CHECK_GOTO(gemm_rate(k, comm, t, large[i][0], large[i][1], large[i][2], &r[i]));
      cal->large[p] = fmax(cal->large[p], median(r, 4));
      for (int i = 0; i < 2; ++i)
        TD_CHECK_GOTO(gemm_rate(k, comm, t, small[i][0], small[i][1], small[i][2], &r[i]));
      cal->small[p] = fmax(cal->small[p], 0.5 * (r[0] + r[1]));
    }
    /* attention (fp32): B 4, T 256 and 512, 6 heads of 64, forward then
     * backward, of both kinds: the materialised kernels (FLOPs as the
     * planner counts them, 12·A·T per token) and the fused ones (18·A·T:
     * their backward makes the scores again) */
    for (int fused = 0; fused < 2; ++fused) {
      static const int64_t shp[2][4] = {{4, 256, 6, 64}, {2, 512, 6, 64}};
      double r[2];
      for (int i = 0; i < 2; ++i) {
        int64_t B = shp[i][0], T = shp[i][1], NH = shp[i][2], HS = shp[i][3], A = NH * HS;
        /* the materialised kernels keep (B, NH, T, T) probabilities and
         * scratch, the fused ones (B, NH, T) log-sum-exps and workspace */
        int64_t natt = fused ? B * NH * T : B * NH * T * T;
        float *qkv = NULL, *out = NULL, *att = NULL, *dq = NULL, *scr = NULL, *dout = NULL;
        double ts[REPS], mine, worst;
        st = k->alloc(k, (void **)&qkv, (size_t)(B * T * 3 * A) * 4, "calibrate qkv");
        if (st == TD_OK)
          st = k->alloc(k, (void **)&dq, (size_t)(B * T * 3 * A) * 4, "calibrate dqkv");
        if (st == TD_OK) st = k->alloc(k, (void **)&out, (size_t)(B * T * A) * 4, "calibrate out");
        if (st == TD_OK && fused)
          st = k->alloc(k, (void **)&dout, (size_t)(B * T * A) * 4, "calibrate dout");
        if (st == TD_OK) st = k->alloc(k, (void **)&att, (size_t)natt * 4, "calibrate att");
        if (st == TD_OK) st = k->alloc(k, (void **)&scr, (size_t)natt * 4, "calibrate scr");
        for (int64_t j = 0; st == TD_OK && j < B * T * 3 * A; ++j)
          qkv[j] = (float)((j * 7919) % 1001) / 1001.0f - 0.5f;
        for (int64_t j = 0; st == TD_OK && fused && j < B * T * A; ++j)
          dout[j] = (float)((j * 104729) % 1003) / 1003.0f - 0.5f;
        int inner = 1;
        for (int rr = -1; st == TD_OK && rr < REPS; ++rr) {
          MPI_Barrier(comm);
          double t0 = td_now();
          for (int it = 0; st == TD_OK && it < inner; ++it) {
            if (fused) {
              st = k->flash_fwd(k, out, att, qkv, qkv + A, qkv + 2 * A, 3 * A, 3 * A, B, T, NH,
                                NH, HS, NULL, NULL, TD_DTYPE_F32);
              if (st == TD_OK)
                st = k->flash_bwd(k, dq, dq + A, dq + 2 * A, scr, dout, out, att, qkv, qkv + A,
                                  qkv + 2 * A, 3 * A, 3 * A, B, T, NH, NH, HS, NULL, NULL,
                                  TD_DTYPE_F32);
            } else {
              st = k->attention_fwd(k, out, att, qkv, B, T, NH, HS);
              if (st == TD_OK) st = k->attention_bwd(k, dq, scr, out, qkv, att, B, T, NH, HS);
            }
          }
          if (st == TD_OK) st = k->sync(k);
          double dt = td_now() - t0;
          if (rr < 0) {
            MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
            inner = inner_of(dt);
          } else {
            ts[rr] = dt / inner;
          }
        }
        k->free(k, qkv), k->free(k, dq), k->free(k, out), k->free(k, att), k->free(k, scr);
        if (dout) k->free(k, dout);
        TD_CHECK_GOTO(st);
        mine = fastest(ts, REPS);
        MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
        r[i] = (fused ? 18.0 : 12.0) * (double)A * (double)T * (double)(B * T) / worst;
      }
      double *rate = fused ? &cal->fatt : &cal->att;
      *rate = fmax(*rate, 0.5 * (r[0] + r[1]));
    }
  }
  c->att_rate = cal->att, c->fatt_rate = cal->fatt;
  /* the large-shape rate is the peak (efficiency 1 by definition); small
   * shapes reach the fp32 ratio */
  c->peak_fp32 = cal->large[0], c->peak_bf16 = cal->large[1];
  c->eff_large = 1.0;
  c->eff_small = cal->small[0] / cal->large[0];
  /* the peak is a pure gemm's, so the non-matmul kernels are a term of their
   * own: forward writes each activation and reads it again (2 passes),
   * backward reads it, writes its gradient and reads that (twice as many) */
  c->ew_passes = 2;
  if (c->eff_small > 1.0) c->eff_small = 1.0;
  c->small_dim = 128;

  /* memory bandwidth: copy 64 MiB, every rank at once */
  {
    const size_t n = (size_t)64 << 20;
    double ts[REPS], mine, worst;
    src = malloc(n), dst = malloc(n);
    if (!src || !dst) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory (2 × 64 MiB)");
    memset(src, 1, n), memset(dst, 0, n);
    for (int r = -1; r < REPS; ++r) {
      MPI_Barrier(comm);
      double t0 = td_now();
      memcpy(dst, src, n);
      if (r >= 0) ts[r] = td_now() - t0;
      src[r + 1] = dst[n - 1 - (size_t)(r + 1)]; /* keep the copy */
    }
    mine = fastest(ts, REPS);
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
    c->mem_bw = 2.0 * (double)n / worst;
  }

  /* MPI: α from 8-byte messages, β from 64 MiB ones (larger than the
   * caches, as a model's gradients are: 4 MiB ones ran from the cache at
   * 3–4× training's rate). Ping-pong: one way is half the round trip.
   * All-reduce of n bytes at p ranks as the planner times it (plan.c
   * coll_time): 2(p−1)·α + 2(p−1)/p·n / β. */
  {
    const int64_t big = (int64_t)64 << 20;
    double pp0, ar0, pp1, ar1;
    TD_CHECK_GOTO(mpi_times(comm, rank, 8, &pp0, &ar0));
    TD_CHECK_GOTO(mpi_times(comm, rank, big, &pp1, &ar1));
    double f = 2.0 * (size - 1);
    cal->p2p_lat = pp0 / 2.0;
    cal->p2p_bw = (double)big / (pp1 / 2.0 - cal->p2p_lat);
    cal->ar_lat = ar0 / f;
    cal->ar_bw = f / size * (double)big / (ar1 > ar0 ? ar1 - ar0 : ar1);
    if (!(cal->p2p_bw > 0)) cal->p2p_bw = (double)big / (pp1 / 2.0);
    cal->ar_small_s = ar0, cal->ar_big_s = ar1;
  }
  /* the link the planner times every collective on: the all-reduce's (the
   * collectives carry trident's tp and dp bytes); the point-to-point figures
   * are printed beside it */
  c->intra.lat = cal->ar_lat, c->intra.bw = cal->ar_bw;
  c->intra.bus_eff = 1.0, c->intra.half_bytes = 0.0; /* measured as a collective's rate */
  c->inter = c->intra;
  TD_CHECK_GOTO(kind_times(comm, size, (int64_t)16 << 20, &cal->rs_s, &cal->ag_s));
  {
    /* each kind's time as the planner counts its bytes: (p − 1)/p of the
     * 64 MiB at β·ratio, after (p − 1)·α */
    const double n = (double)((int64_t)64 << 20), f = (double)(size - 1) / size;
    double lat = (size - 1) * cal->ar_lat;
    c->rs_ratio = cal->rs_s > lat ? f * n / cal->ar_bw / (cal->rs_s - lat) : 1.0;
    c->ag_ratio = cal->ag_s > lat ? f * n / cal->ar_bw / (cal->ag_s - lat) : 1.0;
  }
  {
    /* small collectives (a layer's tp messages, small gradient buckets):
     * the three kinds at 16 MiB, their rates over the large all-reduce's β,
     * applied up to 16 MiB a call (at 8 MiB, from the cache, they ran up to
     * 1.7× faster than training's buckets). A host whose MPI maps fresh pages for the
     * temporaries of every call above 32 MiB (glibc's largest mmap
     * threshold) ran a 16 MiB all-reduce at 2.9 GB/s and a 32 MiB one at
     * 0.37 */
    const int64_t mid = (int64_t)16 << 20;
    double pp;
    TD_CHECK_GOTO(mpi_times(comm, rank, mid, &pp, &cal->ar_mid_s));
    TD_CHECK_GOTO(kind_times(comm, size, mid / 4, &cal->rs_mid_s, &cal->ag_mid_s));
    const double f = (double)(size - 1) / size;
    double lat = (size - 1) * cal->ar_lat, v[3];
    double t[3] = {cal->ar_mid_s - 2.0 * lat, cal->rs_mid_s - lat, cal->ag_mid_s - lat};
    double bytes[3] = {2.0 * f * (double)mid, f * (double)mid, f * (double)mid};
    for (int i = 0; i < 3; ++i) /* within the keys' range */
      v[i] = t[i] > 0 ? fmin(fmax(bytes[i] / t[i] / cal->ar_bw, 1e-3), 1e3) : 1.0;
    c->small_bytes = (double)mid;
    c->small_ar = v[0], c->small_rs = v[1], c->small_ag = v[2];
  }
  TD_CHECK_GOTO(overlap_of(k, comm, cal));
  c->overlap = cal->ov_both_s > 0 ? (cal->ov_comm_s + cal->ov_compute_s - cal->ov_both_s) /
                                        fmin(cal->ov_comm_s, cal->ov_compute_s) : 1.0;
  c->overlap = c->overlap < 0 ? 0 : c->overlap > 1 ? 1 : c->overlap;
done:
  free(src), free(dst);
  td_kernels_destroy(&k);
  return st;
}

void td_calibration_print(const td_calibration *cal, FILE *out) {
  fprintf(out,
          "# measured by trident plan --calibrate (the slowest rank, its fastest repetitions):\n"
          "#   gemm fp32: large %.1f GFLOP/s, small (64 rows) %.1f GFLOP/s\n"
          "#   gemm bf16: large %.1f GFLOP/s, small (64 rows) %.1f GFLOP/s\n"
          "#   attention fp32 (forward + backward, 12·A·T FLOPs per token): %.1f GFLOP/s\n"
          "#   fused attention fp32 (forward + backward, 18·A·T FLOPs per token): %.1f GFLOP/s\n"
          "#   point-to-point: latency %.2f us, bandwidth %.3f GB/s\n"
          "#   all-reduce: 8 B %.2f us, 64 MiB %.1f us -> latency %.2f us per step, %.3f GB/s\n"
          "#   64 MiB reduce-scatter %.1f ms, all-gather %.1f ms (nonblocking, then the wait)\n"
          "#   16 MiB all-reduce %.2f ms, reduce-scatter %.2f ms, all-gather %.2f ms\n"
          "#   overlap: 64 MiB all-reduce %.1f ms, gemms %.1f ms, nonblocking all-reduce beside "
          "the gemms %.1f ms\n",
          cal->large[0] / 1e9, cal->small[0] / 1e9, cal->large[1] / 1e9, cal->small[1] / 1e9,
          cal->att / 1e9, cal->fatt / 1e9, cal->p2p_lat * 1e6, cal->p2p_bw / 1e9, cal->ar_small_s * 1e6,
          cal->ar_big_s * 1e6, cal->ar_lat * 1e6, cal->ar_bw / 1e9, cal->rs_s * 1e3,
          cal->ag_s * 1e3, cal->ar_mid_s * 1e3, cal->rs_mid_s * 1e3, cal->ag_mid_s * 1e3,
          cal->ov_comm_s * 1e3, cal->ov_compute_s * 1e3, cal->ov_both_s * 1e3);
}
