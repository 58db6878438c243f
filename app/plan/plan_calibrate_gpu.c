/* plan_calibrate_gpu.c — `trident plan --calibrate --device cuda`: measure
 * this node's GPUs into a cluster file of the planner's GPU model
 * (plan_device.c). Every rank drives its GPU (the local rank's, as training
 * picks it) at the same time:
 *   - gemm rates in bf16 and fp32 over shapes: one large product that fills
 *     whole waves sets the peak (efficiency 1 by definition, as the CPU
 *     calibration's); the others are printed beside what the tile model
 *     predicts for them from that peak (the model checked, not fitted);
 *   - device memory bandwidth (a device-to-device copy, read + write);
 *   - the fused attention's rate (bf16, head size 128, causal: the FLOPs it
 *     does) over the peak: device.attention_efficiency;
 *   - a kernel's launch and tail (many tiny kernels): device.kernel_us;
 *   - with 2 ranks or more and NCCL: all-reduces over sizes, the bus
 *     bandwidth (2(p−1)/p·S / t), its largest value and the size at which it
 *     reaches half of it (links.*.half_mib), the latency from the smallest.
 * Every time is the fastest of its repetitions, the slowest rank's.
 * TD_TEST_CALIBRATE_SMALL=1 (tests: the emulated device runs kernels on the
 * CPU) divides every shape so that the whole calibration takes seconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/plan/td_plan.h"
#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"

#define REPS 5

/* Seconds of one call of fn(arg), the fastest of REPS repetitions of
 * enough calls to last 10 ms (after a warm-up), the slowest rank's.
 * Collective on comm. */
