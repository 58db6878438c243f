#!/usr/bin/env bash
# ckpt_crash.sh TRIDENT WORKDIR [GRID]
#
# A save killed half-way (docs/architecture.md invariant 4 "Nothing lost"), through the
# trainer, on GRID (default 2,1,1,0: two ranks):
#   1. train 10 steps, committing step_00000010.h5;
#   2. rerun to 20 steps (resume=auto, a checkpoint every 10) with
#      TD_TEST_CRASH_SAVE=1: every rank is killed in the middle of writing
#      step 20 (io/td_ckpt.h), so the job fails;
#   3. `latest` must still name step_00000010.h5, step_00000020.h5 must not
#      exist (at most step_00000020.h5.tmp), `trident ckpt info` must verify
#      step 10 (exit 0), and neither `ckpt info` nor a resume may take the
#      .tmp for a checkpoint;
#   4. the same command without the switch resumes from step 10, commits
#      step 20 (which verifies) and leaves no .tmp behind.
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
grid=${3:-2,1,1,0}
dir=$work/crash
ck=$dir/ckpt
echo "ckpt_crash: grid $grid, a save killed half-way"

ck_train_ok "$grid" "$dir" "10 steps" --set training.steps=10 --set checkpoint.every=10 \
  --set checkpoint.resume=never
if [ "$(ck_latest "$dir")" = step_00000010.h5 ] && [ -f "$ck/step_00000010.h5" ]; then
  pass "step_00000010.h5 committed"
else
  fail "no committed step_00000010.h5 (latest '$(ck_latest "$dir")')"
  ck_finish
fi

cont=(--set training.steps=20 --set checkpoint.every=10 --set checkpoint.resume=auto)
log=$dir/crash.log
rm -f "$log"
t0=$SECONDS
TD_TEST_CRASH_SAVE=1 ck_train "$grid" "$dir" "$log" "${cont[@]}"
unset TD_TEST_CRASH_SAVE
if [ "$ck_rc" != 0 ] && [ "$ck_rc" != 75 ] && [ "$ck_rc" != 124 ]; then
  pass "the run with TD_TEST_CRASH_SAVE=1 failed (exit $ck_rc, $((SECONDS - t0)) s)"
elif [ "$ck_rc" = 0 ] && grep -q "TD_TEST_CRASH_SAVE" "$log" && ! grep -q "trident: done" "$log"; then
  # every rank was SIGKILLed; MPICH's hydra can report 0 when several ranks
  # die at once (pmodels/mpich#7057)
  echo "XFAIL mpiexec exited 0 although the ranks were killed (MPICH hydra loses exit codes, pmodels/mpich#7057)"
else
  fail "the run with TD_TEST_CRASH_SAVE=1 exited $ck_rc (expected death by SIGKILL)"
  ck_show_log "$log"
fi
if grep -q "TD_TEST_CRASH_SAVE" "$log" && grep -q "^step *20/20" "$log"; then
  pass "it trained to step 20 and was killed by the switch during the save"
else
  fail "the log does not show step 20 followed by the TD_TEST_CRASH_SAVE kill"
  ck_show_log "$log"
fi

latest=$(ck_latest "$dir")
if [ "$latest" = step_00000010.h5 ]; then
  pass "latest still names step_00000010.h5"
else
  fail "latest names '$latest' after the killed save, expected step_00000010.h5"
fi
if [ ! -e "$ck/step_00000020.h5" ]; then
  pass "no step_00000020.h5 (files: $(cd "$ck" && ls | tr '\n' ' '))"
else
  fail "step_00000020.h5 exists after a save killed half-way"
fi
info_out=$("$trident" ckpt info "$ck/step_00000010.h5" 2>&1)
rc=$?
if [ $rc = 0 ] && ! grep -qi "mismatch" <<<"$info_out"; then
  pass "trident ckpt info step_00000010.h5 verifies (exit 0)"
else
  fail "trident ckpt info step_00000010.h5 exited $rc"
  tail -n 10 <<<"$info_out" | sed 's/^/     | /'
fi
if [ -e "$ck/step_00000020.h5.tmp" ]; then
  info_out=$("$trident" ckpt info "$ck/step_00000020.h5.tmp" 2>&1)
  rc=$?
  if [ $rc != 0 ]; then
    pass "trident ckpt info refuses the half-written step_00000020.h5.tmp (exit $rc)"
  else
    fail "trident ckpt info accepts the half-written step_00000020.h5.tmp (exit 0)"
    tail -n 5 <<<"$info_out" | sed 's/^/     | /'
  fi
fi

rm -f "$dir.resume.log"
t0=$SECONDS
ck_train "$grid" "$dir" "$dir.resume.log" "${cont[@]}"
if [ "$ck_rc" = 0 ]; then
  pass "the same command without the switch exited 0 ($((SECONDS - t0)) s)"
else
  fail "the resume after the crash exited $ck_rc"
  ck_show_log "$dir.resume.log"
fi
if grep -q "loaded .*step_00000010.h5" "$dir.resume.log" && grep -q "resuming at step 10" "$dir.resume.log"; then
  pass "it resumed from step_00000010.h5 at step 10"
else
  fail "the resume did not load step_00000010.h5 / resume at step 10"
  ck_show_log "$dir.resume.log"
fi
if [ "$(ck_latest "$dir")" = step_00000020.h5 ] && "$trident" ckpt info "$ck/step_00000020.h5" >/dev/null 2>&1; then
  pass "step_00000020.h5 committed and verifies"
else
  fail "after the resume: latest '$(ck_latest "$dir")', ckpt info step_00000020.h5 failed or file missing"
fi
tmps=$(cd "$ck" && ls -- *.tmp 2>/dev/null | tr '\n' ' ')
if [ -z "$tmps" ]; then
  pass "no .tmp file left after the successful save"
else
  fail "stale files left after the successful save of step 20: $tmps"
fi
# Not a contract: the crashed run had already logged steps 11..20.
dups=$("$py" -c '
import collections, json, sys
c = collections.Counter(json.loads(l)["step"] for l in open(sys.argv[1]) if l.strip())
print(" ".join(str(s) for s in sorted(c) if c[s] > 1))
' "$dir/metrics.jsonl")
[ -n "$dups" ] && info "note: metrics.jsonl logs steps $dups twice (the killed run's records are kept)"
ck_finish
