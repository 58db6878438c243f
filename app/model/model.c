/* model.c — GPT-2 and LLaMA forward and backward on one rank's shard (docs/architecture.md,
 * "Model"): the allocation and its ledger, the units and the hooks, the
 * embedding, the head, the cross-entropy and the order of a pass. The
 * families share all of it; each has its block (gpt2.c, llama.c), built,
 * like the head, from the machinery of block.c (per-layer views, matmuls,
 * the tp/sp/cp collectives, attention, the recording of the split
 * backward). model_internal.h declares what the four files share.
 *
 * Head: loss = CE(LNf(res3)·wteᵀ, targets), mean over global tokens.
 * Tensor parallelism (Megatron): Wqkv and Wfc split by output columns, Wproj
 * and Wfcproj by input rows with one all-reduce after each (bias added after
 * the reduction), the conjugate all-reduces of LN outputs' gradients in
 * backward, wte split by vocabulary for both the embedding and the head.
 * Replicated parameters (LayerNorms, row-parallel biases, wpe) get identical
 * gradients on every tp rank because their inputs are identical after the
 * all-reduces, so they stay consistent without communication.
 * Sequence parallelism (parallel.sequence_parallel, Korthikanti et al.
 * 2022): the residual stream, the norms and their statistics hold the tp
 * rank's Nl = N / tp contiguous rows; every all-reduce after a row-parallel
 * matmul (and the embedding's) becomes a reduce-scatter to those rows, every
 * column-parallel matmul (and the head) reads its input all-gathered (again
 * in backward, for its weight gradient), and backward mirrors it (all-gather
 * of the residual gradient before a row-parallel matmul's backward,
 * reduce-scatter of the input gradient after a column-parallel one). The
 * replicated parameters' gradients then come from the local rows only: they
 * are summed over tp once a block (td_model_rep_dst, td_model_rep_flush).
 *
 * Chunks (interleaved schedules): a rank holds several model chunks; each
 * activation slot belongs to one, and forward/backward first make the
 * slot's chunk current (use_slot), so the code below sees one contiguous
 * range of layers and whether it holds the embedding or the head.
 * Split backward (zb-h1): backward_impl with m->defer set computes the input
 * gradient and records the weight-gradient work in the slot's list
 * (td_model_wmm, td_model_wdst, bhook); td_model_backward_weight runs it. */
#include "app/model/td_model.h"

#include "app/model/model_internal.h"
#include "parallel/td_mpi.h"
#include "parallel/td_watchdog.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static td_status units_create(td_model *m);
static size_t wl_bytes(const td_model *m, int64_t *nops);

/* ---- allocation ------------------------------------------------------------ */

/* Count n elements of es bytes in act_bytes and record them in the ledger
 * under `what` (a static string). */
static td_status count_alloc(td_model *m, int64_t n, size_t es, const char *what) {
  if (m->nledger == m->ledger_cap) {
    int cap = m->ledger_cap ? 2 * m->ledger_cap : 64;
    td_model_alloc *p = realloc(m->ledger, (size_t)cap * sizeof *p);
    if (!p) TD_FAIL(TD_ERR_NOMEM, "out of memory for the model's allocation ledger");
    m->ledger = p, m->ledger_cap = cap;
  }
  m->ledger[m->nledger++] = (td_model_alloc){what, n, es};
  m->act_bytes += (double)es * (double)n;
  return TD_OK;
}

/* Allocate n elements of es bytes in the back-end and count them
 * (count_alloc); a size query (no back-end) only counts. The one place where
 * the model's memory is decided (trident check prints it from here). */
static td_status dev_alloc(td_model *m, void **out, int64_t n, size_t es, const char *what) {
  TD_CHECK(count_alloc(m, n, es, what));
  if (!m->k) return TD_OK;
  return m->k->alloc(m->k, out, (size_t)(n > 0 ? n : 1) * es, what);
}

