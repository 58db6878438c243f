/* moe.cu — the mixture-of-experts ops on the CUDA back-end (td_kernels.h,
 * "mixture of experts"; kernels/cpu/moe.c is the reference). Every sum
 * runs in the CPU's order — a row's slots j = 0…K−1, a row's elements, a
 * column's rows in row order — one thread per sum, so the results do not
 * depend on the launch (test_moe checks them against the same float64
 * reference as the CPU's, within rounding; the probabilities differ from
 * the CPU's by expf's rounding, the choices do not: they are made on the
 * logits).
 *
 * moe_plan is a counting sort without atomics: the slots in chunks of
 * TD_MOE_CHUNK, each chunk's per-expert counts (one thread per chunk), each
 * expert's running offset over the chunks (one thread per expert), then
 * each chunk's slots placed in slot order (one thread per chunk). It reads
 * the experts' offsets back to the host to check the indices, so it waits
 * for the stream (the caller needs off on the host anyway, for the
 * experts' row counts). */
#include "kernels/cuda/cuda_internal.cuh"

#define TD_MOE_CHUNK 256

/* Row n (one thread): softmax, lse, the K largest logits (a tie to the lower
 * expert), their renormalised probabilities. */
static __global__ void moe_route_kernel(float *__restrict__ probs, float *__restrict__ lse,
                                        int32_t *__restrict__ idx, float *__restrict__ w,
                                        const float *__restrict__ logits, int64_t N, int64_t E,
                                        int64_t K) {
  int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *l = logits + n * E;
  float *p = probs + n * E, mx = -INFINITY, sum = 0.0f;
  for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
  for (int64_t e = 0; e < E; e++) {
    p[e] = expf(l[e] - mx);
    sum += p[e];
  }
  for (int64_t e = 0; e < E; e++) p[e] /= sum;
  lse[n] = mx + logf(sum);
  int32_t *ix = idx + n * K;
  for (int64_t j = 0; j < K; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++) {
      bool taken = false;
      for (int64_t i = 0; i < j; i++) taken |= ix[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    ix[j] = (int32_t)best;
  }
  float s = 0.0f;
  for (int64_t j = 0; j < K; j++) s += p[ix[j]];
  for (int64_t j = 0; j < K; j++) w[n * K + j] = p[ix[j]] / s;
}

/* psum[e] = Σ_n probs[n, e] in row order (one thread per expert). */
static __global__ void moe_psum_kernel(float *__restrict__ psum, const float *__restrict__ probs,
                                       int64_t N, int64_t E) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  float s = 0.0f;
  for (int64_t n = 0; n < N; n++) s += probs[n * E + e];
  psum[e] = s;
}

td_status td_cuda_moe_route(td_kernels *k, float *probs, float *lse, int32_t *idx, float *w,
                            float *psum, const float *logits, int64_t N, int64_t E, int64_t K) {
  TD_CHECK(td_kernels_moe_args("moe_route", N, E, K, 0, 0));
  cudaStream_t st = td_cuda_st(k)->stream;
  unsigned nb;
  if (N > 0) {
    TD_CHECK(td_cuda_blocks(N, TD_CUDA_THREADS, "moe_route", &nb));
    moe_route_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(probs, lse, idx, w, logits, N, E, K);
    TD_CUDA_LAUNCHED("moe_route");
  }
  TD_CHECK(td_cuda_blocks(E, TD_CUDA_THREADS, "moe_route", &nb));
  moe_psum_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(psum, probs, N, E);
  TD_CUDA_LAUNCHED("moe_route");
  return TD_OK;
}

/* Chunk c's count of each expert into h (nchunks, E); bad[c] its first
 * slot that names no expert, INT32_MAX when none. One thread per chunk. */
static __global__ void moe_count_kernel(int32_t *__restrict__ h, int32_t *__restrict__ bad,
                                        const int32_t *__restrict__ idx, int64_t S, int64_t E,
                                        int64_t nchunks) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nchunks) return;
  int32_t *hc = h + c * E, first = INT32_MAX;
  for (int64_t e = 0; e < E; e++) hc[e] = 0;
  int64_t end = (c + 1) * TD_MOE_CHUNK < S ? (c + 1) * TD_MOE_CHUNK : S;
  for (int64_t s = c * TD_MOE_CHUNK; s < end; s++) {
    int32_t e = idx[s];
    if (e >= 0 && e < E) hc[e]++;
    else if (first == INT32_MAX) first = (int32_t)s;
  }
  bad[c] = first;
}

