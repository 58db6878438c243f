/* flash.cu — fused causal grouped-query attention (FlashAttention-2, Dao
 * 2023) on the GPU, forward and backward, with the math of
 * kernels/cpu/flash.c: nothing of size T·Tk is written; the forward keeps
 * one log-sum-exp per query row, the backward makes every probability again
 * from it.
 *
 * This is the float32 CUDA-core version, the correct baseline of the fused
 * path: one thread per query row (forward, dQ) or per key row (dK, dV), the
 * other side's rows staged through shared memory in tiles, the products as
 * per-thread dot products. Tensor-core tiles (WMMA) are the next step.
 *
 * - flash_fwd_kernel: a block of FA_ROWS query rows of one (sequence, head);
 *   key/value tiles of FA_KEYS rows in shared memory, visited in order over
 *   the keys the block's rows can see; each thread keeps its row's running
 *   maximum, sum and output (the online softmax, rescaled when the maximum
 *   grows).
 * - flash_delta_kernel: D = rowsum(dO ∘ O); without O (kept in bf16 by
 *   the model), flash_dq_kernel<true>: D = Σ_j P_j·dP_j per query row.
 * - flash_dq_kernel: per query row, dQ = Σ_j dS_j·K_j over its keys in order.
 * - flash_dkv_kernel: a block of FA_ROWS keys of one (sequence, key/value
 *   head); the query heads of the group and their query tiles in order in
 *   shared memory; per key row dK = Σ dS·Q, dV = Σ P·dO.
 * Every sum is made by one thread in a fixed order: deterministic, no
 * atomics. Masks as the CPU's: row t (position p) sees keys lo ≤ j ≤ p, lo
 * its document's start (doc) or 0; the positions and document starts
 * increase with t, so a block's rows see one range of keys, and tiles
 * outside it are skipped. Head sizes up to FA_MAX_HS. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define FA_ROWS 64     /* rows (threads) per block */
#define FA_KEYS 32     /* rows per shared-memory tile */
#define FA_MAX_HS 128  /* head size limit (registers per thread) */
#define FA_TINY 1.17549435e-38f /* FLT_MIN: the CPU's flush of tiny gradients */

/* First key row t sees (its document's start, or 0). */
__device__ __forceinline__ int64_t fa_lo(const int32_t *doc, int64_t b, int64_t T, int64_t t) {
  return doc ? (int64_t)doc[b * T + t] : 0;
}

/* exp(x) for a probability: 0 below −87 (as the CPU's kernels), −inf → 0 */
__device__ __forceinline__ float fa_exp(float x) { return x < -87.0f ? 0.0f : expf(x); }

/* The block stages key rows [j0, j0 + FA_KEYS) of head kv of sequence b,
 * keys and values, into shared memory (0 past Tk); the caller then
 * synchronises. */
__device__ __forceinline__ void fa_stage_kv(float (*ks)[FA_MAX_HS], float (*vs)[FA_MAX_HS],
                                            const float *__restrict__ kk,
                                            const float *__restrict__ v, int64_t ldkv,
                                            int64_t b, int64_t kv, int64_t Tk, int64_t HS,
                                            int64_t j0) {
  for (int64_t i = threadIdx.x; i < FA_KEYS * HS; i += blockDim.x) {
    int64_t c = i / HS, d = i % HS, j = j0 + c;
    ks[c][d] = j < Tk ? kk[(b * Tk + j) * ldkv + kv * HS + d] : 0.0f;
    vs[c][d] = j < Tk ? v[(b * Tk + j) * ldkv + kv * HS + d] : 0.0f;
  }
}

