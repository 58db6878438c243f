#!/usr/bin/env bash
# ckpt_signal.sh TRIDENT WORKDIR [GRID] [SIGNAL]
#
# Stop on a signal, resume exactly (docs/architecture.md: exit code 75 "stopped early by
# a signal after a checkpoint was committed — the same command resumes"), on
# GRID (default 2,1,1,0), SIGNAL USR1 (default), TERM or INT (Ctrl-C):
#   1. the uninterrupted run: 40 steps, checkpoint.every=0 (saves at the end);
#   2. the same deck in the background under mpiexec, each step made at
#      least 150 ms long (TD_TEST_STEP_SLEEP_MS): once metrics.jsonl has 3
#      records, SIGNAL is sent to mpiexec. Margin: the signal then has at
#      least 37 steps (5.5 s) to land before the run could end; a signal
#      sent later than step 36 (the poll starved by load) fails as a defect
#      of this test, not of trident. SIGNAL goes to mpiexec (MPICH's hydra forwards SIGUSR1, SIGINT
#      and SIGTERM to the ranks); every rank and mpiexec must exit 75, with
#      a committed checkpoint of the last logged step S < 40 named in
#      `latest` that verifies (mpiexec exiting 0 while every rank exited 75
#      is reported as XFAIL, a known hydra bug, unless
#      TD_STRICT_MPIEXEC_RC=1);
#   3. the same command again resumes at S, exits 0, and the run equals the
#      uninterrupted one bit for bit (compare_runs.py --bitwise: losses,
#      grad norms, final /model).
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
grid=${3:-2,1,1,0}
sig=${4:-USR1}
dir=$work/signal_$sig
mkdir -p "$dir"
args=(--set training.steps=40 --set checkpoint.every=0)
echo "ckpt_signal: grid $grid, SIG$sig after 3 steps of 40"

ck_train_ok "$grid" "$dir/straight" "uninterrupted 40 steps" "${args[@]}" --set checkpoint.resume=never

r=$dir/stopped
rm -rf "$r" "$r.log"
mkdir -p "$r"
ck_grid "$grid"
tcmd=("$trident" train "$deck" --set "data.train=$corpus" "${g_args[@]}"
      --set "run.out_dir=$r" "${args[@]}" --set checkpoint.resume=auto)
cmd=("$mpiexec" -n "$g_np" "${tcmd[@]}")
# Each rank runs under a wrapper that records its exit status in
# $rcdir/rank.<PMI_RANK or OMPI_COMM_WORLD_RANK> (hydra signals the rank's whole process group, so
# trident gets the signal itself; the wrapper only passes it on again).
rcdir=$r.rc
rm -rf "$rcdir"
mkdir -p "$rcdir"
wrap='trap "kill -'$sig' \$c 2>/dev/null" '$sig'; "$@" & c=$!
while :; do wait $c; rc=$?; kill -0 $c 2>/dev/null || break; done
echo $rc >"$TD_RCDIR/rank.${PMI_RANK:-$OMPI_COMM_WORLD_RANK}"; exit $rc'
echo "+ ${cmd[*]}" >"$r.log"
# mpiexec itself in the background (not under timeout: the signal goes to it)
env "$CK_EVERY_RANK_EXITS" TD_TEST_STEP_SLEEP_MS=150 "TD_RCDIR=$rcdir" \
  "$mpiexec" -n "$g_np" bash -c "$wrap" bash "${tcmd[@]}" \
  >>"$r.log" 2>&1 </dev/null &
pid=$!
t0=$SECONDS
sent=0 hung=0
while kill -0 "$pid" 2>/dev/null; do
  if [ $((SECONDS - t0)) -ge "$run_timeout" ]; then
    hung=1
    kill -KILL "$pid" 2>/dev/null
    break
  fi
  if [ $sent = 0 ]; then
    n=$(grep -c '"loss"' "$r/metrics.jsonl" 2>/dev/null)
    if [ "${n:-0}" -ge 3 ]; then
      kill -"$sig" "$pid" && sent=1
      info "SIG$sig sent to mpiexec (pid $pid) after $n logged steps ($((SECONDS - t0)) s)"
      [ "$n" -le 36 ] ||
        fail "the signal was sent after $n of 40 steps: no margin left (a defect of this test)"
    fi
  fi
  sleep 0.2
