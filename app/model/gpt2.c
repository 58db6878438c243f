/* gpt2.c — the GPT-2 block's forward and backward on one rank's shard
 * (docs/architecture.md, "Model"; the embedding, the head, the loss and the
 * order of the blocks are model.c's, the machinery they share block.c's).
 *
 * Block l (pre-LN):  res2 = x + (attn(LN1(x)·Wqkv + bqkv)·Wproj + bproj)
 *                    res3 = res2 + (gelu(LN2(res2)·Wfc + bfc)·Wfcproj + bfcproj)
 * Weights (in, out) (Conv1D layout): a matmul is act · W. */
#include "app/model/model_internal.h"

typedef struct {
  void *ln1w, *ln1b, *wqkv, *bqkv, *wproj, *bproj, *ln2w, *ln2b, *wfc, *bfc, *wfcp, *bfcp;
} layer_w; /* parameters, of type m->pt */

/* The parameters of block `layer`, where their unit lives now. */
static void layer_params(const td_model *m, int layer, layer_w *w) {
  w->ln1w = td_model_pw(m, TD_PK_LN1_W, layer), w->ln1b = td_model_pw(m, TD_PK_LN1_B, layer);
  w->wqkv = td_model_pw(m, TD_PK_QKV_W, layer), w->bqkv = td_model_pw(m, TD_PK_QKV_B, layer);
  w->wproj = td_model_pw(m, TD_PK_ATTPROJ_W, layer);
  w->bproj = td_model_pw(m, TD_PK_ATTPROJ_B, layer);
  w->ln2w = td_model_pw(m, TD_PK_LN2_W, layer), w->ln2b = td_model_pw(m, TD_PK_LN2_B, layer);
  w->wfc = w->bfc = w->wfcp = w->bfcp = NULL;
  if (td_config_moe_layer(m->cfg, layer)) return; /* a sparse block: no MLP (moe.c) */
  w->wfc = td_model_pw(m, TD_PK_FC_W, layer), w->bfc = td_model_pw(m, TD_PK_FC_B, layer);
  w->wfcp = td_model_pw(m, TD_PK_FCPROJ_W, layer), w->bfcp = td_model_pw(m, TD_PK_FCPROJ_B, layer);
}

/* ---- forward -------------------------------------------------------------------- */

/* GPT-2 block `layer` (resid: its input, out: its output) with its
 * activations at index li of the set a. */
td_status td_model_gpt2_block_fwd(td_model *m, td_acts *a, int64_t li, int layer,
                                  const float *resid, float *res3) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, Nl = m->Nl;
  td_dtype pt = m->pt, at = m->at;
  layer_w w;
  layer_params(m, layer, &w);
  void *ln1 = td_model_at(m, a->ln1, li * Nl * C);
  void *atty = td_model_at(m, a->atty, li * N * m->Cl);
  void *ln2 = td_model_at(m, a->ln2, li * Nl * C);
  void *fcg = td_model_at(m, a->fch_gelu, li * N * m->F);
  float *qkv = a->qkv + li * N * m->C3, *att = td_model_att_at(m, a, li);
  float *res2 = a->res2 + li * Nl * C, *fch = a->fch + li * N * m->F;
  const void *x = NULL; /* a column-parallel matmul's input */
  TD_CHECK(k->layernorm_fwd(k, ln1, at, a->ln1_mean + li * Nl, a->ln1_rstd + li * Nl, resid,
                            w.ln1w, w.ln1b, pt, Nl, C));
  TD_CHECK(td_model_col_in(m, ln1, &x));
  TD_CHECK(td_model_mm(m, 0, 0, N, m->C3, C, x, at, w.wqkv, pt, 0.0f, qkv));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->bias_fwd(k, qkv, w.bqkv, pt, N, m->C3));
  /* attention in float32 (bf16: into datty, free until backward, saved rounded) */
  float *out = at == TD_DTYPE_F32 ? (float *)atty : m->datty;
  TD_CHECK(td_model_attn_fwd(m, out, att, qkv, m->C3, qkv + m->Cl, qkv + 2 * m->Cl, m->C3));
  if (at != TD_DTYPE_F32) TD_CHECK(k->cast(k, atty, at, m->datty, TD_DTYPE_F32, N * m->Cl));
  TD_CHECK(td_model_mm(m, 0, 0, N, C, m->Cl, atty, at, w.wproj, pt, 0.0f, m->dtmp));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(td_model_row_out(m, w.bproj, resid, res2));
  TD_CHECK(k->layernorm_fwd(k, ln2, at, a->ln2_mean + li * Nl, a->ln2_rstd + li * Nl, res2,
                            w.ln2w, w.ln2b, pt, Nl, C));
  if (td_config_moe_layer(m->cfg, layer)) /* a sparse block: the experts instead (moe.c) */
    return td_model_moe_fwd(m, a, li, layer, ln2, res2, res3);
  TD_CHECK(td_model_col_in(m, ln2, &x));
  TD_CHECK(td_model_mm(m, 0, 0, N, m->F, C, x, at, w.wfc, pt, 0.0f, fch));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->bias_fwd(k, fch, w.bfc, pt, N, m->F));
  TD_CHECK(k->gelu_fwd(k, fcg, at, fch, N * m->F));
  TD_CHECK(td_model_mm(m, 0, 0, N, C, m->F, fcg, at, w.wfcp, pt, 0.0f, m->dtmp));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(td_model_row_out(m, w.bfcp, res2, res3));
  return TD_OK;
}

/* ---- backward -------------------------------------------------------------------- */

