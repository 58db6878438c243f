#!/usr/bin/env bash
# tests/bench/ckpt_bench.sh [TRIDENT] — checkpoint save and load through the
# trainer, for the "small" model and GPT-2 124M at 1, 2 and 4 ranks (data
# parallel, ZeRO-1), beside the file system's own sequential write bandwidth
# (dd conv=fsync, 1 GiB) measured in the same run. A save writes the
# parameters and both AdamW moments (3 × 4 bytes × parameters) plus metadata;
# its time (from trident's log) includes the fsyncs and the commit. Each
# configuration runs three rounds of: sync, dd, one training step with its
# save, delete; it reports the median save and the median dd, and "save/dd"
# is the ratio of the two rates. The load is the resume of the last round's
# run (every rank reads its part, checksums verified). "empty ms" is the
# save of an empty checkpoint at that rank count (tests/ckpt_floor): the
# fixed cost (file create, close, fsync, commit) that any save pays.
set -euo pipefail
cd "$(dirname "$0")/../.."
trident=$(realpath "${1:-build/trident}")
floor_bin=$(dirname "$trident")/tests/ckpt_floor
work=${TD_BENCH_DIR:-/tmp/trident-ckpt-bench}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
[ -f "$work/corpus.h5" ] || "$trident" prepare --out "$work/corpus.h5" /usr/share/common-licenses >/dev/null
/usr/bin/python3 - "$work/gpt2.bin" <<'PY'
import numpy as np, sys
np.random.default_rng(0).integers(0, 50257, 200000, dtype=np.uint16).tofile(sys.argv[1])
PY
dd_once() {
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$work/dd.tmp" bs=1M count=1024 conv=fsync status=none
  t1=$(date +%s.%N)
  rm -f "$work/dd.tmp"
  echo "scale=1; 1024 * 1.048576 / ($t1 - $t0)" | bc
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# the fixed cost of a save at each rank count: an empty checkpoint, and one
# reduction (with more ranks than cores each waits for a time slice)
declare -A floor
for np in 1 2 4; do
  floor[$np]=$(mpiexec -n "$np" "$floor_bin" "$work/floor" 5 | sed -E 's/empty save ([0-9.]+) ms.*/\1/')
  rm -rf "$work/floor"
done
printf "%-10s %5s %8s %7s %9s %7s %9s %8s %7s %8s\n" model ranks "file MB" "save s" "save MB/s" \
  "load s" "load MB/s" "dd MB/s" "save/dd" "empty ms"
for model in small gpt2-124m; do
  if [ $model = small ]; then
    args=(--set data.train="$work/corpus.h5")
  else
    args=(--set data.train="$work/gpt2.bin" --set model.vocab_size=50257 --set model.seq_len=64
          --set model.layers=12 --set model.dim=768 --set model.heads=12)
  fi
  for np in 1 2 4; do
    dir=$work/$model-$np
    common=(inputs/small.yaml "${args[@]}" --set parallel.dp="$np" --set parallel.zero=1
            --set training.global_batch=4 --set parallel.micro_batch=1 --set schedule.warmup=1
            --set eval.batches=1 --set logging.every=1 --set run.out_dir="$dir")
    # three rounds of (sync, dd, one training step and its save, delete):
    # each save writes where dd wrote, on a disk with nothing pending, as dd
    # does (this virtual disk writes ~4x slower to blocks not written before:
    # a second and third 1.5 GB file kept beside the first went at ~300 MB/s)
    : >"$dir.dd"
    : >"$dir.save"
    for round in 1 2 3; do
      rm -rf "$dir"
      sync
      dd_once >>"$dir.dd"
      mpiexec -n "$np" "$trident" train "${common[@]}" --set training.steps=1 \
        --set checkpoint.resume=never >"$dir.save.log" 2>&1
      grep -m1 -oE 'step 1 saved to .* in [0-9.]+ s' "$dir.save.log" | grep -oE '[0-9.]+ s$' \
        | cut -d' ' -f1 >>"$dir.save"
    done
    ddr=$(median <"$dir.dd")
    save=$(median <"$dir.save")
    mpiexec -n "$np" "$trident" train "${common[@]}" --set training.steps=2 --set checkpoint.resume=auto >"$dir.load.log" 2>&1
    file=$(ls "$dir"/ckpt/step_00000001.h5)
    mb=$(du -m --apparent-size "$file" | cut -f1)
    load=$(grep -m1 -oE 'loaded .* in [0-9.]+ s' "$dir.load.log" | grep -oE 'in [0-9.]+ s' | cut -d' ' -f2)
    rate=$(echo "$mb / $save" | bc -l)
    printf "%-10s %5d %8d %7.2f %9.0f %7.2f %9.0f %8.0f %7.2f %8.0f\n" $model "$np" "$mb" "$save" \
      "$rate" "$load" "$(echo "$mb / $load" | bc -l)" "$ddr" "$(echo "$rate / $ddr" | bc -l)" \
      "${floor[$np]}"
    rm -rf "$dir"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$work"
