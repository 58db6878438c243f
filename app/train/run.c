/* run.c — the training loop: steps, the per-step log line and metrics,
 * evaluation, and the test dump for the PyTorch oracle. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "app/train/td_checkpoint.h"
#include "app/train/td_choice.h"
#include "app/train/td_signals.h"
#include "app/train/td_trainer.h"
#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "io/td_tb.h"
#include "io/td_tokenizer_h5.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

/* mkdir -p for the folder that will hold `file`. */
static td_status ensure_parent(const char *file) {
  char buf[TD_STR_MAX];
  snprintf(buf, sizeof buf, "%s", file);
  char *slash = strrchr(buf, '/');
  if (!slash) return TD_OK;
  *slash = '\0';
  for (char *p = buf + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(buf, 0777);
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0) {
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
      TD_FAIL(TD_ERR_IO, "cannot create folder %s for %s", buf, file);
  }
  return TD_OK;
}

static int64_t peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)ru.ru_maxrss * 1024;
}

/* ---- the oracle dump (tests/reference/check_train.py reads it) ------------------ */

typedef struct {
  hid_t file;
  int64_t S, G, T;
  int32_t *batches; /* (S, G, T+1) */
  uint8_t *masks;   /* (S, G, T+1) loss masks, when the data has them or documents */
  int32_t *docs;    /* (S, G, T+1) document starts (td_dataset_read_meta) */
  double *losses, *norms, *lrs;
  double *moe_aux, *moe_z; /* (S) model.moe: the step's auxiliary terms */
} dump_state;

/* Write every parameter (or gradient) of the model as `prefix/<name>`: from
 * the gradient snapshot (the whole local space, host memory), or (flat NULL)
 * the engines' parameters (one rank: each owns its whole space). */
static td_status dump_tensors(td_trainer *t, hid_t f, const char *prefix, const float *flat) {
  td_model *m = t->model;
  float *host = NULL;
  td_status st = TD_OK;
  TD_CHECK(td_alloc((void **)&host, (size_t)m->reg->total_local * sizeof(float), "dump staging"));
  if (flat)
    memcpy(host, flat, (size_t)m->reg->total_local * sizeof(float));
  td_zero *zs[2] = {t->zero, t->xzero};
  for (int i = 0; !flat && i < 2 && zs[i]; ++i) {
    int64_t b = 0, e = 0, at = i ? m->reg->xbegin : 0;
    td_zero_owned(zs[i], &b, &e);
    size_t bytes = (size_t)(e - b) * sizeof(float);
    if (td_zero_state_on_host(zs[i]))
      memcpy(host + at, td_zero_owned_params(zs[i]), bytes);
    else
      TD_CHECK_GOTO(t->k->to_host(t->k, host + at, td_zero_owned_params(zs[i]), bytes));
  }
  for (int i = 0; i < m->reg->n; ++i) {
    const td_param *p = &m->reg->p[i];
    char path[160];
    snprintf(path, sizeof path, "%s/%s", prefix, p->name);
    int64_t dims[2] = {p->shape[0], p->shape[1]};
    TD_CHECK_GOTO(td_h5_write(f, path, H5T_NATIVE_FLOAT, p->ndim, dims, host + p->offset));
  }
done:
  td_free(host);
  return st;
}

static td_status dump_begin(td_trainer *t, dump_state *d) {
  td_config *c = &t->cfg;
  memset(d, 0, sizeof *d);
  d->file = -1;
  if (t->app->size != 1)
    TD_FAIL(TD_ERR_USAGE, "trident train --dump works on one rank only (the job has %d)",
            t->app->size);
  d->S = c->training_steps, d->G = c->training_global_batch, d->T = c->model_seq_len;
  TD_CHECK(td_alloc((void **)&d->batches, (size_t)(d->S * d->G * (d->T + 1)) * sizeof(int32_t),
                    "dump batches"));
  if (t->mask_win) {
    TD_CHECK(td_alloc((void **)&d->masks, (size_t)(d->S * d->G * (d->T + 1)), "dump masks"));
    TD_CHECK(td_alloc((void **)&d->docs, (size_t)(d->S * d->G * (d->T + 1)) * sizeof(int32_t),
                      "dump documents"));
  }
  TD_CHECK(td_alloc((void **)&d->losses, (size_t)(d->S + 1) * 5 * sizeof(double), "dump losses"));
  d->norms = d->losses + d->S + 1;
  d->lrs = d->norms + d->S + 1;
  d->moe_aux = d->lrs + d->S + 1, d->moe_z = d->moe_aux + d->S + 1;
  TD_CHECK(ensure_parent(t->dump_path));
  TD_CHECK(td_h5_create(t->dump_path, MPI_COMM_NULL, &d->file));
  hid_t f = d->file;
  const char *ik[] = {"vocab_size", "seq_len", "layers", "dim", "heads", "global_batch", "steps",
                      "warmup"};
  int64_t iv[] = {c->model_vocab_size, c->model_seq_len, c->model_layers, c->model_dim,
                  c->model_heads, c->training_global_batch, c->training_steps, c->schedule_warmup};
  for (int i = 0; i < 8; ++i) TD_CHECK(td_h5_attr_write_i64(f, ik[i], iv[i]));
  const char *fk[] = {"lr", "min_lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"};
  double fv[] = {c->optimizer_lr, c->schedule_min_lr, c->optimizer_betas[0], c->optimizer_betas[1],
                 c->optimizer_eps, c->optimizer_weight_decay, c->training_grad_clip};
  for (int i = 0; i < 7; ++i) TD_CHECK(td_h5_attr_write_f64(f, fk[i], fv[i]));
  TD_CHECK(td_h5_attr_write_str(f, "decay", c->schedule_decay));
  td_model_dims dm;
  td_config_dims(c, &dm);
  TD_CHECK(td_h5_attr_write_str(f, "arch", c->model_arch));
  TD_CHECK(td_h5_attr_write_i64(f, "kv_heads", dm.KV));
  TD_CHECK(td_h5_attr_write_i64(f, "ffn_dim", dm.F));
  TD_CHECK(td_h5_attr_write_i64(f, "tie_embeddings", dm.tied));
  TD_CHECK(td_h5_attr_write_f64(f, "norm_eps", c->model_norm_eps));
  TD_CHECK(td_h5_attr_write_f64(f, "rope_theta", c->model_rope_theta));
  if (dm.E > 0) { /* model.moe */
    const char *mk[] = {"moe_experts", "moe_top_k", "moe_every", "moe_ffn_dim"};
    int64_t mv[] = {dm.E, dm.K, dm.every, dm.Fe};
    for (int i = 0; i < 4; ++i) TD_CHECK(td_h5_attr_write_i64(f, mk[i], mv[i]));
    TD_CHECK(td_h5_attr_write_f64(f, "moe_aux_loss", c->model_moe_aux_loss));
    TD_CHECK(td_h5_attr_write_f64(f, "moe_z_loss", c->model_moe_z_loss));
    TD_CHECK(td_h5_attr_write_f64(f, "moe_capacity_factor", c->model_moe_capacity_factor));
  }
  TD_CHECK(dump_tensors(t, f, "/model", NULL));
  TD_CHECK(td_alloc((void **)&t->grad_snapshot, (size_t)t->model->reg->total_local * sizeof(float),
                    "gradient snapshot"));
  return TD_OK;
}

