/* test_wmma.cu — the WMMA API (nvcuda::wmma, include/mma.h) on the emulated
 * CUDA device (label cudaemu; rewritten and compiled like kernels/cuda).
 * Plain CUDA: `nvcc -arch=sm_90 -c` compiles it too; the refusals, which
 * only the emulator can observe, are under TD_CUDAEMU.
 *   - products of one warp's tiles against a float64 reference (bf16
 *     m16n16k16 in every layout pair, m32n8k16, m8n32k16; tf32 m16n16k8
 *     with __float_to_tf32, and without it: the low 13 bits ignored), into
 *     a loaded accumulator (mem_row_major and mem_col_major) or a filled
 *     one, ldm wider than the tile, stores that touch only the tile;
 *   - __float_to_tf32's rounding (nearest, ties away from zero);
 *   - fragments element by element: fill_fragment, x[i] over num_elements
 *     (the toolkit's counts), every tile element owned by one (lane, i);
 *   - operands in shared memory; a 64×64 product tiled over 4 warps of a
 *     block (through shared memory and straight from global memory);
 *   - refusals, each a failed launch with its message: a misaligned
 *     pointer, ldm off by one (bf16 and float), lanes with different
 *     pointers, a lane skipping a call (a mismatch, and a deadlock at the
 *     next barrier), a lane that has exited, a block that is not whole
 *     warps, a matrix past its allocation, host memory.
 * Prints "ok"/"FAIL" per check and "N passed, M failed"; exit 1 on any
 * failure. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <type_traits>
#include <vector>

using namespace nvcuda;

typedef wmma::precision::tf32 tf32;
/* the toolkit's element counts: the fragments are distributed as on a GPU */
static_assert(wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>::num_elements == 8, "a");
static_assert(wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>::num_elements == 8, "b");
static_assert(wmma::fragment<wmma::accumulator, 16, 16, 16, float>::num_elements == 8, "c");
static_assert(wmma::fragment<wmma::matrix_a, 32, 8, 16, __nv_bfloat16, wmma::row_major>::num_elements == 16, "a");
static_assert(wmma::fragment<wmma::matrix_b, 8, 32, 16, __nv_bfloat16, wmma::row_major>::num_elements == 16, "b");
static_assert(wmma::fragment<wmma::matrix_a, 16, 16, 8, tf32, wmma::row_major>::num_elements == 4, "a");
static_assert(wmma::fragment<wmma::matrix_b, 16, 16, 8, tf32, wmma::col_major>::num_elements == 4, "b");
static_assert(wmma::fragment<wmma::accumulator, 16, 16, 8, float>::num_elements == 8, "c");

static int g_pass, g_fail;

static void check(bool ok, const char *what) {
  if (ok)
    g_pass++;
  else
    g_fail++;
  printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
  fflush(stdout);
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* One warp: d = a·b (+ c loaded with c_layout, else 0), stored with
 * d_layout; tf32 fragments rounded with __float_to_tf32 when `convert`. */
template <int M, int N, int K, class T, class MT, class LA, class LB>
__global__ void tile_kernel(float *d, const MT *a, const MT *b, const float *c, unsigned lda,
                            unsigned ldb, unsigned ldc, unsigned ldd, int load_c,
                            wmma::layout_t c_layout, wmma::layout_t d_layout, int convert) {
  wmma::fragment<wmma::matrix_a, M, N, K, T, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, T, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, float> fc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  if constexpr (std::is_same<T, tf32>::value) {
    if (convert) {
      for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
      for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    }
  }
  if (load_c)
    wmma::load_matrix_sync(fc, c, ldc, c_layout);
  else
    wmma::fill_fragment(fc, 0.0f);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, ldd, d_layout);
}

__global__ void tf32_kernel(float *out, const float *in, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = wmma::__float_to_tf32(in[i]);
}

