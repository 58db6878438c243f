#!/usr/bin/env bash
# fault_alone.sh TRIDENT WORKDIR — a rank failing alone ends the job at once
# (issue 12, defect 7; docs/architecture.md invariant 3).
#
# With TD_TEST_FAIL_RANK / TD_TEST_FAIL_AT (common/td_error.h) one rank of a
# 2-rank training fails alone at a fail point where requests are in flight or
# the other rank is inside a collective sequence:
#   zero_release  ZeRO-2, right after a unit's reduce-scatter was launched;
#                 again at ZeRO-3 on the device collectives (TD_TEST_DCOMM=1:
#                 the call in flight on the communicator's own MPI duplicate)
#   pipe_send     pp 2, stage 0, right after an activation send was posted
#   ckpt_save     in the middle of the second checkpoint save (the other rank
#                 is writing tensors: collective metadata)
#   ckpt_load     while resuming, before the tensors are read
#   init_from     pp 2, reading model.init_from (a model folder exported from
#                 the ckpt_save case's checkpoint): each rank reads it, and a
#                 failure of one rank is agreed before the pipeline's set-up
#                 (every rank exits 3, the message once, no abort). (On the
#                 CPU path the set-up that follows sends nothing, so the same
#                 outcome held before the agreement was added; it guards the
#                 device paths, whose set-up creates communicators.)
# Each job must end within 50 s (a few seconds on an idle machine; up to 36 s
# was measured with 8 tests and stress on 2 cores; a hang is killed at 60 s), the failing rank with its message and
# MPI_Abort(3), instead of waiting in a collective teardown (MPI_Wait,
# H5Fclose, MPI_Barrier) for a rank that never joins — before the fix the two
# checkpoint cases hung. (The launcher's exit code is 3 as a rule; MPICH's
# mpiexec ORs the ranks' wait statuses, so a rank that UCX ends with SIGABRT
# when its peer vanishes makes it 6 now and then: any non-zero code passes.) After the
# failed save, the previous checkpoint and `latest` are intact and a new run
# resumes from them and finishes. Environment: MPIEXEC (default mpiexec).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
fail=0

# run NAME RANK SITE SKIP [--set ...] — 2 ranks with the injection; sets rc, secs
run() {
  local name=$1 rank=$2 site=$3 skip=$4
  shift 4
  local start
  start=$(date +%s.%N)
  TD_TEST_FAIL_RANK=$rank TD_TEST_FAIL_AT=$site TD_TEST_FAIL_SKIP=$skip \
    timeout -s KILL 60 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" \
    --set "data.train=$corpus" --set training.steps=6 --set checkpoint.every=2 \
    --set run.watchdog_s=0 --set "run.out_dir=$work/$name" "$@" >"$work/$name.log" 2>&1 </dev/null
  rc=$?
  secs=$(rb_elapsed "$start")
}

# expect NAME RANK SITE — the job ended in time with exit 3 and the message
expect() {
  local name=$1 rank=$2 site=$3 why=""
  local msg="[rank $rank] trident: error: injected failure on rank $rank at $site"
  if [ "$rc" = 137 ]; then
    why="did not end within 60 s (hang)"
  elif awk -v s="$secs" 'BEGIN { exit !(s > 50) }'; then
    why="took $secs s (> 50 s)"
  elif [ "$rc" = 0 ]; then
    why="exit 0"
  elif ! grep -qF -- "$msg" "$work/$name.log"; then
    why="missing message: $msg"
  elif ! grep -qF -- "[rank $rank] trident: this rank failed alone; aborting the job (exit 3)" \
      "$work/$name.log"; then
    why="the failing rank did not abort the job with exit 3"
  fi
  verdict "$name" "$why" "rank $rank failed alone at $site; the job ended in $secs s (exit $rc)"
}

