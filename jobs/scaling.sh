#!/usr/bin/env bash
# jobs/scaling.sh DECK --ranks 1,2,4[,8] [--strong|--weak] [--steps N] [--out DIR]
#                 [--launcher CMD] [--nodes K] [--set k=v]...
#
# How well a deck scales: trains it at each rank count, data parallel (dp =
# ranks / (tp × pp × cp) of the deck), and prints a table of tokens/s,
# tokens/s per rank, the efficiency against the first rank count, the
# communication share of a step and the step time, from each run's metrics.
#
#   --strong   (default) the deck's global batch at every rank count: the
#              same work split over more ranks
#   --weak     the global batch grows with dp (the first count's batch per
#              data-parallel rank is kept)
#   --steps N  optimizer steps per run (default 20); the first 2 are not
#              measured (set-up)
#   --out DIR  runs and results (default runs/scaling-<deck name>): DIR/nN/ the
#              run at N ranks, DIR/scaling.json the table, DIR/scaling.png the
#              plot when matplotlib is there (jobs/plot.py --scaling)
#   --launcher CMD   how to start N ranks: CMD with {n} replaced by N and
#              {nodes} by min(N, --nodes) (default "MPIEXEC -n {n}", MPIEXEC as
#              jobs/mpirun.sh picks it); inside a Slurm allocation e.g.
#              --launcher "srun --mpi=pmi2 -N {nodes} -n {n}" --nodes 2
#   --nodes K  the most nodes a run spreads over (default 1)
#
# Measured (medians over the measured steps, every number from the metrics
# file of that run): tokens/s = global batch × seq_len / step time;
# efficiency(N) = (tokens/s(N) / N) / (tokens/s(N0) / N0) for the first count
# N0 (strong and weak alike: throughput per rank against the first); comm
# share = rank 0's time in collectives a step / the step time (comm_ms
# differences over the same steps / step_ms); busy = the median rank's
# compute and data time a step (rank_step_ms_median): the rest of a step is
# waiting. The binary is the checkout's build/trident (TRIDENT overrides).
set -euo pipefail
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
deck=$1
shift
ranks="" mode=strong steps=20 out="" launcher="" nodes=1 sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=${2:?}; shift 2 ;;
    --strong) mode=strong; shift ;;
    --weak) mode=weak; shift ;;
    --steps) steps=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --launcher) launcher=${2:?}; shift 2 ;;
    --nodes) nodes=${2:?}; shift 2 ;;
    --set) sets+=(--set "${2:?}"); shift 2 ;;
    -h | --help) usage ;;
    *) echo "jobs/scaling.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$ranks" ] || { echo "jobs/scaling.sh: --ranks 1,2,4 is required" >&2; exit 2; }
[ -f "$deck" ] || { echo "jobs/scaling.sh: $deck: no such deck" >&2; exit 2; }
case $steps in '' | *[!0-9]*) echo "jobs/scaling.sh: --steps $steps is not a number" >&2; exit 2 ;; esac
[ "$steps" -ge 4 ] || { echo "jobs/scaling.sh: --steps must be at least 4 (2 are set-up)" >&2; exit 2; }
TRIDENT=${TRIDENT:-$(cd "$(dirname "$0")/.." && pwd)/build/trident}
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
if [ -z "$launcher" ]; then
  if [ -z "${MPIEXEC:-}" ]; then
    case $("$TRIDENT" --version 2>/dev/null | grep "mpi:") in
      *"Open MPI"*) MPIEXEC=mpiexec.openmpi ;;
      *MPICH*) MPIEXEC=mpiexec.mpich ;;
    esac
    command -v "${MPIEXEC:-none}" >/dev/null 2>&1 || MPIEXEC=mpiexec
  fi
  launcher="$MPIEXEC -n {n}"
fi
name=$(basename "$deck" .yaml)
out=${out:-runs/scaling-$name}
mkdir -p "$out"
# the deck's model-parallel ranks (dp 1) and global batch
mp=$("$TRIDENT" check "$deck" "${sets[@]}" --set parallel.dp=1 --ranks)
gb=$("$TRIDENT" check "$deck" "${sets[@]}" --set parallel.dp=1 2>/dev/null |
  sed -n 's/^batch: global \([0-9]*\) sequences.*/\1/p')
