#!/usr/bin/python3
"""ckpt_h5py.py CKPT [--ref REF_CKPT] [--expect-step N] [--expect-grid DP,TP,PP]
                    [--param-rtol R] [--no-tools]

A trident checkpoint read with h5py, numpy and the HDF5 command-line tools
only, no trident code (docs/architecture.md, "Checkpoint file (format 1)"):

  root     attributes format == "trident-checkpoint", format_version == 1,
           step, tokens_seen (== step x global_batch x seq_len), saved_grid
           (3 integers), trident_version (a non-empty string);
  /config  a string dataset: the resolved deck as YAML (model, training,
           optimizer, run sections);
  /model   exactly the Hugging Face GPT-2 tensors (with `transformer.`
           prefixed: transformer.wte.weight, ..., transformer.ln_f.bias) for
           the /config's layers, float32, Conv1D (in, out) shapes:
           wte (V, C), wpe (T, C), c_attn (C, 3C), attn.c_proj (C, C),
           c_fc (C, 4C), mlp.c_proj (4C, C), biases and LayerNorms 1-D;
  /optim   exp_avg/<name> and exp_avg_sq/<name> for every /model name, same
           shapes, float32 (exp_avg_sq >= 0); attributes step (== root
           step), lr (0 < lr <= optimizer.lr), betas, eps, weight_decay
           (== the /config's);
  /data    attributes epoch, position, seed (== run.seed); /rng present;
  checksum every /model and /optim tensor's `checksum` attribute equals the
           formula of io/td_ckpt.h, recomputed in numpy;
  --ref    every /model tensor within R x max|p_ref| (R default 1e-5) of
           REF's, the AdamW moments within R x their max, same step,
           tokens_seen and /data (e.g. a TP + ZeRO-3 save against the
           single-rank run's at the same step);
  tools    `h5ls -r` and `h5dump -H` read the file without errors.

Prints PASS/FAIL lines and "N passed, M failed"; exits 0 only if all passed.
"""
import argparse
import subprocess
import sys

import h5py
import numpy as np
import yaml

NPASS = NFAIL = 0


def check(ok, what, detail=""):
    global NPASS, NFAIL
    if ok:
        NPASS += 1
        print(f"PASS {what}")
    else:
        NFAIL += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""))
    return ok


def text(x):
    if isinstance(x, bytes):
        return x.decode("utf-8", "replace")
    if isinstance(x, np.ndarray) and x.shape == ():
        return text(x[()])
    return x if isinstance(x, str) else None


def ints(x):
    a = np.asarray(x)
    return [int(v) for v in a.reshape(-1)] if np.issubdtype(a.dtype, np.integer) else None


M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x, add=True):
    """td_mix64 (common/td_rng.c): splitmix64, on uint64 arrays (wrapping)."""
    with np.errstate(over="ignore"):
        if add:
            x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def checksum(a, add=True):
    b = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    k = np.arange(b.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(mix64(k ^ (b << np.uint64(32)), add).sum(dtype=np.uint64))


def expected_shapes(L, C, V, T):
    s = {"wte.weight": (V, C), "wpe.weight": (T, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(L):
        h = f"h.{i}."
        s.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,),
        })
    return s


def datasets(f, group):
    out = {}
    if group in f and isinstance(f[group], h5py.Group):
        f[group].visititems(lambda n, o: out.__setitem__(n, o) if isinstance(o, h5py.Dataset) else None)
    return out


