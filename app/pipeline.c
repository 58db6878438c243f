/* pipeline.c — GPipe and 1F1B schedules over pp_comm (see td_pipeline.h).
 *
 * Micro-batch j uses activation slot j mod nslots: with 1F1B at most
 * pp − stage micro-batches are in flight on a stage, with GPipe all m.
 * Messages: activations go from stage s to s+1 (tag TAG_ACT), gradients from
 * s+1 back to s (tag TAG_GRAD). Both ends post each kind in micro-batch order
 * and MPI does not reorder messages between two ranks on one communicator, so
 * no micro-batch number is needed in the tag (MPI only guarantees tags up to
 * 32767). Sends are non-blocking and complete before their buffer is reused;
 * receives block, and the time spent in them is the stage's measured idle
 * time.
 *
 * Staging: when the back-end's memory is not host memory, MPI sends from and
 * receives into host copies allocated once (p->host): a send copies its
 * buffer to the host copy of its slot and kind (kept until the send is
 * waited, as the device buffer is without staging); a receive lands in one
 * host buffer and is copied to the device once it has completed. */
#include "app/td_pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "app/td_trainer.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

enum { TAG_ACT = 1, TAG_GRAD = 2 };

struct td_pipe {
  td_kernels *k;
  int pp, stage, nslots, gpipe;
  int64_t N, C;
  float *grad_in;        /* (N, C) gradient of this stage's output, from the next stage */
  float **grad_send;     /* per slot (N, C): gradient of the stage input, being sent */
  MPI_Request *req_act;  /* per slot: activation send in flight */
  MPI_Request *req_grad; /* per slot: gradient send in flight */
  float *host;           /* staging only: host_copies (N, C) host copies, see host_of */
  double idle, t_start, t_end;
  int live, live_peak;
};

int td_pipe_slots(int pp, int stage, int64_t micro, int gpipe) {
  if (pp <= 1) return 1;
  if (gpipe) return (int)micro;
  int64_t n = pp - stage < micro ? pp - stage : micro;
  return (int)(n > 0 ? n : 1);
}

/* Staging: the (N, C) host copies of a stage: one receive buffer, then one
 * send buffer per slot for the activations (all stages but the last) and for
 * the gradients (all stages but the first). */
static int64_t host_copies(int pp, int stage, int nslots) {
  return 1 + (stage < pp - 1 ? nslots : 0) + (stage > 0 ? nslots : 0);
}

int64_t td_pipe_bytes(int pp, int stage, int nslots, int64_t N, int64_t C, int staged) {
  if (pp <= 1) return 0;
  int64_t host = staged ? host_copies(pp, stage, nslots) : 0; /* td_pipe_create's p->host */
  return (int64_t)sizeof(float) * N * C * (1 + (stage > 0 ? nslots : 0) + host);
}

/* Staging: the host copy MPI uses for a receive (tag 0), or for the send of
 * kind tag (TAG_ACT, TAG_GRAD) from slot `slot`. */
static float *host_of(const td_pipe *p, int tag, int slot) {
  int64_t nact = p->stage < p->pp - 1 ? p->nslots : 0;
  int64_t i = tag == 0 ? 0 : 1 + (tag == TAG_ACT ? 0 : nact) + slot;
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
  free(p);
}

