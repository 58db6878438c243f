/* embed.cu — token + position embedding, forward and backward, on the CUDA
 * back-end (kernels/cpu/embed.c). The backward is deterministic and adds in
 * the CPU's order: the (token, position) pairs are sorted by token with a
 * stable radix sort (CUB), so each vocabulary row adds its occurrences in
 * increasing position, one block per run of equal tokens, straight into the
 * gradient row as the CPU does; dwpe adds the batches in order. */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_internal.cuh"

#define TD_EMBED_ALIGN 256 /* byte alignment of each workspace region */

/* out[n, c] = (v0 ≤ tok[n] < v0+Vs ? wte[tok[n]−v0, c] : 0)
 *          + (wpe ? wpe[td_pos_at(pos, n mod T), c] : 0);
 * out (N = B·T, C), tokens (N), wte (Vs, C), wpe (Tk, C) or NULL, wte and wpe
 * of type P. One thread per element of out. */
template <typename P>
static __global__ void embed_fwd_kernel(float *__restrict__ out,
                                        const int32_t *__restrict__ tokens,
                                        const P *__restrict__ wte, int64_t v0, int64_t Vs,
                                        const P *__restrict__ wpe, int64_t N, int64_t T,
                                        td_pos pos, int64_t C) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= N * C) return;
  int64_t n = idx / C, c = idx % C;
  int64_t v = (int64_t)tokens[n] - v0;
  bool e = v >= 0 && v < Vs;
  float o = 0.0f;
  if (e && wpe)
    o = td_ld(wte, v * C + c) + td_ld(wpe, td_pos_tok_dev(pos, T, n) * C + c);
  else if (e)
    o = td_ld(wte, v * C + c);
  else if (wpe)
    o = td_ld(wpe, td_pos_tok_dev(pos, T, n) * C + c);
  out[idx] = o;
}

/* keys[n] = tok[n] − v0 when in [0, Vs), else Vs (sorts last, skipped);
 * pos[n] = n; tokens, keys, pos (N). One thread per position. */
static __global__ void embed_keys_kernel(uint32_t *__restrict__ keys, uint32_t *__restrict__ pos,
                                         const int32_t *__restrict__ tokens, int64_t v0,
                                         int64_t Vs, int64_t N) {
  int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  int64_t v = (int64_t)tokens[n] - v0;
  keys[n] = (uint32_t)(v >= 0 && v < Vs ? v : Vs);
  pos[n] = (uint32_t)n;
}

/* dwte[v, :] += dout[p_0, :] + dout[p_1, :] + ..., added one by one in the
 * order of the run (increasing position) for the run of equal keys v that
 * starts at sorted index blockIdx.x; keys, pos (N) sorted by key (stable),
 * dout (N, C), dwte (Vs, C). One block per sorted index: the block exits
 * unless its index starts a run of a key < Vs; TD_CUDA_THREADS threads, each
 * thread strides over C. */
static __global__ void embed_bwd_runs_kernel(float *__restrict__ dwte,
                                             const float *__restrict__ dout,
                                             const uint32_t *__restrict__ keys,
                                             const uint32_t *__restrict__ pos, int64_t N,
                                             int64_t Vs, int64_t C) {
  int64_t i0 = blockIdx.x;
  uint32_t key = keys[i0];
  if ((int64_t)key >= Vs || (i0 > 0 && keys[i0 - 1] == key)) return;
  int64_t i1 = i0 + 1;
  while (i1 < N && keys[i1] == key) i1++;
  float *g = dwte + (int64_t)key * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = g[c];
    for (int64_t i = i0; i < i1; i++) acc += dout[(int64_t)pos[i] * C + c];
    g[c] = acc;
  }
}

/* dwpe[p(t), c] += dout[0·T+t, c] + dout[1·T+t, c] + ..., added one by one
 * in batch order, p = td_pos_at(pos, ·) (distinct rows: the positions
 * increase); dout (B·T, C), dwpe (Tk, C). One thread per (t, c), t < T. */
static __global__ void embed_bwd_wpe_kernel(float *__restrict__ dwpe,
                                            const float *__restrict__ dout, int64_t B,
                                            int64_t T, td_pos pos, int64_t C) {
  int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= T * C) return;
  int64_t t = idx / C, c = idx % C;
  float *g = dwpe + td_pos_at_dev(pos, t) * C + c;
  float acc = *g;
  for (int64_t b = 0; b < B; b++) acc += dout[(b * T + t) * C + c];
  *g = acc;
}

/* Packed documents (pos.doc): dwpe[p(b, t), c] += dout[b·T+t, c] in (t, b)
 * order, p = td_pos_tok_dev — rows repeat across documents, so one thread
 * per column walks every row in the CPU's order. */
static __global__ void embed_bwd_wpe_doc_kernel(float *__restrict__ dwpe,
                                                const float *__restrict__ dout, int64_t B,
                                                int64_t T, td_pos pos, int64_t C) {
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t t = 0; t < T; t++)
    for (int64_t b = 0; b < B; b++) {
      int64_t n = b * T + t;
      dwpe[td_pos_tok_dev(pos, T, n) * C + c] += dout[n * C + c];
    }
}

/* Bytes rounded up to the workspace alignment. */
static size_t embed_align(size_t bytes) {
  return (bytes + TD_EMBED_ALIGN - 1) / TD_EMBED_ALIGN * TD_EMBED_ALIGN;
}

