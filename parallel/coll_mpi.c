/* coll_mpi.c — the MPI implementation of the collectives (host memory; the
 * _staged calls copy a device back-end's buffers through host memory). */
#include "parallel/td_coll.h"

#include <limits.h>
#include <stdlib.h>

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"
#include "td_log.h"

const char *td_coll_kind_name(td_coll_kind k) {
  static const char *const names[TD_COLL_KINDS] = {"allreduce", "reduce_scatter", "allgather",
                                                   "bcast", "sendrecv"};
  return k < TD_COLL_KINDS ? names[k] : "?";
}

void td_coll_stats_total(const td_coll_stats *s, double *bytes, double *ms) {
  *bytes = 0, *ms = 0;
  for (int i = 0; i < TD_COLL_KINDS; ++i) *bytes += s->bytes[i], *ms += s->ms[i];
}

static int comm_size(MPI_Comm comm) {
  int n = 1;
  if (comm != MPI_COMM_NULL && MPI_Comm_size(comm, &n) != MPI_SUCCESS) n = 1;
  return n;
}

static void count(td_coll_stats *s, td_coll_kind k, double bytes, double t0) {
  if (!s) return;
  s->bytes[k] += bytes;
  s->ms[k] += 1e3 * (td_now() - t0);
  s->calls[k]++;
}

/* All-reduce in chunks of at most INT_MAX elements. */
static td_status allreduce(MPI_Comm comm, void *buf, int64_t n, MPI_Datatype type, size_t esize,
                           MPI_Op op, td_coll_stats *stats) {
  int p = comm_size(comm);
  if (p == 1 || n == 0) return TD_OK;
  double t0 = td_now();
  for (int64_t off = 0; off < n; off += INT_MAX) {
    int64_t c = n - off < INT_MAX ? n - off : INT_MAX;
    MPI_Request r = MPI_REQUEST_NULL;
    TD_MPI_CHECK(td_watched(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * (int64_t)esize,
                                           (int)c, type, op, comm, &r),
                            "MPI_Allreduce", comm, &r));
  }
  count(stats, TD_COLL_ALLREDUCE, 2.0 * (double)(p - 1) / p * (double)n * (double)esize, t0);
  return TD_OK;
}

td_status td_coll_allreduce_f32(MPI_Comm comm, float *buf, int64_t n, MPI_Op op,
                                td_coll_stats *stats) {
  return allreduce(comm, buf, n, MPI_FLOAT, sizeof(float), op, stats);
}

td_status td_coll_allreduce_f64(MPI_Comm comm, double *buf, int64_t n, MPI_Op op,
                                td_coll_stats *stats) {
  return allreduce(comm, buf, n, MPI_DOUBLE, sizeof(double), op, stats);
}

td_status td_coll_allreduce_f32_staged(MPI_Comm comm, td_kernels *k, float *buf, float *stage,
                                       int64_t n, MPI_Op op, td_coll_stats *stats) {
  if (k->host_memory) return allreduce(comm, buf, n, MPI_FLOAT, sizeof(float), op, stats);
  if (comm_size(comm) == 1 || n == 0) return TD_OK;
  if (!stage) TD_FAIL(TD_ERR_INTERNAL, "staged all-reduce of %lld floats without a host buffer",
                      (long long)n);
  size_t bytes = (size_t)n * sizeof(float);
  TD_CHECK(k->to_host(k, stage, buf, bytes));
  TD_CHECK(allreduce(comm, stage, n, MPI_FLOAT, sizeof(float), op, stats));
  TD_CHECK(k->to_device(k, buf, stage, bytes));
  return TD_OK;
}

td_status td_coll_bcast_f32(MPI_Comm comm, float *buf, int64_t n, int root, td_coll_stats *stats) {
  int p = comm_size(comm);
  if (p == 1 || n == 0) return TD_OK;
  double t0 = td_now();
  for (int64_t off = 0; off < n; off += INT_MAX) {
    int64_t c = n - off < INT_MAX ? n - off : INT_MAX;
    MPI_Request r = MPI_REQUEST_NULL;
    TD_MPI_CHECK(td_watched(MPI_Ibcast(buf + off, (int)c, MPI_FLOAT, root, comm, &r), "MPI_Bcast",
                            comm, &r));
  }
  count(stats, TD_COLL_BCAST, (double)n * sizeof(float), t0);
  return TD_OK;
}