/* float32 (and int32) buffers, and the matmul inputs of type m->at */
#define ACT(field, n) TD_CHECK(dev_alloc(m, (void **)&a->field, (n), 4, "activations " #field))
#define ACTM(field, n) \
  TD_CHECK(dev_alloc(m, (void **)&a->field, (n), td_dtype_size(m->at), "activations " #field))
#define SCR(field, n) TD_CHECK(dev_alloc(m, (void **)&m->field, (n), 4, "backward scratch " #field))

/* The activations inside the blocks, for nl blocks (a slot's L_count, none
 * under recomputation, or the one shared block of m->work). */
static td_status alloc_blocks(td_model *m, td_acts *a, int64_t nl) {
  int64_t N = m->B * m->T, Nl = m->Nl, C = m->C, L = nl;
  int64_t means = m->llama ? 0 : 1; /* RMSNorm keeps no mean */
  ACTM(ln1, L * Nl * C);
  ACT(ln1_mean, means * L * Nl);
  ACT(ln1_rstd, L * Nl);
  ACT(qkv, L * N * m->C3);
  ACTM(atty, L * N * m->Cl);
  ACT(att, (m->recompute_att ? 0 : L) * m->B * m->NH * m->T * td_model_att_cols(m));
  ACT(res2, L * Nl * C);
  ACTM(ln2, L * Nl * C);
  ACT(ln2_mean, means * L * Nl);
  ACT(ln2_rstd, L * Nl);
  int64_t Ld = m->moe && m->cfg->model_moe_every == 1 ? 0 : L; /* a dense MLP anywhere */
  ACT(fch, Ld * N * m->F * (m->llama ? 2 : 1));
  ACTM(fch_gelu, Ld * N * m->F);
  if (!m->moe) return TD_OK;
  /* sparse blocks (moe.c): routing, the experts' order, their activations */
  int64_t E = m->E, K = m->K, R = N * K, Fe = m->Fe;
  ACT(mprobs, L * N * E);
  ACT(mlse, L * N);
  ACT(mw, L * N * K);
  ACT(midx, L * N * K);
  ACT(mpos, L * R);
  ACT(mperm, L * R);
  ACT(moff, L * (E + 1));
  int64_t Rx = m->Rx; /* the rows this rank's experts compute */
  ACT(mgu, L * 2 * Rx * Fe);
  ACTM(mh, L * Rx * Fe);
  ACT(mye, L * R * C);
  if (m->k && L > 0) { /* host: 4 bytes per expert and 8 per sequence and expert, a layer */
    TD_CHECK(td_alloc((void **)&a->moff_host, (size_t)(L * (E + 1)) * sizeof(int32_t),
                      "expert offsets"));
    TD_CHECK(td_alloc((void **)&a->mcnt_host, (size_t)(L * m->B * E) * sizeof(double),
                      "expert counts"));
    if (m->ep > 1)
      TD_CHECK(td_alloc((void **)&a->mrc_host, (size_t)(L * E) * sizeof(int32_t),
                        "expert-parallel counts"));
  }
  return TD_OK;
}

/* Make chunk c the model's current one: its layers and whether it is the
 * first or the last model chunk (every layer-range and stage test below
 * reads these fields). */
static void use_chunk(td_model *m, int c) {
  const td_model_chunk *ch = &m->chunks[c];
  m->L_first = ch->L_first, m->L_count = ch->L_count;
  m->first_stage = ch->first, m->last_stage = ch->last;
}

/* ... the chunk a slot belongs to. */
static void use_slot(td_model *m, int slot) {
  use_chunk(m, m->slot_chunk[slot]);
  if (m->docs) { /* the slot's document starts ride along with its positions */
    m->pos_doc = m->pos_base ? *m->pos_base : (td_pos){m->T, m->T, 0, m->T, NULL};
    m->pos_doc.doc = m->acts[slot].doc;
    m->pos = &m->pos_doc;
  }
}

void td_model_set_doc(td_model *m, const int32_t *doc) { m->doc_host = doc; }

const double *td_model_row_losses(const td_model *m) { return m->last_stage ? m->row_loss : NULL; }

static td_status alloc_slot(td_model *m, td_acts *a) {
  int64_t N = m->B * m->T, Nl = m->Nl, L = m->L_count, C = m->C;
  ACT(encoded, Nl * C);
  TD_CHECK(alloc_blocks(m, a, m->recompute ? 0 : L));
  ACT(res3, L * Nl * C); /* block outputs = the next blocks' inputs: always kept */
  ACTM(lnf, Nl * C);
  ACT(lnf_mean, (m->llama ? 0 : 1) * Nl);
  ACT(lnf_rstd, Nl);
  ACT(logits, m->last_stage && !m->fused_head ? N * m->Vs : 1); /* fused: m->hlog */
  ACT(rowmax, N);
  ACT(sumexp, 2 * N); /* sumexp and tlogit adjacent: one all-reduce */
  a->tlogit = a->sumexp + N;
  ACT(inputs, N);  /* int32 tokens */
  ACT(targets, N);
  if (m->docs) ACT(doc, N);
  return TD_OK;
}

/* m->layer_bytes: alloc_blocks for one layer as a size query (counted,
 * then taken back out of act_bytes and the ledger), scores included. */
static td_status count_layer(td_model *m) {
  td_kernels *k = m->k;
  double kept = m->act_bytes;
  int n = m->nledger, ra = m->recompute_att;
  td_acts one;
  memset(&one, 0, sizeof one);
  m->k = NULL, m->recompute_att = 0;
  td_status st = alloc_blocks(m, &one, 1);
  m->layer_bytes = m->act_bytes - kept;
  m->k = k, m->recompute_att = ra, m->act_bytes = kept, m->nledger = n;
  return st;
}

static td_status alloc_buffers(td_model *m) {
  int64_t N = m->B * m->T, Nl = m->Nl, C = m->C;
  TD_CHECK(count_layer(m));
  m->acts = calloc((size_t)m->nslots, sizeof *m->acts);
  if (!m->acts) TD_FAIL(TD_ERR_NOMEM, "out of memory for activations");
  int any_last = 0;
  for (int i = 0; i < m->nslots; ++i) {
    use_slot(m, i);
    any_last |= m->last_stage;
    TD_CHECK(alloc_slot(m, &m->acts[i]));
  }
  if (m->recompute && m->L_count > 0) { /* one block's activations and output */
    td_acts *a = &m->work;
    TD_CHECK(alloc_blocks(m, a, 1));
    ACT(res3, Nl * C);
  }
  if (m->split) { /* per slot: the weight-gradient work its B leaves for W */
    int64_t nops = 0;
    size_t bytes = wl_bytes(m, &nops);
    m->wl = calloc((size_t)m->nslots, sizeof *m->wl);
    if (!m->wl) TD_FAIL(TD_ERR_NOMEM, "out of memory for the split backward");
    for (int i = 0; i < m->nslots; ++i) {
      struct td_wlist *w = &m->wl[i];
      use_slot(m, i);
      bytes = wl_bytes(m, &nops);
      w->cap = (int)nops, w->size = bytes;
      if (m->k && !(w->ops = calloc((size_t)nops, sizeof *w->ops)))
        TD_FAIL(TD_ERR_NOMEM, "out of memory for the split backward");
      TD_CHECK(dev_alloc(m, (void **)&w->arena, (int64_t)bytes, 1,
                         "weight-gradient stash of the split backward"));
    }
  }
  SCR(dres, Nl * C);
  SCR(dtmp, N * C); /* sequence parallel: also the gathered gradient of the residual stream */
  if (m->sp) { /* the gathered input of a column-parallel matmul; the replicated gradients */
    TD_CHECK(dev_alloc(m, &m->xg, N * C, td_dtype_size(m->at),
                       "sequence-parallel gather scratch xg"));
    SCR(gsp, 6 * C);
  }
  int64_t kvw = 2 * m->KV * m->HS, NK = m->B * m->Tk; /* context parallel: keys and values */
  if (m->cp > 1) {
    SCR(kvl, N * kvw);
    SCR(kvg, NK * kvw);
    SCR(kvf, NK * kvw);
    SCR(dkvf, NK * kvw);
  }
  int groups = m->grid->tp > m->cp ? m->grid->tp : m->cp;
  if (m->k && !(m->counts = calloc((size_t)2 * groups, sizeof(int))))
    TD_FAIL(TD_ERR_NOMEM, "out of memory for the model");
  SCR(dln, N * C);
  if (any_last && m->fused_head) SCR(hlog, (m->head_rows < N ? m->head_rows : N) * m->Vs);
  SCR(dqkv, N * m->C3);
  SCR(datty, N * m->Cl);
  SCR(dfch, N * m->F * (m->llama ? 3 : 1)); /* llama: d gate, d up, d (silu(gate)·up) */
  SCR(datt_scratch, m->B * m->NH * m->T * td_model_att_cols(m)); /* fused: D */
  if (m->recompute_att) SCR(att_re, m->B * m->NH * m->T * m->Tk);
  int64_t R = N * m->K; /* sparse blocks: the slots of a micro-batch */
  if (m->moe) {
    int64_t E = m->E, BE = m->B * E;
    SCR(mlog, N * E);
    SCR(mpsum, BE);
    SCR(mdw, R);
    SCR(mdlog, N * E);
    SCR(mgP, BE);
    int64_t Rx = m->Rx, Rm = R > Rx ? R : Rx; /* the experts' rows, the local slots' */
    SCR(mdh, 3 * Rx * m->Fe);
    SCR(mdxe, Rm * C);
    SCR(mcount, E);
    TD_CHECK(dev_alloc(m, &m->mxe, Rm * C, td_dtype_size(m->at), "backward scratch mxe"));
    TD_CHECK(dev_alloc(m, &m->mdye, Rm * C, td_dtype_size(m->at), "backward scratch mdye"));
    if (m->ep > 1) { /* the all-to-all's buffer and the received rows' order */
      TD_CHECK(dev_alloc(m, &m->mxr, Rm * C, 4, "expert-parallel exchange mxr"));
      SCR(mperm_x, Rx);
      SCR(mpos_x, Rx);
    }
    if (m->ep > 1 && m->staged && !m->dcomm) { /* MPI's host copies of the rows, counted as
                                                  the host staging below is */
      TD_CHECK(count_alloc(m, 2 * Rm * C, 4, "expert-parallel staging (host)"));
      if (m->k) TD_CHECK(td_alloc((void **)&m->ep_stage, (size_t)(2 * Rm * C) * 4, "ep staging"));
    }
    if (m->ep > 1 && m->k) { /* host, not counted: counts and orders */
      int64_t El = m->El;
      TD_CHECK(td_alloc((void **)&m->ep_sc, (size_t)(8 * m->ep) * sizeof(int), "ep counts"));
      m->ep_sd = m->ep_sc + m->ep, m->ep_rcn = m->ep_sd + m->ep, m->ep_rd = m->ep_rcn + m->ep;
      m->ep_ecnt = m->ep_rd + m->ep;
      TD_CHECK(td_alloc((void **)&m->ep_offx, (size_t)(El + 1 + 2 * Rx + E) * sizeof(int32_t),
                        "ep orders"));
      m->ep_perm_host = m->ep_offx + El + 1, m->ep_pos_host = m->ep_perm_host + Rx;
      m->ep_sent_host = m->ep_pos_host + Rx;
      int es = (int)td_dtype_size(m->at);
      TD_MPI_CHECK(MPI_Type_contiguous((int)(C * es), MPI_BYTE, &m->ep_row[0]));
      TD_MPI_CHECK(MPI_Type_commit(&m->ep_row[0]));
      TD_MPI_CHECK(MPI_Type_contiguous((int)(C * 4), MPI_BYTE, &m->ep_row[1]));
      TD_MPI_CHECK(MPI_Type_commit(&m->ep_row[1]));
    }
    if (m->k) { /* host, not counted */
      TD_CHECK(td_alloc((void **)&m->midx_host, (size_t)R * sizeof(int32_t), "expert choices"));
      TD_CHECK(td_alloc((void **)&m->mpsum_host, (size_t)BE * sizeof(float), "router sums"));
      TD_CHECK(td_alloc((void **)&m->mseq_host, (size_t)(2 * BE) * sizeof(double),
                        "per-sequence expert sums"));
      TD_CHECK(td_alloc((void **)&m->mlse_host, (size_t)N * sizeof(float), "router lse"));
      TD_CHECK(td_alloc((void **)&m->moe_load, (size_t)E * sizeof(double), "expert load"));
      if (m->cap > 0)
        TD_CHECK(td_alloc((void **)&m->mplan_host, (size_t)(2 * R + BE + E) * sizeof(int32_t),
                          "expert plan"));
    }
  }
  if (m->at == TD_DTYPE_BF16) { /* the widest gradient a matmul reads */
    int64_t w = C > m->C3 ? C : m->C3;
    w = w > m->F ? w : m->F;
    int64_t n = N * w; /* and the head's gradient: all rows, or one fused chunk */
    if (m->moe && m->Rx * m->Fe > n) n = m->Rx * m->Fe; /* an expert's gate or up gradient */
    if (m->moe && R * m->Fe > n) n = R * m->Fe;
    if (m->moe && N * m->E > n) n = N * m->E;   /* the router's logits' */
    int64_t hr = m->fused_head ? (m->head_rows < N ? m->head_rows : N) : N;
    if (any_last && hr * m->Vs > n) n = hr * m->Vs;
    TD_CHECK(dev_alloc(m, &m->dmm, n, 2, "backward scratch dmm (bf16 gradients)"));
  }
  if (m->k) { /* host memory, not counted: 20 bytes a row */
    TD_CHECK(td_alloc((void **)&m->rowstat_host, (size_t)3 * N * sizeof(float), "loss statistics"));
    TD_CHECK(td_alloc((void **)&m->row_loss, (size_t)N * sizeof(double), "row losses"));
  }
  /* Staging (the back-end's memory is not host memory): the host copy the
   * model's all-reduces go through — over tp the (N, C) partial sums and the
   * cross-entropy statistics (2N), over embed_comm the tied wte's gradient
   * (embed_sync, app/train/trainer.c) — one buffer for the largest, counted here. */
  int64_t hs = 0;
  int staged = m->staged && !m->dcomm;
  if (staged && m->grid->tp > 1) hs = N * C > 2 * N ? N * C : 2 * N;
  if (staged && m->grid->tp > 1 && m->moe && R > hs) hs = R; /* the mixing weights' gradient */
  if (staged && m->sp) { /* a reduce-scatter's whole and part; the replicated gradients */
    hs = hs > N * C + Nl * C ? hs : N * C + Nl * C;
    hs = hs > 6 * C ? hs : 6 * C;
  }
  if (staged && m->cp > 1 && (m->cp + 1) * N * kvw > hs) /* keys and values' reduce-scatter */
    hs = (m->cp + 1) * N * kvw;
  const td_param *wte = td_registry_find(m->reg, TD_PK_WTE, -1);
  if (staged && m->grid->pp > 1 && m->tied && wte->present &&
      m->grid->embed_comm != MPI_COMM_NULL && wte->local_numel > hs)
    hs = wte->local_numel;
  if (hs > 0) {
    const char *what = "host staging of the model's all-reduces";
    TD_CHECK(count_alloc(m, hs, sizeof(float), what));
    if (m->k) TD_CHECK(td_alloc((void **)&m->host_stage, (size_t)hs * sizeof(float), what));
  }
  use_chunk(m, 0);
  return TD_OK;
}

td_status td_model_create(const td_config *cfg, td_grid *grid, td_kernels *k, td_coll_stats *stats,
                          int64_t B, const int *nslots, int dcomm, td_model **out) {
  td_status st = TD_OK;
  *out = NULL;
  td_model *m = calloc(1, sizeof *m);
  if (!m) TD_FAIL(TD_ERR_NOMEM, "out of memory for the model");
  m->cfg = cfg, m->k = k, m->grid = grid, m->stats = stats;
  /* chunks: model chunk c·pp + pp_rank is this rank's chunk c */
  int v = (int)cfg->parallel_virtual_stages, pp = grid->pp;
  m->nchunks = v;
  m->chunks = calloc((size_t)v, sizeof *m->chunks);
  if (!m->chunks) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for the model");
  for (int c = 0; c < v; ++c) {
    td_model_chunk *ch = &m->chunks[c];
    int kk = c * pp + grid->pp_rank;
    td_config_chunk_layers(cfg, kk, &ch->L_first, &ch->L_count);
    ch->first = kk == 0, ch->last = kk == pp * v - 1;
    ch->slot0 = m->nslots;
    ch->nslots = nslots[c] > 0 ? nslots[c] : 1;
    m->nslots += ch->nslots;
  }
  m->slot_chunk = calloc((size_t)m->nslots, sizeof(int));
  if (!m->slot_chunk) TD_FAIL_GOTO(TD_ERR_NOMEM, "out of memory for the model");
  for (int c = 0; c < v; ++c)
    for (int i = 0; i < m->chunks[c].nslots; ++i) m->slot_chunk[m->chunks[c].slot0 + i] = c;
  TD_CHECK_GOTO(td_registry_create_ep(cfg, grid->tp, grid->tp_rank, grid->pp, grid->pp_rank,
                                      grid->ep, grid->ep_rank, &m->reg));
  int64_t tp = grid->tp;
  td_model_dims d;
  td_config_dims(cfg, &d);
  m->llama = d.llama, m->tied = d.tied;
  m->norm_eps = (float)cfg->model_norm_eps, m->rope_theta = (float)cfg->model_rope_theta;
  m->cp = grid->cp;
  m->Tk = cfg->model_seq_len;
  m->B = B, m->T = m->Tk / m->cp, m->C = cfg->model_dim, m->V = cfg->model_vocab_size;
  if (m->cp > 1) { /* chunks cp_rank and 2·cp − 1 − cp_rank of 2·cp */
    int64_t c = m->T / 2;
    m->pos_cp = (td_pos){m->Tk, c, grid->cp_rank * c, (2 * m->cp - 1 - grid->cp_rank) * c, NULL};
    m->pos = &m->pos_cp;
  }
  m->pos_base = m->pos;
  m->docs = strcmp(cfg->data_attend, "document") == 0;
  m->moe = d.E > 0;
  m->E = d.E, m->K = d.K, m->Fe = d.Fe / tp, m->moe_layers = d.moe_layers;
  m->aux_alpha = cfg->model_moe_aux_loss, m->z_beta = cfg->model_moe_z_loss;
  m->cap = d.cap;
  m->ep = grid->ep, m->ep_rank = grid->ep_rank, m->El = d.E > 0 ? d.E / grid->ep : 0;
  m->ep_row[0] = m->ep_row[1] = MPI_DATATYPE_NULL;
  if (m->moe) { /* the rows this rank's experts may compute (moe.c) */
    int64_t N = B * m->T, kk = d.K < m->El ? d.K : m->El;
    m->Rx = grid->ep * N * kk;
    if (d.cap > 0 && grid->ep * B * d.cap * m->El < m->Rx) m->Rx = grid->ep * B * d.cap * m->El;
    if (grid->ep == 1) m->Rx = N * d.K; /* every slot of the micro-batch, as before ep */
  }
  m->NH = d.H / tp, m->KV = d.KV / tp, m->HS = d.HS;
  m->Cl = m->NH * m->HS, m->C3 = (m->NH + 2 * m->KV) * m->HS, m->F = d.F / tp;
  td_param *wte = td_registry_find(m->reg, TD_PK_WTE, -1);
  m->Vs = wte->local_shape[0];
  m->v0 = (int64_t)grid->tp_rank * m->Vs;
  use_chunk(m, 0);
  m->valid_rows = B * m->T;
  m->pt = m->at = strcmp(cfg->training_precision, "bf16") == 0 ? TD_DTYPE_BF16 : TD_DTYPE_F32;
  m->recompute = strcmp(cfg->training_recompute, "blocks") == 0;
  m->fused_att = strcmp(cfg->model_attention, "fused") == 0;
  m->recompute_att = !m->fused_att && strcmp(cfg->training_recompute, "attention") == 0;
  m->fused_head = strcmp(cfg->model_head, "fused") == 0;
  m->head_rows = cfg->model_head_chunk, m->logits_row = -1;
  if (m->fused_att && k && (!k->flash_fwd || !k->flash_bwd))
    TD_FAIL_GOTO(TD_ERR_DECK, "model.attention: fused: the %s back-end has no fused attention "
                 "kernels in this build; use model.attention: materialized", k->name);
  m->split = strcmp(cfg->parallel_pp_schedule, "zb-h1") == 0;
  m->staged = k ? !k->host_memory : !td_kernels_host_memory(cfg->run_device);
  m->dcomm = dcomm;
  m->sp = cfg->parallel_sequence_parallel && tp > 1;
  m->Nl = td_model_rows(cfg, B);
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

int64_t td_model_rows(const td_config *cfg, int64_t B) {
  int64_t N = B * (cfg->model_seq_len / cfg->parallel_cp), tp = cfg->parallel_tp;
  return cfg->parallel_sequence_parallel && tp > 1 ? N / tp : N;
}

void td_model_destroy(td_model **mp) {
  if (!mp || !*mp) return;
  td_model *m = *mp;
  if (m->k) {
    for (int i = -1; m->acts && i < m->nslots; ++i) {
      td_acts *a = i < 0 ? &m->work : &m->acts[i];
      void *bufs[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att,
                      a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->res3,
                      a->lnf, a->lnf_mean, a->lnf_rstd, a->logits, a->rowmax, a->sumexp,
                      a->inputs, a->targets, a->doc, a->mprobs, a->mlse, a->mw, a->midx,
                      a->mpos, a->mperm, a->moff, a->mgu, a->mh, a->mye};
      for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; ++j)
        if (bufs[j]) m->k->free(m->k, bufs[j]);
    }
    void *scr[] = {m->dres, m->dtmp, m->dln,    m->dqkv, m->datty, m->dfch, m->datt_scratch,
                   m->dmm,  m->att_re, m->xg, m->gsp,  m->kvl,  m->kvg,  m->kvf, m->dkvf,
                   m->hlog, m->mlog, m->mpsum, m->mdw, m->mdlog, m->mgP, m->mdh, m->mdxe,
                   m->mcount, m->mxe, m->mdye, m->mxr, m->mperm_x, m->mpos_x};
    for (size_t j = 0; j < sizeof scr / sizeof scr[0]; ++j)
      if (scr[j]) m->k->free(m->k, scr[j]);
  }
  for (int i = -1; m->acts && i < m->nslots; ++i) {
    td_acts *a = i < 0 ? &m->work : &m->acts[i];
    td_free(a->moff_host);
    td_free(a->mcnt_host);
    td_free(a->mrc_host);
  }
  td_free(m->ep_sc);
  td_free(m->ep_offx);
  td_free(m->ep_stage);
  for (int i = 0; i < 2; ++i)
    if (m->ep_row[i] != MPI_DATATYPE_NULL) MPI_Type_free(&m->ep_row[i]);
  td_free(m->midx_host);
  td_free(m->mpsum_host);
  td_free(m->mseq_host);
  td_free(m->mplan_host);
  td_free(m->mlse_host);
  td_free(m->moe_load);
  for (int i = 0; m->wl && i < m->nslots; ++i) {
    if (m->k && m->wl[i].arena) m->k->free(m->k, m->wl[i].arena);
    free(m->wl[i].ops);
  }
  free(m->wl);
  free(m->acts);
  free(m->chunks);
  free(m->slot_chunk);
  free(m->counts);
  td_free(m->rowstat_host);
  td_free(m->row_loss);
  td_free(m->host_stage);
  free(m->unit_begin);
  free(m->unit_end);
  free(m->unit_param);
  free(m->unit_grad);
  free(m->ledger);
  td_registry_destroy(&m->reg);
  free(m);
  *mp = NULL;
}

/* ---- units and hooks ------------------------------------------------------------ */

/* (td_model_unit_of, the unit of a parameter, is with the views in block.c.) */

void td_model_units_flat(td_model *m, void *params, float *grads) {
  for (int u = 0; u < 2 * m->nunits; ++u) {
    if (m->unit_begin[u] >= m->unit_end[u]) continue;
    m->unit_param[u] = (char *)params + (size_t)m->unit_begin[u] * td_dtype_size(m->pt);
    m->unit_grad[u] = grads ? grads + m->unit_begin[u] : NULL;
  }
}

static td_status units_create(td_model *m) {
  int n = (int)m->cfg->model_layers + 2;
  m->nunits = n; /* and as many expert units after them (empty without experts) */
  m->unit_begin = calloc((size_t)(2 * n), sizeof(int64_t));
  m->unit_end = calloc((size_t)(2 * n), sizeof(int64_t));
  m->unit_param = calloc((size_t)(2 * n), sizeof(void *));
  m->unit_grad = calloc((size_t)(2 * n), sizeof(float *));
  if (!m->unit_begin || !m->unit_end || !m->unit_param || !m->unit_grad)
    TD_FAIL(TD_ERR_NOMEM, "out of memory for model units");
  for (int u = 0; u < 2 * n; ++u) m->unit_begin[u] = INT64_MAX, m->unit_end[u] = 0;
  for (int i = 0; i < m->reg->n; ++i) {
    const td_param *p = &m->reg->p[i];
    int u = td_model_unit_of(m, p);
    int64_t end = p->offset + (p->local_numel + 15) / 16 * 16;
    if (p->offset < m->unit_begin[u]) m->unit_begin[u] = p->offset;
    if (end > m->unit_end[u]) m->unit_end[u] = end;
  }
  return TD_OK;
}

static td_status hook(td_model *m, int acquire, int u, td_phase ph) {
  td_status (*f)(void *, td_model *, int, td_phase) = acquire ? m->hooks.acquire : m->hooks.release;
  if (f) TD_CHECK(f(m->hooks.ctx, m, u, ph));
  return TD_OK;
}

/* ---- forward -------------------------------------------------------------------- */

/* Block li of this stage in slot a: its activations in the slot, or in the
 * shared m->work under recomputation (the slot keeps the output only). */
static td_status block_fwd(td_model *m, td_acts *a, int64_t li, const float *resid) {
  int layer = (int)(m->L_first + li);
  td_acts *w = m->recompute ? &m->work : a;
  int64_t ix = m->recompute ? 0 : li;
  float *out = a->res3 + li * m->Nl * m->C;
  return m->llama ? td_model_llama_block_fwd(m, w, ix, layer, resid, out)
                  : td_model_gpt2_block_fwd(m, w, ix, layer, resid, out);
}

/* The output head's weight (Vs, C): wte when tied, else lm_head. */
static td_param_kind head_kind(const td_model *m) { return m->tied ? TD_PK_WTE : TD_PK_LM_HEAD; }

/* Unit 0 (the embedding) is used on the first stage, and on the last when
 * the head is tied to it. */
static int uses_unit0(const td_model *m) { return m->first_stage || (m->last_stage && m->tied); }

static td_status loss_of(td_model *m, td_acts *a, double *loss_sum);

/* The vocabulary entries of this rank's shard that exist (the padding of
 * the last shard has none). */
static int64_t vocab_valid(const td_model *m) {
  return m->V - m->v0 < m->Vs ? (m->V - m->v0 > 0 ? m->V - m->v0 : 0) : m->Vs;
}

/* The cross-entropy statistics of rows [r0, r0 + n) from their logits
 * (n, Vs): the row maximum over the whole vocabulary (a max over tp), then
 * this shard's Σexp(logit - max) and target logit (summed over tp later,
 * in loss_of). */
static td_status xent_stats(td_model *m, td_acts *a, const float *logits, int64_t r0, int64_t n) {
  td_kernels *k = m->k;
  int64_t vvalid = vocab_valid(m);
  float *rowmax = a->rowmax + r0;
  TD_CHECK(k->xent_rowmax(k, rowmax, logits, n, m->Vs, vvalid));
  if (m->grid->tp > 1 && m->dc_tp) {
    TD_CHECK(td_dcomm_allreduce_joined(m->dc_tp, rowmax, n, 1, m->stats));
  } else if (m->grid->tp > 1) {
    TD_CHECK(k->sync(k));
    TD_CHECK(td_coll_allreduce_f32_staged(m->grid->tp_comm, k, rowmax, m->host_stage, n, MPI_MAX,
                                          m->stats));
  }
  return k->xent_sumexp(k, a->sumexp + r0, a->tlogit + r0, logits, rowmax, a->targets + r0,
                        m->v0, n, m->Vs, vvalid);
}

/* The head's rows [r0, r0 + n) of xf (all N rows of the head's input, type
 * at): their logits (n, Vs) in m->hlog. */
static td_status head_chunk_logits(td_model *m, const void *xf, int64_t r0, int64_t n) {
  size_t es = td_dtype_size(m->at);
  const char *x = (const char *)xf + (size_t)r0 * (size_t)m->C * es;
  TD_CHECK(td_model_mm(m, 0, 1, n, m->Vs, m->C, x, m->at, td_model_pw(m, head_kind(m), -1), m->pt,
                       0.0f, m->hlog));
  return td_model_poll(m);
}

/* The fused head's forward (model.head: fused): chunk by chunk, the logits
 * and (with targets) their statistics; without targets only the chunk of
 * m->logits_row, for td_model_logits_at. */
static td_status head_fused_fwd(td_model *m, td_acts *a, int targets) {
  int64_t N = m->B * m->T, R = m->head_rows < N ? m->head_rows : N;
  const void *xf = NULL;
  TD_CHECK(td_model_col_in(m, a->lnf, &xf));
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t n = N - r0 < R ? N - r0 : R;
    if (!targets && !(m->logits_row >= r0 && m->logits_row < r0 + n)) continue;
    TD_CHECK(head_chunk_logits(m, xf, r0, n));
    if (targets) TD_CHECK(xent_stats(m, a, m->hlog, r0, n));
  }
  return TD_OK;
}

/* The fused head's backward: per chunk, the logits again, their gradient in
 * place, the input gradient's rows (m->dln) and the weight gradient —
 * summed into the gradient itself, or under a split backward into a stash
 * of the weight's size W adds (the chunks' logits are gone by then). */
static td_status head_fused_bwd(td_model *m, td_acts *a, float loss_scale) {
  td_kernels *k = m->k;
  int64_t N = m->B * m->T, C = m->C, R = m->head_rows < N ? m->head_rows : N;
  size_t es = td_dtype_size(m->at);
  const void *xf = NULL, *d = NULL;
  float *gw = NULL;
  TD_CHECK(td_model_col_in(m, a->lnf, &xf));
  TD_CHECK(td_model_wdst(m, head_kind(m), -1, &gw));
  const void *w = td_model_pw(m, head_kind(m), -1);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t n = N - r0 < R ? N - r0 : R;
    const char *x = (const char *)xf + (size_t)r0 * (size_t)C * es;
    TD_CHECK(head_chunk_logits(m, xf, r0, n));
    TD_CHECK(k->xent_bwd(k, m->hlog, m->hlog, a->rowmax + r0, a->sumexp + r0, a->targets + r0,
                         m->v0, loss_scale, n, m->Vs, vocab_valid(m)));
    TD_CHECK(td_model_mm_grad(m, m->hlog, n * m->Vs, &d));
    TD_CHECK(td_model_mm(m, 1, 0, m->Vs, C, n, d, m->at, x, m->at, 1.0f, gw));
    TD_CHECK(td_model_mm(m, 0, 0, n, C, m->Vs, d, m->at, w, m->pt, 0.0f, m->dln + r0 * C));
    TD_CHECK(td_model_poll(m));
  }
  return TD_OK;
}

