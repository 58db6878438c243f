/* dcomm.c — device communicators made from MPI ones, and the calls that
 * count what they move (td_coll.h, kernels/td_dcomm.h). */
#include <stdlib.h>
#include <string.h>

#include "kernels/td_dcomm.h"
#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"
#include "td_log.h"

const char *td_dcomm_kind_name(td_dcomm_kind kind) {
  return kind == TD_DCOMM_NCCL ? "nccl" : kind == TD_DCOMM_TEST_MPI ? "mpi (test)" : "off";
}

td_status td_dcomm_create(MPI_Comm comm, td_kernels *k, td_dcomm_kind kind, const char *group,
                          td_dcomm **out) {
  *out = NULL;
  int size = 1, rank = 0;
  if (kind == TD_DCOMM_OFF || comm == MPI_COMM_NULL) return TD_OK;
  TD_MPI_CHECK(MPI_Comm_size(comm, &size));
  TD_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  td_dcomm *c = calloc(1, sizeof *c);
  if (!c) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  c->k = k, c->size = size, c->rank = rank, c->group = group;
  td_status st = TD_OK;
  if (kind == TD_DCOMM_TEST_MPI) {
    st = td_dcomm_mpi_init(comm, c);
  } else {
    /* every member makes its local part and one names the communicator
     * (the others learn the name over MPI); whether all of that worked is
     * agreed before anyone joins, since the join waits for every member: a
     * failure there is one message on every rank, never a hang */
    unsigned char id[TD_DCOMM_ID_BYTES] = {0};
    if (!k->dcomm_setup || !k->dcomm_id || !k->dcomm_init)
      st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                        "the %s back-end has no device collectives (a build without NCCL)",
                        k->name);
    else
      st = k->dcomm_setup(k, c);
    if (st == TD_OK && rank == 0) st = k->dcomm_id(k, id);
    st = td_agree(comm, st);
    if (st == TD_OK) {
      int rc = MPI_Bcast(id, TD_DCOMM_ID_BYTES, MPI_BYTE, 0, comm);
      if (rc != MPI_SUCCESS) st = td_mpi_fail(rc, "MPI_Bcast (NCCL unique id)", __FILE__, __LINE__,
                                             __func__);
    }
    if (st == TD_OK) st = k->dcomm_init(k, id, c);
    st = td_agree(comm, st);
  }
  if (st != TD_OK) {
    if (c->ops) c->ops->destroy(c, 1);
    free(c);
    return st;
  }
  *out = c;
  return TD_OK;
}

void td_dcomm_destroy(td_dcomm **cp) {
  if (!cp || !*cp) return;
  td_dcomm *c = *cp;
  *cp = NULL;
  /* a rank failing alone must not wait for the others' part of a call */
  c->ops->destroy(c, td_error_alone());
  free(c);
}

static void count(td_coll_stats *s, td_coll_kind kind, double bytes) {
  if (!s) return;
  s->bytes[kind] += bytes;
  s->calls[kind]++;
}

td_status td_dcomm_allreduce(td_dcomm *c, float *buf, int64_t n, int max, td_coll_stats *stats,
                             uint64_t *ticket) {
  TD_CHECK(c->ops->allreduce(c, buf, n, TD_DTYPE_F32, max, ticket));
  count(stats, TD_COLL_ALLREDUCE, 2.0 * (double)(c->size - 1) / c->size * (double)n * 4.0);
  return TD_OK;
}

td_status td_dcomm_allreduce_joined(td_dcomm *c, float *buf, int64_t n, int max,
                                    td_coll_stats *stats) {
  uint64_t t = 0;
  TD_CHECK(td_dcomm_allreduce(c, buf, n, max, stats, &t));
  return c->ops->join(c, t);
}

static double total(const td_dcomm *c, const int *counts) {
  double s = 0;
  for (int r = 0; r < c->size; ++r) s += counts[r];
  return s;
}

td_status td_dcomm_reduce_scatterv(td_dcomm *c, const float *send, float *recv, const int *counts,
                                   const int *displs, td_coll_stats *stats, uint64_t *ticket) {
  TD_CHECK(c->ops->reduce_scatterv(c, send, recv, counts, displs, ticket));
  count(stats, TD_COLL_REDUCE_SCATTER, total(c, counts) * 4.0 * (double)(c->size - 1) / c->size);
  return TD_OK;
}

td_status td_dcomm_allgatherv(td_dcomm *c, const void *send, void *recv, const int *counts,
                              const int *displs, td_dtype t, td_coll_stats *stats,
                              uint64_t *ticket) {
  TD_CHECK(c->ops->allgatherv(c, send, recv, counts, displs, t, ticket));
  count(stats, TD_COLL_ALLGATHER,
        total(c, counts) * (double)td_dtype_size(t) * (double)(c->size - 1) / c->size);
  return TD_OK;
}

td_status td_dcomm_alltoallv(td_dcomm *c, const void *send, const int *scounts,
                             const int *sdispls, void *recv, const int *rcounts,
                             const int *rdispls, td_dtype t, td_coll_stats *stats,
                             uint64_t *ticket) {
  TD_CHECK(c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t, ticket));
  count(stats, TD_COLL_SENDRECV, (total(c, scounts) - scounts[c->rank]) * (double)td_dtype_size(t));
  return TD_OK;
}

static td_status check_peer(const td_dcomm *c, int peer) {
  if (peer < 0 || peer >= c->size || peer == c->rank)
    TD_FAIL(TD_ERR_INTERNAL, "%s device point-to-point: peer %d of %d members (this is %d)",
            c->group, peer, c->size, c->rank);
  return TD_OK;
}

td_status td_dcomm_send(td_dcomm *c, const float *buf, int64_t n, int peer, td_coll_stats *stats,
                        uint64_t *ticket) {
  TD_CHECK(check_peer(c, peer));
  TD_CHECK(c->ops->send(c, buf, n, TD_DTYPE_F32, peer, ticket));
  count(stats, TD_COLL_SENDRECV, (double)n * 4.0);
  return TD_OK;
}

td_status td_dcomm_recv(td_dcomm *c, float *buf, int64_t n, int peer, td_coll_stats *stats,
                        uint64_t *ticket) {
  TD_CHECK(check_peer(c, peer));
  TD_CHECK(c->ops->recv(c, buf, n, TD_DTYPE_F32, peer, ticket));
  count(stats, TD_COLL_SENDRECV, (double)n * 4.0);
  return TD_OK;
}

td_status td_dcomm_join(td_dcomm *c, uint64_t ticket) { return c->ops->join(c, ticket); }

td_status td_dcomm_test(td_dcomm *c, uint64_t ticket, int *done) {
  return c->ops->test(c, ticket, done);
}

td_status td_dcomm_wait(td_dcomm *c, uint64_t ticket, const char *op, MPI_Comm comm,
                        td_coll_stats *stats, td_coll_kind kind) {
  double t0 = td_now();
  int done = 0, token = td_watchdog_begin(op, comm);
  td_status st = TD_OK;
  while (st == TD_OK && !done) {
    st = c->ops->test(c, ticket, &done);
    td_watchdog_check();
  }
  td_watchdog_end(token);
  if (stats) stats->ms[kind] += 1e3 * (td_now() - t0);
  return st;
}
