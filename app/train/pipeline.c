/* pipeline.c — runs this stage's list of the deck's schedule over pp_comm
 * (see td_pipeline.h and parallel/td_schedule.h).
 *
 * Micro-batch j of chunk c uses activation slot slot0[c] + j mod nslot[c]:
 * every schedule frees a chunk's micro-batches in the order it started
 * them, and nslot[c] is the schedule's own peak (td_schedule_live_peak), so
 * the slot is free when micro-batch j starts.
 * Messages: activations go from model chunk k to k + 1 (tag TAG_ACT + 2·the
 * receiver's local chunk), gradients from k + 1 back to k (TAG_GRAD + 2·...);
 * without interleaving, stage s to s + 1 and back with tags 1 and 2. Both
 * ends post each kind of each chunk in micro-batch order and MPI does not
 * reorder messages between two ranks on one communicator with one tag, so
 * no micro-batch number is needed in the tag (MPI only guarantees tags up
 * to 32767: 2·4096 + 2 at most here). Sends are non-blocking and complete
 * before their buffer is reused; receives block, and the time spent in
 * them (and in waiting for a send's buffer) is the stage's measured idle
 * time.
 *
 * Collectives: point-to-point on pp_comm; the model's on tp_comm; the ZeRO
 * engine's on dp_comm (through the model's unit hooks); the tied
 * embedding's sum on embed_comm (the trainer's after_backward hook:
 * td_pipe_env).
 *
 * Split backward (zb-h1): B computes the input gradient (sent on at once)
 * and records the weight-gradient work; W runs it later, in the place the
 * schedule gives it (td_model_backward_input / _weight). The ZeRO engine
 * sees a unit's gradients only in W, so its reductions, and the tied
 * embedding's sum over the first and last stage, follow the W's.
 *
 * Staging: when the back-end's memory is not host memory, MPI sends from and
 * receives into host copies allocated once (p->host): a send copies its
 * buffer to the host copy of its slot and kind (kept until the send is
 * waited, as the device buffer is without staging); a receive lands in one
 * host buffer and is copied to the device once it has completed.
 *
 * Device channels (the trainer's device collectives are on: NCCL, or the
 * test implementation): no host copies and no MPI. Every link between
 * neighbouring stages has two one-way channels, each a communicator of its
 * own with its own stream (parallel/td_schedule.h): activations towards the
 * next stage, gradients back. A send is queued behind the compute that made
 * its buffer and never waits behind a receive, so the device runs the list
 * as MPI does with non-blocking sends (td_schedule_check_channels proves
 * each channel keeps one order at both ends, as NCCL's untagged matching
 * needs). A receive is waited by the host under the watchdog (its time is
 * the idle time) and joined by the compute stream; a buffer a send reads
 * is written again only after the compute stream has joined that send.
 *
 * Scatter/gather over tp (Megatron-LM's, Narayanan et al. 2021 §4.1):
 * without sequence parallelism every tp rank of a stage holds the same
 * (N, C) residual stream and its gradient, so tp rank r sends only part r
 * of a message (N·C / tp floats at r·N·C / tp) to tp rank r of the
 * neighbouring stage, which all-gathers the parts over tp_comm
 * (td_model_tp_gather) after the receive. The pipeline link carries 1/tp of
 * the bytes; the gather runs on the tp group's link. Under sequence
 * parallelism a rank's rows are already its own 1/tp. */
#include "app/train/td_pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/td_dcomm.h"
#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"
#include "td_log.h"

enum { TAG_ACT = 1, TAG_GRAD = 2 };

struct td_pipe {
  td_pipe_env e;      /* what the trainer handed td_pipe_create */
  td_kernels *k;
  td_schedule *sched; /* the deck's schedule; this stage runs sched->acts[stage] */
  int pp, stage, v, nslots;
  int *slot0, *nslot;   /* (v) per chunk: its first slot and its number of slots */
  int64_t N, C;
  int64_t part, off;     /* a message's floats and their offset in (N, C) (scatter/gather
                            over tp: N·C / tp at tp_rank·part; else N·C at 0) */
  float *grad_in;        /* (N, C) gradient of this stage's output, from the next stage */
  float **grad_send;     /* per slot (N, C): gradient of the stage input, being sent */
  MPI_Request *req_act;  /* per slot: activation send in flight */
  MPI_Request *req_grad; /* per slot: gradient send in flight */
  float *host;           /* staging only: host_copies (N, C) host copies, see host_of */
  /* device channels: dc[side][dir], side 0 the link to the next stage, 1 the
   * link from the one before; dir 0 activations, 1 gradients (NULL: MPI) */
  struct td_dcomm *dc[2][2];
  uint64_t *tk_act, *tk_grad; /* per slot: the ticket of its send in flight (0: none) */
  double idle, t_start, t_end;
  int live, live_peak;
};

