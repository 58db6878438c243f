/* trainer.c — set-up, one optimizer step, evaluation (docs/architecture.md invariant 1:
 * the loss is the mean over every target token of the global batch however
 * it is split; data-parallel rank r takes the contiguous slice r of the
 * global batch and micro-batches are consecutive slices of that). */
#include "app/train/td_trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/td_h5.h"
#include "io/td_model_file.h"
#include "io/td_tb.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

double td_lr_at(const td_config *cfg, int64_t s) {
  double lr = cfg->optimizer_lr, lo = cfg->schedule_min_lr;
  int64_t warm = cfg->schedule_warmup, steps = cfg->training_steps;
  if (s < warm) return lr * (double)(s + 1) / (double)warm;
  double span = (double)(steps - warm > 1 ? steps - warm : 1);
  double p = (double)(s - warm) / span;
  if (p > 1.0) p = 1.0;
  if (strcmp(cfg->schedule_decay, "cosine") == 0) return lo + 0.5 * (lr - lo) * (1.0 + cos(M_PI * p));
  if (strcmp(cfg->schedule_decay, "linear") == 0) return lr - (lr - lo) * p;
  return lr; /* constant */
}

/* (td_trainer.h) The node split is made on every rank, whatever its own
 * environment or deck says (ranks may be launched with different
 * environments: an MPMD launch, a site wrapper); what each rank does with
 * the answer (pick_threads, pick_device) is local. */
td_status td_trainer_node_place(td_app *app, int *local_rank, int *local_size) {
  MPI_Comm node = MPI_COMM_NULL;
  *local_rank = 0, *local_size = 1;
  TD_MPI_CHECK(MPI_Comm_split_type(app->world, MPI_COMM_TYPE_SHARED, app->rank, MPI_INFO_NULL, &node));
  int rc = MPI_Comm_size(node, local_size);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(node, local_rank);
  MPI_Comm_free(&node);
  TD_MPI_CHECK(rc);
  return TD_OK;
}

int td_trainer_gpu_of(const td_config *cfg, int local_rank, int *visible) {
  int n = strcmp(cfg->run_device, "cuda") == 0 ? td_kernels_gpu_count() : 0;
  if (visible) *visible = n;
  return n > 0 ? local_rank % n : -1;
}

/* run.device: cuda: this rank drives GPU local_rank mod (visible devices),
 * made current before the back-end is created. When the node's ranks
 * outnumber its GPUs several ranks share one (a warning says so, rank 0 for
 * its node; NCCL could not place two ranks of one communicator on one GPU,
 * the host-staged MPI collectives can). Not
 * collective: no collective depends on the choice. No device visible: the
 * back-end's creation fails with the reason. */
static td_status pick_device(const td_config *cfg, int local_rank, int local_size) {
  int n = 0, dev = td_trainer_gpu_of(cfg, local_rank, &n);
  if (dev < 0) return TD_OK;
  if (local_size > n)
    td_warn("%d ranks on this node share its %d GPU%s (GPU %d serves local ranks %d, %d, ...): "
            "they take turns on it",
            local_size, n, n == 1 ? "" : "s", dev, dev, dev + n);
  TD_CHECK(td_kernels_gpu_select(dev));
  return TD_OK;
}

td_status td_trainer_dcomm_kind(td_app *app, const td_config *cfg, int local_size,
                                td_dcomm_kind *out, char *why, size_t n) {
  td_dcomm_kind mine = TD_DCOMM_OFF;
  why[0] = '\0';
  if (strcmp(cfg->run_device, "cuda") == 0) {
    int gpus = td_kernels_gpu_count();
    if (gpus == 0)
      snprintf(why, n, "no GPU visible");
    else if (!td_kernels_gpu_nccl())
      snprintf(why, n, "this build's CUDA module has no NCCL");
    else if (gpus < local_size)
      snprintf(why, n, "%d ranks share %d GPU%s on a node (NCCL takes one rank per GPU)",
               local_size, gpus, gpus == 1 ? "" : "s");
    else
      mine = TD_DCOMM_NCCL;
  } else {
    /* test-only: the CPU runs the code written for NCCL on MPI */
    const char *e = getenv("TD_TEST_DCOMM");
    if (e && strcmp(e, "1") == 0) mine = TD_DCOMM_TEST_MPI;
  }
  int all = mine != TD_DCOMM_OFF, any = all;
  TD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, app->world));
  TD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, app->world));
  if (any && !all && !why[0]) snprintf(why, n, "another node cannot use them");
  *out = all ? mine : TD_DCOMM_OFF;
  return TD_OK;
}

/* Threads per rank: run.threads, else OMP_NUM_THREADS, else cores / ranks on
 * this node (local: the node's rank count, from node_place). */
static td_status pick_threads(const td_config *cfg, int local, int *out) {
  const char *env = getenv("OMP_NUM_THREADS");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n = cfg->run_threads > 0 ? (int)cfg->run_threads
          : env && atoi(env) > 0 ? atoi(env)
                                 : (int)(cores / local);
  *out = n > 0 ? n : 1;
  return TD_OK;
}

static td_status open_data(td_trainer *t, int need_train, int need_val) {
  td_config *c = &t->cfg;
  td_status st = TD_OK;
  if (need_train) {
    st = td_dataset_open(c->data_train, TD_SPLIT_TRAIN, c->model_vocab_size, &t->train);
    if (st == TD_OK)
      st = td_dataset_require_windows(t->train, c->model_seq_len, c->training_global_batch,
                                      "data.train");
    if (st == TD_OK)
      st = td_sampler_create((uint64_t)c->run_seed, td_dataset_nwindows(t->train, c->model_seq_len),
                             &t->sampler);
  }
  if (st == TD_OK && need_val) {
    st = td_dataset_open(c->data_val, TD_SPLIT_VAL, c->model_vocab_size, &t->val);
    if (st == TD_OK) st = td_dataset_require_windows(t->val, c->model_seq_len, 1, "data.val");
  }
  /* data.attend: document reads the datasets' document boundaries */
  td_dataset *ds[2] = {t->train, t->val};
  const char *role[2] = {"data.train", "data.val"};
  for (int i = 0; i < 2 && st == TD_OK; i++)
    if (ds[i] && strcmp(c->data_attend, "document") == 0 && !td_dataset_has_documents(ds[i]))
      st = td_error_set(TD_ERR_DATA, __FILE__, __LINE__, __func__,
                        "%s (%s): data.attend = document needs the dataset's document "
                        "boundaries (/documents), which this file has not (prepare it with "
                        "`trident prepare --format jsonl` or `--format chat`, or set "
                        "data.attend: causal)", td_dataset_path(ds[i]), role[i]);
  return st;
}

