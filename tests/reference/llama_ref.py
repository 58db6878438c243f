"""LLaMA reference model in plain PyTorch: trident's oracle for model.arch: llama.

Run it with Debian's interpreter: /usr/bin/python3 (torch, numpy, h5py).
Parameters are a dict of leaf tensors keyed by Hugging Face LlamaForCausalLM's
state-dict names, nn.Linear (out, in) layout (y = x @ W^T, no biases):

    model.embed_tokens.weight (V, C)
    model.layers.{i}.input_layernorm.weight (C)
    model.layers.{i}.self_attn.q_proj.weight (H*hs, C)
    model.layers.{i}.self_attn.k_proj.weight (KV*hs, C)   (v_proj the same)
    model.layers.{i}.self_attn.o_proj.weight (C, H*hs)
    model.layers.{i}.post_attention_layernorm.weight (C)
    model.layers.{i}.mlp.gate_proj.weight (F, C)           (up_proj the same)
    model.layers.{i}.mlp.down_proj.weight (C, F)
    model.norm.weight (C)
    lm_head.weight (V, C)     (absent when the head is tied to the embedding)

RMSNorm x / sqrt(mean(x^2) + eps) * w; rotary embeddings on q and k with
Hugging Face's rotate-half convention (inv_freq = theta^(-2i/hs), the angle
t * inv_freq applied to the pairs (i, i + hs/2)); grouped-query attention
(query head h reads key/value head h // (H/KV), as transformers' repeat_kv);
SwiGLU MLP down(silu(gate(x)) * up(x)); pre-norm blocks, final RMSNorm,
loss = mean cross-entropy. The optimizer, clipping and schedule are
gpt2_ref's (shared). Same public API as gpt2_ref where check_train.py uses it:
param_names(cfg), infer_config(params, heads, **deck), to_torch, forward,
make_adamw, clip_grad_norm, set_lr, lr_at, train_step, causal_mask,
load_model_h5.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import gpt2_ref as G

to_torch = G.to_torch
make_adamw = G.make_adamw
clip_grad_norm = G.clip_grad_norm
set_lr = G.set_lr
lr_at = G.lr_at
causal_mask = G.causal_mask
load_model_h5 = G.load_model_h5


@dataclass
class Config:
    vocab_size: int
    seq_len: int
    layers: int
    dim: int
    heads: int
    kv_heads: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tied: bool = False
    # model.moe (Mixtral's sparse blocks): 0 experts is a dense model
    experts: int = 0
    top_k: int = 2
    every: int = 1
    moe_ffn: int = 0
    aux_loss: float = 0.0
    z_loss: float = 0.0
    capacity: float = 0.0   # model.moe.capacity_factor (0: dropless)

    def sparse(self, i):
        return self.experts > 0 and (i + 1) % self.every == 0

    @property
    def head_size(self):
        return self.dim // self.heads


def block_names(i, cfg=None):
    p = "model.layers.%d." % i
    names = [p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
             p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
             p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight"]
    if cfg is not None and cfg.sparse(i):  # Mixtral: block_sparse_moe
        names.append(p + "block_sparse_moe.gate.weight")
        for e in range(cfg.experts):
            q = p + "block_sparse_moe.experts.%d." % e
            names += [q + "w1.weight", q + "w2.weight", q + "w3.weight"]
        return names
    return names + [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                    p + "mlp.down_proj.weight"]


def param_names(cfg):
    names = ["model.embed_tokens.weight"]
    for i in range(cfg.layers):
        names += block_names(i, cfg)
    names += ["model.norm.weight"] + ([] if cfg.tied else ["lm_head.weight"])
    return names


def param_shapes(cfg):
    C, V, F_, hs = cfg.dim, cfg.vocab_size, cfg.ffn_dim, cfg.head_size
    out = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg.tied:
        out["lm_head.weight"] = (V, C)
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        out.update({
            p + "input_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (cfg.heads * hs, C),
            p + "self_attn.k_proj.weight": (cfg.kv_heads * hs, C),
            p + "self_attn.v_proj.weight": (cfg.kv_heads * hs, C),
            p + "self_attn.o_proj.weight": (C, cfg.heads * hs),
            p + "post_attention_layernorm.weight": (C,),
        })
        if cfg.sparse(i):
            Fe = cfg.moe_ffn or F_
            out[p + "block_sparse_moe.gate.weight"] = (cfg.experts, C)
            for e in range(cfg.experts):
                q = p + "block_sparse_moe.experts.%d." % e
                out.update({q + "w1.weight": (Fe, C), q + "w2.weight": (C, Fe),
                            q + "w3.weight": (Fe, C)})
        else:
            out.update({p + "mlp.gate_proj.weight": (F_, C), p + "mlp.up_proj.weight": (F_, C),
                        p + "mlp.down_proj.weight": (C, F_)})
    return out


def infer_config(params, heads, kv_heads=0, norm_eps=1e-5, rope_theta=10000.0, seq_len=None,
                 moe=None):
    """Config from a dict of arrays; checks every name and shape. moe: the
    deck's model.moe (experts, top_k, every, ffn_dim, aux_loss, z_loss)."""
    V, C = tuple(params["model.embed_tokens.weight"].shape)
    layers = 0
    while ("model.layers.%d.input_layernorm.weight" % layers) in params:
        layers += 1
    if heads <= 0 or C % heads:
        raise ValueError("dim %d is not divisible by heads %d" % (C, heads))
    kv = kv_heads or heads
    dense = [i for i in range(layers) if ("model.layers.%d.mlp.gate_proj.weight" % i) in params]
    F_ = tuple(params["model.layers.%d.mlp.gate_proj.weight" % dense[0]].shape)[0] if dense else 0
    cfg = Config(vocab_size=V, seq_len=seq_len or 0, layers=layers, dim=C, heads=heads,
                 kv_heads=kv, ffn_dim=F_, norm_eps=norm_eps, rope_theta=rope_theta,
                 tied="lm_head.weight" not in params)
    if moe:
        G.set_moe(cfg, moe, params, "model.layers.%d.block_sparse_moe.experts.0.w1.weight", 0)
        if not dense:
            cfg.ffn_dim = cfg.moe_ffn
    G.check_params(params, param_shapes(cfg))
    return cfg