/* dW (in, out) += Xᵀ · dY and dX (N, in) = dY · Wᵀ for the matmul
 * Y (N, out) = X (N, in) · W of a GPT-2 block (Conv1D layout), dY float32;
 * keepx: X outlives the backward (a slot's activations). */
static td_status conv_bwd(td_model *m, const float *dy, int64_t out, const void *x, int keepx,
                          int64_t in, const void *w, td_param_kind kind, int layer, float *dx) {
  const void *d = NULL;
  int64_t N = m->B * m->T;
  TD_CHECK(td_model_mm_grad(m, dy, N * out, &d));
  TD_CHECK(td_model_wmm(m, 1, 0, in, out, N, x, keepx, d, 0, kind, layer));
  TD_CHECK(td_model_mm(m, 0, 1, N, in, out, d, m->at, w, m->pt, 0.0f, dx));
  TD_CHECK(td_model_poll(m));
  return TD_OK;
}

/* GPT-2 block li: m->dres holds d loss / d (block output) and leaves with
 * d loss / d (block input). */
td_status td_model_gpt2_block_bwd(td_model *m, td_acts *a, int64_t li, int layer,
                                  const float *resid) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, Nl = m->Nl;
  td_dtype pt = m->pt;
  int keep = a != &m->work; /* a slot's activations outlive B */
  int keepx = keep && !m->sp; /* a gathered norm output does not */
  layer_w w;
  layer_params(m, layer, &w);
  float *g1 = NULL, *g2 = NULL;
  const void *ln1 = td_model_at(m, a->ln1, li * Nl * C);
  const void *atty = td_model_at(m, a->atty, li * N * m->Cl);
  const void *ln2 = td_model_at(m, a->ln2, li * Nl * C);
  const void *fcg = td_model_at(m, a->fch_gelu, li * N * m->F);
  const float *qkv = a->qkv + li * N * m->C3, *att = td_model_att_at(m, a, li);
  const float *res2 = a->res2 + li * Nl * C, *fch = a->fch + li * N * m->F;
  const float *dy = NULL, *dx = NULL; /* a row-parallel output's / column-parallel input's */
  const void *x = NULL;               /* a column-parallel matmul's input */
  /* MLP: res3 = res2 + gelu(ln2·Wfc + bfc)·Wfcp + bfcp, or the experts' mixture */
  if (td_config_moe_layer(m->cfg, layer)) {
    TD_CHECK(td_model_moe_bwd(m, a, li, layer, ln2, &dx));
  } else {
    TD_CHECK(td_model_rep_dst(m, TD_PK_FCPROJ_B, layer, &g1));
    TD_CHECK(k->bias_bwd(k, g1, m->dres, Nl, C));
    TD_CHECK(td_model_row_grad(m, &dy));
    TD_CHECK(conv_bwd(m, dy, C, fcg, keep, m->F, w.wfcp, TD_PK_FCPROJ_W, layer, m->dfch));
    TD_CHECK(k->gelu_bwd(k, m->dfch, fch, m->dfch, N * m->F));
    TD_CHECK(td_model_wdst(m, TD_PK_FC_B, layer, &g1));
    TD_CHECK(k->bias_bwd(k, g1, m->dfch, N, m->F));
    TD_CHECK(td_model_col_in(m, ln2, &x));
    TD_CHECK(conv_bwd(m, m->dfch, m->F, x, keepx, C, w.wfc, TD_PK_FC_W, layer, m->dln));
    TD_CHECK(td_model_col_grad(m, &dx));
  }
  TD_CHECK(td_model_rep_dst(m, TD_PK_LN2_W, layer, &g1));
  TD_CHECK(td_model_rep_dst(m, TD_PK_LN2_B, layer, &g2));
  TD_CHECK(k->layernorm_bwd(k, m->dres, g1, g2, dx, res2, w.ln2w, pt,
                            a->ln2_mean + li * Nl, a->ln2_rstd + li * Nl, Nl, C));
  /* m->dres now holds d loss / d res2. Attention: res2 = x + attn(...)·Wproj + bproj */
  TD_CHECK(td_model_rep_dst(m, TD_PK_ATTPROJ_B, layer, &g1));
  TD_CHECK(k->bias_bwd(k, g1, m->dres, Nl, C));
  TD_CHECK(td_model_row_grad(m, &dy));
  TD_CHECK(conv_bwd(m, dy, C, atty, keep, m->Cl, w.wproj, TD_PK_ATTPROJ_W, layer, m->datty));
  TD_CHECK(td_model_attn_bwd(m, m->dqkv, m->dqkv + m->Cl, m->dqkv + 2 * m->Cl, m->datty, atty,
                             qkv, m->C3, qkv + m->Cl, qkv + 2 * m->Cl, m->C3,
                             m->recompute_att ? NULL : att));
  TD_CHECK(td_model_wdst(m, TD_PK_QKV_B, layer, &g1));
  TD_CHECK(k->bias_bwd(k, g1, m->dqkv, N, m->C3));
  TD_CHECK(td_model_col_in(m, ln1, &x));
  TD_CHECK(conv_bwd(m, m->dqkv, m->C3, x, keepx, C, w.wqkv, TD_PK_QKV_W, layer, m->dln));
  TD_CHECK(td_model_col_grad(m, &dx));
  TD_CHECK(td_model_rep_dst(m, TD_PK_LN1_W, layer, &g1));
  TD_CHECK(td_model_rep_dst(m, TD_PK_LN1_B, layer, &g2));
  TD_CHECK(k->layernorm_bwd(k, m->dres, g1, g2, dx, resid, w.ln1w, pt,
                            a->ln1_mean + li * Nl, a->ln1_rstd + li * Nl, Nl, C));
  return td_model_rep_flush(m);
}