/* Model hooks: units live where the ZeRO engine puts them. A whole
 * backward places parameters and gradients, the B of a split one the
 * parameters only, its W the gradients only. */
static td_status zero_acquire(void *ctx, td_model *m, int u, td_phase ph) {
  td_zero *z = ((td_trainer *)ctx)->zero, *xz = ((td_trainer *)ctx)->xzero;
  if (xz) { /* the block's experts, from their own engine */
    void **xp = &m->unit_param[m->nunits + u];
    float **xg = &m->unit_grad[m->nunits + u];
    if (ph == TD_PHASE_BACKWARD_INPUT) TD_CHECK(td_zero_acquire(xz, u, 1, xp, NULL));
    else if (ph == TD_PHASE_BACKWARD_WEIGHT) TD_CHECK(td_zero_acquire(xz, u, 1, NULL, xg));
    else TD_CHECK(td_zero_acquire(xz, u, ph == TD_PHASE_BACKWARD, xp, xg));
  }
  if (ph == TD_PHASE_BACKWARD_INPUT) return td_zero_acquire(z, u, 1, &m->unit_param[u], NULL);
  if (ph == TD_PHASE_BACKWARD_WEIGHT) return td_zero_acquire(z, u, 1, NULL, &m->unit_grad[u]);
  return td_zero_acquire(z, u, ph == TD_PHASE_BACKWARD, &m->unit_param[u], &m->unit_grad[u]);
}

static td_status zero_poll(void *ctx) {
  td_trainer *t = ctx;
  if (t->xzero) TD_CHECK(td_zero_progress(t->xzero));
  return td_zero_progress(t->zero);
}

static td_status zero_release(void *ctx, td_model *m, int u, td_phase ph) {
  td_trainer *t = ctx;
  int grads = ph == TD_PHASE_BACKWARD || ph == TD_PHASE_BACKWARD_WEIGHT;
  if (t->xzero && ph == TD_PHASE_BACKWARD_WEIGHT) TD_CHECK(td_zero_release_grads(t->xzero, u));
  else if (t->xzero) TD_CHECK(td_zero_release(t->xzero, u, ph == TD_PHASE_BACKWARD));
  if (u == 0 && grads && t->grid->pp > 1 && m->tied) {
    /* The tied wte: its gradient is summed over the first and last stage
     * after this micro-batch's gradients have been sent down the pipeline
     * (embed_sync), so no stage waits on another in a cycle. */
    t->embed_pending = ph == TD_PHASE_BACKWARD ? 1 : 2;
    t->embed_micro = t->micro_j;
    return TD_OK;
  }
  if (ph == TD_PHASE_BACKWARD_WEIGHT) return td_zero_release_grads(t->zero, u);
  return td_zero_release(t->zero, u, ph == TD_PHASE_BACKWARD);
}

/* The pending release of unit 0: parameters and gradients (1) or, after
 * the W of a split backward, the gradients only (2). */
static td_status embed_release(td_trainer *t, int how) {
  return how == 2 ? td_zero_release_grads(t->zero, 0) : td_zero_release(t->zero, 0, 1);
}

/* After a micro-batch's backward (and its pipeline send): sum the tied wte
 * gradients over the first and last stage (embed_comm) and release unit 0 to
 * the ZeRO engine. No-op unless a release is pending. defer_last: a sum due
 * once a step (the last micro-batch's) stays pending for a later call with
 * defer_last 0 (the end of the step). Collective on embed_comm when a sum
 * is due. The pipeline's after_backward hook (td_pipe_env). */
static td_status embed_sync(td_trainer *t, int defer_last) {
  int how = t->embed_pending;
  if (!how) return TD_OK;
  td_model *m = t->model;
  const td_param *wte = td_registry_find(m->reg, TD_PK_WTE, -1);
  int stage = (int)t->cfg.parallel_zero;
  /* stages 0–1 accumulate all micro-batches in one buffer, and so does the
   * ZeRO engine's step unit (interleaved): sum once, at the last */
  int per_micro = stage >= 2 && !t->embed_step;
  int due = wte->present && t->grid->embed_comm != MPI_COMM_NULL &&
            (per_micro || t->embed_micro == t->accum - 1);
  if (due && defer_last && !per_micro) return TD_OK; /* at the end of the step */
  t->embed_pending = 0;
  if (due) {
    float *g = m->unit_grad[0] + (wte->offset - m->unit_begin[0]);
    if (t->dc_embed) {
      TD_CHECK(
          td_dcomm_allreduce_joined(t->dc_embed, g, wte->local_numel, 0,
                                    &t->gstats[TD_GROUP_EMBED]));
      return embed_release(t, how);
    }
    TD_CHECK(t->k->sync(t->k));
    TD_CHECK(td_coll_allreduce_f32_staged(t->grid->embed_comm, t->k, g, m->host_stage,
                                          wte->local_numel, MPI_SUM,
                                          &t->gstats[TD_GROUP_EMBED]));
  }
  TD_CHECK(embed_release(t, how));
  return TD_OK;
}

/* Whether the tied embedding's gradient is summed over the first and last
 * stage once per step, at its end (interleaved schedules). */
static int embed_at_end(const td_config *c, const td_grid *g, const td_model *m) {
  return g->pp > 1 && m->tied && c->parallel_virtual_stages > 1;
}

/* The expert engine's units: the model's expert units [nunits, 2·nunits),
 * shifted to the expert space (an empty one 0, 0). The caller frees *b. */
static td_status expert_units(const td_model *m, int64_t **b, int64_t **e) {
  int n = m->nunits;
  *b = calloc((size_t)(2 * n), sizeof **b);
  if (!*b) TD_FAIL(TD_ERR_NOMEM, "out of memory for the expert units");
  *e = *b + n;
  for (int u = 0; u < n; ++u)
    if (m->unit_begin[n + u] < m->unit_end[n + u])
      (*b)[u] = m->unit_begin[n + u] - m->reg->xbegin,
      (*e)[u] = m->unit_end[n + u] - m->reg->xbegin;
  return TD_OK;
}

/* Whether this rank's stage holds expert tensors (the same on the ranks of
 * its edp_comm: one stage, one set of experts). */
static int has_experts(const td_model *m) { return m->reg->xbegin < m->reg->total_local; }

/* The ZeRO engine's options for this rank's local space, from the registry:
 * tensors with their decay and gradient-norm flags (a tensor replicated over
 * tp is counted on tp rank 0 only; the tied wte on the first stage only) and
 * the model's units — the dense space, or (experts) the expert space over
 * edp_comm with the units xunit_begin/end. *tens (the table o->tensors points
 * at) is the caller's to free. */
