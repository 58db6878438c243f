/* moe.c — the feed-forward layer of a sparse block (model.moe;
 * docs/architecture.md, "Mixture of experts"), on one rank's shard, built
 * from the moe_* kernels:
 *
 *   logits = x·Gᵀ (N, E); p = softmax(logits); the top K experts of each
 *   row (ties to the lower index), weights w = their p renormalised over
 *   the K (Hugging Face MixtralSparseMoeBlock);
 *   out = res2 + Σ_j w_j · w2_e(silu(w1_e·x)·(w3_e·x)), e the j-th expert.
 *
 * Dropless: every token reaches its K experts; the N·K slots are put in
 * the experts' order (moe_plan) so each expert is one matmul over its own
 * rows (a grouped matmul). Tensor parallelism splits every expert like the
 * dense MLP (w1, w3 by output, w2 by input): every tp rank routes the same
 * rows (the input all-gathered under sequence parallelism), mixes its
 * partial outputs, and the row-parallel sum adds them. The router is
 * replicated over tp: its gradient, from the mixing weights' gradient
 * summed over tp, is the same on every tp rank, and its input gradient is
 * added once (tp rank 0) to the partial sum the column-parallel backward
 * reduces.
 *
 * GPT-2's experts are its MLP (c_fc, GELU, c_proj, with biases) under
 * h.N.mlp.experts.E., the router h.N.mlp.gate.weight; c_proj's bias is added
 * on tp rank 0 only, before the mixing (each rank's outputs are partial).
 *
 * Auxiliary losses, per sequence and sparse block (a grid never changes
 * them: a sequence is one sequence on every grid; under context
 * parallelism its counts and probability sums are added over the cp ranks
 * that hold its parts, and its term counted by cp rank 0), averaged over the
 * global batch's S sequences and the Lm sparse blocks and added to the
 * loss minimised:
 *   aux = α · E · Σ_i f_i·P_i, f_i = (slots of the sequence routed to i) / T,
 *         P_i = mean over its T rows of p_i (Switch, Mixtral; as DeepSeek-V3's
 *         sequence-wise balance loss, per sequence);
 *   z   = β · mean over rows of logsumexp(logits)² (ST-MoE).
 * f has no gradient (a count); the gradient reaches p through P. */
#include "app/model/model_internal.h"

#include <string.h>

#include "parallel/td_coll.h"

void *td_model_pwe(const td_model *m, td_param_kind k, int layer, int e) {
  const td_param *p = td_registry_find_expert(m->reg, k, layer, e);
  int u = td_model_unit_of(m, p);
  return (char *)m->unit_param[u] + (size_t)(p->offset - m->unit_begin[u]) * td_dtype_size(m->pt);
}

float *td_model_pge(const td_model *m, td_param_kind k, int layer, int e) {
  const td_param *p = td_registry_find_expert(m->reg, k, layer, e);
  int u = td_model_unit_of(m, p);
  return m->unit_grad[u] + (p->offset - m->unit_begin[u]);
}

void td_model_moe_reset(td_model *m) {
  m->moe_aux = 0.0, m->moe_z = 0.0, m->moe_dropped = 0.0;
  for (int64_t e = 0; m->moe_load && e < m->E; ++e) m->moe_load[e] = 0.0;
}

void td_model_moe_sums(const td_model *m, double *aux, double *z, double *dropped,
                       const double **load) {
  *aux = m->moe_aux, *z = m->moe_z, *dropped = m->moe_dropped, *load = m->moe_load;
}

/* The global batch's sequences S and the sparse blocks Lm: the auxiliary
 * losses are means over S·Lm (per sequence) and S·T·Lm (per row). */
static double moe_norm(const td_model *m) {
  return (double)m->cfg->training_global_batch * (double)m->moe_layers;
}

