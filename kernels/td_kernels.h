/* td_kernels.h — the compute interface: one ops table per back-end.
 *
 * All tensors are row-major in the back-end's memory (host for the CPU
 * back-end, device for CUDA); token ids are int32. Tensors are float32
 * unless a td_dtype argument names the pointer's element type: that is
 * where precision matters (docs/architecture.md, "Precision"): gemm operands and
 * output, the parameters the pointwise ops read (the bf16 working copy) and
 * the activations that are matmul inputs. Arithmetic is float32 whatever
 * the storage (bf16 is rounded to nearest even on store). Shapes are given
 * per pointer. "+=" means the kernel accumulates into the output, "=" that
 * it overwrites. The CPU back-end is the reference; every other back-end is
 * tested against it. Kernels know nothing of MPI: tensor-parallel shards are
 * expressed by the (v0, Vs) vocabulary ranges and local head counts. */
#ifndef TD_KERNELS_H
#define TD_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "td_error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_kernels td_kernels;
struct td_dcomm; /* kernels/td_dcomm.h */

/* Element type of a tensor argument. */
typedef enum { TD_DTYPE_F32 = 0, TD_DTYPE_BF16 = 1 } td_dtype;
/* Bytes per element. */
static inline size_t td_dtype_size(td_dtype t) { return t == TD_DTYPE_BF16 ? 2 : 4; }

/* Positions of the rows a rank holds of each sequence (context parallelism,
 * docs/architecture.md "Context parallelism"): of the T rows of a sequence, row t is
 * position t < half ? p0 + t : p1 + (t − half) of a sequence of Tk
 * positions — two contiguous runs, increasing (p0 + half ≤ p1, the second
 * run ends by Tk). The position-aware ops take `const td_pos *pos`; NULL is
 * the identity (row t is position t, Tk = T), which computes exactly what
 * they computed before positions existed. */
typedef struct td_pos {
  int64_t Tk, half, p0, p1;
  /* Packed documents (data.attend: document), or NULL: doc[b·T + t] is the
   * position where the document of row t of sequence b starts, 0 ≤ doc ≤
   * td_pos_at(pos, t). The position encodings (embed_fwd/embed_bwd's wpe,
   * rope) then see position td_pos_at(pos, t) − doc[b·T + t] — positions
   * restart at each document — and fused attention keeps each row inside
   * its document (flash_fwd's doc). On the back-end's memory (device). */
  const int32_t *doc;
} td_pos;
/* Position of row t (0 ≤ t < T). */
static inline int64_t td_pos_at(const td_pos *p, int64_t t) {
  return !p ? t : t < p->half ? p->p0 + t : p->p1 + (t - p->half);
}
/* Position of row n = b·T + t for the position encodings: td_pos_at less
 * its document's start (td_pos.doc). */
static inline int64_t td_pos_tok(const td_pos *p, int64_t T, int64_t n) {
  return td_pos_at(p, n % T) - (p && p->doc ? p->doc[n] : 0);
}
/* Positions of the sequence: pos->Tk, or T for the identity. */
static inline int64_t td_pos_len(const td_pos *p, int64_t T) { return p ? p->Tk : T; }

struct td_kernels {
  const char *name;        /* "cpu", "cuda" */
  const char *matmul_name; /* "onednn", "cblas", "cublas" */
  void *state;             /* back-end private state (primitive cache, ...) */
  int host_memory;         /* buffers live in host memory (MPI and HDF5 may use them directly) */
  /* bf16 matmul: 2 native (hardware bf16 products), 1 emulated (bf16
   * operands widened to float32: the same numbers, no speed-up), 0 none */
  int bf16_matmul;