td_status td_pipe_schedule(const td_config *cfg, td_schedule **out) {
  int kind = td_sched_kind_parse(cfg->parallel_pp_schedule);
  if (kind < 0)
    TD_FAIL(TD_ERR_DECK, "%s: parallel.pp_schedule: unknown schedule '%s'", cfg->deck_path,
            cfg->parallel_pp_schedule);
  return td_schedule_build((td_sched_kind)kind, (int)cfg->parallel_pp,
                           (int)cfg->parallel_virtual_stages, td_config_accum_steps(cfg), out);
}

td_status td_pipe_slots(const td_config *cfg, int stage, int *slots) {
  td_schedule *s = NULL;
  TD_CHECK(td_pipe_schedule(cfg, &s));
  for (int c = 0; c < s->v; ++c) {
    int64_t n = td_schedule_live_peak(s, stage, c);
    slots[c] = (int)(n > 0 ? n : 1);
  }
  td_schedule_destroy(&s);
  return TD_OK;
}

td_status td_pipe_predict(const td_config *cfg, td_sched_sim *out) {
  td_status st = TD_OK;
  td_schedule *s = NULL;
  double *cost = NULL;
  TD_CHECK(td_pipe_schedule(cfg, &s));
  int n = s->pp * s->v;
  cost = malloc((size_t)n * sizeof(double));
  if (!cost) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int stage = 0; stage < s->pp; ++stage)
    for (int c = 0; c < s->v; ++c) {
      int64_t first, count;
      td_config_chunk_layers(cfg, td_sched_model_chunk(s, stage, c), &first, &count);
      cost[stage * s->v + c] = (double)(count > 0 ? count : 1);
    }
  td_sched_costs costs = {0.0, 0.0, 0.0, 0.0, cost, cost, cost};
  TD_CHECK_GOTO(td_schedule_simulate(s, &costs, out, NULL, NULL));
done:
  free(cost);
  td_schedule_destroy(&s);
  return st;
}

int td_pipe_scatters(const td_config *cfg) {
  int64_t tp = cfg->parallel_tp;
  return cfg->parallel_pp > 1 && tp > 1 && !cfg->parallel_sequence_parallel &&
         (td_model_rows(cfg, 1) * cfg->model_dim) % tp == 0;
}

/* Whether a stage sends activations (all but the last, every stage when
 * interleaved) and gradients (all but the first, or every stage). */
static int sends_act(int pp, int stage, int v) { return stage < pp - 1 || v > 1; }
static int sends_grad(int stage, int v) { return stage > 0 || v > 1; }

/* Staging: the (N, C) host copies of a stage: one receive buffer, then one
 * send buffer per slot for the activations and for the gradients (where
 * the stage sends them). */
static int64_t host_copies(int pp, int stage, int v, int nslots) {
  return 1 + (sends_act(pp, stage, v) ? nslots : 0) + (sends_grad(stage, v) ? nslots : 0);
}

int64_t td_pipe_bytes(int pp, int stage, int v, int nslots, int64_t N, int64_t C, int staged) {
  if (pp <= 1) return 0;
  int64_t host = staged ? host_copies(pp, stage, v, nslots) : 0; /* td_pipe_create's p->host */
  return (int64_t)sizeof(float) * N * C * (1 + (sends_grad(stage, v) ? nslots : 0) + host);
}

/* Staging: the host copy MPI uses for a receive (kind 0), or for the send
 * of kind TAG_ACT / TAG_GRAD from slot `slot`. */
static float *host_of(const td_pipe *p, int kind, int slot) {
  int64_t nact = sends_act(p->pp, p->stage, p->v) ? p->nslots : 0;
  int64_t i = kind == 0 ? 0 : 1 + (kind == TAG_ACT ? 0 : nact) + slot;
  return p->host + i * p->N * p->C;
}

