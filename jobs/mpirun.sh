#!/usr/bin/env bash
# jobs/mpirun.sh — train a deck with mpiexec on a lab machine, with as many
# ranks as the deck's dp × tp × pp, rerunning after a signal-stop (exit 75)
# when RESTART=1.
#   bash jobs/mpirun.sh inputs/DECK.yaml [--set k=v]...
set -uo pipefail
cd "$(dirname "$0")/.."
DECK=${1:?usage: jobs/mpirun.sh DECK [--set k=v]...}
shift
TRIDENT=${TRIDENT:-build/trident}
ranks=${RANKS:-$("$TRIDENT" check "$DECK" "$@" --ranks)} || exit $?
export OMP_WAIT_POLICY=passive
while :; do
  echo "jobs/mpirun.sh: mpiexec -n $ranks $TRIDENT train $DECK $*"
  log=$(mktemp)
  mpiexec -n "$ranks" "$TRIDENT" train "$DECK" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # MPICH 4.0's mpiexec may report 0 for ranks that exited 75 (pmodels/mpich#7057)
  grep -q "^trident: stopped by" "$log" && rc=75
  rm -f "$log"
  [ "$rc" = 75 ] && [ "${RESTART:-0}" = 1 ] && continue
  exit "$rc"
done