static td_status forward_impl(td_model *m, int slot, const int32_t *inputs,
                              const int32_t *targets, double *loss_sum) {
  td_kernels *k = m->k;
  td_acts *a = &m->acts[slot];
  use_slot(m, slot);
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, Nl = m->Nl;
  size_t tokbytes = (size_t)N * sizeof(int32_t);
  if (m->first_stage) TD_CHECK(k->to_device(k, a->inputs, inputs, tokbytes));
  if (targets && m->last_stage) TD_CHECK(k->to_device(k, a->targets, targets, tokbytes));
  m->tgt_host = targets;
  if (m->docs) {
    TD_REQUIRE(m->doc_host, TD_ERR_INTERNAL, "model: data.attend: document but no document "
               "starts for this micro-batch (td_model_set_doc)");
    TD_CHECK(k->to_device(k, a->doc, m->doc_host, tokbytes));
  }

  float *x = a->encoded;
  td_dtype pt = m->pt, at = m->at;
  int U = m->nunits - 1; /* the head unit {final norm, untied head} */
  if (uses_unit0(m)) TD_CHECK(hook(m, 1, 0, TD_PHASE_FORWARD));
  if (m->first_stage) {
    const void *wte = td_model_pw(m, TD_PK_WTE, -1);
    const void *wpe = m->llama || m->grid->tp_rank != 0 ? NULL : td_model_pw(m, TD_PK_WPE, -1);
    /* partial over tp (a vocabulary shard): all-reduced, or under sequence
     * parallelism reduce-scattered to the rank's rows */
    TD_CHECK(k->embed_fwd(k, m->sp ? m->dtmp : x, a->inputs, wte, m->v0, m->Vs, wpe, pt, B, T, C, m->pos));
    TD_CHECK(m->sp ? td_model_sp_scatter(m, m->dtmp, x, C) : td_model_tp_sum(m, x, N * C));
  }
  for (int64_t li = 0; li < m->L_count; ++li) {
    int layer = (int)(m->L_first + li);
    TD_CHECK(hook(m, 1, 1 + layer, TD_PHASE_FORWARD));
    const float *resid = li == 0 ? x : a->res3 + (li - 1) * Nl * C;
    TD_CHECK(block_fwd(m, a, li, resid));
    TD_CHECK(hook(m, 0, 1 + layer, TD_PHASE_FORWARD));
  }
  if (!m->last_stage) {
    if (m->first_stage) TD_CHECK(hook(m, 0, 0, TD_PHASE_FORWARD));
    return TD_OK;
  }
  TD_CHECK(hook(m, 1, U, TD_PHASE_FORWARD));

  const float *last = m->L_count > 0 ? a->res3 + (m->L_count - 1) * Nl * C : x;
  if (m->llama)
    TD_CHECK(k->rmsnorm_fwd(k, a->lnf, at, a->lnf_rstd, last, td_model_pw(m, TD_PK_LNF_W, -1), pt,
                            m->norm_eps, Nl, C));
  else
    TD_CHECK(k->layernorm_fwd(k, a->lnf, at, a->lnf_mean, a->lnf_rstd, last,
                              td_model_pw(m, TD_PK_LNF_W, -1), td_model_pw(m, TD_PK_LNF_B, -1), pt,
                              Nl, C));
  if (m->fused_head) {
    TD_CHECK(head_fused_fwd(m, a, targets != NULL));
    TD_CHECK(hook(m, 0, U, TD_PHASE_FORWARD));
    if (uses_unit0(m)) TD_CHECK(hook(m, 0, 0, TD_PHASE_FORWARD));
    return targets ? loss_of(m, a, loss_sum) : TD_OK;
  }
  const void *xf = NULL; /* the head reads all N rows */
  TD_CHECK(td_model_col_in(m, a->lnf, &xf));
  TD_CHECK(td_model_mm(m, 0, 1, N, m->Vs, C, xf, at, td_model_pw(m, head_kind(m), -1), pt, 0.0f,
                       a->logits));
  TD_CHECK(td_model_poll(m));
  TD_CHECK(hook(m, 0, U, TD_PHASE_FORWARD));
  if (uses_unit0(m)) TD_CHECK(hook(m, 0, 0, TD_PHASE_FORWARD));
  if (!targets) return TD_OK;

  /* Vocabulary-parallel cross-entropy: max, then Σexp and the target logit. */
  TD_CHECK(xent_stats(m, a, a->logits, 0, N));
  return loss_of(m, a, loss_sum);
}

