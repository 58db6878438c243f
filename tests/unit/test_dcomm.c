/* test_dcomm.c — the device collectives (kernels/td_dcomm.h) on their own,
 * over MPI_COMM_WORLD: `test_dcomm cpu` the test implementation on the CPU
 * back-end (parallel/dcomm_mpi.c), `test_dcomm cuda` NCCL on the GPUs, one
 * per rank (exit 77 where no GPU is visible, this build's module has no
 * NCCL, or ranks would share a GPU). Every call on buffers of the back-end,
 * values integers so every sum is exact:
 *   - all-reduce sum and max (float32), with several calls in flight and only
 *     the last joined (calls complete in order);
 *   - reduce-scatterv with parts of unequal size, some empty, and the uniform
 *     case (NCCL: ncclReduceScatter);
 *   - all-gatherv with unequal parts (float32 and bf16) and in place with equal
 *     parts (NCCL: ncclAllGather);
 *   - point-to-point between pairs (ranks 2i and 2i + 1): two messages one
 *     way, only the last joined, then one back (the i-th send matches the
 *     i-th receive; a send may wait for its receive, so each side's calls
 *     are in an order that never waits for itself);
 *   - test() reaches done, td_dcomm_wait returns, a ticket never issued is an
 *     error naming the group, and the byte counters hold the ring volumes. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/td_dcomm.h"
#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"

static int g_rank, g_size, g_fail, g_pass;

static void check(int ok, const char *what) {
  int all = ok;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) fprintf(stderr, "[rank %d] FAIL %s\n", g_rank, what);
  if (all) g_pass++;
  else g_fail++;
  if (g_rank == 0 && all) printf("ok   %s\n", what);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static float val(int rank, int64_t i) { return (float)(rank + 1 + i % 7); }

/* The back-end buffer dev (n floats) holds want (host)? */
static int holds(td_kernels *k, const void *dev, const float *want, int64_t n) {
  float *got = calloc((size_t)n + 1, sizeof *got);
  int ok = got && k->to_host(k, got, dev, (size_t)n * sizeof(float)) == TD_OK &&
           memcmp(got, want, (size_t)n * sizeof(float)) == 0;
  free(got);
  return ok;
}

static void *dev_of(td_kernels *k, const void *host, size_t bytes) {
  void *d = NULL;
  if (k->alloc(k, &d, bytes ? bytes : 4, "test buffer") != TD_OK) return NULL;
  if (host && bytes && k->to_device(k, d, host, bytes) != TD_OK) return NULL;
  return d;
}

static void test_allreduce(td_kernels *k, struct td_dcomm *c, td_coll_stats *st) {
  const int64_t n = 1001, calls = 3;
  float *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want);
  float *d[3];
  uint64_t t[3];
  td_status s = TD_OK;
  for (int j = 0; j < calls; ++j) {
    for (int64_t i = 0; i < n; ++i) h[i] = val(g_rank, i) * (float)(j + 1);
    d[j] = dev_of(k, h, n * sizeof *h);
    if (s == TD_OK) s = td_dcomm_allreduce(c, d[j], n, j == 2, st, &t[j]);
  }
  if (s == TD_OK) s = td_dcomm_join(c, t[calls - 1]); /* the last: the others are done too */
  int ok = s == TD_OK;
  for (int j = 0; j < calls; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0, mx = 0;
      for (int r = 0; r < g_size; ++r) {
        float v = val(r, i) * (float)(j + 1);
        sum += v;
        mx = v > mx ? v : mx;
      }
      want[i] = j == 2 ? mx : sum;
    }
    ok = ok && holds(k, d[j], want, n);
    k->free(k, d[j]);
  }
  check(ok, "all-reduce sum (two calls) and max, only the last joined");
  free(h);
  free(want);
}

/* counts[r] of a part layout: `uniform` all equal, else unequal with empty ones. */
static void layout(int uniform, int *counts, int *displs, int64_t *total) {
  *total = 0;
  for (int r = 0; r < g_size; ++r) {
    counts[r] = uniform ? 37 : (r * 5 + 3) % 4 == 0 ? 0 : 10 + 13 * r;
    displs[r] = (int)*total;
    *total += counts[r];
  }
}

