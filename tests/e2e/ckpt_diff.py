#!/usr/bin/python3
"""ckpt_diff.py RUN.h5 REF.h5 [--bitwise] [--param-rtol R] [--optim] [--state]

Compares two trident checkpoints (docs/architecture.md, "Checkpoint file (format 1)")
with h5py alone:
  /model/*     same names and shapes; with --bitwise identical bit for bit,
               else max|a - b| <= R * max|b| over the whole reference group
               (the criterion of compare_runs.py; default R 1e-5);
  --optim      /optim/exp_avg/* and /optim/exp_avg_sq/* the same way (each
               group against its own max);
  --state      root `step`, `tokens_seen`, /data `epoch`, `position`, `seed`
               and /optim `step`, `lr` equal.
Prints one line per group and exits 0 when everything agrees, 1 otherwise,
2 on usage errors.
"""
import argparse
import sys

import h5py
import numpy as np


def tensors(f, group):
    out = {}
    if group not in f:
        return None
    f[group].visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def scalar(x):
    a = np.asarray(x)
    return a.item() if a.size == 1 else tuple(a.reshape(-1).tolist())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("ref")
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--param-rtol", type=float, default=1e-5)
    ap.add_argument("--optim", action="store_true")
    ap.add_argument("--state", action="store_true")
    a = ap.parse_args()
    problems = []
    try:
        fa, fb = h5py.File(a.run, "r"), h5py.File(a.ref, "r")
    except OSError as e:
        print(f"ckpt_diff: {e}")
        return 1
    groups = ["model"] + (["optim/exp_avg", "optim/exp_avg_sq"] if a.optim else [])
    for g in groups:
        ta, tb = tensors(fa, g), tensors(fb, g)
        if ta is None or tb is None:
            problems.append(f"/{g}: missing in {'run' if ta is None else 'ref'}")
            continue
        if set(ta) != set(tb):
            problems.append(f"/{g}: names differ (only run: {sorted(set(ta) - set(tb))[:5]}, "
                            f"only ref: {sorted(set(tb) - set(ta))[:5]})")
        gmax = max((float(np.max(np.abs(v.astype(np.float64)))) for v in tb.values() if v.size), default=0.0)
        worst, wname, nbad = 0.0, "", 0
        for n in sorted(set(ta) & set(tb)):
            x, y = ta[n], tb[n]
            if x.shape != y.shape or x.dtype != y.dtype:
                problems.append(f"/{g}/{n}: {x.dtype}{x.shape} vs ref {y.dtype}{y.shape}")
                continue
            d = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
            ok = x.tobytes() == y.tobytes() if a.bitwise else (np.all(np.isfinite(x)) and d <= a.param_rtol * gmax)
            if not ok:
                nbad += 1
                problems.append(f"/{g}/{n}: max|diff| {d:.3e}" + ("" if a.bitwise else f" > {a.param_rtol:g} x {gmax:.3e}"))
            if d >= worst:
                worst, wname = d, n
        mode = "bitwise" if a.bitwise else f"<= {a.param_rtol:g} x max|ref| {gmax:.3e}"
        print(f"ckpt_diff: /{g}: {len(tb)} tensors ({mode}), worst {wname} {worst:.3e}, {nbad} differ")
    if a.state:
        def attrs(f):
            r = {}
            for k in ("step", "tokens_seen"):
                r[k] = scalar(f.attrs[k]) if k in f.attrs else None
            for grp, keys in (("data", ("epoch", "position", "seed")), ("optim", ("step", "lr"))):
                for k in keys:
                    r[f"/{grp}.{k}"] = scalar(f[grp].attrs[k]) if grp in f and k in f[grp].attrs else None
            return r
        sa, sb = attrs(fa), attrs(fb)
        for k in sa:
            if sa[k] is None or sa[k] != sb[k]:
                problems.append(f"state {k}: {sa[k]!r} vs ref {sb[k]!r}")
        print("ckpt_diff: state " + ", ".join(f"{k}={sa[k]}" for k in sa))
    if problems:
        print(f"ckpt_diff: {a.run} vs {a.ref}: {len(problems)} problems")
        for p in problems[:15]:
            print(f"  {p}")
        return 1
    print("ckpt_diff: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