/* Expert e (one thread): h[c, e] = its slots before chunk c (an exclusive
 * running sum over the chunks), count[e] = all of them. */
static __global__ void moe_scan_kernel(int32_t *__restrict__ h, int32_t *__restrict__ count,
                                       int64_t E, int64_t nchunks) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  int32_t run = 0;
  for (int64_t c = 0; c < nchunks; c++) {
    int32_t t = h[c * E + e];
    h[c * E + e] = run;
    run += t;
  }
  count[e] = run;
}

/* off (E + 1) from count and the capacity; bad[0] = the lowest of the
 * chunks' first bad slots (one thread). */
static __global__ void moe_off_kernel(int32_t *__restrict__ off, int32_t *__restrict__ bad,
                                      const int32_t *__restrict__ count, int64_t E, int64_t cap,
                                      int64_t nchunks) {
  for (int64_t c = 1; c < nchunks; c++) bad[0] = bad[c] < bad[0] ? bad[c] : bad[0];
  off[0] = 0;
  for (int64_t e = 0; e < E; e++)
    off[e + 1] = off[e] + (cap > 0 && count[e] > cap ? (int32_t)cap : count[e]);
}

/* Chunk c's slots in slot order (one thread per chunk): the slot's rank
 * among its expert's is h[c, e] then incremented; past cap it is dropped. */
static __global__ void moe_place_kernel(int32_t *__restrict__ pos, int32_t *__restrict__ perm,
                                        int32_t *__restrict__ h, const int32_t *__restrict__ off,
                                        const int32_t *__restrict__ idx, int64_t S, int64_t E,
                                        int64_t nchunks, int64_t cap) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nchunks) return;
  int32_t *hc = h + c * E;
  int64_t end = (c + 1) * TD_MOE_CHUNK < S ? (c + 1) * TD_MOE_CHUNK : S;
  for (int64_t s = c * TD_MOE_CHUNK; s < end; s++) {
    int32_t e = idx[s];
    if (e < 0 || e >= E) continue; /* refused by the host after the launch */
    int32_t rank = hc[e]++;
    if (cap > 0 && rank >= cap) {
      pos[s] = -1;
      continue;
    }
    int32_t r = off[e] + rank;
    pos[s] = r, perm[r] = (int32_t)s;
  }
}

td_status td_cuda_moe_plan(td_kernels *k, int32_t *pos, int32_t *perm, int32_t *off,
                           int32_t *count, const int32_t *idx, int64_t N, int64_t E, int64_t K,
                           int64_t cap) {
  TD_CHECK(td_kernels_moe_args("moe_plan", N, E, K, 0, cap));
  td_cuda_state *s = td_cuda_st(k);
  int64_t S = N * K, nchunks = (S + TD_MOE_CHUNK - 1) / TD_MOE_CHUNK;
  void *ws = NULL;
  TD_CHECK(td_cuda_scratch(k, (size_t)(nchunks * (E + 1) + 1) * sizeof(int32_t), &ws));
  int32_t *bad = (int32_t *)ws, *h = bad + (nchunks > 0 ? nchunks : 1), first = INT32_MAX;
  if (nchunks == 0) TD_CUDA_CHECK(cudaMemcpyAsync(bad, &first, sizeof first,
                                                  cudaMemcpyHostToDevice, s->stream));
  unsigned nb;
  if (nchunks > 0) {
    TD_CHECK(td_cuda_blocks(nchunks, TD_CUDA_THREADS, "moe_plan", &nb));
    moe_count_kernel<<<nb, TD_CUDA_THREADS, 0, s->stream>>>(h, bad, idx, S, E, nchunks);
    TD_CUDA_LAUNCHED("moe_plan");
  }
  TD_CHECK(td_cuda_blocks(E, TD_CUDA_THREADS, "moe_plan", &nb));
  moe_scan_kernel<<<nb, TD_CUDA_THREADS, 0, s->stream>>>(h, count, E, nchunks);
  TD_CUDA_LAUNCHED("moe_plan");
  moe_off_kernel<<<1, 1, 0, s->stream>>>(off, bad, count, E, cap, nchunks);
  TD_CUDA_LAUNCHED("moe_plan");
  if (nchunks > 0) {
    TD_CHECK(td_cuda_blocks(nchunks, TD_CUDA_THREADS, "moe_plan", &nb));
    moe_place_kernel<<<nb, TD_CUDA_THREADS, 0, s->stream>>>(pos, perm, h, off, idx, S, E,
                                                            nchunks, cap);
    TD_CUDA_LAUNCHED("moe_plan");
  }
  TD_CUDA_CHECK(cudaMemcpyAsync(&first, bad, sizeof first, cudaMemcpyDeviceToHost, s->stream));
  TD_CUDA_CHECK(cudaStreamSynchronize(s->stream));
  if (first != INT32_MAX) {
    int32_t e = 0;
    TD_CUDA_CHECK(cudaMemcpy(&e, idx + first, sizeof e, cudaMemcpyDeviceToHost));
    TD_FAIL(TD_ERR_USAGE, "moe_plan: slot %lld names expert %d of %lld", (long long)first,
            (int)e, (long long)E);
  }
  return TD_OK;
}

