# deps.sh — sourced by jobs/quickstart.sh and tests/run.sh: make sure the
# build dependencies are there. As root on Debian/Ubuntu it installs what is
# missing with apt-get (once; later runs find everything and do nothing).
# Elsewhere (a cluster login node) it names what is missing and how to
# provide it, and the build goes on with what is found.
#   td_deps PACKAGE...   (Debian package names)

td_missing_packages() {
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  echo "${missing[@]:-}"
}

td_deps() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps: not a Debian/Ubuntu system; make sure these are available (environment modules):"
    echo "      MPI (MPICH or Open MPI; set MPI_HOME), parallel HDF5 (set HDF5_ROOT), libyaml,"
    echo "      OpenBLAS, oneDNN (optional, set dnnl_DIR), CUDA (optional, set CUDAToolkit_ROOT)"
    return 0
  fi
  local missing
  missing=$(td_missing_packages "$@")
  if [ -z "$missing" ]; then
    echo "deps: all $# Debian packages present"
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing $missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/tmp/trident-apt.log 2>&1 || {
      echo "deps: apt-get install failed (log: /tmp/trident-apt.log):"; tail -20 /tmp/trident-apt.log; return 1; }
    echo "deps: installed"
  else
    echo "deps: missing Debian packages: $missing"
    echo "deps: not root, so not installing them. Provide them another way, e.g. on a cluster:"
    echo "      module load cmake mpich hdf5-parallel libyaml openblas  (names vary by site)"
    echo "      export HDF5_ROOT=/path/to/parallel/hdf5 MPI_HOME=/path/to/mpi"
    echo "      export CUDAToolkit_ROOT=/path/to/cuda   (optional)"
    echo "deps: continuing with what is installed"
  fi
}

TD_BUILD_PACKAGES="cmake make gcc g++ pkg-config mpich libmpich-dev libhdf5-mpich-dev hdf5-tools \
libyaml-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev"
TD_TEST_PACKAGES="python3-torch python3-numpy python3-h5py"

# td_build BUILD_DIR [cmake args...] — configure (if needed) and build trident.
td_build() {
  local dir=$1; shift
  local src
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    echo "build: configuring $dir"
    cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.configure.log" 2>&1 || {
      cat "$dir.configure.log"; return 1; }
    grep -E "^-- trident:" "$dir.configure.log" || true
  fi
  echo "build: compiling ($(nproc) jobs)"
  cmake --build "$dir" -j"$(nproc)" 2>&1 | grep -E "error|warning|Error" || true
  [ -x "$dir/trident" ] || { echo "build: failed"; cmake --build "$dir" 2>&1 | tail -30; return 1; }
}
