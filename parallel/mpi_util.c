/* mpi_util.c — MPI error text and agreement on errors across ranks. */
#include "parallel/td_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static int g_agreed; /* the pending error was agreed by all ranks */

td_status td_mpi_fail(int code, const char *call, const char *file, int line, const char *func) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
  return td_error_set(TD_ERR_MPI, file, line, func, "%s failed: %s", call, text);
}

int td_error_is_agreed(void) { return g_agreed && td_error_status() != TD_OK; }
void td_error_mark_agreed(void) { g_agreed = 1; }

td_status td_agree(MPI_Comm comm, td_status local) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  /* The lowest failing rank: (failed ? rank : size), reduced with MIN. */
  int mine = local != TD_OK ? rank : size, first = size;
  if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
    /* Cannot agree: leave the local error; main will abort. */
    return local != TD_OK ? local : TD_ERR_MPI;
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
  if (MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm) != MPI_SUCCESS)
    return local != TD_OK ? local : TD_ERR_MPI;
  if (rank != first) {
    if (local == TD_OK || size > 1) td_error_adopt((td_status)m.status, m.msg);
  }
  g_agreed = 1;
  return (td_status)m.status;
}

td_status td_mpi_count(int64_t n, int *out) {
  if (n < 0 || n > INT_MAX)
    TD_FAIL(TD_ERR_INTERNAL, "count %lld does not fit an MPI int", (long long)n);
  *out = (int)n;
  return TD_OK;
}
