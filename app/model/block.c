/* block.c — the machinery both families' blocks (gpt2.c, llama.c) and the
 * head (model.c) are built from, on one rank's shard: where a parameter, its
 * gradient and an activation live now (the units' views); the matmuls; the
 * sums, gathers and scatters over tp (tensor and sequence parallelism) and
 * over cp (context parallelism: the attention that reads every cp rank's
 * keys and values); the input and the output of a column- and a
 * row-parallel matmul; and the recording of the weight-gradient work a
 * split backward (zb-h1) leaves for W. The parallel scheme is described at
 * the top of model.c; model_internal.h declares what the other files use. */
#include "app/model/model_internal.h"

#include "parallel/td_mpi.h"

/* ---- per-layer views ------------------------------------------------------------ */

int td_model_unit_of(const td_model *m, const td_param *p) {
  if (p->expert >= 0) return m->nunits + 1 + p->layer; /* the block's expert unit */
  if (p->layer >= 0) return 1 + p->layer;
  return p->kind == TD_PK_WTE || p->kind == TD_PK_WPE ? 0 : m->nunits - 1;
}

/* Parameter kind/layer (type m->pt) where its unit lives now. */
void *td_model_pw(const td_model *m, td_param_kind k, int layer) {
  const td_param *p = td_registry_find(m->reg, k, layer);
  int u = td_model_unit_of(m, p);
  return (char *)m->unit_param[u] + (size_t)(p->offset - m->unit_begin[u]) * td_dtype_size(m->pt);
}

/* Its gradient (float32). */
float *td_model_pg(const td_model *m, td_param_kind k, int layer) {
  const td_param *p = td_registry_find(m->reg, k, layer);
  int u = td_model_unit_of(m, p);
  return m->unit_grad[u] + (p->offset - m->unit_begin[u]);
}

/* Element i of an activation buffer of type m->at. */
void *td_model_at(const td_model *m, void *base, int64_t i) {
  return (char *)base + (size_t)i * td_dtype_size(m->at);
}

/* Layer li's attention probabilities in the set a: its own, or the one
 * buffer selective recomputation fills again before each backward. */
float *td_model_att_at(const td_model *m, const td_acts *a, int64_t li) {
  return m->recompute_att ? m->att_re : a->att + li * m->B * m->NH * m->T * td_model_att_cols(m);
}

/* What attention keeps per query row: Tk probabilities (materialised), or
 * one log-sum-exp (fused). */
int64_t td_model_att_cols(const td_model *m) { return m->fused_att ? 1 : m->Tk; }

/* Between large kernels: let the owner's communication progress. */
td_status td_model_poll(td_model *m) { return m->hooks.poll ? m->hooks.poll(m->hooks.ctx) : TD_OK; }

/* C = op(A)·op(B) (+ C): activations or gradients (type at) times
 * parameters (type m->pt), or their products for a weight gradient. */
td_status td_model_mm(td_model *m, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      const void *A, td_dtype at, const void *B, td_dtype bt, float beta,
                      float *C) {
  return m->k->gemm(m->k, ta, tb, M, N, K, A, at, B, bt, beta, C, TD_DTYPE_F32);
}

/* The gradient g (n floats) as a matmul reads it: itself in float32, its
 * bf16 rounding (in m->dmm) under bf16. */
td_status td_model_mm_grad(td_model *m, const float *g, int64_t n, const void **out) {
  *out = g;
  if (m->at == TD_DTYPE_F32) return TD_OK;
  TD_CHECK(m->k->cast(m->k, m->dmm, TD_DTYPE_BF16, g, TD_DTYPE_F32, n));
  *out = m->dmm;
  return TD_OK;
}

/* Sum a (N, C) partial result over the tensor-parallel group. */
td_status td_model_tp_sum(td_model *m, float *x, int64_t n) {
  if (m->grid->tp == 1) return TD_OK;
  if (m->dc_tp) return td_dcomm_allreduce_joined(m->dc_tp, x, n, 0, m->stats);
  TD_CHECK(m->k->sync(m->k));
  TD_CHECK(td_coll_allreduce_f32_staged(m->grid->tp_comm, m->k, x, m->host_stage, n, MPI_SUM,
                                        m->stats));
  return TD_OK;
}

/* ---- sequence parallelism ------------------------------------------------------- */

/* A group the model gathers and scatters rows over: tensor parallel
 * (sequence parallelism) or context parallel (keys and values). */
