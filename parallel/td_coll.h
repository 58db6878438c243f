/* td_coll.h — collectives on buffers in the compute back-end's memory.
 *
 * One interface, one implementation per back-end (MPI for host memory; NCCL
 * for device memory comes with the CUDA back-end). Every call counts the
 * bytes it moved (per rank, ring-algorithm volume) and the time it took, per
 * kind, for the metrics (comm_bytes, comm_ms). Calls on a communicator of
 * size 1 (or MPI_COMM_NULL) return at once and count nothing. The plain
 * calls take host pointers; the _staged ones take the back-end's and copy
 * through a host buffer when that memory is not host memory. */
#ifndef TD_COLL_H
#define TD_COLL_H

#include <mpi.h>
#include <stdint.h>

#include "kernels/td_kernels.h"
#include "td_error.h"

typedef enum {
  TD_COLL_ALLREDUCE, TD_COLL_REDUCE_SCATTER, TD_COLL_ALLGATHER, TD_COLL_BCAST,
  TD_COLL_SENDRECV, TD_COLL_KINDS
} td_coll_kind;

typedef struct td_coll_stats {
  double bytes[TD_COLL_KINDS];
  double ms[TD_COLL_KINDS];
  int64_t calls[TD_COLL_KINDS];
} td_coll_stats;

/* Name of a kind ("allreduce"). */
const char *td_coll_kind_name(td_coll_kind k);
/* Sum of bytes and of ms over all kinds. */
void td_coll_stats_total(const td_coll_stats *s, double *bytes, double *ms);

/* In-place all-reduce of n floats with op MPI_SUM or MPI_MAX. Collective on comm. */
td_status td_coll_allreduce_f32(MPI_Comm comm, float *buf, int64_t n, MPI_Op op,
                                td_coll_stats *stats);
/* In-place all-reduce of n doubles. Collective on comm. */
td_status td_coll_allreduce_f64(MPI_Comm comm, double *buf, int64_t n, MPI_Op op,
                                td_coll_stats *stats);
/* td_coll_allreduce_f32 on n floats of buf, in the memory of back-end k:
 * in place when k->host_memory; otherwise (MPI is never handed device
 * memory) buf is copied to `stage` (n host floats, the caller's, allocated
 * once), reduced there and copied back (k->to_host waits for the device's
 * queued work). Collective on comm. */
td_status td_coll_allreduce_f32_staged(MPI_Comm comm, td_kernels *k, float *buf, float *stage,
                                       int64_t n, MPI_Op op, td_coll_stats *stats);
/* Reduce-scatter of equal parts: recv (n floats) = Σ over comm of part
 * `rank` of send (size·n floats, member r's part at r·n), send and recv
 * distinct, both in the memory of back-end k: directly when k->host_memory,
 * else through `stage` ((size + 1)·n host floats, the caller's). Counted as
 * TD_COLL_REDUCE_SCATTER (ring volume: (size − 1)·n floats). Collective on
 * comm. */
td_status td_coll_reduce_scatter_f32_staged(MPI_Comm comm, td_kernels *k, const float *send,
                                            float *recv, float *stage, int64_t n,
                                            td_coll_stats *stats);
/* All-gather of equal parts: recv (size·n elements of type t, float32 or
 * bf16) = every member's send (n elements), member r's at r·n, in the memory
 * of back-end k (staged through `stage`, size·n elements of host memory, when
 * it is not host memory); send may be this member's part of recv (in
 * place). Counted as TD_COLL_ALLGATHER. Collective on comm. */
td_status td_coll_allgather_staged(MPI_Comm comm, td_kernels *k, const void *send, void *recv,
                                   void *stage, int64_t n, td_dtype t, td_coll_stats *stats);
/* Broadcast n floats from root. Collective on comm. */
td_status td_coll_bcast_f32(MPI_Comm comm, float *buf, int64_t n, int root, td_coll_stats *stats);

