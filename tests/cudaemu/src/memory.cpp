/* memory.cpp — the emulated devices' memory: one arena per device, a large
 * PROT_NONE reservation (mmap) sub-allocated 256-byte aligned as cudaMalloc
 * aligns, and pinned host memory.
 *
 * Device memory is device memory: the arenas are readable and writable only
 * while some stream worker runs a device operation (a count over all
 * workers: mprotect when it goes 0 <-> 1), PROT_NONE otherwise, so host code
 * that dereferences a device pointer instead of copying through
 * cudaMemcpy faults; the SIGSEGV handler installed here recognises a fault
 * inside an arena and names the allocation before the program aborts (or
 * AddressSanitizer's handler prints the stack). The protection is
 * process-wide: a host access made while a device operation runs elsewhere
 * is not caught (memory protection keys would give per-thread rights; not
 * used here).
 *
 * Out-of-bounds device accesses: under AddressSanitizer the bytes after each
 * allocation (its tail to the 256-byte boundary and a redzone of at least
 * 256 bytes) and freed allocations are poisoned. Fresh allocations are
 * filled with 0xFF bytes (NaN as float or bf16), so reading memory no one
 * wrote shows. Freed address ranges are reused only when the reservation is
 * exhausted, which keeps use-after-free visible. */
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "rt_internal.h"

