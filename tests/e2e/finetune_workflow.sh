#!/usr/bin/env bash
# finetune_workflow.sh TRIDENT WORKDIR — fine-tuning a released LLaMA on
# conversations, end to end through the command line (CTest
# finetune_workflow):
#  1. a small LLaMA-3-shaped model (LLaMA 3's vocabulary of 128,256, RoPE
#     theta 500,000, grouped-query heads, untied head) as Hugging Face files
#     written by the test: config.json and model.safetensors;
#  2. 300 conversations (make_chat.py) → `trident prepare --format chat
#     --tokenizer llama3 --vocab tokenizer.model` (Meta's file, from
#     fetch_llama3.sh): LLaMA 3's chat template, the loss mask, documents;
#  3. `trident train` with model.init_from the safetensors, data.attend:
#     document, on dp 2 (its step-0 validation loss is the base model's);
#     the masked validation loss falls;
#  4. `trident export` → model.safetensors + config.json;
#  5. tests/reference/eval_ref.py --documents (float64 PyTorch LLaMA, each
#     document apart, the loss mask applied) on the export = `trident eval`'s
#     masked validation loss within 1e-6 relative.
# 77 (skipped) when npm or the registry is unavailable (fetch_llama3.sh).
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: finetune_workflow.sh TRIDENT WORKDIR} work=${2:?usage: finetune_workflow.sh TRIDENT WORKDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
mpiexec=${MPIEXEC:-mpiexec}
py=/usr/bin/python3
mkdir -p "$work" || exit 1
bash "$src/tests/tokenizer/fetch_llama3.sh" "$work/llama3"
rc=$?
[ $rc = 0 ] || exit $rc
cd "$work" || exit 1
fail() { echo "finetune_workflow.sh: FAIL: $*"; exit 1; }
set -e

# 1. the base model, as a Hugging Face user has it
rm -rf base ft out && mkdir base
"$py" - <<'PY'
import json, struct
import numpy as np
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
       "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
       "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
       "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
       "bos_token_id": 128000, "eos_token_id": 128009}
json.dump(cfg, open("base/config.json", "w"), indent=2)
r = np.random.default_rng(3)
C, F, L, V, KV, HS = 64, 176, 2, 128256, 2, 16
t = {"model.embed_tokens.weight": r.normal(0, 0.02, (V, C)), "model.norm.weight": np.ones(C),
     "lm_head.weight": r.normal(0, 0.02, (V, C))}
for i in range(L):
    p = "model.layers.%d." % i
    t[p + "input_layernorm.weight"] = np.ones(C)
    t[p + "post_attention_layernorm.weight"] = np.ones(C)
    t[p + "self_attn.q_proj.weight"] = r.normal(0, 0.02, (C, C))
    t[p + "self_attn.k_proj.weight"] = r.normal(0, 0.02, (KV * HS, C))
    t[p + "self_attn.v_proj.weight"] = r.normal(0, 0.02, (KV * HS, C))
    t[p + "self_attn.o_proj.weight"] = r.normal(0, 0.02 / 2, (C, C))
    t[p + "mlp.gate_proj.weight"] = r.normal(0, 0.02, (F, C))
    t[p + "mlp.up_proj.weight"] = r.normal(0, 0.02, (F, C))
    t[p + "mlp.down_proj.weight"] = r.normal(0, 0.02 / 2, (C, F))
hdr, off, blobs = {}, 0, []
for k in sorted(t):
    b = np.ascontiguousarray(t[k], dtype="<f4").tobytes()
    hdr[k] = {"dtype": "F32", "shape": list(t[k].shape), "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open("base/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
cat > ft.yaml <<'YAML'
# ft.yaml — the base model of finetune_workflow.sh, fine-tuned on chat data
run:
  name: ft
  seed: 1
model:
  arch: llama
  vocab_size: 128256
  seq_len: 64
  layers: 2
  dim: 64
  heads: 4
  kv_heads: 2
  ffn_dim: 176
  rope_theta: 500000
  tie_embeddings: false
  init_from: base/model.safetensors
parallel:
  dp: 2
data:
  train: chat.h5
  attend: document
training:
  global_batch: 8
  steps: 12
optimizer:
  lr: 3.0e-3
schedule:
  warmup: 2
eval:
  every: 12
  batches: 2
checkpoint:
  resume: never
YAML

# 2. the conversations, with LLaMA 3's tokenizer and chat template
"$py" "$src/tests/e2e/make_chat.py" chat.jsonl 300 11
"$trident" prepare --format chat --tokenizer llama3 --vocab llama3/tokenizer.model \
  --val-fraction 0.15 --out chat.h5 chat.jsonl > prepare.log
grep -q "the loss counts" prepare.log || fail "prepare said nothing of the loss mask"

# 3. fine-tune on dp 2
set +e
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train ft.yaml --set run.out_dir=ft --set eval.every=12 \
  > train.log 2>&1 || { tail -5 train.log; fail "train"; }
set -e
"$py" - <<'PY' || fail "the masked validation loss did not fall: $(grep val_loss ft/metrics.jsonl)"
import json
rows = [json.loads(l) for l in open("ft/metrics.jsonl")]
v = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
print("finetune_workflow.sh: masked validation loss", v)
assert v[0][0] == 0 and v[-1][0] == 12 and v[-1][1] < v[0][1] - 0.05
PY

# 4. export, 5. the independent float64 reader against trident eval
"$trident" export --checkpoint ft/ckpt/step_00000012.h5 --out out > export.log
val=$("$mpiexec" -n 2 "$trident" eval ft.yaml --checkpoint ft/ckpt/step_00000012.h5 --json 2> eval.err |
      "$py" -c 'import json,sys; d = json.load(sys.stdin); print(d["val_loss"], d["val_tokens"])')
[ -n "$val" ] || fail "trident eval printed nothing: $(tail -2 eval.err)"
"$py" "$src/tests/reference/eval_ref.py" out/model.safetensors chat.h5 --batches 2 --global-batch 8 \
  --seq-len 64 --documents --expect "${val% *}" --rtol 1e-6 > ref.out 2>&1 ||
  fail "the float64 reader on the export: $(cat ref.out) vs trident eval ${val% *}"
echo "finetune_workflow.sh: float64 reader on the export $(cat ref.out) = trident eval ${val% *} over ${val#* } targets"
echo "finetune_workflow.sh: OK"
