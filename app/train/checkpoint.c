/* checkpoint.c — the trainer's checkpoints (docs/architecture.md, "Checkpoint file"):
 * which rank writes and reads which part of every tensor, through the
 * registry (tensor-parallel split, stage) and the ZeRO engine (owned shard).
 *
 * Writing: each element of each global tensor is written by exactly one rank:
 * the dp rank whose ZeRO shard holds it (so replicated data is spread over
 * the dp replicas), among tp ranks the holder of its shard (a tensor
 * replicated over tp by tp rank i mod tp, i its registry index), the first
 * stage for the tied wte. Reading: every rank reads what it needs for its
 * grid — any grid, not only the one that saved — and verifies checksums over
 * the same disjoint cover. The experts' tensors (model.moe) live in their own
 * ZeRO engine over edp_comm (t->xzero, the registry's expert space from
 * xbegin): each is written by the edp rank owning the element, on the one ep
 * rank holding the expert. */
#include "app/train/td_checkpoint.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "io/td_ckpt.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"
#include "td_build.h"

#define MAX_BOX 32

/* Split local range [x0, x1) of the split dimension into pieces inside one
 * interleaved block and map each to global coordinates (-1 start: padding). */
typedef struct {
  int64_t l0, n, g0;
} piece;

static int split_dim_pieces(const td_registry *r, const td_param *p, int dim, int64_t x0, int64_t x1,
                            piece *out) {
  int n = 0;
  if (p->split_dim != dim) {
    out[0].l0 = x0, out[0].n = x1 - x0, out[0].g0 = x0;
    return x1 > x0;
  }
  int64_t local = p->local_shape[dim];
  int64_t blk_local = local / p->split_blocks, blk_global = p->split_pad / p->split_blocks;
  int64_t real = p->shape[dim];
  for (int64_t x = x0; x < x1;) {
    int64_t b = x / blk_local, w = x % blk_local;
    int64_t end = (b + 1) * blk_local < x1 ? (b + 1) * blk_local : x1;
    int64_t g = b * blk_global + (int64_t)r->tp_rank * blk_local + w;
    int64_t cnt = end - x;
    if (g + cnt > real) cnt = real - g; /* padding beyond the real extent */
    if (cnt > 0) out[n].l0 = x, out[n].n = cnt, out[n].g0 = g, n++;
    x = end;
  }
  return n;
}

/* Boxes of tensor p's local elements [a, b) (flat, relative to the tensor);
 * src_off = base + local flat index. Returns the number written to out. */
static int tensor_boxes(const td_registry *r, const td_param *p, int64_t a, int64_t b, int64_t base,
                        td_ckpt_box *out) {
  int64_t C = p->local_shape[1];
  int64_t rects[3][4]; /* r0, nr, c0, nc in local coordinates */
  int nrect = 0;
  if (b <= a) return 0;
  int64_t r0 = a / C, c0 = a % C, r1 = b / C, c1 = b % C;
  if (r0 == r1) {
    rects[nrect][0] = r0, rects[nrect][1] = 1, rects[nrect][2] = c0, rects[nrect][3] = c1 - c0, nrect++;
  } else {
    if (c0 > 0) {
      rects[nrect][0] = r0, rects[nrect][1] = 1, rects[nrect][2] = c0, rects[nrect][3] = C - c0;
      nrect++, r0++;
    }
    if (r1 > r0) rects[nrect][0] = r0, rects[nrect][1] = r1 - r0, rects[nrect][2] = 0, rects[nrect][3] = C, nrect++;
    if (c1 > 0) rects[nrect][0] = r1, rects[nrect][1] = 1, rects[nrect][2] = 0, rects[nrect][3] = c1, nrect++;
  }
  int nb = 0;
  for (int i = 0; i < nrect; ++i) {
    piece rp[8], cp[8];
    int nr = split_dim_pieces(r, p, 0, rects[i][0], rects[i][0] + rects[i][1], rp);
    int nc = split_dim_pieces(r, p, 1, rects[i][2], rects[i][2] + rects[i][3], cp);
    for (int x = 0; x < nr; ++x)
      for (int y = 0; y < nc && nb < MAX_BOX; ++y) {
        td_ckpt_box *bx = &out[nb++];
        bx->r0 = rp[x].g0, bx->nr = rp[x].n, bx->c0 = cp[y].g0, bx->nc = cp[y].n;
        bx->src_off = base + rp[x].l0 * C + cp[y].l0;
        bx->src_ld = C;
      }
  }
  return nb;
}

