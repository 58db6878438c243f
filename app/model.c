/* model.c — GPT-2 forward and backward on one rank's shard (DESIGN.md, "Model").
 *
 * Block l (pre-LN):  res2 = x + (attn(LN1(x)·Wqkv + bqkv)·Wproj + bproj)
 *                    res3 = res2 + (gelu(LN2(res2)·Wfc + bfc)·Wfcproj + bfcproj)
 * Head:              loss = CE(LNf(res3)·wteᵀ, targets), mean over global tokens.
 * Tensor parallelism (Megatron): Wqkv and Wfc split by output columns, Wproj
 * and Wfcproj by input rows with one all-reduce after each (bias added after
 * the reduction), the conjugate all-reduces of LN outputs' gradients in
 * backward, wte split by vocabulary for both the embedding and the head.
 * Replicated parameters (LayerNorms, row-parallel biases, wpe) get identical
 * gradients on every tp rank because their inputs are identical after the
 * all-reduces, so they stay consistent without communication. */
#include "app/td_model.h"

#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static td_status units_create(td_model *m);

/* ---- allocation ------------------------------------------------------------ */

/* Allocate n floats (4-byte elements) in the back-end and count them in
 * act_bytes; a size query (no back-end) only counts. The one place where
 * the model's memory is decided (trident check prints it from here). */
static td_status dev_alloc(td_model *m, void **out, int64_t n, const char *what) {
  m->act_bytes += 4.0 * (double)n;
  if (!m->k) return TD_OK;
  return m->k->alloc(m->k, out, (size_t)(n > 0 ? n : 1) * 4, what);
}

#define ACT(field, n) TD_CHECK(dev_alloc(m, (void **)&a->field, (n), "activations " #field))
#define SCR(field, n) TD_CHECK(dev_alloc(m, (void **)&m->field, (n), "backward scratch " #field))

static td_status alloc_slot(td_model *m, td_acts *a) {
  int64_t N = m->B * m->T, L = m->L_count, C = m->C;
  ACT(encoded, N * C);
  ACT(ln1, L * N * C);
  ACT(ln1_mean, L * N);
  ACT(ln1_rstd, L * N);
  ACT(qkv, L * N * m->C3);
  ACT(atty, L * N * m->Cl);
  ACT(att, L * m->B * m->NH * m->T * m->T);
  ACT(res2, L * N * C);
  ACT(ln2, L * N * C);
  ACT(ln2_mean, L * N);
  ACT(ln2_rstd, L * N);
  ACT(fch, L * N * m->F);
  ACT(fch_gelu, L * N * m->F);
  ACT(res3, L * N * C);
  ACT(lnf, N * C);
  ACT(lnf_mean, N);
  ACT(lnf_rstd, N);
  ACT(logits, m->last_stage ? N * m->Vs : 1);
  ACT(rowmax, N);
  ACT(sumexp, 2 * N); /* sumexp and tlogit adjacent: one all-reduce */
  a->tlogit = a->sumexp + N;
  ACT(inputs, N);  /* int32 tokens */
  ACT(targets, N);
  return TD_OK;
}

static td_status alloc_buffers(td_model *m) {
  int64_t N = m->B * m->T, C = m->C;
  m->acts = calloc((size_t)m->nslots, sizeof *m->acts);
  if (!m->acts) TD_FAIL(TD_ERR_NOMEM, "out of memory for activations");
  for (int i = 0; i < m->nslots; ++i) TD_CHECK(alloc_slot(m, &m->acts[i]));
  SCR(dres, N * C);
  SCR(dtmp, N * C);
  SCR(dln, N * C);
  SCR(dqkv, N * m->C3);
  SCR(datty, N * m->Cl);
  SCR(dfch, N * m->F);
  SCR(datt_scratch, m->B * m->NH * m->T * m->T);
  if (m->k) /* host memory, not counted: 12 bytes a row */
    TD_CHECK(td_alloc((void **)&m->rowstat_host, (size_t)3 * N * sizeof(float), "loss statistics"));
  return TD_OK;
}