  /* ---- memory ---------------------------------------------------------- */
  /* Zeroed allocation in the back-end's memory; `what` names it in errors. */
  td_status (*alloc)(td_kernels *k, void **out, size_t bytes, const char *what);
  void (*free)(td_kernels *k, void *p);
  td_status (*zero)(td_kernels *k, void *p, size_t bytes);
  /* Host memory the device copies to and from at full speed (pinned,
   * page-locked: cudaMallocHost), zeroed; NULL for a back-end in host memory
   * (callers then use td_alloc / td_free). A to_device from it may still be
   * reading it after the call returns: sync before writing it again. */
  td_status (*host_alloc)(td_kernels *k, void **out, size_t bytes, const char *what);
  void (*host_free)(td_kernels *k, void *p);
  td_status (*to_host)(td_kernels *k, void *dst_host, const void *src, size_t bytes);
  /* dst (host_alloc memory) = src, copied once the work queued so far is
   * done, without waiting for it (a copy stream: the copy overlaps the work
   * queued after it); src must not change and dst must not be read before
   * host_wait, which waits for every such copy. NULL: not available (a
   * back-end in host memory; use to_host). */
  td_status (*to_host_async)(td_kernels *k, void *dst_host, const void *src, size_t bytes);
  td_status (*host_wait)(td_kernels *k);
  td_status (*to_device)(td_kernels *k, void *dst, const void *src_host, size_t bytes);
  td_status (*sync)(td_kernels *k); /* wait until queued work is done */
  /* dst = src converted, n elements (bf16: round to nearest even). */
  td_status (*cast)(td_kernels *k, void *dst, td_dtype dt, const void *src, td_dtype st,
                    int64_t n);
  /* dst row i = src row i, `cols` floats of `rows` rows; row strides ldd and
   * lds floats (≥ cols). dst and src do not overlap. */
  td_status (*copy2d)(td_kernels *k, float *dst, int64_t ldd, const float *src, int64_t lds,
                      int64_t rows, int64_t cols);

  /* ---- matmul ------------------------------------------------------------ */
  /* C (M,N) = op(A) · op(B) + beta·C, beta ∈ {0, 1}, products accumulated
   * in float32 whatever the operand types (at, bt, ct; C of type bf16 is
   * rounded once, after the sum).
   * op(A) is (M,K): A stored (M,K), or (K,M) when transA.
   * op(B) is (K,N): B stored (K,N), or (N,K) when transB. */
  td_status (*gemm)(td_kernels *k, int transA, int transB, int64_t M, int64_t N,
                    int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                    float beta, void *C, td_dtype ct);
  /* out (M,N) += bias (N, type pt) broadcast over rows. */
  td_status (*bias_fwd)(td_kernels *k, float *out, const void *bias, td_dtype pt, int64_t M,
                        int64_t N);
  /* dbias (N) += Σ_m dout (M,N). */
  td_status (*bias_bwd)(td_kernels *k, float *dbias, const float *dout, int64_t M, int64_t N);

  /* ---- embedding ----------------------------------------------------------- */
  /* out[n,:] = (v0 ≤ tok[n] < v0+Vs ? wte[tok[n]-v0,:] : 0) + (wpe ? wpe[p(n mod T),:] : 0)
   * with p = td_pos_at(pos, ·); out (B·T, C), tokens (B·T), wte (Vs, C) =
   * rows [v0, v0+Vs) of the vocabulary, wpe (Tk, C) or NULL; wte and wpe of
   * type pt. */
  td_status (*embed_fwd)(td_kernels *k, float *out, const int32_t *tokens,
                         const void *wte, int64_t v0, int64_t Vs, const void *wpe,
                         td_dtype pt, int64_t B, int64_t T, int64_t C, const td_pos *pos);
  /* dwte (Vs, C) += scatter of dout rows whose token is in [v0, v0+Vs);
   * dwpe (Tk, C): row p(t) += Σ_b dout[b,t,:] when dwpe is not NULL (rows no
   * t reaches are not touched). dout (B·T, C). */
  td_status (*embed_bwd)(td_kernels *k, float *dwte, float *dwpe, const float *dout,
                         const int32_t *tokens, int64_t v0, int64_t Vs, int64_t B,
                         int64_t T, int64_t C, const td_pos *pos);

