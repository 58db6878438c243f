/* registry.c — the parameter tables of the model families (GPT-2, LLaMA) and
 * their per-rank shards. */
#include "app/model/td_registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td_rng.h"

/* Static description of each kind: name, split, init. One row per kind; the
 * registry instantiates the family's kinds per layer. */
typedef struct {
  const char *name; /* after "h.<i>." / "model.layers.<i>." for block params */
  int block;        /* belongs to a transformer block */
  int split_dim, split_blocks;
  td_init_kind init;
} kind_info;

static const kind_info k_kinds[TD_PK_COUNT] = {
    /* GPT-2 (Conv1D: (in, out)) */
    [TD_PK_WTE] = {"wte.weight", 0, 0, 1, TD_INIT_NORMAL},
    [TD_PK_WPE] = {"wpe.weight", 0, -1, 1, TD_INIT_NORMAL},
    [TD_PK_LN1_W] = {"ln_1.weight", 1, -1, 1, TD_INIT_ONES},
    [TD_PK_LN1_B] = {"ln_1.bias", 1, -1, 1, TD_INIT_ZEROS},
    [TD_PK_QKV_W] = {"attn.c_attn.weight", 1, 1, 3, TD_INIT_NORMAL},
    [TD_PK_QKV_B] = {"attn.c_attn.bias", 1, 0, 3, TD_INIT_ZEROS},
    [TD_PK_ATTPROJ_W] = {"attn.c_proj.weight", 1, 0, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_ATTPROJ_B] = {"attn.c_proj.bias", 1, -1, 1, TD_INIT_ZEROS},
    [TD_PK_LN2_W] = {"ln_2.weight", 1, -1, 1, TD_INIT_ONES},
    [TD_PK_LN2_B] = {"ln_2.bias", 1, -1, 1, TD_INIT_ZEROS},
    [TD_PK_FC_W] = {"mlp.c_fc.weight", 1, 1, 1, TD_INIT_NORMAL},
    [TD_PK_FC_B] = {"mlp.c_fc.bias", 1, 0, 1, TD_INIT_ZEROS},
    [TD_PK_FCPROJ_W] = {"mlp.c_proj.weight", 1, 0, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_FCPROJ_B] = {"mlp.c_proj.bias", 1, -1, 1, TD_INIT_ZEROS},
    [TD_PK_LNF_W] = {"ln_f.weight", 0, -1, 1, TD_INIT_ONES},
    [TD_PK_LNF_B] = {"ln_f.bias", 0, -1, 1, TD_INIT_ZEROS},
    /* LLaMA (nn.Linear: (out, in)); q/k/v and gate/up split by output (whole
     * heads), o and down by input, embedding and head by vocabulary */
    [TD_PK_ATTN_NORM] = {"input_layernorm.weight", 1, -1, 1, TD_INIT_ONES},
    [TD_PK_Q_W] = {"self_attn.q_proj.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_K_W] = {"self_attn.k_proj.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_V_W] = {"self_attn.v_proj.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_O_W] = {"self_attn.o_proj.weight", 1, 1, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_MLP_NORM] = {"post_attention_layernorm.weight", 1, -1, 1, TD_INIT_ONES},
    [TD_PK_GATE_W] = {"mlp.gate_proj.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_UP_W] = {"mlp.up_proj.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_DOWN_W] = {"mlp.down_proj.weight", 1, 1, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_LM_HEAD] = {"lm_head.weight", 0, 0, 1, TD_INIT_NORMAL},
    /* sparse blocks (Mixtral): the router replicated over tp (every tp rank
     * routes the same rows); each expert split like the MLP, w1 and w3 by
     * output, w2 by input */
    [TD_PK_ROUTER] = {"block_sparse_moe.gate.weight", 1, -1, 1, TD_INIT_NORMAL},
    [TD_PK_EXP_W1] = {"w1.weight", 1, 0, 1, TD_INIT_NORMAL},
    [TD_PK_EXP_W2] = {"w2.weight", 1, 1, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_EXP_W3] = {"w3.weight", 1, 0, 1, TD_INIT_NORMAL},
    /* GPT-2's experts: its MLP (Conv1D) under h.N.mlp.experts.E. */
    [TD_PK_EXP_FC_W] = {"c_fc.weight", 1, 1, 1, TD_INIT_NORMAL},
    [TD_PK_EXP_FC_B] = {"c_fc.bias", 1, 0, 1, TD_INIT_ZEROS},
    [TD_PK_EXP_PROJ_W] = {"c_proj.weight", 1, 0, 1, TD_INIT_NORMAL_RESID},
    [TD_PK_EXP_PROJ_B] = {"c_proj.bias", 1, -1, 1, TD_INIT_ZEROS},
};

/* The blocks' kinds of each family, in model order. */
static const td_param_kind k_gpt2_block[] = {
    TD_PK_LN1_W, TD_PK_LN1_B, TD_PK_QKV_W, TD_PK_QKV_B, TD_PK_ATTPROJ_W, TD_PK_ATTPROJ_B,
    TD_PK_LN2_W, TD_PK_LN2_B, TD_PK_FC_W, TD_PK_FC_B, TD_PK_FCPROJ_W, TD_PK_FCPROJ_B};
static const td_param_kind k_llama_block[] = {TD_PK_ATTN_NORM, TD_PK_Q_W, TD_PK_K_W,
                                              TD_PK_V_W, TD_PK_O_W, TD_PK_MLP_NORM,
                                              TD_PK_GATE_W, TD_PK_UP_W, TD_PK_DOWN_W};
/* A sparse LLaMA block (Mixtral): the block without its MLP, then the
 * router; each expert's w1, w2, w3 follow. */
static const td_param_kind k_moe_block[] = {TD_PK_ATTN_NORM, TD_PK_Q_W, TD_PK_K_W, TD_PK_V_W,
                                            TD_PK_O_W, TD_PK_MLP_NORM, TD_PK_ROUTER};
static const td_param_kind k_expert[] = {TD_PK_EXP_W1, TD_PK_EXP_W2, TD_PK_EXP_W3};
/* ... GPT-2's: the block without its MLP, the router (h.N.mlp.gate.weight),
 * and each expert's c_fc and c_proj with their biases */
static const td_param_kind k_gpt2_moe_block[] = {TD_PK_LN1_W, TD_PK_LN1_B, TD_PK_QKV_W,
                                                 TD_PK_QKV_B, TD_PK_ATTPROJ_W, TD_PK_ATTPROJ_B,
                                                 TD_PK_LN2_W, TD_PK_LN2_B, TD_PK_ROUTER};
static const td_param_kind k_gpt2_expert[] = {TD_PK_EXP_FC_W, TD_PK_EXP_FC_B, TD_PK_EXP_PROJ_W,
                                              TD_PK_EXP_PROJ_B};

static void global_shape(td_param_kind k, const td_model_dims *d, int *ndim, int64_t s[2]) {
  int64_t C = d->C, F = d->F, Cq = d->H * d->HS, Ckv = d->KV * d->HS, Fe = d->Fe;
  s[0] = s[1] = 1;
  *ndim = 2;
  switch (k) {
    case TD_PK_WTE: case TD_PK_LM_HEAD: s[0] = d->V, s[1] = C; break;
    case TD_PK_WPE: s[0] = d->T, s[1] = C; break;
    case TD_PK_QKV_W: s[0] = C, s[1] = 3 * C; break;
    case TD_PK_ATTPROJ_W: s[0] = C, s[1] = C; break;
    case TD_PK_FC_W: s[0] = C, s[1] = F; break;
    case TD_PK_FCPROJ_W: s[0] = F, s[1] = C; break;
    case TD_PK_Q_W: s[0] = Cq, s[1] = C; break;
    case TD_PK_K_W: case TD_PK_V_W: s[0] = Ckv, s[1] = C; break;
    case TD_PK_O_W: s[0] = C, s[1] = Cq; break;
    case TD_PK_GATE_W: case TD_PK_UP_W: s[0] = F, s[1] = C; break;
    case TD_PK_DOWN_W: s[0] = C, s[1] = F; break;
    case TD_PK_ROUTER: s[0] = d->E, s[1] = C; break;
    case TD_PK_EXP_W1: case TD_PK_EXP_W3: s[0] = Fe, s[1] = C; break;
    case TD_PK_EXP_W2: s[0] = C, s[1] = Fe; break;
    case TD_PK_EXP_FC_W: s[0] = C, s[1] = Fe; break;
    case TD_PK_EXP_PROJ_W: s[0] = Fe, s[1] = C; break;
    case TD_PK_EXP_FC_B: *ndim = 1, s[0] = Fe; break;
    case TD_PK_QKV_B: *ndim = 1, s[0] = 3 * C; break;
    case TD_PK_FC_B: *ndim = 1, s[0] = F; break;
    default: *ndim = 1, s[0] = C; break;
  }
}

/* The stage holding `layer`: that of its model chunk (chunk k on stage k mod pp). */
static int stage_of_layer(const td_config *cfg, int layer) {
  int64_t n = cfg->parallel_pp * cfg->parallel_virtual_stages;
  for (int64_t k = 0; k < n; ++k) {
    int64_t first, count;
    td_config_chunk_layers(cfg, (int)k, &first, &count);
    if (layer >= first && layer < first + count) return (int)(k % cfg->parallel_pp);
  }
  return (int)cfg->parallel_pp - 1;
}

static void add_param(td_registry *r, const td_config *cfg, const td_model_dims *d,
                      td_param_kind k, int layer, int expert) {
  td_param *p = &r->p[r->n++];
  memset(p, 0, sizeof *p);
  const kind_info *ki = &k_kinds[k];
  p->kind = k;
  p->layer = layer;
  p->expert = expert;
  if (expert >= 0 && d->llama)
    snprintf(p->name, sizeof p->name, "model.layers.%d.block_sparse_moe.experts.%d.%s", layer,
             expert, ki->name);
  else if (expert >= 0)
    snprintf(p->name, sizeof p->name, "h.%d.mlp.experts.%d.%s", layer, expert, ki->name);
  else if (k == TD_PK_ROUTER && !d->llama)
    snprintf(p->name, sizeof p->name, "h.%d.mlp.gate.weight", layer);
  else if (ki->block)
    snprintf(p->name, sizeof p->name, "%s%d.%s", d->llama ? "model.layers." : "h.", layer,
             ki->name);
  else if (d->llama && k != TD_PK_LM_HEAD)
    snprintf(p->name, sizeof p->name, "%s",
             k == TD_PK_WTE ? "model.embed_tokens.weight" : "model.norm.weight");
  else
    snprintf(p->name, sizeof p->name, "%s", ki->name);
  global_shape(k, d, &p->ndim, p->shape);
  p->split_dim = r->tp > 1 ? ki->split_dim : -1;
  p->split_blocks = ki->split_blocks;
  p->init = ki->init;
  p->decay = p->ndim == 2;
  int last = (int)cfg->parallel_pp - 1;
  if (k == TD_PK_WTE || k == TD_PK_WPE)
    p->stage = 0;
  else if (layer < 0) /* final norm, head */
    p->stage = last;
  else
    p->stage = stage_of_layer(cfg, layer);
  p->tied_last = k == TD_PK_WTE && d->tied && last > 0;
  p->present = p->stage == r->pp_rank || (p->tied_last && r->pp_rank == last);
  /* expert parallelism: this rank's ep_rank holds experts [ep_rank·E/ep, (ep_rank+1)·E/ep) */
  if (expert >= 0 && expert / (int)(d->E / r->ep) != r->ep_rank) p->present = 0;
  p->local_shape[0] = p->shape[0];
  p->local_shape[1] = p->shape[1];
  p->split_pad = p->split_dim >= 0 ? p->shape[p->split_dim] : 0;
  if (p->split_dim >= 0) {
    int64_t ext = p->shape[p->split_dim];
    int64_t unit = (int64_t)r->tp * p->split_blocks;
    p->split_pad = (ext + unit - 1) / unit * unit;
    p->local_shape[p->split_dim] = p->split_pad / r->tp;
  }
  p->local_numel = p->present ? p->local_shape[0] * p->local_shape[1] : 0;
  r->total_global += p->shape[0] * p->shape[1];
}

/* The local layout: the dense tensors in model order, then the experts' (the
 * expert space from r->xbegin), every view 16-float aligned (64 bytes). */
static void lay_out(td_registry *r) {
  r->total_local = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) r->xbegin = r->total_local;
    for (int i = 0; i < r->n; ++i) {
      td_param *p = &r->p[i];
      if ((p->expert >= 0) != pass) continue;
      p->offset = r->total_local;
      r->total_local += (p->local_numel + 15) / 16 * 16;
    }
  }
}

