#!/usr/bin/python3
"""Compare a trident training dump against the float64 PyTorch oracle.

Usage (Debian's interpreter, which has torch, numpy and h5py):
    /usr/bin/python3 tests/reference/check_train.py DUMP.h5 [--steps N] [--heads H] [--quiet]
    /usr/bin/python3 tests/reference/check_train.py --selftest [--keep DIR]

DUMP.h5 is written by `trident train DECK --dump FILE`:
  root attributes  vocab_size seq_len layers dim heads global_batch steps warmup (int)
                   lr min_lr beta1 beta2 eps weight_decay grad_clip (float)
                   decay ("cosine" | "linear" | "constant")
                   arch ("gpt2" | "llama"; absent: gpt2), and for llama kv_heads
                   (int), norm_eps, rope_theta (float): the oracle is gpt2_ref.py
                   or llama_ref.py
  /model/<name>        initial parameters, float32, global shapes
  /batches             int32 (S, global_batch, T+1); inputs [:, :T], targets [:, 1:]
  /losses /grad_norms /lrs   float64 (S); grad norm is before clipping
  /masks, /docs        (optional) uint8 and int32 (S, global_batch, T+1): each
                       token's loss mask and its document's start in the window
                       (a chat dataset; data.attend: document). The oracle then
                       computes every document of every window on its own
                       (positions from 0, attention inside it) and the loss as
                       the mean over the targets the mask keeps — the packed
                       batch must equal the sum over its documents.
  /grad/<name>         float32 gradient of step 0's loss (before clipping)
  /model_after/<name>  parameters after step 0's update

Checks (all recomputed in float64 from the dumped float32 initial parameters):
  (a) step-0 loss                relative error <= 1e-5
  (b) every step-0 gradient      max|g - gref| <= 1e-4 * max|gref|  (per tensor)
  (c) step-0 update D = after - before vs the oracle's Dref, over all parameters
      together: ||E|| / ||Dref|| <= 1e-4.  Dref is torch.optim.AdamW (float64)
      applied to trident's own dumped step-0 gradient (so (c) tests the optimizer,
      clipping and lr; (b) tests the gradient).  E = max(0, |D - Dref| - ulp32(p1))
      element-wise: each element may be off by one float32 ulp of the new
      parameter, because a float32 optimizer must round p (torch's own float32
      AdamW rounds twice: p*(1-lr*wd), then p - lr*m/(sqrt(v)+eps)).  Without that
      allowance torch's float32 AdamW itself scores ~5e-5..1e-4 when lr is small
      (lr 1.5e-5 on p ~ 0.02 whose ulp is 1.9e-9).  The raw ||D - Dref|| / ||Dref||
      is printed too, for information.
  (d) /lrs equal to the schedule, relative 1e-6
  (e) replay every step (or the first N) with the same batches from the same
      initial parameters (float64, own AdamW): loss relative 1e-4, grad norm
      relative 1e-3.
  (f) model.moe (the dump has /moe_aux_losses, /moe_z_losses): the sparse
      blocks' auxiliary terms of every replayed step, relative 1e-5 at step 0
      (the same parameters) and 1e-3 after (a token routed differently at a
      near-tie of float32 and float64 logits moves the replay off by ~1e-5).

Exit status: 0 all checks pass, 1 a check failed, 2 bad input.
"""

import argparse
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402
import llama_ref as LL  # noqa: E402

TOL_LOSS0 = 1e-5
TOL_GRAD = 1e-4
TOL_UPDATE = 1e-4
TOL_LR = 1e-6
TOL_LOSS = 1e-4
TOL_GNORM = 1e-3

INT_ATTRS = ["vocab_size", "seq_len", "layers", "dim", "heads", "global_batch",
             "steps", "warmup"]
FLOAT_ATTRS = ["lr", "min_lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"]


class BadInput(Exception):
    pass


def _attr(f, key):
    if key not in f.attrs:
        raise BadInput("%s: missing root attribute '%s'" % (f.filename, key))
    v = f.attrs[key]
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise BadInput("%s: attribute '%s' should be a scalar, found shape %s"
                           % (f.filename, key, v.shape))
        v = v.reshape(()).item()
    if isinstance(v, (bytes, np.bytes_)):
        v = v.decode()
    return v


