"""GPT-2 reference model, optimizer and schedule in plain PyTorch.

This is trident's numerical oracle (see /work/shared/docs/architecture.md, "Model").
Run it with Debian's interpreter: /usr/bin/python3 (torch 1.13, numpy, h5py).

Parameters are a dict of leaf tensors keyed by the Hugging Face GPT-2 names
(without the "transformer." prefix):

    wte.weight (V, C)           wpe.weight (T, C)
    h.{i}.ln_1.weight|bias (C)
    h.{i}.attn.c_attn.weight (C, 3C)   h.{i}.attn.c_attn.bias (3C)
    h.{i}.attn.c_proj.weight (C, C)    h.{i}.attn.c_proj.bias (C)
    h.{i}.ln_2.weight|bias (C)
    h.{i}.mlp.c_fc.weight (C, 4C)      h.{i}.mlp.c_fc.bias (4C)
    h.{i}.mlp.c_proj.weight (4C, C)    h.{i}.mlp.c_proj.bias (C)
    ln_f.weight|bias (C)

Weights are Conv1D-style (in, out): y = x @ W + b.  The c_attn output columns
are [Q | K | V], heads in order inside each.  Causal softmax attention scaled
by 1/sqrt(head_size), tanh-approximate GELU, pre-LN blocks, LayerNorm eps
1e-5, final LayerNorm, LM head tied to wte (logits = x @ wte^T), loss = mean
cross-entropy over every target token.

Public API
    param_names(layers)                  -> registry order of names
    param_shapes(cfg)                    -> {name: shape}
    infer_config(params, heads)          -> Config from a dict of arrays
    init_params(cfg, seed, ...)          -> {name: np.float32 array} (DESIGN init)
    to_torch(arrays, dtype)              -> {name: leaf tensor, requires_grad}
    forward(params, idx, cfg, targets)   -> (logits, loss)
    make_adamw(params, ...)              -> torch.optim.AdamW (decay on 2-D weights only)
    clip_grad_norm(params, grad_clip)    -> total norm before clipping
    lr_at(step, ...)                     -> learning rate of 0-based step
    train_step(params, opt, idx, tgt, cfg, lr, grad_clip) -> (loss, grad_norm)
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

LN_EPS = 1e-5


@dataclass
class Config:
    vocab_size: int
    seq_len: int
    layers: int
    dim: int
    heads: int
    # model.moe: 0 experts is a dense model (every-th block sparse otherwise)
    experts: int = 0
    top_k: int = 2
    every: int = 1
    moe_ffn: int = 0
    aux_loss: float = 0.0
    z_loss: float = 0.0
    capacity: float = 0.0

    @property
    def head_size(self):
        return self.dim // self.heads

    def sparse(self, i):
        return self.experts > 0 and (i + 1) % self.every == 0


EXPERT_PARTS = ["c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"]


def block_names(i, cfg=None):
    p = "h.%d." % i
    names = [p + "ln_1.weight", p + "ln_1.bias",
             p + "attn.c_attn.weight", p + "attn.c_attn.bias",
             p + "attn.c_proj.weight", p + "attn.c_proj.bias",
             p + "ln_2.weight", p + "ln_2.bias"]
    if cfg is not None and cfg.sparse(i):  # the router, each expert's MLP
        names.append(p + "mlp.gate.weight")
        for e in range(cfg.experts):
            names += [p + "mlp.experts.%d.%s" % (e, q) for q in EXPERT_PARTS]
        return names
    return names + [p + "mlp.c_fc.weight", p + "mlp.c_fc.bias",
                    p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"]


def param_names(layers):
    """The names in trident's order; layers: a count, or a Config (with its
    sparse blocks)."""
    cfg = layers if isinstance(layers, Config) else None
    names = ["wte.weight", "wpe.weight"]
    for i in range(cfg.layers if cfg else layers):
        names += block_names(i, cfg)
    names += ["ln_f.weight", "ln_f.bias"]
    return names


def param_shapes(cfg):
    C, V, T = cfg.dim, cfg.vocab_size, cfg.seq_len
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C),
              "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(cfg.layers):
        p = "h.%d." % i
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
        })
        if cfg.sparse(i):
            Fe = cfg.moe_ffn or 4 * C
            shapes[p + "mlp.gate.weight"] = (cfg.experts, C)
            for e in range(cfg.experts):
                q = p + "mlp.experts.%d." % e
                shapes.update({q + "c_fc.weight": (C, Fe), q + "c_fc.bias": (Fe,),
                               q + "c_proj.weight": (Fe, C), q + "c_proj.bias": (C,)})
        else:
            shapes.update({
                p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    return shapes


def infer_config(params, heads, moe=None):
    """Config from a dict of arrays/tensors; checks every name and shape.
    moe: the deck's model.moe (experts, top_k, every, ffn_dim, aux_loss,
    z_loss[, capacity_factor])."""
    V, C = tuple(params["wte.weight"].shape)
    T = tuple(params["wpe.weight"].shape)[0]
    layers = 0
    while ("h.%d.ln_1.weight" % layers) in params:
        layers += 1
    if heads <= 0 or C % heads:
        raise ValueError("dim %d is not divisible by heads %d" % (C, heads))
    cfg = Config(vocab_size=V, seq_len=T, layers=layers, dim=C, heads=heads)
    if moe:
        set_moe(cfg, moe, params, "h.%d.mlp.experts.0.c_fc.weight", 1)
    check_params(params, param_shapes(cfg))
    return cfg


def set_moe(cfg, moe, params, expert0, axis):
    """cfg's model.moe from the deck's (experts, top_k, every, ffn_dim,
    aux_loss, z_loss[, capacity_factor]); an expert's width from the weights
    (expert0 % layer: its first matrix, the width along axis), as the deck's
    0 means the dense MLP's."""
    cfg.experts, cfg.top_k, cfg.every = moe["experts"], moe["top_k"], moe["every"]
    cfg.aux_loss, cfg.z_loss = moe["aux_loss"], moe["z_loss"]
    cfg.capacity = moe.get("capacity_factor", 0.0)
    first = [i for i in range(cfg.layers) if cfg.sparse(i)]
    name = expert0 % first[0] if first else ""
    cfg.moe_ffn = tuple(params[name].shape)[axis] if name in params else moe["ffn_dim"]