td_status td_registry_create(const td_config *cfg, int tp, int tp_rank, int pp, int pp_rank,
                             td_registry **out) {
  return td_registry_create_ep(cfg, tp, tp_rank, pp, pp_rank, 1, 0, out);
}

td_status td_registry_create_ep(const td_config *cfg, int tp, int tp_rank, int pp, int pp_rank,
                                int ep, int ep_rank, td_registry **out) {
  *out = NULL;
  td_model_dims d;
  td_config_dims(cfg, &d);
  const td_param_kind *blk = d.llama ? k_llama_block : k_gpt2_block;
  int nblk = d.llama ? (int)(sizeof k_llama_block / sizeof *blk)
                     : (int)(sizeof k_gpt2_block / sizeof *blk);
  td_registry *r = calloc(1, sizeof *r);
  int64_t L = cfg->model_layers;
  int64_t max_n = 4 + (nblk + 1 + 4 * d.E) * L + 2;
  if (r) r->p = calloc((size_t)max_n, sizeof *r->p);
  if (!r || !r->p) {
    if (r) free(r);
    TD_FAIL(TD_ERR_NOMEM, "out of memory for the parameter registry");
  }
  r->tp = tp, r->tp_rank = tp_rank, r->pp = pp, r->pp_rank = pp_rank;
  r->ep = ep, r->ep_rank = ep_rank;
  add_param(r, cfg, &d, TD_PK_WTE, -1, -1);
  if (!d.llama) add_param(r, cfg, &d, TD_PK_WPE, -1, -1);
  for (int l = 0; l < L; ++l) {
    if (!td_config_moe_layer(cfg, l)) {
      for (int i = 0; i < nblk; ++i) add_param(r, cfg, &d, blk[i], l, -1);
      continue;
    }
    const td_param_kind *mb = d.llama ? k_moe_block : k_gpt2_moe_block;
    const td_param_kind *ex = d.llama ? k_expert : k_gpt2_expert;
    size_t nmb = d.llama ? sizeof k_moe_block / sizeof *mb : sizeof k_gpt2_moe_block / sizeof *mb;
    size_t nex = d.llama ? sizeof k_expert / sizeof *ex : sizeof k_gpt2_expert / sizeof *ex;
    for (size_t i = 0; i < nmb; ++i) add_param(r, cfg, &d, mb[i], l, -1);
    for (int e = 0; e < d.E; ++e)
      for (size_t i = 0; i < nex; ++i) add_param(r, cfg, &d, ex[i], l, e);
  }
  r->nlayers = (int)L;
  r->layer_first = calloc((size_t)L + 1, sizeof *r->layer_first);
  if (!r->layer_first) {
    free(r->p);
    free(r);
    TD_FAIL(TD_ERR_NOMEM, "out of memory for the parameter registry");
  }
  for (int i = r->n - 1; i >= 0; --i) /* the blocks' entries follow the embeddings' */
    if (r->p[i].layer >= 0) r->layer_first[r->p[i].layer] = i;
  r->layer_first[L] = r->n;
  add_param(r, cfg, &d, TD_PK_LNF_W, -1, -1);
  if (!d.llama) add_param(r, cfg, &d, TD_PK_LNF_B, -1, -1);
  if (!d.tied) add_param(r, cfg, &d, TD_PK_LM_HEAD, -1, -1);
  lay_out(r);
  *out = r;
  return TD_OK;
}

