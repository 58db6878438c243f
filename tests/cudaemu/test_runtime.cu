/* test_runtime.cu — the emulated CUDA device's own checks (label cudaemu):
 * that it enforces what it claims to (tests/cudaemu/NOTES.md), written as
 * CUDA source and rewritten and compiled exactly like kernels/cuda.
 *   (no argument)  every check below, "N passed, M failed", exit 1 on any
 *                  failure:
 *     bf16 rounding; launch-configuration limits (cudaGetLastError);
 *     block barriers (a missing __syncthreads gives a wrong result, a
 *     barrier reached in divergent code or a deadlock is an error), exited
 *     threads counting as arrived; warp shuffles (idx, up, down, xor, width,
 *     ballot) and a mask without the caller's lane; uninitialised and
 *     oversized __shared__; stream order (a missing wait gives a wrong
 *     result; events, the legacy default stream and non-blocking streams
 *     order as CUDA documents); event and stream queries while pending;
 *     copy directions and ranges, cudaFree and cudaFreeHost misuse, a host
 *     pointer passed to a kernel (sticky error, cleared by cudaDeviceReset);
 *     cub::DeviceRadixSort::SortPairs (stable, bit range, temp storage);
 *     device count and memory size from the environment.
 *   host_access    reads device memory on the host: must die with
 *                  "cudaemu: host access to device memory".
 *   oob            a kernel writes one element past an allocation: must be
 *                  reported by AddressSanitizer (sanitizer builds only).
 * Runs with TD_CUDAEMU_DELAY_US=2000 (set below), so races show; where a
 * check needs work to be still pending, a host-function gate holds the
 * stream. */
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu_internal.h"

static int g_pass, g_fail;

static void check(bool ok, const char *what) {
  if (ok)
    g_pass++;
  else
    g_fail++;
  printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
  fflush(stdout);
}

static void check_err(cudaError_t got, cudaError_t want, const char *what) {
  char b[256];
  snprintf(b, sizeof b, "%s: %s (want %s)", what, cudaGetErrorName(got), cudaGetErrorName(want));
  check(got == want, b);
}

/* ---- kernels -------------------------------------------------------------------------- */

/* out[0] = Σ in over one block: shared partials per warp, then warp 0. With
 * `sync` 0 the barrier between writing and reading the partials is left
 * out (a race the scheduler must expose). */
__global__ void block_sum_kernel(float *out, const float *in, int n, int sync) {
  __shared__ float part[32];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  if (sync) __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < (blockDim.x + 31) / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    if (threadIdx.x == 0) out[blockIdx.x] = w;
  }
}

/* Threads of the upper half exit before the barrier: they count as arrived. */
__global__ void exit_early_kernel(int *out) {
  __shared__ int v;
  if (threadIdx.x >= blockDim.x / 2) return;
  if (threadIdx.x == 0) v = 42;
  __syncthreads();
  out[threadIdx.x] = v;
}

