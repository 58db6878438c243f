/* runtime.cpp — the emulated CUDA runtime's host API: configuration, error
 * codes and texts, devices, streams and their worker threads, events,
 * copies and sets, kernel launches (the configuration checks; fiber.cpp
 * runs the grid) and the queue interface of emu_internal.h.
 *
 * Streams are asynchronous (CUDA C++ Programming Guide, "Asynchronous
 * Concurrent Execution" / "Streams"): every stream, and each device's legacy
 * default stream (stream 0), has a worker thread that runs its queue in
 * order; kernels, asynchronous copies and sets, event records, host
 * functions and library operations (cudaemu::enqueue) are queued. An
 * operation may carry dependencies (stream, epoch): it starts only after
 * those operations have completed. That is how
 *   - cudaStreamWaitEvent orders streams (a wait on the event's recorded
 *     epoch, captured when the wait is issued);
 *   - the legacy default stream synchronises with blocking streams
 *     (Programming Guide, "Default Stream"; Runtime API, "Stream
 *     synchronization behavior"): an operation queued on stream 0 first
 *     waits for all work queued so far on every blocking stream of its
 *     device, and work queued later on a blocking stream waits for stream
 *     0's work; streams created cudaStreamNonBlocking do neither.
 * TD_CUDAEMU_DELAY_US makes every worker sleep before each operation, so a
 * missing wait shows as a wrong result instead of working by luck.
 *
 * Errors: a bad argument is returned and becomes the calling thread's last
 * error (cudaGetLastError). A failure while an operation runs (a kernel's
 * barrier deadlock, an illegal address, a library operation's error) is the
 * device's sticky error: every later synchronising call, cudaGetLastError
 * and most calls return it until cudaDeviceReset, and queued work is
 * skipped, as after a GPU fault. Workers are joined at cudaDeviceReset and
 * at process exit. Test code only (tests/cudaemu). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rt_internal.h"

namespace cudaemu {
struct Dep {
  std::shared_ptr<CUstream_st> stream;
  uint64_t epoch;
};
/* One queued operation. */
struct Op {
  std::function<cudaError_t()> fn; /* NULL: only an ordering point */
  const char *what;
  std::vector<Dep> deps;
  uint64_t epoch;
  bool access; /* runs with device memory accessible */
};
} // namespace cudaemu

static uint64_t next_stream_serial() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

struct CUstream_st {
  int device;
  unsigned flags;
  bool legacy;
  uint64_t enqueued = 0; /* epoch of the last operation queued */
  uint64_t done = 0;     /* epoch of the last operation completed */
  std::deque<cudaemu::Op> queue;
  std::thread worker;
  uint64_t serial = next_stream_serial(); /* creation order: the random delays' stream key */
  bool started = false, stopping = false, finished = false;
};

struct CUevent_st {
  int device;
  unsigned flags;
  std::shared_ptr<CUstream_st> stream; /* of the last record, NULL before one */
  uint64_t epoch = 0;
  std::shared_ptr<double> time_ms;     /* set when the record runs */
};

