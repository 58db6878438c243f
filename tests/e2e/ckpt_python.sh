#!/usr/bin/env bash
# ckpt_python.sh TRIDENT WORKDIR [GRID]
#
# Checkpoints readable without trident (docs/architecture.md: "h5py, h5dump and h5ls
# read it with no trident code"): trains the tiny deck 10 steps on GRID
# (default 2,2,1,3: tp 2 with ZeRO-3 over dp 2, so every tensor is written
# in pieces by several ranks) and runs tests/e2e/ckpt_h5py.py on its step-10
# checkpoint against the single-rank reference run's step 10 (shared with
# ckpt_reshard.sh; constant learning rate after the warm-up): names, shapes,
# dtypes, attributes, checksums, h5ls -r, h5dump -H, and values within
# 1e-5 x max|p| of the single-rank run's.
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
grid=${3:-2,2,1,3}
dir=$work/h5py_${grid//,/_}
echo "ckpt_python: a checkpoint saved on grid $grid read with h5py / h5ls / h5dump"
ck_ensure_ref 8
ck_ref_args 8
ck_train_ok "$grid" "$dir" "10 steps" "${ref_args[@]}" --set training.steps=10 --set checkpoint.every=10
file=$dir/ckpt/step_00000010.h5
[ -f "$file" ] || ck_abort "no $file"
IFS=, read -r dp tp pp _ <<<"$grid"
exec "$py" "$ck_src/tests/e2e/ckpt_h5py.py" "$file" --ref "$ref_dir/ckpt/step_00000010.h5" \
  --expect-step 10 --expect-grid "$dp,$tp,$pp"
