/* td_dcomm.h — collectives on the compute back-end's own buffers, ordered
 * with the work it has queued: what NCCL gives on a CUDA stream.
 *
 * A communicator joins the members of one group (the data-parallel,
 * tensor-parallel or embedding group of parallel/td_grid.h); it is made from
 * the group's MPI communicator by parallel/dcomm.c (td_dcomm_create), the
 * only place that knows both. Kernels and the back-ends know nothing of MPI.
 *
 * The contract every implementation keeps (the engine's code relies on it,
 * and the test implementation below checks it):
 *   - a call reads its inputs as left by every kernel queued before it, is
 *     queued itself (the host does not wait) and returns a ticket;
 *   - nothing may read a call's output, or write its input, until its ticket
 *     is joined: join(t) orders every kernel queued after it behind call t
 *     (the device waits, the host does not); test(t) asks whether call t
 *     has completed (host, non-blocking; drives progress where the
 *     implementation needs it);
 *   - calls complete in the order they were made, and every member of the
 *     group makes the same calls in the same order with the same counts;
 *   - point-to-point (send, recv) is the exception to the last rule: only
 *     the two ends take part, and the i-th send from a to b matches b's i-th
 *     receive from a (no tags, as NCCL); a send may not complete before its
 *     receive has been issued. The pipeline gives each one-way channel
 *     between neighbouring stages a communicator of its own
 *     (parallel/td_schedule.h), so a send never waits behind a receive.
 * Implementations:
 *   "nccl"  the CUDA back-end (kernels/cuda/nccl.cu): an NCCL communicator
 *           and a communication stream; calls wait for the compute stream's
 *           work through an event, join makes the compute stream wait for
 *           the call's completion event.
 *   "mpi"   test-only (parallel/dcomm_mpi.c, TD_TEST_DCOMM=1): the CPU
 *           back-end's host buffers under MPI's non-blocking collectives,
 *           joined by waiting for their requests — so code that reads a
 *           result it did not join reads it before MPI wrote it, and the
 *           CPU tests see it. */
#ifndef TD_DCOMM_H
#define TD_DCOMM_H

#include <stdint.h>

#include "kernels/td_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_DCOMM_ID_BYTES 128 /* a communicator's name (ncclUniqueId) */

typedef struct td_dcomm td_dcomm;

typedef struct td_dcomm_ops {
  /* buf (n, type t) = Σ (max when `max`) over the group, in place. */
  td_status (*allreduce)(td_dcomm *c, void *buf, int64_t n, td_dtype t, int max,
                         uint64_t *ticket);
  /* recv (counts[rank] floats) = Σ over the group of send[displs[rank] ..]:
   * member r receives the sum of the part counts[r] at displs[r] of every
   * member's send. Parts do not overlap; counts of 0 are allowed. */
  td_status (*reduce_scatterv)(td_dcomm *c, const float *send, float *recv, const int *counts,
                               const int *displs, uint64_t *ticket);
  /* recv[displs[r] .. + counts[r]] = member r's send (type t), for every r;
   * send may be recv + displs[rank] (in place). */
  td_status (*allgatherv)(td_dcomm *c, const void *send, void *recv, const int *counts,
                          const int *displs, td_dtype t, uint64_t *ticket);
  td_status (*join)(td_dcomm *c, uint64_t ticket);
  td_status (*test)(td_dcomm *c, uint64_t ticket, int *done);
  /* Release the communicator; `abort`: this rank fails alone, so nothing
   * may wait for the others (ncclCommAbort, not ncclCommDestroy). */
  void (*destroy)(td_dcomm *c, int abort);
  /* buf (n, type t) to member `peer` (send), or from it into buf (recv). */
  td_status (*send)(td_dcomm *c, const void *buf, int64_t n, td_dtype t, int peer,
                    uint64_t *ticket);
  td_status (*recv)(td_dcomm *c, void *buf, int64_t n, td_dtype t, int peer, uint64_t *ticket);
  /* All-to-all (elements of type t): member r's recv[rdispls[q] ..
   * + rcounts[q]] = member q's send[sdispls[r] .. + scounts[r]], for every
   * q (its own part copied); every member's scounts[r] is r's rcounts[q].
   * (NCCL: grouped ncclSend/ncclRecv.) */
  td_status (*alltoallv)(td_dcomm *c, const void *send, const int *scounts, const int *sdispls,
                         void *recv, const int *rcounts, const int *rdispls, td_dtype t,
                         uint64_t *ticket);
} td_dcomm_ops;

struct td_dcomm {
  const td_dcomm_ops *ops;
  const char *name;  /* "nccl", "mpi" */
  const char *group; /* what the group is, for messages ("data-parallel") */
  td_kernels *k;     /* the back-end whose buffers and queue it works with */
  int size, rank;
  void *state;       /* the implementation's */
};

#ifdef __cplusplus
}
#endif

#endif
