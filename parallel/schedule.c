/* schedule.c — the pipeline schedules' builders and their simulator (see
 * td_schedule.h). Pure computation: no MPI, no back-end. */
#include "parallel/td_schedule.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_names[TD_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

int td_sched_kind_parse(const char *name) {
  for (int i = 0; i < TD_SCHED_COUNT; ++i)
    if (name && strcmp(name, k_names[i]) == 0) return i;
  return -1;
}

const char *td_sched_kind_name(td_sched_kind kind) {
  return kind >= 0 && kind < TD_SCHED_COUNT ? k_names[kind] : "?";
}

/* ---- building -------------------------------------------------------------------- */

/* One stage's list while it is built. */
typedef struct {
  const td_schedule *s;
  int stage;
  td_sched_action *a;
  int64_t n, cap;
} list;

static void put(list *l, td_sched_op op, int chunk, int64_t j) {
  td_sched_action *x = &l->a[l->n++];
  x->op = (uint8_t)op, x->pad = 0, x->chunk = (uint16_t)chunk, x->micro = (int32_t)j;
}

static int first_chunk(const list *l, int c) { return td_sched_model_chunk(l->s, l->stage, c) == 0; }
static int last_chunk(const list *l, int c) {
  return td_sched_model_chunk(l->s, l->stage, c) == l->s->pp * l->s->v - 1;
}

/* A forward with its messages: receive the input, compute, send the output. */
static void fwd(list *l, int c, int64_t j) {
  if (!first_chunk(l, c)) put(l, TD_OP_RECV_ACT, c, j);
  put(l, TD_OP_F, c, j);
  if (!last_chunk(l, c)) put(l, TD_OP_SEND_ACT, c, j);
}

/* A backward (BW, or B of a split one) with its messages. */
static void bwd(list *l, td_sched_op op, int c, int64_t j) {
  if (!last_chunk(l, c)) put(l, TD_OP_RECV_GRAD, c, j);
  put(l, op, c, j);
  if (!first_chunk(l, c)) put(l, TD_OP_SEND_GRAD, c, j);
}

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

static void build_gpipe(list *l, int64_t m) {
  for (int64_t j = 0; j < m; ++j) {
    fwd(l, 0, j);
    if (l->s->pp == 1) bwd(l, TD_OP_BW, 0, j); /* no pipeline: one micro-batch alive */
  }
  for (int64_t j = 0; l->s->pp > 1 && j < m; ++j) bwd(l, TD_OP_BW, 0, j);
}

static void build_1f1b(list *l, int64_t m) {
  int64_t warm = imin(l->s->pp - l->stage - 1, m), f = 0, b = 0;
  for (; f < warm; ++f) fwd(l, 0, f);
  for (; f < m; ++f, ++b) {
    fwd(l, 0, f);
    bwd(l, TD_OP_BW, 0, b);
  }
  for (; b < m; ++b) bwd(l, TD_OP_BW, 0, b);
}

static void build_zbh1(list *l, int64_t m) {
  int64_t warm = imin(l->s->pp - l->stage - 1, m), lag = l->stage, w = 0;
  for (int64_t f = 0; f < warm; ++f) fwd(l, 0, f);
  for (int64_t j = 0; j < m; ++j) {
    if (j + warm < m) fwd(l, 0, j + warm);
    bwd(l, TD_OP_B, 0, j);
    if (j >= lag) put(l, TD_OP_W, 0, w++);
  }
  for (; w < m; ++w) put(l, TD_OP_W, 0, w);
}

/* The k-th forward (backward) of a stage under interleaving: groups of pp
 * micro-batches go through the chunks in turn (backwards: last chunk first). */
static void interleaved_at(const td_schedule *s, int64_t k, int backward, int *c, int64_t *j) {
  int64_t pv = (int64_t)s->pp * s->v, r = k % pv;
  *c = (int)(r / s->pp);
  if (backward) *c = s->v - 1 - *c;
  *j = k / pv * s->pp + r % s->pp;
}