/* Does this rank write (its owned part of) tensor i? */
static int writes_tensor(const td_trainer *t, int i) {
  const td_param *p = &t->model->reg->p[i];
  if (!p->present) return 0;
  if (p->tied_last && t->grid->pp_rank != 0) return 0;
  if (p->split_dim < 0 && i % t->grid->tp != t->grid->tp_rank) return 0;
  return 1;
}

/* The engine holding tensor p (the experts' or the dense one) and its owned
 * range [*ob, *oe) in the local space (the expert space starts at xbegin);
 * an empty range where the stage has no engine of p's kind. */
static td_zero *engine_of(const td_trainer *t, const td_param *p, int64_t *ob, int64_t *oe) {
  int x = p->expert >= 0;
  td_zero *z = x ? t->xzero : t->zero;
  *ob = *oe = 0;
  if (!z) return NULL;
  td_zero_owned(z, ob, oe);
  int64_t base = x ? t->model->reg->xbegin : 0;
  *ob += base, *oe += base;
  return z;
}

/* The owned boxes of tensor i, with src_off relative to element `base_elem`
 * of the local space. */
static int owned_boxes(const td_trainer *t, int i, int64_t base_elem, td_ckpt_box *out) {
  const td_param *p = &t->model->reg->p[i];
  if (!writes_tensor(t, i)) return 0;
  int64_t ob, oe;
  if (!engine_of(t, p, &ob, &oe)) return 0;
  int64_t a = p->offset > ob ? p->offset : ob, b = p->offset + p->local_numel < oe ? p->offset + p->local_numel : oe;
  if (b <= a) return 0;
  return tensor_boxes(t->model->reg, p, a - p->offset, b - p->offset, p->offset - base_elem, out);
}

static void dims_of(const td_param *p, int64_t d[2]) { d[0] = p->shape[0], d[1] = p->shape[1]; }

/* Create group `path` with int64 attributes (collective: every rank, same values). */
static td_status group_attrs(hid_t f, const char *path, const char **names, const int64_t *vals,
                             int n) {
  hid_t g = H5Gcreate2(f, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) TD_FAIL(TD_ERR_HDF5, "cannot create %s: %s", path, td_h5_error_text());
  td_status st = TD_OK;
  for (int i = 0; i < n && st == TD_OK; ++i) st = td_h5_attr_write_i64(g, names[i], vals[i]);
  H5Gclose(g);
  return st;
}

/* ---- asynchronous saves ------------------------------------------------------------ */

/* checkpoint.async (docs/checkpoints.md, "Asynchronous saves"). At a save
 * step every rank copies the state it owns into `stage` (host memory, pinned
 * on a device back-end, copied on the copy stream), makes the file's
 * metadata with the other ranks as a synchronous save does (td_ckpt_writer
 * in deferred mode: the datasets exist, their data is not written yet), and
 * starts a thread that writes this rank's data into the .tmp with pwrite and
 * fdatasyncs it (td_ckpt_flush). The thread calls neither MPI nor HDF5, so
 * MPI_THREAD_FUNNELED holds and HDF5 stays on the main thread. At each step
 * boundary the ranks agree, in the reduction that agrees on signals, whether
 * every writer has finished; the first boundary where all have commits the
 * save (checksums, close, fsync, rename, `latest`), collectively, on the
 * main thread. The next save, a stop signal, the end of the run and an
 * agreed failure wait for the writer and commit first: one save in flight. */
struct td_async_save {
  td_ckpt_writer *w;
  pthread_t thread;
  int running;     /* a save is in flight: its thread started, not yet committed */
  atomic_int done; /* its thread has returned */
  float *stage;    /* 3 × n floats: parameters, exp_avg, exp_avg_sq of the owned ranges
                      (the dense engine's nd, then the experts') */
  size_t n, nd;
  int pinned;      /* stage is the back-end's host_alloc memory */
  int64_t step;
  double t0;       /* when the save began */
  double fg_s;     /* seconds it has kept training waiting so far */
  double write_s;  /* the thread's seconds */
};