def init_params(cfg, seed=0, perturb=0.0):
    """trident's LLaMA init (N(0, 0.02), o_proj and down_proj / sqrt(2L),
    RMSNorm weights 1) with numpy's generator; perturb > 0 adds N(0, perturb)
    to the norm weights so tests exercise them."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, s in param_shapes(cfg).items():
        if len(s) == 2:
            std = 0.02
            if n.endswith("o_proj.weight") or n.endswith("down_proj.weight"):
                std /= math.sqrt(2 * cfg.layers)
            a = rng.normal(0.0, std, size=s)
        else:
            a = np.ones(s) + (rng.normal(0.0, perturb, size=s) if perturb > 0 else 0.0)
        out[n] = a.astype(np.float32)
    return out


def _rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _rope_tables(T, hs, theta, dtype):
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]   # (T, hs/2)
    emb = torch.cat([ang, ang], dim=-1)                                 # (T, hs)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def _attention(x, P, p, cfg, mask, cos, sin):
    B, T, C = x.shape
    H, KV, hs = cfg.heads, cfg.kv_heads, cfg.head_size
    q = (x @ P[p + "self_attn.q_proj.weight"].t()).view(B, T, H, hs).transpose(1, 2)
    k = (x @ P[p + "self_attn.k_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2)
    v = (x @ P[p + "self_attn.v_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    rep = H // KV
    k = k.repeat_interleave(rep, dim=1)                               # (B, H, T, hs)
    v = v.repeat_interleave(rep, dim=1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    att = att.masked_fill(mask[:T, :T], float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, H * hs)
    return y @ P[p + "self_attn.o_proj.weight"].t()


def _moe(x, P, p, cfg):
    """Mixtral's block (Hugging Face MixtralSparseMoeBlock): gpt2_ref.moe_mix
    with each expert w2(silu(w1 x) · w3 x) under block_sparse_moe.experts.E."""
    def expert(e, v):
        q = p + "block_sparse_moe.experts.%d." % e
        return (F.silu(v @ P[q + "w1.weight"].t()) * (v @ P[q + "w3.weight"].t())) @ \
            P[q + "w2.weight"].t()
    return G.moe_mix(x, x @ P[p + "block_sparse_moe.gate.weight"].t(), expert, cfg.experts,
                     cfg.top_k, cfg.capacity)


def forward(params, idx, cfg, targets=None, mask=None, terms=None):
    """idx, targets: int64 (B, T). Returns (logits (B,T,V), loss or None).
    With sparse blocks the loss's gradient is that of the language-model
    loss + aux_loss·aux + z_loss·z (means over the batch's sequences, rows
    and sparse blocks) while its value is the language-model loss, as
    trident reports it; terms (a dict), if given, receives aux and z."""
    B, T = idx.shape
    if mask is None:
        mask = causal_mask(T, idx.device)
    P = params
    emb = P["model.embed_tokens.weight"]
    cos, sin = _rope_tables(T, cfg.head_size, cfg.rope_theta, emb.dtype)
    x = emb[idx]
    aux = z = None
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        h = _rms_norm(x, P[p + "input_layernorm.weight"], cfg.norm_eps)
        x = x + _attention(h, P, p, cfg, mask, cos, sin)
        h = _rms_norm(x, P[p + "post_attention_layernorm.weight"], cfg.norm_eps)
        if cfg.sparse(i):
            y, a, zz = _moe(h, P, p, cfg)
            x = x + y
            aux = a if aux is None else aux + a
            z = zz if z is None else z + zz
            continue
        g = h @ P[p + "mlp.gate_proj.weight"].t()
        u = h @ P[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(g) * u) @ P[p + "mlp.down_proj.weight"].t()
    x = _rms_norm(x, P["model.norm.weight"], cfg.norm_eps)
    head = emb if cfg.tied else P["lm_head.weight"]
    logits = x @ head.t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), targets.reshape(-1))
        loss = G.add_aux(loss, aux, z, cfg, B, T, terms)
    return logits, loss


def train_step(params, opt, idx, targets, cfg, lr, grad_clip, mask=None):
    """One full-batch step with this model (gpt2_ref.train_step's)."""
    return G.train_step(params, opt, idx, targets, cfg, lr, grad_clip, mask, model=forward)


def _numpy_forward(arrays, idx, targets, cfg):
    """Independent loop-based float64 numpy forward (the self-check): every
    head, position and rotation pair written out."""
    P = {n: np.asarray(a, dtype=np.float64) for n, a in arrays.items()}
    B, T = idx.shape
    H, KV, hs = cfg.heads, cfg.kv_heads, cfg.head_size

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * w

    def rope(vec, t):
        out = vec.copy()
        for i in range(hs // 2):
            a = t * cfg.rope_theta ** (-2.0 * i / hs)
            x1, x2 = vec[i], vec[i + hs // 2]
            out[i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[i + hs // 2] = x2 * math.cos(a) + x1 * math.sin(a)
        return out

    total = 0.0
    for bi in range(B):
        x = np.stack([P["model.embed_tokens.weight"][idx[bi, t]] for t in range(T)])
        for i in range(cfg.layers):
            p = "model.layers.%d." % i
            h = rms(x, P[p + "input_layernorm.weight"])
            q = h @ P[p + "self_attn.q_proj.weight"].T
            k = h @ P[p + "self_attn.k_proj.weight"].T
            v = h @ P[p + "self_attn.v_proj.weight"].T
            y = np.zeros((T, H * hs))
            for hd in range(H):
                g = hd // (H // KV)
                for t in range(T):
                    qt = rope(q[t, hd * hs:(hd + 1) * hs], t)
                    s = np.array([qt @ rope(k[u, g * hs:(g + 1) * hs], u)
                                  for u in range(t + 1)]) / math.sqrt(hs)
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    for u in range(t + 1):
                        y[t, hd * hs:(hd + 1) * hs] += w[u] * v[u, g * hs:(g + 1) * hs]
            x = x + y @ P[p + "self_attn.o_proj.weight"].T
            h = rms(x, P[p + "post_attention_layernorm.weight"])
            gt = h @ P[p + "mlp.gate_proj.weight"].T
            up = h @ P[p + "mlp.up_proj.weight"].T
            x = x + (gt / (1 + np.exp(-gt)) * up) @ P[p + "mlp.down_proj.weight"].T
        x = rms(x, P["model.norm.weight"])
        head = P["model.embed_tokens.weight"] if cfg.tied else P["lm_head.weight"]
        logits = x @ head.T
        for t in range(T):
            lt = logits[t]
            m = lt.max()
            total += m + math.log(np.exp(lt - m).sum()) - lt[targets[bi, t]]
    return total / (B * T)


def _selfcheck():
    ok = True
    for tied, kv in [(False, 2), (True, 1), (False, 4)]:
        cfg = Config(vocab_size=37, seq_len=9, layers=2, dim=16, heads=4, kv_heads=kv,
                     ffn_dim=24, norm_eps=1e-5, rope_theta=100.0, tied=tied)
        arrays = init_params(cfg, seed=3, perturb=0.1)
        arrays = {n: (a * 10 if a.ndim == 2 else a) for n, a in arrays.items()}
        rng = np.random.default_rng(4)
        tok = rng.integers(0, cfg.vocab_size, size=(2, cfg.seq_len + 1))
        idx, tgt = tok[:, :-1], tok[:, 1:]
        ref = _numpy_forward(arrays, idx, tgt, cfg)
        torch.set_default_dtype(torch.float64)
        P = to_torch(arrays)
        _, loss = forward(P, torch.from_numpy(idx), cfg, torch.from_numpy(tgt))
        err = abs(loss.item() - ref) / abs(ref)
        print("kv_heads %d, tied %s: torch loss %.15f  numpy loop loss %.15f  rel err %.2e"
              % (kv, tied, loss.item(), ref, err))
        ok = ok and err < 1e-12
    print("self-check", "PASSED" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    import sys
    sys.exit(0 if _selfcheck() else 1)
