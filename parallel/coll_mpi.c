/* coll_mpi.c — the MPI implementation of the collectives (host memory; the
 * _staged calls copy a device back-end's buffers through host memory). */
#include "parallel/td_coll.h"

#include <limits.h>

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
