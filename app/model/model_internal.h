/* model_internal.h — what the files of app/model/ that run the model share:
 * model.c (allocation, the order of a pass, the public functions), block.c
 * (the machinery the blocks and the head are built from), gpt2.c and
 * llama.c (the families' blocks). Not part of the interface (td_model.h);
 * not included outside app/model/. Each function's full contract is above
 * its definition. */
#ifndef TD_MODEL_INTERNAL_H
#define TD_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "app/model/td_model.h"

/* One piece of recorded W work of a slot (training under zb-h1): a weight
 * gradient matmul, the addition of a small gradient B computed into the
 * slot's stash (biases, norm scales and shifts: cheap, computed where their
 * inputs are), the embedding's scatter-add, or the acquire/release of a unit
 * (so W places units in the order the whole backward does). */
enum { WOP_MM, WOP_ADD, WOP_EMBED, WOP_ACQUIRE, WOP_RELEASE };
typedef struct td_wop {
  int kind, ta, tb, layer;
  td_param_kind pk;
  int64_t M, N, K;  /* MM: grad (M, N) += op(a)·op(b), op(a) (M, K); ADD: M floats */
  const void *a, *b; /* MM: of type at; ADD: a = the stash (float); EMBED: a = d (N, C),
                        b = the slot's tokens */
  int xe;            /* MM of an expert's weight (TD_PK_EXP_*): its index + 1; else 0 */
} td_wop;

struct td_wlist {
  td_wop *ops;
  int n, cap;
  char *arena;       /* back-end memory: copies of the gradients (and, under
                        recomputation, of the inputs) W reads, and the stash */
  size_t used, size;
};

/* ---- block.c: per-layer views and matmuls --------------------------------------- */

/* Parameter kind/layer (type m->pt) where its unit lives now; its gradient
 * (float32). */
void *td_model_pw(const td_model *m, td_param_kind k, int layer);
float *td_model_pg(const td_model *m, td_param_kind k, int layer);
/* Element i of an activation buffer of type m->at. */
void *td_model_at(const td_model *m, void *base, int64_t i);
/* Layer li's attention probabilities (fused: log-sum-exps) in the set a,
 * and how many floats of them a query row keeps (Tk, fused 1). */
float *td_model_att_at(const td_model *m, const td_acts *a, int64_t li);
int64_t td_model_att_cols(const td_model *m);
/* Between large kernels: let the owner's communication progress. */
td_status td_model_poll(td_model *m);
/* C (float32) = op(A)·op(B) (+ C per beta). */
td_status td_model_mm(td_model *m, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      const void *A, td_dtype at, const void *B, td_dtype bt, float beta,
                      float *C);
/* The gradient g (n floats) as a matmul reads it (type m->at). */
td_status td_model_mm_grad(td_model *m, const float *g, int64_t n, const void **out);

/* ---- block.c: tensor, sequence and context parallelism -------------------------- */

/* Sum x (n floats) over tp. Collective on tp_comm. */
td_status td_model_tp_sum(td_model *m, float *x, int64_t n);
/* x (Nl rows) = this rank's rows of full (N rows) summed over tp.
 * Collective on tp_comm. */
td_status td_model_sp_scatter(td_model *m, const float *full, float *x, int64_t cols);
/* Attention of one layer and its backward. Collective on cp_comm (context
 * parallel). */
td_status td_model_attn_fwd(td_model *m, float *out, float *att, const float *q, int64_t ldq,
                            const float *kk, const float *v, int64_t ldkv);
td_status td_model_attn_bwd(td_model *m, float *dq, float *dk, float *dv, const float *dout,
                            const void *out, const float *q, int64_t ldq, const float *kk,
                            const float *v, int64_t ldkv, const float *att);
/* A column-parallel matmul's input, a row-parallel one's output (+ bias +
 * resid), a row-parallel one's output gradient, a column-parallel one's
 * input gradient. Collective on tp_comm. */
td_status td_model_col_in(td_model *m, const void *x, const void **out);
td_status td_model_row_out(td_model *m, const void *bias, const float *resid, float *out);
td_status td_model_row_grad(td_model *m, const float **dy);
td_status td_model_col_grad(td_model *m, const float **dx);

/* ---- block.c: the split backward's recording ------------------------------------ */

/* A piece of the current slot's arena; an operation appended to its list. */
td_status td_model_wl_take(td_model *m, int64_t n, size_t es, void **out);
td_status td_model_wl_push(td_model *m, const td_wop *op);
/* Weight gradient grad(kind, layer) (M, N) += op(A)·op(B): now, or recorded
 * for W. */
td_status td_model_wmm(td_model *m, int ta, int tb, int64_t M, int64_t N, int64_t K,
                       const void *A, int keepA, const void *B, int keepB, td_param_kind kind,
                       int layer);
/* Where a small gradient (bias, norm weight) goes: the gradient, or a stash
 * for W. */
td_status td_model_wdst(td_model *m, td_param_kind kind, int layer, float **out);
/* ... of a parameter replicated over tp, and (sequence parallel) the sum
 * over tp of those of a block (collective on tp_comm). */
td_status td_model_rep_dst(td_model *m, td_param_kind kind, int layer, float **out);
td_status td_model_rep_flush(td_model *m);

/* ---- gpt2.c, llama.c: one block ------------------------------------------------- */

/* Forward of block `layer` (resid: its input, res3: its output) with its
 * activations at index li of the set a. Backward: m->dres holds d loss /
 * d (block output) and leaves with d loss / d (block input). Collective on
 * tp_comm (and cp_comm under context parallelism). */
td_status td_model_gpt2_block_fwd(td_model *m, td_acts *a, int64_t li, int layer,
                                  const float *resid, float *res3);
td_status td_model_gpt2_block_bwd(td_model *m, td_acts *a, int64_t li, int layer,
                                  const float *resid);
td_status td_model_llama_block_fwd(td_model *m, td_acts *a, int64_t li, int layer,
                                   const float *resid, float *res3);
td_status td_model_llama_block_bwd(td_model *m, td_acts *a, int64_t li, int layer,
                                   const float *resid);

/* ---- moe.c: the feed-forward layer of a sparse block ----------------------------- */

/* n2 (Nl rows, type at, the MLP norm's output) → out = res2 + the experts'
 * mixture; backward: m->dres holds d loss / d out and leaves with d loss /
 * d n2 (summed over tp) in *dx, as td_model_col_grad gives it. Collective
 * on tp_comm. */
td_status td_model_moe_fwd(td_model *m, td_acts *a, int64_t li, int layer, const void *n2,
                           const float *res2, float *out);
td_status td_model_moe_bwd(td_model *m, td_acts *a, int64_t li, int layer, const void *n2,
                           const float **dx);
/* Parameter (type pt) of expert e where its unit lives now; its gradient. */
void *td_model_pwe(const td_model *m, td_param_kind k, int layer, int e);
float *td_model_pge(const td_model *m, td_param_kind k, int layer, int e);

#endif
