#!/usr/bin/env bash
# run.sh — build and run trident's libFuzzer harnesses (tests/fuzz/*.c).
#
#   tests/fuzz/run.sh [--seconds N] [--seed S] [--only NAME[,NAME...]] [--build DIR] [--strict]
#       fuzz each harness for N seconds (default 600) on a scratch copy of
#       tests/fuzz/corpus/NAME plus tests/fuzz/regressions/NAME
#       --seed S: libFuzzer's seed (default: a random one each run); with a
#       seed the inputs tried are the same on every run up to the time
#       limit (the CI's gate uses one, so a run fails on a defect, not on
#       luck)
#   tests/fuzz/run.sh --regress [--only ...] [--build DIR]
#       run every harness once over its corpus and regressions (-runs=0)
#
# Harnesses: deck, dataset, ckpt, prepare, modelfile (safetensors, llm.c files,
# model folders), tokenizer (encoder.json, vocab.bpe), llama3 (tokenizer.model,
# tokenizer.json), records (JSON Lines, chat). The build folder (default
# build-fuzz) is configured with clang, -DTD_FUZZ=ON, no CUDA, no oneDNN,
# when it has no harnesses yet, and brought up to date every time.
#
# Prints per harness its executions, exec/s, coverage features (ft:) and
# edges (cov:). Exits 1 when any harness crashed, hung (-timeout=10), ran out
# of memory (-rss_limit_mb=2048) or a sanitizer reported; the input that did it
# is copied to tests/fuzz/regressions/NAME/ (fix the defect, keep the file).
# A crash or huge allocation inside a system library (HDF5 parsing a damaged
# file, say) is not trident's code: it is listed, its input and log are kept
# in BUILD/fuzz-logs/third-party/NAME/, and fuzzing goes on; --strict makes
# those fail the run too. Full logs: BUILD/fuzz-logs/NAME.log.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SECONDS_EACH=600
REGRESS=0
STRICT=0
SEED=""
ONLY="deck,dataset,ckpt,prepare,modelfile,tokenizer,llama3,records"
BUILD=$ROOT/build-fuzz
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --seconds=*) SECONDS_EACH=${1#*=}; shift ;;
    --seed) SEED=$2; shift 2 ;;
    --seed=*) SEED=${1#*=}; shift ;;
    --regress) REGRESS=1; shift ;;
    --strict) STRICT=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --build) BUILD=$2; shift 2 ;;
    --build=*) BUILD=${1#*=}; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a HARNESSES <<<"$ONLY"

# ---- build -------------------------------------------------------------------
t0=$(date +%s)
# shellcheck source=../../jobs/deps.sh
source "$ROOT/jobs/deps.sh"   # TD_MPI's own mpicc/h5pcc, not the alternatives
mapfile -t mpi_args < <(td_mpi_cmake_args)
td_mpi_forget_other "$BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=${CC:-clang} cmake -S "$ROOT" -B "$BUILD" -DTD_FUZZ=ON -DTD_ENABLE_CUDA=OFF \
    ${mpi_args[@]+"${mpi_args[@]}"} \
    -DTD_ENABLE_DNNL=OFF -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 2; }
fi
targets=()
for h in "${HARNESSES[@]}"; do targets+=("fuzz_$h"); done
if ! make -C "$BUILD" -j"${JOBS:-2}" "${targets[@]}" >"$BUILD/fuzz-build.log" 2>&1; then
  grep -E "error|Error" "$BUILD/fuzz-build.log" | head -20
  echo "run.sh: build failed (log: $BUILD/fuzz-build.log)"
  exit 2
fi
echo "build: $(( $(date +%s) - t0 )) s ($BUILD)"

# ---- run -----------------------------------------------------------------------
# MPICH, hwloc and HDF5 keep allocations to the end of the process: their leaks
# are suppressed by library (lsan.supp), never trident's own frames. HDF5 asks
# malloc for sizes read from a damaged file and copes with NULL, hence
# allocator_may_return_null (an allocation above 2 GiB is still reported:
# -malloc_limit_mb defaults to -rss_limit_mb).
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1:handle_abort=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$HERE/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci OMP_NUM_THREADS=1
LOGS=$BUILD/fuzz-logs
THIRD=$LOGS/third-party
mkdir -p "$LOGS"
WORK=$(mktemp -d)
# the harnesses' scratch files (on tmpfs where there is one); a crashing
# harness cannot remove its own
TD_FUZZ_SCRATCH=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo "$WORK")/td-fuzz-run.XXXXXX")
export TD_FUZZ_SCRATCH
trap 'rm -rf "$WORK" "$TD_FUZZ_SCRATCH"' EXIT
FLAGS=(-timeout=10 -rss_limit_mb=2048)

