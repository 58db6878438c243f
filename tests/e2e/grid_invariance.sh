#!/usr/bin/env bash
# grid_invariance.sh — docs/architecture.md invariant 1 through the command line.
#
#   grid_invariance.sh [OPTIONS] TRIDENT WORKDIR NAME REF_GRID RUN_GRID [--set k=v]...
#       trains the tiny deck (inputs/tiny.yaml, 20 steps, resume never) at
#       REF_GRID and at RUN_GRID and compares them with compare_runs.py
#       (loss within --loss-rtol, grad_norm within compare_runs' --norm-rtol,
#       each final /model tensor within --param-rtol of its own max|p_ref|,
#       the attention key bias in absolute terms: see compare_runs.py).
#   grid_invariance.sh --twice [OPTIONS] TRIDENT WORKDIR NAME GRID [--set k=v]...
#       trains the same grid twice and demands bit-identical results.
#
# A grid is "dp,tp,pp,zero[,micro_batch[,cp]]" (micro_batch 0: the deck's
# default); the job runs on dp·cp·tp·pp ranks.
# Extra arguments go to every run (both sides). OPTIONS:
#   --loss-rtol R      (default 1e-4)      --param-rtol R  (default: compare_runs.py's)
#   --norm-rtol R      grad_norm (default: compare_runs.py's, 1e-4)
#   --moe-rtol R       model.moe's auxiliary terms and expert loads (default:
#                      compare_runs.py's: the terms as the loss, loads equal)
#   --vocab V          train with model.vocab_size=V on a corpus whose tokens
#                      are all < 128 (the licenses with bytes >= 128 deleted,
#                      its vocab_size attribute set to V): V need not divide tp.
#   --steps S          (default 20)
#   --run-set k=v      a --set for the run under test only (not the reference),
#                      e.g. parallel.stage_layers=[1,3]
#   --run-env K=V      an environment variable for the run under test only
#                      (every rank), e.g. TD_TEST_STAGED=1
#   --deck FILE        train FILE instead of inputs/tiny.yaml (e.g.
#                      inputs/llama-tiny.yaml)
#   --bitwise          demand bit-identical losses, grad norms and final
#                      parameters (compare_runs.py --bitwise) instead of the
#                      tolerances, and print both runs' act_bytes (e.g. with
#                      --run-set training.recompute=blocks)
#
# WORKDIR is shared by several tests: the corpus is prepared once and each
# reference run is cached in WORKDIR/ref_<grid>[_<key>] (key: a hash of the
# vocab and extra arguments) and stamped with a checksum of TRIDENT, so a
# rebuilt binary makes a fresh reference. flock makes concurrent use safe.
# Every trident failure is a test failure, "not implemented yet" included.
#
# Environment: MPIEXEC (default mpiexec), OMP_NUM_THREADS (default 1),
# TD_RUN_TIMEOUT seconds per run (default 240).
set -euo pipefail

usage() {
  sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

twice=0 bitwise=0 loss_rtol=1e-4 param_rtol="" norm_rtol="" moe_rtol="" vocab="" steps=20 run_extra=() deck=""
run_env=()
while [ $# -gt 0 ]; do
  case $1 in
    --twice) twice=1; shift ;;
    --loss-rtol) loss_rtol=$2; shift 2 ;;
    --param-rtol) param_rtol=$2; shift 2 ;;
    --norm-rtol) norm_rtol=$2; shift 2 ;;
    --moe-rtol) moe_rtol=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --run-set) run_extra+=(--set "$2"); shift 2 ;;
    --run-env) run_env+=("$2"); shift 2 ;;
    --deck) deck=$2; shift 2 ;;
    --bitwise) bitwise=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "grid_invariance: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
