/* cpu_internal.h — private to the CPU back-end: its state, the strided
 * batched matmul every product goes through, and the op entry points that
 * cpu_backend.c puts in the ops table. Not installed, not included outside
 * kernels/cpu/. */
#ifndef TD_CPU_INTERNAL_H
#define TD_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/td_bf16.h"
#include "kernels/td_kernels.h"

/* Hot row kernels are compiled for AVX-512, AVX2 and the baseline and picked
 * at load time (GCC ifunc), since the build does not use -march=native. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(TD_NO_CLONES)
#define TD_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TD_CPU_CLONES
#endif

/* C = alpha·A·B + beta·C over a (batch0, batch1) grid of products, every
 * operand addressed by element strides {batch0, batch1, row, col}:
 * A (M,K), B (K,N), C (M,N). beta ∈ {0, 1}. A transposed operand is a
 * row stride of 1; C must have a column stride of 1. at, bt, ct: the
 * operands' td_dtype (accumulation is float32). This struct is also the
 * key of the plan cache, so it holds nothing but plain integers and floats. */
typedef struct {
  int64_t batch0, batch1;
  int64_t M, N, K;
  int64_t sa[4], sb[4], sc[4];
  float alpha, beta;
  int32_t at, bt, ct;
  int32_t pad_;
} td_cpu_mm;

typedef struct td_cpu_plan td_cpu_plan; /* one cached matmul plan */

typedef struct {
  int threads;              /* OpenMP threads the plans were created for */
  td_cpu_plan **buckets;    /* plan cache: chained hash table */
  int64_t nbuckets, nplans;
  void *scratch;            /* shared user scratchpad, grown to the largest */
  size_t scratch_bytes;
  void *engine;             /* matmul engine (oneDNN engine + stream), or NULL */
  int bf16;                 /* bf16 products: 2 native, 1 widened to float32, 0 none */
  void *widen;              /* bf16 emulation: float32 copies of A, B, C */
  size_t widen_bytes;
  float *rope;              /* rope.c: cos then sin, (rope_T positions, rope_half) each, */
  int64_t rope_T, rope_half; /* for rope_theta: made once, read by every call */
  float rope_theta;
  void *flash;              /* flash.c: the packed keys and values, grown to the */
  size_t flash_bytes;       /* largest call's and kept (no fresh pages every call) */
  void *flash_thr;          /* flash.c: every thread's tiles (and the backward's */
  size_t flash_thr_bytes;   /* whole-sequence dK, dV sums), grown and kept alike */
} td_cpu_state;

/* A workspace of the state (*buf, *bytes) grown to at least `need` bytes:
 * freed and allocated again (zeroed, td_alloc) when smaller, else kept as
 * it is; `what` names it in an allocation failure. */
td_status td_cpu_grow(void **buf, size_t *bytes, size_t need, const char *what);

/* ---- matmul engine: one implementation per file, matmul_onednn.c or
 * matmul_cblas.c, chosen by TD_HAVE_DNNL --------------------------------- */
extern const char td_cpu_mm_engine_name[];
/* bf16 operands: 1 if the engine can compute them (natively or widened),
 * 0 if it refuses them (CBLAS). */
extern const int td_cpu_mm_engine_bf16;
/* Sets s->bf16 too: 2 when the engine has bf16 products on this CPU. */
td_status td_cpu_mm_engine_create(td_cpu_state *s);
void td_cpu_mm_engine_destroy(td_cpu_state *s);
/* Build the executable form of d; *scratch_bytes is the scratchpad it needs.
 * bf16 operands reach the engine only when s->bf16 == 2. */
td_status td_cpu_mm_impl_create(td_cpu_state *s, const td_cpu_mm *d, void **impl,
                                size_t *scratch_bytes);
void td_cpu_mm_impl_destroy(void *impl);
/* Run it; scratch has at least the bytes asked for. */
td_status td_cpu_mm_impl_run(td_cpu_state *s, void *impl, const td_cpu_mm *d,
                             const void *A, const void *B, void *C, void *scratch);

/* ---- matmul.c -------------------------------------------------------------- */
/* Run d, creating and caching its plan on first use. */
td_status td_cpu_mm_run(td_kernels *k, const td_cpu_mm *d, const void *A,
                        const void *B, void *C);
void td_cpu_mm_cache_clear(td_cpu_state *s);
td_status td_cpu_gemm(td_kernels *k, int transA, int transB, int64_t M, int64_t N,
                      int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                      float beta, void *C, td_dtype ct);
td_status td_cpu_bias_fwd(td_kernels *k, float *out, const void *bias, td_dtype pt,
                          int64_t M, int64_t N);
td_status td_cpu_bias_bwd(td_kernels *k, float *dbias, const float *dout, int64_t M,
                          int64_t N);

/* ---- the other ops, one file each ----------------------------------------------- */
td_status td_cpu_embed_fwd(td_kernels *k, float *out, const int32_t *tokens,
                           const void *wte, int64_t v0, int64_t Vs, const void *wpe,
                           td_dtype pt, int64_t B, int64_t T, int64_t C, const td_pos *pos);
td_status td_cpu_embed_bwd(td_kernels *k, float *dwte, float *dwpe, const float *dout,
                           const int32_t *tokens, int64_t v0, int64_t Vs, int64_t B,
                           int64_t T, int64_t C, const td_pos *pos);
td_status td_cpu_layernorm_fwd(td_kernels *k, void *out, td_dtype ot, float *mean,
                               float *rstd, const float *x, const void *w, const void *b,
                               td_dtype pt, int64_t N, int64_t C);