# owner LOG BIN INPUT: "third-party LIB" when the finding in LOG is a crash
# or a huge allocation whose innermost frame (below the sanitizer's and libc's
# own) is in a system library (HDF5, MPICH, ...) rather than in trident, or a
# hang inside one call into such a library; else "trident". An out-of-memory
# by RSS is run again with a 256 MiB malloc limit to see whether a system
# library's huge allocation caused it; a timeout is looked at with gdb.
# A heap overflow or use-after-free counts as the library's only when the
# library made the access and allocated the block (or ASan knows no block:
# a wild pointer); a memcpy with overlapping ranges is the caller's; stack and global
# overflows, UBSan reports (trident's instrumented code) and leaks are
# always trident's.
innermost() { # LOG LINE-PATTERN: first frame after the matching line that is not the allocator's
  awk -v pat="$2" '$0 ~ pat { on = 1 } on && /^ *#[0-9]+ 0x/' "$1" |
    grep -vE " in (__sanitizer|__asan|__interceptor|__lsan|__ubsan|fuzzer::|malloc|calloc|realloc|free|operator new|raise|abort|__pthread_kill|pthread_kill|__GI_|gsignal|_start|__libc_start)" |
    grep -vE "libc\.so|libstdc\+\+|/nptl/|/stdlib/|/signal/|/csu/|/sysdeps/|string/\.\./" |
    grep -vE "\(/[^ ]*/fuzz_[a-z]+\+0x" | head -1 # the runtimes' interceptors (no source line)
}
lib_of() { # FRAME: the system library it is in, or nothing
  if grep -qE "\(/(usr/)?lib/[^ ]*/lib[^ /]*\.so" <<<"$1" && ! grep -q "$ROOT" <<<"$1"; then
    grep -oE "lib[A-Za-z0-9_+-]*\.so" <<<"$1" | head -1
  fi
}
# lib_in LOG: the system library a finding in LOG belongs to, or nothing
lib_in() {
  local log=$1 lib=""
  if grep -qE "stack-buffer-overflow|global-buffer-overflow|stack-use-after|runtime error:|detected memory leaks" "$log"; then
    return 0
  fi
  if grep -qE "heap-buffer-overflow|heap-use-after-free|double-free|attempting free" "$log"; then
    # a library's access to a block the library allocated, or to no known
    # block at all ("wild pointer": no allocation stack)
    lib=$(lib_of "$(innermost "$log" "ERROR: AddressSanitizer")")
    # trident's when trident allocated the block; a block with no frame but
    # the allocator's and libFuzzer's (the input's copy, next to which a
    # library read past its own buffer) stays the library's
    local alloc=""
    grep -q "allocated by thread" "$log" && alloc=$(innermost "$log" "allocated by thread")
    if [ -n "$lib" ] && [ -n "$alloc" ] && [ -z "$(lib_of "$alloc")" ]; then
      lib=""
    fi
  elif grep -q "memcpy-param-overlap" "$log"; then
    # no block to attribute: the library that called memcpy
    lib=$(lib_of "$(innermost "$log" "ERROR: AddressSanitizer")")
  elif grep -q "out-of-memory (malloc(" "$log"; then
    lib=$(lib_of "$(innermost "$log" "out-of-memory .malloc")")
  elif grep -qE "(SEGV|FPE|BUS|ILL|ABRT) on unknown|deadly signal|allocation-size-too-big|stack-overflow" "$log"; then
    lib=$(lib_of "$(innermost "$log" "ERROR: |deadly signal")")
  fi
  echo "$lib"
}
owner() {
  local log=$1 bin=$2 input=$3 lib=""
  lib=$(lib_in "$log")
  # no stack (the report raced the RSS check): once more, alone, with a
  # malloc limit; what that run reports decides
  if [ -z "$lib" ] && [ -n "$input" ] && grep -q "out-of-memory" "$log"; then
    "$bin" -runs=1 -malloc_limit_mb=256 -rss_limit_mb=8192 -timeout=30 "$input" >"$log.again" 2>&1
    lib=$(lib_in "$log.again")
  fi
  # a timeout: does the library call trident made return at all? (gdb)
  if [ -z "$lib" ] && [ -n "$input" ] && grep -q "timeout after" "$log"; then
    lib=$(stuck_in_library "$bin" "$input")
  fi
  if [ -n "$lib" ]; then echo "third-party $lib"; else echo trident; fi
}

