/* td_error.h — status codes, the TD_CHECK family and the error trace.
 *
 * Every function that can fail returns td_status. The first failure records a
 * message (td_error_set, via TD_FAIL); every TD_CHECK that passes it upward
 * appends a frame "file:line function". main() prints the trace and decides
 * how the job ends (docs/architecture.md, invariant 3). Nothing here exits. */
#ifndef TD_ERROR_H
#define TD_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, EXIT_CODE, TEXT): the one table of status codes. */
#define TD_STATUS_LIST(X)                                              \
  X(TD_OK, 0, "ok")                                                    \
  X(TD_ERR_USAGE, 2, "usage error")                                    \
  X(TD_ERR_DECK, 2, "bad job deck")                                    \
  X(TD_ERR_DATA, 2, "bad dataset")                                     \
  X(TD_ERR_CKPT, 2, "bad checkpoint")                                  \
  X(TD_ERR_IO, 3, "I/O error")                                         \
  X(TD_ERR_MPI, 3, "MPI error")                                        \
  X(TD_ERR_HDF5, 3, "HDF5 error")                                      \
  X(TD_ERR_CUDA, 3, "CUDA error")                                      \
  X(TD_ERR_NOMEM, 3, "out of memory")                                  \
  X(TD_ERR_NUMERIC, 3, "numerical failure")                            \
  X(TD_ERR_UNSUPPORTED, 3, "unsupported")                              \
  X(TD_ERR_INTERNAL, 3, "internal error")                              \
  X(TD_ERR_INJECTED, 3, "injected failure")                            \
  X(TD_STOPPED, 75, "stopped by a signal after a checkpoint")

typedef enum {
#define TD_X_ENUM(name, code, text) name,
  TD_STATUS_LIST(TD_X_ENUM)
#undef TD_X_ENUM
  TD_STATUS_COUNT
} td_status;

/* Process exit code for a status (docs/architecture.md: 0, 2, 3, 75). */
int td_status_exit_code(td_status s);
/* Short text for a status ("bad job deck"). */
const char *td_status_text(td_status s);
/* Enum name for a status ("TD_ERR_DECK"). */
const char *td_status_name(td_status s);

/* Record the first error: message from fmt, frame from file/line/func.
 * Returns s so it can be returned directly. A later set while an error is
 * pending replaces nothing; its message becomes a note in the trace. */
td_status td_error_set(td_status s, const char *file, int line,
                       const char *func, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
td_status td_error_vset(td_status s, const char *file, int line,
                        const char *func, const char *fmt, va_list ap);
/* Append one frame to the pending trace. */
void td_error_push(const char *file, int line, const char *func);
/* The pending error's message (empty if none). */
const char *td_error_message(void);
/* The pending trace, one frame a line, innermost first (empty if none). */
const char *td_error_trace(void);
/* Status of the pending error (TD_OK if none). */
td_status td_error_status(void);
/* Replace the pending error by (s, msg) with no frames: used when an error
 * found on another rank is adopted by this one. */
void td_error_adopt(td_status s, const char *msg);
/* Forget the pending error. */
void td_error_clear(void);
/* Whether every rank knows the pending error (td_agree in parallel/td_mpi.h
 * agreed on it, or td_error_mark_agreed said every rank computed it alike),
 * so that the job can end without MPI_Abort. A new first error, an adopted
 * one and td_error_clear make it unagreed again. */
int td_error_is_agreed(void);
void td_error_mark_agreed(void);
/* A pending error this rank found alone (not agreed): the job will be
 * aborted, so teardown must not wait for the other ranks — destroy functions
 * skip their collective parts (waits on requests, collective closes, frees of
 * communicators) when this is true. */
int td_error_alone(void);

/* Return early with a new error. */
#define TD_FAIL(code, ...) \
  return td_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__)
/* Set st to a new error and jump to done: (HDF5's HGOTO_ERROR). */
#define TD_FAIL_GOTO(code, ...)                                     \
  do {                                                              \
    st = td_error_set((code), __FILE__, __LINE__, __func__, __VA_ARGS__); \
    goto done;                                                      \
  } while (0)
/* Return the status of call if it failed, adding a frame. */
#define TD_CHECK(call)                                    \
  do {                                                    \
    td_status td__s = (call);                             \
    if (td__s != TD_OK) {                                 \
      td_error_push(__FILE__, __LINE__, __func__);        \
      return td__s;                                       \
    }                                                     \
  } while (0)
/* Store the status of call in st and jump to done if it failed. */
#define TD_CHECK_GOTO(call)                               \
  do {                                                    \
    st = (call);                                          \
    if (st != TD_OK) {                                    \
      td_error_push(__FILE__, __LINE__, __func__);        \
      goto done;                                          \
    }                                                     \
  } while (0)
/* Checks that stay on in release builds: bad input gets a message. */
#define TD_REQUIRE(cond, code, ...)                       \
  do {                                                    \
    if (!(cond)) TD_FAIL((code), __VA_ARGS__);            \
  } while (0)

/* Test-only fault injection, deliberately rank-local (it exercises the path
 * where one rank fails alone): with TD_TEST_FAIL_RANK=r and
 * TD_TEST_FAIL_AT=site (default "check"), rank r returns TD_ERR_INJECTED
 * from the fail point named `site` the first time it is reached — after
 * TD_TEST_FAIL_SKIP=n earlier passes, if set; with TD_TEST_FAIL_SLEEP=s it
 * sleeps s seconds there instead (a slow rank). Every other rank and site
 * returns TD_OK. Sites: check, step, zero_release, pipe_send, ckpt_save,
 * ckpt_load, init_from. Never set them outside tests.
 * The other test-only switches: TD_TEST_CRASH_SAVE, TD_TEST_SIGNAL_SAVE
 * (io/td_ckpt.h), TD_TEST_STEP_SLEEP_MS (app/train/run.c) and TD_TEST_STAGED=1
 * (kernels/cpu/cpu_backend.c: the CPU back-end reports host_memory = 0, so
 * every MPI call on its buffers goes through host staging copies; the
 * numbers stay bit-identical) and TD_TEST_DCOMM=1 (app/train/trainer.c, agreed over
 * the job: the device collectives of kernels/td_dcomm.h run on the CPU
 * back-end through their MPI test implementation, parallel/dcomm_mpi.c). */
td_status td_test_fail_point(const char *site);

/* Allocation that fails with TD_ERR_NOMEM naming what it was for. Buffers of
 * 2 MiB or more are 2 MiB-aligned and asked to use transparent huge pages.
 * Memory is zeroed. Free with td_free. */
td_status td_alloc(void **out, size_t bytes, const char *what);
void td_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
