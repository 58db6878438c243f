/* test_schedule.c — the pipeline schedule builders and simulator
 * (parallel/td_schedule.h).
 *
 * For p ∈ {2, 4, 8} stages and m ∈ {p, 2p, 4p} micro-batches, with uniform
 * stages, unit costs and free messages, the simulated bubble (Megatron's
 * definition: idle time over ideal compute time, max over stages) equals
 * exactly (bit for bit in double):
 *   gpipe, 1f1b       (p−1)/m          (F = 1, BW = 2)
 *   interleaved v=2   (p−1)/(v·m)      (per chunk F = 1, BW = 2)
 *   zb-h1             (p−1)/(3m)       (F = B = W = 1)
 * and the idle fraction of the step (idle over makespan) is
 * (p−1)/(m+p−1), (p−1)/(v·m+p−1) and (p−1)/(3m+p−1). Every list runs each
 * (chunk, micro-batch)'s F and backward exactly once, without deadlock; the
 * live micro-batches are 1F1B's min(m, p−s), GPipe's m, ZB-H1's
 * min(m, p) on every stage and interleaving's first stage holds
 * p·v + p − 1 chunk-micro-batches (Megatron's (1 + (p−1)/(p·v)) × 1F1B). */
#include <stdio.h>
#include <stdlib.h>

#include "parallel/td_schedule.h"

static int failures = 0;
#define EXPECT(cond, ...)                                         \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      failures++;                                                 \
    }                                                             \
  } while (0)

