#!/usr/bin/env bash
# run_good_decks.sh TRIDENT MPIEXEC — every inputs/*.yaml must pass
# `trident check` with exit 0 and "check: OK" (its data files replaced by an
# existing file: check also refuses missing data): at the rank count its
# parallel section asks for (dp×cp×tp×pp) when that is at most 8, and on one
# process (a virtual grid, as on a login node) always — and where both run,
# the two print the same memory for every rank (--json). Then check on a
# deck whose data.train does not exist is exit 2 naming the key. Run from
# the source root.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 TRIDENT MPIEXEC" >&2
  exit 2
fi
TRIDENT=$1
MPIEXEC=$2
MAX_RANKS=8
HERE=$(cd "$(dirname "$0")" && pwd)
INPUTS=$(cd "$HERE/../../inputs" && pwd)
export OMP_NUM_THREADS=1
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# grid_size DECK: dp*tp*pp of the deck's parallel section (flow or block
# style; absent keys are 1).
grid_size() {
  awk '
    function val(text, key,   m) {
      if (match(text, "(^|[{,[:space:]])" key "[[:space:]]*:[[:space:]]*[0-9]+")) {
        m = substr(text, RSTART, RLENGTH); sub(/.*:[[:space:]]*/, "", m); return m + 0
      }
      return 0
    }
    { sub(/[[:space:]]+#.*$/, "") }
    /^#/ { next }
    /^parallel[[:space:]]*:/ { inpar = 1; text = text " " substr($0, index($0, ":") + 1); next }
    /^[^[:space:]]/ { inpar = 0 }
    inpar { text = text " " $0 }
    END {
      dp = val(text, "dp"); cp = val(text, "cp"); tp = val(text, "tp"); pp = val(text, "pp")
      if (!dp) dp = 1; if (!cp) cp = 1; if (!tp) tp = 1; if (!pp) pp = 1
      print dp * cp * tp * pp
    }' "$1"
}

pass=0
fail=0
shopt -s nullglob
decks=("$INPUTS"/*.yaml)
if [ ${#decks[@]} -eq 0 ]; then
  echo "no decks in $INPUTS" >&2
  exit 1
fi
touch "$TMP/data.h5"
paths=(--set "data.train=$TMP/data.h5" --set "data.val=$TMP/data.h5")
# run_check NAME NP ARGS... — exit 0 and "check: OK"
run_check() {
  local name=$1 np=$2
  shift 2
  local out=$TMP/out
  timeout -k 3 60 "$MPIEXEC" -n "$np" "$TRIDENT" check "$@" >"$out" 2>&1 </dev/null
  local rc=$?
  if [ $rc -eq 0 ] && grep -q "^check: OK" "$out"; then
    echo "ok   $name"
    pass=$((pass + 1))
  else
    local why
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out"; else why="exit $rc"; fi
    grep -q "^check: OK" "$out" || why="$why, no 'check: OK'"
    echo "FAIL $name: $why"
    echo "     command: $MPIEXEC -n $np $TRIDENT check $*"
    tail -20 "$out" | sed 's/^/     | /'
    fail=$((fail + 1))
  fi
}
for deck in "${decks[@]}"; do
  name=$(basename "$deck")
  rel=${deck#"$PWD"/}
  np=$(grid_size "$deck")
  if [ "$np" -le "$MAX_RANKS" ]; then
    run_check "$name (np $np)" "$np" "$rel" "${paths[@]}"
  fi
  if [ "$np" -gt 1 ]; then
    run_check "$name (1 process, a virtual grid of $np ranks)" 1 "$rel" "${paths[@]}"
    grep -q "^# virtual grid: this job has 1 process, the deck $np ranks" "$TMP/out" ||
      { echo "FAIL $name: the virtual check does not say so"; fail=$((fail + 1)); }
  fi
  if [ "$np" -gt 1 ] && [ "$np" -le "$MAX_RANKS" ]; then
    "$MPIEXEC" -n "$np" "$TRIDENT" check "$rel" "${paths[@]}" --json >"$TMP/real.json" 2>&1
    "$TRIDENT" check "$rel" "${paths[@]}" --json >"$TMP/virt.json" 2>&1
    if cmp -s "$TMP/real.json" "$TMP/virt.json" && grep -q '"total_bytes"' "$TMP/real.json"; then
      echo "ok   $name: the virtual grid's memory of each of the $np ranks = the real grid's"
      pass=$((pass + 1))
    else
      echo "FAIL $name: --json differs between $np ranks and the virtual grid"
      diff "$TMP/real.json" "$TMP/virt.json" | head -5 | sed 's/^/     | /'
      fail=$((fail + 1))
    fi
  fi
done
# missing data: exit 2 naming the key and the path, after the report
"$TRIDENT" check "$INPUTS/tiny.yaml" --set data.train=nosuch/tiny.h5 >"$TMP/out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "error: .*tiny.yaml: data.train = nosuch/tiny.h5: No such file.*trident prepare" "$TMP/out" &&
   ! grep -q "^check: OK" "$TMP/out"; then
  echo "ok   check with a missing data.train: exit 2 naming the key"
  pass=$((pass + 1))
else
  echo "FAIL check with a missing data.train: exit $rc"
  tail -3 "$TMP/out" | sed 's/^/     | /'
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