void td_pipe_destroy(td_pipe **pp) {
  if (!pp || !*pp) return;
  td_pipe *p = *pp;
  *pp = NULL;
  int inflight = 0;
  for (int i = 0; p->req_act && p->req_grad && i < p->nslots; ++i)
    inflight |= p->req_act[i] != MPI_REQUEST_NULL || p->req_grad[i] != MPI_REQUEST_NULL;
  if (inflight && td_error_alone()) return; /* sends in flight: leave them to the abort */
  for (int side = 0; side < 2; ++side)
    for (int dir = 0; dir < 2; ++dir) td_dcomm_destroy(&p->dc[side][dir]);
  free(p->tk_act);
  free(p->tk_grad);
  for (int i = 0; p->req_act && p->req_grad && i < p->nslots; ++i) {
    if (p->req_act[i] != MPI_REQUEST_NULL) MPI_Wait(&p->req_act[i], MPI_STATUS_IGNORE);
    if (p->req_grad[i] != MPI_REQUEST_NULL) MPI_Wait(&p->req_grad[i], MPI_STATUS_IGNORE);
  }
  for (int i = 0; p->grad_send && i < p->nslots; ++i)
    if (p->grad_send[i]) p->k->free(p->k, p->grad_send[i]);
  if (p->grad_in) p->k->free(p->k, p->grad_in);
  td_free(p->host);
  free(p->grad_send);
  free(p->req_act);
  free(p->req_grad);
  free(p->slot0);
  free(p->nslot);
  td_schedule_destroy(&p->sched);
  free(p);
}

/* The device channels of every link (stage l and (l + 1) mod pp; the
 * wrapping link only when interleaved), made link by link on every pipeline
 * rank: a split of pp_comm per link (stage l is member 0 of it), then its
 * two channels, and agreement over pp_comm after each, so that a failure
 * anywhere stops every rank at the same link. Collective on pp_comm. */
static td_status make_channels(td_pipe *p) {
  TD_CHECK(td_schedule_check_channels(p->sched));
  int links = p->v > 1 ? p->pp : p->pp - 1;
  static const char *const names[2] = {"pipeline activations", "pipeline gradients"};
  for (int l = 0; l < links; ++l) {
    int lo = l, hi = (l + 1) % p->pp;
    int member = p->stage == lo || p->stage == hi;
    MPI_Comm link = MPI_COMM_NULL;
    td_status st = TD_OK;
    int rc = MPI_Comm_split(p->e.grid->pp_comm, member ? 0 : MPI_UNDEFINED, p->stage == lo ? 0 : 1,
                            &link);
    if (rc != MPI_SUCCESS)
      st = td_mpi_fail(rc, "MPI_Comm_split (a pipeline link)", __FILE__, __LINE__, __func__);
    int side = p->stage == lo ? 0 : 1; /* the link to the next stage, or from the one before */
    for (int dir = 0; st == TD_OK && member && dir < 2; ++dir)
      st = td_dcomm_create(link, p->k, p->e.dcomm, names[dir], &p->dc[side][dir]);
    if (link != MPI_COMM_NULL) MPI_Comm_free(&link);
    TD_CHECK(td_agree(p->e.grid->pp_comm, st));
  }
  return TD_OK;
}

