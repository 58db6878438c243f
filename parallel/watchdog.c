/* watchdog.c — the no-progress watchdog (see td_watchdog.h).
 *
 * The main thread publishes, with atomic stores, what it waits in and since
 * when; the watchdog thread only reads them. When the bound is passed it
 * prints the message and raises `fired`; the main thread, polling its
 * request in td_watchdog_wait, sees the flag between two MPI_Test calls and
 * calls MPI_Abort itself. The watchdog thread makes no MPI call (MPICH over
 * UCX asserts when a second thread enters the library while the first is in
 * its progress engine, as MPI_THREAD_FUNNELED allows it to be). */
#include "parallel/td_watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "td_log.h"

#define MAX_NAMES 16
#define FIRST_STEP_FACTOR 3.0
#define IO_FACTOR 3.0 /* checkpoint saves and loads: their bound, in run.watchdog_s */
#define TICK_NS 250000000L
#define GRACE_S 10.0 /* after firing, before the watchdog thread ends the process */

static struct {
  pthread_t thread;
  int running;
  MPI_Comm world;
  double limit_s;
  /* written by the main thread, read by the watchdog (atomics) */
  const char *op;   /* what this rank waits in, NULL when not waiting */
  MPI_Comm comm;
  int64_t since_ms; /* when the wait began (td_now() in ms) */
  int64_t step, nsteps; /* step running; steps begun in this run */
  int io, stop;     /* io: inside checkpoint I/O (td_watchdog_io), nesting depth */
  int fired;        /* the bound was passed: the waiting thread must end the job */
  /* communicator names, set before waits begin */
  int nnames;
  MPI_Comm name_comm[MAX_NAMES];
  const char *name[MAX_NAMES];
} g_wd;

static int64_t now_ms(void) { return (int64_t)(td_now() * 1e3); }

void td_watchdog_name(MPI_Comm comm, const char *name) {
  for (int i = 0; i < g_wd.nnames; ++i)
    if (g_wd.name_comm[i] == comm) {
      g_wd.name[i] = name;
      return;
    }
  if (g_wd.nnames == MAX_NAMES) return;
  g_wd.name_comm[g_wd.nnames] = comm;
  g_wd.name[g_wd.nnames] = name;
  __atomic_store_n(&g_wd.nnames, g_wd.nnames + 1, __ATOMIC_RELEASE);
}

static const char *comm_name(MPI_Comm comm) {
  int n = __atomic_load_n(&g_wd.nnames, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; ++i)
    if (g_wd.name_comm[i] == comm) return g_wd.name[i];
  return comm == MPI_COMM_NULL ? "?" : "a communicator";
}

int td_watchdog_begin(const char *op, MPI_Comm comm) {
  if (!__atomic_load_n(&g_wd.running, __ATOMIC_ACQUIRE)) return 0;
  /* inside checkpoint I/O the whole phase is the wait (td_watchdog_io) */
  if (__atomic_load_n(&g_wd.io, __ATOMIC_ACQUIRE) > 0) return 1;
  __atomic_store_n(&g_wd.comm, comm, __ATOMIC_RELAXED);
  __atomic_store_n(&g_wd.since_ms, now_ms(), __ATOMIC_RELAXED);
  __atomic_store_n(&g_wd.op, op, __ATOMIC_RELEASE);
  return 2;
}

void td_watchdog_check(void) {
  if (__atomic_load_n(&g_wd.fired, __ATOMIC_ACQUIRE)) {
    MPI_Abort(g_wd.world, 3); /* the message is out (the watchdog thread) */
    _exit(3);
  }
}

void td_watchdog_end(int begun) {
  if (begun == 2) __atomic_store_n(&g_wd.op, (const char *)NULL, __ATOMIC_RELEASE);
}

int td_watchdog_wait(const char *op, MPI_Comm comm, MPI_Request *req) {
  int begun = td_watchdog_begin(op, comm);
  if (!begun) return MPI_Wait(req, MPI_STATUS_IGNORE);
  int rc = MPI_SUCCESS, done = 0;
  while (rc == MPI_SUCCESS && !done) {
    rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    td_watchdog_check();
  }
  td_watchdog_end(begun);
  return rc;
}

int td_watched(int rc, const char *op, MPI_Comm comm, MPI_Request *req) {
  return rc != MPI_SUCCESS ? rc : td_watchdog_wait(op, comm, req);
}

