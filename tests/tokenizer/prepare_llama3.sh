#!/usr/bin/env bash
# prepare_llama3.sh TRIDENT WORKDIR — `trident prepare --tokenizer llama3`
# through the command line (CTest: prepare_llama3):
#  1. a folder of three documents (the LLaMA 3 corpus, GPL-3, the Apache
#     license) prepared from Meta's tokenizer.model with a large buffer and a
#     tiny one, from tokenizer.json, and on 3 ranks: the same tokens, bit for
#     bit;
#  2. the dataset: uint32 /tokens, vocab_size 128256, tokenizer llama3,
#     tokenizer_sha256 of the file, bos_token 128000 and eot_token 128001;
#     all its tokens are each document's ids from npm's llama3-tokenizer-js
#     (tests/tokenizer/llama3.js) between <|begin_of_text|> and
#     <|end_of_text|>, in the folder's order;
#  3. `trident train` refuses a model whose vocab is smaller than 128256
#     (exit 2, naming the file), and trains 2 steps of a small LLaMA with
#     model.vocab_size 128256;
#  4. the dataset and the checkpoint carry tokenizer.model in /tokenizer
#     (byte for byte); `trident generate` from the checkpoint alone encodes
#     the prompt with it and prints text;
#  5. a tokenizer file of the wrong kind (GPT-2's vocab.bpe) is exit 2 with
#     one message naming the file and line.
# 77 (skipped) when npm or the registry is unavailable (fetch_llama3.sh).
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: prepare_llama3.sh TRIDENT WORKDIR} work=${2:?usage: prepare_llama3.sh TRIDENT WORKDIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" || exit 1
ref=$work/llama3
bash "$here/fetch_llama3.sh" "$ref"
rc=$?
[ $rc = 0 ] || exit $rc
cd "$work" || exit 1
fail() { echo "prepare_llama3.sh: FAIL: $*"; exit 1; }

rm -rf l3docs l3run && mkdir l3docs
# the corpus without U+0085 and U+FEFF, where the JS port's \s differs on purpose
/usr/bin/python3 "$here/llama3_corpus.py" l3docs/a.raw || fail "llama3_corpus.py"
/usr/bin/python3 -c 'import sys; b = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(b.replace(b"\xc2\x85", b"").replace(b"\xef\xbb\xbf", b""))' \
  l3docs/a.raw l3docs/a.txt && rm l3docs/a.raw || fail "corpus"
cp /usr/share/common-licenses/GPL-3 l3docs/b.txt
cp /usr/share/common-licenses/Apache-2.0 l3docs/c.txt
l3=(--tokenizer llama3 --val-fraction 0.1)
"$trident" prepare "${l3[@]}" --vocab "$ref/tokenizer.model" --out l3big.h5 --buffer-mb 64 l3docs \
  > l3big.log || fail "prepare (tokenizer.model, large buffer)"
"$trident" prepare "${l3[@]}" --vocab "$ref/tokenizer.model" --out l3tiny.h5 --buffer-mb 0.0005 \
  l3docs > l3tiny.log || fail "prepare (tiny buffer)"
"$trident" prepare "${l3[@]}" --vocab "$ref/tokenizer.json" --out l3json.h5 l3docs > l3json.log ||
  fail "prepare (tokenizer.json)"
"$mpiexec" -n 3 "$trident" prepare "${l3[@]}" --vocab "$ref/tokenizer.model" --out l3par3.h5 \
  --buffer-mb 0.002 l3docs > l3par3.log 2>&1 || { tail -5 l3par3.log; fail "prepare on 3 ranks"; }
grep -q "llama3 tokenizer, vocab_size 128256" l3big.log || fail "prepare's summary does not name the tokenizer"
for d in a b c; do
  node "$here/llama3.js" encode "$ref" l3docs/$d.txt l3ids.$d.txt || fail "llama3.js"
done
sha=$(sha256sum "$ref/tokenizer.model" | cut -d' ' -f1)
/usr/bin/python3 - "$sha" "$ref/tokenizer.model" <<'PYEOF' || exit 1
import sys
import h5py
import numpy as np
def load(p):
    with h5py.File(p, "r") as f:
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        t = np.concatenate([f["tokens"][()], f["val_tokens"][()]])
        return a, t, f["tokens"].dtype, len(f["val_tokens"])
a, big, dt, nval = load("l3big.h5")
if dt != np.uint32:
    sys.exit("prepare_llama3.sh: FAIL: /tokens is %s, want uint32" % dt)
for other in ["l3tiny", "l3json", "l3par3"]:
    _, t, _, _ = load(other + ".h5")
    if not np.array_equal(big, t):
        sys.exit("prepare_llama3.sh: FAIL: %s.h5's tokens differ from l3big.h5's (%d vs %d)"
                 % (other, len(t), len(big)))
want = {"vocab_size": 128256, "tokenizer": "llama3", "eot_token": 128001, "bos_token": 128000,
        "tokenizer_sha256": sys.argv[1]}
for k, v in want.items():
    if k not in a or str(a[k]) != str(v):
        sys.exit("prepare_llama3.sh: FAIL: attribute %s = %r, want %r" % (k, a.get(k), v))
parts = []
for d in "abc":
    parts += [[128000], np.loadtxt("l3ids.%s.txt" % d, dtype=np.int64, ndmin=1), [128001]]
ref = np.concatenate(parts)
if not np.array_equal(big.astype(np.int64), ref):
    n = min(len(big), len(ref))
    i = int(np.argmax(big[:n].astype(np.int64) != ref[:n])) if n else 0
    sys.exit("prepare_llama3.sh: FAIL: the dataset differs from llama3-tokenizer-js's ids of "
             "the 3 documents, each between 128000 and 128001, at token %d (%d vs %d tokens)"
             % (i, len(big), len(ref)))
starts = np.cumsum([0] + [len(p) for p in parts])[0:-1:3]  # each <|begin_of_text|>
with h5py.File("l3big.h5", "r") as f:
    n = len(f["tokens"])
    docs = np.concatenate([f["documents"][()], f["val_documents"][()] + n])
    want = np.unique(np.concatenate([starts, [n]]))
    if not np.array_equal(docs, want):
        sys.exit("prepare_llama3.sh: FAIL: /documents + /val_documents %s, want %s" % (docs, want))
    if f["tokenizer"]["tokenizer.model"][()] != open(sys.argv[2], "rb").read():
        sys.exit("prepare_llama3.sh: FAIL: l3big.h5:/tokenizer/tokenizer.model is not the file")
print("prepare_llama3.sh: %d uint32 tokens, the same from a tiny buffer, tokenizer.json and 3 "
      "ranks, = llama3-tokenizer-js's ids of the 3 documents, wrapped" % len(big))
PYEOF

# train: the vocab check, then 2 steps of a small LLaMA on LLaMA 3 tokens
out=$("$mpiexec" -n 1 "$trident" train "$src/inputs/llama-tiny.yaml" --set data.train=l3big.h5 \
  --set run.out_dir=l3run --set checkpoint.resume=never 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "l3big.h5.*vocab_size attribute is 128256 but the model's vocab_size is 256" <<<"$out" ||
  { echo "$out" | tail -3; fail "train with vocab 256 on a LLaMA 3 dataset: exit $rc (want 2 naming the file)"; }
OMP_NUM_THREADS=2 "$mpiexec" -n 1 "$trident" train "$src/inputs/llama-tiny.yaml" \
  --set data.train=l3big.h5 --set model.vocab_size=128256 --set model.layers=2 --set training.steps=2 \
  --set schedule.warmup=1 --set run.out_dir=l3run --set checkpoint.resume=never > l3train.log 2>&1 ||
  { tail -3 l3train.log; fail "train"; }
ck=l3run/ckpt/step_00000002.h5
[ -f "$ck" ] || fail "no checkpoint $ck after training"
/usr/bin/python3 - "$ref/tokenizer.model" "$ck" <<'PYEOF' || exit 1
import sys
import h5py
with h5py.File(sys.argv[2], "r") as f:
    g = f["tokenizer"]
    name = g.attrs["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name != "llama3" or g["tokenizer.model"][()] != open(sys.argv[1], "rb").read():
        sys.exit("prepare_llama3.sh: FAIL: %s:/tokenizer is not tokenizer.model (%r)" % (sys.argv[2], name))
print("prepare_llama3.sh: the checkpoint carries tokenizer.model")
PYEOF
OMP_NUM_THREADS=2 "$mpiexec" -n 1 "$trident" generate --checkpoint "$ck" --prompt "Hello, world" \
  --tokens 6 --temperature 0 > l3gen.txt 2> l3gen.err || { cat l3gen.err; fail "generate"; }
head -c 12 l3gen.txt | grep -q "^Hello, world$" || fail "generate did not print the prompt: $(head -c 80 l3gen.txt)"
[ "$(wc -c < l3gen.txt)" -gt 14 ] || fail "generate printed no text after the prompt"
echo "prepare_llama3.sh: generate: $(head -c 120 l3gen.txt | tr '\n' ' ')"

# a tokenizer file of the wrong kind: exit 2, one message naming file and line
printf '#version: 0.2\na b\n' > l3wrong.bpe
out=$("$mpiexec" -n 2 "$trident" prepare --tokenizer llama3 --vocab l3wrong.bpe --out l3wrong.h5 l3docs 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(grep -c "trident: error:.*l3wrong.bpe:1: not a LLaMA 3 tokenizer file" <<<"$out")" = 1 ] &&
  [ ! -e l3wrong.h5 ] || { echo "$out" | tail -3; fail "a vocab.bpe as --vocab for llama3: exit $rc (want 2, one message naming file:line)"; }
echo "prepare_llama3.sh: OK"
