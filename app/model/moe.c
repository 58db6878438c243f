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
 * f has no gradient (a count); the gradient reaches p through P.
 *
 * Expert parallelism (parallel.ep > 1): the ep ranks of an ep_comm group see
 * different tokens and hold different experts, E/ep each. After routing,
 * a rank's slots in the experts' order are already grouped by the ep rank
 * holding their expert; one all-to-all (MPI_Alltoallv of rows, counts
 * exchanged first) sends each group there; the receiver puts the rows in
 * expert-major order (its experts in order, then the sending rank, then the
 * sender's order), computes its experts over them and sends the outputs
 * back the same way; the combine is local. The backward sends the outputs'
 * gradients the same way, sends the experts' inputs again (not kept: the
 * all-to-all instead of ep·N·min(K, E/ep) rows a layer), and returns the
 * inputs' gradients. Every row is computed by the same expert with the same
 * product pieces as on one rank, and the weight gradients sum the same rows,
 * so ep changes the order of a sum, not its terms. */
#include "app/model/model_internal.h"

#include <string.h>

#include "parallel/td_coll.h"
#include "parallel/td_mpi.h"
#include "td_log.h"

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

/* The experts this rank computes and their rows: experts [e0, e0 + n), the
 * j-th's rows [off[j], off[j + 1]) of the input (off[n] rows in all). */
typedef struct {
  int64_t e0, n;
  const int32_t *off;
} expert_set;

/* ---- expert parallelism ----------------------------------------------------------- */

/* The exchange of a sparse block's micro-batch from its local expert offsets
 * offh (E + 1) and rc (ep·El: the rows peer q sends this rank's expert j at
 * q·El + j): counts and displacements of both directions, the local experts'
 * offsets m->ep_offx and the expert-major order (host, then the device's
 * copies). exchange: in the forward, rc is made here (the counts sent
 * all-to-all first); in the backward it is the forward's. Collective on
 * ep_comm when exchange. */
static td_status ep_plan(td_model *m, const int32_t *offh, int32_t *rc, int exchange) {
  int ep = m->ep;
  int64_t El = m->El;
  int32_t *sc = m->ep_sent_host; /* (E) the rows sent to each expert */
  for (int64_t e = 0; e < ep * El; ++e) sc[e] = offh[e + 1] - offh[e];
  if (exchange)
    TD_MPI_CHECK(MPI_Alltoall(sc, (int)El, MPI_INT32_T, rc, (int)El, MPI_INT32_T, m->grid->ep_comm));
  int64_t s = 0, r = 0;
  for (int q = 0; q < ep; ++q) {
    int64_t ns = 0, nr = 0;
    for (int64_t j = 0; j < El; ++j) ns += sc[q * El + j], nr += rc[q * El + j];
    m->ep_sd[q] = (int)s, m->ep_sc[q] = (int)ns, m->ep_rd[q] = (int)r, m->ep_rcn[q] = (int)nr;
    s += ns, r += nr;
  }
  if (r > m->Rx)
    TD_FAIL(TD_ERR_INTERNAL, "moe: %lld rows received for %lld experts, room for %lld",
            (long long)r, (long long)El, (long long)m->Rx);
  /* expert-major: expert j's rows from peer 0, 1, ..., each peer's in its order */
  int32_t *perm = m->ep_perm_host, *pos = m->ep_pos_host, *off = m->ep_offx;
  int64_t at = 0;
  for (int64_t j = 0; j < El; ++j) {
    off[j] = (int32_t)at;
    for (int q = 0; q < ep; ++q) {
      int64_t first = m->ep_rd[q];
      for (int64_t i = 0; i < j; ++i) first += rc[q * El + i];
      for (int64_t i = 0; i < rc[q * El + j]; ++i) perm[at++] = (int32_t)(first + i);
    }
  }
  off[El] = (int32_t)at;
  for (int64_t i = 0; i < at; ++i) pos[perm[i]] = (int32_t)i;
  td_kernels *k = m->k;
  TD_CHECK(k->to_device(k, m->mperm_x, perm, (size_t)(at > 0 ? at : 1) * sizeof(int32_t)));
  return k->to_device(k, m->mpos_x, pos, (size_t)(at > 0 ? at : 1) * sizeof(int32_t));
}

/* Rows of C elements (type t: a row of m->ep_row[t == F32]) over ep_comm:
 * forward, send (this rank's slots, the peers' groups in order) to recv
 * (peer order, what each peer sent); back, the reverse. Through the device
 * all-to-all (NCCL) where the trainer made one, else MPI, on host copies
 * where the back-end's memory is not host memory. Collective on ep_comm. */