/* An expert's product over its n rows, the rows split into pieces of
 * power-of-two sizes, largest first: both back-ends keep a plan per product
 * shape (a oneDNN primitive, a cuBLASLt heuristic), and the experts' row
 * counts change every step — unsplit, every step would build new plans and
 * the caches would grow without bound; split, an expert's products use at
 * most log2(N·K) + 1 shapes each. The pieces always fall the same way for
 * the same n, so the results stay deterministic.
 *   rows in M (rows_k 0): C (n, N) (+)= A (n, K) · op(B), A and C by rows;
 *   rows in K (rows_k 1): C (M, N) += A (n, M)ᵀ · B (n, N), summed piece by
 *   piece (a weight gradient over the expert's rows). */
/* The next piece of an expert's rows: the largest power of two ≤ left. */
static int64_t piece(int64_t left) {
  int64_t len = 1;
  while (len * 2 <= left) len *= 2;
  return len;
}

static td_status expert_mm(td_model *m, int rows_k, int tb, int64_t n, int64_t M, int64_t N,
                           int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                           float beta, float *C) {
  size_t ea = td_dtype_size(at), eb = td_dtype_size(bt);
  for (int64_t r0 = 0; r0 < n;) {
    int64_t len = piece(n - r0);
    if (rows_k)
      TD_CHECK(td_model_mm(m, 1, 0, M, N, len, (const char *)A + (size_t)(r0 * M) * ea, at,
                           (const char *)B + (size_t)(r0 * N) * eb, bt, r0 ? 1.0f : beta, C));
    else
      TD_CHECK(td_model_mm(m, 0, tb, len, N, K, (const char *)A + (size_t)(r0 * K) * ea, at, B,
                           bt, beta, C + r0 * N));
    r0 += len;
  }
  return TD_OK;
}

/* An expert's weight gradient grad(kind, layer, e) (M, N) += A (n, M)ᵀ · B
 * (n, N) over its n rows (type at): now, or under a split backward (zb-h1)
 * recorded for W, piece by piece as expert_mm runs it, on copies of A and B
 * (but not of one marked keep: the slot's own activations). */
static td_status expert_wgrad(td_model *m, int64_t n, int64_t M, int64_t N, const void *A,
                              int keepA, const void *B, int keepB, td_param_kind kind, int layer,
                              int e) {
  td_dtype at = m->at;
  if (!m->defer)
    return expert_mm(m, 1, 0, n, M, N, 0, A, at, B, at, 1.0f, td_model_pge(m, kind, layer, e));
  size_t es = td_dtype_size(at);
  void *ca = (void *)A, *cb = (void *)B;
  if (!keepA) {
    TD_CHECK(td_model_wl_take(m, n * M, es, &ca));
    TD_CHECK(m->k->cast(m->k, ca, at, A, at, n * M));
  }
  if (!keepB) {
    TD_CHECK(td_model_wl_take(m, n * N, es, &cb));
    TD_CHECK(m->k->cast(m->k, cb, at, B, at, n * N));
  }
  for (int64_t r0 = 0; r0 < n;) {
    int64_t len = piece(n - r0);
    td_wop op = {WOP_MM, 1, 0, layer, kind, M, N, len, (const char *)ca + (size_t)(r0 * M) * es,
                 (const char *)cb + (size_t)(r0 * N) * es, e + 1};
    TD_CHECK(td_model_wl_push(m, &op));
    r0 += len;
  }
  return TD_OK;
}

/* The experts' order of the micro-batch's slots with a capacity
 * (model.moe.capacity_factor c > 0), on the host from m->midx_host: per
 * sequence, an expert keeps the first cap = ⌈c·T·K/E⌉ of the slots routed
 * to it in slot order (position, then choice) and drops the rest (Switch;
 * per sequence, so no grid changes which); the kept slots in moe_plan's
 * order (experts in order, an expert's slots in slot order). Writes pos
 * (R) and perm (R) into m->mplan_host and the first row of each expert
 * into off (E + 1). */