void td_registry_destroy(td_registry **rp) {
  if (!rp || !*rp) return;
  free((*rp)->layer_first);
  free((*rp)->p);
  free(*rp);
  *rp = NULL;
}

/* The entries [*b, *e) that can hold block `layer`'s (all for -1). */
static void span_of(const td_registry *r, int layer, int *b, int *e) {
  *b = 0, *e = r->n;
  if (layer >= 0 && layer < r->nlayers && r->layer_first)
    *b = r->layer_first[layer], *e = r->layer_first[layer + 1];
}

td_param *td_registry_find(const td_registry *r, td_param_kind k, int layer) {
  int b = 0, e = 0;
  span_of(r, layer, &b, &e);
  for (int i = b; i < e; ++i)
    if (r->p[i].kind == k && r->p[i].layer == layer) return &r->p[i];
  return NULL;
}

td_param *td_registry_find_expert(const td_registry *r, td_param_kind k, int layer, int x) {
  int b = 0, e = 0;
  span_of(r, layer, &b, &e);
  for (int i = b; i < e; ++i)
    if (r->p[i].kind == k && r->p[i].layer == layer && r->p[i].expert == x) return &r->p[i];
  return NULL;
}

int64_t td_param_global_index(const td_registry *r, const td_param *p, int64_t i, int64_t j) {
  int64_t gi = i, gj = j;
  if (p->split_dim >= 0) {
    int64_t local = p->local_shape[p->split_dim];
    int64_t x = p->split_dim == 0 ? i : j;
    int64_t blk_local = local / p->split_blocks;        /* per block per rank */
    int64_t blk_global = p->split_pad / p->split_blocks; /* per block, padded */
    int64_t b = x / blk_local, w = x % blk_local;
    int64_t g = b * blk_global + (int64_t)r->tp_rank * blk_local + w;
    /* padding lies beyond the real extent (only when split_blocks == 1) */
    if (g >= p->shape[p->split_dim]) return -1;
    if (p->split_dim == 0) gi = g; else gj = g;
  }
  return gi * p->shape[1] + gj;
}

void td_registry_init_params(const td_registry *r, const td_config *cfg, float *params) {
  double std_resid = 0.02 / sqrt(2.0 * (double)cfg->model_layers);
  for (int t = 0; t < r->n; ++t) {
    const td_param *p = &r->p[t];
    if (!p->present) continue;
    float *x = params + p->offset;
    uint64_t key = td_rng_key((uint64_t)cfg->run_seed, td_hash_str(p->name), 0x1a17);
    int64_t rows = p->local_shape[0], cols = p->local_shape[1]; /* 1-D: (n, 1) */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t g = td_param_global_index(r, p, i, j);
        float v = 0.0f;
        if (g >= 0) {
          switch (p->init) {
            case TD_INIT_NORMAL: v = (float)(0.02 * td_rng_normal(key, (uint64_t)g)); break;
            case TD_INIT_NORMAL_RESID: v = (float)(std_resid * td_rng_normal(key, (uint64_t)g)); break;
            case TD_INIT_ZEROS: v = 0.0f; break;
            case TD_INIT_ONES: v = 1.0f; break;
          }
        }
        x[i * cols + j] = v;
      }
  }
}
