#!/usr/bin/env bash
# run_good_decks.sh TRIDENT MPIEXEC — every inputs/*.yaml must pass
# `trident check` at the rank count its parallel section asks for (dp×tp×pp),
# with exit 0 and "check: OK". Decks that need more than 8 ranks are skipped
# (and said so). Run from the source root.
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
      dp = val(text, "dp"); tp = val(text, "tp"); pp = val(text, "pp")
      if (!dp) dp = 1; if (!tp) tp = 1; if (!pp) pp = 1
      print dp * tp * pp
    }' "$1"
}

pass=0
fail=0
skip=0
shopt -s nullglob
decks=("$INPUTS"/*.yaml)
if [ ${#decks[@]} -eq 0 ]; then
  echo "no decks in $INPUTS" >&2
  exit 1
fi
for deck in "${decks[@]}"; do
  name=$(basename "$deck")
  rel=${deck#"$PWD"/}
  np=$(grid_size "$deck")
  if [ "$np" -gt "$MAX_RANKS" ]; then
    echo "skip $name: needs $np ranks (more than $MAX_RANKS)"
    skip=$((skip + 1))
    continue
  fi
  out=$TMP/out
  timeout -k 3 60 "$MPIEXEC" -n "$np" "$TRIDENT" check "$rel" >"$out" 2>&1 </dev/null
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^check: OK" "$out"; then
    echo "ok   $name (np $np)"
    pass=$((pass + 1))
  else
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="timed out"; else why="exit $rc"; fi
    grep -q "^check: OK" "$out" || why="$why, no 'check: OK'"
    echo "FAIL $name (np $np): $why"
    echo "     command: $MPIEXEC -n $np $TRIDENT check $rel"
    tail -20 "$out" | sed 's/^/     | /'
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed ($skip skipped: more than $MAX_RANKS ranks)"
[ $fail -eq 0 ]
