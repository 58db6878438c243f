#!/usr/bin/env bash
# offload.sh [OPTIONS] TRIDENT WORKDIR NAME GRID [--set k=v]...
#
# optimizer.offload: cpu against optimizer.offload: none on run.device: cuda
# (the emulated device in CI), same deck, same grid ("dp,tp,pp,zero"):
#   1. A (offload none) and B (offload cpu) train S steps (--steps, default
#      4) with a checkpoint every S/2 steps: every logged loss and grad_norm
#      the same string, the final checkpoint's /model and /optim tensors bit
#      for bit (tests/e2e/ckpt_diff.py --bitwise --optim --state);
#   2. --ckpt: C resumes B's step-S/2 checkpoint (saved from host memory)
#      without offload, D resumes A's with offload; both continue to S and
#      must give A's losses, grad norms and final checkpoint bit for bit;
#   3. --mem: the device peak (device_mem_bytes, the largest rank) of B is at
#      most A's − 0.9 × 12 bytes × Ψ/dp (Ψ the rank's parameters, `trident
#      check --json`); the saving `trident check` predicts is within 10% of
#      the measured one; check's device total of B plus the cuBLASLt
#      workspace (32 MiB, not an allocation of trident's) is within 10% of
#      B's measured peak; the host bytes check prints for B are 16 bytes per
#      owned element (+2 in bf16).
# --set arguments (anywhere) go to every run (the deck: tests/cudaemu/small.yaml,
# or --deck FILE). Prints PASS/FAIL lines and "N passed, M failed"; exits 0
# only if everything passed.
#
# Environment: MPIEXEC, OMP_NUM_THREADS (default 1), TD_RUN_TIMEOUT (s per run).
set -uo pipefail
steps=4 do_ckpt=0 do_mem=0 deck_opt="" pos=() extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --ckpt) do_ckpt=1; shift ;;
    --mem) do_mem=1; shift ;;
    --deck) deck_opt=$2; shift 2 ;;
    --set) extra+=(--set "$2"); shift 2 ;;
    -*) echo "offload: unknown option $1" >&2; exit 2 ;;
    *) pos+=("$1"); shift ;;
  esac
