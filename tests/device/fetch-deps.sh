#!/usr/bin/env bash
# fetch-deps.sh — run on a development machine (Debian 12, network): download
# into .device/ the Debian packages trident needs to build and run on the bare
# GPU test machine, which has the CUDA toolkit, cmake, ninja and Python but no
# MPICH, parallel HDF5, libyaml, OpenBLAS, oneDNN, utf8proc or cJSON, and no
# network. tests/device/run.sh unpacks them there into a private prefix.
#
# The list is what `ldd build/trident`, `ldd mpiexec.hydra` and the CMake
# configuration need here, minus what every Linux with a C compiler has
# (libc6, libgcc-s1, libstdc++6, libgomp1, zlib1g); run.sh drops any library
# the machine already has, so the machine's own (newer) ones win.
#   tests/device/fetch-deps.sh            (idempotent: keeps what is there)
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.device
mkdir -p "$dest"

packages=(
  # MPI: headers, the compiler wrapper, the hydra launcher, the library
  mpich libmpich12 libmpich-dev libhwloc15 libucx0 libnuma1 libslurm38
  # parallel HDF5 for MPICH and what libhdf5 links
  libhdf5-mpich-103-1 libhdf5-mpich-dev libaec0 libsz2 libcurl4
  libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0 libsasl2-2 libbrotli1
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
  # the deck reader, the tokenizer's Unicode tables, safetensors JSON
  libyaml-0-2 libyaml-dev libutf8proc2 libutf8proc-dev libcjson1 libcjson-dev
  # CPU matmuls: OpenBLAS (found by CMake) and oneDNN 2.x (bf16 on the CPU)
  libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev
  libgfortran5 libquadmath0 libdnnl2 libdnnl-dev
  # what a minimal image may lack: pkg-config for libyaml, OpenSSL for libcurl
  pkgconf pkgconf-bin libpkgconf3 pkg-config libssl3
)

missing=()
for p in "${packages[@]}"; do
  ls "$dest/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! (cd "$dest" && apt-get download "${missing[@]}" >/dev/null 2>"../$dest.log"); then
    echo "fetch-deps: apt-get download failed (as root, run apt-get update first):" >&2
    cat "$dest.log" >&2
    exit 1
  fi
  rm -f "$dest.log"
fi
n=$(ls "$dest"/*.deb | wc -l)
size=$(du -sm "$dest" | cut -f1)
echo "fetch-deps: $n packages in $dest/ ($size MiB); carry it: run(carry=[\".device\"])"
if [ "$size" -gt 56 ]; then
  echo "fetch-deps: $dest is $size MiB: with the tree it may pass the 64 MiB a device call carries" >&2
fi
