#!/usr/bin/python3
"""PyTorch side of trident's CPU training benchmark: GPT-2 (float32, or with
--autocast bf16 mixed precision), AdamW.

Run with Debian's interpreter (torch 1.13.1 CPU, OpenBLAS-pthread for GEMM):

    OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184 OPENBLAS_CORETYPE=SkylakeX \\
    /usr/bin/python3 tests/bench/torch_gpt2_bench.py --layers 6 --dim 384 --heads 6 \\
        --vocab 256 --seq-len 256 --batch 4 --steps 10 --warmup-steps 3 --threads 2

Environment (set by the driving shell script, the same for trident and torch):
  OMP_WAIT_POLICY=PASSIVE        OpenMP threads sleep instead of spinning, so the
                                 OpenMP pool and OpenBLAS's own pthread pool do not
                                 fight for the cores between ops;
  MALLOC_MMAP_MAX_=0             glibc never serves big tensors with mmap, and
  MALLOC_TRIM_THRESHOLD_=<large> never gives freed memory back: every step reuses
                                 the same heap pages instead of mmap/munmap + page
                                 faults for each activation (large win for torch).
  OPENBLAS_CORETYPE=SkylakeX     Debian's OpenBLAS 0.3.21 does not recognise this
                                 host's Xeon (family 6, model 207) and falls back
                                 to SSE3 "Prescott" kernels (2-2.5x slower sgemm).
                                 If unset, this script picks SkylakeX (AVX-512) or
                                 Haswell (AVX2) from /proc/cpuinfo.  Anything else
                                 linked to this OpenBLAS (trident's CBLAS path)
                                 needs the same variable.
This script also pins OMP_NUM_THREADS and OPENBLAS_NUM_THREADS to --threads
before torch is imported (unless they are already set), calls
torch.set_num_threads(threads) and openblas_set_num_threads(threads), and uses one
inter-op thread.

The model is the same GPT-2 as tests/reference/gpt2_ref.py (learned token and
position embeddings, pre-LN blocks, fused QKV, causal softmax attention,
tanh-GELU 4x MLP, final LN, LM head tied to wte, biases everywhere), in its
fastest faithful torch 1.13 formulation (chosen by measurement, --impl):
  * nn.Linear layout (out, in) weights with F.linear (BLAS sgemm; marginally
    faster than addmm on Conv1D (in, out) weights -- see --impl conv1d);
  * F.embedding for wte/wpe (its dense backward beats index_put accumulation);
  * attention: torch.baddbmm(additive causal mask, q, k^T, alpha=1/sqrt(hs)),
    softmax, bmm.  torch 1.13 has no public F.scaled_dot_product_attention; its
    private torch._scaled_dot_product_attention is the same math and was not
    faster (--impl sdpa);
  * native F.layer_norm, F.gelu(approximate="tanh"), F.cross_entropy;
  * torch.optim.AdamW(foreach=True), lr 3e-4, betas (0.9, 0.95), eps 1e-8,
    weight decay 0.1 on 2-D weights only; grad clipping to 1.0
    (--grad-clip 0 disables); zero_grad(set_to_none=True).
Tokens are uniform random ids, drawn before timing.

Output: ONE JSON line
  {"tokens_per_s", "tokens_per_s_mean", "step_ms_median", "step_ms_mean", "step_ms_min",
   "peak_rss_bytes", "params", "threads", "openblas_core", "first_loss", "last_loss", ...}
tokens_per_s = batch*seq_len / (median timed step), robust to the noise of a
shared host; tokens_per_s_mean = batch*seq_len*steps / (sum of the timed steps);
a step = zero_grad + forward + backward + clip + AdamW step + loss.item();
peak_rss_bytes = resource.getrusage(RUSAGE_SELF).ru_maxrss * 1024.
"""

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time


def parse(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch GPT-2 CPU training benchmark")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--autocast", action="store_true",
                    help="mixed precision: forward under torch.autocast('cpu', bfloat16), "
                         "float32 master weights")
    ap.add_argument("--impl", choices=["linear", "conv1d", "sdpa", "naive"], default="linear",
                    help="formulation (default: the fastest measured)")
    a = ap.parse_args(argv)
    if a.dim % a.heads:
        ap.error("--dim must be divisible by --heads")
    if min(a.layers, a.dim, a.heads, a.vocab, a.seq_len, a.batch, a.steps, a.threads) <= 0:
        ap.error("sizes, --steps and --threads must be positive")
    return a


