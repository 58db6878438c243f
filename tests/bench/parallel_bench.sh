#!/usr/bin/env bash
# parallel_bench.sh — data, tensor and pipeline parallelism of the "small"
# model (inputs/small.yaml: 6 layers, dim 384, 6 heads, vocab 256, T 256) on
# this machine, through the command line (docs/benchmarks.md, "Parallelism").
#
#   tests/bench/parallel_bench.sh [--build DIR] [--work DIR] [--steps N]
#                                 [--pp-batch G] [--pp-micro B] [--no-torch]
#                                 [--skip "mem tp pp scaling"] [--before DIR]
#
# Every trident run: mpiexec -n K trident train inputs/small.yaml with
# OMP_NUM_THREADS=1 (one thread per rank), N steps (default 3), logging every
# step, checkpoints off, one evaluation batch at the end; metrics from
# WORK/<run>/metrics.jsonl. Steps 2..N are measured (step 1 is warm-up):
# bytes and comm time per step are differences of the cumulative comm_bytes
# (max over ranks) and comm_ms (rank 0, time waiting in collectives) between
# consecutive steps, leaving out the last step (it runs the final evaluation,
# whose collectives count in it); tok/s is the median of tokens_per_s over
# steps 2..N (step_ms excludes the evaluation).
#
# Tables (printed by tests/bench/parallel_tables.py from WORK/runs.tsv):
#   1. memory  — dp 1, 2, 4 × zero 0–3, global batch 4, micro-batch 1:
#                per-rank bytes of parameters, gradients, AdamW moments and
#                working buffers as the ZeRO engine allocated them (metrics
#                param/grad/optim/work_bytes, max over ranks) beside the ideal
#                (16Ψ; 4Ψ+4Ψ+8Ψ/dp; 4Ψ+12Ψ/dp; 16Ψ/dp), whether
#                `trident check --json` printed the same, and the measured
#                peak RSS (mem_bytes);
#   2. comm    — the same runs: bytes per step per rank and exposed comm time
#                beside the ring volumes;
#   3. scaling — tok/s at dp 1 and dp 2 (global batch 4) beside PyTorch DDP
#                (gloo, 2 processes, tests/bench/torch_ddp_bench.py) in the same run;
#   4. tp      — tp 1, 2, 4 at dp 1 (tp 4 with model.heads=12: 6 heads do not split 4 ways): bytes per step per rank of the tp
#                all-reduces beside 4 all-reduces per layer + 2 + cross-entropy,
#                and per-rank parameter memory (`trident check`);
#   5. pp      — 4 ranks, global batch G (default 8), micro-batch B (default 1):
#                (pp 4, gpipe), (pp 4, 1f1b), (dp 2, pp 2, 1f1b), (dp 4): tok/s,
#                measured idle fraction per stage (pp_idle) and the theory
#                (pp−1)/(m+pp−1).
#   6. before/after (with --before DIR: another build's trident, e.g. of an
#                older commit) — dp 2, zero 2 and 3, global batch 8,
#                micro-batch 1, T 256 and T 16 (communication-bound), max(N, 6)
#                steps, run alternately with both builds, twice: working
#                buffers, exposed communication and step time.
# The machine is shared: the load average is printed at the start of each
# run (and kept in runs.tsv). Exit status non-zero if a run failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build-par
WORK=
STEPS=3
PPG=8
PPB=1
TORCH=1
SKIP=""
BEFORE=""
PY=/usr/bin/python3
while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --pp-batch) PPG=$2; shift 2 ;;
    --pp-micro) PPB=$2; shift 2 ;;
    --no-torch) TORCH=0; shift ;;
    --skip) SKIP=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    -h|--help) sed -n '2,43p' "$0"; exit 0 ;;
    *) echo "parallel_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$WORK" ] || WORK=$BUILD/parallel_bench
TRIDENT=$BUILD/trident
[ -x "$TRIDENT" ] || { echo "parallel_bench.sh: $TRIDENT not built" >&2; exit 2; }
mkdir -p "$WORK"
MPIEXEC=${MPIEXEC:-mpiexec}
export OMP_NUM_THREADS=1 HWLOC_PLUGINS_BLACKLIST=hwloc_pci
DATA=$WORK/data.h5
[ -f "$DATA" ] || "$TRIDENT" prepare --out "$DATA" /usr/share/common-licenses > /dev/null || exit 2
DECK=$ROOT/inputs/small.yaml
RUNS=$WORK/runs.tsv
printf 'name\tgroup\tnp\tdp\ttp\tpp\tzero\tG\tB\tsched\tload\twall_s\tstatus\tcheck\n' > "$RUNS"
T0=$(date +%s)
FAILED=0
skip() { case " $SKIP " in *" $1 "*) return 0 ;; esac; return 1; }
load() { cut -d' ' -f1 /proc/loadavg; }

echo "# parallel_bench: $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))," \
  "$(free -g | awk '/Mem:/ {print $2}') GiB, $($MPIEXEC --version 2>/dev/null | awk '/Version:/ {print "MPICH " $2; exit}')," \
  "trident $(git -C "$ROOT" describe --always --dirty 2>/dev/null), $STEPS steps per run, OMP_NUM_THREADS=1"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# run NAME GROUP NP DP TP PP ZERO G B SCHED [extra --set ...]
