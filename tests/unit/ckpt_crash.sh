#!/bin/sh
# ckpt_crash.sh MPIEXEC TEST_CKPT DIR — a save killed half-way leaves the
# previous checkpoint committed (docs/architecture.md invariant 4).
#   1. save step 1 normally (2 ranks);
#   2. save step 2 with TD_TEST_CRASH_SAVE=1: every rank raises SIGKILL at
#      the third tensor, so the run must fail;
#   3. `latest` must still name step_00000001.h5, step_00000002.h5 must not
#      exist (only its .tmp may), and step 1 must open and verify.
set -u
MPIEXEC=$1
EXE=$2
DIR=$3
fail() { echo "FAIL $*"; exit 1; }

rm -rf "$DIR" && mkdir -p "$DIR" || fail "cannot prepare $DIR"
"$MPIEXEC" -n 2 "$EXE" "$DIR" --save 1 || fail "saving step 1"
echo "ok   step 1 saved"

TD_TEST_CRASH_SAVE=1 "$MPIEXEC" -n 2 "$EXE" "$DIR" --save 2 >"$DIR/crash.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] || { cat "$DIR/crash.log"; fail "the crashed save of step 2 exited 0"; }
grep -q "TD_TEST_CRASH_SAVE: killing rank" "$DIR/crash.log" ||
  { cat "$DIR/crash.log"; fail "the save of step 2 did not reach the crash switch"; }
echo "ok   save of step 2 killed (exit $rc)"

latest=$(cat "$DIR/latest") || fail "no $DIR/latest"
[ "$latest" = "step_00000001.h5" ] || fail "latest names '$latest', expected step_00000001.h5"
echo "ok   latest still names step_00000001.h5"
[ ! -e "$DIR/step_00000002.h5" ] || fail "step_00000002.h5 exists after a killed save"
[ -e "$DIR/step_00000002.h5.tmp" ] && echo "ok   only step_00000002.h5.tmp is left" ||
  echo "ok   step_00000002.h5 does not exist"

"$MPIEXEC" -n 2 "$EXE" "$DIR" --verify 1 || fail "step 1 does not verify after the crash"
echo "ok   step 1 opens and verifies"
echo "5 passed, 0 failed"
