/* attention.cu — causal grouped-query attention (LLaMA) and, as its special
 * case, GPT-2's multi-head attention on a packed qkv, forward and backward,
 * with the math of kernels/cpu/attention.c.
 *
 * The products are cuBLASLt strided-batched float32 matmuls (matmul.cu) on
 * the per-head slices of q, kk, v in place, as on the CPU: for each batch row
 * b and each position g of a query head inside its group (query head
 * h = kv·G + g, G = NH/KV), one product batched over the KV groups, whose
 * slices are a constant stride apart. dK and dV sum over the G query heads of
 * a group: the first product overwrites (beta 0), the others accumulate
 * (beta 1), in g order — a fixed order, so results are deterministic. The
 * full T×Tk scores are stored (the ops table saves att for backward); the
 * masked part is computed and then overwritten by the softmax kernels, which
 * also zero it. With positions (td_pos, context parallelism) the T query
 * rows sit at td_pos_at(pos, t) among the Tk keys: the products are T×Tk
 * and only the softmax kernels read the positions, so keys no query sees
 * get exactly 0 in dK, dV from the zero probabilities. A fused kernel that
 * never stores T×Tk (flash attention) is the next step for speed; this one
 * is the correct baseline. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define TD_ATT_TINY 1.17549435e-38f /* FLT_MIN: the CPU's flush of tiny probabilities */
#define TD_ATT_THREADS 256          /* threads per softmax row */

/* Causal softmax in place, one block per row r of the (B·NH·T, Tk) scores
 * att (already scaled by 1/√HS); the row's query is at position
 * p = td_pos_at(pos, r mod T). row_j = exp(s_j − max) / Σ for j ≤ p (exp of
 * arguments below −87 is 0, as on the CPU), 0 for j > p; probabilities below
 * FLT_MIN are flushed to 0. TD_ATT_THREADS threads stride over the row; max
 * and sum through td_block_max / td_block_sum. */
__global__ void softmax_causal_kernel(float *__restrict__ att, int64_t T, td_pos pos) {
  int64_t r = blockIdx.x, Tk = pos.Tk;
  int64_t t = td_pos_at_dev(pos, r % T);
  float *row = att + r * Tk;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = td_block_max(mx);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    float x = row[j] - mx;
    float e = x < -87.0f ? 0.0f : expf(x);
    row[j] = e;
    s += e;
  }
  s = td_block_sum(s);
  float inv = 1.0f / s;
  for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
    float a = j <= t ? row[j] * inv : 0.0f;
    row[j] = a < TD_ATT_TINY ? 0.0f : a;
  }
}

/* Softmax backward in place on d (the (B·NH·T, Tk) gradients wrt the
 * probabilities), one block per row r, its query at t = td_pos_at(pos,
 * r mod T): with a the probabilities, d_j ← scale·a_j·(d_j − Σ_{i≤t} a_i·d_i)
 * for j ≤ t (|·| below FLT_MIN flushed to 0), 0 for j > t. Threads stride
 * over the row. */
__global__ void softmax_causal_bwd_kernel(float *__restrict__ d,
                                          const float *__restrict__ att, int64_t T,
                                          td_pos pos, float scale) {
  int64_t r = blockIdx.x, Tk = pos.Tk;
  int64_t t = td_pos_at_dev(pos, r % T);
  float *drow = d + r * Tk;
  const float *arow = att + r * Tk;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) dot += arow[j] * drow[j];
  dot = td_block_sum(dot);
  for (int64_t j = threadIdx.x; j < Tk; j += blockDim.x) {
    float g = j <= t ? scale * arow[j] * (drow[j] - dot) : 0.0f;
    drow[j] = fabsf(g) < TD_ATT_TINY ? 0.0f : g;
  }
}

/* The shared checks (kernels/args.c) and the grid limit of the softmax
 * kernels' one block per score row; `op` names the caller. */
static td_status gqa_check(const char *op, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                           int64_t NH, int64_t KV, int64_t HS, const td_pos *pos) {
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_CHECK(td_kernels_pos_args(op, pos, T));
  TD_REQUIRE(B * NH * T <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED,
             "attention: B·NH·T = %lld score rows exceed the grid limit %lld",
             (long long)(B * NH * T), (long long)TD_CUDA_MAX_GRID);
  return TD_OK;
}

/* One strided-batched float32 product over the KV groups of batch row b:
 * the short form of td_cuda_gemm_batched_f32 used below. */
#define GQA_MM(tA, tB, M, N, K, alpha, A, lda, sA, Bp, ldb, sB, beta, C, ldc, sC) \
  TD_CHECK(td_cuda_gemm_batched_f32(k, tA, tB, M, N, K, alpha, A, lda, sA, Bp, ldb, sB,  \
                                    beta, C, ldc, sC, KV))

/* q (B, T, NH·HS) rows of stride ldq at the positions td_pos_at(pos, t);
 * kk, v (B, Tk, KV·HS) rows of stride ldkv; att (B, NH, T, Tk); out
 * (B, T, NH·HS) dense. Per head h = kv·G + g:
 * att[b,h] = softmax_causal(Q[b,h]·K[b,kv]ᵀ/√HS), out[b,:,h] = att[b,h]·V[b,kv]. */
