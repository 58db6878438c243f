#!/usr/bin/env bash
# make_seeds.sh TRIDENT — (re)make the seed corpora of tests/fuzz/corpus with
# trident itself: decks from inputs/ and tests/decks/bad/, tiny datasets in
# each format, a tiny checkpoint (the model of fuzz_ckpt.c's TINY_DECK) and
# texts for prepare. Run from anywhere; overwrites the generated seeds only.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 TRIDENT" >&2
  exit 2
fi
TRIDENT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
C=$HERE/corpus
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1 HWLOC_PLUGINS_BLACKLIST=hwloc_pci
mkdir -p "$C"/deck "$C"/dataset "$C"/ckpt "$C"/prepare

# deck: the example decks, the bad decks, and --set lines in front of one
for f in "$ROOT"/inputs/*.yaml; do cp "$f" "$C/deck/input-$(basename "$f")"; done
for f in "$ROOT"/tests/decks/bad/*.yaml; do
  # a bad deck's "# args: --set k=v ..." become the harness's --set lines
  args=$(sed -n 's/^# args: //p' "$f" | head -1)
  { set -- $args
    while [ $# -gt 0 ]; do
      if [ "$1" = --set ] && [ $# -gt 1 ]; then echo "--set $2"; shift; fi
      shift
    done
    cat "$f"; } >"$C/deck/bad-$(basename "$f")"
done
{ printf -- '--ranks 4\n--set parallel.dp=2\n--set parallel.tp=2\n--set run.name="x y"\n'
  cat "$ROOT/inputs/tiny.yaml"; } >"$C/deck/sets-tiny.yaml"

# dataset: 2 option bytes (T = 1 + b0 % 16, bit 7 = val split; vocab index)
# in front of the file
head -c 300 "$ROOT/README.md" >"$TMP/t.txt"
"$TRIDENT" prepare --out "$TMP/d.h5" --val-fraction 0.2 "$TMP/t.txt" >/dev/null
"$TRIDENT" prepare --out "$TMP/n.h5" --val-fraction 0 "$TMP/t.txt" >/dev/null
{ printf '\x07\x00'; cat "$TMP/d.h5"; } >"$C/dataset/hdf5-val.bin"
{ printf '\x83\x00'; cat "$TMP/d.h5"; } >"$C/dataset/hdf5-val-split.bin"
{ printf '\x03\x00'; cat "$TMP/n.h5"; } >"$C/dataset/hdf5-train-only.bin"
python_free_tokens() { # N: N little-endian uint16 tokens 0..255
  local i; for ((i = 0; i < $1; ++i)); do printf "\\x$(printf %02x $((i * 37 % 256)))\\x00"; done
}
{ printf '\x04\x00'; python_free_tokens 40; } >"$C/dataset/nanogpt.bin"
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 24 & 255)))"; }
{ printf '\x05\x00'; le32 20240520; le32 1; le32 40; head -c $((1024 - 12)) /dev/zero
  python_free_tokens 40; } >"$C/dataset/llmc-gpt2.bin"
{ printf '\x05\x04'; le32 20240801; le32 7; le32 20; head -c $((1024 - 12)) /dev/zero
  for ((i = 0; i < 20; ++i)); do le32 $((i * 6151)); done; } >"$C/dataset/llmc-llama3.bin"

# ckpt: one step of the tiny model, with its optimizer state
head -c 1024 "$ROOT/README.md" >"$TMP/train.txt"
"$TRIDENT" prepare --out "$TMP/train.h5" --val-fraction 0 "$TMP/train.txt" >/dev/null
cat >"$TMP/tiny.yaml" <<DECK
run: {name: fuzz, seed: 7, threads: 1, out_dir: $TMP/run}
model: {vocab_size: 256, seq_len: 8, layers: 1, dim: 8, heads: 2}
data: {train: $TMP/train.h5}
training: {global_batch: 2, steps: 1}
checkpoint: {resume: never, verify: true}
DECK
"$TRIDENT" train "$TMP/tiny.yaml" >/dev/null
cp "$TMP/run/ckpt/step_00000001.h5" "$C/ckpt/tiny-step1.h5"

# prepare: 1 option byte (val fraction, buffer, folder), pieces split at \0\xff
printf '\x01hello, world\n' >"$C/prepare/one-file.bin"
{ printf '\x16'; head -c 200 "$ROOT/README.md"; printf '\x00\xff'; printf 'second file\n'
  printf '\x00\xff'; printf '\x00\xff'; printf 'fourth'; } >"$C/prepare/folder-pieces.bin"
{ printf '\x0b'; head -c 400 "$ROOT/docs/architecture.md" 2>/dev/null || head -c 400 "$ROOT/README.md"
  printf '\x00\xff\xc3\xa9t\xc3\xa9\n'; } >"$C/prepare/files-val.bin"
printf '\x00' >"$C/prepare/empty.bin"
du -sh "$C"
