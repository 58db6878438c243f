/* nccl.cu — the device collectives of kernels/td_dcomm.h over NCCL.
 *
 * One NCCL communicator per group, joined with the id that
 * parallel/dcomm.c sends over MPI, and one communication stream for it.
 * Ordering (the td_dcomm.h contract):
 *   call t:  `ready` recorded on the compute stream (s->stream), the
 *            communication stream waits for it, the NCCL call(s) are queued
 *            there, then done[t mod R] is recorded after them;
 *   join(t): the compute stream waits for done[t mod R];
 *   test(t): cudaEventQuery(done[t mod R]), and NCCL's asynchronous error.
 * An event slot is reused R calls later; joining or testing an older ticket
 * then sees a later call's completion, which implies its own (calls complete
 * in order on the one stream): waiting too long, never too short.
 *
 * The v-collectives (parts of unequal size: ZeRO's units cut by the shard
 * boundaries) are NCCL group calls: reduce-scatterv is one ncclReduce per
 * non-empty part, rooted at the part's owner; allgatherv one ncclBroadcast
 * per part from its owner. Equal parts in rank order use ncclReduceScatter
 * and ncclAllGather. Sums are float32; NCCL's reduction order is fixed for
 * a given communicator and size, so runs repeat bit for bit.
 *
 * Point-to-point (send, recv): ncclSend / ncclRecv on the communication
 * stream, one call each. The pipeline uses them on one-way channels (a
 * communicator per direction of each link, app/train/pipeline.c), so a stream
 * never holds a send and a receive that could wait on each other. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/td_dcomm.h"

#ifdef TD_HAVE_NCCL
#include <nccl.h>

static_assert(sizeof(ncclUniqueId) == TD_DCOMM_ID_BYTES, "ncclUniqueId is not 128 bytes");

#define TD_NCCL_EVENTS 256

typedef struct {
  ncclComm_t comm;
  cudaStream_t stream; /* the communication stream */
  cudaStream_t compute; /* the back-end's stream */
  cudaEvent_t ready;
  cudaEvent_t done[TD_NCCL_EVENTS];
  int nevents;         /* created so far (destroy frees these) */
  uint64_t issued;     /* tickets handed out, from 1 */
} nccl_state;

static td_status nccl_fail(ncclResult_t r, ncclComm_t comm, const char *group, const char *call,
                           const char *file, int line, const char *func) {
  const char *last = comm ? ncclGetLastError(comm) : NULL;
  return td_error_set(TD_ERR_CUDA, file, line, func, "%s (%s group): %s%s%s%s", call, group,
                      ncclGetErrorString(r), last && *last ? " (" : "", last ? last : "",
                      last && *last ? ")" : "");
}
#define TD_NCCL_CHECK(c, call)                                                          \
  do {                                                                                  \
    ncclResult_t td__r = (call);                                                        \
    if (td__r != ncclSuccess)                                                           \
      return nccl_fail(td__r, ((nccl_state *)(c)->state)->comm, (c)->group, #call,      \
                       __FILE__, __LINE__, __func__);                                   \
  } while (0)

static nccl_state *ns(td_dcomm *c) { return (nccl_state *)c->state; }

static ncclDataType_t nccl_type(td_dtype t) {
  return t == TD_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* Queue the communication stream behind the compute stream's work. */
static td_status before(td_dcomm *c) {
  nccl_state *s = ns(c);
  TD_CUDA_CHECK(cudaEventRecord(s->ready, s->compute));
  TD_CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->ready, 0));
  return TD_OK;
}

/* Mark the end of the call just queued; its ticket. */
static td_status after(td_dcomm *c, uint64_t *ticket) {
  nccl_state *s = ns(c);
  uint64_t t = ++s->issued;
  TD_CUDA_CHECK(cudaEventRecord(s->done[t % TD_NCCL_EVENTS], s->stream));
  *ticket = t;
  return TD_OK;
}

/* Parts of equal size in rank order: the plain collective applies. */
static int uniform(const td_dcomm *c, const int *counts, const int *displs) {
  for (int r = 0; r < c->size; ++r)
    if (counts[r] != counts[0] || displs[r] != r * counts[0]) return 0;
  return 1;
}

static td_status nccl_allreduce(td_dcomm *c, void *buf, int64_t n, td_dtype t, int max,
                                uint64_t *ticket) {
  TD_CHECK(before(c));
  TD_NCCL_CHECK(c, ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), max ? ncclMax : ncclSum,
                                 ns(c)->comm, ns(c)->stream));
  return after(c, ticket);
}