typedef struct {
  MPI_Comm comm;
  struct td_dcomm *dc; /* its device collectives, or NULL: MPI (staged) */
  int size;
  td_coll_stats *stats;
} group;

static group tp_group(const td_model *m) {
  return (group){m->grid->tp_comm, m->dc_tp, m->grid->tp, m->stats};
}

static group cp_group(const td_model *m) {
  return (group){m->grid->cp_comm, m->dc_cp, m->cp, m->cp_stats ? m->cp_stats : m->stats};
}

/* Equal counts n at displacements r·n of a device collective over p members. */
static td_status equal_parts(td_model *m, int p, int64_t n, int **counts, int **displs) {
  int all = 0;
  TD_CHECK(td_mpi_count(n * p, &all));
  *counts = m->counts, *displs = m->counts + p;
  for (int r = 0; r < p; ++r) (*counts)[r] = (int)n, (*displs)[r] = (int)(r * n);
  return TD_OK;
}

/* full (size·n elements of type t) = the n elements x of every member of
 * the group, member r's at r·n. Collective on the group. */
static td_status group_gather(td_model *m, group g, const void *x, void *full, td_dtype t,
                              int64_t n) {
  if (g.dc) {
    int *counts = NULL, *displs = NULL;
    TD_CHECK(equal_parts(m, g.size, n, &counts, &displs));
    uint64_t tk = 0;
    TD_CHECK(td_dcomm_allgatherv(g.dc, x, full, counts, displs, t, g.stats, &tk));
    return td_dcomm_join(g.dc, tk);
  }
  TD_CHECK(m->k->sync(m->k));
  return td_coll_allgather_staged(g.comm, m->k, x, full, m->host_stage, n, t, g.stats);
}

/* x (n floats) = the sum over the group of part r (elements [r·n, (r+1)·n))
 * of every member's full, r this rank. Collective on the group. */
static td_status group_scatter(td_model *m, group g, const float *full, float *x, int64_t n) {
  if (g.dc) {
    int *counts = NULL, *displs = NULL;
    TD_CHECK(equal_parts(m, g.size, n, &counts, &displs));
    uint64_t tk = 0;
    TD_CHECK(td_dcomm_reduce_scatterv(g.dc, full, x, counts, displs, g.stats, &tk));
    return td_dcomm_join(g.dc, tk);
  }
  TD_CHECK(m->k->sync(m->k));
  return td_coll_reduce_scatter_f32_staged(g.comm, m->k, full, x, m->host_stage, n, g.stats);
}

/* full (N rows of cols, type t) = the Nl rows x of every tp rank, rank r's
 * at row r·Nl. Collective on tp_comm. */
static td_status sp_gather(td_model *m, const void *x, void *full, td_dtype t, int64_t cols) {
  return group_gather(m, tp_group(m), x, full, t, m->Nl * cols);
}

/* x (Nl rows of cols floats) = the sum over tp of rows [r·Nl, (r+1)·Nl) of
 * the partial full (N rows), r this rank. Collective on tp_comm. */
td_status td_model_sp_scatter(td_model *m, const float *full, float *x, int64_t cols) {
  return group_scatter(m, tp_group(m), full, x, m->Nl * cols);
}

td_status td_model_tp_gather(td_model *m, float *full, int64_t part) {
  if (m->grid->tp == 1) return TD_OK;
  return group_gather(m, tp_group(m), full + (int64_t)m->grid->tp_rank * part, full,
                      TD_DTYPE_F32, part);
}

/* ---- context parallelism ---------------------------------------------------------- */

/* Between kvg's order (cp rank r's (B, T, w) rows at r·B·T rows) and kvf's
 * (B, Tk, w), position order: rank r's rows [0, T/2) of sequence b are
 * positions [r·T/2, (r+1)·T/2), rows [T/2, T) positions from
 * (2·cp − 1 − r)·T/2 (chunks r and 2·cp − 1 − r, as pos says for rank r). */
static td_status cp_order(td_model *m, float *kvg, float *kvf, int64_t w, int to_positions) {
  int64_t B = m->B, T = m->T, c = T / 2, cp = m->cp;
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t run = 0; run < 2; ++run) {
        float *g = kvg + ((r * B + b) * T + run * c) * w;
        float *f = kvf + (b * m->Tk + (run == 0 ? r : 2 * cp - 1 - r) * c) * w;
        TD_CHECK(to_positions ? m->k->copy2d(m->k, f, w, g, w, c, w)
                              : m->k->copy2d(m->k, g, w, f, w, c, w));
      }
  return TD_OK;
}