static td_status zero_opts(const td_config *c, const td_grid *g, const td_model *m,
                           td_dcomm_kind dcomm, int experts, const int64_t *xunit_begin,
                           const int64_t *xunit_end, td_zero_opts *o, td_zero_tensor **tens) {
  const td_registry *r = m->reg;
  *tens = calloc((size_t)r->n + 1, sizeof **tens);
  if (!*tens) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  int nt = 0;
  int64_t base = experts ? r->xbegin : 0;
  for (int i = 0; i < r->n; ++i) {
    const td_param *p = &r->p[i];
    if (!p->present || (p->expert >= 0) != experts) continue;
    td_zero_tensor *x = &(*tens)[nt++];
    x->offset = p->offset - base;
    x->numel = p->local_numel;
    x->decay = p->decay;
    x->in_norm = (p->split_dim >= 0 || g->tp_rank == 0) && !(p->tied_last && g->pp_rank != 0);
  }
  memset(o, 0, sizeof *o);
  o->stage = (int)c->parallel_zero;
  o->dp_comm = g->dpcp_comm; /* gradients sum over dp × cp: shards over both */
  o->group_size = g->dp * g->cp; /* used only on a virtual grid (td_grid_virtual) */
  o->group_rank = g->cp_rank + g->cp * g->dp_rank;
  o->bucket_bytes = c->parallel_bucket_mb * 1048576.0;
  o->overlap_gather = c->parallel_overlap_param_gather;
  o->n = experts ? r->total_local - r->xbegin : r->xbegin;
  o->ntensors = nt;
  o->tensors = *tens;
  o->nunits = m->nunits;
  o->unit_begin = experts ? xunit_begin : m->unit_begin;
  o->unit_end = experts ? xunit_end : m->unit_end;
  o->persistent_units[0] = experts ? -1 : 0;             /* {wte, wpe}: used at both ends */
  o->persistent_units[1] = experts ? -1 : m->nunits - 1; /* {ln_f} */
  if (experts) { /* the ranks holding the same experts */
    o->dp_comm = g->edp_comm;
    o->group_size = g->edp, o->group_rank = g->edp_rank;
  }
  /* interleaved with a tied head: the first and last stage reach the
   * embedding's backward at very different points of the step, so its
   * gradient is summed over them once, at the end (embed_sync),
   * and stages 2–3 accumulate it over the step like stages 0–1 */
  o->step_accum = !experts && embed_at_end(c, g, m);
  o->pt = m->pt;
  /* for the size query (with a back-end the engine decides from k and o->dcomm) */
  o->staged = m->staged && dcomm == TD_DCOMM_OFF;
  o->offload = strcmp(c->optimizer_offload, "cpu") == 0; /* the host back-end: create_zero */
  return TD_OK;
}

/* Activation slots of this rank's pipeline stage per chunk (*out, v
 * entries, the caller frees): the deck's schedule's peak of live
 * micro-batches. */
static td_status model_slots(const td_config *c, const td_grid *g, int **out) {
  *out = calloc((size_t)c->parallel_virtual_stages, sizeof(int));
  if (!*out) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  return td_pipe_slots(c, g->pp_rank, *out);
}

/* What the engine, the model and the pipeline allocate. */
int64_t td_trainer_ckpt_stage_bytes(const td_config *c, const td_zero *z) {
  int64_t ob = 0, oe = 0;
  td_zero_owned(z, &ob, &oe);
  int64_t owned = (oe > ob ? oe - ob : 0) * (int64_t)sizeof(float);
  /* the saves write from the state itself where it is host memory: the
   * back-end's (the CPU's, unless TD_TEST_STAGED), or offloaded */
  int host = td_kernels_host_memory(c->run_device) || td_zero_state_on_host(z);
  if (c->checkpoint_async) return 3 * (owned > 0 ? owned : (int64_t)sizeof(float));
  return host ? 0 : owned > 0 ? owned : (int64_t)sizeof(float);
}

static void mem_of(const td_config *c, const td_grid *g, const td_model *m, const td_zero *z,
                   const td_zero *xz, td_mem_plan *mem) {
  td_zero_bytes(z, &mem->param, &mem->grad, &mem->optim, &mem->work);
  mem->host = td_zero_host_bytes(z);
  if (xz) { /* the experts' engine */
    int64_t b[4];
    td_zero_bytes(xz, &b[0], &b[1], &b[2], &b[3]);
    mem->param += b[0], mem->grad += b[1], mem->optim += b[2], mem->work += b[3];
    mem->host += td_zero_host_bytes(xz);
  }
  mem->act = (int64_t)m->act_bytes + td_pipe_bytes(g->pp, g->pp_rank, m->nchunks, m->nslots,
                                                   td_model_rows(c, m->B), c->model_dim,
                                                   m->staged && !m->dcomm);
  mem->params_local = m->reg->total_local;
  mem->startup = m->reg->total_local * (int64_t)sizeof(float); /* create_zero's `host` */
  mem->ckpt = td_trainer_ckpt_stage_bytes(c, z); /* checkpoint.c's staging */
  if (xz) mem->ckpt += td_trainer_ckpt_stage_bytes(c, xz);
  mem->live_micro = m->nslots;
  mem->layer_bytes = m->layer_bytes;
}

td_status td_trainer_plan(const td_config *cfg, const td_grid *grid, td_dcomm_kind dcomm,
                          td_mem_plan *out) {
  td_status st = TD_OK;
  td_model *m = NULL;
  td_zero *z = NULL, *xz = NULL;
  td_zero_tensor *tens = NULL, *xtens = NULL;
  int64_t *xb = NULL, *xe = NULL;
  td_zero_opts o;
  memset(out, 0, sizeof *out);
  int *nslots = NULL;
  st = model_slots(cfg, grid, &nslots);
  if (st == TD_OK)
    st = td_model_create(cfg, (td_grid *)grid, NULL, NULL, td_config_micro_batch(cfg), nslots,
                         dcomm != TD_DCOMM_OFF, &m);
  free(nslots);
  TD_CHECK_GOTO(st);
  TD_CHECK_GOTO(zero_opts(cfg, grid, m, dcomm, 0, NULL, NULL, &o, &tens));
  TD_CHECK_GOTO(td_zero_create(&o, NULL, NULL, &z));
  if (has_experts(m)) {
    TD_CHECK_GOTO(expert_units(m, &xb, &xe));
    TD_CHECK_GOTO(zero_opts(cfg, grid, m, dcomm, 1, xb, xe, &o, &xtens));
    TD_CHECK_GOTO(td_zero_create(&o, NULL, NULL, &xz));
  }
  mem_of(cfg, grid, m, z, xz, out);
done:
  td_zero_destroy(&z);
  td_zero_destroy(&xz);
  td_model_destroy(&m);
  free(tens);
  free(xtens);
  free(xb);
  return st;
}

