#!/usr/bin/env bash
# tests/bench/ckpt_async_bench.sh [TRIDENT] — what a checkpoint save costs
# training, synchronous against asynchronous (checkpoint.async: true), on one
# rank with one compute thread (the other core free for the background
# writer, as the host cores of a GPU node are).
#
# The deck: GPT-2 shaped, 8 layers, dim 768, 12 heads, vocabulary 32768, T 128,
# one sequence a step (82 M parameters: a ~1 GB checkpoint), random tokens.
# Each mode trains 20 steps and saves every 4 (four saves during the run, the
# fifth at the end, which is synchronous in both modes and not counted); a
# third run saves only at the end ("none"). Per mode it prints
#   stall ms    the median time a save kept training waiting: the whole save
#               (sync), or the copy of the state, the file's metadata and the
#               commit (async: "training waited" in the log);
#   stall/sync  that against the synchronous save's;
#   write s     the median time the file's data took to write (sync: the
#               save; async: the background writer), and MB/s its rate;
#   run s       the 20 steps' wall time ("trident: done"), and "per save":
#               (run s − none's run s) / 4, what each save really added,
#               including the writer's interference with the steps.
# Rounds: TD_BENCH_ROUNDS (default 3); the table gives medians over rounds.
set -euo pipefail
cd "$(dirname "$0")/../.."
trident=$(realpath "${1:-build/trident}")
work=${TD_BENCH_DIR:-/tmp/trident-ckpt-async-bench}
rounds=${TD_BENCH_ROUNDS:-3}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive HWLOC_PLUGINS_BLACKLIST=hwloc_pci
/usr/bin/python3 - "$work/tokens.bin" <<'PY'
import sys
import numpy as np
np.random.default_rng(0).integers(0, 32768, 400000, dtype=np.uint16).tofile(sys.argv[1])
PY
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }
deck=(inputs/small.yaml --set "data.train=$work/tokens.bin" --set model.vocab_size=32768
      --set model.seq_len=128 --set model.layers=8 --set model.dim=768 --set model.heads=12
      --set training.global_batch=1 --set training.steps=20 --set eval.batches=1
      --set checkpoint.keep=0 --set checkpoint.resume=never)
for round in $(seq 1 "$rounds"); do
  for mode in none sync async; do
    out=$work/$mode
    rm -rf "$out"
    sync
    every=4 async=false
    [ $mode = none ] && every=0
    [ $mode = async ] && async=true
    "$trident" train "${deck[@]}" --set checkpoint.every=$every --set checkpoint.async=$async \
      --set "run.out_dir=$out" >"$out.log" 2>&1
    grep -oE 'done, 20 steps in [0-9.]+ s' "$out.log" | grep -oE '[0-9.]+ s$' | cut -d' ' -f1 \
      >>"$work/$mode.run"
    [ $mode = none ] && continue
    file=$(ls "$out"/ckpt/step_00000004.h5)
    du -m --apparent-size "$file" | cut -f1 >"$work/mb"
    for s in 4 8 12 16; do
      if [ $mode = sync ]; then
        t=$(grep -oE "step $s saved to .* in [0-9.]+ s$" "$out.log" | grep -oE '[0-9.]+ s$' | cut -d' ' -f1)
        echo "$t" >>"$work/sync.stall"
        echo "$t" >>"$work/sync.write"
      else
        line=$(grep -E "checkpoint: step $s saved to" "$out.log")
        echo "$line" | grep -oE 'training waited [0-9.]+' | grep -oE '[0-9.]+$' >>"$work/async.stall"
        echo "$line" | grep -oE 'written in [0-9.]+' | grep -oE '[0-9.]+$' >>"$work/async.write"
      fi
    done
  done
done
mb=$(cat "$work/mb")
none_run=$(median <"$work/none.run")
sync_stall=$(median <"$work/sync.stall")
echo "checkpoint ${mb} MB, $rounds rounds, 1 rank, OMP_NUM_THREADS=1; $(getconf _NPROCESSORS_ONLN) cores"
printf "%-6s %9s %10s %8s %7s %7s %9s\n" mode "stall ms" "stall/sync" "write s" "MB/s" "run s" "per save"
for mode in none sync async; do
  run=$(median <"$work/$mode.run")
  if [ $mode = none ]; then
    printf "%-6s %9s %10s %8s %7s %7.2f %9s\n" none - - - - "$run" -
    continue
  fi
  stall=$(median <"$work/$mode.stall")
  write=$(median <"$work/$mode.write")
  printf "%-6s %9.0f %10.3f %8.2f %7.0f %7.2f %9.3f\n" $mode "$(echo "$stall * 1000" | bc -l)" \
    "$(echo "$stall / $sync_stall" | bc -l)" "$write" "$(echo "$mb / $write" | bc -l)" "$run" \
    "$(echo "($run - $none_run) / 4" | bc -l)"
done
