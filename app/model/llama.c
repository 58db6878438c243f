/* llama.c — the LLaMA block's forward and backward on one rank's shard
 * (docs/architecture.md, "Model"; the embedding, the head, the loss and the
 * order of the blocks are model.c's, the machinery they share block.c's):
 * RMSNorm, rotary positions, grouped-query attention and a SwiGLU MLP, no
 * biases; the block's math is above td_model_llama_block_fwd. */
#include "app/model/model_internal.h"

/* ---- forward -------------------------------------------------------------------- */

/* LLaMA block `layer` (resid: its input, out: its output) with its
 * activations at index li of the set a:
 *   res2 = x + o(attn(rope(q(n1)), rope(k(n1)), v(n1))),  n1 = rms(x)·w1
 *   res3 = res2 + down(silu(gate(n2))·up(n2)),            n2 = rms(res2)·w2
 * Weights (out, in): a matmul is act · Wᵀ. */
td_status td_model_llama_block_fwd(td_model *m, td_acts *a, int64_t li, int layer,
                                   const float *resid, float *res3) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, F = m->F, Nl = m->Nl;
  int64_t Cq = m->Cl, Ckv = m->KV * m->HS;
  td_dtype pt = m->pt, at = m->at;
  void *n1 = td_model_at(m, a->ln1, li * Nl * C), *atty = td_model_at(m, a->atty, li * N * Cq);
  void *n2 = td_model_at(m, a->ln2, li * Nl * C), *h = td_model_at(m, a->fch_gelu, li * N * F);
  float *q = a->qkv + li * N * m->C3, *kk = q + N * Cq, *v = kk + N * Ckv;
  float *att = td_model_att_at(m, a, li);
  float *res2 = a->res2 + li * Nl * C, *gate = a->fch + li * N * 2 * F, *up = gate + N * F;
  const void *x = NULL; /* a column-parallel matmul's input */
  TD_CHECK(k->rmsnorm_fwd(k, n1, at, a->ln1_rstd + li * Nl, resid,
                          td_model_pw(m, TD_PK_ATTN_NORM, layer), pt, m->norm_eps, Nl, C));
  TD_CHECK(td_model_col_in(m, n1, &x));
  TD_CHECK(td_model_mm(m, 0, 1, N, Cq, C, x, at, td_model_pw(m, TD_PK_Q_W, layer), pt, 0.0f, q));
  TD_CHECK(td_model_mm(m, 0, 1, N, Ckv, C, x, at, td_model_pw(m, TD_PK_K_W, layer), pt, 0.0f, kk));
  TD_CHECK(td_model_mm(m, 0, 1, N, Ckv, C, x, at, td_model_pw(m, TD_PK_V_W, layer), pt, 0.0f, v));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->rope(k, q, B, T, m->NH, m->HS, Cq, m->rope_theta, 0, m->pos));
  TD_CHECK(k->rope(k, kk, B, T, m->KV, m->HS, Ckv, m->rope_theta, 0, m->pos));
  float *out = at == TD_DTYPE_F32 ? (float *)atty : m->datty; /* bf16: saved rounded */
  TD_CHECK(td_model_attn_fwd(m, out, att, q, Cq, kk, v, Ckv));
  if (at != TD_DTYPE_F32) TD_CHECK(k->cast(k, atty, at, m->datty, TD_DTYPE_F32, N * Cq));
  TD_CHECK(td_model_mm(m, 0, 1, N, C, Cq, atty, at, td_model_pw(m, TD_PK_O_W, layer), pt, 0.0f,
                       m->dtmp));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(td_model_row_out(m, NULL, resid, res2));
  TD_CHECK(k->rmsnorm_fwd(k, n2, at, a->ln2_rstd + li * Nl, res2,
                          td_model_pw(m, TD_PK_MLP_NORM, layer), pt, m->norm_eps, Nl, C));
  if (td_config_moe_layer(m->cfg, layer)) /* a sparse block: the experts instead (moe.c) */
    return td_model_moe_fwd(m, a, li, layer, n2, res2, res3);
  TD_CHECK(td_model_col_in(m, n2, &x));
  TD_CHECK(td_model_mm(m, 0, 1, N, F, C, x, at, td_model_pw(m, TD_PK_GATE_W, layer), pt, 0.0f,
                       gate));
  TD_CHECK(td_model_mm(m, 0, 1, N, F, C, x, at, td_model_pw(m, TD_PK_UP_W, layer), pt, 0.0f, up));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->swiglu_fwd(k, h, at, gate, up, N * F));
  TD_CHECK(td_model_mm(m, 0, 1, N, C, F, h, at, td_model_pw(m, TD_PK_DOWN_W, layer), pt, 0.0f,
                       m->dtmp));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(td_model_row_out(m, NULL, res2, res3));
  return TD_OK;
}

/* ---- backward -------------------------------------------------------------------- */

/* dW (rows, C) += dYᵀ · X and dX (N, C) (= or + per beta) += dY · W for the
 * matmul Y (N, rows) = X · Wᵀ of a LLaMA block, dY float32 (N, rows). */
