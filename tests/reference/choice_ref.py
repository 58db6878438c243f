#!/usr/bin/python3
"""choice_ref.py CKPT ITEMS EVAL_JSON SCORES [EVAL_JSON SCORES]... — the
multiple-choice evaluation of td_choice.h recomputed in float64 with PyTorch
(gpt2_ref.py or llama_ref.py, by the checkpoint's arch) from the
checkpoint's /model weights, for a checkpoint trained on the bytes
tokenizer: each ending's tokens are the bytes of " " + ending after the
context's bytes, its score the mean loss per ending token. Checks: every
mean loss of the first SCORES within 1e-5 relative of the oracle's; acc and
acc_norm (lowest mean loss; lowest total loss per ending byte) equal to the
oracle's; every further pair (another grid) the same accuracy and scores
within 1e-5 of the first. Exit 0 / 1."""
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402
import llama_ref as LL  # noqa: E402

TOL = 1e-5


def main():
    ckpt, items = sys.argv[1], sys.argv[2]
    pairs = list(zip(sys.argv[3::2], sys.argv[4::2]))
    torch.set_default_dtype(torch.float64)
    with h5py.File(ckpt, "r") as f:
        cfgtext = f["config"][()]
    cfgtext = cfgtext.decode() if isinstance(cfgtext, bytes) else str(cfgtext)
    llama = "arch: llama" in cfgtext
    M = LL if llama else G
    arrays = G.load_model_h5(ckpt, "model")
    heads = int([l for l in cfgtext.splitlines() if l.strip().startswith("heads:")][0].split(":")[1])
    T = int([l for l in cfgtext.splitlines() if l.strip().startswith("seq_len:")][0].split(":")[1])
    if llama:
        kv = int([l for l in cfgtext.splitlines() if l.strip().startswith("kv_heads:")][0].split(":")[1])
        cfg = M.infer_config(arrays, heads, kv_heads=kv, seq_len=T)
    else:
        cfg = M.infer_config(arrays, heads)
    P = M.to_torch(arrays, torch.float64, requires_grad=False)
    mean, acc, accn, n = [], 0, 0, 0
    for line in open(items):
        ex = json.loads(line)
        ctx = list(ex["ctx"].encode())
        ms, ns = [], []
        for e in ex["endings"]:
            end = list((" " + e).encode())
            seq = (ctx + end)[-(T + 1):]
            idx = torch.tensor([seq[:-1]])
            tgt = torch.tensor(seq[1:])
            logits, _ = M.forward(P, idx, cfg)
            losses = F.cross_entropy(logits[0], tgt, reduction="none")
            s = float(losses[-len(end):].sum())
            ms.append(s / len(end))
            ns.append(s / len(e.encode() + b" "))
        mean.append(ms)
        acc += int(np.argmin(ms)) == ex["label"]
        accn += int(np.argmin(ns)) == ex["label"]
        n += 1
    ok = True
    first = None
    for k, (ej, sc) in enumerate(pairs):
        got = json.load(open(ej))
        rows = [json.loads(l)["mean_loss"] for l in open(sc)]
        ref = mean if k == 0 else first
        worst = max(abs(a - b) / abs(b) for ra, rb in zip(rows, ref) for a, b in zip(ra, rb))
        same = got["correct"] == acc and got["correct_norm"] == accn and len(rows) == n
        print("choice_ref: %s: %d examples, acc %d/%d (oracle %d), acc_norm %d/%d (oracle %d), "
              "mean losses within %.2e of %s%s" % (ej, got["examples"], got["correct"], n, acc,
                                                    got["correct_norm"], n, accn, worst,
                                                    "the oracle" if k == 0 else pairs[0][0],
                                                    "" if same and worst <= TOL else "  FAIL"))
        ok &= same and worst <= TOL
        if k == 0:
            first = rows
    if acc * 2 <= n:
        print("choice_ref: FAIL: the model is right on %d of %d: the set tests nothing" % (acc, n))
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
