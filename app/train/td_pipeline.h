/* td_pipeline.h — the micro-batch schedule of one optimizer step across the
 * pipeline stages (pp_comm). The deck's schedule (parallel.pp_schedule:
 * gpipe, 1f1b, interleaved, zb-h1) is built as data by
 * parallel/td_schedule.h — one ordered list of F, B, W, BW, send and
 * receive actions per stage — and this module runs this stage's list. With
 * pp = 1 every schedule reduces to forward+backward per micro-batch.
 * Activations and their gradients move between neighbouring stages with
 * non-blocking point-to-point messages, posted as soon as they are
 * computed; a receive blocks, and the time spent in it is the stage's
 * measured idle time. */
#ifndef TD_PIPELINE_H
#define TD_PIPELINE_H

#include <stdint.h>

#include "app/deck/td_config.h"
#include "app/model/td_model.h"
#include "kernels/td_dcomm.h"
#include "parallel/td_coll.h"
#include "parallel/td_grid.h"
#include "parallel/td_schedule.h"
#include "parallel/td_zero.h"
#include "td_error.h"

typedef struct td_pipe td_pipe;

/* What the trainer hands the pipeline at creation: the objects a stage runs
 * on (borrowed: they outlive the pipeline) and the hooks through which it
 * takes each micro-batch's tokens and reports backward progress. The
 * pipeline calls nothing of the trainer's but these hooks. */
typedef struct td_pipe_env {
  const td_config *cfg;
  const td_grid *grid;
  td_kernels *k;
  td_model *model;
  td_zero *zero;          /* the model's units' owner (td_zero_begin_micro, _end_forward) */
  td_zero *xzero;         /* ... of the experts' units, or NULL */
  td_dcomm_kind dcomm;    /* TD_DCOMM_OFF: messages through MPI; else device channels */
  int64_t B;              /* sequences per micro-batch */
  td_coll_stats *stats;   /* where the pipeline's messages are counted */
  void *ctx;              /* the hooks' first argument */
  /* The tokens of the step's window rows [first, first + n) as micro-batch
   * inputs and targets (B·T each, this rank's positions), valid until the
   * next call. */
  void (*load_micro)(void *ctx, int64_t first, int64_t n, const int32_t **inputs,
                     const int32_t **targets);
  /* Micro-batch j's weight gradients are computed next (a BW or W). NULL:
   * nothing to do. */
  td_status (*begin_grads)(void *ctx, int64_t j);
  /* After a micro-batch's backward (and its pipeline send): the tied
   * embedding's sum (the trainer's embed_sync, with its defer_last). NULL:
   * nothing to do. */
  td_status (*after_backward)(void *ctx, int defer_last);
} td_pipe_env;

/* The deck's schedule (kind, pp, parallel.virtual_stages, micro-batches per
 * step) as action lists; the caller destroys it. */
td_status td_pipe_schedule(const td_config *cfg, td_schedule **out);
/* Activation slots `stage` needs per chunk (slots[0..v)): the peak number of
 * micro-batches the deck's schedule keeps alive there (1 without
 * pipelining; m for GPipe; min(m, pp − stage) for 1F1B; min(m, pp) for
 * zb-h1). */
td_status td_pipe_slots(const td_config *cfg, int stage, int *slots);
/* The deck's predicted bubble: the schedule simulated with each chunk's F,
 * B and W costing its number of layers (at least 1) and free messages. */
td_status td_pipe_predict(const td_config *cfg, td_sched_sim *out);
/* Whether pipeline messages are scattered over tp (each tp rank sends 1/tp
 * and the receivers all-gather it): pp > 1, tp > 1, no sequence
 * parallelism, and tp dividing a message. */
int td_pipe_scatters(const td_config *cfg);
/* The pipeline of this rank's stage; env is copied. Collective on pp_comm
 * (the device channels, when env->dcomm is on). */
td_status td_pipe_create(const td_pipe_env *env, td_pipe **out);
/* Bytes td_pipe_create allocates on `stage` (of pp, with v chunks) with
 * `nslots` activation slots of N·C floats: the received gradient and one
 * send buffer per slot where the stage sends gradients (all stages but the
 * first; every stage when interleaved); when `staged` (the back-end's memory
 * is not host memory) also the host copies MPI works on: a receive buffer
 * and per slot a send buffer for the activations (stages but the last, or
 * every stage) and one for the gradients. */
int64_t td_pipe_bytes(int pp, int stage, int v, int nslots, int64_t N, int64_t C, int staged);
void td_pipe_destroy(td_pipe **p);

/* Run the forwards and backwards of the step's micro-batches (this dp
 * rank's windows, handed over by env->load_micro); the gradient is of the
 * loss sum over loss_tokens (the global batch's counted targets: the mean).
 * *loss_sum: Σ per-position losses on the last stage, 0 elsewhere.
 * Collective on pp_comm and tp_comm (and dp_comm through the ZeRO hooks). */
td_status td_pipe_train(td_pipe *p, double loss_tokens, double *loss_sum);
/* Forward-only pass of one micro-batch (evaluation, generation): the stage
 * chain passes activations down; the last stage returns the loss sum.
 * Collective on pp_comm and tp_comm. */
td_status td_pipe_forward(td_pipe *p, const int32_t *inputs, const int32_t *targets,
                          double *loss_sum);

/* Measured idle time (waiting for a neighbour's message) and wall time of
 * the last step on this stage; the peak number of micro-batches whose
 * activations were alive at once. */
void td_pipe_stats(const td_pipe *p, double *idle_s, double *step_s, int *live_peak);

#endif
