#!/usr/bin/env bash
# tests/run.sh — install what is missing, build trident, run the whole CTest
# suite (unit, MPI at 1–8 ranks, end-to-end, PyTorch reference comparisons),
# then, in one AddressSanitizer + UndefinedBehaviorSanitizer build
# (build-cudaemu), the CUDA back-end on the emulated CUDA device of
# tests/cudaemu (its kernels compiled as C++ for the CPU, the CTest label
# `cudaemu`; no GPU needed) and the sanitizer subset of the CPU code (the
# label `sanitize`), then the code built against
# Open MPI (build-ompi, the label `openmpi` through Open MPI's mpiexec), and
# the fuzz harnesses for a bounded time (tests/fuzz/run.sh, clang +
# libFuzzer, build-fuzz). The main build uses TD_MPI (default mpich; see
# jobs/deps.sh). Idempotent: a second run installs nothing and rebuilds only
# what changed.
#   bash tests/run.sh                  everything (what CI runs)
#   bash tests/run.sh [ctest args...]  the main build's tests only, e.g. -R deck
# Environment: TD_FUZZ_SECONDS (per harness, default 30), TD_FUZZ_SEED
# (libFuzzer seed of the gate, default 1), TD_TEST_STAGES
# (default "main cudaemu sanitize openmpi fuzz"; with ctest arguments "main").
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/deps.sh
echo "== tests/run.sh: dependencies"
# shellcheck disable=SC2086
td_deps $TD_BUILD_PACKAGES $TD_TEST_PACKAGES
if [ $# -gt 0 ]; then stages=${TD_TEST_STAGES:-main}; else stages=${TD_TEST_STAGES:-main cudaemu sanitize openmpi fuzz}; fi
has() { case " $stages " in *" $1 "*) return 0 ;; esac; return 1; }
export OMP_WAIT_POLICY=passive HWLOC_PLUGINS_BLACKLIST=hwloc_pci
status=0
t0=$(date +%s)
# CTest slots: one per core and one more. A test declares the cores it keeps
# busy (PROCESSORS: 2 for MPI runs on two or more ranks, 1 for one process, or
# for a test that mostly waits — the Slurm and multi-host clusters, generate
# one short process after another); the extra slot lets such a test run
# beside one that computes, where it would otherwise leave a core idle.
# Tests that time the machine run alone (RUN_SERIAL).
jobs=$(( $(td_cores) + 1 ))
# What each stage took and every test's time, printed at the end so that
# growth is seen when it happens (docs/development.md, "Continuous integration")
times=$(mktemp) tests_log=$(mktemp)
trap 'rm -f "$times" "$tests_log"' EXIT
stage_done() { # stage_done NAME START
  echo "$1 $(( $(date +%s) - $2 ))" >>"$times"
}
# run_ctest STAGE ctest-args...: ctest with its output shown and kept for the summary
run_ctest() {
  local stage=$1 rc=0
  shift
  ctest "$@" 2>&1 | tee "$tests_log.$stage" || rc=1 # pipefail: ctest's status
  sed -n "s/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) [ .*]*\([A-Za-z*][A-Za-z* ]*[a-z*]\) *\([0-9.]*\) sec.*/\3 $stage \1 \2/p" \
    "$tests_log.$stage" >>"$tests_log"
  # under CI=true a skip is a failure, except the GPU-only tests (one list)
  local skipped name
  skipped=$(sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) .*Skipped.*/\1/p' "$tests_log.$stage")
  for name in $skipped; do
    if grep -qx "$name" tests/gpu_only_tests.txt; then
      echo "== tests/run.sh: $name skipped (GPU-only: tests/gpu_only_tests.txt)"
    elif [ "${CI:-}" = true ]; then
      echo "== tests/run.sh: FAILED: $name was skipped, and under CI=true a skip is a failure (only the tests of tests/gpu_only_tests.txt may skip)"
      rc=1
    else
      echo "== tests/run.sh: $name skipped (a failure under CI=true)"
    fi
  done
  rm -f "$tests_log.$stage"
  return $rc
}
summary() {
  echo "== tests/run.sh: stage times (s)"
  awk '{printf "   %-10s %5d\n", $1, $2; t += $2} END {printf "   %-10s %5d (%.1f min)\n", "total", t, t / 60}' "$times"
  echo "== tests/run.sh: the ten slowest tests (s, stage, name, result)"
  sort -rn "$tests_log" | head -10 | awk '{printf "   %7.1f  %-8s %s %s %s\n", $1, $2, $3, $4, $5}'
}
if has main; then
  s0=$(date +%s)
  echo "== tests/run.sh: build (build/, warnings are errors)"
  td_build build -DTD_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 # CUDA: the test GPU's (H200)
  echo "== tests/run.sh: ctest"
  run_ctest main --test-dir build --output-on-failure -j"$jobs" --timeout 900 "$@" || status=1
  stage_done main "$s0"
  echo "== tests/run.sh: main suite done at $(( $(date +%s) - t0 )) s"
