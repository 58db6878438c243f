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
#     naming what is wrong;
#  5. model.init_from: the fp32 export (file and folder, and a sharded copy
#     with model.safetensors.index.json) and an llm.c model file written from
#     the same checkpoint (nn.Linear layouts, padded vocabulary) start a tp 2
#     run with lr 0 whose checkpoint equals the source bit for bit and whose
#     step-0 validation loss equals trident eval's (1e-7: tp 2 against 1); a tensor missing, extra
#     or misshapen is exit 2 naming it.
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
        want = G.bf16_round(a) if bf16 else a  # round to nearest even, as trident does
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
expect2 missing "--checkpoint nosuch.h5: No such file" --checkpoint nosuch.h5 --out x
expect2 not_hdf5 "train.log: not an HDF5 file" --checkpoint train.log --out x
expect2 dtype "--dtype must be fp32 or bf16" --checkpoint "$ck" --out x --dtype fp16

# model.init_from: the export, an llm.c file made from the same checkpoint,
# and broken files. lr 0 keeps the weights: the first checkpoint must equal
# the source bit for bit, and its validation loss the source's (1e-7).
PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$ck" <<'EOF' || exit 1
import json, sys
import numpy as np
import gpt2_ref as G
ck = G.load_model_h5(sys.argv[1], "model")
L, C, V, T = 4, 128, 256, 64
Vp = 384  # padded like llm.c (rows past V are junk it must drop)
def w(n):
    return np.asarray(ck[n], dtype=np.float32)
hdr = np.zeros(256, dtype=np.int32)
hdr[:8] = [20240326, 3, T, V, L, 4, C, Vp]
parts = [np.concatenate([w("wte.weight"), np.full((Vp - V, C), 7.0, np.float32)]), w("wpe.weight")]
def layers(s, tr=False):
    return np.stack([w("h.%d.%s" % (l, s)).T if tr else w("h.%d.%s" % (l, s)) for l in range(L)])
for s, tr in [("ln_1.weight", 0), ("ln_1.bias", 0), ("attn.c_attn.weight", 1), ("attn.c_attn.bias", 0),
              ("attn.c_proj.weight", 1), ("attn.c_proj.bias", 0), ("ln_2.weight", 0), ("ln_2.bias", 0),
              ("mlp.c_fc.weight", 1), ("mlp.c_fc.bias", 0), ("mlp.c_proj.weight", 1),
              ("mlp.c_proj.bias", 0)]:
    parts.append(layers(s, tr))
parts += [w("ln_f.weight"), w("ln_f.bias")]
with open("model_llmc.bin", "wb") as f:
    f.write(hdr.tobytes())
    for p in parts:
        f.write(np.ascontiguousarray(p, dtype="<f4").tobytes())
# broken safetensors: one tensor missing, one extra, one misshapen
raw = open("out32/model.safetensors", "rb").read()
n = int.from_bytes(raw[:8], "little")
hdr32 = json.loads(raw[8:8 + n])
def write(name, h):
    b = json.dumps(h).encode()
    b += b" " * (-len(b) % 8)
    open(name, "wb").write(len(b).to_bytes(8, "little") + b + raw[8 + n:])
h = dict(hdr32); del h["transformer.h.2.mlp.c_fc.bias"]; write("missing.safetensors", h)
h = dict(hdr32); h["transformer.h.9.ln_1.weight"] = h["transformer.ln_f.weight"]; write("extra.safetensors", h)
h = json.loads(json.dumps(hdr32)); h["transformer.ln_f.bias"]["shape"] = [64, 2]; write("shape.safetensors", h)
EOF
# same_model A.h5 B.h5: every /model tensor of the two checkpoints bit for bit
same_model() {
  PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys
import numpy as np
import gpt2_ref as G
a, b = G.load_model_h5(sys.argv[1], "model"), G.load_model_h5(sys.argv[2], "model")
bad = [n for n in a if not np.array_equal(np.asarray(a[n]), np.asarray(b[n]))]
sys.exit("tensors differ: %s" % bad[:3] if bad else 0)
EOF
}
for src_file in out32/model.safetensors model_llmc.bin; do
  tag=$(basename "$src_file" | tr . _)
  rm -rf "init_$tag"
  OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set run.out_dir="init_$tag" --set checkpoint.resume=never --set parallel.tp=2 \
    --set model.init_from="$src_file" --set optimizer.lr=0 --set schedule.min_lr=0 \
    --set training.steps=1 --set schedule.warmup=1 --set eval.every=1 > "init_$tag.log" 2>&1 ||
    { tail -3 "init_$tag.log"; fail "train with model.init_from=$src_file"; }
  same_model "$ck" "init_$tag/ckpt/step_00000001.h5" ||
    fail "model.init_from=$src_file (tp 2, lr 0): the checkpoint differs from the source"
  v0=$(grep '"val_loss"' "init_$tag/metrics.jsonl" | head -1 | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["val_loss"])')
  # the loss within 1e-7, not to the bit: at tp 2 each rank sums exp over its
  # half of the vocabulary and the halves are added, which rounds differently
  # from one rank's vectorised sum over all of it (the weights are bitwise)
  /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-7 * abs(b))' \
    "$v0" "$val" || fail "model.init_from=$src_file: step-0 val_loss $v0, the source's $val"
  echo "export.sh: model.init_from=$src_file at tp 2: weights bit-identical, val_loss $v0 ($val at tp 1)"
