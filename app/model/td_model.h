/* td_model.h — the model families' forward and backward for one rank's shard.
 *
 * The model computes the layers of its pipeline stage with tensor-parallel
 * local widths taken from the registry (C/tp, 3C/tp, 4C/tp, heads/tp, V/tp
 * for GPT-2; heads/tp, kv_heads/tp, ffn_dim/tp for LLaMA);
 * parallelism changes which shard a rank holds, never the math. Buffers live
 * in the compute back-end's memory and are allocated once, at creation. */
#ifndef TD_MODEL_H
#define TD_MODEL_H

#include <stdint.h>

#include "app/deck/td_config.h"
#include "app/model/td_registry.h"
#include "kernels/td_kernels.h"
#include "parallel/td_coll.h"
#include "parallel/td_grid.h"

/* Activations of one micro-batch through one stage (all (B·T, ·) row-major;
 * under sequence parallelism the residual stream and the norms — encoded,
 * ln*, their statistics, res2, res3 — hold the rank's Nl = B·T / tp rows).
 * The matmul inputs (void *) are of the model's activation type m->at:
 * float32, or bf16 under training.precision: bf16; the rest is float32. */
typedef struct td_acts {
  float *encoded;                  /* (N, C) embedding output (first stage) */
  void *ln1;                       /* per layer (N, C) (llama: RMSNorm output) */
  float *ln1_mean, *ln1_rstd;      /* per layer (N), (N) (llama: rstd only) */
  float *qkv;                      /* per layer (N, C3): gpt2 [q|k|v] per row; llama
                                      the blocks q (N, NH·HS), k, v (N, KV·HS) after
                                      one another, q and k rotated */
  void *atty;                      /* per layer (N, C/tp) */
  float *att;                      /* per layer (B, NH/tp, T, T) */
  float *res2;                     /* per layer (N, C) residual after attention */
  void *ln2;
  float *ln2_mean, *ln2_rstd;
  float *fch;                      /* per layer (N, F/tp); llama: gate then up, 2·(N, F/tp) */
  void *fch_gelu;                  /* per layer (N, F/tp): gelu(fch) or silu(gate)·up */
  float *res3;                     /* per layer (N, C) block output */
  void *lnf;                       /* (N, C) last stage */
  float *lnf_mean, *lnf_rstd;      /* (N), (N) */
  float *logits;                   /* (N, V/tp) last stage; gradient in place */
  float *rowmax, *sumexp, *tlogit; /* (N) cross-entropy statistics */
  int32_t *inputs, *targets;       /* (N) tokens of this micro-batch (target < 0: not in
                                      the loss) */
  int32_t *doc;                    /* (N) document starts (data.attend: document), else NULL */
  /* sparse blocks (model.moe), per layer, over all N rows (gathered under
   * sequence parallelism; every tp rank routes the same rows); R = N·K rows
   * in the experts' order (dropless): */
  float *mprobs, *mlse, *mw;       /* (N, E) router probabilities, (N) their lse, (N, K) weights */
  int32_t *midx, *mpos, *mperm, *moff; /* (N, K) experts, (N·K) row of each slot, slot of each
                                      row, (E + 1) first row of each expert */
  float *mgu;                      /* (Rx, Fe/tp) gate then (Rx, Fe/tp) up (the rows this
                                      rank's experts compute: Rx, td_model.Rx) */
  void *mh;                        /* (Rx, Fe/tp) silu(gate)·up, type at */
  float *mye;                      /* (R, C) expert outputs (partial over tp) */
  int32_t *moff_host;              /* host: per layer (E + 1) copy of moff */
  double *mcnt_host;               /* host: per layer (B, E) slots of each sequence per expert */
  int32_t *mrc_host;               /* host, expert parallel: per layer (ep, E/ep) the rows each
                                      ep peer sent to each of this rank's experts */
} td_acts;

typedef struct td_model td_model;

/* One entry of the model's allocation ledger (td_model.ledger): a buffer
 * counted in act_bytes. what: the description given at allocation (a
 * static string, e.g. "activations ln1"); n elements of es bytes. */
typedef struct td_model_alloc {
  const char *what;
  int64_t n;
  size_t es;
} td_model_alloc;