/* Element-wise: out0 gets lane·8 + i in each (lane, i); out1 = 2·(a·b + 1)
 * with a = b = ones, through fill_fragment and x[i]. */
__global__ void elementwise_kernel(float *out0, float *out1) {
  int lane = threadIdx.x % 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  for (int i = 0; i < c.num_elements; i++) c.x[i] = (float)(lane * c.num_elements + i);
  wmma::store_matrix_sync(out0, c, 16, wmma::mem_row_major);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::fill_fragment(a, __float2bfloat16(1.0f));
  wmma::fill_fragment(b, __float2bfloat16(1.0f));
  wmma::fill_fragment(c, 1.0f);
  wmma::mma_sync(c, a, b, c);
  for (int i = 0; i < c.num_elements; i++) c.x[i] *= 2.0f;
  wmma::store_matrix_sync(out1, c, 16, wmma::mem_row_major);
}

/* One warp, the operands staged into shared memory (padded rows), c loaded
 * from it column-major, d stored to it and copied out. */
#define SM_LDH 24 /* bf16 leading dimension: 48 bytes */
#define SM_LDF 20 /* float: 80 bytes */
struct alignas(32) SmemTiles {
  __nv_bfloat16 a[16 * SM_LDH];
  __nv_bfloat16 b[16 * SM_LDH];
  float c[16 * SM_LDF];
};
__global__ void shared_kernel(float *d, const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                              const float *c) {
  __shared__ SmemTiles sm;
  int lane = threadIdx.x % 32;
  for (int i = lane; i < 256; i += 32) {
    sm.a[i / 16 * SM_LDH + i % 16] = a[i]; /* row-major a */
    sm.b[i / 16 * SM_LDH + i % 16] = b[i]; /* column-major b: column i/16 */
    sm.c[i / 16 * SM_LDF + i % 16] = c[i]; /* column-major c */
  }
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, sm.a, SM_LDH);
  wmma::load_matrix_sync(fb, sm.b, SM_LDH);
  wmma::load_matrix_sync(fc, sm.c, SM_LDF, wmma::mem_col_major);
  wmma::mma_sync(fc, fa, fb, fc);
  __syncwarp(); /* every lane has read sm.c */
  wmma::store_matrix_sync(sm.c, fc, SM_LDF, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 256; i += 32) d[i] = sm.c[i / 16 * SM_LDF + i % 16];
}

/* d (64×64, row-major) = a (64×64, row-major) · b (64×64, row-major), one
 * product per block (blockIdx.x: which), 4 warps of 32×32 each; k in steps
 * of 16, staged through shared memory by the whole block when `staged`,
 * else straight from global memory. */
#define TL_N 64
#define TL_LDA 24 /* the staged a: 64 × 16 (+8) */
#define TL_LDB 72 /* the staged b: 16 × 64 (+8) */
struct alignas(32) TiledSmem {
  __nv_bfloat16 a[TL_N * TL_LDA];
  __nv_bfloat16 b[16 * TL_LDB];
};
__global__ void tiled_kernel(float *d, const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                             int staged) {
  __shared__ TiledSmem sm;
  size_t off = (size_t)blockIdx.x * TL_N * TL_N;
  a += off;
  b += off;
  d += off;
  int warp = threadIdx.x / 32, wr = warp / 2 * 32, wc = warp % 2 * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int k0 = 0; k0 < TL_N; k0 += 16) {
    if (staged) {
      for (int t = threadIdx.x; t < TL_N * 16; t += blockDim.x) {
        sm.a[t / 16 * TL_LDA + t % 16] = a[t / 16 * TL_N + k0 + t % 16];
        sm.b[t / TL_N * TL_LDB + t % TL_N] = b[(k0 + t / TL_N) * TL_N + t % TL_N];
      }
      __syncthreads();
    }
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        if (staged) {
          wmma::load_matrix_sync(fa, &sm.a[(wr + 16 * i) * TL_LDA], TL_LDA);
          wmma::load_matrix_sync(fb, &sm.b[wc + 16 * j], TL_LDB);
        } else {
          wmma::load_matrix_sync(fa, &a[(wr + 16 * i) * TL_N + k0], TL_N);
          wmma::load_matrix_sync(fb, &b[k0 * TL_N + wc + 16 * j], TL_N);
        }
        wmma::mma_sync(acc[i][j], fa, fb, acc[i][j]);
      }
    if (staged) __syncthreads();
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      wmma::store_matrix_sync(&d[(wr + 16 * i) * TL_N + wc + 16 * j], acc[i][j], TL_N,
                              wmma::mem_row_major);
}

