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

/* ---- tensor cores (WMMA): bf16 products, float32 accumulation ------------------------
 *
 * The same three passes with the products on tensor cores through the WMMA
 * API (nvcuda::wmma, 16×16×16 tiles of bf16 with float32 accumulators), for
 * a model computing in bf16 (flash_fwd/flash_bwd's mt = TD_DTYPE_BF16) and
 * head sizes that are multiples of 16: Q, K, V, dO, the probabilities P and
 * dS are rounded to bf16 (nearest even) as they are staged into shared
 * memory, every product sums in float32, the softmax statistics (running
 * maximum and sum, log-sum-exp, D) stay float32. Blocks of 2 warps own 32
 * rows (16 a warp), the other side goes in tiles of 32 rows; scores leave
 * the accumulators through shared memory, where the lanes 0–15 of a warp
 * each take one row's softmax (the element-to-lane mapping of a fragment is
 * unspecified, so nothing reads an accumulator element by element). The
 * forward's output accumulates in shared memory (the online softmax
 * rescales its rows); dQ, dK and dV in fragments (never rescaled). dK's dS
 * goes in as two bf16 parts (hi + lo, 16 bits of mantissa): Σ_j dS_j = 0
 * per query row is what keeps the gradient of a key bias (GPT-2's) at
 * rounding size, and one bf16 rounding of dS would break it by 2⁻⁹. Sums in
 * a fixed order, no atomics: deterministic. float32 models keep the exact
 * CUDA-core kernels above: TF32 would round Q and K to 10 bits. */
#include <mma.h>

#define TC_ROWS 32             /* rows a block owns: 2 warps of 16 */
#define TC_COLS 32             /* rows of the other side a tile holds */
#define TC_LDH (FA_MAX_HS + 8) /* leading dimension of bf16 head tiles (16-byte multiple) */
#define TC_LDS (TC_COLS + 4)   /* ... of float32 score tiles */
#define TC_LDP (TC_COLS + 8)   /* ... of bf16 probability tiles */
#define TC_LDO (FA_MAX_HS + 4) /* ... of float32 head tiles */

namespace wmma = nvcuda::wmma;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> tc_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> tc_brow;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> tc_bcol;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_acc;

/* Rows r0 … r0 + 31 of a float32 (·, ld) matrix — row r of the sequence at
 * base + r, columns c0 … c0 + HS − 1 — into a bf16 tile, rounded to nearest
 * even; 0 past `rows`. The block's threads; the caller synchronises. */
__device__ __forceinline__ void tc_stage(__nv_bfloat16 (*dst)[TC_LDH],
                                         const float *__restrict__ src, int64_t ld,
                                         int64_t base, int64_t r0, int64_t rows, int64_t c0,
                                         int64_t HS) {
  for (int64_t i = threadIdx.x; i < TC_COLS * HS; i += blockDim.x) {
    int64_t c = i / HS, d = i % HS, r = r0 + c;
    dst[c][d] = __float2bfloat16_rn(r < rows ? src[(base + r) * ld + c0 + d] : 0.0f);
  }
}

/* 16 rows × HS columns of float32 accumulators (nd fragments) out through
 * the warp's 16 rows of st, to rows r0 … of dst (·, ld) at column c0, the
 * rows below `rows` only. The warp's lanes; st is the warp's own. */
__device__ __forceinline__ void tc_store_rows(float *__restrict__ dst, int64_t ld, int64_t r0,
                                              int64_t rows, int64_t c0, int64_t HS,
                                              float (*st)[TC_LDO], tc_acc *f, int nd) {
  for (int n = 0; n < nd; n++) wmma::store_matrix_sync(&st[0][n * 16], f[n], TC_LDO,
                                                       wmma::mem_row_major);
  __syncwarp();
  int lane = threadIdx.x % 32;
  for (int64_t i = lane; i < 16 * HS; i += 32) {
    int64_t c = i / HS, d = i % HS;
    if (r0 + c < rows) dst[(r0 + c) * ld + c0 + d] = st[c][d];
  }
}