td_status td_cuda_gqa_fwd(td_kernels *k, float *out, float *att, const float *q,
                          const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                          int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                          const td_pos *pos) {
  TD_CHECK(gqa_check("gqa_fwd", ldq, ldkv, B, T, NH, KV, HS, pos));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  int64_t C = NH * HS, G = NH / KV, Tk = p.Tk, TT = T * Tk;
  float scale = 1.0f / sqrtf((float)HS);
  for (int64_t b = 0; b < B; b++) {
    const float *qb = q + b * T * ldq, *kb = kk + b * Tk * ldkv;
    float *ab = att + b * NH * TT;
    for (int64_t g = 0; g < G; g++) /* att = Q·Kᵀ/√HS */
      GQA_MM(0, 1, T, Tk, HS, scale, qb + g * HS, ldq, G * HS, kb, ldkv, HS, 0.0f,
             ab + g * TT, Tk, G * TT);
  }
  softmax_causal_kernel<<<(unsigned)(B * NH * T), TD_ATT_THREADS, 0, td_cuda_st(k)->stream>>>(
      att, T, p);
  TD_CUDA_LAUNCHED("softmax_causal_kernel");
  for (int64_t b = 0; b < B; b++) {
    const float *vb = v + b * Tk * ldkv, *ab = att + b * NH * TT;
    float *ob = out + b * T * C;
    for (int64_t g = 0; g < G; g++) /* out = att·V */
      GQA_MM(0, 0, T, HS, Tk, 1.0f, ab + g * TT, Tk, G * TT, vb, ldkv, HS, 0.0f, ob + g * HS,
             C, G * HS);
  }
  return TD_OK;
}

/* qkv (B, T, 3C), C = NH·HS; att (B, NH, T, T); out (B, T, C): the GQA case
 * q = qkv, kk = qkv + C, v = qkv + 2C, row stride 3C, KV = NH. */
td_status td_cuda_attention_fwd(td_kernels *k, float *out, float *att, const float *qkv,
                                int64_t B, int64_t T, int64_t NH, int64_t HS) {
  int64_t C = NH * HS;
  if (NH == 0) return TD_OK;
  TD_CHECK(td_cuda_gqa_fwd(k, out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH,
                           HS, NULL));
  return TD_OK;
}

/* dq, dk, dv (=, the layouts of q, kk, v: dk, dv (B, Tk, ·)) given dout
 * (B, T, NH·HS); att (B, NH, T, Tk) from the forward; scratch (B, NH, T, Tk)
 * holds datt, then the pre-softmax gradient dpre. Per head h = kv·G + g:
 * dV[kv] = Σ_g attᵀ·dout, datt = dout·V[kv]ᵀ, dpre = softmax'(datt)/√HS,
 * dQ[h] = dpre·K[kv], dK[kv] = Σ_g dpreᵀ·Q[h]. Columns past the heads are
 * not touched. */
td_status td_cuda_gqa_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *scratch,
                          const float *dout, const float *q, const float *kk, const float *v,
                          const float *att, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KV, int64_t HS, const td_pos *pos) {
  TD_CHECK(gqa_check("gqa_bwd", ldq, ldkv, B, T, NH, KV, HS, pos));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  int64_t C = NH * HS, G = NH / KV, Tk = p.Tk, TT = T * Tk;
  float scale = 1.0f / sqrtf((float)HS);
  for (int64_t b = 0; b < B; b++) {
    const float *ab = att + b * NH * TT, *db = dout + b * T * C, *vb = v + b * Tk * ldkv;
    float *sb = scratch + b * NH * TT, *dvb = dv + b * Tk * ldkv;
    for (int64_t g = 0; g < G; g++) /* dV = Σ_g attᵀ·dout */
      GQA_MM(1, 0, Tk, HS, T, 1.0f, ab + g * TT, Tk, G * TT, db + g * HS, C, G * HS,
             g > 0 ? 1.0f : 0.0f, dvb, ldkv, HS);
    for (int64_t g = 0; g < G; g++) /* datt = dout·Vᵀ */
      GQA_MM(0, 1, T, Tk, HS, 1.0f, db + g * HS, C, G * HS, vb, ldkv, HS, 0.0f, sb + g * TT,
             Tk, G * TT);
  }
  softmax_causal_bwd_kernel<<<(unsigned)(B * NH * T), TD_ATT_THREADS, 0,
                              td_cuda_st(k)->stream>>>(scratch, att, T, p, scale);
  TD_CUDA_LAUNCHED("softmax_causal_bwd_kernel");
  for (int64_t b = 0; b < B; b++) {
    const float *sb = scratch + b * NH * TT, *qb = q + b * T * ldq, *kb = kk + b * Tk * ldkv;
    float *dqb = dq + b * T * ldq, *dkb = dk + b * Tk * ldkv;
    for (int64_t g = 0; g < G; g++) /* dQ = dpre·K */
      GQA_MM(0, 0, T, HS, Tk, 1.0f, sb + g * TT, Tk, G * TT, kb, ldkv, HS, 0.0f, dqb + g * HS,
             ldq, G * HS);
    for (int64_t g = 0; g < G; g++) /* dK = Σ_g dpreᵀ·Q */
      GQA_MM(1, 0, Tk, HS, T, 1.0f, sb + g * TT, Tk, G * TT, qb + g * HS, ldq, G * HS,
             g > 0 ? 1.0f : 0.0f, dkb, ldkv, HS);
  }
  return TD_OK;
}

/* dqkv (B, T, 3C) = ∂/∂qkv given dout (B, T, C): the GQA case. */
td_status td_cuda_attention_bwd(td_kernels *k, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *att,
                                int64_t B, int64_t T, int64_t NH, int64_t HS) {
  int64_t C = NH * HS;
  if (NH == 0) return TD_OK;
  TD_CHECK(td_cuda_gqa_bwd(k, dqkv, dqkv + C, dqkv + 2 * C, scratch, dout, qkv, qkv + C,
                           qkv + 2 * C, att, 3 * C, 3 * C, B, T, NH, NH, HS, NULL));
  return TD_OK;
}
