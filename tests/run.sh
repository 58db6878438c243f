#!/usr/bin/env bash
# tests/run.sh — install what is missing, build trident, run the whole CTest
# suite (unit, MPI at 1–8 ranks, end-to-end, PyTorch reference comparisons),
# then the CUDA back-end on the emulated CUDA device of tests/cudaemu (its
# kernels compiled as C++ for the CPU, under AddressSanitizer +
# UndefinedBehaviorSanitizer: build-cudaemu, the CTest label `cudaemu`; no
# GPU needed), the same code under AddressSanitizer +
# UndefinedBehaviorSanitizer (a second build, build-asan, and the CTest label
# `sanitize`), built against
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
if has main; then
  echo "== tests/run.sh: build (build/, warnings are errors)"
  td_build build -DTD_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 # CUDA: the test GPU's (H200)
  echo "== tests/run.sh: ctest"
  ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@" || status=1
  echo "== tests/run.sh: main suite done at $(( $(date +%s) - t0 )) s"
fi
if has cudaemu; then
  echo "== tests/run.sh: build for the emulated CUDA device, ASan + UBSan (build-cudaemu/)"
  s0=$(date +%s)
  # an existing configuration is refreshed first: make cannot build a target
  # (cudaemu_all) that a stale configuration does not know yet
  if [ -f build-cudaemu/CMakeCache.txt ]; then cmake build-cudaemu >/dev/null || status=1; fi
  TD_BUILD_TARGET=cudaemu_all td_build build-cudaemu -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTD_CUDA_EMULATE=ON -DTD_SANITIZE=address,undefined -DTD_WERROR=ON
  # tests too long for this stage carry the label cudaemu_long as well (run
  # them with ctest --test-dir build-cudaemu -L cudaemu_long)
  echo "== tests/run.sh: ctest -L cudaemu -LE cudaemu_long (build-cudaemu/)"
  ctest --test-dir build-cudaemu -L cudaemu -LE cudaemu_long --output-on-failure -j"$(nproc)" \
    --timeout 900 || status=1
  echo "== tests/run.sh: emulated CUDA device done at $(( $(date +%s) - t0 )) s ($(( $(date +%s) - s0 )) s this stage)"
fi
if has sanitize; then
  echo "== tests/run.sh: build with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
  td_build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTD_SANITIZE=address,undefined \
    -DTD_ENABLE_CUDA=OFF -DTD_WERROR=ON
  echo "== tests/run.sh: ctest -L sanitize (build-asan/)"
  ctest --test-dir build-asan -L sanitize --output-on-failure -j"$(nproc)" --timeout 900 || status=1
  echo "== tests/run.sh: sanitizer subset done at $(( $(date +%s) - t0 )) s"
fi
if has openmpi && [ "$TD_MPI" != openmpi ]; then
  echo "== tests/run.sh: build against Open MPI (build-ompi/)"
  (
    TD_MPI=openmpi
    td_mpi
    # shellcheck disable=SC2086
    td_deps $TD_MPI_PACKAGES
    td_build build-ompi -DTD_ENABLE_CUDA=OFF -DTD_WERROR=ON
  ) || { echo "== tests/run.sh: FAILED: the Open MPI build (a build error stops everything)"; exit 1; }
  echo "== tests/run.sh: ctest -L openmpi (build-ompi/, Open MPI's mpiexec)"
  ctest --test-dir build-ompi -L openmpi --output-on-failure -j"$(nproc)" --timeout 900 || status=1
  echo "== tests/run.sh: Open MPI subset done at $(( $(date +%s) - t0 )) s"
fi
if has fuzz; then
  echo "== tests/run.sh: fuzzing (build-fuzz/, ${TD_FUZZ_SECONDS:-30} s per harness, seed ${TD_FUZZ_SEED:-1})"
  td_deps clang libclang-rt-14-dev || echo "fuzz: could not install clang's libFuzzer (Debian 12 names)"
  if command -v clang >/dev/null 2>&1 &&
      ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    bash tests/fuzz/run.sh --seconds "${TD_FUZZ_SECONDS:-30}" --seed "${TD_FUZZ_SEED:-1}" || status=1
  else
    echo "fuzz: SKIPPED: clang with libFuzzer (Debian: clang libclang-rt-14-dev) is not installed"
  fi
  echo "== tests/run.sh: fuzzing done at $(( $(date +%s) - t0 )) s"
fi
[ $status = 0 ] && echo "== tests/run.sh: all stages passed ($stages)" ||
  echo "== tests/run.sh: FAILED (see above)"
exit $status
