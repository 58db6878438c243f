/* backend.cu — the CUDA back-end: its ops table, device memory, the stream,
 * the shared workspace, the error texts of CUDA and cuBLAS calls, and
 * td_kernels_cuda_create. Every op runs on one stream in issue order, so a
 * kernel sees the results of the ops queued before it; only to_host, sumsq
 * and sync wait for the device. The CPU back-end is the reference these
 * kernels are tested against (tests/unit/test_kernels_cuda.c). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define TD_CUDA_LT_WORKSPACE (32u << 20) /* cuBLASLt workspace: 32 MiB (Hopper) */

/* One live allocation, for the byte count its free takes back. */
typedef struct {
  void *p;
  size_t bytes;
} cuda_block;

/* The allocations of one back-end (few: the model, the ZeRO engine, the
 * pipeline buffers, the workspaces), searched linearly on free. */
typedef struct {
  cuda_block *v;
  int64_t n, cap;
} cuda_blocks;

typedef struct {
  td_cuda_state s;
  cuda_blocks blocks;
  cudaStream_t copy; /* to_host_async's stream (made on first use) */
  cudaEvent_t queued; /* the compute stream's work a copy waits for */
} cuda_backend;

td_status td_cuda_fail(cudaError_t e, const char *call, const char *file, int line,
                       const char *func) {
  return td_error_set(TD_ERR_CUDA, file, line, func, "%s failed: %s (%s)", call,
                      cudaGetErrorString(e), cudaGetErrorName(e));
}

td_status td_cublas_fail(cublasStatus_t e, const char *call, const char *file, int line,
                         const char *func) {
  return td_error_set(TD_ERR_CUDA, file, line, func, "%s failed: %s", call,
                      cublasLtGetStatusString(e));
}

td_status td_cuda_blocks(int64_t n, int threads, const char *what, unsigned *out) {
  int64_t b = (n + threads - 1) / threads;
  *out = 0;
  TD_REQUIRE(n >= 0, TD_ERR_USAGE, "%s: element count %lld < 0", what, (long long)n);
  TD_REQUIRE(b <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED,
             "%s: %lld elements need %lld blocks of %d threads, more than the grid limit "
             "%lld",
             what, (long long)n, (long long)b, threads, (long long)TD_CUDA_MAX_GRID);
  *out = (unsigned)b;
  return TD_OK;
}

td_status td_cuda_rows_args(const char *op, int64_t N, int64_t C) {
  TD_REQUIRE(N >= 0 && C > 0, TD_ERR_USAGE, "%s: expected N >= 0, C > 0, got N=%lld C=%lld", op,
             (long long)N, (long long)C);
  TD_REQUIRE(N <= TD_CUDA_MAX_GRID, TD_ERR_UNSUPPORTED, "%s: %lld rows exceed the grid limit",
             op, (long long)N);
  return TD_OK;
}

static cuda_backend *cuda_be(td_kernels *k) { return (cuda_backend *)k->state; }

/* Device memory, zeroed; the bytes are counted for the metrics' peak. */
static td_status cuda_alloc(td_kernels *k, void **out, size_t bytes, const char *what) {
  cuda_backend *be = cuda_be(k);
  td_cuda_state *s = &be->s;
  void *p = NULL;
  *out = NULL;
  if (bytes == 0) bytes = 1;
  if (be->blocks.n == be->blocks.cap) {
    int64_t cap = be->blocks.cap ? 2 * be->blocks.cap : 64;
    cuda_block *v = (cuda_block *)realloc(be->blocks.v, (size_t)cap * sizeof *v);
    TD_REQUIRE(v != NULL, TD_ERR_NOMEM, "CUDA back-end: no host memory to track allocations");
    be->blocks.v = v;
    be->blocks.cap = cap;
  }
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError(); /* clear the sticky-free allocation error */
    cudaMemGetInfo(&free_b, &total_b);
    TD_FAIL(TD_ERR_NOMEM,
            "CUDA back-end: cannot allocate %zu bytes of device memory for %s (%s; device %d "
            "has %zu of %zu bytes free, %zu allocated by trident)",
            bytes, what, cudaGetErrorString(e), s->device, free_b, total_b, s->bytes_now);
  }
  e = cudaMemsetAsync(p, 0, bytes, s->stream);
  if (e != cudaSuccess) {
    cudaFree(p);
    return td_cuda_fail(e, "cudaMemsetAsync", __FILE__, __LINE__, __func__);
  }
  be->blocks.v[be->blocks.n].p = p;
  be->blocks.v[be->blocks.n].bytes = bytes;
  be->blocks.n++;
  s->bytes_now += bytes;
  if (s->bytes_now > s->bytes_peak) s->bytes_peak = s->bytes_now;
  *out = p;
  return TD_OK;
}

