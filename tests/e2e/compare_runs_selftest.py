#!/usr/bin/python3
"""compare_runs_selftest.py TRIDENT WORKDIR [--compare PATH]

Shows that tests/e2e/compare_runs.py (or PATH) sees the errors the grid
tests exist for, on a real pair of runs: the tiny deck (inputs/tiny.yaml, 20
steps, checkpoint at the end) trained through the command line at dp 1 and at
dp 2. Then, on copies of the dp-2 run:

  1. unmodified                                   -> must pass (exit 0)
  2. every grad_norm in metrics.jsonl x 1.5       -> must fail (a gradient
     scale error that clipping and Adam hide from loss and parameters)
  3. one element of the smallest bias tensor (by max|p|) moved by 1e-3 of
     that tensor's own max                        -> must fail; the script
     also shows that this error is below the old model-wide bound
     (1e-5 x max|p| over the whole model), which let it pass
  4. one element of h.0's attention key bias (K third of c_attn.bias, exact
     gradient zero) moved by half the absolute bound -> must pass
  5. the same moved by twice the bound             -> must fail

The absolute bound is read from the script under test
(ZERO_GRAD_ATOL_DEFAULT; 5e-5 if it has none). Prints PASS/FAIL lines and
"N passed, M failed"; exits 0 only if all passed, 2 on usage.
Environment: MPIEXEC (default mpiexec), TD_RUN_TIMEOUT (default 240 s).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = "/usr/bin/python3"
results = []


def check(ok, what):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'}: {what}", flush=True)


def train(trident, work, corpus, dp, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = [os.environ.get("MPIEXEC", "mpiexec"), "-n", str(dp), trident, "train",
           os.path.join(SRC, "inputs", "tiny.yaml"),
           "--set", f"data.train={corpus}", "--set", "training.steps=20",
           "--set", "checkpoint.resume=never", "--set", "checkpoint.every=20",
           "--set", f"parallel.dp={dp}", "--set", f"run.out_dir={out}",
           "--set", f"checkpoint.dir={out}/ckpt"]
    with open(os.path.join(out, "log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             timeout=int(os.environ.get("TD_RUN_TIMEOUT", "240")))
    if rc != 0:
        print(open(os.path.join(out, "log")).read()[-3000:])
        sys.exit(f"compare_runs_selftest: trident train at dp {dp} exited {rc}: {' '.join(cmd)}")


def latest(run):
    with open(os.path.join(run, "ckpt", "latest")) as f:
        name = f.read().strip()
    return name if os.path.isabs(name) else os.path.join(run, "ckpt", name)


def copy_run(run, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(run, dst, symlinks=True)
    return dst


def compare(script, ref, run, expect_ok, what, must_name=None):
    p = subprocess.run([PY, script, ref, run], capture_output=True, text=True)
    out = p.stdout + p.stderr
    ok = (p.returncode == 0) if expect_ok else (p.returncode == 1)
    if ok and must_name and must_name not in out:
        ok = False
        what += f" (the output does not name {must_name})"
    check(ok, f"{what}: compare_runs exit {p.returncode}, expected {0 if expect_ok else 1}")
    if not ok or not expect_ok:
        lines = out.splitlines()
        show = [x for x in lines if "FAIL" in x or x.startswith(("metrics:", "params:"))]
        for x in (show if ok else lines)[:40]:
            print(f"     | {x}")


def perturb(run, name, index, delta):
    """Adds delta to element `index` of /model/name (float32) in run's
    checkpoint; returns the change actually stored."""
    with h5py.File(latest(run), "r+") as f:
        d = f["model"][name]
        a = d[()]
        flat = a.reshape(-1)
        old = flat[index]
        flat[index] = np.float32(float(old) + delta)
        d[...] = a
        return float(flat[index]) - float(old)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trident")
    ap.add_argument("work")
    ap.add_argument("--compare", default=os.path.join(SRC, "tests", "e2e", "compare_runs.py"))
    a = ap.parse_args()
    trident = os.path.abspath(a.trident)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    script = os.path.abspath(a.compare)
    text = open(script).read()
    m = re.search(r"^ZERO_GRAD_ATOL_DEFAULT\s*=\s*([0-9.eE+-]+)", text, re.M)
    atol = float(m.group(1)) if m else 5e-5
    print(f"compare_runs_selftest: script under test {script} (key-bias bound {atol:g})")

    corpus = os.path.join(work, "corpus.h5")
    if not os.path.isfile(corpus):
        subprocess.check_call([trident, "prepare", "--out", corpus + ".tmp", "--val-fraction", "0.1",
                               "/usr/share/common-licenses"], stdout=subprocess.DEVNULL)
        os.replace(corpus + ".tmp", corpus)
    ref, run = os.path.join(work, "dp1"), os.path.join(work, "dp2")
    train(trident, work, corpus, 1, ref)
    train(trident, work, corpus, 2, run)

    # 1. the real pair
    compare(script, ref, run, True, "dp 1 vs dp 2, unmodified, agree")

    # 2. grad_norm x 1.5 on every step
    c = copy_run(run, os.path.join(work, "case_grad_norm"))
    path = os.path.join(c, "metrics.jsonl")
    recs = [json.loads(x) for x in open(path) if x.strip()]
    with open(path, "w") as f:
        for r in recs:
            if "grad_norm" in r:
                r["grad_norm"] = r["grad_norm"] * 1.5
            f.write(json.dumps(r) + "\n")
    compare(script, ref, c, False, "every grad_norm x 1.5 is refused", must_name="grad_norm")

    # 3. the smallest bias tensor, one element off by 1e-3 of its own max
    with h5py.File(latest(ref), "r") as f:
        mx = {}
        f["model"].visititems(lambda n, o: mx.__setitem__(n, float(np.max(np.abs(o[()]))))
                              if isinstance(o, h5py.Dataset) else None)
    gmax = max(mx.values())
    small = min((n for n in mx if n.endswith(".bias") and "c_attn" not in n), key=lambda n: mx[n])
    c = copy_run(run, os.path.join(work, "case_small_tensor"))
    delta = perturb(c, small, 0, 1e-3 * mx[small])
    old_bound = 1e-5 * gmax
    print(f"     {small}: max|p_ref| {mx[small]:.3e}, one element moved by {delta:.3e} "
          f"(1e-3 of it); the old model-wide bound was 1e-5 x {gmax:.3e} = {old_bound:.3e}")
    check(abs(delta) < old_bound, f"the error ({abs(delta):.3e}) is below the old model-wide bound "
          f"({old_bound:.3e}): the old rule let it pass")
    compare(script, ref, c, False, f"{small} off by 1e-3 of its own max is refused", must_name=small)

    # 4./5. the attention key bias (K third), within and beyond the bound
    with h5py.File(latest(run), "r") as f:
        n3 = f["model"]["h.0.attn.c_attn.bias"].shape[0]
        kb = f["model"]["h.0.attn.c_attn.bias"][n3 // 3:2 * n3 // 3]
    with h5py.File(latest(ref), "r") as f:
        kb_ref = f["model"]["h.0.attn.c_attn.bias"][n3 // 3:2 * n3 // 3]
    k = int(np.argmin(np.abs(kb.astype(np.float64) - kb_ref)))  # the element closest to ref
    base = float(kb[k]) - float(kb_ref[k])
    for factor, ok in ((0.5, True), (2.0, False)):
        c = copy_run(run, os.path.join(work, f"case_kbias_{factor:g}"))
        delta = perturb(c, "h.0.attn.c_attn.bias", n3 // 3 + k, factor * atol)
        print(f"     h.0.attn.c_attn.bias[{n3 // 3 + k}] (K third) moved by {delta:.3e}; "
              f"now {abs(base + delta):.3e} from the reference, bound {atol:g}")
        compare(script, ref, c, ok,
                f"the key bias {'within' if ok else 'beyond'} its absolute bound "
                f"({factor:g} x {atol:g}) is {'accepted' if ok else 'refused'}",
                must_name=None if ok else "h.0.attn.c_attn.bias")

    n_ok = sum(results)
    print(f"{n_ok} passed, {len(results) - n_ok} failed")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