[ -n "$gb" ] || { echo "jobs/scaling.sh: cannot read the global batch of $deck (trident check)" >&2; exit 2; }
IFS=, read -r -a counts <<<"$ranks"
dp0=""
for n in "${counts[@]}"; do
  case $n in '' | *[!0-9]*) echo "jobs/scaling.sh: --ranks $ranks: '$n' is not a number" >&2; exit 2 ;; esac
  if [ $((n % mp)) != 0 ] || [ "$n" -lt "$mp" ]; then
    echo "jobs/scaling.sh: $n ranks is not a multiple of the deck's tp × pp × cp = $mp" >&2
    exit 2
  fi
  dp=$((n / mp))
  [ -n "$dp0" ] || dp0=$dp
  g=$gb
  if [ $mode = weak ]; then
    if [ $((gb * dp % dp0)) != 0 ]; then
      echo "jobs/scaling.sh: --weak: global batch $gb × $dp / $dp0 is not whole" >&2
      exit 2
    fi
    g=$((gb * dp / dp0))
  fi
  dir=$out/n$n
  rm -rf "$dir"
  k=$((n < nodes ? n : nodes))
  launch=${launcher//\{n\}/$n}
  # shellcheck disable=SC2206 # the launcher is words
  cmd=(${launch//\{nodes\}/$k} "$TRIDENT" train "$deck" "${sets[@]}" --set "parallel.dp=$dp"
       --set "training.global_batch=$g" --set "training.steps=$steps" --set logging.every=1
       --set checkpoint.every=0 --set checkpoint.resume=never --set eval.every=0
       --set eval.batches=1 --set "run.out_dir=$dir")
  echo "jobs/scaling.sh: $n ranks (dp $dp), global batch $g: ${cmd[*]}" >&2
  if ! "${cmd[@]}" >"$dir.log" 2>&1 </dev/null; then
    echo "jobs/scaling.sh: the run at $n ranks failed; its log ($dir.log) ends:" >&2
    tail -n 5 "$dir.log" >&2
    exit 1
  fi
done
"$PY" - "$out" "$mode" "$ranks" <<'EOF'
import json, statistics, sys
out, mode, ranks = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
rows = []
for n in ranks:
    recs = [json.loads(l) for l in open(f"{out}/n{n}/metrics.jsonl") if l.strip()]
    recs = [r for r in recs if "loss" in r and "step_ms" in r]
    steps = {r["step"]: r for r in recs}
    meas = [steps[s] for s in sorted(steps) if s > 2]
    if len(meas) < 2:
        sys.exit(f"jobs/scaling.sh: {out}/n{n}: fewer than 2 measured steps")
    step_ms = statistics.median(r["step_ms"] for r in meas)
    tokens = meas[0]["step_tokens"]
    # comm_ms is cumulative: the time between the first measured line and the last
    prev = steps[meas[0]["step"] - 1] if meas[0]["step"] - 1 in steps else None
    first = prev if prev is not None else meas[0]
    span = [r for r in meas if r["step"] > first["step"]]
    comm = (meas[-1]["comm_ms"] - first["comm_ms"]) / sum(r["step_ms"] for r in span)
    busy = statistics.median(r.get("rank_step_ms_median", float("nan")) for r in meas)
    rows.append({"ranks": n, "global_batch_tokens": tokens, "step_ms": step_ms,
                 "tokens_per_s": tokens / (step_ms / 1e3), "busy_ms": busy,
                 "comm_share": comm, "steps_measured": len(meas)})
base = rows[0]
for r in rows:
    r["tokens_per_s_per_rank"] = r["tokens_per_s"] / r["ranks"]
    r["efficiency"] = r["tokens_per_s_per_rank"] / base["tokens_per_s_per_rank"]
json.dump({"mode": mode, "rows": rows}, open(f"{out}/scaling.json", "w"), indent=1)
print(f"{mode} scaling ({out}; efficiency against {base['ranks']} rank{'s' if base['ranks'] > 1 else ''})")
print(f"{'ranks':>5} {'tokens/step':>11} {'step ms':>9} {'tokens/s':>10} {'tok/s/rank':>10} "
      f"{'efficiency':>10} {'comm share':>10} {'busy ms':>8}")
for r in rows:
    print(f"{r['ranks']:>5} {r['global_batch_tokens']:>11} {r['step_ms']:>9.1f} {r['tokens_per_s']:>10.0f} "
          f"{r['tokens_per_s_per_rank']:>10.0f} {r['efficiency']:>10.3f} {r['comm_share']:>10.3f} "
          f"{r['busy_ms']:>8.1f}")
EOF
if "$PY" -c "import matplotlib" 2>/dev/null; then
  "$PY" "$(dirname "$0")/plot.py" --scaling "$out/scaling.json" -o "$out/scaling.png" >/dev/null &&
    echo "plot: $out/scaling.png"
fi
