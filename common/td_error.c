/* td_error.c — the pending error of this process and its trace. */
#include "td_error.h"

#include "td_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define TD_MSG_MAX 2048
#define TD_TRACE_MAX 4096

static struct {
  td_status status;
  char message[TD_MSG_MAX];
  char trace[TD_TRACE_MAX];
  int agreed;
} g_err; /* the one pending error of this process, like PETSc's error stack */

int td_status_exit_code(td_status s) {
  switch (s) {
#define TD_X_CODE(name, code, text) \
  case name:                        \
    return code;
    TD_STATUS_LIST(TD_X_CODE)
#undef TD_X_CODE
    default:
      return 3;
  }
}

const char *td_status_text(td_status s) {
  switch (s) {
#define TD_X_TEXT(name, code, text) \
  case name:                        \
    return text;
    TD_STATUS_LIST(TD_X_TEXT)
#undef TD_X_TEXT
    default:
      return "unknown status";
  }
}

const char *td_status_name(td_status s) {
  switch (s) {
#define TD_X_NAME(name, code, text) \
  case name:                        \
    return #name;
    TD_STATUS_LIST(TD_X_NAME)
#undef TD_X_NAME
    default:
      return "TD_UNKNOWN";
  }
}

static void append_frame(const char *file, int line, const char *func) {
  size_t used = strlen(g_err.trace);
  if (used + 1 >= sizeof g_err.trace) return;
  snprintf(g_err.trace + used, sizeof g_err.trace - used, "  at %s:%d %s()\n",
           file, line, func);
}

td_status td_error_vset(td_status s, const char *file, int line,
                        const char *func, const char *fmt, va_list ap) {
  if (g_err.status != TD_OK) {
    /* An error is pending: keep the first one, note this one in the trace. */
    char note[512];
    vsnprintf(note, sizeof note, fmt, ap);
    size_t used = strlen(g_err.trace);
    if (used + 1 < sizeof g_err.trace)
      snprintf(g_err.trace + used, sizeof g_err.trace - used,
               "  (then: %s)\n", note);
    append_frame(file, line, func);
    return s;
  }
  g_err.status = s;
  g_err.agreed = 0;
  vsnprintf(g_err.message, sizeof g_err.message, fmt, ap);
  g_err.trace[0] = '\0';
  append_frame(file, line, func);
  return s;
}

td_status td_error_set(td_status s, const char *file, int line,
                       const char *func, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  td_status r = td_error_vset(s, file, line, func, fmt, ap);
  va_end(ap);
  return r;
}

void td_error_push(const char *file, int line, const char *func) {
  if (g_err.status == TD_OK) return;
  append_frame(file, line, func);
}

const char *td_error_message(void) { return g_err.message; }
const char *td_error_trace(void) { return g_err.trace; }
td_status td_error_status(void) { return g_err.status; }

void td_error_adopt(td_status s, const char *msg) {
  g_err.status = s;
  g_err.agreed = 0;
  snprintf(g_err.message, sizeof g_err.message, "%s", msg);
  g_err.trace[0] = '\0';
}

int td_error_is_agreed(void) { return g_err.agreed && g_err.status != TD_OK; }
void td_error_mark_agreed(void) { g_err.agreed = 1; }
int td_error_alone(void) { return g_err.status != TD_OK && !g_err.agreed; }

void td_error_clear(void) {
  g_err.agreed = 0;
  g_err.status = TD_OK;
  g_err.message[0] = '\0';
  g_err.trace[0] = '\0';
}

td_status td_test_fail_point(const char *site) {
  static int hits, fired, armed = -1; /* armed: TD_TEST_FAIL_RANK names this rank (read once) */
  if (armed < 0) {
    const char *r = getenv("TD_TEST_FAIL_RANK");
    armed = r && atoi(r) == td_log_rank();
  }
  if (fired || !armed) return TD_OK;
  const char *at = getenv("TD_TEST_FAIL_AT");
  if (strcmp(at && *at ? at : "check", site) != 0) return TD_OK;
  const char *skip = getenv("TD_TEST_FAIL_SKIP");
  if (skip && hits++ < atoi(skip)) return TD_OK;
  fired = 1;
  const char *sleep_s = getenv("TD_TEST_FAIL_SLEEP");
  if (sleep_s && atof(sleep_s) > 0) { /* a slow rank, not a failing one */
    fprintf(stderr, "[rank %d] TD_TEST_FAIL_SLEEP: sleeping %s s at %s\n", td_log_rank(), sleep_s,
            site);
    struct timespec ts = {(time_t)atof(sleep_s), (long)((atof(sleep_s) - (double)(time_t)atof(sleep_s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return TD_OK;
  }
  return td_error_set(TD_ERR_INJECTED, __FILE__, __LINE__, __func__,
                      "injected failure on rank %d at %s (TD_TEST_FAIL_RANK, TD_TEST_FAIL_AT)",
                      td_log_rank(), site);
}

#define TD_HUGE (2u << 20)

td_status td_alloc(void **out, size_t bytes, const char *what) {
  *out = NULL;
  if (bytes == 0) bytes = 64;
  void *p = NULL;
  if (bytes >= TD_HUGE) {
    /* exactly `bytes` (the memory model counts these), aligned so that its
     * whole huge pages can be huge; the tail is ordinary pages */
    if (posix_memalign(&p, TD_HUGE, bytes) != 0) p = NULL;
    if (p) {
      madvise(p, bytes / TD_HUGE * TD_HUGE, MADV_HUGEPAGE);
      memset(p, 0, bytes);
    }
  } else {
    if (posix_memalign(&p, 64, bytes) != 0) p = NULL;
    if (p) memset(p, 0, bytes);
  }
  if (!p)
    TD_FAIL(TD_ERR_NOMEM, "cannot allocate %zu bytes for %s", bytes, what);
  *out = p;
  return TD_OK;
}

void td_free(void *p) { free(p); }