static void test_reduce_scatter(td_kernels *k, struct td_dcomm *c, int uniform,
                                td_coll_stats *st) {
  int counts[64], displs[64];
  int64_t total = 0;
  layout(uniform, counts, displs, &total);
  float *h = malloc((total + 1) * sizeof *h), *want = malloc((total + 1) * sizeof *want);
  for (int64_t i = 0; i < total; ++i) h[i] = val(g_rank, i);
  float *send = dev_of(k, h, total * sizeof *h), *recv = dev_of(k, NULL, 0);
  int mine = counts[g_rank];
  if (mine > 0) {
    k->free(k, recv);
    recv = dev_of(k, NULL, mine * sizeof(float));
  }
  uint64_t t = 0;
  td_status s = td_dcomm_reduce_scatterv(c, send, recv, counts, displs, st, &t);
  if (s == TD_OK) s = td_dcomm_join(c, t);
  for (int i = 0; i < mine; ++i) {
    float sum = 0;
    for (int r = 0; r < g_size; ++r) sum += val(r, displs[g_rank] + i);
    want[i] = sum;
  }
  char what[96];
  snprintf(what, sizeof what, "reduce-scatterv, %s parts", uniform ? "equal" : "unequal and empty");
  check(s == TD_OK && holds(k, recv, want, mine), what);
  k->free(k, send);
  k->free(k, recv);
  free(h);
  free(want);
}

static void test_allgather(td_kernels *k, struct td_dcomm *c, int uniform, td_dtype type,
                           td_coll_stats *st) {
  int counts[64], displs[64];
  int64_t total = 0;
  layout(uniform, counts, displs, &total);
  size_t es = td_dtype_size(type);
  float *want = malloc((total + 1) * sizeof *want), *mine = malloc((total + 1) * sizeof *mine);
  for (int r = 0; r < g_size; ++r)
    for (int i = 0; i < counts[r]; ++i) want[displs[r] + i] = val(r, i);
  for (int i = 0; i < counts[g_rank]; ++i) mine[i] = val(g_rank, i);
  /* in place (equal parts): this rank's part already sits in recv */
  float *recv = dev_of(k, NULL, total * es + 4), *send = NULL, *f32 = NULL;
  void *src = NULL;
  if (type == TD_DTYPE_BF16) { /* small integers are exact in bf16 */
    send = dev_of(k, mine, counts[g_rank] * sizeof(float) + 4);
    src = dev_of(k, NULL, counts[g_rank] * es + 4);
    k->cast(k, src, TD_DTYPE_BF16, send, TD_DTYPE_F32, counts[g_rank]);
  } else if (uniform) {
    k->to_device(k, (char *)recv + (size_t)displs[g_rank] * es, mine, counts[g_rank] * es);
    src = (char *)recv + (size_t)displs[g_rank] * es;
  } else {
    src = send = dev_of(k, mine, counts[g_rank] * sizeof(float) + 4);
  }
  uint64_t t = 0;
  td_status s = td_dcomm_allgatherv(c, src, recv, counts, displs, type, st, &t);
  if (s == TD_OK) s = td_dcomm_join(c, t);
  if (s == TD_OK && type == TD_DTYPE_BF16) {
    f32 = dev_of(k, NULL, total * sizeof(float) + 4);
    s = k->cast(k, f32, TD_DTYPE_F32, recv, TD_DTYPE_BF16, total);
  }
  char what[96];
  snprintf(what, sizeof what, "all-gatherv %s, %s parts%s", type == TD_DTYPE_BF16 ? "bf16" : "f32",
           uniform ? "equal" : "unequal and empty",
           uniform && type == TD_DTYPE_F32 ? ", in place" : "");
  check(s == TD_OK && holds(k, f32 ? f32 : recv, want, total), what);
  k->free(k, recv);
  if (send) k->free(k, send);
  if (type == TD_DTYPE_BF16) k->free(k, src);
  if (f32) k->free(k, f32);
  free(want);
  free(mine);
}