  /* ---- LayerNorm (eps 1e-5) ------------------------------------------------ */
  /* out = (x - mean)·rstd·w + b per row; out (N, C) of type ot, x (N, C);
   * w, b (C) of type pt; mean, rstd (N) saved. */
  td_status (*layernorm_fwd)(td_kernels *k, void *out, td_dtype ot, float *mean, float *rstd,
                             const float *x, const void *w, const void *b, td_dtype pt,
                             int64_t N, int64_t C);
  /* dx (N,C) +=, dw (C) +=, db (C) += the gradients given dout (N,C); w of
   * type pt. */
  td_status (*layernorm_bwd)(td_kernels *k, float *dx, float *dw, float *db,
                             const float *dout, const float *x, const void *w, td_dtype pt,
                             const float *mean, const float *rstd, int64_t N, int64_t C);

  /* ---- causal multi-head attention ---------------------------------------- */
  /* qkv (B, T, 3·NH·HS) holds [Q | K | V] per token, heads in order inside each;
   * att (B, NH, T, T) = softmax(Q·Kᵀ/√HS, causal) saved for backward (entries
   * above the diagonal are 0); out (B, T, NH·HS) = att·V, heads concatenated. */
  td_status (*attention_fwd)(td_kernels *k, float *out, float *att, const float *qkv,
                             int64_t B, int64_t T, int64_t NH, int64_t HS);
  /* dqkv (B, T, 3·NH·HS) = gradient wrt qkv given dout (B, T, NH·HS);
   * scratch (B, NH, T, T) is workspace. */
  td_status (*attention_bwd)(td_kernels *k, float *dqkv, float *scratch,
                             const float *dout, const float *qkv, const float *att,
                             int64_t B, int64_t T, int64_t NH, int64_t HS);

  /* ---- LLaMA family ---------------------------------------------------------- */
  /* RMSNorm: out = x·rstd·w per row, rstd = 1/√(mean(x²) + eps); out (N, C)
   * of type ot, x (N, C), w (C) of type pt; rstd (N) saved. */
  td_status (*rmsnorm_fwd)(td_kernels *k, void *out, td_dtype ot, float *rstd, const float *x,
                           const void *w, td_dtype pt, float eps, int64_t N, int64_t C);
  /* dx (N,C) +=, dw (C) += the gradients given dout (N,C); w of type pt. */
  td_status (*rmsnorm_bwd)(td_kernels *k, float *dx, float *dw, const float *dout,
                           const float *x, const void *w, td_dtype pt, const float *rstd,
                           int64_t N, int64_t C);
  /* Rotary position embedding in place (Hugging Face's rotate-half): x holds
   * B·T rows of stride ld floats, each starting with H heads of HS floats;
   * row b·T + t is position p = td_pos_at(pos, t). In every head, for
   * i < HS/2 with angle a = p·theta^(−2i/HS): (x_i, x_{i+HS/2}) ←
   * (x_i·cos a − x_{i+HS/2}·sin a, x_{i+HS/2}·cos a + x_i·sin a). inverse:
   * rotate by −a (the backward of a rotation is its transpose). Angles in
   * double. */
  td_status (*rope)(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                    int64_t ld, float theta, int inverse, const td_pos *pos);
  /* SwiGLU: out = silu(g)·u, silu(g) = g/(1 + e^(−g)); n elements; out of
   * type ot. */
  td_status (*swiglu_fwd)(td_kernels *k, void *out, td_dtype ot, const float *g,
                          const float *u, int64_t n);
  /* dg = dout·u·silu'(g), du = dout·silu(g) (=), n elements. */
  td_status (*swiglu_bwd)(td_kernels *k, float *dg, float *du, const float *dout,
                          const float *g, const float *u, int64_t n);
  /* Causal grouped-query attention: q (B, T, NH·HS) in rows of stride ldq
   * floats at the positions td_pos_at(pos, t), kk and v (B, Tk, KV·HS) in
   * rows of stride ldkv, every position of the sequence in order
   * (Tk = td_pos_len(pos, T)); query head h reads key/value head h / (NH/KV)
   * (NH % KV == 0); query row t sees the keys j ≤ td_pos_at(pos, t).
   * att (B, NH, T, Tk) = softmax(Q·Kᵀ/√HS, causal) saved (0 past the mask);
   * out (B, T, NH·HS) = att·V (dense rows). attention_fwd is the case
   * q = qkv, kk = qkv + C, v = qkv + 2C, ld 3C, KV = NH, pos NULL. */
  td_status (*gqa_fwd)(td_kernels *k, float *out, float *att, const float *q, const float *kk,
                       const float *v, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                       int64_t NH, int64_t KV, int64_t HS, const td_pos *pos);
  /* dq, dk, dv (=, the layouts and strides of q, kk, v: dk, dv (B, Tk, ·),
   * keys no query sees get 0) given dout (B, T, NH·HS); dk and dv sum over
   * the query heads of their group; scratch (B, NH, T, Tk) is workspace. */
  td_status (*gqa_bwd)(td_kernels *k, float *dq, float *dk, float *dv, float *scratch,
                       const float *dout, const float *q, const float *kk, const float *v,
                       const float *att, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                       int64_t NH, int64_t KV, int64_t HS, const td_pos *pos);

