#!/usr/bin/env bash
# ckpt_reshard.sh [OPTIONS] TRIDENT WORKDIR NAME SRC_GRID DST_GRID
#
# Resharding (docs/architecture.md invariant 2 "any grid resumes any checkpoint"):
#   1. the single-rank reference: grid 1,1,1,0, 20 steps, checkpoints at 10
#      and 20 (cached in WORKDIR, shared with other tests);
#   2. train 10 steps on SRC_GRID and save (SRC_GRID 1,1,1,0 without
#      --src-set: the reference's own step-10 checkpoint is used);
#   3. resume that checkpoint (checkpoint.resume=PATH) on DST_GRID, continue
#      to step 20;
#   4. steps 11..20 must match the reference's (loss, val_loss within 1e-4
#      relative, grad_norm too) and so must the final /model tensors
#      (compare_runs.py's defaults: per tensor, relative to its own max|p_ref|;
#      the attention key bias in absolute terms); the source's step-10
#      checkpoint is also checked against the reference's.
# All runs use the same global batch and a constant learning rate after the
# 5-step warm-up, so a 10-step run ends in the state of step 10 of a 20-step
# one (with cosine decay the schedule would depend on training.steps; exact
# resumption with the deck's cosine schedule is ckpt_resume_exact.sh's job).
#
# OPTIONS (anywhere): --gb N (global batch, default 8), --src-set k=v, --dst-set k=v
# (a --set for one side only, e.g. parallel.stage_layers=[1,3]); for a side on
# another back-end: --src-rtol R (the step-10 checkpoint, ckpt_diff.py's
# --param-rtol) and --param-rtol R (the final one, compare_runs.py's).
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
gb=8 src_extra=() dst_extra=() pos=() prtol=() srtol=()
while [ $# -gt 0 ]; do
  case $1 in
    --gb) gb=$2; shift 2 ;;
    --src-set) src_extra+=(--set "$2"); shift 2 ;;
    --dst-set) dst_extra+=(--set "$2"); shift 2 ;;
    --param-rtol) prtol=(--param-rtol "$2"); shift 2 ;;
    --src-rtol) srtol=(--param-rtol "$2"); shift 2 ;;
    -*) echo "ckpt_reshard: unknown option $1" >&2; exit 2 ;;
    *) pos+=("$1"); shift ;;
  esac
done
[ ${#pos[@]} = 5 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "${pos[0]}" "${pos[1]}"
name=${pos[2]} src_grid=${pos[3]} dst_grid=${pos[4]}
dir=$work/$name
mkdir -p "$dir"
echo "ckpt_reshard: save at step 10 on $src_grid ${src_extra[*]:-}, resume on $dst_grid ${dst_extra[*]:-}, global batch $gb"

ck_ensure_ref "$gb"
ck_ref_args "$gb"

# 2. the step-10 checkpoint of the source grid
if [ "$src_grid" = 1,1,1,0 ] && [ ${#src_extra[@]} = 0 ]; then
  src_ckpt=$ref_dir/ckpt/step_00000010.h5
  info "source: the reference's step-10 checkpoint"
else
  ck_train_ok "$src_grid" "$dir/src" "source run (10 steps)" "${ref_args[@]}" \
    --set training.steps=10 --set checkpoint.every=10 "${src_extra[@]}"
  src_ckpt=$dir/src/ckpt/step_00000010.h5
  if [ -f "$src_ckpt" ] && [ "$(ck_latest "$dir/src")" = step_00000010.h5 ]; then
    pass "source grid $src_grid committed step_00000010.h5"
  else
    fail "source grid $src_grid: no committed step_00000010.h5 (latest '$(ck_latest "$dir/src")')"
    ck_finish
  fi
  IFS=, read -r sdp stp spp _ <<<"$src_grid"
  if grid=$("$py" -c 'import h5py,sys; print(",".join(str(int(x)) for x in h5py.File(sys.argv[1],"r").attrs["saved_grid"]))' "$src_ckpt" 2>&1) &&
     [ "$grid" = "$sdp,$stp,$spp" ]; then
    pass "saved_grid attribute is [$sdp, $stp, $spp]"
  else
    fail "saved_grid attribute: '$grid', expected $sdp,$stp,$spp"
  fi
  if out=$("$py" "$ckdiff" "$src_ckpt" "$ref_dir/ckpt/step_00000010.h5" --state "${srtol[@]}" 2>&1); then
    pass "source step-10 checkpoint matches the reference's step 10 (/model within 1e-5 x max|p|, same step/sampler state)"
  else
    fail "source step-10 checkpoint differs from the reference's step 10"
    echo "$out" | sed 's/^/     | /'
  fi
fi

# 3. resume on the destination grid
d=$dir/dst
rm -rf "$d" "$d.log"
t0=$SECONDS
ck_train "$dst_grid" "$d" "$d.log" "${ref_args[@]}" --set training.steps=20 \
  --set checkpoint.every=10 --set "checkpoint.resume=$src_ckpt" ${dst_extra[@]+"${dst_extra[@]}"}
if [ "$ck_rc" = 0 ]; then
  pass "resumed on $dst_grid and trained to step 20 ($((SECONDS - t0)) s)"
else
  fail "resume on $dst_grid exited $ck_rc"
  info "command: ${ck_cmd[*]}"
  ck_show_log "$d.log"
  ck_finish
fi
if grep -q "resuming at step 10" "$d.log"; then
  pass "the destination resumed at step 10"
else
  fail "the destination's log does not say 'resuming at step 10'"
fi
steps=$(ck_steps "$d/metrics.jsonl")
if [ "$steps" = "11 12 13 14 15 16 17 18 19 20" ]; then
  pass "the destination logged steps 11..20"
else
  fail "the destination logged steps '$steps', expected 11..20"
fi

# 4. against the reference's steps 11..20
cmp_ref=$dir/ref_tail
rm -rf "$cmp_ref"
mkdir -p "$cmp_ref"
"$py" -c '
import json, sys
for l in open(sys.argv[1]):
    if l.strip() and json.loads(l).get("step", 0) > 10:
        sys.stdout.write(l)
' "$ref_dir/metrics.jsonl" >"$cmp_ref/metrics.jsonl"
ln -s "$ref_dir/ckpt" "$cmp_ref/ckpt"
if out=$("$py" "$compare" "$cmp_ref" "$d" "${prtol[@]}" 2>&1); then
  pass "steps 11..20 and final /model match the uninterrupted single-rank run (compare_runs.py defaults)"
  echo "$out" | grep -E "^(metrics|params):" | sed 's/^/     /'
else
  fail "compare_runs reference (1,1,1, steps 11..20) vs $src_grid -> $dst_grid"
  echo "$out" | sed 's/^/     | /'
fi
ck_finish
