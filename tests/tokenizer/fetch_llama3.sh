#!/usr/bin/env bash
# fetch_llama3.sh DIR — npm's llama3-tokenizer-js 1.2.0 into DIR, and from its
# vocabulary and merges the two files LLaMA 3's tokenizer comes in
# (tests/tokenizer/llama3.js): DIR/tokenizer.model and DIR/tokenizer.json.
#
# The tokenizer.model written is byte for byte Meta's (SHA-256 82e9d319...,
# 2,183,982 bytes, as published with every LLaMA 3 / 3.1 / 3.2 release):
# the package ships LLaMA 3's vocabulary unchanged. Idempotent: once DIR
# holds the package and both files with the pinned SHA-256, nothing is done
# again. Exits 77 (skipped) when npm or the registry is unavailable, 1 when
# what arrives is not what is pinned.
set -u
dir=${1:?usage: fetch_llama3.sh DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=1.2.0
sha_bundle=fce6d5f65f0fb800529343923af930c09c2c83ef0fb0e6c4a770d044c5726439
sha_model=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55
sha_json=c56cd5fb3bd9a01dfe62f42b221e3e670557a40535e646cee6f3cf502983b887
bundle=$dir/node_modules/llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs

sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }
have() {
  [ "$(sha "$bundle")" = "$sha_bundle" ] && [ "$(sha "$dir/tokenizer.model")" = "$sha_model" ] &&
    [ "$(sha "$dir/tokenizer.json")" = "$sha_json" ]
}

if have; then
  echo "fetch_llama3: llama3-tokenizer-js $version and its files already in $dir"
  exit 0
fi
command -v sha256sum >/dev/null || { echo "fetch_llama3: sha256sum is missing: skipped"; exit 77; }
command -v npm >/dev/null || { echo "fetch_llama3: npm is missing (Debian: apt-get install npm): skipped"; exit 77; }
command -v node >/dev/null || { echo "fetch_llama3: node is missing: skipped"; exit 77; }
mkdir -p "$dir" || exit 1
if [ "$(sha "$bundle")" != "$sha_bundle" ]; then
  echo "fetch_llama3: npm install --prefix $dir llama3-tokenizer-js@$version"
  if ! timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
       --fetch-retries=1 --fetch-timeout=60000 "llama3-tokenizer-js@$version" >"$dir/npm.log" 2>&1; then
    echo "fetch_llama3: npm install failed (no network or no registry?): skipped. Its log:"
    tail -5 "$dir/npm.log"
    exit 77
  fi
  if [ "$(sha "$bundle")" != "$sha_bundle" ]; then
    echo "fetch_llama3: llama3-tokenizer-js $version's bundle does not have the pinned SHA-256:"
    sha256sum "$bundle"
    exit 1
  fi
fi
node "$here/llama3.js" files "$dir" "$dir" || exit 1
if ! have; then
  echo "fetch_llama3: the files written do not have the pinned SHA-256 (tokenizer.model: Meta's):"
  sha256sum "$dir/tokenizer.model" "$dir/tokenizer.json"
  exit 1
fi
echo "fetch_llama3: tokenizer.model (Meta's, SHA-256 ${sha_model:0:12}...) and tokenizer.json in $dir"