/* Record the windows of the step about to run (the sampler's next batch). */
static td_status dump_batch(td_trainer *t, dump_state *d, int64_t s) {
  int64_t T = d->T;
  for (int64_t g = 0; g < d->G; ++g)
    TD_CHECK(td_dataset_read_window(t->train, t->windows[g], T,
                                    d->batches + (s * d->G + g) * (T + 1)));
  for (int64_t g = 0; d->masks && g < d->G; ++g)
    TD_CHECK(td_dataset_read_meta(t->train, t->windows[g], T, d->masks + (s * d->G + g) * (T + 1),
                                  d->docs + (s * d->G + g) * (T + 1)));
  return TD_OK;
}

static td_status dump_end(td_trainer *t, dump_state *d) {
  int64_t dims3[3] = {d->S, d->G, d->T + 1}, dims1[1] = {d->S};
  TD_CHECK(td_h5_write(d->file, "/batches", H5T_NATIVE_INT32, 3, dims3, d->batches));
  if (d->masks) {
    TD_CHECK(td_h5_write(d->file, "/masks", H5T_NATIVE_UINT8, 3, dims3, d->masks));
    if (strcmp(t->cfg.data_attend, "document") == 0)
      TD_CHECK(td_h5_write(d->file, "/docs", H5T_NATIVE_INT32, 3, dims3, d->docs));
  }
  TD_CHECK(td_h5_write(d->file, "/losses", H5T_NATIVE_DOUBLE, 1, dims1, d->losses));
  TD_CHECK(td_h5_write(d->file, "/grad_norms", H5T_NATIVE_DOUBLE, 1, dims1, d->norms));
  TD_CHECK(td_h5_write(d->file, "/lrs", H5T_NATIVE_DOUBLE, 1, dims1, d->lrs));
  if (t->model->moe) {
    TD_CHECK(td_h5_write(d->file, "/moe_aux_losses", H5T_NATIVE_DOUBLE, 1, dims1, d->moe_aux));
    TD_CHECK(td_h5_write(d->file, "/moe_z_losses", H5T_NATIVE_DOUBLE, 1, dims1, d->moe_z));
  }
  td_h5_close(&d->file);
  return TD_OK;
}

static void dump_free(td_trainer *t, dump_state *d) {
  td_free(t->grad_snapshot);
  t->grad_snapshot = NULL;
  if (d->file >= 0) td_h5_close(&d->file);
  td_free(d->batches);
  td_free(d->masks);
  td_free(d->docs);
  td_free(d->losses);
}

/* ---- signals ------------------------------------------------------------------------ */

/* The signal any rank received, agreed by all (0: none), and whether any
 * rank's background checkpoint writer is still writing (checkpoint.async):
 * one reduction at every step boundary. Collective. */
static td_status agree_signal(td_trainer *t, int *sig, int *writing) {
  int mine[2] = {td_signal_pending(), td_trainer_save_busy(t)}, any[2] = {0, 0};
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(td_watched(MPI_Iallreduce(mine, any, 2, MPI_INT, MPI_MAX, t->app->world, &r),
                          "MPI_Allreduce (agreeing on signals)", t->app->world, &r));
  *sig = any[0], *writing = any[1];
  return TD_OK;
}

/* The checkpoint module agrees on every failure it can recover from (a
 * write or close failing on some ranks); an error it did not agree on left
 * this rank's sequence of collectives, so it must not be agreed here — the
 * other ranks wait inside the save — but end the job (main aborts). */
static td_status save(td_trainer *t) {
  char path[TD_STR_MAX + 64];
  TD_CHECK(td_trainer_save(t, path, sizeof path));
  return TD_OK;
}

/* On resume: drop the metrics lines of steps after the checkpoint (a run
 * stopped or killed after its last save logged steps it will redo), so the
 * file holds each step once. Rank 0. */
