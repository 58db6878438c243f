/* td_trainer.h — the training loop and what it owns (grid, back-end, model,
 * data, sampler, metrics), shared by train, eval and generate. */
#ifndef TD_TRAINER_H
#define TD_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "app/deck/td_app.h"
#include "app/deck/td_config.h"
#include "app/model/td_model.h"
#include "app/train/td_pipeline.h"
#include "io/td_dataset.h"
#include "io/td_sampler.h"
#include "io/td_tokenizer_h5.h"
#include "parallel/td_coll.h"
#include "parallel/td_grid.h"
#include "parallel/td_zero.h"
#include "td_log.h"

/* Bytes one rank allocates in the compute back-end, by what they hold:
 * from the ZeRO engine (td_zero_bytes), and the model's activations,
 * backward scratch and tokens plus the pipeline's message buffers. When the
 * back-end's memory is not host memory, the host staging copies MPI works on
 * are counted too: the engine's in work, the model's and the pipeline's in
 * act. */
typedef struct td_mem_plan {
  int64_t param, grad, optim, work, act;
  int64_t host;         /* optimizer.offload: the optimizer's state in host memory (not in
                           the five above; td_zero_host_bytes) */
  int64_t params_local; /* parameters of this rank's shard (td_trainer_plan) */
  int64_t startup;      /* host bytes held only while training starts: the initial
                           parameters' host copy (create_zero), 4 per local parameter,
                           beside every buffer above; freed before the first step */
  int64_t ckpt;         /* host bytes of checkpoint staging: the owned state's three
                           fp32 buffers (parameters, two moments) with checkpoint.async, one
                           on a device back-end without it, none on the CPU without it */
  int64_t live_micro;   /* activation slots (micro-batches alive at once) */
  double layer_bytes;   /* one layer's activations of one micro-batch as written
                           (td_model.layer_bytes): the planner's memory traffic */
} td_mem_plan;

enum { TD_GROUP_TP, TD_GROUP_DP, TD_GROUP_PP, TD_GROUP_EMBED, TD_GROUP_CP, TD_GROUP_COUNT };

typedef struct td_trainer {
  td_app *app;
  td_config cfg;
  td_grid *grid;
  td_kernels *k;
  td_kernels *hk;      /* optimizer.offload: the CPU back-end AdamW runs on, else NULL */
  td_model *model;
  td_zero *zero;       /* parameters, gradients, moments (ZeRO stage 0–3) */
  td_zero *xzero;      /* ... of the experts (the registry's expert space, over edp_comm);
                          NULL where this stage holds no expert */
  int64_t *xunit_begin, *xunit_end; /* xzero's units: the model's expert units, from xbegin */
  td_pipe *pipe;       /* micro-batch schedule over the pipeline stages */
  td_dcomm_kind dcomm; /* device collectives (td_trainer_dcomm_kind) */
  struct td_dcomm *dc_edp;                       /* over edp_comm (the experts' engine) */
  struct td_dcomm *dc_ep;                        /* over ep_comm (the tokens' all-to-all) */
  struct td_dcomm *dc_dp, *dc_tp, *dc_embed, *dc_cp; /* when dcomm is not TD_DCOMM_OFF
                                                  (dc_dp over dp × cp; dc_cp when cp > 1) */
  int64_t micro_j;     /* micro-batch whose backward runs now */
  int embed_pending;   /* unit 0's backward release waits for embed_sync (trainer.c)
                          (1: parameters and gradients, 2: gradients, after a W) */
  int64_t embed_micro; /* ... of this micro-batch */
  int embed_step;      /* the tied embedding's gradient is summed once a step, at its end
                          (interleaved; the ZeRO engine's step_accum) */
  td_dataset *train, *val;
  td_tokenizer_files tok; /* data.train's /tokenizer (NULLs: none), copied into checkpoints */
  td_sampler *sampler;
  /* communication per group this rank takes part in (tensor-parallel,
   * data-parallel (dp × cp: gradients), pipeline, tied embedding, context
   * parallel (keys and values): TD_GROUP_*); the metrics sum
   * them, and split them into intra- and inter-node by whether the group's
   * members are on one node or several (td_grid) */
  td_coll_stats gstats[TD_GROUP_COUNT];
  td_mem_plan mem;     /* what was allocated (metrics: param/grad/optim/work/act_bytes) */
  td_timers timers;
  int64_t step;        /* optimizer steps done */
  int64_t tokens_seen; /* global tokens consumed by those steps */
  int64_t B, accum;    /* micro-batch, micro-batches per step per rank */
  int64_t *windows;    /* (global_batch) window indices of the current step */
  int32_t *tok_in, *tok_tgt, *tok_win; /* host (B·T), (B·T), (G/dp)·(T+1) */
  /* the windows' loss masks and document starts (td_dataset_read_meta, as
   * tok_win) and the micro-batch's rows' document starts (B·T), when the
   * data has a mask or data.attend is document (else NULL) */
  uint8_t *mask_win;
  int32_t *doc_win, *tok_doc;
  double loss_tokens;  /* the last step's: targets counted in the loss over the global batch */
  /* model.moe, the last step's (every rank): the load-balancing term E·Σ f·P
   * (mean over sequences and sparse blocks, before its weight), the z-loss
   * term (mean of logsumexp² over rows and sparse blocks), and the slots an
   * expert received per sparse block: the least, the most, the mean */
  double moe_aux, moe_z, moe_tok_min, moe_tok_max, moe_tok_mean;
  double moe_dropped;  /* the fraction of the step's slots over an expert's capacity */
  struct td_choice_set *choice; /* eval.choice's examples, td_trainer_run's (NULL: none) */
  double choice_acc, choice_acc_norm;
  int has_choice;      /* the evaluation just done scored them */
  FILE *metrics;       /* rank 0 */
  struct td_tb *tb;    /* rank 0, when logging.tensorboard is set */
  int threads;
  float *ckpt_stage;    /* host staging for checkpoints (device back-ends), kept */
  int quiet;           /* no progress lines on stdout (generate prints text there) */
  char last_ckpt[TD_STR_MAX + 64]; /* the checkpoint saved last (or loaded), for the summary */
  const char *dump_path; /* --dump FILE (testing) */
  float *grad_snapshot;  /* when set: host copy of the unclipped gradients of the last step */
  double last_save_s;    /* wall seconds of the last checkpoint save (0: none yet) */
  double last_load_s;    /* wall seconds of the checkpoint load this run resumed from */
  struct td_async_save *async; /* checkpoint.async: the save in flight (checkpoint.c) */
  double save_stall_s;   /* seconds saves kept this rank from training since the last
                            metrics line (save_stall_ms) */
  double save_write_s;   /* background write seconds of the saves committed since then */
  int saves_committed;   /* saves committed since then */
  /* straggler detection (run.c): this rank's time in reading its data and
   * in waiting for other ranks outside the collectives' own count (the
   * reading's agreement), running totals; its last steps' busy and data
   * seconds (a ring of strag_cap pairs); the ranks' host names and the
   * report's buffer (rank 0) */
  double strag_data_s, strag_wait_s;
  double *strag_ring;
  int strag_cap, strag_n, strag_pos;
  char (*hosts)[64];
  double *strag_buf;
  double logged_cb;      /* this rank's collective bytes and step at the last metrics line */
  int64_t logged_step;   /* (comm_step_bytes: the traffic since, per step) */
} td_trainer;

