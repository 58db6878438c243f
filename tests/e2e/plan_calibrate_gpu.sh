#!/usr/bin/env bash
# plan_calibrate_gpu.sh — `trident plan --calibrate --device cuda` end to end.
#
#   plan_calibrate_gpu.sh TRIDENT WORKDIR RANKS [CLUSTER]
#
# Runs the GPU calibration on RANKS ranks (MPIEXEC, default mpiexec) into
# WORKDIR/calibrated.yaml and demands: exit 0; the file loads as a cluster
# file (trident plan predicts the megatron-gpt deck on it); device.sms is
# what the device reports (TD_CUDAEMU_SMS on the emulated device); every
# measured rate positive; with 2 ranks or more, the all-reduce sizes and
# the links measured. With CLUSTER (e.g. inputs/clusters/h200.yaml, on a
# real GPU) it prints the measured values beside that file's.
set -euo pipefail
trident=$1 work=$2 ranks=$3 ref=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
out=$work/calibrated.yaml
${MPIEXEC:-mpiexec} -n "$ranks" "$trident" plan --calibrate --device cuda >"$out"
cat "$out"
fail() { echo "FAIL plan_calibrate_gpu: $*"; exit 1; }
sms=$(sed -n 's/^  sms: \([0-9]*\)$/\1/p' "$out")
[ -n "$sms" ] || fail "no device.sms in $out"
[ -z "${TD_CUDAEMU_SMS:-}" ] || [ "$sms" = "$TD_CUDAEMU_SMS" ] ||
  fail "device.sms $sms, the device reports $TD_CUDAEMU_SMS"
for key in memory_gbps kernel_us attention_efficiency; do
  v=$(sed -n "s/^  $key: \\(.*\\)\$/\\1/p" "$out")
  awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || fail "device.$key is '$v', not a positive number"
done
grep -q 'peak_tflops: {fp32: [0-9.e+-]*, bf16: [0-9.e+-]*}' "$out" || fail "no numeric peaks"
if [ "$ranks" -ge 2 ]; then
  [ "$(grep -c '^#   all-reduce ' "$out")" -ge 4 ] || fail "fewer than 4 all-reduce sizes measured"
  grep -q 'intra: {gbps: [0-9.]*, latency_us: [0-9.]*, bus_efficiency' "$out" ||
    fail "the intra-node link was not measured"
fi
# the file is a cluster file the planner uses
"$trident" plan "$root/tests/plan/megatron-gpt.yaml" --cluster "$out" --set parallel.dp=1 \
  --set model.layers=2 --set model.dim=256 --set model.heads=4 --set training.global_batch=1 \
  --json >"$work/predicted.json" || fail "trident plan cannot use $out"
if [ -n "$ref" ]; then
  echo "measured against $ref:"
  for key in memory_gbps kernel_us attention_efficiency sms; do
    printf '  %-22s measured %-12s shipped %s\n' "$key" \
      "$(sed -n "s/^  $key: \\(.*\\)\$/\\1/p" "$out")" "$(sed -n "s/^  $key: \\(.*\\)\$/\\1/p" "$ref")"
  done
  printf '  %-22s measured %-40s shipped %s (× gemm_efficiency %s)\n' peak_tflops \
    "$(sed -n 's/^  peak_tflops: //p' "$out")" "$(sed -n 's/^  peak_tflops: //p' "$ref")" \
    "$(sed -n 's/^  gemm_efficiency: //p' "$ref")"
fi
echo "PASS plan_calibrate_gpu: device.sms $sms, a cluster file the planner uses"
