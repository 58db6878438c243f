#!/usr/bin/env bash
# export.sh TRIDENT WORKDIR — `trident export` through the command line:
#  1. the tiny deck trained 10 steps on 2 ranks (dp 2, ZeRO-1), exported in
#     fp32 and bf16 from its checkpoint on 1 rank;
#  2. model.safetensors read with json + numpy (tests/reference/gpt2_ref.py
#     load_safetensors): every tensor named transformer.<name> with the
#     checkpoint's shape, fp32 bit-identical to /model, bf16 the nearest-even
#     rounding of it; config.json a GPT2LMHeadModel config of the deck;
#  3. the PyTorch reference (eval_ref.py) on the fp32 export gives
#     `trident eval`'s validation loss within 1e-5;
#  4. bad use: no --out, a missing checkpoint, an unknown --dtype: exit 2
#     naming what is wrong.
# Environment: MPIEXEC (default mpiexec).
set -u
trident=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "export.sh: FAIL: $*"; exit 1; }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null
rm -rf run out32 out16
common=(--set data.train=corpus.h5 --set run.out_dir=run --set checkpoint.resume=never)
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" "${common[@]}" \
  --set parallel.dp=2 --set parallel.zero=1 --set training.steps=10 --set schedule.warmup=2 \
  > train.log 2>&1 || { tail -3 train.log; fail "train"; }
ck=run/ckpt/step_00000010.h5
"$mpiexec" -n 1 "$trident" export --checkpoint "$ck" --out out32 > export32.log 2>&1 ||
  { cat export32.log; fail "export fp32"; }
"$mpiexec" -n 1 "$trident" export --checkpoint "$ck" --out out16 --dtype bf16 > export16.log 2>&1 ||
  { cat export16.log; fail "export bf16"; }
ls out32/*.tmp out16/*.tmp >/dev/null 2>&1 && fail "a .tmp file was left behind"

PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$ck" <<'EOF' || exit 1
import json, sys
import numpy as np
import gpt2_ref as G
ck = G.load_model_h5(sys.argv[1], "model")
for d, bf16 in (("out32", False), ("out16", True)):
    st = G.load_safetensors(d + "/model.safetensors")
    if sorted(st) != sorted(ck):
        sys.exit("export.sh: FAIL: %s names %s, the checkpoint %s" % (d, sorted(st)[:3], sorted(ck)[:3]))
    for n, a in ck.items():
        a = np.asarray(a, dtype=np.float32)
        if bf16:  # round to nearest even, as trident does
            u = a.view(np.uint32).astype(np.uint64)
            want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        else:
            want = a
        if st[n].shape != a.shape or not np.array_equal(st[n], want):
            sys.exit("export.sh: FAIL: %s: %s differs from the checkpoint's %s" % (d, n, a.shape))
    cfg = json.load(open(d + "/config.json"))
    want = {"model_type": "gpt2", "n_layer": 4, "n_embd": 128, "n_head": 4, "vocab_size": 256,
            "n_positions": 64, "activation_function": "gelu_new", "tie_word_embeddings": True}
    for k, v in want.items():
        if cfg.get(k) != v:
            sys.exit("export.sh: FAIL: %s/config.json: %s = %r, want %r" % (d, k, cfg.get(k), v))
print("export.sh: fp32 and bf16 exports hold every tensor of the checkpoint; config.json ok")
EOF

val=$("$mpiexec" -n 1 "$trident" eval "$src/inputs/tiny.yaml" "${common[@]}" --checkpoint "$ck" \
      --json 2>eval.err | grep '^{' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
[ -n "$val" ] || fail "trident eval printed no loss: $(tail -2 eval.err)"
/usr/bin/python3 "$src/tests/reference/eval_ref.py" out32/model.safetensors corpus.h5 --batches 2 \
  --global-batch 8 --seq-len 64 --expect "$val" --rtol 1e-5 > ref.out 2>&1 ||
  fail "the PyTorch reference on the export: $(cat ref.out) vs trident eval $val"
echo "export.sh: the PyTorch reference on the export: $(cat ref.out) = trident eval $val"

expect2() { # NAME FRAGMENT ARGS...
  local name=$1 frag=$2 out rc
  shift 2
  out=$("$mpiexec" -n 1 "$trident" export "$@" 2>&1)
  rc=$?
  [ $rc = 2 ] && grep -q -- "$frag" <<<"$out" || fail "$name: exit $rc (want 2 with '$frag'): $out"
}
expect2 no_out "--out DIR are required" --checkpoint "$ck"
expect2 missing "nosuch.h5: cannot read the checkpoint" --checkpoint nosuch.h5 --out x
expect2 not_hdf5 "not a trident checkpoint" --checkpoint train.log --out x
expect2 dtype "--dtype must be fp32 or bf16" --checkpoint "$ck" --out x --dtype fp16
echo "export.sh: OK"