namespace cudaemu {
namespace {

/* ---- the error table (driver_types.h codes, cudaGetErrorString's texts) -- */
#define CUDAEMU_ERRORS(X)                                                                      \
  X(cudaSuccess, "no error")                                                                   \
  X(cudaErrorInvalidValue, "invalid argument")                                                 \
  X(cudaErrorMemoryAllocation, "out of memory")                                                \
  X(cudaErrorInitializationError, "initialization error")                                      \
  X(cudaErrorCudartUnloading, "driver shutting down")                                          \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                           \
  X(cudaErrorInvalidHostPointer, "invalid host pointer")                                       \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                   \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                      \
  X(cudaErrorStubLibrary, "CUDA driver is a stub library")                                     \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
  X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")          \
  X(cudaErrorMissingConfiguration, "__global__ function call is not configured")               \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                                 \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                   \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                          \
  X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device") \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                 \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")           \
  X(cudaErrorSymbolNotFound, "named symbol not found")                                         \
  X(cudaErrorNotReady, "device not ready")                                                     \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                       \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                  \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                         \
  X(cudaErrorContextIsDestroyed, "context is destroyed")                                       \
  X(cudaErrorAssert, "device-side assert triggered")                                           \
  X(cudaErrorHostMemoryAlreadyRegistered,                                                      \
    "part or all of the requested memory range is already mapped")                             \
  X(cudaErrorHostMemoryNotRegistered,                                                          \
    "pointer does not correspond to a registered memory region")                               \
  X(cudaErrorMisalignedAddress, "misaligned address")                                          \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                      \
  X(cudaErrorNotPermitted, "operation not permitted")                                          \
  X(cudaErrorNotSupported, "operation not supported")                                          \
  X(cudaErrorTimeout, "wait operation timed out")                                              \
  X(cudaErrorUnknown, "unknown error")

struct Device {
  std::shared_ptr<CUstream_st> legacy; /* stream 0, made on first use */
  cudaError_t sticky = cudaSuccess;
};

/* All runtime state, behind one mutex; never destroyed (workers may still
 * run while static destructors do). */
struct State {
  std::mutex mu;
  std::condition_variable cv; /* any completion, queueing or stop */
  std::vector<Device> dev;
  std::map<CUstream_st *, std::shared_ptr<CUstream_st>> streams; /* live user streams */
  std::vector<std::shared_ptr<CUstream_st>> retired;            /* destroyed, maybe draining */
  std::map<CUevent_st *, std::unique_ptr<CUevent_st>> events;
  bool exiting = false;
};

State &S() {
  static State *s = new State();
  return *s;
}

std::mutex g_report_mu;
thread_local cudaError_t t_last = cudaSuccess; /* cudaGetLastError */
thread_local int t_device = 0;                 /* cudaSetDevice */
thread_local CUstream_st *t_stream = nullptr;  /* the stream whose worker this thread is */
std::atomic<uint64_t> g_launches{0};

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

/* A host loop that polls an event or a stream (trident's wait for a device
 * collective) would take the CPU that the device's workers, and the other
 * ranks' processes, need to finish what it waits for: measured, 12% of a
 * 2-rank pipeline test's CPU went to the polling of the rank that waited.
 * So "not ready" is answered after a pause (called without the lock held). A
 * GPU answers at once; only the timing differs, which the emulator varies on
 * purpose anyway (TD_CUDAEMU_DELAY_US). */
constexpr int kNotReadyPauseUs = 50;
cudaError_t not_ready() {
  std::this_thread::sleep_for(std::chrono::microseconds(kNotReadyPauseUs));
  return cudaErrorNotReady;
}

/* Integers from the environment: `def` when unset, a message when bad. */
uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end = NULL;
  unsigned long long x = strtoull(v, &end, 0);
  if (*end != '\0') {
    report("%s=%s is not a non-negative integer: using %llu", name, v, (unsigned long long)def);
    return def;
  }
  return x;
}

/* Ranks on this node as the launcher states them (the first number of
 * Slurm's "4(x2)" or "2,1" forms), else 0. */
int launcher_local_ranks() {
  const char *names[] = {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                         "SLURM_STEP_TASKS_PER_NODE"};
  for (const char *n : names) {
    const char *v = getenv(n);
    if (v && *v) {
      int k = atoi(v);
      if (k > 0) return k;
    }
  }
  return 0;
}

Config make_config() {
  Config c;
  c.seed = env_u64("TD_CUDAEMU_SEED", 1);
  c.delay_us = (unsigned)env_u64("TD_CUDAEMU_DELAY_US", 0);
  c.delay_random = env_u64("TD_CUDAEMU_DELAY_RANDOM", 0) != 0;
  c.mem_bytes = (size_t)env_u64("TD_CUDAEMU_MEM_MB", 8192) << 20;
  if (c.mem_bytes == 0) c.mem_bytes = (size_t)8192 << 20;
  uint64_t d = env_u64("TD_CUDAEMU_DEVICES", 0);
  if (d == 0) d = (uint64_t)launcher_local_ranks();
  if (d == 0) d = 1;
  if (d > 64) {
    report("TD_CUDAEMU_DEVICES=%llu: at most 64 emulated devices", (unsigned long long)d);
    d = 64;
  }
  c.devices = (int)d;
  c.profile = env_u64("TD_CUDAEMU_PROFILE", 0) != 0;
  return c;
}

/* TD_CUDAEMU_PROFILE: launches, blocks, threads and seconds per kernel. */
struct ProfileEntry {
  uint64_t launches = 0, blocks = 0, threads = 0;
  double seconds = 0.0;
};
std::mutex g_profile_mu;
std::map<std::string, ProfileEntry> *g_profile;

void profile_print() {
  std::lock_guard<std::mutex> lk(g_profile_mu);
  if (!g_profile) return;
  std::vector<std::pair<std::string, ProfileEntry>> v(g_profile->begin(), g_profile->end());
  std::sort(v.begin(), v.end(), [](const std::pair<std::string, ProfileEntry> &a,
                                   const std::pair<std::string, ProfileEntry> &b) {
    return a.second.seconds > b.second.seconds;
  });
  double total = 0.0;
  for (auto &e : v) total += e.second.seconds;
  fprintf(stderr, "cudaemu: profile (pid %d): %.3f s in kernels\n", (int)getpid(), total);
  fprintf(stderr, "cudaemu: %10s %9s %12s %14s  %s\n", "seconds", "launches", "blocks", "threads",
          "kernel");
  for (auto &e : v)
    fprintf(stderr, "cudaemu: %10.3f %9llu %12llu %14llu  %s\n", e.second.seconds,
            (unsigned long long)e.second.launches, (unsigned long long)e.second.blocks,
            (unsigned long long)e.second.threads, e.first.c_str());
}

void shutdown_all();