static td_status nccl_reduce_scatterv(td_dcomm *c, const float *send, float *recv,
                                      const int *counts, const int *displs, uint64_t *ticket) {
  nccl_state *s = ns(c);
  TD_CHECK(before(c));
  if (uniform(c, counts, displs)) {
    if (counts[0] > 0)
      TD_NCCL_CHECK(c, ncclReduceScatter(send, recv, (size_t)counts[0], ncclFloat32, ncclSum,
                                         s->comm, s->stream));
    return after(c, ticket);
  }
  TD_NCCL_CHECK(c, ncclGroupStart());
  for (int r = 0; r < c->size; ++r) {
    if (counts[r] == 0) continue;
    ncclResult_t e = ncclReduce(send + displs[r], recv, (size_t)counts[r], ncclFloat32, ncclSum, r,
                                s->comm, s->stream);
    if (e != ncclSuccess) {
      (void)ncclGroupEnd();
      return nccl_fail(e, s->comm, c->group, "ncclReduce (a part of a reduce-scatter)", __FILE__,
                       __LINE__, __func__);
    }
  }
  TD_NCCL_CHECK(c, ncclGroupEnd());
  return after(c, ticket);
}

static td_status nccl_allgatherv(td_dcomm *c, const void *send, void *recv, const int *counts,
                                 const int *displs, td_dtype t, uint64_t *ticket) {
  nccl_state *s = ns(c);
  size_t es = td_dtype_size(t);
  TD_CHECK(before(c));
  if (uniform(c, counts, displs)) {
    if (counts[0] > 0)
      TD_NCCL_CHECK(c, ncclAllGather(send, recv, (size_t)counts[0], nccl_type(t), s->comm,
                                     s->stream));
    return after(c, ticket);
  }
  TD_NCCL_CHECK(c, ncclGroupStart());
  for (int r = 0; r < c->size; ++r) {
    if (counts[r] == 0) continue;
    ncclResult_t e = ncclBroadcast(send, (char *)recv + (size_t)displs[r] * es, (size_t)counts[r],
                                   nccl_type(t), r, s->comm, s->stream);
    if (e != ncclSuccess) {
      (void)ncclGroupEnd();
      return nccl_fail(e, s->comm, c->group, "ncclBroadcast (a part of an all-gather)", __FILE__,
                       __LINE__, __func__);
    }
  }
  TD_NCCL_CHECK(c, ncclGroupEnd());
  return after(c, ticket);
}

/* Point-to-point on the communication stream (a one-way channel: the
 * pipeline gives each its own communicator, kernels/td_dcomm.h). */
static td_status nccl_send(td_dcomm *c, const void *buf, int64_t n, td_dtype t, int peer,
                           uint64_t *ticket) {
  TD_CHECK(before(c));
  if (n > 0)
    TD_NCCL_CHECK(c, ncclSend(buf, (size_t)n, nccl_type(t), peer, ns(c)->comm, ns(c)->stream));
  return after(c, ticket);
}

static td_status nccl_recv(td_dcomm *c, void *buf, int64_t n, td_dtype t, int peer,
                           uint64_t *ticket) {
  TD_CHECK(before(c));
  if (n > 0)
    TD_NCCL_CHECK(c, ncclRecv(buf, (size_t)n, nccl_type(t), peer, ns(c)->comm, ns(c)->stream));
  return after(c, ticket);
}

/* All-to-all: a group of ncclSend/ncclRecv, one pair a peer; this rank's
 * own part copied on the communication stream. */
static td_status nccl_alltoallv(td_dcomm *c, const void *send, const int *scounts,
                                const int *sdispls, void *recv, const int *rcounts,
                                const int *rdispls, td_dtype t, uint64_t *ticket) {
  nccl_state *s = ns(c);
  size_t es = td_dtype_size(t);
  TD_CHECK(before(c));
  int me = c->rank;
  if (scounts[me] > 0)
    TD_CUDA_CHECK(cudaMemcpyAsync((char *)recv + (size_t)rdispls[me] * es,
                                  (const char *)send + (size_t)sdispls[me] * es,
                                  (size_t)scounts[me] * es, cudaMemcpyDeviceToDevice, s->stream));
  TD_NCCL_CHECK(c, ncclGroupStart());
  for (int r = 0; r < c->size; ++r) {
    if (r == me) continue;
    ncclResult_t e = ncclSuccess;
    if (scounts[r] > 0)
      e = ncclSend((const char *)send + (size_t)sdispls[r] * es, (size_t)scounts[r], nccl_type(t),
                   r, s->comm, s->stream);
    if (e == ncclSuccess && rcounts[r] > 0)
      e = ncclRecv((char *)recv + (size_t)rdispls[r] * es, (size_t)rcounts[r], nccl_type(t), r,
                   s->comm, s->stream);
    if (e != ncclSuccess) {
      (void)ncclGroupEnd();
      return nccl_fail(e, s->comm, c->group, "ncclSend/ncclRecv (a part of an all-to-all)",
                       __FILE__, __LINE__, __func__);
    }
  }
  TD_NCCL_CHECK(c, ncclGroupEnd());
  return after(c, ticket);
}