def check_file(path, args):
    """Structure, names, shapes, dtypes, attributes, checksums. Returns the
    parsed /config (or None)."""
    print(f"ckpt_h5py: {path}")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        check(False, f"h5py opens {path}", str(e))
        return None
    with f:
        a = f.attrs
        check(text(a.get("format")) == "trident-checkpoint", "root attribute format == 'trident-checkpoint'",
              repr(a.get("format")))
        check(ints(a.get("format_version")) == [1], "root attribute format_version == 1", repr(a.get("format_version")))
        step = ints(a.get("step"))
        check(step is not None and len(step) == 1 and step[0] >= 0, f"root attribute step is an integer ({step})")
        step = step[0] if step else -1
        if args.expect_step is not None:
            check(step == args.expect_step, f"step == {args.expect_step}", f"found {step}")
        grid = ints(a.get("saved_grid"))
        check(grid is not None and len(grid) == 3 and min(grid) >= 1, f"root attribute saved_grid is [dp, tp, pp] ({grid})")
        if args.expect_grid:
            want = [int(x) for x in args.expect_grid.split(",")]
            check(grid == want, f"saved_grid == {want}", f"found {grid}")
        ver = text(a.get("trident_version"))
        check(bool(ver), f"root attribute trident_version is a string ({ver!r})")
        tokens = ints(a.get("tokens_seen"))

        # /config
        cfg = None
        try:
            ctext = text(f["config"][()])
            cfg = yaml.safe_load(ctext)
            ok = isinstance(cfg, dict) and all(k in cfg for k in ("model", "training", "optimizer", "run"))
            check(ok, "/config is a string dataset holding the resolved deck (YAML with model, training, optimizer, run)",
                  f"sections {sorted(cfg) if isinstance(cfg, dict) else type(cfg)}")
            if not ok:
                cfg = None
        except Exception as e:  # noqa: BLE001
            check(False, "/config is a readable YAML string dataset", repr(e))
        if cfg is None:
            return None
        mc = cfg["model"]
        L, C, V, T = (int(mc[k]) for k in ("layers", "dim", "vocab_size", "seq_len"))
        gb = int(cfg["training"]["global_batch"])
        check(tokens == [step * gb * T], f"tokens_seen == step x global_batch x seq_len = {step * gb * T}", f"found {tokens}")

        # /model: names (Hugging Face keys), shapes, dtypes
        want = expected_shapes(L, C, V, T)
        model = datasets(f, "model")
        names = set(model)
        hf = {"transformer." + n for n in names}
        hf_want = {"transformer." + n for n in want}
        check(hf == hf_want, f"/model names prefixed with 'transformer.' are the {len(hf_want)} Hugging Face GPT-2 keys "
              f"(transformer.wte.weight ... transformer.h.{L - 1}.mlp.c_proj.bias, transformer.ln_f.bias)",
              f"missing {sorted(hf_want - hf)[:5]}, extra {sorted(hf - hf_want)[:5]}")
        bad_shape = [f"{n} {model[n].shape} != {want[n]}" for n in sorted(names & set(want)) if model[n].shape != want[n]]
        check(not bad_shape, f"/model shapes in Conv1D (in, out) layout (c_attn ({C}, {3 * C}), c_fc ({C}, {4 * C}), "
              f"mlp.c_proj ({4 * C}, {C}), wte ({V}, {C}), wpe ({T}, {C}))", "; ".join(bad_shape[:5]))
        bad_dt = [f"{n} {d.dtype}" for n, d in model.items() if d.dtype != np.float32]
        check(not bad_dt, "/model tensors are float32", "; ".join(bad_dt[:5]))

        # /optim
        og = f.get("optim")
        check(isinstance(og, h5py.Group), "/optim is a group")
        mom = {}
        for m in ("exp_avg", "exp_avg_sq"):
            d = datasets(f, f"optim/{m}")
            mom[m] = d
            probs = [f"{n} missing" for n in sorted(names - set(d))] + [f"{n} extra" for n in sorted(set(d) - names)]
            probs += [f"{n} {d[n].dtype}{d[n].shape}" for n in sorted(set(d) & names)
                      if d[n].shape != model[n].shape or d[n].dtype != np.float32]
            check(not probs, f"/optim/{m}/<name> for every /model tensor, same shape, float32", "; ".join(probs[:5]))
        neg = [n for n, d in mom["exp_avg_sq"].items() if d.size and float(np.min(d[()])) < 0]
        check(not neg, "/optim/exp_avg_sq is >= 0", ", ".join(neg[:5]))
        if isinstance(og, h5py.Group):
            oa = og.attrs
            oc = cfg["optimizer"]
            missing = [k for k in ("step", "lr", "betas", "eps", "weight_decay") if k not in oa]
            check(not missing, "/optim attributes step, lr, betas, eps, weight_decay", f"missing {missing}")
            if not missing:
                check(ints(oa["step"]) == [step], f"/optim step == root step ({step})", repr(oa["step"]))
                lr = float(np.asarray(oa["lr"]).reshape(-1)[0])
                check(0 < lr <= float(oc["lr"]) * (1 + 1e-12), f"/optim lr {lr:g} in (0, optimizer.lr = {oc['lr']}]")
                b = [float(x) for x in np.asarray(oa["betas"]).reshape(-1)]
                cb = [float(x) for x in oc["betas"]]
                check(np.allclose(b, cb, rtol=1e-12), f"/optim betas == the deck's {cb}", f"found {b}")
                e, wd = float(np.asarray(oa["eps"]).reshape(-1)[0]), float(np.asarray(oa["weight_decay"]).reshape(-1)[0])
                check(abs(e - float(oc["eps"])) <= 1e-12 * abs(float(oc["eps"])) and
                      abs(wd - float(oc["weight_decay"])) <= 1e-12,
                      f"/optim eps, weight_decay == the deck's ({oc['eps']}, {oc['weight_decay']})", f"found {e}, {wd}")

        # /data, /rng
        dg = f.get("data")
        ok = isinstance(dg, h5py.Group) and all(k in dg.attrs for k in ("epoch", "position", "seed"))
        check(ok, "/data has attributes epoch, position, seed")
        if ok:
            check(ints(dg.attrs["seed"]) == [int(cfg["run"]["seed"])] and ints(dg.attrs["epoch"])[0] >= 0
                  and ints(dg.attrs["position"])[0] >= 0,
                  f"/data seed == run.seed ({cfg['run']['seed']}), epoch and position >= 0",
                  f"{dict((k, dg.attrs[k]) for k in dg.attrs)}")
        check("rng" in f, "/rng is present")

        # checksums
        bad, nochk, n, alt = [], [], 0, 0
        for g, ds in (("model", model), ("optim/exp_avg", mom["exp_avg"]), ("optim/exp_avg_sq", mom["exp_avg_sq"])):
            for name, d in ds.items():
                n += 1
                if "checksum" not in d.attrs:
                    nochk.append(f"/{g}/{name}")
                    continue
                stored = int(np.asarray(d.attrs["checksum"]).astype(np.uint64).reshape(-1)[0])
                x = d[()]
                if checksum(x) != stored:
                    bad.append(f"/{g}/{name}")
                    alt += checksum(x, add=False) == stored
        check(not bad and not nochk, f"the 'checksum' attribute of all {n} tensors equals the io/td_ckpt.h formula "
              "(recomputed in numpy)",
              f"mismatch: {bad[:4]}, missing: {nochk[:4]}"
              + (f" ({alt} match mix64 WITHOUT the +0x9e37... step, the header's 'finaliser' wording)" if alt else ""))

        # the HDF5 tools
        if not args.no_tools:
            for tool in (["h5ls", "-r", path], ["h5dump", "-H", path]):
                try:
                    p = subprocess.run(tool, capture_output=True, text=True, timeout=60)
                    out = p.stdout + p.stderr
                    ok = p.returncode == 0 and "error" not in out.lower() and "/model/wpe.weight" in out.replace(
                        'DATASET "wpe.weight"', "/model/wpe.weight")
                    check(ok, f"{' '.join(tool[:2])} reads it (exit {p.returncode}, {len(out.splitlines())} lines)",
                          out[-400:])
                except (OSError, subprocess.TimeoutExpired) as e:
                    check(False, f"{' '.join(tool[:2])} runs", repr(e))
        return cfg