/* The runtime's one-time set-up: the device table and the exit hook. */
void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    S().dev.resize((size_t)config().devices);
    install_fault_handler();
    atexit(shutdown_all);
  });
}

bool deps_met(const Op &op) {
  for (const Dep &d : op.deps)
    if (d.stream->done < d.epoch) return false;
  return true;
}

/* The worker of one stream: runs its queue in order until the stream is
 * destroyed and drained. */
void worker_main(std::shared_ptr<CUstream_st> s) {
  t_stream = s.get();
  /* an alternate signal stack, so that a fiber's stack overflow is reported
   * (AddressSanitizer gives its threads one already) */
  stack_t old;
  void *alt = NULL;
  if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
    stack_t ss;
    ss.ss_size = 64 * 1024;
    ss.ss_sp = alt = malloc(ss.ss_size);
    ss.ss_flags = 0;
    if (alt) sigaltstack(&ss, NULL);
  }
  State &st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  for (;;) {
    st.cv.wait(lk, [&] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) break;
    st.cv.wait(lk, [&] { return deps_met(s->queue.front()); });
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    cudaError_t sticky = st.dev[(size_t)s->device].sticky;
    lk.unlock();
    cudaError_t e = cudaSuccess;
    if (op.fn && sticky == cudaSuccess) { /* after a fault, queued work does not run */
      if (config().delay_us && !config().delay_random) {
        usleep(config().delay_us);
      } else if (config().delay_us) { /* seeded: each (stream, operation) its own delay */
        uint64_t r = config().seed ^ (s->serial * 0x9E3779B97F4A7C15ull) ^ (op.epoch << 20);
        r += 0x9E3779B97F4A7C15ull; /* splitmix64's finaliser */
        r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
        r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
        usleep((unsigned)((r ^ (r >> 31)) % (config().delay_us + 1u)));
      }
      if (op.access) {
        access_acquire();
        set_in_device_op(true);
      }
      e = op.fn();
      if (op.access) {
        set_in_device_op(false);
        access_release();
      }
    }
    op.fn = nullptr; /* what it captured goes now, outside the lock */
    op.deps.clear();
    lk.lock();
    Device &d = st.dev[(size_t)s->device];
    if (e != cudaSuccess && d.sticky == cudaSuccess) {
      d.sticky = e;
      report("%s on device %d failed: %s (%s); the error is sticky: later calls return it", op.what,
             s->device, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    s->done = op.epoch;
    st.cv.notify_all();
  }
  s->finished = true;
  st.cv.notify_all();
  lk.unlock();
  release_worker_fibers();
  if (alt) {
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, NULL);
    free(alt);
  }
}

/* Queue op on s (locked): the legacy-stream dependencies, the epoch, the
 * worker started on first use. Returns the epoch. */
uint64_t push_locked(const std::shared_ptr<CUstream_st> &s, Op op) {
  State &st = S();
  if (s->legacy) { /* stream 0 waits for every blocking stream of its device */
    auto add = [&](const std::shared_ptr<CUstream_st> &b) {
      if (b->device == s->device && !b->legacy && !(b->flags & cudaStreamNonBlocking) &&
          b->done < b->enqueued)
        op.deps.push_back(Dep{b, b->enqueued});
    };
    for (auto &e : st.streams) add(e.second);
    for (auto &b : st.retired) add(b);
  } else if (!(s->flags & cudaStreamNonBlocking)) { /* a blocking stream waits for stream 0 */
    const std::shared_ptr<CUstream_st> &l = st.dev[(size_t)s->device].legacy;
    if (l && l->done < l->enqueued) op.deps.push_back(Dep{l, l->enqueued});
  }
  op.epoch = ++s->enqueued;
  uint64_t epoch = op.epoch;
  s->queue.push_back(std::move(op));
  if (!s->started) {
    s->started = true;
    s->worker = std::thread(worker_main, s);
  }
  st.cv.notify_all();
  return epoch;
}

std::shared_ptr<CUstream_st> legacy_locked(int dev) {
  Device &d = S().dev[(size_t)dev];
  if (!d.legacy) {
    d.legacy = std::make_shared<CUstream_st>();
    d.legacy->device = dev;
    d.legacy->flags = 0;
    d.legacy->legacy = true;
  }
  return d.legacy;
}

/* The stream behind a handle (0 and cudaStreamLegacy: the current device's
 * stream 0), or NULL for a destroyed or unknown one. */
std::shared_ptr<CUstream_st> resolve_locked(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy) return legacy_locked(t_device);
  auto it = S().streams.find(h);
  return it == S().streams.end() ? nullptr : it->second;
}

/* Wait (locked) until s has completed epoch e. A worker waiting for its own
 * stream would wait forever: refused. */
cudaError_t wait_locked(std::unique_lock<std::mutex> &lk, CUstream_st *s, uint64_t e,
                        const char *api) {
  if (s->done >= e) return cudaSuccess;
  if (t_stream == s) {
    report("%s: called from an operation running on the stream it waits for (it would wait "
           "for itself forever)",
           api);
    return cudaErrorIllegalState;
  }
  S().cv.wait(lk, [&] { return s->done >= e; });
  return cudaSuccess;
}