td_status td_model_create(const td_config *cfg, td_grid *grid, td_kernels *k, td_coll_stats *stats,
                          int64_t B, int nslots, td_model **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_model *m = calloc(1, sizeof *m);
  if (!m) TD_FAIL(TD_ERR_NOMEM, "out of memory for the model");
  m->cfg = cfg, m->k = k, m->grid = grid, m->stats = stats;
  m->nslots = nslots > 0 ? nslots : 1;
  TD_CHECK_GOTO(td_registry_create(cfg, grid->tp, grid->tp_rank, grid->pp, grid->pp_rank, &m->reg));
  int64_t tp = grid->tp;
  m->B = B, m->T = cfg->model_seq_len, m->C = cfg->model_dim, m->V = cfg->model_vocab_size;
  m->NH = cfg->model_heads / tp, m->HS = cfg->model_dim / cfg->model_heads;
  m->C3 = 3 * m->C / tp, m->Cl = m->C / tp, m->F = 4 * m->C / tp;
  td_param *wte = td_registry_find(m->reg, TD_PK_WTE, -1);
  m->Vs = wte->local_shape[0];
  m->v0 = (int64_t)grid->tp_rank * m->Vs;
  td_config_stage_layers(cfg, grid->pp_rank, &m->L_first, &m->L_count);
  m->valid_rows = B * m->T;
  m->first_stage = grid->pp_rank == 0;
  m->last_stage = grid->pp_rank == grid->pp - 1;
  TD_CHECK_GOTO(alloc_buffers(m));
  TD_CHECK_GOTO(units_create(m));
done:
  if (st != TD_OK) {
    td_model_destroy(&m);
    return st;
  }
  *out = m;
  return TD_OK;
}

void td_model_destroy(td_model **mp) {
  if (!mp || !*mp) return;
  td_model *m = *mp;
  if (m->k) {
    for (int i = 0; m->acts && i < m->nslots; ++i) {
      td_acts *a = &m->acts[i];
      float *bufs[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att,
                       a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->res3,
                       a->lnf, a->lnf_mean, a->lnf_rstd, a->logits, a->rowmax, a->sumexp};
      for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; ++j)
        if (bufs[j]) m->k->free(m->k, bufs[j]);
      if (a->inputs) m->k->free(m->k, a->inputs);
      if (a->targets) m->k->free(m->k, a->targets);
    }
    float *scr[] = {m->dres, m->dtmp, m->dln, m->dqkv, m->datty, m->dfch, m->datt_scratch};
    for (size_t j = 0; j < sizeof scr / sizeof scr[0]; ++j)
      if (scr[j]) m->k->free(m->k, scr[j]);
  }
  free(m->acts);
  td_free(m->rowstat_host);
  free(m->unit_begin);
  free(m->unit_end);
  free(m->unit_param);
  free(m->unit_grad);
  td_registry_destroy(&m->reg);
  free(m);
  *mp = NULL;
}

/* ---- per-layer views ------------------------------------------------------------ */

typedef struct {
  float *ln1w, *ln1b, *wqkv, *bqkv, *wproj, *bproj, *ln2w, *ln2b, *wfc, *bfc, *wfcp, *bfcp;
} layer_g;

int td_model_unit_of(const td_model *m, const td_param *p) {
  if (p->layer >= 0) return 1 + p->layer;
  return p->kind == TD_PK_LNF_W || p->kind == TD_PK_LNF_B ? m->nunits - 1 : 0;
}

void td_model_units_flat(td_model *m, float *params, float *grads) {
  for (int u = 0; u < m->nunits; ++u) {
    m->unit_param[u] = params + m->unit_begin[u];
    m->unit_grad[u] = grads ? grads + m->unit_begin[u] : NULL;
  }
}

static td_status units_create(td_model *m) {
  int n = (int)m->cfg->model_layers + 2;
  m->nunits = n;
  m->unit_begin = calloc((size_t)n, sizeof(int64_t));
  m->unit_end = calloc((size_t)n, sizeof(int64_t));
  m->unit_param = calloc((size_t)n, sizeof(float *));
  m->unit_grad = calloc((size_t)n, sizeof(float *));
  if (!m->unit_begin || !m->unit_end || !m->unit_param || !m->unit_grad)
    TD_FAIL(TD_ERR_NOMEM, "out of memory for model units");
  for (int u = 0; u < n; ++u) m->unit_begin[u] = INT64_MAX, m->unit_end[u] = 0;
  for (int i = 0; i < m->reg->n; ++i) {
    const td_param *p = &m->reg->p[i];
    int u = td_model_unit_of(m, p);
    int64_t end = p->offset + (p->local_numel + 15) / 16 * 16;
    if (p->offset < m->unit_begin[u]) m->unit_begin[u] = p->offset;
    if (end > m->unit_end[u]) m->unit_end[u] = end;
  }
  return TD_OK;
}

