/* dcomm_mpi.c — the test implementation of the device collectives
 * (kernels/td_dcomm.h) on the CPU back-end's host buffers, selected by
 * TD_TEST_DCOMM=1 (trainer, agreed over the job): the code written for NCCL
 * runs in the CPU suite.
 *
 * Every call is MPI's non-blocking collective on a duplicate of the group's
 * communicator, and nothing completes it but join (or test): a caller that
 * reads an output or reuses an input before joining its ticket races with
 * MPI, and the grid tests see the numbers move. Tickets count from 1;
 * join(t) waits for every call up to t, in order, as a stream would. */
#include <limits.h>
#include <stdlib.h>

#include "kernels/td_dcomm.h"
#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

#define MAX_CALLS 4096

typedef struct {
  MPI_Comm comm;
  uint64_t issued, done; /* tickets handed out; all up to `done` complete */
  MPI_Request req[MAX_CALLS]; /* call t is req[t % MAX_CALLS], for t in (done, issued] */
} mpi_state;

static td_status post(td_dcomm *c, MPI_Request r, uint64_t *ticket) {
  mpi_state *s = c->state;
  if (s->issued - s->done >= MAX_CALLS) {
    MPI_Request_free(&r);
    TD_FAIL(TD_ERR_INTERNAL, "%s device collectives: more than %d calls not joined", c->group,
            MAX_CALLS);
  }
  s->req[++s->issued % MAX_CALLS] = r;
  *ticket = s->issued;
  return TD_OK;
}

static td_status complete(td_dcomm *c, uint64_t ticket, int block, int *all) {
  mpi_state *s = c->state;
  if (ticket > s->issued)
    TD_FAIL(TD_ERR_INTERNAL, "%s device collectives: ticket %llu was never issued", c->group,
            (unsigned long long)ticket);
  *all = 1;
  while (s->done < ticket) {
    MPI_Request *r = &s->req[(s->done + 1) % MAX_CALLS];
    int flag = 1;
    if (block)
      TD_MPI_CHECK(td_watchdog_wait("MPI_Wait (device collective, test implementation)", s->comm,
                                    r));
    else
      TD_MPI_CHECK(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
    if (!flag) {
      *all = 0;
      return TD_OK;
    }
    s->done++;
  }
  return TD_OK;
}

static td_status mpi_join(td_dcomm *c, uint64_t ticket) {
  int all = 0;
  return complete(c, ticket, 1, &all);
}

static td_status mpi_test(td_dcomm *c, uint64_t ticket, int *done) {
  return complete(c, ticket, 0, done);
}

static td_status type_of(td_dtype t, MPI_Datatype *out) {
  if (t != TD_DTYPE_F32 && t != TD_DTYPE_BF16)
    TD_FAIL(TD_ERR_INTERNAL, "device collectives: unknown dtype %d", (int)t);
  *out = t == TD_DTYPE_F32 ? MPI_FLOAT : MPI_UINT16_T;
  return TD_OK;
}

static td_status mpi_allreduce(td_dcomm *c, void *buf, int64_t n, td_dtype t, int max,
                               uint64_t *ticket) {
  mpi_state *s = c->state;
  if (t != TD_DTYPE_F32)
    TD_FAIL(TD_ERR_INTERNAL, "device all-reduce (test implementation): float32 only");
  int cnt = 0;
  TD_CHECK(td_mpi_count(n, &cnt));
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, max ? MPI_MAX : MPI_SUM, s->comm,
                              &r));
  return post(c, r, ticket);
}

static td_status mpi_reduce_scatterv(td_dcomm *c, const float *send, float *recv,
                                     const int *counts, const int *displs, uint64_t *ticket) {
  mpi_state *s = c->state;
  /* MPI's parts follow each other from send[0]: the layout the engine uses */
  int64_t at = 0;
  for (int r = 0; r < c->size; ++r) {
    if (counts[r] > 0 && displs[r] != at)
      TD_FAIL(TD_ERR_INTERNAL, "device reduce-scatter (test implementation): part %d at %d, "
              "not after the parts before it (%lld)", r, displs[r], (long long)at);
    at += counts[r];
  }
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, s->comm, &r));
  return post(c, r, ticket);
}

