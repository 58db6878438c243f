#!/usr/bin/env bash
# run_folder.sh TRIDENT MPIEXEC WORKDIR — one run per checkpoint folder
# (app/train/td_runlock.h, docs/checkpoints.md "One run per folder"):
#  1. a rerun with checkpoint.resume: never into a folder holding an earlier
#     run's checkpoints is refused at 1 and 2 ranks (exit 2, one line naming
#     the folder and the three ways out); metrics.jsonl, `latest` and every
#     step file are byte for byte as before;
#  2. checkpoint.overwrite: true deletes them and starts afresh (the old
#     step files beyond the new run's are gone, metrics has the new run only);
#  3. a second run into a folder a live run is using is refused at start
#     (exit 2, naming the holder's host and PID) and the first run finishes
#     its steps unharmed; after the first ends the lock is gone;
#  4. stale locks are taken over with a warning: this host's dead PID, a
#     lock not refreshed for 120 s (another host), this Slurm job's own (a
#     requeue); a fresh lock of another host is refused;
#  5. a checkpoint folder that cannot be made or written, and an empty
#     run.name, are exit 2 naming the key, before anything is trained;
#  6. (with 3) the end-of-run summary holds the steps, the final train and
#     validation loss of metrics.jsonl, tokens/s and the last checkpoint.
set -uo pipefail
trident=$1 mpiexec=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1
mkdir -p "$work" && cd "$work" || exit 1
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null
deck=$src/inputs/tiny.yaml
base=(--set data.train=corpus.h5 --set run.out_dir=run --set schedule.warmup=1)
sums() { (cd run && find . -type f ! -name trident.lock -print0 | sort -z | xargs -0 md5sum); }
one_error() { [ "$(grep -c 'trident: error:' "$1")" = 1 ]; }

# 1. the earlier run: 6 steps, a checkpoint every 2 (keep 3)
rm -rf run
"$trident" train "$deck" "${base[@]}" --set training.steps=6 --set checkpoint.every=2 \
  --set checkpoint.keep=3 --set checkpoint.resume=never >first.log 2>&1 || { cat first.log; exit 1; }
before=$(sums)
for np in 1 2; do
  rc=0
  timeout 60 "$mpiexec" -n $np "$trident" train "$deck" "${base[@]}" --set parallel.dp=$np \
    --set training.steps=2 --set checkpoint.resume=never >rerun.log 2>&1 || rc=$?
  if [ $rc = 2 ] && one_error rerun.log &&
     grep -q "error:.*run/ckpt holds 3 checkpoints of an earlier run (latest: step_00000006.h5).*checkpoint.resume: auto.*run.name.*checkpoint.overwrite: true" rerun.log &&
     ! grep -q "^step " rerun.log && [ "$(sums)" = "$before" ]; then
    ok "rerun with resume: never at $np rank(s): exit 2, nothing changed: $(grep -o 'error: .*' rerun.log | cut -c1-150)..."
  else
    bad "rerun with resume: never at $np rank(s): exit $rc, files changed: $([ "$(sums)" = "$before" ] && echo no || echo yes)"
    tail -3 rerun.log
  fi
done

# 2. overwrite: afresh, the earlier run's files gone
rc=0
"$trident" train "$deck" "${base[@]}" --set training.steps=2 --set checkpoint.resume=never \
  --set checkpoint.overwrite=true >over.log 2>&1 || rc=$?
files=$(cd run/ckpt && ls | tr '\n' ' ')
steps=$(grep -c '"loss"' run/metrics.jsonl)
if [ $rc = 0 ] && [ "$files" = "latest step_00000002.h5 " ] && [ "$steps" = 2 ] &&
   grep -q "checkpoint.overwrite: deleted 3 checkpoints of an earlier run" over.log; then
  ok "checkpoint.overwrite: true: the earlier run deleted, the new one alone ($files; $steps steps logged)"
else
  bad "checkpoint.overwrite: true: exit $rc, files '$files', $steps steps logged"
  tail -3 over.log
fi

# 3. two runs at once: the second refused at start (after the 10 s it gives a
# holder on this host to end: the first runs 25 steps of at least 0.8 s), the
# first unharmed
rm -rf run
TD_TEST_STEP_SLEEP_MS=800 "$trident" train "$deck" "${base[@]}" --set training.steps=25 \
  --set checkpoint.resume=auto >live.log 2>&1 &
live=$!
for _ in $(seq 100); do [ -f run/ckpt/trident.lock ] && break; sleep 0.1; done
rc=0
t0=$SECONDS
timeout 60 "$mpiexec" -n 2 "$trident" train "$deck" "${base[@]}" --set parallel.dp=2 \
  --set training.steps=25 --set checkpoint.resume=auto >second.log 2>&1 || rc=$?
dt=$((SECONDS - t0))
if [ $rc = 2 ] && one_error second.log && grep -q "in use by another run.*$(hostname) $live " second.log &&
   ! grep -q "^step " second.log; then
  ok "a second run into a live run's folder: exit 2 at start ($dt s), naming host and PID $live"