static void build_interleaved(list *l, int64_t m) {
  const td_schedule *s = l->s;
  int64_t n = m * s->v;
  int64_t warm = imin(2 * (int64_t)(s->pp - l->stage - 1) + (int64_t)(s->v - 1) * s->pp, n);
  int c;
  int64_t j, f = 0, b = 0;
  for (; f < warm; ++f) {
    interleaved_at(s, f, 0, &c, &j);
    fwd(l, c, j);
  }
  for (; f < n; ++f, ++b) {
    interleaved_at(s, f, 0, &c, &j);
    fwd(l, c, j);
    interleaved_at(s, b, 1, &c, &j);
    bwd(l, TD_OP_BW, c, j);
  }
  for (; b < n; ++b) {
    interleaved_at(s, b, 1, &c, &j);
    bwd(l, TD_OP_BW, c, j);
  }
}

void td_schedule_destroy(td_schedule **sp) {
  if (!sp || !*sp) return;
  td_schedule *s = *sp;
  for (int i = 0; s->acts && i < s->pp; ++i) free(s->acts[i]);
  free(s->acts);
  free(s->count);
  free(s);
  *sp = NULL;
}

td_status td_schedule_build(td_sched_kind kind, int pp, int v, int64_t m, td_schedule **out) {
  td_status st = TD_OK;
  *out = NULL;
  if (kind < 0 || kind >= TD_SCHED_COUNT) TD_FAIL(TD_ERR_USAGE, "unknown pipeline schedule %d", kind);
  if (pp < 1 || m < 1 || m > INT32_MAX || v < 1 || v > 65535)
    TD_FAIL(TD_ERR_USAGE, "pipeline schedule %s: needs pp >= 1, 1 <= v <= 65535 and 1 <= m < 2^31 "
            "(pp %d, v %d, m %lld)", k_names[kind], pp, v, (long long)m);
  if (kind == TD_SCHED_INTERLEAVED && (v < 2 || pp < 2 || m % pp != 0))
    TD_FAIL(TD_ERR_USAGE, "interleaved schedule: needs virtual stages v >= 2, pp >= 2 and the "
            "micro-batches a multiple of pp (pp %d, v %d, m %lld)", pp, v, (long long)m);
  if (kind != TD_SCHED_INTERLEAVED && v != 1)
    TD_FAIL(TD_ERR_USAGE, "pipeline schedule %s has one chunk per stage (v = %d)", k_names[kind], v);
  td_schedule *s = calloc(1, sizeof *s);
  if (!s) TD_FAIL(TD_ERR_NOMEM, "out of memory for a pipeline schedule");
  s->kind = kind, s->pp = pp, s->v = v, s->m = m;
  s->count = calloc((size_t)pp, sizeof *s->count);
  s->acts = calloc((size_t)pp, sizeof *s->acts);
  if (!s->count || !s->acts) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a pipeline schedule");
  for (int stage = 0; stage < pp; ++stage) {
    /* at most 3 actions per F and per B, one per W */
    int64_t cap = m * v * 7 + 1;
    list l = {s, stage, calloc((size_t)cap, sizeof(td_sched_action)), 0, cap};
    if (!l.a) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a pipeline schedule");
    s->acts[stage] = l.a;
    switch (kind) {
      case TD_SCHED_GPIPE: build_gpipe(&l, m); break;
      case TD_SCHED_1F1B: build_1f1b(&l, m); break;
      case TD_SCHED_INTERLEAVED: build_interleaved(&l, m); break;
      case TD_SCHED_ZBH1: build_zbh1(&l, m); break;
      default: break;
    }
    s->count[stage] = l.n;
  }
done:
  if (st != TD_OK) {
    td_schedule_destroy(&s);
    return st;
  }
  *out = s;
  return TD_OK;
}

/* ---- what the lists keep alive --------------------------------------------------- */

/* Peak over the list of (started − ended) for (stage, chunk): started by
 * `from`, ended by either op of `until`. */
