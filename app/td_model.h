/* td_model.h — GPT-2 forward and backward for one rank's shard.
 *
 * The model computes the layers of its pipeline stage with tensor-parallel
 * local widths taken from the registry (C/tp, 3C/tp, 4C/tp, heads/tp, V/tp);
 * parallelism changes which shard a rank holds, never the math. Buffers live
 * in the compute back-end's memory and are allocated once, at creation. */
#ifndef TD_MODEL_H
#define TD_MODEL_H

#include <stdint.h>

#include "app/td_config.h"
#include "app/td_registry.h"
#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "parallel/td_grid.h"

/* Activations of one micro-batch through one stage (all (B·T, ·) row-major). */
typedef struct td_acts {
  float *encoded;                  /* (N, C) embedding output (first stage) */
  float *ln1, *ln1_mean, *ln1_rstd;/* per layer: (N, C), (N), (N) */
  float *qkv;                      /* per layer (N, 3C/tp) */
  float *atty;                     /* per layer (N, C/tp) */
  float *att;                      /* per layer (B, NH/tp, T, T) */
  float *res2;                     /* per layer (N, C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch;                      /* per layer (N, 4C/tp) */
  float *fch_gelu;                 /* per layer (N, 4C/tp) */
  float *res3;                     /* per layer (N, C) block output */
  float *lnf, *lnf_mean, *lnf_rstd;/* (N, C), (N), (N) last stage */
  float *logits;                   /* (N, V/tp) last stage; gradient in place */
  float *rowmax, *sumexp, *tlogit; /* (N) cross-entropy statistics */
  float *rowloss;                  /* (N) loss per position (host-visible copy) */
} td_acts;

typedef struct td_model td_model;

/* Units: contiguous ranges of the flat buffers that are gathered, reduced and
 * released together: unit 0 = {wte, wpe}, unit 1 + l = block l, unit L + 1 =
 * {ln_f} (empty ranges where this stage holds nothing). */
typedef enum { TD_PHASE_FORWARD, TD_PHASE_BACKWARD } td_phase;
typedef struct td_model_hooks {
  void *ctx;
  /* Before unit u is used in `phase`: make m->unit_param[u] (and, in backward,
   * m->unit_grad[u]) valid. */
  td_status (*acquire)(void *ctx, td_model *m, int u, td_phase phase);
  /* After unit u's work in `phase`; in backward its gradients for this
   * micro-batch are complete. */
  td_status (*release)(void *ctx, td_model *m, int u, td_phase phase);
} td_model_hooks;

struct td_model {
  const td_config *cfg;
  td_registry *reg;
  td_kernels *k;
  td_grid *grid;
  td_coll_stats *stats;
  /* sizes */
  int64_t B, T, C, V, Vs, v0, L_first, L_count, NH, HS;
  int64_t C3, Cl, F; /* local 3C/tp, C/tp, 4C/tp */
  int first_stage, last_stage;
  /* activations and backward scratch */
  td_acts a;
  float *dres, *dtmp, *dln, *dqkv, *datty, *dfch, *datt_scratch;
  float *rowstat_host;   /* (3N) host staging for cross-entropy statistics */
  int32_t *inputs, *targets; /* (N) tokens of the current micro-batch */
  double act_bytes;      /* bytes of activations + scratch */
  int64_t valid_rows;    /* positions counted in the loss sum (default B·T;
                            evaluation of a partial micro-batch lowers it) */
  /* units (see above): flat ranges and where their elements live now */
  int nunits;
  int64_t *unit_begin, *unit_end;
  float **unit_param, **unit_grad; /* element unit_begin[u] of params / grads */
  td_model_hooks hooks;            /* place units (the trainer's ZeRO engine) */
};

/* Unit of a parameter. */
int td_model_unit_of(const td_model *m, const td_param *p);
/* Point every unit at the flat buffers params / grads (grads may be NULL). */
void td_model_units_flat(td_model *m, float *params, float *grads);

/* Allocate the model for this rank: registry, units, activations for
 * micro-batches of B sequences. Parameters, gradients and optimizer state
 * live elsewhere (td_zero); the hooks place each unit before use. */
td_status td_model_create(const td_config *cfg, td_grid *grid, td_kernels *k,
                          td_coll_stats *stats, int64_t B, td_model **out);
void td_model_destroy(td_model **m);
/* Pointer to tensor p inside a flat buffer over the rank's local space. */
static inline float *td_view(float *flat, const td_param *p) { return flat + p->offset; }

/* Forward one micro-batch of B sequences: inputs/targets are (B·T) host
 * tokens. On the last stage, *loss_sum = Σ per-position losses (the caller
 * divides by the global token count). Collective on tp_comm. */
td_status td_model_forward(td_model *m, const int32_t *inputs, const int32_t *targets,
                           double *loss_sum);
/* Backward of the last forward, accumulating into m->grads; loss_scale is
 * d(global loss)/d(per-position loss) = 1 / (global tokens). Collective on tp_comm. */
td_status td_model_backward(td_model *m, float loss_scale);
/* Forward only, returning per-position losses summed (evaluation). */
td_status td_model_loss(td_model *m, const int32_t *inputs, const int32_t *targets,
                        double *loss_sum);
/* Logits of position `pos` of sequence 0 after a forward with targets NULL
 * allowed: copies V floats (full vocabulary, gathered over tp) to host out. */
td_status td_model_logits_at(td_model *m, int64_t pos, float *out);

#endif