/* Frees wait for the stream: the memory may still be read by queued work. */
static void cuda_free(td_kernels *k, void *p) {
  if (!p) return;
  cuda_backend *be = cuda_be(k);
  cudaStreamSynchronize(be->s.stream);
  for (int64_t i = 0; i < be->blocks.n; i++) {
    if (be->blocks.v[i].p != p) continue;
    be->s.bytes_now -= be->blocks.v[i].bytes;
    be->blocks.v[i] = be->blocks.v[--be->blocks.n];
    break;
  }
  cudaFree(p);
}

/* Pinned host memory (the optimizer's offloaded state), zeroed. Not counted
 * as device memory. */
static td_status cuda_host_alloc(td_kernels *k, void **out, size_t bytes, const char *what) {
  (void)k;
  void *p = NULL;
  *out = NULL;
  if (bytes == 0) bytes = 1;
  cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    TD_FAIL(TD_ERR_NOMEM, "CUDA back-end: cannot allocate %zu bytes of pinned host memory for %s (%s)",
            bytes, what, cudaGetErrorString(e));
  }
  memset(p, 0, bytes);
  *out = p;
  return TD_OK;
}

/* Waits for the stream: a queued copy may still read the memory. */
static void cuda_host_free(td_kernels *k, void *p) {
  if (!p) return;
  cudaStreamSynchronize(td_cuda_st(k)->stream);
  if (cuda_be(k)->copy) cudaStreamSynchronize(cuda_be(k)->copy);
  cudaFreeHost(p);
}

static td_status cuda_zero(td_kernels *k, void *p, size_t bytes) {
  if (bytes) TD_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, td_cuda_st(k)->stream));
  return TD_OK;
}

/* dst (host) = src (device); waits until the bytes have arrived. */
static td_status cuda_to_host(td_kernels *k, void *dst, const void *src, size_t bytes) {
  td_cuda_state *s = td_cuda_st(k);
  if (!bytes) return TD_OK;
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
  TD_CUDA_CHECK(cudaStreamSynchronize(s->stream));
  return TD_OK;
}

/* dst (device) = src (host); the host buffer may be reused on return (a
 * pageable source is staged before the call returns). */
static td_status cuda_to_device(td_kernels *k, void *dst, const void *src, size_t bytes) {
  td_cuda_state *s = td_cuda_st(k);
  if (!bytes) return TD_OK;
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
  return TD_OK;
}

/* dst (pinned host) = src (device) on the copy stream, once the work queued
 * on the compute stream so far is done; returns at once (host_wait waits). */
static td_status cuda_to_host_async(td_kernels *k, void *dst, const void *src, size_t bytes) {
  cuda_backend *be = cuda_be(k);
  if (!bytes) return TD_OK;
  if (!be->copy) {
    TD_CUDA_CHECK(cudaStreamCreateWithFlags(&be->copy, cudaStreamNonBlocking));
    TD_CUDA_CHECK(cudaEventCreateWithFlags(&be->queued, cudaEventDisableTiming));
  }
  TD_CUDA_CHECK(cudaEventRecord(be->queued, be->s.stream));
  TD_CUDA_CHECK(cudaStreamWaitEvent(be->copy, be->queued, 0));
  TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, be->copy));
  return TD_OK;
}

static td_status cuda_host_wait(td_kernels *k) {
  cuda_backend *be = cuda_be(k);
  if (be->copy) TD_CUDA_CHECK(cudaStreamSynchronize(be->copy));
  return TD_OK;
}

static td_status cuda_sync(td_kernels *k) {
  TD_CUDA_CHECK(cudaStreamSynchronize(td_cuda_st(k)->stream));
  return TD_OK;
}

