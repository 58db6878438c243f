/* cuda_internal.cuh — private to the CUDA back-end: its state, the checking
 * macros for CUDA and cuBLAS calls, the element loads and stores that make
 * one kernel serve float32 and bf16 storage, the one warp/block reduction
 * every kernel uses, launch-size helpers with checked maxima, and the op
 * entry points that backend.cu puts in the ops table. Not included outside
 * kernels/cuda/.
 *
 * Conventions of every kernel here (STYLE.md 13b): all work is queued on
 * the back-end's one stream (s->stream); arithmetic is float32 whatever the
 * storage; bf16 stores round to nearest even (__float2bfloat16_rn, the
 * rounding of common/td_bf16.h); reductions run in a fixed order (no atomics
 * on floats), so the same inputs give the same bits on every run — exact
 * resumption depends on it. */
#ifndef TD_CUDA_INTERNAL_CUH
#define TD_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/td_cuda.h"

typedef struct td_cuda_plan td_cuda_plan; /* matmul.cu: one cached cuBLASLt plan */

typedef struct {
  int device;                  /* CUDA device ordinal */
  cudaStream_t stream;         /* every kernel, copy and matmul of the back-end */
  cublasLtHandle_t lt;         /* matmul.cu */
  void *lt_ws;                 /* cuBLASLt workspace, allocated once */
  size_t lt_ws_bytes;
  td_cuda_plan **plans;        /* matmul plan cache: chained hash table */
  int64_t nplans_buckets, nplans;
  void *scratch;               /* td_cuda_scratch: one grow-only workspace */
  size_t scratch_bytes;
  double *host_f64;            /* pinned host double for sumsq's result */
  float *rope;                 /* rope.cu: cos then sin, (rope_T positions, rope_half) each, */
  int64_t rope_T, rope_half;   /* for rope_theta: made once, read by every call */
  float rope_theta;
  size_t bytes_now, bytes_peak; /* device bytes allocated through the table */
  void **retired;              /* td_cuda_retire: outgrown buffers, freed at destroy */
  int nretired, cap_retired;
} td_cuda_state;

/* ---- checking (STYLE.md 5 and 8): the library's message and the call ---------- */
td_status td_cuda_fail(cudaError_t e, const char *call, const char *file, int line,
                       const char *func);
td_status td_cublas_fail(cublasStatus_t e, const char *call, const char *file, int line,
                         const char *func);
#define TD_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    cudaError_t td__e = (call);                                               \
    if (td__e != cudaSuccess)                                                 \
      return td_cuda_fail(td__e, #call, __FILE__, __LINE__, __func__);        \
  } while (0)