  /* Fused (flash) attention, FlashAttention-2: the attention of gqa_fwd
   * without its (B, NH, T, Tk) probabilities. q, kk, v, out as gqa_fwd;
   * lse (B, NH, T) = log Σ_j exp(s_j) over the keys row t sees (s =
   * Q·Kᵀ/√HS), kept for backward in place of att. doc (may be NULL): (B, T)
   * int32, the first key position row t of sequence b sees (its document's
   * start, 0 ≤ doc ≤ td_pos_at(pos, t)); NULL: 0. mt, the products' type:
   * TD_DTYPE_F32 exact float32; TD_DTYPE_BF16 (a model computing in bf16)
   * with a head size that is a multiple of 16 (td_kernels_flash_bf16):
   * Q, K, V, dO, the probabilities P of P·V and Pᵀ·dO and the dS of dS·K
   * are rounded to bf16 for the products (the device's tensor cores), sums
   * and statistics stay float32, D is made from P, and dK's dS is float32
   * (the device's hi + lo parts) — every back-end the same math; other head
   * sizes float32. Deterministic: the same bits at every thread count and
   * run. NULL when the back-end has none. */
  td_status (*flash_fwd)(td_kernels *k, float *out, float *lse, const float *q,
                         const float *kk, const float *v, int64_t ldq, int64_t ldkv, int64_t B,
                         int64_t T, int64_t NH, int64_t KV, int64_t HS, const td_pos *pos,
                         const int32_t *doc, td_dtype mt);
  /* dq, dk, dv (=, as gqa_bwd) given dout, the forward's float32 out
   * (dense rows of NH·HS) and lse; delta (B, NH, T) is workspace for
   * D = rowsum(dout ∘ out). out NULL (a model that kept its output rounded
   * to bf16, too coarse for D: Σ_j dS_j would no longer vanish): D is made
   * exactly as Σ_j P_j·dP_j, from the probabilities again (two more tile
   * products). mt as flash_fwd. Deterministic, no atomics. */
  td_status (*flash_bwd)(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                         const float *dout, const float *out, const float *lse,
                         const float *q, const float *kk, const float *v, int64_t ldq,
                         int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                         const td_pos *pos, const int32_t *doc, td_dtype mt);