#ifdef TD_CUDAEMU
/* ---- misuse (the emulator's refusals) ---- */
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* 16 bytes past a 32-byte boundary */
__global__ void misaligned_kernel(const __nv_bfloat16 *a) {
  frag_a fa;
  wmma::load_matrix_sync(fa, a + 8, 16);
}

/* a leading dimension one element too wide: bf16 load (0), float store (1) */
__global__ void bad_ldm_kernel(const __nv_bfloat16 *a, float *d, int which) {
  frag_a fa;
  frag_c fc;
  wmma::fill_fragment(fc, 0.0f);
  if (which == 0)
    wmma::load_matrix_sync(fa, a, 17);
  else
    wmma::store_matrix_sync(d, fc, 17, wmma::mem_row_major);
}

/* the upper half-warp loads the next tile */
__global__ void different_pointers_kernel(const __nv_bfloat16 *a) {
  frag_a fa;
  int lane = threadIdx.x % 32;
  wmma::load_matrix_sync(fa, a + (lane >= 16 ? 256 : 0), 16);
}

/* lane 5 skips the load of a, and meets the others' load of a with its
 * load of b */
__global__ void skip_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *d) {
  frag_a fa;
  frag_b fb;
  frag_c fc;
  wmma::fill_fragment(fa, 0.0f);
  wmma::fill_fragment(fc, 0.0f);
  if (threadIdx.x % 32 != 5) wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

/* thread 3 (lane 3 of warp 0) skips the store and waits at the barrier
 * with warp 1: a deadlock */
__global__ void skip_to_barrier_kernel(float *d) {
  frag_c fc;
  wmma::fill_fragment(fc, 1.0f);
  if (threadIdx.x != 3) wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
  __syncthreads();
}

/* lane 7 has returned before the product */
__global__ void exited_lane_kernel(float *d) {
  if (threadIdx.x % 32 == 7) return;
  frag_a fa;
  frag_b fb;
  frag_c fc;
  wmma::fill_fragment(fa, 1.0f);
  wmma::fill_fragment(fb, 1.0f);
  wmma::fill_fragment(fc, 0.0f);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

/* 48 threads: the second warp is half a warp */
__global__ void partial_warp_kernel(float *d) {
  frag_c fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::store_matrix_sync(d + threadIdx.x / 32 * 256, fc, 16, wmma::mem_row_major);
}

/* a 16×16 tile at ldm 32 reads 15·32 + 16 elements of a 256-element
 * allocation */
__global__ void past_end_kernel(const __nv_bfloat16 *a) {
  frag_a fa;
  wmma::load_matrix_sync(fa, a, 32);
}

/* host memory, reached from a kernel (only the emulator can even compile it) */
alignas(32) static __nv_bfloat16 g_host_tile[256];
__global__ void host_memory_kernel(float *d) {
  frag_a fa;
  wmma::load_matrix_sync(fa, g_host_tile, 16);
  d[threadIdx.x] = 0.0f;
}
#endif

/* ---- host side ------------------------------------------------------------------------- */

static void put(__nv_bfloat16 &dst, float v) { dst = __float2bfloat16_rn(v); }
static void put(float &dst, float v) { dst = v; }

/* tf32 rounding for the reference, written independently of mma.h: to
 * nearest with ties away (rna), or truncated (what the tensor core reads
 * of an unconverted float); 11 significant bits, the implicit one
 * included, or multiples of 2^-136 among the subnormals. */
static float tf32_ref(float x, bool rna) {
  if (!isfinite(x) || x == 0.0f) return x;
  int e;
  frexp((double)x, &e);
  int q = e - 11 < -136 ? -136 : e - 11; /* the exponent of one unit in the last place */
  double m = ldexp((double)x, -q);
  m = rna ? copysign(floor(fabs(m) + 0.5), m) : trunc(m);
  return (float)ldexp(m, q);
}

static uint32_t g_rng = 12345u;
static float next_unit(void) { /* uniform in [-2, 2), full mantissa */
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)((double)(g_rng >> 8) / (double)(1u << 24) * 4.0 - 2.0);
}

static bool nan_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u == 0xffffffffu;
}