/* model.init_from: every tensor of the registry from the file, checked by
 * name and shape (wpe may hold more positions than model.seq_len: the first
 * are taken); a tensor missing, misshapen or left over is exit 2 naming it.
 * Each rank reads the file and keeps its shard. */
/* A model folder's config.json against the deck: the other model's weights
 * might fit by shape alone (a wider vocabulary, more positions). */
static td_status check_hf_config(const td_config *c) {
  td_hf_config h;
  int found = 0;
  TD_CHECK(td_model_file_hf_config(c->model_init_from, &h, &found));
  if (!found) return TD_OK;
  td_model_dims d;
  td_config_dims(c, &d);
  /* Mixtral: the LLaMA family with every block sparse (model.moe) */
  int mixtral = strcmp(h.model_type, "mixtral") == 0;
  if (mixtral && (!d.llama || d.E == 0 || d.every != 1))
    TD_FAIL(TD_ERR_DATA, "%s (model.init_from): model_type is \"mixtral\" (every block sparse): "
            "the deck needs model.arch llama with model.moe.experts > 0 and model.moe.every 1",
            h.path);
  if (h.model_type[0] && !mixtral && strcmp(h.model_type, c->model_arch) != 0)
    TD_FAIL(TD_ERR_DATA, "%s (model.init_from): model_type is \"%s\", the deck's model.arch %s",
            h.path, h.model_type, c->model_arch);
  if (!mixtral && d.E > 0 && d.every == 1 && h.model_type[0])
    TD_FAIL(TD_ERR_DATA, "%s (model.init_from): model_type is \"%s\", but the deck's model.moe "
            "makes every block sparse (Mixtral: model_type \"mixtral\")", h.path, h.model_type);
  /* config.json key -> the deck's value, key and kind (0 equal, 1 at least) */
  struct { int i; int64_t deck; const char *key; int atleast; } want[] = {
      {0, d.V, "model.vocab_size", 0},  {1, d.C, "model.dim", 0},
      {2, d.L, "model.layers", 0},      {3, d.H, "model.heads", 0},
      {4, d.T, "model.seq_len", 1},     {5, d.C, "model.dim", 0},
      {6, d.L, "model.layers", 0},      {7, d.H, "model.heads", 0},
      {8, d.KV, "model.kv_heads", 0},
      {9, mixtral ? d.Fe : d.F, mixtral ? "model.moe.ffn_dim" : "model.ffn_dim", 0},
      {10, d.T, "model.seq_len", 1},    {11, d.E, "model.moe.experts", 0},
      {12, d.K, "model.moe.top_k", 0}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; ++k) {
    double v = h.v[want[k].i];
    if (v < 0) continue; /* not in this config.json */
    int ok = want[k].atleast ? v >= (double)want[k].deck : v == (double)want[k].deck;
    if (!ok)
      TD_FAIL(TD_ERR_DATA, "%s (model.init_from): %s = %.0f, but the deck's %s = %lld%s", h.path,
              td_hf_keys[want[k].i], v, want[k].key, (long long)want[k].deck,
              want[k].atleast ? " (more positions than the weights have)" : "");
  }
  return TD_OK;
}

static td_status init_from(const td_config *c, const td_registry *r, float *host) {
  td_status st = TD_OK;
  td_model_file *mf = NULL;
  const char *path = c->model_init_from;
  TD_CHECK_GOTO(td_test_fail_point("init_from")); /* a read that fails on one rank */
  TD_CHECK_GOTO(check_hf_config(c));
  TD_CHECK_GOTO(td_model_file_open(path, &mf));
  for (int t = 0; t < r->n; ++t) {
    const td_param *p = &r->p[t];
    int nd = 0;
    int64_t sh[2] = {0, 0}, rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
    const float *src = td_model_file_tensor(mf, p->name, &nd, sh);
    if (!src)
      TD_FAIL_GOTO(TD_ERR_DATA, "%s (model.init_from, %s): no tensor %s", path,
                   td_model_file_format(mf), p->name);
    int wpe = p->kind == TD_PK_WPE;
    if (nd != p->ndim || sh[1] != cols || (wpe ? sh[0] < rows : sh[0] != rows))
      TD_FAIL_GOTO(TD_ERR_DATA, "%s (model.init_from): tensor %s is [%lld, %lld]; the deck's "
                   "model needs [%lld, %lld]%s", path, p->name, (long long)sh[0],
                   (long long)(nd == 2 ? sh[1] : 1), (long long)rows, (long long)cols,
                   wpe ? " (or more positions)" : "");
    if (!p->present) continue;
    float *x = host + p->offset;
    int64_t lr = p->local_shape[0], lc = p->local_shape[1];
    for (int64_t i = 0; i < lr; ++i)
      for (int64_t j = 0; j < lc; ++j) {
        int64_t g = td_param_global_index(r, p, i, j);
        x[i * lc + j] = g < 0 ? 0.0f : src[g];
      }
  }
  /* a tied model takes its head from the embedding: a file's lm_head.weight
   * (Hugging Face keeps one in some tied checkpoints) is not an extra tensor */
  int tied = td_registry_find(r, TD_PK_LM_HEAD, -1) == NULL;
  const char *extra = NULL;
  for (int i = 0; (extra = td_model_file_unused(mf, i)) != NULL; ++i)
    if (!(tied && strcmp(extra, "lm_head.weight") == 0)) break;
  if (extra)
    TD_FAIL_GOTO(TD_ERR_DATA, "%s (model.init_from): tensor %s is not part of the deck's model",
                 path, extra);
done:
  td_model_file_close(&mf);
  return st;
}