static td_status trim_metrics(const char *path, int64_t step) {
  FILE *in = fopen(path, "r");
  if (!in) return TD_OK; /* nothing logged yet */
  char tmp[TD_STR_MAX + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *out = fopen(tmp, "w");
  if (!out) {
    fclose(in);
    TD_FAIL(TD_ERR_IO, "cannot write %s", tmp);
  }
  char line[8192];
  while (fgets(line, sizeof line, in)) {
    long long s = -1;
    if (sscanf(line, "{\"step\": %lld", &s) == 1 && s > step) continue;
    fputs(line, out);
  }
  fclose(in);
  if (fclose(out) != 0 || rename(tmp, path) != 0) TD_FAIL(TD_ERR_IO, "cannot rewrite %s", path);
  return TD_OK;
}

/* ---- the stop signal's lead ------------------------------------------------------ */

/* A scheduler that ends jobs at a time limit can send a stop signal some
 * seconds before (Slurm: --signal=USR1@N); trident acts on it at the next
 * step boundary and saves, so the lead must cover one step and one save.
 * TD_SIGNAL_LEAD_S says what the lead is (jobs/train.sbatch sets it from its
 * #SBATCH --signal line: Slurm does not tell the job). Warnings only, on
 * rank 0: nothing collective depends on it. */
typedef struct lead_check {
  double lead;  /* seconds; 0: not known */
  int warned;   /* the last check warned (warn again only after it held) */
} lead_check;

static void lead_init(const td_trainer *t, lead_check *lc) {
  memset(lc, 0, sizeof *lc);
  const char *e = t->app->rank == 0 ? getenv("TD_SIGNAL_LEAD_S") : NULL;
  char *end = NULL;
  double v = e && *e ? strtod(e, &end) : 0.0;
  if (e && *e && (!end || *end || !(v > 0))) {
    td_warn("TD_SIGNAL_LEAD_S='%s' is not a number of seconds; ignored", e);
    v = 0.0;
  }
  lc->lead = v;
}

/* Compare the lead with one step (step_s) and a save: the last save's
 * measured time, else an estimate (the resumed load's time, or the bytes a
 * save writes — fp32 parameters and two AdamW moments — at 200 MB/s). */
static void lead_check_now(const td_trainer *t, lead_check *lc, double step_s, const char *when) {
  if (!(lc->lead > 0)) return;
  double save_s = t->last_save_s;
  const char *how = "the last save";
  if (!(save_s > 0)) {
    double bytes = 12.0 * (double)t->model->reg->total_global;
    save_s = bytes / 200e6;
    how = "estimated: fp32 parameters and two moments at 200 MB/s";
    if (t->last_load_s > save_s) {
      save_s = t->last_load_s;
      how = "estimated: as long as the checkpoint load";
    }
  }
  int short_lead = step_s + save_s > lc->lead;
  if (short_lead && !lc->warned)
    td_warn("%s: the stop signal comes %.0f s before the end (TD_SIGNAL_LEAD_S) but one "
            "step takes %.1f s and a save %.1f s (%s): the job may be killed before its "
            "checkpoint commits; ask for a longer lead (Slurm checks time limits every 30 s: "
            "--signal=USR1@%.0f or more)",
            when, lc->lead, step_s, save_s, how, ceil(1.5 * (step_s + save_s)) + 30.0);
  lc->warned = short_lead;
}

/* Test only (TD_TEST_STEP_SLEEP_MS): a pause that a signal does not cut
 * short, as a long step would not be. */
static void test_pause(long ms) {
  struct timespec left = {ms / 1000, ms % 1000 * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

/* ---- logging --------------------------------------------------------------------- */

static void fmt_eta(double s, char *buf, size_t cap) {
  if (!(s >= 0) || s > 1e8) {
    snprintf(buf, cap, "--");
    return;
  }
  long x = (long)(s + 0.5);
  if (x >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", x / 3600, x / 60 % 60, x % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", x / 60, x % 60);
}

/* ---- stragglers -------------------------------------------------------------------- */

/* Steps a rank's straggler statistics cover at least (the medians of its
 * last steps: one step slowed by the scheduler or a page fault moves no
 * median, a rank slow step after step does). */
#define STRAG_WINDOW 10
/* ... and never the run's first steps: one-time set-up, the allocator and
 * page faults settling, differently on each rank */
#define STRAG_SKIP 3
/* ... and no judgement before the window holds this many (one step is no
 * median) */
#define STRAG_MIN 5

/* Every rank's host name, gathered once to rank 0 (t->hosts) for the
 * straggler report, and the window of each rank's last steps. Collective. */
static td_status gather_hosts(td_trainer *t) {
  char mine[64] = "";
  int len = 0;
  char name[MPI_MAX_PROCESSOR_NAME] = "?";
  MPI_Get_processor_name(name, &len);
  snprintf(mine, sizeof mine, "%s", name);
  td_status st = TD_OK;
  size_t n = (size_t)t->app->size;
  /* the last steps each rank keeps: a window of at least 10, and of every
   * step between two metrics lines */
  t->strag_cap = t->cfg.logging_every > STRAG_WINDOW ? (int)t->cfg.logging_every : STRAG_WINDOW;
  t->strag_n = t->strag_pos = 0;
  if (!t->strag_ring && !(t->strag_ring = malloc((size_t)t->strag_cap * 2 * sizeof(double))))
    st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__, "out of memory");
  if (st == TD_OK && t->app->rank == 0 && !t->hosts) { /* with the report's buffer */
    t->hosts = calloc(n, sizeof *t->hosts);
    t->strag_buf = malloc(n * 8 * sizeof(double) + n * sizeof(int));
    if (!t->hosts || !t->strag_buf)
      st = td_error_set(TD_ERR_NOMEM, __FILE__, __LINE__, __func__,
                        "out of memory for %d host names", t->app->size);
  }
  TD_CHECK(td_agree(t->app->world, st));
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(td_watched(MPI_Igather(mine, 64, MPI_CHAR, t->hosts, 64, MPI_CHAR, 0,
                                      t->app->world, &r),
                          "MPI_Gather (host names)", t->app->world, &r));
  return TD_OK;
}

/* This rank's time in collectives so far (every group), ms. */
static double comm_ms(const td_trainer *t) {
  double total = 0;
  for (int i = 0; i < TD_GROUP_COUNT; ++i) {
    double b = 0, ms = 0;
    td_coll_stats_total(&t->gstats[i], &b, &ms);
    total += ms;
  }
  return total;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct straggler_stats {
  double min_ms, median_ms, max_ms; /* busy time a step over the ranks */
  int rank;                         /* the slowest rank over the threshold, or -1 */
} straggler_stats;

/* The median of the n values x[i] with key[i] == k (0 if none); scratch
 * holds n doubles. */
static double median_of(const double *x, const int *key, int k, int n, double *scratch) {
  int m = 0;
  for (int i = 0; i < n; ++i)
    if (key[i] == k) scratch[m++] = x[i];
  if (m == 0) return 0.0;
  qsort(scratch, (size_t)m, sizeof *scratch, cmp_double);
  return m % 2 ? scratch[m / 2] : 0.5 * (scratch[m / 2 - 1] + scratch[m / 2]);
}

/* Each rank's steps split into waiting for other ranks (collectives,
 * pipeline messages, the data agreement), reading its data, and computing
 * (the rest); a rank is busy for its compute and data time: a slow rank
 * makes the others wait in communication, so its busy time stands out and
 * theirs does not. At every metrics line each rank sends the medians of its
 * last steps (the window: max(STRAG_WINDOW, logging.every) steps, never the
 * run's first STRAG_SKIP) to rank 0 in one small collective, which warns about the
 * ranks whose median busy time exceeds the median of their pipeline stage's
 * ranks (which do the same work) by more than logging.straggler_pct,
 * slowest first, naming rank, host and the part (compute or data loading)
 * furthest above its stage's median — never in a stage of one rank
 * (nothing to compare it with), nor before the window holds STRAG_MIN
 * steps. min/median/max are over all ranks. */
static td_status stragglers(td_trainer *t, straggler_stats *out) {
  int n = t->app->size;
  /* this rank's medians over its window: busy, data, compute (ms a step;
   * -1: no step yet) */
  double mine[4] = {-1.0, -1.0, -1.0, (double)t->grid->pp_rank};
  int m = t->strag_n;
  if (m > 0) {
    double tmp[3 * 1024];
    double *v = m <= 1024 ? tmp : malloc((size_t)m * 3 * sizeof *v);
    if (v) {
      for (int i = 0; i < m; ++i) {
        double busy = t->strag_ring[2 * i], data = t->strag_ring[2 * i + 1];
        v[i] = busy, v[m + i] = data, v[2 * m + i] = busy - data > 0 ? busy - data : 0;
      }
      for (int k = 0; k < 3; ++k) {
        qsort(v + (size_t)k * m, (size_t)m, sizeof *v, cmp_double);
        const double *w = v + (size_t)k * m;
        mine[k] = 1e3 * (m % 2 ? w[m / 2] : 0.5 * (w[m / 2 - 1] + w[m / 2]));
      }
      if (v != tmp) free(v);
    }
  }
  /* rank 0: the gathered 4 a rank, then busy, data, compute and scratch
   * (t->strag_buf, allocated with the host names) */
  double *all = t->strag_buf;
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(td_watched(MPI_Igather(mine, 4, MPI_DOUBLE, all, 4, MPI_DOUBLE, 0, t->app->world,
                                      &r),
                          "MPI_Gather (straggler metrics)", t->app->world, &r));
  out->rank = -1;
  if (t->app->rank != 0) return TD_OK;
  double *busy = all + 4 * (size_t)n, *data = busy + n, *comp = data + n, *scratch = comp + n;
  int *stage = (int *)(scratch + n), empty = 0;
  for (int i = 0; i < n; ++i) {
    busy[i] = all[4 * i], data[i] = all[4 * i + 1], comp[i] = all[4 * i + 2];
    stage[i] = (int)all[4 * i + 3];
    empty |= busy[i] < 0;
  }
  if (empty) { /* a rank without a step in its window yet (only the first) */
    memset(out, 0, sizeof *out);
    out->rank = -1;
    return TD_OK;
  }
  out->min_ms = out->max_ms = busy[0];
  for (int i = 1; i < n; ++i) {
    if (busy[i] < out->min_ms) out->min_ms = busy[i];
    if (busy[i] > out->max_ms) out->max_ms = busy[i];
  }
  memcpy(scratch, busy, (size_t)n * sizeof *scratch);
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_double);
  out->median_ms = n % 2 ? scratch[n / 2] : 0.5 * (scratch[n / 2 - 1] + scratch[n / 2]);
  double pct = t->cfg.logging_straggler_pct;
  int per_stage = n / t->grid->pp;
  /* each rank against its stage: over the limit, slowest first (at most 4 named) */
  double *limit = all; /* reused: a rank's limit, and its stage's medians */
  for (int i = 0; i < n; ++i) {
    double mb = median_of(busy, stage, stage[i], n, scratch);
    limit[4 * i] = mb * (1.0 + pct / 100.0), limit[4 * i + 1] = mb;
    limit[4 * i + 2] = median_of(comp, stage, stage[i], n, scratch);
    limit[4 * i + 3] = median_of(data, stage, stage[i], n, scratch);
  }
  /* every rank's window holds the same steps: m is every rank's count */
  for (int named = 0; pct > 0 && per_stage > 1 && m >= STRAG_MIN && named < 4; ++named) {
    int worst = -1;
    for (int i = 0; i < n; ++i)
      if (busy[i] > limit[4 * i] && (worst < 0 || busy[i] - limit[4 * i] > busy[worst] - limit[4 * worst]))
        worst = i;
    if (worst < 0) break;
    double mb = limit[4 * worst + 1], mc = limit[4 * worst + 2], md = limit[4 * worst + 3];
    int is_data = data[worst] - md > comp[worst] - mc;
    if (named == 0) out->rank = worst;
    char where[48] = "the ranks";
    if (t->grid->pp > 1) snprintf(where, sizeof where, "pipeline stage %d's ranks", stage[worst]);
    td_warn("straggler: rank %d (host %s) is busy %.1f ms a step, %.0f%% over the median of "
            "%s (%.1f ms; logging.straggler_pct %g), in steps %lld-%lld: its %s takes "
            "%.1f ms against a median of %.1f ms; the other ranks wait for it",
            worst, t->hosts ? t->hosts[worst] : "?", busy[worst],
            100.0 * (busy[worst] / (mb > 0 ? mb : 1) - 1.0), where, mb, pct,
            (long long)(t->step - m + 1 > 1 ? t->step - m + 1 : 1), (long long)t->step,
            is_data ? "data loading" : "compute", is_data ? data[worst] : comp[worst],
            is_data ? md : mc);
    busy[worst] = -1.0; /* named */
  }
  return TD_OK;
}

static td_status log_step(td_trainer *t, double loss, double norm, double lr, double step_s,
                          double elapsed, int64_t steps_run, int has_val, double val_loss) {
  td_config *c = &t->cfg;
  int64_t tokens = c->training_global_batch * c->model_seq_len;
  double tps = (double)tokens / step_s;
  /* communication, all of it and split by where it goes: a group's traffic
   * is inter-node when its members are on more than one node */
  double cb = 0, cms = 0, cb_in = 0, cms_in = 0, cb_out = 0, cms_out = 0;
  const td_grid *g = t->grid;
  int stride = g->tp * g->cp * g->dp, first = g->rank - g->pp_rank * stride;
  int spans[TD_GROUP_COUNT] = {g->tp_nodes > 1, td_grid_group_nodes(g, 'b', g->rank) > 1,
                               g->pp_nodes > 1,
                               g->node_of[first] != g->node_of[first + (g->pp - 1) * stride],
                               g->cp_nodes > 1};
  for (int i = 0; i < TD_GROUP_COUNT; ++i) {
    double b = 0, ms = 0;
    td_coll_stats_total(&t->gstats[i], &b, &ms);
    cb += b, cms += ms;
    if (spans[i]) cb_out += b, cms_out += ms;
    else cb_in += b, cms_in += ms;
  }
  /* the largest rank's peak RSS, communication bytes and allocations (what
   * trident check prints, from the same code: t->mem), in one reduction */
  const td_mem_plan *mem = &t->mem;
  int64_t dev = t->k->device_peak ? (int64_t)t->k->device_peak(t->k) : 0;
  /* steps since the last metrics line (the first: those this process ran) */
  int64_t since = t->logged_step > 0 ? t->step - t->logged_step : steps_run;
  int64_t per_step = (int64_t)((cb - t->logged_cb) / (double)(since > 0 ? since : 1));
  t->logged_cb = cb, t->logged_step = t->step;
  /* checkpoint saves since the last line: the time they kept this rank
   * from training (µs), their background writing (µs), how many committed */
  int64_t mine[16] = {peak_rss_bytes(), (int64_t)cb, mem->param, mem->grad, mem->optim,
                      mem->work, mem->act, dev, mem->host, (int64_t)cb_in, (int64_t)cb_out,
                      per_step, (int64_t)(t->save_stall_s * 1e6), (int64_t)(t->save_write_s * 1e6),
                      t->saves_committed, mem->ckpt},
          mx[16];
  t->save_stall_s = 0, t->save_write_s = 0, t->saves_committed = 0;
  MPI_Request r = MPI_REQUEST_NULL;
  TD_MPI_CHECK(td_watched(MPI_Iallreduce(mine, mx, 16, MPI_INT64_T, MPI_MAX, t->app->world, &r),
                          "MPI_Allreduce (metrics)", t->app->world, &r));
  straggler_stats sg;
  memset(&sg, 0, sizeof sg);
  TD_CHECK(stragglers(t, &sg));
  int64_t rss_max = mx[0], *zmax = mx + 2;
  double cbmax = (double)mx[1];
  /* pipeline: each stage's measured idle fraction and peak live micro-batches,
   * gathered to the first stage of this pipeline (world rank 0 for rank 0) */
  int pp = t->grid->pp;
  double idle = 0, busy = 0, fr[256] = {0};
  int live = 0, lives[256] = {0};
  td_pipe_stats(t->pipe, &idle, &busy, &live);
  double frac = busy > 0 ? idle / busy : 0.0;
  /* per stage, the largest over its ranks: the time spent waiting for
   * messages (ms) and its fraction of the step */
  double stage_idle[512] = {0}, stage_max[512];
  if (pp > 1 && pp <= 256) {
    stage_idle[t->grid->pp_rank] = idle * 1e3;
    stage_idle[256 + t->grid->pp_rank] = frac;
    TD_MPI_CHECK(td_watched(MPI_Iallreduce(stage_idle, stage_max, 512, MPI_DOUBLE, MPI_MAX,
                                           t->app->world, &r),
                            "MPI_Allreduce (pipeline metrics)", t->app->world, &r));
  }
  if (pp <= 256) {
    const char *op = "MPI_Gather (pipeline metrics)";
    TD_MPI_CHECK(td_watched(MPI_Igather(&frac, 1, MPI_DOUBLE, fr, 1, MPI_DOUBLE, 0,
                                        t->grid->pp_comm, &r), op, t->grid->pp_comm, &r));
    TD_MPI_CHECK(td_watched(MPI_Igather(&live, 1, MPI_INT, lives, 1, MPI_INT, 0, t->grid->pp_comm,
                                        &r), op, t->grid->pp_comm, &r));
  }
  if (t->app->rank != 0) return TD_OK;
  /* the predicted fraction of the step a stage idles: the deck's schedule
   * simulated (td_pipe_predict) */
  double theory = 0.0;
  if (pp > 1) {
    td_sched_sim sim;
    TD_CHECK(td_pipe_predict(&t->cfg, &sim));
    theory = sim.idle_frac;
  }
  char eta[32];
  fmt_eta(elapsed / (double)steps_run * (double)(c->training_steps - t->step), eta, sizeof eta);
  printf("step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %.0f tok/s | ETA %s",
         (long long)t->step, (long long)c->training_steps, loss, lr, norm, step_s * 1e3, tps, eta);
  if (has_val) printf(" | val %.4f", val_loss);
  if (has_val && t->has_choice) printf(" | choice acc %.4f", t->choice_acc);
  printf("\n");
  fflush(stdout);
  if (t->metrics) {
    fprintf(t->metrics,
            "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, "
            "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"mem_bytes\": %lld, \"comm_bytes\": %.0f, "
            "\"comm_ms\": %.3f",
            (long long)t->step, loss, lr, norm, (long long)t->tokens_seen, step_s * 1e3, tps,
            (long long)rss_max, cbmax, cms);
    fprintf(t->metrics,
            ", \"param_bytes\": %lld, \"grad_bytes\": %lld, \"optim_bytes\": %lld, "
            "\"work_bytes\": %lld, \"act_bytes\": %lld",
            (long long)zmax[0], (long long)zmax[1], (long long)zmax[2], (long long)zmax[3],
            (long long)zmax[4]);
    if (mx[7] > 0) fprintf(t->metrics, ", \"device_mem_bytes\": %lld", (long long)mx[7]);
    if (mx[8] > 0) fprintf(t->metrics, ", \"host_optim_bytes\": %lld", (long long)mx[8]);
    if (mx[15] > 0) fprintf(t->metrics, ", \"ckpt_bytes\": %lld", (long long)mx[15]);
    fprintf(t->metrics,
            ", \"comm_intra_bytes\": %lld, \"comm_inter_bytes\": %lld, \"comm_intra_ms\": %.3f, "
            "\"comm_inter_ms\": %.3f",
            (long long)mx[9], (long long)mx[10], cms_in, cms_out);
    fprintf(t->metrics, ", \"comm_step_bytes\": %lld", (long long)mx[11]);
    /* each rank's busy time a step (compute and data loading), and the
     * slowest rank over logging.straggler_pct (-1: none) */
    fprintf(t->metrics,
            ", \"rank_step_ms_min\": %.3f, \"rank_step_ms_median\": %.3f, "
            "\"rank_step_ms_max\": %.3f, \"straggler_rank\": %d",
            sg.min_ms, sg.median_ms, sg.max_ms, sg.rank);
    /* the step's tokens, and those its loss counts (the loss mask's) */
    fprintf(t->metrics, ", \"step_tokens\": %lld, \"loss_tokens\": %.0f",
            (long long)(c->training_global_batch * c->model_seq_len), t->loss_tokens);
    if (mx[12] > 0 || mx[14] > 0) {
      fprintf(t->metrics, ", \"save_stall_ms\": %.3f", (double)mx[12] / 1e3);
      if (c->checkpoint_async && mx[14] > 0)
        fprintf(t->metrics, ", \"save_write_ms\": %.3f", (double)mx[13] / 1e3);
    }
    if (pp > 1 && pp <= 256) {
      fprintf(t->metrics, ", \"pp_idle\": [");
      for (int i = 0; i < pp; ++i) fprintf(t->metrics, "%s%.4f", i ? ", " : "", fr[i]);
      fprintf(t->metrics, "], \"pp_bubble_theory\": %.4f, \"pp_live_peak\": [", theory);
      for (int i = 0; i < pp; ++i) fprintf(t->metrics, "%s%d", i ? ", " : "", lives[i]);
      fprintf(t->metrics, "], \"pp_idle_ms\": [");
      for (int i = 0; i < pp; ++i) fprintf(t->metrics, "%s%.3f", i ? ", " : "", stage_max[i]);
      fprintf(t->metrics, "], \"pp_bubble\": [");
      for (int i = 0; i < pp; ++i)
        fprintf(t->metrics, "%s%.4f", i ? ", " : "", stage_max[256 + i]);
      fprintf(t->metrics, "]");
    }
    if (t->model->moe) /* the sparse blocks' auxiliary terms and expert load */
      fprintf(t->metrics,
              ", \"moe_aux_loss\": %.9g, \"moe_z_loss\": %.9g, \"moe_tokens_min\": %.9g, "
              "\"moe_tokens_max\": %.9g, \"moe_tokens_mean\": %.9g",
              t->moe_aux, t->moe_z, t->moe_tok_min, t->moe_tok_max, t->moe_tok_mean);
    if (t->model->moe && t->model->cap > 0)
      fprintf(t->metrics, ", \"moe_dropped\": %.9g", t->moe_dropped);
    if (t->model->moe && t->grid->ep > 1) /* this rank's, since the start, as comm_ms */
      fprintf(t->metrics, ", \"moe_alltoall_ms\": %.3f", t->model->ep_ms);
    if (has_val) fprintf(t->metrics, ", \"val_loss\": %.9g", val_loss);
    if (has_val && t->has_choice)
      fprintf(t->metrics, ", \"choice_acc\": %.9g, \"choice_acc_norm\": %.9g", t->choice_acc,
              t->choice_acc_norm);
    fprintf(t->metrics, "}\n");
    fflush(t->metrics);
  }
  if (t->tb) {
    /* the JSONL's numbers under TensorBoard's usual names (docs/monitoring.md) */
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const char *tags[64];
    double v[64];
    int n = 0;
#define TB(tag, value) (tags[n] = (tag), v[n++] = (value))
    TB("loss_metrics/global_avg_loss", loss);
    TB("lr", lr);
    TB("grad_norm", norm);
    if (t->model->moe) {
      TB("moe/aux_loss", t->moe_aux);
      TB("moe/z_loss", t->moe_z);
      TB("moe/tokens_per_expert_min", t->moe_tok_min);
      TB("moe/tokens_per_expert_max", t->moe_tok_max);
      TB("moe/tokens_per_expert_mean", t->moe_tok_mean);
      if (t->model->cap > 0) TB("moe/dropped_fraction", t->moe_dropped);
    }
    TB("tokens_seen", (double)t->tokens_seen);
    TB("time_metrics/step(ms)", step_s * 1e3);
    TB("throughput(tps)", tps);
    TB("memory/max_rss(GiB)", (double)rss_max / gib);
    TB("memory/params(GiB)", (double)zmax[0] / gib);
    TB("memory/grads(GiB)", (double)zmax[1] / gib);
    TB("memory/optimizer(GiB)", (double)zmax[2] / gib);
    TB("memory/workspace(GiB)", (double)zmax[3] / gib);
    TB("memory/activations(GiB)", (double)zmax[4] / gib);
    if (mx[7] > 0) TB("memory/device_peak(GiB)", (double)mx[7] / gib);
    if (mx[8] > 0) TB("memory/host_optimizer(GiB)", (double)mx[8] / gib);
    if (mx[15] > 0) TB("memory/ckpt_staging(GiB)", (double)mx[15] / gib);
    TB("comm/MiB", cbmax / (1024.0 * 1024.0));
    TB("comm/ms", cms);
    TB("comm/intra_node_MiB", (double)mx[9] / (1024.0 * 1024.0));
    TB("comm/inter_node_MiB", (double)mx[10] / (1024.0 * 1024.0));
    TB("comm/intra_node_ms", cms_in);
    TB("comm/inter_node_ms", cms_out);
    TB("comm/step_MiB", (double)mx[11] / (1024.0 * 1024.0));
    TB("ranks/step_min(ms)", sg.min_ms);
    TB("ranks/step_median(ms)", sg.median_ms);
    TB("ranks/step_max(ms)", sg.max_ms);
    TB("ranks/straggler", (double)sg.rank);
    TB("data/step_tokens", (double)(c->training_global_batch * c->model_seq_len));
    TB("data/loss_tokens", t->loss_tokens);
    if (mx[12] > 0 || mx[14] > 0) TB("checkpoint/stall(ms)", (double)mx[12] / 1e3);
    if (c->checkpoint_async && mx[14] > 0) TB("checkpoint/write(ms)", (double)mx[13] / 1e3);
    if (pp > 1 && pp <= 256) {
      double worst = 0;
      for (int i = 0; i < pp; ++i) worst = fr[i] > worst ? fr[i] : worst;
      TB("pipeline/bubble", worst);
      TB("pipeline/bubble_predicted", theory);
      int most = 0;
      for (int i = 0; i < pp; ++i) most = lives[i] > most ? lives[i] : most;
      TB("pipeline/live_peak", (double)most);
      double ims = 0, bm = 0;
      for (int i = 0; i < pp; ++i) {
        ims = stage_max[i] > ims ? stage_max[i] : ims;
        bm = stage_max[256 + i] > bm ? stage_max[256 + i] : bm;
      }
      TB("pipeline/idle(ms)", ims);
      TB("pipeline/bubble_measured", bm);
    }
    if (has_val) TB("loss_metrics/val_loss", val_loss);
    if (has_val && t->has_choice) {
      TB("eval/choice_acc", t->choice_acc);
      TB("eval/choice_acc_norm", t->choice_acc_norm);
    }
#undef TB
    TD_CHECK(td_tb_scalars(t->tb, t->step, n, tags, v));
  }
  return TD_OK;
}

/* eval.choice: its examples (tokenized with data.train's tokenizer) loaded
 * once, scored at every evaluation (t->has_choice). Collective. */
static td_status choice_eval(td_trainer *t) {
  t->has_choice = 0;
  if (!t->cfg.eval_choice[0]) return TD_OK;
  if (!t->choice) {
    td_status st = TD_OK;
    td_bpe *bpe = NULL;
    if (td_tokenizer_files_present(&t->tok))
      st = td_tokenizer_files_load(&t->tok, t->cfg.data_train, &bpe);
    if (st == TD_OK) st = td_choice_load(t->cfg.eval_choice, bpe, t->cfg.model_seq_len, &t->choice);
    td_bpe_destroy(&bpe);
    TD_CHECK(td_agree(t->app->world, st));
  }
  td_choice_result r;
  TD_CHECK(td_trainer_choice(t, t->choice, &r, NULL));
  t->choice_acc = r.acc, t->choice_acc_norm = r.acc_norm, t->has_choice = 1;
  return TD_OK;
}

static td_status eval_and_log(td_trainer *t, double *val) {
  int64_t n = 0;
  TD_CHECK(td_trainer_eval(t, val, &n));
  if (t->app->rank == 0 && t->step == 0) {
    printf("eval  step %lld | val_loss %.4f over %lld tokens\n", (long long)t->step, *val,
           (long long)n);
    if (t->metrics)
      fprintf(t->metrics, "{\"step\": 0, \"val_loss\": %.9g, \"val_tokens\": %lld}\n", *val,
              (long long)n);
    const char *tag = "loss_metrics/val_loss";
    if (t->tb) TD_CHECK(td_tb_scalars(t->tb, 0, 1, &tag, val));
  }
  return TD_OK;
}

td_status td_trainer_run(td_trainer *t) {
  td_config *c = &t->cfg;
  td_status st = TD_OK;
  dump_state d;
  memset(&d, 0, sizeof d);
  d.file = -1;
  if (t->app->rank == 0) {
    st = ensure_parent(c->logging_metrics);
    if (st == TD_OK && t->step > 0) st = trim_metrics(c->logging_metrics, t->step);
    if (st == TD_OK) {
      t->metrics = fopen(c->logging_metrics, t->step > 0 ? "a" : "w");
      if (!t->metrics)
        st = td_error_set(TD_ERR_IO, __FILE__, __LINE__, __func__, "cannot open %s for writing",
                          c->logging_metrics);
    }
    if (st == TD_OK && c->logging_tensorboard[0]) {
      st = td_tb_open(c->logging_tensorboard, t->step, &t->tb);
      if (st == TD_OK) td_log("trident: TensorBoard events in %s\n", td_tb_path(t->tb));
    }
  }
  /* what every checkpoint needs, made before the first one (collective) */
  td_status cs = td_ckpt_setup(t->app->world);
  if (st == TD_OK) st = cs;
  TD_CHECK(td_agree(t->app->world, st));
  TD_CHECK(td_trainer_save_prepare(t));
  TD_CHECK(gather_hosts(t));
  if (t->dump_path) TD_CHECK_GOTO(dump_begin(t, &d));
  int bf16 = strcmp(c->training_precision, "bf16") == 0;
  char cps[32] = "";
  if (c->parallel_cp > 1) snprintf(cps, sizeof cps, ", cp %lld", (long long)c->parallel_cp);
  td_log("trident: training %s on %d rank%s (dp %lld%s, tp %lld, pp %lld, zero %lld), %d thread%s "
         "per rank, %s back-end (%s), %s%s, %lld steps of %lld tokens\n",
         c->run_name, t->app->size, t->app->size == 1 ? "" : "s", (long long)c->parallel_dp, cps,
         (long long)c->parallel_tp, (long long)c->parallel_pp, (long long)c->parallel_zero,
         t->threads, t->threads == 1 ? "" : "s", t->k->name, t->k->matmul_name,
         c->training_precision,
         !bf16 ? "" : t->k->bf16_matmul == 2 ? " (native bf16 matmul)"
                                             : " (bf16 operands widened to fp32: no bf16 matmul "
                                               "on this CPU)",
         (long long)c->training_steps, (long long)(c->training_global_batch * c->model_seq_len));
  if (t->dcomm != TD_DCOMM_OFF && t->app->size > 1)
    td_log("trident: collectives on the %s back-end's buffers: %s device communicators "
           "(data-parallel, tensor-parallel, %stied embedding)%s\n",
           t->k->name, td_dcomm_kind_name(t->dcomm), t->grid->cp > 1 ? "context-parallel, " : "",
           t->grid->pp > 1 ? "; pipeline messages on one-way device channels (a "
                             "communicator per direction of each link)"
                           : "");
  else if (!t->k->host_memory && t->app->size > 1)
    td_log("trident: the collectives run in MPI on host copies of the %s back-end's buffers "
           "(staged)\n",
           t->k->name);
  double val = 0.0;
  if (c->eval_every > 0 && t->step == 0) TD_CHECK_GOTO(eval_and_log(t, &val));
  if (t->step > 0) td_log("trident: resuming at step %lld\n", (long long)t->step);
  double t_start = td_now();
  int64_t first_step = t->step;
  lead_check lead;
  lead_init(t, &lead);
  /* test only: every step made slower by a pause (the scheduler tests) */
  const char *pause_env = getenv("TD_TEST_STEP_SLEEP_MS");
  long pause_ms = pause_env ? strtol(pause_env, NULL, 10) : 0;
  double last_loss = 0.0, last_val = 0.0;
  int64_t val_step = -1;
  while (t->step < c->training_steps) {
    double t0 = td_now();
    double loss = 0, norm = 0, lr = 0;
    int64_t s = t->step;
    double comm0 = comm_ms(t), data0 = t->strag_data_s, wait0 = t->strag_wait_s;
    TD_CHECK_GOTO(td_trainer_step(t, &loss, &norm, &lr));
    /* the step's busy time (its wall time less its waits: collectives,
     * pipeline receives, which the pipeline group's collectives count, and
     * the data agreement) and data time, into the window; not the run's
     * first steps */
    if (t->step > first_step + STRAG_SKIP) {
      double wait = (comm_ms(t) - comm0) / 1e3 + (t->strag_wait_s - wait0);
      double *slot = t->strag_ring + 2 * t->strag_pos;
      slot[0] = td_now() - t0 - wait, slot[1] = t->strag_data_s - data0;
      t->strag_pos = (t->strag_pos + 1) % t->strag_cap;
      if (t->strag_n < t->strag_cap) t->strag_n++;
    }
    if (d.file >= 0) {
      TD_CHECK_GOTO(dump_batch(t, &d, s));
      d.losses[s] = loss, d.norms[s] = norm, d.lrs[s] = lr;
      d.moe_aux[s] = t->moe_aux, d.moe_z[s] = t->moe_z;
      if (s == 0) {
        TD_CHECK_GOTO(dump_tensors(t, d.file, "/grad", t->grad_snapshot));
        TD_CHECK_GOTO(dump_tensors(t, d.file, "/model_after", NULL));
      }
    }
    if (pause_ms > 0) test_pause(pause_ms);
    double step_s = td_now() - t0;
    if (t->step == first_step + 1) lead_check_now(t, &lead, step_s, "at start-up");
    int has_val = 0;
    int last = t->step == c->training_steps;
    if ((c->eval_every > 0 && t->step % c->eval_every == 0) || (last && c->eval_every >= 0)) {
      int64_t n = 0;
      TD_CHECK_GOTO(td_trainer_eval(t, &val, &n));
      TD_CHECK_GOTO(choice_eval(t));
      has_val = 1;
    }
    last_loss = loss;
    if (has_val) last_val = val, val_step = t->step;
    if (t->step % c->logging_every == 0 || last || has_val)
      TD_CHECK_GOTO(log_step(t, loss, norm, lr, step_s, td_now() - t_start, t->step - first_step,
                             has_val, val));
    int sig = 0, writing = 0;
    TD_CHECK_GOTO(agree_signal(t, &sig, &writing));
    /* a background save every writer has finished: commit it now */
    if (td_trainer_save_inflight(t) && !writing) TD_CHECK_GOTO(td_trainer_save_finish(t));
    if ((c->checkpoint_every > 0 && t->step % c->checkpoint_every == 0) || last || sig) {
      /* the last save and a stop signal's are synchronous (after the one in
       * flight): the run ends with its checkpoint committed */
      if (c->checkpoint_async && !last && !sig) TD_CHECK_GOTO(td_trainer_save_async(t));
      else TD_CHECK_GOTO(save(t));
      if (!sig && !last) lead_check_now(t, &lead, step_s, "after this save");
    }
    if (sig && !last) {
      st = td_error_set(TD_STOPPED, __FILE__, __LINE__, __func__,
                        "stopped by %s at step %lld after committing its checkpoint in %s; run "
                        "the same command to resume",
                        sig == SIGTERM   ? "SIGTERM"
                        : sig == SIGINT  ? "SIGINT"
                        : sig == SIGUSR1 ? "SIGUSR1"
                        : sig == SIGUSR2 ? "SIGUSR2"
                                         : "a signal",
                        (long long)t->step, c->checkpoint_dir);
      td_error_mark_agreed();
      goto done;
    }
  }
  if (d.file >= 0) TD_CHECK_GOTO(dump_end(t, &d));
  double took = td_now() - t_start;
  int64_t ran = t->step - first_step;
  td_log("trident: done, %lld steps in %.1f s\n", (long long)ran, took);
  /* the summary: what a user looks for at the end of a log */
  if (ran > 0) {
    td_log("summary: steps %lld-%lld of %lld in %.1f s, %.0f tokens/s\n", (long long)first_step + 1,
           (long long)t->step, (long long)c->training_steps, took,
           took > 0 ? (double)ran * (double)(c->training_global_batch * c->model_seq_len) / took : 0.0);
    td_log("  train loss   %.4f at step %lld\n", last_loss, (long long)t->step);
    if (val_step >= 0)
      td_log("  val loss     %.4f at step %lld\n", last_val, (long long)val_step);
    else
      td_log("  val loss     not measured (eval.every: -1)\n");
  }
  if (t->last_ckpt[0]) td_log("  checkpoint   %s\n", t->last_ckpt);
  td_log("  metrics      %s\n", c->logging_metrics);
done:
  /* a failure every rank knows of waits for the background save and
   * commits it (its state is from before the failure); a rank failing
   * alone leaves it (the job is aborted, `latest` names the one before) */
  if (st != TD_OK && td_trainer_save_inflight(t) && td_error_is_agreed()) {
    td_status kept = td_error_status();
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", td_error_message());
    td_error_clear();
    if (td_trainer_save_finish(t) != TD_OK) {
      td_warn("the checkpoint being written in the background was not committed either: %s",
              td_error_message());
      td_error_clear();
    }
    st = td_error_set(kept, __FILE__, __LINE__, __func__, "%s", msg);
    td_error_mark_agreed();
  }
  if (!td_error_alone()) td_trainer_save_drop(t);
  dump_free(t, &d);
  td_choice_destroy(&t->choice);
  return st;
}
