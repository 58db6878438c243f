#!/usr/bin/env bash
# jobs/quickstart.sh — the main job, from a fresh Debian/Ubuntu machine:
# install what is missing, build, prepare a corpus that every Debian/Ubuntu
# system has (the license texts in /usr/share/common-licenses), train a small
# GPT on 4 MPI ranks (data parallel) for about two minutes, evaluate it,
# sample text and draw its training curves (jobs/plot.py; the run also writes
# a TensorBoard log). Idempotent: reruns reuse the build and the dataset, and start
# training afresh.
#   bash jobs/quickstart.sh            (RANKS=4 STEPS=1000 to change)
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/deps.sh
RANKS=${RANKS:-4}
STEPS=${STEPS:-1000}
echo "== quickstart: dependencies"
# shellcheck disable=SC2086
td_deps $TD_BUILD_PACKAGES python3-matplotlib
echo "== quickstart: build"
td_build build
./build/trident --version

echo "== quickstart: prepare the corpus"
mkdir -p data
if [ ! -f data/quickstart.h5 ]; then
  ./build/trident prepare --out data/quickstart.h5 --val-fraction 0.1 /usr/share/common-licenses
else
  echo "data/quickstart.h5 exists"
fi

echo "== quickstart: check the deck on $RANKS ranks"
"$TD_MPIEXEC" -n "$RANKS" ./build/trident check inputs/quickstart.yaml --set parallel.dp="$RANKS" \
  | sed -n '/^# grid/,$p'

echo "== quickstart: train on $RANKS ranks"
rm -rf runs/quickstart
export OMP_WAIT_POLICY=passive
"$TD_MPIEXEC" -n "$RANKS" ./build/trident train inputs/quickstart.yaml --set parallel.dp="$RANKS" \
  --set training.steps="$STEPS" --set checkpoint.resume=never

echo "== quickstart: evaluate the last checkpoint"
"$TD_MPIEXEC" -n "$RANKS" ./build/trident eval inputs/quickstart.yaml --set parallel.dp="$RANKS" --json

echo "== quickstart: sample text"
ckpt=runs/quickstart/ckpt/$(cat runs/quickstart/ckpt/latest)
./build/trident generate --checkpoint "$ckpt" --prompt "Everyone is permitted to " \
  --tokens 300 --temperature 0.8 --top-k 40 --seed 1
echo

echo "== quickstart: validation loss before and after"
/usr/bin/env python3 - runs/quickstart/metrics.jsonl <<'PY' || awk '/val_loss/' runs/quickstart/metrics.jsonl
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l]
first, last = rows[0]["val_loss"], rows[-1]["val_loss"]
bound = 0.6 * math.log(256)
print(f"val_loss: {first:.4f} at step {rows[0]['step']} -> {last:.4f} at step {rows[-1]['step']} "
      f"(bound 0.6 * ln 256 = {bound:.4f}: {'below' if last < bound else 'NOT below'})")
sys.exit(0 if last < bound else 1)
PY

echo "== quickstart: training curves"
/usr/bin/python3 jobs/plot.py runs/quickstart -o runs/quickstart/plot.png --title \
  "quickstart: $RANKS ranks, $STEPS steps" >/dev/null
echo "plot:        runs/quickstart/plot.png  (/usr/bin/python3 jobs/plot.py RUN_DIR... -o FILE.png)"
echo "TensorBoard: runs/quickstart/tb        (tensorboard --logdir runs/quickstart/tb)"