/* Every stream of device dev (locked), the legacy one included. */
std::vector<std::shared_ptr<CUstream_st>> device_streams_locked(int dev) {
  std::vector<std::shared_ptr<CUstream_st>> v;
  State &st = S();
  if (st.dev[(size_t)dev].legacy) v.push_back(st.dev[(size_t)dev].legacy);
  for (auto &e : st.streams)
    if (e.second->device == dev) v.push_back(e.second);
  for (auto &b : st.retired)
    if (b->device == dev) v.push_back(b);
  return v;
}

cudaError_t device_sync_locked(std::unique_lock<std::mutex> &lk, int dev, const char *api) {
  for (auto &s : device_streams_locked(dev)) {
    cudaError_t e = wait_locked(lk, s.get(), s->enqueued, api);
    if (e != cudaSuccess) return e;
  }
  return S().dev[(size_t)dev].sticky;
}

/* Stop and join the workers of these streams (not locked on entry). */
void stop_workers(std::vector<std::shared_ptr<CUstream_st>> v, double timeout_s) {
  State &st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  for (auto &s : v) s->stopping = true;
  st.cv.notify_all();
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<std::thread> joinable;
  for (auto &s : v) {
    if (!s->started) continue;
    if (!st.cv.wait_until(lk, until, [&] { return s->finished; })) {
      report("a stream worker of device %d did not finish within %.0f s (an operation still "
             "running): left running",
             s->device, timeout_s);
      s->worker.detach();
      continue;
    }
    if (s->worker.joinable()) joinable.push_back(std::move(s->worker));
  }
  lk.unlock();
  for (auto &t : joinable) t.join();
}

/* Join the workers of destroyed streams that have finished (locked). */
void reap_locked() {
  auto &r = S().retired;
  for (size_t i = 0; i < r.size();) {
    if (r[i]->finished || !r[i]->started) {
      if (r[i]->worker.joinable()) r[i]->worker.join(); /* it has left its loop */
      r[i] = r.back();
      r.pop_back();
    } else {
      i++;
    }
  }
}

/* At process exit: every queued operation runs, then the workers end. */
void shutdown_all() {
  State &st = S();
  std::vector<std::shared_ptr<CUstream_st>> all;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.exiting = true;
    for (auto &d : st.dev)
      if (d.legacy) all.push_back(d.legacy);
    for (auto &e : st.streams) all.push_back(e.second);
    for (auto &b : st.retired) all.push_back(b);
  }
  stop_workers(all, 30.0);
  if (config().profile) profile_print();
  std::lock_guard<std::mutex> lk(st.mu);
  st.streams.clear();
  st.retired.clear();
  st.events.clear();
  for (auto &d : st.dev) d.legacy.reset();
}

const char *kind_name(int k) {
  switch (k) {
  case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
  case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
  case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
  case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
  case cudaMemcpyDefault: return "cudaMemcpyDefault";
  default: return "(not a cudaMemcpyKind)";
  }
}

/* A copy's pointers against its kind. The Runtime API leaves a kind that
 * does not match the pointers undefined; the emulation refuses it with
 * cudaErrorInvalidValue, and a range not inside one live allocation too.
 * dst_dev / src_dev: whether each side is device memory. */
cudaError_t check_copy(const char *api, void *dst, const void *src, size_t n, int kind,
                       bool *dst_dev, bool *src_dev) {
  int wd = where(dst, n), ws = where(src, n);
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    report("%s: %d is not a cudaMemcpyKind", api, kind);
    return cudaErrorInvalidMemcpyDirection;
  }
  if (wd == -2 || ws == -2) {
    const void *bad = wd == -2 ? (const void *)dst : src;
    report("%s: the %s range [%p, +%zu bytes) is not inside one live device allocation (%p is "
           "%s)",
           api, wd == -2 ? "destination" : "source", bad, n, bad, describe(bad).c_str());
    return cudaErrorInvalidValue;
  }
  *dst_dev = wd >= 0;
  *src_dev = ws >= 0;
  bool ok = kind == cudaMemcpyDefault ||
            (kind == cudaMemcpyHostToHost && !*dst_dev && !*src_dev) ||
            (kind == cudaMemcpyHostToDevice && *dst_dev && !*src_dev) ||
            (kind == cudaMemcpyDeviceToHost && !*dst_dev && *src_dev) ||
            (kind == cudaMemcpyDeviceToDevice && *dst_dev && *src_dev);
  if (!ok) {
    report("%s: %s, but the destination %p is %s memory and the source %p is %s memory", api,
           kind_name(kind), dst, *dst_dev ? "device" : "host", src, *src_dev ? "device" : "host");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

/* The copy as an operation: a pageable host source is staged now (the
 * caller may reuse its buffer on return, as CUDA stages pageable memory);
 * device memory and pinned host memory are read when the copy runs. */
Op copy_op(void *dst, const void *src, size_t n, bool dst_dev, bool src_dev, const char *what) {
  Op op;
  op.what = what;
  op.access = dst_dev || src_dev;
  if (!src_dev && dst_dev && !is_pinned(src, n)) {
    auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    op.fn = [dst, staged, n]() {
      memcpy(dst, staged->data(), n);
      return cudaSuccess;
    };
  } else {
    op.fn = [dst, src, n]() {
      memcpy(dst, src, n);
      return cudaSuccess;
    };
  }
  return op;
}

Op set_op(void *dst, int value, size_t n) {
  Op op;
  op.what = "cudaMemset";
  op.access = true;
  op.fn = [dst, value, n]() {
    memset(dst, value, n);
    return cudaSuccess;
  };
  return op;
}

} // namespace

