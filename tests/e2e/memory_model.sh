#!/usr/bin/env bash
# memory_model.sh TRIDENT WORKDIR — one memory model (issue 12, defects 2–3).
#
# `trident check --json` prints what every rank's model, ZeRO engine and
# pipeline would allocate, asked of the same code that allocates it. For each
# grid below this trains the tiny deck for 2 steps and demands that the
# metrics' param/grad/optim/work/act_bytes (the largest rank's, from what the
# run allocated) equal check's largest rank byte for byte.
#
# Then GPT-2's vocabulary (50257) at dim 64 with dp 2 at ZeRO-2 and ZeRO-3:
# the working buffers must stay within 3 × 4·V·C (the embedding's gathered
# copy, gradient and reduce-scatter share) + 16 × 4·P_block (one transformer
# block's parameters) — they were sized by the largest unit, the embedding,
# for every slot (153 and 252 MiB) — and check must again equal the run.
#
# Environment: MPIEXEC (default mpiexec).
set -euo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"

fail=0
# case NAME DP TP PP ZERO [--set ...] (deck: $deck, default the tiny one)
deck=tiny
case_() {
  local name=$1 dp=$2 tp=$3 pp=$4 zero=$5
  shift 5
  local np=$((dp * tp * pp * ${CP:-1})) dir=$work/$name
  local args=("$src/inputs/$deck.yaml" --set "data.train=$corpus" --set parallel.dp="$dp"
              --set parallel.tp="$tp" --set parallel.pp="$pp" --set parallel.zero="$zero"
              --set training.steps=2 --set schedule.warmup=1 --set checkpoint.every=0
              --set checkpoint.resume=never --set "run.out_dir=$dir" "$@")
  rm -rf "$dir" && mkdir -p "$dir" # a fresh run: resume: never refuses an old one
  if ! timeout -k 5 120 "$mpiexec" -n "$np" "$trident" check "${args[@]}" --json \
      >"$dir/check.json" 2>"$dir/check.err"; then
    echo "FAIL $name: trident check exited non-zero"; sed 's/^/  | /' "$dir/check.err"; fail=1; return
  fi
  if ! timeout -k 5 240 "$mpiexec" -n "$np" "$trident" train "${args[@]}" >"$dir/log" 2>&1; then
    echo "FAIL $name: trident train exited non-zero"; tail -5 "$dir/log" | sed 's/^/  | /'; fail=1
    return
  fi
  /usr/bin/python3 - "$name" "$dir/check.json" "$dir/metrics.jsonl" <<'EOF' || fail=1
import json, sys
name, check_path, metrics_path = sys.argv[1:]
check = json.load(open(check_path))
recs = [json.loads(l) for l in open(metrics_path) if l.strip()]
last = [r for r in recs if "param_bytes" in r][-1]
keys = ["param_bytes", "grad_bytes", "optim_bytes", "work_bytes", "act_bytes"]
if int(check["max"].get("ckpt_bytes", 0)) > 0:  # checkpoint staging (checkpoint.async)
    keys.append("ckpt_bytes")
bad = [k for k in keys if int(check["max"][k]) != int(last.get(k, -1))]
row = "  ".join(f"{k.split('_')[0]} {int(last[k]) / 2**20:.2f}" for k in keys)
if bad:
    print(f"FAIL {name}: check differs from the run in {bad}")
    for k in keys:
        print(f"     {k}: check {check['max'][k]}, run {last.get(k)}")
    sys.exit(1)
print(f"ok   {name}: check = run (MiB: {row})")
EOF
}

case_ dp1 1 1 1 0
case_ dp2_zero1 2 1 1 1
# asynchronous checkpoints: the staging buffer (12 bytes an owned parameter)
case_ dp2_zero1_async 2 1 1 1 --set checkpoint.async=true
case_ dp2_zero2 2 1 1 2
case_ dp2_zero3 2 1 1 3 --set parallel.micro_batch=2
case_ tp2 1 2 1 0
case_ pp2_1f1b 1 1 2 0 --set parallel.micro_batch=1
case_ pp2_gpipe_zero2 1 1 2 2 --set parallel.micro_batch=2 --set parallel.pp_schedule=gpipe
case_ dp2_pp2_zero3 2 1 2 3 --set parallel.micro_batch=1
# bf16: the working copy (param_bytes), bf16 gathers (work_bytes), bf16 activations
case_ bf16_dp1 1 1 1 0 --set training.precision=bf16
case_ bf16_dp2_zero3 2 1 1 3 --set parallel.micro_batch=2 --set training.precision=bf16
# activation recomputation: the slots keep block inputs, one block's set is shared
case_ recompute_dp1 1 1 1 0 --set training.recompute=blocks
case_ recompute_pp2_1f1b 1 1 2 0 --set parallel.micro_batch=1 --set training.recompute=blocks
# sequence parallelism: local rows of the residual stream, the gather scratch
case_ sp_tp2 1 2 1 0 --set parallel.sequence_parallel=true
case_ sp_tp2_pp2_zbh1_bf16 1 2 2 1 --set parallel.micro_batch=2 --set parallel.sequence_parallel=true \
  --set parallel.pp_schedule=zb-h1 --set training.precision=bf16
# context parallelism (CP=n: n times the ranks): a rank's rows of each
# sequence, the (T/cp, T) scores, the gathered keys and values
CP=2 case_ cp2 1 1 1 0 --set parallel.cp=2
CP=2 case_ cp2_tp2_sp_zero3 2 2 1 3 --set parallel.cp=2 --set parallel.sequence_parallel=true \
  --set parallel.micro_batch=2
# the LLaMA family (GQA, SwiGLU, untied head)
deck=llama-tiny
CP=4 case_ llama_cp4_recompute_attention 1 1 1 0 --set parallel.cp=4 \
  --set training.recompute=attention --set model.attention=materialized
case_ llama_dp1 1 1 1 0
case_ llama_tp2_pp2_zero1 1 2 2 1 --set parallel.micro_batch=2
case_ llama_dp2_zero3_bf16 2 1 1 3 --set parallel.micro_batch=2 --set training.precision=bf16
case_ llama_recompute_dp1 1 1 1 0 --set training.recompute=blocks
deck=tiny

# GPT-2's vocabulary at dim 64: the embedding dominates; V·C = 3216448, one
# block 12·C² + 13·C = 49984 parameters.
for zero in 2 3; do
  name=vocab50257_zero$zero
  case_ "$name" 2 1 1 "$zero" --set model.vocab_size=50257 --set model.dim=64 \
    --set model.heads=2 --set model.seq_len=32
  [ -s "$work/$name/check.json" ] || continue
  /usr/bin/python3 - "$name" "$work/$name/check.json" <<'EOF' || fail=1
import json, sys
name, path = sys.argv[1:]
V, C = 50257, 64
bound = 3 * 4 * V * C + 16 * 4 * (12 * C * C + 13 * C)
work = int(json.load(open(path))["max"]["work_bytes"])
ok = work <= bound
print(f"{'ok  ' if ok else 'FAIL'} {name}: working buffers {work / 2**20:.1f} MiB "
      f"<= 3·4·V·C + 16·4·P_block = {bound / 2**20:.1f} MiB")
sys.exit(0 if ok else 1)
EOF
done
exit $fail
