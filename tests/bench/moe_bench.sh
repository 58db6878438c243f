#!/usr/bin/env bash
# moe_bench.sh — a mixture of experts (model.moe) against the dense model of
# the same active size in training on this machine: tokens/s, peak RSS and
# activation bytes on one rank (docs/benchmarks.md, "Mixture of experts").
#
#   tests/bench/moe_bench.sh [--build DIR] [--work DIR] [--steps N]
#                            [--rounds R] [--threads N] [--ep]
#
# Deck: inputs/llama-small.yaml (6 blocks, dim 384, SwiGLU 1024, T 256, 4
# sequences a step: 1,024 tokens) against the same with every block sparse:
# 8 SwiGLU experts of width 512, top 2 — the same MLP weights a token uses
# (2·3·384·512 = 3·384·1024) — dropless and with capacity_factor 1.25. fp32,
# one rank, OMP_NUM_THREADS=N (default 2), N steps (default 8), checkpoints
# and evaluation off, on the license texts (bytes). R rounds (default 1),
# the three one after the other. Steps 2..N are measured: tok/s is the
# median tokens_per_s.
# --ep: expert parallelism instead (docs/benchmarks.md, "Expert
# parallelism"): the sparse model (8 experts, top 2, dropless) on 4 ranks of
# one thread each, dp 4, ZeRO-1, 8 sequences a step, at ep 1, 2 and 4: tok/s,
# the parameter, gradient and optimizer bytes and peak RSS of rank 0, and
# the all-to-all's share of the step (moe_alltoall_ms over the step time,
# steps 2..N).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build work=/tmp/td_moe_bench steps=8 rounds=1 threads=2 ep_mode=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ep) ep_mode=1; shift ;;
    *) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
bench_setup moe_bench
if [ "$ep_mode" = 1 ]; then what="4 ranks of 1 thread"; else what="$threads threads"; fi
echo "moe_bench: $(nproc --all) cores, $what, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F)"
moe=(--set model.moe.experts=8 --set model.moe.top_k=2 --set model.moe.ffn_dim=512)
if [ "$ep_mode" = 1 ]; then
  mpiexec=${MPIEXEC:-mpiexec}
  for r in $(seq 1 "$rounds"); do
    for ep in 1 2 4; do
      dir=$work/r${r}_ep$ep
      rm -rf "$dir"
      OMP_NUM_THREADS=1 "$mpiexec" -n 4 "$trident" train "$src/inputs/llama-small.yaml" \
        --set "data.train=$corpus" --set data.val= --set training.steps="$steps" \
        --set schedule.warmup=1 --set checkpoint.every=0 --set checkpoint.resume=never \
        --set eval.every=0 --set "run.out_dir=$dir" --set parallel.dp=4 --set parallel.zero=1 \
        --set training.global_batch=8 --set parallel.ep=$ep --set logging.every=1 \
        "${moe[@]}" >"$dir.log" 2>&1 || { echo "moe_bench: ep $ep failed:"; tail -5 "$dir.log"; exit 1; }
    done
  done
  /usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
mib = 2.0 ** 20
print("| round | ep | tok/s | / ep 1 | param + grad + optim (rank 0) | activations | peak RSS | all-to-all share |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in range(1, rounds + 1):
    base = None
    for ep in (1, 2, 4):
        steps = [x for x in map(json.loads, filter(str.strip, open(f"{work}/r{r}_ep{ep}/metrics.jsonl")))
                 if "tokens_per_s" in x]
        tps = statistics.median(x["tokens_per_s"] for x in steps[1:])
        base = base or tps
        last = steps[-1]
        state = (last["param_bytes"] + last["grad_bytes"] + last["optim_bytes"]) / mib
        share = "—"
        if ep > 1:
            a2a = last["moe_alltoall_ms"] - steps[0]["moe_alltoall_ms"]
            tokens = 8 * 256 * (len(steps) - 1)
            wall_ms = sum(8 * 256 / x["tokens_per_s"] for x in steps[1:]) * 1e3
            share = f"{a2a / wall_ms:.1%}"
        print(f"| {r} | {ep} | {tps:,.0f} | {tps / base:.2f}× | {state:.1f} MiB | "
              f"{last['act_bytes'] / mib:.1f} MiB | {last['mem_bytes'] / mib:.0f} MiB | {share} |")
PY
  exit 0
fi
for r in $(seq 1 "$rounds"); do
  for v in dense moe moe_cap; do
    dir=$work/r${r}_$v
    rm -rf "$dir"
    args=()
    [ $v != dense ] && args=("${moe[@]}")
    [ $v = moe_cap ] && args+=(--set model.moe.capacity_factor=1.25)
    "$trident" train "$src/inputs/llama-small.yaml" --set "data.train=$corpus" --set data.val= \
      --set training.steps="$steps" --set schedule.warmup=1 --set checkpoint.every=0 \
      --set checkpoint.resume=never --set eval.every=0 --set "run.out_dir=$dir" \
      ${args[@]+"${args[@]}"} >"$dir.log" 2>&1 \
      || { echo "moe_bench: $v failed:"; tail -5 "$dir.log"; exit 1; }
    "$trident" check "$src/inputs/llama-small.yaml" --set "data.train=$corpus" \
      ${args[@]+"${args[@]}"} 2>/dev/null | grep -E "^parameters|active parameters" >"$dir.params" || true
  done
done
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
mib = 2.0 ** 20
def load(v, r):
    steps = [x for x in map(json.loads, filter(str.strip, open(f"{work}/r{r}_{v}/metrics.jsonl")))
             if "tokens_per_s" in x]
    return statistics.median(x["tokens_per_s"] for x in steps[1:]), steps[-1]
def params(v, r):
    t = open(f"{work}/r{r}_{v}.params").read()
    total = int(re.search(r"parameters: (\d+)", t).group(1))
    m = re.search(r"active parameters (\d+)", t)
    return total, int(m.group(1)) if m else total
print("| round | model | parameters (active) | tok/s | / dense | peak RSS | activations | dropped |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in range(1, rounds + 1):
    base = load("dense", r)[0]
    for v, name in (("dense", "dense"), ("moe", "8 experts, top 2"),
                    ("moe_cap", "8 experts, top 2, capacity 1.25")):
        tps, last = load(v, r)
        total, active = params(v, r)
        print(f"| {r} | {name} | {total / 1e6:.2f}M ({active / 1e6:.2f}M) | {tps:,.0f} | "
              f"{tps / base:.2f}× | {last['mem_bytes'] / mib:.0f} MiB | "
              f"{last['act_bytes'] / mib:.0f} MiB | {last.get('moe_dropped', 0.0):.3f} |")
PY