/* The ZeRO engine, then the parameters from the counter-based generator. */
static td_status create_zero(td_trainer *t) {
  td_config *c = &t->cfg;
  td_model *m = t->model;
  td_registry *r = m->reg;
  td_status st = TD_OK;
  float *host = NULL;
  td_zero_tensor *tens = NULL, *xtens = NULL;
  td_zero_opts o;
  TD_CHECK_GOTO(zero_opts(c, t->grid, m, t->dcomm, 0, NULL, NULL, &o, &tens));
  o.dcomm = t->dc_dp;
  if (o.offload) { /* AdamW on the host: the CPU back-end's kernel and threads */
    TD_CHECK_GOTO(td_kernels_cpu_create(t->threads, &t->hk));
    o.host = t->hk;
  }
  TD_CHECK_GOTO(td_zero_create(&o, t->k, &t->gstats[TD_GROUP_DP], &t->zero));
  if (has_experts(m)) { /* the experts' own engine over edp_comm */
    TD_CHECK_GOTO(expert_units(m, &t->xunit_begin, &t->xunit_end));
    TD_CHECK_GOTO(zero_opts(c, t->grid, m, t->dcomm, 1, t->xunit_begin, t->xunit_end, &o, &xtens));
    o.dcomm = t->dc_edp;
    o.host = t->hk;
    TD_CHECK_GOTO(td_zero_create(&o, t->k, &t->gstats[TD_GROUP_DP], &t->xzero));
  }
  TD_CHECK_GOTO(td_alloc((void **)&host, (size_t)r->total_local * sizeof(float), "initial parameters"));
  td_registry_init_params(r, c, host);
  if (c->model_init_from[0]) TD_CHECK_GOTO(init_from(c, r, host));
  TD_CHECK_GOTO(td_zero_set_params(t->zero, host));
  if (t->xzero) TD_CHECK_GOTO(td_zero_set_params(t->xzero, host + r->xbegin));
  m->hooks.ctx = t;
  m->hooks.acquire = zero_acquire;
  m->hooks.release = zero_release;
  m->hooks.poll = zero_poll;
done:
  td_free(host);
  free(tens);
  free(xtens);
  return st;
}


/* The pipeline's hooks (td_pipe_env): ctx is the trainer. */
static void pipe_load_micro(void *ctx, int64_t first, int64_t n, const int32_t **inputs,
                            const int32_t **targets) {
  td_trainer *t = ctx;
  td_trainer_load_micro(t, first, n);
  *inputs = t->tok_in, *targets = t->tok_tgt;
}
static td_status pipe_begin_grads(void *ctx, int64_t j) {
  ((td_trainer *)ctx)->micro_j = j;
  return TD_OK;
}
static td_status pipe_after_backward(void *ctx, int defer_last) {
  return embed_sync(ctx, defer_last);
}

/* The pipeline of this rank's stage, on what the trainer has made so far.
 * Collective on pp_comm. */
static td_status create_pipe(td_trainer *t) {
  td_pipe_env e = {&t->cfg, t->grid, t->k, t->model, t->zero, t->xzero, t->dcomm, t->B,
                   &t->gstats[TD_GROUP_PP], t, pipe_load_micro, pipe_begin_grads,
                   pipe_after_backward};
  return td_pipe_create(&e, &t->pipe);
}

td_status td_trainer_create(td_app *app, const td_config *cfg, int need_train, int need_val,
                            td_trainer **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_trainer *t = calloc(1, sizeof *t);
  if (!t) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  t->app = app;
  t->cfg = *cfg;
  td_config *c = &t->cfg;
  td_h5_init();
  /* Checks that depend on what this build and grid can do; every rank sees the same. */
  char why[256];
  if (!td_kernels_precision_ok(c->run_device, c->training_precision, why, sizeof why))
    st = td_error_set(TD_ERR_DECK, __FILE__, __LINE__, __func__, "%s: training.precision: %s",
                      c->deck_path, why);
  TD_CHECK_GOTO(td_agree(app->world, st));
  TD_CHECK_GOTO(td_grid_create(app->world, (int)c->parallel_dp, (int)c->parallel_cp,
                               (int)c->parallel_tp, (int)c->parallel_pp, &t->grid));
  TD_CHECK_GOTO(td_grid_set_ep(t->grid, (int)c->parallel_ep));
  TD_CHECK_GOTO(td_watchdog_start(app->world, (double)c->run_watchdog_s));
  int local_rank = 0, local_size = 1;
  TD_CHECK_GOTO(td_trainer_node_place(app, &local_rank, &local_size));
  TD_CHECK_GOTO(pick_threads(c, local_size, &t->threads));
  st = pick_device(c, local_rank, local_size);
  if (st == TD_OK) st = td_kernels_create(c->run_device, t->threads, &t->k);
  TD_CHECK_GOTO(td_agree(app->world, st));
  t->B = td_config_micro_batch(c);
  t->accum = td_config_accum_steps(c);
  int *nslots = NULL;
  st = model_slots(c, t->grid, &nslots);
  st = td_agree(app->world, st);
  if (st != TD_OK) free(nslots);
  TD_CHECK_GOTO(st);
  if (need_train && t->grid->pp > 1 && t->accum < t->grid->pp) /* eval, generate: no steps */
    td_warn("%lld micro-batch%s per pipeline for %d stages: the pipeline bubble is at least %.0f%% "
            "(raise training.global_batch or lower parallel.micro_batch)",
            (long long)t->accum, t->accum == 1 ? "" : "es", t->grid->pp,
            100.0 * (t->grid->pp - 1) / (double)(t->accum + t->grid->pp - 1));
  /* device communicators (collective: made on every rank, whatever failed
   * before, and agreed) for the groups that exchange back-end buffers */
  TD_CHECK_GOTO(td_trainer_dcomm_kind(app, c, local_size, &t->dcomm, why, sizeof why));
  if (t->dcomm == TD_DCOMM_OFF && why[0] && app->rank == 0 && app->size > 1)
    td_warn("collectives run in MPI on host copies of the GPU buffers: %s", why);
  TD_CHECK_GOTO(td_dcomm_create(t->grid->dpcp_comm, t->k, t->dcomm, "data-parallel", &t->dc_dp));
  if (c->model_moe_experts > 0)
    TD_CHECK_GOTO(td_dcomm_create(t->grid->edp_comm, t->k, t->dcomm, "expert-data-parallel",
                                  &t->dc_edp));
  if (t->grid->ep > 1)
    TD_CHECK_GOTO(td_dcomm_create(t->grid->ep_comm, t->k, t->dcomm, "expert-parallel",
                                  &t->dc_ep));
  if (t->grid->cp > 1)
    TD_CHECK_GOTO(td_dcomm_create(t->grid->cp_comm, t->k, t->dcomm, "context-parallel",
                                  &t->dc_cp));
  if (t->grid->tp > 1)
    TD_CHECK_GOTO(td_dcomm_create(t->grid->tp_comm, t->k, t->dcomm, "tensor-parallel",
                                  &t->dc_tp));
  TD_CHECK_GOTO(td_dcomm_create(t->grid->embed_comm, t->k, t->dcomm, "tied-embedding",
                                &t->dc_embed));
  st = td_model_create(c, t->grid, t->k, &t->gstats[TD_GROUP_TP], t->B, nslots,
                       t->dcomm != TD_DCOMM_OFF,
                       &t->model);
  free(nslots);
  nslots = NULL;
  if (st == TD_OK) {
    t->model->dc_tp = t->dc_tp, t->model->dc_embed = t->dc_embed, t->model->dc_cp = t->dc_cp;
    t->model->cp_stats = &t->gstats[TD_GROUP_CP];
    t->model->ep_stats = &t->gstats[TD_GROUP_DP]; /* ep is carved out of dp × cp */
    t->model->dc_ep = t->dc_ep;
  }
  if (st == TD_OK) st = create_zero(t);
  /* model.init_from is read on every rank (each keeps its shard): a rank
   * that failed to read it alone must not leave the others waiting in the
   * pipeline's collective set-up; agreed here, the message names the file */
  TD_CHECK_GOTO(td_agree(app->world, st));
  if (st == TD_OK) t->embed_step = embed_at_end(c, t->grid, t->model);
  if (st == TD_OK) st = create_pipe(t);
  if (st == TD_OK) mem_of(c, t->grid, t->model, t->zero, t->xzero, &t->mem);
  TD_CHECK_GOTO(td_agree(app->world, st));
  st = open_data(t, need_train, need_val);
  if (st == TD_OK && need_train) st = td_tokenizer_h5_read(c->data_train, &t->tok);
  TD_CHECK_GOTO(td_agree(app->world, st));
  int64_t N = t->B * c->model_seq_len;
  st = td_alloc((void **)&t->windows, (size_t)c->training_global_batch * sizeof(int64_t), "batch");
  if (st == TD_OK) st = td_alloc((void **)&t->tok_in, (size_t)N * sizeof(int32_t), "tokens");
  if (st == TD_OK) st = td_alloc((void **)&t->tok_tgt, (size_t)N * sizeof(int32_t), "tokens");
  if (st == TD_OK)
    st = td_alloc((void **)&t->tok_win,
                  (size_t)(c->training_global_batch / t->grid->dp) *
                      (size_t)(c->model_seq_len + 1) * sizeof(int32_t),
                  "tokens");
  int meta = strcmp(c->data_attend, "document") == 0 ||
             (t->train && td_dataset_has_mask(t->train)) || (t->val && td_dataset_has_mask(t->val));
  if (st == TD_OK && meta) {
    size_t nw = (size_t)(c->training_global_batch / t->grid->dp) * (size_t)(c->model_seq_len + 1);
    st = td_alloc((void **)&t->mask_win, nw, "loss masks");
    if (st == TD_OK) st = td_alloc((void **)&t->doc_win, nw * sizeof(int32_t), "document starts");
    if (st == TD_OK) st = td_alloc((void **)&t->tok_doc, (size_t)N * sizeof(int32_t), "document starts");
  }
  TD_CHECK_GOTO(td_agree(app->world, st));
done:
  if (st != TD_OK) {
    td_trainer_destroy(&t);
    return st;
  }
  *out = t;
  return TD_OK;
}