# stuck_in_library BIN INPUT: run INPUT, and after 12 s look at the stack
# with gdb; when the innermost frames are a system library's and the call
# trident made into it has not returned 20 s later, print that library (a
# hang inside it); print nothing when the time goes to trident's own code,
# when the call returns (a loop of trident's around a library call), or
# when gdb is not available.
stuck_in_library() {
  local bin=$1 input=$2 pid bt k frame lib=""
  command -v gdb >/dev/null || return 0
  "$bin" -runs=1 -timeout=600 -rss_limit_mb=8192 "$input" >/dev/null 2>&1 &
  pid=$!
  sleep 12
  if kill -0 "$pid" 2>/dev/null; then
    bt=$(gdb -p "$pid" -batch -ex "bt 64" 2>/dev/null | grep -E '^#[0-9]+ ')
    # the frame trident called into: the one just inside the first trident frame
    k=$(awk -v root="$ROOT/" 'index($0, root) { sub(/^#/, "", $1); print $1 - 1; exit }' <<<"$bt")
    if [ -n "$k" ] && [ "$k" -ge 0 ]; then
      frame=$(grep -E "^#$k " <<<"$bt")
      lib=$(grep -oE "from /(usr/)?lib/[^ ]*/lib[A-Za-z0-9_+-]*\.so" <<<"$frame" | grep -oE "lib[A-Za-z0-9_+-]*\.so$")
      if [ -n "$lib" ]; then
        timeout 20 gdb -p "$pid" -batch -ex "frame $k" -ex finish >/dev/null 2>&1
        [ $? -eq 124 ] || lib=""
      fi
    fi
  fi
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "$lib"
}

