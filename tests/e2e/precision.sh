#!/usr/bin/env bash
# precision.sh TRIDENT WORKDIR [STEPS] — training.precision: bf16 through the
# command line (docs/architecture.md, "Precision"):
#  1. `trident check` names the precision and the bf16 working copy;
#  2. the quickstart model trained STEPS (default 300) steps in bf16 and in
#     fp32 from the same seed on the same windows (one rank each, side by
#     side): mean relative loss difference over the last 100 steps <= 2%,
#     final validation loss within 1.5%, and the bf16 run's act_bytes below
#     the fp32 run's (the bf16 activations; the saving is printed);
#  3. checkpoints hold fp32 (the masters) whatever the precision, and resume
#     across precisions and grids: the fp32 run's checkpoint continues in
#     bf16 at dp 2 / ZeRO-3, the bf16 run's in fp32 at pp 2 (from 20 steps
#     before the end); each ends within 2% of the uninterrupted run's last
#     loss.
# Environment: MPIEXEC (default mpiexec).
set -euo pipefail
trident=$1 work=$2 steps=${3:-300}
src=$(cd "$(dirname "$0")/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work"
cd "$work"
rm -rf runs
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null
every=$(( steps - 20 ))
common=(--set data.train=corpus.h5 --set parallel.dp=1 --set parallel.zero=0
        --set training.steps="$steps" --set checkpoint.every="$every" --set checkpoint.keep=5
        --set eval.every="$steps" --set logging.every=10 --set run.threads=1)
fail() { echo "precision: FAIL: $*"; exit 1; }

# 1. check
"$trident" check "$src/inputs/quickstart.yaml" "${common[@]}" --set training.precision=bf16 >check.txt ||
  fail "trident check refused bf16 (see $work/check.txt)"
grep -q "^precision: bf16" check.txt || fail "trident check does not print the precision"
grep -q "bf16 working copy" check.txt || fail "trident check does not count the bf16 working copy"

# 2. bf16 and fp32 side by side
for p in fp32 bf16; do
  "$mpiexec" -n 1 "$trident" train "$src/inputs/quickstart.yaml" "${common[@]}" \
    --set training.precision=$p --set run.name=$p >"$p.log" 2>&1 &
done
rc=0
wait %1 || rc=1
wait %2 || rc=1
[ $rc = 0 ] || { tail -5 fp32.log bf16.log; fail "a training run failed"; }
grep -q "training fp32 .*), fp32, " fp32.log || fail "fp32 run did not say fp32"
grep -q "training bf16 .*), bf16 (" bf16.log || fail "bf16 run did not say bf16"

/usr/bin/python3 - "$steps" <<'EOF'
import json, sys
steps = int(sys.argv[1])
def load(p):
    rows = [json.loads(l) for l in open("runs/%s/metrics.jsonl" % p)]
    loss = {r["step"]: r["loss"] for r in rows if "loss" in r}
    val = [r["val_loss"] for r in rows if "val_loss" in r]
    act = [r["act_bytes"] for r in rows if "act_bytes" in r]
    return loss, val, act
l32, v32, a32 = load("fp32")
l16, v16, a16 = load("bf16")
last = [s for s in sorted(l32) if s > steps - 100]
if not last or any(s not in l16 for s in last):
    sys.exit("precision: FAIL: the runs' metrics do not cover the last 100 steps")
mean = sum(abs(l16[s] - l32[s]) / l32[s] for s in last) / len(last)
vrel = abs(v16[-1] - v32[-1]) / v32[-1]
print("precision: last %d logged steps: mean rel loss diff bf16 vs fp32 %.3e (tol 2e-2); "
      "final val fp32 %.5f bf16 %.5f rel %.3e (tol 1.5e-2)" % (len(last), mean, v32[-1], v16[-1], vrel))
print("precision: act_bytes fp32 %d, bf16 %d (%.1f%% saved)" % (a32[-1], a16[-1],
      100.0 * (a32[-1] - a16[-1]) / a32[-1]))
ok = mean <= 0.02 and vrel <= 0.015 and a16[-1] < a32[-1]
sys.exit(0 if ok else "precision: FAIL: bf16 training is not within the bounds of fp32")
EOF

# 3. fp32 masters in every checkpoint; resume across precisions and grids
ck=$(printf 'step_%08d.h5' "$every")
/usr/bin/python3 - "runs/fp32/ckpt/$ck" "runs/bf16/ckpt/$ck" <<'EOF'
import sys, h5py
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        bad = []
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" and obj.dtype.itemsize != 4:
                bad.append("%s %s" % (name, obj.dtype))
        f.visititems(visit)
        if bad:
            sys.exit("precision: FAIL: %s holds non-fp32 tensors: %s" % (path, bad[:3]))
print("precision: both checkpoints hold fp32 tensors only")
EOF
resume() { # FROM PRECISION NAME RANKS SETS...
  local from=$1 prec=$2 name=$3 n=$4
  shift 4
  "$mpiexec" -n "$n" "$trident" train "$src/inputs/quickstart.yaml" "${common[@]}" \
    --set training.precision="$prec" --set run.name="$name" \
    --set checkpoint.resume="runs/$from/ckpt/$ck" \
    --set run.threads=1 "$@" >"$name.log" 2>&1 || { tail -5 "$name.log"; fail "resume $name failed"; }
  grep -q "resuming at step $every" "$name.log" || fail "$name did not resume at step $every"
}
# side by side (one thread per rank)
resume fp32 bf16 fp32_to_bf16_dp2z3 2 --set parallel.dp=2 --set parallel.zero=3 &
r1=$!
resume bf16 fp32 bf16_to_fp32_pp2 2 --set parallel.pp=2 &
r2=$!
wait $r1 || exit 1
wait $r2 || exit 1
/usr/bin/python3 - "$steps" <<'EOF'
import json, sys
steps = int(sys.argv[1])
def last(p):
    return [json.loads(l) for l in open("runs/%s/metrics.jsonl" % p) if '"loss"' in l][-1]["loss"]
for run, ref in [("fp32_to_bf16_dp2z3", "fp32"), ("bf16_to_fp32_pp2", "bf16")]:
    a, b = last(run), last(ref)
    rel = abs(a - b) / b
    print("precision: %s ends at loss %.5f, %s at %.5f (rel %.2e, tol 2e-2)" % (run, a, ref, b, rel))
    if rel > 0.02:
        sys.exit("precision: FAIL: %s did not continue %s's training" % (run, ref))
EOF
echo "precision: OK"