/* The loss of the slot's rows from their statistics: Σexp summed over tp,
 * then Σ log Σexp + max - target logit over the valid rows. */
static td_status loss_of(td_model *m, td_acts *a, double *loss_sum) {
  td_kernels *k = m->k;
  int64_t N = m->B * m->T;
  TD_CHECK(td_model_tp_sum(m, a->sumexp, 2 * N));
  float *hs = m->rowstat_host;
  TD_CHECK(k->to_host(k, hs, a->rowmax, (size_t)N * sizeof(float)));
  TD_CHECK(k->to_host(k, hs + N, a->sumexp, (size_t)2 * N * sizeof(float)));
  double s = 0.0;
  const int32_t *tg = m->tgt_host; /* a target < 0 is masked out of the loss */
  for (int64_t i = 0; i < N; ++i) {
    double l = 0.0;
    if (i < m->valid_rows && (!tg || tg[i] >= 0))
      l = log((double)hs[N + i]) + (double)hs[i] - (double)hs[2 * N + i];
    m->row_loss[i] = l;
    s += l;
  }
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
  int64_t L = m->chunks[m->slot_chunk[slot]].L_count;
  return L > 0 ? a->res3 + (L - 1) * m->Nl * m->C : a->encoded;
}

int td_model_head_slot(const td_model *m) { return m->chunks[m->nchunks - 1].slot0; }

