/* fiber.cpp — kernel execution on the emulated CUDA device: a grid of
 * blocks, each block's threads as fibers on the stream's worker thread.
 *
 * A launch runs its blocks one at a time in a seeded permuted order (CUDA
 * promises no order among blocks; Programming Guide, "Thread Hierarchy").
 * Within a block every thread is a fiber with its own stack (allocated once
 * per worker, reused by every block); a fiber runs until it reaches
 * __syncthreads, a warp intrinsic or its end, then the scheduler picks the
 * next one at random (TD_CUDAEMU_SEED) among those that may run, so the
 * order of threads between two synchronisation points differs from any
 * fixed order code might silently rely on.
 *
 * The rules enforced, with the Programming Guide sections they come from:
 *   - __syncthreads ("Synchronization Functions"): no thread passes until
 *     every thread of the block has reached it; a thread that has exited
 *     counts as arrived (bar.sync counts exited threads on sm_70 and newer,
 *     so early-return code works there; the emulation does the same). The
 *     guide allows __syncthreads in conditional code only where the
 *     condition is the same for the whole block: threads waiting at
 *     different __syncthreads, or some waiting at a barrier while others
 *     wait at a warp intrinsic no one else will reach, end the launch with
 *     an error naming the kernel, launch site, block and the places the
 *     threads wait (a hang on a GPU).
 *   - warp intrinsics ("Warp Shuffle Functions", "Warp Vote Functions",
 *     __syncwarp): the lanes named in the mask meet; a lane must name itself
 *     in the mask; every non-exited lane of the mask must call the same
 *     intrinsic with the same mask and width (else an error); width is a
 *     power of two up to 32; a value read from a lane that does not take part
 *     is undefined and reads as 0xFF bytes.
 *   - WMMA ("Warp Matrix Functions"; wmma.cpp): each *_sync call is a
 *     rendezvous of all 32 lanes of the warp (none exited), which must make
 *     the same call — site and arguments — else an error naming the calls.
 *   - static __shared__ memory: one instance per block and declaration site,
 *     at the same address for all the block's threads, filled with 0xFF
 *     bytes (NaN) when the block starts, so a read before any write shows; at
 *     most 48 KiB per block, static and dynamic together (a larger kernel
 *     does not compile for the GPU; here its launch fails). Under
 *     AddressSanitizer the bytes between variables are poisoned.
 * A failed launch prints its message and returns cudaErrorLaunchFailure,
 * which becomes the device's sticky error.
 *
 * Context switches: a hand-written x86-64 switch of the callee-saved
 * registers (swapcontext would make a system call per switch); other
 * architectures use ucontext. Under AddressSanitizer every switch is
 * announced with __sanitizer_start_switch_fiber /
 * __sanitizer_finish_switch_fiber, and each fiber keeps its fake stack
 * across blocks. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "rt_internal.h"

#if defined(__x86_64__)
/* cudaemu_ctx_switch(save_sp, to_sp): save the callee-saved registers on
 * the current stack, store its pointer in *save_sp, and resume the context
 * whose stack pointer is to_sp (SysV x86-64 ABI). MXCSR and the x87 control
 * word are not switched: device code never changes the floating-point
 * environment, so every fiber shares the worker's. No CFI: unwinders stop
 * here. */
extern "C" void cudaemu_ctx_switch(void **save_sp, void *to_sp);
asm(R"(
    .pushsection .text
    .p2align 4
    .globl cudaemu_ctx_switch
    .hidden cudaemu_ctx_switch
    .type cudaemu_ctx_switch, @function
cudaemu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudaemu_ctx_switch, .-cudaemu_ctx_switch
    .popsection
)");
#else
#include <ucontext.h>
#endif