static void *writer_main(void *arg) {
  struct td_async_save *a = arg;
#ifdef _OPENMP
  omp_set_num_threads(1); /* the checksums: this thread only, beside the compute threads */
#endif
  double t0 = td_now();
  (void)td_ckpt_flush(a->w);
  a->write_s = td_now() - t0;
  atomic_store(&a->done, 1);
  return NULL;
}

static void stage_free(td_trainer *t, struct td_async_save *a) {
  if (!a->stage) return;
  if (a->pinned) t->k->host_free(t->k, a->stage);
  else td_free(a->stage);
  a->stage = NULL;
}

/* The staging buffer, a->n floats for each of the three (the owned range's
 * size, td_trainer_ckpt_stage_bytes; zeroed, so its pages exist before the
 * first save: allocating 3 × 250 MB at a save step measured 2 s here). Once
 * a run. Not collective. */
static td_status stage_alloc(td_trainer *t, struct td_async_save *a) {
  td_kernels *k = t->k;
  if (a->stage) return TD_OK;
  size_t bytes = (size_t)td_trainer_ckpt_stage_bytes(&t->cfg, t->zero);
  if (t->xzero) bytes += (size_t)td_trainer_ckpt_stage_bytes(&t->cfg, t->xzero);
  a->pinned = !td_zero_state_on_host(t->zero) && k->host_alloc != NULL;
  if (a->pinned) TD_CHECK(k->host_alloc(k, (void **)&a->stage, bytes, "checkpoint staging"));
  else TD_CHECK(td_alloc((void **)&a->stage, bytes, "checkpoint staging"));
  int64_t ob, oe, xb = 0, xe = 0;
  td_zero_owned(t->zero, &ob, &oe);
  if (t->xzero) td_zero_owned(t->xzero, &xb, &xe);
  a->nd = (size_t)(oe > ob ? oe - ob : 0);
  a->n = a->nd + (size_t)(xe > xb ? xe - xb : 0);
  return TD_OK;
}

/* Copy the owned state (parameters and both moments) into a->stage. Not
 * collective. */
static td_status stage_state(td_trainer *t, struct td_async_save *a) {
  td_kernels *k = t->k;
  int on_host = td_zero_state_on_host(t->zero);
  TD_CHECK(stage_alloc(t, a));
  size_t n = a->n;
  td_zero *zs[2] = {t->zero, t->xzero};
  for (int e = 0; e < 2 && zs[e]; ++e) {
    const float *src[3] = {td_zero_owned_params(zs[e]), td_zero_owned_exp_avg(zs[e]),
                           td_zero_owned_exp_avg_sq(zs[e])};
    int64_t ob, oe;
    td_zero_owned(zs[e], &ob, &oe);
    size_t bytes = (size_t)(oe > ob ? oe - ob : 0) * sizeof(float);
    if (bytes == 0) continue;
    for (int i = 0; i < 3; ++i) {
      float *dst = a->stage + (size_t)i * n + (e ? a->nd : 0);
      if (on_host) memcpy(dst, src[i], bytes);
      else if (a->pinned && k->to_host_async) TD_CHECK(k->to_host_async(k, dst, src[i], bytes));
      else TD_CHECK(k->to_host(k, dst, src[i], bytes));
    }
  }
  if (!on_host && a->pinned && k->to_host_async) TD_CHECK(k->host_wait(k));
  return TD_OK;
}

/* ---- save ------------------------------------------------------------------------- */

/* One save of step t->step: synchronous (a == NULL: written and committed
 * here), or asynchronous (the state staged in a, the metadata made here,
 * the data left to writer_main and the commit to td_trainer_save_finish). */
