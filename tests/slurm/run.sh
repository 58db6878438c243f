#!/usr/bin/env bash
# tests/slurm/run.sh TRIDENT WORKDIR [TEST...] — jobs/train.sbatch against a
# real Slurm: every test below, or those named.
#
# Starts a one-machine Slurm (cluster.sh: munged, slurmctld, slurmd; installs
# slurm-wlm and munge when missing), submits the jobs below at once through
# sbatch/scancel exactly as a user would, checks each, and stops exactly the
# daemons it started (EXIT trap, also when a check fails). Exit 77 (skipped)
# with the reason when Slurm cannot run here (not root, no packages).
#
#   train4     sbatch --wait -n 4: exit 0, progress lines, ONE 4-rank job
#              (the grid line), not four 1-rank jobs
#   straight   2 tasks (dp 2), uninterrupted: the reference of the next two
#              (and straight30, 30 steps, of elastic)
#   timelimit  --time=1 --signal=USR1@50: stopped by the time limit's
#              signal, exit 75, requeued, resumed from latest, finished;
#              bitwise equal to straight (losses, grad norms, final /model)
#              (the first run's steps take 0.8 s, the requeued run's
#              full speed: a wrapper around trident sets
#              TD_TEST_STEP_SLEEP_MS when SLURM_RESTART_COUNT is 0)
#   scancel    scancel --signal=USR1 after 5 steps: the same path
#   elastic    4 tasks as (2,1,2), stopped (TD_MAX_REQUEUES=0: not
#              requeued, reported), resumed by a new sbatch -n 2 --auto-dp
#              (dp 2) from the same checkpoint.dir: same loss curve as
#              straight30 (compare_runs.py: losses and grad norms 1e-4)
#   baddeck    a deck with a misspelt key: exit 2, the message in the
#              output, not requeued
#   bounded    TD_MAX_REQUEUES=1 and two scancel --signal=USR1: requeued
#              once, then ends with exit 75 and says why
#   warn       TD_SIGNAL_LEAD_S=1 and steps of 1.5 s: trident warns at
#              start-up that a step and a save do not fit in the lead
#   timeout    --time=1 --signal=USR1@1 and a first step of 200 s: the
#              signal cannot be acted on in time; the time limit ends the
#              job (TIMEOUT) before any checkpoint, and it is not requeued
#   gpus       2 tasks with --gpus-per-node=2 and with --gpus-per-task=1 on
#              the node's two stand-in GPUs (slurm.conf.in): each task's
#              trident sees CUDA_VISIBLE_DEVICES = its own device (0 and 1),
#              recorded by a wrapper; the training itself runs on the CPU
# Steps are slowed by TD_TEST_STEP_SLEEP_MS (test only) where a job must
# still be running when its signal comes: Slurm looks at time limits every
# 30 s, so a 1-minute job's USR1@50 arrives 10 to 40 s after its start
# (the first run: 60 steps of 0.8 s).
# The jobs inherit the environment (sbatch --export=ALL), e.g. TD_SRUN_MPI;
# train.sbatch picks srun --mpi=pmix for a trident built with Open MPI, and
# the test is skipped (77) when this Slurm has no such plugin.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$src/tests/e2e/ckpt_lib.sh"
# shellcheck source=tests/slurm/cluster.sh
source "$here/cluster.sh"
trident_arg=$1 work_arg=$2
shift 2
all="train4 timelimit scancel elastic baddeck bounded warn timeout gpus"
only=${*:-$all}
for x in $only; do
  case " $all " in *" $x "*) ;; *) echo "unknown test '$x' (have: $all)" >&2; exit 2 ;; esac