done
rc=0
wait "$pid" || rc=$?
[ $hung = 1 ] && fail "mpiexec still running after ${run_timeout}s (killed)"
if [ $sent = 0 ]; then
  fail "the run ended (exit $rc) before it had logged 3 steps; no signal sent"
  ck_show_log "$r.log"
  ck_finish
fi
ck_rank_statuses "$rcdir" "$g_np"
if [ $all75 = 1 ]; then
  pass "every rank exited 75 after SIG$sig (${ranks[*]})"
else
  fail "rank exit statuses after SIG$sig: ${ranks[*]}, expected 75 on every rank"
  ck_show_log "$r.log"
fi
if [ $rc = 75 ]; then
  pass "mpiexec exited 75 after SIG$sig ($((SECONDS - t0)) s)"
elif [ $rc = 0 ] && [ $all75 = 1 ] && [ "${TD_STRICT_MPIEXEC_RC:-0}" = 0 ]; then
  # MPICH's hydra (seen with 4.0.2, in about a third of the runs) reports 0
  # when several ranks exit non-zero at once: pmodels/mpich#7057, fixed by
  # pmodels/mpich#7058. Not trident's doing: every rank exited 75 above.
  echo "XFAIL mpiexec exited 0 although every rank exited 75 (MPICH hydra loses exit codes, pmodels/mpich#7057; TD_STRICT_MPIEXEC_RC=1 makes this a failure)"
else
  fail "mpiexec exited $rc after SIG$sig, expected 75"
  ck_show_log "$r.log"
fi
# a signal stop is not an error: one "trident: stopped by ..." line, no "error:"
nerr=$(grep -c "trident: error:" "$r.log")
nstop=$(grep -c "^trident: stopped by SIG$sig" "$r.log")
if [ "$nstop" = 1 ] && [ "$nerr" = 0 ]; then
  pass "one message: $(grep "stopped by" "$r.log" | head -1)"
else
  fail "expected one 'trident: stopped by SIG$sig' line and no error, found $nstop and $nerr error lines"
  ck_show_log "$r.log"
fi
S=$("$py" -c '
import json, sys
print(max(json.loads(l)["step"] for l in open(sys.argv[1]) if "loss" in l))' "$r/metrics.jsonl" 2>/dev/null)
name=$(printf 'step_%08d.h5' "${S:-0}")
if [ -n "$S" ] && [ "$S" -lt 40 ] && [ "$(ck_latest "$r")" = "$name" ] && [ -f "$r/ckpt/$name" ]; then
  pass "latest names $name, the last logged step ($S)"
else
  fail "after the signal: last logged step '$S', latest '$(ck_latest "$r")', files: $(ls "$r/ckpt" 2>&1 | tr '\n' ' ')"
  ck_finish
fi
if "$trident" ckpt info "$r/ckpt/$name" >/dev/null 2>&1; then
  pass "trident ckpt info $name verifies"
else
  fail "trident ckpt info $name fails"
fi

t0=$SECONDS
echo "+ ${cmd[*]}" >"$r.resume.log"
rc=0
timeout -k 5 "$run_timeout" "${cmd[@]}" >>"$r.resume.log" 2>&1 </dev/null || rc=$?
if [ $rc = 0 ] && grep -q "resuming at step $S" "$r.resume.log"; then
  pass "the same command resumed at step $S and exited 0 ($((SECONDS - t0)) s)"
else
  fail "the same command again: exit $rc (expected 0, resuming at step $S)"
  ck_show_log "$r.resume.log"
fi
ck_compare_bitwise "$dir/straight" "$r" \
  "stopped + resumed run is bitwise identical to the uninterrupted one (losses, grad norms, final /model)"
ck_finish
