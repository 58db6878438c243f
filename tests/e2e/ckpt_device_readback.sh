#!/usr/bin/env bash
# ckpt_device_readback.sh TRIDENT WORKDIR [DECK] — a checkpoint crosses between
# run.device: cuda and cpu with its parameters bit for bit: saved on one
# device, resumed on the other with `train --dump` (which writes the
# parameters the resumed run starts from, read back from the back-end's
# memory), /model of the dump equals /model of the checkpoint exactly, every
# tensor. Both directions. (The continued loss curves across devices are
# ckpt_reshard.sh's job.) Environment: OMP_NUM_THREADS (default 1).
set -uo pipefail
trident=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
deck=${3:-$src/inputs/tiny.yaml}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$work" && cd "$work" || exit 1
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 \
  /usr/share/common-licenses >/dev/null || { echo "prepare failed"; echo "0 passed, 1 failed"; exit 1; }
common=(--set data.train=corpus.h5 --set schedule.warmup=1 --set eval.batches=1)
for way in "cuda cpu" "cpu cuda"; do
  set -- $way
  from=$1 to=$2 d=${1}_to_${2}
  rm -rf "$d"
  if ! "$trident" train "$deck" "${common[@]}" --set run.device="$from" --set run.out_dir="$d/save" \
       --set training.steps=3 --set checkpoint.resume=never >"$d.save.log" 2>&1; then
    bad "$from: training 3 steps failed: $(tail -2 "$d.save.log")"; continue
  fi
  ckpt=$d/save/ckpt/step_00000003.h5
  if ! "$trident" train "$deck" "${common[@]}" --set run.device="$to" --set run.out_dir="$d/load" \
       --set training.steps=4 --set checkpoint.resume="$ckpt" --dump "$d/dump.h5" \
       >"$d.load.log" 2>&1; then
    bad "$to: resuming $ckpt failed: $(tail -2 "$d.load.log")"; continue
  fi
  if out=$(/usr/bin/python3 - "$ckpt" "$d/dump.h5" <<'PY'
import sys
import h5py
import numpy as np
ck, dump = (h5py.File(p, "r") for p in sys.argv[1:3])
names = sorted(ck["model"].keys())
bad = [n for n in names if n not in dump["model"] or
       not np.array_equal(ck["model"][n][...].view(np.uint32), dump["model"][n][...].view(np.uint32))]
print(f"{len(names)} tensors, {len(bad)} differ" + (f": {bad[:5]}" if bad else ""))
sys.exit(1 if bad or not names else 0)
PY
  ); then
    ok "saved on $from, read back on $to bit for bit: $out"
  else
    bad "saved on $from, read back on $to: $out"
  fi
done
echo "$pass passed, $fail failed"
[ $fail = 0 ]
