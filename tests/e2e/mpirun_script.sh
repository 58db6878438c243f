#!/usr/bin/env bash
# mpirun_script.sh TRIDENT WORKDIR — jobs/mpirun.sh, the lab-machine launcher
# without Slurm, used as the README and docs/clusters.md ("Launching") say:
#   RESTART=1 bash jobs/mpirun.sh DECK --set ...   (2 ranks, dp 2, 20 steps)
# with no MPIEXEC set (the script picks the launcher of the MPI that
# `trident --version` names). After 3 logged steps SIGUSR1 goes to the
# script's mpiexec: the ranks save and exit 75, the script starts the same
# command again, which resumes and finishes: exit 0, two launches in the log,
# and the run bitwise equal to an uninterrupted one.
# Prints PASS/FAIL lines and "N passed, M failed".
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
dir=$work/mpirun_script
rm -rf "$dir"
mkdir -p "$dir"
args=(--set "data.train=$corpus" --set parallel.dp=2 --set training.steps=20
      --set checkpoint.every=0 --set checkpoint.resume=auto)
ck_train_ok 2,1,1,0 "$dir/straight" "uninterrupted 20 steps"

r=$dir/script
env -u MPIEXEC TRIDENT="$trident" RESTART=1 TD_TEST_STEP_SLEEP_MS=200 \
  bash "$ck_src/jobs/mpirun.sh" "$deck" "${args[@]}" --set "run.out_dir=$r" >"$r.log" 2>&1 </dev/null &
pid=$!
t0=$SECONDS sent=0
while kill -0 "$pid" 2>/dev/null && [ $((SECONDS - t0)) -lt "$run_timeout" ]; do
  n=$(grep -c '"loss"' "$r/metrics.jsonl" 2>/dev/null)
  if [ $sent = 0 ] && [ "${n:-0}" -ge 3 ]; then
    launcher=$(pgrep -P "$pid" -f "mpiexec|mpirun" | head -n 1)
    if [ -n "$launcher" ]; then
      kill -USR1 "$launcher" && sent=1
      info "SIGUSR1 to the script's launcher (pid $launcher: $(ps -o comm= -p "$launcher")) after $n steps"
    fi
  fi
  sleep 0.2
done
if kill -0 "$pid" 2>/dev/null; then
  fail "jobs/mpirun.sh still runs after ${run_timeout}s (killed)"
  pkill -KILL -P "$pid"
  kill -KILL "$pid"
fi
rc=0
wait "$pid" || rc=$?
launches=$(grep -c "^jobs/mpirun.sh: .*mpiexec" "$r.log")
if [ $sent = 1 ] && [ $rc = 0 ] && [ "$launches" = 2 ] && grep -q "^trident: stopped by SIGUSR1" "$r.log" &&
   grep -q "^trident: resuming at step" "$r.log"; then
  pass "jobs/mpirun.sh with RESTART=1: stopped by SIGUSR1, relaunched itself ($(grep -m1 -o "^jobs/mpirun.sh: [^ ]*" "$r.log")), $(grep -o "resuming at step [0-9]*" "$r.log"), exit 0"
else
  fail "jobs/mpirun.sh: signal sent $sent, exit $rc, $launches launches (expected 1, 0, 2)"
  ck_show_log "$r.log" 20
fi
ck_compare_bitwise "$dir/straight" "$r" "the script's stopped and relaunched run is bitwise the uninterrupted one"
ck_finish