/* ---- shared with the other parts ------------------------------------------------ */
void profile_add(const char *kernel, uint64_t blocks, uint64_t threads, double seconds) {
  std::lock_guard<std::mutex> lk(g_profile_mu);
  if (!g_profile) g_profile = new std::map<std::string, ProfileEntry>();
  ProfileEntry &e = (*g_profile)[kernel];
  e.launches++;
  e.blocks += blocks;
  e.threads += threads;
  e.seconds += seconds;
}

const Config &config() {
  static const Config c = make_config();
  return c;
}

void report(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lk(g_report_mu);
  fprintf(stderr, "cudaemu: %s\n", buf);
  fflush(stderr);
}

/* ---- emu_internal.h ------------------------------------------------------------------- */
cudaError_t enqueue(cudaStream_t s, std::function<cudaError_t()> fn, const char *what) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> sp = resolve_locked(s);
  if (!sp) return cudaErrorInvalidResourceHandle;
  Op op;
  op.fn = std::move(fn);
  op.what = what;
  op.access = true;
  push_locked(sp, std::move(op));
  return cudaSuccess;
}

int current_device() { return t_device; }

int device_count() { return config().devices; }

int stream_device(cudaStream_t s) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> sp = resolve_locked(s);
  return sp ? sp->device : -1;
}

const char *node_name() {
  static char name[256];
  static std::once_flag once;
  std::call_once(once, [] {
    if (gethostname(name, sizeof name - 1) != 0) snprintf(name, sizeof name, "localhost");
  });
  return name;
}

/* ---- kernel launch ---------------------------------------------------------------------- */
namespace detail {

/* The checks of a launch's configuration (Programming Guide, "Execution
 * Configuration", and the limits of compute capability 7.0+ in "Technical
 * Specifications per Compute Capability"): at most 1024 threads a block,
 * block x and y at most 1024 and z at most 64, grid x at most 2^31 - 1 and
 * y, z at most 65535, no zero extent — else the launch fails with
 * cudaErrorInvalidConfiguration; more than 48 KiB of dynamic shared memory
 * (without opting in) fails with cudaErrorInvalidValue. */
static cudaError_t check_configuration(dim3 g, dim3 b, size_t shmem, char *why, size_t n) {
  uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    snprintf(why, n, "a zero extent: grid (%u, %u, %u), block (%u, %u, %u)", g.x, g.y, g.z, b.x,
             b.y, b.z);
  else if (b.x > 1024 || b.y > 1024 || b.z > 64)
    snprintf(why, n, "block (%u, %u, %u) exceeds the block extents (1024, 1024, 64)", b.x, b.y,
             b.z);
  else if (threads > 1024)
    snprintf(why, n, "block (%u, %u, %u) has %llu threads, more than 1024", b.x, b.y, b.z,
             (unsigned long long)threads);
  else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    snprintf(why, n, "grid (%u, %u, %u) exceeds the grid extents (2^31 - 1, 65535, 65535)", g.x,
             g.y, g.z);
  else if (shmem > kSharedLimit) {
    snprintf(why, n, "%zu bytes of dynamic shared memory, more than %zu", shmem, kSharedLimit);
    return cudaErrorInvalidValue;
  } else
    return cudaSuccess;
  return cudaErrorInvalidConfiguration;
}

void launch_impl(const char *file, int line, const char *kernel, dim3 grid, dim3 block,
                 size_t shmem, CUstream_st *stream, const void *const *ptr_args, int nargs,
                 std::function<void()> body) {
  init();
  char why[256];
  cudaError_t e = check_configuration(grid, block, shmem, why, sizeof why);
  if (e != cudaSuccess) {
    report("kernel %s launched at %s:%d: %s: the launch fails with %s", kernel, file, line, why,
           cudaGetErrorName(e));
    fail(e);
    return;
  }
  State &st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  if (!s || s->device != t_device) {
    report("kernel %s launched at %s:%d: %s", kernel, file, line,
           s ? "the stream belongs to another device than the current one"
             : "the stream was destroyed or never created");
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  if (st.dev[(size_t)s->device].sticky != cudaSuccess) {
    fail(st.dev[(size_t)s->device].sticky);
    return;
  }
  lk.unlock();
  /* pointer arguments must be memory the device can reach: its own
   * allocations or pinned host memory; anything else would fault on a GPU
   * (cudaErrorIllegalAddress, sticky) */
  std::string bad;
  for (int i = 0; i < nargs && bad.empty(); i++) {
    const void *p = ptr_args[i];
    if (!p) continue;
    int w = where(p, 1);
    if (w == s->device || (w == -1 && is_pinned(p, 1))) continue;
    char b[160];
    snprintf(b, sizeof b, "argument %d (%p) is ", i + 1, p);
    bad = b + (w >= 0 ? "memory of device " + std::to_string(w) : describe(p));
  }
  Op op;
  op.access = true;
  if (!bad.empty()) {
    report("kernel %s launched at %s:%d: %s: the kernel would fault on the GPU", kernel, file,
           line, bad.c_str());
    op.what = kernel;
    op.fn = [] { return cudaErrorIllegalAddress; };
  } else {
    auto L = std::make_shared<Launch>();
    L->file = file;
    L->line = line;
    L->kernel = kernel;
    L->grid = grid;
    L->block = block;
    L->shmem = shmem;
    L->seed = config().seed * 0x9E3779B97F4A7C15ull + g_launches.fetch_add(1);
    L->body = std::move(body);
    op.what = kernel;
    op.fn = [L] { return run_kernel(*L); };
  }
  lk.lock();
  push_locked(s, std::move(op));
}

} // namespace detail
} // namespace cudaemu