#define TD_CUBLAS_CHECK(call)                                                 \
  do {                                                                        \
    cublasStatus_t td__e = (call);                                            \
    if (td__e != CUBLAS_STATUS_SUCCESS)                                       \
      return td_cublas_fail(td__e, #call, __FILE__, __LINE__, __func__);      \
  } while (0)
/* After a launch: the cheap launch-error check (a synchronising check only
 * with TD_CUDA_SYNC_CHECK defined, for debugging). */
#ifdef TD_CUDA_SYNC_CHECK
#define TD_CUDA_LAUNCHED(what)                                                \
  do {                                                                        \
    TD_CUDA_CHECK(cudaGetLastError());                                        \
    TD_CUDA_CHECK(cudaDeviceSynchronize());                                   \
  } while (0)
#else
#define TD_CUDA_LAUNCHED(what) TD_CUDA_CHECK(cudaGetLastError())
#endif

static inline td_cuda_state *td_cuda_st(td_kernels *k) { return (td_cuda_state *)k->state; }

/* A workspace of at least `bytes` on the device, valid until the next call
 * (ops that need several regions ask once for their sum and split it). It
 * grows to the largest request and is never freed before the back-end: the
 * first step's calls size it, later steps allocate nothing. */
td_status td_cuda_scratch(td_kernels *k, size_t bytes, void **out);
/* An outgrown buffer that queued work may still read: kept (and counted)
 * until the back-end is destroyed, never cudaFree'd during training —
 * cudaFree waits for the whole device, and a device-wide wait in the middle
 * of a step deadlocks where a pipeline send on its own stream waits for a
 * peer that waits for this rank (the emulated device showed it: pp 2,
 * ZeRO-2, one sequence per micro-batch, the scratch growing in a backward). */
td_status td_cuda_retire(td_cuda_state *s, void *p);

/* ---- launch sizes ------------------------------------------------------------ */
/* The checks of a row-wise op (one block per row of N rows of C): N >= 0,
 * C > 0 (TD_ERR_USAGE) and N within gridDim.x (TD_ERR_UNSUPPORTED); `op`
 * names it in the message. */
td_status td_cuda_rows_args(const char *op, int64_t N, int64_t C);
#define TD_CUDA_THREADS 256      /* threads per block of the element-wise kernels */
#define TD_CUDA_MAX_GRID 2147483647LL /* gridDim.x limit */
/* Blocks for n elements at `threads` per block, each thread taking one
 * element; fails (instead of launching a short grid) past gridDim.x's limit. */
td_status td_cuda_blocks(int64_t n, int threads, const char *what, unsigned *out);

/* ---- storage <-> float32 in registers ------------------------------------------- */
__device__ __forceinline__ float td_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float td_ld(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void td_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void td_st(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/* ---- positions (td_pos, td_kernels.h) in kernels ------------------------------- */
/* pos, or for NULL the identity of T rows ({Tk = T, half = T, p0 = 0}), as a
 * value a kernel takes by copy. */
static inline td_pos td_cuda_pos(const td_pos *pos, int64_t T) {
  return pos ? *pos : td_pos{T, T, 0, T, NULL};
}
/* td_pos_at on the device, for a td_pos from td_cuda_pos. */
__device__ __forceinline__ int64_t td_pos_at_dev(const td_pos &p, int64_t t) {
  return t < p.half ? p.p0 + t : p.p1 + (t - p.half);
}
/* td_pos_tok on the device: row n = b·T + t's position less its document's start. */
__device__ __forceinline__ int64_t td_pos_tok_dev(const td_pos &p, int64_t T, int64_t n) {
  return td_pos_at_dev(p, n % T) - (p.doc ? (int64_t)p.doc[n] : 0);
}

/* exp(x) with x clamped to [−87, 88] (NaN stays NaN), as the CPU's
 * td_cpu_expf (cpu_simd.h) clamps it: finite for every x, so e·q-style
 * products never meet inf·0. */
__device__ __forceinline__ float td_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  return expf(x);
}

/* ---- reductions: the one warp/block helper (blockDim.x a multiple of 32,
 * at most 1024). Every thread of the block must call it; every thread gets
 * the result. The order of the sums is fixed by the thread layout. */
__device__ __forceinline__ float td_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float td_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double td_warp_sum_f64(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/* op 0: sum, 1: max. */
template <int OP>
__device__ __forceinline__ float td_block_reduce(float v) {
  __shared__ float part[32];
  __shared__ float result;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = OP == 0 ? td_warp_sum(v) : td_warp_max(v);
  __syncthreads(); /* part[] may still be read by a previous call */
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < nw ? part[lane] : (OP == 0 ? 0.0f : -INFINITY);
    w = OP == 0 ? td_warp_sum(w) : td_warp_max(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}
__device__ __forceinline__ float td_block_sum(float v) { return td_block_reduce<0>(v); }
__device__ __forceinline__ float td_block_max(float v) { return td_block_reduce<1>(v); }

/* nccl.cu: the device collectives' entries of the ops table (dcomm_id,
 * dcomm_init), left NULL in a build without NCCL. */
void td_cuda_dcomm_fill(td_kernels *k);

/* ---- the ops (signatures of td_kernels.h), one file each ------------------------ */
extern "C" {
td_status td_cuda_cast(td_kernels *k, void *dst, td_dtype dt, const void *src, td_dtype st,
                       int64_t n);
td_status td_cuda_copy2d(td_kernels *k, float *dst, int64_t ldd, const float *src, int64_t lds,
                         int64_t rows, int64_t cols);
td_status td_cuda_gemm(td_kernels *k, int transA, int transB, int64_t M, int64_t N,
                       int64_t K, const void *A, td_dtype at, const void *B, td_dtype bt,
                       float beta, void *C, td_dtype ct);
/* Strided batched C_i = alpha·op(A_i)·op(B_i) + beta·C_i, float32, row-major,
 * i < batch; lda/ldb/ldc are row strides in elements, sA/sB/sC batch strides.
 * For attention's products (matmul.cu). */
td_status td_cuda_gemm_batched_f32(td_kernels *k, int transA, int transB, int64_t M,
                                   int64_t N, int64_t K, float alpha, const float *A,
                                   int64_t lda, int64_t sA, const float *B, int64_t ldb,
                                   int64_t sB, float beta, float *C, int64_t ldc, int64_t sC,
                                   int64_t batch);
void td_cuda_plans_clear(td_cuda_state *s);
td_status td_cuda_bias_fwd(td_kernels *k, float *out, const void *bias, td_dtype pt,
                           int64_t M, int64_t N);
td_status td_cuda_bias_bwd(td_kernels *k, float *dbias, const float *dout, int64_t M,
                           int64_t N);
td_status td_cuda_embed_fwd(td_kernels *k, float *out, const int32_t *tokens,
                            const void *wte, int64_t v0, int64_t Vs, const void *wpe,
                            td_dtype pt, int64_t B, int64_t T, int64_t C, const td_pos *pos);
td_status td_cuda_embed_bwd(td_kernels *k, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int64_t v0, int64_t Vs, int64_t B,
                            int64_t T, int64_t C, const td_pos *pos);
td_status td_cuda_layernorm_fwd(td_kernels *k, void *out, td_dtype ot, float *mean,
                                float *rstd, const float *x, const void *w, const void *b,
                                td_dtype pt, int64_t N, int64_t C);
td_status td_cuda_layernorm_bwd(td_kernels *k, float *dx, float *dw, float *db,
                                const float *dout, const float *x, const void *w,
                                td_dtype pt, const float *mean, const float *rstd, int64_t N,
                                int64_t C);
td_status td_cuda_attention_fwd(td_kernels *k, float *out, float *att, const float *qkv,
                                int64_t B, int64_t T, int64_t NH, int64_t HS);
td_status td_cuda_attention_bwd(td_kernels *k, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *att,
                                int64_t B, int64_t T, int64_t NH, int64_t HS);
td_status td_cuda_gqa_fwd(td_kernels *k, float *out, float *att, const float *q,
                          const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                          int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                          const td_pos *pos);
td_status td_cuda_gqa_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *scratch,
                          const float *dout, const float *q, const float *kk, const float *v,
                          const float *att, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KV, int64_t HS, const td_pos *pos);
/* flash.cu */
td_status td_cuda_flash_fwd(td_kernels *k, float *out, float *lse, const float *q,
                            const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                            int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                            const td_pos *pos, const int32_t *doc, td_dtype mt);
td_status td_cuda_flash_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                            const float *dout, const float *out, const float *lse,
                            const float *q, const float *kk, const float *v, int64_t ldq,
                            int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                            int64_t HS, const td_pos *pos, const int32_t *doc, td_dtype mt);
td_status td_cuda_rmsnorm_fwd(td_kernels *k, void *out, td_dtype ot, float *rstd,
                              const float *x, const void *w, td_dtype pt, float eps,
                              int64_t N, int64_t C);
td_status td_cuda_rmsnorm_bwd(td_kernels *k, float *dx, float *dw, const float *dout,
                              const float *x, const void *w, td_dtype pt, const float *rstd,
                              int64_t N, int64_t C);
td_status td_cuda_rope(td_kernels *k, float *x, int64_t B, int64_t T, int64_t H, int64_t HS,
                       int64_t ld, float theta, int inverse, const td_pos *pos);
td_status td_cuda_swiglu_fwd(td_kernels *k, void *out, td_dtype ot, const float *g,
                             const float *u, int64_t n);
td_status td_cuda_swiglu_bwd(td_kernels *k, float *dg, float *du, const float *dout,
                             const float *g, const float *u, int64_t n);
td_status td_cuda_moe_route(td_kernels *k, float *probs, float *lse, int32_t *idx, float *w,
                            float *psum, const float *logits, int64_t N, int64_t E, int64_t K);
td_status td_cuda_moe_plan(td_kernels *k, int32_t *pos, int32_t *perm, int32_t *off,
                           int32_t *count, const int32_t *idx, int64_t N, int64_t E, int64_t K,
                           int64_t cap);
td_status td_cuda_moe_gather(td_kernels *k, void *xe, const void *x, td_dtype t,
                             const int32_t *perm, int64_t rows, int64_t C, int64_t K);
td_status td_cuda_moe_combine(td_kernels *k, float *out, const float *ye, const float *w,
                              const int32_t *pos, int64_t N, int64_t K, int64_t C);
td_status td_cuda_moe_combine_bwd(td_kernels *k, void *dye, td_dtype dt, float *dw,
                                  const float *dout, const float *ye, const float *w,
                                  const int32_t *pos, int64_t N, int64_t K, int64_t C);
td_status td_cuda_moe_scatter(td_kernels *k, float *dx, const float *dxe, const int32_t *pos,
                              int64_t N, int64_t K, int64_t C);
td_status td_cuda_moe_route_bwd(td_kernels *k, float *dlogits, const float *dw,
                                const float *probs, const float *lse, const int32_t *idx,
                                const float *w, const float *gP, float zc, int64_t N, int64_t E,
                                int64_t K);
td_status td_cuda_gelu_fwd(td_kernels *k, void *out, td_dtype ot, const float *x, int64_t n);
td_status td_cuda_gelu_bwd(td_kernels *k, float *dx, const float *x, const float *dout,
                           int64_t n);
td_status td_cuda_add(td_kernels *k, float *out, const float *a, const float *b, int64_t n);
td_status td_cuda_scale(td_kernels *k, float *x, float s, int64_t n);
td_status td_cuda_sumsq(td_kernels *k, const float *x, int64_t n, double *out);
td_status td_cuda_xent_rowmax(td_kernels *k, float *rowmax, const float *logits, int64_t N,
                              int64_t Vs, int64_t Vvalid);
td_status td_cuda_xent_sumexp(td_kernels *k, float *sumexp, float *tlogit,
                              const float *logits, const float *rowmax,
                              const int32_t *targets, int64_t v0, int64_t N, int64_t Vs,
                              int64_t Vvalid);
td_status td_cuda_xent_bwd(td_kernels *k, float *dlogits, const float *logits,
                           const float *rowmax, const float *sumexp, const int32_t *targets,
                           int64_t v0, float scale, int64_t N, int64_t Vs, int64_t Vvalid);
td_status td_cuda_adamw(td_kernels *k, float *p, const float *g, float *m, float *v,
                        int64_t n, float gscale, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t);
}

#endif