void td_trainer_destroy(td_trainer **tp) {
  if (!tp || !*tp) return;
  td_trainer *t = *tp;
  *tp = NULL;
  td_watchdog_stop();
  /* A rank failing alone is about to be aborted: requests may be in flight
   * on its buffers and the others will not join a collective teardown. */
  if (td_error_alone()) return;
  td_pipe_destroy(&t->pipe);
  /* the last step's parameter gathers (parallel.overlap_param_gather): every
   * rank launched them after the same optimizer step */
  if (t->zero) (void)td_zero_settle(t->zero);
  if (t->xzero) (void)td_zero_settle(t->xzero);
  td_zero_destroy(&t->zero);
  td_zero_destroy(&t->xzero);
  free(t->xunit_begin);
  td_kernels_destroy(&t->hk);
  td_model_destroy(&t->model);
  td_dcomm_destroy(&t->dc_dp);
  td_dcomm_destroy(&t->dc_edp);
  td_dcomm_destroy(&t->dc_ep);
  td_dcomm_destroy(&t->dc_tp);
  td_dcomm_destroy(&t->dc_cp);
  td_dcomm_destroy(&t->dc_embed);
  td_kernels_destroy(&t->k);
  td_dataset_close(&t->train);
  td_dataset_close(&t->val);
  td_tokenizer_files_free(&t->tok);
  td_sampler_destroy(&t->sampler);
  td_grid_destroy(&t->grid);
  td_free(t->windows);
  td_free(t->tok_in);
  td_free(t->tok_tgt);
  td_free(t->tok_win);
  td_free(t->mask_win);
  td_free(t->doc_win);
  td_free(t->tok_doc);
  td_free(t->ckpt_stage);
  free(t->hosts);
  free(t->strag_buf);
  free(t->strag_ring);
  if (t->metrics) fclose(t->metrics);
  td_tb_close(&t->tb);
  free(t);
}

/* Test only (TD_TEST_SLOW_RANK=R:MS[:data]): world rank R sleeps MS ms a
 * step in its compute (or in reading its data), so that the straggler
 * detection's test can check it names that rank and that part. */
static long slow_ms(const td_trainer *t, int data) {
  const char *e = getenv("TD_TEST_SLOW_RANK");
  int r = -1;
  long ms = 0;
  char part[16] = "";
  if (!e || sscanf(e, "%d:%ld:%15s", &r, &ms, part) < 2 || r != t->app->rank) return 0;
  return (strcmp(part, "data") == 0) == data ? ms : 0;
}

