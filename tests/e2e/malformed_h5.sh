#!/usr/bin/env bash
# malformed_h5.sh TRIDENT WORKDIR
#
# Malformed HDF5 checkpoints and token datasets through the command line
# (docs/architecture.md invariants 3 and 5; issue 12 "Injected faults"). From a real
# checkpoint (tiny deck, 1 rank, 2 steps) and a real dataset (`trident
# prepare`), tests/e2e/malformed_h5.py makes damaged copies: wrong dtype,
# rank or dims of a tensor, a missing tensor, missing or mistyped root
# attributes (format, format_version, step, saved_grid), a missing or
# mistyped checksum, /config missing, not a string, not YAML, a group; NaN
# and Inf in a parameter or a moment and a negative second moment (each with
# a correct checksum, so that only a value check can catch it); dims claiming
# 2^40 elements with no storage; a group where a tensor belongs; /tokens
# float, 2-D, a group, missing, 2^40 long; vocab_size a string, negative,
# zero, huge; /val_tokens float or a group. Each file goes to
#   checkpoints: `trident train` (checkpoint.resume=FILE), `trident eval
#                --checkpoint FILE`, `trident ckpt info FILE`;
#   datasets:    `trident train` (data.train or data.val = FILE), and
#                `trident eval` for /val_tokens;
# each at 1 and 2 ranks (dp = ranks). Where a case expects refusal: exit 2
# from mpiexec and from every rank (a wrapper records each rank's status),
# exactly one "trident: error:" line naming the file and the object (the
# case's regexes), no step trained. Always: within $limit s (no hang), no
# crash (no rank status >= 128, no "Segmentation", "core dumped" or
# sanitizer report). Where a case expects acceptance (float64 tensors,
# converted exactly; a file that a command does not read): exit 0.
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
gen=$ck_src/tests/e2e/malformed_h5.py
limit=${TD_MALFORMED_LIMIT:-20}
t_start=$SECONDS
echo "malformed_h5: damaged checkpoints and datasets at 1 and 2 ranks: exit 2 naming file and object, no hang, no crash"

ck_train_ok 1,1,1,0 "$work/good" "good checkpoint (2 steps)" --set training.steps=2 \
  --set schedule.warmup=1 --set checkpoint.resume=never
good=$work/good/ckpt/step_00000002.h5
[ -f "$good" ] || ck_abort "no $good"
files=$work/files
rm -rf "$files" "$work/runs"
mkdir -p "$files/ckpt" "$files/data" "$work/runs"
"$py" "$gen" ckpt "$good" "$files/ckpt" >"$files/ckpt.tsv" ||
  ck_abort "malformed_h5.py could not make the checkpoint copies"
"$py" "$gen" data "$corpus" "$files/data" >"$files/data.tsv" ||
  ck_abort "malformed_h5.py could not make the dataset copies"