/* ---- device collectives (kernels/td_dcomm.h) ------------------------------------
 * Where every rank has a GPU of its own, collectives on device buffers go
 * through NCCL communicators made from the MPI ones (no host copies, no host
 * waits); where not, MPI works on host copies (the _staged calls above, the
 * ZeRO engine's staging). TD_DCOMM_TEST_MPI is the test implementation
 * (parallel/dcomm_mpi.c) on the CPU back-end. */
typedef enum { TD_DCOMM_OFF, TD_DCOMM_NCCL, TD_DCOMM_TEST_MPI } td_dcomm_kind;
struct td_dcomm;

const char *td_dcomm_kind_name(td_dcomm_kind kind);
/* The device communicator of comm's members on back-end k (*out NULL for
 * TD_DCOMM_OFF or MPI_COMM_NULL; a group of one is a communicator too).
 * `group` names it in messages (a literal). Collective on comm; a failure
 * on any member is agreed (every member returns it). */
td_status td_dcomm_create(MPI_Comm comm, td_kernels *k, td_dcomm_kind kind, const char *group,
                          struct td_dcomm **out);
/* Release (ends with an abort when this rank fails alone); accepts NULL. */
void td_dcomm_destroy(struct td_dcomm **c);
/* The calls of kernels/td_dcomm.h on float32 buffers (allgatherv: type t),
 * counting their bytes in stats as the MPI calls do (ring volume). */
td_status td_dcomm_allreduce(struct td_dcomm *c, float *buf, int64_t n, int max,
                             td_coll_stats *stats, uint64_t *ticket);
td_status td_dcomm_reduce_scatterv(struct td_dcomm *c, const float *send, float *recv,
                                   const int *counts, const int *displs, td_coll_stats *stats,
                                   uint64_t *ticket);
td_status td_dcomm_allgatherv(struct td_dcomm *c, const void *send, void *recv, const int *counts,
                              const int *displs, td_dtype t, td_coll_stats *stats,
                              uint64_t *ticket);
/* Point-to-point: n floats of buf to member `peer` / from it (counted as
 * TD_COLL_SENDRECV bytes, both ends). */
/* All-to-all of elements of type t (kernels/td_dcomm.h's alltoallv), the
 * elements that leave this rank counted as TD_COLL_SENDRECV. */
td_status td_dcomm_alltoallv(struct td_dcomm *c, const void *send, const int *scounts,
                             const int *sdispls, void *recv, const int *rcounts,
                             const int *rdispls, td_dtype t, td_coll_stats *stats,
                             uint64_t *ticket);
td_status td_dcomm_send(struct td_dcomm *c, const float *buf, int64_t n, int peer,
                        td_coll_stats *stats, uint64_t *ticket);
td_status td_dcomm_recv(struct td_dcomm *c, float *buf, int64_t n, int peer, td_coll_stats *stats,
                        uint64_t *ticket);
td_status td_dcomm_join(struct td_dcomm *c, uint64_t ticket);
td_status td_dcomm_test(struct td_dcomm *c, uint64_t ticket, int *done);
/* All-reduce (sum, or max when `max`) in place and join it: what follows on
 * the back-end's queue sees the result; the host does not wait. */
td_status td_dcomm_allreduce_joined(struct td_dcomm *c, float *buf, int64_t n, int max,
                                    td_coll_stats *stats);
/* The host waits until call `ticket` has completed, under the watchdog
 * (op, comm: what and where, for its message); the time is charged to
 * stats->ms[kind]. */
td_status td_dcomm_wait(struct td_dcomm *c, uint64_t ticket, const char *op, MPI_Comm comm,
                        td_coll_stats *stats, td_coll_kind kind);
/* The test implementation's set-up (parallel/dcomm_mpi.c). */
td_status td_dcomm_mpi_init(MPI_Comm comm, struct td_dcomm *c);

#endif