/* One warp's product of M×K by K×N (+ C), checked against float64 sums of
 * the same inputs (bf16: small dyadic values, every sum exact; tf32:
 * random, within 1e-6 of Σ|terms|); the padding of d must stay untouched. */
template <int M, int N, int K, class T, class MT, class LA, class LB>
static void run_tile(const char *name, int load_c, wmma::layout_t cl, wmma::layout_t dl,
                     int convert) {
  const bool is_tf32 = std::is_same<T, tf32>::value;
  const bool a_col = std::is_same<LA, wmma::col_major>::value;
  const bool b_col = std::is_same<LB, wmma::col_major>::value;
  const bool c_col = cl == wmma::mem_col_major, d_col = dl == wmma::mem_col_major;
  const unsigned pad = is_tf32 ? 4 : 8; /* ldm wider than the tile by 16 bytes */
  unsigned lda = (a_col ? M : K) + pad, ldb = (b_col ? K : N) + pad;
  unsigned ldc = (c_col ? M : N) + 4, ldd = (d_col ? M : N) + 4;
  std::vector<float> A(M * K), B(K * N), C(M * N);
  for (int r = 0; r < M; r++)
    for (int k = 0; k < K; k++)
      A[r * K + k] = is_tf32 ? next_unit() : (float)((r * 7 + k * 3) % 17 - 8) / 4.0f;
  for (int k = 0; k < K; k++)
    for (int c = 0; c < N; c++)
      B[k * N + c] = is_tf32 ? next_unit() : (float)((k * 5 + c * 11) % 13 - 6) / 8.0f;
  for (int i = 0; i < M * N; i++) C[i] = is_tf32 ? next_unit() : (float)(i % 9 - 4);
  /* the memory images, padding NaN */
  std::vector<MT> am((size_t)(a_col ? K : M) * lda), bm((size_t)(b_col ? N : K) * ldb);
  std::vector<float> cm((size_t)(c_col ? N : M) * ldc), dm((size_t)(d_col ? N : M) * ldd);
  memset(am.data(), 0xff, am.size() * sizeof(MT));
  memset(bm.data(), 0xff, bm.size() * sizeof(MT));
  memset(cm.data(), 0xff, cm.size() * sizeof(float));
  for (int r = 0; r < M; r++)
    for (int k = 0; k < K; k++) put(am[a_col ? k * lda + r : r * lda + k], A[r * K + k]);
  for (int k = 0; k < K; k++)
    for (int c = 0; c < N; c++) put(bm[b_col ? c * ldb + k : k * ldb + c], B[k * N + c]);
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) cm[c_col ? c * ldc + r : r * ldc + c] = C[r * N + c];
  MT *da = NULL, *db = NULL;
  float *dc = NULL, *dd = NULL;
  cudaMalloc(&da, am.size() * sizeof(MT));
  cudaMalloc(&db, bm.size() * sizeof(MT));
  cudaMalloc(&dc, cm.size() * sizeof(float));
  cudaMalloc(&dd, dm.size() * sizeof(float));
  cudaMemcpy(da, am.data(), am.size() * sizeof(MT), cudaMemcpyHostToDevice);
  cudaMemcpy(db, bm.data(), bm.size() * sizeof(MT), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, cm.data(), cm.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(dd, 0xff, dm.size() * sizeof(float));
  tile_kernel<M, N, K, T, MT, LA, LB><<<1, 32>>>(dd, da, db, dc, lda, ldb, ldc, ldd, load_c, cl, dl,
                                                 convert);
  cudaError_t err = cudaDeviceSynchronize();
  cudaMemcpy(dm.data(), dd, dm.size() * sizeof(float), cudaMemcpyDeviceToHost);
  double worst = 0.0;
  bool ok = err == cudaSuccess, pad_ok = true;
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) {
      double s = load_c ? C[r * N + c] : 0.0, mag = fabs(s);
      for (int k = 0; k < K; k++) {
        float x = A[r * K + k], y = B[k * N + c];
        if (is_tf32) {
          x = tf32_ref(x, convert != 0);
          y = tf32_ref(y, convert != 0);
        }
        s += (double)x * y;
        mag += fabs((double)x * y);
      }
      float got = dm[d_col ? c * ldd + r : r * ldd + c];
      double e = fabs(got - s);
      if (!(e <= 1e-6 * mag)) ok = false;
      if (e > worst) worst = e;
    }
  for (size_t i = 0; i < dm.size(); i++) /* past the tile's rows (or columns): untouched */
    if (i % ldd >= (size_t)(d_col ? M : N) && !nan_bits(dm[i])) pad_ok = false;
  char b[256];
  snprintf(b, sizeof b, "%s: %s (max |error| %.3g)", name, cudaGetErrorName(err), worst);
  check(ok, b);
  snprintf(b, sizeof b, "%s: the store leaves the padding of d alone", name);
  check(pad_ok, b);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dd);
}

