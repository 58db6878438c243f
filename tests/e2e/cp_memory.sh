#!/usr/bin/env bash
# cp_memory.sh TRIDENT WORKDIR — context parallelism's memory at T = 4096.
#
# A small GPT-2 (2 layers, dim 64, 4 heads) on sequences of 4096 tokens, four
# sequences a step, with the materialized attention: the attention scores
# (heads, T, T) dominate, as they do for long sequences without the fused
# kernels. At cp 1 (one rank) and cp 4 (four ranks):
#   - `trident check --json`: the largest rank's activation bytes; cp 4 must
#     hold at most 0.35 of cp 1's (each rank keeps T/cp rows of every
#     activation and (heads, T/cp, T) scores, plus the gathered keys and
#     values);
#   - two training steps: the measured peak RSS (metrics mem_bytes, the
#     largest rank) must agree with check's total within 10%, and the run's
#     act_bytes must equal check's.
# Prints the table (MiB) it checks.
#
# Environment: MPIEXEC (default mpiexec).
set -euo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"

fail=0
for cp in 1 4; do
  dir=$work/cp$cp
  rm -rf "$dir" && mkdir -p "$dir" # a fresh run: resume: never refuses an old one
  args=("$src/inputs/tiny.yaml" --set "data.train=$corpus" --set model.seq_len=4096
        --set model.layers=2 --set model.dim=64 --set model.heads=4 --set parallel.cp=$cp
        --set model.attention=materialized
        --set training.global_batch=4 --set training.steps=2 --set schedule.warmup=1
        --set checkpoint.every=0 --set checkpoint.resume=never --set eval.every=0
        --set "run.out_dir=$dir")
  if ! timeout -k 5 120 "$mpiexec" -n "$cp" "$trident" check "${args[@]}" --json \
      >"$dir/check.json" 2>"$dir/check.err"; then
    echo "FAIL cp $cp: trident check exited non-zero"; sed 's/^/  | /' "$dir/check.err"; exit 1
  fi
  if ! timeout -k 5 300 "$mpiexec" -n "$cp" "$trident" train "${args[@]}" >"$dir/log" 2>&1; then
    echo "FAIL cp $cp: trident train exited non-zero"; tail -5 "$dir/log" | sed 's/^/  | /'; exit 1
  fi
done
/usr/bin/python3 - "$work" <<'EOF' || fail=1
import json, sys
work = sys.argv[1]
rows, bad = {}, []
for cp in (1, 4):
    check = json.load(open(f"{work}/cp{cp}/check.json"))["max"]
    recs = [json.loads(l) for l in open(f"{work}/cp{cp}/metrics.jsonl") if l.strip()]
    last = [r for r in recs if "act_bytes" in r][-1]
    rows[cp] = (int(check["act_bytes"]), int(check["total_bytes"]), int(last["mem_bytes"]),
                int(last["act_bytes"]))
mib = 2.0 ** 20
print(f"{'cp':>3} {'check act':>10} {'check total':>12} {'run RSS':>10} {'RSS/check':>10}")
for cp, (act, total, rss, run_act) in rows.items():
    r = rss / total
    print(f"{cp:>3} {act / mib:>10.1f} {total / mib:>12.1f} {rss / mib:>10.1f} {r:>10.3f}")
    if abs(r - 1.0) > 0.10:
        bad.append(f"cp {cp}: measured peak RSS {rss / mib:.1f} MiB is {r:.3f} of check's "
                   f"{total / mib:.1f} MiB (want within 10%)")
    if run_act != act:
        bad.append(f"cp {cp}: the run's act_bytes {run_act} != check's {act}")
ratio = rows[4][0] / rows[1][0]
print(f"activation bytes per rank, cp 4 / cp 1: {ratio:.3f} (want <= 0.35)")
if ratio > 0.35:
    bad.append(f"cp 4 keeps {ratio:.3f} of cp 1's activation bytes (want <= 0.35)")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
EOF
exit $fail