/* One model chunk a rank holds (see td_model.chunks). */
typedef struct td_model_chunk {
  int64_t L_first, L_count; /* its layers */
  int first, last;          /* the first (embedding) / last (head) model chunk */
  int slot0, nslots;        /* its activation slots */
} td_model_chunk;

/* Units: contiguous ranges of the flat buffers that are gathered, reduced and
 * released together: unit 0 = {wte, wpe}, unit 1 + l = block l, unit L + 1 =
 * {ln_f} (empty ranges where this stage holds nothing). */
/* BACKWARD: a whole backward (parameters and gradients); a split backward
 * (zb-h1) has BACKWARD_INPUT (B: parameters only) and BACKWARD_WEIGHT (W:
 * gradients only). */
typedef enum {
  TD_PHASE_FORWARD,
  TD_PHASE_BACKWARD,
  TD_PHASE_BACKWARD_INPUT,
  TD_PHASE_BACKWARD_WEIGHT
} td_phase;
typedef struct td_model_hooks {
  void *ctx;
  /* Before unit u is used in `phase`: make m->unit_param[u] (and, in backward,
   * m->unit_grad[u]) valid. */
  td_status (*acquire)(void *ctx, td_model *m, int u, td_phase phase);
  /* After unit u's work in `phase`; in backward its gradients for this
   * micro-batch are complete. */
  td_status (*release)(void *ctx, td_model *m, int u, td_phase phase);
  /* Between the large kernels of a unit: let communication in flight
   * progress (NULL: nothing to do). */
  td_status (*poll)(void *ctx);
} td_model_hooks;

