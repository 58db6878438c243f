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
/* Broadcast n floats from root. Collective on comm. */
td_status td_coll_bcast_f32(MPI_Comm comm, float *buf, int64_t n, int root, td_coll_stats *stats);

#endif