struct alignas(32) tc_fwd_smem {
  alignas(32) __nv_bfloat16 k[TC_COLS][TC_LDH];
  alignas(32) __nv_bfloat16 v[TC_COLS][TC_LDH];
  alignas(32) float s[TC_ROWS][TC_LDS];
  alignas(32) __nv_bfloat16 p[TC_ROWS][TC_LDP];
  union { /* Q staged once for the fragments, then the output accumulates here */
    alignas(32) __nv_bfloat16 q[TC_ROWS][TC_LDH];
    alignas(32) float o[TC_ROWS][TC_LDO];
  } u;
  float m[TC_ROWS], l[TC_ROWS];
};

__global__ void __launch_bounds__(64)
    flash_fwd_tc_kernel(float *__restrict__ out, float *__restrict__ lse,
                        const float *__restrict__ q, const float *__restrict__ kk,
                        const float *__restrict__ v, int64_t ldq, int64_t ldkv, int64_t T,
                        int64_t NH, int64_t G, int64_t HS, td_pos pos,
                        const int32_t *__restrict__ doc, float scale) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ tc_fwd_smem sm;
  int64_t b = blockIdx.z, h = blockIdx.y, kv = h / G, Tk = pos.Tk;
  int64_t t0 = (int64_t)blockIdx.x * TC_ROWS;
  int64_t tl = t0 + TC_ROWS - 1 < T ? t0 + TC_ROWS - 1 : T - 1;
  int64_t klo = fa_lo(doc, b, T, t0), khi = td_pos_at_dev(pos, tl);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nd = (int)(HS / 16);
  int r = warp * 16 + lane; /* lanes 0–15: the row whose softmax they keep */
  int64_t t = t0 + r;
  bool mine = lane < 16 && t < T;
  int64_t p = mine ? td_pos_at_dev(pos, t) : -1, lo = mine ? fa_lo(doc, b, T, t) : 0;
  tc_stage(sm.u.q, q, ldq, b * T, t0, T, h * HS, HS);
  __syncthreads();
  tc_a qf[FA_MAX_HS / 16];
  for (int i = 0; i < nd; i++) wmma::load_matrix_sync(qf[i], &sm.u.q[warp * 16][i * 16], TC_LDH);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < TC_ROWS * HS; i += blockDim.x) sm.u.o[i / HS][i % HS] = 0.0f;
  if (lane < 16) sm.m[r] = -INFINITY, sm.l[r] = 0.0f;
  for (int64_t j0 = klo / TC_COLS * TC_COLS; j0 <= khi; j0 += TC_COLS) {
    __syncthreads(); /* the last tile's readers are done */
    tc_stage(sm.k, kk, ldkv, b * Tk, j0, Tk, kv * HS, HS);
    tc_stage(sm.v, v, ldkv, b * Tk, j0, Tk, kv * HS, HS);
    __syncthreads();
    for (int n = 0; n < TC_COLS / 16; n++) { /* S = Q·Kᵀ, the warp's 16 rows */
      tc_acc sf;
      wmma::fill_fragment(sf, 0.0f);
      for (int i = 0; i < nd; i++) {
        tc_bcol kf;
        wmma::load_matrix_sync(kf, &sm.k[n * 16][i * 16], TC_LDH);
        wmma::mma_sync(sf, qf[i], kf, sf);
      }
      wmma::store_matrix_sync(&sm.s[warp * 16][n * 16], sf, TC_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    if (lane < 16) { /* the online softmax of row r over this tile */
      float m = sm.m[r], mx = m;
      for (int c = 0; c < TC_COLS; c++) {
        int64_t j = j0 + c;
        if (mine && j >= lo && j <= p) mx = fmaxf(mx, sm.s[r][c] * scale);
      }
      float alpha = mx == m ? 1.0f : fa_exp(m - mx), l = sm.l[r] * alpha;
      for (int c = 0; c < TC_COLS; c++) {
        int64_t j = j0 + c;
        float e = mine && j >= lo && j <= p ? fa_exp(sm.s[r][c] * scale - mx) : 0.0f;
        l += e;
        sm.p[r][c] = __float2bfloat16_rn(e);
      }
      if (alpha != 1.0f)
        for (int64_t d = 0; d < HS; d++) sm.u.o[r][d] *= alpha;
      sm.m[r] = mx, sm.l[r] = l;
    }
    __syncwarp();
    for (int n = 0; n < nd; n++) { /* O += P·V */
      tc_acc of;
      wmma::load_matrix_sync(of, &sm.u.o[warp * 16][n * 16], TC_LDO, wmma::mem_row_major);
      for (int i = 0; i < TC_COLS / 16; i++) {
        tc_a pf;
        tc_brow vf;
        wmma::load_matrix_sync(pf, &sm.p[warp * 16][i * 16], TC_LDP);
        wmma::load_matrix_sync(vf, &sm.v[i * 16][n * 16], TC_LDH);
        wmma::mma_sync(of, pf, vf, of);
      }
      wmma::store_matrix_sync(&sm.u.o[warp * 16][n * 16], of, TC_LDO, wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (!mine) return;
  float l = sm.l[r], inv = 1.0f / l;
  for (int64_t d = 0; d < HS; d++) out[(b * T + t) * NH * HS + h * HS + d] = sm.u.o[r][d] * inv;
  lse[(b * NH + h) * T + t] = sm.m[r] + logf(l);
#else
  __trap(); /* bf16 WMMA needs sm_80 or newer */
#endif
}

struct alignas(32) tc_dq_smem {
  union {
    struct {
      alignas(32) __nv_bfloat16 k[TC_COLS][TC_LDH];
      alignas(32) __nv_bfloat16 v[TC_COLS][TC_LDH];
    } t;
    alignas(32) float o[TC_ROWS][TC_LDO]; /* dQ on its way out */
  } u;
  alignas(32) float s[TC_ROWS][TC_LDS];
  alignas(32) float dp[TC_ROWS][TC_LDS];
  alignas(32) __nv_bfloat16 ds[TC_ROWS][TC_LDP];
};

/* DELTA false: dQ = Σ_j dS_j·K_j per query row. DELTA true: D = Σ_j P_j·dP_j
 * (over the row's keys in order, one lane a row) into D. */
template <bool DELTA>
__global__ void __launch_bounds__(64)
    flash_dq_tc_kernel(float *__restrict__ dq, const float *__restrict__ dout,
                       const float *__restrict__ lse, float *__restrict__ D,
                       const float *__restrict__ q, const float *__restrict__ kk,
                       const float *__restrict__ v, int64_t ldq, int64_t ldkv, int64_t T,
                       int64_t NH, int64_t G, int64_t HS, td_pos pos,
                       const int32_t *__restrict__ doc, float scale) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ tc_dq_smem sm;
  int64_t b = blockIdx.z, h = blockIdx.y, kv = h / G, Tk = pos.Tk, C = NH * HS;
  int64_t t0 = (int64_t)blockIdx.x * TC_ROWS;
  int64_t tl = t0 + TC_ROWS - 1 < T ? t0 + TC_ROWS - 1 : T - 1;
  int64_t klo = fa_lo(doc, b, T, t0), khi = td_pos_at_dev(pos, tl);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nd = (int)(HS / 16);
  int r = warp * 16 + lane;
  int64_t t = t0 + r;
  bool mine = lane < 16 && t < T;
  int64_t p = mine ? td_pos_at_dev(pos, t) : -1, lo = mine ? fa_lo(doc, b, T, t) : 0;
  float L = mine ? lse[(b * NH + h) * T + t] : 0.0f;
  float Dt = mine && !DELTA ? D[(b * NH + h) * T + t] : 0.0f, acc = 0.0f;
  tc_stage(sm.u.t.k, q, ldq, b * T, t0, T, h * HS, HS); /* Q and dO, for their fragments */
  tc_stage(sm.u.t.v, dout, C, b * T, t0, T, h * HS, HS);
  __syncthreads();
  tc_a qf[FA_MAX_HS / 16], gf[FA_MAX_HS / 16];
  tc_acc dqf[FA_MAX_HS / 16];
  for (int i = 0; i < nd; i++) {
    wmma::load_matrix_sync(qf[i], &sm.u.t.k[warp * 16][i * 16], TC_LDH);
    wmma::load_matrix_sync(gf[i], &sm.u.t.v[warp * 16][i * 16], TC_LDH);
    wmma::fill_fragment(dqf[i], 0.0f);
  }
  for (int64_t j0 = klo / TC_COLS * TC_COLS; j0 <= khi; j0 += TC_COLS) {
    __syncthreads();
    tc_stage(sm.u.t.k, kk, ldkv, b * Tk, j0, Tk, kv * HS, HS);
    tc_stage(sm.u.t.v, v, ldkv, b * Tk, j0, Tk, kv * HS, HS);
    __syncthreads();
    for (int n = 0; n < TC_COLS / 16; n++) { /* S = Q·Kᵀ, dP = dO·Vᵀ */
      tc_acc sf, pf;
      wmma::fill_fragment(sf, 0.0f);
      wmma::fill_fragment(pf, 0.0f);
      for (int i = 0; i < nd; i++) {
        tc_bcol kf, vf;
        wmma::load_matrix_sync(kf, &sm.u.t.k[n * 16][i * 16], TC_LDH);
        wmma::load_matrix_sync(vf, &sm.u.t.v[n * 16][i * 16], TC_LDH);
        wmma::mma_sync(sf, qf[i], kf, sf);
        wmma::mma_sync(pf, gf[i], vf, pf);
      }
      wmma::store_matrix_sync(&sm.s[warp * 16][n * 16], sf, TC_LDS, wmma::mem_row_major);
      wmma::store_matrix_sync(&sm.dp[warp * 16][n * 16], pf, TC_LDS, wmma::mem_row_major);
    }
    __syncwarp();
    if (lane < 16) {
      for (int c = 0; c < TC_COLS; c++) {
        int64_t j = j0 + c;
        float ds = 0.0f;
        if (mine && j >= lo && j <= p) {
          float pr = fa_exp(scale * sm.s[r][c] - L), dpv = sm.dp[r][c];
          ds = scale * pr * (dpv - Dt);
          if (DELTA) acc += pr * dpv;
        }
        sm.ds[r][c] = __float2bfloat16_rn(fabsf(ds) >= FA_TINY ? ds : 0.0f);
      }
    }
    __syncwarp();
    if (!DELTA)
      for (int n = 0; n < nd; n++) /* dQ += dS·K */
        for (int i = 0; i < TC_COLS / 16; i++) {
          tc_a df;
          tc_brow kf;
          wmma::load_matrix_sync(df, &sm.ds[warp * 16][i * 16], TC_LDP);
          wmma::load_matrix_sync(kf, &sm.u.t.k[i * 16][n * 16], TC_LDH);
          wmma::mma_sync(dqf[n], df, kf, dqf[n]);
        }
  }
  __syncthreads();
  if (DELTA) {
    if (mine) D[(b * NH + h) * T + t] = acc;
    return;
  }
  tc_store_rows(dq + b * T * ldq, ldq, t0 + warp * 16, T, h * HS, HS, &sm.u.o[warp * 16], dqf,
                nd);
#else
  __trap();
#endif
}

struct alignas(32) tc_dkv_smem {
  union {
    struct {
      alignas(32) __nv_bfloat16 q[TC_COLS][TC_LDH];
      alignas(32) __nv_bfloat16 g[TC_COLS][TC_LDH]; /* dO */
    } t;
    alignas(32) float o[TC_ROWS][TC_LDO]; /* dK, dV on their way out */
  } u;
  alignas(32) float st[TC_ROWS][TC_LDS];  /* Sᵀ: the block's keys × the tile's queries */
  alignas(32) float dpt[TC_ROWS][TC_LDS]; /* dPᵀ */
  alignas(32) __nv_bfloat16 pt[TC_ROWS][TC_LDP];
  alignas(32) __nv_bfloat16 dst[TC_ROWS][TC_LDP]; /* dSᵀ = hi + lo, both bf16 */
  alignas(32) __nv_bfloat16 dsl[TC_ROWS][TC_LDP];
  float ls[TC_COLS], dsh[TC_COLS];
  int64_t los[TC_COLS], ps[TC_COLS];
};

/* A block of 32 keys of one (sequence, key/value head); the query heads of
 * the group and their tiles of 32 rows in order: dV = Σ Pᵀ·dO, dK = Σ dSᵀ·Q. */
__global__ void __launch_bounds__(64)
    flash_dkv_tc_kernel(float *__restrict__ dk, float *__restrict__ dv,
                        const float *__restrict__ dout, const float *__restrict__ lse,
                        const float *__restrict__ D, const float *__restrict__ q,
                        const float *__restrict__ kk, const float *__restrict__ v, int64_t ldq,
                        int64_t ldkv, int64_t T, int64_t NH, int64_t G, int64_t HS, td_pos pos,
                        const int32_t *__restrict__ doc, float scale) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  __shared__ tc_dkv_smem sm;
  int64_t b = blockIdx.z, kv = blockIdx.y, Tk = pos.Tk, C = NH * HS;
  int64_t j0 = (int64_t)blockIdx.x * TC_ROWS;
  int64_t jl = j0 + TC_ROWS - 1 < Tk ? j0 + TC_ROWS - 1 : Tk - 1;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nd = (int)(HS / 16);
  int r = warp * 16 + lane;
  int64_t j = j0 + r;
  bool mine = lane < 16 && j < Tk;
  tc_stage(sm.u.t.q, kk, ldkv, b * Tk, j0, Tk, kv * HS, HS); /* K and V, for their fragments */
  tc_stage(sm.u.t.g, v, ldkv, b * Tk, j0, Tk, kv * HS, HS);
  __syncthreads();
  tc_a kf[FA_MAX_HS / 16], vf[FA_MAX_HS / 16];
  tc_acc dkf[FA_MAX_HS / 16], dvf[FA_MAX_HS / 16];
  for (int i = 0; i < nd; i++) {
    wmma::load_matrix_sync(kf[i], &sm.u.t.q[warp * 16][i * 16], TC_LDH);
    wmma::load_matrix_sync(vf[i], &sm.u.t.g[warp * 16][i * 16], TC_LDH);
    wmma::fill_fragment(dkf[i], 0.0f);
    wmma::fill_fragment(dvf[i], 0.0f);
  }
  for (int64_t gi = 0; gi < G; gi++) {
    int64_t h = kv * G + gi;
    for (int64_t u0 = 0; u0 < T; u0 += TC_COLS) {
      int64_t ul = u0 + TC_COLS - 1 < T ? u0 + TC_COLS - 1 : T - 1;
      if (td_pos_at_dev(pos, ul) < j0 || fa_lo(doc, b, T, u0) > jl) continue;
      __syncthreads();
      tc_stage(sm.u.t.q, q, ldq, b * T, u0, T, h * HS, HS);
      tc_stage(sm.u.t.g, dout, C, b * T, u0, T, h * HS, HS);
      for (int64_t c = threadIdx.x; c < TC_COLS; c += blockDim.x) {
        int64_t u = u0 + c;
        sm.ls[c] = u < T ? lse[(b * NH + h) * T + u] : 0.0f;
        sm.dsh[c] = u < T ? D[(b * NH + h) * T + u] : 0.0f;
        sm.los[c] = u < T ? fa_lo(doc, b, T, u) : 1;
        sm.ps[c] = u < T ? td_pos_at_dev(pos, u) : -1; /* past T: sees nothing */
      }
      __syncthreads();
      for (int n = 0; n < TC_COLS / 16; n++) { /* Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ */
        tc_acc sf, pf;
        wmma::fill_fragment(sf, 0.0f);
        wmma::fill_fragment(pf, 0.0f);
        for (int i = 0; i < nd; i++) {
          tc_bcol qb, gb;
          wmma::load_matrix_sync(qb, &sm.u.t.q[n * 16][i * 16], TC_LDH);
          wmma::load_matrix_sync(gb, &sm.u.t.g[n * 16][i * 16], TC_LDH);
          wmma::mma_sync(sf, kf[i], qb, sf);
          wmma::mma_sync(pf, vf[i], gb, pf);
        }
        wmma::store_matrix_sync(&sm.st[warp * 16][n * 16], sf, TC_LDS, wmma::mem_row_major);
        wmma::store_matrix_sync(&sm.dpt[warp * 16][n * 16], pf, TC_LDS, wmma::mem_row_major);
      }
      __syncwarp();
      if (lane < 16) {
        for (int c = 0; c < TC_COLS; c++) {
          float pr = 0.0f, ds = 0.0f;
          if (mine && j >= sm.los[c] && j <= sm.ps[c]) {
            pr = fa_exp(scale * sm.st[r][c] - sm.ls[c]);
            ds = scale * pr * (sm.dpt[r][c] - sm.dsh[c]);
          }
          ds = fabsf(ds) >= FA_TINY ? ds : 0.0f;
          __nv_bfloat16 hi = __float2bfloat16_rn(ds);
          sm.pt[r][c] = __float2bfloat16_rn(pr);
          sm.dst[r][c] = hi;
          sm.dsl[r][c] = __float2bfloat16_rn(ds - __bfloat162float(hi));
        }
      }
      __syncwarp();
      for (int n = 0; n < nd; n++) /* dV += Pᵀ·dO, dK += (dS_hi + dS_lo)ᵀ·Q */
        for (int i = 0; i < TC_COLS / 16; i++) {
          tc_a pa, da, la;
          tc_brow gb, qb;
          wmma::load_matrix_sync(pa, &sm.pt[warp * 16][i * 16], TC_LDP);
          wmma::load_matrix_sync(da, &sm.dst[warp * 16][i * 16], TC_LDP);
          wmma::load_matrix_sync(la, &sm.dsl[warp * 16][i * 16], TC_LDP);
          wmma::load_matrix_sync(gb, &sm.u.t.g[i * 16][n * 16], TC_LDH);
          wmma::load_matrix_sync(qb, &sm.u.t.q[i * 16][n * 16], TC_LDH);
          wmma::mma_sync(dvf[n], pa, gb, dvf[n]);
          wmma::mma_sync(dkf[n], da, qb, dkf[n]);
          wmma::mma_sync(dkf[n], la, qb, dkf[n]);
        }
    }
  }
  __syncthreads();
  float *base_k = dk + b * Tk * ldkv, *base_v = dv + b * Tk * ldkv;
  tc_store_rows(base_k, ldkv, j0 + warp * 16, Tk, kv * HS, HS, &sm.u.o[warp * 16], dkf, nd);
  __syncwarp();
  tc_store_rows(base_v, ldkv, j0 + warp * 16, Tk, kv * HS, HS, &sm.u.o[warp * 16], dvf, nd);
#else
  __trap();
#endif
}

/* The tensor-core kernels serve a bf16 model whose head size is a
 * multiple of the 16-wide WMMA tile. */
static bool fa_tensor_cores(int64_t HS, td_dtype mt) { return td_kernels_flash_bf16(mt, HS); }

/* The shared checks (kernels/args.c) and this kernel's limits. Document
 * starts are not checked here (they live on the device): the caller's
 * contract, checked on the CPU back-end. */
static td_status fa_check(const char *op, int64_t ldq, int64_t ldkv, int64_t B, int64_t T,
                          int64_t NH, int64_t KV, int64_t HS, const td_pos *pos, td_dtype mt) {
  TD_CHECK(td_kernels_gqa_args(ldq, ldkv, B, T, NH, KV, HS));
  TD_REQUIRE(mt == TD_DTYPE_F32 || mt == TD_DTYPE_BF16, TD_ERR_USAGE,
             "%s: the products' type must be float32 or bf16", op);
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
                            const td_pos *pos, const int32_t *doc, td_dtype mt) {
  TD_CHECK(fa_check("flash_fwd", ldq, ldkv, B, T, NH, KV, HS, pos, mt));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  cudaStream_t st = td_cuda_st(k)->stream;
  float scale = 1.0f / sqrtf((float)HS);
  if (fa_tensor_cores(HS, mt)) {
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)NH, (unsigned)B);
    flash_fwd_tc_kernel<<<grid, 64, 0, st>>>(out, lse, q, kk, v, ldq, ldkv, T, NH, NH / KV, HS,
                                              p, doc, scale);
    TD_CUDA_LAUNCHED("flash_fwd_tc_kernel");
    return TD_OK;
  }
  dim3 grid((unsigned)((T + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
  flash_fwd_kernel<<<grid, FA_ROWS, 0, st>>>(out, lse, q, kk, v, ldq, ldkv, T, NH, NH / KV, HS,
                                             p, doc, scale);
  TD_CUDA_LAUNCHED("flash_fwd_kernel");
  return TD_OK;
}

td_status td_cuda_flash_bwd(td_kernels *k, float *dq, float *dk, float *dv, float *delta,
                            const float *dout, const float *out, const float *lse,
                            const float *q, const float *kk, const float *v, int64_t ldq,
                            int64_t ldkv, int64_t B, int64_t T, int64_t NH, int64_t KV,
                            int64_t HS, const td_pos *pos, const int32_t *doc, td_dtype mt) {
  TD_CHECK(fa_check("flash_bwd", ldq, ldkv, B, T, NH, KV, HS, pos, mt));
  if (B == 0 || T == 0 || NH == 0) return TD_OK;
  td_pos p = td_cuda_pos(pos, T);
  cudaStream_t st = td_cuda_st(k)->stream;
  int64_t rows = B * NH * T, G = NH / KV;
  float scale = 1.0f / sqrtf((float)HS);
  unsigned nb = 0;
  if (fa_tensor_cores(HS, mt)) {
    /* D from the probabilities and the dP of these products, whether or not
     * O is given: rowsum(dO ∘ O), O made from rounded probabilities, would
     * leave Σ_j dS_j at 2⁻⁹ of its terms instead of 0 */
    dim3 gq((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)NH, (unsigned)B);
    flash_dq_tc_kernel<true><<<gq, 64, 0, st>>>(dq, dout, lse, delta, q, kk, v, ldq, ldkv, T, NH,
                                                 G, HS, p, doc, scale);
    TD_CUDA_LAUNCHED("flash_dq_tc_kernel<delta>");
    flash_dq_tc_kernel<false><<<gq, 64, 0, st>>>(dq, dout, lse, delta, q, kk, v, ldq, ldkv, T,
                                                  NH, G, HS, p, doc, scale);
    TD_CUDA_LAUNCHED("flash_dq_tc_kernel");
    dim3 gk((unsigned)((p.Tk + TC_ROWS - 1) / TC_ROWS), (unsigned)KV, (unsigned)B);
    flash_dkv_tc_kernel<<<gk, 64, 0, st>>>(dk, dv, dout, lse, delta, q, kk, v, ldq, ldkv, T, NH,
                                            G, HS, p, doc, scale);
    TD_CUDA_LAUNCHED("flash_dkv_tc_kernel");
    return TD_OK;
  }
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