def compare(path, ref, rtol):
    print(f"ckpt_h5py: {path}\n       vs {ref}")
    with h5py.File(path, "r") as f, h5py.File(ref, "r") as g:
        for k in ("step", "tokens_seen"):
            check(ints(f.attrs.get(k)) == ints(g.attrs.get(k)), f"{k} equal ({ints(f.attrs.get(k))})",
                  f"ref {ints(g.attrs.get(k))}")
        da = {k: ints(f["data"].attrs[k]) for k in f["data"].attrs} if "data" in f else None
        db = {k: ints(g["data"].attrs[k]) for k in g["data"].attrs} if "data" in g else None
        check(da == db and da is not None, f"/data sampler state equal ({da})", f"ref {db}")
        for grp in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
            a, b = datasets(f, grp), datasets(g, grp)
            if set(a) != set(b):
                check(False, f"/{grp} same tensors as the reference", f"{sorted(set(a) ^ set(b))[:5]}")
                continue
            vb = {n: b[n][()].astype(np.float64) for n in b}
            gmax = max(float(np.max(np.abs(v))) for v in vb.values() if v.size)
            worst, wn, bad = 0.0, "", []
            for n in sorted(a):
                x = a[n][()].astype(np.float64)
                if x.shape != vb[n].shape:
                    bad.append(f"{n} shape {x.shape} vs {vb[n].shape}")
                    continue
                d = float(np.max(np.abs(x - vb[n]))) if x.size else 0.0
                if not (np.all(np.isfinite(x)) and d <= rtol * gmax):
                    bad.append(f"{n} {d:.3e}")
                if d >= worst:
                    worst, wn = d, n
            check(not bad, f"/{grp}: {len(a)} tensors within {rtol:g} x max|ref| = {rtol * gmax:.3e} "
                  f"(worst {wn}: {worst:.3e}, {worst / gmax if gmax else 0:.1e} of max)", "; ".join(bad[:5]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--ref")
    ap.add_argument("--expect-step", type=int)
    ap.add_argument("--expect-grid")
    ap.add_argument("--param-rtol", type=float, default=1e-5)
    ap.add_argument("--no-tools", action="store_true")
    args = ap.parse_args()
    check_file(args.ckpt, args)
    if args.ref:
        compare(args.ckpt, args.ref, args.param_rtol)
    print(f"{NPASS} passed, {NFAIL} failed")
    return 0 if NFAIL == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