# run_case NAME WHAT EXPECT REGEXES NP CMD... — run CMD (trident's arguments)
# on NP ranks and judge it.
run_case() {
  local name=$1 what=$2 expect=$3 regexes=$4 np=$5
  shift 5
  local out=$work/runs/${name}_${what}_np$np rcdir
  rcdir=$out.rc
  rm -rf "$out" "$rcdir" "$out.log"
  mkdir -p "$rcdir" "$out"
  local cmd=("$mpiexec" -n "$np" sh -c '"$@"; rc=$?; echo $rc >"$TD_RCDIR/rank.${PMI_RANK:-$OMPI_COMM_WORLD_RANK}"; exit $rc'
             sh "$trident" "$@")
  echo "+ ${cmd[*]}" >"$out.log"
  local t0 rc=0 dt
  t0=$(date +%s.%N)
  env "$CK_EVERY_RANK_EXITS" "TD_RCDIR=$rcdir" timeout -k 5 "$limit" "${cmd[@]}" >>"$out.log" 2>&1 </dev/null || rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  local why=() r st
  [ $rc = 124 ] || [ $rc = 137 ] && why+=("no result within $limit s (hang?)")
  [ $rc = "$expect" ] || why+=("mpiexec exited $rc, expected $expect")
  for ((r = 0; r < np; ++r)); do
    if [ ! -f "$rcdir/rank.$r" ]; then
      why+=("rank $r recorded no exit status (killed or aborted)")
    else
      st=$(cat "$rcdir/rank.$r")
      [ "$st" = "$expect" ] || why+=("rank $r exited $st")
      [ "$st" -ge 128 ] 2>/dev/null && why+=("rank $r died of signal $((st - 128))")
    fi
  done
  grep -qiE "segmentation|core dumped|AddressSanitizer|LeakSanitizer|runtime error:|stack smashing|double free" \
    "$out.log" && why+=("crash or sanitizer text in the output")
  local line=""
  if [ "$expect" = 2 ]; then
    local nerr
    nerr=$(grep -c "trident: error:" "$out.log")
    [ "$nerr" = 1 ] || why+=("$nerr 'trident: error:' lines, expected 1")
    line=$(grep -m1 "trident: error:" "$out.log")
    grep -qF -- "$(basename "$file")" <<<"$line" || why+=("the message does not name the file")
    local IFS=';' re
    for re in $regexes; do
      [ -n "$re" ] || continue
      grep -qiE -- "$re" <<<"$line" || why+=("the message does not match /$re/")
    done
    unset IFS
    grep -qE "^step +[0-9]+/" "$out.log" && why+=("it trained steps")
  fi
  if [ ${#why[@]} = 0 ]; then
    pass "$name: $what at $np rank(s): exit $expect, $(printf '%.1f' "$dt") s${line:+: ${line#*trident: error: }}"
  else
    fail "$name: $what at $np rank(s): $(printf '%s; ' "${why[@]}")"
    grep -v "^+ " "$out.log" | tail -n 12 | sed 's/^/     | /'
  fi
}

# expect_of EXPECTS K — the K-th (1-based) ';'-separated field.
expect_of() { cut -d';' -f"$2" <<<"$1"; }

base=(--set "data.train=$corpus" --set "data.val=$corpus" --set training.steps=3
      --set schedule.warmup=1 --set checkpoint.resume=never)

# ckpt_case NAME FILE EXPECT REGEXES NP — a damaged checkpoint through train,
# eval and ckpt info on NP ranks.
ckpt_case() {
  local name=$1 file=$2 expect=$3 regexes=$4 np=$5 e
  e=$(expect_of "$expect" 1)
  [ "$e" = - ] || run_case "$name" train "$e" "$regexes" "$np" train "$deck" "${base[@]}" \
    --set "parallel.dp=$np" --set "run.out_dir=$work/runs/${name}_train_np$np" \
    --set "checkpoint.resume=$file"
  e=$(expect_of "$expect" 2)
  [ "$e" = - ] || run_case "$name" eval "$e" "$regexes" "$np" eval "$deck" "${base[@]}" \
    --set "parallel.dp=$np" --set "run.out_dir=$work/runs/${name}_eval_np$np" --checkpoint "$file"
  e=$(expect_of "$expect" 3)
  [ "$e" = - ] || run_case "$name" "ckpt info" "$e" "$regexes" "$np" ckpt info "$file"
}
# data_case NAME FILE EXPECT REGEXES NP — a damaged dataset through train and eval.
data_case() {
  local name=$1 file=$2 expect=$3 regexes=$4 np=$5 e train
  train=("${base[@]}" --set "data.train=$file")
  case $name in val_*) train=("${base[@]}" --set "data.val=$file") ;; esac
  e=$(expect_of "$expect" 1)
  [ "$e" = - ] || run_case "$name" train "$e" "$regexes" "$np" train "$deck" "${train[@]}" \
    --set "parallel.dp=$np" --set "run.out_dir=$work/runs/${name}_train_np$np"
  e=$(expect_of "$expect" 2)
  [ "$e" = - ] || run_case "$name" eval "$e" "$regexes" "$np" eval "$deck" "${base[@]}" \
    --set "data.val=$file" --set "parallel.dp=$np" \
    --set "run.out_dir=$work/runs/${name}_eval_np$np" --checkpoint "$good"
}
# both KIND NAME FILE EXPECT REGEXES — the case at 1 and at 2 ranks side by
# side (each launch is mostly start-up: the two overlap well on 2 cores);
# their PASS/FAIL lines are printed in order and counted here.
both() {
  local kind=$1 np out
  shift
  for np in 1 2; do
    "${kind}_case" "$@" "$np" >"$work/runs/$1.$kind.np$np.out" 2>&1 </dev/null &
  done
  wait
  for np in 1 2; do
    out=$work/runs/$1.$kind.np$np.out
    cat "$out"
    ck_npass=$((ck_npass + $(grep -c "^PASS" "$out")))
    ck_nfail=$((ck_nfail + $(grep -c "^FAIL" "$out")))
  done
}
while IFS=$'\t' read -r name file expect regexes; do
  both ckpt "$name" "$file" "$expect" "$regexes"
done <"$files/ckpt.tsv"
while IFS=$'\t' read -r name file expect regexes; do
  both data "$name" "$file" "$expect" "$regexes"
done <"$files/data.tsv"
info "total $((SECONDS - t_start)) s"
ck_finish