typedef td_status (*timed_fn)(td_kernels *k, void *arg);
static td_status time_of(td_kernels *k, MPI_Comm comm, timed_fn fn, void *arg, double *out) {
  int inner = 1;
  double best = INFINITY;
  for (int r = -1; r < REPS; ++r) {
    TD_CHECK(k->sync(k));
    MPI_Barrier(comm);
    double t0 = td_now();
    for (int i = 0; i < inner; ++i) TD_CHECK(fn(k, arg));
    TD_CHECK(k->sync(k));
    double dt = td_now() - t0;
    if (r < 0) {
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
      inner = dt >= 0.01 ? 1 : (int)(0.01 / fmax(dt, 1e-6)) + 1;
    } else if (dt / inner < best) {
      best = dt / inner;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, comm);
  *out = best;
  return TD_OK;
}

typedef struct {
  int64_t M, N, K;
  td_dtype t;
  void *A, *B, *C;
} gemm_arg;

static td_status run_gemm(td_kernels *k, void *arg) {
  gemm_arg *g = arg;
  return k->gemm(k, 0, 0, g->M, g->N, g->K, g->A, g->t, g->B, g->t, 0.0f, g->C, g->t);
}

/* FLOP/s of one product (M,K)·(K,N) in type t. */
static td_status gemm_rate(td_kernels *k, MPI_Comm comm, int64_t M, int64_t N, int64_t K,
                           td_dtype t, double *out) {
  td_status st = TD_OK;
  size_t es = td_dtype_size(t);
  gemm_arg g = {M, N, K, t, NULL, NULL, NULL};
  double s = 0;
  TD_CHECK_GOTO(k->alloc(k, &g.A, (size_t)(M * K) * es, "calibration gemm A"));
  TD_CHECK_GOTO(k->alloc(k, &g.B, (size_t)(K * N) * es, "calibration gemm B"));
  TD_CHECK_GOTO(k->alloc(k, &g.C, (size_t)(M * N) * es, "calibration gemm C"));
  TD_CHECK_GOTO(time_of(k, comm, run_gemm, &g, &s));
  *out = 2.0 * (double)M * (double)N * (double)K / s;
done:
  if (g.A) k->free(k, g.A);
  if (g.B) k->free(k, g.B);
  if (g.C) k->free(k, g.C);
  return st;
}

typedef struct {
  float *dst, *src;
  int64_t n;
} copy_arg;

static td_status run_copy(td_kernels *k, void *arg) {
  copy_arg *c = arg;
  return k->copy2d(k, c->dst, c->n, c->src, c->n, 1, c->n);
}

static td_status run_launch(td_kernels *k, void *arg) {
  return k->zero(k, arg, 4);
}

typedef struct {
  float *qkv, *dqkv, *out, *lse, *delta, *dout; /* q, k, v packed as the model's (B·T, 3C) */
  int64_t B, T, NH, HS;
} att_arg;

static td_status run_att(td_kernels *k, void *arg) {
  att_arg *a = arg;
  int64_t C = a->NH * a->HS;
  TD_CHECK(k->flash_fwd(k, a->out, a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C, 3 * C, 3 * C,
                        a->B, a->T, a->NH, a->NH, a->HS, NULL, NULL, TD_DTYPE_BF16));
  return k->flash_bwd(k, a->dqkv, a->dqkv + C, a->dqkv + 2 * C, a->delta, a->dout, a->out,
                      a->lse, a->qkv, a->qkv + C, a->qkv + 2 * C, 3 * C, 3 * C, a->B, a->T,
                      a->NH, a->NH, a->HS, NULL, NULL, TD_DTYPE_BF16);
}

/* Tiles and waves of a product on c's SMs (the planner's tile model). */
static double model_s(const td_cluster *c, double M, double N, double K, double peak) {
  td_cluster m = *c;
  m.gemm_eff = 1.0, m.kernel_s = 0.0, m.mem_bw = 1.0;
  return td_plan_gemm_s(&m, M, N, K, 1, 0.0, peak); /* es 0: compute only */
}

td_status td_plan_calibrate_gpu(MPI_Comm comm, td_cluster *c, td_gpu_calibration *g) {
  td_status st = TD_OK;
  td_kernels *k = NULL;
  struct td_dcomm *dc = NULL;
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0, size = 1, lrank = 0, lsize = 1;
  memset(c, 0, sizeof *c);
  memset(g, 0, sizeof *g);
  int small = getenv("TD_TEST_CALIBRATE_SMALL") && atoi(getenv("TD_TEST_CALIBRATE_SMALL")) > 0;
  int64_t d = small ? 16 : 1; /* shapes divided by d */
  MPI_Comm_rank(comm, &rank), MPI_Comm_size(comm, &size);
  TD_MPI_CHECK_GOTO(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &lrank), MPI_Comm_size(node, &lsize);
  int ngpu = td_kernels_gpu_count();
  if (ngpu <= 0)
    TD_FAIL_GOTO(TD_ERR_CUDA, "trident plan --calibrate --device cuda: no GPU is visible to "
                 "rank %d", rank);
  TD_CHECK_GOTO(td_kernels_gpu_select(lrank % ngpu));
  TD_CHECK_GOTO(td_kernels_create("cuda", 0, &k));
  if (!td_kernels_gpu_info(&c->sms, &c->mem_bytes))
    TD_FAIL_GOTO(TD_ERR_CUDA, "trident plan --calibrate: the CUDA module cannot tell the "
                 "device's multiprocessors and memory (a module of another version?)");
  snprintf(c->name, sizeof c->name, "calibrated");
  snprintf(c->device, sizeof c->device, "CUDA device (%d SMs)", c->sms);
  c->nodes = size / lsize > 0 ? size / lsize : 1;
  c->devices_per_node = lsize;
  c->tile_m = 256, c->tile_n = 128, c->gemm_eff = 1.0;
  c->intra.bus_eff = c->inter.bus_eff = 1.0;
  c->small_dim = 0, c->eff_large = c->eff_small = 1.0;
  c->rs_ratio = c->ag_ratio = c->overlap = 1.0;
  c->small_ar = c->small_rs = c->small_ag = 1.0;

  /* gemms: the peak from a product of whole waves (M = 256·sms/8·d rows of
   * 8 tile columns... : tiles = (M/256)·(N/128) = a multiple of sms) */
  {
    int64_t M = 256 * (int64_t)c->sms / (small ? 8 : 1), N = 128 * 8, K = 8192 / d;
    if (M < 256) M = 256;
    double r16 = 0, r32 = 0;
    TD_CHECK_GOTO(gemm_rate(k, comm, M, N, K, TD_DTYPE_BF16, &r16));
    TD_CHECK_GOTO(gemm_rate(k, comm, M, N, K / 4, TD_DTYPE_F32, &r32));
    /* what the tile model gives at peak 1 for that shape: its waves */
    double w16 = model_s(c, (double)M, (double)N, (double)K, 1.0);
    double w32 = model_s(c, (double)M, (double)N, (double)(K / 4), 1.0);
    /* the tile model's time at peak 1 over the measured time: the peak that
     * makes the model exact on this shape */
    c->peak_bf16 = w16 * r16 / (2.0 * (double)M * (double)N * (double)K);
    c->peak_fp32 = w32 * r32 / (2.0 * (double)M * (double)N * (double)(K / 4));
    g->peak_shape[0] = M, g->peak_shape[1] = N, g->peak_shape[2] = K;
    g->rate_peak[0] = r32, g->rate_peak[1] = r16;
    /* the shapes a model runs, checked against the tile model */
    static const int64_t shp[TD_CAL_SHAPES][3] = {
        {8192, 8192, 8192}, {8192, 1024, 8192}, {4096, 256, 2048},
        {2048, 6656, 16384}, {16384, 6656, 8192}, {512, 3072, 768}};
    for (int i = 0; i < TD_CAL_SHAPES; ++i) {
      int64_t m = shp[i][0] / d, n = shp[i][1] / d, kk = shp[i][2] / d;
      g->shape[i][0] = m, g->shape[i][1] = n, g->shape[i][2] = kk;
      TD_CHECK_GOTO(gemm_rate(k, comm, m, n, kk, TD_DTYPE_BF16, &g->rate[i]));
      g->model[i] = 2.0 * (double)m * (double)n * (double)kk /
                    model_s(c, (double)m, (double)n, (double)kk, c->peak_bf16);
    }
  }
  /* memory bandwidth: a device-to-device copy */
  {
    int64_t n = ((int64_t)256 << 20) / 4 / (d * d);
    copy_arg a = {NULL, NULL, n};
    double s = 0;
    st = k->alloc(k, (void **)&a.src, (size_t)n * 4, "calibration copy");
    if (st == TD_OK) st = k->alloc(k, (void **)&a.dst, (size_t)n * 4, "calibration copy");
    if (st == TD_OK) st = time_of(k, comm, run_copy, &a, &s);
    if (a.src) k->free(k, a.src);
    if (a.dst) k->free(k, a.dst);
    TD_CHECK_GOTO(st);
    c->mem_bw = 2.0 * (double)n * 4.0 / s;
  }
  /* a kernel's launch and tail */
  {
    float *x = NULL;
    double s = 0;
    TD_CHECK_GOTO(k->alloc(k, (void **)&x, 4, "calibration launch"));
    st = time_of(k, comm, run_launch, x, &s);
    k->free(k, x);
    TD_CHECK_GOTO(st);
    c->kernel_s = s;
  }
  /* the fused attention, bf16, head size 128 (small: 16), causal */
  if (k->flash_fwd && k->flash_bwd) {
    att_arg a = {0};
    a.B = 1, a.T = 4096 / (d * 2), a.NH = small ? 2 : 16, a.HS = small ? 64 : 128;
    int64_t C = a.NH * a.HS, BT = a.B * a.T, rows = a.B * a.NH * a.T;
    float **bufs[] = {&a.qkv, &a.dqkv, &a.out, &a.lse, &a.delta, &a.dout};
    int64_t sz[] = {BT * 3 * C, BT * 3 * C, BT * C, rows, rows, BT * C};
    for (int i = 0; st == TD_OK && i < 6; ++i)
      st = k->alloc(k, (void **)bufs[i], (size_t)sz[i] * 4, "calibration attention");
    double s = 0;
    if (st == TD_OK) st = time_of(k, comm, run_att, &a, &s);
    for (int i = 0; i < 6; ++i)
      if (*bufs[i]) k->free(k, *bufs[i]);
    TD_CHECK_GOTO(st);
    /* the causal half of 4·B·NH·T²·HS forward, 2.5× that backward */
    double fl = 3.5 * 4.0 * (double)(a.B * a.NH) * (double)a.T * (double)a.T * (double)a.HS * 0.5;
    g->att_rate = fl / s;
    c->att_eff = fmin(1.0, g->att_rate / c->peak_bf16);
  }
  /* NCCL all-reduces over sizes */
  g->sizes = 0;
  if (size >= 2 && td_kernels_gpu_nccl()) {
    TD_CHECK_GOTO(td_dcomm_create(comm, k, TD_DCOMM_NCCL, "calibration", &dc));
    float *buf = NULL;
    int64_t top = ((int64_t)256 << 20) / (small ? 256 : 1);
    TD_CHECK_GOTO(k->alloc(k, (void **)&buf, (size_t)top, "calibration all-reduce"));
    for (int64_t bytes = top >> 12; st == TD_OK && bytes <= top && g->sizes < TD_CAL_SIZES;
         bytes *= 4) {
      double best = INFINITY;
      for (int r = -1; st == TD_OK && r < REPS; ++r) {
        uint64_t t = 0;
        if (st == TD_OK) st = k->sync(k);
        MPI_Barrier(comm);
        double t0 = td_now();
        if (st == TD_OK) st = td_dcomm_allreduce(dc, buf, bytes / 4, 0, NULL, &t);
        if (st == TD_OK) st = td_dcomm_join(dc, t);
        if (st == TD_OK) st = k->sync(k);
        double dt = td_now() - t0;
        if (r >= 0 && dt < best) best = dt;
      }
      MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, comm);
      g->size[g->sizes] = (double)bytes, g->ar_s[g->sizes] = best;
      g->busbw[g->sizes] = 2.0 * (size - 1) / size * (double)bytes / best;
      g->sizes++;
    }
    k->free(k, buf);
    TD_CHECK_GOTO(st);
    td_link l = {0, 0, 1.0, 0};
    for (int i = 0; i < g->sizes; ++i) l.bw = fmax(l.bw, g->busbw[i]);
    l.lat = g->ar_s[0] / (2.0 * (size - 1));
    /* half the bus bandwidth: S/(S + half) = 1/2 at S = half; from the first
     * size at or above half the peak, S·(peak/busbw − 1) — or, when that
     * size is the peak itself (a noisy link whose bandwidth jumps there:
     * S·0), from the size before it, below half the peak. A measured link
     * always has a half size (the cluster file prints it: "measured") */
    for (int i = 0; i < g->sizes; ++i)
      if (g->busbw[i] >= 0.5 * l.bw) {
        int j = g->busbw[i] >= l.bw && i > 0 ? i - 1 : i;
        l.half_bytes = g->size[j] * fmax(l.bw / g->busbw[j] - 1.0, 0.0);
        break;
      }
    if (l.half_bytes <= 0) l.half_bytes = g->size[0]; /* the smallest size already at peak */
    c->intra = c->inter = l; /* one measurement: the link these ranks span */
    g->links_measured = 1;
  } else {
    /* one GPU (or no NCCL): the links are not measured; the node's own
     * values stated as unknown in the output */
    c->intra.bw = c->inter.bw = 1e9, c->intra.lat = c->inter.lat = 1e-5;
  }
done:
  td_dcomm_destroy(&dc);
  td_kernels_destroy(&k);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return st;
}

