#!/usr/bin/env bash
# pipeline_schedules.sh — the pipeline schedules (gpipe, 1f1b, interleaved,
# zb-h1) side by side on equal-cost stages, measured against the simulator's
# prediction (docs: "Pipeline schedules").
#
#   tests/bench/pipeline_schedules.sh [--build DIR] [--work DIR] [--steps N]
#                                     [--rounds R] [--pp "2 4"] [--micro "4 8"]
#                                     [--layers L] [--dim C] [--seq T]
#
# Model: GPT-2 family, L layers (default 8: 4 per stage at pp 2, 2 at pp 4,
# and whole chunks at v = 2), dim C (default 256), seq T (default 128),
# vocab 256 (so the embedding and the head cost little and the stages cost
# the same), micro-batch 1, global batch m (the micro-batch counts of
# --micro, default "4 8"), fp32, ZeRO 0, dp 1: mpiexec -n pp trident train
# with OMP_NUM_THREADS=1 (one thread per rank), N steps (default 8),
# checkpoints and evaluation off. The schedules run in turn, R rounds
# (default 3), so a machine shared with other work slows them alike. Steps
# 3..N of every round are measured: tok/s is the best step's tokens_per_s
# (the least disturbed; the median beside it); the measured bubble is the
# median over those steps of the largest per-stage pp_bubble (time spent
# waiting for a message over the step); the predicted one is
# pp_bubble_theory (the schedule simulated with F = B = W per layer, free
# messages: the fraction of the step a stage idles). Ratios are best tok/s
# (and median tok/s) over 1F1B's. A schedule trident refuses (e.g. interleaved needs m % pp ==
# 0) is shown as "refused" with its message. The load average is printed
# at the start and the end: numbers from a busy machine are noise.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$src/build work=/tmp/td_pipeline_schedules steps=8 rounds=3 pps="2 4" micros="4 8"
layers=8 dim=256 seq=128
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --pp) pps=$2; shift 2 ;;
    --micro) micros=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    *) echo "pipeline_schedules: unknown argument $1" >&2; exit 2 ;;
  esac
done
trident=$build/trident
mpiexec=${MPIEXEC:-mpiexec}
export OMP_NUM_THREADS=1 HWLOC_PLUGINS_BLACKLIST=hwloc_pci OMP_WAIT_POLICY=passive
mkdir -p "$work"
corpus=$work/corpus.h5
if [ ! -f "$corpus" ]; then
  mkdir -p "$work/text"
  cat "$src"/app/*.c "$src"/parallel/*.c > "$work/text/all.txt"
  "$trident" prepare --out "$corpus" "$work/text/all.txt" > /dev/null
fi
summary=$work/summary.py
cat > "$summary" <<'PY'
import json, statistics, sys
work, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for r in range(1, rounds + 1):
    try:
        rows += [json.loads(l) for l in open(f"{work}/{name}_r{r}/metrics.jsonl")][2:]
    except OSError:
        pass
tps = [r["tokens_per_s"] for r in rows]
bub = statistics.median(max(r["pp_bubble"]) for r in rows)
mid = sorted(rows, key=lambda r: r["step_ms"])[len(rows) // 2]
print(f'{max(tps):.1f} {statistics.median(tps):.1f} {bub:.4f} {rows[0]["pp_bubble_theory"]:.4f} ' +
      ",".join(f"{x:.1f}" for x in mid["pp_idle_ms"]))
PY
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# pipeline schedules: GPT-2 $layers layers, dim $dim, seq $seq, vocab 256, micro-batch 1," \
     "1 thread per rank, $steps steps (3..$steps measured) x $rounds rounds;" \
     "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf "%-3s %-3s %-12s %10s %9s %8s %9s %8s %8s  %s\n" pp m schedule "best tok/s" "median" \
  "bubble" "predicted" "vs 1f1b" "(median)" "idle ms per stage (median step)"
scheds="1f1b gpipe interleaved zb-h1"
for pp in $pps; do
  for m in $micros; do
    for round in $(seq 1 "$rounds"); do
      for sched in $scheds; do
        out=$work/pp${pp}_m${m}_${sched}_r$round
        rm -rf "$out"
        extra=(--set parallel.pp_schedule=$sched)
        [ "$sched" = interleaved ] && extra+=(--set parallel.virtual_stages=2)
        "$mpiexec" -n "$pp" "$trident" train "$src/inputs/tiny.yaml" \
          --set data.train="$corpus" --set model.layers=$layers --set model.dim=$dim \
          --set model.seq_len=$seq --set model.heads=4 --set parallel.pp=$pp \
          --set parallel.micro_batch=1 --set training.global_batch=$m \
          --set training.steps=$steps --set schedule.warmup=1 --set checkpoint.every=0 \
          --set eval.every=0 --set run.out_dir="$out" "${extra[@]}" > "$out.log" 2>&1 || true
      done
    done
    base="" mbase=""
    for sched in $scheds; do
      name=pp${pp}_m${m}_${sched}
      if [ ! -s "$work/${name}_r1/metrics.jsonl" ]; then
        printf "%-3s %-3s %-12s refused: %s\n" "$pp" "$m" "$sched" \
          "$(grep -m1 error "$work/${name}_r1.log" | cut -c1-90)"
        continue
      fi
      read -r best med bub pred idle < <(/usr/bin/python3 "$summary" "$work" "$name" "$rounds")
      [ "$sched" = 1f1b ] && base=$best mbase=$med
      ratio=$(/usr/bin/python3 -c "print(f'{$best/$base:.3f}x' if '$base' else '-')")
      mratio=$(/usr/bin/python3 -c "print(f'{$med/$mbase:.3f}x' if '$mbase' else '-')")
      printf "%-3s %-3s %-12s %10s %9s %8s %9s %8s %8s  %s\n" "$pp" "$m" "$sched" "$best" "$med" \
        "$bub" "$pred" "$ratio" "$mratio" "$idle"
    done
  done
done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