void td_model_want_logits(td_model *m, int64_t pos) { m->logits_row = pos; }

const float *td_model_input_grad(const td_model *m) { return m->dres; }

/* ---- split backward: the size of the weight-gradient work W of a B --------------- */

/* Bytes of one slot's arena: an upper bound of what a B records (mirrors
 * the recording in block.c; a piece is rounded up to 64 bytes). */
static size_t wl_bytes(const td_model *m, int64_t *nops) {
  int64_t N = m->B * m->T, C = m->C, F = m->F, at = (int64_t)td_dtype_size(m->at);
  int64_t Ckv = m->KV * m->HS, bytes = 0, ops = 8;
#define PIECE(n, es) (bytes += ((int64_t)(n) * (es) + 63) / 64 * 64)
  for (int64_t l = 0; l < m->L_count; ++l) {
    if (m->llama) {
      PIECE(N * C, at), PIECE(N * F, at), PIECE(N * F, at), PIECE(N * C, at);
      PIECE(N * m->Cl, at), PIECE(N * Ckv, at), PIECE(N * Ckv, at);
      if (m->recompute) /* h, n2 twice, atty, n1 three times */
        PIECE(N * F, at), PIECE(N * C, at), PIECE(N * C, at), PIECE(N * m->Cl, at),
            PIECE(N * C, at), PIECE(N * C, at), PIECE(N * C, at);
      else if (m->sp) /* n2 twice, n1 three times: gathered, transient */
        PIECE(N * C, at), PIECE(N * C, at), PIECE(N * C, at), PIECE(N * C, at),
            PIECE(N * C, at);
      PIECE(C, 4), PIECE(C, 4);
      ops += 7 + 2 + 2;
    } else {
      PIECE(N * C, at), PIECE(N * F, at), PIECE(N * C, at), PIECE(N * m->C3, at);
      if (m->recompute) PIECE(N * F, at), PIECE(N * C, at), PIECE(N * m->Cl, at), PIECE(N * C, at);
      else if (m->sp) PIECE(N * C, at), PIECE(N * C, at); /* ln2, ln1 gathered */
      PIECE(C, 4), PIECE(F, 4), PIECE(C, 4), PIECE(C, 4), PIECE(C, 4), PIECE(m->C3, 4);
      PIECE(C, 4), PIECE(C, 4);
      ops += 4 + 8 + 2;
    }
  }
  for (int64_t l = 0; m->moe && l < m->L_count; ++l) { /* a sparse block's (moe.c) */
    if (!td_config_moe_layer(m->cfg, m->L_first + l)) continue;
    int64_t R = m->Rx > N * m->K ? m->Rx : N * m->K, Fe = m->Fe, E = m->E, pieces = 1;
    while ((int64_t)1 << pieces <= R) ++pieces;
    PIECE(R * C, at), PIECE(R * Fe, at), PIECE(R * C, at), PIECE(R * Fe, at), PIECE(R * C, at);
    if (m->recompute) PIECE(R * Fe, at); /* h, from the shared block */
    bytes += E * 8 * 64;                  /* each expert's copies and stashes rounded up */
    PIECE(E * C, 4);                      /* the router's stash */
    if (!m->llama) PIECE(E * (Fe + C), 4); /* gpt2: the experts' biases' stashes */
    ops += 3 * E * pieces + 2 * E + 1;
  }
  if (m->last_stage) {
    if (m->fused_head) { /* the head's weight gradient, summed over the chunks in B */
      PIECE(m->Vs * C, 4);
    } else {
      if (m->at != TD_DTYPE_F32) PIECE(N * m->Vs, at);
      if (m->sp) PIECE(N * C, at); /* lnf gathered */
    }
    PIECE(C, 4), PIECE(C, 4);
    ops += 5;
  }
  if (m->first_stage) PIECE(N * C, 4), ops += 1;
#undef PIECE
  *nops = ops;
  return (size_t)bytes;
}