  /* ---- pointwise ---------------------------------------------------------- */
  /* out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), n elements; out of
   * type ot. */
  td_status (*gelu_fwd)(td_kernels *k, void *out, td_dtype ot, const float *x, int64_t n);
  /* dx = gelu'(x)·dout (=), n elements. */
  td_status (*gelu_bwd)(td_kernels *k, float *dx, const float *x, const float *dout, int64_t n);
  /* out = a + b (out may alias a or b), n elements. */
  td_status (*add)(td_kernels *k, float *out, const float *a, const float *b, int64_t n);
  /* x *= s, n elements. */
  td_status (*scale)(td_kernels *k, float *x, float s, int64_t n);
  /* *out = Σ x² accumulated in double, n elements (result on the host). */
  td_status (*sumsq)(td_kernels *k, const float *x, int64_t n, double *out);

  /* ---- softmax + cross-entropy on a vocabulary shard ------------------------ */
  /* Logits (N, Vs) hold vocabulary columns [v0, v0+Vs); only the first Vvalid
   * columns are real (the rest is padding that never wins and never counts).
   * The loss of row n is log Σ_j exp(l_nj) − l_n,t(n), formed across shards as
   * log(sumexp) + max − target logit, with max, sumexp and the target logit
   * all-reduced by the caller between the calls below. */
  /* rowmax (N) = max_{j<Vvalid} logits[n,j] (−inf if Vvalid = 0). */
  td_status (*xent_rowmax)(td_kernels *k, float *rowmax, const float *logits,
                           int64_t N, int64_t Vs, int64_t Vvalid);
  /* sumexp (N) = Σ_{j<Vvalid} exp(logits[n,j] − rowmax[n]);
   * tlogit (N) = logits[n, t(n)−v0] if v0 ≤ t(n) < v0+Vvalid, else 0. */
  td_status (*xent_sumexp)(td_kernels *k, float *sumexp, float *tlogit,
                           const float *logits, const float *rowmax,
                           const int32_t *targets, int64_t v0, int64_t N,
                           int64_t Vs, int64_t Vvalid);
  /* dlogits (N, Vs) = scale·(exp(l − rowmax)/sumexp − [v0+j = t(n)]) for
   * j < Vvalid, 0 for padding; a row whose target is < 0 (masked out of the
   * loss) is all 0. dlogits may alias logits. */
  td_status (*xent_bwd)(td_kernels *k, float *dlogits, const float *logits,
                        const float *rowmax, const float *sumexp,
                        const int32_t *targets, int64_t v0, float scale, int64_t N,
                        int64_t Vs, int64_t Vvalid);