static int64_t peak(const td_schedule *s, int stage, int chunk, int from, int until1, int until2) {
  int64_t live = 0, top = 0;
  for (int64_t i = 0; i < s->count[stage]; ++i) {
    const td_sched_action *a = &s->acts[stage][i];
    if (a->chunk != chunk) continue;
    if (a->op == from && ++live > top) top = live;
    if (a->op == until1 || a->op == until2) live--;
  }
  return top;
}

int64_t td_schedule_live_peak(const td_schedule *s, int stage, int chunk) {
  return peak(s, stage, chunk, TD_OP_F, TD_OP_BW, TD_OP_W);
}

int64_t td_schedule_wait_peak(const td_schedule *s, int stage, int chunk) {
  return peak(s, stage, chunk, TD_OP_B, TD_OP_W, TD_OP_W);
}

/* ---- simulation ------------------------------------------------------------------ */

static double cost_of(const td_schedule *s, const td_sched_costs *c, int stage, int chunk, int op) {
  int64_t i = (int64_t)stage * s->v + chunk;
  double f = c->fs ? c->fs[i] : c->f, b = c->bs ? c->bs[i] : c->b, w = c->ws ? c->ws[i] : c->w;
  switch (op) {
    case TD_OP_F: return f;
    case TD_OP_B: return b;
    case TD_OP_W: return w;
    case TD_OP_BW: return b + w;
    default: return 0.0;
  }
}

td_status td_schedule_simulate(const td_schedule *s, const td_sched_costs *c, td_sched_sim *out,
                               double *busy, double *idle) {
  td_status st = TD_OK;
  int pp = s->pp;
  int64_t nk = (int64_t)pp * s->v, m = s->m;
  /* arrival time of each message, by kind (0 act, 1 grad), receiving model chunk, micro;
   * negative: not sent yet */
  double *arr = malloc((size_t)(2 * nk * m) * sizeof(double));
  double *clock = calloc((size_t)pp, sizeof(double)), *work = calloc((size_t)pp, sizeof(double));
  int64_t *pos = calloc((size_t)pp, sizeof(int64_t));
  if (!arr || !clock || !work || !pos) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a simulation");
  for (int64_t i = 0; i < 2 * nk * m; ++i) arr[i] = -1.0;
  int progress = 1, done = 0;
  while (progress && !done) {
    progress = 0, done = 1;
    for (int st_ = 0; st_ < pp; ++st_) {
      while (pos[st_] < s->count[st_]) {
        const td_sched_action *a = &s->acts[st_][pos[st_]];
        int64_t k = td_sched_model_chunk(s, st_, a->chunk);
        if (a->op == TD_OP_RECV_ACT || a->op == TD_OP_RECV_GRAD) {
          double t = arr[((a->op == TD_OP_RECV_GRAD) * nk + k) * m + a->micro];
          if (t < 0.0) break; /* its send has not happened */
          if (t > clock[st_]) clock[st_] = t;
        } else if (a->op == TD_OP_SEND_ACT) {
          arr[(k + 1) * m + a->micro] = clock[st_] + c->p2p;
        } else if (a->op == TD_OP_SEND_GRAD) {
          arr[(nk + k - 1) * m + a->micro] = clock[st_] + c->p2p;
        } else {
          double d = cost_of(s, c, st_, a->chunk, a->op);
          clock[st_] += d;
          work[st_] += d;
        }
        pos[st_]++;
        progress = 1;
      }
      if (pos[st_] < s->count[st_]) done = 0;
    }
  }
  if (!done)
    TD_FAIL_GOTO(TD_ERR_INTERNAL, "pipeline schedule %s (pp %d, v %d, m %lld) deadlocks",
                 k_names[s->kind], pp, s->v, (long long)m);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < pp; ++i)
    if (clock[i] > out->makespan) out->makespan = clock[i];
  for (int i = 0; i < pp; ++i) {
    double id = out->makespan - work[i];
    if (busy) busy[i] = work[i];
    if (idle) idle[i] = id;
    if (work[i] > 0.0 && id / work[i] > out->bubble) out->bubble = id / work[i];
    if (out->makespan > 0.0 && id / out->makespan > out->idle_frac) out->idle_frac = id / out->makespan;
  }