done
for bad in missing:"no tensor h.2.mlp.c_fc.bias" extra:"tensor h.9.ln_1.weight is not part" \
           shape:"tensor ln_f.bias is \[64, 2\]"; do
  name=${bad%%:*} frag=${bad#*:}
  out=$(OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set run.out_dir=bad --set checkpoint.resume=never --set model.init_from=$name.safetensors 2>&1)
  rc=$?
  [ $rc = 2 ] && grep -q "$name.safetensors.*$frag" <<<"$out" ||
    fail "init_from $name: exit $rc (want 2 naming '$frag'): $(echo "$out" | tail -2)"
done
echo "export.sh: model.init_from refuses missing, extra and misshapen tensors (exit 2)"

# model.init_from of a folder: the export's folder (model.safetensors and
# config.json) and a sharded copy (model.safetensors.index.json naming two
# shards, as Hugging Face stores large models) load what the file does; a
# config.json that disagrees with the deck and a folder without weights are
# exit 2 naming what is wrong
rm -rf sharded badcfg noweights && mkdir -p sharded badcfg noweights
/usr/bin/python3 - <<'EOF' || fail "cannot make the sharded and bad-config folders"
import json, shutil
raw = open("out32/model.safetensors", "rb").read()
n = int.from_bytes(raw[:8], "little")
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
names = sorted(k for k in hdr if k != "__metadata__")
shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
wmap = {}
for fname, keys in shards.items():
    h, blobs, off = {}, [], 0
    for k in keys:
        b, e = hdr[k]["data_offsets"]
        h[k] = dict(hdr[k], data_offsets=[off, off + e - b])
        blobs.append(data[b:e])
        off += e - b
        wmap[k] = fname
    j = json.dumps(h).encode()
    j += b" " * (-len(j) % 8)
    open("sharded/" + fname, "wb").write(len(j).to_bytes(8, "little") + j + b"".join(blobs))
json.dump({"metadata": {"total_size": len(data)}, "weight_map": wmap}, open("sharded/model.safetensors.index.json", "w"))
shutil.copy("out32/config.json", "sharded/config.json")
shutil.copy("out32/model.safetensors", "badcfg/model.safetensors")
cfg = json.load(open("out32/config.json"))
cfg["n_layer"] = 6
json.dump(cfg, open("badcfg/config.json", "w"))
EOF
for dir in out32 sharded; do
  rm -rf "init_$dir"
  OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set run.out_dir="init_$dir" --set checkpoint.resume=never --set model.init_from="$dir" \
    --set optimizer.lr=0 --set schedule.min_lr=0 --set training.steps=1 --set schedule.warmup=1 \
    > "init_$dir.log" 2>&1 || { tail -3 "init_$dir.log"; fail "train with model.init_from=$dir (a folder)"; }
  same_model "$ck" "init_$dir/ckpt/step_00000001.h5" ||
    fail "model.init_from=$dir/ (lr 0): the checkpoint differs from the source"
done
echo "export.sh: model.init_from of the export's folder and of a 2-shard copy: weights bit-identical"
for bad in "badcfg:badcfg/config.json.*n_layer = 6, but the deck's model.layers = 4" \
           "noweights:noweights: a folder without model weights: neither .*model.safetensors nor .*model.safetensors.index.json"; do
  dir=${bad%%:*} frag=${bad#*:}
  out=$(OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$src/inputs/tiny.yaml" --set data.train=corpus.h5 \
    --set run.out_dir=badf --set checkpoint.resume=never --set model.init_from=$dir 2>&1)
  rc=$?
  [ $rc = 2 ] && grep -qE "$frag" <<<"$out" && [ "$(grep -c 'trident: error:' <<<"$out")" = 1 ] &&
    ! grep -q "^  at " <<<"$out" ||
    fail "init_from=$dir: exit $rc (want 2 and one line matching '$frag'): $(echo "$out" | tail -2)"
done
echo "export.sh: model.init_from refuses a config.json that disagrees with the deck and a folder without weights (exit 2)"
echo "export.sh: OK"