namespace cudaemu {
namespace detail {
__thread const ThreadState *t_thread __attribute__((tls_model("initial-exec"))) = nullptr;
}

namespace {

constexpr size_t kStackBytes = 128 * 1024; /* per device thread */
constexpr size_t kGuardBytes = 4096;       /* PROT_NONE below each stack */
constexpr int kMaxThreads = 1024;
constexpr int kMaxSharedVars = 256; /* __shared__ declarations reached by one block */
constexpr size_t kSharedArena = 128 * 1024; /* static + dynamic + redzones */
constexpr size_t kSharedRedzone = 32;

enum class St : unsigned char { Ready, Barrier, Warp, Exited };

struct Fiber : detail::ThreadState {
  void *sp = nullptr;      /* saved stack pointer while switched out */
  char *stack = nullptr;   /* lowest byte of the usable stack */
  void *asan_fake = nullptr;
  bool dirty = false;      /* abandoned mid-kernel: its stack shadow may be poisoned */
  int linear = 0, warp = 0, lane = 0;
  St st = St::Ready;
  const char *wfile = nullptr; /* where it waits */
  int wline = 0;
  const char *wname = nullptr;
  int wop = 0, warg = 0, wwidth = 0; /* the warp operation it waits in */
  unsigned wmask = 0;
  uint64_t wval = 0; /* the value it brings, then the value it gets */
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct SharedVar {
  const void *key;
  char *p;
};

/* One worker thread's execution state. */
struct Worker {
  Fiber *fibers = nullptr; /* kMaxThreads of them */
  char *stacks = nullptr; /* kMaxThreads × (guard + stack), reserved once */
  int nstacks = 0;        /* stacks with their guard page set */
  void *sched_sp = nullptr;
  const void *sched_bottom = nullptr;
  size_t sched_size = 0;
  void *sched_fake = nullptr;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
  Fiber *cur = nullptr;
  /* the launch and block being run */
  const Launch *L = nullptr;
  uint3 bidx{0, 0, 0};
  int nthreads = 0, live = 0, at_barrier = 0;
  /* Plain arrays on the hot path (std::vector's members stay out of line,
   * each with a fake stack frame, under AddressSanitizer + UBSan). */
  Fiber *runnable[kMaxThreads]; /* the fibers that may run, in no order */
  int nrunnable = 0;
  uint64_t lane_in[32]; /* a completing warp operation's inputs (not on the stack: no
                           AddressSanitizer frame for try_complete) */
  unsigned absent[kMaxThreads / 32];  /* per warp: lanes exited or not existing */
  unsigned waiting[kMaxThreads / 32]; /* per warp: lanes waiting in a warp operation */
  uint64_t rng = 0;
  /* shared memory */
  char *shared = nullptr;
  size_t shared_off = 0, shared_static = 0, shared_hw = 0;
  SharedVar vars[kMaxSharedVars]; /* this block's static __shared__ instances */
  int nvars = 0;
  char *dyn = nullptr;
  /* a failure ends the launch */
  bool failed = false;
};

__thread Worker *t_worker __attribute__((tls_model("initial-exec"))) = nullptr;

/* Worker stack regions, for the fault handler's guard-page test. */
std::atomic<char *> g_regions[256];

uint64_t next_rand(uint64_t &s) { /* splitmix64 */
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string where_text(const Worker *w) {
  char b[512];
  snprintf(b, sizeof b, "kernel %s (launched at %s:%d), block (%u, %u, %u) of grid (%u, %u, %u)",
           w->L->kernel, w->L->file, w->L->line, w->bidx.x, w->bidx.y, w->bidx.z, w->L->grid.x,
           w->L->grid.y, w->L->grid.z);
  return b;
}

/* ---- context switching ------------------------------------------------------------ */
/* The functions whose frames are live when a fiber leaves for good
 * (fiber_main, yield, switch_ctx) are not instrumented by AddressSanitizer:
 * their frames are never unwound, and the redzones an instrumented frame
 * poisons would stay behind on the stack for the next block's fiber. */
#ifdef CUDAEMU_ASAN
#define CUDAEMU_NO_ASAN __attribute__((no_sanitize_address))
#else
#define CUDAEMU_NO_ASAN
#endif

void fiber_main();

#if defined(__x86_64__)
/* A fresh context for f: the first switch to it "returns" into fiber_main
 * with the stack aligned as after a call. */
void fiber_prepare(Fiber *f) {
  uint64_t *top = (uint64_t *)(f->stack + kStackBytes);
  top[-1] = 0; /* fiber_main's return address: none */
  top[-2] = (uint64_t)(uintptr_t)&fiber_main;
  for (int i = 3; i <= 8; i++) top[-i] = 0; /* rbp, rbx, r12-r15 */
  f->sp = &top[-8];
}
#else
void fiber_prepare(Fiber *f) {
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = kStackBytes;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiber_main, 0);
}
#endif

/* Leave the running context (fiber `from`, or the scheduler when NULL) for
 * fiber `to` (the scheduler when NULL); returns when something switches
 * back to `from`. */
CUDAEMU_NO_ASAN void switch_ctx(Worker *w, Fiber *from, Fiber *to) {
  w->cur = to;
  detail::t_thread = to;
#ifdef CUDAEMU_ASAN
  __sanitizer_start_switch_fiber(from ? &from->asan_fake : &w->sched_fake,
                                 to ? (const void *)to->stack : w->sched_bottom,
                                 to ? kStackBytes : w->sched_size);
#endif
#if defined(__x86_64__)
  cudaemu_ctx_switch(from ? &from->sp : &w->sched_sp, to ? to->sp : w->sched_sp);
#else
  swapcontext(from ? &from->uc : &w->sched_uc, to ? &to->uc : &w->sched_uc);
#endif
#ifdef CUDAEMU_ASAN
  __sanitizer_finish_switch_fiber(from ? from->asan_fake : w->sched_fake, nullptr, nullptr);
#endif
}

/* A runnable fiber, taken out of the list at random. */
CUDAEMU_NO_ASAN Fiber *take_random(Worker *w) {
  size_t k = (size_t)(((unsigned __int128)next_rand(w->rng) * (unsigned)w->nrunnable) >> 64);
  Fiber *f = w->runnable[k];
  w->runnable[k] = w->runnable[--w->nrunnable];
  return f;
}

bool try_complete(Worker *w, Fiber *f);

/* Fiber f has just waited (at a barrier, in a warp operation) or ended:
 * account for it, then switch straight to another runnable fiber of the
 * block (or carry on, if f itself was made runnable again by its warp
 * operation completing), or to the scheduler when none is left (a barrier
 * to release, the block's end, a deadlock or a failure). */
CUDAEMU_NO_ASAN void yield(Worker *w, Fiber *f) {
  if (f->st == St::Exited) {
    w->live--;
    w->absent[f->warp] |= 1u << f->lane;
    /* lanes of its warp waiting for it may go on without it */
    for (int l = 0; l < 32 && !w->failed; l++)
      if (w->waiting[f->warp] >> l & 1u)
        try_complete(w, &w->fibers[(f->warp * 32 + l)]);
  } else if (f->st == St::Barrier) {
    w->at_barrier++;
  } else if (f->st == St::Warp) {
    w->waiting[f->warp] |= 1u << f->lane;
    try_complete(w, f);
  }
  Fiber *next = !w->failed && w->nrunnable > 0 ? take_random(w) : nullptr;
  if (next != f) switch_ctx(w, f, next);
}

/* Every fiber starts here: the kernel body, then on to the next fiber for
 * good. */
CUDAEMU_NO_ASAN void fiber_main() {
  Worker *w = t_worker;
  Fiber *f = w->cur;
#ifdef CUDAEMU_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, nullptr, nullptr);
#endif
  w->L->body();
  f->st = St::Exited;
  yield(w, f);
  abort(); /* an exited fiber is never resumed */
}

/* A failure found inside a fiber: the message, the launch marked failed,
 * and the fiber leaves for good (its stack is abandoned: nothing on it may
 * own memory, hence a plain string). */
[[noreturn]] void fail_in_fiber(Worker *w, const char *msg) {
  report("%s, thread (%u, %u, %u): %s", where_text(w).c_str(), w->cur->thread_idx.x,
         w->cur->thread_idx.y, w->cur->thread_idx.z, msg);
  w->failed = true;
  switch_ctx(w, w->cur, nullptr);
  abort();
}

Worker *worker_get() {
  if (t_worker) return t_worker;
  Worker *w = new Worker();
  w->fibers = new Fiber[kMaxThreads];
  size_t bytes = (size_t)kMaxThreads * (kGuardBytes + kStackBytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    report("cannot reserve %zu bytes for device-thread stacks", bytes);
    abort();
  }
  w->stacks = (char *)p;
  for (auto &r : g_regions) {
    char *expected = nullptr;
    if (r.compare_exchange_strong(expected, w->stacks)) break;
  }
  for (int i = 0; i < kMaxThreads; i++)
    w->fibers[i].stack = w->stacks + (size_t)i * (kGuardBytes + kStackBytes) + kGuardBytes;
  w->shared = (char *)aligned_alloc(64, kSharedArena);
  w->shared_hw = kSharedArena;
  pthread_attr_t attr; /* the worker's own stack: where the scheduler runs */
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void *lo = nullptr;
    pthread_attr_getstack(&attr, &lo, &w->sched_size);
    w->sched_bottom = lo;
    pthread_attr_destroy(&attr);
  }
  t_worker = w;
  return w;
}

/* Stacks for n threads, each with a PROT_NONE guard page below it. */
void ensure_stacks(Worker *w, int n) {
  for (; w->nstacks < n; w->nstacks++)
    mprotect(w->fibers[w->nstacks].stack - kGuardBytes, kGuardBytes, PROT_NONE);
}

/* ---- shared memory --------------------------------------------------------------------- */
void shared_reset(Worker *w) {
  CUDAEMU_POISON(w->shared, w->shared_hw);
  w->shared_hw = 0;
  w->shared_off = 0;
  w->shared_static = 0;
  w->nvars = 0;
  w->dyn = nullptr;
  if (w->L->shmem) {
    w->dyn = w->shared;
    CUDAEMU_UNPOISON(w->dyn, w->L->shmem);
    memset(w->dyn, 0xFF, w->L->shmem);
    w->shared_off = (w->L->shmem + 15) / 16 * 16 + kSharedRedzone;
    w->shared_hw = w->shared_off;
  }
}

/* ---- warp operations ------------------------------------------------------------------- */
/* wmma's rendezvous (detail::warp_all): an operation code of the emulator's
 * own, beyond cudaemu_device.h's WarpOp. Its lanes wait under the call's
 * description (the name they bring) and must all bring the same value. */
constexpr int kWarpAll = 100;

const char *op_name(int op) {
  switch (op) {
  case detail::kShflIdx: return "__shfl_sync";
  case detail::kShflUp: return "__shfl_up_sync";
  case detail::kShflDown: return "__shfl_down_sync";
  case detail::kShflXor: return "__shfl_xor_sync";
  case detail::kSyncWarp: return "__syncwarp";
  default: return "__ballot_sync";
  }
}

Fiber &lane_fiber(Worker *w, int warp, int lane) { return w->fibers[(warp * 32 + lane)]; }

/* What a lane waiting in a warp operation waits in, for messages. */
const char *wait_name(const Fiber &f) { return f.wop == kWarpAll ? f.wname : op_name(f.wop); }

/* The failures try_complete finds, out of line (their strings would put an
 * AddressSanitizer frame on every call). */
__attribute__((noinline, cold)) void lanes_disagree(Worker *w, const Fiber *f, int l) {
  const Fiber &g = lane_fiber(w, f->warp, l);
  report("%s, warp %d: lane %d waits in %s(mask 0x%08x, width %d) at %s:%d while lane %d "
         "waits in %s(mask 0x%08x, width %d) at %s:%d: every non-exited lane named in the "
         "mask must execute the same intrinsic with the same mask (Programming Guide, Warp "
         "Shuffle Functions)",
         where_text(w).c_str(), f->warp, f->lane, wait_name(*f), f->wmask, f->wwidth, f->wfile,
         f->wline, l, wait_name(g), g.wmask, g.wwidth, g.wfile, g.wline);
}

/* A wmma rendezvous that is not the whole warp making one call: lanes
 * missing (`need` short of all 32), or lane l's call differing from lane 0's. */
__attribute__((noinline, cold)) void warp_all_fails(Worker *w, const Fiber *f, unsigned need,
                                                    int l) {
  if (need != ~0u) {
    unsigned gone = ~need;
    bool exist = f->warp * 32 + 31 - __builtin_clz(gone) < w->nthreads;
    report("%s, warp %d: %s at %s:%d is reached by %d of the warp's 32 lanes (lanes 0x%08x %s): "
           "every lane of the warp must call it (Programming Guide, Warp Matrix Functions)",
           where_text(w).c_str(), f->warp, f->wname, f->wfile, f->wline, __builtin_popcount(need),
           gone, exist ? "have exited" : "do not exist: the block is not a whole number of warps");
    return;
  }
  const Fiber &g0 = lane_fiber(w, f->warp, 0), &g = lane_fiber(w, f->warp, l);
  report("%s, warp %d: lane %d calls %s at %s:%d while lane 0 calls %s at %s:%d: every lane of "
         "the warp must make the same call with the same arguments (Programming Guide, Warp "
         "Matrix Functions)",
         where_text(w).c_str(), f->warp, l, g.wname, g.wfile, g.wline, g0.wname, g0.wfile,
         g0.wline);
}

__attribute__((noinline, cold)) void bad_width(Worker *w, const Fiber *f) {
  report("%s, warp %d: %s at %s:%d with width %d: width must be a power of two from 1 to 32",
         where_text(w).c_str(), f->warp, op_name(f->wop), f->wfile, f->wline, f->wwidth);
}

/* The group of lanes that f waits with: complete it if every non-exited lane
 * of its mask has arrived (checking they agree), else leave it waiting.
 * Returns false after a failure (w->failed set, message printed). */
bool try_complete(Worker *w, Fiber *f) {
  unsigned mask = f->wmask;
  unsigned need = mask & ~w->absent[f->warp];
  if (need & ~w->waiting[f->warp]) return true; /* someone has not arrived yet */
  /* all there: the same intrinsic, mask and width for everyone */
  for (int l = 0; l < 32; l++) {
    if (!(need >> l & 1u)) continue;
    Fiber &g = lane_fiber(w, f->warp, l);
    if (g.wop != f->wop || g.wmask != f->wmask || g.wwidth != f->wwidth) {
      lanes_disagree(w, f, l);
      w->failed = true;
      return false;
    }
  }
  if (f->wop == kWarpAll) { /* all 32 lanes, one call */
    int bad = need == ~0u ? 0 : -1;
    for (int l = 1; l < 32 && !bad; l++)
      if (lane_fiber(w, f->warp, l).wval != lane_fiber(w, f->warp, 0).wval) bad = l;
    if (bad) {
      warp_all_fails(w, f, need, bad);
      w->failed = true;
      return false;
    }
  }
  int width = f->wwidth;
  if (width < 1 || width > 32 || (width & (width - 1))) {
    bad_width(w, f);
    w->failed = true;
    return false;
  }
  uint64_t *in = w->lane_in;
  unsigned ballot = 0;
  for (int l = 0; l < 32; l++)
    if (need >> l & 1u) {
      in[l] = lane_fiber(w, f->warp, l).wval;
      if ((uint32_t)in[l]) ballot |= 1u << l;
    }
  for (int l = 0; l < 32; l++) {
    if (!(need >> l & 1u)) continue;
    Fiber &g = lane_fiber(w, f->warp, l);
    int base = l & ~(width - 1), src = l;
    switch (f->wop) {
    case detail::kShflIdx: src = base + (f->warg & (width - 1)); break;
    case detail::kShflUp: src = l - base >= f->warg ? l - f->warg : l; break;
    case detail::kShflDown: src = l - base + f->warg < width ? l + f->warg : l; break;
    case detail::kShflXor: /* later groups give the caller its own value */
      src = l ^ f->warg;
      if (src < 0 || src > 31 || src >= base + width) src = l;
      break;
    default: break;
    }
    if (f->wop == detail::kBallot)
      g.wval = ballot;
    else if (f->wop != detail::kSyncWarp) /* an inactive lane's value: undefined, 0xFF bytes */
      g.wval = need >> src & 1u ? in[src] : ~(uint64_t)0;
    g.st = St::Ready;
    w->waiting[f->warp] &= ~(1u << l);
    w->runnable[w->nrunnable++] = &g;
  }
  return true;
}

/* The description of where the block's live threads wait (a deadlock). */
std::string waits_text(Worker *w) {
  struct Site {
    const char *what, *file;
    int line;
    int n;
  };
  std::vector<Site> sites;
  int exited = 0;
  for (int t = 0; t < w->nthreads; t++) {
    Fiber &f = w->fibers[t];
    if (f.st == St::Exited) {
      exited++;
      continue;
    }
    const char *what = f.st == St::Barrier ? "__syncthreads" : wait_name(f);
    auto it = std::find_if(sites.begin(), sites.end(), [&](const Site &s) {
      return strcmp(s.what, what) == 0 && s.line == f.wline && strcmp(s.file, f.wfile) == 0;
    });
    if (it == sites.end())
      sites.push_back(Site{what, f.wfile, f.wline, 1});
    else
      it->n++;
  }
  std::string s;
  char b[512];
  for (const Site &x : sites) {
    snprintf(b, sizeof b, "%s%d threads in %s at %s:%d", s.empty() ? "" : "; ", x.n, x.what,
             x.file, x.line);
    s += b;
  }
  snprintf(b, sizeof b, "; %d exited", exited);
  return s + b;
}

/* Run one block to its end; false after a failure. */
bool run_block(Worker *w, uint3 bidx) {
  const Launch &L = *w->L;
  w->bidx = bidx;
  shared_reset(w);
  int n = w->nthreads, nwarps = (n + 31) / 32;
  for (int i = 0; i < nwarps; i++) w->absent[i] = w->waiting[i] = 0u;
  if (n % 32) w->absent[nwarps - 1] = ~0u << (n % 32); /* lanes that do not exist */
  w->nrunnable = 0;
  for (int t = 0; t < n; t++) {
    Fiber &f = w->fibers[t];
    f.thread_idx = uint3{(unsigned)t % L.block.x, (unsigned)t / L.block.x % L.block.y,
                         (unsigned)t / (L.block.x * L.block.y)};
    f.block_idx = bidx;
    f.block_dim = L.block;
    f.grid_dim = L.grid;
    f.linear = t;
    f.warp = t / 32;
    f.lane = t % 32;
    f.st = St::Ready;
    if (f.dirty) { /* abandoned by a failed launch: its stack's shadow is stale */
      CUDAEMU_UNPOISON(f.stack, kStackBytes);
      f.dirty = false;
    }
    fiber_prepare(&f);
    w->runnable[w->nrunnable++] = &f;
  }
  w->live = n;
  w->at_barrier = 0;
  for (;;) {
    /* the fibers switch among themselves; back here when none can run */
    if (w->nrunnable > 0) switch_ctx(w, nullptr, take_random(w));
    if (w->failed) break;
    if (w->live == 0) return true;
    if (w->at_barrier == w->live) { /* everyone here: the same __syncthreads? */
      const Fiber *first = nullptr;
      for (int t = 0; t < n; t++) {
        Fiber &f = w->fibers[t];
        if (f.st != St::Barrier) continue;
        if (!first) {
          first = &f;
        } else if (f.wline != first->wline ||
                   (f.wfile != first->wfile && strcmp(f.wfile, first->wfile) != 0)) {
          report("%s: threads wait at different __syncthreads (%s); __syncthreads in conditional "
                 "code must be reached by the whole block (Programming Guide, Synchronization "
                 "Functions)",
                 where_text(w).c_str(), waits_text(w).c_str());
          w->failed = true;
          break;
        }
      }
      if (w->failed) break;
      for (int t = 0; t < n; t++) {
        Fiber &f = w->fibers[t];
        if (f.st == St::Barrier) {
          f.st = St::Ready;
          w->runnable[w->nrunnable++] = &f;
        }
      }
      w->at_barrier = 0;
      continue;
    }
    report("%s: deadlock: %s (on a GPU this kernel hangs)", where_text(w).c_str(),
           waits_text(w).c_str());
    w->failed = true;
    break;
  }
  for (int t = 0; t < n; t++)
    if (w->fibers[t].st != St::Exited) w->fibers[t].dirty = true;
  return false;
}

} // namespace

/* ---- the device side of cudaemu_device.h ------------------------------------------------ */
namespace detail {

void outside_kernel(const char *what, const char *file, int line) {
  report("%s used outside a kernel at %s:%d", what, file, line);
  abort();
}

/* The failures found in device calls, out of line: their message buffers
 * would otherwise sit in (and, under AddressSanitizer, enlarge) the hot
 * functions' frames. */
[[noreturn]] __attribute__((noinline, cold)) static void bad_mask(Worker *w, const char *name,
                                                                   const char *file, int line,
                                                                   unsigned mask) {
  char b[256];
  snprintf(b, sizeof b,
           "%s at %s:%d in lane %d with mask 0x%08x, which does not name the calling lane "
           "(Programming Guide, Warp Shuffle Functions: each calling thread must have its own "
           "bit set in the mask)",
           name, file, line, w->cur->lane, mask);
  fail_in_fiber(w, b);
}

[[noreturn]] __attribute__((noinline, cold)) static void too_much_shared(Worker *w,
                                                                          const char *name,
                                                                          const char *file,
                                                                          int line, size_t size) {
  char b[512];
  if (w->nvars == kMaxSharedVars)
    snprintf(b, sizeof b, "__shared__ %s at %s:%d: more than %d __shared__ declarations reached "
             "by one block (a limit of the emulator)", name, file, line, kMaxSharedVars);
  else
    snprintf(b, sizeof b,
             "__shared__ %s at %s:%d brings the block's shared memory to %zu bytes (%zu static, "
             "%zu dynamic), more than %zu: the kernel does not fit a GPU's block (ptxas: 'uses "
             "too much shared data')",
             name, file, line, w->shared_static + size + w->L->shmem, w->shared_static + size,
             w->L->shmem, kSharedLimit);
  fail_in_fiber(w, b);
}

static Worker *in_kernel(const char *what, const char *file, int line) {
  Worker *w = t_worker;
  if (!w || !w->cur) outside_kernel(what, file, line);
  return w;
}

void syncthreads(const char *file, int line) {
  Worker *w = in_kernel("__syncthreads", file, line);
  Fiber *f = w->cur;
  f->st = St::Barrier;
  f->wfile = file;
  f->wline = line;
  yield(w, f);
}

uint64_t warp_op(int op, unsigned mask, uint64_t bits, int arg, int width,
                 const char *name, const char *file, int line) {
  Worker *w = in_kernel(name, file, line);
  Fiber *f = w->cur;
  if (!(mask >> f->lane & 1u)) bad_mask(w, name, file, line, mask);
  f->st = St::Warp;
  f->wop = op;
  f->wmask = mask;
  f->warg = arg;
  f->wwidth = width;
  f->wname = name;
  f->wfile = file;
  f->wline = line;
  f->wval = bits;
  yield(w, f);
  return f->wval;
}

/* ---- wmma's hooks (wmma.cpp) ---- */
void warp_all(uint64_t key, const char *what, const char *file, int line) {
  warp_op(kWarpAll, ~0u, key, 0, 32, what, file, line);
}

[[noreturn]] void fail_launch(const char *msg) { fail_in_fiber(in_kernel("wmma", "?", 0), msg); }

bool in_block_shared(const void *p, size_t bytes) {
  Worker *w = t_worker;
  if (!w || !w->cur) return false;
  uintptr_t x = (uintptr_t)p, lo = (uintptr_t)w->shared;
  return x >= lo && x + bytes <= lo + w->shared_off;
}

void *shared_static(const void *key, size_t size, size_t align, const char *name, const char *file,
                    int line) {
  Worker *w = in_kernel("__shared__", file, line);
  for (int i = 0; i < w->nvars; i++)
    if (w->vars[i].key == key) return w->vars[i].p;
  if (w->shared_static + size + w->L->shmem > kSharedLimit || w->nvars == kMaxSharedVars)
    too_much_shared(w, name, file, line, size);
  size_t a = align > 16 ? align : 16;
  size_t off = (w->shared_off + a - 1) / a * a;
  char *p = w->shared + off;
  CUDAEMU_UNPOISON(p, size);
  memset(p, 0xFF, size); /* uninitialised: NaN */
  w->shared_off = off + size + kSharedRedzone;
  w->shared_hw = std::max(w->shared_hw, w->shared_off);
  w->shared_static += size;
  w->vars[w->nvars].key = key;
  w->vars[w->nvars].p = p;
  w->nvars++;
  return p;
}

void *shared_dynamic(const char *file, int line) {
  Worker *w = in_kernel("extern __shared__", file, line);
  return w->dyn;
}

} // namespace detail

cudaError_t run_kernel(const Launch &L) {
  auto t0 = std::chrono::steady_clock::now();
  Worker *w = worker_get();
  w->L = &L;
  w->failed = false;
  w->nthreads = (int)(L.block.x * L.block.y * L.block.z);
  ensure_stacks(w, w->nthreads);
  w->rng = L.seed;
  /* blocks in a permuted order: i -> (a·i + c) mod n with gcd(a, n) = 1 */
  unsigned __int128 n = (unsigned __int128)L.grid.x * L.grid.y * L.grid.z;
  uint64_t nb = (uint64_t)n, a = 1, c = 0;
  if (nb > 1) {
    for (;;) {
      a = next_rand(w->rng) % nb;
      uint64_t x = a, y = nb;
      while (y) {
        uint64_t t = x % y;
        x = y;
        y = t;
      }
      if (a != 0 && x == 1) break;
    }
    c = next_rand(w->rng) % nb;
  }
  bool ok = true;
  for (uint64_t i = 0; i < nb && ok; i++) {
    uint64_t b = (uint64_t)(((unsigned __int128)a * i + c) % n);
    uint3 bidx{(unsigned)(b % L.grid.x), (unsigned)(b / L.grid.x % L.grid.y),
               (unsigned)(b / ((uint64_t)L.grid.x * L.grid.y))};
    ok = run_block(w, bidx);
  }
  w->L = nullptr;
  if (config().profile)
    profile_add(L.kernel, nb, (uint64_t)nb * (uint64_t)w->nthreads,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok ? cudaSuccess : cudaErrorLaunchFailure;
}

void release_worker_fibers() {
  Worker *w = t_worker;
  if (!w) return;
  for (auto &r : g_regions) {
    char *expected = w->stacks;
    if (r.compare_exchange_strong(expected, nullptr)) break;
  }
  /* the shadow of stacks abandoned by a failed launch outlives the mapping:
   * the next worker's stacks may be mapped at the same addresses */
  for (int i = 0; i < w->nstacks; i++)
    if (w->fibers[i].dirty) CUDAEMU_UNPOISON(w->fibers[i].stack, kStackBytes);
  munmap(w->stacks, (size_t)kMaxThreads * (kGuardBytes + kStackBytes));
  free(w->shared);
  delete[] w->fibers;
  delete w;
  t_worker = nullptr;
}

bool fiber_guard_hit(uintptr_t addr) {
  for (auto &r : g_regions) {
    char *s = r.load();
    if (!s || addr < (uintptr_t)s) continue;
    uintptr_t off = addr - (uintptr_t)s;
    if (off < (uintptr_t)kMaxThreads * (kGuardBytes + kStackBytes) &&
        off % (kGuardBytes + kStackBytes) < kGuardBytes)
      return true;
  }
  return false;
}

} // namespace cudaemu
