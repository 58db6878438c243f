/* td_pipeline.h — the micro-batch schedule of one optimizer step across the
 * pipeline stages (pp_comm): GPipe (all forwards, then all backwards) or
 * non-interleaved 1F1B (warm-up, steady one-forward-one-backward, cool-down).
 * With pp = 1 both reduce to forward+backward per micro-batch. Activations
 * and their gradients move between neighbouring stages with non-blocking
 * point-to-point messages, posted as soon as they are computed. */
#ifndef TD_PIPELINE_H
#define TD_PIPELINE_H

#include <stdint.h>

#include "td_error.h"

struct td_trainer;
typedef struct td_pipe td_pipe;

/* Activation slots this stage needs: 1 without pipelining, m for GPipe,
 * min(m, pp − stage) for 1F1B. */
int td_pipe_slots(int pp, int stage, int64_t micro, int gpipe);
td_status td_pipe_create(struct td_trainer *t, td_pipe **out);
/* Bytes td_pipe_create allocates on `stage` with `nslots` activation slots
 * of N·C floats: the received gradient and one send buffer per slot; when
 * `staged` (the back-end's memory is not host memory) also the host copies
 * MPI works on: a receive buffer and per slot a send buffer for the
 * activations (stages but the last) and one for the gradients (stages but
 * the first). */
int64_t td_pipe_bytes(int pp, int stage, int nslots, int64_t N, int64_t C, int staged);
void td_pipe_destroy(td_pipe **p);

/* Run the forwards and backwards of the step's micro-batches (this dp
 * rank's windows, read into t->tok_win by td_trainer_step). *loss_sum: Σ per-position losses on the last
 * stage, 0 elsewhere. Collective on pp_comm and tp_comm (and dp_comm through
 * the ZeRO hooks). */
td_status td_pipe_train(struct td_trainer *t, double *loss_sum);
/* Forward-only pass of one micro-batch (evaluation, generation): the stage
 * chain passes activations down; the last stage returns the loss sum.
 * Collective on pp_comm and tp_comm. */
td_status td_pipe_forward(struct td_trainer *t, const int32_t *inputs, const int32_t *targets,
                          double *loss_sum);

/* Measured idle time (waiting for a neighbour) and busy time of the last
 * step on this stage; the peak number of micro-batches whose activations
 * were alive at once. */
void td_pipe_stats(const td_pipe *p, double *idle_s, double *step_s, int *live_peak);

#endif
