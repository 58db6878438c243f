#!/usr/bin/env bash
# finetune_workflow.sh TRIDENT WORKDIR — fine-tuning a released LLaMA on
# conversations, end to end through the command line (CTest
# finetune_workflow):
#  1. a small LLaMA-3-shaped model (LLaMA 3's vocabulary of 128,256, RoPE
#     theta 500,000, grouped-query heads, untied head) as Hugging Face files,
#     config.json and model.safetensors (jobs/example-llama3-base.py), and
#     its deck inputs/llama3-chat.yaml;
#  2. 300 conversations (make_chat.py) → `trident prepare --format chat
#     --tokenizer llama3 --vocab tokenizer.model` (Meta's file, from
#     fetch_llama3.sh): LLaMA 3's chat template, the loss mask, documents;
#     a model of vocabulary 256 on that data is exit 2 naming the file;
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
bash "$src/jobs/llama3-tokenizer.sh" "$work/llama3"
rc=$?
[ $rc = 0 ] || exit $rc
cd "$work" || exit 1
fail() { echo "finetune_workflow.sh: FAIL: $*"; exit 1; }
set -e

# 1. the base model, as a Hugging Face user has it
rm -rf base ft out && mkdir base
"$py" "$src/jobs/example-llama3-base.py" base > /dev/null
sed 's|data/chat.h5|chat.h5|' "$src/inputs/llama3-chat.yaml" > ft.yaml

# 2. the conversations, with LLaMA 3's tokenizer and chat template
"$py" "$src/tests/e2e/make_chat.py" chat.jsonl 300 11
"$trident" prepare --format chat --tokenizer llama3 --vocab llama3/tokenizer.model \
  --val-fraction 0.15 --out chat.h5 chat.jsonl > prepare.log
grep -q "the loss counts" prepare.log || fail "prepare said nothing of the loss mask"

# a model whose vocabulary is smaller than the tokenizer's: exit 2 naming the data
set +e
out=$("$mpiexec" -n 2 "$trident" train ft.yaml --set run.out_dir=bad --set model.vocab_size=256 \
  --set model.init_from= 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(grep -c '^trident: error:.*chat.h5.*vocab_size attribute is 128256 but the model.s vocab_size is 256' <<<"$out")" = 1 ] ||
  { echo "$out" | tail -3; fail "a byte-sized model on LLaMA 3 chat data: exit $rc (want 2, one message naming the file)"; }

# 3. fine-tune on dp 2
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