if [ $twice = 1 ]; then
  [ $# -ge 4 ] || usage
  trident=$1 work=$2 name=$3 ref_grid=$4 run_grid=$4
  shift 4
else
  [ $# -ge 5 ] || usage
  trident=$1 work=$2 name=$3 ref_grid=$4 run_grid=$5
  shift 5
fi
extra=("$@")

src=$(cd "$(dirname "$0")/../.." && pwd)
deck=${deck:-$src/inputs/tiny.yaml}
case $deck in /*) ;; *) deck=$(pwd)/$deck ;; esac
compare=$src/tests/e2e/compare_runs.py
py=${TD_PYTHON:-/usr/bin/python3}
mpiexec=${MPIEXEC:-mpiexec}
run_timeout=${TD_RUN_TIMEOUT:-240}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export HWLOC_PLUGINS_BLACKLIST=${HWLOC_PLUGINS_BLACKLIST:-hwloc_pci}

case $trident in /*) ;; *) trident=$(pwd)/$trident ;; esac
[ -x "$trident" ] || { echo "grid_invariance: $trident is not an executable" >&2; exit 2; }
mkdir -p "$work"
work=$(cd "$work" && pwd)

# parse_grid GRID -> sets g_args (the --set arguments) and g_np (ranks).
parse_grid() {
  local IFS=,
  # shellcheck disable=SC2206
  local f=($1)
  if [ ${#f[@]} -lt 4 ] || [ ${#f[@]} -gt 6 ]; then
    echo "grid_invariance: bad grid '$1' (want dp,tp,pp,zero[,micro_batch[,cp]])" >&2
    exit 2
  fi
  for x in "${f[@]}"; do
    case $x in ''|*[!0-9]*) echo "grid_invariance: bad grid '$1'" >&2; exit 2 ;; esac
  done
  local cp=${f[5]:-1}
  g_np=$((f[0] * f[1] * f[2] * cp))
  g_args=(--set "parallel.dp=${f[0]}" --set "parallel.tp=${f[1]}"
          --set "parallel.pp=${f[2]}" --set "parallel.zero=${f[3]}")
  if [ ${#f[@]} -ge 5 ]; then g_args+=(--set "parallel.micro_batch=${f[4]}"); fi
  if [ ${#f[@]} = 6 ]; then g_args+=(--set "parallel.cp=$cp"); fi
}

# with_lock FILE CMD... — run CMD holding an exclusive lock on FILE.
with_lock() {
  local lock=$1
  shift
  (
    flock -x 9
    "$@"
  ) 9>"$lock"
}

# ---- the corpus, prepared once per WORKDIR --------------------------------
if [ -n "$vocab" ]; then
  corpus=$work/corpus_v$vocab.h5
else
  corpus=$work/corpus.h5
fi
prepare_corpus() {
  [ -f "$corpus" ] && return 0
  local tmp=$corpus.tmp.$$
  if [ -n "$vocab" ]; then
    # bytes >= 128 removed, so every token is < 128 <= vocab; the file's
    # vocab_size attribute (256 from the byte tokenizer) is set to vocab,
    # since trident refuses a dataset that claims more than the model has.
    find /usr/share/common-licenses -type f | LC_ALL=C sort | xargs cat | LC_ALL=C tr -d '\200-\377' \
      | "$trident" prepare --out "$tmp" --val-fraction 0.1 - >/dev/null
    "$py" - "$tmp" "$vocab" <<'EOF'
import sys, h5py, numpy as np
path, v = sys.argv[1], int(sys.argv[2])
with h5py.File(path, "r+") as f:
    for d in ("tokens", "val_tokens"):
        if d in f and f[d].size and int(np.max(f[d][()])) >= v:
            sys.exit(f"{path}: /{d} holds a token >= {v}")
    old = f.attrs.get("vocab_size")
    dt = old.dtype if hasattr(old, "dtype") else np.int64
    f.attrs.modify("vocab_size", np.array(v, dtype=dt))
EOF
  else
    "$trident" prepare --out "$tmp" --val-fraction 0.1 /usr/share/common-licenses >/dev/null
  fi
  mv -f "$tmp" "$corpus"
}
with_lock "$work/.corpus.lock" prepare_corpus

common=(--set "data.train=$corpus" --set "training.steps=$steps" --set checkpoint.resume=never
        --set "checkpoint.every=$steps")
if [ -n "$vocab" ]; then common+=(--set "model.vocab_size=$vocab"); fi

# train GRID DIR [run] — one run into DIR (emptied first); exits the script on
# failure. "run" adds the --run-set arguments.
train() {
  local grid=$1 dir=$2 mine=() env=()
  [ "${3:-}" = run ] && mine=(${run_extra[@]+"${run_extra[@]}"})
  [ "${3:-}" = run ] && env=(${run_env[@]+"${run_env[@]}"})
  parse_grid "$grid"
  rm -rf "$dir"
  mkdir -p "$dir"
  local cmd=(env ${env[@]+"${env[@]}"}
             "$mpiexec" -n "$g_np" "$trident" train "$deck" "${common[@]}" "${g_args[@]}"
             --set "run.out_dir=$dir" --set "checkpoint.dir=$dir/ckpt"
             ${extra[@]+"${extra[@]}"} ${mine[@]+"${mine[@]}"})
  echo "+ ${cmd[*]}" >"$dir/command"
  local rc=0
  timeout -k 5 "$run_timeout" "${cmd[@]}" >"$dir/log" 2>&1 </dev/null || rc=$?
  if [ $rc != 0 ]; then
    echo "grid_invariance: FAIL: trident at grid $grid exited $rc" >&2
    if grep -q "not implemented yet" "$dir/log"; then
      echo "grid_invariance: FAIL: grid $grid is refused as not implemented yet -" \
        "grid invariance requires it to train" >&2
    fi
    [ $rc = 124 ] && echo "grid_invariance: FAIL: timed out after ${run_timeout}s" >&2
    echo "  command: ${cmd[*]}" >&2
    tail -n 20 "$dir/log" | sed 's/^/  | /' >&2
    exit 1
  fi
  if [ ! -s "$dir/metrics.jsonl" ]; then
    echo "grid_invariance: FAIL: grid $grid wrote no $dir/metrics.jsonl" >&2
    exit 1
  fi
}

# The cached reference run for ref_grid with these options.
ref_key=$(printf '%s\n' "vocab=$vocab" "steps=$steps" ${extra[@]+"${extra[@]}"} | cksum | cut -d' ' -f1)
deck_name=$(basename "$deck" .yaml)
ref_dir=$work/ref_$ref_grid
[ "$deck_name" = tiny ] || ref_dir=${ref_dir}_$deck_name
if [ -n "$vocab" ] || [ ${#extra[@]} -gt 0 ] || [ "$steps" != 20 ]; then ref_dir=${ref_dir}_$ref_key; fi
stamp="$(cksum <"$trident" | cut -d' ' -f1) $ref_key $(cksum <"$deck" | cut -d' ' -f1)"
ensure_ref() {
  if [ -f "$ref_dir/stamp" ] && [ "$(cat "$ref_dir/stamp")" = "$stamp" ]; then
    echo "grid_invariance: reusing reference $ref_dir"
    return 0
  fi
  echo "grid_invariance: reference run at grid $ref_grid -> $ref_dir"
  train "$ref_grid" "$ref_dir"
  echo "$stamp" >"$ref_dir/stamp"
}

run_dir=$work/$name
mkdir -p "$run_dir"
if [ $twice = 1 ]; then
  echo "grid_invariance: grid $run_grid twice, bitwise"
  train "$run_grid" "$run_dir/a" run
  train "$run_grid" "$run_dir/b" run
  "$py" "$compare" "$run_dir/a" "$run_dir/b" --bitwise
else
  with_lock "$ref_dir.lock" ensure_ref
  echo "grid_invariance: run at grid $run_grid -> $run_dir/run"
  train "$run_grid" "$run_dir/run" run
  tol=(--loss-rtol "$loss_rtol")
  if [ -n "$param_rtol" ]; then tol+=(--param-rtol "$param_rtol"); fi
  if [ -n "$norm_rtol" ]; then tol+=(--norm-rtol "$norm_rtol"); fi
  if [ -n "$moe_rtol" ]; then tol+=(--moe-rtol "$moe_rtol"); fi
  [ $bitwise = 0 ] || tol=(--bitwise)
  if [ $bitwise = 1 ]; then
    "$py" - "$ref_dir/metrics.jsonl" "$run_dir/run/metrics.jsonl" <<'PYEOF2'
import json, sys
def act(p):
    for line in open(p):
        r = json.loads(line)
        if "act_bytes" in r:
            return r["act_bytes"]
    sys.exit("grid_invariance: no act_bytes in %s" % p)
a, b = act(sys.argv[1]), act(sys.argv[2])
print("grid_invariance: act_bytes (largest rank) %d -> %d (%.2fx less)" % (a, b, a / b if b else 0))
PYEOF2
  fi
  "$py" "$compare" "$ref_dir" "$run_dir/run" "${tol[@]}"
fi
