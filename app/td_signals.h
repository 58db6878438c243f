/* td_signals.h — SIGTERM and SIGUSR1 (what Slurm sends before a time limit
 * or preemption) during training: they only set a flag; the training loop
 * agrees on it at a step boundary, saves a checkpoint and exits 75. */
#ifndef TD_SIGNALS_H
#define TD_SIGNALS_H

/* Before MPI_Init: block SIGTERM and SIGUSR1, so that one arriving during
 * start-up waits (instead of reaching the MPI library's own handler). */
void td_signals_block(void);
/* After MPI_Init: with catch, install the flag handler (training); without,
 * restore the default action (the other commands end at once). Then unblock:
 * a signal that arrived meanwhile is delivered now. */
void td_signals_install(int catch_them);
/* The last signal caught (0: none). */
int td_signal_pending(void);

#endif
