/* signals.c — the training job's SIGTERM/SIGUSR1/SIGUSR2 flag (see td_signals.h). */
#include "app/td_signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

void td_signals_block(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_BLOCK, &set, NULL);
}

void td_signals_install(int catch_them) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = catch_them ? on_signal : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
}

int td_signal_pending(void) { return (int)g_signal; }
