#!/usr/bin/env bash
# fault_stop.sh TRIDENT WORKDIR — the watchdog (run.watchdog_s, td_watchdog.h).
#
#   stop        4 ranks (dp 2 × tp 2), run.watchdog_s 4: after the checkpoint of
#               step 5 one rank is stopped (SIGSTOP). The job must end within
#               the bound plus 15 s, the waiting ranks with exit 3 (MPI_Abort)
#               and a watchdog message naming the rank and the operation it
#               waited in; `latest` names a checkpoint that verifies.
#               The stop may land inside a checkpoint save (every 5 steps):
#               then the bound is 3 × 4 s (saves count as one wait, with
#               three times the bound) and the message names the save.
#   slow save   2 ranks, watchdog 2 s, one rank sleeps 4 s inside the first
#               checkpoint save (the other waits for it in the save's
#               collectives): longer than the step bound, within the save's
#               (3 × 2 s), so the run finishes.
#   stuck save  the same rank sleeps 60 s inside the save (a rank stopped in
#               the save's blocking MPI-IO and HDF5 calls): the waiting rank's
#               watchdog ends the job with exit 3 after 3 × 2 s (before, saves
#               paused the watchdog and such a job hung until the launcher's
#               time limit — what the Open MPI runs of this test hit).
#   slow first  one rank sleeps 3 s at the start of the first step (one-time
#               set-up can be that uneven): the bound is 3 × 2 s until the
#               first step is done, so the run finishes.
#   control     the same sleep (5 s) at the fourth step ends the job with
#               exit 3: the clock does count waits in the steps.
#   off         run.watchdog_s 0 with that sleep: the run finishes.
# Every process this script starts is killed on exit. MPIEXEC (default mpiexec).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
fail=0
report() { # report NAME WHY LOG
  if [ -n "$2" ]; then
    echo "FAIL $1: $2"
    tail -12 "$3" | sed 's/^/     | /'
    fail=1
  else
    echo "ok   $1"
  fi
}

# ---- stop: SIGSTOP one rank mid-training -----------------------------------------
dir=$work/stop
"$mpiexec" -n 4 "$trident" train "$src/inputs/tiny.yaml" --set "data.train=$corpus" \
  --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=1 --set training.steps=400 \
  --set checkpoint.every=5 --set run.watchdog_s=4 --set "run.out_dir=$dir" \
  >"$work/stop.log" 2>&1 </dev/null &
job=$!
victim=$(rb_rank_pid "$work/stop.log" $job 8 "$dir" 2)
why=""
if [ -z "$victim" ]; then
  why="could not find rank 2's process (did the job start?)"
  kill $job 2>/dev/null
else
  kill -STOP "$victim"
  start=$(date +%s.%N)
  for _ in $(seq 400); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  secs=$(rb_elapsed "$start")
  if kill -0 $job 2>/dev/null; then
    why="the job still runs 40 s after rank 2 was stopped (watchdog did not fire)"
    rb_cleanup
    wait $job
  else
    wait $job
    rc=$?
    msg=$(grep -m1 "watchdog: no progress" "$work/stop.log")
    # The ranks that waited end with MPI_Abort(3). MPICH's mpiexec returns
    # the bitwise OR of every rank's wait status (mpiexec.c), so when it had
    # to SIGKILL the stopped rank the job reports 9 (0x300 | 9) — a signal
    # can only end a stopped process. Either way every waiting rank's code is 3.
    # (The launchers' own abort banners differ, and Open MPI 4.1 garbles its
    # own when several ranks abort at once: not checked.)
    if [ "$rc" != 3 ] && [ "$rc" != 9 ]; then
      why="exit $rc, expected 3 (or 9: the launcher's report of the stopped rank it killed)"
    elif ! echo "$msg" | grep -qE '^\[rank [013]\] .*waited .* in (MPI_[A-Za-z]+|a checkpoint save).* on [a-z_]+'; then
      why="no watchdog message naming a waiting rank, its operation and communicator"
    else
      bound=4
      case $msg in *"checkpoint save"*) bound=12 ;; esac
      if awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s > b + 15) }'; then
        why="took $secs s after the stop (bound $bound s + 15 s)"
      fi
    fi
    [ -z "$why" ] && echo "     ($secs s after SIGSTOP) $msg"
  fi
fi
report "stop: rank 2 stopped, the watchdog ended the job with exit 3" "$why" "$work/stop.log"
ck=$dir/ckpt
why=""
if [ ! -f "$ck/latest" ] || ! "$trident" ckpt info "$ck/$(cat "$ck/latest")" >"$work/info.log" 2>&1; then
  why="latest ($(cat "$ck/latest" 2>/dev/null)) does not name a checkpoint that verifies"
fi
report "stop: latest names a checkpoint that verifies ($(cat "$ck/latest" 2>/dev/null))" "$why" "$work/info.log"

# ---- injected slow ranks -------------------------------------------------------------
# slow NAME EXPECT_RC WATCHDOG SITE SKIP SLEEP — 2 ranks, rank 1 sleeps at SITE
slow() {
  local name=$1 want=$2 wd=$3 site=$4 skip=$5 sleep_s=$6 why=""
  local start
  start=$(date +%s.%N)
  TD_TEST_FAIL_RANK=1 TD_TEST_FAIL_AT=$site TD_TEST_FAIL_SKIP=$skip TD_TEST_FAIL_SLEEP=$sleep_s \
    timeout -s KILL 90 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" \
    --set "data.train=$corpus" --set parallel.dp=2 --set training.steps=6 \
    --set checkpoint.every=2 --set "run.watchdog_s=$wd" --set "run.out_dir=$work/$name" \
    >"$work/$name.log" 2>&1 </dev/null
  local rc=$?
  # MPICH's mpiexec ORs the ranks' wait statuses (as for the stopped rank
  # above): when it ended the sleeping rank with SIGHUP after the others'
  # MPI_Abort(3), the job reports 1 (0x300 | 1); the ranks' own code is 3
  if [ "$want" = 3 ] && [ "$rc" = 1 ] && grep -q "Hangup (signal 1)" "$work/$name.log" &&
      grep -qE "MPI_Abort\(comm=0x[0-9a-f]+, 3\)" "$work/$name.log"; then
    rc=3
  fi
  if ! grep -q "TD_TEST_FAIL_SLEEP: sleeping" "$work/$name.log"; then
    why="the injected sleep did not happen"
  elif [ "$rc" != "$want" ]; then
    why="exit $rc, expected $want"
  elif [ "$want" = 3 ] && ! grep -q "watchdog: no progress" "$work/$name.log"; then
    why="exit 3 without the watchdog's message"
  elif [ "$want" = 0 ] && grep -q "watchdog" "$work/$name.log"; then
    why="the watchdog fired"
  fi
  report "$name: watchdog ${wd} s, rank 1 sleeps ${sleep_s} s at $site (pass $((skip + 1))): exit $rc in $(rb_elapsed "$start") s" \
    "$why" "$work/$name.log"
}
slow slow_save 0 2 ckpt_save 0 4
slow stuck_save 3 2 ckpt_save 0 60
slow slow_first_step 0 2 step 0 3
slow control 3 2 step 3 5
slow off 0 0 step 3 5
exit $fail
