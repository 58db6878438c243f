#!/usr/bin/env bash
# bench_124m.sh TRIDENT OUTDIR — the device check's throughput row: GPT-2 124M,
# bf16, T 1024, micro-batch 16 (TD_BENCH_BATCH) on one GPU, random tokens,
# 3 warm-up + 10 timed steps, trident against PyTorch (eager and
# torch.compile, tests/device/torch_gpt2_cuda.py) in the same run. Prints a
# table: tok/s (median timed step), MFU = (6·N + 6·L·C·T) FLOPs per token ×
# tok/s over 989 TFLOP/s (H200 dense bf16), peak device memory (nvidia-smi,
# sampled every 200 ms, the whole GPU; PyTorch's own allocator peak beside it).
set -euo pipefail
trident=$1 out=$2
B=${TD_BENCH_BATCH:-16} T=1024 L=12 C=768 V=50257
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${TD_PYTHON:-python3}
mkdir -p "$out"
data=$out/random50257.bin
[ -f "$data" ] || "$py" -c "import numpy as np, sys; np.random.default_rng(1).integers(0, $V, size=1 << 22, dtype=np.uint16).tofile(sys.argv[1])" "$data"

# peak GPU memory while CMD runs: nvidia-smi sampled in the background
peak_of() {
  local f=$out/smi.$$ pid rc
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$f" 2>/dev/null &
  pid=$!
  "$@"
  rc=$?
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  peak_mib=$(sort -n "$f" | tail -1)
  rm -f "$f"
  return $rc
}

rm -rf "$out/trident"
peak_of "$trident" train "$root/inputs/gpt2-124m.yaml" --set run.device=cuda \
  --set training.precision=bf16 --set data.train="$data" --set data.val="$data" \
  --set model.seq_len=$T --set parallel.micro_batch=$B --set training.global_batch=$B \
  --set training.steps=13 --set schedule.warmup=1 --set eval.every=0 \
  --set checkpoint.every=0 --set checkpoint.resume=never --set logging.every=1 \
  --set run.out_dir="$out/trident" >"$out/trident.log" 2>&1 ||
  { echo "bench: trident failed:"; tail -20 "$out/trident.log"; exit 1; }
trident_peak=$peak_mib
peak_of "$py" "$root/tests/device/torch_gpt2_cuda.py" --batch $B --seq-len $T >"$out/torch_eager.json" 2>"$out/torch_eager.log" ||
  { echo "bench: torch eager failed:"; tail -20 "$out/torch_eager.log"; exit 1; }
eager_peak=$peak_mib
peak_of "$py" "$root/tests/device/torch_gpt2_cuda.py" --batch $B --seq-len $T --compile >"$out/torch_compile.json" 2>"$out/torch_compile.log" ||
  { echo "bench: torch.compile failed:"; tail -20 "$out/torch_compile.log"; }
compile_peak=${peak_mib:-0}

"$py" - "$out" "$B" "$T" "$L" "$C" "$trident_peak" "$eager_peak" "$compile_peak" <<'PYEOF'
import json, os, statistics, sys
out, B, T, L, C = sys.argv[1], *map(int, sys.argv[2:6])
peaks = dict(zip(["trident", "torch-eager", "torch-compile"], sys.argv[6:9]))
rows = [json.loads(l) for l in open(os.path.join(out, "trident", "metrics.jsonl")) if l.strip()]
timed = [r["step_ms"] for r in rows if r["step"] > 3]
med = statistics.median(timed)
res = [{"who": "trident", "tokens_per_s": B * T / med * 1e3, "step_ms_median": med,
        "step_ms_min": min(timed), "peak_device_bytes": None}]
for name in ("torch_eager", "torch_compile"):
    p = os.path.join(out, name + ".json")
    if os.path.exists(p) and os.path.getsize(p):
        res.append(json.loads(open(p).read().strip().splitlines()[-1]))
N = next((r["params"] for r in res if "params" in r), 124439808)
flops_tok = 6 * N + 6 * L * C * T
base = res[1]["tokens_per_s"] if len(res) > 1 else None
print(f"GPT-2 124M bf16, T {T}, batch {B}, params {N}: MFU over 989 TFLOP/s")
print("| who | tok/s | step ms (median/min) | MFU | vs torch eager | GPU memory MiB (nvidia-smi) | torch allocator MiB |")
print("|---|---:|---:|---:|---:|---:|---:|")
for r in res:
    mfu = r["tokens_per_s"] * flops_tok / 989e12
    ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
    alloc = f"{r['peak_device_bytes'] / 2**20:.0f}" if r.get("peak_device_bytes") else "-"
    print(f"| {r['who']} | {r['tokens_per_s']:.0f} | {r['step_ms_median']:.1f}/{r['step_ms_min']:.1f} "
          f"| {100 * mfu:.1f}% | {ratio} | {peaks.get(r['who'], '-')} | {alloc} |")
PYEOF