def read_dump(path):
    import h5py
    if not os.path.exists(path):
        raise BadInput("%s: no such file" % path)
    d = {}
    with h5py.File(path, "r") as f:
        for k in INT_ATTRS:
            d[k] = int(_attr(f, k))
        for k in FLOAT_ATTRS:
            d[k] = float(_attr(f, k))
        d["decay"] = str(_attr(f, "decay"))
        for k in ["batches", "losses", "grad_norms", "lrs"]:
            if k not in f:
                raise BadInput("%s: missing dataset /%s" % (path, k))
            d[k] = f[k][()]
        for k in ["masks", "docs", "moe_aux_losses", "moe_z_losses"]:
            d[k] = f[k][()] if k in f else None
        d["arch"] = str(_attr(f, "arch")) if "arch" in f.attrs else "gpt2"
        if d["arch"] == "llama":
            d["llama"] = {"kv_heads": int(_attr(f, "kv_heads")),
                          "norm_eps": float(_attr(f, "norm_eps")),
                          "rope_theta": float(_attr(f, "rope_theta"))}
        elif d["arch"] != "gpt2":
            raise BadInput("%s: arch %r (gpt2 or llama expected)" % (path, d["arch"]))
        if "moe_experts" in f.attrs:  # model.moe: sparse blocks
            moe = {k: (float if k in ("aux_loss", "z_loss") else int)(_attr(f, "moe_" + k))
                   for k in ("experts", "top_k", "every", "ffn_dim", "aux_loss", "z_loss")}
            if "moe_capacity_factor" in f.attrs:
                moe["capacity_factor"] = float(_attr(f, "moe_capacity_factor"))
            d.setdefault("llama", {})["moe"] = moe  # the model's keywords (both families)
    M = LL if d["arch"] == "llama" else G
    d["M"] = M
    for g in ["model", "grad", "model_after"]:
        try:
            d[g] = G.load_model_h5(path, g)
        except KeyError as e:
            raise BadInput(str(e))
    S = d["batches"].shape[0]
    want = (S, d["global_batch"], d["seq_len"] + 1)
    if d["batches"].ndim != 3 or tuple(d["batches"].shape) != want:
        raise BadInput("%s: /batches: expected shape %s, found %s"
                       % (path, want, d["batches"].shape))
    for k in ["losses", "grad_norms", "lrs"]:
        if d[k].shape != (S,):
            raise BadInput("%s: /%s: expected shape (%d,), found %s" % (path, k, S, d[k].shape))
    kw = d.get("llama", {})
    try:
        cfg = M.infer_config(d["model"], d["heads"], **kw)
        if d["arch"] == "llama":
            cfg.seq_len = d["seq_len"]
        for g in ["grad", "model_after"]:
            M.infer_config(d[g], d["heads"], **kw)
    except ValueError as e:
        raise BadInput("%s: %s" % (path, e))
    for k in ["vocab_size", "seq_len", "layers", "dim"]:
        if getattr(cfg, k) != d[k]:
            raise BadInput("%s: attribute %s=%d but /model implies %d"
                           % (path, k, d[k], getattr(cfg, k)))
    b = d["batches"]
    if b.min() < 0 or b.max() >= d["vocab_size"]:
        raise BadInput("%s: /batches holds token ids outside [0, %d)" % (path, d["vocab_size"]))
    d["cfg"] = cfg
    return d


def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


def _batch(d, s):
    """Inputs and targets of step s; a target the loss mask leaves out is -1."""
    w = torch.from_numpy(d["batches"][s].astype(np.int64))
    tgt = w[:, 1:].clone()
    if d["masks"] is not None:
        tgt[torch.from_numpy(d["masks"][s][:, 1:] == 0)] = -1
    return w[:, :-1].contiguous(), tgt.contiguous()


