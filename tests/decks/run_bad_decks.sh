#!/usr/bin/env bash
# run_bad_decks.sh TRIDENT MPIEXEC — every tests/decks/bad/*.yaml through
# `trident check` at each rank count it asks for; each must fail cleanly.
#
# A bad deck starts with comment lines:
#   # expect-code: 2            exit code every rank must end with
#   # expect: FRAGMENT          text that must appear in the output (repeatable)
#   # reject: FRAGMENT          text that must not appear (repeatable; for
#                               messages that are wrong or misleading today)
#   # ranks: 1 3                rank counts to run at (default: 1 and 3)
#   # args: --set k.k=v ...     extra arguments after the deck
#   # deck: PATH                check PATH instead of this file (e.g. a missing file)
# A case fails on a wrong exit code, a missing fragment, a crash (signal,
# MPI abort), a run longer than 10 s, or an error message printed other than
# exactly once (one message from the job, not one per rank).
#
# Run from the source root (decks name relative paths). Optional third
# argument: a regular expression selecting deck names. TD_DECK_RANKS="3"
# restricts the rank counts.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 TRIDENT MPIEXEC [NAME-REGEX]" >&2
  exit 2
fi
TRIDENT=$1
MPIEXEC=$2
FILTER=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
failed=()
shopt -s nullglob
decks=("$HERE"/bad/*.yaml)
if [ ${#decks[@]} -eq 0 ]; then
  echo "no decks in $HERE/bad" >&2
  exit 1
fi

# header VALUE-NAME FILE: the values of "# NAME: value" lines, one a line
header() { sed -n "s/^# $1: \{0,1\}//p" "$2"; }

# one_deck DECK: its cases, one line each (and the output of a failure);
# the counts go to $TMP/NAME.count, the failed cases to $TMP/NAME.failed.
one_deck() {
  local deck=$1 name rel code ranks target np case_name out start rc secs why frag n
  local pass=0 fail=0 failed=() args=() expects=() rejects=()
  counts() {
    echo "$pass $fail" >"$TMP/$name.count"
    printf '%s\n' ${failed[@]+"${failed[@]}"} >"$TMP/$name.failed"
  }
  name=$(basename "$deck" .yaml)
  if [ -n "$FILTER" ] && ! [[ $name =~ $FILTER ]]; then return 0; fi
  rel=${deck#"$PWD"/}
  code=$(header expect-code "$deck" | head -1)
  ranks=$(header ranks "$deck" | head -1)
  read -r -a args <<<"$(header args "$deck" | head -1)"
  target=$(header deck "$deck" | head -1)
  [ -n "$target" ] || target=$rel
  mapfile -t expects < <(header expect "$deck")
  mapfile -t rejects < <(header reject "$deck")
  if [ -z "$code" ] || [ ${#expects[@]} -eq 0 ]; then
    echo "FAIL $name: header lacks '# expect-code:' or '# expect:'"
    fail=$((fail + 1)); failed+=("$name")
    counts
    return 0
  fi
  for np in ${ranks:-1 3}; do
    # TD_DECK_RANKS: only these rank counts (Open MPI's mpiexec spends ~2 s
    # on every 1-rank job that exits non-zero; its CI subset runs 3 ranks)
    case " ${TD_DECK_RANKS:-$np} " in *" $np "*) ;; *) continue ;; esac
    case_name="$name (np $np)"
    out=$TMP/$name.$np.out
    start=$(date +%s.%N)
    timeout -k 3 10 "$MPIEXEC" -n "$np" "$TRIDENT" check "$target" ${args[@]+"${args[@]}"} \
      >"$out" 2>&1 </dev/null
    rc=$?
    secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    why=""
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      why="timed out after 10 s (hang?)"
    elif [ $rc -ge 128 ] || grep -q "BAD TERMINATION\|Segmentation fault\|core dumped\|MPI_Abort\|failed alone" "$out"; then
      why="crashed or aborted (exit $rc)"
    elif [ "$rc" != "$code" ]; then
      why="exit $rc, expected $code"
    fi
    if [ -z "$why" ]; then
      for frag in "${expects[@]}"; do
        if ! grep -qF -- "$frag" "$out"; then
          why="missing fragment: $frag"
          break
        fi
      done
    fi
    if [ -z "$why" ]; then
      for frag in ${rejects[@]+"${rejects[@]}"}; do
        if grep -qF -- "$frag" "$out"; then
          why="unwanted fragment: $frag"
          break
        fi
      done
    fi
    if [ -z "$why" ]; then
      n=$(grep -c "trident: error:" "$out")
      if [ "$n" -ne 1 ]; then why="error message printed $n times, expected once"; fi
    fi
    if [ -z "$why" ]; then
      echo "ok   $case_name (${secs} s)"
      pass=$((pass + 1))
    else
      echo "FAIL $case_name: $why"
      echo "     command: $MPIEXEC -n $np $TRIDENT check $target ${args[*]+${args[*]}}"
      sed 's/^/     | /' "$out" | head -20
      fail=$((fail + 1))
      failed+=("$case_name")
    fi
  done
  counts
}

# The decks run side by side, one per core (each case still has its 10 s);
# their lines are printed in the decks' order.
PAR=${TD_DECK_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
running=0
for deck in "${decks[@]}"; do
  one_deck "$deck" >"$TMP/$(basename "$deck" .yaml).log" 2>&1 &
  running=$((running + 1))
  if [ "$running" -ge "$PAR" ]; then wait -n; running=$((running - 1)); fi
done
wait
for deck in "${decks[@]}"; do
  name=$(basename "$deck" .yaml)
  [ -f "$TMP/$name.count" ] || continue
  cat "$TMP/$name.log"
  read -r p f <"$TMP/$name.count"
  pass=$((pass + p)) fail=$((fail + f))
  while IFS= read -r c; do [ -n "$c" ] && failed+=("$c"); done <"$TMP/$name.failed"
done

echo "$pass passed, $fail failed"
if [ $fail -ne 0 ]; then
  printf 'failed: %s\n' "${failed[@]}"
  exit 1
fi
exit 0
