#!/usr/bin/env bash
# pp_live.sh TRIDENT MPIEXEC WORKDIR — 1F1B keeps at most pp − stage
# micro-batches of activations alive on stage `stage` (GPipe keeps all m,
# zb-h1 min(m, pp) on every stage, interleaved with 2 chunks per stage at
# most pp·2 + pp − 1 chunk micro-batches), read from trident's own
# accounting (metrics pp_live_peak); the measured bubble (pp_idle,
# pp_bubble, pp_idle_ms) is reported beside the simulated one
# (pp_bubble_theory: (pp − 1) / (m + pp − 1) for 1F1B).
set -euo pipefail
trident=$1 mpiexec=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
cd "$work"
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null
fail=0
for sched in 1f1b gpipe zb-h1 interleaved; do
  rm -rf "run_$sched"
  "$mpiexec" -n 4 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set parallel.pp=4 --set parallel.micro_batch=1 --set training.global_batch=8 \
    --set parallel.pp_schedule=$sched --set training.steps=3 \
    --set parallel.virtual_stages=$([ $sched = interleaved ] && echo 2 || echo 1) \
    --set model.layers=$([ $sched = interleaved ] && echo 8 || echo 4) --set schedule.warmup=1 --set run.out_dir="run_$sched" \
    --set checkpoint.resume=never >"run_$sched.log" 2>&1 || { cat "run_$sched.log"; exit 1; }
  /usr/bin/python3 - "run_$sched/metrics.jsonl" "$sched" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"pp_live_peak"' in l]
sched, pp, m = sys.argv[2], 4, 8
if not rows:
    sys.exit("no pp_live_peak in the metrics")
r = rows[-1]
bound = {"1f1b": [min(m, pp - s) for s in range(pp)], "gpipe": [m] * pp,
         "zb-h1": [min(m, pp)] * pp, "interleaved": [2 * pp + pp - 1] * pp}[sched]
ok = all(0 < x <= b for x, b in zip(r["pp_live_peak"], bound)) and len(r["pp_live_peak"]) == pp
if sched in ("1f1b", "zb-h1"):
    ok = ok and r["pp_live_peak"] == bound
ok = ok and len(r["pp_idle_ms"]) == pp and len(r["pp_bubble"]) == pp
ok = ok and all(0 <= b < 1 for b in r["pp_bubble"])
print(f"{sched}: live micro-batches per stage {r['pp_live_peak']} (bound {bound}); "
      f"measured idle {r['pp_bubble']} ({r['pp_idle_ms']} ms) vs simulated "
      f"{r['pp_bubble_theory']:.3f}: "
      f"{'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
[ $fail = 0 ] && echo "1 passed, 0 failed" || { echo "0 passed, 1 failed"; exit 1; }