# fuzz_one NAME: one harness (fuzzing to its deadline, or --regress), its
# line of the table and any finding written to $WORK/result-NAME, and
# $WORK/failed-NAME when it failed. Harnesses are independent processes (one
# thread each), so up to FUZZ_JOBS (default: the cores) run at once: each
# still gets its full time.
fuzz_one() {
  local h=$1
  bin=$BUILD/tests/fuzz/fuzz_$h
  log=$LOGS/$h.log
  reg=$HERE/regressions/$h
  art=$WORK/artifacts-$h
  dict=()
  [ -f "$HERE/$h.dict" ] && dict=(-dict="$HERE/$h.dict")
  result=ok
  third=()
  rm -f "$LOGS/$h.finding.log"
  execs=0 busy=0 ft="" cov=""
  if [ $REGRESS -eq 1 ]; then
    # files, not folders: each runs once and nothing is written back
    mkdir -p "$art"
    inputs=()
    for f in "$HERE/corpus/$h"/* "$reg"/*; do [ -f "$f" ] && inputs+=("$f"); done
    start=$(date +%s)
    "$bin" -runs=0 "${FLAGS[@]}" -artifact_prefix="$art/" "${inputs[@]}" >"$log" 2>&1
    rc=$?
    execs=$(grep -c "^Executed " "$log")
    busy=$(( $(date +%s) - start ))
    if [ $rc -ne 0 ]; then result="FAIL (exit $rc; log $log)"; fi
  else
    scratch=$WORK/corpus-$h
    mkdir -p "$scratch"
    cp "$HERE/corpus/$h"/* "$scratch"/ 2>/dev/null
    [ -d "$reg" ] && cp "$reg"/* "$scratch"/ 2>/dev/null
    deadline=$(( $(date +%s) + SECONDS_EACH ))
    : >"$log"
    round=0
    # Fuzz until the deadline; a finding in a third-party library is set
    # aside and fuzzing goes on from the corpus grown so far.
    while left=$(( deadline - $(date +%s) )); [ $left -gt 2 ]; do
      rm -rf "$art"; mkdir -p "$art"
      one=$WORK/$h.run.log
      seed=()
      [ -n "$SEED" ] && seed=(-seed=$(( SEED + round )))
      round=$(( round + 1 ))
      start=$(date +%s)
      "$bin" -max_total_time="$left" "${FLAGS[@]}" ${seed[@]+"${seed[@]}"} -artifact_prefix="$art/" \
        -print_final_stats=1 "${dict[@]}" "$scratch" >"$one" 2>&1
      rc=$?
      busy=$(( busy + $(date +%s) - start ))
      cat "$one" >>"$log"
      n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$one" | tail -1)
      [ -z "$n" ] && n=$(grep -oE '^#[0-9]+' "$one" | tail -1 | tr -d '#')
      execs=$(( execs + ${n:-0} ))
      last=$(grep -E '^#[0-9]+[[:space:]]' "$one" | tail -1)
      [ -n "$last" ] && ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
      [ -n "$last" ] && cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
      [ $rc -eq 0 ] && break
      input=$(ls "$art"/crash-* "$art"/timeout-* "$art"/oom-* "$art"/leak-* 2>/dev/null | head -1)
      who=$(owner "$one" "$bin" "$input")
      if [ -n "$input" ] && [ "${who%% *}" = third-party ] && [ "$STRICT" -eq 0 ]; then
        mkdir -p "$THIRD/$h"
        cp "$input" "$THIRD/$h/"
        cp "$one" "$THIRD/$h/$(basename "$input").log"
        third+=("$(basename "$input") (${who#third-party })")
        continue
      fi
      result="FAIL (exit $rc; log $log)"
      cp "$one" "$LOGS/$h.finding.log"
      [ -f "$one.again" ] && cat "$one.again" >>"$LOGS/$h.finding.log"
      if [ -n "$input" ]; then
        mkdir -p "$reg"
        cp "$input" "$reg/"
        result="$result; input saved as tests/fuzz/regressions/$h/$(basename "$input")"
      fi
      if [ "${who%% *}" = third-party ]; then result="$result; in ${who#third-party }"; fi
      break
    done
  fi
  rate=$(( execs / (busy > 0 ? busy : 1) ))
  printf '%-8s %10s %8s %7s %6s  %s\n' "$h" "$execs" "$rate" "${ft:-?}" "${cov:-?}" "$result"
  if [ "$result" != ok ]; then
    shown=$log
    [ -f "$LOGS/$h.finding.log" ] && shown=$LOGS/$h.finding.log
    grep -m1 -A14 -E "ERROR: |runtime error:|deadly signal|timeout after|out-of-memory" "$shown" |
      sed 's/^/    | /'
  fi
  for t in ${third[@]+"${third[@]}"}; do
    echo "    third-party finding (not trident's code): $t; input and log in $THIRD/$h/"
  done
  [ "$result" = ok ] || : >"$WORK/failed-$h"
}

status=0
PAR=${FUZZ_JOBS:-$(td_cores)}
running=0
for h in "${HARNESSES[@]}"; do
  fuzz_one "$h" >"$WORK/result-$h" 2>&1 &
  running=$((running + 1))
  if [ "$running" -ge "$PAR" ]; then wait -n; running=$((running - 1)); fi
done
wait
printf '%-8s %10s %8s %7s %6s  %s\n' harness execs exec/s ft cov result
for h in "${HARNESSES[@]}"; do
  cat "$WORK/result-$h"
  [ -f "$WORK/failed-$h" ] && status=1
done
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