static td_status save_impl(td_trainer *t, char *path_out, size_t cap, struct td_async_save *a) {
  td_status st = TD_OK;
  td_config *c = &t->cfg;
  td_model *m = t->model;
  td_kernels *k = t->k;
  td_ckpt_writer *w = NULL;
  float *host = NULL;
  char *yaml = NULL;
  int64_t ob, oe, xb = 0, xe = 0;
  td_zero_owned(t->zero, &ob, &oe);
  if (t->xzero) td_zero_owned(t->xzero, &xb, &xe);
  int64_t nd = oe > ob ? oe - ob : 0, nx = xe > xb ? xe - xb : 0;
  double t0 = td_now();
  /* Host back-ends (and the optimizer's offloaded state) write straight
   * from their buffers; device back-ends stage through one host buffer kept
   * for every save (no page faults). An asynchronous save writes from its
   * copy of all three. */
  int on_host = td_zero_state_on_host(t->zero);
  if (a) {
    st = stage_state(t, a);
    TD_CHECK(td_agree(t->app->world, st));
    on_host = 1;
  } else if (!on_host && !t->ckpt_stage) {
    TD_CHECK(td_alloc((void **)&t->ckpt_stage, (size_t)(nd + nx + 1) * sizeof(float),
                      "checkpoint staging"));
  }
  host = t->ckpt_stage;
  TD_CHECK_GOTO(td_ckpt_save_begin(t->app->world, c->checkpoint_dir, t->step, &w));
  td_ckpt_writer_defer(w, a != NULL);
  hid_t f = td_ckpt_writer_file(w);
  int64_t grid[3] = {c->parallel_dp, c->parallel_tp, c->parallel_pp};
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "step", t->step));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "tokens_seen", t->tokens_seen));
  TD_CHECK_GOTO(td_h5_attr_write_i64v(f, "saved_grid", grid, 3));
  TD_CHECK_GOTO(td_h5_attr_write_i64(f, "saved_zero", c->parallel_zero));
  TD_CHECK_GOTO(td_config_to_text(c, 1, &yaml));
  TD_CHECK_GOTO(td_h5_write_string(f, "/config", yaml, t->app->rank == 0));
  if (td_tokenizer_files_present(&t->tok)) /* the data's tokenizer: generate speaks its text */
    TD_CHECK_GOTO(td_tokenizer_h5_write(f, &t->tok, t->app->rank == 0));
  /* three buffers: parameters, then the two moments, all over the owned
   * ranges (the dense engine's, the experts') */
  const char *prefix[3] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
  td_zero *zs[2] = {t->zero, t->xzero};
  for (int which = 0; which < 3; ++which) {
    const float *from[2] = {NULL, NULL};
    for (int e = 0; e < 2 && zs[e]; ++e) {
      float *s = which == 0   ? td_zero_owned_params(zs[e])
                 : which == 1 ? td_zero_owned_exp_avg(zs[e])
                              : td_zero_owned_exp_avg_sq(zs[e]);
      int64_t len = e ? nx : nd;
      if (a) {
        from[e] = a->stage + (size_t)which * a->n + (e ? a->nd : 0);
      } else if (!on_host && len > 0) {
        TD_CHECK_GOTO(k->to_host(k, host + (e ? nd : 0), s, (size_t)len * sizeof(float)));
        from[e] = host + (e ? nd : 0);
      } else {
        from[e] = s;
      }
    }
    for (int i = 0; i < m->reg->n; ++i) {
      const td_param *p = &m->reg->p[i];
      td_ckpt_box boxes[MAX_BOX];
      int x = p->expert >= 0;
      int nb = owned_boxes(t, i, x ? m->reg->xbegin + xb : ob, boxes);
      char name[160];
      snprintf(name, sizeof name, "%s/%s", prefix[which], p->name);
      int64_t d[2];
      dims_of(p, d);
      TD_CHECK_GOTO(td_ckpt_write_tensor(w, name, p->ndim, d, nb, boxes, from[x]));
      if (which == 0 && i == 1) TD_CHECK_GOTO(td_test_fail_point("ckpt_save"));
    }
  }
  hid_t g = -1;
  if ((g = H5Gopen2(f, "/optim", H5P_DEFAULT)) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "cannot open /optim: %s", td_h5_error_text());
  double betas[2] = {c->optimizer_betas[0], c->optimizer_betas[1]};
  st = td_h5_attr_write_i64(g, "step", t->step);
  if (st == TD_OK) st = td_h5_attr_write_f64(g, "lr", td_lr_at(c, t->step > 0 ? t->step - 1 : 0));
  if (st == TD_OK) st = td_h5_attr_write_f64v(g, "betas", betas, 2);
  if (st == TD_OK) st = td_h5_attr_write_f64(g, "eps", c->optimizer_eps);
  if (st == TD_OK) st = td_h5_attr_write_f64(g, "weight_decay", c->optimizer_weight_decay);
  H5Gclose(g);
  TD_CHECK_GOTO(st);
  /* sampler and generator state (written by every rank, same values) */
  int64_t epoch = 0, position = 0;
  td_sampler_state(t->sampler, &epoch, &position);
  const char *dk[] = {"epoch", "position", "seed"};
  int64_t dv[] = {epoch, position, c->run_seed};
  TD_CHECK_GOTO(group_attrs(f, "/data", dk, dv, 3));
  const char *rk[] = {"seed"};
  int64_t rv[] = {c->run_seed};
  TD_CHECK_GOTO(group_attrs(f, "/rng", rk, rv, 1));
  if ((g = H5Gopen2(f, "/rng", H5P_DEFAULT)) < 0)
    TD_FAIL_GOTO(TD_ERR_HDF5, "cannot open /rng: %s", td_h5_error_text());
  st = td_h5_attr_write_str(g, "generator",
                            "counter-based splitmix64: every draw is a function of (seed, purpose, "
                            "index); no stream state");
  H5Gclose(g);
  TD_CHECK_GOTO(st);
  if (a) { /* the data: in the background from here */
    a->w = w, a->step = t->step, a->t0 = t0, a->write_s = 0.0;
    atomic_store(&a->done, 0);
    if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
      td_warn("checkpoint: cannot start the background writer; step %lld is written now",
              (long long)t->step);
      writer_main(a);
      a->thread = pthread_self();
    }
    w = NULL;
    a->running = 1;
    a->fg_s = td_now() - t0;
    t->save_stall_s += a->fg_s;
    td_log("checkpoint: step %lld being written in the background (training waited %.3f s)\n",
           (long long)t->step, a->fg_s);
    goto done;
  }
  TD_CHECK_GOTO(td_ckpt_save_commit(&w, (int)c->checkpoint_keep, path_out, cap));
  t->last_save_s = td_now() - t0;
  t->save_stall_s += t->last_save_s;
  t->saves_committed++;
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path_out);
  td_log("checkpoint: step %lld saved to %s in %.2f s\n", (long long)t->step, path_out,
         t->last_save_s);