struct td_model {
  const td_config *cfg;
  td_registry *reg;
  td_kernels *k;
  td_grid *grid;
  td_coll_stats *stats;
  /* sizes */
  int64_t B, T, C, V, Vs, v0, L_first, L_count, NH, HS;
  int64_t C3, Cl, F; /* local q+k+v width (gpt2: 3C/tp), query width C/tp, MLP width F/tp */
  int64_t KV;        /* local key/value heads (gpt2: NH) */
  /* parallel.cp (context parallelism): T is the rank's rows of each
   * sequence, seq_len / cp: of its 2·cp chunks of seq_len / (2·cp)
   * positions, chunks cp_rank and 2·cp − 1 − cp_rank (*pos; NULL without
   * cp). Every layer's attention reads the keys and values of the whole
   * sequence: the rank's (N, 2·KV·HS) rows packed in kvl, all-gathered over
   * cp_comm into kvg (cp_rank-major), put in position order in kvf (B, seq_len,
   * 2·KV·HS); in backward gathered again, their gradients (dkvf) put back in
   * kvg's order and reduce-scattered to kvl */
  const td_pos *pos;
  td_pos pos_cp;
  /* data.attend: document: each slot's rows carry their document starts
   * (td_pos.doc = the slot's acts.doc): pos points at pos_doc, made from
   * pos_base (cp's, or NULL) by use_slot; doc_host is the next forward's
   * (td_model_set_doc) */
  int docs;
  const td_pos *pos_base;
  td_pos pos_doc;
  const int32_t *doc_host;
  const int32_t *tgt_host; /* the forward's targets (host), for loss_of's mask */
  int cp;
  int64_t Tk; /* model.seq_len: the keys of every sequence */
  float *kvl, *kvg, *kvf, *dkvf;
  struct td_dcomm *dc_cp;  /* device collectives over cp_comm (the trainer's), else NULL */
  td_coll_stats *cp_stats; /* where the cp collectives are counted (NULL: stats) */
  int llama, tied;   /* family; the head is wte */
  float norm_eps, rope_theta;
  int first_stage, last_stage;
  /* precision (docs/architecture.md, "Precision"): pt the type of the parameters the
   * kernels read (bf16: the working copy), at that of the saved matmul
   * inputs; gradients, the residual stream and statistics are float32 */
  td_dtype pt, at;
  /* the rank's model chunks (parallel.virtual_stages; one without
   * interleaving): chunk c is model chunk c·pp + pp_rank, with its layers
   * and its slots [slot0, slot0 + nslots); L_first, L_count, first_stage and
   * last_stage above describe the chunk in use (the slot's, in forward and
   * backward) */
  int nchunks;
  td_model_chunk *chunks;
  int *slot_chunk; /* (nslots) the chunk of each slot */
  /* activations of up to nslots micro-batches in flight (pipeline), and
   * backward scratch shared by all */
  int nslots;
  td_acts *acts;
  /* training.recompute: blocks: the slots keep the block inputs (res3) only;
   * one block's activations live in `work`, filled by the forward and again
   * by a recomputation before each block's backward */
  int recompute;
  td_acts work;
  /* training.recompute: attention (selective recomputation, Korthikanti et
   * al. 2022): no layer keeps its attention probabilities; the forward and
   * the recomputation before each attention backward use the one att_re
   * (B, NH, T, T) */
  int recompute_att;
  float *att_re;
  /* model.attention: fused — the attention kernels keep one log-sum-exp
   * per query row (acts' att is (B, NH, T) per layer) and recompute the
   * probabilities in backward; recompute_att is then 0: nothing to drop */
  int fused_att;
  /* model.head: fused — the head's matmul and the cross-entropy run in
   * chunks of head_rows rows of the micro-batch through the one (head_rows,
   * Vs) float32 buffer hlog: the forward keeps the rows' statistics only
   * (rowmax, sumexp, tlogit), the backward recomputes each chunk's logits;
   * the slots keep no logits. A forward without targets (generation)
   * computes the chunk of row logits_row (td_model_want_logits; -1: none) */
  int fused_head;
  int64_t head_rows, logits_row;
  float *hlog;
  /* split backward (parallel.pp_schedule: zb-h1): per slot the list of
   * weight-gradient work its B recorded for W, with copies of the gradients
   * it reads (block.c, model_internal.h); wcur the list B fills now, defer
   * set during a B */
  int split, defer;
  struct td_wlist *wl, *wcur;
  /* parallel.sequence_parallel (Megatron, Korthikanti et al. 2022): the
   * residual stream, the norms and their statistics hold this tp rank's Nl =
   * N / tp contiguous rows of the micro-batch's N = B·T (Nl = N without);
   * each column-parallel matmul reads its input all-gathered into xg (N, C)
   * of type at, each row-parallel one's output is reduce-scattered to the
   * local rows; the gradients of parameters replicated over tp that the
   * local rows give (norms, row-parallel biases) are computed into gsp and
   * summed over tp once a block (rep[] says where they go) */
  int sp;
  int64_t Nl;
  void *xg;
  float *gsp;
  int *counts;    /* (2·max(tp, cp)) counts and displacements of the device collectives */
  int nrep;
  int64_t rep_used;
  struct { td_param_kind kind; int layer; int64_t off, n; } rep[8];
  /* model.moe (sparse blocks, moe.c): E experts, top K, Fe = the expert
   * width / tp; the auxiliary losses' weights; what the forwards with
   * targets since td_model_moe_reset added up (host: Σ over sequences and
   * sparse blocks of E·Σ f·P, Σ over rows of lse², slots per expert); quiet
   * during a recomputation (the block ran already) */
  int moe;
  int64_t E, K, Fe, moe_layers;
  double aux_alpha, z_beta;
  double moe_aux, moe_z, moe_dropped, *moe_load;
  int moe_quiet;
  int64_t cap;                 /* model.moe.capacity_factor: slots an expert keeps of a
                                  sequence, ⌈c·T·K/E⌉ (0: dropless) */
  int32_t *mplan_host;         /* host, with a capacity: (R) pos, (R) perm, (B·E + E) counts */
  /* expert parallelism (parallel.ep; moe.c): this rank computes experts
   * [ep_rank·El, (ep_rank + 1)·El) over the rows every ep peer sends it, at
   * most Rx (dropless ep·N·min(K, El); with a capacity also ep·B·cap·El);
   * the exchange: rows sent to / received from each peer (host, ep each, and
   * displacements), the local experts' first rows (El + 1) and the
   * expert-major order of the received rows (perm: expert-side row -> the
   * received row, pos its inverse; host and device); mxr an exchange buffer
   * (Rx, C) of 4-byte elements; ep_stage its host copy (2 of them) where
   * the back-end's memory is not host memory */
  int ep, ep_rank;
  int64_t El, Rx;
  int *ep_sc, *ep_sd, *ep_rcn, *ep_rd;
  int32_t *ep_offx, *ep_perm_host, *ep_pos_host, *ep_sent_host, *mperm_x, *mpos_x;
  void *mxr;
  char *ep_stage;
  MPI_Datatype ep_row[2];      /* a row of C elements of type at, of float32 */
  td_coll_stats *ep_stats;     /* where the all-to-alls are counted (NULL: stats) */
  double ep_ms;                /* milliseconds (host) in the all-to-alls since the start */
  struct td_dcomm *dc_ep;      /* device all-to-all over ep_comm (NCCL), or NULL: MPI */
  int *ep_ecnt;                /* (4·ep) the counts above in elements, for dc_ep */
  float *mlog, *mpsum, *mdw, *mdlog, *mgP, *mdh, *mdxe;
  int32_t *mcount;
  void *mxe, *mdye;            /* (max(R, Rx), C) the experts' inputs, their output gradient
                                  (type at) */
  int32_t *midx_host;          /* host: (N, K) */
  float *mpsum_host;           /* host: (B, E) */
  double *mseq_host;           /* host: (2, B, E) a micro-batch's per-sequence counts and
                                  Σ p, summed over cp */
  float *mlse_host;            /* host: (N) */
  float *dres, *dtmp, *dln, *dqkv, *datty, *dfch, *datt_scratch;
  void *dmm;             /* bf16: a gradient rounded for the matmuls that read it */
  float *rowstat_host;   /* (3N) host staging for cross-entropy statistics */
  double *row_loss;      /* (N) host: each row's loss in the last forward with targets
                            (last stage; 0 for a target < 0): td_model_row_losses */
  int staged;            /* the back-end's memory is not host memory: MPI gets host copies */
  struct td_dcomm *dc_tp, *dc_embed; /* device collectives over tp_comm and embed_comm
                            (set by the trainer when it uses them), else NULL: MPI */
  int dcomm;             /* they will be used (td_model_create's argument): no host_stage */
  float *host_stage;     /* staged only: the host copy of the model's all-reduces (tp sums,
                            cross-entropy statistics, the tied wte's gradient over
                            embed_comm); NULL otherwise */
  double act_bytes;      /* back-end bytes of activations, scratch, tokens (and, when
                            staged, of host_stage) */
  double layer_bytes;    /* one layer's block activations for one micro-batch as its
                            forward writes them (the scores too, whatever recomputation
                            keeps): alloc_blocks counted for one layer; the planner's
                            memory traffic of the non-matmul kernels scales with it */
  td_model_alloc *ledger; /* (nledger) every allocation act_bytes counts, in order
                             (size queries too): Σ n·es = act_bytes */
  int nledger, ledger_cap;
  int64_t valid_rows;    /* positions counted in the loss sum (default B·T;
                            evaluation of a partial micro-batch lowers it) */
  /* units (see above): flat ranges and where their elements live now */
  int nunits;                      /* the dense units; entries [nunits, 2·nunits) are the
                                      same units' expert ranges (the expert space: a block's
                                      experts, empty elsewhere and without model.moe); the
                                      hooks for unit u place both */
  int64_t *unit_begin, *unit_end;
  void **unit_param;               /* element unit_begin[u] of the params (type pt) */
  float **unit_grad;               /* ... and of the grads */
  td_model_hooks hooks;            /* place units (the trainer's ZeRO engine) */
};