static td_status linear_bwd(td_model *m, const float *dy, int64_t rows, const void *x, int keepx,
                            int64_t cols, td_param_kind kind, int layer, float beta, float *dx) {
  const void *d = NULL;
  int64_t N = m->B * m->T;
  TD_CHECK(td_model_mm_grad(m, dy, N * rows, &d));
  TD_CHECK(td_model_wmm(m, 1, 0, rows, cols, N, d, 0, x, keepx, kind, layer));
  TD_CHECK(td_model_mm(m, 0, 0, N, cols, rows, d, m->at, td_model_pw(m, kind, layer), m->pt, beta,
                       dx));
  TD_CHECK(td_model_poll(m));
  return TD_OK;
}

/* LLaMA block li: m->dres holds d loss / d (block output) and leaves with
 * d loss / d (block input). */
td_status td_model_llama_block_bwd(td_model *m, td_acts *a, int64_t li, int layer,
                                   const float *resid) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, F = m->F, Nl = m->Nl;
  int64_t Cq = m->Cl, Ckv = m->KV * m->HS;
  td_dtype pt = m->pt;
  int keep = a != &m->work;
  int keepx = keep && !m->sp; /* a gathered norm output does not outlive B */
  float *gn = NULL;
  const void *n1 = td_model_at(m, a->ln1, li * Nl * C);
  const void *atty = td_model_at(m, a->atty, li * N * Cq);
  const void *n2 = td_model_at(m, a->ln2, li * Nl * C);
  const void *h = td_model_at(m, a->fch_gelu, li * N * F);
  const float *q = a->qkv + li * N * m->C3, *kk = q + N * Cq, *v = kk + N * Ckv;
  const float *att = td_model_att_at(m, a, li);
  const float *res2 = a->res2 + li * Nl * C, *gate = a->fch + li * N * 2 * F, *up = gate + N * F;
  float *dgate = m->dfch, *dup = dgate + N * F, *dh = dup + N * F;
  float *dq = m->dqkv, *dk = dq + N * Cq, *dv = dk + N * Ckv;
  const float *dy = NULL, *dx = NULL; /* a row-parallel output's / column-parallel input's */
  const void *x = NULL;               /* a column-parallel matmul's input */
  /* MLP: res3 = res2 + down(silu(gate(n2))·up(n2)), or the experts' mixture */
  if (td_config_moe_layer(m->cfg, layer)) {
    TD_CHECK(td_model_moe_bwd(m, a, li, layer, n2, &dx));
  } else {
    TD_CHECK(td_model_row_grad(m, &dy));
    TD_CHECK(linear_bwd(m, dy, C, h, keep, F, TD_PK_DOWN_W, layer, 0.0f, dh));
    TD_CHECK(k->swiglu_bwd(k, dgate, dup, dh, gate, up, N * F));
    TD_CHECK(td_model_col_in(m, n2, &x));
    TD_CHECK(linear_bwd(m, dgate, F, x, keepx, C, TD_PK_GATE_W, layer, 0.0f, m->dln));
    TD_CHECK(linear_bwd(m, dup, F, x, keepx, C, TD_PK_UP_W, layer, 1.0f, m->dln));
    TD_CHECK(td_model_col_grad(m, &dx));
  }
  TD_CHECK(td_model_rep_dst(m, TD_PK_MLP_NORM, layer, &gn));
  TD_CHECK(k->rmsnorm_bwd(k, m->dres, gn, dx, res2, td_model_pw(m, TD_PK_MLP_NORM, layer), pt,
                          a->ln2_rstd + li * Nl, Nl, C));
  /* m->dres now holds d loss / d res2. Attention: res2 = x + o(attn(...)) */
  TD_CHECK(td_model_row_grad(m, &dy));
  TD_CHECK(linear_bwd(m, dy, C, atty, keep, Cq, TD_PK_O_W, layer, 0.0f, m->datty));
  TD_CHECK(td_model_attn_bwd(m, dq, dk, dv, m->datty, atty, q, Cq, kk, v, Ckv,
                             m->recompute_att ? NULL : att));
  TD_CHECK(k->rope(k, dq, B, T, m->NH, m->HS, Cq, m->rope_theta, 1, m->pos));
  TD_CHECK(k->rope(k, dk, B, T, m->KV, m->HS, Ckv, m->rope_theta, 1, m->pos));
  TD_CHECK(td_model_col_in(m, n1, &x));
  TD_CHECK(linear_bwd(m, dq, Cq, x, keepx, C, TD_PK_Q_W, layer, 0.0f, m->dln));
  TD_CHECK(linear_bwd(m, dk, Ckv, x, keepx, C, TD_PK_K_W, layer, 1.0f, m->dln));
  TD_CHECK(linear_bwd(m, dv, Ckv, x, keepx, C, TD_PK_V_W, layer, 1.0f, m->dln));
  TD_CHECK(td_model_col_grad(m, &dx));
  TD_CHECK(td_model_rep_dst(m, TD_PK_ATTN_NORM, layer, &gn));
  TD_CHECK(k->rmsnorm_bwd(k, m->dres, gn, dx, resid, td_model_pw(m, TD_PK_ATTN_NORM, layer), pt,
                          a->ln1_rstd + li * Nl, Nl, C));
  return td_model_rep_flush(m);
}