done:
  if (w) td_ckpt_save_abort(&w);
  free(yaml);
  return st;
}

/* ---- load ----------------------------------------------------------------------- */

/* The boxes of tensor i's local elements in [lo, hi) of the local space, with
 * src_off relative to element lo (what read_group reads into host); space
 * -1: any tensor, 0 the dense ones only, 1 the experts' only. */
static int read_boxes(const td_trainer *t, int i, int space, int64_t lo, int64_t hi,
                      td_ckpt_box *out) {
  const td_param *p = &t->model->reg->p[i];
  if (!p->present || (space >= 0 && (p->expert >= 0) != space)) return 0;
  int64_t a = p->offset > lo ? p->offset : lo;
  int64_t b = p->offset + p->local_numel < hi ? p->offset + p->local_numel : hi;
  return tensor_boxes(t->model->reg, p, a - p->offset, b - p->offset, p->offset - lo, out);
}

/* Read every present tensor's local elements in [lo, hi) of the local space
 * into host (host[0] is element lo), verifying checksums over the owned cover. */
static td_status read_group(td_trainer *t, td_ckpt_reader *r, const char *prefix, int space,
                            int64_t lo, int64_t hi, float *host, int verify) {
  td_model *m = t->model;
  for (int i = 0; i < m->reg->n; ++i) {
    const td_param *p = &m->reg->p[i];
    td_ckpt_box boxes[MAX_BOX], vboxes[MAX_BOX];
    if (space >= 0 && (p->expert >= 0) != space) continue; /* the same on every rank */
    int nb = read_boxes(t, i, space, lo, hi, boxes);
    int nv = p->present ? owned_boxes(t, i, lo, vboxes) : 0;
    char name[160];
    snprintf(name, sizeof name, "%s/%s", prefix, p->name);
    int64_t d[2];
    dims_of(p, d);
    TD_CHECK(td_ckpt_read_tensor(r, name, p->ndim, d, nb, boxes, host, verify, nv, vboxes));
  }
  return TD_OK;
}