static void test_tiles(void) {
  using wmma::col_major;
  using wmma::mem_col_major;
  using wmma::mem_row_major;
  using wmma::row_major;
  typedef __nv_bfloat16 bf;
  run_tile<16, 16, 16, bf, bf, row_major, col_major>("bf16 m16n16k16, a row_major, b col_major", 0,
                                                     mem_row_major, mem_row_major, 0);
  run_tile<16, 16, 16, bf, bf, row_major, row_major>("bf16 m16n16k16, a row_major, b row_major", 0,
                                                     mem_row_major, mem_row_major, 0);
  run_tile<16, 16, 16, bf, bf, col_major, col_major>("bf16 m16n16k16, a col_major, b col_major", 0,
                                                     mem_row_major, mem_row_major, 0);
  run_tile<16, 16, 16, bf, bf, col_major, row_major>("bf16 m16n16k16, a col_major, b row_major", 0,
                                                     mem_row_major, mem_row_major, 0);
  run_tile<16, 16, 16, bf, bf, row_major, col_major>(
      "bf16 m16n16k16 + c loaded mem_row_major, d stored mem_col_major", 1, mem_row_major,
      mem_col_major, 0);
  run_tile<16, 16, 16, bf, bf, col_major, row_major>(
      "bf16 m16n16k16 + c loaded mem_col_major, d stored mem_row_major", 1, mem_col_major,
      mem_row_major, 0);
  run_tile<32, 8, 16, bf, bf, row_major, col_major>("bf16 m32n8k16 + c", 1, mem_row_major,
                                                    mem_row_major, 0);
  run_tile<8, 32, 16, bf, bf, col_major, row_major>("bf16 m8n32k16 + c", 1, mem_col_major,
                                                    mem_col_major, 0);
  run_tile<16, 16, 8, tf32, float, row_major, col_major>(
      "tf32 m16n16k8 with __float_to_tf32 + c mem_row_major", 1, mem_row_major, mem_row_major, 1);
  run_tile<16, 16, 8, tf32, float, col_major, row_major>(
      "tf32 m16n16k8 with __float_to_tf32 + c mem_col_major", 1, mem_col_major, mem_col_major, 1);
  run_tile<16, 16, 8, tf32, float, row_major, row_major>(
      "tf32 m16n16k8 unconverted: the low 13 bits are ignored", 0, mem_row_major, mem_row_major, 0);
}

