#!/usr/bin/env bash
# attention_bench.sh — the fused attention (model.attention: fused) against
# the materialised one in training on this machine: tokens/s, peak RSS and
# activation bytes on one rank at T 256 … 8192 (docs/benchmarks.md, "Fused
# attention").
#
#   tests/bench/attention_bench.sh [--build DIR] [--work DIR] [--steps N]
#                                  [--rounds R] [--T "256 1024 2048 4096 8192"]
#                                  [--threads N]
#
# Deck: inputs/small.yaml (GPT-2 family, 6 layers, dim 384, 6 heads, vocab
# 256) at model.seq_len T with 8,192 tokens a step (global_batch 8192/T),
# fp32, one rank, OMP_NUM_THREADS=N (default 2), N steps (default 6),
# checkpoints and evaluation off, on the license texts. For each T the two
# kernels run one after the other, R rounds (default 2), so load from other
# work slows them alike. Steps 3..N are measured: tok/s is the median
# tokens_per_s, the ratio fused / materialised is taken in the same round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build work=/tmp/td_attention_bench steps=6 rounds=2 Ts="256 1024 2048 4096 8192"
threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --T) Ts=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
bench_setup attention_bench
echo "attention_bench: $(nproc --all) cores, $threads threads, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
for r in $(seq 1 "$rounds"); do
  for T in $Ts; do
    for a in materialized fused; do
      dir=$work/r${r}_T${T}_$a
      rm -rf "$dir"
      "$trident" train "$src/inputs/small.yaml" --set "data.train=$corpus" \
        --set model.seq_len="$T" --set training.global_batch=$((8192 / T)) \
        --set model.attention=$a --set training.steps="$steps" --set schedule.warmup=1 \
        --set checkpoint.every=0 --set checkpoint.resume=never --set eval.every=0 \
        --set "run.out_dir=$dir" >"$dir.log" 2>&1 \
        || { echo "attention_bench: T $T $a failed:"; tail -5 "$dir.log"; exit 1; }
    done
  done
done
/usr/bin/python3 - "$work" "$rounds" "$Ts" <<'EOF'
import json, statistics, sys
work, rounds, Ts = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3].split()]
mib = 2.0 ** 20
print("| round | T | materialized tok/s | fused tok/s | fused / materialized "
      "| peak RSS mat. → fused | activations mat. → fused |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
def load(path):
    steps = [x for x in map(json.loads, filter(str.strip, open(path))) if "tokens_per_s" in x]
    return statistics.median(x["tokens_per_s"] for x in steps[2:]), steps[-1]
for r in range(1, rounds + 1):
    for T in Ts:
        m, ms = load(f"{work}/r{r}_T{T}_materialized/metrics.jsonl")
        f, fs = load(f"{work}/r{r}_T{T}_fused/metrics.jsonl")
        print(f"| {r} | {T} | {m:.0f} | {f:.0f} | {f / m:.2f}× "
              f"| {ms['mem_bytes'] / mib:.0f} → {fs['mem_bytes'] / mib:.0f} MiB "
              f"| {ms['act_bytes'] / mib:.0f} → {fs['act_bytes'] / mib:.0f} MiB |")
EOF
