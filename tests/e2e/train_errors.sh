#!/usr/bin/env bash
# train_errors.sh TRIDENT MPIEXEC WORKDIR — `trident train` ends every rank
# with one clear message and the contract's exit code (docs/architecture.md) when:
# the loss or gradient norm turns NaN (3, naming the step), the deck asks for
# what this build cannot do on CPU (2: bf16 on a CBLAS build), the dataset holds tokens beyond the
# vocabulary or too few windows for one batch (2, naming the file), the
# dataset is missing (2).
set -uo pipefail
trident=$1 mpiexec=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1
mkdir -p "$work" && cd "$work" || exit 1
pass=0 fail=0
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null
printf 'short text, too short for one batch of windows\n' > short.txt
[ -f short.h5 ] || "$trident" prepare --out short.h5 --val-fraction 0 short.txt >/dev/null
deck=$src/inputs/tiny.yaml
base=(--set data.train=corpus.h5 --set checkpoint.resume=never --set run.out_dir=run)

# expect NAME CODE FRAGMENT RANKS ARGS... — exit code, one message with FRAGMENT
expect() {
  local name=$1 code=$2 frag=$3 np=$4
  shift 4
  rm -rf run
  local out rc
  out=$(timeout 120 "$mpiexec" -n "$np" "$trident" train "$deck" "${base[@]}" "$@" 2>&1)
  rc=$?
  local n
  n=$(printf '%s\n' "$out" | grep -c "trident: error:")
  if [ "$rc" = "$code" ] && printf '%s' "$out" | grep -qE -- "$frag" && [ "$n" = 1 ]; then
    echo "PASS $name (exit $rc)"
    pass=$((pass + 1))
  else
    echo "FAIL $name: exit $rc (want $code), $n error lines, fragment '$frag'"
    printf '%s\n' "$out" | tail -5 | sed 's/^/  | /'
    fail=$((fail + 1))
  fi
}

expect nan 3 "error: step [0-9]+: the (loss|gradient norm) is NaN" 2 --set parallel.dp=2 --set optimizer.lr=100 \
  --set training.grad_clip=0 --set schedule.warmup=0
expect nan_names_step 3 "error: step [0-9]+: the (loss|gradient norm) is (NaN|infinite)" 1 --set optimizer.lr=100 --set training.grad_clip=0 \
  --set schedule.warmup=0 --set training.steps=20
if "$trident" --version | grep -q "cpu matmul: cblas"; then
  expect bf16_cblas 2 "bf16 on run.device: cpu needs the oneDNN matmul engine" 2 \
    --set parallel.dp=2 --set training.precision=bf16
else
  echo "SKIP bf16_cblas (this trident has oneDNN: bf16 trains; see precision_train)"
fi
expect vocab_small 2 "corpus.h5" 2 --set parallel.dp=2 --set model.vocab_size=100
expect too_few_windows 2 "short.h5" 1 --set data.train=short.h5
expect missing_data 2 "nosuch.h5" 2 --set parallel.dp=2 --set data.train=nosuch.h5
echo "$pass passed, $fail failed"
[ $fail = 0 ]
