/* td_registry.h — the parameter registry (docs/architecture.md, "Model").
 *
 * One table per model family describes every parameter: its Hugging Face name
 * (GPT2Model's, or LlamaForCausalLM's state dict), global shape,
 * how tensor parallelism splits it, its pipeline stage, its init rule and
 * whether weight decay applies. Sharding, checkpoint hyperslabs,
 * initialisation and the optimizer all read it, and per-rank buffers are laid
 * out from it: parameters, gradients and the two AdamW moments are each one
 * allocation with a view per tensor at `offset`. */
#ifndef TD_REGISTRY_H
#define TD_REGISTRY_H

#include <stdint.h>

#include "app/deck/td_config.h"
#include "td_error.h"

typedef enum {
  TD_INIT_NORMAL,      /* N(0, 0.02) */
  TD_INIT_NORMAL_RESID,/* N(0, 0.02 / sqrt(2·layers)): attn.c_proj, mlp.c_proj */
  TD_INIT_ZEROS,       /* biases, LayerNorm shifts */
  TD_INIT_ONES         /* LayerNorm scales */
} td_init_kind;

/* Kinds of parameters. GPT-2: WTE .. LNF_B. LLaMA: WTE (embed_tokens), the
 * block kinds ATTN_NORM .. DOWN, LNF_W (model.norm) and LM_HEAD (untied). */
typedef enum {
  TD_PK_WTE, TD_PK_WPE, TD_PK_LN1_W, TD_PK_LN1_B, TD_PK_QKV_W, TD_PK_QKV_B,
  TD_PK_ATTPROJ_W, TD_PK_ATTPROJ_B, TD_PK_LN2_W, TD_PK_LN2_B, TD_PK_FC_W, TD_PK_FC_B,
  TD_PK_FCPROJ_W, TD_PK_FCPROJ_B, TD_PK_LNF_W, TD_PK_LNF_B,
  TD_PK_ATTN_NORM, TD_PK_Q_W, TD_PK_K_W, TD_PK_V_W, TD_PK_O_W, TD_PK_MLP_NORM, TD_PK_GATE_W,
  TD_PK_UP_W, TD_PK_DOWN_W, TD_PK_LM_HEAD,
  /* a sparse block (model.moe): the router; per expert, LLaMA (Mixtral's
   * names) w1 (gate), w2 (down), w3 (up), GPT-2 c_fc and c_proj with biases */
  TD_PK_ROUTER, TD_PK_EXP_W1, TD_PK_EXP_W2, TD_PK_EXP_W3, TD_PK_EXP_FC_W, TD_PK_EXP_FC_B,
  TD_PK_EXP_PROJ_W, TD_PK_EXP_PROJ_B, TD_PK_COUNT
} td_param_kind;

typedef struct td_param {
  char name[64];        /* "h.3.attn.c_attn.weight", "model.layers.3.mlp.up_proj.weight" */
  td_param_kind kind;
  int layer;            /* block index, -1 for embeddings, final norm and head */
  int expert;           /* expert index of TD_PK_EXP_*, else -1 */
  int ndim;             /* 1 or 2 */
  int64_t shape[2];     /* global logical shape (unused dims = 1) */
  int split_dim;        /* -1 replicated across tp; else the dimension split */
  int split_blocks;     /* 1, or 3 for GPT-2's fused QKV (interleaved blocks) */
  int64_t split_pad;    /* global extent of split_dim padded to a multiple of tp
                           (wte: vocabulary padded; others: exact) */
  int stage;            /* pipeline stage holding it (wte: first, see tied) */
  int tied_last;        /* also lives on the last stage (tied LM head) */
  int decay;            /* weight decay applies (2-D weights) */
  td_init_kind init;
  /* this rank's shard */
  int present;          /* held on this rank's stage */
  int64_t local_shape[2];
  int64_t local_numel;  /* 0 when not present */
  int64_t offset;       /* element offset in the rank's flat buffers (an expert's: in the
                           expert space, from the registry's xbegin) */
} td_param;

typedef struct td_registry {
  int n;
  td_param *p;          /* n entries, model order */
  int64_t total_global; /* parameters of the model (global, unpadded) */
  int64_t total_local;  /* elements this rank holds (padded shards) */
  int64_t xbegin;       /* the expert space [xbegin, total_local): the experts' tensors
                           (model.moe), after every dense one; their own ZeRO engine
                           (over edp_comm) holds them. total_local without experts */
  int tp, tp_rank, pp, pp_rank;
  int ep, ep_rank;      /* expert parallelism: experts [ep_rank·E/ep, (ep_rank+1)·E/ep)
                           are present here */
  int nlayers;
  int *layer_first;     /* (nlayers + 1) the first entry of each block (entries of block l:
                           [layer_first[l], layer_first[l + 1])): lookups search one block */
} td_registry;

/* Build the registry for cfg as seen from tensor rank tp_rank of tp and
 * pipeline stage pp_rank of pp. */
td_status td_registry_create(const td_config *cfg, int tp, int tp_rank, int pp, int pp_rank,
                             td_registry **out);
/* ... and of expert-parallel rank ep_rank of ep (td_registry_create: ep 1). */
td_status td_registry_create_ep(const td_config *cfg, int tp, int tp_rank, int pp, int pp_rank,
                                int ep, int ep_rank, td_registry **out);
void td_registry_destroy(td_registry **r);
/* The parameter of kind k in block `layer` (-1 for non-block ones), or NULL
 * (an expert kind: expert 0's). */
td_param *td_registry_find(const td_registry *r, td_param_kind k, int layer);
/* ... of expert e (TD_PK_EXP_*), or NULL. */
td_param *td_registry_find_expert(const td_registry *r, td_param_kind k, int layer, int e);
/* Global flat index (row-major over the global shape) of local element
 * (i, j) of p's shard, or -1 if it is padding. */
int64_t td_param_global_index(const td_registry *r, const td_param *p, int64_t i, int64_t j);
/* Fill local parameters from the counter-based generator keyed by
 * (seed, name, global element index); padding is 0. params: host memory,
 * r->total_local floats. */
void td_registry_init_params(const td_registry *r, const td_config *cfg, float *params);

#endif