  /* ---- mixture of experts ---------------------------------------------------
   * A token (row n of N) goes to K of E experts; slot s = n·K + j is its
   * j-th choice. Every sum runs in one fixed order, so the results do not
   * depend on the thread count or the back-end's scheduling. */
  /* Routing (Mixtral): probs (N, E) = softmax(logits), kept for backward;
   * lse (N) = logsumexp(logits) (the z-loss's); idx (N, K) the K largest
   * logits of each row, largest first, a tie to the lower expert (the
   * softmax keeps their order, so the choice never depends on how exp
   * rounds); w (N, K) their probabilities divided by their sum; psum (E) =
   * Σ_n probs[n, e] over the rows in order (the load-balancing loss's P,
   * before the caller divides and sums it over its group). 1 ≤ K ≤ E. */
  td_status (*moe_route)(td_kernels *k, float *probs, float *lse, int32_t *idx, float *w,
                         float *psum, const float *logits, int64_t N, int64_t E, int64_t K);
  /* The experts' order of the N·K slots: count (E) = the slots routed to
   * each expert; cap > 0 keeps an expert's first cap slots in slot order
   * and drops the rest (0: none dropped); off (E + 1) the first row of each
   * expert in the expert-major order (experts in order, an expert's kept
   * slots in slot order; off[E] the rows kept); pos (N·K) the row of slot
   * s, −1 when dropped; perm (N·K, the first off[E] written) the slot of
   * each row. All on the back-end's memory. */
  td_status (*moe_plan)(td_kernels *k, int32_t *pos, int32_t *perm, int32_t *off,
                        int32_t *count, const int32_t *idx, int64_t N, int64_t E, int64_t K,
                        int64_t cap);
  /* xe (rows, C) = row perm[r] / K (the slot's token) of x, both of type t. */
  td_status (*moe_gather)(td_kernels *k, void *xe, const void *x, td_dtype t,
                          const int32_t *perm, int64_t rows, int64_t C, int64_t K);
  /* out (N, C) = Σ_j w[n·K + j]·ye[pos[n·K + j]] over row n's kept slots,
   * j in order (0 when all are dropped). */
  td_status (*moe_combine)(td_kernels *k, float *out, const float *ye, const float *w,
                           const int32_t *pos, int64_t N, int64_t K, int64_t C);
  /* Its backward: dye[pos[s]] (type dt) = w[s]·dout[n] and dw[s] =
   * dout[n]·ye[pos[s]] for the kept slots (dw 0 for a dropped one; its dye
   * row does not exist). */
  td_status (*moe_combine_bwd)(td_kernels *k, void *dye, td_dtype dt, float *dw,
                               const float *dout, const float *ye, const float *w,
                               const int32_t *pos, int64_t N, int64_t K, int64_t C);
  /* dx (N, C) = Σ_j dxe[pos[n·K + j]] over row n's kept slots, j in order
   * (the gradient of moe_gather's input). */
  td_status (*moe_scatter)(td_kernels *k, float *dx, const float *dxe, const int32_t *pos,
                           int64_t N, int64_t K, int64_t C);
  /* The router's backward, dlogits (N, E) =, from dw (N, K) (the loss's
   * gradient for the routing weights) through the renormalisation and the
   * softmax, plus gP (E; NULL: none), the gradient each probs[n, e] gets
   * from the load-balancing loss (the same for every row), and the
   * z-loss's zc·lse[n] for lse[n]. */
  td_status (*moe_route_bwd)(td_kernels *k, float *dlogits, const float *dw, const float *probs,
                             const float *lse, const int32_t *idx, const float *w,
                             const float *gP, float zc, int64_t N, int64_t E, int64_t K);

  /* ---- optimizer ------------------------------------------------------------ */
  /* AdamW exactly as torch.optim.AdamW (step t ≥ 1, n elements) on the
   * gradient g·gscale (the clipping coefficient, 1 for none; the product
   * rounded to float as a separate scaling pass would store it):
   * p *= 1 − lr·wd; m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
   * p −= lr/(1−b1ᵗ) · m / (√v / √(1−b2ᵗ) + eps). g is not written. */
  td_status (*adamw)(td_kernels *k, float *p, const float *g, float *m, float *v,
                     int64_t n, float gscale, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int64_t t);

  /* ---- device collectives (kernels/td_dcomm.h) -------------------------------
   * NULL when the back-end has none (the CPU; a CUDA build without NCCL):
   * MPI then works on host copies of its buffers. dcomm_setup makes this
   * member's local part (streams, events; no communication) and sets
   * c->ops, c->name and c->state, so c->ops->destroy releases it whatever
   * happens next; its outcome is agreed on before anyone joins, since a
   * member that failed there would never join and the others would wait
   * for it in dcomm_init. dcomm_id fills TD_DCOMM_ID_BYTES naming a new
   * communicator (one member makes it, the others receive it); dcomm_init
   * joins it as c->rank of c->size (every member calls it at once). */
  td_status (*dcomm_setup)(td_kernels *k, struct td_dcomm *c);
  td_status (*dcomm_id)(td_kernels *k, void *id);
  td_status (*dcomm_init)(td_kernels *k, const void *id, struct td_dcomm *c);

  /* Peak bytes of device memory the back-end has held (allocations and
   * workspaces); NULL for a back-end in host memory (the metrics then report
   * the process's RSS alone). */
  size_t (*device_peak)(td_kernels *k);