fi
if has cudaemu || has sanitize; then
  # One AddressSanitizer + UBSan build serves two stages: the CUDA back-end
  # on the emulated device (its kernels compiled as C++ for the CPU, label
  # cudaemu) and the sanitizer subset of the CPU code (label sanitize), which
  # runs the same CPU code whether or not the build also carries the emulated
  # CUDA module (it is loaded only for run.device: cuda).
  s0=$(date +%s)
  echo "== tests/run.sh: build with AddressSanitizer + UBSan and the emulated CUDA device (build-cudaemu/)"
  # an existing configuration is refreshed first: make cannot build a target
  # that a stale configuration does not know yet
  if [ -f build-cudaemu/CMakeCache.txt ]; then cmake build-cudaemu >/dev/null || status=1; fi
  td_build build-cudaemu -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTD_CUDA_EMULATE=ON -DTD_SANITIZE=address,undefined -DTD_WERROR=ON
  labels=""
  has cudaemu && labels=cudaemu
  has sanitize && labels=${labels:+$labels|}sanitize
  # tests too long for this stage carry the label cudaemu_long as well (run
  # them with ctest --test-dir build-cudaemu -L cudaemu_long)
  echo "== tests/run.sh: ctest -L '^($labels)\$' -LE cudaemu_long (build-cudaemu/)"
  run_ctest asan --test-dir build-cudaemu -L "^($labels)\$" -LE cudaemu_long --output-on-failure \
    -j"$jobs" --timeout 900 || status=1
  # what this stage leaves out, and why, said at run time
  long=$(ctest --test-dir build-cudaemu -N -L cudaemu_long 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ')
  [ -z "$long" ] || echo "== tests/run.sh: not run in this stage (label cudaemu_long: each takes over ~30 s under AddressSanitizer on 2 cores, together more than the stage's budget; ctest --test-dir build-cudaemu -L cudaemu_long runs them): $long"
  stage_done asan "$s0"
  echo "== tests/run.sh: emulated CUDA device and sanitizer subset done at $(( $(date +%s) - t0 )) s ($(( $(date +%s) - s0 )) s this stage)"
fi
if has openmpi && [ "$TD_MPI" != openmpi ]; then
  s0=$(date +%s)
  echo "== tests/run.sh: build against Open MPI (build-ompi/)"
  (
    TD_MPI=openmpi
    td_mpi
    # shellcheck disable=SC2086
    td_deps $TD_MPI_PACKAGES
    if [ -f build-ompi/CMakeCache.txt ]; then cmake build-ompi >/dev/null; fi
    TD_BUILD_TARGET=openmpi_all td_build build-ompi -DTD_ENABLE_CUDA=OFF -DTD_WERROR=ON
  ) || { echo "== tests/run.sh: FAILED: the Open MPI build (a build error stops everything)"; exit 1; }
  echo "== tests/run.sh: ctest -L openmpi (build-ompi/, Open MPI's mpiexec)"
  run_ctest openmpi --test-dir build-ompi -L openmpi --output-on-failure -j"$jobs" \
    --timeout 900 || status=1
  stage_done openmpi "$s0"
  echo "== tests/run.sh: Open MPI subset done at $(( $(date +%s) - t0 )) s"
fi
if has fuzz; then
  s0=$(date +%s)
  echo "== tests/run.sh: fuzzing (build-fuzz/, ${TD_FUZZ_SECONDS:-30} s per harness, seed ${TD_FUZZ_SEED:-1})"
  td_deps clang libclang-rt-14-dev || echo "fuzz: could not install clang's libFuzzer (Debian 12 names)"
  if command -v clang >/dev/null 2>&1 &&
      ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    bash tests/fuzz/run.sh --seconds "${TD_FUZZ_SECONDS:-30}" --seed "${TD_FUZZ_SEED:-1}" || status=1
  else
    echo "fuzz: SKIPPED: clang with libFuzzer (Debian: clang libclang-rt-14-dev) is not installed"
    # under CI a skip is a failure
    [ "${CI:-}" = true ] && { echo "fuzz: FAILED: a skipped stage fails under CI=true"; status=1; }
  fi
  stage_done fuzz "$s0"
  echo "== tests/run.sh: fuzzing done at $(( $(date +%s) - t0 )) s"
fi
summary
[ $status = 0 ] && echo "== tests/run.sh: all stages passed ($stages)" ||
  echo "== tests/run.sh: FAILED (see above)"
exit $status
