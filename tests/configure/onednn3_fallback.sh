#!/usr/bin/env bash
# onednn3_fallback.sh SRC WORKDIR — a oneDNN 3.x install must not break the
# build (issue 12, defect 8): trident's oneDNN matmul is written for the 2.x C
# API, so configuring against a oneDNN 3 package must fall back to CBLAS with
# a message, not reach the compiler's #error. A stand-in package config that
# reports version 3.4.0 is made in WORKDIR; CMake is configured against it (no
# build) and must say matmul=cblas and why.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 SRC WORKDIR" >&2
  exit 2
fi
src=$1
work=$2
rm -rf "$work"
mkdir -p "$work/dnnl3"
cat >"$work/dnnl3/dnnlConfig.cmake" <<'CFG'
# stand-in for an installed oneDNN 3.x (only what find_package looks at)
if(NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl INTERFACE IMPORTED)
endif()
CFG
cat >"$work/dnnl3/dnnlConfigVersion.cmake" <<'CFG'
set(PACKAGE_VERSION "3.4.0")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CFG
if ! cmake -S "$src" -B "$work/build" -Ddnnl_DIR="$work/dnnl3" -DTD_ENABLE_CUDA=OFF \
    -DBUILD_TESTING=OFF >"$work/configure.log" 2>&1; then
  echo "FAIL: configuring against a oneDNN 3.4.0 package failed"
  tail -20 "$work/configure.log"
  exit 1
fi
if ! grep -q "trident: matmul=cblas" "$work/configure.log"; then
  echo "FAIL: with oneDNN 3.4.0 the build still selects $(grep -o 'matmul=[a-z]*' "$work/configure.log")"
  exit 1
fi
if ! grep -q "oneDNN 3.4.0 found" "$work/configure.log"; then
  echo "FAIL: no configure message saying why oneDNN is not used"
  exit 1
fi
echo "ok   oneDNN 3.4.0: configure falls back to CBLAS and says so:"
grep -A2 "oneDNN 3.4.0 found" "$work/configure.log" | head -3 | sed 's/^/     /'
