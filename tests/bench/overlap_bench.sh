#!/usr/bin/env bash
# tests/bench/overlap_bench.sh [TRIDENT] — ZeRO 1 and 2 with the updated
# parameters gathered unit by unit during the next forward
# (parallel.overlap_param_gather: true, the default) against all at once
# right after the optimizer (false), on this machine: inputs/small.yaml at
# dp 2 (2 ranks, one thread each), global batch 4, fp32 and bf16, 10 steps.
# Per configuration and mode: the median step_ms and comm_ms (time waiting
# in collectives, rank 0) over steps 2..9, median over rounds (alternating
# the modes), and the ratio on/off. Rounds: TD_BENCH_ROUNDS (default 3).
# On a CPU the gathers progress only while the rank polls MPI between
# layers (no progress thread: the core computes), so what overlaps is what
# MPICH moves inside those polls; on a GPU the gathers run on the
# communication stream beside the forward's kernels.
set -euo pipefail
cd "$(dirname "$0")/../.."
trident=$(realpath "${1:-build/trident}")
work=${TD_BENCH_DIR:-/tmp/trident-overlap-bench}
rounds=${TD_BENCH_ROUNDS:-3}
mpiexec=${MPIEXEC:-mpiexec}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 HWLOC_PLUGINS_BLACKLIST=hwloc_pci
/usr/bin/python3 - "$work/tokens.bin" <<'PY'
import sys
import numpy as np
np.random.default_rng(0).integers(0, 256, 400000, dtype=np.uint16).tofile(sys.argv[1])
PY
stat() { # metrics.jsonl → "step_ms comm_ms" medians over steps 2..9
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
rows = [r for r in rows if 2 <= r.get("step", 0) <= 9 and "step_ms" in r]
c = [b["comm_ms"] - a["comm_ms"] for a, b in zip(rows, rows[1:])] if rows and "comm_ms" in rows[0] else [0]
print("%.1f %.1f" % (statistics.median(r["step_ms"] for r in rows), statistics.median(c)))
PY
}
for round in $(seq 1 "$rounds"); do
  for zero in 1 2; do
    for prec in fp32 bf16; do
      for ov in true false; do
        name=z${zero}_${prec}_$ov
        out=$work/$name
        rm -rf "$out"
        $mpiexec -n 2 "$trident" train inputs/small.yaml --set "data.train=$work/tokens.bin" \
          --set parallel.dp=2 --set parallel.zero=$zero --set training.global_batch=4 \
          --set training.steps=10 --set schedule.warmup=2 --set training.precision=$prec \
          --set eval.batches=1 \
          --set logging.every=1 --set checkpoint.every=0 --set checkpoint.resume=never \
          --set parallel.overlap_param_gather=$ov --set "run.out_dir=$out" >"$out.log" 2>&1
        stat "$out/metrics.jsonl" >>"$work/$name.tsv"
      done
    done
  done
done
med() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "inputs/small.yaml, dp 2, global batch 4, $rounds rounds, $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-5s %-5s | %14s %14s %8s | %14s %14s\n" zero prec "step ms (on)" "step ms (off)" "on/off" "comm ms (on)" "comm ms (off)"
for zero in 1 2; do
  for prec in fp32 bf16; do
    s1=$(cut -d' ' -f1 <"$work/z${zero}_${prec}_true.tsv" | med)
    s0=$(cut -d' ' -f1 <"$work/z${zero}_${prec}_false.tsv" | med)
    c1=$(cut -d' ' -f2 <"$work/z${zero}_${prec}_true.tsv" | med)
    c0=$(cut -d' ' -f2 <"$work/z${zero}_${prec}_false.tsv" | med)
    printf "%-5s %-5s | %14s %14s %8.3f | %14s %14s\n" $zero $prec "$s1" "$s0" \
      "$(echo "$s1 / $s0" | bc -l)" "$c1" "$c0"
  done
done