static td_status check_ticket(td_dcomm *c, uint64_t ticket) {
  if (ticket == 0 || ticket > ns(c)->issued)
    TD_FAIL(TD_ERR_INTERNAL, "%s device collectives: ticket %llu was never issued", c->group,
            (unsigned long long)ticket);
  return TD_OK;
}

static td_status nccl_join(td_dcomm *c, uint64_t ticket) {
  nccl_state *s = ns(c);
  TD_CHECK(check_ticket(c, ticket));
  TD_CUDA_CHECK(cudaStreamWaitEvent(s->compute, s->done[ticket % TD_NCCL_EVENTS], 0));
  return TD_OK;
}

static td_status nccl_test(td_dcomm *c, uint64_t ticket, int *done) {
  nccl_state *s = ns(c);
  *done = 0;
  TD_CHECK(check_ticket(c, ticket));
  ncclResult_t async = ncclSuccess;
  TD_NCCL_CHECK(c, ncclCommGetAsyncError(s->comm, &async));
  if (async != ncclSuccess && async != ncclInProgress)
    return nccl_fail(async, s->comm, c->group, "a device collective (ncclCommGetAsyncError)",
                     __FILE__, __LINE__, __func__);
  cudaError_t e = cudaEventQuery(s->done[ticket % TD_NCCL_EVENTS]);
  if (e == cudaErrorNotReady) {
    cudaGetLastError(); /* not an error: clear it */
    return TD_OK;
  }
  TD_CUDA_CHECK(e);
  *done = 1;
  return TD_OK;
}

static void nccl_destroy(td_dcomm *c, int abort) {
  nccl_state *s = ns(c);
  if (!s) return;
  if (s->comm) {
    if (abort) {
      ncclCommAbort(s->comm); /* the others will not join a teardown */
    } else {
      cudaStreamSynchronize(s->stream);
      ncclCommDestroy(s->comm);
    }
  }
  for (int i = 0; i < s->nevents; ++i) cudaEventDestroy(s->done[i]);
  if (s->ready) cudaEventDestroy(s->ready);
  if (s->stream) cudaStreamDestroy(s->stream);
  free(s);
  c->state = NULL;
}

static const td_dcomm_ops nccl_ops = {nccl_allreduce, nccl_reduce_scatterv, nccl_allgatherv,
                                      nccl_join,      nccl_test,            nccl_destroy,
                                      nccl_send,      nccl_recv,            nccl_alltoallv};

static td_status cuda_dcomm_id(td_kernels *k, void *id) {
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess)
    return nccl_fail(r, NULL, "any", "ncclGetUniqueId", __FILE__, __LINE__, __func__);
  memcpy(id, &u, sizeof u);
  return TD_OK;
}

/* The local part, before anyone joins (its outcome is agreed on first). */
static td_status cuda_dcomm_setup(td_kernels *k, td_dcomm *c) {
  nccl_state *s = (nccl_state *)calloc(1, sizeof *s);
  if (!s) TD_FAIL(TD_ERR_NOMEM, "no host memory for an NCCL communicator");
  c->state = s;
  c->ops = &nccl_ops;
  c->name = "nccl";
  s->compute = td_cuda_st(k)->stream;
  TD_CUDA_CHECK(cudaSetDevice(td_cuda_st(k)->device));
  TD_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  TD_CUDA_CHECK(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
  for (; s->nevents < TD_NCCL_EVENTS; ++s->nevents)
    TD_CUDA_CHECK(cudaEventCreateWithFlags(&s->done[s->nevents], cudaEventDisableTiming));
  return TD_OK;
}

/* Join: nothing may fail here before ncclCommInitRank, or the others would
 * wait for this member (the device was made current by cuda_dcomm_setup). */
static td_status cuda_dcomm_init(td_kernels *k, const void *id, td_dcomm *c) {
  nccl_state *s = ns(c);
  (void)k;
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclResult_t r = ncclCommInitRank(&s->comm, c->size, u, c->rank);
  if (r != ncclSuccess) {
    s->comm = NULL;
    return nccl_fail(r, NULL, c->group, "ncclCommInitRank", __FILE__, __LINE__, __func__);
  }
  return TD_OK;
}

extern "C" int td_kernels_cuda_nccl(void) { return 1; }

void td_cuda_dcomm_fill(td_kernels *k) {
  k->dcomm_setup = cuda_dcomm_setup;
  k->dcomm_id = cuda_dcomm_id;
  k->dcomm_init = cuda_dcomm_init;
}

#else /* built without NCCL: no device collectives (MPI on host copies) */

extern "C" int td_kernels_cuda_nccl(void) { return 0; }

void td_cuda_dcomm_fill(td_kernels *k) { (void)k; }

#endif
