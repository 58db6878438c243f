/* signals.c — the training job's SIGINT/SIGTERM/SIGUSR1/SIGUSR2 flag (see td_signals.h).
 *
 * The signals are blocked in every thread and taken by one thread of ours
 * with sigwait: a handler that runs on a compute thread pushes its frame onto
 * that thread's stack wherever it is, and inside oneDNN 2.6's JIT matmul
 * kernels that corrupts the heap (tests/e2e/signal_flood.sh: SIGUSR1 at
 * 1 kHz aborted a run within 3-9 steps). The flag handler stays installed
 * for a thread that a library started before td_signals_block (it must not
 * take the default action, which ends the process). */
#include "app/train/td_signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_signal;

static void on_signal(int sig) { atomic_store(&g_signal, sig); }

static void stop_set(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGUSR1);
  sigaddset(set, SIGUSR2);
}

void td_signals_block(void) {
  sigset_t set;
  stop_set(&set);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* The one thread that receives the stop signals; they stay blocked in it
 * (sigwait takes them from the pending set), so no handler frame is pushed. */
static void *signal_thread(void *arg) {
  (void)arg;
  sigset_t set;
  stop_set(&set);
  double first_int = 0.0; /* when the first SIGINT came (CLOCK_MONOTONIC, s) */
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    if (sig == SIGINT && atomic_load(&g_signal) == SIGINT && t - first_int > 1.0) {
      /* a second Ctrl-C: the user does not want to wait for the save (one
       * Ctrl-C can arrive twice within milliseconds: from the launcher and
       * to the process group; those count once) */
      static const char msg[] = "trident: second SIGINT: ending now without saving; the "
                                "checkpoints already committed stay\n";
      ssize_t w = write(2, msg, sizeof msg - 1);
      (void)w;
      _exit(130);
    }
    if (sig == SIGINT && atomic_load(&g_signal) != SIGINT) first_int = t;
    atomic_store(&g_signal, sig);
  }
  return NULL;
}

void td_signals_install(int catch_them) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = catch_them ? on_signal : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  if (catch_them) {
    pthread_t th;
    pthread_attr_t attr;
    int ok = pthread_attr_init(&attr) == 0;
    ok = ok && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0;
    ok = ok && pthread_create(&th, &attr, signal_thread, NULL) == 0;
    if (ok) {
      pthread_setname_np(th, "td-signals");
      pthread_attr_destroy(&attr);
      return; /* blocked here and in every thread started from now on */
    }
    fprintf(stderr, "trident: warning: cannot start the signal thread; stop signals are "
                    "handled on the main thread\n");
  }
  /* the other commands (default action), or no thread: deliver them here */
  sigset_t set;
  stop_set(&set);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int td_signal_pending(void) { return atomic_load(&g_signal); }