/* Pointer to parameter (which = 0) or gradient (1) kind/layer where its unit lives now. */
static float *pv(const td_model *m, int which, td_param_kind k, int layer) {
  const td_param *p = td_registry_find(m->reg, k, layer);
  int u = td_model_unit_of(m, p);
  float *base = which ? m->unit_grad[u] : m->unit_param[u];
  return base + (p->offset - m->unit_begin[u]);
}

static td_status hook(td_model *m, int acquire, int u, td_phase ph) {
  td_status (*f)(void *, td_model *, int, td_phase) = acquire ? m->hooks.acquire : m->hooks.release;
  if (f) TD_CHECK(f(m->hooks.ctx, m, u, ph));
  return TD_OK;
}

/* Between large kernels: let the owner's communication progress. */
static td_status poll(td_model *m) { return m->hooks.poll ? m->hooks.poll(m->hooks.ctx) : TD_OK; }

static void layer_views(const td_model *m, int flat, int layer, layer_g *w) {
  w->ln1w = pv(m, flat, TD_PK_LN1_W, layer), w->ln1b = pv(m, flat, TD_PK_LN1_B, layer);
  w->wqkv = pv(m, flat, TD_PK_QKV_W, layer), w->bqkv = pv(m, flat, TD_PK_QKV_B, layer);
  w->wproj = pv(m, flat, TD_PK_ATTPROJ_W, layer), w->bproj = pv(m, flat, TD_PK_ATTPROJ_B, layer);
  w->ln2w = pv(m, flat, TD_PK_LN2_W, layer), w->ln2b = pv(m, flat, TD_PK_LN2_B, layer);
  w->wfc = pv(m, flat, TD_PK_FC_W, layer), w->bfc = pv(m, flat, TD_PK_FC_B, layer);
  w->wfcp = pv(m, flat, TD_PK_FCPROJ_W, layer), w->bfcp = pv(m, flat, TD_PK_FCPROJ_B, layer);
}

/* Sum a (N, C) partial result over the tensor-parallel group. */
static td_status tp_sum(td_model *m, float *x, int64_t n) {
  if (m->grid->tp == 1) return TD_OK;
  TD_CHECK(m->k->sync(m->k));
  TD_CHECK(td_coll_allreduce_f32(m->grid->tp_comm, x, n, MPI_SUM, m->stats));
  return TD_OK;
}

/* ---- forward -------------------------------------------------------------------- */