td_status td_pipe_create(const td_pipe_env *env, td_pipe **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_pipe *p = calloc(1, sizeof *p);
  if (!p) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  p->e = *env;
  p->k = env->k;
  p->pp = p->e.grid->pp, p->stage = p->e.grid->pp_rank;
  p->nslots = p->e.model->nslots;
  p->v = p->e.model->nchunks;
  p->slot0 = calloc((size_t)p->v, sizeof(int));
  p->nslot = calloc((size_t)p->v, sizeof(int));
  if (!p->slot0 || !p->nslot) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int c = 0; c < p->v; ++c)
    p->slot0[c] = p->e.model->chunks[c].slot0, p->nslot[c] = p->e.model->chunks[c].nslots;
  TD_CHECK_GOTO(td_pipe_schedule(p->e.cfg, &p->sched));
  /* a message: the residual stream's rows this rank holds (its tp part under
   * sequence parallelism) */
  p->N = td_model_rows(p->e.cfg, p->e.B), p->C = p->e.cfg->model_dim;
  p->part = p->N * p->C, p->off = 0;
  if (td_pipe_scatters(p->e.cfg))
    p->part = p->N * p->C / p->e.grid->tp, p->off = (int64_t)p->e.grid->tp_rank * p->part;
  p->grad_send = calloc((size_t)p->nslots, sizeof(float *));
  p->req_act = malloc((size_t)p->nslots * sizeof(MPI_Request));
  p->req_grad = malloc((size_t)p->nslots * sizeof(MPI_Request));
  if (!p->grad_send || !p->req_act || !p->req_grad) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int i = 0; i < p->nslots; ++i) p->req_act[i] = p->req_grad[i] = MPI_REQUEST_NULL;
  p->tk_act = calloc((size_t)p->nslots, sizeof(uint64_t));
  p->tk_grad = calloc((size_t)p->nslots, sizeof(uint64_t));
  if (!p->tk_act || !p->tk_grad) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  if (p->pp > 1 && p->e.dcomm != TD_DCOMM_OFF) TD_CHECK_GOTO(make_channels(p));
  if (p->pp > 1) { /* td_pipe_bytes counts these */
    size_t bytes = (size_t)(p->N * p->C) * sizeof(float);
    TD_CHECK_GOTO(p->k->alloc(p->k, (void **)&p->grad_in, bytes, "pipeline gradient buffer"));
    if (sends_grad(p->stage, p->v))
      for (int i = 0; i < p->nslots; ++i)
        TD_CHECK_GOTO(p->k->alloc(p->k, (void **)&p->grad_send[i], bytes, "pipeline send buffer"));
    if (!p->k->host_memory && !p->dc[0][0] && !p->dc[1][0])
      TD_CHECK_GOTO(td_alloc((void **)&p->host,
                             (size_t)host_copies(p->pp, p->stage, p->v, p->nslots) * bytes,
                             "host staging of pipeline messages"));
  }
done:
  if (st != TD_OK) {
    td_pipe_destroy(&p);
    return st;
  }
  *out = p;
  return TD_OK;
}

void td_pipe_stats(const td_pipe *p, double *idle_s, double *step_s, int *live_peak) {
  *idle_s = p->idle;
  *step_s = p->t_end - p->t_start;
  *live_peak = p->live_peak;
}

/* The tag of a message of kind TAG_ACT / TAG_GRAD for the receiver's chunk
 * c: each chunk's messages between two ranks keep their own order. */
static int tag_of(int kind, int c) { return kind + 2 * c; }

/* The device channel of a message action (NULL: MPI). */
static struct td_dcomm *chan_of(const td_pipe *p, int op) {
  int link = 0, dir = 0;
  td_sched_channel(p->sched, p->stage, op, &link, &dir);
  return p->dc[link == p->stage ? 0 : 1][dir];
}

/* The receive of recv_from: p->part floats (the message, or this rank's
 * part of it) into buf. */
static td_status recv_part(td_pipe *p, float *buf, int src, int kind,
                           int c) {
  int n = 0;
  TD_CHECK(td_mpi_count(p->part, &n));
  double t0 = td_now();
  const char *op = kind == TAG_ACT ? "MPI_Recv (activations from the previous pipeline stage)"
                                   : "MPI_Recv (gradients from the next pipeline stage)";
  struct td_dcomm *dc = chan_of(p, kind == TAG_ACT ? TD_OP_RECV_ACT : TD_OP_RECV_GRAD);
  if (dc) {
    uint64_t tk = 0;
    TD_CHECK(td_dcomm_recv(dc, buf, p->part, 1 - dc->rank, p->e.stats, &tk));
    TD_CHECK(td_dcomm_wait(dc, tk,
                           kind == TAG_ACT ? "device receive (activations from the previous "
                                             "pipeline stage)"
                                           : "device receive (gradients from the next pipeline "
                                             "stage)",
                           p->e.grid->pp_comm, p->e.stats, TD_COLL_SENDRECV));
    TD_CHECK(td_dcomm_join(dc, tk));
    p->idle += td_now() - t0;
    return TD_OK;
  }
  MPI_Request r = MPI_REQUEST_NULL;
  float *into = p->host ? host_of(p, 0, 0) + p->off : buf;
  TD_MPI_CHECK(td_watched(MPI_Irecv(into, n, MPI_FLOAT, src, tag_of(kind, c), p->e.grid->pp_comm,
                                    &r), op, p->e.grid->pp_comm, &r));
  if (p->host) TD_CHECK(p->k->to_device(p->k, buf, into, (size_t)n * sizeof(float)));
  double dt = td_now() - t0;
  p->idle += dt;
  p->e.stats->bytes[TD_COLL_SENDRECV] += (double)n * 4.0;
  p->e.stats->ms[TD_COLL_SENDRECV] += 1e3 * dt;
  p->e.stats->calls[TD_COLL_SENDRECV]++;
  return TD_OK;
}

