#!/usr/bin/env bash
# stragglers.sh TRIDENT WORKDIR — straggler detection (logging.straggler_pct;
# docs/monitoring.md "Stragglers") on 4 ranks (dp 4), the tiny deck at
# global batch 32 (~0.1 s a step here: scheduler time slices of 4 ranks on 2
# cores stay small beside it), 50 steps, a metrics line every 10:
#   1. unloaded: no straggler reported, straggler_rank -1 on every line, and
#      rank_step_ms_min <= median <= max;
#   2. rank 2 slowed by 100 ms a step in its compute
#      (TD_TEST_SLOW_RANK=2:100): every line names rank 2, its host and
#      "compute", nothing else is named, straggler_rank 2, and
#      rank_step_ms_max exceeds the median by 75 ms or more (of the 100);
#   3. rank 1 slowed by 100 ms a step in reading its data
#      (TD_TEST_SLOW_RANK=1:100:data): rank 1 and "data loading" named.
# (Each line judges the medians of the last 10 steps, never the first 3.) The
# same across the two hosts of the cluster test: tests/cluster/run.sh
# straggler.
# Runs alone (RUN_SERIAL): other tests' load would make a rank slow.
# Environment: MPIEXEC (default mpiexec).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
fail=0
host=$(hostname)
run() { # run NAME [ENV=VALUE...]: 50 steps on 4 ranks into $work/NAME
  local name=$1
  shift
  rm -rf "${work:?}/$name"
  env "$@" timeout -k 5 240 "$mpiexec" -n 4 "$trident" train "$src/inputs/tiny.yaml" \
    --set "data.train=$corpus" --set parallel.dp=4 --set training.steps=50 \
    --set logging.every=10 --set training.global_batch=32 --set checkpoint.resume=never \
    --set "run.out_dir=$work/$name" \
    >"$work/$name.log" 2>&1 </dev/null
}
# judge NAME RANK PART: the metrics and the log against RANK (-1: none) and
# PART ("compute" or "data loading")
judge() {
  /usr/bin/python3 - "$work/$1/metrics.jsonl" "$work/$1.log" "$2" "$3" "$host" <<'EOF'
import json, re, sys
metrics, log, rank, part, host = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
lines = [json.loads(l) for l in open(metrics) if l.strip()]
lines = [l for l in lines if "straggler_rank" in l]
reports = [l for l in open(log) if "warning: straggler:" in l]
bad = []
if len(lines) < 5:
    bad.append(f"{len(lines)} metrics lines with straggler_rank, expected 5")
for l in lines:
    if not l["rank_step_ms_min"] <= l["rank_step_ms_median"] <= l["rank_step_ms_max"]:
        bad.append(f"step {l['step']}: min/median/max out of order")
got = [l["straggler_rank"] for l in lines]
want = [rank] * len(lines)
if got != want:
    bad.append(f"straggler_rank per line {got}, expected {want}")
if rank < 0:
    if reports:
        bad.append(f"{len(reports)} false reports: {reports[0].strip()}")
else:
    named = [r for r in reports if re.search(rf"rank {rank} \(host {re.escape(host)}\) .* its {part} takes", r)]
    if len(named) != len(lines) or len(reports) != len(named):
        bad.append(f"{len(named)} reports naming rank {rank} and its {part} of {len(reports)}, expected {len(lines)}")
    gaps = [l["rank_step_ms_max"] - l["rank_step_ms_median"] for l in lines]
    if min(gaps) < 75:
        bad.append(f"max - median {min(gaps):.1f} ms, not near the 100 ms of the slowdown (>= 75)")
spread = max(l["rank_step_ms_max"] / l["rank_step_ms_median"] for l in lines)
if bad:
    print("FAIL", "; ".join(bad))
    sys.exit(1)
print(f"ok   {len(lines)} lines, straggler_rank {got}; largest max/median {spread:.2f}"
      + (f"; {reports[-1].strip()[:200]}" if reports else ""))
EOF
}
for case in "unloaded -1 -" "compute 2 compute TD_TEST_SLOW_RANK=2:100" \
            "data 1 data_loading TD_TEST_SLOW_RANK=1:100:data"; do
  read -r name rank part envv <<<"$case"
  part=${part//_/ }
  if [ -n "${envv:-}" ]; then run "$name" "$envv"; else run "$name" TD_NONE=1; fi
  rc=$?
  if [ $rc != 0 ]; then
    echo "FAIL $name: trident exited $rc"
    tail -5 "$work/$name.log" | sed 's/^/     | /'
    fail=1
    continue
  fi
  echo "stragglers: $name${envv:+ ($envv)}"
  judge "$name" "$rank" "$part" || fail=1
done
exit $fail