static td_status ep_exchange(td_model *m, const void *send, void *recv, int back, td_dtype t) {
  td_kernels *k = m->k;
  int ep = m->ep, *sc = back ? m->ep_rcn : m->ep_sc, *sd = back ? m->ep_rd : m->ep_sd;
  int *rcn = back ? m->ep_sc : m->ep_rcn, *rd = back ? m->ep_sd : m->ep_rd;
  MPI_Datatype row = m->ep_row[t == TD_DTYPE_F32];
  size_t rb = (size_t)m->C * td_dtype_size(t);
  int64_t ns = sd[ep - 1] + sc[ep - 1], nr = rd[ep - 1] + rcn[ep - 1];
  double t0 = td_now();
  td_coll_stats *st = m->ep_stats ? m->ep_stats : m->stats;
  if (m->dc_ep) { /* queued on the device, ordered before what reads recv */
    int *e = m->ep_ecnt, C = (int)m->C;
    for (int q = 0; q < ep; ++q)
      e[q] = sc[q] * C, e[ep + q] = sd[q] * C, e[2 * ep + q] = rcn[q] * C, e[3 * ep + q] = rd[q] * C;
    uint64_t ticket = 0;
    TD_CHECK(td_dcomm_alltoallv(m->dc_ep, send, e, e + ep, recv, e + 2 * ep, e + 3 * ep, t, st,
                                &ticket));
    TD_CHECK(td_dcomm_join(m->dc_ep, ticket));
    m->ep_ms += (td_now() - t0) * 1e3; /* queued: what the host spent */
    return TD_OK;
  }
  const void *s = send;
  void *r = recv;
  if (m->ep_stage) { /* staged: two buffers of max(N·K, Rx) rows */
    int64_t R = m->B * m->T * m->K, Rm = R > m->Rx ? R : m->Rx;
    s = m->ep_stage, r = m->ep_stage + (size_t)Rm * rb;
    if (ns > 0) TD_CHECK(k->to_host(k, (void *)s, send, (size_t)ns * rb));
  } else {
    TD_CHECK(k->sync(k));
  }
  TD_MPI_CHECK(MPI_Alltoallv(s, sc, sd, row, r, rcn, rd, row, m->grid->ep_comm));
  if (m->ep_stage && nr > 0) TD_CHECK(k->to_device(k, recv, r, (size_t)nr * rb));
  double ms = (td_now() - t0) * 1e3;
  m->ep_ms += ms;
  if (st) { /* the rows that left this rank */
    st->bytes[TD_COLL_SENDRECV] += (double)(ns - sc[m->ep_rank]) * (double)rb;
    st->ms[TD_COLL_SENDRECV] += ms;
    st->calls[TD_COLL_SENDRECV]++;
  }
  return TD_OK;
}

/* The experts' inputs in m->mxe: the local slots' rows (x's rows in the
 * experts' order, perm, Rk of them), under expert parallelism sent to their
 * experts' ranks and put in expert-major order (ep_plan's, made before).
 * Collective on ep_comm when ep > 1. */
static td_status expert_inputs(td_model *m, const void *x, const int32_t *perm, int64_t Rk) {
  td_kernels *k = m->k;
  TD_CHECK(k->moe_gather(k, m->mxe, x, m->at, perm, Rk, m->C, m->K));
  if (m->ep == 1) return TD_OK;
  TD_CHECK(ep_exchange(m, m->mxe, m->mxr, 0, m->at));
  return k->moe_gather(k, m->mxe, m->mxr, m->at, m->mperm_x, m->ep_offx[m->El], m->C, 1);
}

/* Rows (C, float32 or type t) computed in expert-major order at src back to
 * the ranks whose slots they are: dst (the local slots' experts' order).
 * Collective on ep_comm. */
static td_status expert_outputs(td_model *m, const void *src, void *dst, td_dtype t) {
  TD_CHECK(m->k->moe_gather(m->k, m->mxr, src, t, m->mpos_x, m->ep_offx[m->El], m->C, 1));
  return ep_exchange(m, m->mxr, dst, 1, t);
}

/* Element r·cols of a buffer of type at. */
static const void *rows_at(const td_model *m, const void *base, int64_t r, int64_t cols) {
  return (const char *)base + (size_t)(r * cols) * td_dtype_size(m->at);
}

/* LLaMA's experts (Mixtral): over the rows of m->mxe in the experts' order,
 * gate = x·w1ᵀ, up = x·w3ᵀ, h = silu(gate)·up, ye = h·w2ᵀ. */
