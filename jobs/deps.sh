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
    td_mpi # the chosen MPI's tools exist now
  else
    echo "deps: missing Debian packages: $missing"
    echo "deps: not root, so not installing them. Provide them another way, e.g. on a cluster:"
    echo "      module load cmake mpich hdf5-parallel libyaml openblas  (names vary by site)"
    echo "      export HDF5_ROOT=/path/to/parallel/hdf5 MPI_HOME=/path/to/mpi"
    echo "      export CUDAToolkit_ROOT=/path/to/cuda   (optional)"
    echo "deps: continuing with what is installed"
  fi
}

# TD_MPI=mpich|openmpi (default mpich): the MPI trident is built against,
# with the parallel HDF5 built for it. Debian installs both side by side and
# points the generic `mpicc`, `mpiexec` and `h5pcc` at Open MPI's when it is
# there (priority 50 against 40), so nothing here trusts those names: td_mpi
# sets the chosen MPI's own compiler wrapper, launcher and h5pcc, td_build
# hands them to CMake, and the scripts launch with "$TD_MPIEXEC". Elsewhere
# (a cluster's modules) the paths do not exist and CMake finds what is loaded.
td_mpi() {
  TD_MPI=${TD_MPI:-mpich}
  case $TD_MPI in
    mpich) TD_MPI_PACKAGES="mpich libmpich-dev libhdf5-mpich-dev" ;;
    openmpi) TD_MPI_PACKAGES="openmpi-bin libopenmpi-dev libhdf5-openmpi-dev" ;;
    *) echo "deps: TD_MPI=$TD_MPI: expected mpich or openmpi" >&2; return 2 ;;
  esac
  TD_MPICC=/usr/bin/mpicc.$TD_MPI
  TD_H5PCC=/usr/bin/h5pcc.$TD_MPI
  TD_MPIEXEC=/usr/bin/mpiexec.$TD_MPI
  [ -x "$TD_MPIEXEC" ] || TD_MPIEXEC=$(command -v mpiexec || echo mpiexec)
}
td_mpi || return 2 2>/dev/null || exit 2

TD_BUILD_PACKAGES="cmake make gcc g++ pkg-config $TD_MPI_PACKAGES hdf5-tools \
libyaml-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libutf8proc-dev libcjson-dev"
TD_TEST_PACKAGES="python3-torch python3-numpy python3-h5py python3-regex slurm-wlm munge iproute2 \
python3-protobuf protobuf-compiler python3-crcmod python3-matplotlib"

# td_mpi_cmake_args — prints the CMake arguments naming $TD_MPI's tools, one
# per line (none where they are not installed where Debian puts them).
td_mpi_cmake_args() {
  [ -x "$TD_MPICC" ] && echo "-DMPI_C_COMPILER=$TD_MPICC"
  [ -x "/usr/bin/mpiexec.$TD_MPI" ] && echo "-DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.$TD_MPI"
  [ -x "$TD_H5PCC" ] && echo "-DHDF5_C_COMPILER_EXECUTABLE=$TD_H5PCC"
  return 0
}

# td_mpi_forget_other BUILD_DIR — a build directory configured against the
# other MPI (or by a bare cmake that trusted the alternatives) loses its
# CMake cache, so that it is configured afresh: CMake's cached MPI and HDF5
# results would not follow a changed compiler wrapper.
td_mpi_forget_other() {
  local dir=$1
  if [ -f "$dir/CMakeCache.txt" ] && [ -x "$TD_MPICC" ] &&
     ! grep -qx "MPI_C_COMPILER:[A-Z]*=$TD_MPICC" "$dir/CMakeCache.txt"; then
    echo "build: $dir was configured for another MPI; configuring it for $TD_MPI"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
}

# td_build BUILD_DIR [cmake args...] — configure (if needed) and build trident
# against $TD_MPI (its mpicc, mpiexec and h5pcc named explicitly when they
# are installed where Debian puts them). TD_BUILD_TARGET names one target to
# build instead of all (it must include trident).
# td_cores: the cores this process may use. Not plain `nproc`: it reports
# OMP_NUM_THREADS when that is set (coreutils), and the tests set it to 1 for
# their ranks, which made the parallel parts of bad_decks and the fuzz stage
# run one at a time.
td_cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
td_build() {
  local dir=$1; shift
  local src mpi=()
  src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  mapfile -t mpi < <(td_mpi_cmake_args)
  td_mpi_forget_other "$dir"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    echo "build: configuring $dir ($TD_MPI)"
    cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release ${mpi[@]+"${mpi[@]}"} "$@" \
      >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
    grep -E "^-- trident:" "$dir.configure.log" || true
  fi
  local target=()
  [ -n "${TD_BUILD_TARGET:-}" ] && target=(--target "$TD_BUILD_TARGET")
  echo "build: compiling ($(td_cores) jobs${TD_BUILD_TARGET:+, target $TD_BUILD_TARGET})"
  # a failed build fails: an incremental build that stops at a compile error
  # leaves the old binaries in place, and nothing may run them as if new
  local rc=0
  cmake --build "$dir" -j"$(td_cores)" ${target[@]+"${target[@]}"} >"$dir.build.log" 2>&1 || rc=$?
  grep -E "error|warning|Error" "$dir.build.log" || true
  if [ "$rc" != 0 ] || [ ! -x "$dir/trident" ]; then
    echo "build: FAILED in $dir (exit $rc; the whole log: $dir.build.log); its end:"
    tail -40 "$dir.build.log"
    return 1
  fi
}