td_status td_cuda_retire(td_cuda_state *s, void *p) {
  if (s->nretired == s->cap_retired) {
    int cap = s->cap_retired ? 2 * s->cap_retired : 8;
    void **v = (void **)realloc(s->retired, (size_t)cap * sizeof *v);
    if (!v) TD_FAIL(TD_ERR_NOMEM, "CUDA back-end: out of host memory");
    s->retired = v, s->cap_retired = cap;
  }
  s->retired[s->nretired++] = p;
  return TD_OK;
}

td_status td_cuda_scratch(td_kernels *k, size_t bytes, void **out) {
  td_cuda_state *s = td_cuda_st(k);
  *out = NULL;
  if (bytes > s->scratch_bytes) {
    if (s->scratch) { /* queued work may read it: retired, not freed (td_cuda_retire) */
      TD_CHECK(td_cuda_retire(s, s->scratch));
      s->scratch = NULL;
      s->scratch_bytes = 0;
    }
    size_t grow = bytes + bytes / 4; /* room for the next, slightly larger call */
    cudaError_t e = cudaMalloc(&s->scratch, grow);
    if (e != cudaSuccess) {
      cudaGetLastError();
      s->scratch = NULL;
      TD_FAIL(TD_ERR_NOMEM, "CUDA back-end: cannot allocate a %zu-byte workspace (%s)", grow,
              cudaGetErrorString(e));
    }
    s->scratch_bytes = grow;
    s->bytes_now += grow;
    if (s->bytes_now > s->bytes_peak) s->bytes_peak = s->bytes_now;
  }
  *out = s->scratch;
  return TD_OK;
}

static void cuda_destroy(td_kernels *k) {
  if (!k) return;
  cuda_backend *be = (cuda_backend *)k->state;
  if (be) {
    td_cuda_state *s = &be->s;
    if (s->stream) cudaStreamSynchronize(s->stream);
    if (be->copy) {
      cudaStreamSynchronize(be->copy);
      cudaStreamDestroy(be->copy);
      cudaEventDestroy(be->queued);
    }
    td_cuda_plans_clear(s);
    free(s->plans);
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->lt_ws) cudaFree(s->lt_ws);
    if (s->scratch) cudaFree(s->scratch);
    if (s->rope) cudaFree(s->rope);
    for (int i = 0; i < s->nretired; i++) cudaFree(s->retired[i]);
    free(s->retired);
    if (s->host_f64) cudaFreeHost(s->host_f64);
    for (int64_t i = 0; i < be->blocks.n; i++) cudaFree(be->blocks.v[i].p);
    free(be->blocks.v);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(be);
  }
  free(k);
}

size_t td_kernels_cuda_peak_bytes(const td_kernels *k) {
  return k && k->state ? ((const cuda_backend *)k->state)->s.bytes_peak : 0;
}

static size_t cuda_device_peak(td_kernels *k) { return td_kernels_cuda_peak_bytes(k); }