/* Not collective: every value this rank read of group `prefix` (read_group's
 * boxes; host[0] is element lo) must be finite, and >= 0 where nonneg (AdamW's
 * second moments, whose square root the update takes). A checksum only
 * proves that the file holds what was written, and a NaN written by a run
 * that diverged, or by a hand-edited file, would otherwise surface steps
 * later as a NaN loss (exit 3). TD_ERR_CKPT naming the file, the tensor and
 * the element's flat index in the global shape. */
static td_status check_values(const td_trainer *t, const char *path, const char *prefix,
                              int space, int64_t lo, int64_t hi, const float *host, int nonneg) {
  const td_registry *reg = t->model->reg;
  for (int i = 0; i < reg->n; ++i) {
    const td_param *p = &reg->p[i];
    td_ckpt_box boxes[MAX_BOX];
    int nb = read_boxes(t, i, space, lo, hi, boxes);
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
    for (int b = 0; b < nb; ++b) {
      const td_ckpt_box *x = &boxes[b];
      for (int64_t r = 0; r < x->nr; ++r) {
        const float *row = host + x->src_off + r * x->src_ld;
        for (int64_t c = 0; c < x->nc; ++c) {
          float v = row[c];
          if (isfinite(v) && !(nonneg && v < 0.0f)) continue;
          TD_FAIL(TD_ERR_CKPT,
                  "%s: tensor %s/%s holds %s%g at element %lld (flat index in its shape); "
                  "a checkpoint must hold finite values%s",
                  path, prefix, p->name, isfinite(v) ? "a negative second moment " : "",
                  (double)v, (long long)((x->r0 + r) * cols + x->c0 + c),
                  nonneg ? " and non-negative second moments" : "");
        }
      }
    }
  }
  return TD_OK;
}