static void test_float_to_tf32(void) {
  const float u = 1.0f / 1024.0f; /* a tf32 ulp at 1 */
  struct {
    float in, want;
    const char *what;
  } cases[] = {{1.0f + u / 2, 1.0f + u, "1 + ulp/2: a tie rounds away from zero"},
               {-(1.0f + u / 2), -(1.0f + u), "-(1 + ulp/2): away from zero"},
               {1.0f + u / 2 - 1.0f / 8388608.0f, 1.0f, "just below the tie: down"},
               {1.0f + 1.5f * u, 1.0f + 2 * u, "1 + 1.5 ulp: up"},
               {1.0f + u, 1.0f + u, "1 + ulp: exact"},
               {3.0e-39f, tf32_ref(3.0e-39f, true), "a subnormal"},
               {INFINITY, INFINITY, "+inf"}};
  const int n = (int)(sizeof cases / sizeof cases[0]);
  std::vector<float> in((size_t)n + 1), out((size_t)n + 1);
  for (int i = 0; i < n; i++) in[(size_t)i] = cases[i].in;
  in[(size_t)n] = NAN;
  float *d = NULL;
  cudaMalloc(&d, 2 * in.size() * sizeof(float));
  cudaMemcpy(d, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice);
  tf32_kernel<<<1, 32>>>(d + in.size(), d, n + 1);
  cudaMemcpy(out.data(), d + in.size(), out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) {
    char b[160];
    snprintf(b, sizeof b, "__float_to_tf32(%s): %.9g (want %.9g)", cases[i].what,
             (double)out[(size_t)i], (double)cases[i].want);
    check(out[(size_t)i] == cases[i].want, b);
  }
  check(isnan(out[(size_t)n]), "__float_to_tf32(NaN) is NaN");
  cudaFree(d);
}

static void test_elementwise(void) {
  float *d = NULL;
  cudaMalloc(&d, 512 * sizeof(float));
  elementwise_kernel<<<1, 32>>>(d, d + 256);
  std::vector<float> h(512);
  cudaError_t err = cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost);
  std::vector<int> seen(256, 0);
  bool perm = err == cudaSuccess;
  for (int i = 0; i < 256; i++) {
    float v = h[(size_t)i];
    if (!(v >= 0.0f && v < 256.0f) || seen[(size_t)v]++) perm = false;
  }
  check(perm, "an accumulator's 32 lanes × num_elements cover the 16×16 tile once each");
  bool twice = true;
  for (int i = 256; i < 512; i++) twice = twice && h[(size_t)i] == 34.0f;
  check(twice, "fill_fragment and x[i] element by element: 2·(ones·ones + 1) = 34");
  cudaFree(d);
}