/* out (B·T, C), tokens (B·T) on the device, wte (Vs, C), wpe (Tk, C) or
 * NULL, row t of a sequence reading wpe row td_pos_at(pos, t); wte and wpe
 * of type pt. */
td_status td_cuda_embed_fwd(td_kernels *k, float *out, const int32_t *tokens,
                            const void *wte, int64_t v0, int64_t Vs, const void *wpe,
                            td_dtype pt, int64_t B, int64_t T, int64_t C, const td_pos *pos) {
  TD_REQUIRE(B >= 0 && T >= 0 && C >= 0 && Vs >= 0, TD_ERR_USAGE,
             "embed: expected sizes >= 0, got B=%lld T=%lld C=%lld Vs=%lld", (long long)B,
             (long long)T, (long long)C, (long long)Vs);
  TD_CHECK(td_kernels_pos_args("embed_fwd", pos, T));
  td_pos p = td_cuda_pos(pos, T);
  int64_t N = B * T;
  unsigned nb;
  TD_CHECK(td_cuda_blocks(N * C, TD_CUDA_THREADS, "embed_fwd", &nb));
  if (N == 0 || C == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;
  if (pt == TD_DTYPE_BF16)
    embed_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(out, tokens, (const __nv_bfloat16 *)wte, v0,
                                                     Vs, (const __nv_bfloat16 *)wpe, N, T, p, C);
  else
    embed_fwd_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(out, tokens, (const float *)wte, v0, Vs,
                                                     (const float *)wpe, N, T, p, C);
  TD_CUDA_LAUNCHED("embed_fwd");
  return TD_OK;
}

/* dwte (Vs, C) += the rows of dout (B·T, C) whose token is in [v0, v0+Vs),
 * each row of dwte adding its positions in increasing order; dwpe (Tk, C):
 * row td_pos_at(pos, t) += Σ_b dout[b·T+t, :] when not NULL. tokens (B·T)
 * on the device. */
td_status td_cuda_embed_bwd(td_kernels *k, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int64_t v0, int64_t Vs, int64_t B,
                            int64_t T, int64_t C, const td_pos *pos) {
  TD_REQUIRE(B >= 0 && T >= 0 && C >= 0 && Vs >= 0, TD_ERR_USAGE,
             "embed: expected sizes >= 0, got B=%lld T=%lld C=%lld Vs=%lld", (long long)B,
             (long long)T, (long long)C, (long long)Vs);
  TD_CHECK(td_kernels_pos_args("embed_bwd", pos, T));
  int64_t N = B * T;
  TD_REQUIRE(N <= INT32_MAX && Vs < INT32_MAX, TD_ERR_UNSUPPORTED,
             "embed: %lld positions or %lld vocabulary rows exceed the sort's 32-bit range",
             (long long)N, (long long)Vs);
  if (N == 0 || C == 0) return TD_OK;
  cudaStream_t st = td_cuda_st(k)->stream;

  if (Vs > 0) {
    /* Keys are in [0, Vs]: sort only the bits that Vs needs. */
    int end_bit = 1;
    while (end_bit < 32 && ((int64_t)1 << end_bit) <= Vs) end_bit++;
    int n = (int)N;
    size_t cub_bytes = 0;
    TD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const uint32_t *)NULL,
                                                  (uint32_t *)NULL, (const uint32_t *)NULL,
                                                  (uint32_t *)NULL, n, 0, end_bit, st));
    size_t arr = embed_align((size_t)N * sizeof(uint32_t));
    void *ws = NULL;
    TD_CHECK(td_cuda_scratch(k, 4 * arr + embed_align(cub_bytes), &ws));
    char *base = (char *)ws;
    uint32_t *keys = (uint32_t *)base, *rows = (uint32_t *)(base + arr);
    uint32_t *keys_s = (uint32_t *)(base + 2 * arr), *rows_s = (uint32_t *)(base + 3 * arr);
    void *cub_ws = base + 4 * arr;

    unsigned nb;
    TD_CHECK(td_cuda_blocks(N, TD_CUDA_THREADS, "embed_bwd", &nb));
    embed_keys_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(keys, rows, tokens, v0, Vs, N);
    TD_CUDA_LAUNCHED("embed_bwd_keys");
    TD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_ws, cub_bytes, keys, keys_s, rows, rows_s,
                                                  n, 0, end_bit, st));
    embed_bwd_runs_kernel<<<(unsigned)N, TD_CUDA_THREADS, 0, st>>>(dwte, dout, keys_s, rows_s,
                                                                   N, Vs, C);
    TD_CUDA_LAUNCHED("embed_bwd_runs");
  }

  if (dwpe && pos && pos->doc) {
    unsigned nb;
    TD_CHECK(td_cuda_blocks(C, TD_CUDA_THREADS, "embed_bwd wpe", &nb));
    embed_bwd_wpe_doc_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(dwpe, dout, B, T,
                                                             td_cuda_pos(pos, T), C);
    TD_CUDA_LAUNCHED("embed_bwd_wpe_doc");
  } else if (dwpe) {
    unsigned nb;
    TD_CHECK(td_cuda_blocks(T * C, TD_CUDA_THREADS, "embed_bwd wpe", &nb));
    embed_bwd_wpe_kernel<<<nb, TD_CUDA_THREADS, 0, st>>>(dwpe, dout, B, T, td_cuda_pos(pos, T),
                                                         C);
    TD_CUDA_LAUNCHED("embed_bwd_wpe");
  }
  return TD_OK;
}