namespace cudaemu {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kAlign = 256;   /* cudaMalloc's alignment */
constexpr int kFrames = 8;       /* call stack kept per allocation */
/* The arena is committed in steps of this (2 MiB, x86-64's huge page) and
 * asks for transparent huge pages: every device operation toggles the
 * protection of all committed memory, and with 4 KiB pages the kernel's
 * page-table walk in mprotect was 30% of a pipeline test's CPU (42 MB
 * committed, ~8,000 toggles a process); a huge page is one entry. */
constexpr size_t kCommitStep = 2u << 20;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct Alloc {
  size_t bytes;  /* asked for */
  size_t user;   /* bytes rounded to 256: counted against the device */
  size_t span;   /* user + redzone: the address range it holds */
  void *frames[kFrames];
  int nframes;
};

struct Arena {
  int dev;
  char *base;
  size_t reserve;    /* bytes reserved */
  size_t hwm;        /* offset past the highest span ever handed out */
  size_t committed;  /* [0, committed) follows the access toggle; the rest stays PROT_NONE */
  size_t used;       /* bytes allocated (user sizes) */
  std::map<uintptr_t, Alloc> live;
  std::map<size_t, size_t> holes;      /* freed spans: offset -> length (coalesced) */
  std::map<uintptr_t, size_t> freed;   /* freed allocations: start -> bytes (for messages) */
};

std::mutex g_mu;                               /* arenas, pinned blocks, the access count */
std::atomic<Arena *> g_arena[kMaxDevices];     /* read lock-free by the fault handler */
int g_access;                                  /* device operations running */
std::map<uintptr_t, size_t> g_pinned;          /* pinned host blocks: start -> bytes */
size_t g_page;
thread_local bool t_in_device_op;

void protect(Arena *a, int prot) {
  if (a->committed && mprotect(a->base, a->committed, prot) != 0)
    report("mprotect of device %d's memory failed: %s", a->dev, strerror(errno));
}

Arena *arena_locked(int dev) {
  Arena *a = g_arena[dev].load();
  if (a) return a;
  size_t reserve = round_up(2 * config().mem_bytes + (64u << 20), kCommitStep);
  /* one step more, to start at a multiple of the step */
  void *p = mmap(NULL, reserve + kCommitStep, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    report("cannot reserve %zu bytes of address space for device %d: %s", reserve, dev,
           strerror(errno));
    return NULL;
  }
  char *base = (char *)round_up((uintptr_t)p, kCommitStep);
  (void)madvise(base, reserve, MADV_HUGEPAGE); /* a hint: without it, 4 KiB pages */
  a = new Arena();
  a->dev = dev;
  a->base = base;
  a->reserve = reserve;
  a->hwm = a->committed = a->used = 0;
  g_arena[dev].store(a);
  return a;
}

/* The arena holding address x, or NULL (lock-free: the fault handler). */
Arena *arena_of(uintptr_t x) {
  for (int d = 0; d < kMaxDevices; d++) {
    Arena *a = g_arena[d].load();
    if (a && x >= (uintptr_t)a->base && x < (uintptr_t)a->base + a->reserve) return a;
  }
  return NULL;
}

/* One frame as "function file:line" (AddressSanitizer's symbolizer) or as
 * backtrace_symbols writes it. */
std::string frame_text(void *pc) {
  char buf[512];
#ifdef CUDAEMU_ASAN
  __sanitizer_symbolize_pc(pc, "%f %L", buf, sizeof buf);
  return buf;
#else
  char **s = backtrace_symbols(&pc, 1);
  snprintf(buf, sizeof buf, "%s", s ? s[0] : "?");
  free(s);
  return buf;
#endif
}

std::string describe_locked(const void *p) {
  uintptr_t x = (uintptr_t)p;
  Arena *a = arena_of(x);
  char buf[512];
  if (!a) {
    auto it = g_pinned.upper_bound(x);
    if (it != g_pinned.begin() && x < (--it)->first + it->second) {
      snprintf(buf, sizeof buf, "pinned host memory (cudaMallocHost block of %zu bytes at %p)",
               it->second, (void *)it->first);
      return buf;
    }
    return "host memory";
  }
  auto it = a->live.upper_bound(x);
  if (it != a->live.begin() && x < std::prev(it)->first + std::prev(it)->second.span) {
    --it;
    const Alloc &al = it->second;
    if (x < it->first + al.bytes)
      snprintf(buf, sizeof buf, "byte %zu of the allocation of %zu bytes at %p on device %d",
               (size_t)(x - it->first), al.bytes, (void *)it->first, a->dev);
    else
      snprintf(buf, sizeof buf,
               "%zu bytes past the end of the allocation of %zu bytes at %p on device %d",
               (size_t)(x - it->first - al.bytes), al.bytes, (void *)it->first, a->dev);
    std::string s = buf;
    s += ", made at";
    for (int i = 0; i < al.nframes; i++) s += (i ? " <- " : " ") + frame_text(al.frames[i]);
    return s;
  }
  auto f = a->freed.upper_bound(x);
  if (f != a->freed.begin() && x < std::prev(f)->first + std::prev(f)->second) {
    --f;
    snprintf(buf, sizeof buf, "freed device memory (an allocation of %zu bytes at %p on device %d)",
             f->second, (void *)f->first, a->dev);
    return buf;
  }
  snprintf(buf, sizeof buf, "device %d's memory outside every allocation", a->dev);
  return buf;
}

struct sigaction g_prev_segv;

void write_err(const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
}

/* Hand the signal to the handler that was there before (AddressSanitizer's
 * reports the faulting stack and exits), or print the stack and abort. */
void chain_segv(int sig, siginfo_t *si, void *uc, bool ours) {
  if ((g_prev_segv.sa_flags & SA_SIGINFO) && g_prev_segv.sa_sigaction) {
    g_prev_segv.sa_sigaction(sig, si, uc);
    return;
  }
  if (g_prev_segv.sa_handler != SIG_DFL && g_prev_segv.sa_handler != SIG_IGN &&
      !(g_prev_segv.sa_flags & SA_SIGINFO)) {
    g_prev_segv.sa_handler(sig);
    return;
  }
  if (ours) {
    void *frames[32];
    int n = backtrace(frames, 32);
    write_err("cudaemu: the faulting thread's stack:\n");
    backtrace_symbols_fd(frames, n, 2);
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  signal(sig, SIG_DFL); /* the access faults again with the default action */
}

void on_segv(int sig, siginfo_t *si, void *uc) {
  uintptr_t x = (uintptr_t)si->si_addr;
  Arena *a = arena_of(x);
  if (a) {
    std::string what;
    if (g_mu.try_lock()) {
      what = describe_locked(si->si_addr);
      g_mu.unlock();
    } else {
      what = "allocation unknown: the allocator was busy";
    }
    char buf[2048];
    if (t_in_device_op)
      snprintf(buf, sizeof buf,
               "cudaemu: device code accessed %p, %s: an illegal address on a GPU\n",
               si->si_addr, what.c_str());
    else
      snprintf(buf, sizeof buf,
               "cudaemu: host access to device memory at %p (%s): host code may reach device "
               "memory only through cudaMemcpy*/cudaMemset* (or in kernels)\n",
               si->si_addr, what.c_str());
    write_err(buf);
    chain_segv(sig, si, uc, true);
    return;
  }
  if (fiber_guard_hit(x)) {
    write_err("cudaemu: a device thread overflowed its fiber stack (deep recursion or a large "
              "local array in a kernel)\n");
    chain_segv(sig, si, uc, true);
    return;
  }
  chain_segv(sig, si, uc, false);
}

} // namespace

void set_in_device_op(bool on) { t_in_device_op = on; }

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    void *warm[2];
    backtrace(warm, 2); /* loads the unwinder now, not inside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
  });
}

void access_acquire() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_access++ == 0)
    for (int d = 0; d < kMaxDevices; d++)
      if (Arena *a = g_arena[d].load()) protect(a, PROT_READ | PROT_WRITE);
}

void access_release() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (--g_access == 0)
    for (int d = 0; d < kMaxDevices; d++)
      if (Arena *a = g_arena[d].load()) protect(a, PROT_NONE);
}

cudaError_t device_alloc(int dev, size_t bytes, void **out) {
  *out = NULL;
  if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
  install_fault_handler();
  char *p = NULL;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
    Arena *a = arena_locked(dev);
    if (!a) return cudaErrorMemoryAllocation;
    size_t user = round_up(bytes ? bytes : 1, kAlign);
    size_t rz = std::min<size_t>(std::max<size_t>(round_up(user / 16, kAlign), kAlign), 64u << 10);
    size_t span = user + rz, off = 0;
    if (bytes > config().mem_bytes || a->used + user > config().mem_bytes)
      return cudaErrorMemoryAllocation;
    if (a->hwm + span <= a->reserve) {
      off = a->hwm;
      a->hwm += span;
    } else { /* the reservation is used up: the first freed span that fits */
      auto h = std::find_if(a->holes.begin(), a->holes.end(),
                            [&](const std::pair<const size_t, size_t> &e) { return e.second >= span; });
      if (h == a->holes.end()) return cudaErrorMemoryAllocation;
      off = h->first;
      size_t len = h->second;
      a->holes.erase(h);
      if (len > span) a->holes[off + span] = len - span;
      auto f = a->freed.lower_bound((uintptr_t)a->base + off);
      while (f != a->freed.end() && f->first < (uintptr_t)a->base + off + span) f = a->freed.erase(f);
    }
    size_t commit = round_up(a->hwm, kCommitStep);
    if (commit > a->committed) {
      if (g_access > 0 &&
          mprotect(a->base + a->committed, commit - a->committed, PROT_READ | PROT_WRITE) != 0)
        report("mprotect failed: %s", strerror(errno));
      a->committed = commit;
    }
    a->used += user;
    p = a->base + off;
    Alloc al;
    al.bytes = bytes;
    al.user = user;
    al.span = span;
    void *frames[kFrames + 2];
    int n = backtrace(frames, kFrames + 2);
    al.nframes = n > 2 ? n - 2 : 0; /* without device_alloc and cudaMalloc */
    memcpy(al.frames, frames + 2, sizeof(void *) * (size_t)al.nframes);
    a->live[(uintptr_t)p] = al;
    CUDAEMU_UNPOISON(p, bytes);
    CUDAEMU_POISON(p + bytes, span - bytes);
  }
  access_acquire();
  memset(p, 0xFF, bytes); /* garbage, as uninitialised device memory is */
  access_release();
  *out = p;
  return cudaSuccess;
}

