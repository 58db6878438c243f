/* td_watchdog.h — end a job whose ranks stopped making progress
 * (deck key run.watchdog_s; docs/architecture.md exit code 3).
 *
 * A hang in a distributed job shows as ranks blocked in communication,
 * waiting for a rank that died without the launcher noticing, was stopped
 * (SIGSTOP, a debugger, a frozen node), or is stuck in a system call. The
 * communication layer waits for every MPI operation of a step through
 * td_watchdog_wait; a thread of each rank wakes every quarter second and,
 * when this rank has waited in one operation for longer than the bound,
 * prints which operation, on which communicator, at which step, and the
 * waiting thread ends the whole job with MPI_Abort (exit 3) — what the NCCL
 * watchdog does for PyTorch users. Every waiting rank reports, so the ranks
 * that do not are the ones that stopped. Should the waiting thread not end
 * the job within 10 s of the message (stuck inside the MPI library), the
 * watchdog thread ends the process itself (_exit(3); the launcher then ends
 * the others).
 *
 * Only time spent blocked in communication counts. Compute never trips it
 * on the rank that computes, however slow; a rank that waits for a slow
 * neighbour waits about the imbalance of one step. A checkpoint save or load
 * counts as one wait from its start to its end (td_watchdog_io), with three
 * times the bound: a large save on a slow file system keeps some ranks
 * waiting for others for longer than a step, but a rank that stops inside a
 * save (its collectives are blocking MPI, MPI-IO and HDF5 calls) must not
 * hang the job; when that bound is passed the watchdog thread prints the
 * message and ends the process at once (_exit(3)). Until the first optimizer step has
 * completed (one-time set-up: matmul primitives, first-touch page faults, a
 * step-0 evaluation) the bound is three times run.watchdog_s.
 *
 * One watchdog per process (like the signal flag): the functions are cheap
 * (a few atomic stores around the wait) and safe to call when it is not
 * running. */
#ifndef TD_WATCHDOG_H
#define TD_WATCHDOG_H

#include <mpi.h>
#include <stdint.h>

#include "td_error.h"

/* Start the watchdog thread with a bound of limit_s seconds (≤ 0: do
 * nothing). world is the communicator MPI_Abort ends. Not collective. */
td_status td_watchdog_start(MPI_Comm world, double limit_s);
/* Stop and join the thread (no-op if not running). */
void td_watchdog_stop(void);
/* Name a communicator for the watchdog's message ("dp_comm"). At most 16
 * are remembered; name must outlive the watchdog (a literal). */
void td_watchdog_name(MPI_Comm comm, const char *name);
/* Wait for *req, the request of a non-blocking MPI call, as MPI_Wait does,
 * under the watchdog: `op` names what is waited for in the message (a
 * literal, e.g. "MPI_Allreduce (metrics)") and comm where (MPI_COMM_NULL:
 * unknown). While the watchdog runs this polls MPI_Test, so that when the
 * bound is passed this thread — not the watchdog's — ends the job with
 * MPI_Abort, outside the MPI library (a second thread calling into MPI while
 * this one is inside it crashes MPICH/UCX). Returns the MPI code. */
int td_watchdog_wait(const char *op, MPI_Comm comm, MPI_Request *req);
/* The same for a wait that is not an MPI request (a device collective's
 * completion, polled by the caller): begin returns a token (0 when the
 * watchdog does not run), the caller polls its own test and calls check
 * between two polls (it ends the job, exit 3, once the bound is passed),
 * then end(token). */
int td_watchdog_begin(const char *op, MPI_Comm comm);
void td_watchdog_check(void);
void td_watchdog_end(int token);
/* td_watchdog_wait after the non-blocking call that returned rc (a failed
 * call's code is returned as is), so that a blocking collective is written
 * TD_MPI_CHECK(td_watched(MPI_Iallreduce(..., comm, &r), "what", comm, &r)). */
int td_watched(int rc, const char *op, MPI_Comm comm, MPI_Request *req);
/* Checkpoint I/O begins (what: a literal naming it, e.g. "a checkpoint
 * save") or ends (NULL): the phase counts as one wait, bound three times
 * run.watchdog_s. Nests (the outermost names it). */
void td_watchdog_io(const char *what);
/* The optimizer step now running (1-based), for the message; when the
 * second step of this run begins, the first-step allowance ends. */
void td_watchdog_step(int64_t step);

#endif