/* Set up everything for cfg (collective on app->world): grid, back-end,
 * model (initialised), datasets per `need_train`/`need_val`; the watchdog
 * (run.watchdog_s) runs until td_trainer_destroy. */
td_status td_trainer_create(td_app *app, const td_config *cfg, int need_train, int need_val,
                            td_trainer **out);
void td_trainer_destroy(td_trainer **t);
/* The memory td_trainer_create would allocate on this rank of grid, computed
 * by the same code without allocating (a size query of the model and the
 * ZeRO engine). Not collective. For `trident check`. */
td_status td_trainer_plan(const td_config *cfg, const td_grid *grid, td_dcomm_kind dcomm,
                          td_mem_plan *out);
/* Whether this job's collectives on back-end buffers use device
 * communicators (parallel/td_coll.h): NCCL when run.device is cuda, this
 * build's CUDA module has NCCL and no two ranks of a node share a GPU;
 * the test implementation on the CPU under TD_TEST_DCOMM=1; else
 * TD_DCOMM_OFF (MPI, on host copies for a GPU). Every rank's own answer is
 * agreed over the world: all use them or none does. `why` (n bytes) says
 * why not, for the log, when a GPU run goes without. Collective. */
td_status td_trainer_dcomm_kind(td_app *app, const td_config *cfg, int local_size,
                                td_dcomm_kind *out, char *why, size_t n);
/* This rank's place on its node: its rank among the ranks sharing the node
 * (MPI_COMM_TYPE_SHARED) and their number. Collective on app->world. */
td_status td_trainer_node_place(td_app *app, int *local_rank, int *local_size);
/* The GPU a rank with this local rank drives under run.device: cuda (local
 * rank mod the visible devices, counted into *visible when not NULL); -1
 * for another device, a build without CUDA or no visible GPU. Not
 * collective. */
int td_trainer_gpu_of(const td_config *cfg, int local_rank, int *visible);
/* Host bytes this rank allocates to stage its saves (td_mem_plan.ckpt;
 * app/train/checkpoint.c allocates them): with checkpoint.async the owned
 * state's parameters and two moments (3 × 4 bytes per owned parameter);
 * without it one such fp32 buffer on a device back-end (its saves copy each
 * of the three through it), none where the state is host memory (the saves
 * write from it). Not collective. */
int64_t td_trainer_ckpt_stage_bytes(const td_config *c, const td_zero *z);
/* Learning rate of optimizer step s (0-based). */
double td_lr_at(const td_config *cfg, int64_t s);
/* One optimizer step: forward/backward over the micro-batches, gradient
 * reduction, clipping, AdamW. *loss is the global mean loss, *norm the global
 * gradient norm before clipping. Collective on the world. */
td_status td_trainer_step(td_trainer *t, double *loss, double *norm, double *lr);
/* Validation loss by the docs/architecture.md protocol. Collective on the world. */
td_status td_trainer_eval(td_trainer *t, double *loss, int64_t *ntokens);
/* Fill the host token buffers of a micro-batch (tok_in, tok_tgt with -1
 * where the mask leaves a target out, tok_doc) from rows [first, first+n)
 * of tok_win / mask_win / doc_win (rows past n repeat the last one). */
void td_trainer_load_micro(td_trainer *t, int64_t first, int64_t n);
/* Targets counted in the loss among the n windows read last (their masks; T
 * per window without one). */
int64_t td_trainer_loss_tokens(const td_trainer *t, int64_t n);
/* Read the windows w[0..n) of d into t->tok_win (rows of T+1 tokens,
 * n ≤ global_batch/dp) and agree on the outcome: a window one rank cannot
 * read (a file changed under the run) ends every rank with that rank's
 * message and exit 2, before the step's collectives. Collective on the world. */
td_status td_trainer_read_windows(td_trainer *t, td_dataset *d, const int64_t *w, int64_t n);
/* The training loop: steps, logging, evaluation, checkpoints. */
td_status td_trainer_run(td_trainer *t);

#endif
