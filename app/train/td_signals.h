/* td_signals.h — SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 during training (what
 * Slurm sends before a time limit or preemption, and Ctrl-C: MPICH's hydra
 * forwards one SIGINT per Ctrl-C, USR1 and TERM to the ranks; Open MPI's
 * mpirun forwards USR1 and USR2): they only set a flag; the training loop
 * agrees on it at a step boundary, saves a checkpoint and exits 75. A second
 * SIGINT ends the process at once (exit 130), keeping what was committed. */
#ifndef TD_SIGNALS_H
#define TD_SIGNALS_H

/* First thing in main, before any thread is started (MPI's, OpenMP's, the
 * watchdog's: they inherit the mask): block SIGINT, SIGTERM, SIGUSR1 and SIGUSR2, so
 * that one arriving during start-up waits, and none ever interrupts a
 * compute thread. */
void td_signals_block(void);
/* After MPI_Init: with catch (training), start the thread that takes them
 * with sigwait and sets the flag — they stay blocked everywhere else; a
 * signal that arrived meanwhile is taken now. Without, restore the default
 * action and unblock them in this thread (the other commands end at once). */
void td_signals_install(int catch_them);
/* The last signal caught (0: none). */
int td_signal_pending(void);

#endif
