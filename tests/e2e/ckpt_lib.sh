# shellcheck shell=bash disable=SC2034
# ckpt_lib.sh — shared by the end-to-end checkpoint tests (tests/e2e/ckpt_*.sh);
# sourced, not run. Every script takes TRIDENT WORKDIR first and calls
#   ck_init TRIDENT WORKDIR      paths, environment, the corpus (prepared once)
# then uses pass/fail/check_* to print PASS/FAIL lines and ck_finish to print
# "N passed, M failed" and exit 0 only when nothing failed.
#
# Runs use inputs/tiny.yaml (4 layers, dim 128, vocab 256, T 64, global batch
# 8) on the license texts. A grid is "dp,tp,pp,zero[,micro_batch[,cp]]"
# (micro_batch 0: the deck's default).
#
# WORKDIR is shared by the tests: the corpus and the single-rank reference
# runs (ck_ensure_ref) are made once, under flock, and stamped with a
# checksum of TRIDENT so a rebuilt binary makes fresh ones.
#
# Environment: MPIEXEC (default mpiexec), OMP_NUM_THREADS (default 1),
# TD_RUN_TIMEOUT seconds per trident run (default 300).

ck_npass=0
ck_nfail=0
pass() { echo "PASS $*"; ck_npass=$((ck_npass + 1)); }
fail() { echo "FAIL $*"; ck_nfail=$((ck_nfail + 1)); }
info() { echo "     $*"; }
# check COND_STATUS NAME: pass when the previous command succeeded.
ck_finish() {
  echo "$ck_npass passed, $ck_nfail failed"
  [ "$ck_nfail" = 0 ] && exit 0
  exit 1
}
# Fatal: a prerequisite failed; count it, print the summary, stop.
ck_abort() {
  fail "$*"
  ck_finish
}