static void test_shared(void) {
  std::vector<__nv_bfloat16> a(256), b(256);
  std::vector<float> A(256), B(256), C(256), D(256);
  for (int i = 0; i < 256; i++) {
    A[(size_t)i] = (float)(i % 11 - 5) / 2.0f; /* row-major */
    B[(size_t)i] = (float)(i % 7 - 3);         /* column-major */
    C[(size_t)i] = (float)(i % 5);             /* column-major */
    a[(size_t)i] = __float2bfloat16_rn(A[(size_t)i]);
    b[(size_t)i] = __float2bfloat16_rn(B[(size_t)i]);
  }
  __nv_bfloat16 *da = NULL;
  float *dc = NULL;
  cudaMalloc(&da, 512 * sizeof(__nv_bfloat16));
  cudaMalloc(&dc, 512 * sizeof(float));
  cudaMemcpy(da, a.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cudaMemcpy(da + 256, b.data(), 256 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, C.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
  shared_kernel<<<1, 32>>>(dc + 256, da, da + 256, dc);
  cudaError_t err = cudaMemcpy(D.data(), dc + 256, 256 * sizeof(float), cudaMemcpyDeviceToHost);
  bool ok = err == cudaSuccess;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++) {
      double s = C[(size_t)(c * 16 + r)];
      for (int k = 0; k < 16; k++) s += (double)A[(size_t)(r * 16 + k)] * B[(size_t)(c * 16 + k)];
      ok = ok && fabs(D[(size_t)(r * 16 + c)] - s) <= 1e-6 * fabs(s);
    }
  check(ok, "operands and accumulator in shared memory (padded rows, c mem_col_major)");
  cudaFree(da);
  cudaFree(dc);
}

static void test_tiled(void) {
  const int n = TL_N, nb = 2; /* two blocks, one product each */
  std::vector<__nv_bfloat16> ab((size_t)nb * n * n), bb((size_t)nb * n * n);
  std::vector<float> A(ab.size()), B(bb.size()), D(ab.size());
  for (size_t i = 0; i < A.size(); i++) {
    A[i] = (float)((int)(i * 13 % 23) - 11) / 8.0f;
    B[i] = (float)((int)(i * 7 % 19) - 9) / 4.0f;
    ab[i] = __float2bfloat16_rn(A[i]);
    bb[i] = __float2bfloat16_rn(B[i]);
  }
  __nv_bfloat16 *da = NULL, *db = NULL;
  float *dd = NULL;
  cudaMalloc(&da, ab.size() * sizeof(__nv_bfloat16));
  cudaMalloc(&db, bb.size() * sizeof(__nv_bfloat16));
  cudaMalloc(&dd, D.size() * sizeof(float));
  cudaMemcpy(da, ab.data(), ab.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  cudaMemcpy(db, bb.data(), bb.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
  for (int staged = 1; staged >= 0; staged--) {
    cudaMemset(dd, 0xff, D.size() * sizeof(float));
    tiled_kernel<<<nb, 128>>>(dd, da, db, staged);
    cudaError_t err = cudaMemcpy(D.data(), dd, D.size() * sizeof(float), cudaMemcpyDeviceToHost);
    bool ok = err == cudaSuccess;
    for (int p = 0; p < nb; p++)
      for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
          size_t o = (size_t)p * n * n;
          double s = 0.0;
          for (int k = 0; k < n; k++) s += (double)A[o + r * n + k] * B[o + k * n + c];
          ok = ok && fabs(D[o + r * n + c] - s) <= 1e-6 * fabs(s);
        }
    check(ok, staged ? "64x64 product, 4 warps, operands staged in shared memory (2 blocks)"
                     : "64x64 product, 4 warps, operands from global memory, ldm 64 (2 blocks)");
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
}

#ifdef TD_CUDAEMU
/* A launch that must fail: cudaErrorLaunchFailure, and the emulator's
 * message (stderr, captured) containing each of `want`. */
template <class Launch>
static void expect_refusal(const char *what, Launch launch, std::vector<std::string> want) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  launch();
  cudaError_t err = cudaDeviceSynchronize();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string msg;
  rewind(tmp);
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, tmp)) > 0) msg.append(buf, got);
  fclose(tmp);
  printf("     | %s", msg.c_str());
  char b[256];
  snprintf(b, sizeof b, "%s: %s (want cudaErrorLaunchFailure)", what, cudaGetErrorName(err));
  check(err == cudaErrorLaunchFailure, b);
  for (const std::string &w : want) {
    snprintf(b, sizeof b, "%s: the message says \"%s\"", what, w.c_str());
    check(msg.find(w) != std::string::npos, b);
  }
  cudaDeviceReset();
  cudaGetLastError();
}