def _model(d, s):
    """The forward of step s: the model's own, or — with masks or documents —
    one that computes each document of each window separately (positions
    from 0, attention inside it) and averages the cross-entropy over the
    targets the mask keeps, over the whole batch."""
    M = d["M"]
    if d["masks"] is None and d["docs"] is None:
        return M.forward
    docs = d["docs"][s] if d["docs"] is not None else None

    def fwd(params, idx, cfg, targets=None, mask=None):
        B, T = idx.shape
        count = int((targets >= 0).sum())
        total = None
        for b in range(B):
            st = docs[b][:T] if docs is not None else np.zeros(T, dtype=np.int64)
            bounds = [t for t in range(T) if t == 0 or st[t] != st[t - 1]] + [T]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                if st[lo] != lo and lo != 0:
                    raise BadInput("/docs: step %d window %d: token %d starts a document at %d"
                                   % (s, b, lo, st[lo]))
                logits, _ = M.forward(params, idx[b:b + 1, lo:hi], cfg)
                tg = targets[b, lo:hi]
                keep = tg >= 0
                if bool(keep.any()):
                    part = F.cross_entropy(logits[0][keep], tg[keep], reduction="sum")
                    total = part if total is None else total + part
        if total is None:
            total = sum(p.sum() * 0.0 for p in params.values())
        return None, total / max(count, 1)
    return fwd


def _opt(d, params):
    return d["M"].make_adamw(params, lr=d["lr"], betas=(d["beta1"], d["beta2"]),
                        eps=d["eps"], weight_decay=d["weight_decay"])


def _lr(d, s):
    return G.lr_at(s, d["lr"], d["min_lr"], d["warmup"], d["steps"], d["decay"])


