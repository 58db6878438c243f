#!/usr/bin/env bash
# tests/run.sh — install what is missing, build trident, run the whole CTest
# suite (unit, MPI at 1–8 ranks, end-to-end, PyTorch reference comparisons).
# Idempotent: a second run installs nothing and rebuilds only what changed.
#   bash tests/run.sh [ctest args...]      e.g. bash tests/run.sh -R deck
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/deps.sh
echo "== tests/run.sh: dependencies"
# shellcheck disable=SC2086
td_deps $TD_BUILD_PACKAGES $TD_TEST_PACKAGES
echo "== tests/run.sh: build (build/, warnings are errors)"
td_build build -DTD_WERROR=ON
echo "== tests/run.sh: ctest"
export OMP_WAIT_POLICY=passive HWLOC_PLUGINS_BLACKLIST=hwloc_pci
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
