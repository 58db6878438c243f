#!/usr/bin/env bash
# bench_offload.sh TRIDENT OUTDIR — the device check's offload row
# (optimizer.offload: cpu, docs/gpus.md "Optimizer offload") on one GPU:
#   1. GPT-2 124M bf16, T 1024, micro-batch 8 (TD_BENCH_BATCH), random
#      tokens, 2 warm-up + 6 timed steps, with and without offload: tok/s
#      (median timed step), device_mem_bytes and host_optim_bytes from the
#      metrics;
#   2. the largest model of a ladder that trains 2 steps on the one GPU,
#      each way (bf16, ZeRO 0, micro-batch 1, T 1024, training.recompute:
#      blocks): GPT-2 124M/355M/774M/1.5B shapes and LLaMA 1B/3B/8B/13B
#      shapes; `trident check --json` first skips the sizes whose device
#      total is over the GPU's memory or whose host bytes (offload) are over
#      the machine's MemAvailable, then the largest remaining one is trained,
#      and the next smaller if that fails.
# Prints one table. Every number is measured by this run; nothing is assumed.
set -uo pipefail
trident=$1 out=$2
B=${TD_BENCH_BATCH:-8} T=1024
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${TD_PYTHON:-python3}
mkdir -p "$out"
data=$out/random50257.bin
[ -f "$data" ] || "$py" -c "import numpy as np, sys; np.random.default_rng(1).integers(0, 50257, size=1 << 22, dtype=np.uint16).tofile(sys.argv[1])" "$data"
common=(--set run.device=cuda --set training.precision=bf16 --set data.train="$data"
        --set data.val="$data" --set model.vocab_size=50257 --set eval.every=0
        --set checkpoint.every=0 --set checkpoint.resume=never --set logging.every=1
        --set schedule.warmup=1)

# 1. throughput and memory of GPT-2 124M, each way
for off in none cpu; do
  rm -rf "$out/t_$off"
  "$trident" train "$root/inputs/gpt2-124m.yaml" "${common[@]}" --set model.seq_len=$T \
    --set parallel.micro_batch="$B" --set training.global_batch="$B" --set training.steps=8 \
    --set optimizer.offload=$off --set run.out_dir="$out/t_$off" >"$out/t_$off.log" 2>&1 ||
    { echo "FAIL bench_offload: GPT-2 124M offload $off:"; tail -20 "$out/t_$off.log"; exit 1; }
done

# 2. the ladder: name arch layers dim heads kv_heads ffn_dim
ladder=(
  "gpt2-124M gpt2 12 768 12 0 0" "gpt2-355M gpt2 24 1024 16 0 0" "gpt2-774M gpt2 36 1280 20 0 0"
  "gpt2-1.5B gpt2 48 1600 25 0 0"
  "llama-1B llama 16 2048 32 8 8192" "llama-3B llama 28 3072 24 8 8192"
  "llama-8B llama 32 4096 32 8 14336" "llama-13B llama 40 5120 40 40 13824"
)
gpu_bytes=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
gpu_bytes=$((gpu_bytes * 1024 * 1024))
host_bytes=$(awk '/MemAvailable/ {print $2 * 1024}' /proc/meminfo)
shape_args() { # NAME ARCH L C H KV F -> the --set arguments
  local a=(--set model.arch="$2" --set model.layers="$3" --set model.dim="$4" --set model.heads="$5"
           --set "model.seq_len=$T" --set parallel.micro_batch=1 --set training.global_batch=1
           --set training.recompute=blocks --set training.steps=2)
  [ "$2" = llama ] && a+=(--set model.kv_heads="$6" --set model.ffn_dim="$7")
  printf '%s\n' "${a[@]}"
}
: >"$out/fits.txt"
for off in none cpu; do
  fits=()
  for entry in "${ladder[@]}"; do
    # shellcheck disable=SC2086
    set -- $entry
    mapfile -t sa < <(shape_args "$@")
    deck=$root/inputs/gpt2-124m.yaml
    "$trident" check "$deck" --json "${common[@]}" "${sa[@]}" --set optimizer.offload=$off \
      >"$out/check_$1_$off.json" 2>/dev/null || continue
    read -r dev host < <("$py" -c 'import json,sys; m=json.load(open(sys.argv[1]))["max"]; print(m["total_bytes"], m["host_bytes"])' "$out/check_$1_$off.json")
    # 1 GiB left for the CUDA context, cuBLASLt and the attention scratch
    [ "$dev" -lt $((gpu_bytes - (1 << 30))) ] && [ "$host" -lt "$host_bytes" ] && fits+=("$entry")
  done
  best="none"
  for ((i = ${#fits[@]} - 1; i >= 0; i--)); do
    # shellcheck disable=SC2086
    set -- ${fits[$i]}
    mapfile -t sa < <(shape_args "$@")
    rm -rf "$out/f_$1_$off"
    if timeout 600 "$trident" train "$root/inputs/gpt2-124m.yaml" "${common[@]}" "${sa[@]}" \
         --set optimizer.offload=$off --set run.out_dir="$out/f_$1_$off" >"$out/f_$1_$off.log" 2>&1; then
      best=$1
      break
    fi
  done
  echo "$off $best" >>"$out/fits.txt"
done

"$py" - "$out" "$B" "$T" <<'PYEOF'
import json, os, statistics, sys
out, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fits = dict(l.split() for l in open(os.path.join(out, "fits.txt")) if l.strip())
print(f"optimizer offload, GPT-2 124M bf16, T {T}, batch {B}, one GPU; largest model that trains each way")
print("| offload | tok/s | step ms (median) | device peak MiB | host optimizer MiB | largest that fits |")
print("|---|---:|---:|---:|---:|---|")
for off in ("none", "cpu"):
    rows = [json.loads(l) for l in open(os.path.join(out, f"t_{off}", "metrics.jsonl")) if l.strip()]
    med = statistics.median(r["step_ms"] for r in rows if r["step"] > 2)
    dev = max(r.get("device_mem_bytes", 0) for r in rows) / 2**20
    host = max(r.get("host_optim_bytes", 0) for r in rows) / 2**20
    print(f"| {off} | {B * T / med * 1e3:.0f} | {med:.1f} | {dev:.0f} | {host:.0f} | {fits.get(off, '?')} |")
PYEOF