using namespace cudaemu;

/* ---- the runtime API -------------------------------------------------------------------- */
extern "C" {

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define CUDAEMU_NAME(code, text) \
  case code: return #code;
    CUDAEMU_ERRORS(CUDAEMU_NAME)
#undef CUDAEMU_NAME
  }
  return "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define CUDAEMU_TEXT(code, text) \
  case code: return text;
    CUDAEMU_ERRORS(CUDAEMU_TEXT)
#undef CUDAEMU_TEXT
  }
  return "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
  init();
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lk(S().mu);
  return S().dev[(size_t)t_device].sticky;
}

cudaError_t cudaPeekAtLastError(void) {
  init();
  if (t_last != cudaSuccess) return t_last;
  std::lock_guard<std::mutex> lk(S().mu);
  return S().dev[(size_t)t_device].sticky;
}

cudaError_t cudaGetDeviceCount(int *count) {
  init();
  if (!count) return fail(cudaErrorInvalidValue);
  *count = config().devices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  init();
  if (device < 0 || device >= config().devices) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  init();
  if (!device) return fail(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  init();
  std::unique_lock<std::mutex> lk(S().mu);
  return fail(device_sync_locked(lk, t_device, "cudaDeviceSynchronize"));
}

/* Every stream, event and allocation of the current device destroyed, its
 * sticky error cleared (and the calling thread's last error, which may hold
 * a copy of it). */
cudaError_t cudaDeviceReset(void) {
  init();
  State &st = S();
  int dev = t_device;
  std::vector<std::shared_ptr<CUstream_st>> v;
  {
    std::unique_lock<std::mutex> lk(st.mu);
    v = device_streams_locked(dev);
    for (auto it = st.streams.begin(); it != st.streams.end();)
      it = it->second->device == dev ? st.streams.erase(it) : std::next(it);
    for (auto it = st.events.begin(); it != st.events.end();)
      it = it->second->device == dev ? st.events.erase(it) : std::next(it);
  }
  stop_workers(v, 30.0);
  {
    std::lock_guard<std::mutex> lk(st.mu);
    for (auto it = st.retired.begin(); it != st.retired.end();)
      it = (*it)->device == dev ? st.retired.erase(it) : std::next(it);
    st.dev[(size_t)dev].legacy.reset();
    st.dev[(size_t)dev].sticky = cudaSuccess;
  }
  device_free_all(dev);
  t_last = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  init();
  if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
  size_t used = device_used(t_device);
  *total_bytes = config().mem_bytes;
  *free_bytes = config().mem_bytes - used;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  init();
  if (!value || device < 0 || device >= config().devices) return fail(cudaErrorInvalidValue);
  if (attr != cudaDevAttrMultiProcessorCount) return fail(cudaErrorInvalidValue);
  const char *e = getenv("TD_CUDAEMU_SMS");
  int n = e && *e ? atoi(e) : 8;
  *value = n > 0 ? n : 8;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  init();
  if (!devPtr) return fail(cudaErrorInvalidValue);
  *devPtr = NULL;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (S().dev[(size_t)t_device].sticky) return fail(S().dev[(size_t)t_device].sticky);
  }
  if (size == 0) return cudaSuccess;
  return fail(device_alloc(t_device, size, devPtr));
}

/* cudaFree synchronises the device first (the memory may be in use by
 * queued work; CUDA frees after the device is idle). */