# (TRIDENT_RUN, default $TRIDENT, is the binary; RUN_STEPS, default $STEPS)
run() {
  local name=$1 group=$2 np=$3 dp=$4 tp=$5 pp=$6 zero=$7 G=$8 B=$9 sched=${10}
  shift 10
  local dir=$WORK/$name l t1 t2 st=ok bin=${TRIDENT_RUN:-$TRIDENT}
  rm -rf "$dir"; mkdir -p "$dir"
  local sets=(--set data.train="$DATA" --set training.steps="${RUN_STEPS:-$STEPS}" --set schedule.warmup=1
    --set logging.every=1 --set eval.every=0 --set eval.batches=1 --set checkpoint.resume=never
    --set checkpoint.every=0 --set run.out_dir="$dir" --set parallel.dp="$dp" --set parallel.tp="$tp"
    --set parallel.pp="$pp" --set parallel.zero="$zero" --set training.global_batch="$G"
    --set parallel.micro_batch="$B" --set parallel.pp_schedule="$sched" "$@")
  # what trident check says the largest rank allocates (--json "max": bytes
  # of params, grads, moments, work, activations) and rank 0's parameter count
  local chk=""
  if [ "$bin" = "$TRIDENT" ]; then
    chk=$("$MPIEXEC" -n "$np" "$bin" check "$DECK" "${sets[@]}" --json 2>/dev/null | $PY -c '
import json, sys
d = json.load(sys.stdin); m = d["max"]
print(",".join(str(x) for x in [d["ranks"][0]["params"]] + [m[k] for k in
      ("param_bytes", "grad_bytes", "optim_bytes", "work_bytes", "act_bytes")]))')
  fi
  l=$(load); t1=$(date +%s.%N)
  printf '  %-22s np %d dp %d tp %d pp %d zero %d G %d B %d %-5s load %5s ... ' "$name" "$np" "$dp" "$tp" "$pp" "$zero" "$G" "$B" "$sched" "$l"
  if ! "$MPIEXEC" -n "$np" "$bin" train "$DECK" "${sets[@]}" > "$dir/out.log" 2>&1; then
    st=failed; FAILED=1
  fi
  t2=$(date +%s.%N)
  local wall
  wall=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.1f", b - a}')
  echo "$st (${wall} s)"
  [ "$st" = ok ] || tail -5 "$dir/out.log" | sed 's/^/    /'
  printf '%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n' "$name" "$group" "$np" "$dp" "$tp" "$pp" \
    "$zero" "$G" "$B" "$sched" "$l" "$wall" "$st" "${chk:-}" >> "$RUNS"
}

echo "# runs"
if ! skip mem; then
  for dp in 1 2 4; do
    for z in 0 1 2 3; do run "mem_dp${dp}_z${z}" mem "$dp" "$dp" 1 1 "$z" 4 1 1f1b; done
  done
fi
if ! skip scaling; then
  # dp 1 and dp 2 at global batch 4 with the whole per-rank batch in one micro-batch
  run scale_dp1 scaling 1 1 1 1 0 4 4 1f1b
  run scale_dp2 scaling 2 2 1 1 0 4 2 1f1b
  if [ "$TORCH" = 1 ]; then
    l=$(load)
    printf '  %-22s 2 processes (gloo), global batch 4, load %5s ... ' torch_ddp "$l"
    if env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $PY "$ROOT/tests/bench/torch_ddp_bench.py" --ranks 2 --global-batch 4 --steps "$((STEPS - 1))" \
      --warmup-steps 1 --threads 1 > "$WORK/torch_ddp.json" 2> "$WORK/torch_ddp.err"; then
      echo ok
    else
      echo failed; tail -3 "$WORK/torch_ddp.err"; FAILED=1; rm -f "$WORK/torch_ddp.json"
    fi
    echo "$l" > "$WORK/torch_ddp.load"
  fi
fi
if ! skip tp; then
  # small.yaml has 6 heads: tp 4 runs with model.heads=12 (same parameters, 3 heads per rank)
  run tp1 tp 1 1 1 1 0 4 4 1f1b
  run tp2 tp 2 1 2 1 0 4 4 1f1b
  run tp4 tp 4 1 4 1 0 4 4 1f1b --set model.heads=12
fi
if ! skip pp; then
  run pp4_gpipe pp 4 1 1 4 0 "$PPG" "$PPB" gpipe --set 'parallel.stage_layers=[2,2,1,1]'
  run pp4_1f1b pp 4 1 1 4 0 "$PPG" "$PPB" 1f1b --set 'parallel.stage_layers=[2,2,1,1]'
  run dp2_pp2 pp 4 2 1 2 0 "$PPG" "$PPB" 1f1b
  run dp4 pp 4 4 1 1 0 "$PPG" "$PPB" 1f1b
fi
if [ -n "$BEFORE" ]; then
  [ -x "$BEFORE/trident" ] || { echo "parallel_bench.sh: $BEFORE/trident not built" >&2; exit 2; }
  echo "# before/after: $BEFORE/trident ($(git -C "$(dirname "$BEFORE")" describe --always 2>/dev/null)) vs $TRIDENT"
  bsteps=$(( STEPS > 6 ? STEPS : 6 ))
  for T in 256 16; do # the deck's T, and a communication-bound T 16
    for z in 2 3; do
      for round in 1 2; do
        TRIDENT_RUN=$BEFORE/trident RUN_STEPS=$bsteps run "before_z${z}_T${T}_r${round}" before 2 2 1 1 \
          "$z" 8 1 1f1b --set model.seq_len=$T
        RUN_STEPS=$bsteps run "after_z${z}_T${T}_r${round}" after 2 2 1 1 "$z" 8 1 1f1b \
          --set model.seq_len=$T
      done
    done
  done
fi
echo "# all runs: $(( $(date +%s) - T0 )) s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
$PY "$ROOT/tests/bench/parallel_tables.py" "$WORK" || FAILED=1
exit $FAILED
