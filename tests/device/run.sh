#!/usr/bin/env bash
# run.sh — the device check, as ONE command on the bare GPU test machine
# (CUDA toolkit, cmake, ninja, Python with PyTorch; no MPICH, HDF5, libyaml,
# OpenBLAS, oneDNN, and no network):
#
#   tests/device/fetch-deps.sh          # here, once: the Debian packages -> .device/
#   device run: bash tests/device/run.sh      carry: [".device"]
#
# It unpacks .device/*.deb into a private prefix (never into /), points the
# MPICH and HDF5 compiler wrappers and pkg-config files at it, builds trident
# for sm_90 with all cores (build-device/), then runs the checks and prints
# one summary table, also written to $OUT/summary.txt (the whole log to
# $OUT/log.txt). Each check has its own time limit; the whole run is meant to
# stay under 8 minutes. Checks:
#   kernels_cuda   every CUDA op against the CPU back-end (fp32 1e-5, bf16 per op)
#   flash_cuda     the fused attention kernels against a float64 reference
#   moe_cuda       the mixture-of-experts ops against a float64 reference
#   bench_attention  fused vs materialised attention in training: GPT-2 124M at
#                  T 1024/4096/8192, LLaMA 1.2B at T 1024/4096 (tok/s, MFU, memory)
#   dcomm_nccl     an NCCL communicator of 1 rank through every device collective
#                  (tests/unit/test_dcomm.c; NCCL from the toolkit or the
#                  nvidia-nccl wheel of the machine's Python)
#   cuda_vs_cpu    the tiny deck, 20 steps, on cuda against cpu, fp32 (1e-4)
#   cuda_bf16      the same in bf16, both sides bf16 (the bf16 grid bounds)
#   moe_vs_cpu     inputs/moe-tiny.yaml (sparse blocks: router, grouped experts),
#                  20 steps, on cuda against cpu, fp32 (1e-4, the same routing)
#   staged_dp2z1   2 ranks on the one GPU, dp 2 ZeRO-1 (collectives staged
#   staged_tp2     through host memory: NCCL takes one rank per GPU), tp 2,
#                  against 1 CPU rank (1e-4)
#   ckpt_gpu_cpu   a checkpoint saved on the GPU resumed on the CPU, and the
#   ckpt_cpu_gpu   reverse (1e-4 against the uninterrupted CPU run)
#   bench_124m     GPT-2 124M bf16, T 1024, batch 16: tok/s, MFU and GPU memory
#                  of trident and of PyTorch eager and torch.compile
#   bench_offload  optimizer.offload cpu against none: GPT-2 124M bf16 tok/s and
#                  device/host memory each way, and the largest GPT-2/LLaMA shape
#                  that trains on the one GPU each way (tests/device/bench_offload.sh)
#   plan_calibrate trident plan --calibrate --device cuda on the GPU: gemm rates
#                  over shapes against the planner's tile model, bandwidth, the
#                  fused attention's rate, beside inputs/clusters/h200.yaml
# A check that cannot run yet says why in the table. Usable here too (no GPU:
# the build runs, the checks skip), e.g. to test the script itself:
#   OUT=/tmp/devout TD_DEVICE_PREFIX=/tmp/td-prefix bash tests/device/run.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/build-device/out}
chk=$root/build-device/checks # each check's output (only the summary and the log go to $OUT)
mkdir -p "$OUT" "$chk"
prefix=${TD_DEVICE_PREFIX:-/tmp/td-prefix}
log=$OUT/log.txt
summary=$OUT/summary.txt
: >"$log"
rows=()
t_start=$(date +%s)

say() { echo "device: $*" | tee -a "$log"; }
row() { rows+=("$(printf '| %-14s | %-7s | %6s | %s |' "$1" "$2" "$3" "$4")"); }
finish() {
  {
    echo "trident device check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$root" describe --always --dirty 2>/dev/null)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
      sed 's/^/gpu: /'
    echo "| check          | result  | time s | detail |"
    echo "|----------------|---------|-------:|--------|"
    printf '%s\n' "${rows[@]}"
    echo "total $(($(date +%s) - t_start)) s"
    [ -f "$chk/bench_124m.txt" ] && grep -E '^\||^GPT' "$chk/bench_124m.txt"
    [ -f "$chk/bench_offload.txt" ] && grep -E '^\||^optimizer offload' "$chk/bench_offload.txt"
  } | tee "$summary"
}