/* Sparse blocks (model.moe): zero the sums the forwards add up; read them
 * (aux: Σ over sequences and sparse blocks of E·Σ_i f_i·P_i; z: Σ over rows
 * and sparse blocks of logsumexp²; dropped: the slots over an expert's
 * capacity; load: (E) slots routed to each expert over the sparse blocks)
 * — this rank's, from its stage's blocks. */
void td_model_moe_reset(td_model *m);
void td_model_moe_sums(const td_model *m, double *aux, double *z, double *dropped,
                       const double **load);

/* Rows of the residual stream a rank holds for micro-batches of B
 * sequences: B·T, or B·T / tp under parallel.sequence_parallel. */
int64_t td_model_rows(const td_config *cfg, int64_t B);

/* Unit of a parameter. */
int td_model_unit_of(const td_model *m, const td_param *p);
/* Point every unit at the flat buffers params (type m->pt) / grads (grads
 * may be NULL). */
void td_model_units_flat(td_model *m, void *params, float *grads);

/* Allocate the model for this rank: registry, units, activations for
 * micro-batches of B sequences, nslots[c] slots for each of its
 * parallel.virtual_stages chunks (with the split backward of zb-h1, each
 * slot with its weight-gradient stash). Parameters, gradients and optimizer state
 * live elsewhere (td_zero); the hooks place each unit before use. With
 * k == NULL, a size query: act_bytes, the registry and the units are set,
 * nothing is allocated, and only td_model_destroy may be called. `dcomm`:
 * the trainer will hand the model device communicators (dc_tp, dc_embed), so
 * its all-reduces need no host copy. */