void td_watchdog_io(const char *what) {
  if (what) {
    if (__atomic_add_fetch(&g_wd.io, 1, __ATOMIC_ACQ_REL) > 1) return; /* nested */
    __atomic_store_n(&g_wd.comm, g_wd.world, __ATOMIC_RELAXED);
    __atomic_store_n(&g_wd.since_ms, now_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&g_wd.op, what, __ATOMIC_RELEASE);
  } else if (__atomic_sub_fetch(&g_wd.io, 1, __ATOMIC_ACQ_REL) == 0) {
    __atomic_store_n(&g_wd.op, (const char *)NULL, __ATOMIC_RELEASE);
  }
}

void td_watchdog_step(int64_t step) {
  __atomic_store_n(&g_wd.step, step, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_wd.nsteps, 1, __ATOMIC_RELAXED);
}

/* Print what this rank waits in (from the watchdog thread: write(2) only). */
static void report(const char *op, MPI_Comm comm, double waited, double bound, int64_t step) {
  char host[64] = "?", msg[1024], when[64];
  gethostname(host, sizeof host);
  host[sizeof host - 1] = '\0';
  if (step > 0)
    snprintf(when, sizeof when, "during step %lld", (long long)step);
  else
    snprintf(when, sizeof when, "before the first step");
  int n = snprintf(msg, sizeof msg,
                   "[rank %d] trident: error: watchdog: no progress for %.0f s (bound %.0f s, "
                   "run.watchdog_s): rank %d (host %s, pid %d) has waited %s in %s on %s; a rank "
                   "of that communicator stopped, died or is stuck (the ranks that do not report "
                   "this are the ones to look at). Ending the job (exit 3).\n",
                   td_log_rank(), waited, bound, td_log_rank(), host, (int)getpid(), when, op,
                   comm_name(comm));
  if (n > 0) {
    ssize_t w = write(STDERR_FILENO, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    (void)w;
  }
}

static void *watch(void *arg) {
  (void)arg;
  struct timespec tick = {0, TICK_NS};
  double fired_at = 0.0;
  while (!__atomic_load_n(&g_wd.stop, __ATOMIC_ACQUIRE)) {
    nanosleep(&tick, NULL);
    if (fired_at > 0.0) {
      if (td_now() - fired_at > GRACE_S) _exit(3); /* the waiting thread did not end it */
      continue;
    }
    const char *op = __atomic_load_n(&g_wd.op, __ATOMIC_ACQUIRE);
    if (!op) continue;
    int64_t step = __atomic_load_n(&g_wd.step, __ATOMIC_RELAXED);
    int first = __atomic_load_n(&g_wd.nsteps, __ATOMIC_RELAXED) <= 1;
    int io = __atomic_load_n(&g_wd.io, __ATOMIC_ACQUIRE) > 0;
    double bound = g_wd.limit_s * (io ? IO_FACTOR : first ? FIRST_STEP_FACTOR : 1.0);
    double waited = (double)(now_ms() - __atomic_load_n(&g_wd.since_ms, __ATOMIC_RELAXED)) / 1e3;
    /* the op read above may have ended and another begun since: re-read */
    if (waited > bound && __atomic_load_n(&g_wd.op, __ATOMIC_ACQUIRE) == op) {
      report(op, __atomic_load_n(&g_wd.comm, __ATOMIC_RELAXED), waited, bound, step);
      /* checkpoint I/O waits in blocking MPI, MPI-IO and HDF5 calls, where
       * the main thread cannot see the flag: end the process now (the
       * launcher ends the others) */
      if (io) _exit(3);
      fired_at = td_now();
      __atomic_store_n(&g_wd.fired, 1, __ATOMIC_RELEASE);
    }
  }
  return NULL;
}

td_status td_watchdog_start(MPI_Comm world, double limit_s) {
  if (limit_s <= 0 || g_wd.running) return TD_OK;
  g_wd.world = world;
  g_wd.limit_s = limit_s;
  g_wd.stop = 0;
  int rc = pthread_create(&g_wd.thread, NULL, watch, NULL);
  if (rc != 0) TD_FAIL(TD_ERR_INTERNAL, "cannot start the watchdog thread: %s", strerror(rc));
  __atomic_store_n(&g_wd.running, 1, __ATOMIC_RELEASE);
  return TD_OK;
}

void td_watchdog_stop(void) {
  if (!g_wd.running) return;
  __atomic_store_n(&g_wd.stop, 1, __ATOMIC_RELEASE);
  pthread_join(g_wd.thread, NULL);
  __atomic_store_n(&g_wd.running, 0, __ATOMIC_RELEASE);
}