# ---- 1. unpack the packages into the prefix -------------------------------------------
lib=$prefix/usr/lib/x86_64-linux-gnu
if [ ! -f "$prefix/.unpacked" ]; then
  ls .device/*.deb >/dev/null 2>&1 || {
    say "no .device/*.deb: run tests/device/fetch-deps.sh here and carry .device"
    row unpack FAIL 0 "no packages carried"
    finish
    exit 1
  }
  mkdir -p "$prefix"
  for deb in .device/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$prefix"
    else # ar and tar: a .deb is an ar archive holding data.tar.*
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$root/$deb" && tar -xf data.tar.* -C "$prefix")
      rm -rf "$tmp"
    fi
  done
  # The wrappers and pkg-config files name /usr: point them at the prefix.
  for f in "$prefix"/usr/bin/mpicc.mpich "$prefix"/usr/bin/h5pcc.mpich "$lib"/pkgconfig/*.pc; do
    [ -f "$f" ] && sed -i -e "s|=/usr|=$prefix/usr|g" -e "s|=\"/usr|=\"$prefix/usr|g" \
      -e "s| -L/usr/lib| -L$prefix/usr/lib|g" "$f"
  done
  # Drop the libraries the machine has already (its own, newer versions
  # win), keeping those trident links directly.
  have=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for so in "$lib"/lib*.so.*; do
    name=$(basename "$so")
    case $name in libmpi* | libhdf5* | libyaml* | libutf8proc* | libcjson* | libopenblas* | libdnnl*) continue ;; esac
    soname=$(echo "$name" | sed -E 's/^(.*\.so\.[0-9]+).*/\1/')
    if echo "$have" | grep -qx "$soname"; then rm -f "$so"; fi
  done
  # libhdf5's compiler wrapper links -lcrypto -lcurl -lsz -lz: the
  # unversioned names come from -dev packages, which a bare machine lacks.
  for l in crypto curl sz z; do
    [ -e "$lib/lib$l.so" ] && continue
    for d in "$lib" /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64; do
      cand=$(ls "$d"/lib$l.so.[0-9]* 2>/dev/null | head -1)
      [ -n "$cand" ] && { ln -sf "$cand" "$lib/lib$l.so"; break; }
    done
  done
  touch "$prefix/.unpacked"
fi
export PATH=$prefix/usr/bin:$PATH
export LD_LIBRARY_PATH=$lib:$lib/hdf5/mpich:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$lib/pkgconfig
export HWLOC_PLUGINS_BLACKLIST=hwloc_pci

# NCCL: the toolkit's, else the nvidia-nccl wheel's (include/, lib/libnccl.so.2)
nccl=()
if [ ! -f /usr/local/cuda/include/nccl.h ]; then
  # the wheel's folder (nvidia/nccl/ or, in CUDA 13 layouts, under nvidia/cu13/): the
  # first include/nccl.h below site-packages/nvidia with a lib/libnccl.so* beside it
  nccl_root=$(python3 - 2>/dev/null <<'NCCLPY'
import glob, os, site
dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
for d in dirs:
    for h in sorted(glob.glob(os.path.join(d, "nvidia", "**", "include", "nccl.h"), recursive=True)):
        root = os.path.dirname(os.path.dirname(h))
        if glob.glob(os.path.join(root, "lib", "libnccl.so*")):
            print(root)
            raise SystemExit
NCCLPY
)
  if [ -n "$nccl_root" ] && [ -f "$nccl_root/include/nccl.h" ]; then
    nccl=(-DNCCL_ROOT="$nccl_root")
    export LD_LIBRARY_PATH=$nccl_root/lib:$LD_LIBRARY_PATH
  fi
fi

# ---- 2. build ---------------------------------------------------------------------
t0=$(date +%s)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
say "configuring (prefix $prefix)"
if cmake -S . -B build-device "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTD_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DMPI_C_COMPILER="$prefix/usr/bin/mpicc.mpich" \
  -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpiexec.hydra" \
  -DHDF5_C_COMPILER_EXECUTABLE="$prefix/usr/bin/h5pcc.mpich" \
  -DBLAS_LIBRARIES="$lib/openblas-pthread/libopenblas.so" \
  -Ddnnl_DIR="$lib/cmake/dnnl" "${nccl[@]}" >>"$log" 2>&1 &&
  cmake --build build-device -j "$(nproc)" >>"$log" 2>&1; then
  row build ok $(($(date +%s) - t0)) "$(grep -m1 'trident: matmul' "$log" | sed 's/.*trident: //')"
else
  row build FAIL $(($(date +%s) - t0)) "see log.txt"
  tail -40 "$log"
  finish
  exit 1
