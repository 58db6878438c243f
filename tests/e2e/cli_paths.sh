#!/usr/bin/env bash
# cli_paths.sh TRIDENT MPIEXEC WORKDIR — the paths a user gives the commands:
#  - bad ones (missing input, a folder that does not exist, a dataset or a
#    folder given as a checkpoint, a missing checkpoint) are exit 2 on 1 and
#    2 ranks with one line naming the argument, no C trace and no HDF5
#    internals, for prepare, export, generate, eval and ckpt info;
#  - generate, export, eval and ckpt info take a run folder or its ckpt/
#    folder for its latest checkpoint, and print what the file gives;
#  - ckpt info's short form (step, model, the grid as dp x cp x tp x pp,
#    verified tensors) and --full (every tensor); export --out hf/ names
#    hf/model.safetensors; generate --help states its defaults; resuming
#    with training.steps <= the checkpoint's step warns.
set -uo pipefail
trident=$1 mpiexec=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1
mkdir -p "$work" && cd "$work" || exit 1
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null
deck=$src/inputs/tiny.yaml
rm -rf run empty && mkdir -p empty
"$trident" train "$deck" --set data.train=corpus.h5 --set run.out_dir=run --set training.steps=3 \
  --set schedule.warmup=1 >train.log 2>&1 || { cat train.log; exit 1; }
file=run/ckpt/$(cat run/ckpt/latest)

