#!/usr/bin/env bash
# bad_records.sh TRIDENT WORKDIR — malformed JSON Lines and chat data, and
# decks that ask for what the data has not (CTest bad_records). Each case:
# exit 2, exactly one "trident: error:" line naming the file, the line (and
# for JSON syntax the column) and the field, on 1 and 2 ranks, and no
# output file. Then --skip-bad: the same files prepare, the bad lines
# skipped and counted (said on stdout and in the attribute skipped_lines).
# Then train: data.attend: document on data without /documents (a nanoGPT
# .bin), and with model.attention: materialized — exit 2 naming the file or
# the deck key; text files prepared are documents (the empty one none) and
# train with data.attend: document.
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: bad_records.sh TRIDENT WORKDIR} work=${2:?usage: bad_records.sh TRIDENT WORKDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "bad_records.sh: FAIL: $*"; exit 1; }
good_chat='{"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}'
good_text='{"text": "a document"}'

# case FORMAT LINE3 EXPECTED... — lines 1-2 good, line 3 bad
n=0
check() {
  local fmt=$1 bad=$2
  shift 2
  n=$((n + 1))
  local f=bad$n.jsonl good
  [ "$fmt" = chat ] && good=$good_chat || good=$good_text
  printf '%s\n%s\n%b\n%s\n' "$good" "$good" "$bad" "$good" > "$f"
  for np in 1 2; do
    rm -f "bad$n.h5"
    out=$("$mpiexec" -n $np "$trident" prepare --format "$fmt" --out "bad$n.h5" "$f" 2>&1)
    rc=$?
    [ $rc = 2 ] || { echo "$out" | tail -3; fail "case $n ($fmt, $np ranks): exit $rc, want 2"; }
    [ "$(grep -c '^trident: error:' <<<"$out")" = 1 ] ||
      { echo "$out"; fail "case $n ($fmt, $np ranks): not exactly one error line"; }
    for want in "$f:3" "$@"; do
      grep -q "trident: error:.*$want" <<<"$out" ||
        { echo "$out"; fail "case $n ($fmt, $np ranks): the message does not say '$want'"; }
    done
    [ ! -e "bad$n.h5" ] && [ ! -e "bad$n.h5.tmp" ] || fail "case $n: an output file was left"
  done
  echo "bad_records.sh: case $n ($fmt): $(grep '^trident: error:' <<<"$out" | cut -c1-150)"
}
check chat '{"messages": [}' "bad$((n + 1)).jsonl:3:15" "expected a value"
check chat '{"msgs": []}' 'no field "messages"'
check chat '{"messages": [{"role": "bot", "content": "x"}]}' 'messages\[0\].role is "bot"' "system, user or assistant"
check chat '{"messages": [{"role": "user", "content": "caf\xe9"}]}' "invalid UTF-8"
check chat '{"messages": [{"role": "user", "content": 5}]}' 'messages\[0\].content is a number'
check chat '{"messages": [{"role": "user"}]}' 'messages\[0\] has no "content"'
check chat '{"messages": []}' '"messages" is empty'
check chat '{"messages": {"role": "user"}}' '"messages" is an object, expected an array'
check jsonl '{"body": "x"}' 'no field "text"'
check jsonl '[1, 2]' "expected a JSON object"
check jsonl '{"text": null}' 'field "text" is null'

# --skip-bad: every bad line of the cases above skipped and counted
cat bad*.jsonl | grep -av '"text"' > mixed_chat.jsonl
"$mpiexec" -n 2 "$trident" prepare --format chat --skip-bad --val-fraction 0 --out skip.h5 mixed_chat.jsonl > skip.log 2>&1 ||
  { cat skip.log; fail "--skip-bad"; }
nbad=$(grep -avcxF "$good_chat" mixed_chat.jsonl)
grep -q "($nbad skipped as malformed)" skip.log || { cat skip.log; fail "--skip-bad does not count $nbad skipped lines"; }
/usr/bin/python3 -c "import h5py, sys; a = h5py.File('skip.h5')['/'].attrs; sys.exit(0 if int(a['skipped_lines']) == $nbad else 1)" ||
  fail "skipped_lines is not $nbad"
echo "bad_records.sh: --skip-bad: $nbad bad lines skipped and counted"

# train: data.attend: document needs /documents (a nanoGPT .bin has none;
# text files prepared are one document each), and the fused attention
/usr/bin/python3 -c "import array; array.array('H', list(b'plain text, no documents. ' * 400)).tofile(open('plain.bin', 'wb'))"
out=$("$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" --set data.train=plain.bin \
  --set data.attend=document --set parallel.dp=2 --set run.out_dir=run --set checkpoint.resume=never 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(grep -c '^trident: error:.*plain.bin (data.train): data.attend = document needs' <<<"$out")" = 1 ] ||
  { echo "$out" | tail -3; fail "attend: document on data without /documents: exit $rc"; }
mkdir -p texts && printf 'first file. %.0s' $(seq 300) > texts/a.txt && : > texts/b.txt &&
  printf 'second file! %.0s' $(seq 300) > texts/c.txt
"$trident" prepare --val-fraction 0.3 --out texts.h5 texts > /dev/null || fail "prepare texts/"
/usr/bin/python3 - <<'PY' || fail "a text dataset's /documents are not its files' starts"
import h5py, numpy as np, os
a = os.path.getsize("texts/a.txt")
with h5py.File("texts.h5", "r") as f:
    n = len(f["tokens"])
    docs = np.concatenate([f["documents"][()], f["val_documents"][()] + n])
want = [0, a] if a < n else [0]
want += [n] if n not in want else []
assert list(docs) == sorted(want), (list(docs), want)
print("bad_records.sh: text files are documents:", list(docs))
PY
rm -rf run_texts
"$trident" train "$src/inputs/tiny.yaml" --set data.train=texts.h5 --set data.attend=document \
  --set training.steps=2 --set schedule.warmup=1 --set run.out_dir=run_texts \
  --set checkpoint.resume=never > texts.log 2>&1 || { tail -3 texts.log; fail "data.attend: document on text files"; }
out=$("$trident" train "$src/inputs/tiny.yaml" --set data.train=skip.h5 --set data.attend=document \
  --set model.attention=materialized --set run.out_dir=run --set checkpoint.resume=never 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "data.attend = document .* model.attention is materialized" <<<"$out" ||
  { echo "$out" | tail -3; fail "attend: document with materialized attention: exit $rc"; }
echo "bad_records.sh: OK"