/* xe[r, c] = x[perm[r] / K, c], element-wise, of type T. */
template <typename T>
static __global__ void moe_gather_kernel(T *__restrict__ xe, const T *__restrict__ x,
                                         const int32_t *__restrict__ perm, int64_t rows,
                                         int64_t C, int64_t K) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * C) return;
  int64_t r = i / C, c = i % C;
  xe[i] = x[(int64_t)(perm[r] / K) * C + c];
}

td_status td_cuda_moe_gather(td_kernels *k, void *xe, const void *x, td_dtype t,
                             const int32_t *perm, int64_t rows, int64_t C, int64_t K) {
  TD_CHECK(td_kernels_moe_args("moe_gather", rows, 1, 1, C, 0));
  TD_REQUIRE(K >= 1, TD_ERR_USAGE, "moe_gather: K must be >= 1, got %lld", (long long)K);
  if (rows * C == 0) return TD_OK;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(rows * C, TD_CUDA_THREADS, "moe_gather", &nb));
  cudaStream_t st = td_cuda_st(k)->stream;
  if (t == TD_DTYPE_BF16)
    moe_gather_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((uint16_t *)xe, (const uint16_t *)x, perm,
                                                      rows, C, K);
  else
    moe_gather_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((float *)xe, (const float *)x, perm, rows,
                                                      C, K);
  TD_CUDA_LAUNCHED("moe_gather");
  return TD_OK;
}

/* out[n, c] = Σ_j w·ye[pos, c] over the kept slots, j in order (sum 0:
 * only ye scaled, when `scaled`; else dx = Σ_j dxe[pos, c]). One thread per
 * element. */
static __global__ void moe_rows_sum_kernel(float *__restrict__ out, const float *__restrict__ y,
                                           const float *__restrict__ w,
                                           const int32_t *__restrict__ pos, int64_t N,
                                           int64_t K, int64_t C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  int64_t n = i / C, c = i % C;
  float o = 0.0f;
  for (int64_t j = 0; j < K; j++) {
    int32_t r = pos[n * K + j];
    if (r < 0) continue;
    float v = y[(int64_t)r * C + c];
    if (w) o += w[n * K + j] * v;
    else o += v;
  }
  out[i] = o;
}

td_status td_cuda_moe_combine(td_kernels *k, float *out, const float *ye, const float *w,
                              const int32_t *pos, int64_t N, int64_t K, int64_t C) {
  TD_CHECK(td_kernels_moe_args("moe_combine", N, K, K, C, 0));
  if (N * C == 0) return TD_OK;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N * C, TD_CUDA_THREADS, "moe_combine", &nb));
  moe_rows_sum_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(out, ye, w, pos, N, K, C);
  TD_CUDA_LAUNCHED("moe_combine");
  return TD_OK;
}

td_status td_cuda_moe_scatter(td_kernels *k, float *dx, const float *dxe, const int32_t *pos,
                              int64_t N, int64_t K, int64_t C) {
  TD_CHECK(td_kernels_moe_args("moe_scatter", N, K, K, C, 0));
  if (N * C == 0) return TD_OK;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N * C, TD_CUDA_THREADS, "moe_scatter", &nb));
  moe_rows_sum_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(dx, dxe, nullptr, pos, N,
                                                                         K, C);
  TD_CUDA_LAUNCHED("moe_scatter");
  return TD_OK;
}

/* dye[pos[s], c] = w[s]·dout[n, c] for the kept slots (one thread per
 * slot element). */
