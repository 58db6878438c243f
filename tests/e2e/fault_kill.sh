#!/usr/bin/env bash
# fault_kill.sh TRIDENT WORKDIR — one rank of a 4-rank training (dp 2 × pp 2,
# ZeRO-1, checkpoint every 4 steps) is SIGKILLed after step 9. The job must
# end within 30 s with a non-zero exit, and `latest` must name a committed
# checkpoint that loads: a new run on another grid (2 ranks, dp 2) resumes
# from it and finishes. Every process this script starts is killed on exit.
# MPIEXEC (default mpiexec).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
fail=0
dir=$work/kill
common=(--set "data.train=$corpus" --set training.steps=400 --set checkpoint.every=4
        --set "checkpoint.dir=$dir/ckpt")
"$mpiexec" -n 4 "$trident" train "$src/inputs/tiny.yaml" "${common[@]}" --set parallel.dp=2 \
  --set parallel.pp=2 --set parallel.zero=1 --set parallel.micro_batch=2 \
  --set "run.out_dir=$dir" >"$work/kill.log" 2>&1 </dev/null &
job=$!
victim=$(rb_rank_pid "$work/kill.log" $job 9 "$dir" 1)
if [ -z "$victim" ]; then
  echo "FAIL kill: could not find rank 1's process (did the job start?)"
  tail -5 "$work/kill.log"
  exit 1
fi
kill -KILL "$victim"
start=$(date +%s.%N)
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
secs=$(rb_elapsed "$start")
if kill -0 $job 2>/dev/null; then
  echo "FAIL kill: the job still runs 30 s after rank 1 was killed"
  fail=1
  rb_cleanup
  wait $job
else
  wait $job
  rc=$?
  if [ $rc = 0 ]; then
    echo "FAIL kill: the job ended with exit 0 after rank 1 was killed"
    fail=1
  else
    echo "ok   kill: rank 1 SIGKILLed after step 9; the job ended $secs s later with exit $rc"
  fi
fi
latest=$(cat "$dir/ckpt/latest" 2>/dev/null)
if [ -z "$latest" ] || ! "$trident" ckpt info "$dir/ckpt/$latest" >"$work/info.log" 2>&1; then
  echo "FAIL kill: latest ('$latest') does not name a checkpoint that verifies"
  tail -5 "$work/info.log" 2>/dev/null
  fail=1
else
  step=$(echo "$latest" | sed 's/^step_0*\([0-9][0-9]*\)\.h5$/\1/')
  if timeout -s KILL 120 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" "${common[@]}" \
      --set training.steps=$((step + 2)) --set parallel.dp=2 --set checkpoint.resume=auto \
      --set "run.out_dir=$work/resumed" \
      >"$work/resumed.log" 2>&1 </dev/null && grep -q "resuming at step $step" "$work/resumed.log"; then
    echo "ok   kill: latest names $latest; a 2-rank run resumed from it and finished"
  else
    echo "FAIL kill: a run could not resume from $latest"
    tail -8 "$work/resumed.log" | sed 's/^/     | /'
    fail=1
  fi
fi
exit $fail