td_status td_model_create(const td_config *cfg, td_grid *grid, td_kernels *k,
                          td_coll_stats *stats, int64_t B, const int *nslots, int dcomm,
                          td_model **out);
void td_model_destroy(td_model **m);
/* Pointer to tensor p inside a flat buffer over the rank's local space. */
static inline float *td_view(float *flat, const td_param *p) { return flat + p->offset; }

/* Forward one micro-batch of B sequences held in activation slot `slot`
 * through the slot's chunk (a stage's input, output and first/last tests
 * below are the chunk's):
 * inputs/targets are (B·T) host tokens (inputs used on the first stage,
 * targets on the last; targets may be NULL for logits only). A stage other
 * than the first reads its input from td_model_stage_input(m, slot). On the
 * last stage, *loss_sum = Σ per-position losses of the first valid_rows
 * positions (the caller divides by the global token count). Collective on
 * tp_comm. */
td_status td_model_forward(td_model *m, int slot, const int32_t *inputs, const int32_t *targets,
                           double *loss_sum);
/* Backward of the forward in `slot`, accumulating gradients through the
 * hooks; loss_scale = 1 / (global tokens). A stage other than the last takes
 * dout (N, C), the gradient of its output, in the back-end's memory. After
 * it, td_model_input_grad holds the gradient of the stage input. Collective
 * on tp_comm. */
td_status td_model_backward(td_model *m, int slot, float loss_scale, const float *dout);
/* The backward split in two (parallel.pp_schedule: zb-h1; the model was
 * created for it). B: the input gradient (td_model_input_grad, as
 * td_model_backward leaves it), placing units' parameters only, and the
 * bias and norm gradients into the slot's stash; it records the weight
 * gradients' matmuls (with copies of the output gradients they read), the
 * embedding's scatter and the stash's additions. W (td_model_backward_weight,
 * later, same slot): runs them, placing units' gradients only, in the unit
 * order of td_model_backward. The gradients are bit-identical to
 * td_model_backward's. B is collective on tp_comm; W is not. */
td_status td_model_backward_input(td_model *m, int slot, float loss_scale, const float *dout);
td_status td_model_backward_weight(td_model *m, int slot);
/* (N, C) buffers: a stage's input (filled by the caller on stages > 0), its
 * output after forward, and the gradient of its input after backward. */
float *td_model_stage_input(td_model *m, int slot);
const float *td_model_stage_output(const td_model *m, int slot);
const float *td_model_input_grad(const td_model *m);
/* Pipeline messages scattered over tp (app/train/pipeline.c): full (tp·part
 * floats, in the back-end's memory) holds this rank's part at
 * tp_rank·part; afterwards it holds every tp rank's. Collective on
 * tp_comm (counted in the model's stats: an all-gather). */
td_status td_model_tp_gather(td_model *m, float *full, int64_t part);
/* The first slot of the chunk holding the head (the last model chunk on the
 * last stage): where a forward-only pass leaves the logits. */
int td_model_head_slot(const td_model *m);
/* Logits of position `pos` (row of the micro-batch) after a forward in slot:
 * copies V floats (full vocabulary, gathered over tp) to host out. Collective
 * on tp_comm. */
td_status td_model_logits_at(td_model *m, int slot, int64_t pos, float *out);
/* The row td_model_logits_at will read after the next forward without
 * targets: the fused head computes only its chunk (-1: none). */
void td_model_want_logits(td_model *m, int64_t pos);
/* data.attend: document: the document starts (B·T int32, host, this rank's
 * rows: the position where each row's document starts) of the micro-batch
 * the next td_model_forward computes; kept with its slot for the backward. */
void td_model_set_doc(td_model *m, const int32_t *doc);
/* Each row's loss (B·T doubles, row b·T + t of this rank's rows; 0 where the
 * target is < 0 or beyond valid_rows) of the last forward with targets, on
 * the last stage (NULL elsewhere). Valid until the next forward. */
const double *td_model_row_losses(const td_model *m);

#endif
