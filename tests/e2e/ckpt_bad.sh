#!/usr/bin/env bash
# ckpt_bad.sh TRIDENT WORKDIR
#
# Bad checkpoints given to `trident train` (docs/architecture.md invariants 3 and 5,
# exit code 2): from one good checkpoint of the tiny deck (1 rank, 2 steps),
# copies are damaged with h5py and each is resumed (checkpoint.resume=PATH,
# or auto for `latest`) at 1 rank and at 2 ranks (dp 2). Every case must
#   - end every rank with exit code 2 (each rank's status is recorded by a
#     wrapper) and mpiexec with 2, within 20 s (no hang);
#   - print exactly one "trident: error:" line, which names the file (and
#     the tensor, the keys, the shapes where that applies);
#   - train no step.
# Cases: a PATH that does not exist; a file that is not HDF5; a truncated
# file; a wrong `format`; a wrong `format_version`; /model/wpe.weight
# deleted; /model/wpe.weight of the wrong shape; one element of
# /model/h.1.attn.c_attn.weight changed (checksum mismatch); a deck whose
# model differs (model.layers=2); `latest` naming a missing file.
# Then eval, generate, export and ckpt info on the checksum-damaged copy and
# on one with a single flipped bit in /model/wte.weight: each exits 2 naming
# the file, the tensor and the checksum (export writes nothing).
# Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
set -uo pipefail
[ $# -ge 2 ] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "$1" "$2"
bad=$work/bad
limit=20
echo "ckpt_bad: damaged checkpoints resumed at 1 and 2 ranks: exit 2 everywhere, one clear message"

ck_train_ok 1,1,1,0 "$bad/good" "good checkpoint (2 steps)" --set training.steps=2 \
  --set schedule.warmup=1 --set checkpoint.resume=never
good=$bad/good/ckpt/step_00000002.h5
[ -f "$good" ] || ck_abort "no $good"
files=$bad/files
rm -rf "$files"
mkdir -p "$files"

# damage MODE FILE — a copy of the good checkpoint, damaged.
damage() {
  cp "$good" "$2"
  "$py" - "$1" "$2" <<'EOF'
import sys
import h5py
import numpy as np
mode, path = sys.argv[1], sys.argv[2]
with h5py.File(path, "r+") as f:
    if mode == "format":
        f.attrs["format"] = "not-a-trident-checkpoint"
    elif mode == "version":
        old = f.attrs["format_version"]
        f.attrs.modify("format_version", np.array(2, dtype=np.asarray(old).dtype))
    elif mode == "missing":
        del f["model/wpe.weight"]
    elif mode == "shape":
        d = f["model/wpe.weight"]
        data, attrs = d[()], dict(d.attrs)
        del f["model/wpe.weight"]
        n = f.create_dataset("model/wpe.weight", data=data[: data.shape[0] // 2])
        for k, v in attrs.items():
            n.attrs[k] = v
    elif mode == "checksum":
        d = f["model/h.1.attn.c_attn.weight"]
        d[3, 5] = d[3, 5] + np.float32(0.25)
    elif mode == "bitflip":  # one bit of one element of the embedding
        d = f["model/wte.weight"]
        x = d[()]
        x.view(np.uint32)[7, 3] ^= np.uint32(1 << 9)
        d[...] = x
    else:
        sys.exit(f"unknown mode {mode}")
EOF
}

damage format "$files/wrong_format.h5" &&
damage version "$files/wrong_version.h5" &&
damage missing "$files/missing_tensor.h5" &&
damage shape "$files/wrong_shape.h5" &&
damage checksum "$files/bad_checksum.h5" &&
damage bitflip "$files/bitflip.h5" || ck_abort "cannot damage copies of $good with h5py"
size=$(stat -c %s "$good")
head -c $((size / 2)) "$good" >"$files/truncated.h5"
printf 'this is not an HDF5 file\n' >"$files/not_hdf5.h5"
mkdir -p "$files/dangling"
cp "$good" "$files/dangling/step_00000002.h5"
printf 'step_00000009.h5\n' >"$files/dangling/latest"

# case NAME RESUME "REGEX;REGEX;..." [--set k=v]... — resume at 1 and 2
# ranks; the one error line must match every (case-insensitive, extended)
# regex.
case_run() {
  local name=$1 resume=$2 regexes=$3
  shift 3
  local np
  for np in 1 2; do
    local out=$bad/run_${name}_np$np rcdir=$bad/rc_${name}_np$np
    rm -rf "$out" "$rcdir" "$out.log"
    mkdir -p "$rcdir"
    local cmd=("$mpiexec" -n "$np" sh -c '"$@"; rc=$?; echo $rc >"$TD_RCDIR/rank.${PMI_RANK:-$OMPI_COMM_WORLD_RANK}"; exit $rc'
               sh "$trident" train "$deck" --set "data.train=$corpus" --set "parallel.dp=$np"
               --set "run.out_dir=$out" --set training.steps=20 --set "checkpoint.resume=$resume" "$@")
    local t0 rc=0 dt
    t0=$(date +%s.%N)
    env "$CK_EVERY_RANK_EXITS" "TD_RCDIR=$rcdir" timeout -k 5 60 "${cmd[@]}" >"$out.log" 2>&1 </dev/null || rc=$?
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    local why=() nerr line
    [ $rc = 2 ] || why+=("mpiexec exited $rc, expected 2")
    local r
    for ((r = 0; r < np; ++r)); do
      if [ ! -f "$rcdir/rank.$r" ]; then
        why+=("rank $r recorded no exit status (killed or aborted)")
      elif [ "$(cat "$rcdir/rank.$r")" != 2 ]; then
        why+=("rank $r exited $(cat "$rcdir/rank.$r")")
      fi
    done
    nerr=$(grep -c "trident: error:" "$out.log")
    [ "$nerr" = 1 ] || why+=("$nerr 'trident: error:' lines, expected 1")
    line=$(grep -m1 "trident: error:" "$out.log")
    local IFS=';' re
    for re in $regexes; do
      grep -qiE -- "$re" <<<"$line" || why+=("the message does not match /$re/")
    done
    unset IFS
    grep -q "^step " "$out.log" && why+=("it trained steps")
    [ "$(echo "$dt > $limit" | bc)" = 1 ] && why+=("took ${dt%.*} s > $limit s")
    if [ ${#why[@]} = 0 ]; then
      pass "$name at $np rank(s): exit 2 on every rank, $(printf '%.1f' "$dt") s: ${line#*trident: error: }"
    else
      fail "$name at $np rank(s): $(printf '%s; ' "${why[@]}")"
      sed 's/^/     | /' "$out.log" | grep -v "^     | + " | tail -n 12
    fi
  done
}

F=$files
case_run missing_path "$F/does_not_exist.h5" 'does_not_exist\.h5;(not exist|no such|not found|missing)'
case_run not_hdf5 "$F/not_hdf5.h5" 'not_hdf5\.h5'
case_run truncated "$F/truncated.h5" 'truncated\.h5'
case_run wrong_format "$F/wrong_format.h5" 'wrong_format\.h5;format'
case_run wrong_version "$F/wrong_version.h5" 'wrong_version\.h5;version'
case_run missing_tensor "$F/missing_tensor.h5" 'missing_tensor\.h5;wpe\.weight;missing'
case_run wrong_shape "$F/wrong_shape.h5" 'wrong_shape\.h5;wpe\.weight;32, 128;64, 128'
case_run bad_checksum "$F/bad_checksum.h5" 'bad_checksum\.h5;h\.1\.attn\.c_attn\.weight;checksum'
case_run model_differs "$good" 'step_00000002\.h5;layers' --set model.layers=2
case_run dangling_latest auto 'latest;step_00000009\.h5;(not exist|missing|no such).*step_00000002\.h5' \
  --set "checkpoint.dir=$F/dangling"

# Every other command that reads a checkpoint verifies it: eval, generate,
# export and ckpt info refuse both damaged copies with exit 2 and one line
# naming the file, the tensor and the checksum (at 1 and 2 ranks; ckpt info
# is a one-process tool). export writes nothing.
# reader NAME FILE TENSOR NP CMD... — one reader of a damaged file.
reader() {
  local name=$1 file=$2 tensor=$3 np=$4
  shift 4
  local log=$bad/reader_${name}_np$np.log rc=0 why=()
  rm -rf "$bad/export_out"
  timeout -k 5 60 "$mpiexec" -n "$np" "$trident" "$@" >"$log" 2>&1 </dev/null || rc=$?
  [ $rc = 2 ] || why+=("exit $rc, expected 2")
  local line
  line=$(grep -m1 -iE "error:|CHECKSUM MISMATCH" "$log")
  grep -qF "$(basename "$file")" <<<"$line$(cat "$log")" || why+=("no mention of $(basename "$file")")
  grep -qF "$tensor" "$log" || why+=("no mention of $tensor")
  grep -qi "checksum" "$log" || why+=("no mention of the checksum")
  [ "$(grep -c 'trident: error:' "$log")" -le 1 ] || why+=("more than one error line")
  [ -e "$bad/export_out/model.safetensors" ] && why+=("export wrote $bad/export_out/model.safetensors")
  if [ ${#why[@]} = 0 ]; then pass "$name refuses $(basename "$file") at $np rank(s): exit 2"
  else fail "$name on $(basename "$file") at $np rank(s): $(printf '%s; ' "${why[@]}")"; sed 's/^/     | /' "$log" | tail -n 6; fi
}
for dmg in "$F/bad_checksum.h5 h.1.attn.c_attn.weight" "$F/bitflip.h5 wte.weight"; do
  set -- $dmg
  for np in 1 2; do
    reader eval "$1" "$2" $np eval "$deck" --checkpoint "$1" --set "data.train=$corpus" \
      --set "parallel.dp=$np"
    reader generate "$1" "$2" $np generate --checkpoint "$1" --tokens 4
    reader export "$1" "$2" $np export --checkpoint "$1" --out "$bad/export_out"
  done
  reader "ckpt info" "$1" "$2" 1 ckpt info "$1"
done
ck_finish