# refuse NAME REGEX NP ARGS... — exit 2, one error line matching REGEX, no trace
refuse() {
  local name=$1 re=$2 np=$3
  shift 3
  local rc=0
  timeout 60 "$mpiexec" -n "$np" "$trident" "$@" >out.log 2>&1 </dev/null || rc=$?
  local why=()
  [ $rc = 2 ] || why+=("exit $rc")
  [ "$(grep -c 'trident: error:' out.log)" = 1 ] || why+=("$(grep -c 'trident: error:' out.log) error lines")
  grep -qE -- "$re" out.log || why+=("no /$re/")
  grep -qE '^  at |H5FD|H5F__|HDF5-DIAG' out.log && why+=("a trace or HDF5 internals")
  if [ ${#why[@]} = 0 ]; then ok "$name at $np rank(s): $(grep -o 'error: .*' out.log | cut -c8-130)"
  else bad "$name at $np rank(s): $(printf '%s; ' "${why[@]}")"; sed 's/^/  | /' out.log | head -6; fi
}
for np in 1 2; do
  refuse "prepare, a missing input" "input /nonexistent/file.txt: No such file" $np \
    prepare --out x.h5 /nonexistent/file.txt
  refuse "prepare, --out in a missing folder" "--out nodir/x.h5: the folder nodir does not exist" $np \
    prepare --out nodir/x.h5 "$src/README.md"
  refuse "export of a dataset" "--checkpoint corpus.h5: not a trident checkpoint" $np \
    export --checkpoint corpus.h5 --out hf
  refuse "generate of a folder without checkpoints" "--checkpoint empty: a folder without checkpoints" $np \
    generate --checkpoint empty
  refuse "generate of a text file" "--checkpoint .*README.md: not an HDF5 file" $np \
    generate --checkpoint "$src/README.md"
  refuse "generate of a missing file" "trident generate: --checkpoint nope.h5: No such file" $np \
    generate --checkpoint nope.h5
  refuse "export of a missing file" "trident export: --checkpoint nope.h5: No such file" $np \
    export --checkpoint nope.h5 --out hf
  refuse "eval of a missing file" "trident eval: --checkpoint nope.h5: No such file" $np \
    eval "$deck" --set data.train=corpus.h5 --set parallel.dp=$np --checkpoint nope.h5
  refuse "ckpt info of a missing file" "ckpt info: nope.h5: No such file" $np ckpt info nope.h5
done
grep -q "checkpoint.resume" out.log && bad "an error blames checkpoint.resume, which was not set"

# a run folder and its ckpt/ folder mean its latest checkpoint
g() { "$trident" generate --checkpoint "$1" --tokens 20 --seed 3 2>&1; }
a=$(g "$file") b=$(g run) c=$(g run/ckpt/)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] &&
  ok "generate: a run folder and its ckpt/ folder sample what the file does" || bad "generate on folders: '$b' '$c' vs '$a'"
e1=$("$trident" eval "$deck" --set data.train=corpus.h5 --checkpoint run --json | grep -o '"val_loss": [0-9.]*')
e2=$("$trident" eval "$deck" --set data.train=corpus.h5 --checkpoint "$file" --json | grep -o '"val_loss": [0-9.]*')
[ -n "$e1" ] && [ "$e1" = "$e2" ] && ok "eval --checkpoint run: $e1 as the file" || bad "eval on a run folder: '$e1' vs '$e2'"
rm -rf hf
out=$("$trident" export --checkpoint run/ckpt --out hf/ 2>&1)
if [ -f hf/model.safetensors ] && ! grep -q '//' <<<"$out" && grep -q "$file -> hf/model.safetensors" <<<"$out"; then
  ok "export --checkpoint run/ckpt --out hf/: $out"
else
  bad "export of a folder to hf/: $out"
fi
info=$("$trident" ckpt info run 2>&1)
if grep -q "^checkpoint  $file" <<<"$info" && grep -q "^step        3 " <<<"$info" &&
   grep -q "^model       gpt2: 4 layers, dim 128, 4 heads, vocab 256, seq_len 64" <<<"$info" &&
   grep -q "^saved on    dp 1 x cp 1 x tp 1 x pp 1, ZeRO 0" <<<"$info" &&
   grep -q "^verified    156 tensors.*all checksums ok" <<<"$info" && [ "$(wc -l <<<"$info")" -le 8 ]; then
  ok "ckpt info run: the short form ($(wc -l <<<"$info") lines)"
else
  bad "ckpt info short form: $info"
fi
full=$("$trident" ckpt info --full run/ckpt 2>&1)
[ "$(grep -c 'checksum ok' <<<"$full")" = 156 ] && grep -q "^config:" <<<"$full" &&
  ok "ckpt info --full: the deck and 156 tensors, each checksum ok" || bad "ckpt info --full: $(head -3 <<<"$full")"
help=$("$trident" generate --help 2>&1)
for d in "default 200" "default 1.0" "default 0" "default 1234" "empty prompt" "parallel.tp"; do
  grep -q "$d" <<<"$help" || { bad "generate --help does not say '$d'"; continue; }
done
grep -q "default 200" <<<"$help" && ok "generate --help states its defaults"
w=$("$trident" train "$deck" --set data.train=corpus.h5 --set run.out_dir=run --set training.steps=2 \
  --set schedule.warmup=1 --set checkpoint.resume=auto 2>&1)
grep -q "warning: training.steps = 2, and the checkpoint .*step_00000003.h5 is at step 3: nothing is left to train" <<<"$w" &&
  ok "resuming with training.steps 2 <= the checkpoint's 3 warns" || bad "no warning: $w"

# eval on a pipeline trains nothing: no training bubble warning
out=$("$mpiexec" -n 2 "$trident" eval "$deck" --set data.train=corpus.h5 --set parallel.pp=2 \
  --checkpoint run --json 2>&1)
grep -q '"val_loss"' <<<"$out" && ! grep -qi "bubble" <<<"$out" &&
  ok "eval at pp 2: no pipeline bubble warning" || bad "eval at pp 2: $(grep -i -m1 'bubble\|error' <<<"$out")"

# plan: the cluster file and the counts
cl=$src/inputs/clusters/$(ls "$src/inputs/clusters" | head -1)
refuse "plan with a missing cluster file" "--cluster nope.yaml: cannot open the cluster file" 1 \
  plan "$deck" --cluster nope.yaml
refuse "plan --ranks 0" "--ranks 0: expected a whole number" 1 plan "$deck" --cluster "$cl" --ranks 0
refuse "plan --ranks abc" "--ranks abc: expected a whole number" 1 plan "$deck" --cluster "$cl" --ranks abc
# (the output whole first: grep -q in a pipe quits at its match, and under
# pipefail the plan's later line then dies of SIGPIPE and fails the check)
out=$("$trident" plan "$deck" --cluster "$cl" --ranks 2 --top 2 2>&1)
grep -q "bubble: the slowest stage's idle time over its compute time in one step, a fraction" <<<"$out" &&
  ok "plan states the bubble column's unit" || bad "plan does not state the bubble's unit"

# jobs/mpirun.sh from another folder: the deck and its paths relative to there
rm -rf elsewhere && mkdir -p elsewhere/sub && cp corpus.h5 elsewhere/ && cp "$deck" elsewhere/deck.yaml
rc=0
(cd elsewhere/sub && env -u MPIEXEC TRIDENT="$trident" bash "$src/jobs/mpirun.sh" ../deck.yaml \
   --set data.train=../corpus.h5 --set run.out_dir=../run --set training.steps=2 \
   --set schedule.warmup=1 >../mpirun.log 2>&1) || rc=$?
[ $rc = 0 ] && [ -f elsewhere/run/ckpt/step_00000002.h5 ] &&
  ok "jobs/mpirun.sh ../deck.yaml from another folder: paths relative to it, trained 2 steps" ||
  { bad "jobs/mpirun.sh from another folder: exit $rc"; tail -3 elsewhere/mpirun.log; }

echo "$pass passed, $fail failed"
[ $fail = 0 ]
