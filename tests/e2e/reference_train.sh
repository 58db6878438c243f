#!/usr/bin/env bash
# reference_train.sh TRIDENT WORKDIR [DECK [--set KEY=VALUE...]] — the PyTorch
# oracle on the tiny deck (or DECK, e.g. inputs/llama-tiny.yaml: the oracle
# follows model.arch; the --set overrides go to trident, e.g. the fused
# attention at a T of several tiles):
# trident trains 20 steps on one rank and dumps its initial weights, batches,
# losses and step-0 gradients; tests/reference/check_train.py recomputes all
# of it in float64 with PyTorch and compares (loss 1e-5, gradients 1e-4 of
# max, update 1e-4 in norm, 20-step loss curve 1e-4). TD_REPLAY_STEPS=N
# replays only the first N steps (a mixture of experts: once a token of a
# near-tie routes differently in float32 and float64, the curves part).
set -euo pipefail
trident=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
deck=${3:-$src/inputs/tiny.yaml}
shift $(($# < 3 ? $# : 3))
mkdir -p "$work"
cd "$work"
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null
rm -rf run # a fresh run: resume: never refuses an old one
OMP_NUM_THREADS=2 "$trident" train "$deck" --set data.train=corpus.h5 \
  --set run.out_dir=run --dump dump.h5 --set training.steps=20 "$@"
/usr/bin/python3 "$src/tests/reference/check_train.py" dump.h5 ${TD_REPLAY_STEPS:+--steps "$TD_REPLAY_STEPS"}
