#!/usr/bin/env bash
# jobs/mpirun.sh — train a deck with mpiexec on a lab machine, with as many
# ranks as the deck's dp × cp × tp × pp, rerunning after a signal-stop (exit 75)
# when RESTART=1. MPIEXEC overrides the launcher (default: the MPICH or Open
# MPI one the binary was built with). Stop it for a later resume with
# SIGUSR1 to this script's mpiexec (MPICH and Open MPI forward it).
#   bash jobs/mpirun.sh inputs/DECK.yaml [--set k=v]...
# From any folder: the deck and the paths in it are relative to where it is
# run, as with trident itself; the binary is the checkout's build/trident
# (TRIDENT overrides it).
set -uo pipefail
DECK=${1:?usage: jobs/mpirun.sh DECK [--set k=v]...}
shift
TRIDENT=${TRIDENT:-$(cd "$(dirname "$0")/.." && pwd)/build/trident}
# the launcher of the MPI the binary was built with (Debian's `mpiexec` is
# whichever MPI has the higher priority, Open MPI's when both are installed)
if [ -z "${MPIEXEC:-}" ]; then
  case $("$TRIDENT" --version 2>/dev/null | grep "mpi:") in
    *"Open MPI"*) MPIEXEC=mpiexec.openmpi ;;
    *MPICH*) MPIEXEC=mpiexec.mpich ;;
  esac
  command -v "${MPIEXEC:-none}" >/dev/null 2>&1 || MPIEXEC=mpiexec
fi
ranks=${RANKS:-$("$TRIDENT" check "$DECK" "$@" --ranks)} || exit $?
export OMP_WAIT_POLICY=passive
while :; do
  echo "jobs/mpirun.sh: $MPIEXEC -n $ranks $TRIDENT train $DECK $*"
  log=$(mktemp)
  "$MPIEXEC" -n "$ranks" "$TRIDENT" train "$DECK" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # MPICH 4.0's mpiexec may report 0 for ranks that exited 75 (pmodels/mpich#7057);
  # Open MPI's returns 1 when it was sent SIGTERM or SIGINT itself (the ranks
  # still saved and exited 75): the log says what happened
  grep -q "^trident: stopped by" "$log" && rc=75
  rm -f "$log"
  [ "$rc" = 75 ] && [ "${RESTART:-0}" = 1 ] && continue
  exit "$rc"
done
