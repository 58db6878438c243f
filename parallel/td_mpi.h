/* td_mpi.h — MPI error checking and collective agreement on errors. */
#ifndef TD_MPI_H
#define TD_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "td_error.h"

/* Turn an MPI error code into a td_status with the call and MPI's text. */
td_status td_mpi_fail(int code, const char *call, const char *file, int line, const char *func);

#define TD_MPI_CHECK(call)                                                          \
  do {                                                                              \
    int td__rc = (call);                                                            \
    if (td__rc != MPI_SUCCESS) return td_mpi_fail(td__rc, #call, __FILE__, __LINE__, __func__); \
  } while (0)

/* The same inside a function with `td_status st` and a `done:` label
 * (STYLE: one exit path). */
#define TD_MPI_CHECK_GOTO(call)                                                     \
  do {                                                                              \
    int td__rc = (call);                                                            \
    if (td__rc != MPI_SUCCESS) {                                                    \
      st = td_mpi_fail(td__rc, #call, __FILE__, __LINE__, __func__);                \
      goto done;                                                                    \
    }                                                                               \
  } while (0)

/* Agree on an error: every rank passes its own status; all return the same
 * status and adopt the message of the lowest failing rank, and the error is
 * marked agreed (main then ends every rank cleanly with one message).
 * Collective on comm. */
td_status td_agree(MPI_Comm comm, td_status local);
/* (td_error_is_agreed, td_error_mark_agreed, td_error_alone: td_error.h) */
/* Checked int conversion of an element count for MPI. */
td_status td_mpi_count(int64_t n, int *out);

#endif