/* Equal counts (n each) and their displacements for the v-collectives: the
 * same MPI calls the device collectives' test implementation makes
 * (parallel/dcomm_mpi.c), so both paths reduce in the same order. */
static td_status equal_parts(int p, int64_t n, int **counts, int **displs) {
  int c = 0, all = 0; /* the whole must have an int count too */
  TD_CHECK(td_mpi_count(n, &c));
  TD_CHECK(td_mpi_count(n * p, &all));
  *counts = malloc((size_t)p * sizeof(int));
  *displs = malloc((size_t)p * sizeof(int));
  if (!*counts || !*displs) {
    free(*counts), free(*displs);
    *counts = *displs = NULL;
    TD_FAIL(TD_ERR_NOMEM, "out of memory");
  }
  for (int r = 0; r < p; ++r) (*counts)[r] = c, (*displs)[r] = r * c;
  return TD_OK;
}

td_status td_coll_reduce_scatter_f32_staged(MPI_Comm comm, td_kernels *k, const float *send,
                                            float *recv, float *stage, int64_t n,
                                            td_coll_stats *stats) {
  int p = comm_size(comm);
  if (p == 1 || n == 0) return TD_OK;
  int host = k->host_memory;
  if (!host && !stage)
    TD_FAIL(TD_ERR_INTERNAL, "staged reduce-scatter of %lld floats without a host buffer",
            (long long)n);
  int *counts = NULL, *displs = NULL;
  TD_CHECK(equal_parts(p, n, &counts, &displs));
  td_status st = TD_OK;
  const float *sb = send;
  float *rb = recv;
  if (!host) {
    sb = stage, rb = stage + (int64_t)p * n;
    st = k->to_host(k, stage, send, (size_t)(p * n) * sizeof(float));
  }
  double t0 = td_now();
  if (st == TD_OK) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = td_watched(MPI_Ireduce_scatter(sb, rb, counts, MPI_FLOAT, MPI_SUM, comm, &r),
                        "MPI_Reduce_scatter", comm, &r);
    if (rc != MPI_SUCCESS)
      st = td_mpi_fail(rc, "MPI_Reduce_scatter", __FILE__, __LINE__, __func__);
  }
  count(stats, TD_COLL_REDUCE_SCATTER, (double)(p - 1) * (double)n * sizeof(float), t0);
  if (st == TD_OK && !host) st = k->to_device(k, recv, rb, (size_t)n * sizeof(float));
  free(counts), free(displs);
  return st;
}

td_status td_coll_allgather_staged(MPI_Comm comm, td_kernels *k, const void *send, void *recv,
                                   void *stage, int64_t n, td_dtype t, td_coll_stats *stats) {
  int p = comm_size(comm), rank = 0;
  if (p == 1 || n == 0) return TD_OK;
  TD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int host = k->host_memory;
  if (!host && !stage)
    TD_FAIL(TD_ERR_INTERNAL, "staged all-gather of %lld elements without a host buffer",
            (long long)n);
  if (t != TD_DTYPE_F32 && t != TD_DTYPE_BF16)
    TD_FAIL(TD_ERR_INTERNAL, "all-gather: float32 or bf16 only (dtype %d)", (int)t);
  MPI_Datatype mt = t == TD_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T;
  size_t es = td_dtype_size(t);
  int *counts = NULL, *displs = NULL;
  TD_CHECK(equal_parts(p, n, &counts, &displs));
  td_status st = TD_OK;
  const void *sb = send;
  void *rb = recv;
  if (!host) {
    sb = MPI_IN_PLACE, rb = stage;
    st = k->to_host(k, (char *)stage + (size_t)rank * (size_t)n * es, send, (size_t)n * es);
  } else if ((const char *)send == (const char *)recv + (size_t)rank * (size_t)n * es) {
    sb = MPI_IN_PLACE; /* this rank's part already in place */
  }
  double t0 = td_now();
  if (st == TD_OK) {
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = td_watched(MPI_Iallgatherv(sb, counts[rank], mt, rb, counts, displs, mt, comm, &r),
                        "MPI_Allgather", comm, &r);
    if (rc != MPI_SUCCESS) st = td_mpi_fail(rc, "MPI_Allgather", __FILE__, __LINE__, __func__);
  }
  count(stats, TD_COLL_ALLGATHER, (double)(p - 1) * (double)n * (double)es, t0);
  if (st == TD_OK && !host) st = k->to_device(k, recv, stage, (size_t)p * (size_t)n * es);
  free(counts), free(displs);
  return st;
}