template <typename T>
static __global__ void moe_dye_kernel(T *__restrict__ dye, const float *__restrict__ dout,
                                      const float *__restrict__ w,
                                      const int32_t *__restrict__ pos, int64_t S, int64_t K,
                                      int64_t C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= S * C) return;
  int64_t s = i / C, c = i % C;
  int32_t r = pos[s];
  if (r < 0) return;
  td_st(dye, (int64_t)r * C + c, w[s] * dout[(s / K) * C + c]);
}

/* dw[s] = dout[n]·ye[pos[s]] over c in order, 0 when dropped (one thread
 * per slot). */
static __global__ void moe_dw_kernel(float *__restrict__ dw, const float *__restrict__ dout,
                                     const float *__restrict__ ye,
                                     const int32_t *__restrict__ pos, int64_t S, int64_t K,
                                     int64_t C) {
  int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= S) return;
  int32_t r = pos[s];
  float d = 0.0f;
  const float *g = dout + (s / K) * C, *y = ye + (int64_t)(r < 0 ? 0 : r) * C;
  for (int64_t c = 0; r >= 0 && c < C; c++) d += g[c] * y[c];
  dw[s] = d;
}

td_status td_cuda_moe_combine_bwd(td_kernels *k, void *dye, td_dtype dt, float *dw,
                                  const float *dout, const float *ye, const float *w,
                                  const int32_t *pos, int64_t N, int64_t K, int64_t C) {
  TD_CHECK(td_kernels_moe_args("moe_combine_bwd", N, K, K, C, 0));
  int64_t S = N * K;
  if (S == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  unsigned nb;
  if (C > 0) {
    TD_CHECK(td_cuda_blocks(S * C, TD_CUDA_THREADS, "moe_combine_bwd", &nb));
    if (dt == TD_DTYPE_BF16)
      moe_dye_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)dye, dout, w, pos, S, K, C);
    else
      moe_dye_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>((float *)dye, dout, w, pos, S, K, C);
    TD_CUDA_LAUNCHED("moe_combine_bwd");
  }
  TD_CHECK(td_cuda_blocks(S, TD_CUDA_THREADS, "moe_combine_bwd", &nb));
  moe_dw_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(dw, dout, ye, pos, S, K, C);
  TD_CUDA_LAUNCHED("moe_combine_bwd");
  return TD_OK;
}

/* Row n (one thread): the renormalisation's and the softmax's backward,
 * gP and the z-loss (kernels/cpu/moe.c, the same order). */
static __global__ void moe_route_bwd_kernel(float *__restrict__ dlogits,
                                            const float *__restrict__ dw,
                                            const float *__restrict__ probs,
                                            const float *__restrict__ lse,
                                            const int32_t *__restrict__ idx,
                                            const float *__restrict__ w,
                                            const float *__restrict__ gP, float zc, int64_t N,
                                            int64_t E, int64_t K) {
  int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *p = probs + n * E, *g = dw + n * K, *wn = w + n * K;
  const int32_t *ix = idx + n * K;
  float *dl = dlogits + n * E, S = 0.0f, a = 0.0f, dot = 0.0f;
  for (int64_t j = 0; j < K; j++) S += p[ix[j]];
  for (int64_t j = 0; j < K; j++) a += g[j] * wn[j];
  for (int64_t e = 0; e < E; e++) dl[e] = gP ? gP[e] : 0.0f;
  for (int64_t j = 0; j < K; j++) dl[ix[j]] += (g[j] - a) / S;
  for (int64_t e = 0; e < E; e++) dot += p[e] * dl[e];
  float z = zc * lse[n];
  for (int64_t e = 0; e < E; e++) dl[e] = p[e] * (dl[e] - dot) + z * p[e];
}

td_status td_cuda_moe_route_bwd(td_kernels *k, float *dlogits, const float *dw,
                                const float *probs, const float *lse, const int32_t *idx,
                                const float *w, const float *gP, float zc, int64_t N, int64_t E,
                                int64_t K) {
  TD_CHECK(td_kernels_moe_args("moe_route_bwd", N, E, K, 0, 0));
  if (N == 0) return TD_OK;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N, TD_CUDA_THREADS, "moe_route_bwd", &nb));
  moe_route_bwd_kernel<<<nb, TD_CUDA_THREADS, 0, td_cuda_st(k)->stream>>>(
      dlogits, dw, probs, lse, idx, w, gP, zc, N, E, K);
  TD_CUDA_LAUNCHED("moe_route_bwd");
  return TD_OK;
}