static td_status load_impl(td_trainer *t, const char *path, int load_optim) {
  td_status st = TD_OK;
  td_ckpt_reader *r = NULL;
  float *host = NULL;
  char *text = NULL;
  td_kernels *k = t->k;
  td_config *c = &t->cfg;
  double t0 = td_now();
  st = td_ckpt_open(t->app->world, path, &r);
  TD_CHECK(td_agree(t->app->world, st));
  td_ckpt_read_defer(r, 1); /* one checksum reduction for the whole file */
  hid_t f = td_ckpt_reader_file(r);
  /* the model must be the deck's */
  st = td_h5_read_string(f, path, "/config", &text);
  if (st == TD_OK) {
    td_config saved;
    char name[TD_STR_MAX + 16];
    snprintf(name, sizeof name, "%s:/config", path);
    st = td_config_load_text(name, text, &saved);
    if (st == TD_OK) {
      char diff[1024];
      td_config_model_diff(&saved, c, diff, sizeof diff);
      if (diff[0])
        st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                          "%s: the checkpoint's model differs from the deck's in: %s (the "
                          "checkpoint has %lld layers, dim %lld, %lld heads, vocab %lld, seq_len "
                          "%lld)",
                          path, diff, (long long)saved.model_layers, (long long)saved.model_dim,
                          (long long)saved.model_heads, (long long)saved.model_vocab_size,
                          (long long)saved.model_seq_len);
    } else {
      char why[1600];
      snprintf(why, sizeof why, "%s", td_error_message());
      td_error_clear();
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "%s: /config is not a valid deck: %s", path, why);
    }
  } else {
    st = TD_ERR_CKPT;
  }
  TD_CHECK_GOTO(td_agree(t->app->world, st));
  int64_t n = t->model->reg->total_local;
  TD_CHECK_GOTO(td_alloc((void **)&host, (size_t)(n > 0 ? n : 1) * sizeof(float), "checkpoint staging"));
  TD_CHECK_GOTO(td_test_fail_point("ckpt_load"));
  int verify = c->checkpoint_verify;
  st = read_group(t, r, "/model", -1, 0, n, host, verify);
  if (st == TD_OK) st = td_ckpt_read_finish(r);
  if (st == TD_OK) st = check_values(t, path, "/model", -1, 0, n, host, 0);
  if (st == TD_OK) st = td_zero_set_params(t->zero, host);
  if (st == TD_OK && t->xzero) st = td_zero_set_params(t->xzero, host + t->model->reg->xbegin);
  TD_CHECK_GOTO(td_agree(t->app->world, st));
  int64_t step = 0, tokens = 0, epoch = 0, position = 0;
  if (load_optim) {
    const char *prefix[2] = {"/optim/exp_avg", "/optim/exp_avg_sq"};
    /* the dense engine's moments, then the experts' (on every rank: the
     * reads are collective, a stage without experts reads nothing) */
    for (int space = 0; space < 2; ++space) {
      td_zero *z = space ? t->xzero : t->zero;
      float *mv[2] = {NULL, NULL};
      int64_t lo = 0, hi = 0, base = space ? t->model->reg->xbegin : 0;
      if (z) td_zero_moments(z, &mv[0], &mv[1], &lo, &hi);
      for (int which = 0; which < 2; ++which) {
        memset(host, 0, (size_t)n * sizeof(float));
        st = read_group(t, r, prefix[which], space, base + lo, base + hi, host, verify);
        if (st == TD_OK) st = td_ckpt_read_finish(r);
        if (st == TD_OK)
          st = check_values(t, path, prefix[which], space, base + lo, base + hi, host, which == 1);
        if (st == TD_OK && hi > lo && td_zero_state_on_host(z)) /* host back-end, offload */
          memcpy(mv[which], host, (size_t)(hi - lo) * sizeof(float));
        else if (st == TD_OK && hi > lo)
          st = k->to_device(k, mv[which], host, (size_t)(hi - lo) * sizeof(float));
        /* before the next group's reads, which every rank must make */
        TD_CHECK_GOTO(td_agree(t->app->world, st));
      }
    }
    if (st == TD_OK) st = td_h5_attr_read_i64(f, path, "step", &step);
    if (st == TD_OK) st = td_h5_attr_read_i64(f, path, "tokens_seen", &tokens);
    hid_t g = H5Gopen2(f, "/data", H5P_DEFAULT);
    if (st == TD_OK && g < 0)
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__,
                        "%s: the sampler state /data is missing", path);
    if (st == TD_OK) st = td_h5_attr_read_i64(g, path, "epoch", &epoch);
    if (st == TD_OK) st = td_h5_attr_read_i64(g, path, "position", &position);
    if (g >= 0) H5Gclose(g);
    if (st != TD_OK && td_error_status() != TD_ERR_CKPT) {
      char msg[2048];
      snprintf(msg, sizeof msg, "%s", td_error_message());
      td_error_clear();
      st = td_error_set(TD_ERR_CKPT, __FILE__, __LINE__, __func__, "%s", msg);
    }
    if (st == TD_OK && t->sampler) st = td_sampler_restore(t->sampler, epoch, position);
    TD_CHECK_GOTO(td_agree(t->app->world, st));
    t->step = step;
    t->tokens_seen = tokens;
  } else {
    st = td_h5_attr_read_i64(f, path, "step", &step);
    TD_CHECK_GOTO(td_agree(t->app->world, st));
    t->step = step;
  }
  t->last_load_s = td_now() - t0;
  if (!t->quiet)
    td_log("checkpoint: loaded %s (step %lld) in %.2f s%s\n", path, (long long)step,
           t->last_load_s, verify ? ", checksums verified" : "");
done:
  td_ckpt_close(&r);
  td_free(host);
  td_free(text);
  return st;
}

/* Checkpoint I/O is one wait for the watchdog, with three times its bound
 * (td_watchdog.h): a large save on a slow file system keeps ranks waiting for
 * each other for longer than any step, and a rank stopped inside it must
 * still not hang the job. */
td_status td_trainer_save(td_trainer *t, char *path_out, size_t cap) {
  TD_CHECK(td_trainer_save_finish(t));
  td_watchdog_io("a checkpoint save (its collective writes and agreements)");
  td_status st = save_impl(t, path_out, cap, NULL);
  td_watchdog_io(NULL);
  return st;
}

