#!/usr/bin/env bash
# pp_live.sh TRIDENT MPIEXEC WORKDIR — 1F1B keeps at most pp − stage
# micro-batches of activations alive on stage `stage` (GPipe keeps all m),
# read from trident's own accounting (metrics pp_live_peak); the measured
# bubble is reported beside the theoretical (pp − 1) / (m + pp − 1).
set -euo pipefail
trident=$1 mpiexec=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
cd "$work"
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null
fail=0
for sched in 1f1b gpipe; do
  rm -rf "run_$sched"
  "$mpiexec" -n 4 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set parallel.pp=4 --set parallel.micro_batch=1 --set training.global_batch=8 \
    --set parallel.pp_schedule=$sched --set training.steps=3 --set schedule.warmup=1 --set run.out_dir="run_$sched" \
    --set checkpoint.resume=never >"run_$sched.log" 2>&1 || { cat "run_$sched.log"; exit 1; }
  /usr/bin/python3 - "run_$sched/metrics.jsonl" "$sched" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"pp_live_peak"' in l]
sched, pp, m = sys.argv[2], 4, 8
if not rows:
    sys.exit("no pp_live_peak in the metrics")
r = rows[-1]
bound = [min(m, pp - s) for s in range(pp)] if sched == "1f1b" else [m] * pp
ok = all(0 < x <= b for x, b in zip(r["pp_live_peak"], bound)) and len(r["pp_live_peak"]) == pp
if sched == "1f1b":
    ok = ok and r["pp_live_peak"] == bound
print(f"{sched}: live micro-batches per stage {r['pp_live_peak']} (bound {bound}); "
      f"measured idle {r['pp_idle']} vs theoretical bubble {r['pp_bubble_theory']:.3f}: "
      f"{'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
[ $fail = 0 ] && echo "1 passed, 0 failed" || { echo "0 passed, 1 failed"; exit 1; }
