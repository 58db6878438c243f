#!/usr/bin/env bash
# run_llama3.sh TEST_BPE [WORKDIR] — trident's LLaMA 3 tokenizer against npm's
# llama3-tokenizer-js 1.2.0 (CTest: tokenizer_llama3). Builds nothing.
#
# 1. fetch_llama3.sh: the package, and from it tokenizer.model (Meta's file,
#    byte for byte: its published SHA-256 is pinned) and tokenizer.json
#    (Hugging Face's format) in WORKDIR/llama3 (cached; 77 without npm);
# 2. llama3_corpus.py: GPT-2's hard corpus plus LLaMA 3's own hard cases
#    (digit runs, upper-case contractions, CR/LF runs, special tokens and
#    look-alikes);
# 3. llama3.js encode: the package's ids; test_bpe --dialect llama3-js on
#    each file: the same ids, decode(encode(x)) == x, the file's SHA-256,
#    and the regex classes of every code point (oracle.js --classes);
# 4. the llama3 dialect (tiktoken's and Hugging Face's \s) on the same
#    corpus: how many ids differ from the JS port's, said, not failed (they
#    differ on purpose at U+0085 and U+FEFF, td_bpe.h).
# Exit 0 when every comparison passed, 1 when one failed, 77 when the
# references could not be had.
set -u
bin=${1:?usage: run_llama3.sh TEST_BPE [WORKDIR]}
work=${2:-${TMPDIR:-/tmp}/trident-tokenizer}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -x "$bin" ] || { echo "run_llama3.sh: $bin is not an executable"; exit 1; }
ref=$work/llama3
mkdir -p "$ref" || exit 1
bash "$here/fetch_llama3.sh" "$ref"
rc=$?
[ $rc = 0 ] || exit $rc
py=/usr/bin/python3
[ -x "$py" ] || { echo "run_llama3.sh: $py is missing: skipped"; exit 77; }
"$py" "$here/llama3_corpus.py" "$work/corpus.llama3.txt" || exit 1

fail=0
node "$here/llama3.js" encode "$ref" "$work/corpus.llama3.txt" "$work/ids.llama3-js.txt" || exit 1
node "$here/oracle.js" --classes "$work/classes.js.txt" || exit 1
for f in tokenizer.model tokenizer.json; do
  echo "== llama3-js: trident from $f against llama3-tokenizer-js"
  h=$(sha256sum "$ref/$f" | cut -d' ' -f1)
  "$bin" --quiet --dialect llama3-js --hash "$h" --classes "$work/classes.js.txt" \
    "$ref/$f" "$work/corpus.llama3.txt" "$work/ids.llama3-js.txt" || fail=1
done
echo "== llama3: the same corpus with Unicode White_Space as \\s (tiktoken, Hugging Face)"
"$bin" --quiet --dialect llama3 "$ref/tokenizer.model" "$work/corpus.llama3.txt" - \
  >"$work/llama3.log" 2>&1 || { cat "$work/llama3.log"; fail=1; }
[ $fail = 0 ] && echo "run_llama3.sh: passed" || echo "run_llama3.sh: FAILED"
exit $fail
