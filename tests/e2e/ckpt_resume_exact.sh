#!/usr/bin/env bash
# ckpt_resume_exact.sh TRIDENT WORKDIR NAME GRID [--set k=v]...
#
# Exact resumption (docs/architecture.md: checkpoints, invariant 1 "the same grid twice
# gives bit-identical results"): on GRID ("dp,tp,pp,zero[,micro_batch]"),
#   1. train the tiny deck 20 steps straight, a checkpoint every 10 steps;
#   2. copy the run, delete its step-20 checkpoint, point `latest` at step 10
#      and cut metrics.jsonl to its first 10 records — the state of a run
#      stopped right after committing step 10 (with the 20-step LR schedule);
#   3. rerun the same command with checkpoint.resume=auto;
# then the two runs must agree bit for bit: losses, val_loss and grad_norm
# (compare_runs.py --bitwise), the final /model tensors, the AdamW moments
# and the sampler state (ckpt_diff.py --bitwise --optim --state).
# Extra --set arguments go to every run. Prints PASS/FAIL lines and
# "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 4 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
name=$3 grid=$4
shift 4
extra=("$@")
dir=$work/$name
mkdir -p "$dir"
common=(--set training.steps=20 --set checkpoint.every=10 --set checkpoint.keep=0
        ${extra[@]+"${extra[@]}"})

echo "ckpt_resume_exact: grid $grid, 20 steps straight vs stopped at 10 and resumed"
ck_train_ok "$grid" "$dir/straight" "straight run" "${common[@]}" --set checkpoint.resume=never
s=$dir/straight
if [ -f "$s/ckpt/step_00000010.h5" ] && [ -f "$s/ckpt/step_00000020.h5" ] &&
   [ "$(ck_latest "$s")" = step_00000020.h5 ]; then
  pass "straight run committed step_00000010.h5 and step_00000020.h5, latest names step 20"
else
  fail "straight run: expected step_00000010.h5, step_00000020.h5 and latest = step 20; found: $(ls "$s/ckpt" 2>&1 | tr '\n' ' ') latest='$(ck_latest "$s")'"
  ck_finish
fi

# The run as if it had stopped after committing step 10.
r=$dir/resumed
rm -rf "$r" "$r.log"
cp -a "$s" "$r"
rm -f "$r/ckpt/step_00000020.h5"
printf 'step_00000010.h5\n' >"$r/ckpt/latest"
head -n 10 "$s/metrics.jsonl" >"$r/metrics.jsonl"
if [ "$(ck_steps "$r/metrics.jsonl")" != "1 2 3 4 5 6 7 8 9 10" ]; then
  fail "the straight run's first 10 metrics records are not steps 1..10: $(ck_steps "$r/metrics.jsonl")"
  ck_finish
fi

t0=$SECONDS
ck_train "$grid" "$r" "$r.log" "${common[@]}" --set checkpoint.resume=auto
if [ "$ck_rc" = 0 ]; then
  pass "resumed run exited 0 ($((SECONDS - t0)) s)"
else
  fail "resumed run exited $ck_rc"
  info "command: ${ck_cmd[*]}"
  ck_show_log "$r.log"
  ck_finish
fi
if grep -q "resuming at step 10" "$r.log" && grep -q "loaded .*step_00000010.h5" "$r.log"; then
  pass "resumed from step_00000010.h5 at step 10"
else
  fail "the log does not say it loaded step_00000010.h5 and resumed at step 10"
  ck_show_log "$r.log"
fi
if [ "$(ck_latest "$r")" = step_00000020.h5 ] && [ -f "$r/ckpt/step_00000020.h5" ]; then
  pass "resumed run committed step_00000020.h5"
else
  fail "resumed run: latest='$(ck_latest "$r")', files: $(ls "$r/ckpt" | tr '\n' ' ')"
fi
ck_compare_bitwise "$s" "$r" "losses, grad norms and final /model bitwise identical (compare_runs --bitwise)"
if out=$("$py" "$ckdiff" "$r/ckpt/step_00000020.h5" "$s/ckpt/step_00000020.h5" --bitwise --optim --state 2>&1); then
  pass "step-20 AdamW moments and sampler state bitwise identical"
else
  fail "ckpt_diff --bitwise --optim --state (step 20)"
  echo "$out" | sed 's/^/     | /'
fi
ck_finish