else
  bad "a second run into a live run's folder: exit $rc"
  tail -3 second.log
fi
rc=0
wait $live || rc=$?
if [ $rc = 0 ] && [ "$(grep -c '"loss"' run/metrics.jsonl)" = 25 ] && [ ! -e run/ckpt/trident.lock ]; then
  ok "the first run finished its 25 steps and removed its lock"
else
  bad "the first run: exit $rc, $(grep -c '"loss"' run/metrics.jsonl) steps, lock: $(cat run/ckpt/trident.lock 2>&1)"
fi

# the end-of-run summary of that run: its numbers are the metrics file's
want=$(/usr/bin/python3 - run/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tr = [r for r in rows if "loss" in r][-1]
va = [r for r in rows if "val_loss" in r][-1]
print(f"summary: steps 1-25 of 25 in|  train loss   {tr['loss']:.4f} at step {tr['step']}|"
      f"  val loss     {va['val_loss']:.4f} at step {va['step']}|"
      f"  checkpoint   run/ckpt/step_00000025.h5|  metrics      run/metrics.jsonl")
PY
)
got=$(grep -A4 "^summary:" live.log | sed 's/ [0-9.]* s, [0-9]* tokens\/s$//' | sed 's/^\(summary: steps 1-25 of 25 in\).*/\1/' | paste -sd'|')
if [ -n "$want" ] && [ "$got" = "$want" ]; then
  ok "the end-of-run summary: steps, final train and validation loss (= metrics.jsonl), tokens/s, the checkpoint"
else
  bad "the end-of-run summary: '$got', want '$want'"
fi

# 4. stale locks
stale_case() { # NAME EXPECT(take|refuse) LOCK-LINE [touch -d DATE] [env...]
  local name=$1 want=$2 line=$3 date=${4:-}
  shift 4
  rm -rf run && mkdir -p run/ckpt
  echo "$line" >run/ckpt/trident.lock
  [ -n "$date" ] && touch -d "$date" run/ckpt/trident.lock
  local rc=0
  env "$@" "$trident" train "$deck" "${base[@]}" --set training.steps=1 \
    --set checkpoint.resume=never >stale.log 2>&1 || rc=$?
  if [ "$want" = take ] && [ $rc = 0 ] && grep -q "warning: .*taking over a stale lock" stale.log; then
    ok "$name: taken over with a warning: $(grep -o 'taking over.*' stale.log)"
  elif [ "$want" = refuse ] && [ $rc = 2 ] && grep -q "in use by another run" stale.log; then
    ok "$name: refused (exit 2)"
  else
    bad "$name: exit $rc, wanted $want"
    tail -3 stale.log
  fi
}
sleep 30 & dead=$!
kill $dead; wait $dead 2>/dev/null
stale_case "this host's dead PID" take "$(hostname) $dead - 2026-01-01T00:00:00Z" "" TD_X=1
stale_case "another host's lock not refreshed for 10 min" take \
  "node-elsewhere 4242 - 2026-01-01T00:00:00Z" "10 minutes ago" TD_X=1
stale_case "this Slurm job's lock (requeued)" take "node-elsewhere 4242 777 2026-01-01T00:00:00Z" "" \
  SLURM_JOB_ID=777
stale_case "another host's fresh lock" refuse "node-elsewhere 4242 - 2026-01-01T00:00:00Z" "" TD_X=1

# 5. a checkpoint folder that cannot be written; an empty run.name
if [ "$(id -u)" != 0 ]; then
  rm -rf run && mkdir -p run/ckpt && chmod a-w run/ckpt
  rc=0
  "$trident" train "$deck" "${base[@]}" --set training.steps=1 >ro.log 2>&1 || rc=$?
  chmod u+w run/ckpt
  [ $rc = 2 ] && one_error ro.log && grep -q "checkpoint.dir = run/ckpt cannot be written" ro.log &&
    ok "an unwritable checkpoint folder: exit 2 at start" || { bad "unwritable folder: exit $rc"; tail -2 ro.log; }
fi
rm -rf run && mkdir -p run && printf 'x' >run/ckpt # a file where the folder should be
rc=0
"$trident" train "$deck" "${base[@]}" --set training.steps=1 >ro.log 2>&1 || rc=$?
[ $rc = 2 ] && one_error ro.log && grep -q "checkpoint.dir = run/ckpt" ro.log && ! grep -q "^step " ro.log &&
  ok "a checkpoint folder that is a file: exit 2 at start: $(grep -o 'error: .*' ro.log | cut -c1-120)" ||
  { bad "checkpoint folder that is a file: exit $rc"; tail -2 ro.log; }
rc=0
"$trident" train "$deck" --set data.train=corpus.h5 --set run.name= >name.log 2>&1 || rc=$?
[ $rc = 2 ] && one_error name.log && grep -q "run.name is empty" name.log &&
  ok "an empty run.name: exit 2" || { bad "empty run.name: exit $rc"; tail -2 name.log; }

echo "$pass passed, $fail failed"
[ $fail = 0 ]