static td_status forward_impl(td_model *m, int slot, const int32_t *inputs,
                              const int32_t *targets, double *loss_sum) {
  td_kernels *k = m->k;
  td_acts *a = &m->acts[slot];
  int64_t B = m->B, T = m->T, C = m->C, N = B * T;
  size_t tokbytes = (size_t)N * sizeof(int32_t);
  if (m->first_stage) TD_CHECK(k->to_device(k, a->inputs, inputs, tokbytes));
  if (targets && m->last_stage) TD_CHECK(k->to_device(k, a->targets, targets, tokbytes));

  float *x = a->encoded;
  int U = m->nunits - 1; /* the head unit {ln_f} */
  if (m->first_stage || m->last_stage) TD_CHECK(hook(m, 1, 0, TD_PHASE_FORWARD));
  if (m->first_stage) {
    const float *wte = pv(m, 0, TD_PK_WTE, -1);
    const float *wpe = pv(m, 0, TD_PK_WPE, -1);
    TD_CHECK(k->embed_fwd(k, x, a->inputs, wte, m->v0, m->Vs, m->grid->tp_rank == 0 ? wpe : NULL,
                          B, T, C));
    TD_CHECK(tp_sum(m, x, N * C));
  }
  for (int64_t li = 0; li < m->L_count; ++li) {
    layer_g w;
    int u = (int)(1 + m->L_first + li);
    TD_CHECK(hook(m, 1, u, TD_PHASE_FORWARD));
    layer_views(m, 0, (int)(m->L_first + li), &w);
    const float *resid = li == 0 ? x : a->res3 + (li - 1) * N * C;
    float *ln1 = a->ln1 + li * N * C, *qkv = a->qkv + li * N * m->C3;
    float *atty = a->atty + li * N * m->Cl, *att = a->att + li * B * m->NH * T * T;
    float *res2 = a->res2 + li * N * C, *ln2 = a->ln2 + li * N * C;
    float *fch = a->fch + li * N * m->F, *fcg = a->fch_gelu + li * N * m->F;
    float *res3 = a->res3 + li * N * C;
    TD_CHECK(k->layernorm_fwd(k, ln1, a->ln1_mean + li * N, a->ln1_rstd + li * N, resid, w.ln1w,
                              w.ln1b, N, C));
    TD_CHECK(k->gemm(k, 0, 0, N, m->C3, C, ln1, w.wqkv, 0.0f, qkv));
    TD_CHECK(poll(m));
    TD_CHECK(k->bias_fwd(k, qkv, w.bqkv, N, m->C3));
    TD_CHECK(k->attention_fwd(k, atty, att, qkv, B, T, m->NH, m->HS));
    TD_CHECK(k->gemm(k, 0, 0, N, C, m->Cl, atty, w.wproj, 0.0f, m->dtmp));
    TD_CHECK(poll(m));
    TD_CHECK(tp_sum(m, m->dtmp, N * C));
    TD_CHECK(k->bias_fwd(k, m->dtmp, w.bproj, N, C));
    TD_CHECK(k->add(k, res2, resid, m->dtmp, N * C));
    TD_CHECK(k->layernorm_fwd(k, ln2, a->ln2_mean + li * N, a->ln2_rstd + li * N, res2, w.ln2w,
                              w.ln2b, N, C));
    TD_CHECK(k->gemm(k, 0, 0, N, m->F, C, ln2, w.wfc, 0.0f, fch));
    TD_CHECK(poll(m));
    TD_CHECK(k->bias_fwd(k, fch, w.bfc, N, m->F));
    TD_CHECK(k->gelu_fwd(k, fcg, fch, N * m->F));
    TD_CHECK(k->gemm(k, 0, 0, N, C, m->F, fcg, w.wfcp, 0.0f, m->dtmp));
    TD_CHECK(poll(m));
    TD_CHECK(tp_sum(m, m->dtmp, N * C));
    TD_CHECK(k->bias_fwd(k, m->dtmp, w.bfcp, N, C));
    TD_CHECK(k->add(k, res3, res2, m->dtmp, N * C));
    TD_CHECK(hook(m, 0, u, TD_PHASE_FORWARD));
  }
  if (!m->last_stage) {
    if (m->first_stage) TD_CHECK(hook(m, 0, 0, TD_PHASE_FORWARD));
    return TD_OK;
  }
  TD_CHECK(hook(m, 1, U, TD_PHASE_FORWARD));

  const float *last = m->L_count > 0 ? a->res3 + (m->L_count - 1) * N * C : x;
  TD_CHECK(k->layernorm_fwd(k, a->lnf, a->lnf_mean, a->lnf_rstd, last,
                            pv(m, 0, TD_PK_LNF_W, -1), pv(m, 0, TD_PK_LNF_B, -1), N,
                            C));
  const float *wte = pv(m, 0, TD_PK_WTE, -1);
  TD_CHECK(k->gemm(k, 0, 1, N, m->Vs, C, a->lnf, wte, 0.0f, a->logits));
  TD_CHECK(poll(m));
  TD_CHECK(hook(m, 0, U, TD_PHASE_FORWARD));
  TD_CHECK(hook(m, 0, 0, TD_PHASE_FORWARD));
  if (!targets) return TD_OK;

  /* Vocabulary-parallel cross-entropy: max, then Σexp and the target logit. */
  int64_t vvalid = m->V - m->v0 < m->Vs ? (m->V - m->v0 > 0 ? m->V - m->v0 : 0) : m->Vs;
  TD_CHECK(k->xent_rowmax(k, a->rowmax, a->logits, N, m->Vs, vvalid));
  if (m->grid->tp > 1) {
    TD_CHECK(k->sync(k));
    TD_CHECK(td_coll_allreduce_f32(m->grid->tp_comm, a->rowmax, N, MPI_MAX, m->stats));
  }
  TD_CHECK(k->xent_sumexp(k, a->sumexp, a->tlogit, a->logits, a->rowmax, a->targets, m->v0,
                          N, m->Vs, vvalid));
  TD_CHECK(tp_sum(m, a->sumexp, 2 * N));
  float *h = m->rowstat_host;
  TD_CHECK(k->to_host(k, h, a->rowmax, (size_t)N * sizeof(float)));
  TD_CHECK(k->to_host(k, h + N, a->sumexp, (size_t)2 * N * sizeof(float)));
  double s = 0.0;
  for (int64_t i = 0; i < m->valid_rows && i < N; ++i) s += log((double)h[N + i]) + (double)h[i] - (double)h[2 * N + i];
  *loss_sum = s;
  return TD_OK;
}