static td_status experts_fwd_swiglu(td_model *m, int layer, const expert_set *s, float *gate,
                                    float *up, void *h, float *ye) {
  int64_t C = m->C, F = m->Fe;
  const int32_t *offh = s->off;
  td_dtype at = m->at, pt = m->pt;
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
    if (n == 0) continue;
    const void *xr = rows_at(m, m->mxe, r0, C);
    TD_CHECK(expert_mm(m, 0, 1, n, 0, F, C, xr, at, td_model_pwe(m, TD_PK_EXP_W1, layer, (int)e),
                       pt, 0.0f, gate + r0 * F));
    TD_CHECK(expert_mm(m, 0, 1, n, 0, F, C, xr, at, td_model_pwe(m, TD_PK_EXP_W3, layer, (int)e),
                       pt, 0.0f, up + r0 * F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(m->k->swiglu_fwd(m->k, h, at, gate, up, offh[s->n] * F));
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_mm(m, 0, 1, n, 0, C, F, rows_at(m, h, r0, F), at,
                       td_model_pwe(m, TD_PK_EXP_W2, layer, (int)e), pt, 0.0f, ye + r0 * C));
  }
  return td_model_poll(m);
}

/* GPT-2's experts (its MLP, Conv1D (in, out)): fch = x·c_fc + b_fc, h =
 * gelu(fch), ye = h·c_proj (+ b_proj on tp rank 0: ye is a partial sum over
 * tp that the row-parallel sum completes, and the bias is added once). */
