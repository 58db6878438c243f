#!/usr/bin/env bash
# llama_ckpt_info.sh TRIDENT WORKDIR — a LLaMA checkpoint names its tensors as
# Hugging Face's LlamaForCausalLM does: train inputs/llama-tiny.yaml 2 steps
# on tp 2 (GQA: one key/value head a rank), then `trident ckpt info` must list
# every tensor of the model by its HF name with its global shape, checksums
# verified, and h5py must find the same names under /model.
# Environment: MPIEXEC (default mpiexec).
set -u
trident=${1:?usage: llama_ckpt_info.sh TRIDENT WORKDIR} work=${2:?usage: llama_ckpt_info.sh TRIDENT WORKDIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
case $trident in /*) ;; *) trident=$(pwd)/$trident ;; esac
mpiexec=${MPIEXEC:-mpiexec}
fail() { echo "llama_ckpt_info: FAIL: $*"; exit 1; }
mkdir -p "$work" && cd "$work" || exit 1
[ -f corpus.h5 ] || "$trident" prepare --out corpus.h5 /usr/share/common-licenses >/dev/null ||
  fail "prepare"
rm -rf run
OMP_NUM_THREADS=1 "$mpiexec" -n 2 "$trident" train "$src/inputs/llama-tiny.yaml" \
  --set data.train=corpus.h5 --set parallel.tp=2 --set training.steps=2 \
  --set schedule.warmup=1 --set run.out_dir=run > train.log 2>&1 || { tail -5 train.log; fail "train"; }
ck=run/ckpt/step_00000002.h5
"$trident" ckpt info --full "$ck" > info.txt 2>&1 || { cat info.txt; fail "ckpt info $ck"; }
want=(model.embed_tokens.weight "256, 128" model.norm.weight "128" lm_head.weight "256, 128")
for l in 0 1 2 3; do
  p=model.layers.$l
  want+=("$p.input_layernorm.weight" "128" "$p.self_attn.q_proj.weight" "128, 128"
         "$p.self_attn.k_proj.weight" "64, 128" "$p.self_attn.v_proj.weight" "64, 128"
         "$p.self_attn.o_proj.weight" "128, 128" "$p.post_attention_layernorm.weight" "128"
         "$p.mlp.gate_proj.weight" "352, 128" "$p.mlp.up_proj.weight" "352, 128"
         "$p.mlp.down_proj.weight" "128, 352")
done
for ((i = 0; i < ${#want[@]}; i += 2)); do
  grep -qF "/model/${want[i]} " info.txt &&
    grep -F "/model/${want[i]} " info.txt | grep -qE "\(${want[i+1]}\) +checksum ok" ||
    { grep -m3 "/model/" info.txt; fail "ckpt info does not list ${want[i]} (${want[i+1]}), checksum ok"; }
done
n=$(grep -cE "^ */model/" info.txt)
[ "$n" = $((${#want[@]} / 2)) ] || fail "ckpt info lists $n tensors, want $((${#want[@]} / 2))"
/usr/bin/python3 - "$ck" $((${#want[@]} / 2)) <<'PYEOF' || exit 1
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    names = []
    f["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
if len(names) != int(sys.argv[2]) or "model.layers.3.mlp.down_proj.weight" not in names:
    sys.exit("llama_ckpt_info: FAIL: /model holds %d tensors: %s" % (len(names), names[:4]))
PYEOF
echo "llama_ckpt_info: $n tensors listed by their Hugging Face names; OK"
