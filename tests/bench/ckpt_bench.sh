#!/usr/bin/env bash
# tests/bench/ckpt_bench.sh [TRIDENT] — checkpoint save and load through the
# trainer, for the "small" model and GPT-2 124M at 1, 2 and 4 ranks (data
# parallel, ZeRO-1), beside the file system's own sequential write bandwidth
# (dd conv=fsync, 1 GiB) measured in the same run. A save writes the
# parameters and both AdamW moments (3 × 4 bytes × parameters) plus metadata;
# its time (from trident's log) includes the fsyncs and the commit. The load
# is the resume of the same run (every rank reads its part, checksums
# verified). Each configuration starts after `sync`, with the previous
# configuration's files deleted, like the dd it is compared with.
set -euo pipefail
cd "$(dirname "$0")/../.."
trident=$(realpath "${1:-build/trident}")
work=${TD_BENCH_DIR:-/tmp/trident-ckpt-bench}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
[ -f "$work/corpus.h5" ] || "$trident" prepare --out "$work/corpus.h5" /usr/share/common-licenses >/dev/null
/usr/bin/python3 - "$work/gpt2.bin" <<'PY'
import numpy as np, sys
np.random.default_rng(0).integers(0, 50257, 200000, dtype=np.uint16).tofile(sys.argv[1])
PY
dd_rate() {
  local t0 t1
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$work/dd.tmp" bs=1M count=1024 conv=fsync status=none
  t1=$(date +%s.%N)
  rm -f "$work/dd.tmp"
  echo "scale=1; 1024 * 1.048576 / ($t1 - $t0)" | bc
}
printf "%-10s %5s %10s %9s %9s %9s %9s %9s\n" model ranks "file MB" "save s" "save MB/s" "load s" "load MB/s" "dd MB/s"
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
    sync  # start each measurement from a clean disk: no write-back of earlier runs pending
    ddr=$(dd_rate)
    mpiexec -n "$np" "$trident" train "${common[@]}" --set training.steps=1 \
      --set checkpoint.resume=never >"$dir.save.log" 2>&1
    mpiexec -n "$np" "$trident" train "${common[@]}" --set training.steps=2 --set checkpoint.resume=auto >"$dir.load.log" 2>&1
    file=$(ls "$dir"/ckpt/step_00000001.h5)
    mb=$(du -m --apparent-size "$file" | cut -f1)
    save=$(grep -m1 -oE 'step 1 saved to .* in [0-9.]+ s' "$dir.save.log" | grep -oE '[0-9.]+ s$' | cut -d' ' -f1)
    load=$(grep -m1 -oE 'loaded .* in [0-9.]+ s' "$dir.load.log" | grep -oE 'in [0-9.]+ s' | cut -d' ' -f2)
    printf "%-10s %5d %10d %9.2f %9.0f %9.2f %9.0f %9.0f\n" $model "$np" "$mb" "$save" \
      "$(echo "$mb / $save" | bc -l)" "$load" "$(echo "$mb / $load" | bc -l)" "$ddr"
    rm -rf "$dir"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$work"
