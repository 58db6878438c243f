/* rt_internal.h — what the parts of the emulated CUDA runtime share among
 * themselves (runtime.cpp: devices, streams, events, copies; memory.cpp:
 * the device arenas and their protection; fiber.cpp: kernel execution;
 * radix_sort.cpp: cub). Not for the library stand-ins, which use
 * emu_internal.h. Test code only. */
#ifndef TD_CUDAEMU_RT_INTERNAL_H
#define TD_CUDAEMU_RT_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <string>

#include "emu_internal.h"

/* AddressSanitizer in this build: poisoning of device-memory redzones, of
 * freed device memory and of shared memory, and the fiber-switch
 * annotations. */
#if defined(__SANITIZE_ADDRESS__)
#define CUDAEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDAEMU_ASAN 1
#endif
#endif
#ifdef CUDAEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUDAEMU_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define CUDAEMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CUDAEMU_POISON(p, n) ((void)(p), (void)(n))
#define CUDAEMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cudaemu {

/* ---- configuration (environment, read once) ------------------------------------ */
struct Config {
  uint64_t seed;        /* TD_CUDAEMU_SEED: scheduling of threads and blocks */
  unsigned delay_us;    /* TD_CUDAEMU_DELAY_US: sleep before every queued operation */
  bool delay_random;    /* TD_CUDAEMU_DELAY_RANDOM=1: a delay drawn in [0, delay_us] per
                           (stream, operation) from TD_CUDAEMU_SEED, not delay_us each */
  size_t mem_bytes;     /* TD_CUDAEMU_MEM_MB: each device's memory */
  int devices;          /* TD_CUDAEMU_DEVICES, else the launcher's ranks on this node */
  bool profile;         /* TD_CUDAEMU_PROFILE=1: per-kernel times on stderr at exit */
};
const Config &config();

/* One line on stderr, prefixed "cudaemu: ". */
void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- device memory (memory.cpp) -------------------------------------------------- */
/* Allocate `bytes` on device `dev` (256-byte aligned, filled with 0xFF);
 * `caller` is recorded for messages. cudaErrorMemoryAllocation when the
 * device's size would be exceeded. */
cudaError_t device_alloc(int dev, size_t bytes, void **out);
/* Free the live allocation starting at p: cudaErrorInvalidValue otherwise. */
cudaError_t device_free(void *p);
/* Every allocation of device `dev` freed (cudaDeviceReset). */
void device_free_all(int dev);
size_t device_used(int dev);
/* Pinned host memory (cudaMallocHost): tracked so that cudaFreeHost checks it
 * and kernels may take it. */
void *pinned_alloc(size_t bytes);
cudaError_t pinned_free(void *p);
bool is_pinned(const void *p, size_t bytes);
/* Device memory readable and writable while at least one device operation
 * runs (a count over all workers); PROT_NONE otherwise. */
void access_acquire();
void access_release();
/* "allocation of N bytes at 0x.. made at ..." for p, or what p is; for
 * messages. */
std::string describe(const void *p);
/* Install the SIGSEGV handler once (host access to device memory). */
void install_fault_handler();
/* Per-thread: set while a worker runs a device operation (the fault handler
 * tells host from device accesses by it). */
void set_in_device_op(bool on);

/* ---- kernel execution (fiber.cpp) --------------------------------------------------- */
struct Launch {
  const char *file;
  int line;
  const char *kernel;
  dim3 grid, block;
  size_t shmem;
  uint64_t seed;
  std::function<void()> body;
};
/* Run the whole grid on the calling (worker) thread. cudaSuccess, or
 * cudaErrorLaunchFailure after a message naming the kernel, the launch site,
 * the block and what went wrong (barrier deadlock, warp-intrinsic misuse,
 * shared memory beyond the limit). */
cudaError_t run_kernel(const Launch &launch);
/* TD_CUDAEMU_PROFILE: one launch of `kernel` ran `blocks` blocks of
 * `threads` threads in all, in `seconds`; printed at exit (runtime.cpp). */
void profile_add(const char *kernel, uint64_t blocks, uint64_t threads, double seconds);
/* Release the calling worker's fiber stacks (at the worker's end). */
void release_worker_fibers();
/* The stack range of the calling worker's fibers, for the fault handler:
 * true and the range when addr is inside one's guard page. */
bool fiber_guard_hit(uintptr_t addr);

/* ---- runtime (runtime.cpp) ------------------------------------------------------------ */
/* Static __shared__ bytes per block, at most (compute capability 7.0+
 * without opt-in) and dynamic shared memory likewise. */
constexpr size_t kSharedLimit = 48 * 1024;

} // namespace cudaemu

#endif