static td_status plan_capacity(td_model *m, int32_t *off) {
  int64_t B = m->B, T = m->T, E = m->E, K = m->K, R = B * T * K;
  const int32_t *idx = m->midx_host;
  int32_t *pos = m->mplan_host, *perm = pos + R, *seen = perm + R, *kept = seen + B * E;
  memset(seen, 0, (size_t)(B * E + E) * sizeof *seen);
  for (int64_t s = 0; s < R; ++s) {
    int32_t *c = &seen[(s / (T * K)) * E + idx[s]];
    if (*c < m->cap) ++kept[idx[s]];
    ++*c;
  }
  off[0] = 0;
  for (int64_t e = 0; e < E; ++e) off[e + 1] = off[e] + kept[e];
  memset(seen, 0, (size_t)(B * E + E) * sizeof *seen);
  for (int64_t s = 0; s < R; ++s) {
    int32_t e = idx[s], *c = &seen[(s / (T * K)) * E + e];
    if (*c >= m->cap) {
      pos[s] = -1;
      continue;
    }
    ++*c;
    int32_t r = off[e] + kept[e]++;
    pos[s] = r, perm[r] = (int32_t)s;
  }
  return TD_OK;
}

/* Element r·cols of a buffer of type at. */
static const void *rows_at(const td_model *m, const void *base, int64_t r, int64_t cols) {
  return (const char *)base + (size_t)(r * cols) * td_dtype_size(m->at);
}

/* LLaMA's experts (Mixtral): over the rows of m->mxe in the experts' order,
 * gate = x·w1ᵀ, up = x·w3ᵀ, h = silu(gate)·up, ye = h·w2ᵀ. */
static td_status experts_fwd_swiglu(td_model *m, int layer, const int32_t *offh, float *gate,
                                    float *up, void *h, float *ye) {
  int64_t C = m->C, E = m->E, F = m->Fe;
  td_dtype at = m->at, pt = m->pt;
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    const void *xr = rows_at(m, m->mxe, r0, C);
    TD_CHECK(expert_mm(m, 0, 1, n, 0, F, C, xr, at, td_model_pwe(m, TD_PK_EXP_W1, layer, (int)e),
                       pt, 0.0f, gate + r0 * F));
    TD_CHECK(expert_mm(m, 0, 1, n, 0, F, C, xr, at, td_model_pwe(m, TD_PK_EXP_W3, layer, (int)e),
                       pt, 0.0f, up + r0 * F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(m->k->swiglu_fwd(m->k, h, at, gate, up, offh[E] * F));
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_mm(m, 0, 1, n, 0, C, F, rows_at(m, h, r0, F), at,
                       td_model_pwe(m, TD_PK_EXP_W2, layer, (int)e), pt, 0.0f, ye + r0 * C));
  }
  return td_model_poll(m);
}

/* GPT-2's experts (its MLP, Conv1D (in, out)): fch = x·c_fc + b_fc, h =
 * gelu(fch), ye = h·c_proj (+ b_proj on tp rank 0: ye is a partial sum over
 * tp that the row-parallel sum completes, and the bias is added once). */
static td_status experts_fwd_gelu(td_model *m, int layer, const int32_t *offh, float *fch,
                                  void *h, float *ye) {
  td_kernels *k = m->k;
  int64_t C = m->C, E = m->E, F = m->Fe;
  td_dtype at = m->at, pt = m->pt;
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_mm(m, 0, 0, n, 0, F, C, rows_at(m, m->mxe, r0, C), at,
                       td_model_pwe(m, TD_PK_EXP_FC_W, layer, (int)e), pt, 0.0f, fch + r0 * F));
    TD_CHECK(k->bias_fwd(k, fch + r0 * F, td_model_pwe(m, TD_PK_EXP_FC_B, layer, (int)e), pt, n, F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->gelu_fwd(k, h, at, fch, offh[E] * F));
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_mm(m, 0, 0, n, 0, C, F, rows_at(m, h, r0, F), at,
                       td_model_pwe(m, TD_PK_EXP_PROJ_W, layer, (int)e), pt, 0.0f, ye + r0 * C));
    if (m->grid->tp_rank == 0)
      TD_CHECK(k->bias_fwd(k, ye + r0 * C, td_model_pwe(m, TD_PK_EXP_PROJ_B, layer, (int)e), pt,
                           n, C));
  }
  return td_model_poll(m);
}

