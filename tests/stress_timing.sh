#!/usr/bin/env bash
# tests/stress_timing.sh [--repeat N] [--repeat-cluster M] [--together] [BUILD...] — the
# timing-sensitive tests (CTest label `timing`: signals, the watchdog,
# injected faults, a crash in a save, a file changed under a run, the Slurm
# and multi-host clusters) run again and again while `stress` keeps every
# core busy, in each build folder given (default: build, and build-ompi when
# it exists). Each test must pass N times in a row (default 20; the cluster
# and Slurm tests M times, default 5); the first failure stops that test's
# repetitions (ctest --repeat until-fail). The tests of a build run side by
# side (one CTest slot per core and one more, as tests/run.sh), the builds one
# after another (--together: at the same time, a heavier load). Run it before a change to any of these tests, or to what
# they time, lands (docs/development.md, "Timing-sensitive tests").
#
# The load: `stress --cpu <cores>` (Debian's stress, installed when missing),
# started here, its PID recorded, and stopped on exit, also on failure.
# Prints each test's passes and time, and exits 1 when any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
N=20 M=5 together=0
builds=()
while [ $# -gt 0 ]; do
  case $1 in
    --repeat) N=$2; shift 2 ;;
    --repeat-cluster) M=$2; shift 2 ;;
    --together) together=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) builds+=("$1"); shift ;;
  esac
done
if [ ${#builds[@]} -eq 0 ]; then
  builds=(build)
  [ -f build-ompi/CTestTestfile.cmake ] && builds+=(build-ompi)
fi
if ! command -v stress >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq stress >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq stress >/dev/null 2>&1; }
  fi
  command -v stress >/dev/null 2>&1 || { echo "stress_timing: needs Debian's stress (apt-get install stress)"; exit 2; }
fi
export OMP_WAIT_POLICY=passive HWLOC_PLUGINS_BLACKLIST=hwloc_pci
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
stress --cpu "$cores" >/dev/null 2>&1 &
load=$!
trap 'kill "$load" 2>/dev/null; pkill -P "$load" 2>/dev/null; wait "$load" 2>/dev/null' EXIT
echo "stress_timing: stress --cpu $cores (pid $load) keeps every core busy; $N in a row each, cluster and Slurm $M"
status=0 log=$(mktemp)
# one_build B: its timing tests under the load; 0 when all passed
one_build() {
  local b=$1 st=0 tag start fastpid="" rc_fast=0 rc_slow=0 mine slow fast
  tag=${b//\//_}
  [ -f "$b/CTestTestfile.cmake" ] || { echo "stress_timing: $b is not a build folder"; return 1; }
  start=$SECONDS
  # names of the timing tests (an Open MPI build builds and runs its subset
  # only: those that also carry the label openmpi)
  names() { ctest --test-dir "$b" -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p' | sort; }
  mine=$(names -L '^timing$')
  if "$b/trident" --version 2>/dev/null | grep -q "Open MPI"; then
    mine=$(comm -12 <(echo "$mine") <(names -L '^openmpi$'))
  fi
  slow=$(comm -12 <(echo "$mine") <(names -L '^(cluster|slurm)$'))
  fast=$(comm -23 <(echo "$mine") <(echo "$slow"))
  re() { echo "^($(echo "$1" | paste -sd'|'))\$"; }
  echo "stress_timing: $b: $(echo "$fast" | wc -w) tests $N times, $(echo "$slow" | wc -w) $M times"
  # the cluster and Slurm tests M times, beside the others N times
  if [ -n "$fast" ]; then
    ctest --test-dir "$b" -R "$(re "$fast")" --repeat until-fail:"$N" \
      -j"$((cores + 1))" --output-on-failure --timeout 1200 >"$log.$tag.fast" 2>&1 &
    fastpid=$!
  fi
  if [ -n "$slow" ]; then
    ctest --test-dir "$b" -R "$(re "$slow")" --repeat until-fail:"$M" -j"$cores" \
      --output-on-failure --timeout 1200 >"$log.$tag.slow" 2>&1 || rc_slow=$?
  fi
  : >>"$log.$tag.fast"; : >>"$log.$tag.slow"
  [ -n "$fast" ] && { wait "$fastpid" || rc_fast=$?; }
  for part in fast slow; do
    grep -E "Test +#[0-9]+:" "$log.$tag.$part" | sed "s|^ *[0-9]*/[0-9]* *|   $b: |"
  done
  if [ $rc_fast != 0 ] || [ $rc_slow != 0 ]; then
    st=1
    echo "stress_timing: $b: FAILED; the failing output:"
    grep -h -B2 -A40 "\*\*\*Failed\|\*\*\*Timeout" "$log.$tag.fast" "$log.$tag.slow" | head -120
  fi
  echo "stress_timing: $b: $((SECONDS - start)) s"
  return $st
}
if [ "$together" = 1 ]; then
  pids=()
  for b in "${builds[@]}"; do one_build "$b" >"$log.out.${b//\//_}" 2>&1 & pids+=($!); done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "$log.out.${builds[$i]//\//_}"
  done
else
  for b in "${builds[@]}"; do one_build "$b" || status=1; done
fi
rm -f "$log"*
[ $status = 0 ] && echo "stress_timing: every timing test passed its repetitions under load" ||
  echo "stress_timing: FAILED"
exit $status