done
[ ${#pos[@]} = 4 ] || { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
src=$(cd "$(dirname "$0")/../.." && pwd)
export TD_DECK=${deck_opt:-$src/tests/cudaemu/small.yaml}
# shellcheck source=tests/e2e/ckpt_lib.sh
source "$(dirname "$0")/ckpt_lib.sh"
ck_init "${pos[0]}" "${pos[1]}"
name=${pos[2]} grid=${pos[3]}
dir=$work/$name
mkdir -p "$dir"
half=$((steps / 2))
common=(--set run.device=cuda --set "training.steps=$steps" --set checkpoint.resume=never
        --set "checkpoint.every=$half" --set checkpoint.keep=0 --set eval.batches=1
        ${extra[@]+"${extra[@]}"})
echo "offload: $grid, $steps steps, ${extra[*]:-} (deck $(basename "$deck"))"
ckname() { printf 'step_%08d.h5' "$1"; }

# same_metrics A B FROM WHAT — loss and grad_norm of B's steps (from FROM on)
# the same strings as A's.
same_metrics() {
  local out
  if out=$("$py" - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'EOF' 2>&1
import re, sys
def rows(p):
    out = {}
    for line in open(p):
        m = re.search(r'"step": (\d+)', line)
        if not m or '"loss"' not in line:
            continue
        get = lambda k: re.search(r'"%s": ([^,}]+)' % k, line).group(1)
        out[int(m.group(1))] = (get("loss"), get("grad_norm"))
    return out
a, b, first = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
want = {s: v for s, v in a.items() if s >= first}
if not want or sorted(b) != sorted(want):
    sys.exit(f"steps differ: {sorted(want)} vs {sorted(b)}")
bad = [(s, want[s], b[s]) for s in sorted(want) if want[s] != b[s]]
for s, x, y in bad:
    print(f"step {s}: loss, grad_norm {x} vs {y}")
print(f"{len(want)} steps: loss and grad_norm " + ("differ" if bad else "identical"))
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "$4: $out"
  else
    fail "$4"
    echo "$out" | sed 's/^/     | /'
  fi
}

# same_ckpt FILE REF WHAT — /model and /optim bit for bit, and the state.
same_ckpt() {
  local out
  if out=$("$py" "$ckdiff" "$1" "$2" --bitwise --optim --state 2>&1); then
    pass "$3"
  else
    fail "$3"
    echo "$out" | sed 's/^/     | /'
  fi
}

t0=$SECONDS
ck_train_ok "$grid" "$dir/a" "A: offload none" "${common[@]}" --set optimizer.offload=none \
  --set "checkpoint.dir=$dir/a/ckpt"
ck_train_ok "$grid" "$dir/b" "B: offload cpu" "${common[@]}" --set optimizer.offload=cpu \
  --set "checkpoint.dir=$dir/b/ckpt"
same_metrics "$dir/a" "$dir/b" 1 "offload cpu = none on $grid"
same_ckpt "$dir/b/ckpt/$(ckname "$steps")" "$dir/a/ckpt/$(ckname "$steps")" \
  "final checkpoint (parameters, moments) with offload = without, bit for bit"
same_ckpt "$dir/b/ckpt/$(ckname "$half")" "$dir/a/ckpt/$(ckname "$half")" \
  "step-$half checkpoint with offload = without, bit for bit"

if [ $do_ckpt = 1 ]; then
  ck_train_ok "$grid" "$dir/c" "C: offload's checkpoint resumed without" "${common[@]}" \
    --set optimizer.offload=none --set "checkpoint.resume=$dir/b/ckpt/$(ckname "$half")" \
    --set "checkpoint.dir=$dir/c/ckpt"
  same_metrics "$dir/a" "$dir/c" $((half + 1)) "saved with offload, resumed without"
  same_ckpt "$dir/c/ckpt/$(ckname "$steps")" "$dir/a/ckpt/$(ckname "$steps")" \
    "saved with offload, resumed without: final checkpoint bit for bit"
  ck_train_ok "$grid" "$dir/d" "D: checkpoint without offload resumed with" "${common[@]}" \
    --set optimizer.offload=cpu --set "checkpoint.resume=$dir/a/ckpt/$(ckname "$half")" \
    --set "checkpoint.dir=$dir/d/ckpt"
  same_metrics "$dir/a" "$dir/d" $((half + 1)) "saved without offload, resumed with"
  same_ckpt "$dir/d/ckpt/$(ckname "$steps")" "$dir/a/ckpt/$(ckname "$steps")" \
    "saved without offload, resumed with: final checkpoint bit for bit"
fi

if [ $do_mem = 1 ]; then
  ck_grid "$grid"
  for x in a b; do
    off=none
    [ $x = b ] && off=cpu
    timeout -k 5 "$run_timeout" "$mpiexec" -n "$g_np" "$trident" check "$deck" --json \
      --set "data.train=$corpus" "${g_args[@]}" "${common[@]}" --set "optimizer.offload=$off" \
      >"$dir/check_$x.json" 2>"$dir/check_$x.log" || fail "trident check ($x) exited $?"
  done
  bf16=0
  for s in ${extra[@]+"${extra[@]}"}; do [ "$s" = training.precision=bf16 ] && bf16=1; done
  ndp=${grid%%,*}
  if out=$("$py" - "$dir" "$bf16" "$ndp" <<'EOF' 2>&1
import json, math, sys
d, bf16, ndp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def peak(x):
    rows = [json.loads(l) for l in open(f"{d}/{x}/metrics.jsonl") if '"device_mem_bytes"' in l]
    return max(r["device_mem_bytes"] for r in rows)
ca, cb = (json.load(open(f"{d}/check_{x}.json")) for x in "ab")
pa, pb = peak("a"), peak("b")
bad = []
# Ψ/dp: the largest rank's parameters over the shards (S = ceil(n/dp) rounded up to 16)
psi = max(r["params"] for r in ca["ranks"])
owned = math.ceil(math.ceil(psi / ndp) / 16) * 16
need = 0.9 * 12 * psi / ndp
print(f"device peak: offload none {pa} B, offload cpu {pb} B (saved {pa - pb} B; "
      f"12·Ψ/dp = {12 * psi / ndp:.0f} B, Ψ {psi}, dp {ndp})")
if not pb <= pa - need:
    bad.append(f"offload saves {pa - pb} B of device memory, less than 0.9·12·Ψ/dp = {need:.0f}")
saved_pred = ca["max"]["total_bytes"] - cb["max"]["total_bytes"]
print(f"check: offload saves {saved_pred} B of device memory by its plan, measured {pa - pb} B")
if abs((pa - pb) - saved_pred) > 0.10 * saved_pred:
    bad.append("the measured saving is not within 10% of check's")
# check counts what trident allocates, not the back-end's own workspace:
# cuBLASLt's 32 MiB (kernels/cuda/backend.cu, TD_CUDA_LT_WORKSPACE)
pred = cb["max"]["total_bytes"] + (32 << 20)
print(f"check: predicted device total with offload {cb['max']['total_bytes']} B + the cuBLASLt "
      f"workspace 32 MiB = {pred} B against the measured peak {pb} B ({(pred - pb) / pb:+.2%})")
if abs(pred - pb) > 0.10 * pb:
    bad.append("the prediction is not within 10% of the measured peak")
hb = cb["max"]["host_bytes"]
want = (16 + (2 if bf16 else 0)) * owned
print(f"check: host bytes with offload {hb}, expected {want} ({16 + 2 * bf16}·S, S = {owned})")
if hb != want or ca["max"]["host_bytes"] != 0:
    bad.append(f"host bytes {hb} (without offload {ca['max']['host_bytes']}), expected {want} and 0")
for b in bad:
    print("BAD " + b)
sys.exit(1 if bad else 0)
EOF
  ); then
    pass "memory: $(echo "$out" | tr '\n' ' ')"
  else
    fail "memory"
    echo "$out" | sed 's/^/     | /'
  fi
fi
info "offload.sh: $((SECONDS - t0)) s"
ck_finish