def moe_mix(x, logits, expert, E, K, capacity=0.0):
    """A sparse block's mixture (Hugging Face MixtralSparseMoeBlock's
    routing): softmax over the router's logits (B, T, E), the top K, their
    weights renormalised, Σ w · expert(e, x) over each token's chosen
    experts; with capacity c > 0, per sequence an expert keeps its first
    ⌈c·T·K/E⌉ slots in (t, j) order (Switch). Also the block's auxiliary
    terms, per sequence: E·Σ_i f_i·P_i (f_i: the sequence's top-k choices of
    expert i / T, before any dropping; P_i: its mean probability of i) summed
    over sequences, and Σ over rows of logsumexp(logits)²."""
    B, T, _ = x.shape
    probs = torch.softmax(logits, dim=-1)
    w, sel = torch.topk(probs, K, dim=-1)                             # (B, T, K)
    w = w / w.sum(dim=-1, keepdim=True)
    keep = torch.ones_like(w)
    if capacity > 0:
        cap = math.ceil(capacity * T * K / E)
        hot = F.one_hot(sel, E).reshape(B, T * K, E)
        rank = hot.cumsum(dim=1)                                      # 1-based, per expert
        keep = ((rank <= cap) & (hot > 0)).any(-1).reshape(B, T, K).to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(E):
        hit = (sel == e) * keep                                       # (B, T, K)
        if not bool(hit.any()):
            continue
        out = out + (w * hit).sum(-1, keepdim=True) * expert(e, x)
    f = F.one_hot(sel, E).sum(dim=2).to(x.dtype).sum(dim=1) / T       # (B, E)
    aux = (E * (f * probs.mean(dim=1)).sum(-1)).sum()
    z = (torch.logsumexp(logits, dim=-1) ** 2).sum()
    return out, aux, z