ck_init() {
  trident=$1 work=$2
  case $trident in /*) ;; *) trident=$(pwd)/$trident ;; esac
  [ -x "$trident" ] || { echo "FAIL $trident is not an executable"; echo "0 passed, 1 failed"; exit 1; }
  ck_src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  deck=${TD_DECK:-$ck_src/inputs/tiny.yaml} # TD_DECK: another deck (its own WORKDIR)
  compare=$ck_src/tests/e2e/compare_runs.py
  ckdiff=$ck_src/tests/e2e/ckpt_diff.py
  py=${TD_PYTHON:-/usr/bin/python3}
  mpiexec=${MPIEXEC:-mpiexec}
  run_timeout=${TD_RUN_TIMEOUT:-300}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  export HWLOC_PLUGINS_BLACKLIST=${HWLOC_PLUGINS_BLACKLIST:-hwloc_pci}
  unset TD_TEST_CRASH_SAVE TD_TEST_SIGNAL_SAVE
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
  corpus=$work/corpus.h5
  ck_with_lock "$work/.corpus.lock" ck_prepare_corpus
  [ -f "$corpus" ] || ck_abort "cannot prepare the corpus $corpus"
  ck_stamp_bin="$(cksum <"$trident" | cut -d' ' -f1) $(cksum <"$deck" | cut -d' ' -f1)"
}

# CK_EVERY_RANK_EXITS — the environment for a run whose every rank is to
# exit by itself with the same status (a stop on a signal: 75; a refused
# input: 2) while a wrapper records each rank's status: Open MPI's mpirun
# kills the ranks still exiting once one has exited non-zero
# (orte_abort_on_non_zero_status), so a rank a moment slower than the first
# was killed before its wrapper wrote its 75 (checkpoint_signal_usr1 under
# load, once in 20: "75 none"). The job's exit code is the same either way;
# MPICH ignores the variable.
CK_EVERY_RANK_EXITS=OMPI_MCA_orte_abort_on_non_zero_status=0

ck_with_lock() {
  local lock=$1
  shift
  (
    flock -x 9
    "$@"
  ) 9>"$lock"
}

ck_prepare_corpus() {
  [ -f "$corpus" ] && return 0
  local tmp=$corpus.tmp.$$
  "$trident" prepare --out "$tmp" --val-fraction 0.1 /usr/share/common-licenses >/dev/null &&
    mv -f "$tmp" "$corpus"
}

# ck_grid GRID -> g_np (ranks) and g_args (the --set arguments).
ck_grid() {
  local IFS=,
  # shellcheck disable=SC2206
  local f=($1)
  if [ ${#f[@]} -lt 4 ] || [ ${#f[@]} -gt 6 ]; then
    echo "bad grid '$1' (want dp,tp,pp,zero[,micro_batch[,cp]])" >&2
    exit 2
  fi
  local cp=${f[5]:-1}
  g_np=$((f[0] * f[1] * f[2] * cp))
  g_args=(--set "parallel.dp=${f[0]}" --set "parallel.tp=${f[1]}"
          --set "parallel.pp=${f[2]}" --set "parallel.zero=${f[3]}")
  if [ ${#f[@]} -ge 5 ]; then g_args+=(--set "parallel.micro_batch=${f[4]}"); fi
  if [ ${#f[@]} = 6 ]; then g_args+=(--set "parallel.cp=$cp"); fi
}

# ck_train GRID DIR LOG [--set k=v]... — one `trident train` of the tiny deck
# into DIR (run.out_dir; checkpoints in DIR/ckpt) on GRID; output in LOG.
# Sets ck_rc (the exit status; 124 after TD_RUN_TIMEOUT) and ck_cmd.
ck_train() {
  local grid=$1 dir=$2 log=$3
  shift 3
  ck_grid "$grid"
  mkdir -p "$dir"
  ck_cmd=("$mpiexec" -n "$g_np" "$trident" train "$deck" --set "data.train=$corpus"
          "${g_args[@]}" --set "run.out_dir=$dir" "$@")
  echo "+ ${ck_cmd[*]}" >>"$log"
  ck_rc=0
  timeout -k 5 "$run_timeout" "${ck_cmd[@]}" >>"$log" 2>&1 </dev/null || ck_rc=$?
  return 0
}

# ck_show_log LOG — the tail of a run's output, indented.
ck_show_log() {
  tail -n "${2:-15}" "$1" | sed 's/^/     | /'
}

# ck_train_ok GRID DIR WHAT [--set k=v]... — ck_train into a fresh DIR (log
# DIR.log); a failure is fatal for the script.
ck_train_ok() {
  local grid=$1 dir=$2 what=$3
  shift 3
  rm -rf "$dir" "$dir.log"
  local t0=$SECONDS
  ck_train "$grid" "$dir" "$dir.log" "$@"
  if [ "$ck_rc" != 0 ]; then
    fail "$what: trident exited $ck_rc at grid $grid"
    info "command: ${ck_cmd[*]}"
    ck_show_log "$dir.log"
    ck_finish
  fi
  info "$what: grid $grid ok ($((SECONDS - t0)) s)"
}

# The single-rank reference run used by the resharding and h5py tests:
# grid 1,1,1,0, 20 steps, a checkpoint every 10 steps, constant learning
# rate after the warm-up (so a 10-step run on another grid saves exactly the
# state of this run's step 10), global batch GB. Sets ref_dir.
# The constant rate is written as a linear decay to min_lr = lr (1e-3, the
# deck's): schedule.decay=constant is taken for cosine by td_lr_at, which
# switches on the first letter only.
ck_ref_args() {
  local lr=${TD_CKPT_LR:-1.0e-3} # TD_CKPT_LR: another constant rate (a deck of its own)
  ref_args=(--set "training.global_batch=$1" --set schedule.decay=linear
            --set optimizer.lr=$lr --set schedule.min_lr=$lr
            --set checkpoint.resume=never --set checkpoint.keep=0)
}
ck_ensure_ref() {
  local gb=$1
  ref_dir=$work/ref_gb$gb
  ck_with_lock "$ref_dir.lock" ck_make_ref "$gb"
  [ -f "$ref_dir/stamp" ] || ck_abort "reference run (global batch $gb) failed: see $ref_dir.log"
}
ck_make_ref() {
  local gb=$1 stamp
  stamp="$ck_stamp_bin gb=$gb linear-const lr=${TD_CKPT_LR:-1.0e-3}"
  if [ -f "$ref_dir/stamp" ] && [ "$(cat "$ref_dir/stamp")" = "$stamp" ]; then
    info "reusing reference $ref_dir"
    return 0
  fi
  ck_ref_args "$gb"
  rm -rf "$ref_dir" "$ref_dir.log"
  ck_train 1,1,1,0 "$ref_dir" "$ref_dir.log" "${ref_args[@]}" --set training.steps=20 \
    --set checkpoint.every=10
  if [ "$ck_rc" != 0 ]; then
    echo "reference run exited $ck_rc:"
    ck_show_log "$ref_dir.log"
    return 1
  fi
  # the premise of the 10-step sources: lr is constant from step 5 on
  if ! "$py" -c '
import json, sys
lr = float(sys.argv[2])
bad = [(r["step"], r["lr"]) for r in map(json.loads, open(sys.argv[1])) if "lr" in r and r["step"] >= 5 and abs(r["lr"] - lr) > 1e-12]
sys.exit(f"the reference learning rate is not constant after the warm-up: {bad[:3]}" if bad else 0)
' "$ref_dir/metrics.jsonl" "${TD_CKPT_LR:-1.0e-3}"; then
    return 1
  fi
  echo "$stamp" >"$ref_dir/stamp"
  info "reference run (1,1,1, global batch $gb) -> $ref_dir"
}

# ck_compare_bitwise A B WHAT — PASS WHAT when the runs in A and B are
# bitwise identical (compare_runs.py --bitwise: losses, grad norms, final
# /model), else FAIL with the differences.
ck_compare_bitwise() {
  local out
  if out=$("$py" "$compare" "$1" "$2" --bitwise 2>&1); then
    pass "$3"
  else
    fail "compare_runs --bitwise $1 vs $2 ($3)"
    echo "$out" | sed 's/^/     | /'
  fi
}

# ck_rank_statuses RCDIR NP — the exit statuses the ranks' wrappers wrote
# into RCDIR/rank.K (ckpt_signal.sh's wrapper): ranks (an array, "none" for a
# missing one) and all75 (1 when every rank exited 75).
ck_rank_statuses() {
  local k x
  ranks=() all75=1
  for ((k = 0; k < $2; ++k)); do
    x=$(cat "$1/rank.$k" 2>/dev/null || echo none)
    ranks+=("$x")
    [ "$x" = 75 ] || all75=0
  done
}

# ck_resumed_at DIR LOG STEP [--set k=v]... — the same command again (GRID
# in $grid) resumes at STEP and exits 0: PASS or FAIL.
ck_resumed_at() {
  local r=$1 log=$2 step=$3
  shift 3
  ck_train "$grid" "$r" "$log" "$@" --set checkpoint.resume=auto
  if [ "$ck_rc" = 0 ] && grep -q "resuming at step $step" "$log"; then
    pass "the same command resumed at step $step and exited 0"
  else
    fail "the same command again: exit $ck_rc (expected 0, resuming at step $step)"
    ck_show_log "$log"
  fi
}

# ck_latest DIR — the name in DIR/ckpt/latest (empty if none).
ck_latest() {
  cat "$1/ckpt/latest" 2>/dev/null | tr -d '\n'
}

# ck_steps FILE — the steps logged in a metrics.jsonl, space separated.
ck_steps() {
  "$py" -c '
import json, sys
print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1]) if l.strip() and "loss" in json.loads(l)))
' "$1" 2>/dev/null
}
