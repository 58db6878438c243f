"""The PyTorch reference of the device check's GPT-2 124M benchmark: the same
model as tests/reference/gpt2_ref.py (learned token and position embeddings,
pre-LN blocks, fused QKV with biases, causal attention, tanh-GELU 4x MLP,
final LN, LM head tied to wte), trained on random tokens with AdamW (fused),
gradient clipping 1.0, bf16 autocast with float32 master weights, on one GPU.
Attention is F.scaled_dot_product_attention (PyTorch picks its flash kernel).

    python3 tests/device/torch_gpt2_cuda.py --batch 16 --seq-len 1024 [--compile]

Prints one JSON line: tokens/s (median timed step), the median and fastest
step, and the peak device memory PyTorch allocated."""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, NH):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products stay fp32
    model = GPT(a.vocab, a.seq_len, a.layers, a.dim, a.heads).to(dev)
    for p in model.parameters():
        nn.init.normal_(p, std=0.02) if p.dim() > 1 else nn.init.zeros_(p)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    g = torch.Generator(device=dev).manual_seed(1)
    times = []
    for s in range(a.warmup_steps + a.steps):
        x = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup_steps:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"who": "torch-compile" if a.compile else "torch-eager",
                      "params": n, "tokens_per_s": a.batch * a.seq_len / med,
                      "step_ms_median": 1e3 * med, "step_ms_min": 1e3 * min(times),
                      "loss": float(loss), "finite": math.isfinite(float(loss)),
                      "peak_device_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
