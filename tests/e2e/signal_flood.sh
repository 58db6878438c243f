#!/usr/bin/env bash
# signal_flood.sh TRIDENT WORKDIR — stop signals never land in the compute.
#
# A signal handler that runs on a compute thread pushes its frame onto that
# thread's stack in the middle of whatever it was doing; inside oneDNN 2.6's
# JIT matmul kernels that corrupts the heap ("corrupted size vs. prev_size",
# seen under Slurm when the time limit's SIGUSR1 arrived during a step, and
# reproduced with any handled signal sent at 1 kHz: abort within 3-9 steps).
# trident therefore blocks SIGTERM/SIGUSR1/SIGUSR2 in every thread and takes
# them on one thread of its own (app/train/signals.c).
#
#   threads  during training, every thread but trident's signal thread blocks
#            SIGTERM, SIGUSR1 and SIGUSR2 (/proc/PID/task/*/status SigBlk)
#   flood    3 rounds: a 1-rank run (40 steps) is sent SIGUSR1 as fast as
#            bash can from its second step after the round's start until it
#            exits: it must exit 75 with a committed checkpoint that
#            verifies, every time, and the run resumed after the last round
#            must equal the uninterrupted one bit for bit. Margin: a round
#            stops within about 2 steps of the flood's start, so the three
#            rounds use about 12 of the 40 steps; the steps of a round take
#            at least 50 ms (TD_TEST_STEP_SLEEP_MS), so the flood, which
#            starts within one 20 ms poll of the second step, always lands
#            before the run could end (a run that ended first fails the
#            round, named as such: that would be a test defect).
# Prints PASS/FAIL lines and "N passed, M failed".
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
dir=$work/signal_flood
rm -rf "$dir"
mkdir -p "$dir"
steps=40
args=(train "$deck" --set "data.train=$corpus" --set training.steps=$steps --set checkpoint.every=0
      --set logging.every=1)

# the uninterrupted reference
if ! timeout -k 5 "$run_timeout" "$trident" "${args[@]}" --set checkpoint.resume=never \
    --set "run.out_dir=$dir/straight" >"$dir/straight.log" 2>&1 </dev/null; then
  ck_abort "the uninterrupted run failed: $(tail -n 3 "$dir/straight.log" | tr '\n' ' ')"
fi

nsteps() { # nsteps RUNDIR: the steps its metrics.jsonl logs
  local n
  n=$(grep -c '"loss"' "$1/metrics.jsonl" 2>/dev/null)
  echo "${n:-0}"
}

# ---- threads: which threads may receive the stop signals ----
r=$dir/threads
TD_TEST_STEP_SLEEP_MS=300 "$trident" "${args[@]}" --set checkpoint.resume=never \
  --set "run.out_dir=$r" >"$r.log" 2>&1 </dev/null &
pid=$!
for _ in $(seq 100); do
  [ "$(nsteps "$r")" -ge 2 ] && break
  sleep 0.1
done
open=() n=0
for t in /proc/$pid/task/*; do
  blk=$(sed -n 's/^SigBlk:\s*//p' "$t/status" 2>/dev/null) || continue
  [ -n "$blk" ] || continue
  n=$((n + 1))
  # SIGUSR1 = 10, SIGUSR2 = 12, SIGTERM = 15: bits 9, 11 and 14 (0x4a00)
  (( (0x$blk & 0x4a00) == 0x4a00 )) || open+=("$(cat "$t/comm" 2>/dev/null)[$(basename "$t")]")
done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ ${#open[@]} = 1 ] && [ "${open[0]%%\[*}" = td-signals ]; then
  pass "threads: $((n - 1)) of $n threads block SIGTERM/USR1/USR2; only ${open[0]} takes them"
else
  fail "threads: threads that may receive the stop signals: ${open[*]:-none} (expected only td-signals)"
fi

# ---- flood: SIGUSR1 as fast as possible from the third step ----
r=$dir/flood
for round in 1 2 3; do
  before=$(nsteps "$r")
  TD_TEST_STEP_SLEEP_MS=50 "$trident" "${args[@]}" --set checkpoint.resume=auto \
    --set "run.out_dir=$r" >"$r.$round.log" 2>&1 </dev/null &
  pid=$!
  t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do
    [ "$(nsteps "$r")" -ge $((before + 2)) ] && break
    sleep 0.02
  done
  at=$(nsteps "$r")
  if ! kill -0 "$pid" 2>/dev/null || [ "$at" -ge $((steps - 2)) ]; then
    wait "$pid"
    fail "flood round $round: the run was at step $at of $steps before the flood began (no margin left: a defect of this test)"
    continue
  fi
  sent=0
  while kill -USR1 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do sent=$((sent + 1)); done
  rc=0
  wait "$pid" || rc=$?
  S=$(ck_latest "$r")
  if [ $rc = 75 ] && [ -n "$S" ] && "$trident" ckpt info "$r/ckpt/$S" >/dev/null 2>&1; then
    pass "flood round $round: $sent SIGUSR1 sent; exit 75 with $S committed and verified"
  else
    fail "flood round $round: $sent SIGUSR1 sent; exit $rc (expected 75), latest '$S'"
    ck_show_log "$r.$round.log" 6
  fi
done
rc=0
timeout -k 5 "$run_timeout" "$trident" "${args[@]}" --set checkpoint.resume=auto \
  --set "run.out_dir=$r" >"$r.resume.log" 2>&1 </dev/null || rc=$?
if [ $rc = 0 ]; then
  pass "the run resumed after the floods finished ($(grep -o "resuming at step [0-9]*" "$r.resume.log"))"
else
  fail "the resumed run exited $rc"
  ck_show_log "$r.resume.log" 6
fi
ck_compare_bitwise "$dir/straight" "$r" "flooded, stopped three times and resumed: bitwise the uninterrupted run"
ck_finish