/* Blocking receive of a message (N, C) of kind `kind` for this stage's
 * chunk c from pipeline rank `src` into buf, counted as idle time (staging:
 * into the host copy, then to buf; device channels: the host waits, the
 * compute stream joins); scattered over tp, its part at p->off, then the
 * tp all-gather (not idle time: the tp group's communication). */
static td_status recv_from(td_pipe *p, float *buf, int src, int kind,
                           int c) {
  TD_CHECK(recv_part(p, buf + p->off, src, kind, c));
  if (p->part == p->N * p->C) return TD_OK;
  return td_model_tp_gather(p->e.model, buf, p->part);
}

/* Non-blocking send of buf (N, C) (its part at p->off when scattered over
 * tp), the message of kind `kind` from `slot` to rank dst's chunk c; *req
 * (device channels: the slot's ticket) is waited by wait_send before buf
 * (or its host copy) is reused. */
static td_status send_to(td_pipe *p, const float *buf, int slot, int dst,
                         int kind, int c, MPI_Request *req) {
  int n = 0;
  TD_CHECK(td_mpi_count(p->part, &n));
  buf += p->off;
  struct td_dcomm *dc = chan_of(p, kind == TAG_ACT ? TD_OP_SEND_ACT : TD_OP_SEND_GRAD);
  if (dc) /* queued behind the compute that made buf */
    return td_dcomm_send(dc, buf, p->part, 1 - dc->rank, p->e.stats,
                         kind == TAG_ACT ? &p->tk_act[slot] : &p->tk_grad[slot]);
  TD_CHECK(p->k->sync(p->k));
  if (p->host) { /* staging: send the slot's host copy */
    float *h = host_of(p, kind, slot) + p->off;
    TD_CHECK(p->k->to_host(p->k, h, buf, (size_t)n * sizeof(float)));
    buf = h;
  }
  TD_MPI_CHECK(MPI_Isend(buf, n, MPI_FLOAT, dst, tag_of(kind, c), p->e.grid->pp_comm, req));
  p->e.stats->bytes[TD_COLL_SENDRECV] += (double)n * 4.0;
  p->e.stats->calls[TD_COLL_SENDRECV]++;
  return TD_OK;
}

/* Before the buffer of the send from `slot` of kind `kind` is written
 * again: MPI waits for the send; a device channel has the compute stream
 * join it (the host waits too when `host`: the end of a step). */
static td_status wait_send(td_pipe *p, int kind, int slot, int host) {
  MPI_Request *req = kind == TAG_ACT ? &p->req_act[slot] : &p->req_grad[slot];
  uint64_t *tk = kind == TAG_ACT ? &p->tk_act[slot] : &p->tk_grad[slot];
  double t0 = td_now();
  if (*tk) {
    struct td_dcomm *dc = chan_of(p, kind == TAG_ACT ? TD_OP_SEND_ACT : TD_OP_SEND_GRAD);
    if (host)
      TD_CHECK(td_dcomm_wait(dc, *tk, "device send to a neighbouring pipeline stage",
                             p->e.grid->pp_comm, p->e.stats, TD_COLL_SENDRECV));
    TD_CHECK(td_dcomm_join(dc, *tk));
    *tk = 0;
  }
  if (*req != MPI_REQUEST_NULL)
    TD_MPI_CHECK(td_watchdog_wait("MPI_Wait (send to a neighbouring pipeline stage)",
                                  p->e.grid->pp_comm, req));
  p->idle += td_now() - t0;
  return TD_OK;
}