cudaError_t cudaFree(void *devPtr) {
  init();
  if (!devPtr) return cudaSuccess;
  int w = where(devPtr, 0);
  if (w < 0) {
    report("cudaFree(%p): not a live device allocation (%s)", devPtr, describe(devPtr).c_str());
    return fail(cudaErrorInvalidValue);
  }
  {
    std::unique_lock<std::mutex> lk(S().mu);
    cudaError_t e = device_sync_locked(lk, w, "cudaFree");
    if (e == cudaErrorIllegalState) return fail(e);
  }
  cudaError_t e = device_free(devPtr);
  if (e != cudaSuccess)
    report("cudaFree(%p): not the start of a live device allocation (%s)", devPtr,
           describe(devPtr).c_str());
  return fail(e);
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  init();
  if (!ptr) return fail(cudaErrorInvalidValue);
  *ptr = pinned_alloc(size);
  return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
  if (flags & ~0x0Fu) return fail(cudaErrorInvalidValue);
  return cudaMallocHost(pHost, size);
}

/* Pinned memory may be read by queued copies: every device is synchronised
 * first. */
cudaError_t cudaFreeHost(void *ptr) {
  init();
  if (!ptr) return cudaSuccess;
  {
    std::unique_lock<std::mutex> lk(S().mu);
    for (int d = 0; d < config().devices; d++) device_sync_locked(lk, d, "cudaFreeHost");
  }
  cudaError_t e = pinned_free(ptr);
  if (e != cudaSuccess)
    report("cudaFreeHost(%p): not memory from cudaMallocHost (%s)", ptr, describe(ptr).c_str());
  return fail(e);
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  init();
  if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
  auto s = std::make_shared<CUstream_st>();
  s->device = t_device;
  s->flags = flags;
  s->legacy = false;
  std::lock_guard<std::mutex> lk(S().mu);
  reap_locked();
  S().streams[s.get()] = s;
  *pStream = s.get();
  return cudaSuccess;
}