ARGS = parse()
# must happen before torch (and its OpenMP / OpenBLAS runtimes) is loaded
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("MKL_NUM_THREADS", str(ARGS.threads))


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not know recent Xeons (e.g.
# family 6 model 207) and falls back to its SSE3 "Prescott" kernels: sgemm
# 2-2.5x slower.  Name the kernel family the CPU supports unless told otherwise.
if "OPENBLAS_CORETYPE" not in os.environ:
    _f = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= _f:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= _f:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def set_threads(n):
    """Returns the OpenBLAS kernel family in use (or None)."""
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import ctypes
    core = None
    for lib in ("libopenblas.so.0", "libblas.so.3"):
        try:
            h = ctypes.CDLL(lib, mode=getattr(os, "RTLD_NOLOAD", 0))
        except OSError:
            continue
        if hasattr(h, "openblas_set_num_threads"):
            h.openblas_set_num_threads(ctypes.c_int(n))
            h.openblas_get_corename.restype = ctypes.c_char_p
            core = h.openblas_get_corename().decode()
            break
    return core


def make_params(a, layout):
    """GPT-2 parameters (docs/architecture.md init). layout 'linear': (out, in) weights;
    'conv1d': (in, out)."""
    g = torch.Generator().manual_seed(a.seed)
    C, V, T, L = a.dim, a.vocab, a.seq_len, a.layers

    def w(i, o, std=0.02):
        t = torch.randn((o, i) if layout == "linear" else (i, o), generator=g) * std
        return t.requires_grad_()

    def z(n):
        return torch.zeros(n, requires_grad=True)

    def one(n):
        return torch.ones(n, requires_grad=True)

    P = {"wte.weight": (torch.randn(V, C, generator=g) * 0.02).requires_grad_(),
         "wpe.weight": (torch.randn(T, C, generator=g) * 0.02).requires_grad_()}
    rs = 0.02 / math.sqrt(2 * L)
    for i in range(L):
        p = "h.%d." % i
        P.update({p + "ln_1.weight": one(C), p + "ln_1.bias": z(C),
                  p + "attn.c_attn.weight": w(C, 3 * C), p + "attn.c_attn.bias": z(3 * C),
                  p + "attn.c_proj.weight": w(C, C, rs), p + "attn.c_proj.bias": z(C),
                  p + "ln_2.weight": one(C), p + "ln_2.bias": z(C),
                  p + "mlp.c_fc.weight": w(C, 4 * C), p + "mlp.c_fc.bias": z(4 * C),
                  p + "mlp.c_proj.weight": w(4 * C, C, rs), p + "mlp.c_proj.bias": z(C)})
    P["ln_f.weight"] = one(C)
    P["ln_f.bias"] = z(C)
    return P


def make_forward(a):
    C, nh, L = a.dim, a.heads, a.layers
    hs = C // nh
    scale = 1.0 / math.sqrt(hs)
    T = a.seq_len
    bool_mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    add_mask = torch.zeros(T, T).masked_fill(bool_mask, float("-inf"))
    impl = a.impl

    if impl == "conv1d":
        def lin(x, w, b):
            return torch.addmm(b, x, w)
    else:
        lin = F.linear

    def attn(qkv, B):
        q, k, v = qkv.view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4).unbind(0)  # (B, nh, T, hs)
        if impl == "sdpa":
            y, _ = torch._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)
        elif impl == "naive":
            att = (q @ k.transpose(-2, -1)) * scale
            att = att.masked_fill(bool_mask, float("-inf")).softmax(-1)
            y = att @ v
        else:
            qf = q.reshape(B * nh, T, hs)
            kf = k.reshape(B * nh, T, hs)
            vf = v.reshape(B * nh, T, hs)
            att = torch.baddbmm(add_mask, qf, kf.transpose(1, 2), beta=1.0, alpha=scale)
            att = att.softmax(-1)
            y = torch.bmm(att, vf).view(B, nh, T, hs)
        return y.transpose(1, 2).reshape(B * T, C)

    pos = torch.arange(T)

    def forward(P, idx, tgt):
        B = idx.shape[0]
        if impl == "naive":
            x = (P["wte.weight"][idx] + P["wpe.weight"][pos]).view(B * T, C)
        else:
            x = (F.embedding(idx, P["wte.weight"]) + F.embedding(pos, P["wpe.weight"])).view(B * T, C)
        for i in range(L):
            p = "h.%d." % i
            h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
            y = attn(lin(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]), B)
            x = x + lin(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
            h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
            h = F.gelu(lin(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
            x = x + lin(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
        x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
        logits = F.linear(x, P["wte.weight"])          # tied head: x @ wte^T
        return F.cross_entropy(logits, tgt.reshape(-1))

    return forward


def main(a):
    blas_core = set_threads(a.threads)
    torch.manual_seed(a.seed)
    layout = "conv1d" if a.impl == "conv1d" else "linear"
    P = make_params(a, layout)
    forward = make_forward(a)
    dec = [t for n, t in P.items() if n.endswith(".weight") and t.dim() == 2]
    nodec = [t for n, t in P.items() if not (n.endswith(".weight") and t.dim() == 2)]
    kw = {} if a.impl == "naive" else {"foreach": True}
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.1},
                             {"params": nodec, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **kw)
    params = list(P.values())
    nparams = sum(t.numel() for t in params)
    total = a.warmup_steps + a.steps
    g = torch.Generator().manual_seed(a.seed + 1)
    data = torch.randint(0, a.vocab, (total, a.batch, a.seq_len + 1), generator=g)
    times, losses = [], []
    for s in range(total):
        idx = data[s, :, :-1].contiguous()
        tgt = data[s, :, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = forward(P, idx, tgt)
        loss.float().backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        losses.append(lv)
        if s >= a.warmup_steps:
            times.append(dt)
        if not math.isfinite(lv):
            print("torch_gpt2_bench.py: non-finite loss at step %d" % s, file=sys.stderr)
            return 3
    tokens = a.batch * a.seq_len
    out = {
        "tokens_per_s": tokens / statistics.median(times),
        "tokens_per_s_mean": tokens * len(times) / sum(times),
        "step_ms_median": 1e3 * statistics.median(times),
        "step_ms_mean": 1e3 * statistics.mean(times),
        "step_ms_min": 1e3 * min(times),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "params": nparams,
        "threads": a.threads,
        "torch": torch.__version__,
        "impl": a.impl,
        "autocast": a.autocast,
        "openblas_core": blas_core,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