def check_dump(path, max_steps=None, log=print, verbose=True):
    """Run checks (a)-(e). Returns {check: bool}. Raises BadInput."""
    torch.set_default_dtype(torch.float64)
    d = read_dump(path)
    cfg = d["cfg"]
    M = d["M"]
    names = M.param_names(cfg)
    S = d["batches"].shape[0]
    nrep = S if max_steps is None else max(0, min(S, max_steps))
    res = {}
    log("trident dump %s" % path)
    log("  model: %s V=%d T=%d layers=%d dim=%d heads=%d%s  global_batch=%d  dumped steps=%d "
        "(schedule steps=%d warmup=%d decay=%s)" % (
            d["arch"], cfg.vocab_size, cfg.seq_len, cfg.layers, cfg.dim, cfg.heads,
            " kv_heads=%d ffn_dim=%d tied=%s" % (cfg.kv_heads, cfg.ffn_dim, cfg.tied)
            if M is LL else "", d["global_batch"], S, d["steps"], d["warmup"], d["decay"]))
    log("  adamw: lr=%g min_lr=%g betas=(%g, %g) eps=%g weight_decay=%g grad_clip=%g"
        % (d["lr"], d["min_lr"], d["beta1"], d["beta2"], d["eps"], d["weight_decay"],
           d["grad_clip"]))
    if S == 0:
        raise BadInput("%s: the dump holds no steps" % path)

    # ---- (a) step-0 loss and (b) gradients ---------------------------------
    P = M.to_torch(d["model"], torch.float64)
    idx, tgt = _batch(d, 0)
    if d["masks"] is not None:
        log("  packed: %d windows of step 0 hold %d document starts; the loss counts %d of "
            "their %d targets" % (idx.shape[0], 0 if d["docs"] is None else int(
                sum(len(set(r[:-1].tolist())) for r in d["docs"][0])),
                int((tgt >= 0).sum()), tgt.numel()))
    _, loss = _model(d, 0)(P, idx, cfg, tgt)
    loss.backward()
    loss0 = loss.item()
    e = _rel(float(d["losses"][0]), loss0)
    res["a_loss0"] = e <= TOL_LOSS0
    log("")
    log("(a) step-0 loss: trident %.10f  oracle %.10f  rel err %.2e  (tol %.0e)  %s"
        % (d["losses"][0], loss0, e, TOL_LOSS0, "ok" if res["a_loss0"] else "FAIL"))

    log("")
    log("(b) step-0 gradients: max|g - gref| / max|gref|  (tol %.0e per tensor)" % TOL_GRAD)
    log("    %-28s %-14s %12s %12s %10s" % ("tensor", "shape", "max|gref|", "max|err|", "ratio"))
    gok = True
    worst = (0.0, "")
    for n in names:
        gref = P[n].grad.numpy()
        g = np.asarray(d["grad"][n], dtype=np.float64)
        m = float(np.abs(gref).max())
        err = float(np.abs(g - gref).max())
        ratio = err / m if m > 0 else (0.0 if err == 0 else math.inf)
        ok = ratio <= TOL_GRAD
        gok &= ok
        if ratio >= worst[0]:
            worst = (ratio, n)
        if verbose or not ok:
            log("    %-28s %-14s %12.4e %12.4e %10.2e  %s" % (
                n, "x".join(map(str, gref.shape)), m, err, ratio, "ok" if ok else "FAIL"))
    res["b_grads"] = gok
    log("    worst: %s (%.2e)  %s" % (worst[1], worst[0], "ok" if gok else "FAIL"))

    # ---- (c) step-0 update ---------------------------------------------------
    Pd = M.to_torch(d["model"], torch.float64)
    for n in names:
        Pd[n].grad = torch.tensor(np.asarray(d["grad"][n], dtype=np.float64))
    gn_dumped_grad = M.clip_grad_norm(Pd, d["grad_clip"])
    opt = _opt(d, Pd)
    M.set_lr(opt, _lr(d, 0))
    opt.step()
    num = num_raw = den = 0.0
    rows = []
    for n in names:
        p0 = np.asarray(d["model"][n], dtype=np.float64)
        after = np.asarray(d["model_after"][n], dtype=np.float64)
        exact = Pd[n].detach().numpy()            # float64 p0 after AdamW
        dref = exact - p0
        dlt = after - p0
        # float32 allowance: one unit in the last place of the new parameter
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        excess = np.maximum(0.0, np.abs(dlt - dref) - ulp)
        a = float(np.sum(excess ** 2))
        b = float(np.sum(dref ** 2))
        num += a
        den += b
        num_raw += float(np.sum((dlt - dref) ** 2))
        rows.append((math.sqrt(a / b) if b > 0 else (0.0 if a == 0 else math.inf), n,
                     math.sqrt(b), math.sqrt(a)))
    tot = math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)
    tot_raw = math.sqrt(num_raw / den) if den > 0 else math.inf
    res["c_update"] = tot <= TOL_UPDATE
    log("")
    log("(c) step-0 update (lr %.6g, grad norm of dumped grads %.6g, clip %g)"
        % (_lr(d, 0), gn_dumped_grad, d["grad_clip"]))
    rows.sort(reverse=True)
    log("    worst tensors:  %-28s %12s %12s %10s" % ("tensor", "||Dref||", "||excess||", "rel"))
    for r in rows[:5 if verbose else 3]:
        log("                    %-28s %12.4e %12.4e %10.2e" % (r[1], r[2], r[3], r[0]))
    log("    all parameters: ||D - Dref|| / ||Dref|| = %.2e  (raw, for information)" % tot_raw)
    log("    all parameters, beyond 1 float32 ulp of p: %.2e  (tol %.0e)  %s"
        % (tot, TOL_UPDATE, "ok" if res["c_update"] else "FAIL"))

    # ---- (d) learning rates --------------------------------------------------
    lerr = 0.0
    lworst = 0
    for s in range(S):
        want = _lr(d, s)
        err = abs(float(d["lrs"][s]) - want) / max(abs(want), 1e-30)
        if abs(float(d["lrs"][s]) - want) <= 1e-15:
            err = 0.0
        if err > lerr:
            lerr, lworst = err, s
    res["d_lrs"] = lerr <= TOL_LR
    log("")
    log("(d) learning-rate schedule over %d steps: worst rel err %.2e at step %d "
        "(trident %.9g, schedule %.9g)  (tol %.0e)  %s"
        % (S, lerr, lworst, d["lrs"][lworst], _lr(d, lworst), TOL_LR,
           "ok" if res["d_lrs"] else "FAIL"))

    # ---- (e) replay ----------------------------------------------------------
    log("")
    log("(e) replay of %d step(s) in float64 (loss tol %.0e, grad-norm tol %.0e)"
        % (nrep, TOL_LOSS, TOL_GNORM))
    log("    %5s %16s %16s %9s %13s %13s %9s" % ("step", "loss trident", "loss oracle",
                                                "rel", "gnorm trident", "gnorm oracle", "rel"))
    R = M.to_torch(d["model"], torch.float64)
    opt = _opt(d, R)
    mask = M.causal_mask(cfg.seq_len)
    eok = True
    wl = wg = 0.0
    moe = d["moe_aux_losses"] is not None
    terms, seen = {}, []  # model.moe: each step's auxiliary terms, the oracle's

    def with_terms(params, idx, cfg, targets=None, mask=None):
        return M.forward(params, idx, cfg, targets, mask, terms=terms)
    for s in range(nrep):
        idx, tgt = _batch(d, s)
        fwd = with_terms if moe and d["masks"] is None else _model(d, s)
        l, gn = G.train_step(R, opt, idx, tgt, cfg, _lr(d, s), d["grad_clip"], mask, model=fwd)
        seen.append((terms.get("aux"), terms.get("z")))
        el = _rel(float(d["losses"][s]), l)
        eg = _rel(float(d["grad_norms"][s]), gn)
        ok = el <= TOL_LOSS and eg <= TOL_GNORM
        eok &= ok
        wl, wg = max(wl, el), max(wg, eg)
        if verbose or not ok or s == nrep - 1:
            log("    %5d %16.10f %16.10f %9.2e %13.6e %13.6e %9.2e  %s" % (
                s, d["losses"][s], l, el, d["grad_norms"][s], gn, eg, "ok" if ok else "FAIL"))
    res["e_replay"] = eok
    log("    worst: loss %.2e, grad norm %.2e  %s" % (wl, wg, "ok" if eok else "FAIL"))

    # ---- (f) the sparse blocks' auxiliary terms (model.moe) -------------------
    if moe:
        log("")
        log("(f) model.moe auxiliary terms over the replay (load balance E*sum f*P, z-loss "
            "mean lse^2; tol %.0e at step 0, %.0e after)" % (TOL_LOSS0, TOL_GNORM))
        fok, wa, wz = True, 0.0, 0.0
        for s, (a, z) in enumerate(seen):
            if a is None:
                raise BadInput("%s: /moe_aux_losses but the oracle computed no sparse block" % path)
            ea = _rel(float(d["moe_aux_losses"][s]), a)
            ez = _rel(float(d["moe_z_losses"][s]), z)
            # step 0 from the same parameters; later steps from the replay's, which
            # a token routed differently at a near-tie (float32 vs float64 logits)
            # moves off trident's by ~1e-5 (the loss tolerance absorbs it)
            tol = TOL_LOSS0 if s == 0 else TOL_GNORM
            ok = ea <= tol and ez <= tol
            fok &= ok
            wa, wz = max(wa, ea), max(wz, ez)
            if verbose or not ok or s == nrep - 1:
                log("    %5d aux trident %.10f oracle %.10f (%.2e)  z trident %.10f oracle %.10f "
                    "(%.2e)  %s" % (s, d["moe_aux_losses"][s], a, ea, d["moe_z_losses"][s], z, ez,
                                   "ok" if ok else "FAIL"))
        res["f_moe"] = fok
        log("    worst: aux %.2e, z %.2e  %s" % (wa, wz, "ok" if fok else "FAIL"))

    log("")
    log("summary: " + "  ".join("%s=%s" % (k, "ok" if v else "FAIL") for k, v in res.items()))
    log("RESULT: %s" % ("PASS" if all(res.values()) else "FAIL"))
    return res


