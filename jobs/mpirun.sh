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
ranks=$("$TRIDENT" check "$DECK" "$@" --set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 \
  >/dev/null 2>&1; "$TRIDENT" check --schema >/dev/null; \
  awk '/^parallel:/{p=1} p&&/dp:|tp:|pp:/' "$DECK" | grep -oE '(dp|tp|pp): *[0-9]+' | \
  awk -F': *' '{n=(n?n:1)*$2} END{print n?n:1}')
for a in "$@"; do case $a in parallel.dp=*|parallel.tp=*|parallel.pp=*)
  echo "jobs/mpirun.sh: --set of the grid: give the rank count with RANKS=N"; esac; done
ranks=${RANKS:-$ranks}
export OMP_WAIT_POLICY=passive
while :; do
  echo "jobs/mpirun.sh: mpiexec -n $ranks $TRIDENT train $DECK $*"
  mpiexec -n "$ranks" "$TRIDENT" train "$DECK" "$@"
  rc=$?
  [ "$rc" = 75 ] && [ "${RESTART:-0}" = 1 ] && continue
  exit "$rc"
done
