#!/usr/bin/env bash
# ckpt_signal_in_save.sh TRIDENT WORKDIR [GRID] [SIGNAL]
#
# Signals that arrive while a checkpoint is being written (docs/architecture.md exit
# code 75; issue "a second signal during the save does not corrupt
# anything"), on GRID (default 2,1,1,0), SIGNAL USR1 (default) or TERM:
#   1. the uninterrupted run: 20 steps, a checkpoint every 5;
#   2. the same run with TD_TEST_SIGNAL_SAVE=SIGNAL: every rank raises the
#      signal in the middle of writing every save (io/td_ckpt.h). The save
#      of step 5 is hit: it must still commit; at the end of step 6 the ranks
#      agree to stop and save step 6, which is hit again (the second
#      signal): it must commit too, and the job must stop with 75 (mpiexec
#      exiting 0 is XFAIL, pmodels/mpich#7057, when the log says it stopped)
#      and one "stopped by" line. `latest` names step 6; steps 5 and 6
#      verify with `trident ckpt info`; no .tmp is left;
#   3. the same command without the switch resumes at step 6, exits 0, and
#      the run equals the uninterrupted one bit for bit.
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
grid=${3:-2,1,1,0}
sig=${4:-USR1}
dir=$work/signal_in_save_$sig
mkdir -p "$dir"
args=(--set training.steps=20 --set checkpoint.every=5 --set checkpoint.keep=0)
echo "ckpt_signal_in_save: grid $grid, SIG$sig raised inside every save"

ck_train_ok "$grid" "$dir/straight" "uninterrupted 20 steps" "${args[@]}" \
  --set checkpoint.resume=never

r=$dir/stopped
rm -rf "$r" "$r.log"
TD_TEST_SIGNAL_SAVE=$sig ck_train "$grid" "$r" "$r.log" "${args[@]}" --set checkpoint.resume=auto
nraised=$(grep -c "TD_TEST_SIGNAL_SAVE: rank" "$r.log")
nstop=$(grep -c "^trident: stopped by SIG$sig at step 6 " "$r.log")
nerr=$(grep -c "trident: error:" "$r.log")
if [ "$ck_rc" = 75 ] && [ "$nstop" = 1 ] && [ "$nerr" = 0 ]; then
  pass "exit 75 after SIG$sig inside the saves of steps 5 and 6 ($nraised raises), one 'stopped by' line"
elif [ "$ck_rc" = 0 ] && [ "$nstop" = 1 ] && [ "$nerr" = 0 ]; then
  echo "XFAIL mpiexec exited 0 although the job stopped with 75 (pmodels/mpich#7057)"
else
  fail "after SIG$sig inside the saves: exit $ck_rc, $nstop 'stopped by SIG$sig at step 6' lines, $nerr errors (expected 75, 1, 0)"
  ck_show_log "$r.log" 25
  ck_finish
fi
if [ "$(ck_latest "$r")" = step_00000006.h5 ]; then
  pass "latest names step_00000006.h5"
else
  fail "latest is '$(ck_latest "$r")', expected step_00000006.h5; files: $(ls "$r/ckpt" 2>&1 | tr '\n' ' ')"
fi
for s in 5 6; do
  f=$r/ckpt/$(printf 'step_%08d.h5' $s)
  if "$trident" ckpt info "$f" >"$f.info" 2>&1; then
    pass "$(basename "$f"), written while SIG$sig arrived, verifies"
  else
    fail "trident ckpt info $(basename "$f")"
    ck_show_log "$f.info"
  fi
done
tmps=$(find "$r/ckpt" -name '*.tmp' | wc -l)
if [ "$tmps" = 0 ]; then pass "no .tmp left"; else fail "$tmps .tmp files left in $r/ckpt"; fi

echo "+ resume" >>"$r.resume.log"
ck_resumed_at "$r" "$r.resume.log" 6 "${args[@]}"
ck_compare_bitwise "$dir/straight" "$r" \
  "stopped + resumed run is bitwise identical to the uninterrupted one (losses, grad norms, final /model)"
ck_finish