td_status td_model_moe_fwd(td_model *m, td_acts *a, int64_t li, int layer, const void *n2,
                           const float *res2, float *out) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, N = B * T, C = m->C, E = m->E, K = m->K, F = m->Fe, R = N * K;
  td_dtype at = m->at, pt = m->pt;
  float *probs = a->mprobs + li * N * E, *lse = a->mlse + li * N, *w = a->mw + li * N * K;
  int32_t *idx = a->midx + li * N * K, *pos = a->mpos + li * R, *perm = a->mperm + li * R;
  int32_t *off = a->moff + li * (E + 1), *offh = a->moff_host + li * (E + 1);
  float *gate = a->mgu + li * 2 * R * F, *up = gate + R * F, *ye = a->mye + li * R * C;
  void *h = td_model_at(m, a->mh, li * R * F);
  const void *x = NULL;
  TD_CHECK(td_model_col_in(m, n2, &x));
  /* the router, per sequence (its P for the balance loss) */
  TD_CHECK(td_model_mm(m, 0, 1, N, E, C, x, at, td_model_pw(m, TD_PK_ROUTER, layer), pt, 0.0f,
                       m->mlog));
  for (int64_t b = 0; b < B; ++b)
    TD_CHECK(k->moe_route(k, probs + b * T * E, lse + b * T, idx + b * T * K, w + b * T * K,
                          m->mpsum + b * E, m->mlog + b * T * E, T, E, K));
  TD_CHECK(k->to_host(k, m->midx_host, idx, (size_t)N * K * sizeof(int32_t)));
  if (m->cap > 0) {
    TD_CHECK(plan_capacity(m, offh));
    TD_CHECK(k->to_device(k, pos, m->mplan_host, (size_t)R * sizeof(int32_t)));
    TD_CHECK(k->to_device(k, perm, m->mplan_host + R, (size_t)R * sizeof(int32_t)));
    TD_CHECK(k->to_device(k, off, offh, (size_t)(E + 1) * sizeof(int32_t)));
  } else {
    TD_CHECK(k->moe_plan(k, pos, perm, off, m->mcount, idx, N, E, K, 0));
    TD_CHECK(k->to_host(k, offh, off, (size_t)(E + 1) * sizeof(int32_t)));
    if (offh[E] != R)
      TD_FAIL(TD_ERR_INTERNAL, "moe: block %d kept %d of %lld slots without a capacity", layer,
              (int)offh[E], (long long)R);
  }
  int64_t Rk = offh[E]; /* the rows kept */
  /* the experts, each over its rows */
  TD_CHECK(k->moe_gather(k, m->mxe, x, at, perm, Rk, C, K));
  if (m->llama)
    TD_CHECK(experts_fwd_swiglu(m, layer, offh, gate, up, h, ye));
  else
    TD_CHECK(experts_fwd_gelu(m, layer, offh, gate, h, ye));
  TD_CHECK(k->moe_combine(k, m->dtmp, ye, w, pos, N, K, C));
  TD_CHECK(td_model_row_out(m, NULL, res2, out));
  /* what the step reports and the backward's balance gradient needs: each
   * sequence's slots per expert and Σ p over its rows — under context
   * parallelism summed over the cp ranks that hold the sequence's parts —
   * and the losses' sums (not again in a recomputation) */
  double *cnt = a->mcnt_host + li * B * E, *seq = m->mseq_host, Tf = (double)m->Tk;
  TD_CHECK(k->to_host(k, m->mpsum_host, m->mpsum, (size_t)(B * E) * sizeof(float)));
  if (!m->moe_quiet) m->moe_dropped += (double)(R - Rk);
  memset(seq, 0, (size_t)(2 * B * E) * sizeof *seq);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < K; ++j) seq[(r / T) * E + m->midx_host[r * K + j]] += 1.0;
  for (int64_t i = 0; i < B * E; ++i) {
    if (!m->moe_quiet) m->moe_load[i % E] += seq[i]; /* this rank's rows */
    seq[B * E + i] = (double)m->mpsum_host[i];
  }
  if (m->cp > 1)
    TD_CHECK(td_coll_allreduce_f64(m->grid->cp_comm, seq, 2 * B * E, MPI_SUM,
                                   m->cp_stats ? m->cp_stats : m->stats));
  memcpy(cnt, seq, (size_t)(B * E) * sizeof *cnt);
  if (m->moe_quiet) return TD_OK;
  TD_CHECK(k->to_host(k, m->mlse_host, lse, (size_t)N * sizeof(float)));
  for (int64_t b = 0; b < B && m->grid->cp_rank == 0; ++b) { /* a sequence once */
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += (cnt[b * E + e] / Tf) * (seq[B * E + b * E + e] / Tf);
    m->moe_aux += (double)E * s;
  }
  for (int64_t r = 0; r < N; ++r) m->moe_z += (double)m->mlse_host[r] * (double)m->mlse_host[r];
  return TD_OK;
}

