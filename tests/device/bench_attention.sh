#!/usr/bin/env bash
# bench_attention.sh TRIDENT OUTDIR — the device check's attention rows: the
# fused attention (model.attention: fused) against the materialised one on
# one GPU, bf16, 16,384 tokens a step, 2 warm-up + 4 timed steps each, random
# tokens: GPT-2 124M (inputs/gpt2-124m.yaml) at T 1024, 4096 and 8192 and
# the 1.2B LLaMA of inputs/llama-1b-3d.yaml (one GPU: dp = tp = pp = 1) at
# T 1024 and 4096. Prints a table: tok/s (median timed step), MFU =
# (6·N + 6·L·C·T) FLOPs per token × tok/s over 989 TFLOP/s (H200 dense
# bf16), device memory (device_mem_bytes of the metrics), fused /
# materialised. A run that fails (out of memory: the materialised scores at
# T 8192) is a row saying so, not a failure of the check.
set -uo pipefail
trident=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${TD_PYTHON:-python3}
mkdir -p "$out"
data=$out/random50257.bin
[ -f "$data" ] || "$py" -c "import numpy as np, sys; np.random.default_rng(1).integers(0, 50257, size=1 << 22, dtype=np.uint16).tofile(sys.argv[1])" "$data"
rows=()
run() { # run NAME DECK T [--set ...]
  local name=$1 deck=$2 T=$3
  shift 3
  for a in materialized fused; do
    local dir=$out/${name}_T${T}_$a
    local sets=(--set run.device=cuda --set training.precision=bf16
      --set data.train="$data" --set data.val="$data" --set model.seq_len="$T"
      --set parallel.dp=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.zero=0
      --set parallel.micro_batch=$((16384 / T)) --set training.global_batch=$((16384 / T))
      --set model.attention=$a --set training.steps=6 --set schedule.warmup=1
      --set eval.every=0 --set checkpoint.every=0 --set checkpoint.resume=never
      --set logging.every=1 --set run.out_dir="$dir" "$@")
    rm -rf "$dir"
    "$trident" check "$deck" "${sets[@]}" --json >"$dir.check.json" 2>/dev/null
    "$trident" train "$deck" "${sets[@]}" >"$dir.log" 2>&1 ||
      echo "bench_attention: $name T $T $a failed: $(grep -m1 'error' "$dir.log")" >"$dir.failed"
  done
  rows+=("$name $T")
}
run gpt2-124m "$root/inputs/gpt2-124m.yaml" 1024
run gpt2-124m "$root/inputs/gpt2-124m.yaml" 4096
run gpt2-124m "$root/inputs/gpt2-124m.yaml" 8192
run llama-1b "$root/inputs/llama-1b-3d.yaml" 1024 --set model.vocab_size=50257
run llama-1b "$root/inputs/llama-1b-3d.yaml" 4096 --set model.vocab_size=50257
"$py" - "$out" "${rows[@]}" <<'PYEOF'
import json, os, statistics, sys
out = sys.argv[1]
print("| model | T | attention | tok/s | MFU | device memory MiB | fused / materialised |")
print("|---|---:|---|---:|---:|---:|---:|")
for row in sys.argv[2:]:
    name, T = row.split()
    tps = {}
    for a in ("materialized", "fused"):
        d = os.path.join(out, f"{name}_T{T}_{a}")
        if os.path.exists(d + ".failed"):
            print(f"| {name} | {T} | {a} | {open(d + '.failed').read().strip()} | | | |")
            continue
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
        steps = [r for r in recs if "tokens_per_s" in r]
        tps[a] = statistics.median(r["tokens_per_s"] for r in steps[2:])
        try:
            N = json.load(open(d + ".check.json"))["ranks"][0]["params"]
        except Exception:
            N = 0
        L, C = (12, 768) if name.startswith("gpt2") else (16, 2048)
        mfu = tps[a] * (6 * N + 6 * L * C * int(T)) / 989e12 if N else 0
        mem = steps[-1].get("device_mem_bytes", 0) / 2**20
        ratio = f"{tps['fused'] / tps['materialized']:.2f}x" if a == "fused" and "materialized" in tps else ""
        print(f"| {name} | {T} | {a} | {tps[a]:.0f} | {100 * mfu:.1f}% | {mem:.0f} | {ratio} |")
PYEOF
