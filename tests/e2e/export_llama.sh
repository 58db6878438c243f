#!/usr/bin/env bash
# export_llama.sh TRIDENT WORKDIR — `trident export` and `model.init_from` for
# the LLaMA family, through the command line:
#  1. inputs/llama-tiny.yaml trained 6 steps on tp 2, exported (fp32, bf16)
#     from its checkpoint;
#  2. model.safetensors holds every tensor under the checkpoint's own names
#     (LlamaForCausalLM's: model.layers.N.self_attn.q_proj.weight, ...,
#     lm_head.weight; no prefix), fp32 bit-identical to /model, bf16 its
#     nearest-even rounding; config.json a LlamaForCausalLM config of the deck;
#  3. the float64 PyTorch LLaMA (tests/reference/eval_ref.py, llama_ref.py) on
#     the fp32 export gives `trident eval`'s validation loss within 1e-5;
#  4. model.init_from=the export starts a pp 2 run with lr 0 whose checkpoint
#     equals the source bit for bit and whose step-0 validation loss equals
#     trident eval's.
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: export_llama.sh TRIDENT WORKDIR} work=${2:?usage: export_llama.sh TRIDENT WORKDIR}
case $trident in /*) ;; *) trident=$(pwd)/$trident ;; esac
src=$(cd "$(dirname "$0")/../.." && pwd)
deck=$src/inputs/llama-tiny.yaml
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "export_llama.sh: FAIL: $*"; exit 1; }
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 --val-fraction 0.1 /usr/share/common-licenses >/dev/null
rm -rf run out32 out16 init
common=(--set data.train=corpus.h5 --set checkpoint.resume=never)
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${common[@]}" --set run.out_dir=run \
  --set parallel.tp=2 --set training.steps=6 --set schedule.warmup=2 > train.log 2>&1 ||
  { tail -3 train.log; fail "train"; }
ck=run/ckpt/step_00000006.h5
for d in 32 16; do
  dt=fp32; [ $d = 16 ] && dt=bf16
  "$mpiexec" -n 1 "$trident" export --checkpoint "$ck" --out out$d --dtype $dt > export$d.log 2>&1 ||
    { cat export$d.log; fail "export $dt"; }
done
PYTHONPATH=$src/tests/reference /usr/bin/python3 - "$ck" <<'PYEOF' || exit 1
import json, sys
import numpy as np
import gpt2_ref as G
ck = G.load_model_h5(sys.argv[1], "model")
if "lm_head.weight" not in ck or "model.layers.3.mlp.down_proj.weight" not in ck:
    sys.exit("export_llama.sh: FAIL: the checkpoint's names are not LlamaForCausalLM's: %s" % sorted(ck)[:3])
for d, bf16 in (("out32", False), ("out16", True)):
    st = G.load_safetensors(d + "/model.safetensors", prefix="")
    if sorted(st) != sorted(ck):
        sys.exit("export_llama.sh: FAIL: %s names %s, the checkpoint %s" % (d, sorted(st)[:3], sorted(ck)[:3]))
    for n, a in ck.items():
        a = np.asarray(a, dtype=np.float32)
        want = G.bf16_round(a) if bf16 else a  # round to nearest even, as trident does
        if st[n].shape != a.shape or not np.array_equal(st[n], want):
            sys.exit("export_llama.sh: FAIL: %s: %s differs from the checkpoint's" % (d, n))
    cfg = json.load(open(d + "/config.json"))
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
            "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000,
            "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "bfloat16" if bf16 else "float32"}
    for k, v in want.items():
        if cfg.get(k) != v:
            sys.exit("export_llama.sh: FAIL: %s/config.json: %s = %r, want %r" % (d, k, cfg.get(k), v))
print("export_llama.sh: %d tensors under LlamaForCausalLM's names, fp32 and bf16; config.json ok" % len(ck))
PYEOF
val=$("$mpiexec" -n 1 "$trident" eval "$deck" "${common[@]}" --set run.out_dir=run --checkpoint "$ck" \
      --json 2>eval.err | grep '^{' | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
[ -n "$val" ] || fail "trident eval printed no loss: $(tail -2 eval.err)"
/usr/bin/python3 "$src/tests/reference/eval_ref.py" out32/model.safetensors corpus.h5 --batches 2 \
  --global-batch 8 --seq-len 64 --expect "$val" --rtol 1e-5 > ref.out 2>&1 ||
  fail "the PyTorch LLaMA on the export: $(cat ref.out) vs trident eval $val"
echo "export_llama.sh: the PyTorch LLaMA on the export: $(cat ref.out) = trident eval $val"
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$deck" "${common[@]}" --set run.out_dir=init \
  --set parallel.pp=2 --set model.init_from=out32/model.safetensors --set optimizer.lr=0 \
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
echo "export_llama.sh: model.init_from=the export at pp 2: weights bit-identical, val_loss $v0"
echo "export_llama.sh: OK"