/* Half the block at one __syncthreads, half at another. */
__global__ void divergent_barrier_kernel(int *out) {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

/* Lane 0 waits at the barrier, lanes 1..31 in a shuffle that needs lane 0. */
__global__ void deadlock_kernel(float *out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x == 0)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

/* A shuffle whose mask leaves out the calling lane. */
__global__ void bad_mask_kernel(float *out) {
  float v = __shfl_xor_sync(0x0000fffeu, (float)threadIdx.x, 1);
  out[threadIdx.x] = v;
}

/* The shuffles' results, 6 per thread: idx(5), up(3), down(3), xor(1),
 * xor(8) with width 8 (a later group: own value), ballot of odd lanes. */
__global__ void shuffle_kernel(int *out) {
  int l = (int)threadIdx.x;
  int *o = out + 6 * l;
  o[0] = __shfl_sync(0xffffffffu, l, 5);
  o[1] = __shfl_up_sync(0xffffffffu, l, 3);
  o[2] = __shfl_down_sync(0xffffffffu, l, 3);
  o[3] = __shfl_xor_sync(0xffffffffu, l, 1);
  o[4] = __shfl_xor_sync(0xffffffffu, l, 8, 8);
  o[5] = (int)__ballot_sync(0xffffffffu, l & 1);
}

/* Reads a __shared__ value nobody wrote. */
__global__ void uninit_shared_kernel(float *out) {
  __shared__ float never_written[4];
  out[threadIdx.x] = never_written[threadIdx.x % 4];
}

/* More static shared memory than a block may have. */
__global__ void big_shared_kernel(float *out) {
  __shared__ float big[13000]; /* 52 000 bytes */
  big[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = big[(threadIdx.x + 1) % blockDim.x];
}

__global__ void fill_kernel(int *x, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

/* One element past the end (the oob mode). */
__global__ void past_end_kernel(float *x, int n) {
  if (threadIdx.x == 0) x[n] = 1.0f;
}

/* ---- checks ----------------------------------------------------------------------------- */

static void test_bf16(void) {
  struct {
    float f;
    unsigned short want;
    const char *what;
  } cases[] = {{1.0f, 0x3f80, "1"},
               {1.00390625f, 0x3f80, "1 + 2^-8: a tie rounds to even (down)"},
               {1.01171875f, 0x3f82, "1 + 3·2^-8: a tie rounds to even (up)"},
               {-0.0f, 0x8000, "-0"},
               {INFINITY, 0x7f80, "+inf"},
               {3.4028235e38f, 0x7f80, "FLT_MAX rounds to +inf"},
               {NAN, 0x7fff, "NaN: the canonical 0x7FFF"}};
  for (auto &c : cases) {
    char b[128];
    snprintf(b, sizeof b, "__float2bfloat16_rn(%s)", c.what);
    check(__float2bfloat16_rn(c.f).__x == c.want, b);
  }
  check(__bfloat162float(__float2bfloat16_rn(-2.5f)) == -2.5f, "__bfloat162float exact");
}

static void test_launch_limits(float *d) {
  struct {
    dim3 g, b;
    size_t shmem;
    cudaError_t want;
    const char *what;
  } cases[] = {
      {dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration, "1025 threads a block"},
      {dim3(1), dim3(32, 33), 0, cudaErrorInvalidConfiguration, "32x33 = 1056 threads"},
      {dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration, "block z 65"},
      {dim3(1), dim3(2048, 1, 1), 0, cudaErrorInvalidConfiguration, "block x 2048"},
      {dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration, "grid y 65536"},
      {dim3(1, 1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration, "grid z 65536"},
      {dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration, "grid x 0"},
      {dim3(1), dim3(32, 0), 0, cudaErrorInvalidConfiguration, "block y 0"},
      {dim3(1), dim3(32), 49153, cudaErrorInvalidValue, "49153 bytes of dynamic shared memory"},
  };
  for (auto &c : cases) {
    uninit_shared_kernel<<<c.g, c.b, c.shmem, 0>>>(d);
    char b[128];
    snprintf(b, sizeof b, "launch with %s fails", c.what);
    check_err(cudaGetLastError(), c.want, b);
  }
  check_err(cudaGetLastError(), cudaSuccess, "cudaGetLastError resets the last error");
  uninit_shared_kernel<<<dim3(2, 3, 2), dim3(32, 4, 8), 0, 0>>>(d);
  check_err(cudaPeekAtLastError(), cudaSuccess, "grid (2, 3, 2) of blocks (32, 4, 8): accepted");
  check_err(cudaDeviceSynchronize(), cudaSuccess, "and runs");
}

static void test_barriers(float *d_in, float *d_out, std::vector<float> &h) {
  const int n = 1000;
  std::vector<float> x((size_t)n);
  double want = 0.0;
  for (int i = 0; i < n; i++) want += (x[(size_t)i] = (float)(i % 7) - 3.0f);
  cudaMemcpy(d_in, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  for (int threads : {64, 256, 1024}) {
    block_sum_kernel<<<1, threads, 0, 0>>>(d_out, d_in, n, 1);
    cudaMemcpy(h.data(), d_out, sizeof(float), cudaMemcpyDeviceToHost);
    char b[128];
    snprintf(b, sizeof b, "block sum with the barrier, %d threads: %g (want %g)", threads,
             (double)h[0], want);
    check(h[0] == (float)want, b);
  }
  int wrong = 0;
  for (int r = 0; r < 5; r++) {
    block_sum_kernel<<<1, 256, 0, 0>>>(d_out, d_in, n, 0);
    cudaMemcpy(h.data(), d_out, sizeof(float), cudaMemcpyDeviceToHost);
    wrong += !(h[0] == (float)want);
  }
  char b[128];
  snprintf(b, sizeof b, "block sum without the barrier: wrong in %d of 5 launches", wrong);
  check(wrong > 0, b);

  int *di = (int *)d_out;
  exit_early_kernel<<<1, 64, 0, 0>>>(di);
  std::vector<int> hi(64);
  check_err(cudaMemcpy(hi.data(), di, 32 * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess,
            "threads that exit count as arrived at __syncthreads");
  bool all = true;
  for (int i = 0; i < 32; i++) all = all && hi[(size_t)i] == 42;
  check(all, "the threads past the barrier see the shared value");
}

/* A kernel that must fail: the sticky error at the next synchronisation,
 * then cudaDeviceReset for the next check. */
template <class Launch>
static void expect_kernel_failure(const char *what, Launch launch, cudaError_t want) {
  launch();
  check_err(cudaGetLastError(), cudaSuccess, (std::string(what) + ": the launch itself is accepted").c_str());
  check_err(cudaDeviceSynchronize(), want, (std::string(what) + ": fails when it runs").c_str());
  void *p = NULL;
  check_err(cudaMalloc(&p, 16), want, (std::string(what) + ": the error is sticky").c_str());
  check_err(cudaDeviceReset(), cudaSuccess, "cudaDeviceReset");
  check_err(cudaGetLastError(), cudaSuccess, "no error after the reset");
}

static void test_kernel_errors(void) {
  float *d = NULL;
  cudaMalloc(&d, 4096);
  expect_kernel_failure("threads at different __syncthreads",
                        [&] { divergent_barrier_kernel<<<1, 64, 0, 0>>>((int *)d); },
                        cudaErrorLaunchFailure);
  cudaMalloc(&d, 4096);
  expect_kernel_failure("a barrier/shuffle deadlock", [&] { deadlock_kernel<<<1, 32, 0, 0>>>(d); },
                        cudaErrorLaunchFailure);
  cudaMalloc(&d, 4096);
  expect_kernel_failure("a shuffle mask without the calling lane",
                        [&] { bad_mask_kernel<<<1, 32, 0, 0>>>(d); }, cudaErrorLaunchFailure);
  cudaMalloc(&d, 4096);
  expect_kernel_failure("52 000 bytes of static __shared__",
                        [&] { big_shared_kernel<<<1, 64, 0, 0>>>(d); }, cudaErrorLaunchFailure);
  static float host_buf[64];
  expect_kernel_failure("a host pointer as a kernel argument",
                        [&] { uninit_shared_kernel<<<1, 32, 0, 0>>>(host_buf); },
                        cudaErrorIllegalAddress);
}

static void test_shuffles_and_shared(void) {
  int *d = NULL;
  cudaMalloc(&d, 32 * 6 * sizeof(int));
  shuffle_kernel<<<1, 32, 0, 0>>>(d);
  std::vector<int> h(32 * 6);
  cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
  bool idx = true, up = true, down = true, x1 = true, ballot = true;
  for (int l = 0; l < 32; l++) {
    const int *o = &h[(size_t)(6 * l)];
    idx = idx && o[0] == 5;
    up = up && o[1] == (l >= 3 ? l - 3 : l);
    down = down && o[2] == (l + 3 < 32 ? l + 3 : l);
    x1 = x1 && o[3] == (l ^ 1);
    ballot = ballot && (unsigned)o[5] == 0xaaaaaaaau;
  }
  bool x8ok = true; /* l ^ 8 lies in the other group of 8: a later one gives l */
  for (int l = 0; l < 32; l++) {
    int src = l ^ 8, base = l & ~7;
    int want = src >= base + 8 ? l : src;
    x8ok = x8ok && h[(size_t)(6 * l + 4)] == want;
  }
  check(idx, "__shfl_sync(srcLane 5)");
  check(up, "__shfl_up_sync(3): lanes below 3 keep their value");
  check(down, "__shfl_down_sync(3): lanes from 29 keep their value");
  check(x1, "__shfl_xor_sync(1)");
  check(x8ok, "__shfl_xor_sync(8, width 8): later groups give the caller's own value");
  check(ballot, "__ballot_sync(odd lanes) = 0xaaaaaaaa");

  float *f = (float *)d;
  uninit_shared_kernel<<<1, 32, 0, 0>>>(f);
  std::vector<float> hf(32);
  cudaMemcpy(hf.data(), f, 32 * sizeof(float), cudaMemcpyDeviceToHost);
  check(isnan(hf[0]) && isnan(hf[31]), "uninitialised __shared__ reads NaN");
  cudaFree(d);
}

/* A gate on a stream: a host function that holds the stream's queue until
 * the host opens it, so that "this work is still pending" is certain, not a
 * matter of timing. */
static volatile int g_gate_open;
static void gate_fn(void *) {
  while (!g_gate_open) usleep(200);
}
static void gate_close(cudaStream_t s) {
  g_gate_open = 0;
  cudaLaunchHostFunc(s, gate_fn, NULL);
}
static void gate_open(void) { g_gate_open = 1; }

static void test_streams(void) {
  const int n = 4096;
  int *d = NULL;
  std::vector<int> h((size_t)n);
  cudaMalloc(&d, n * sizeof(int));
  cudaStream_t nb, blocking;
  cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
  cudaStreamCreate(&blocking);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);

  /* a missing wait: the kernel on a non-blocking stream (held back by the
   * gate) races with a copy on stream 0, which does not wait for it */
  cudaMemset(d, 0, n * sizeof(int));
  cudaDeviceSynchronize();
  gate_close(nb);
  fill_kernel<<<n / 256, 256, 0, nb>>>(d, 7, n);
  cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  check(h[0] != 7, "no wait for a non-blocking stream: stream 0's copy reads the old values");
  check_err(cudaStreamQuery(nb), cudaErrorNotReady, "cudaStreamQuery while work is pending");
  gate_open();
  cudaStreamSynchronize(nb);
  check_err(cudaStreamQuery(nb), cudaSuccess, "cudaStreamQuery after cudaStreamSynchronize");

  /* the same with an event wait: right */
  gate_close(nb);
  fill_kernel<<<n / 256, 256, 0, nb>>>(d, 8, n);
  cudaEventRecord(ev, nb);
  check_err(cudaEventQuery(ev), cudaErrorNotReady, "cudaEventQuery while the record is pending");
  cudaStreamWaitEvent(0, ev, 0);
  gate_open(); /* (the copy below waits for the kernel through the event) */
  cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  check(h[0] == 8 && h[n - 1] == 8, "stream 0 waiting for the event: the copy sees the kernel");
  check_err(cudaEventQuery(ev), cudaSuccess, "cudaEventQuery after the wait");

  /* a blocking stream: stream 0's copy waits for it implicitly (slowed by
   * TD_CUDAEMU_DELAY_US, so a copy that did not wait would read old values) */
  for (int i = 0; i < 10; i++) cudaMemsetAsync(d + n - 1, 0, sizeof(int), blocking);
  fill_kernel<<<n / 256, 256, 0, blocking>>>(d, 9, n);
  cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost);
  check(h[0] == 9 && h[n - 1] == 9, "a blocking stream: stream 0's copy waits for it");

  /* and stream 0's work is waited for by later work on a blocking stream */
  fill_kernel<<<n / 256, 256, 0, 0>>>(d, 10, n);
  cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, blocking);
  cudaStreamSynchronize(blocking);
  check(h[0] == 10, "a blocking stream waits for stream 0's kernel");

  /* an asynchronous copy to pageable memory is not done before a sync */
  gate_close(nb);
  fill_kernel<<<n / 256, 256, 0, nb>>>(d, 11, n);
  h[0] = -1;
  cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, nb);
  bool early = h[0] == -1;
  gate_open();
  cudaStreamSynchronize(nb);
  check(early && h[0] == 11, "cudaMemcpyAsync lands only when the stream gets to it");

  cudaEventDestroy(ev);
  cudaStreamDestroy(nb);
  cudaStreamDestroy(blocking);
  check_err(cudaStreamSynchronize(nb), cudaErrorInvalidResourceHandle, "a destroyed stream");
  cudaFree(d);
}

static void test_memory_rules(void) {
  float *d = NULL, *p = NULL;
  std::vector<float> h(64);
  cudaMalloc(&d, 64 * sizeof(float));
  check(((uintptr_t)d & 255) == 0, "cudaMalloc is 256-byte aligned");
  check(cudaemu::where(d, 64 * sizeof(float)) == 0 && cudaemu::where(h.data(), 4) == -1 &&
            cudaemu::where(d + 60, 32) == -2,
        "cudaemu::where: device, host, past the end");
  check_err(cudaMemcpy(h.data(), d, 64 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue, "cudaMemcpyHostToDevice from device to host memory");
  check_err(cudaMemcpy(d, h.data(), 65 * sizeof(float), cudaMemcpyHostToDevice),
            cudaErrorInvalidValue, "a copy past the allocation's end");
  check_err(cudaMemsetAsync(h.data(), 0, 16, 0), cudaErrorInvalidValue, "cudaMemsetAsync on host memory");
  check_err(cudaMemcpy(d, h.data(), 64 * sizeof(float), cudaMemcpyDefault), cudaSuccess,
            "cudaMemcpyDefault infers host to device");
  check_err(cudaFree(h.data()), cudaErrorInvalidValue, "cudaFree of host memory");
  check_err(cudaFreeHost(h.data()), cudaErrorInvalidValue, "cudaFreeHost of pageable memory");
  check_err(cudaMallocHost(&p, 256), cudaSuccess, "cudaMallocHost");
  check_err(cudaFreeHost(p), cudaSuccess, "cudaFreeHost of pinned memory");
  check_err(cudaFree(d), cudaSuccess, "cudaFree");
  check_err(cudaFree(d), cudaErrorInvalidValue, "cudaFree twice");
  check(cudaemu::where(d, 4) == -2, "cudaemu::where: freed device memory");
  size_t fr = 0, tot = 0;
  cudaMemGetInfo(&fr, &tot);
  check(tot == (size_t)256 << 20, "cudaMemGetInfo: TD_CUDAEMU_MEM_MB=256");
  check_err(cudaMalloc(&d, (size_t)300 << 20), cudaErrorMemoryAllocation, "more than the device has");
  cudaGetLastError();
  int count = 0;
  cudaGetDeviceCount(&count);
  check(count == 3, "cudaGetDeviceCount: the launcher's MPI_LOCALNRANKS=3");
  check_err(cudaSetDevice(3), cudaErrorInvalidDevice, "cudaSetDevice(3) of 3");
  cudaSetDevice(2);
  cudaMalloc(&d, 64);
  check(cudaemu::where(d, 64) == 2, "memory of device 2");
  cudaFree(d);
  cudaSetDevice(0);
}

static void test_cub(void) {
  const int n = 1000;
  std::vector<unsigned> keys((size_t)n), vals((size_t)n), ko((size_t)n), vo((size_t)n);
  for (int i = 0; i < n; i++) {
    keys[(size_t)i] = (unsigned)((i * 7919) % 13) | (i % 2 ? 0x100u : 0u); /* bit 8: noise */
    vals[(size_t)i] = (unsigned)i;
  }
  unsigned *d = NULL;
  cudaMalloc(&d, 4 * n * sizeof(unsigned));
  unsigned *dk = d, *dv = d + n, *dko = d + 2 * n, *dvo = d + 3 * n;
  cudaMemcpy(dk, keys.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
  cudaMemcpy(dv, vals.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
  size_t bytes = 0;
  check_err(cub::DeviceRadixSort::SortPairs(NULL, bytes, (const unsigned *)NULL, (unsigned *)NULL,
                                            (const unsigned *)NULL, (unsigned *)NULL, n, 0, 4),
            cudaSuccess, "SortPairs size query");
  void *tmp = NULL;
  cudaMalloc(&tmp, bytes);
  size_t less = bytes - 1;
  check_err(cub::DeviceRadixSort::SortPairs(tmp, less, dk, dko, dv, dvo, n, 0, 4),
            cudaErrorInvalidValue, "SortPairs with one byte less temporary storage");
  check_err(cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dko, dv, dvo, n, 0, 4), cudaSuccess,
            "SortPairs on bits [0, 4)");
  cudaMemcpy(ko.data(), dko, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
  cudaMemcpy(vo.data(), dvo, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
  bool sorted = true, stable = true;
  for (int i = 1; i < n; i++) {
    unsigned a = ko[(size_t)i - 1] & 15u, b = ko[(size_t)i] & 15u;
    sorted = sorted && a <= b;
    stable = stable && (a < b || vo[(size_t)i - 1] < vo[(size_t)i]);
  }
  check(sorted, "sorted on the low 4 bits (bit 8 ignored)");
  check(stable, "stable: equal keys keep their input order");
  cudaFree(tmp);
  cudaFree(d);
}

static int host_access(void) {
  float *d = NULL;
  cudaMalloc(&d, 1024);
  cudaDeviceSynchronize();
  printf("reading device memory on the host (must fault)\n");
  fflush(stdout);
  volatile float x = d[3];
  printf("read %g: the access was not caught\n", (double)x);
  return 1;
}

static int out_of_bounds(void) {
  float *d = NULL;
  cudaMalloc(&d, 100 * sizeof(float));
  past_end_kernel<<<1, 32, 0, 0>>>(d, 100);
  cudaDeviceSynchronize();
  printf("a kernel wrote past an allocation: not caught\n");
  return 1;
}

int main(int argc, char **argv) {
  setenv("TD_CUDAEMU_DELAY_US", "2000", 1);
  setenv("TD_CUDAEMU_MEM_MB", "256", 1);
  unsetenv("TD_CUDAEMU_DEVICES"); /* the device count from the launcher's variable */
  setenv("MPI_LOCALNRANKS", "3", 1);
  if (argc > 1 && strcmp(argv[1], "host_access") == 0) return host_access();
  if (argc > 1 && strcmp(argv[1], "oob") == 0) return out_of_bounds();
  float *d_in = NULL, *d_out = NULL;
  std::vector<float> h(1024);
  test_bf16();
  cudaMalloc(&d_in, 4096 * sizeof(float));
  cudaMalloc(&d_out, 4096 * sizeof(float));
  test_launch_limits(d_out);
  test_barriers(d_in, d_out, h);
  test_shuffles_and_shared();
  test_kernel_errors(); /* resets the device: d_in and d_out are gone */
  test_streams();
  test_memory_rules();
  test_cub();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