static td_status mpi_allgatherv(td_dcomm *c, const void *send, void *recv, const int *counts,
                                const int *displs, td_dtype t, uint64_t *ticket) {
  mpi_state *s = c->state;
  MPI_Datatype mt = MPI_FLOAT;
  TD_CHECK(type_of(t, &mt));
  const char *mine = (const char *)recv + (size_t)displs[c->rank] * td_dtype_size(t);
  const void *sb = send == (const void *)mine ? MPI_IN_PLACE : send;
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(MPI_Iallgatherv(sb, counts[c->rank], mt, recv, counts, displs, mt, s->comm, &r));
  return post(c, r, ticket);
}

/* Point-to-point: the i-th send matches the i-th receive (one tag). */
static td_status p2p(td_dcomm *c, void *buf, int64_t n, td_dtype t, int peer, int recv,
                     uint64_t *ticket) {
  mpi_state *s = c->state;
  MPI_Datatype mt = MPI_FLOAT;
  int cnt = 0;
  TD_CHECK(type_of(t, &mt));
  TD_CHECK(td_mpi_count(n, &cnt));
  MPI_Request r = MPI_REQUEST_NULL;
  if (recv)
    TD_MPI_CHECK(MPI_Irecv(buf, cnt, mt, peer, 0, s->comm, &r));
  else
    TD_MPI_CHECK(MPI_Isend(buf, cnt, mt, peer, 0, s->comm, &r));
  return post(c, r, ticket);
}

static td_status mpi_send(td_dcomm *c, const void *buf, int64_t n, td_dtype t, int peer,
                          uint64_t *ticket) {
  return p2p(c, (void *)buf, n, t, peer, 0, ticket);
}

static td_status mpi_recv(td_dcomm *c, void *buf, int64_t n, td_dtype t, int peer,
                          uint64_t *ticket) {
  return p2p(c, buf, n, t, peer, 1, ticket);
}

static td_status mpi_alltoallv(td_dcomm *c, const void *send, const int *scounts,
                               const int *sdispls, void *recv, const int *rcounts,
                               const int *rdispls, td_dtype t, uint64_t *ticket) {
  mpi_state *s = c->state;
  MPI_Datatype mt = MPI_FLOAT;
  TD_CHECK(type_of(t, &mt));
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(MPI_Ialltoallv(send, scounts, sdispls, mt, recv, rcounts, rdispls, mt, s->comm, &r));
  return post(c, r, ticket);
}

static void mpi_destroy(td_dcomm *c, int abort) {
  mpi_state *s = c->state;
  if (!s) return;
  if (!abort) {
    int all = 0;
    (void)complete(c, s->issued, 1, &all);
    MPI_Comm_free(&s->comm);
  } /* aborting: calls may be in flight; the process ends without them */
  free(s);
  c->state = NULL;
}

static const td_dcomm_ops mpi_ops = {mpi_allreduce, mpi_reduce_scatterv, mpi_allgatherv,
                                     mpi_join,      mpi_test,            mpi_destroy,
                                     mpi_send,      mpi_recv,            mpi_alltoallv};

td_status td_dcomm_mpi_init(MPI_Comm comm, td_dcomm *c) {
  if (!c->k->host_memory)
    TD_FAIL(TD_ERR_USAGE, "TD_TEST_DCOMM=1 needs host memory (the CPU back-end without "
            "TD_TEST_STAGED)");
  mpi_state *s = calloc(1, sizeof *s);
  if (!s) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  if (MPI_Comm_dup(comm, &s->comm) != MPI_SUCCESS) {
    free(s);
    TD_FAIL(TD_ERR_MPI, "MPI_Comm_dup (device collectives, test implementation) failed");
  }
  c->ops = &mpi_ops;
  c->name = "mpi";
  c->state = s;
  return TD_OK;
}