/* The activation slot of micro-batch j in chunk c. */
static int slot_of(const td_pipe *p, int c, int64_t j) {
  return p->slot0[c] + (int)(j % p->nslot[c]);
}

/* Neighbours: the rank before / after this one along the model chunks
 * (model chunk k = c·pp + stage; k − 1 and k + 1 live on the stages before
 * and after, wrapping round for interleaved chunks), and the local chunk
 * there. */
static int prev_rank(const td_pipe *p) { return (p->stage + p->pp - 1) % p->pp; }
static int next_rank(const td_pipe *p) { return (p->stage + 1) % p->pp; }
static int next_chunk(const td_pipe *p, int c) { return (c * p->pp + p->stage + 1) / p->pp; }
static int prev_chunk(const td_pipe *p, int c) { return (c * p->pp + p->stage - 1) / p->pp; }

/* RECV_ACT: the input of (c, j) from the previous model chunk, into its slot
 * (whose last output may still be on its way to the next one). */
static td_status recv_act(td_pipe *p, int c, int64_t j) {
  int slot = slot_of(p, c, j);
  TD_CHECK(wait_send(p, TAG_ACT, slot, 0));
  return recv_from(p, td_model_stage_input(p->e.model, slot), prev_rank(p), TAG_ACT, c);
}

/* F: forward of micro-batch j (rows [j·B, (j+1)·B) of the step's windows)
 * through chunk c. */
static td_status fwd(td_pipe *p, int c, int64_t j, double *loss) {
  int slot = slot_of(p, c, j);
  TD_CHECK(wait_send(p, TAG_ACT, slot, 0));
  const int32_t *in = NULL, *tgt = NULL;
  p->e.load_micro(p->e.ctx, j * p->e.B, p->e.B, &in, &tgt);
  double ls = 0.0;
  TD_CHECK(td_model_forward(p->e.model, slot, in, tgt, &ls));
  *loss += ls;
  if (++p->live > p->live_peak) p->live_peak = p->live;
  return TD_OK;
}

/* SEND_ACT: the output of (c, j) to the next model chunk. */
static td_status send_act(td_pipe *p, int c, int64_t j) {
  int slot = slot_of(p, c, j);
  TD_CHECK(send_to(p, td_model_stage_output(p->e.model, slot), slot, next_rank(p), TAG_ACT,
                   next_chunk(p, c), &p->req_act[slot]));
  TD_CHECK(td_test_fail_point("pipe_send")); /* a send in flight */
  return TD_OK;
}

/* BW or B of (c, j) (the gradient of its output is in p->grad_in unless c
 * is the last model chunk). */
static td_status bwd(td_pipe *p, int op, int c, int64_t j,
                     double global_tokens) {
  int slot = slot_of(p, c, j);
  float scale = (float)(1.0 / global_tokens);
  if (op == TD_OP_B) return td_model_backward_input(p->e.model, slot, scale, p->grad_in);
  TD_CHECK(td_zero_begin_micro(p->e.zero, j));
  if (p->e.xzero) TD_CHECK(td_zero_begin_micro(p->e.xzero, j));
  if (p->e.begin_grads) TD_CHECK(p->e.begin_grads(p->e.ctx, j));
  TD_CHECK(td_model_backward(p->e.model, slot, scale, p->grad_in));
  p->live--;
  return TD_OK;
}

/* W of (c, j): the weight gradients its B recorded. */
static td_status wgrad(td_pipe *p, int c, int64_t j) {
  TD_CHECK(td_zero_begin_micro(p->e.zero, j));
  if (p->e.xzero) TD_CHECK(td_zero_begin_micro(p->e.xzero, j));
  if (p->e.begin_grads) TD_CHECK(p->e.begin_grads(p->e.ctx, j));
  TD_CHECK(td_model_backward_weight(p->e.model, slot_of(p, c, j)));
  p->live--;
  return TD_OK;
}