/* The keys and values attention reads, of one layer: kk and v themselves
 * (rows of stride ldkv, *ld = ldkv), or under context parallelism every cp
 * rank's packed, gathered and put in position order in m->kvf (*K, *V into
 * it, *ld = 2·KV·HS). Collective on cp_comm (context parallel). */
static td_status attn_keys(td_model *m, const float *kk, const float *v, int64_t ldkv,
                           const float **K, const float **V, int64_t *ld) {
  *K = kk, *V = v, *ld = ldkv;
  if (m->cp == 1) return TD_OK;
  int64_t N = m->B * m->T, wkv = m->KV * m->HS, w = 2 * wkv;
  TD_CHECK(m->k->copy2d(m->k, m->kvl, w, kk, ldkv, N, wkv));
  TD_CHECK(m->k->copy2d(m->k, m->kvl + wkv, w, v, ldkv, N, wkv));
  TD_CHECK(group_gather(m, cp_group(m), m->kvl, m->kvg, TD_DTYPE_F32, N * w));
  TD_CHECK(cp_order(m, m->kvg, m->kvf, w, 1));
  *K = m->kvf, *V = m->kvf + wkv, *ld = w;
  return TD_OK;
}

/* Attention of one layer: out (N, NH·HS) and the probabilities att (fused:
 * the log-sum-exps) from q (rows of stride ldq) and kk, v (rows of stride
 * ldkv) — the kernel on this rank's keys, or under context parallelism on
 * every cp rank's at this rank's positions. Collective on cp_comm (context
 * parallel). */
td_status td_model_attn_fwd(td_model *m, float *out, float *att, const float *q, int64_t ldq,
                            const float *kk, const float *v, int64_t ldkv) {
  const float *K = NULL, *V = NULL;
  int64_t ld = 0;
  TD_CHECK(attn_keys(m, kk, v, ldkv, &K, &V, &ld));
  if (m->fused_att)
    return m->k->flash_fwd(m->k, out, att, q, K, V, ldq, ld, m->B, m->T, m->NH, m->KV, m->HS,
                           m->pos, m->pos ? m->pos->doc : NULL, m->at);
  return m->k->gqa_fwd(m->k, out, att, q, K, V, ldq, ld, m->B, m->T, m->NH, m->KV, m->HS, m->pos);
}

/* Its backward: dq, dk, dv (=, the layouts of q, kk, v) from dout (N,
 * NH·HS) and the probabilities att of the forward — fused: from its
 * log-sum-exps att and its output `out` as kept (type m->at; in bf16 the
 * kernels make D from the probabilities instead) — or, under selective
 * recomputation (att NULL), made again into m->att_re first (the output
 * they give again is not needed: into m->dln, free here). Under context
 * parallelism the keys and values are gathered again and their gradients,
 * partial sums over this rank's queries, reduce-scattered to the ranks
 * that hold them. Collective on cp_comm (context parallel). */
td_status td_model_attn_bwd(td_model *m, float *dq, float *dk, float *dv, const float *dout,
                            const void *out, const float *q, int64_t ldq, const float *kk,
                            const float *v, int64_t ldkv, const float *att) {
  td_kernels *k = m->k;
  const float *K = NULL, *V = NULL;
  int64_t ld = 0, N = m->B * m->T, wkv = m->KV * m->HS;
  TD_CHECK(attn_keys(m, kk, v, ldkv, &K, &V, &ld));
  if (!att) {
    TD_CHECK(k->gqa_fwd(k, m->dln, m->att_re, q, K, V, ldq, ld, m->B, m->T, m->NH, m->KV, m->HS,
                        m->pos));
    att = m->att_re;
  }
  float *dK = m->cp > 1 ? m->dkvf : dk, *dV = m->cp > 1 ? m->dkvf + wkv : dv;
  if (m->fused_att)
    TD_CHECK(k->flash_bwd(k, dq, dK, dV, m->datt_scratch, dout,
                          m->at == TD_DTYPE_F32 ? (const float *)out : NULL, att, q, K, V, ldq,
                          ld, m->B, m->T, m->NH, m->KV, m->HS, m->pos,
                          m->pos ? m->pos->doc : NULL, m->at));
  else
    TD_CHECK(k->gqa_bwd(k, dq, dK, dV, m->datt_scratch, dout, q, K, V, att, ldq, ld, m->B, m->T,
                        m->NH, m->KV, m->HS, m->pos));
  if (m->cp == 1) return TD_OK;
  TD_CHECK(cp_order(m, m->kvg, m->dkvf, ld, 0));
  TD_CHECK(group_scatter(m, cp_group(m), m->kvg, m->kvl, N * ld));
  TD_CHECK(k->copy2d(k, dk, ldkv, m->kvl, ld, N, wkv));
  return k->copy2d(k, dv, ldkv, m->kvl + wkv, ld, N, wkv);
}

