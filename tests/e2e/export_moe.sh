#!/usr/bin/env bash
# export_moe.sh TRIDENT WORKDIR — Hugging Face Mixtral interop for model.moe,
# through the command line:
#  1. inputs/moe-tiny.yaml with every block sparse (model.moe.every 1:
#     Mixtral's layout) trained 6 steps on tp 2, exported (fp32) from its
#     checkpoint;
#  2. model.safetensors holds every tensor under the checkpoint's names
#     (Mixtral's: model.layers.N.block_sparse_moe.gate.weight,
#     ...experts.E.w1/w2/w3.weight), bit-identical to /model; config.json is
#     a MixtralForCausalLM config of the deck (num_local_experts,
#     num_experts_per_tok, intermediate_size = an expert's width);
#  3. the float64 PyTorch Mixtral block (tests/reference/eval_ref.py with
#     llama_ref.py) on the export gives `trident eval`'s validation loss
#     within 1e-6, and on the checkpoint itself too;
#  4. model.init_from=the export folder starts a pp 2 run with lr 0 whose
#     checkpoint equals the source bit for bit and whose step-0 validation
#     loss equals trident eval's (the round trip is exact);
#  5. a checkpoint with dense blocks between the sparse ones (every 2) is
#     refused by export, naming the key; a Mixtral folder into a deck whose
#     blocks are not all sparse is refused by model.init_from.
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: export_moe.sh TRIDENT WORKDIR} work=${2:?usage: export_moe.sh TRIDENT WORKDIR}
case $trident in /*) ;; *) trident=$(pwd)/$trident ;; esac
src=$(cd "$(dirname "$0")/../.." && pwd)
deck=$src/inputs/moe-tiny.yaml
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "export_moe.sh: FAIL: $*"; exit 1; }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null
rm -rf run run2 out32 out2 init bad
common=(--set data.train=corpus.h5 --set checkpoint.resume=never --set model.moe.every=1)
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${common[@]}" --set run.out_dir=run \
  --set parallel.tp=2 --set training.steps=6 --set schedule.warmup=2 > train.log 2>&1 ||
  { tail -3 train.log; fail "train"; }
ck=run/ckpt/step_00000006.h5
"$mpiexec" -n 1 "$trident" export --checkpoint "$ck" --out out32 > export.log 2>&1 ||
  { cat export.log; fail "export"; }
PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$ck" <<'PYEOF' || exit 1
import json, sys
import numpy as np
import gpt2_ref as G
ck = G.load_model_h5(sys.argv[1], "model")
if "model.layers.3.block_sparse_moe.experts.3.w2.weight" not in ck or \
        "model.layers.0.mlp.up_proj.weight" in ck:
    sys.exit("export_moe.sh: FAIL: the checkpoint's names are not Mixtral's: %s" % sorted(ck)[:4])
st = G.load_safetensors("out32/model.safetensors", prefix="")
if sorted(st) != sorted(ck):
    sys.exit("export_moe.sh: FAIL: the export names %s, the checkpoint %s" % (sorted(st)[:3], sorted(ck)[:3]))
for n, a in ck.items():
    if st[n].shape != a.shape or not np.array_equal(st[n], np.asarray(a, dtype=np.float32)):
        sys.exit("export_moe.sh: FAIL: %s differs from the checkpoint's" % n)
cfg = json.load(open("out32/config.json"))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 256,
        "hidden_size": 128, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
        "rope_theta": 10000, "hidden_act": "silu", "tie_word_embeddings": False,
        "router_aux_loss_coef": 0.01, "torch_dtype": "float32"}
for k, v in want.items():
    if cfg.get(k) != v:
        sys.exit("export_moe.sh: FAIL: config.json: %s = %r, want %r" % (k, cfg.get(k), v))
print("export_moe.sh: %d tensors under Mixtral's names, bit-identical; config.json ok" % len(ck))
PYEOF
val=$("$mpiexec" -n 1 "$trident" eval "$deck" "${common[@]}" --set run.out_dir=run --checkpoint "$ck" \
      --json 2>eval.err | grep '^{' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
[ -n "$val" ] || fail "trident eval printed no loss: $(tail -2 eval.err)"
for m in out32/model.safetensors "$ck"; do
  /usr/bin/python3 "$src/tests/reference/eval_ref.py" "$m" corpus.h5 --batches 2 \
    --global-batch 8 --seq-len 64 --expect "$val" --rtol 1e-6 > ref.out 2>&1 ||
    fail "the float64 Mixtral on $m: $(cat ref.out) vs trident eval $val"
  echo "export_moe.sh: the float64 Mixtral on $m: $(cat ref.out) = trident eval $val"
done
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${common[@]}" --set run.out_dir=init \
  --set parallel.pp=2 --set model.init_from=out32 --set optimizer.lr=0 \
  --set schedule.min_lr=0 --set training.steps=1 --set schedule.warmup=1 --set eval.every=1 \
  > init.log 2>&1 || { tail -3 init.log; fail "train with model.init_from (pp 2)"; }
PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$ck" init/ckpt/step_00000001.h5 <<'PYEOF' ||
import sys
import numpy as np
import gpt2_ref as G
a, b = G.load_model_h5(sys.argv[1], "model"), G.load_model_h5(sys.argv[2], "model")
bad = [n for n in a if n not in b or not np.array_equal(np.asarray(a[n]), np.asarray(b[n]))]
sys.exit("tensors differ: %s" % bad[:3] if bad or len(a) != len(b) else 0)
PYEOF
  fail "model.init_from (pp 2, lr 0): the checkpoint differs from the source"
v0=$(grep '"val_loss"' init/metrics.jsonl | head -1 | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["val_loss"])')
[ "$v0" = "$val" ] || fail "model.init_from: step-0 val_loss $v0, the source's $val"
echo "export_moe.sh: model.init_from=the export at pp 2: weights bit-identical, val_loss $v0"
# 5. refusals
OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$deck" --set data.train=corpus.h5 \
  --set checkpoint.resume=never --set run.out_dir=run2 --set training.steps=1 --set schedule.warmup=1 > run2.log 2>&1 ||
  { tail -3 run2.log; fail "train (every 2)"; }
rc=0
"$mpiexec" -n 1 "$trident" export --checkpoint run2/ckpt/step_00000001.h5 --out out2 > out2.log 2>&1 || rc=$?
[ $rc = 2 ] && grep -q "model.moe.every = 2: transformers' Mixtral makes every block sparse" out2.log ||
  fail "export of an every-2 model: exit $rc, $(tail -2 out2.log)"
rc=0
OMP_NUM_THREADS=1 "$mpiexec" -n 1 "$trident" train "$deck" --set data.train=corpus.h5 \
  --set checkpoint.resume=never --set run.out_dir=bad --set training.steps=1 --set schedule.warmup=1 \
  --set model.init_from=out32 > bad.log 2>&1 || rc=$?
[ $rc != 0 ] && grep -q 'model_type is "mixtral" (every block sparse)' bad.log ||
  fail "model.init_from=a Mixtral folder into an every-2 deck: exit $rc, $(tail -2 bad.log)"
echo "export_moe.sh: every 2 refused by export (exit 2) and by model.init_from (exit $rc)"
echo "export_moe.sh: OK"