/* Returns at once; the stream's queued work still runs, then its worker
 * ends (Runtime API: cudaStreamDestroy). */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  auto it = S().streams.find(stream);
  if (it == S().streams.end()) return fail(cudaErrorInvalidResourceHandle);
  it->second->stopping = true;
  S().retired.push_back(it->second);
  S().streams.erase(it);
  S().cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  init();
  std::unique_lock<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t e = wait_locked(lk, s.get(), s->enqueued, "cudaStreamSynchronize");
  if (e != cudaSuccess) return fail(e);
  return fail(S().dev[(size_t)s->device].sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  init();
  {
    std::lock_guard<std::mutex> lk(S().mu);
    std::shared_ptr<CUstream_st> s = resolve_locked(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (S().dev[(size_t)s->device].sticky) return fail(S().dev[(size_t)s->device].sticky);
    if (s->done >= s->enqueued) return cudaSuccess;
  }
  return not_ready();
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(hStream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (!flags) return fail(cudaErrorInvalidValue);
  *flags = s->flags;
  return cudaSuccess;
}

/* Later work on `stream` waits for the work captured by the event's most
 * recent record (at the time of this call); an event never recorded is no
 * wait. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  auto ev = S().events.find(event);
  if (!s || ev == S().events.end()) return fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!ev->second->stream) return cudaSuccess;
  Op op;
  op.what = "cudaStreamWaitEvent";
  op.access = false;
  op.deps.push_back(Dep{ev->second->stream, ev->second->epoch});
  push_locked(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  init();
  if (!event || (flags & ~0x7u) ||
      ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return fail(cudaErrorInvalidValue);
  auto e = std::make_unique<CUevent_st>();
  e->device = t_device;
  e->flags = flags;
  std::lock_guard<std::mutex> lk(S().mu);
  *event = e.get();
  S().events[e.get()] = std::move(e);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  if (S().events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  auto ev = S().events.find(event);
  if (!s || ev == S().events.end()) return fail(cudaErrorInvalidResourceHandle);
  if (ev->second->device != s->device) {
    report("cudaEventRecord: the event belongs to device %d, the stream to device %d",
           ev->second->device, s->device);
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (S().dev[(size_t)s->device].sticky) return fail(S().dev[(size_t)s->device].sticky);
  auto slot = std::make_shared<double>(-1.0);
  Op op;
  op.what = "cudaEventRecord";
  op.access = false;
  op.fn = [slot] {
    *slot = std::chrono::duration<double, std::milli>(
                std::chrono::steady_clock::now().time_since_epoch())
                .count();
    return cudaSuccess;
  };
  ev->second->stream = s;
  ev->second->time_ms = slot;
  ev->second->epoch = push_locked(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  init();
  {
    std::lock_guard<std::mutex> lk(S().mu);
    auto ev = S().events.find(event);
    if (ev == S().events.end()) return fail(cudaErrorInvalidResourceHandle);
    CUevent_st *e = ev->second.get();
    if (S().dev[(size_t)e->device].sticky) return fail(S().dev[(size_t)e->device].sticky);
    if (!e->stream || e->stream->done >= e->epoch) return cudaSuccess;
  }
  return not_ready();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  init();
  std::unique_lock<std::mutex> lk(S().mu);
  auto ev = S().events.find(event);
  if (ev == S().events.end()) return fail(cudaErrorInvalidResourceHandle);
  CUevent_st *e = ev->second.get();
  if (e->stream) {
    std::shared_ptr<CUstream_st> s = e->stream;
    cudaError_t w = wait_locked(lk, s.get(), e->epoch, "cudaEventSynchronize");
    if (w != cudaSuccess) return fail(w);
  }
  return fail(S().dev[(size_t)e->device].sticky);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  init();
  std::lock_guard<std::mutex> lk(S().mu);
  auto a = S().events.find(start), b = S().events.find(end);
  if (!ms) return fail(cudaErrorInvalidValue);
  if (a == S().events.end() || b == S().events.end()) return fail(cudaErrorInvalidResourceHandle);
  CUevent_st *ea = a->second.get(), *eb = b->second.get();
  if ((ea->flags | eb->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!ea->stream || !eb->stream) return fail(cudaErrorInvalidResourceHandle);
  if (ea->stream->done < ea->epoch || eb->stream->done < eb->epoch) return cudaErrorNotReady;
  *ms = (float)(*eb->time_ms - *ea->time_ms);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  init();
  if (!fn) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  Op op;
  op.what = "cudaLaunchHostFunc";
  op.access = false;
  op.fn = [fn, userData] {
    fn(userData);
    return cudaSuccess;
  };
  push_locked(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  init();
  bool dd = false, sd = false;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    std::shared_ptr<CUstream_st> s = resolve_locked(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (S().dev[(size_t)s->device].sticky) return fail(S().dev[(size_t)s->device].sticky);
  }
  if (count == 0) return cudaSuccess;
  cudaError_t e = check_copy("cudaMemcpyAsync", dst, src, count, kind, &dd, &sd);
  if (e != cudaSuccess) return fail(e);
  Op op = copy_op(dst, src, count, dd, sd, "cudaMemcpyAsync");
  std::unique_lock<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  uint64_t epoch = push_locked(s, std::move(op));
  if (!dd && !sd) /* host to host is synchronous with the host */
    return fail(wait_locked(lk, s.get(), epoch, "cudaMemcpyAsync"));
  return cudaSuccess;
}

/* On the legacy default stream, with the Runtime API's synchronisation
 * ("API synchronization behavior", cudaMemcpy): from pageable host memory
 * to the device, stream 0 is synchronised, the source staged and the call
 * returns before the copy lands; from pinned memory to the device, device
 * to host and host to host, the call returns when the copy is done; device
 * to device does not wait. */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  init();
  bool dd = false, sd = false;
  {
    std::lock_guard<std::mutex> lk(S().mu);
    if (S().dev[(size_t)t_device].sticky) return fail(S().dev[(size_t)t_device].sticky);
  }
  if (count == 0) return cudaSuccess;
  cudaError_t e = check_copy("cudaMemcpy", dst, src, count, kind, &dd, &sd);
  if (e != cudaSuccess) return fail(e);
  bool pageable_h2d = dd && !sd && !is_pinned(src, count);
  std::unique_lock<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = legacy_locked(t_device);
  if (pageable_h2d) { /* synchronise stream 0 (with what it waits for) first */
    Op mark;
    mark.what = "cudaMemcpy";
    mark.access = false;
    e = wait_locked(lk, s.get(), push_locked(s, std::move(mark)), "cudaMemcpy");
    if (e != cudaSuccess) return fail(e);
  }
  lk.unlock();
  Op op = copy_op(dst, src, count, dd, sd, "cudaMemcpy");
  lk.lock();
  uint64_t epoch = push_locked(s, std::move(op));
  if (!(dd && sd) && !pageable_h2d) {
    e = wait_locked(lk, s.get(), epoch, "cudaMemcpy");
    if (e != cudaSuccess) return fail(e);
  }
  return fail(S().dev[(size_t)s->device].sticky);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  init();
  {
    std::lock_guard<std::mutex> lk(S().mu);
    std::shared_ptr<CUstream_st> s = resolve_locked(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    if (S().dev[(size_t)s->device].sticky) return fail(S().dev[(size_t)s->device].sticky);
  }
  if (count == 0) return cudaSuccess;
  if (where(devPtr, count) < 0) {
    report("cudaMemsetAsync: [%p, +%zu bytes) is not inside one live device allocation (%s)",
           devPtr, count, describe(devPtr).c_str());
    return fail(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lk(S().mu);
  std::shared_ptr<CUstream_st> s = resolve_locked(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  push_locked(s, set_op(devPtr, value, count));
  return cudaSuccess;
}

/* Asynchronous with respect to the host (device memory), on stream 0. */
cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  return cudaMemsetAsync(devPtr, value, count, 0);
}

} /* extern "C" */