/* SEND_GRAD: the gradient of (c, j)'s input to the previous model chunk. */
static td_status send_grad(td_pipe *p, int c, int64_t j) {
  int slot = slot_of(p, c, j);
  td_kernels *k = p->k;
  TD_CHECK(wait_send(p, TAG_GRAD, slot, 0));
  float *g = p->grad_send[slot] + p->off; /* the part sent */
  TD_CHECK(k->zero(k, g, (size_t)p->part * sizeof(float)));
  TD_CHECK(k->add(k, g, g, td_model_input_grad(p->e.model) + p->off, p->part));
  return send_to(p, p->grad_send[slot], slot, prev_rank(p), TAG_GRAD, prev_chunk(p, c),
                 &p->req_grad[slot]);
}

td_status td_pipe_train(td_pipe *p, double loss_tokens, double *loss_sum) {
  double G = loss_tokens;
  const td_sched_action *a = p->sched->acts[p->stage];
  int64_t n = p->sched->count[p->stage];
  *loss_sum = 0.0;
  p->idle = 0.0;
  p->live = 0;
  p->t_start = td_now();
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = a[i].micro;
    int c = a[i].chunk;
    switch (a[i].op) {
      case TD_OP_RECV_ACT: TD_CHECK(recv_act(p, c, j)); break;
      case TD_OP_F: TD_CHECK(fwd(p, c, j, loss_sum)); break;
      case TD_OP_SEND_ACT: TD_CHECK(send_act(p, c, j)); break;
      case TD_OP_RECV_GRAD:
        TD_CHECK(recv_from(p, p->grad_in, next_rank(p), TAG_GRAD, c));
        break;
      case TD_OP_BW: case TD_OP_B: TD_CHECK(bwd(p, a[i].op, c, j, G)); break;
      case TD_OP_W: TD_CHECK(wgrad(p, c, j)); break;
      case TD_OP_SEND_GRAD: TD_CHECK(send_grad(p, c, j)); break;
      default: TD_FAIL(TD_ERR_INTERNAL, "pipeline: unknown action %d", a[i].op);
    }
    /* The tied embedding's gradient sum over the first and last stage
     * (the after_backward hook) comes after the micro-batch's gradient has
     * been sent down the pipeline, so no stage waits on another in a cycle:
     * after the send, or after the backward when none follows. */
    int op = a[i].op;
    if (op == TD_OP_SEND_GRAD || op == TD_OP_W ||
        ((op == TD_OP_BW || op == TD_OP_B) && (i + 1 == n || a[i + 1].op != TD_OP_SEND_GRAD)))
      if (p->e.after_backward) TD_CHECK(p->e.after_backward(p->e.ctx, p->v > 1));
  }
  /* interleaved: the sum waits for the end of the list — the first stage's
   * embedding chunk finishes the step, and the last stage has chunks left to
   * run after its head's last backward */
  if (p->e.after_backward) TD_CHECK(p->e.after_backward(p->e.ctx, 0));
  for (int i = 0; i < p->nslots; ++i) {
    TD_CHECK(wait_send(p, TAG_ACT, i, 1));
    TD_CHECK(wait_send(p, TAG_GRAD, i, 1));
  }
  p->t_end = td_now();
  return TD_OK;
}

td_status td_pipe_forward(td_pipe *p, const int32_t *inputs, const int32_t *targets,
                          double *loss_sum) {
  td_model *m = p->e.model;
  double idle = p->idle; /* a forward-only pass is not part of the step's bubble */
  *loss_sum = 0.0;
  for (int c = 0; c < p->v; ++c) { /* the chunks in model order: each waits for the one before */
    int slot = p->slot0[c], k = c * p->pp + p->stage, last = p->pp * p->v - 1;
    double ls = 0.0;
    if (k > 0) TD_CHECK(recv_from(p, td_model_stage_input(m, slot), prev_rank(p), TAG_ACT, c));
    TD_CHECK(td_model_forward(m, slot, inputs, targets, &ls));
    *loss_sum += ls;
    if (k < last) {
      TD_CHECK(wait_send(p, TAG_ACT, slot, 1));
      TD_CHECK(send_to(p, td_model_stage_output(m, slot), slot, next_rank(p), TAG_ACT,
                       next_chunk(p, c), &p->req_act[slot]));
      TD_CHECK(wait_send(p, TAG_ACT, slot, 1));
    }
  }
  p->idle = idle;
  TD_CHECK(td_zero_end_forward(p->e.zero));
  if (p->e.xzero) TD_CHECK(td_zero_end_forward(p->e.xzero));
  return TD_OK;
}