td_status td_cpu_layernorm_bwd(td_kernels *k, float *dx, float *dw, float *db,
                               const float *dout, const float *x, const void *w,
                               td_dtype pt, const float *mean, const float *rstd, int64_t N,
                               int64_t C);
td_status td_cpu_attention_fwd(td_kernels *k, float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t NH, int64_t HS);
td_status td_cpu_attention_bwd(td_kernels *k, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *att,
                               int64_t B, int64_t T, int64_t NH, int64_t HS);
td_status td_cpu_gqa_fwd(td_kernels *k, float *out, float *att, const float *q,
                         const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                         int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                         const td_pos *pos);
td_status td_cpu_gqa_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *scratch,
                         const float *dout, const float *q, const float *kk, const float *v,
                         const float *att, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                         int64_t NH, int64_t KV, int64_t HS, const td_pos *pos);
/* flash.c */
td_status td_cpu_flash_fwd(td_kernels *k, float *out, float *lse, const float *q,
                           const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                           int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                           const td_pos *pos, const int32_t *doc, td_dtype mt);
td_status td_cpu_flash_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                           const float *dout, const float *out, const float *lse,
                           const float *q, const float *kk, const float *v, int64_t ldq,
                           int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                           int64_t HS, const td_pos *pos, const int32_t *doc, td_dtype mt);
td_status td_cpu_rmsnorm_fwd(td_kernels *k, void *out, td_dtype ot, float *rstd,
                             const float *x, const void *w, td_dtype pt, float eps,
                             int64_t N, int64_t C);
td_status td_cpu_rmsnorm_bwd(td_kernels *k, float *dx, float *dw, const float *dout,
                             const float *x, const void *w, td_dtype pt, const float *rstd,
                             int64_t N, int64_t C);
td_status td_cpu_rope(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                      int64_t ld, float theta, int inverse, const td_pos *pos);
td_status td_cpu_swiglu_fwd(td_kernels *k, void *out, td_dtype ot, const float *g,
                            const float *u, int64_t n);
td_status td_cpu_swiglu_bwd(td_kernels *k, float *dg, float *du, const float *dout,
                            const float *g, const float *u, int64_t n);
td_status td_cpu_gelu_fwd(td_kernels *k, void *out, td_dtype ot, const float *x, int64_t n);
td_status td_cpu_gelu_bwd(td_kernels *k, float *dx, const float *x, const float *dout,
                          int64_t n);
/* moe.c (td_kernels.h, "mixture of experts") */
td_status td_cpu_moe_route(td_kernels *k, float *probs, float *lse, int32_t *idx, float *w,
                           float *psum, const float *logits, int64_t N, int64_t E, int64_t K);
td_status td_cpu_moe_plan(td_kernels *k, int32_t *pos, int32_t *perm, int32_t *off,
                          int32_t *count, const int32_t *idx, int64_t N, int64_t E, int64_t K,
                          int64_t cap);
td_status td_cpu_moe_gather(td_kernels *k, void *xe, const void *x, td_dtype t,
                            const int32_t *perm, int64_t rows, int64_t C, int64_t K);
td_status td_cpu_moe_combine(td_kernels *k, float *out, const float *ye, const float *w,
                             const int32_t *pos, int64_t N, int64_t K, int64_t C);
td_status td_cpu_moe_combine_bwd(td_kernels *k, void *dye, td_dtype dt, float *dw,
                                 const float *dout, const float *ye, const float *w,
                                 const int32_t *pos, int64_t N, int64_t K, int64_t C);
td_status td_cpu_moe_scatter(td_kernels *k, float *dx, const float *dxe, const int32_t *pos,
                             int64_t N, int64_t K, int64_t C);
td_status td_cpu_moe_route_bwd(td_kernels *k, float *dlogits, const float *dw,
                               const float *probs, const float *lse, const int32_t *idx,
                               const float *w, const float *gP, float zc, int64_t N, int64_t E,
                               int64_t K);
td_status td_cpu_add(td_kernels *k, float *out, const float *a, const float *b,
                     int64_t n);
td_status td_cpu_cast(td_kernels *k, void *dst, td_dtype dt, const void *src, td_dtype st,
                      int64_t n);
td_status td_cpu_copy2d(td_kernels *k, float *dst, int64_t ldd, const float *src, int64_t lds,
                        int64_t rows, int64_t cols);
/* A parameter vector of type pt as float32: p itself, or widened into tmp
 * (n floats). */
const float *td_cpu_param_f32(const void *p, td_dtype pt, float *tmp, int64_t n);
td_status td_cpu_scale(td_kernels *k, float *x, float s, int64_t n);
td_status td_cpu_sumsq(td_kernels *k, const float *x, int64_t n, double *out);
td_status td_cpu_xent_rowmax(td_kernels *k, float *rowmax, const float *logits,
                             int64_t N, int64_t Vs, int64_t Vvalid);
td_status td_cpu_xent_sumexp(td_kernels *k, float *sumexp, float *tlogit,
                             const float *logits, const float *rowmax,
                             const int32_t *targets, int64_t v0, int64_t N,
                             int64_t Vs, int64_t Vvalid);
td_status td_cpu_xent_bwd(td_kernels *k, float *dlogits, const float *logits,
                          const float *rowmax, const float *sumexp,
                          const int32_t *targets, int64_t v0, float scale, int64_t N,
                          int64_t Vs, int64_t Vvalid);
td_status td_cpu_adamw(td_kernels *k, float *p, const float *g, float *m, float *v,
                       int64_t n, float gscale, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t t);

#endif