done:
  free(arr);
  free(clock);
  free(work);
  free(pos);
  return st;
}

/* ---- channels (the device path) ---------------------------------------------------- */

static int is_send(int op) { return op == TD_OP_SEND_ACT || op == TD_OP_SEND_GRAD; }
static int is_recv(int op) { return op == TD_OP_RECV_ACT || op == TD_OP_RECV_GRAD; }

/* The link a message crosses: link i joins stage i and stage (i + 1) mod pp;
 * direction 0 towards the higher stage (i → i + 1), 1 back. Activations of
 * model chunk k go from stage k mod pp to the next, gradients back. */
static void link_of(const td_schedule *s, int stage, int op, int *link, int *dir) {
  int fwd = op == TD_OP_SEND_ACT || op == TD_OP_RECV_ACT; /* activations: forwards */
  int sender = is_send(op) ? stage : fwd ? (stage + s->pp - 1) % s->pp : (stage + 1) % s->pp;
  *link = fwd ? sender : (sender + s->pp - 1) % s->pp;
  *dir = !fwd;
}

void td_sched_channel(const td_schedule *s, int stage, int op, int *link, int *dir) {
  link_of(s, stage, op, link, dir);
}

/* A message's name, the same at both ends: kind (0 activations, 1
 * gradients), the receiving model chunk and the micro-batch. */
static int64_t msg_key(const td_schedule *s, int stage, const td_sched_action *a) {
  int64_t nk = (int64_t)s->pp * s->v, k = td_sched_model_chunk(s, stage, a->chunk);
  if (a->op == TD_OP_SEND_ACT) k += 1;
  if (a->op == TD_OP_SEND_GRAD) k -= 1;
  int64_t grad = a->op == TD_OP_SEND_GRAD || a->op == TD_OP_RECV_GRAD;
  return (grad * nk + k) * s->m + a->micro;
}

td_status td_schedule_check_channels(const td_schedule *s) {
  td_status st = TD_OK;
  int64_t total = 0;
  for (int i = 0; i < s->pp; ++i) total += s->count[i];
  int64_t *sent = malloc((size_t)(total + 1) * sizeof *sent);
  int64_t *got = malloc((size_t)(total + 1) * sizeof *got);
  if (!sent || !got) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for a schedule check");
  for (int link = 0; s->pp > 1 && link < s->pp; ++link)
    for (int dir = 0; dir < 2; ++dir) {
      int64_t ns = 0, nr = 0;
      for (int a = 0; a < s->pp; ++a)
        for (int64_t i = 0; i < s->count[a]; ++i) {
          const td_sched_action *x = &s->acts[a][i];
          int l, d;
          if (!is_send(x->op) && !is_recv(x->op)) continue;
          link_of(s, a, x->op, &l, &d);
          if (l != link || d != dir) continue;
          if (is_send(x->op)) sent[ns++] = msg_key(s, a, x);
          else got[nr++] = msg_key(s, a, x);
        }
      int ok = ns == nr;
      for (int64_t i = 0; ok && i < ns; ++i) ok = sent[i] == got[i];
      if (!ok)
        TD_FAIL_GOTO(TD_ERR_INTERNAL, "pipeline schedule %s (pp %d, v %d, m %lld): the %s between "
                     "stages %d and %d are sent and received in different orders (%lld sent, "
                     "%lld received)", k_names[s->kind], s->pp, s->v, (long long)s->m,
                     dir ? "gradients" : "activations", link, (link + 1) % s->pp, (long long)ns,
                     (long long)nr);
    }
  {
    td_sched_costs c = {1.0, 1.0, 1.0, 0.0, NULL, NULL, NULL};
    td_sched_sim r;
    TD_CHECK_GOTO(td_schedule_simulate(s, &c, &r, NULL, NULL));
  }
done:
  free(sent);
  free(got);
  return st;
}