__global__ void flash_fwd_kernel(float *__restrict__ out, float *__restrict__ lse,
                                 const float *__restrict__ q, const float *__restrict__ kk,
                                 const float *__restrict__ v, int64_t ldq, int64_t ldkv,
                                 int64_t T, int64_t NH, int64_t G, int64_t HS, td_pos pos,
                                 const int32_t *__restrict__ doc, float scale) {
  __shared__ float ks[FA_KEYS][FA_MAX_HS];
  __shared__ float vs[FA_KEYS][FA_MAX_HS];
  int64_t b = blockIdx.z, h = blockIdx.y, kv = h / G, Tk = pos.Tk;
  int64_t t0 = (int64_t)blockIdx.x * FA_ROWS, t = t0 + threadIdx.x;
  int64_t tl = t0 + FA_ROWS - 1 < T ? t0 + FA_ROWS - 1 : T - 1; /* the block's last row */
  bool live = t < T;
  int64_t p = live ? td_pos_at_dev(pos, t) : -1, lo = live ? fa_lo(doc, b, T, t) : 0;
  int64_t klo = fa_lo(doc, b, T, t0), khi = td_pos_at_dev(pos, tl);
  float qr[FA_MAX_HS], o[FA_MAX_HS];
  for (int64_t d = 0; d < HS; d++) {
    qr[d] = live ? q[(b * T + t) * ldq + h * HS + d] : 0.0f;
    o[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j0 = klo / FA_KEYS * FA_KEYS; j0 <= khi; j0 += FA_KEYS) {
    fa_stage_kv(ks, vs, kk, v, ldkv, b, kv, Tk, HS, j0);
    __syncthreads();
    for (int c = 0; live && c < FA_KEYS; c++) {
      int64_t j = j0 + c;
      if (j < lo || j > p) continue;
      float s = 0.0f;
      for (int64_t d = 0; d < HS; d++) s += qr[d] * ks[c][d];
      s *= scale;
      if (s > m) { /* a new maximum: rescale what was summed */
        float alpha = m == -INFINITY ? 0.0f : fa_exp(m - s);
        l *= alpha;
        for (int64_t d = 0; d < HS; d++) o[d] *= alpha;
        m = s;
      }
      float e = fa_exp(s - m);
      l += e;
      for (int64_t d = 0; d < HS; d++) o[d] += e * vs[c][d];
    }
    __syncthreads();
  }
  if (!live) return;
  float inv = 1.0f / l;
  for (int64_t d = 0; d < HS; d++) out[(b * T + t) * NH * HS + h * HS + d] = o[d] * inv;
  lse[(b * NH + h) * T + t] = m + logf(l);
}

/* D (B, NH, T) = rowsum(dO ∘ O) per (row, head). */
__global__ void flash_delta_kernel(float *__restrict__ D, const float *__restrict__ dout,
                                   const float *__restrict__ o, int64_t rows, int64_t T,
                                   int64_t NH, int64_t HS) {
  int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  int64_t b = r / (NH * T), h = r / T % NH, t = r % T, at = (b * T + t) * NH * HS + h * HS;
  float s = 0.0f;
  for (int64_t d = 0; d < HS; d++) s += dout[at + d] * o[at + d];
  D[r] = s;
}

/* DELTA false: dQ per query row. DELTA true (no O given): D = Σ_j P_j·dP_j
 * per query row over its keys in order, into D. */
template <bool DELTA>
__global__ void flash_dq_kernel(float *__restrict__ dq, const float *__restrict__ dout,
                                const float *__restrict__ lse, float *__restrict__ D,
                                const float *__restrict__ q, const float *__restrict__ kk,
                                const float *__restrict__ v, int64_t ldq, int64_t ldkv,
                                int64_t T, int64_t NH, int64_t G, int64_t HS, td_pos pos,
                                const int32_t *__restrict__ doc, float scale) {
  __shared__ float ks[FA_KEYS][FA_MAX_HS];
  __shared__ float vs[FA_KEYS][FA_MAX_HS];
  int64_t b = blockIdx.z, h = blockIdx.y, kv = h / G, Tk = pos.Tk;
  int64_t t0 = (int64_t)blockIdx.x * FA_ROWS, t = t0 + threadIdx.x;
  int64_t tl = t0 + FA_ROWS - 1 < T ? t0 + FA_ROWS - 1 : T - 1;
  bool live = t < T;
  int64_t p = live ? td_pos_at_dev(pos, t) : -1, lo = live ? fa_lo(doc, b, T, t) : 0;
  int64_t klo = fa_lo(doc, b, T, t0), khi = td_pos_at_dev(pos, tl);
  float qr[FA_MAX_HS], g[FA_MAX_HS], acc[FA_MAX_HS];
  int64_t C = NH * HS;
  for (int64_t d = 0; d < HS; d++) {
    qr[d] = live ? q[(b * T + t) * ldq + h * HS + d] : 0.0f;
    g[d] = live ? dout[(b * T + t) * C + h * HS + d] : 0.0f;
    acc[d] = 0.0f;
  }
  float L = live ? lse[(b * NH + h) * T + t] : 0.0f;
  float Dt = live && !DELTA ? D[(b * NH + h) * T + t] : 0.0f;
  for (int64_t j0 = klo / FA_KEYS * FA_KEYS; j0 <= khi; j0 += FA_KEYS) {
    fa_stage_kv(ks, vs, kk, v, ldkv, b, kv, Tk, HS, j0);
    __syncthreads();
    for (int c = 0; live && c < FA_KEYS; c++) {
      int64_t j = j0 + c;
      if (j < lo || j > p) continue;
      float s = 0.0f, dp = 0.0f;
      for (int64_t d = 0; d < HS; d++) s += qr[d] * ks[c][d], dp += g[d] * vs[c][d];
      float pr = fa_exp(scale * s - L), ds = scale * pr * (dp - Dt);
      if (DELTA)
        acc[0] += pr * dp;
      else if (fabsf(ds) >= FA_TINY)
        for (int64_t d = 0; d < HS; d++) acc[d] += ds * ks[c][d];
    }
    __syncthreads();
  }
  if (!live) return;
  if (DELTA)
    D[(b * NH + h) * T + t] = acc[0];
  else
    for (int64_t d = 0; d < HS; d++) dq[(b * T + t) * ldq + h * HS + d] = acc[d];
}

__global__ void flash_dkv_kernel(float *__restrict__ dk, float *__restrict__ dv,
                                 const float *__restrict__ dout, const float *__restrict__ lse,
                                 const float *__restrict__ D, const float *__restrict__ q,
                                 const float *__restrict__ kk, const float *__restrict__ v,
                                 int64_t ldq, int64_t ldkv, int64_t T, int64_t NH, int64_t G,
                                 int64_t HS, td_pos pos, const int32_t *__restrict__ doc,
                                 float scale) {
  __shared__ float qs[FA_KEYS][FA_MAX_HS];
  __shared__ float gs[FA_KEYS][FA_MAX_HS];
  __shared__ float ls[FA_KEYS];
  __shared__ float dsh[FA_KEYS];
  __shared__ int64_t los[FA_KEYS];
  __shared__ int64_t ps[FA_KEYS];
  int64_t b = blockIdx.z, kv = blockIdx.y, Tk = pos.Tk, C = NH * HS;
  int64_t j0 = (int64_t)blockIdx.x * FA_ROWS, j = j0 + threadIdx.x;
  int64_t jl = j0 + FA_ROWS - 1 < Tk ? j0 + FA_ROWS - 1 : Tk - 1; /* the block's last key */
  bool live = j < Tk;
  float kr[FA_MAX_HS], vr[FA_MAX_HS], dK[FA_MAX_HS], dV[FA_MAX_HS];
  for (int64_t d = 0; d < HS; d++) {
    kr[d] = live ? kk[(b * Tk + j) * ldkv + kv * HS + d] : 0.0f;
    vr[d] = live ? v[(b * Tk + j) * ldkv + kv * HS + d] : 0.0f;
    dK[d] = dV[d] = 0.0f;
  }
  for (int64_t gi = 0; gi < G; gi++) {
    int64_t h = kv * G + gi;
    for (int64_t u0 = 0; u0 < T; u0 += FA_KEYS) {
      int64_t ul = u0 + FA_KEYS - 1 < T ? u0 + FA_KEYS - 1 : T - 1;
      /* rows u0..ul see keys [lo(u0), pos(ul)] together: skip tiles that miss the block's */
      if (td_pos_at_dev(pos, ul) < j0 || fa_lo(doc, b, T, u0) > jl) continue;
      for (int64_t i = threadIdx.x; i < FA_KEYS * HS; i += blockDim.x) {
        int64_t c = i / HS, d = i % HS, u = u0 + c;
        qs[c][d] = u < T ? q[(b * T + u) * ldq + h * HS + d] : 0.0f;
        gs[c][d] = u < T ? dout[(b * T + u) * C + h * HS + d] : 0.0f;
      }
      for (int64_t c = threadIdx.x; c < FA_KEYS; c += blockDim.x) {
        int64_t u = u0 + c;
        ls[c] = u < T ? lse[(b * NH + h) * T + u] : 0.0f;
        dsh[c] = u < T ? D[(b * NH + h) * T + u] : 0.0f;
        los[c] = u < T ? fa_lo(doc, b, T, u) : 1;
        ps[c] = u < T ? td_pos_at_dev(pos, u) : -1; /* past T: sees nothing */
      }
      __syncthreads();
      for (int c = 0; live && c < FA_KEYS; c++) {
        if (j < los[c] || j > ps[c]) continue;
        float s = 0.0f, dp = 0.0f;
        for (int64_t d = 0; d < HS; d++) s += qs[c][d] * kr[d], dp += gs[c][d] * vr[d];
        float pr = fa_exp(scale * s - ls[c]);
        if (pr == 0.0f) continue;
        float ds = scale * pr * (dp - dsh[c]);
        for (int64_t d = 0; d < HS; d++) dV[d] += pr * gs[c][d];
        if (fabsf(ds) < FA_TINY) continue;
        for (int64_t d = 0; d < HS; d++) dK[d] += ds * qs[c][d];
      }
      __syncthreads();
    }
  }
  if (!live) return;
  for (int64_t d = 0; d < HS; d++) {
    dk[(b * Tk + j) * ldkv + kv * HS + d] = dK[d];
    dv[(b * Tk + j) * ldkv + kv * HS + d] = dV[d];
  }
}

/* The shared checks (kernels/args.c) and this kernel's limits. Document
 * starts are not checked here (they live on the device): the caller's
 * contract, checked on the CPU back-end. */
static td_status fa_check(const char *op, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KV, int64_t HS, const td_pos *pos) {
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_CHECK(td_kernels_pos_args(op, pos, T));
  TD_REQUIRE(HS <= FA_MAX_HS, TD_ERR_UNSUPPORTED,
             "%s: head size %lld is over the CUDA fused kernels' limit %d (use "
             "model.attention: materialized)", op, (long long)HS, FA_MAX_HS);
  TD_REQUIRE(NH <= 65535 && B <= 65535, TD_ERR_UNSUPPORTED,
             "%s: %lld heads × %lld sequences exceed the grid's y/z limit 65535", op,
             (long long)NH, (long long)B);
  return TD_OK;
}

td_status td_cuda_flash_fwd(td_kernels *k, float *out, float *lse, const float *q,
                            const float *kk, const float *v, int64_t ldq, int64_t ldkv,
                            int64_t B, int64_t T, int64_t NH, int64_t KV, int64_t HS,
                            const td_pos *pos, const int32_t *doc) {
  TD_CHECK(fa_check("flash_fwd", ldq, ldkv, B, T, NH, KV, HS, pos));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  dim3 grid((unsigned)((T + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
  flash_fwd_kernel<<<grid, FA_ROWS, 0, td_cuda_st(k)->stream>>>(
      out, lse, q, kk, v, ldq, ldkv, T, NH, NH / KV, HS, p, doc, 1.0f / sqrtf((float)HS));
  TD_CUDA_LAUNCHED("flash_fwd_kernel");
  return TD_OK;
}

td_status td_cuda_flash_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                            const float *dout, const float *out, const float *lse,
                            const float *q, const float *kk, const float *v, int64_t ldq,
                            int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                            int64_t HS, const td_pos *pos, const int32_t *doc) {
  TD_CHECK(fa_check("flash_bwd", ldq, ldkv, B, T, NH, KV, HS, pos));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  cudaStream_t st = td_cuda_st(k)->stream;
  int64_t rows = B * NH * T, G = NH / KV;
  float scale = 1.0f / sqrtf((float)HS);
  unsigned nb = 0;
  dim3 gq((unsigned)((T + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
  if (out) {
    TD_CHECK(td_cuda_blocks(rows, TD_CUDA_THREADS, "flash_bwd", &nb));
    flash_delta_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(delta, dout, out, rows, T, NH, HS);
    TD_CUDA_LAUNCHED("flash_delta_kernel");
  } else {
    flash_dq_kernel<true><<<gq, FA_ROWS, 0, st>>>(dq, dout, lse, delta, q, kk, v, ldq, ldkv, T,
                                                  NH, G, HS, p, doc, scale);
    TD_CUDA_LAUNCHED("flash_dq_kernel<delta>");
  }
  flash_dq_kernel<false><<<gq, FA_ROWS, 0, st>>>(dq, dout, lse, delta, q, kk, v, ldq, ldkv, T,
                                                 NH, G, HS, p, doc, scale);
  TD_CUDA_LAUNCHED("flash_dq_kernel");
  dim3 gk((unsigned)((p.Tk + FA_ROWS - 1) / FA_ROWS), (unsigned)KV, (unsigned)B);
  flash_dkv_kernel<<<gk, FA_ROWS, 0, st>>>(dk, dv, dout, lse, delta, q, kk, v, ldq, ldkv, T, NH,
                                           G, HS, p, doc, scale);
  TD_CUDA_LAUNCHED("flash_dkv_kernel");
  return TD_OK;
}