/* ---- backward -------------------------------------------------------------------- */

/* Unit hooks of the backward: the whole backward places a unit's parameters
 * and gradients; B only its parameters and records the unit for W. */
static td_status bhook(td_model *m, int acquire, int u) {
  if (!m->defer) return hook(m, acquire, u, TD_PHASE_BACKWARD);
  td_wop op = {acquire ? WOP_ACQUIRE : WOP_RELEASE, 0, 0, u, 0, 0, 0, 0, NULL, NULL, 0};
  TD_CHECK(td_model_wl_push(m, &op));
  return hook(m, acquire, u, TD_PHASE_BACKWARD_INPUT);
}

/* The backward of `slot`: whole (m->defer 0) or its B (m->defer 1, the
 * weight-gradient work recorded in the slot's list). */
static td_status backward_impl(td_model *m, int slot, float loss_scale, const float *dout) {
  td_kernels *k = m->k;
  td_acts *a = &m->acts[slot];
  use_slot(m, slot);
  int64_t B = m->B, T = m->T, C = m->C, N = B * T, Nl = m->Nl;
  float *x = a->encoded;
  td_dtype pt = m->pt, at = m->at;
  const void *d = NULL; /* the gradient the next matmuls read (type at) */
  int U = m->nunits - 1;
  if (uses_unit0(m)) TD_CHECK(bhook(m, 1, 0));
  if (m->last_stage) {
    TD_CHECK(bhook(m, 1, U));
    float *gw = NULL, *gb = NULL;
    const float *dx = NULL;
    if (m->fused_head) {
      TD_CHECK(head_fused_bwd(m, a, loss_scale));
    } else {
      float *dl = a->logits; /* gradient in place */
      TD_CHECK(k->xent_bwd(k, dl, a->logits, a->rowmax, a->sumexp, a->targets, m->v0,
                           loss_scale, N, m->Vs, vocab_valid(m)));
      TD_CHECK(td_model_mm_grad(m, dl, N * m->Vs, &d));
      /* d is the slot's logits in float32 (kept until W), a scratch rounding in bf16;
       * the head's input: the slot's lnf, or (sequence parallel) gathered again */
      const void *xf = NULL;
      TD_CHECK(td_model_col_in(m, a->lnf, &xf));
      TD_CHECK(td_model_wmm(m, 1, 0, m->Vs, C, N, d, at == TD_DTYPE_F32, xf, !m->sp,
                            head_kind(m), -1));
      TD_CHECK(td_model_mm(m, 0, 0, N, C, m->Vs, d, at, td_model_pw(m, head_kind(m), -1), pt,
                           0.0f, m->dln));
      TD_CHECK(td_model_poll(m));
    }
    TD_CHECK(td_model_col_grad(m, &dx));
    const float *last = m->L_count > 0 ? a->res3 + (m->L_count - 1) * Nl * C : x;
    TD_CHECK(k->zero(k, m->dres, (size_t)Nl * C * sizeof(float)));
    TD_CHECK(td_model_rep_dst(m, TD_PK_LNF_W, -1, &gw));
    if (m->llama) {
      TD_CHECK(k->rmsnorm_bwd(k, m->dres, gw, dx, last, td_model_pw(m, TD_PK_LNF_W, -1), pt,
                              a->lnf_rstd, Nl, C));
    } else {
      TD_CHECK(td_model_rep_dst(m, TD_PK_LNF_B, -1, &gb));
      TD_CHECK(k->layernorm_bwd(k, m->dres, gw, gb, dx, last, td_model_pw(m, TD_PK_LNF_W, -1), pt,
                                a->lnf_mean, a->lnf_rstd, Nl, C));
    }
    TD_CHECK(td_model_rep_flush(m));
    TD_CHECK(bhook(m, 0, U));
  } else {
    /* gradient of this stage's output, from the next stage: dres = dout */
    TD_CHECK(k->zero(k, m->dres, (size_t)Nl * C * sizeof(float)));
    TD_CHECK(k->add(k, m->dres, m->dres, dout, Nl * C));
  }
  for (int64_t li = m->L_count - 1; li >= 0; --li) {
    int layer = (int)(m->L_first + li);
    TD_CHECK(bhook(m, 1, 1 + layer));
    const float *resid = li == 0 ? x : a->res3 + (li - 1) * Nl * C;
    td_acts *w = a;
    int64_t ix = li;
    if (m->recompute) { /* the block's activations again, from its kept input */
      w = &m->work, ix = 0;
      m->moe_quiet = 1; /* its auxiliary losses were counted in the forward */
      td_status rs = m->llama ? td_model_llama_block_fwd(m, w, 0, layer, resid, w->res3)
                              : td_model_gpt2_block_fwd(m, w, 0, layer, resid, w->res3);
      m->moe_quiet = 0;
      TD_CHECK(rs);
    }
    TD_CHECK(m->llama ? td_model_llama_block_bwd(m, w, ix, layer, resid)
                      : td_model_gpt2_block_bwd(m, w, ix, layer, resid));
    TD_CHECK(bhook(m, 0, 1 + layer));
  }
  const float *de = m->dres; /* the embedding output's gradient, all N rows */
  if (m->first_stage) TD_CHECK(td_model_row_grad(m, &de));
  if (m->first_stage && !m->defer) {
    TD_CHECK(k->embed_bwd(k, td_model_pg(m, TD_PK_WTE, -1),
                          m->llama ? NULL : td_model_pg(m, TD_PK_WPE, -1), de, a->inputs, m->v0,
                          m->Vs, B, T, C, m->pos));
  } else if (m->first_stage) { /* W scatters a copy of the gradient into the embedding */
    void *c = NULL;
    TD_CHECK(td_model_wl_take(m, N * C, 4, &c));
    TD_CHECK(k->cast(k, c, TD_DTYPE_F32, de, TD_DTYPE_F32, N * C));
    td_wop op = {WOP_EMBED, 0, 0, -1, TD_PK_WTE, 0, 0, 0, c, a->inputs, 0};
    TD_CHECK(td_model_wl_push(m, &op));
  }
  if (uses_unit0(m)) TD_CHECK(bhook(m, 0, 0));
  return TD_OK;
}

