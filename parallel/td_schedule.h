/* td_schedule.h — pipeline schedules as data, and their simulator.
 *
 * A builder turns (schedule, pp stages, v chunks per stage, m micro-batches)
 * into one ordered list of actions per stage: F, B, W (or BW, a whole
 * backward) of a (chunk, micro-batch), and the messages between neighbouring
 * stages (send/recv of activations and of their gradients). The pipeline
 * (app/train/pipeline.c) runs these lists; the simulator times them with per-action
 * costs; the memory model counts the micro-batches each list keeps alive.
 * Nothing here communicates or allocates device memory.
 *
 * Chunks: the model's layers are cut into pp·v model chunks; stage s holds
 * model chunks s, s + pp, s + 2·pp, ... (its local chunks 0..v−1; model chunk
 * k = c·pp + s). Activations flow from model chunk k to k + 1 (stage
 * (s + 1) mod pp), gradients back. Without interleaving v = 1.
 *
 * Schedules:
 *   GPIPE        all forwards, then all backwards (BW).
 *   1F1B         pp − s − 1 warm-up forwards, then one forward / one backward.
 *   INTERLEAVED  1F1B over v chunks per stage (Narayanan et al. 2021): the
 *                k-th forward of a stage runs chunk (k mod pp·v) / pp of
 *                micro-batch (k / pp·v)·pp + k mod pp; warm-up
 *                2·(pp − s − 1) + (v − 1)·pp forwards. Needs m % pp == 0.
 *   ZBH1         1F1B's order with the backward split into B (input
 *                gradient, sent on at once) and W (weight gradient): stage s
 *                runs W of micro-batch j − s after the B of micro-batch j, so
 *                the later stages return gradients sooner and the W's fill
 *                the time a stage would wait (Qi et al. 2024, ZB-H1). Every
 *                stage keeps up to min(m, pp) micro-batches alive: 1F1B's
 *                peak, which 1F1B reaches on the first stage only.
 *
 * Bubble: the simulator reports, per stage, busy (compute) time and idle
 * time (makespan − busy). `bubble` is Megatron's definition, idle over ideal
 * compute time, max over stages: (p−1)/m for GPipe and 1F1B, (p−1)/(v·m) for
 * interleaved, (p−1)/(3m) for ZB-H1 when F = B = W and messages are free.
 * `idle_frac` is idle over the makespan, (p−1)/(m+p−1) for 1F1B: the
 * fraction of a step a stage waits, comparable with the measured pp_bubble. */
#ifndef TD_SCHEDULE_H
#define TD_SCHEDULE_H

#include <stdint.h>

#include "td_error.h"

typedef enum {
  TD_SCHED_GPIPE,
  TD_SCHED_1F1B,
  TD_SCHED_INTERLEAVED,
  TD_SCHED_ZBH1,
  TD_SCHED_COUNT
} td_sched_kind;

typedef enum {
  TD_OP_F,         /* forward of (chunk, micro) */
  TD_OP_BW,        /* whole backward: input and weight gradients */
  TD_OP_B,         /* input gradient only (split backward) */
  TD_OP_W,         /* weight gradient only (split backward) */
  TD_OP_SEND_ACT,  /* activations of (chunk, micro) to the next model chunk */
  TD_OP_RECV_ACT,  /* activations for (chunk, micro) from the previous model chunk */
  TD_OP_SEND_GRAD, /* input gradient of (chunk, micro) to the previous model chunk */
  TD_OP_RECV_GRAD  /* output gradient for (chunk, micro) from the next model chunk */
} td_sched_op;

typedef struct td_sched_action {
  uint8_t op;     /* td_sched_op */
  uint8_t pad;
  uint16_t chunk; /* local chunk 0..v−1 */
  int32_t micro;  /* 0..m−1 */
} td_sched_action;

typedef struct td_schedule {
  td_sched_kind kind;
  int pp, v;
  int64_t m;
  int64_t *count;          /* (pp) actions per stage */
  td_sched_action **acts;  /* (pp) per stage, count[s] actions in order */
} td_schedule;

/* "gpipe", "1f1b", "interleaved", "zb-h1" → kind; -1 if unknown. */
int td_sched_kind_parse(const char *name);
const char *td_sched_kind_name(td_sched_kind kind);

/* Build the schedule's action lists for pp ≥ 1 stages, v ≥ 1 chunks per
 * stage (1 unless INTERLEAVED, which needs v ≥ 2, pp ≥ 2 and m % pp == 0)
 * and m ≥ 1 micro-batches. TD_ERR_USAGE names a violated constraint. */
td_status td_schedule_build(td_sched_kind kind, int pp, int v, int64_t m, td_schedule **out);
void td_schedule_destroy(td_schedule **s);

/* Model chunk of (stage, local chunk). */
static inline int td_sched_model_chunk(const td_schedule *s, int stage, int chunk) {
  return chunk * s->pp + stage;
}

/* Peak number of micro-batches whose activations a (stage, chunk) keeps at
 * once: from its F until its BW, or until its W in a split backward. */
int64_t td_schedule_live_peak(const td_schedule *s, int stage, int chunk);
/* Peak number of micro-batches between their B and their W (0 without a
 * split backward). */
int64_t td_schedule_wait_peak(const td_schedule *s, int stage, int chunk);

/* Per-action costs for the simulator: seconds (or any unit) of one F, B and
 * W of one chunk (BW costs b + w), uniform, or per (stage, chunk) from the
 * arrays (index stage·v + chunk) when given; p2p: latency of one message
 * (a send costs its sender nothing; the receiver may start at send + p2p). */
typedef struct td_sched_costs {
  double f, b, w, p2p;
  const double *fs, *bs, *ws; /* optional (pp·v) */
} td_sched_costs;

typedef struct td_sched_sim {
  double makespan;  /* time of the last action's end, all stages from 0 */
  double bubble;    /* max over stages of idle / busy (Megatron's bubble fraction) */
  double idle_frac; /* max over stages of idle / makespan */
} td_sched_sim;

/* Time the lists: each stage runs its actions in order, a receive waits for
 * its message. busy, idle: (pp) per stage, or NULL. TD_ERR_INTERNAL if the
 * lists deadlock (a receive whose send never comes). */
td_status td_schedule_simulate(const td_schedule *s, const td_sched_costs *c, td_sched_sim *out,
                               double *busy, double *idle);

/* ---- channels (the device path) ----------------------------------------------
 * NCCL's point-to-point calls block their stream until the peer's matching
 * call runs, and match the i-th send between two ranks with the i-th
 * receive (no tags). The device path therefore gives every link (stage i to
 * (i + 1) mod pp) two one-way channels, each its own communicator and
 * stream: activations towards the higher stage (direction 0), gradients
 * back (direction 1). A send then waits only for its own receive, never
 * behind a receive of its stage, so the device runs a list exactly as MPI
 * does with non-blocking sends and blocking receives — provided each
 * channel's messages are sent and received in the same order. */
/* The channel of a message action of `stage`. */
void td_sched_channel(const td_schedule *s, int stage, int op, int *link, int *dir);
/* Proof for the device path: every channel carries its messages in one
 * order at both ends, and the lists run to the end when sends never block
 * (td_schedule_simulate). TD_ERR_INTERNAL naming schedule and channel. */
td_status td_schedule_check_channels(const td_schedule *s);

#endif