fi

# ---- 3. the checks ----------------------------------------------------------------
# check NAME LIMIT_S COMMAND...: run it with a time limit, one table row.
gpu=1
nvidia-smi -L >/dev/null 2>&1 || gpu=0
check() {
  local name=$1 limit=$2 rc t1 detail
  shift 2
  if [ $gpu = 0 ] && [ "$name" != kernels_cuda ]; then
    row "$name" skipped 0 "no GPU visible (nvidia-smi -L failed)"
    return
  fi
  t1=$(date +%s)
  say "== $name: $*"
  timeout "$limit" "$@" >"$chk/$name.txt" 2>&1
  rc=$?
  cat "$chk/$name.txt" >>"$log"
  detail=$(grep -E 'passed, .* failed|^SKIP|^PASS' "$chk/$name.txt" | tail -1)
  [ $rc != 0 ] && [ $rc != 77 ] &&
    detail=$(grep -m1 -E 'error:|^FAIL|FAIL ' "$chk/$name.txt" || tail -1 "$chk/$name.txt")
  case $rc in
    0) row "$name" ok $(($(date +%s) - t1)) "${detail:-exit 0}" ;;
    77) if [ $gpu = 1 ]; then # nvidia-smi sees a GPU: a skip is a failure to use it
          row "$name" FAIL $(($(date +%s) - t1)) "skipped on a GPU machine: ${detail:-exit 77}"
        else
          row "$name" skipped $(($(date +%s) - t1)) "${detail:-exit 77}"
        fi ;;
    124) row "$name" TIMEOUT $(($(date +%s) - t1)) "over ${limit} s" ;;
    *) row "$name" FAIL $(($(date +%s) - t1)) "exit $rc: ${detail:-$(tail -1 "$chk/$name.txt")}" ;;
  esac
}

# The training checks go through the scripts CI uses on the CPU: the tiny
# deck, 20 steps, losses, grad norms and final parameters compared with
# compare_runs.py (tests/e2e/grid_invariance.sh, ckpt_reshard.sh).
export MPIEXEC="$prefix/usr/bin/mpiexec.hydra" OMP_NUM_THREADS=2
export TD_PYTHON=$(command -v python3) # the one with h5py and numpy
gi=tests/e2e/grid_invariance.sh
work=build-device/work
cuda=(--run-set run.device=cuda)
bf16=(--set training.precision=bf16)
check kernels_cuda 120 build-device/tests/test_kernels_cuda
check flash_cuda 120 build-device/tests/test_flash cuda
check moe_cuda 60 build-device/tests/test_moe cuda
check dcomm_nccl 60 "$MPIEXEC" -n 1 build-device/tests/test_dcomm cuda
check cuda_vs_cpu 120 $gi "${cuda[@]}" build-device/trident $work cuda_fp32 1,1,1,0 1,1,1,0
check cuda_bf16 120 $gi "${cuda[@]}" --norm-rtol 3e-3 --param-rtol 1.5e-2 \
  build-device/trident $work cuda_bf16 1,1,1,0 1,1,1,0 "${bf16[@]}"
check moe_vs_cpu 120 $gi "${cuda[@]}" --deck inputs/moe-tiny.yaml \
  build-device/trident $work moe_fp32 1,1,1,0 1,1,1,0
check staged_dp2z1 150 $gi "${cuda[@]}" build-device/trident $work staged_dp2 1,1,1,0 2,1,1,1
check staged_tp2 150 $gi "${cuda[@]}" build-device/trident $work staged_tp2 1,1,1,0 1,2,1,0
check ckpt_gpu_cpu 150 tests/e2e/ckpt_reshard.sh --src-set run.device=cuda \
  build-device/trident $work gpu_to_cpu 1,1,1,0 1,1,1,0
check ckpt_cpu_gpu 150 tests/e2e/ckpt_reshard.sh --dst-set run.device=cuda \
  build-device/trident $work cpu_to_gpu 1,1,1,0 1,1,1,0
check bench_124m 300 tests/device/bench_124m.sh build-device/trident build-device/bench
check bench_offload 420 tests/device/bench_offload.sh build-device/trident build-device/bench_offload
check bench_attention 300 tests/device/bench_attention.sh build-device/trident build-device/bench_attention
check plan_calibrate 180 tests/e2e/plan_calibrate_gpu.sh build-device/trident build-device/calibrate 1 \
  inputs/clusters/h200.yaml

finish
# keep $OUT within what comes back: the summary, the log and the check outputs
exit 0
