#!/usr/bin/env bash
# plan_bench.sh — `trident plan` against reality on this machine
# (docs/benchmarks.md, "Choosing a grid: predicted vs measured"): train 12
# configurations of inputs/small.yaml at 2 ranks, 20 steps each, in 3 rounds
# with a calibration each, and predict them; prints the table
# (tests/bench/plan_bench.py).
#
#   tests/bench/plan_bench.sh [--build DIR] [--work DIR] [--steps N]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build work=/tmp/plan_bench steps=20
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;; --work) work=$2; shift 2 ;; --steps) steps=$2; shift 2 ;;
    *) echo "plan_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
exec /usr/bin/python3 "$root/tests/bench/plan_bench.py" "$build/trident" \
  "${MPIEXEC:-/usr/bin/mpiexec.mpich}" "$work" --steps "$steps"
