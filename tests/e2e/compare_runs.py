#!/usr/bin/python3
"""compare_runs.py REF_DIR RUN_DIR [--loss-rtol R] [--param-rtol R] [--bitwise]

Compares two trident runs (DESIGN.md, invariant 1 "Grid invariance"):

  metrics  REF_DIR/metrics.jsonl and RUN_DIR/metrics.jsonl must both exist, be
           non-empty, log the same steps, and every step's `loss` (and
           `val_loss` where logged) must agree within --loss-rtol relative to
           the reference; with --bitwise the values must be the same strings,
           character for character, as trident printed them.
  params   when both dirs hold checkpoints (ckpt/latest naming a file), the
           final /model/* tensors must have the same names and shapes and
           max|p - p_ref| <= param-rtol * max|p_ref| per tensor; with
           --bitwise they must be identical bit for bit. A checkpoint in only
           one of the dirs is reported and fails (the runs were not made the
           same way).

Prints a compact table (worst steps, worst tensors) and exits 0 when
everything agrees, 1 on any difference or missing/empty input, 2 on usage.
`grad_norm` differences are printed for information only, except with
--bitwise (the same grid twice), where grad_norm must match exactly too.
"""
import argparse
import json
import math
import os
import sys


def fail_usage(msg):
    print(f"compare_runs: {msg}", file=sys.stderr)
    sys.exit(2)


