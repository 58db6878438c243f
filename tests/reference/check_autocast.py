#!/usr/bin/python3
"""trident bf16 against PyTorch's own mixed precision on the same windows.

Usage (Debian's interpreter, which has torch, numpy and h5py):
    /usr/bin/python3 tests/reference/check_autocast.py DUMP.h5 [--steps N]

DUMP.h5 is written by `trident train DECK --set training.precision=bf16
--dump FILE` (see check_train.py for its layout). From trident's dumped
initial float32 parameters, PyTorch trains the same model on the same
batches with the same AdamW, clipping and schedule, float32 master weights
and the forward under torch.autocast("cpu", dtype=torch.bfloat16) (its
matmuls on bf16 operands), and once more in plain float32 for scale.

Checks, over the N replayed steps (default: all dumped):
  mean |loss_trident - loss_torch| / loss_torch       <= 2%
  last step's loss relative difference                <= 1.5%
(the training bounds of docs/architecture.md "Precision", there over the last 100 of
300 steps and the final validation loss). The distance of each to torch
float32 is printed too.

Exit status: 0 pass, 1 a check failed, 2 bad input.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402
from check_train import BadInput, read_dump, _batch, _opt, _lr  # noqa: E402

TOL_MEAN = 0.02
TOL_LAST = 0.015


def replay(d, steps, autocast):
    cfg = d["cfg"]
    P = G.to_torch(d["model"], torch.float32)
    opt = _opt(d, P)
    losses = []
    for s in range(steps):
        idx, tgt = _batch(d, s)
        for t in P.values():
            t.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            _, loss = G.forward(P, idx, cfg, tgt)
        loss.float().backward()
        G.clip_grad_norm(P, d["grad_clip"])
        G.set_lr(opt, _lr(d, s))
        opt.step()
        losses.append(float(loss.item()))
    return np.array(losses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--steps", type=int, default=None)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    try:
        d = read_dump(a.dump)
    except BadInput as e:
        print("check_autocast: %s" % e, file=sys.stderr)
        return 2
    S = d["batches"].shape[0] if a.steps is None else min(a.steps, d["batches"].shape[0])
    tri = np.asarray(d["losses"][:S], dtype=np.float64)
    bf = replay(d, S, True)
    fp = replay(d, S, False)
    print("  step   trident bf16   torch autocast   torch fp32")
    for s in range(S):
        if s < 3 or s >= S - 3 or s % 10 == 9:
            print("  %4d   %12.6f   %14.6f   %10.6f" % (s + 1, tri[s], bf[s], fp[s]))
    rel = np.abs(tri - bf) / bf
    mean, last = float(rel.mean()), float(rel[-1])
    print("trident bf16 vs torch autocast: mean rel %.2e (tol %.0e), last %.2e (tol %.1e)"
          % (mean, TOL_MEAN, last, TOL_LAST))
    print("for scale: trident bf16 vs torch fp32 mean rel %.2e; torch autocast vs torch fp32 "
          "mean rel %.2e" % (float((np.abs(tri - fp) / fp).mean()),
                             float((np.abs(bf - fp) / fp).mean())))
    ok = mean <= TOL_MEAN and last <= TOL_LAST and np.all(np.isfinite(tri))
    print("check_autocast: %s" % ("OK" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