static void test_p2p(td_kernels *k, struct td_dcomm *c, td_coll_stats *st) {
  const int64_t n = 777;
  int peer = g_rank ^ 1;
  if (peer >= g_size) { /* odd one out: nothing to do, but the check is collective */
    check(1, "point-to-point between pairs (two one way, one back)");
    return;
  }
  float *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want);
  float *a = dev_of(k, NULL, n * sizeof *h), *b = dev_of(k, NULL, n * sizeof *h);
  uint64_t t1 = 0, t2 = 0, t3 = 0;
  td_status s = TD_OK;
  int ok = 1, even = g_rank % 2 == 0;
  if (even) {
    for (int64_t i = 0; i < n; ++i) h[i] = val(g_rank, i);
    k->to_device(k, a, h, n * sizeof *h);
    for (int64_t i = 0; i < n; ++i) h[i] = 2.0f * val(g_rank, i);
    k->to_device(k, b, h, n * sizeof *h);
    s = td_dcomm_send(c, a, n, peer, st, &t1);
    if (s == TD_OK) s = td_dcomm_send(c, b, n, peer, st, &t2);
    if (s == TD_OK) s = td_dcomm_join(c, t2);
    if (s == TD_OK) s = td_dcomm_recv(c, a, n, peer, st, &t3);
    if (s == TD_OK) s = td_dcomm_join(c, t3);
    for (int64_t i = 0; i < n; ++i) want[i] = 3.0f * val(peer, i);
    ok = s == TD_OK && holds(k, a, want, n);
  } else {
    s = td_dcomm_recv(c, a, n, peer, st, &t1);
    if (s == TD_OK) s = td_dcomm_recv(c, b, n, peer, st, &t2);
    if (s == TD_OK) s = td_dcomm_join(c, t2);
    for (int64_t i = 0; i < n; ++i) want[i] = val(peer, i);
    ok = s == TD_OK && holds(k, a, want, n);
    for (int64_t i = 0; i < n; ++i) want[i] = 2.0f * val(peer, i);
    ok = ok && holds(k, b, want, n);
    for (int64_t i = 0; i < n; ++i) h[i] = 3.0f * val(g_rank, i);
    k->to_device(k, a, h, n * sizeof *h);
    if (s == TD_OK) s = td_dcomm_send(c, a, n, peer, st, &t3);
    if (s == TD_OK) s = td_dcomm_join(c, t3);
  }
  if (s != TD_OK) fprintf(stderr, "[rank %d] %s\n", g_rank, td_error_message());
  check(ok && st->calls[TD_COLL_SENDRECV] == 3 && near(st->bytes[TD_COLL_SENDRECV], 3.0 * n * 4),
        "point-to-point between pairs (two one way, one back)");
  k->free(k, a);
  k->free(k, b);
  free(h);
  free(want);
}

