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
 * Compute times are the median of their repetitions; MPI times the fastest
 * (robust on a shared host). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/td_plan.h"
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

/* FLOP/s of C (M,N) = A (M,K) · B (K,N) in dtype t, every rank at once:
 * the median over REPS after one warm-up, the slowest rank's. Collective on
 * comm. */
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
  for (int r = -1; r < REPS; ++r) {
    MPI_Barrier(comm);
    double t0 = td_now();
    TD_CHECK_GOTO(k->gemm(k, 0, 0, M, N, K, A, t, B, t, 0.0f, C, TD_DTYPE_F32));
    TD_CHECK_GOTO(k->sync(k));
    if (r >= 0) ts[r] = td_now() - t0;
  }
  double mine = median(ts, REPS), worst;
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
  for (int p = 0; p < 2; ++p) {
    td_dtype t = p ? TD_DTYPE_BF16 : TD_DTYPE_F32;
    if (p && !td_kernels_cpu_bf16()) {
      cal->large[p] = cal->large[0], cal->small[p] = cal->small[0];
      continue;
    }
    double r[4];
    for (int i = 0; i < 4; ++i)
      TD_CHECK_GOTO(gemm_rate(k, comm, t, large[i][0], large[i][1], large[i][2], &r[i]));
    cal->large[p] = median(r, 4);
    for (int i = 0; i < 2; ++i)
      TD_CHECK_GOTO(gemm_rate(k, comm, t, small[i][0], small[i][1], small[i][2], &r[i]));
    cal->small[p] = 0.5 * (r[0] + r[1]);
  }
  /* attention (fp32): B 4, T 256 and 512, 6 heads of 64, forward then
   * backward; FLOPs as the planner counts them, 12·A·T per token */
  {
    static const int64_t shp[2][4] = {{4, 256, 6, 64}, {2, 512, 6, 64}};
    double r[2];
    for (int i = 0; i < 2; ++i) {
      int64_t B = shp[i][0], T = shp[i][1], NH = shp[i][2], HS = shp[i][3], A = NH * HS;
      float *qkv = NULL, *out = NULL, *att = NULL, *dq = NULL, *scr = NULL;
      double ts[REPS], mine, worst;
      st = k->alloc(k, (void **)&qkv, (size_t)(B * T * 3 * A) * 4, "calibrate qkv");
      if (st == TD_OK) st = k->alloc(k, (void **)&dq, (size_t)(B * T * 3 * A) * 4, "calibrate dqkv");
      if (st == TD_OK) st = k->alloc(k, (void **)&out, (size_t)(B * T * A) * 4, "calibrate out");
      if (st == TD_OK) st = k->alloc(k, (void **)&att, (size_t)(B * NH * T * T) * 4, "calibrate att");
      if (st == TD_OK) st = k->alloc(k, (void **)&scr, (size_t)(B * NH * T * T) * 4, "calibrate scr");
      for (int64_t j = 0; st == TD_OK && j < B * T * 3 * A; ++j)
        qkv[j] = (float)((j * 7919) % 1001) / 1001.0f - 0.5f;
      for (int rr = -1; st == TD_OK && rr < REPS; ++rr) {
        MPI_Barrier(comm);
        double t0 = td_now();
        st = k->attention_fwd(k, out, att, qkv, B, T, NH, HS);
        if (st == TD_OK) st = k->attention_bwd(k, dq, scr, out, qkv, att, B, T, NH, HS);
        if (st == TD_OK) st = k->sync(k);
        if (rr >= 0) ts[rr] = td_now() - t0;
      }
      k->free(k, qkv), k->free(k, dq), k->free(k, out), k->free(k, att), k->free(k, scr);
      TD_CHECK_GOTO(st);
      mine = median(ts, REPS);
      MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
      r[i] = 12.0 * (double)A * (double)T * (double)(B * T) / worst;
    }
    cal->att = 0.5 * (r[0] + r[1]);
    c->att_rate = cal->att;
  }
  /* the large-shape rate is the peak (efficiency 1 by definition); small
   * shapes reach the fp32 ratio */
  c->peak_fp32 = cal->large[0], c->peak_bf16 = cal->large[1];
  c->eff_large = 1.0;
  c->eff_small = cal->small[0] / cal->large[0];
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
    mine = median(ts, REPS);
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
    c->mem_bw = 2.0 * (double)n / worst;
  }

  /* MPI: α from 8-byte messages, β from 4 MiB ones. Ping-pong: one way is
   * half the round trip. All-reduce of n bytes at p ranks as the planner
   * times it (plan.c coll_time): 2(p−1)·α + 2(p−1)/p·n / β. */
  {
    const int64_t big = (int64_t)4 << 20;
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
  c->inter = c->intra;
done:
  free(src), free(dst);
  td_kernels_destroy(&k);
  return st;
}

void td_calibration_print(const td_calibration *cal, FILE *out) {
  fprintf(out, "# measured by trident plan --calibrate (the slowest rank; compute: medians, MPI: fastest of 21):\n"
          "#   gemm fp32: large %.1f GFLOP/s, small (64 rows) %.1f GFLOP/s\n"
          "#   gemm bf16: large %.1f GFLOP/s, small (64 rows) %.1f GFLOP/s\n"
          "#   attention fp32 (forward + backward, 12·A·T FLOPs per token): %.1f GFLOP/s\n"
          "#   point-to-point: latency %.2f us, bandwidth %.3f GB/s\n"
          "#   all-reduce: 8 B %.2f us, 4 MiB %.1f us -> latency %.2f us per step, %.3f GB/s\n",
          cal->large[0] / 1e9, cal->small[0] / 1e9, cal->large[1] / 1e9, cal->small[1] / 1e9,
          cal->att / 1e9, cal->p2p_lat * 1e6, cal->p2p_bw / 1e9, cal->ar_small_s * 1e6, cal->ar_big_s * 1e6,
          cal->ar_lat * 1e6, cal->ar_bw / 1e9);
}
