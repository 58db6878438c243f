/* mpi_util.c — MPI error text and agreement on errors across ranks. */
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

td_status td_mpi_fail(int code, const char *call, const char *file, int line, const char *func) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
  return td_error_set(TD_ERR_MPI, file, line, func, "%s failed: %s", call, text);
}

td_status td_agree(MPI_Comm comm, td_status local) {
  int rank = 0, size = 1, rc = MPI_Comm_rank(comm, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &size);
  /* The lowest failing rank: (failed ? rank : size), reduced with MIN. */
  int mine = local != TD_OK ? rank : size, first = size;
  MPI_Request r = MPI_REQUEST_NULL;
  if (rc == MPI_SUCCESS)
    rc = td_watched(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &r),
                    "MPI_Allreduce (agreeing on errors)", comm, &r);
  if (rc != MPI_SUCCESS) {
    /* Cannot agree: keep (or make) a local error; main will abort. */
    td_status mpi = td_mpi_fail(rc, "agreeing on errors (MPI_Allreduce)", __FILE__, __LINE__,
                                __func__);
    return local != TD_OK ? local : mpi;
  }
  if (first == size) return TD_OK;
  struct {
    int status;
    char msg[2048];
  } m;
  memset(&m, 0, sizeof m);
  if (rank == first) {
    m.status = (int)local;
    snprintf(m.msg, sizeof m.msg, "%s", td_error_message());
  }
  rc = td_watched(MPI_Ibcast(&m, (int)sizeof m, MPI_BYTE, first, comm, &r),
                  "MPI_Bcast (agreeing on errors)", comm, &r);
  if (rc != MPI_SUCCESS) {
    td_status mpi = td_mpi_fail(rc, "agreeing on errors (MPI_Bcast)", __FILE__, __LINE__, __func__);
    return local != TD_OK ? local : mpi;
  }
  if (rank != first) {
    if (local == TD_OK || size > 1) td_error_adopt((td_status)m.status, m.msg);
  }
  td_error_mark_agreed();
  return (td_status)m.status;
}

td_status td_mpi_count(int64_t n, int *out) {
  if (n < 0 || n > INT_MAX)
    TD_FAIL(TD_ERR_INTERNAL, "count %lld does not fit an MPI int", (long long)n);
  *out = (int)n;
  return TD_OK;
}