/* Where an expert's small gradient (a bias) goes: the gradient, or under a
 * split backward a zeroed stash W adds to it (td_model_wdst's, per expert). */
static td_status expert_wdst(td_model *m, td_param_kind kind, int layer, int e, float **out) {
  if (!m->defer) {
    *out = td_model_pge(m, kind, layer, e);
    return TD_OK;
  }
  const td_param *p = td_registry_find_expert(m->reg, kind, layer, e);
  void *st = NULL;
  TD_CHECK(td_model_wl_take(m, p->local_numel, 4, &st));
  TD_CHECK(m->k->zero(m->k, st, (size_t)p->local_numel * sizeof(float)));
  td_wop op = {WOP_ADD, 0, 0, layer, kind, p->local_numel, 0, 0, st, NULL, e + 1};
  TD_CHECK(td_model_wl_push(m, &op));
  *out = st;
  return TD_OK;
}

/* The backward of experts_fwd_swiglu from dye (m->mdye, type at): the
 * experts' weight gradients and their inputs' gradient dxe (m->mdxe). */
static td_status experts_bwd_swiglu(td_model *m, td_acts *a, int layer, const int32_t *offh,
                                    const float *gate, const float *up, const void *h,
                                    const void *n2, const int32_t *perm, const void **xo) {
  td_kernels *k = m->k;
  int64_t C = m->C, E = m->E, K = m->K, F = m->Fe, Rk = offh[E], R = m->B * m->T * K;
  td_dtype at = m->at, pt = m->pt;
  float *dgate = m->mdh, *dup = dgate + R * F, *dh = dup + R * F;
  const void *x = NULL, *d = NULL;
  /* w2: dW2_e += dyeᵀ·h, dh = dye·W2_e */
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    const void *dr = rows_at(m, m->mdye, r0, C);
    TD_CHECK(expert_wgrad(m, n, C, F, dr, 0, rows_at(m, h, r0, F), a != &m->work, TD_PK_EXP_W2,
                          layer, (int)e));
    TD_CHECK(expert_mm(m, 0, 0, n, 0, F, C, dr, at, td_model_pwe(m, TD_PK_EXP_W2, layer, (int)e),
                       pt, 0.0f, dh + r0 * F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->swiglu_bwd(k, dgate, dup, dh, gate, up, Rk * F));
  /* w1, w3: their gradients from the experts' inputs again, the inputs'
   * gradient dxe summed over both */
  TD_CHECK(td_model_col_in(m, n2, &x));
  TD_CHECK(k->moe_gather(k, m->mxe, x, at, perm, Rk, C, K));
  for (int pass = 0; pass < 2; ++pass) {
    td_param_kind kind = pass == 0 ? TD_PK_EXP_W1 : TD_PK_EXP_W3;
    TD_CHECK(td_model_mm_grad(m, pass == 0 ? dgate : dup, Rk * F, &d));
    for (int64_t e = 0; e < E; ++e) {
      int64_t r0 = offh[e], n = offh[e + 1] - r0;
      if (n == 0) continue;
      const void *dr = rows_at(m, d, r0, F);
      TD_CHECK(expert_wgrad(m, n, F, C, dr, 0, rows_at(m, m->mxe, r0, C), 0, kind, layer,
                            (int)e));
      TD_CHECK(expert_mm(m, 0, 0, n, 0, C, F, dr, at, td_model_pwe(m, kind, layer, (int)e), pt,
                         pass == 0 ? 0.0f : 1.0f, m->mdxe + r0 * C));
    }
    TD_CHECK(td_model_poll(m));
  }
  *xo = x;
  return TD_OK;
}

/* The backward of experts_fwd_gelu from dye (float32 in m->mdxe; of type at
 * in m->mdye, or m->mdxe itself in float32). */
static td_status experts_bwd_gelu(td_model *m, td_acts *a, int layer, const int32_t *offh,
                                  const float *fch, const void *h, const void *n2,
                                  const int32_t *perm, const void **xo) {
  td_kernels *k = m->k;
  int64_t C = m->C, E = m->E, K = m->K, F = m->Fe, Rk = offh[E], R = m->B * m->T * K;
  td_dtype at = m->at, pt = m->pt;
  float *dfch = m->mdh, *dh = dfch + R * F, *g = NULL;
  const void *dye = at == TD_DTYPE_F32 ? (const void *)m->mdxe : m->mdye, *x = NULL, *d = NULL;
  /* c_proj: its bias's gradient Σ dye (the same on every tp rank: dye is),
   * dW += hᵀ·dye, dh = dye·Wᵀ */
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    const void *dr = rows_at(m, dye, r0, C);
    TD_CHECK(expert_wdst(m, TD_PK_EXP_PROJ_B, layer, (int)e, &g));
    TD_CHECK(k->bias_bwd(k, g, m->mdxe + r0 * C, n, C));
    TD_CHECK(expert_wgrad(m, n, F, C, rows_at(m, h, r0, F), a != &m->work, dr, 0,
                          TD_PK_EXP_PROJ_W, layer, (int)e));
    TD_CHECK(expert_mm(m, 0, 1, n, 0, F, C, dr, at,
                       td_model_pwe(m, TD_PK_EXP_PROJ_W, layer, (int)e), pt, 0.0f, dh + r0 * F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->gelu_bwd(k, dfch, fch, dh, Rk * F));
  /* c_fc: its bias's gradient Σ dfch, dW += xᵀ·dfch from the experts' inputs
   * again, dxe = dfch·Wᵀ */
  TD_CHECK(td_model_col_in(m, n2, &x));
  TD_CHECK(k->moe_gather(k, m->mxe, x, at, perm, Rk, C, K));
  TD_CHECK(td_model_mm_grad(m, dfch, Rk * F, &d));
  for (int64_t e = 0; e < E; ++e) {
    int64_t r0 = offh[e], n = offh[e + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_wdst(m, TD_PK_EXP_FC_B, layer, (int)e, &g));
    TD_CHECK(k->bias_bwd(k, g, dfch + r0 * F, n, F));
    const void *dr = rows_at(m, d, r0, F);
    TD_CHECK(expert_wgrad(m, n, C, F, rows_at(m, m->mxe, r0, C), 0, dr, 0, TD_PK_EXP_FC_W, layer,
                          (int)e));
    TD_CHECK(expert_mm(m, 0, 1, n, 0, C, F, dr, at,
                       td_model_pwe(m, TD_PK_EXP_FC_W, layer, (int)e), pt, 0.0f,
                       m->mdxe + r0 * C));
  }
  *xo = x;
  return td_model_poll(m);
}

td_status td_model_moe_bwd(td_model *m, td_acts *a, int64_t li, int layer, const void *n2,
                           const float **dx) {
  td_kernels *k = m->k;
  int64_t B = m->B, T = m->T, N = B * T, C = m->C, E = m->E, K = m->K, F = m->Fe, R = N * K;
  td_dtype at = m->at, pt = m->pt;
  const float *probs = a->mprobs + li * N * E, *lse = a->mlse + li * N, *w = a->mw + li * N * K;
  const int32_t *idx = a->midx + li * N * K, *pos = a->mpos + li * R, *perm = a->mperm + li * R;
  const int32_t *offh = a->moff_host + li * (E + 1);
  int64_t Rk = offh[E]; /* the rows kept */
  const float *gate = a->mgu + li * 2 * R * F, *up = gate + R * F, *ye = a->mye + li * R * C;
  const void *h = td_model_at(m, a->mh, li * R * F);
  const double *cnt = a->mcnt_host + li * B * E;
  const float *dy = NULL;
  const void *x = NULL, *d = NULL;
  /* the mixture: the experts' output gradient, the weights' (summed over tp:
   * each rank's outputs are partial) */
  TD_CHECK(td_model_row_grad(m, &dy));
  if (m->llama) {
    TD_CHECK(k->moe_combine_bwd(k, m->mdye, at, m->mdw, dy, ye, w, pos, N, K, C));
    TD_CHECK(td_model_tp_sum(m, m->mdw, N * K));
    TD_CHECK(experts_bwd_swiglu(m, a, layer, offh, gate, up, h, n2, perm, &x));
  } else {
    /* the output biases' gradients read dye in float32 (in mdxe, free until
     * the input gradients); the products its copy of type at */
    TD_CHECK(k->moe_combine_bwd(k, m->mdxe, TD_DTYPE_F32, m->mdw, dy, ye, w, pos, N, K, C));
    TD_CHECK(td_model_tp_sum(m, m->mdw, N * K));
    if (at != TD_DTYPE_F32) TD_CHECK(k->cast(k, m->mdye, at, m->mdxe, TD_DTYPE_F32, Rk * C));
    TD_CHECK(experts_bwd_gelu(m, a, layer, offh, gate, h, n2, perm, &x));
  }
  /* x: the experts' input as experts_bwd_* gathered it (sequence parallel:
   * valid until the next gather) */
  TD_CHECK(k->moe_scatter(k, m->dln, m->mdxe, pos, N, K, C));
  /* the router: through the weights' renormalisation and the softmax, plus
   * each sequence's balance gradient α·E·f_i/(S·Lm·T) for p_i, and the
   * z-loss's 2β·lse/(S·T·Lm) */
  double norm = moe_norm(m), Tf = (double)m->Tk; /* a whole sequence's rows */
  float zc = (float)(2.0 * m->z_beta / (norm * Tf));
  if (m->aux_alpha > 0.0) { /* (B, E), staged through the forward's host buffer */
    float *g = m->mpsum_host;
    for (int64_t i = 0; i < B * E; ++i)
      g[i] = (float)(m->aux_alpha * (double)E * (cnt[i] / Tf) / (norm * Tf));
    TD_CHECK(k->to_device(k, m->mgP, g, (size_t)(B * E) * sizeof(float)));
  }
  for (int64_t b = 0; b < B; ++b)
    TD_CHECK(k->moe_route_bwd(k, m->mdlog + b * T * E, m->mdw + b * T * K, probs + b * T * E,
                              lse + b * T, idx + b * T * K, w + b * T * K,
                              m->aux_alpha > 0.0 ? m->mgP + b * E : NULL, zc, T, E, K));
  TD_CHECK(td_model_mm_grad(m, m->mdlog, N * E, &d));
  float *gr = NULL;
  TD_CHECK(td_model_wdst(m, TD_PK_ROUTER, layer, &gr));
  TD_CHECK(td_model_mm(m, 1, 0, E, C, N, d, at, x, at, 1.0f, gr));
  if (m->grid->tp_rank == 0) /* the same on every tp rank: added once to the partial sum */
    TD_CHECK(td_model_mm(m, 0, 0, N, C, E, d, at, td_model_pw(m, TD_PK_ROUTER, layer), pt, 1.0f,
                         m->dln));
  TD_CHECK(td_model_poll(m));
  return td_model_col_grad(m, dx);
}