  void (*destroy)(td_kernels *k);
};

/* The size checks of the ops whose arguments relate (kernels/args.c), made
 * by every back-end, with one wording: gqa_fwd/gqa_bwd (and attention_*),
 * rope, the three xent ops, copy2d. TD_ERR_USAGE naming the op and the values. */
td_status td_kernels_gqa_args(int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t NH,
                              int64_t KV, int64_t HS);
/* pos (may be NULL) describes T rows: half ≤ T, 0 ≤ p0, p0 + half ≤ p1,
 * p1 + T − half ≤ Tk. `op` names the caller in the message. */
td_status td_kernels_pos_args(const char *op, const td_pos *pos, int64_t T);
td_status td_kernels_rope_args(int64_t B, int64_t T, int64_t H, int64_t HS, int64_t ld,
                               float theta);
td_status td_kernels_xent_args(int64_t N, int64_t Vs, int64_t Vvalid);
/* The mixture-of-experts ops' sizes: N, C ≥ 0, 1 ≤ K ≤ E, cap ≥ 0; N·K
 * slots fit an int32. `op` names the caller. */
td_status td_kernels_moe_args(const char *op, int64_t N, int64_t E, int64_t K, int64_t C,
                              int64_t cap);
/* Whether flash_fwd/flash_bwd compute their products in bf16: mt bf16 and
 * a head size that is a multiple of the 16-wide tensor-core tile — on
 * every back-end, so that the CPU computes what a device does. */
static inline int td_kernels_flash_bf16(td_dtype mt, int64_t HS) {
  return mt == TD_DTYPE_BF16 && HS % 16 == 0;
}
td_status td_kernels_copy2d_args(int64_t rows, int64_t cols, int64_t ldd, int64_t lds);

/* Create the CPU back-end with `threads` OpenMP threads (0: leave as is). */
td_status td_kernels_cpu_create(int threads, td_kernels **out);
/* 1 if this build's CPU matmul engine takes bf16 operands (oneDNN), 0 if not (CBLAS). */
int td_kernels_cpu_bf16(void);
/* The CPU back-end's host_memory: 1, or 0 under the test-only switch
 * TD_TEST_STAGED=1 (cpu_backend.c), which makes every MPI call on its
 * buffers stage through host copies as a device back-end must. */
int td_kernels_cpu_host_memory(void);
/* The host_memory of the back-end named `device` ("cpu", "cuda") without
 * creating it: size queries (`trident check`) count host staging buffers
 * exactly when the run will allocate them. Unknown devices: 1. */
int td_kernels_host_memory(const char *device);
/* Whether the back-end `device` of this build computes `precision`
 * ("fp32", "bf16") without creating it; 0 with the reason in why. For
 * `trident check` and the trainer's set-up (every rank decides the same). */
int td_kernels_precision_ok(const char *device, const char *precision, char *why, size_t n);
/* GPUs this process sees (0 without the CUDA back-end, its module or a
 * device), and making one current before td_kernels_create("cuda"): the
 * CUDA module (libtrident_cuda.so) is loaded on first use. */
int td_kernels_gpu_count(void);
td_status td_kernels_gpu_select(int ordinal);
/* 1 if the CUDA module was built with NCCL (its back-end then has the
 * device collectives, dcomm_id and dcomm_init), else 0. */
int td_kernels_gpu_nccl(void);
/* The current GPU's streaming multiprocessors and memory in bytes (after
 * td_kernels_gpu_select); 0 when unknown, else 1. */
int td_kernels_gpu_info(int *sms, double *mem_bytes);
/* Create the back-end named `device` ("cpu" or "cuda"). */
td_status td_kernels_create(const char *device, int threads, td_kernels **out);
/* Destroy a back-end; accepts NULL and sets *k = NULL. */
void td_kernels_destroy(td_kernels **k);

#ifdef __cplusplus
}
#endif

#endif