td_status td_pipe_create(struct td_trainer *t, td_pipe **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_pipe *p = calloc(1, sizeof *p);
  if (!p) TD_FAIL(TD_ERR_NOMEM, "out of memory");
  p->k = t->k;
  p->pp = t->grid->pp, p->stage = t->grid->pp_rank;
  p->gpipe = t->cfg.parallel_pp_schedule[0] == 'g';
  p->nslots = t->model->nslots;
  p->N = t->B * t->cfg.model_seq_len, p->C = t->cfg.model_dim;
  p->grad_send = calloc((size_t)p->nslots, sizeof(float *));
  p->req_act = malloc((size_t)p->nslots * sizeof(MPI_Request));
  p->req_grad = malloc((size_t)p->nslots * sizeof(MPI_Request));
  if (!p->grad_send || !p->req_act || !p->req_grad) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory");
  for (int i = 0; i < p->nslots; ++i) p->req_act[i] = p->req_grad[i] = MPI_REQUEST_NULL;
  if (p->pp > 1) { /* td_pipe_bytes counts these */
    size_t bytes = (size_t)(p->N * p->C) * sizeof(float);
    TD_CHECK_GOTO(t->k->alloc(t->k, (void **)&p->grad_in, bytes, "pipeline gradient buffer"));
    if (p->stage > 0)
      for (int i = 0; i < p->nslots; ++i)
        TD_CHECK_GOTO(t->k->alloc(t->k, (void **)&p->grad_send[i], bytes, "pipeline send buffer"));
    if (!t->k->host_memory)
      TD_CHECK_GOTO(td_alloc((void **)&p->host,
                             (size_t)host_copies(p->pp, p->stage, p->nslots) * bytes,
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

/* Blocking receive of n floats from pipeline rank `src`, counted as idle
 * time (staging: into the host copy, then to buf). */
static td_status recv_from(struct td_trainer *t, td_pipe *p, float *buf, int src, int tag) {
  int n = 0;
  TD_CHECK(td_mpi_count(p->N * p->C, &n));
  double t0 = td_now();
  const char *op = tag == TAG_ACT ? "MPI_Recv (activations from the previous pipeline stage)"
                                  : "MPI_Recv (gradients from the next pipeline stage)";
  MPI_Request r = MPI_REQUEST_NULL;
  float *into = p->host ? host_of(p, 0, 0) : buf;
  TD_MPI_CHECK(td_watched(MPI_Irecv(into, n, MPI_FLOAT, src, tag, t->grid->pp_comm, &r), op,
                          t->grid->pp_comm, &r));
  if (p->host) TD_CHECK(t->k->to_device(t->k, buf, into, (size_t)n * sizeof(float)));
  double dt = td_now() - t0;
  p->idle += dt;
  t->stats.bytes[TD_COLL_SENDRECV] += (double)n * 4.0;
  t->stats.ms[TD_COLL_SENDRECV] += 1e3 * dt;
  t->stats.calls[TD_COLL_SENDRECV]++;
  return TD_OK;
}

/* Non-blocking send of buf (N, C), the message of kind tag from `slot`;
 * *req is waited by wait_send before buf (or its host copy) is reused. */
static td_status send_to(struct td_trainer *t, td_pipe *p, const float *buf, int slot, int dst,
                         int tag, MPI_Request *req) {
  int n = 0;
  TD_CHECK(td_mpi_count(p->N * p->C, &n));
  TD_CHECK(t->k->sync(t->k));
  if (p->host) { /* staging: send the slot's host copy */
    float *h = host_of(p, tag, slot);
    TD_CHECK(t->k->to_host(t->k, h, buf, (size_t)n * sizeof(float)));
    buf = h;
  }
  TD_MPI_CHECK(MPI_Isend(buf, n, MPI_FLOAT, dst, tag, t->grid->pp_comm, req));
  t->stats.bytes[TD_COLL_SENDRECV] += (double)n * 4.0;
  t->stats.calls[TD_COLL_SENDRECV]++;
  return TD_OK;
}

static td_status wait_send(struct td_trainer *t, td_pipe *p, MPI_Request *req) {
  if (*req == MPI_REQUEST_NULL) return TD_OK;
  double t0 = td_now();
  TD_MPI_CHECK(td_watchdog_wait("MPI_Wait (send to a neighbouring pipeline stage)",
                                t->grid->pp_comm, req));
  p->idle += td_now() - t0;
  return TD_OK;
}

/* Forward of micro-batch j (rows [j·B, (j+1)·B) of the step's windows). */
static td_status fwd(struct td_trainer *t, td_pipe *p, int64_t j, double *loss) {
  int slot = (int)(j % p->nslots);
  td_model *m = t->model;
  /* the slot's output may still be on its way to the next stage */
  TD_CHECK(wait_send(t, p, &p->req_act[slot]));
  if (p->stage > 0) TD_CHECK(recv_from(t, p, td_model_stage_input(m, slot), p->stage - 1, TAG_ACT));
  td_trainer_load_micro(t, j * t->B, t->B);
  double ls = 0.0;
  TD_CHECK(td_model_forward(m, slot, t->tok_in, t->tok_tgt, &ls));
  *loss += ls;
  if (p->stage < p->pp - 1) {
    TD_CHECK(send_to(t, p, td_model_stage_output(m, slot), slot, p->stage + 1, TAG_ACT,
                     &p->req_act[slot]));
    TD_CHECK(td_test_fail_point("pipe_send")); /* a send in flight */
  }
  if (++p->live > p->live_peak) p->live_peak = p->live;
  return TD_OK;
}

/* Backward of micro-batch j. */
static td_status bwd(struct td_trainer *t, td_pipe *p, int64_t j, double global_tokens) {
  int slot = (int)(j % p->nslots);
  td_model *m = t->model;
  td_kernels *k = t->k;
  TD_CHECK(td_zero_begin_micro(t->zero, j));
  t->micro_j = j;
  if (p->stage < p->pp - 1) TD_CHECK(recv_from(t, p, p->grad_in, p->stage + 1, TAG_GRAD));
  TD_CHECK(td_model_backward(m, slot, (float)(1.0 / global_tokens), p->grad_in));
  if (p->stage > 0) {
    TD_CHECK(wait_send(t, p, &p->req_grad[slot]));
    size_t bytes = (size_t)(p->N * p->C) * sizeof(float);
    TD_CHECK(k->zero(k, p->grad_send[slot], bytes));
    TD_CHECK(k->add(k, p->grad_send[slot], p->grad_send[slot], td_model_input_grad(m), p->N * p->C));
    TD_CHECK(send_to(t, p, p->grad_send[slot], slot, p->stage - 1, TAG_GRAD, &p->req_grad[slot]));
  }
  TD_CHECK(td_trainer_embed_sync(t));
  p->live--;
  return TD_OK;
}

td_status td_pipe_train(struct td_trainer *t, double *loss_sum) {
  td_pipe *p = t->pipe;
  int64_t m = t->accum;
  double G = (double)t->cfg.training_global_batch * (double)t->cfg.model_seq_len;
  *loss_sum = 0.0;
  p->idle = 0.0;
  p->live = 0;
  p->t_start = td_now();
  if (p->gpipe || p->pp == 1) {
    for (int64_t j = 0; j < m; ++j) {
      TD_CHECK(fwd(t, p, j, loss_sum));
      if (p->pp == 1) TD_CHECK(bwd(t, p, j, G));
    }
    if (p->pp > 1)
      for (int64_t j = 0; j < m; ++j) TD_CHECK(bwd(t, p, j, G));
  } else {
    int64_t warm = p->pp - p->stage - 1;
    if (warm > m) warm = m;
    int64_t f = 0, b = 0;
    for (; f < warm; ++f) TD_CHECK(fwd(t, p, f, loss_sum));
    for (; f < m; ++f, ++b) {
      TD_CHECK(fwd(t, p, f, loss_sum));
      TD_CHECK(bwd(t, p, b, G));
    }
    for (; b < m; ++b) TD_CHECK(bwd(t, p, b, G));
  }
  for (int i = 0; i < p->nslots; ++i) {
    TD_CHECK(wait_send(t, p, &p->req_act[i]));
    TD_CHECK(wait_send(t, p, &p->req_grad[i]));
  }
  p->t_end = td_now();
  return TD_OK;
}

td_status td_pipe_forward(struct td_trainer *t, const int32_t *inputs, const int32_t *targets,
                          double *loss_sum) {
  td_pipe *p = t->pipe;
  td_model *m = t->model;
  double idle = p->idle; /* a forward-only pass is not part of the step's bubble */
  *loss_sum = 0.0;
  if (p->stage > 0) TD_CHECK(recv_from(t, p, td_model_stage_input(m, 0), p->stage - 1, TAG_ACT));
  TD_CHECK(td_model_forward(m, 0, inputs, targets, loss_sum));
  if (p->stage < p->pp - 1) {
    MPI_Request r = MPI_REQUEST_NULL;
    TD_CHECK(send_to(t, p, td_model_stage_output(m, 0), 0, p->stage + 1, TAG_ACT, &r));
    TD_CHECK(wait_send(t, p, &r));
  }
  p->idle = idle;
  TD_CHECK(td_zero_end_forward(t->zero));
  return TD_OK;
}