td_status td_model_forward(td_model *m, int slot, const int32_t *inputs, const int32_t *targets,
                           double *loss_sum) {
  *loss_sum = 0.0;
  TD_CHECK(forward_impl(m, slot, inputs, targets, loss_sum));
  return TD_OK;
}

float *td_model_stage_input(td_model *m, int slot) { return m->acts[slot].encoded; }

const float *td_model_stage_output(const td_model *m, int slot) {
  const td_acts *a = &m->acts[slot];
  int64_t N = m->B * m->T;
  return m->L_count > 0 ? a->res3 + (m->L_count - 1) * N * m->C : a->encoded;
}

const float *td_model_input_grad(const td_model *m) { return m->dres; }

/* ---- backward -------------------------------------------------------------------- */

td_status td_model_backward(td_model *m, int slot, float loss_scale, const float *dout) {
  td_kernels *k = m->k;
  td_acts *a = &m->acts[slot];
  int64_t B = m->B, T = m->T, C = m->C, N = B * T;
  float *x = a->encoded;
  int U = m->nunits - 1;
  if (m->first_stage || m->last_stage) TD_CHECK(hook(m, 1, 0, TD_PHASE_BACKWARD));
  if (m->last_stage) {
    TD_CHECK(hook(m, 1, U, TD_PHASE_BACKWARD));
    int64_t vvalid = m->V - m->v0 < m->Vs ? (m->V - m->v0 > 0 ? m->V - m->v0 : 0) : m->Vs;
    float *dl = a->logits; /* gradient in place */
    TD_CHECK(k->xent_bwd(k, dl, a->logits, a->rowmax, a->sumexp, a->targets, m->v0,
                         loss_scale, N, m->Vs, vvalid));
    const float *wte = pv(m, 0, TD_PK_WTE, -1);
    float *dwte = pv(m, 1, TD_PK_WTE, -1);
    TD_CHECK(k->gemm(k, 1, 0, m->Vs, C, N, dl, a->lnf, 1.0f, dwte));
    TD_CHECK(poll(m));
    TD_CHECK(k->gemm(k, 0, 0, N, C, m->Vs, dl, wte, 0.0f, m->dln));
    TD_CHECK(poll(m));
    TD_CHECK(tp_sum(m, m->dln, N * C));
    const float *last = m->L_count > 0 ? a->res3 + (m->L_count - 1) * N * C : x;
    TD_CHECK(k->zero(k, m->dres, (size_t)N * C * sizeof(float)));
    TD_CHECK(k->layernorm_bwd(k, m->dres, pv(m, 1, TD_PK_LNF_W, -1),
                              pv(m, 1, TD_PK_LNF_B, -1), m->dln, last,
                              pv(m, 0, TD_PK_LNF_W, -1), a->lnf_mean, a->lnf_rstd, N,
                              C));
    TD_CHECK(hook(m, 0, U, TD_PHASE_BACKWARD));
  } else {
    /* gradient of this stage's output, from the next stage: dres = dout */
    TD_CHECK(k->zero(k, m->dres, (size_t)N * C * sizeof(float)));
    TD_CHECK(k->add(k, m->dres, m->dres, dout, N * C));
  }
  for (int64_t li = m->L_count - 1; li >= 0; --li) {
    layer_g w, g;
    int layer = (int)(m->L_first + li);
    TD_CHECK(hook(m, 1, 1 + layer, TD_PHASE_BACKWARD));
    layer_views(m, 0, layer, &w);
    layer_views(m, 1, layer, &g);
    const float *resid = li == 0 ? x : a->res3 + (li - 1) * N * C;
    const float *ln1 = a->ln1 + li * N * C, *qkv = a->qkv + li * N * m->C3;
    const float *atty = a->atty + li * N * m->Cl, *att = a->att + li * B * m->NH * T * T;
    const float *res2 = a->res2 + li * N * C, *ln2 = a->ln2 + li * N * C;
    const float *fch = a->fch + li * N * m->F, *fcg = a->fch_gelu + li * N * m->F;
    /* m->dres holds d loss / d res3. MLP: res3 = res2 + gelu(ln2·Wfc + bfc)·Wfcp + bfcp */
    TD_CHECK(k->bias_bwd(k, g.bfcp, m->dres, N, C));
    TD_CHECK(k->gemm(k, 1, 0, m->F, C, N, fcg, m->dres, 1.0f, g.wfcp));
    TD_CHECK(poll(m));
    TD_CHECK(k->gemm(k, 0, 1, N, m->F, C, m->dres, w.wfcp, 0.0f, m->dfch));
    TD_CHECK(poll(m));
    TD_CHECK(k->gelu_bwd(k, m->dfch, fch, m->dfch, N * m->F));
    TD_CHECK(k->bias_bwd(k, g.bfc, m->dfch, N, m->F));
    TD_CHECK(k->gemm(k, 1, 0, C, m->F, N, ln2, m->dfch, 1.0f, g.wfc));
    TD_CHECK(poll(m));
    TD_CHECK(k->gemm(k, 0, 1, N, C, m->F, m->dfch, w.wfc, 0.0f, m->dln));
    TD_CHECK(poll(m));
    TD_CHECK(tp_sum(m, m->dln, N * C));
    TD_CHECK(k->layernorm_bwd(k, m->dres, g.ln2w, g.ln2b, m->dln, res2, w.ln2w,
                              a->ln2_mean + li * N, a->ln2_rstd + li * N, N, C));
    /* m->dres now holds d loss / d res2. Attention: res2 = x + attn(...)·Wproj + bproj */
    TD_CHECK(k->bias_bwd(k, g.bproj, m->dres, N, C));
    TD_CHECK(k->gemm(k, 1, 0, m->Cl, C, N, atty, m->dres, 1.0f, g.wproj));
    TD_CHECK(poll(m));
    TD_CHECK(k->gemm(k, 0, 1, N, m->Cl, C, m->dres, w.wproj, 0.0f, m->datty));
    TD_CHECK(poll(m));
    TD_CHECK(k->attention_bwd(k, m->dqkv, m->datt_scratch, m->datty, qkv, att, B, T, m->NH, m->HS));
    TD_CHECK(k->bias_bwd(k, g.bqkv, m->dqkv, N, m->C3));
    TD_CHECK(k->gemm(k, 1, 0, C, m->C3, N, ln1, m->dqkv, 1.0f, g.wqkv));
    TD_CHECK(poll(m));
    TD_CHECK(k->gemm(k, 0, 1, N, C, m->C3, m->dqkv, w.wqkv, 0.0f, m->dln));
    TD_CHECK(poll(m));
    TD_CHECK(tp_sum(m, m->dln, N * C));
    TD_CHECK(k->layernorm_bwd(k, m->dres, g.ln1w, g.ln1b, m->dln, resid, w.ln1w,
                              a->ln1_mean + li * N, a->ln1_rstd + li * N, N, C));
    /* m->dres now holds d loss / d (block input) */
    TD_CHECK(hook(m, 0, 1 + layer, TD_PHASE_BACKWARD));
  }
  if (m->first_stage) {
    TD_CHECK(k->embed_bwd(k, pv(m, 1, TD_PK_WTE, -1), pv(m, 1, TD_PK_WPE, -1),
                          m->dres, a->inputs, m->v0, m->Vs, B, T, C));
  }
  if (m->first_stage || m->last_stage) TD_CHECK(hook(m, 0, 0, TD_PHASE_BACKWARD));
  return TD_OK;
}

td_status td_model_logits_at(td_model *m, int slot, int64_t pos, float *out) {
  td_acts *a = &m->acts[slot];
  td_kernels *k = m->k;
  int64_t Vs = m->Vs;
  float *shard = NULL;
  td_status st = TD_OK;
  TD_CHECK(td_alloc((void **)&shard, (size_t)Vs * m->grid->tp * sizeof(float), "logits"));
  TD_CHECK_GOTO(k->to_host(k, shard, a->logits + pos * Vs, (size_t)Vs * sizeof(float)));
  if (m->grid->tp > 1) {
    int n = 0;
    TD_CHECK_GOTO(td_mpi_count(Vs, &n));
    MPI_Request r = MPI_REQUEST_NULL;
    if (td_watched(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, shard, n, MPI_FLOAT,
                                  m->grid->tp_comm, &r),
                   "MPI_Allgather (logits)", m->grid->tp_comm, &r) != MPI_SUCCESS)
      TD_FAIL_GOTO(TD_ERR_MPI, "gathering logits over the tensor-parallel group failed");
  }
  memcpy(out, shard, (size_t)m->V * sizeof(float));
done:
  td_free(shard);
  return st;
}
