#!/usr/bin/env bash
# run_inject.sh TRIDENT MPIEXEC — an error found on one rank alone must end the
# whole job (docs/architecture.md, invariant 3), not hang it.
#
# TD_TEST_FAIL_RANK=r makes rank r of `trident check` fail alone while the
# others wait in a collective. Each case must end within 10 s with a non-zero
# exit and the message "[rank r] trident: error: injected failure on rank r".
# The same command without injection (and with a rank that does not exist)
# must pass, so that the failure seen is the injected one. Run from the source
# root.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 TRIDENT MPIEXEC" >&2
  exit 2
fi
TRIDENT=$1
MPIEXEC=$2
DECK=inputs/quickstart.yaml
NP=4
export OMP_NUM_THREADS=1
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
DATA=$TMP/data.h5 # check refuses missing data: any existing file will do
touch "$DATA"
pass=0
fail=0

run() { # run NAME FAIL_RANK(or "") → sets rc, secs; output in $TMP/out
  local start
  start=$(date +%s.%N)
  if [ -n "$2" ]; then
    TD_TEST_FAIL_RANK=$2 timeout -k 3 10 "$MPIEXEC" -n $NP "$TRIDENT" check "$DECK" --set "data.train=$DATA" \
      >"$TMP/out" 2>&1 </dev/null
  else
    env -u TD_TEST_FAIL_RANK timeout -k 3 10 "$MPIEXEC" -n $NP "$TRIDENT" check "$DECK" --set "data.train=$DATA" \
      >"$TMP/out" 2>&1 </dev/null
  fi
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
}

report() { # report NAME WHY
  if [ -z "$2" ]; then
    echo "ok   $1 (${secs} s)"
    pass=$((pass + 1))
  else
    echo "FAIL $1: $2"
    sed 's/^/     | /' "$TMP/out" | head -30
    fail=$((fail + 1))
  fi
}

run control ""
why=""
if [ $rc -ne 0 ] || ! grep -q "^check: OK" "$TMP/out"; then
  why="without TD_TEST_FAIL_RANK: exit $rc (expected 0 and 'check: OK')"
fi
report "no injection, np $NP" "$why"

run absent 99
why=""
if [ $rc -ne 0 ]; then why="TD_TEST_FAIL_RANK=99 (no such rank): exit $rc, expected 0"; fi
report "TD_TEST_FAIL_RANK=99, np $NP" "$why"

for r in 2 0 3; do
  run "rank $r" $r
  why=""
  msg="[rank $r] trident: error: injected failure on rank $r"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    why="the job did not end within 10 s (hang)"
  elif [ $rc -eq 0 ]; then
    why="exit 0, expected non-zero"
  elif ! grep -qF -- "$msg" "$TMP/out"; then
    why="missing message: $msg"
  fi
  report "TD_TEST_FAIL_RANK=$r, np $NP: exit $rc" "$why"
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
