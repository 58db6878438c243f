#!/usr/bin/env bash
# run_cli.sh TRIDENT MPIEXEC — the command line (docs/architecture.md, "Command line and
# exit codes"): help, version, usage errors, and the deck reference of the
# guide (docs/decks.md).
#
# Checks, each printed as one line:
#   trident --help            exit 0, lists every command, printed once at 3 ranks
#   trident --version         exit 0, names the CPU matmul library
#   trident nosuch            exit 2, one error message at 3 ranks
#   trident (nothing)         exit 2
#   trident check             exit 2 (no deck), one error message at 3 ranks
#   trident check --bogus     exit 2
#   trident check --help      exit 0, the check usage
#   trident check --schema    exit 0, a Markdown table with every section, and
#                             contained verbatim in docs/decks.md between
#                             <!-- deck-schema:begin --> and <!-- deck-schema:end -->
#                             (jobs/update-deck-reference.sh rewrites it)
# Run from the source root.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 TRIDENT MPIEXEC" >&2
  exit 2
fi
TRIDENT=$1
MPIEXEC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
DECKDOC=$(cd "$HERE/../.." && pwd)/docs/decks.md
export OMP_NUM_THREADS=1
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/out
pass=0
fail=0

# tri NP ARGS... — run trident on NP ranks; rc and $OUT (stdout+stderr)
tri() {
  local np=$1
  shift
  timeout -k 3 10 "$MPIEXEC" -n "$np" "$TRIDENT" "$@" >"$OUT" 2>"$TMP/err" </dev/null
  rc=$?
  cat "$TMP/err" >>"$OUT"
}
result() { # result NAME WHY
  if [ -z "$2" ]; then
    echo "ok   $1"
    pass=$((pass + 1))
  else
    echo "FAIL $1: $2"
    sed 's/^/     | /' "$OUT" | head -30
    fail=$((fail + 1))
  fi
}
# want_rc CODE: "" if rc is CODE, else the reason
want_rc() {
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "timed out after 10 s"
  elif [ $rc -ne "$1" ]; then echo "exit $rc, expected $1"; fi
}
# one_error: "" if exactly one "trident: error:" line, else the reason
one_error() {
  local n
  n=$(grep -c "trident: error:" "$OUT")
  [ "$n" -eq 1 ] || echo "error message printed $n times, expected once"
}

# --help
tri 3 --help
why=$(want_rc 0)
for c in train check eval generate prepare "ckpt info"; do
  [ -n "$why" ] || grep -q "^  trident $c" "$OUT" || why="command '$c' not listed"
done
[ -n "$why" ] || [ "$(grep -c '^commands:' "$OUT")" -eq 1 ] || why="help printed more than once"
result "trident --help (np 3)" "$why"

# --version
tri 1 --version
why=$(want_rc 0)
[ -n "$why" ] || grep -Eq "matmul: *[A-Za-z]" "$OUT" || why="no 'matmul: LIBRARY' line"
result "trident --version names the matmul library" "$why"

# unknown command
tri 3 nosuch
why=$(want_rc 2)
[ -n "$why" ] || why=$(one_error)
[ -n "$why" ] || grep -q "nosuch" "$OUT" || why="message does not name the command"
result "trident nosuch: exit 2, one message (np 3)" "$why"

# no command at all
tri 1
why=$(want_rc 2)
result "trident without a command: exit 2" "$why"

# check without a deck
tri 3 check
why=$(want_rc 2)
[ -n "$why" ] || why=$(one_error)
[ -n "$why" ] || grep -q "DECK" "$OUT" || why="message does not mention DECK"
result "trident check without a deck: exit 2, one message (np 3)" "$why"

# check with an unknown option
tri 1 check inputs/tiny.yaml --bogus
why=$(want_rc 2)
[ -n "$why" ] || why=$(one_error)
[ -n "$why" ] || grep -q -- "--bogus" "$OUT" || why="message does not name the option"
result "trident check --bogus: exit 2" "$why"

# check --help
tri 1 check --help
why=$(want_rc 0)
[ -n "$why" ] || grep -q "usage: trident check" "$OUT" || why="no 'usage: trident check'"
result "trident check --help: exit 0" "$why"

# check --schema, and the deck reference in docs/decks.md
tri 3 check --schema
why=$(want_rc 0)
cp "$OUT" "$TMP/schema"
for s in run model parallel data training optimizer schedule checkpoint logging eval; do
  [ -n "$why" ] || grep -q "^| \`$s\." "$TMP/schema" || why="no key of section '$s' in the table"
done
[ -n "$why" ] || [ "$(grep -c '^| key |' "$TMP/schema")" -eq 1 ] || why="table printed more than once"
result "trident check --schema (np 3)" "$why"

why=""
block=""
fix="run bash jobs/update-deck-reference.sh (it pastes trident check --schema between
     <!-- deck-schema:begin --> and <!-- deck-schema:end --> in docs/decks.md)"
if [ ! -f "$DECKDOC" ]; then
  why="$DECKDOC does not exist: the deck reference lives there"
else
  begin=$(grep -c '<!-- deck-schema:begin -->' "$DECKDOC")
  end=$(grep -c '<!-- deck-schema:end -->' "$DECKDOC")
  if [ "$begin" -ne 1 ] || [ "$end" -ne 1 ]; then
    why="docs/decks.md needs one <!-- deck-schema:begin --> and one <!-- deck-schema:end -->
     marker around the deck reference; then $fix"
  else
    block=$(sed -n '/<!-- deck-schema:begin -->/,/<!-- deck-schema:end -->/p' "$DECKDOC")
    schema=$(cat "$TMP/schema")
    if [[ $block != *"$schema"* ]]; then
      why="docs/decks.md deck reference is out of date: $fix"
    fi
  fi
fi
if [ -n "$why" ]; then
  # show what differs: docs/decks.md block (<) against trident check --schema (>)
  diff <(sed '1d;$d' <<<"${block:-}") "$TMP/schema" >"$OUT"
fi
result "docs/decks.md deck reference matches trident check --schema" "$why"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