cudaError_t device_free(void *ptr) {
  std::lock_guard<std::mutex> lk(g_mu);
  uintptr_t x = (uintptr_t)ptr;
  Arena *a = arena_of(x);
  if (!a) return cudaErrorInvalidValue;
  auto it = a->live.find(x);
  if (it == a->live.end()) return cudaErrorInvalidValue;
  Alloc al = it->second;
  a->live.erase(it);
  a->used -= al.user;
  CUDAEMU_POISON(ptr, al.span);
  uintptr_t lo = round_up(x, g_page), hi = (x + al.span) / g_page * g_page;
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED); /* give the pages back */
  a->freed[x] = al.bytes;
  /* the span joins the holes, merged with its neighbours */
  size_t off = x - (uintptr_t)a->base, len = al.span;
  auto next = a->holes.lower_bound(off);
  if (next != a->holes.end() && next->first == off + len) {
    len += next->second;
    next = a->holes.erase(next);
  }
  if (next != a->holes.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return cudaSuccess;
    }
  }
  a->holes[off] = len;
  return cudaSuccess;
}

void device_free_all(int dev) {
  std::vector<void *> ptrs;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    Arena *a = dev >= 0 && dev < kMaxDevices ? g_arena[dev].load() : NULL;
    if (!a) return;
    for (auto &e : a->live) ptrs.push_back((void *)e.first);
  }
  for (void *p : ptrs) device_free(p);
}

size_t device_used(int dev) {
  std::lock_guard<std::mutex> lk(g_mu);
  Arena *a = dev >= 0 && dev < kMaxDevices ? g_arena[dev].load() : NULL;
  return a ? a->used : 0;
}

void *pinned_alloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, kAlign, bytes ? bytes : 1) != 0) return NULL;
  std::lock_guard<std::mutex> lk(g_mu);
  g_pinned[(uintptr_t)p] = bytes ? bytes : 1;
  return p;
}

cudaError_t pinned_free(void *p) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_pinned.find((uintptr_t)p);
    if (it == g_pinned.end()) return cudaErrorInvalidValue;
    g_pinned.erase(it);
  }
  free(p);
  return cudaSuccess;
}

bool is_pinned(const void *p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_mu);
  uintptr_t x = (uintptr_t)p;
  auto it = g_pinned.upper_bound(x);
  if (it == g_pinned.begin()) return false;
  --it;
  return x >= it->first && x + bytes <= it->first + it->second;
}

std::string describe(const void *p) {
  std::lock_guard<std::mutex> lk(g_mu);
  return describe_locked(p);
}

int where(const void *p, size_t bytes) {
  uintptr_t x = (uintptr_t)p;
  Arena *a = arena_of(x);
  if (!a) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = a->live.upper_bound(x);
  if (it == a->live.begin()) return -2;
  --it;
  if (x >= it->first + it->second.bytes) return -2;
  return x + bytes <= it->first + it->second.bytes ? a->dev : -2;
}

} // namespace cudaemu