/* Device buffers for a refusal (fresh after each cudaDeviceReset): two
 * 16×16 bf16 tiles in one allocation of 512, a 16×16 float tile. */
struct Bufs {
  __nv_bfloat16 *a, *b;
  float *d;
};
static Bufs bufs(void) {
  Bufs r;
  cudaMalloc(&r.a, 512 * sizeof(__nv_bfloat16));
  cudaMalloc(&r.d, 1024 * sizeof(float));
  cudaMemset(r.a, 0, 512 * sizeof(__nv_bfloat16));
  r.b = r.a + 256;
  return r;
}

static void test_refusals(void) {
  expect_refusal("a pointer 16 bytes off a 32-byte boundary",
                 [] { misaligned_kernel<<<1, 32>>>(bufs().a); },
                 {"kernel misaligned_kernel", "wmma::load_matrix_sync at ", "test_wmma.cu:",
                  "is not 256-bit (32-byte) aligned"});
  expect_refusal("bf16 load with ldm 17", [] {
    Bufs m = bufs();
    bad_ldm_kernel<<<1, 32>>>(m.a, m.d, 0);
  }, {"wmma::load_matrix_sync at ", "ldm 17 is not a multiple of 8 elements of __nv_bfloat16"});
  expect_refusal("float store with ldm 17", [] {
    Bufs m = bufs();
    bad_ldm_kernel<<<1, 32>>>(m.a, m.d, 1);
  }, {"wmma::store_matrix_sync at ", "ldm 17 is not a multiple of 4 elements of float"});
  expect_refusal("lanes with different pointers",
                 [] { different_pointers_kernel<<<1, 32>>>(bufs().a); },
                 {"kernel different_pointers_kernel", "lane 16 calls wmma::load_matrix_sync(",
                  "while lane 0 calls wmma::load_matrix_sync(",
                  "every lane of the warp must make the same call with the same arguments"});
  expect_refusal("a lane that skips a load", [] {
    Bufs m = bufs();
    skip_kernel<<<1, 32>>>(m.a, m.b, m.d);
  }, {"lane 5 calls wmma::load_matrix_sync(matrix_b",
      "while lane 0 calls wmma::load_matrix_sync(matrix_a"});
  expect_refusal("a lane that skips a store for the barrier",
                 [] { skip_to_barrier_kernel<<<1, 64>>>(bufs().d); },
                 {"deadlock: 31 threads in wmma::store_matrix_sync(", "33 threads in __syncthreads at"});
  expect_refusal("a lane that has exited", [] { exited_lane_kernel<<<1, 32>>>(bufs().d); },
                 {"wmma::mma_sync(m16n16k16 __nv_bfloat16, a row_major, b col_major) at ",
                  "is reached by 31 of the warp's 32 lanes (lanes 0x00000080 have exited)"});
  expect_refusal("a block of 48 threads", [] { partial_warp_kernel<<<1, 48>>>(bufs().d); },
                 {"warp 1: wmma::store_matrix_sync(",
                  "is reached by 16 of the warp's 32 lanes (lanes 0xffff0000 do not exist"});
  expect_refusal("a tile past its allocation", [] { past_end_kernel<<<1, 32>>>(bufs().a + 256); },
                 {"the 16x16 matrix at", "(ldm 32, 992 bytes) does not lie inside one device "
                                         "allocation"});
  expect_refusal("host memory", [] { host_memory_kernel<<<1, 32>>>(bufs().d); },
                 {"is not in device, pinned or this block's shared memory"});
}
#endif

int main(void) {
  setenv("TD_CUDAEMU_MEM_MB", "64", 1);
  test_tiles();
  test_float_to_tf32();
  test_elementwise();
  test_shared();
  test_tiled();
#ifdef TD_CUDAEMU
  test_refusals();
#endif
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
