/* td_signals.h — SIGTERM, SIGUSR1 and SIGUSR2 during training (what Slurm
 * sends before a time limit or preemption; Open MPI's mpirun forwards USR1
 * and USR2 to the ranks, MPICH's hydra USR1 and TERM): they only set a flag;
 * the training loop agrees on it at a step boundary, saves a checkpoint and
 * exits 75. */
#ifndef TD_SIGNALS_H
#define TD_SIGNALS_H

/* Before MPI_Init: block SIGTERM, SIGUSR1 and SIGUSR2, so that one arriving during
 * start-up waits (instead of reaching the MPI library's own handler). */
void td_signals_block(void);
/* After MPI_Init: with catch, install the flag handler (training); without,
 * restore the default action (the other commands end at once). Then unblock:
 * a signal that arrived meanwhile is delivered now. */
void td_signals_install(int catch_them);
/* The last signal caught (0: none). */
int td_signal_pending(void);

#endif
