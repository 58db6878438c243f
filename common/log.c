/* log.c — rank-aware output and timers. */
#include "td_log.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

static int g_rank, g_size = 1;

void td_log_set_rank(int rank, int size) { g_rank = rank, g_size = size; }
int td_log_rank(void) { return g_rank; }

void td_log(const char *fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fflush(stdout);
}

void td_log_all(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (g_size > 1)
    fprintf(stdout, "[rank %d] %s", g_rank, buf);
  else
    fputs(buf, stdout);
  fflush(stdout);
}

void td_warn(const char *fmt, ...) {
  if (g_rank != 0) return;
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "trident: warning: %s\n", buf);
  fflush(stderr);
}

double td_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int td_timer_id(td_timers *t, const char *name) {
  for (int i = 0; i < t->n; ++i)
    if (t->name[i] == name || strcmp(t->name[i], name) == 0) return i;
  if (t->n == TD_TIMER_MAX) return TD_TIMER_MAX - 1;
  t->name[t->n] = name;
  t->total[t->n] = 0;
  t->count[t->n] = 0;
  return t->n++;
}

void td_timer_start(td_timers *t, int id) { t->start[id] = td_now(); }

void td_timer_stop(td_timers *t, int id) {
  t->total[id] += td_now() - t->start[id];
  t->count[id]++;
}

void td_timers_reset(td_timers *t) {
  for (int i = 0; i < t->n; ++i) t->total[i] = 0, t->count[i] = 0;
}