def read_metrics(run_dir, problems):
    """{step: record} with float fields kept as the printed strings."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        problems.append(f"{path}: missing")
        return None
    recs = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line, parse_float=str, parse_int=str)
            except json.JSONDecodeError as e:
                problems.append(f"{path}:{lineno}: not JSON ({e})")
                continue
            if "step" not in r or "loss" not in r:
                problems.append(f"{path}:{lineno}: no step or loss")
                continue
            step = int(r["step"])
            if step in recs:
                problems.append(f"{path}:{lineno}: step {step} logged twice")
            recs[step] = r
    if not recs:
        problems.append(f"{path}: empty (no step records)")
        return None
    return recs


def as_float(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan


def rel(a, b):
    if a == b:
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(a - b) / max(abs(b), 1e-30)


def compare_metrics(ref, run, args, problems):
    rs, us = sorted(ref), sorted(run)
    if rs != us:
        only_ref = sorted(set(rs) - set(us))
        only_run = sorted(set(us) - set(rs))
        problems.append(f"metrics: steps differ (only in ref: {only_ref[:10]}, only in run: {only_run[:10]})")
    common = [s for s in rs if s in run]
    rows, worst = [], {}
    for s in common:
        for key in ("loss", "val_loss", "grad_norm"):
            if key not in ref[s] and key not in run[s]:
                continue
            if (key in ref[s]) != (key in run[s]):
                if key != "grad_norm" or args.bitwise:
                    problems.append(f"step {s}: {key} logged in only one run")
                continue
            a, b = str(run[s][key]), str(ref[s][key])
            fa, fb = as_float(a), as_float(b)
            r = rel(fa, fb)
            if args.bitwise:
                ok = a == b
            elif key == "grad_norm":
                ok = True
            else:
                ok = math.isfinite(fa) and math.isfinite(fb) and r <= args.loss_rtol
            if not ok:
                problems.append(f"step {s}: {key} {a} vs ref {b} (rel {r:.2e})")
            w = worst.get(key)
            if w is None or r > w[0]:
                worst[key] = (r, s, b, a)
            rows.append((s, key, b, a, r, ok))
    print(f"{'step':>6} {'metric':<9} {'reference':>16} {'run':>16} {'rel diff':>9}")
    by_key = {(x[0], x[1]): x for x in rows}
    keys = [(s, "loss") for s in (common[:1] + common[-1:])]
    keys += [(x[0], x[1]) for x in rows if not x[5]][:8]
    keys += [(s, key) for key, (_, s, _, _) in sorted(worst.items())]
    seen = set()
    for k in keys:
        if k in seen or k not in by_key:
            continue
        seen.add(k)
        s, key, b, a, r, ok = by_key[k]
        tag = "" if ok else "  FAIL"
        print(f"{s:>6} {key:<9} {b:>16} {a:>16} {r:>9.2e}{tag}")
    mode = "bitwise" if args.bitwise else f"rtol {args.loss_rtol:g}"
    if args.bitwise:
        mode += ", grad_norm too"
    print(f"metrics: {len(common)} steps compared ({mode}); worst loss rel "
          f"{worst.get('loss', (0.0,))[0]:.2e}"
          + (f", grad_norm rel {worst['grad_norm'][0]:.2e}" + ("" if args.bitwise else " (info)")
             if "grad_norm" in worst else ""))


def latest_ckpt(run_dir):
    latest = os.path.join(run_dir, "ckpt", "latest")
    if not os.path.isfile(latest):
        return None
    with open(latest, encoding="utf-8") as f:
        name = f.read().strip()
    if not name:
        return ""
    path = name if os.path.isabs(name) else os.path.join(run_dir, "ckpt", name)
    if not os.path.isfile(path) and os.path.isfile(name):
        path = name
    return path


def compare_params(ref_path, run_path, args, problems):
    import h5py
    import numpy as np

    def load(path):
        out = {}
        with h5py.File(path, "r") as f:
            if "model" not in f:
                problems.append(f"{path}: no /model group")
                return out
            f["model"].visititems(
                lambda name, obj: out.__setitem__(name, np.asarray(obj[()]))
                if isinstance(obj, h5py.Dataset) else None)
        return out

    ref, run = load(ref_path), load(run_path)
    if not ref or not run:
        problems.append("checkpoint: no /model tensors")
        return
    if set(ref) != set(run):
        problems.append(f"checkpoint: tensor names differ (only ref: {sorted(set(ref) - set(run))[:5]}, "
                        f"only run: {sorted(set(run) - set(ref))[:5]})")
    # The tolerance is relative to max |p| over the whole reference model:
    # per tensor it cannot hold where a gradient is pure rounding noise (the
    # key bias of attention has an exactly zero gradient in exact arithmetic,
    # and AdamW turns its noise into updates), so per-tensor ratios are
    # reported for information only.
    gmax = max((float(np.max(np.abs(v.astype(np.float64)))) for v in ref.values() if v.size),
               default=0.0)
    res = []
    for name in sorted(set(ref) & set(run)):
        a, b = run[name], ref[name]
        if a.shape != b.shape:
            problems.append(f"/model/{name}: shape {a.shape} vs ref {b.shape}")
            continue
        if a.dtype != np.float32 or b.dtype != np.float32:
            problems.append(f"/model/{name}: dtype {a.dtype} vs ref {b.dtype} (float32 expected)")
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        diff = float(np.max(np.abs(a64 - b64))) if a.size else 0.0
        scale = float(np.max(np.abs(b64))) if b.size else 0.0
        if args.bitwise:
            ok = a.tobytes() == b.tobytes()
        else:
            ok = bool(np.all(np.isfinite(a64))) and diff <= args.param_rtol * gmax
        if not ok:
            problems.append(f"/model/{name}: max abs diff {diff:.3e} > {args.param_rtol:g} x max|p_ref| {gmax:.3e}"
                            if not args.bitwise else f"/model/{name}: not bitwise identical (max abs diff {diff:.3e})")
        res.append((diff / scale if scale > 0 else diff, name, diff, scale, ok))
    res.sort(reverse=True)
    print(f"{'tensor':<28} {'max|ref|':>10} {'max|diff|':>10} {'diff/max':>9}")
    for r, name, diff, scale, ok in res[:6] + [x for x in res[6:] if not x[4]][:10]:
        print(f"{name:<28} {scale:>10.3e} {diff:>10.3e} {r:>9.2e}{'' if ok else '  FAIL'}")
    mode = "bitwise" if args.bitwise else f"max abs diff <= {args.param_rtol:g} x max|p_ref| = {args.param_rtol * gmax:.3e}"
    print(f"params: {len(res)} tensors compared ({mode}): {os.path.basename(ref_path)} vs {os.path.basename(run_path)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ref_dir")
    p.add_argument("run_dir")
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    p.add_argument("--param-rtol", type=float, default=1e-5)
    p.add_argument("--bitwise", action="store_true")
    args = p.parse_args()
    for d in (args.ref_dir, args.run_dir):
        if not os.path.isdir(d):
            fail_usage(f"{d}: not a folder")
    problems = []
    print(f"compare_runs: ref {args.ref_dir}\n              run {args.run_dir}")
    ref = read_metrics(args.ref_dir, problems)
    run = read_metrics(args.run_dir, problems)
    if ref is not None and run is not None:
        compare_metrics(ref, run, args, problems)
    cr, cu = latest_ckpt(args.ref_dir), latest_ckpt(args.run_dir)
    if cr is None and cu is None:
        print("params: no checkpoints in either run (metrics only)")
    elif cr is None or cu is None:
        problems.append(f"checkpoint: only {'run' if cr is None else 'ref'} has ckpt/latest")
    elif not cr or not cu or not os.path.isfile(cr) or not os.path.isfile(cu):
        problems.append(f"checkpoint: ckpt/latest names a missing file (ref {cr!r}, run {cu!r})")
    else:
        compare_params(cr, cu, args, problems)
    if problems:
        print(f"compare_runs: FAIL ({len(problems)} problems)")
        for x in problems[:20]:
            print(f"  {x}")
        if len(problems) > 20:
            print(f"  ... {len(problems) - 20} more")
        return 1
    print("compare_runs: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