/* Each (chunk, micro) has one F and one BW (or one B and one W). */
static void check_complete(const td_schedule *s) {
  int64_t n = (int64_t)s->v * s->m;
  int *f = calloc((size_t)n, sizeof(int)), *b = calloc((size_t)n, sizeof(int)),
      *w = calloc((size_t)n, sizeof(int));
  for (int st = 0; st < s->pp; ++st) {
    for (int64_t i = 0; i < n; ++i) f[i] = b[i] = w[i] = 0;
    for (int64_t i = 0; i < s->count[st]; ++i) {
      const td_sched_action *a = &s->acts[st][i];
      int64_t x = (int64_t)a->chunk * s->m + a->micro;
      if (a->op == TD_OP_F) f[x]++;
      if (a->op == TD_OP_BW || a->op == TD_OP_B) {
        EXPECT(f[x] == 1, "%s stage %d: backward of (%d, %d) before its forward",
               td_sched_kind_name(s->kind), st, a->chunk, a->micro);
        b[x]++;
      }
      if (a->op == TD_OP_BW || a->op == TD_OP_W) {
        EXPECT(b[x] == 1, "%s stage %d: W of (%d, %d) before its B", td_sched_kind_name(s->kind),
               st, a->chunk, a->micro);
        w[x]++;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      EXPECT(f[i] == 1 && b[i] == 1 && w[i] == 1, "%s stage %d: (chunk %lld, micro %lld) has %d F, "
             "%d B, %d W", td_sched_kind_name(s->kind), st, (long long)(i / s->m),
             (long long)(i % s->m), f[i], b[i], w[i]);
  }
  free(f);
  free(b);
  free(w);
}

static void check(td_sched_kind kind, int p, int v, int64_t m) {
  td_schedule *s = NULL;
  if (td_schedule_build(kind, p, v, m, &s) != TD_OK) {
    EXPECT(0, "%s p %d v %d m %lld: build failed", td_sched_kind_name(kind), p, v, (long long)m);
    return;
  }
  check_complete(s);
  td_sched_costs c = {1.0, 1.0, 1.0, 0.0, NULL, NULL, NULL};
  td_sched_sim r;
  double *busy = calloc((size_t)p, sizeof(double)), *idle = calloc((size_t)p, sizeof(double));
  if (td_schedule_simulate(s, &c, &r, busy, idle) != TD_OK) {
    EXPECT(0, "%s p %d m %lld: simulation failed", td_sched_kind_name(kind), p, (long long)m);
  } else {
    /* work per stage in units: F + B + W per micro-batch and chunk */
    double per = 3.0 * (double)v, bub = 0, frac = 0;
    bub = (double)(p - 1) / (kind == TD_SCHED_ZBH1 ? 3.0 * (double)m : (double)(v * m));
    frac = (double)(p - 1) /
           ((kind == TD_SCHED_ZBH1 ? 3.0 * (double)m : (double)(v * m)) + (double)(p - 1));
    EXPECT(r.bubble == bub, "%s p %d v %d m %lld: bubble %.17g, expected %.17g",
           td_sched_kind_name(kind), p, v, (long long)m, r.bubble, bub);
    EXPECT(r.idle_frac == frac, "%s p %d v %d m %lld: idle fraction %.17g, expected %.17g",
           td_sched_kind_name(kind), p, v, (long long)m, r.idle_frac, frac);
    for (int i = 0; i < p; ++i)
      EXPECT(busy[i] == per * (double)m, "%s stage %d: busy %g", td_sched_kind_name(kind), i, busy[i]);
    if (kind == TD_SCHED_GPIPE || kind == TD_SCHED_1F1B) /* every stage idles (p−1)·(F+BW) */
      for (int i = 0; i < p; ++i)
        EXPECT(idle[i] == 3.0 * (double)(p - 1), "%s stage %d: idle %g", td_sched_kind_name(kind),
               i, idle[i]);
  }
  /* live micro-batches (activation slots) */
  for (int st = 0; st < p; ++st) {
    int64_t want = 0, got = td_schedule_live_peak(s, st, 0);
    if (kind == TD_SCHED_GPIPE) want = m;
    if (kind == TD_SCHED_1F1B) want = m < p - st ? m : p - st;
    if (kind == TD_SCHED_ZBH1) {
      want = m < p ? m : p;
    }
    if (kind == TD_SCHED_INTERLEAVED) {
      if (st != 0) continue;
      got = 0;
      for (int ch = 0; ch < v; ++ch) got += td_schedule_live_peak(s, st, ch);
      want = (int64_t)p * v + p - 1;
      if (want > m * v) want = m * v;
      /* summed per-chunk peaks bound the true peak; compare the bound */
      if (got < want) EXPECT(0, "interleaved p %d m %lld: first stage keeps %lld < %lld", p,
                             (long long)m, (long long)got, (long long)want);
      continue;
    }
    EXPECT(got == want, "%s p %d m %lld stage %d: %lld live micro-batches, expected %lld",
           td_sched_kind_name(kind), p, (long long)m, st, (long long)got, (long long)want);
  }
  free(busy);
  free(idle);
  td_schedule_destroy(&s);
}

/* The device path's channels (td_schedule_check_channels): for every
 * schedule, every p ≤ 8 and m up to 3p (interleaved: v 2 and 3), each
 * one-way channel between neighbours carries its messages in one order at
 * both ends. */
static void check_channels_all(void) {
  for (int kind = 0; kind < TD_SCHED_COUNT; ++kind)
    for (int p = 1; p <= 8; ++p)
      for (int v = kind == TD_SCHED_INTERLEAVED ? 2 : 1; v <= (kind == TD_SCHED_INTERLEAVED ? 3 : 1);
           ++v)
        for (int64_t m = 1; m <= 3 * p; ++m) {
          td_schedule *s = NULL;
          if (kind == TD_SCHED_INTERLEAVED && (p < 2 || m % p != 0)) continue;
          if (td_schedule_build((td_sched_kind)kind, p, v, m, &s) != TD_OK) {
            EXPECT(0, "%s p %d v %d m %lld: build failed", td_sched_kind_name(kind), p, v,
                   (long long)m);
            td_error_clear();
            continue;
          }
          td_status st = td_schedule_check_channels(s);
          EXPECT(st == TD_OK, "%s p %d v %d m %lld: channels: %s", td_sched_kind_name(kind), p, v,
                 (long long)m, td_error_message());
          td_error_clear();
          td_schedule_destroy(&s);
        }
  /* the check itself: two activations of stage 0 swapped in its list are
   * sent in another order than stage 1 receives them */
  td_schedule *s = NULL;
  if (td_schedule_build(TD_SCHED_1F1B, 2, 1, 4, &s) == TD_OK) {
    td_sched_action *a = s->acts[0];
    int64_t x = -1, y = -1;
    for (int64_t i = 0; i < s->count[0]; ++i)
      if (a[i].op == TD_OP_SEND_ACT) {
        if (x < 0) x = i;
        else if (y < 0) y = i;
      }
    if (y > 0) {
      int32_t t = a[x].micro;
      a[x].micro = a[y].micro, a[y].micro = t;
    }
    EXPECT(td_schedule_check_channels(s) != TD_OK, "a channel out of order passed the check");
    td_error_clear();
    td_schedule_destroy(&s);
  }
}

int main(void) {
  check_channels_all();
  int ps[] = {2, 4, 8};
  for (int i = 0; i < 3; ++i)
    for (int f = 1; f <= 4; f *= 2) {
      int p = ps[i];
      int64_t m = (int64_t)f * p;
      check(TD_SCHED_GPIPE, p, 1, m);
      check(TD_SCHED_1F1B, p, 1, m);
      check(TD_SCHED_ZBH1, p, 1, m);
      check(TD_SCHED_INTERLEAVED, p, 2, m);
    }
  /* constraints */
  td_schedule *s = NULL;
  EXPECT(td_schedule_build(TD_SCHED_INTERLEAVED, 4, 2, 6, &s) == TD_ERR_USAGE,
         "interleaved with m %% pp != 0 accepted");
  EXPECT(td_schedule_build(TD_SCHED_INTERLEAVED, 4, 1, 8, &s) == TD_ERR_USAGE,
         "interleaved with v = 1 accepted");
  td_error_clear();
  /* messages cost time */
  if (td_schedule_build(TD_SCHED_1F1B, 4, 1, 8, &s) == TD_OK) {
    td_sched_costs c = {1.0, 1.0, 1.0, 0.25, NULL, NULL, NULL};
    td_sched_sim r;
    EXPECT(td_schedule_simulate(s, &c, &r, NULL, NULL) == TD_OK && r.makespan > 8 * 3 + 3 * 3,
           "1f1b p 4 m 8 p2p 0.25: makespan %g, not over %d", r.makespan, 8 * 3 + 3 * 3);
    td_schedule_destroy(&s);
  }
  /* fewer micro-batches than stages still works */
  if (td_schedule_build(TD_SCHED_ZBH1, 4, 1, 2, &s) == TD_OK) {
    check_complete(s);
    td_sched_costs c = {1.0, 1.0, 1.0, 0.0, NULL, NULL, NULL};
    td_sched_sim r;
    EXPECT(td_schedule_simulate(s, &c, &r, NULL, NULL) == TD_OK, "zb-h1 p 4 m 2 deadlocks");
    td_schedule_destroy(&s);
  }
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("schedules: all bubbles exact\n");
  return 0;
}