void td_gpu_calibration_print(const td_gpu_calibration *g, const td_cluster *c, FILE *out) {
  fprintf(out, "# measured by trident plan --calibrate --device cuda (the slowest rank, its "
          "fastest repetitions):\n");
  fprintf(out, "#   peak product %lld x %lld x %lld (whole waves): bf16 %.4g TFLOP/s, fp32 "
          "%.4g TFLOP/s\n", (long long)g->peak_shape[0], (long long)g->peak_shape[1],
          (long long)g->peak_shape[2], g->rate_peak[1] / 1e12, g->rate_peak[0] / 1e12);
  fprintf(out, "#   bf16 products, measured against the tile model from that peak:\n");
  for (int i = 0; i < TD_CAL_SHAPES; ++i)
    fprintf(out, "#     %6lld x %6lld x %6lld: %9.4g TFLOP/s measured, %9.4g modelled (%+.1f%%)\n",
            (long long)g->shape[i][0], (long long)g->shape[i][1], (long long)g->shape[i][2],
            g->rate[i] / 1e12, g->model[i] / 1e12, 100.0 * (g->model[i] / g->rate[i] - 1.0));
  fprintf(out, "#   copy: %.1f GB/s; a kernel: %.2f us; fused attention (bf16, causal): %.4g "
          "TFLOP/s\n", c->mem_bw / 1e9, c->kernel_s * 1e6, g->att_rate / 1e12);
  if (!g->links_measured)
    fprintf(out, "#   links: not measured (one rank, or no NCCL): replace links with your "
            "cluster's\n");
  for (int i = 0; i < g->sizes; ++i)
    fprintf(out, "#   all-reduce %10.0f B: %9.1f us, bus bandwidth %.2f GB/s\n", g->size[i],
            g->ar_s[i] * 1e6, g->busbw[i] / 1e9);
}