static td_status experts_fwd_gelu(td_model *m, int layer, const expert_set *s, float *fch,
                                  void *h, float *ye) {
  td_kernels *k = m->k;
  int64_t C = m->C, F = m->Fe;
  const int32_t *offh = s->off;
  td_dtype at = m->at, pt = m->pt;
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
    if (n == 0) continue;
    TD_CHECK(expert_mm(m, 0, 0, n, 0, F, C, rows_at(m, m->mxe, r0, C), at,
                       td_model_pwe(m, TD_PK_EXP_FC_W, layer, (int)e), pt, 0.0f, fch + r0 * F));
    TD_CHECK(k->bias_fwd(k, fch + r0 * F, td_model_pwe(m, TD_PK_EXP_FC_B, layer, (int)e), pt, n, F));
  }
  TD_CHECK(td_model_poll(m));
  TD_CHECK(k->gelu_fwd(k, h, at, fch, offh[s->n] * F));
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
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
  int64_t Rx = m->Rx;
  float *gate = a->mgu + li * 2 * Rx * F, *up = gate + Rx * F, *ye = a->mye + li * R * C;
  void *h = td_model_at(m, a->mh, li * Rx * F);
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
  /* the experts, each over its rows: here, or (expert parallel) on the ep
   * ranks holding them, their outputs (in m->mdxe) sent back into ye */
  expert_set s = {0, E, offh};
  float *yx = ye;
  if (m->ep > 1) {
    TD_CHECK(ep_plan(m, offh, a->mrc_host + li * E, 1));
    s = (expert_set){m->ep_rank * m->El, m->El, m->ep_offx};
    yx = m->mdxe;
  }
  TD_CHECK(expert_inputs(m, x, perm, Rk));
  if (m->llama)
    TD_CHECK(experts_fwd_swiglu(m, layer, &s, gate, up, h, yx));
  else
    TD_CHECK(experts_fwd_gelu(m, layer, &s, gate, h, yx));
  if (m->ep > 1) TD_CHECK(expert_outputs(m, m->mdxe, ye, TD_DTYPE_F32));
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
    double fp = 0.0;
    for (int64_t e = 0; e < E; ++e) fp += (cnt[b * E + e] / Tf) * (seq[B * E + b * E + e] / Tf);
    m->moe_aux += (double)E * fp;
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
static td_status experts_bwd_swiglu(td_model *m, td_acts *a, int layer, const expert_set *s,
                                    const float *gate, const float *up, const void *h,
                                    const void *n2, const int32_t *perm, int64_t Rl,
                                    const void **xo) {
  td_kernels *k = m->k;
  int64_t C = m->C, F = m->Fe, R = m->Rx;
  const int32_t *offh = s->off;
  int64_t Rk = offh[s->n];
  td_dtype at = m->at, pt = m->pt;
  float *dgate = m->mdh, *dup = dgate + R * F, *dh = dup + R * F;
  const void *x = NULL, *d = NULL;
  /* w2: dW2_e += dyeᵀ·h, dh = dye·W2_e */
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
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
  TD_CHECK(expert_inputs(m, x, perm, Rl));
  for (int pass = 0; pass < 2; ++pass) {
    td_param_kind kind = pass == 0 ? TD_PK_EXP_W1 : TD_PK_EXP_W3;
    TD_CHECK(td_model_mm_grad(m, pass == 0 ? dgate : dup, Rk * F, &d));
    for (int64_t j = 0; j < s->n; ++j) {
      int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
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
static td_status experts_bwd_gelu(td_model *m, td_acts *a, int layer, const expert_set *s,
                                  const float *fch, const void *h, const void *n2,
                                  const int32_t *perm, int64_t Rl, const void **xo) {
  td_kernels *k = m->k;
  int64_t C = m->C, F = m->Fe, R = m->Rx;
  const int32_t *offh = s->off;
  int64_t Rk = offh[s->n];
  td_dtype at = m->at, pt = m->pt;
  float *dfch = m->mdh, *dh = dfch + R * F, *g = NULL;
  const void *dye = at == TD_DTYPE_F32 ? (const void *)m->mdxe : m->mdye, *x = NULL, *d = NULL;
  /* c_proj: its bias's gradient Σ dye (the same on every tp rank: dye is),
   * dW += hᵀ·dye, dh = dye·Wᵀ */
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
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
  TD_CHECK(expert_inputs(m, x, perm, Rl));
  TD_CHECK(td_model_mm_grad(m, dfch, Rk * F, &d));
  for (int64_t j = 0; j < s->n; ++j) {
    int64_t e = s->e0 + j, r0 = offh[j], n = offh[j + 1] - r0;
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
  int64_t Rk = offh[E], Rx = m->Rx; /* the rows kept; the rows experts may compute here */
  const float *gate = a->mgu + li * 2 * Rx * F, *up = gate + Rx * F, *ye = a->mye + li * R * C;
  const void *h = td_model_at(m, a->mh, li * Rx * F);
  /* the experts this rank computes: all, or (expert parallel) its E/ep over
   * the rows the forward received (its counts; the order made again) */
  expert_set s = {0, E, offh};
  if (m->ep > 1) {
    TD_CHECK(ep_plan(m, offh, a->mrc_host + li * E, 0));
    s = (expert_set){m->ep_rank * m->El, m->El, m->ep_offx};
  }
  int64_t Rs = s.off[s.n]; /* their rows */
  const double *cnt = a->mcnt_host + li * B * E;
  const float *dy = NULL;
  const void *x = NULL, *d = NULL;
  /* the mixture: the experts' output gradient, the weights' (summed over tp:
   * each rank's outputs are partial) */
  TD_CHECK(td_model_row_grad(m, &dy));
  if (m->llama) {
    TD_CHECK(k->moe_combine_bwd(k, m->mdye, at, m->mdw, dy, ye, w, pos, N, K, C));
    TD_CHECK(td_model_tp_sum(m, m->mdw, N * K));
    if (m->ep > 1) { /* to the experts' ranks, in their expert-major order */
      TD_CHECK(ep_exchange(m, m->mdye, m->mxr, 0, at));
      TD_CHECK(k->moe_gather(k, m->mdye, m->mxr, at, m->mperm_x, Rs, C, 1));
    }
    TD_CHECK(experts_bwd_swiglu(m, a, layer, &s, gate, up, h, n2, perm, Rk, &x));
  } else {
    /* the output biases' gradients read dye in float32 (in mdxe, free until
     * the input gradients); the products its copy of type at */
    TD_CHECK(k->moe_combine_bwd(k, m->mdxe, TD_DTYPE_F32, m->mdw, dy, ye, w, pos, N, K, C));
    TD_CHECK(td_model_tp_sum(m, m->mdw, N * K));
    if (m->ep > 1) {
      TD_CHECK(ep_exchange(m, m->mdxe, m->mxr, 0, TD_DTYPE_F32));
      TD_CHECK(k->moe_gather(k, m->mdxe, m->mxr, TD_DTYPE_F32, m->mperm_x, Rs, C, 1));
    }
    if (at != TD_DTYPE_F32) TD_CHECK(k->cast(k, m->mdye, at, m->mdxe, TD_DTYPE_F32, Rs * C));
    TD_CHECK(experts_bwd_gelu(m, a, layer, &s, gate, h, n2, perm, Rk, &x));
  }
  /* the experts' input gradients back to the slots' ranks */
  if (m->ep > 1) TD_CHECK(expert_outputs(m, m->mdxe, m->mdxe, TD_DTYPE_F32));
  /* x: the block's input as experts_bwd_* gathered it (sequence parallel:
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
