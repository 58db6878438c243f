#!/usr/bin/env bash
# choice_eval.sh TRIDENT WORKDIR — `trident eval --task choice` against a
# float64 oracle (CTest choice_eval):
#  1. a synthetic set where the right ending is known: sentences of a small
#     grammar; the ending that continues the context as the corpus does is
#     right, three others are strings of letters the corpus never holds; a
#     tiny GPT-2 (bytes) and a tiny LLaMA train 60 steps on the corpus;
#  2. `trident eval DECK --task choice items.jsonl --scores S --json` on one
#     rank and on dp 2, tp 2 × pp 2 and cp 2 (LLaMA): the same accuracy,
#     every ending's mean loss within 1e-5 relative of one rank's;
#  3. tests/reference/choice_ref.py recomputes every ending's mean loss in
#     float64 from the checkpoint's weights (1e-5 relative), and acc and
#     acc_norm from them: equal to trident's; the trained model must beat
#     chance (acc > 0.5 of 4 endings) or the set tests nothing;
#  4. bad files: a missing label, an out-of-range label, a single ending —
#     exit 2 with FILE:LINE and the field.
# Environment: MPIEXEC (default mpiexec).
set -euo pipefail
trident=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
py=/usr/bin/python3
mkdir -p "$work" && cd "$work"
fail() { echo "choice_eval.sh: FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1

"$py" - <<'PY'
import json, random
r = random.Random(5)
subj = ["the cat", "a dog", "my friend", "the teacher", "our robot"]
verb = ["reads", "eats", "paints", "finds", "moves"]
obj = ["a red book", "the green apple", "a small box", "the old chair", "a blue kite"]
lines = []
for _ in range(3000):
    lines.append("%s %s %s." % (r.choice(subj), r.choice(verb), r.choice(obj)))
open("corpus.txt", "w").write(" ".join(lines) + "\n")
with open("items.jsonl", "w") as f:
    for i in range(24):
        s, v, o = r.choice(subj), r.choice(verb), r.choice(obj)
        right = "%s." % o
        # wrong endings: letters the corpus never strings together
        wrong = [" ".join("".join(r.choice("qxzjvkw") for _ in range(r.randint(3, 6)))
                          for _ in range(3)) + "." for _ in range(3)]
        label = r.randrange(4)
        endings = wrong[:label] + [right] + wrong[label:]
        f.write(json.dumps({"ctx": "%s %s" % (s, v), "endings": endings, "label": label,
                            "ind": i}) + "\n")
PY
"$trident" prepare --val-fraction 0.05 --out corpus.h5 corpus.txt > /dev/null
for deck in tiny llama-tiny; do
  rm -rf "run_$deck"
  OMP_NUM_THREADS=2 "$trident" train "$src/inputs/$deck.yaml" --set data.train=corpus.h5 \
    --set training.steps=60 --set schedule.warmup=5 --set checkpoint.resume=never \
    --set run.out_dir="run_$deck" > "train_$deck.log" 2>&1 || { tail -3 "train_$deck.log"; fail "train $deck"; }
  ck=run_$deck/ckpt/step_00000060.h5
  ev() { # NAME NP ARGS...
    local name=$1 np=$2
    shift 2
    "$mpiexec" -n "$np" "$trident" eval "$src/inputs/$deck.yaml" --checkpoint "$ck" \
      --set data.train=corpus.h5 --task choice items.jsonl --scores "scores_${deck}_$name.jsonl" \
      --json "$@" > "eval_${deck}_$name.json" 2> "eval_${deck}_$name.err" ||
      { cat "eval_${deck}_$name.err"; fail "$deck: eval on $name"; }
  }
  ev one 1
  ev dp2 2 --set parallel.dp=2
  ev tp2pp2 4 --set parallel.tp=2 --set parallel.pp=2
  grids="dp2 tp2pp2"
  if [ "$deck" = llama-tiny ]; then ev cp2 2 --set parallel.cp=2; grids="$grids cp2"; fi
  "$py" "$src/tests/reference/choice_ref.py" "$ck" items.jsonl "eval_${deck}_one.json" \
    "scores_${deck}_one.jsonl" $(for g in $grids; do echo "eval_${deck}_$g.json" "scores_${deck}_$g.jsonl"; done) ||
    fail "$deck: trident's choice scores differ from the oracle's or across grids"
done

# during training: eval.choice scored at every evaluation, in the metrics
rm -rf run_every
OMP_NUM_THREADS=2 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
  --set training.steps=60 --set schedule.warmup=5 --set checkpoint.resume=never \
  --set run.out_dir=run_every --set eval.every=30 --set eval.choice=items.jsonl > train_every.log 2>&1 ||
  { tail -3 train_every.log; fail "train with eval.choice"; }
"$py" - <<'PY' || fail "eval.choice: the metrics' choice_acc at step 60 is not eval --task choice's"
import json, sys
rows = [json.loads(l) for l in open("run_every/metrics.jsonl")]
got = {r["step"]: (r["choice_acc"], r["choice_acc_norm"]) for r in rows if "choice_acc" in r}
cli = json.load(open("eval_tiny_one.json"))
print("choice_eval.sh: eval.choice in the metrics at steps %s: %s" % (sorted(got), got))
sys.exit(0 if sorted(got) == [30, 60] and got[60] == (cli["acc"], cli["acc_norm"]) else 1)
PY

# bad files
i=0
for bad in '{"ctx": "a", "endings": ["b", "c"]}|"label"' '{"ctx": "a", "endings": ["b", "c"], "label": 2}|"label"' \
           '{"ctx": "a", "endings": ["b"], "label": 0}|at least 2'; do
  i=$((i + 1))
  printf '%s\n%s\n' '{"ctx": "x", "endings": ["y", "z"], "label": 1}' "${bad%|*}" > "bad$i.jsonl"
  out=$("$mpiexec" -n 2 "$trident" eval "$src/inputs/tiny.yaml" --checkpoint run_tiny/ckpt/step_00000060.h5 \
    --set data.train=corpus.h5 --set parallel.dp=2 --task choice "bad$i.jsonl" 2>&1) && fail "bad$i.jsonl was accepted"
  [ "$(grep -c "^trident: error: bad$i.jsonl:2: .*${bad#*|}" <<<"$out")" = 1 ] ||
    { echo "$out"; fail "bad$i.jsonl: want one message naming line 2 and ${bad#*|}"; }
done
echo "choice_eval.sh: OK"