td_status td_trainer_save_async(td_trainer *t) {
  TD_CHECK(td_trainer_save_finish(t));
  if (!t->async) TD_CHECK(td_alloc((void **)&t->async, sizeof *t->async, "checkpoint writer"));
  char path[TD_STR_MAX + 64];
  td_watchdog_io("a checkpoint save (its collective writes and agreements)");
  td_status st = save_impl(t, path, sizeof path, t->async);
  td_watchdog_io(NULL);
  return st;
}

td_status td_trainer_save_prepare(td_trainer *t) {
  td_status st = TD_OK;
  if (!t->cfg.checkpoint_async) return TD_OK;
  if (!t->async) st = td_alloc((void **)&t->async, sizeof *t->async, "checkpoint writer");
  if (st == TD_OK) st = stage_alloc(t, t->async);
  TD_CHECK(td_agree(t->app->world, st));
  return TD_OK;
}

int td_trainer_save_busy(const td_trainer *t) {
  return t->async && t->async->running && !atomic_load(&t->async->done);
}

int td_trainer_save_inflight(const td_trainer *t) { return t->async && t->async->running; }

td_status td_trainer_save_finish(td_trainer *t) {
  struct td_async_save *a = t->async;
  if (!a || !a->running) return TD_OK;
  double t0 = td_now();
  /* the wait for this rank's writer is part of the save: a writer stuck in
   * a hung file system ends the job as a stuck synchronous save would */
  td_watchdog_io("a checkpoint save (the background writer, then the commit's collective "
                 "writes and agreements)");
  if (!pthread_equal(a->thread, pthread_self())) pthread_join(a->thread, NULL);
  a->running = 0;
  char path[TD_STR_MAX + 64];
  td_status st = td_ckpt_save_commit(&a->w, (int)t->cfg.checkpoint_keep, path, sizeof path);
  td_watchdog_io(NULL);
  double fg = td_now() - t0;
  t->save_stall_s += fg;
  a->fg_s += fg;
  TD_CHECK(st);
  double total = td_now() - a->t0;
  /* what a save at a stop signal would take (the lead check): its own time */
  t->last_save_s = a->fg_s + a->write_s;
  t->save_write_s += a->write_s;
  t->saves_committed++;
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path);
  td_log("checkpoint: step %lld saved to %s in %.2f s (in the background: written in %.2f s; "
         "training waited %.3f s)\n",
         (long long)a->step, path, total, a->write_s, a->fg_s);
  return TD_OK;
}

void td_trainer_save_drop(td_trainer *t) {
  struct td_async_save *a = t->async;
  if (!a) return;
  if (a->running) {
    if (!pthread_equal(a->thread, pthread_self())) pthread_join(a->thread, NULL);
    a->running = 0;
    td_ckpt_save_abort(&a->w);
  }
  stage_free(t, a);
  td_free(a);
  t->async = NULL;
}

td_status td_trainer_load(td_trainer *t, const char *path, int load_optim) {
  td_watchdog_io("a checkpoint load (its collective reads and agreements)");
  td_status st = load_impl(t, path, load_optim);
  td_watchdog_io(NULL);
  return st;
}

td_status td_trainer_resume(td_trainer *t) {
  td_config *c = &t->cfg;
  int found = 0;
  char path[TD_STR_MAX + 64] = "";
  td_status st = TD_OK;
  if (t->app->rank == 0) st = td_ckpt_resolve(c->checkpoint_dir, c->checkpoint_resume, &found, path, sizeof path);
  TD_CHECK(td_agree(t->app->world, st));
  TD_MPI_CHECK(MPI_Bcast(&found, 1, MPI_INT, 0, t->app->world));
  TD_MPI_CHECK(MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, t->app->world));
  if (!found) return TD_OK;
  TD_CHECK(td_trainer_load(t, path, 1));
  snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", path);
  if (t->step >= c->training_steps)
    td_warn("training.steps = %lld, and the checkpoint %s is at step %lld: nothing is left to "
            "train (raise training.steps to continue the run)", (long long)c->training_steps,
            path, (long long)t->step);
  return TD_OK;
}
