/* mpi_yield.c — test-only LD_PRELOAD library: MPICH's ranks give up their
 * core while they wait, when the tests run more ranks than there are cores.
 *
 * MPICH's ch4:ucx device (Debian's MPICH 4.0) waits for a message by calling
 * ucp_worker_progress in a loop, and in that device MPIR_CVAR_POLLS_BEFORE_YIELD
 * does not make it yield. With 4 or 8 ranks on 2 cores, a rank waiting in a
 * collective then spins through its whole time slice while the rank it waits
 * for is descheduled: test_grid at 8 ranks took 22.7 s, and 2.8–4.3 s with
 * this library. Here the loop's UCX call is wrapped: after 64 calls in a row
 * that made no progress the caller yields the core (sched_yield); any
 * progress resets the count. Nothing else changes: the same calls, the same
 * messages, in the same order — only who runs while a rank waits.
 *
 * The tests of an MPICH build run with it (tests/CMakeLists.txt sets
 * LD_PRELOAD for every test; not in sanitizer builds, where a preloaded
 * library must follow the sanitizer's runtime, and that runtime preloaded
 * into a test's bash and Python would report their leaks). A process that never calls
 * ucp_worker_progress (mpiexec, bash, Python, Open MPI's ranks) is not
 * affected. It is not part of trident: a cluster's ranks have their cores. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>

typedef struct ucp_worker *ucp_worker_h;
typedef unsigned (*progress_fn)(ucp_worker_h);

enum { IDLE_POLLS_BEFORE_YIELD = 64 };

unsigned ucp_worker_progress(ucp_worker_h worker);
unsigned ucp_worker_progress(ucp_worker_h worker) {
  static progress_fn real;
  static __thread unsigned idle;
  if (!real) real = (progress_fn)dlsym(RTLD_NEXT, "ucp_worker_progress");
  unsigned n = real(worker);
  if (n != 0) {
    idle = 0;
  } else if (++idle >= IDLE_POLLS_BEFORE_YIELD) {
    idle = 0;
    sched_yield();
  }
  return n;
}