static void test_completion(td_kernels *k, struct td_dcomm *c) {
  float h[64];
  for (int i = 0; i < 64; ++i) h[i] = 1.0f;
  float *d = dev_of(k, h, sizeof h);
  uint64_t t = 0;
  int done = 0;
  td_status s = td_dcomm_allreduce(c, d, 64, 0, NULL, &t);
  for (int i = 0; s == TD_OK && !done && i < 100000000; ++i) s = td_dcomm_test(c, t, &done);
  check(s == TD_OK && done, "test() reaches done");
  s = td_dcomm_allreduce(c, d, 64, 0, NULL, &t);
  if (s == TD_OK)
    s = td_dcomm_wait(c, t, "test wait", MPI_COMM_WORLD, NULL, TD_COLL_ALLREDUCE);
  if (s == TD_OK) s = td_dcomm_join(c, t);
  for (int i = 0; i < 64; ++i) h[i] = (float)g_size * (float)g_size;
  check(s == TD_OK && holds(k, d, h, 64), "td_dcomm_wait, then the result");
  s = td_dcomm_join(c, t + 1000);
  check(s != TD_OK && strstr(td_error_message(), "never issued") &&
            strstr(td_error_message(), "data-parallel"),
        "a ticket never issued is an error naming the group");
  td_error_clear();
  k->free(k, d);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const char *dev = argc > 1 ? argv[1] : "cpu";
  int cuda = strcmp(dev, "cuda") == 0;
  if (g_size > 64) {
    if (g_rank == 0) fprintf(stderr, "test_dcomm: at most 64 ranks\n");
    MPI_Finalize();
    return 1;
  }
  /* skip (77) unless every rank has its own GPU and NCCL: agreed */
  int skip = 0;
  char why[128] = "";
  if (cuda) {
    MPI_Comm node;
    int local = 0, nlocal = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &nlocal);
    MPI_Comm_free(&node);
    int gpus = td_kernels_gpu_count();
    if (gpus == 0) skip = 1, snprintf(why, sizeof why, "no GPU visible");
    else if (!td_kernels_gpu_nccl()) skip = 1, snprintf(why, sizeof why, "module without NCCL");
    else if (nlocal > gpus) skip = 1, snprintf(why, sizeof why, "%d ranks, %d GPUs", nlocal, gpus);
    else td_kernels_gpu_select(local);
  }
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (skip) {
    if (g_rank == 0) printf("test_dcomm: skipped (%s)\n", why[0] ? why : "another rank");
    MPI_Finalize();
    return 77;
  }
  td_kernels *k = NULL;
  td_status s = td_kernels_create(dev, 1, &k);
  struct td_dcomm *c = NULL;
  if (s == TD_OK)
    s = td_dcomm_create(MPI_COMM_WORLD, k, cuda ? TD_DCOMM_NCCL : TD_DCOMM_TEST_MPI,
                        "data-parallel", &c);
  check(s == TD_OK && c && c->size == g_size && c->rank == g_rank, "communicator made");
  if (s != TD_OK) {
    fprintf(stderr, "[rank %d] %s\n", g_rank, td_error_message());
    MPI_Finalize();
    return 1;
  }
  if (g_rank == 0) printf("test_dcomm: %d rank%s, %s back-end, %s\n", g_size,
                          g_size == 1 ? "" : "s", k->name, c->name);
  td_coll_stats st;
  memset(&st, 0, sizeof st);
  test_allreduce(k, c, &st);
  test_reduce_scatter(k, c, 0, &st);
  test_reduce_scatter(k, c, 1, &st);
  test_allgather(k, c, 0, TD_DTYPE_F32, &st);
  test_allgather(k, c, 1, TD_DTYPE_F32, &st);
  test_allgather(k, c, 0, TD_DTYPE_BF16, &st);
  td_coll_stats pst;
  memset(&pst, 0, sizeof pst);
  test_p2p(k, c, &pst);
  /* ring volumes: 3 all-reduces of 1001 floats, reduce-scatters and
   * all-gathers of their totals */
  double f = (double)(g_size - 1) / g_size;
  int cu[64], du[64], ce[64], de[64];
  int64_t tu = 0, te = 0;
  layout(0, cu, du, &tu);
  layout(1, ce, de, &te);
  double ar = 3 * 2.0 * f * 1001 * 4, rs = f * (double)(tu + te) * 4,
         ag = f * ((double)tu * 4 + (double)te * 4 + (double)tu * 2);
  check(near(st.bytes[TD_COLL_ALLREDUCE], ar) && near(st.bytes[TD_COLL_REDUCE_SCATTER], rs) &&
            near(st.bytes[TD_COLL_ALLGATHER], ag) && st.calls[TD_COLL_ALLREDUCE] == 3 &&
            st.calls[TD_COLL_REDUCE_SCATTER] == 2 && st.calls[TD_COLL_ALLGATHER] == 3,
        "byte and call counters (ring volumes)");
  test_completion(k, c);
  td_dcomm_destroy(&c);
  td_kernels_destroy(&k);
  if (g_rank == 0) printf("%d passed, %d failed\n", g_pass, g_fail);
  MPI_Finalize();
  return g_fail ? 1 : 0;
}
