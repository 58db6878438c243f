#!/usr/bin/python3
"""compare_runs.py REF_DIR RUN_DIR [--loss-rtol R] [--norm-rtol R] [--param-rtol R]
                 [--zero-grad-atol A] [--moe-rtol R] [--bitwise]

Compares two trident runs (docs/architecture.md, invariant 1 "Grid invariance"):

  metrics  REF_DIR/metrics.jsonl and RUN_DIR/metrics.jsonl must both exist, be
           non-empty and log the same steps. On every step `loss` (and
           `val_loss` where logged) must agree within --loss-rtol and
           `grad_norm` within --norm-rtol, relative to the reference (a
           mixture of experts: `moe_aux_loss` and `moe_z_loss` as the loss,
           `moe_tokens_min`/`max` and `moe_dropped` equal: the same routing). The
           gradient norm is compared because nothing else sees a wrong
           gradient scale: gradient clipping and Adam's invariance to the
           scale of the gradient leave loss and parameters almost unchanged
           when, say, the loss gradient is 1.5x too large on some grids.
  params   when both dirs hold checkpoints (ckpt/latest naming a file), the
           final /model/* tensors must have the same names and shapes, and
           each must satisfy one of two rules (the table says which):
             rel  max|p - p_ref| <= --param-rtol x max|p_ref| of THAT tensor
                  (not of the whole model: a small tensor such as a LayerNorm
                  bias would otherwise be allowed errors of its own size);
             abs  max|p - p_ref| <= --zero-grad-atol, for the parts of tensors
                  whose exact gradient is zero (ZERO_GRAD below): they hold
                  only amplified rounding noise, different on every grid.

With --bitwise (the same grid twice) every metric must be the same string,
character for character, as trident printed it, and every tensor identical
bit for bit. Prints the worst steps and the per-tensor table (every tensor,
worst first, with the rule applied), and exits 0 when everything agrees, 1 on any difference or
missing/empty input, 2 on usage.
"""
import argparse
import json
import math
import os
import re
import sys