td_status td_model_backward(td_model *m, int slot, float loss_scale, const float *dout) {
  m->defer = 0;
  return backward_impl(m, slot, loss_scale, dout);
}

td_status td_model_backward_input(td_model *m, int slot, float loss_scale, const float *dout) {
  if (!m->wl) TD_FAIL(TD_ERR_INTERNAL, "split backward on a model created without its stash");
  m->wcur = &m->wl[slot];
  m->wcur->n = 0, m->wcur->used = 0;
  m->defer = 1;
  td_status st = backward_impl(m, slot, loss_scale, dout);
  m->defer = 0;
  return st;
}

td_status td_model_backward_weight(td_model *m, int slot) {
  td_kernels *k = m->k;
  struct td_wlist *w = &m->wl[slot];
  for (int i = 0; i < w->n; ++i) {
    const td_wop *op = &w->ops[i];
    switch (op->kind) {
      case WOP_ACQUIRE: TD_CHECK(hook(m, 1, op->layer, TD_PHASE_BACKWARD_WEIGHT)); break;
      case WOP_RELEASE: TD_CHECK(hook(m, 0, op->layer, TD_PHASE_BACKWARD_WEIGHT)); break;
      case WOP_MM:
        TD_CHECK(td_model_mm(m, op->ta, op->tb, op->M, op->N, op->K, op->a, m->at, op->b, m->at,
                             1.0f, op->xe ? td_model_pge(m, op->pk, op->layer, op->xe - 1)
                                          : td_model_pg(m, op->pk, op->layer)));
        TD_CHECK(td_model_poll(m));
        break;
      case WOP_ADD: {
        float *g = op->xe ? td_model_pge(m, op->pk, op->layer, op->xe - 1)
                          : td_model_pg(m, op->pk, op->layer);
        TD_CHECK(k->add(k, g, g, op->a, op->M));
        break;
      }
      case WOP_EMBED:
        TD_CHECK(k->embed_bwd(k, td_model_pg(m, TD_PK_WTE, -1),
                              m->llama ? NULL : td_model_pg(m, TD_PK_WPE, -1), op->a, op->b, m->v0,
                              m->Vs, m->B, m->T, m->C, m->pos));
        break;
      default: TD_FAIL(TD_ERR_INTERNAL, "split backward: unknown operation %d", op->kind);
    }
  }
  w->n = 0, w->used = 0;
  return TD_OK;
}

td_status td_model_logits_at(td_model *m, int slot, int64_t pos, float *out) {
  td_acts *a = &m->acts[slot];
  use_slot(m, slot);
  td_kernels *k = m->k;
  int64_t Vs = m->Vs;
  float *shard = NULL;
  td_status st = TD_OK;
  const float *row = a->logits + pos * Vs;
  if (m->fused_head) { /* the forward left the chunk of m->logits_row in hlog */
    int64_t N = m->B * m->T, R = m->head_rows < N ? m->head_rows : N;
    if (pos != m->logits_row)
      TD_FAIL(TD_ERR_INTERNAL, "the fused head computed the logits of row %lld, not %lld",
              (long long)m->logits_row, (long long)pos);
    row = m->hlog + (pos % R) * Vs;
  }
  TD_CHECK(td_alloc((void **)&shard, (size_t)Vs * m->grid->tp * sizeof(float), "logits"));
  /* The in-place all-gather expects each rank's block at its own offset. */
  TD_CHECK_GOTO(k->to_host(k, shard + m->v0, row, (size_t)Vs * sizeof(float)));
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
