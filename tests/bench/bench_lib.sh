# bench_lib.sh — sourced by the training benchmarks (attention_bench.sh,
# head_bench.sh): bench_setup NAME, after the script has read its options
# into build, work and threads, sets trident (the binary, which must exist),
# one OpenMP team of $threads threads, the work folder, and corpus (the
# license texts prepared once per work folder, bytes).
bench_setup() {
  trident=$build/trident
  export OMP_NUM_THREADS=$threads HWLOC_PLUGINS_BLACKLIST=hwloc_pci
  [ -x "$trident" ] || { echo "$1: no $trident (build first)" >&2; exit 2; }
  mkdir -p "$work"
  corpus=$work/corpus.h5
  [ -f "$corpus" ] ||
    "$trident" prepare --out "$corpus" --val-fraction 0.1 /usr/share/common-licenses >/dev/null
}