def add_aux(loss, aux, z, cfg, B, T, terms=None):
    """loss + (the sparse blocks' weighted auxiliary terms, as means over the
    batch's sequences, rows and sparse blocks) in the gradient only: the value
    stays the language-model loss, as trident reports it."""
    if aux is None:
        return loss
    nsparse = sum(1 for i in range(cfg.layers) if cfg.sparse(i))
    aux = aux / (B * nsparse)
    z = z / (B * T * nsparse)
    extra = cfg.aux_loss * aux + cfg.z_loss * z
    if terms is not None:
        terms["aux"], terms["z"] = aux.item(), z.item()
    return loss + (extra - extra.detach())


def check_params(params, want):
    """ValueError unless params holds exactly the names of want ({name:
    shape}), each of its shape."""
    missing = [n for n in want if n not in params]
    extra = [n for n in params if n not in want]
    if missing or extra:
        raise ValueError("parameter names differ: missing %s, unexpected %s"
                         % (missing[:5], extra[:5]))
    for n, s in want.items():
        if tuple(params[n].shape) != tuple(s):
            raise ValueError("%s: expected shape %s, found %s"
                             % (n, s, tuple(params[n].shape)))


def init_params(cfg, seed=0, perturb=0.0):
    """docs/architecture.md init (N(0,0.02), residual projections /sqrt(2L), biases 0,
    LN scale 1) with numpy's generator (NOT trident's counter-based one).
    perturb > 0 adds N(0, perturb) to biases and LayerNorm parameters so tests
    exercise them."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, s in param_shapes(cfg).items():
        if n.endswith(".weight") and len(s) == 2:
            std = 0.02
            if n.endswith("attn.c_proj.weight") or n.endswith("mlp.c_proj.weight"):
                std /= math.sqrt(2 * cfg.layers)
            a = rng.normal(0.0, std, size=s)
        elif n.endswith(".weight"):          # LayerNorm scale
            a = np.ones(s)
        else:                                # biases, LayerNorm shift
            a = np.zeros(s)
        if perturb > 0 and len(s) == 1:
            a = a + rng.normal(0.0, perturb, size=s)
        out[n] = a.astype(np.float32)
    return out


def to_torch(arrays, dtype=torch.float64, requires_grad=True):
    """Dict of numpy arrays -> dict of leaf tensors (copies)."""
    out = {}
    for n, a in arrays.items():
        t = torch.tensor(np.asarray(a), dtype=dtype)
        t.requires_grad_(requires_grad)
        out[n] = t
    return out


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)


def _linear(x, w, b):
    # Conv1D: (..., in) @ (in, out) + (out)
    shp = x.shape
    y = torch.addmm(b, x.reshape(-1, shp[-1]), w)
    return y.view(*shp[:-1], w.shape[1])


def _attention(qkv, cfg, mask):
    B, T, _ = qkv.shape
    C, nh = cfg.dim, cfg.heads
    hs = C // nh
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, nh, hs).transpose(1, 2)          # (B, nh, T, hs)
    k = k.view(B, T, nh, hs).transpose(1, 2)
    v = v.view(B, T, nh, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = att.masked_fill(mask[:T, :T], float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = att @ v                                       # (B, nh, T, hs)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def causal_mask(T, device=None):
    """True above the diagonal (positions a query may NOT see)."""
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)


def _mlp(h, P, q):
    h = F.gelu(_linear(h, P[q + "c_fc.weight"], P[q + "c_fc.bias"]), approximate="tanh")
    return _linear(h, P[q + "c_proj.weight"], P[q + "c_proj.bias"])


def forward(params, idx, cfg, targets=None, mask=None, terms=None):
    """idx, targets: int64 (B, T). Returns (logits (B,T,V), loss or None).
    Sparse blocks (model.moe): each expert is the GPT-2 MLP under
    h.N.mlp.experts.E., the router h.N.mlp.gate.weight (E, C) (logits = x·Gᵀ);
    the loss's gradient includes the auxiliary terms (add_aux), terms (a
    dict), if given, receives them."""
    B, T = idx.shape
    if T > cfg.seq_len:
        raise ValueError("sequence length %d > seq_len %d" % (T, cfg.seq_len))
    if mask is None:
        mask = causal_mask(T, idx.device)
    P = params
    aux = z = None
    x = P["wte.weight"][idx] + P["wpe.weight"][:T].unsqueeze(0)
    for i in range(cfg.layers):
        p = "h.%d." % i
        h = _layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = _linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        y = _attention(qkv, cfg, mask)
        x = x + _linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = _layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
        if cfg.sparse(i):
            y, a, zz = moe_mix(h, h @ P[p + "mlp.gate.weight"].t(),
                               lambda e, v: _mlp(v, P, p + "mlp.experts.%d." % e),
                               cfg.experts, cfg.top_k, cfg.capacity)
            x = x + y
            aux, z = (a, zz) if aux is None else (aux + a, z + zz)
            continue
        x = x + _mlp(h, P, p + "mlp.")
    x = _layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["wte.weight"].t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
        loss = add_aux(loss, aux, z, cfg, B, T, terms)
    return logits, loss


def decays(name, tensor):
    """Weight decay applies to every 2-D '.weight' (matrices, wte, wpe)."""
    return name.endswith(".weight") and tensor.dim() == 2


def make_adamw(params, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw):
    """torch.optim.AdamW with weight decay only on 2-D weights. Parameters are
    passed in registry order (dict order)."""
    dec = [t for n, t in params.items() if decays(n, t)]
    nodec = [t for n, t in params.items() if not decays(n, t)]
    groups = [{"params": dec, "weight_decay": weight_decay},
              {"params": nodec, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, **kw)


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr


def grad_norm(params):
    """Global L2 norm of all gradients (computed in the gradients' dtype)."""
    grads = [t.grad for t in params.values() if t.grad is not None]
    return torch.norm(torch.stack([torch.norm(g.detach(), 2) for g in grads]), 2).item()


def clip_grad_norm(params, grad_clip):
    """Like torch.nn.utils.clip_grad_norm_: coef = clip/(norm+1e-6) clamped to
    1. grad_clip <= 0 disables clipping. Returns the norm before clipping."""
    ts = [t for t in params.values() if t.grad is not None]
    if grad_clip is not None and grad_clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(ts, grad_clip))
    return grad_norm(params)


