#!/usr/bin/env bash
# head_bench.sh — the fused head (model.head: fused) against the
# materialised one in training on this machine: tokens/s, peak RSS and
# activation bytes on one rank with GPT-2's vocabulary (docs/benchmarks.md,
# "Fused head").
#
#   tests/bench/head_bench.sh [--build DIR] [--work DIR] [--steps N]
#                             [--rounds R] [--layers L] [--threads N]
#
# Deck: inputs/gpt2-124m.yaml (vocabulary 50,257, dim 768, 12 heads) with L
# layers (default 2: the head is then most of the work, where the two heads
# differ most; 12 is GPT-2 124M), micro-batch 4 at T 1024 (the issue's
# shape: 4,096 rows of logits), one micro-batch a step, fp32, one rank,
# OMP_NUM_THREADS=N (default 2), N steps (default 4), checkpoints and
# evaluation off, on the license texts prepared with GPT-2's tokenizer when
# it is installed, else bytes (the vocabulary stays 50,257 either way). The
# two heads run one after the other, R rounds (default 1). Steps 2..N are
# measured: tok/s is the median tokens_per_s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build work=/tmp/td_head_bench steps=4 rounds=1 layers=2 threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
bench_setup head_bench
echo "head_bench: $(nproc --all) cores, $threads threads, $layers layers, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
for r in $(seq 1 "$rounds"); do
  for h in materialized fused; do
    dir=$work/r${r}_$h
    rm -rf "$dir"
    "$trident" train "$src/inputs/gpt2-124m.yaml" --set "data.train=$corpus" --set data.val= \
      --set model.layers="$layers" --set parallel.micro_batch=4 --set parallel.zero=0 \
      --set training.global_batch=4 --set model.head=$h --set training.steps="$steps" \
      --set schedule.warmup=1 --set checkpoint.every=0 --set checkpoint.resume=never \
      --set eval.every=0 --set "run.out_dir=$dir" >"$dir.log" 2>&1 \
      || { echo "head_bench: $h failed:"; tail -5 "$dir.log"; exit 1; }
  done
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
mib = 2.0 ** 20
print("| round | materialized tok/s | fused tok/s | fused / materialized "
      "| peak RSS mat. → fused | activations mat. → fused | loss mat. / fused (last step) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
def load(path):
    steps = [x for x in map(json.loads, filter(str.strip, open(path))) if "tokens_per_s" in x]
    return statistics.median(x["tokens_per_s"] for x in steps[1:]), steps[-1]
for r in range(1, rounds + 1):
    m, ms = load(f"{work}/r{r}_materialized/metrics.jsonl")
    f, fs = load(f"{work}/r{r}_fused/metrics.jsonl")
    print(f"| {r} | {m:.0f} | {f:.0f} | {f / m:.2f}× "
          f"| {ms['mem_bytes'] / mib:.0f} → {fs['mem_bytes'] / mib:.0f} MiB "
          f"| {ms['act_bytes'] / mib:.0f} → {fs['act_bytes'] / mib:.0f} MiB "
          f"| {ms['loss']:.6f} / {fs['loss']:.6f} |")
PY