done
want() { case " $only " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$work_arg"
work_abs=$(cd "$work_arg" && pwd)

# the cluster first: without it there is nothing to test (77)
trap 'sl_stop' EXIT
t_start=$SECONDS
export SL_CPUS=32 # the jobs below run side by side: 21 tasks
if ! sl_start "$work_abs/cluster"; then
  echo "SKIPPED: Slurm cannot run here: $sl_why"
  exit 77
fi
echo "slurm: cluster up in $((SECONDS - t_start)) s (SLURM_CONF=$SLURM_CONF, pids ${sl_pids[*]})"
ck_init "$trident_arg" "$work_arg"
if "$trident" --version 2>/dev/null | grep -q "Open MPI" && [ -z "${TD_SRUN_MPI:-}" ] &&
   ! srun --mpi=list 2>&1 | grep -qw pmix; then
  echo "SKIPPED: trident is built with Open MPI, whose ranks start under srun through PMIx," \
    "and this Slurm has no pmix plugin (srun --mpi=list); use mpirun inside the allocation"
  exit 77
fi
w=$work/slurm
rm -rf "$w"
mkdir -p "$w"
export TRIDENT=$trident
sbatch_script=$src/jobs/train.sbatch
S=60             # steps of the runs compared bitwise
slow=800         # ms of pause per step where a signal must find the job running
# test only: the first run of a job has slow steps, a requeued one runs at
# full speed (so that it is rarely signalled again before it finishes)
cat >"$w/slow-first-run.sh" <<'WRAP'
#!/usr/bin/env bash
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && [ -n "${TD_SLOW_FIRST_MS:-}" ]; then
  export TD_TEST_STEP_SLEEP_MS=$TD_SLOW_FIRST_MS
fi
exec "$TD_REAL_TRIDENT" "$@"
WRAP
chmod +x "$w/slow-first-run.sh"
export TD_REAL_TRIDENT=$trident
common=(--set "data.train=$corpus" --set "training.steps=$S" --set checkpoint.resume=auto
        --set checkpoint.every=0 --set logging.every=1)

# submit NAME [sbatch options...] -- [train.sbatch arguments...]: job id in jid[NAME]
declare -A jid
submit() {
  local name=$1 opts=() out
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  local rc=0
  out=$(sbatch --parsable --chdir="$w" --job-name="td-$name" --output="$w/$name.out" \
    "${opts[@]}" "$sbatch_script" "$@" 2>&1) || rc=$?
  out=$(echo "$out" | grep -E '^[0-9]+(;|$)' | head -n 1)
  if [ -z "$out" ]; then
    fail "$name: sbatch refused the job (exit $rc)"
    return 1
  fi
  jid[$name]=${out%%;*}
  echo "${jid[$name]}" >"$w/$name.jid"
  info "$name: job ${jid[$name]} submitted$([ $rc != 0 ] && echo ", sbatch exited $rc")"
  return $rc
}

# field JOB NAME: a field of scontrol show job (e.g. JobState, Restarts, ExitCode)
field() {
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
# wait_done JOB [SECONDS]: until the job has finished for good (not pending
# again after a requeue); sets done_state
wait_done() {
  local j=$1 limit=${2:-170} t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    done_state=$(field "$j" JobState)
    case $done_state in
      COMPLETED | FAILED | TIMEOUT | CANCELLED | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED) return 0 ;;
    esac
    sleep 1
  done
  done_state="still $done_state after ${limit}s"
  return 1
}
# wait_steps DIR N [SECONDS]: until DIR/metrics.jsonl logs N steps
wait_steps() {
  local t0=$SECONDS n
  while [ $((SECONDS - t0)) -lt "${3:-120}" ]; do
    n=$(grep -c '"loss"' "$1/metrics.jsonl" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.3
  done
  return 1
}
show() { ck_show_log "$1" "${2:-20}"; }
# check_requeued NAME RUNDIR MIN_RESTARTS: the preempted-and-resumed path
check_requeued() {
  local name=$1 dir=$2 min=$3 out=$w/$1.out j=${jid[$1]} restarts ec
  restarts=$(field "$j" Restarts)
  ec=$(field "$j" ExitCode)
  if [ "$done_state" = COMPLETED ] && [ "$ec" = 0:0 ] && [ "${restarts:-0}" -ge "$min" ]; then
    pass "$name: job $j COMPLETED, exit 0, after $restarts requeue(s)"
  else
    fail "$name: job $j state $done_state, exit $ec, $restarts requeue(s) (expected COMPLETED, 0:0, >= $min)"
    show "$out"
  fi
  local nstart nstop nreq nres
  nstart=$(grep -c "^trident: training" "$out")
  nstop=$(grep -c "^trident: stopped by SIGUSR1" "$out")
  nreq=$(grep -c "^trident: stopped after a checkpoint; requeueing job $j" "$out")
  nres=$(grep -c "^trident: resuming at step" "$out")
  if [ "$nstart" -ge 2 ] && [ "$nstop" -ge 1 ] && [ "$nreq" = "$nstop" ] && [ "$nres" = $((nstart - 1)) ] &&
     grep -q "^trident: done" "$out"; then
    pass "$name: the log shows $nstart runs: $nstop stop(s) by SIGUSR1, $nreq requeue(s), resumed at step(s) $(grep "^trident: resuming at step" "$out" | awk '{print $5}' | tr '\n' ' ')"
  else
    fail "$name: log has $nstart runs, $nstop stops, $nreq requeues, $nres resumes (expected >= 2 runs, each stop requeued, each later run resumed)"
    show "$out" 40
  fi
  ck_compare_bitwise "$w/straight" "$dir" \
    "$name: the final checkpoint and every logged step are bitwise those of the uninterrupted run"
}

# ---- submit (the jobs run side by side; the node declares 32 CPUs) ----
if want train4; then
  # the command users type, in the background: its exit status is the job's
  (
    sbatch --wait --chdir="$w" --job-name=td-train4 --output="$w/train4.out" -n 4 "$sbatch_script" \
      "$deck" "${common[@]}" --set training.steps=20 --set parallel.dp=4 --set "run.out_dir=$w/train4" \
      >"$w/train4.sbatch" 2>&1
    echo $? >"$w/train4.rc"
  ) &
  train4_pid=$!
fi
if want timelimit || want scancel; then
  submit straight -n 2 -- "$deck" "${common[@]}" --set parallel.dp=2 --set "run.out_dir=$w/straight"
fi
if want timelimit; then
  TRIDENT=$w/slow-first-run.sh TD_SLOW_FIRST_MS=$slow TD_SIGNAL_LEAD_S=50 submit timelimit -n 2 --time=1 --signal=USR1@50 -- \
    "$deck" "${common[@]}" --set parallel.dp=2 --set "run.out_dir=$w/timelimit"
fi
if want scancel; then
  TRIDENT=$w/slow-first-run.sh TD_SLOW_FIRST_MS=$slow submit scancel -n 2 -- \
    "$deck" "${common[@]}" --set parallel.dp=2 --set "run.out_dir=$w/scancel"
fi
if want elastic; then
  submit straight30 -n 2 -- "$deck" "${common[@]}" --set training.steps=30 --set parallel.dp=2 \
    --set "run.out_dir=$w/straight30"
  TD_TEST_STEP_SLEEP_MS=350 TD_MAX_REQUEUES=0 submit elastic4 -n 4 -- "$deck" "${common[@]}" \
    --set training.steps=30 --set parallel.dp=2 --set parallel.pp=2 --set parallel.micro_batch=2 \
    --set "run.out_dir=$w/elastic"
fi
if want baddeck; then
  # a deck with a misspelt key
  sed 's/^  layers: 4$/  layer: 4/' "$deck" >"$w/bad.yaml"
  submit baddeck -n 2 -- "$w/bad.yaml" "${common[@]}" --set "run.out_dir=$w/baddeck"
fi
if want bounded; then
  TD_TEST_STEP_SLEEP_MS=350 TD_MAX_REQUEUES=1 submit bounded -n 1 -- "$deck" "${common[@]}" \
    --set "run.out_dir=$w/bounded"
fi
if want warn; then
  TD_TEST_STEP_SLEEP_MS=1500 TD_SIGNAL_LEAD_S=1 submit warn -n 1 -- \
    "$deck" "${common[@]}" --set training.steps=6 --set "run.out_dir=$w/warn"
fi
if want gpus; then
  cat >"$w/record-gpu.sh" <<'WRAP'
#!/usr/bin/env bash
[ "${1:-}" = train ] && echo "task ${SLURM_LOCALID:-?} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}" >>"$TD_GPU_LOG"
exec "$TD_REAL_TRIDENT" "$@"
WRAP
  chmod +x "$w/record-gpu.sh"
  for how in per-node per-task; do
    opt=--gpus-per-node=2
    [ $how = per-task ] && opt=--gpus-per-task=1
    TRIDENT=$w/record-gpu.sh TD_GPU_LOG=$w/gpus-$how.log submit "gpus-$how" -n 2 "$opt" -- \
      "$deck" "${common[@]}" --set training.steps=6 --set parallel.dp=2 --set "run.out_dir=$w/gpus-$how"
  done
fi
if want timeout; then
  TD_TEST_STEP_SLEEP_MS=200000 TD_SIGNAL_LEAD_S=1 submit timeout -n 1 --time=1 --signal=USR1@1 -- \
    "$deck" "${common[@]}" --set "run.out_dir=$w/timeout"
fi

# ---- operators' signals, once the jobs run ----
# usr1_after NAME RUNDIR N: scancel --signal=USR1 job NAME once RUNDIR logs N steps
usr1_after() {
  if wait_steps "$2" "$3"; then
    scancel --signal=USR1 "${jid[$1]}" && info "$1: scancel --signal=USR1 ${jid[$1]} after $3 steps"
  else
    fail "$1: the job did not log $3 steps in 120 s"
    show "$w/$1.out"
  fi
}
want scancel && usr1_after scancel "$w/scancel" 5
want elastic && usr1_after elastic4 "$w/elastic" 5
if want bounded && wait_steps "$w/bounded" 3; then
  scancel --signal=USR1 "${jid[bounded]}" && info "bounded: first scancel --signal=USR1 after 3 steps"
  # the requeued run: wait for it to resume and log a step, signal it again
  t0=$SECONDS
  while [ $((SECONDS - t0)) -lt 120 ] && [ "$(grep -c "^trident: resuming at step" "$w/bounded.out")" -lt 1 ]; do
    sleep 0.5
  done
  n0=$(grep -c '"loss"' "$w/bounded/metrics.jsonl" 2>/dev/null)
  if wait_steps "$w/bounded" $((n0 + 2)) 60; then
    scancel --signal=USR1 "${jid[bounded]}" && info "bounded: second scancel --signal=USR1 after the requeue"
  else
    fail "bounded: the requeued run did not resume and log steps"
    show "$w/bounded.out"
  fi
fi

# ---- 1. train4 ----
if want train4; then
  wait "$train4_pid"
  j=$(grep -o "Submitted batch job [0-9]*" "$w/train4.sbatch" | awk '{print $4}')
  rc=$(cat "$w/train4.rc")
  if [ -n "$j" ] && [ "$rc" = 0 ] && [ "$(field "$j" JobState)" = COMPLETED ]; then
    pass "train4: sbatch --wait -n 4 jobs/train.sbatch exited 0; job $j COMPLETED"
  else
    fail "train4: sbatch --wait exited $rc; job ${j:-none} $(field "${j:-0}" JobState), exit $(field "${j:-0}" ExitCode)"
    show "$w/train4.sbatch" 5
  fi
  o=$w/train4.out
  if [ "$(grep -c "^trident: training .* on 4 ranks (dp 4, tp 1, pp 1" "$o")" = 1 ] &&
     grep -q "^step     20/20 | loss" "$o" && grep -q "^trident: done, 20 steps" "$o"; then
    pass "train4: one 4-rank job ($(grep -m1 -o "srun --mpi=[a-z0-9]*" "$o"); one grid line: $(grep "^trident: training" "$o" | sed 's/trident: training tiny //' | cut -c1-40)...), steps 1..20 logged, done"
  else
    fail "train4: expected one 'training ... on 4 ranks (dp 4' line and the progress lines; got:"
    show "$o"
  fi
fi

# ---- 2. the uninterrupted reference ----
if want timelimit || want scancel; then
  if wait_done "${jid[straight]}" && [ "$done_state" = COMPLETED ]; then
    info "straight: job ${jid[straight]} COMPLETED"
  else
    ck_abort "straight: the reference job ended $done_state: $(tail -n 5 "$w/straight.out" | tr '\n' ' ')"
  fi
fi

# ---- 3. time-limit preemption ----
if want timelimit; then
  wait_done "${jid[timelimit]}"
  check_requeued timelimit "$w/timelimit" 1
fi

# ---- 4. scancel --signal=USR1 ----
if want scancel; then
  wait_done "${jid[scancel]}"
  check_requeued scancel "$w/scancel" 1
fi

# ---- 5. elastic: stopped on 4 tasks, not requeued; resumed on 2 ----
if want elastic; then
  j=${jid[elastic4]}
  wait_done "$j"
  o=$w/elastic4.out
  if [ "$done_state" = FAILED ] && [ "$(field "$j" ExitCode)" = 75:0 ] && [ "$(field "$j" Restarts)" = 0 ] &&
     grep -q "not requeueing: already requeued 0 time(s), TD_MAX_REQUEUES=0" "$o"; then
    pass "elastic: the (2,1,2) job stopped with exit 75 after a checkpoint and was not requeued (TD_MAX_REQUEUES=0, said so)"
  else
    fail "elastic: the 4-task job: state $done_state, exit $(field "$j" ExitCode), restarts $(field "$j" Restarts)"
    show "$o"
  fi
  wait_done "${jid[straight30]}"
  submit elastic2 --wait -n 2 -- --auto-dp "$deck" "${common[@]}" --set training.steps=30 \
    --set parallel.pp=1 --set "run.out_dir=$w/elastic"
  o=$w/elastic2.out
  if [ "$(field "${jid[elastic2]:-0}" ExitCode)" = 0:0 ] &&
     grep -q "^trident: training .* on 2 ranks (dp 2, tp 1, pp 1" "$o" &&
     grep -q "^trident: resuming at step" "$o"; then
    pass "elastic: sbatch -n 2 jobs/train.sbatch --auto-dp: $(grep -o "resuming at step [0-9]*" "$o") on (2,1,1), finished"
  else
    fail "elastic: the 2-task job (--auto-dp): exit $(field "${jid[elastic2]:-0}" ExitCode)"
    show "$o"
  fi
  if out=$("$py" "$compare" "$w/straight30" "$w/elastic" 2>&1); then
    pass "elastic: 4 tasks then 2 follow the uninterrupted dp 2 run (losses and grad norms 1e-4, parameters per tensor)"
  else
    fail "elastic: compare_runs.py straight30 vs elastic"
    echo "$out" | sed 's/^/     | /'
  fi
fi

# ---- 6. a bad deck ----
if want baddeck; then
  j=${jid[baddeck]}
  wait_done "$j"
  o=$w/baddeck.out
  if [ "$done_state" = FAILED ] && [ "$(field "$j" ExitCode)" = 2:0 ] && [ "$(field "$j" Restarts)" = 0 ] &&
     grep -q "trident: error: $w/bad.yaml:[0-9]*:[0-9]*: unknown key 'model.layer'" "$o" &&
     ! grep -q "requeueing" "$o"; then
    pass "baddeck: exit 2, not requeued, the message in the output: $(grep -m1 "trident: error:" "$o" | cut -c1-110)"
  else
    fail "baddeck: state $done_state, exit $(field "$j" ExitCode), restarts $(field "$j" Restarts)"
    show "$o"
  fi
fi

# ---- 7. bounded requeues ----
if want bounded; then
  j=${jid[bounded]}
  wait_done "$j"
  o=$w/bounded.out
  if [ "$done_state" = FAILED ] && [ "$(field "$j" ExitCode)" = 75:0 ] && [ "$(field "$j" Restarts)" = 1 ] &&
     grep -q "requeueing job $j (requeue 1 of at most 1)" "$o" &&
     grep -q "not requeueing: already requeued 1 time(s), TD_MAX_REQUEUES=1" "$o"; then
    pass "bounded: requeued once (reported), then stopped for good with exit 75 (TD_MAX_REQUEUES=1)"
  else
    fail "bounded: state $done_state, exit $(field "$j" ExitCode), restarts $(field "$j" Restarts)"
    show "$o" 30
  fi
fi

# ---- 8. a lead too short: warned at start-up ----
if want warn; then
  j=${jid[warn]}
  wait_done "$j"
  o=$w/warn.out
  if [ "$done_state" = COMPLETED ] &&
     grep -q "trident: warning: at start-up: the stop signal comes 1 s before the end" "$o"; then
    pass "warn: $(grep -m1 "warning: at start-up" "$o" | cut -c1-150)..."
  else
    fail "warn: state $done_state, no start-up warning about the signal lead"
    show "$o"
  fi
fi

# ---- 9. killed by the time limit before any checkpoint ----
if want timeout; then
  j=${jid[timeout]}
  wait_done "$j"
  o=$w/timeout.out
  if [ "$done_state" = TIMEOUT ] && [ "$(field "$j" Restarts)" = 0 ] && ! grep -q "requeueing job" "$o" &&
     [ -z "$(ck_latest "$w/timeout")" ]; then
    pass "timeout: killed by the time limit before any checkpoint (TIMEOUT), not requeued"
  else
    fail "timeout: state $done_state, restarts $(field "$j" Restarts), latest '$(ck_latest "$w/timeout")' (expected TIMEOUT, 0, none)"
    show "$o"
  fi
fi

# ---- 10. GPUs: one device per task ----
if want gpus; then
  for how in per-node per-task; do
    j=${jid[gpus-$how]}
    wait_done "$j"
    got=$(sort "$w/gpus-$how.log" 2>/dev/null | tr '\n' ';')
    if [ "$done_state" = COMPLETED ] &&
       [ "$got" = "task 0 CUDA_VISIBLE_DEVICES=0;task 1 CUDA_VISIBLE_DEVICES=1;" ]; then
      pass "gpus: --gpus-$how: each task's trident sees its own GPU ($got)"
    else
      fail "gpus: --gpus-$how: state $done_state, tasks saw: ${got:-nothing}"
      show "$w/gpus-$how.out"
    fi
  done
fi

echo "slurm: $((SECONDS - t_start)) s in all ($only)"
ck_finish