static void sleep_ms(long ms) {
  struct timespec left = {ms / 1000, ms % 1000 * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

td_status td_trainer_read_windows(td_trainer *t, td_dataset *d, const int64_t *w, int64_t n) {
  int64_t T = t->cfg.model_seq_len;
  td_status st = TD_OK;
  double t0 = td_now();
  for (int64_t b = 0; b < n && st == TD_OK; ++b) {
    st = td_dataset_read_window(d, w[b], T, t->tok_win + b * (T + 1));
    if (st == TD_OK && t->mask_win)
      st = td_dataset_read_meta(d, w[b], T, t->mask_win + b * (T + 1), t->doc_win + b * (T + 1));
  }
  double t1 = td_now();
  if (d == t->train) {
    long ms = slow_ms(t, 1);
    if (ms > 0) sleep_ms(ms);
    t1 = td_now();
    t->strag_data_s += t1 - t0; /* this rank's own reading, before the agreement */
  }
  TD_CHECK(td_agree(t->app->world, st));
  if (d == t->train) t->strag_wait_s += td_now() - t1; /* waiting there for the others */
  return TD_OK;
}

int64_t td_trainer_loss_tokens(const td_trainer *t, int64_t n) {
  int64_t T = t->cfg.model_seq_len, s = 0;
  if (!t->mask_win) return n * T;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 1; k <= T; ++k) s += t->mask_win[b * (T + 1) + k];
  return s;
}

/* Fill the host token buffers of a micro-batch from rows [first, first+n) of
 * t->tok_win (rows past n repeat the last one; their loss is not counted). */
void td_trainer_load_micro(td_trainer *t, int64_t first, int64_t n) {
  int64_t T = t->cfg.model_seq_len;
  const td_pos *pos = t->model->pos; /* context parallel: this rank's two chunks */
  int64_t Tl = t->model->T, half = pos ? pos->half : Tl;
  for (int64_t b = 0; b < t->B; ++b) {
    const int32_t *win = t->tok_win + (first + (b < n ? b : n - 1)) * (T + 1);
    int64_t runs[2][2] = {{0, pos ? pos->p0 : 0}, {half, pos ? pos->p1 : half}};
    for (int r = 0; r < 2; ++r) {
      int64_t at = runs[r][0], p = runs[r][1], len = r == 0 ? half : Tl - half;
      memcpy(t->tok_in + b * Tl + at, win + p, (size_t)len * sizeof(int32_t));
      memcpy(t->tok_tgt + b * Tl + at, win + p + 1, (size_t)len * sizeof(int32_t));
      if (!t->mask_win) continue;
      /* a target the mask leaves out is -1 (no loss, no gradient); the
       * rows' document starts are window positions, as the rows' are */
      int64_t w = first + (b < n ? b : n - 1);
      const uint8_t *mk = t->mask_win + w * (T + 1);
      const int32_t *dc = t->doc_win + w * (T + 1);
      for (int64_t i = 0; i < len; ++i) {
        if (!mk[p + 1 + i]) t->tok_tgt[b * Tl + at + i] = -1;
        t->tok_doc[b * Tl + at + i] = dc[p + i];
      }
    }
  }
  if (t->tok_doc) td_model_set_doc(t->model, t->tok_doc);
}

/* Σ g² over the model's gradients in a canonical order: per tensor (its
 * shards summed over dp and tp), then over the registry's tensors in order,
 * so the sum does not depend on which stage holds which layers (schedules,
 * stage_layers). Collective on dp_comm, tp_comm and pp_comm. */
static td_status grad_sumsq(td_trainer *t, double *out) {
  const td_registry *r = t->model->reg;
  td_status st = TD_OK;
  double *all = calloc((size_t)r->n + 1, sizeof(double));
  double *mine = calloc((size_t)r->n + 1, sizeof(double));
  if (!all || !mine) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  TD_CHECK_GOTO(td_zero_grad_sumsq_tensors(t->zero, mine));
  /* the engine's tensors are the registry's present dense ones, in order
   * (zero_opts); the experts' engine has the present experts' (summed over
   * edp_comm), added over the ep ranks that hold the others (the dense ones
   * counted there by ep rank 0) */
  for (int i = 0, j = 0; i < r->n; ++i) {
    int dense = r->p[i].present && r->p[i].expert < 0;
    all[i] = dense && t->grid->ep_rank == 0 ? mine[j] : 0.0;
    j += dense;
  }
  if (t->xzero) {
    TD_CHECK_GOTO(td_zero_grad_sumsq_tensors(t->xzero, mine));
    for (int i = 0, j = 0; i < r->n; ++i)
      if (r->p[i].present && r->p[i].expert >= 0) all[i] = mine[j++];
  }
  if (t->grid->ep > 1)
    TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->ep_comm, all, r->n, MPI_SUM,
                                        &t->gstats[TD_GROUP_DP]));
  TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->tp_comm, all, r->n, MPI_SUM,
                                      &t->gstats[TD_GROUP_TP]));
  TD_CHECK_GOTO(td_coll_allreduce_f64(t->grid->pp_comm, all, r->n, MPI_SUM,
                                      &t->gstats[TD_GROUP_PP]));
  *out = 0.0;
  for (int i = 0; i < r->n; ++i) *out += all[i];
done:
  free(all);
  free(mine);
  return st;
}

/* The step's auxiliary terms of the sparse blocks (t->moe_*): each rank's
 * sums over its blocks and micro-batches, added over the data-parallel
 * replicas and the pipeline stages (every tp rank holds the same). */
static td_status moe_metrics(td_trainer *t) {
  const td_model *m = t->model;
  const td_config *c = &t->cfg;
  int64_t E = m->E;
  double *v = calloc((size_t)(E + 3), sizeof *v);
  if (!v) TD_FAIL(TD_ERR_NOMEM, "out of memory for the expert metrics");
  const double *load = NULL;
  td_model_moe_sums(m, &v[0], &v[1], &v[2], &load);
  for (int64_t e = 0; e < E; ++e) v[3 + e] = load[e];
  td_status st = td_coll_allreduce_f64(t->grid->dpcp_comm, v, E + 3, MPI_SUM,
                                       &t->gstats[TD_GROUP_DP]);
  if (st == TD_OK)
    st = td_coll_allreduce_f64(t->grid->pp_comm, v, E + 3, MPI_SUM, &t->gstats[TD_GROUP_PP]);
  if (st == TD_OK) {
    double S = (double)c->training_global_batch, T = (double)c->model_seq_len;
    double Lm = (double)m->moe_layers;
    t->moe_aux = v[0] / (S * Lm), t->moe_z = v[1] / (S * T * Lm);
    t->moe_dropped = v[2] / (S * T * (double)m->K * Lm);
    t->moe_tok_min = t->moe_tok_max = v[3] / Lm, t->moe_tok_mean = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      double x = v[3 + e] / Lm;
      t->moe_tok_min = x < t->moe_tok_min ? x : t->moe_tok_min;
      t->moe_tok_max = x > t->moe_tok_max ? x : t->moe_tok_max;
      t->moe_tok_mean += x / (double)E;
    }
  }
  free(v);
  return st;
}