# Tensors (or parts of tensors) whose gradient is exactly zero in exact
# arithmetic, so that the relative rule cannot hold for them.
#
# GPT-2's attention key bias, the K third of h.N.attn.c_attn.bias (columns
# [C, 2C) of the fused [Q | K | V] projection): the score of query i and key j
# is q_i.(k_j + b_K) = q_i.k_j + q_i.b_K, the same added constant for every
# key j of row i, and softmax is invariant to adding a constant per row. So
# dL/db_K = 0 exactly; what trident computes is rounding noise (~1e-10 of the
# ~1e-3 terms it sums), whose sum order depends on the grid (tp splits heads,
# dp and pp split and reorder the batch). AdamW normalises that noise into
# updates of up to ~lr per step, so b_K ends a run as a small random vector,
# different on every grid, and relative to its own max it may differ by 100%.
# Its values do not affect the loss (that is the point) and are bounded in
# absolute terms instead: see ZERO_GRAD_ATOL_DEFAULT.
#
# Each entry: (regular expression on the /model name, slice of the flattened
# tensor as a function of its element count n, label). The rest of such a
# tensor (the Q and V thirds) follows the relative rule as a part of its own,
# relative to its own max.
ZERO_GRAD = [
    (re.compile(r"h\.\d+\.attn\.c_attn\.bias$"), lambda n: (n // 3, 2 * n // 3),
     "attention key bias K [C, 2C): softmax is invariant to a per-row constant"),
]

# Defaults of --param-rtol and --zero-grad-atol, from measurements of the
# CTest comparisons that use this script (tests/cmake/{data_parallel,
# tensor_parallel,pipeline,checkpoint}.cmake: the tiny deck, lr 1e-3, 20
# steps; 27 grid tests and 6 resharding tests, 2026-11-30):
#
# PARAM_RTOL_DEFAULT: the largest max|p - p_ref| / max|p_ref| of one tensor
#   was 1.2e-4 (tp_grid_tp4, h.1.mlp.c_proj.weight: ONE element of 65,536 off
#   by 4.2e-6, the next ones 5e-7, 5e-7, 1.8e-7; 1,285 elements above 1e-8).
#   Such lone elements are AdamW amplifying rounding: where an element's
#   gradient is near zero (a sign change, or |g| near eps), m/sqrt(v) is
#   sensitive to the last bits of g, and a fraction of an lr step (1e-3) is
#   taken differently. Rounding alone does it, with no parallelism: one rank,
#   the same deck at micro-batch 8 vs 1 (only the summation order changes)
#   gave 8.1e-5 on the same tensor kind. Every other tensor kind stayed below
#   2.6e-5 (the other matrices), 1.6e-5 (biases, LayerNorm shifts included),
#   4.5e-6 (embeddings), 3.6e-7 (LayerNorm scales). 3e-4 is 2.5x the
#   largest; an error of 1e-3 of a tensor's own max fails, and a wrong
#   gradient on a tensor moves it by ~lr per step, far beyond.
#   (The previous bound, 1e-5 x the model's max|p| = 1.0e-5 absolute, let a
#   LayerNorm bias of max 5e-3 be off by 0.2% of itself.)
# ZERO_GRAD_ATOL_DEFAULT: |b_K - b_K,ref| was at most 4.1e-6 (the resharding
#   tests; 1.8e-6 in the grid tests), and |b_K| itself at most 3.3e-6: eps
#   1e-8 keeps Adam from normalising noise of ~1e-10 into full lr steps. 5e-5
#   is 12x the largest, and 20x below one lr step, which is what a key bias
#   with a real gradient (a defect) would move by.
PARAM_RTOL_DEFAULT = 3e-4
ZERO_GRAD_ATOL_DEFAULT = 5e-5


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
    # model.moe: the auxiliary terms as the loss; the slots the least and the
    # most loaded expert received exactly (the routing is the same)
    tol = {"loss": args.loss_rtol, "val_loss": args.loss_rtol, "grad_norm": args.norm_rtol,
           "moe_aux_loss": args.loss_rtol, "moe_z_loss": args.loss_rtol,
           "moe_tokens_min": 0.0, "moe_tokens_max": 0.0, "moe_dropped": 0.0}
    if args.moe_rtol is not None:  # bf16: a near-tie of two logits may route differently
        for k in ("moe_aux_loss", "moe_z_loss", "moe_tokens_min", "moe_tokens_max",
                  "moe_dropped"):
            tol[k] = args.moe_rtol
    rows, worst = [], {}
    for s in common:
        for key in tol:
            if key not in ref[s] and key not in run[s]:
                continue
            if (key in ref[s]) != (key in run[s]):
                problems.append(f"step {s}: {key} logged in only one run")
                continue
            a, b = str(run[s][key]), str(ref[s][key])
            fa, fb = as_float(a), as_float(b)
            r = rel(fa, fb)
            if args.bitwise:
                ok = a == b
            else:
                ok = math.isfinite(fa) and math.isfinite(fb) and r <= tol[key]
            if not ok:
                problems.append(f"step {s}: {key} {a} vs ref {b} (rel {r:.2e}"
                                + (")" if args.bitwise else f" > {tol[key]:g})"))
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
    if args.bitwise:
        mode = "bitwise: loss, val_loss, grad_norm"
    else:
        mode = f"loss/val_loss rtol {args.loss_rtol:g}, grad_norm rtol {args.norm_rtol:g}"
    print(f"metrics: {len(common)} steps compared ({mode}); worst rel: "
          + ", ".join(f"{k} {worst[k][0]:.2e} (step {worst[k][1]})"
                      for k in tol if k in worst))


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


def parts_of(name, n):
    """[(label, index array or slice, rule, note)] covering the flattened
    tensor `name` of n elements: the relative rule for the whole tensor, or,
    for a ZERO_GRAD match, an absolute part and the relative rest."""
    import numpy as np
    for pat, span, note in ZERO_GRAD:
        if pat.search(name):
            lo, hi = span(n)
            rest = np.concatenate([np.arange(0, lo), np.arange(hi, n)])
            return [(f"{name}[{lo}:{hi}]", slice(lo, hi), "abs", note),
                    (f"{name}[rest]", rest, "rel", "")]
    return [(name, slice(0, n), "rel", "")]


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
    res = []  # (diff/bound, label, rule, scale, diff, bound, ok)
    notes = {}
    for name in sorted(set(ref) & set(run)):
        a, b = run[name], ref[name]
        if a.shape != b.shape:
            problems.append(f"/model/{name}: shape {a.shape} vs ref {b.shape}")
            continue
        if a.dtype != np.float32 or b.dtype != np.float32:
            problems.append(f"/model/{name}: dtype {a.dtype} vs ref {b.dtype} (float32 expected)")
        a64 = a.astype(np.float64).ravel()
        b64 = b.astype(np.float64).ravel()
        if args.bitwise:
            ok = a.tobytes() == b.tobytes()
            diff = float(np.max(np.abs(a64 - b64))) if a.size else 0.0
            scale = float(np.max(np.abs(b64))) if b.size else 0.0
            if not ok:
                problems.append(f"/model/{name}: not bitwise identical (max abs diff {diff:.3e})")
            res.append((0.0 if ok else math.inf, name, "bit", scale, diff, 0.0, ok))
            continue
        for label, idx, rule, note in parts_of(name, a64.size):
            pa, pb = a64[idx], b64[idx]
            diff = float(np.max(np.abs(pa - pb))) if pa.size else 0.0
            scale = float(np.max(np.abs(pb))) if pb.size else 0.0
            bound = args.param_rtol * scale if rule == "rel" else args.zero_grad_atol
            finite = bool(np.all(np.isfinite(pa)))
            ok = finite and diff <= bound
            if not ok:
                what = "non-finite values" if not finite else f"max|diff| {diff:.3e}"
                if rule == "rel":
                    problems.append(f"/model/{label}: {what} > {args.param_rtol:g} x max|p_ref| "
                                    f"{scale:.3e} = {bound:.3e} (rule rel)")
                else:
                    problems.append(f"/model/{label}: {what} > {bound:.3e} (rule abs: zero "
                                    f"exact gradient)")
            if note:
                notes[label] = note
            res.append((diff / bound if bound > 0 else (0.0 if diff == 0 else math.inf),
                        label, rule, scale, diff, bound, ok))
    res.sort(key=lambda x: (-x[0], x[1]))
    print(f"{'tensor':<36} {'rule':<4} {'max|ref|':>10} {'max|diff|':>10} {'bound':>10} {'diff/bnd':>8}")
    for q, label, rule, scale, diff, bound, ok in res:
        print(f"{label:<36} {rule:<4} {scale:>10.3e} {diff:>10.3e} {bound:>10.3e} {q:>8.2e}"
              f"{'' if ok else '  FAIL'}")
    for label, note in sorted(notes.items())[:1]:
        print(f"rule abs for {', '.join(sorted(notes))}: {note}")
    if args.bitwise:
        mode = "bitwise"
    else:
        n_abs = sum(1 for x in res if x[2] == "abs")
        mode = (f"rel: max|diff| <= {args.param_rtol:g} x max|p_ref| of each tensor; "
                f"abs ({n_abs} parts): max|diff| <= {args.zero_grad_atol:g}")
    print(f"params: {len(res)} tensors/parts compared ({mode}): "
          f"{os.path.basename(ref_path)} vs {os.path.basename(run_path)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ref_dir")
    p.add_argument("run_dir")
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    p.add_argument("--norm-rtol", type=float, default=1e-4)
    p.add_argument("--param-rtol", type=float, default=PARAM_RTOL_DEFAULT)
    p.add_argument("--zero-grad-atol", type=float, default=ZERO_GRAD_ATOL_DEFAULT)
    p.add_argument("--bitwise", action="store_true")
    p.add_argument("--moe-rtol", type=float, default=None,
                   help="model.moe: the auxiliary terms and the expert loads within R "
                        "(default: the terms at --loss-rtol, the loads equal)")
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
