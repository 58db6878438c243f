/* td_log.h — rank-0 human output, rank-prefixed errors, named timers. */
#ifndef TD_LOG_H
#define TD_LOG_H

#include <stdint.h>
#include <stdio.h>

/* Who this process is, for log prefixes (set once by main). */
void td_log_set_rank(int rank, int size);
int td_log_rank(void);
/* printf to stdout on rank 0 only. */
void td_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* printf to stdout on every rank, prefixed "[rank r] ". */
void td_log_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Warning on rank 0, to stderr: "trident: warning: ...". */
void td_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Wall-clock seconds (monotonic). */
double td_now(void);

/* Named timers: accumulate wall time per phase ("forward", "comm", ...). */
#define TD_TIMER_MAX 32
typedef struct td_timers {
  int n;
  const char *name[TD_TIMER_MAX];
  double total[TD_TIMER_MAX], start[TD_TIMER_MAX];
  int64_t count[TD_TIMER_MAX];
} td_timers;
/* Index of timer `name`, created on first use (name must be a literal). */
int td_timer_id(td_timers *t, const char *name);
void td_timer_start(td_timers *t, int id);
void td_timer_stop(td_timers *t, int id);
void td_timers_reset(td_timers *t);

#endif