# ---------------------------------------------------------------------------
# self-test: a dump written by torch itself in float32
# ---------------------------------------------------------------------------

def write_dump(path, cfg, global_batch=4, steps=12, dump_steps=None, warmup=3, lr=1e-3,
               min_lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, grad_clip=1.0,
               decay="cosine", seed=0, bug=None):
    """Train with the reference in float32 (what trident does) and write a dump.
    bug="decay_all" decays every parameter, bug="no_decay" none (self-test)."""
    import h5py
    S = steps if dump_steps is None else dump_steps
    init = G.init_params(cfg, seed=seed, perturb=0.02)
    rng = np.random.default_rng(seed + 1)
    batches = rng.integers(0, cfg.vocab_size, size=(S, global_batch, cfg.seq_len + 1)).astype(np.int32)
    P = G.to_torch(init, torch.float32)
    opt = G.make_adamw(P, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if bug == "decay_all":
        opt.param_groups[1]["weight_decay"] = weight_decay
    elif bug == "no_decay":
        opt.param_groups[0]["weight_decay"] = 0.0
    losses, gns, lrs = [], [], []
    grads0 = after0 = None
    mask = G.causal_mask(cfg.seq_len)
    for s in range(S):
        w = torch.from_numpy(batches[s].astype(np.int64))
        for t in P.values():
            t.grad = None
        _, loss = G.forward(P, w[:, :-1], cfg, w[:, 1:], mask)
        loss.backward()
        if s == 0:
            grads0 = {n: t.grad.detach().numpy().copy() for n, t in P.items()}
        gn = G.clip_grad_norm(P, grad_clip)
        cur = G.lr_at(s, lr, min_lr, warmup, steps, decay)
        G.set_lr(opt, cur)
        opt.step()
        if s == 0:
            after0 = {n: t.detach().numpy().copy() for n, t in P.items()}
        losses.append(loss.item())
        gns.append(gn)
        lrs.append(cur)
    with h5py.File(path, "w") as f:
        for k, v in [("vocab_size", cfg.vocab_size), ("seq_len", cfg.seq_len),
                     ("layers", cfg.layers), ("dim", cfg.dim), ("heads", cfg.heads),
                     ("global_batch", global_batch), ("steps", steps), ("warmup", warmup)]:
            f.attrs[k] = np.int64(v)
        for k, v in [("lr", lr), ("min_lr", min_lr), ("beta1", betas[0]), ("beta2", betas[1]),
                     ("eps", eps), ("weight_decay", weight_decay), ("grad_clip", grad_clip)]:
            f.attrs[k] = np.float64(v)
        f.attrs["decay"] = decay
        for g, arrs in [("model", init), ("grad", grads0), ("model_after", after0)]:
            grp = f.create_group(g)
            for n in G.param_names(cfg.layers):
                grp.create_dataset(n, data=np.asarray(arrs[n], dtype=np.float32))
        f.create_dataset("batches", data=batches)
        f.create_dataset("losses", data=np.array(losses, dtype=np.float64))
        f.create_dataset("grad_norms", data=np.array(gns, dtype=np.float64))
        f.create_dataset("lrs", data=np.array(lrs, dtype=np.float64))


def _corrupt(src, dst, fn):
    import shutil
    import h5py
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        fn(f)


def selftest(keep=None):
    tmp = keep or tempfile.mkdtemp(prefix="trident_check_train_")
    os.makedirs(tmp, exist_ok=True)
    cfg = G.Config(vocab_size=64, seq_len=16, layers=2, dim=32, heads=4)
    ok = True
    good = os.path.join(tmp, "good.h5")
    print("== self-test: float32 torch dump, cosine schedule, must PASS ==")
    write_dump(good, cfg, steps=12, warmup=3, decay="cosine", grad_clip=1.0)
    r = check_dump(good)
    ok &= all(r.values())
    for decay, clip, lr, warmup in [("linear", 0.0, 1e-3, 2), ("constant", 0.5, 1e-3, 2),
                                    ("cosine", 1.0, 3e-4, 100)]:
        p = os.path.join(tmp, "good_%s_%g.h5" % (decay, lr))
        write_dump(p, cfg, steps=200, dump_steps=6, warmup=warmup, decay=decay,
                   grad_clip=clip, lr=lr, min_lr=lr / 10, seed=5)
        r = check_dump(p, log=lambda *a: None)
        print("== self-test: %s schedule, lr %g, warmup %d, grad_clip %g: %s ==" % (
            decay, lr, warmup, clip, "PASS" if all(r.values()) else "FAIL %s" % r))
        ok &= all(r.values())

    def bump_grad(f):
        ds = f["grad/h.1.attn.c_attn.weight"]
        a = ds[()]
        j = np.unravel_index(np.argmax(np.abs(a)), a.shape)
        a[(j[0], (j[1] + 7) % a.shape[1])] += 1e-3 * np.abs(a).max()
        ds[()] = a

    def bump_after(f):
        ds = f["model_after/h.0.mlp.c_fc.bias"]
        a = ds[()]
        a[3] += 10 * f.attrs["lr"]
        ds[()] = a

    def swap_qk(f):  # [K|Q|V] instead of [Q|K|V] in the initial params
        ds = f["model/h.0.attn.c_attn.weight"]
        a = ds[()]
        C = a.shape[0]
        a = np.concatenate([a[:, C:2 * C], a[:, :C], a[:, 2 * C:]], axis=1)
        ds[()] = a

    def bump_lr(f):
        a = f["lrs"][()]
        a[5] *= 1 + 1e-5
        f["lrs"][()] = a

    def bump_loss(f):
        a = f["losses"][()]
        a[7] *= 1 + 3e-4
        f["losses"][()] = a

    cases = [("gradient of h.1.attn.c_attn.weight off by 1e-3*max in one element",
              bump_grad, "b_grads"),
             ("model_after h.0.mlp.c_fc.bias[3] off by 10*lr", bump_after, "c_update"),
             ("initial c_attn Q/K blocks swapped", swap_qk, "b_grads"),
             ("lrs[5] off by 1e-5 relative", bump_lr, "d_lrs"),
             ("losses[7] off by 3e-4 relative", bump_loss, "e_replay")]
    for i, (what, fn, must) in enumerate(cases):
        p = os.path.join(tmp, "bad%d.h5" % i)
        _corrupt(good, p, fn)
        r = check_dump(p, log=lambda *a: None)
        failed = [k for k, v in r.items() if not v]
        good_case = must in failed
        ok &= good_case
        print("== self-test: corrupted (%s): failed checks %s -> %s ==" % (
            what, failed, "detected" if good_case else "NOT DETECTED"))
    for bug in ["no_decay", "decay_all"]:
        p = os.path.join(tmp, "bug_%s.h5" % bug)
        write_dump(p, cfg, steps=200, dump_steps=3, warmup=20, lr=3e-4, min_lr=3e-5,
                   weight_decay=0.1, bug=bug, seed=7)
        r = check_dump(p, log=lambda *a: None)
        failed = [k for k, v in r.items() if not v]
        ok &= "c_update" in failed
        print("== self-test: optimizer bug %s at lr 1.5e-5: failed checks %s -> %s ==" % (
            bug, failed, "detected" if "c_update" in failed else "NOT DETECTED"))
    # the CLI's exit status
    import subprocess
    me = os.path.abspath(__file__)
    rc0 = subprocess.call([sys.executable, me, good, "--quiet"], stdout=subprocess.DEVNULL)
    rc1 = subprocess.call([sys.executable, me, os.path.join(tmp, "bad0.h5"), "--quiet"],
                          stdout=subprocess.DEVNULL)
    rc2 = subprocess.call([sys.executable, me, os.path.join(tmp, "missing.h5")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("== self-test: exit status good=%d corrupted=%d missing=%d (want 0 1 2) ==" % (rc0, rc1, rc2))
    ok &= (rc0, rc1, rc2) == (0, 1, 2)
    if not keep:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    print("SELFTEST %s" % ("PASSED" if ok else "FAILED"))
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", nargs="?", help="trident --dump HDF5 file")
    ap.add_argument("--steps", type=int, default=None, help="replay only the first N steps")
    ap.add_argument("--quiet", action="store_true", help="print failing rows and summaries only")
    ap.add_argument("--selftest", action="store_true", help="check this script on torch-made dumps")
    ap.add_argument("--keep", default=None, help="--selftest: keep the dumps in this folder")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if a.selftest:
        return 0 if selftest(a.keep) else 1
    if not a.dump:
        ap.print_usage(sys.stderr)
        print("check_train.py: error: a dump file is required", file=sys.stderr)
        return 2
    try:
        r = check_dump(a.dump, a.steps, verbose=not a.quiet)
    except BadInput as e:
        print("check_train.py: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("check_train.py: %s: %s" % (a.dump, e), file=sys.stderr)
        return 2
    return 0 if all(r.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