# verdict NAME WHY OK-TEXT — FAIL with WHY and the log's end, or ok
verdict() {
  if [ -n "$2" ]; then
    echo "FAIL $1: $2"
    tail -15 "$work/$1.log" | sed 's/^/     | /'
    fail=1
  else
    echo "ok   $1: $3"
  fi
}

run zero_release 1 zero_release 0 --set parallel.dp=2 --set parallel.zero=2
expect zero_release 1 zero_release
TD_TEST_DCOMM=1 run zero_release_dcomm 1 zero_release 0 --set parallel.dp=2 --set parallel.zero=3
expect zero_release_dcomm 1 zero_release
run pipe_send 0 pipe_send 0 --set parallel.pp=2 --set parallel.micro_batch=2
expect pipe_send 0 pipe_send
run ckpt_save 1 ckpt_save 1 --set parallel.dp=2 --set parallel.zero=3
expect ckpt_save 1 ckpt_save

# nothing committed was lost: latest names step 2, which verifies, and a new
# run resumes from it and finishes
ck=$work/ckpt_save/ckpt
if [ "$(cat "$ck/latest" 2>/dev/null)" != step_00000002.h5 ] || [ -e "$ck/step_00000004.h5" ]; then
  echo "FAIL ckpt_save: latest is '$(cat "$ck/latest" 2>/dev/null)', expected step_00000002.h5 (and no step 4)"
  ls -l "$ck" | sed 's/^/     | /'
  fail=1
elif ! "$trident" ckpt info "$ck/step_00000002.h5" >"$work/info.log" 2>&1; then
  echo "FAIL ckpt_save: the previous checkpoint does not verify"; tail -5 "$work/info.log"; fail=1
else
  echo "ok   ckpt_save: latest still names step_00000002.h5 and its checksums verify"
fi

run ckpt_load 1 ckpt_load 0 --set parallel.dp=2 --set parallel.zero=3 --set checkpoint.resume=auto \
  --set "checkpoint.dir=$ck"
expect ckpt_load 1 ckpt_load

# model.init_from failing on one rank alone: agreed, one message, exit 3
if "$trident" export --checkpoint "$ck/step_00000002.h5" --out "$work/hf" >"$work/export.log" 2>&1; then
  run init_from 1 init_from 0 --set parallel.pp=2 --set "model.init_from=$work/hf"
  msg="trident: error: injected failure on rank 1 at init_from"
  why=""
  if [ "$rc" = 137 ]; then
    why="did not end within 60 s (hang: the other rank waited in a collective)"
  elif [ "$rc" != 3 ]; then
    why="exit $rc, expected 3 from every rank"
  elif [ "$(grep -cF -- "$msg" "$work/init_from.log")" != 1 ]; then
    why="the message '$msg' printed $(grep -cF -- "$msg" "$work/init_from.log") times, expected once"
  elif grep -q "failed alone" "$work/init_from.log"; then
    why="the failure was not agreed (the rank aborted alone)"
  fi
  verdict init_from "$why" "rank 1 failed alone reading model.init_from; agreed, the job ended in $secs s (exit 3)"
else
  echo "FAIL init_from: trident export of the checkpoint failed"; tail -5 "$work/export.log"; fail=1
fi

if timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" \
    --set "data.train=$corpus" --set training.steps=6 --set checkpoint.every=2 \
    --set parallel.dp=2 --set parallel.zero=3 --set checkpoint.resume=auto \
    --set "checkpoint.dir=$ck" --set "run.out_dir=$work/resumed" >"$work/resumed.log" 2>&1 &&
    grep -q "resuming at step 2" "$work/resumed.log" && [ "$(cat "$ck/latest")" = step_00000006.h5 ]; then
  echo "ok   resume: a new run resumed at step 2 and finished (latest step_00000006.h5)"
else
  echo "FAIL resume: the run after the failures did not resume and finish"
  tail -10 "$work/resumed.log" | sed 's/^/     | /'
  fail=1
fi
exit $fail