td_status td_trainer_step(td_trainer *t, double *loss, double *norm, double *lr) {
  td_config *c = &t->cfg;
  td_kernels *k = t->k;
  int64_t G = c->training_global_batch, T = c->model_seq_len, dp = t->grid->dp;
  int64_t per_rank = G / dp;
  int tid_fwd = td_timer_id(&t->timers, "forward+backward");
  int tid_opt = td_timer_id(&t->timers, "optimizer"), tid_data = td_timer_id(&t->timers, "data");

  td_watchdog_step(t->step + 1);
  TD_CHECK(td_test_fail_point("step"));
  td_timer_start(&t->timers, tid_data);
  TD_CHECK(td_sampler_next(t->sampler, G, t->windows));
  TD_CHECK(td_trainer_read_windows(t, t->train, t->windows + t->grid->dp_rank * per_rank,
                                    per_rank));
  /* the loss is the mean over the global batch's targets the mask keeps:
   * their count summed over the data-parallel replicas (the cp ranks of a
   * replica read the same windows) */
  double loss_tokens = (double)td_trainer_loss_tokens(t, per_rank);
  TD_CHECK(td_coll_allreduce_f64(t->grid->dp_comm, &loss_tokens, 1, MPI_SUM,
                                 &t->gstats[TD_GROUP_DP]));
  t->loss_tokens = loss_tokens;
  td_timer_stop(&t->timers, tid_data);
  TD_CHECK(td_zero_begin_step(t->zero, t->accum));
  if (t->xzero) TD_CHECK(td_zero_begin_step(t->xzero, t->accum));
  double loss_sum = 0.0;
  td_timer_start(&t->timers, tid_fwd);
  td_model_moe_reset(t->model);
  TD_CHECK(td_pipe_train(t->pipe, loss_tokens > 0 ? loss_tokens : 1.0, &loss_sum));
  TD_CHECK(k->sync(k));
  long slow = slow_ms(t, 0);
  if (slow > 0) sleep_ms(slow);
  td_timer_stop(&t->timers, tid_fwd);
  /* Gradients: summed over data-parallel replicas (each holds Σ over its slice). */
  td_timer_start(&t->timers, tid_opt);
  TD_CHECK(td_zero_finish_grads(t->zero));
  if (t->xzero) TD_CHECK(td_zero_finish_grads(t->xzero));
  TD_CHECK(td_coll_allreduce_f64(t->grid->dpcp_comm, &loss_sum, 1, MPI_SUM,
                                 &t->gstats[TD_GROUP_DP]));
  TD_CHECK(td_coll_allreduce_f64(t->grid->pp_comm, &loss_sum, 1, MPI_SUM,
                                 &t->gstats[TD_GROUP_PP])); /* last stage's */
  *loss = loss_tokens > 0 ? loss_sum / loss_tokens : 0.0;
  if (t->model->moe) TD_CHECK(moe_metrics(t));

  double ss = 0.0;
  TD_CHECK(grad_sumsq(t, &ss));
  *norm = sqrt(ss);
  if (!isfinite(*loss) || !isfinite(*norm)) {
    td_error_set(TD_ERR_NUMERIC, __FILE__, __LINE__, __func__,
                 "step %lld: %s is %s (loss %g, gradient norm %g); lower optimizer.lr or check "
                 "the data",
                 (long long)(t->step + 1), !isfinite(*loss) ? "the loss" : "the gradient norm",
                 isnan(!isfinite(*loss) ? *loss : *norm) ? "NaN" : "infinite", *loss, *norm);
    td_error_mark_agreed(); /* every rank computed the same reduced values */
    return TD_ERR_NUMERIC;
  }
  if (t->grad_snapshot) { /* --dump runs on one rank: the owned ranges are everything */
    td_zero *zs[2] = {t->zero, t->xzero};
    for (int i = 0; i < 2 && zs[i]; ++i) {
      int64_t b = 0, e = 0;
      td_zero_owned(zs[i], &b, &e);
      TD_CHECK(k->to_host(k, t->grad_snapshot + (i ? t->model->reg->xbegin : 0),
                          td_zero_owned_grads(zs[i]), (size_t)(e - b) * sizeof(float)));
    }
  }
  /* clipping: AdamW takes the coefficient (one pass over the gradients, not two) */
  float gscale = 1.0f;
  if (c->training_grad_clip > 0.0) {
    double coef = c->training_grad_clip / (*norm + 1e-6);
    if (coef < 1.0) gscale = (float)coef;
  }
  *lr = td_lr_at(c, t->step);
  TD_CHECK(td_zero_adamw(t->zero, gscale, (float)*lr, (float)c->optimizer_betas[0],
                         (float)c->optimizer_betas[1], (float)c->optimizer_eps,
                         (float)c->optimizer_weight_decay, t->step + 1));
  if (t->xzero)
    TD_CHECK(td_zero_adamw(t->xzero, gscale, (float)*lr, (float)c->optimizer_betas[0],
                           (float)c->optimizer_betas[1], (float)c->optimizer_eps,
                           (float)c->optimizer_weight_decay, t->step + 1));
  TD_CHECK(k->sync(k));
  td_timer_stop(&t->timers, tid_opt);
  t->step++;
  t->tokens_seen += G * T;
  return TD_OK;
}

td_status td_trainer_eval(td_trainer *t, double *loss, int64_t *ntokens) {
  td_config *c = &t->cfg;
  td_model *m = t->model;
  int64_t T = c->model_seq_len, dp = t->grid->dp;
  int64_t total = c->eval_batches * c->training_global_batch;
  int64_t avail = td_dataset_nwindows(t->val, T);
  if (total > avail) total = avail;
  /* dp rank r evaluates windows [r·total/dp, (r+1)·total/dp) in micro-batches of B */
  int64_t lo = t->grid->dp_rank * total / dp, hi = (t->grid->dp_rank + 1) * total / dp;
  int64_t per = (total + dp - 1) / dp, nmicro = (per + t->B - 1) / t->B; /* same on every rank */
  int64_t *w = t->windows; /* global_batch ≥ B entries */
  double sum = 0.0;
  int64_t counted = 0; /* the targets the masks keep, this replica's */
  for (int64_t j = 0; j < nmicro; ++j) {
    int64_t first = lo + j * t->B, n = hi - first;
    if (n > t->B) n = t->B;
    if (n <= 0) {
      n = 0;
      first = 0;
    }
    for (int64_t b = 0; b < t->B; ++b) w[b] = first + (b < n ? b : 0);
    TD_CHECK(td_trainer_read_windows(t, t->val, w, n > 0 ? n : 1));
    counted += td_trainer_loss_tokens(t, n > 0 ? n : 0);
    td_trainer_load_micro(t, 0, n > 0 ? n : 1);
    m->valid_rows = n * m->T; /* the rows of n sequences this rank holds */
    double ls = 0.0;
    td_status st = td_pipe_forward(t->pipe, t->tok_in, t->tok_tgt, &ls);
    m->valid_rows = t->B * m->T;
    TD_CHECK(st);
    sum += ls;
  }
  TD_CHECK(td_coll_allreduce_f64(t->grid->dpcp_comm, &sum, 1, MPI_SUM, &t->gstats[TD_GROUP_DP]));
  TD_CHECK(td_coll_allreduce_f64(t->grid->pp_comm, &sum, 1, MPI_SUM, &t->gstats[TD_GROUP_PP]));
  double cnt = (double)counted;
  TD_CHECK(td_coll_allreduce_f64(t->grid->dp_comm, &cnt, 1, MPI_SUM, &t->gstats[TD_GROUP_DP]));
  *ntokens = (int64_t)cnt;
  *loss = cnt > 0 ? sum / cnt : 0.0;
  return TD_OK;
}
