#!/usr/bin/env bash
# context_parallel.sh — context parallelism (parallel.cp) at T = 2048 on this
# machine: tokens/s and memory per rank at cp 1, 2 and 4 (docs/benchmarks.md,
# "Context parallelism").
#
#   tests/bench/context_parallel.sh [--build DIR] [--work DIR] [--steps N]
#                                   [--rounds R] [--cp "1 2 4"]
#
# Model: GPT-2 family, 2 layers, dim 128, 4 heads, vocab 256, T 2048, one
# sequence a step, fp32, ZeRO 0: mpiexec -n cp trident train inputs/tiny.yaml
# with those --set, OMP_NUM_THREADS=1 (one thread per rank), N steps
# (default 6), checkpoints and evaluation off, on the license texts. The cp
# values run in turn, R rounds (default 2), so load from other work slows
# them alike. Steps 3..N are measured: tok/s is the median tokens_per_s (its
# ratio to cp 1's in the same round beside it); memory per rank is the
# largest rank's peak RSS (mem_bytes) and activation bytes (act_bytes, what
# `trident check` prints); comm is the bytes one rank sends a step
# (comm_bytes difference between steps). cp ranks beyond the machine's cores
# share them: the tokens/s of such rows measure the oversubscribed machine,
# not context parallelism's speed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build work=/tmp/td_cp_bench steps=6 rounds=2 cps="1 2 4"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cp) cps=$2; shift 2 ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
trident=$build/trident
mpiexec=${MPIEXEC:-mpiexec}
export OMP_NUM_THREADS=1 HWLOC_PLUGINS_BLACKLIST=hwloc_pci
[ -x "$trident" ] || { echo "context_parallel: no $trident (build first)" >&2; exit 2; }
mkdir -p "$work"
corpus=$work/corpus.h5
[ -f "$corpus" ] || "$trident" prepare --out "$corpus" --val-fraction 0.1 /usr/share/common-licenses >/dev/null
echo "context_parallel: $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
for r in $(seq 1 "$rounds"); do
  for cp in $cps; do
    dir=$work/r${r}_cp$cp
    rm -rf "$dir"
    "$mpiexec" -n "$cp" "$trident" train "$src/inputs/tiny.yaml" --set "data.train=$corpus" \
      --set model.seq_len=2048 --set model.layers=2 --set model.dim=128 --set model.heads=4 \
      --set parallel.cp="$cp" --set training.global_batch=1 --set training.steps="$steps" \
      --set schedule.warmup=1 --set checkpoint.every=0 --set checkpoint.resume=never \
      --set eval.every=0 --set "run.out_dir=$dir" >"$dir.log" 2>&1 \
      || { echo "context_parallel: cp $cp failed:"; tail -5 "$dir.log"; exit 1; }
  done
done
/usr/bin/python3 - "$work" "$rounds" "$cps" <<'EOF'
import json, statistics, sys
work, rounds, cps = sys.argv[1], int(sys.argv[2]), [int(c) for c in sys.argv[3].split()]
mib = 2.0 ** 20
print("| round | cp | tokens/s (median) | vs cp 1 | peak RSS per rank | activations per rank "
      "| sent per step per rank |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in range(1, rounds + 1):
    base = None
    for cp in cps:
        path = f"{work}/r{r}_cp{cp}/metrics.jsonl"
        steps = [x for x in map(json.loads, filter(str.strip, open(path))) if "tokens_per_s" in x]
        tps = statistics.median(x["tokens_per_s"] for x in steps[2:])
        if cp == 1:
            base = tps
        # comm_bytes is cumulative: steps 3..N over their count
        sent = (steps[-1]["comm_bytes"] - steps[1]["comm_bytes"]) / (len(steps) - 2)
        ratio = f"{tps / base:.2f}×" if base else "—"
        print(f"| {r} | {cp} | {tps:.0f} | {ratio} | {steps[-1]['mem_bytes'] / mib:.1f} MiB "
              f"| {steps[-1]['act_bytes'] / mib:.1f} MiB | {sent / mib:.2f} MiB |")
EOF
