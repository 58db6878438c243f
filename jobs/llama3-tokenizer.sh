#!/usr/bin/env bash
# jobs/llama3-tokenizer.sh DIR — LLaMA 3's tokenizer files for `trident
# prepare --tokenizer llama3`, for when Meta's download is not at hand:
# npm's llama3-tokenizer-js 1.2.0 (it ships LLaMA 3's vocabulary and
# merges) into DIR, and from it DIR/tokenizer.model — byte for byte Meta's
# file (SHA-256 82e9d319..., checked) — and DIR/tokenizer.json in Hugging
# Face's format. Needs node and npm (Debian: apt-get install npm) and the npm
# registry; idempotent. Exits 77 when npm or the registry is unavailable.
#   bash jobs/llama3-tokenizer.sh llama3
set -u
dir=${1:?usage: jobs/llama3-tokenizer.sh DIR}
exec bash "$(dirname "$(readlink -f "$0")")/../tests/tokenizer/fetch_llama3.sh" "$dir"