def lr_at(step, lr, min_lr, warmup, steps, decay="cosine"):
    """Learning rate of 0-based optimizer step `step`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if decay == "constant":
        return lr
    p = (step - warmup) / max(1, steps - warmup)
    if decay == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))
    if decay == "linear":
        return lr - (lr - min_lr) * p
    raise ValueError("unknown decay %r" % (decay,))


def train_step(params, opt, idx, targets, cfg, lr, grad_clip, mask=None, model=None):
    """One full-batch step: forward, backward, clip, AdamW. Returns
    (loss, grad_norm_before_clipping). model: the forward to use (default
    this module's GPT-2; llama_ref passes its own)."""
    for t in params.values():
        t.grad = None
    _, loss = (model or forward)(params, idx, cfg, targets, mask)
    loss.backward()
    gn = clip_grad_norm(params, grad_clip)
    set_lr(opt, lr)
    opt.step()
    return loss.item(), gn


def load_model_h5(path, group="model"):
    """{name: np.ndarray} from /<group>/<name> of an HDF5 file."""
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        if group not in f:
            raise KeyError("%s: no /%s group" % (path, group))

        def visit(name, obj):       # flat "h.0.ln_1.weight" or nested h/0/...
            if isinstance(obj, h5py.Dataset):
                out[name.replace("/", ".")] = obj[()]
        f[group].visititems(visit)
    return out


def load_safetensors(path, prefix="transformer."):
    """{name: np.ndarray float32} from a safetensors file, read with json and
    numpy only (Debian has no safetensors package): 8-byte little-endian
    header length, the JSON header, then the data at its data_offsets. The
    prefix is stripped from names (trident export writes transformer.*)."""
    import json
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: shorter than a safetensors header" % path)
    n = int.from_bytes(raw[:8], "little")
    if n <= 0 or 8 + n > len(raw):
        raise ValueError("%s: header length %d does not fit the file" % (path, n))
    hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = np.frombuffer(data[b:e], dtype="<f4" if t["dtype"] == "F32" else "<u2")
        if t["dtype"] == "BF16":
            buf = (buf.astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] != "F32":
            raise ValueError("%s: %s has dtype %s (F32 or BF16 expected)" % (path, name, t["dtype"]))
        key = name[len(prefix):] if name.startswith(prefix) else name
        out[key] = buf.reshape(t["shape"]).copy()
    return out


def bf16_round(a):
    """float32 array rounded to bf16 (nearest even), as float32 (trident's
    td_bf16_from_f32)."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def _numpy_forward(arrays, idx, targets, cfg):
    """Independent, loop-based float64 numpy forward (for the self-check)."""
    P = {n: np.asarray(a, dtype=np.float64) for n, a in arrays.items()}
    B, T = idx.shape
    C, nh = cfg.dim, cfg.heads
    hs = C // nh

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + LN_EPS) * w + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    total = 0.0
    for bi in range(B):
        x = np.stack([P["wte.weight"][idx[bi, t]] + P["wpe.weight"][t] for t in range(T)])
        for i in range(cfg.layers):
            p = "h.%d." % i
            h = ln(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
            qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
            y = np.zeros((T, C))
            for hd in range(nh):
                for t in range(T):
                    q = qkv[t, hd * hs:(hd + 1) * hs]
                    s = np.array([q @ qkv[u, C + hd * hs:C + (hd + 1) * hs]
                                  for u in range(t + 1)]) / math.sqrt(hs)
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    for u in range(t + 1):
                        y[t, hd * hs:(hd + 1) * hs] += w[u] * qkv[u, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
            x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
            h = ln(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            h = gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
            x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
        x = ln(x, P["ln_f.weight"], P["ln_f.bias"])
        logits = x @ P["wte.weight"].T
        for t in range(T):
            l = logits[t]
            m = l.max()
            total += m + math.log(np.exp(l - m).sum()) - l[targets[bi, t]]
    return total / (B * T)


def _selfcheck():
    cfg = Config(vocab_size=37, seq_len=9, layers=2, dim=12, heads=3)
    arrays = init_params(cfg, seed=3, perturb=0.1)
    rng = np.random.default_rng(4)
    # larger weights than the init so attention is far from uniform
    arrays = {n: (a * 10 if a.ndim == 2 else a) for n, a in arrays.items()}
    tok = rng.integers(0, cfg.vocab_size, size=(3, cfg.seq_len + 1))
    idx, tgt = tok[:, :-1], tok[:, 1:]
    ref = _numpy_forward(arrays, idx, tgt, cfg)
    P = to_torch(arrays)
    _, loss = forward(P, torch.from_numpy(idx), cfg, torch.from_numpy(tgt))
    err = abs(loss.item() - ref) / abs(ref)
    print("torch loss %.15f  numpy loop loss %.15f  rel err %.2e" % (loss.item(), ref, err))
    ok = err < 1e-12
    # gradient vs central finite differences on a few elements
    loss.backward()
    g = {n: t.grad.clone() for n, t in P.items()}
    worst = 0.0
    for n in ["wte.weight", "h.0.attn.c_attn.weight", "h.1.ln_2.bias", "ln_f.weight",
              "wpe.weight", "h.1.mlp.c_proj.weight"]:
        flat = P[n].detach().view(-1)
        for j in rng.integers(0, flat.numel(), size=3):
            h = 1e-6
            old = flat[j].item()
            with torch.no_grad():
                flat[j] = old + h
                lp = forward(P, torch.from_numpy(idx), cfg, torch.from_numpy(tgt))[1].item()
                flat[j] = old - h
                lm = forward(P, torch.from_numpy(idx), cfg, torch.from_numpy(tgt))[1].item()
                flat[j] = old
            fd = (lp - lm) / (2 * h)
            worst = max(worst, abs(fd - g[n].view(-1)[j].item()))
    print("worst |autograd - finite difference| = %.2e" % worst)
    ok = ok and worst < 1e-7
    for s, want in [(0, 1e-3 / 4), (3, 1e-3), (4, 1e-3), (14, 1e-4)]:
        got = lr_at(s, 1e-3, 1e-4, 4, 14, "cosine")
        ok = ok and abs(got - want) < 1e-15
    ok = ok and abs(lr_at(9, 1e-3, 1e-4, 4, 14, "cosine") - 5.5e-4) < 1e-15
    ok = ok and abs(lr_at(9, 1e-3, 1e-4, 4, 14, "linear") - 5.5e-4) < 1e-15
    print("self-check", "PASSED" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    import sys
    sys.exit(0 if _selfcheck() else 1)