/* The input of a column-parallel matmul (qkv, fc; q, k, v, gate, up; the
 * head): the norm output x (type at) itself, or under sequence parallelism
 * its rows of every tp rank gathered into m->xg (valid until the next
 * gather). Collective on tp_comm (sequence parallel). */
td_status td_model_col_in(td_model *m, const void *x, const void **out) {
  *out = x;
  if (!m->sp) return TD_OK;
  TD_CHECK(sp_gather(m, x, m->xg, m->at, m->C));
  *out = m->xg;
  return TD_OK;
}

/* After a row-parallel matmul (attention projection, MLP projection; o,
 * down) whose partial (N, C) is in m->dtmp: out = resid + (its sum over tp
 * + bias) (bias NULL: none) — on all N rows, or under sequence parallelism
 * on this rank's Nl rows (a reduce-scatter instead of the all-reduce).
 * Collective on tp_comm. */
td_status td_model_row_out(td_model *m, const void *bias, const float *resid, float *out) {
  td_kernels *k = m->k;
  int64_t C = m->C;
  if (!m->sp) {
    int64_t N = m->B * m->T;
    TD_CHECK(td_model_tp_sum(m, m->dtmp, N * C));
    if (bias) TD_CHECK(k->bias_fwd(k, m->dtmp, bias, m->pt, N, C));
    return k->add(k, out, resid, m->dtmp, N * C);
  }
  TD_CHECK(td_model_sp_scatter(m, m->dtmp, out, C));
  if (bias) TD_CHECK(k->bias_fwd(k, out, bias, m->pt, m->Nl, C));
  return k->add(k, out, resid, out, m->Nl * C);
}

/* The output gradient a row-parallel matmul's backward reads: m->dres, or
 * under sequence parallelism its rows of every tp rank gathered into
 * m->dtmp (N, C). Collective on tp_comm (sequence parallel). */
td_status td_model_row_grad(td_model *m, const float **dy) {
  *dy = m->dres;
  if (!m->sp) return TD_OK;
  TD_CHECK(sp_gather(m, m->dres, m->dtmp, TD_DTYPE_F32, m->C));
  *dy = m->dtmp;
  return TD_OK;
}

/* The input gradient of a column-parallel matmul, partial over tp in m->dln
 * (N, C): summed over tp in place (all rows), or under sequence
 * parallelism reduce-scattered to this rank's rows in m->dtmp. Collective
 * on tp_comm. */
td_status td_model_col_grad(td_model *m, const float **dx) {
  *dx = m->dln;
  if (!m->sp) return td_model_tp_sum(m, m->dln, m->B * m->T * m->C);
  TD_CHECK(td_model_sp_scatter(m, m->dln, m->dtmp, m->C));
  *dx = m->dtmp;
  return TD_OK;
}

/* ---- split backward: the weight-gradient work W of a B, recorded ------------------ */

/* A piece of n elements of es bytes from the current slot's arena. */
td_status td_model_wl_take(td_model *m, int64_t n, size_t es, void **out) {
  struct td_wlist *w = m->wcur;
  size_t need = ((size_t)n * es + 63) / 64 * 64;
  if (w->used + need > w->size)
    TD_FAIL(TD_ERR_INTERNAL, "split backward: the slot's weight-gradient stash is full (%zu + %zu "
            "of %zu bytes)", w->used, need, w->size);
  *out = w->arena + w->used;
  w->used += need;
  return TD_OK;
}

td_status td_model_wl_push(td_model *m, const td_wop *op) {
  struct td_wlist *w = m->wcur;
  if (w->n == w->cap)
    TD_FAIL(TD_ERR_INTERNAL, "split backward: too many weight-gradient operations");
  w->ops[w->n++] = *op;
  return TD_OK;
}