td_status td_kernels_cuda_create(int threads, td_kernels **out) {
  td_status st = TD_OK;
  td_kernels *k = NULL;
  cuda_backend *be = NULL;
  td_cuda_state *s = NULL;
  int ndev = 0;
  *out = NULL;
  (void)threads; /* host threads: the caller's OpenMP setting is left as is */
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess)
    TD_FAIL(TD_ERR_CUDA, "run.device: cuda, but no CUDA device is usable: %s (%s)",
            cudaGetErrorString(e), cudaGetErrorName(e));
  TD_REQUIRE(ndev > 0, TD_ERR_CUDA, "run.device: cuda, but no CUDA device is visible");

  k = (td_kernels *)calloc(1, sizeof *k);
  be = (cuda_backend *)calloc(1, sizeof *be);
  if (!k || !be) {
    free(be);
    be = NULL;
    TD_FAIL_GOTO(TD_ERR_NOMEM, "CUDA back-end: no host memory for its state");
  }
  k->state = be;
  s = &be->s;
  e = cudaGetDevice(&s->device);
  if (e != cudaSuccess) {
    st = td_cuda_fail(e, "cudaGetDevice", __FILE__, __LINE__, __func__);
    goto done;
  }
  e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    st = td_cuda_fail(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__, __func__);
    goto done;
  }
  {
    cublasStatus_t cs = cublasLtCreate(&s->lt);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      st = td_cublas_fail(cs, "cublasLtCreate", __FILE__, __LINE__, __func__);
      goto done;
    }
  }
  s->lt_ws_bytes = TD_CUDA_LT_WORKSPACE;
  e = cudaMalloc(&s->lt_ws, s->lt_ws_bytes);
  if (e != cudaSuccess) {
    s->lt_ws = NULL;
    st = td_cuda_fail(e, "cudaMalloc (cuBLASLt workspace)", __FILE__, __LINE__, __func__);
    goto done;
  }
  s->bytes_now = s->bytes_peak = s->lt_ws_bytes;
  e = cudaMallocHost((void **)&s->host_f64, sizeof(double));
  if (e != cudaSuccess) {
    s->host_f64 = NULL;
    st = td_cuda_fail(e, "cudaMallocHost", __FILE__, __LINE__, __func__);
    goto done;
  }
  s->nplans_buckets = 256;
  s->plans = (td_cuda_plan **)calloc((size_t)s->nplans_buckets, sizeof *s->plans);
  if (!s->plans) TD_FAIL_GOTO(TD_ERR_NOMEM, "CUDA back-end: no host memory for its plans");

  k->name = "cuda";
  k->matmul_name = "cublaslt";
  k->host_memory = 0;
  k->bf16_matmul = 2;
  k->alloc = cuda_alloc;
  k->free = cuda_free;
  k->zero = cuda_zero;
  k->host_alloc = cuda_host_alloc;
  k->host_free = cuda_host_free;
  k->to_host_async = cuda_to_host_async;
  k->host_wait = cuda_host_wait;
  k->to_host = cuda_to_host;
  k->to_device = cuda_to_device;
  k->sync = cuda_sync;
  k->cast = td_cuda_cast;
  k->copy2d = td_cuda_copy2d;
  k->gemm = td_cuda_gemm;
  k->bias_fwd = td_cuda_bias_fwd;
  k->bias_bwd = td_cuda_bias_bwd;
  k->embed_fwd = td_cuda_embed_fwd;
  k->embed_bwd = td_cuda_embed_bwd;
  k->layernorm_fwd = td_cuda_layernorm_fwd;
  k->layernorm_bwd = td_cuda_layernorm_bwd;
  k->attention_fwd = td_cuda_attention_fwd;
  k->attention_bwd = td_cuda_attention_bwd;
  k->rmsnorm_fwd = td_cuda_rmsnorm_fwd;
  k->rmsnorm_bwd = td_cuda_rmsnorm_bwd;
  k->rope = td_cuda_rope;
  k->swiglu_fwd = td_cuda_swiglu_fwd;
  k->swiglu_bwd = td_cuda_swiglu_bwd;
  k->gqa_fwd = td_cuda_gqa_fwd;
  k->gqa_bwd = td_cuda_gqa_bwd;
  k->flash_fwd = td_cuda_flash_fwd;
  k->flash_bwd = td_cuda_flash_bwd;
  k->gelu_fwd = td_cuda_gelu_fwd;
  k->gelu_bwd = td_cuda_gelu_bwd;
  k->add = td_cuda_add;
  k->scale = td_cuda_scale;
  k->sumsq = td_cuda_sumsq;
  k->xent_rowmax = td_cuda_xent_rowmax;
  k->xent_sumexp = td_cuda_xent_sumexp;
  k->xent_bwd = td_cuda_xent_bwd;
  k->adamw = td_cuda_adamw;
  k->moe_route = td_cuda_moe_route;
  k->moe_plan = td_cuda_moe_plan;
  k->moe_gather = td_cuda_moe_gather;
  k->moe_combine = td_cuda_moe_combine;
  k->moe_combine_bwd = td_cuda_moe_combine_bwd;
  k->moe_scatter = td_cuda_moe_scatter;
  k->moe_route_bwd = td_cuda_moe_route_bwd;
  k->device_peak = cuda_device_peak;
  td_cuda_dcomm_fill(k);
  k->destroy = cuda_destroy;
  *out = k;
  k = NULL;
done:
  cuda_destroy(k); /* NULL on success */
  return st;
}

int td_kernels_cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

td_status td_kernels_cuda_select(int ordinal) {
  TD_CUDA_CHECK(cudaSetDevice(ordinal));
  return TD_OK;
}

int td_kernels_cuda_info(int *sms, double *mem_bytes) {
  int dev = 0, n = 0;
  size_t fr = 0, tot = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  *sms = n, *mem_bytes = (double)tot;
  return 1;
}