/* A copy (type at, n elements) of x that stays valid until W. */
static td_status wl_copy(td_model *m, const void *x, int64_t n, const void **out) {
  void *c = NULL;
  TD_CHECK(td_model_wl_take(m, n, td_dtype_size(m->at), &c));
  TD_CHECK(m->k->cast(m->k, c, m->at, x, m->at, n));
  *out = c;
  return TD_OK;
}

/* Weight gradient grad(kind, layer) (M, N) += op(A)·op(B), op(A) (M, K), A
 * and B of type at: now, or (split backward) recorded for W, with copies of
 * the operands that do not outlive this B (keep 0: scratch, or the shared
 * recomputation buffer). */
td_status td_model_wmm(td_model *m, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A,
                       int keepA, const void *B, int keepB, td_param_kind kind, int layer) {
  if (!m->defer) {
    TD_CHECK(td_model_mm(m, ta, tb, M, N, K, A, m->at, B, m->at, 1.0f,
                         td_model_pg(m, kind, layer)));
    return td_model_poll(m);
  }
  if (!keepA) TD_CHECK(wl_copy(m, A, M * K, &A));
  if (!keepB) TD_CHECK(wl_copy(m, B, K * N, &B));
  td_wop op = {WOP_MM, ta, tb, layer, kind, M, N, K, A, B, 0};
  return td_model_wl_push(m, &op);
}

/* Where a small gradient (bias, norm weight) of this micro-batch goes: the
 * gradient itself, or (split backward) a zeroed stash W adds to it — the
 * kernels add their sums to the destination, so the result is the same. */
td_status td_model_wdst(td_model *m, td_param_kind kind, int layer, float **out) {
  if (!m->defer) {
    *out = td_model_pg(m, kind, layer);
    return TD_OK;
  }
  const td_param *p = td_registry_find(m->reg, kind, layer);
  void *st = NULL;
  TD_CHECK(td_model_wl_take(m, p->local_numel, 4, &st));
  TD_CHECK(m->k->zero(m->k, st, (size_t)p->local_numel * sizeof(float)));
  td_wop op = {WOP_ADD, 0, 0, layer, kind, p->local_numel, 0, 0, st, NULL, 0};
  TD_CHECK(td_model_wl_push(m, &op));
  *out = st;
  return TD_OK;
}

/* Where the gradient of a parameter replicated over tp goes that a backward
 * computes from the rows of the residual stream (norm scales and shifts,
 * the row-parallel layers' biases): td_model_wdst, or under sequence
 * parallelism (the rank's rows give a partial sum) a zeroed piece of m->gsp
 * that td_model_rep_flush sums over tp and adds to td_model_wdst — the
 * accumulated gradient itself is never all-reduced, so earlier micro-batches
 * are not summed twice. */
td_status td_model_rep_dst(td_model *m, td_param_kind kind, int layer, float **out) {
  if (!m->sp) return td_model_wdst(m, kind, layer, out);
  const td_param *p = td_registry_find(m->reg, kind, layer);
  int i = m->nrep;
  if (i == (int)(sizeof m->rep / sizeof m->rep[0]) || m->rep_used + p->local_numel > 6 * m->C)
    TD_FAIL(TD_ERR_INTERNAL, "sequence parallel: too many replicated gradients in one block");
  m->rep[i].kind = kind, m->rep[i].layer = layer;
  m->rep[i].off = m->rep_used, m->rep[i].n = p->local_numel;
  m->nrep++, m->rep_used += p->local_numel;
  *out = m->gsp + m->rep[i].off;
  return m->k->zero(m->k, *out, (size_t)p->local_numel * sizeof(float));
}

/* Sum the pieces td_model_rep_dst handed out over tp (one all-reduce) and
 * add each to its gradient (or the split backward's stash). Collective on
 * tp_comm (sequence parallel). */
td_status td_model_rep_flush(td_model *m) {
  if (!m->sp || m->nrep == 0) return TD_OK;
  TD_CHECK(td_model_tp_sum(m, m->gsp, m->rep_used));
  for (int i = 0; i < m->nrep; ++i) {
    float *g = NULL;
    TD_CHECK(td_model_wdst(m, m->rep[i].kind, m->rep[i].layer, &g));
    TD_CHECK(m->k->add(m->k, g, g, m->gsp + m->rep[i].off, m->rep[i].n));
  }
  m->nrep = 0, m->rep_used = 0;
  return TD_OK;
}
