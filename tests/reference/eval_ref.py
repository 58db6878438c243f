#!/usr/bin/python3
"""Reference validation loss (docs/architecture.md "Command line", eval protocol), float64.

Usage (Debian's interpreter):
    /usr/bin/python3 tests/reference/eval_ref.py MODEL.h5 DATA.h5 --batches B \\
        --global-batch G --seq-len T [--split val|train] [--heads H] \\
        [--expect X --rtol R]

MODEL.h5 has /model/<name> (a trident checkpoint or a --dump file), or MODEL
is a model.safetensors of `trident export` (read with json + numpy; the
heads from the config.json beside it). GPT-2 or LLaMA, told by the names
(model.embed_tokens.weight: LLaMA, with kv_heads, norm_eps and rope_theta
from config.json or the checkpoint's /config). The
number of heads comes from --heads, else a root attribute `heads`, else the
checkpoint's /config YAML (model.heads).

DATA.h5 is a trident token dataset: --split val reads /val_tokens, or /tokens
when the file has none; --split train reads /tokens.  nanoGPT flat uint16 .bin
files and llm.c .bin files (256 x int32 header, magic 20240520) are read whole.

Window i covers tokens [i*T, i*T + T] (inputs the first T, targets the last T).
The loss is averaged over every target token of the first B*G windows, or of
all whole windows if there are fewer. --documents (a chat dataset, data.attend:
document): the split's /[val_]documents and /[val_]loss_mask are read too;
each document inside each window is computed on its own (positions from 0,
attention inside it; one that began before the window starts at its first
token) and the loss is averaged over the targets the mask keeps (the token a
target predicts has mask 1). Prints one JSON object:
    {"val_loss": x, "val_tokens": n, "windows": w}
With --expect X, exits 1 unless |val_loss - X| <= rtol * |val_loss| (rtol
default 1e-5); exit 2 on bad input.
"""

import argparse
import json
import os
import re
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402
import llama_ref as LL  # noqa: E402


class BadInput(Exception):
    pass


def read_tokens(path, split):
    if not os.path.exists(path):
        raise BadInput("%s: no such file" % path)
    if path.endswith(".bin"):
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size >= 1024:
            hdr = raw[:1024].view(np.int32)
            if hdr[0] == 20240520:          # llm.c: magic, version, count
                n = int(hdr[2])
                toks = raw[1024:].view(np.uint16)
                if toks.size < n:
                    raise BadInput("%s: header says %d tokens, file holds %d" % (path, n, toks.size))
                return toks[:n], "llm.c .bin"
        if raw.size % 2:
            raise BadInput("%s: odd size for a uint16 token file" % path)
        return raw.view(np.uint16), "flat uint16 .bin"
    import h5py
    with h5py.File(path, "r") as f:
        if split == "val" and "val_tokens" in f:
            return f["val_tokens"][()], "/val_tokens"
        if "tokens" not in f:
            raise BadInput("%s: no /tokens dataset" % path)
        return f["tokens"][()], "/tokens"


def read_heads(path, given):
    if given:
        return given
    if path.endswith(".safetensors"):  # trident export: config.json beside it
        import json
        cj = os.path.join(os.path.dirname(path) or ".", "config.json")
        try:
            c = json.load(open(cj))
            return int(c["n_head"] if "n_head" in c else c["num_attention_heads"])
        except (OSError, ValueError, KeyError) as e:
            raise BadInput("%s: cannot read n_head: %s" % (cj, e))
    import h5py
    with h5py.File(path, "r") as f:
        if "heads" in f.attrs:
            return int(np.asarray(f.attrs["heads"]).reshape(()))
        if "config" in f:
            text = f["config"][()]
            if isinstance(text, np.ndarray):
                text = text.reshape(-1)[0]
            if isinstance(text, (bytes, np.bytes_)):
                text = text.decode()
            try:
                import yaml
                cfg = yaml.safe_load(text)
                return int(cfg["model"]["heads"])
            except Exception:
                m = re.search(r"\bheads\s*:\s*(\d+)", str(text))
                if m:
                    return int(m.group(1))
    raise BadInput("%s: cannot tell the number of heads (no 'heads' attribute, no "
                   "/config); pass --heads" % path)


def read_llama(path):
    """{kv_heads, norm_eps, rope_theta} of a LLaMA model: config.json beside a
    safetensors file (Hugging Face's keys), else the checkpoint's /config."""
    if path.endswith(".safetensors"):
        cj = os.path.join(os.path.dirname(path) or ".", "config.json")
        try:
            c = json.load(open(cj))
            out = {"kv_heads": int(c["num_key_value_heads"]), "norm_eps": float(c["rms_norm_eps"]),
                   "rope_theta": float(c["rope_theta"])}
            if c.get("model_type") == "mixtral":  # every block sparse
                out["moe"] = {"experts": int(c["num_local_experts"]),
                              "top_k": int(c["num_experts_per_tok"]), "every": 1,
                              "ffn_dim": int(c["intermediate_size"]), "aux_loss": 0.0,
                              "z_loss": 0.0}
            return out
        except (OSError, ValueError, KeyError) as e:
            raise BadInput("%s: cannot read the LLaMA settings: %s" % (cj, e))
    import h5py
    with h5py.File(path, "r") as f:
        text = f["config"][()] if "config" in f else b""
    if isinstance(text, np.ndarray):
        text = text.reshape(-1)[0]
    if isinstance(text, (bytes, np.bytes_)):
        text = text.decode()
    out = {}
    for key, conv, default in [("kv_heads", int, 0), ("norm_eps", float, 1e-5),
                               ("rope_theta", float, 10000.0)]:
        m = re.search(r"\b%s\s*:\s*([-+0-9.eE]+)" % key, str(text))  # keys unique in the deck
        out[key] = conv(m.group(1)) if m else default
    # model.moe: the mapping's lines under "  moe:" (4 spaces in)
    m = re.search(r"\n  moe:\n((?:    \w+: [^\n]*\n)+)", str(text))
    if m:
        kv = dict(re.findall(r"    (\w+): ([^\n]*)", m.group(1)))
        if int(kv.get("experts", 0)) > 0:
            out["moe"] = {"experts": int(kv["experts"]), "top_k": int(kv["top_k"]),
                          "every": int(kv["every"]), "ffn_dim": int(kv["ffn_dim"]),
                          "aux_loss": float(kv["aux_loss"]), "z_loss": float(kv["z_loss"]),
                          "capacity_factor": float(kv.get("capacity_factor", 0.0))}
    return out


def read_meta(path, split):
    """(loss mask, document starts) of the split, as td_dataset_read_meta reads them."""
    import h5py
    with h5py.File(path, "r") as f:
        pre = "val_" if split == "val" and "val_tokens" in f else ""
        if pre + "documents" not in f:
            raise BadInput("%s: no /%sdocuments (--documents needs a jsonl or chat dataset)"
                           % (path, pre))
        docs = f[pre + "documents"][()].astype(np.int64)
        mask = f[pre + "loss_mask"][()].astype(np.int64) if pre + "loss_mask" in f else None
    return mask, docs


def eval_loss_documents(params, cfg, tokens, mask, docs, n_windows, seq_len, M=G):
    """The masked mean over windows 0..n_windows-1, each document apart."""
    import torch.nn.functional as F
    T = seq_len
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(n_windows):
            lo = i * T
            win = torch.from_numpy(tokens[lo:lo + T + 1].astype(np.int64))
            keep = np.ones(T + 1, dtype=bool) if mask is None else mask[lo:lo + T + 1] != 0
            inside = docs[(docs > lo) & (docs < lo + T)] - lo  # starts inside the window
            bounds = [0] + [int(x) for x in inside] + [T]
            for a, b in zip(bounds[:-1], bounds[1:]):
                logits, _ = M.forward(params, win[None, a:b], cfg)
                k = torch.from_numpy(keep[a + 1:b + 1])
                if bool(k.any()):
                    total += F.cross_entropy(logits[0][k], win[a + 1:b + 1][k], reduction="sum").item()
                    count += int(k.sum())
    return total / max(count, 1), count


def eval_loss(params, cfg, tokens, n_windows, seq_len, chunk, M=G):
    """Mean cross-entropy over the targets of windows 0..n_windows-1."""
    T = seq_len
    total = 0.0
    mask = G.causal_mask(T)
    with torch.no_grad():
        for w0 in range(0, n_windows, chunk):
            w1 = min(n_windows, w0 + chunk)
            win = np.stack([tokens[i * T:i * T + T + 1] for i in range(w0, w1)]).astype(np.int64)
            win = torch.from_numpy(win)
            logits, _ = M.forward(params, win[:, :-1], cfg, None, mask)
            lp = torch.log_softmax(logits, dim=-1)
            total += -lp.gather(-1, win[:, 1:].unsqueeze(-1)).sum().item()
    return total / (n_windows * T)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--batches", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--split", choices=["val", "train"], default="val")
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--expect", type=float, default=None)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--float32", action="store_true", help="compute in float32 (default float64)")
    ap.add_argument("--documents", action="store_true",
                    help="documents apart, the loss mask applied (a chat or jsonl dataset)")
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    try:
        if a.batches <= 0 or a.global_batch <= 0 or a.seq_len <= 0:
            raise BadInput("--batches, --global-batch and --seq-len must be positive")
        try:
            if a.model.endswith(".safetensors"):
                arrays = G.load_safetensors(a.model)
            else:
                arrays = G.load_model_h5(a.model, "model")
        except (KeyError, ValueError) as e:
            raise BadInput(str(e))
        heads = read_heads(a.model, a.heads)
        M = LL if "model.embed_tokens.weight" in arrays else G  # the family by its names
        try:
            if M is LL:
                cfg = LL.infer_config(arrays, heads, seq_len=a.seq_len, **read_llama(a.model))
            else:
                cfg = G.infer_config(arrays, heads)
        except ValueError as e:
            raise BadInput("%s: %s" % (a.model, e))
        if a.seq_len > cfg.seq_len:
            raise BadInput("--seq-len %d exceeds the model's %d positions" % (a.seq_len, cfg.seq_len))
        tokens, where = read_tokens(a.data, a.split)
        tokens = np.asarray(tokens).reshape(-1)
        if tokens.size and int(tokens.max()) >= cfg.vocab_size:
            raise BadInput("%s %s: token id %d >= vocab_size %d"
                           % (a.data, where, int(tokens.max()), cfg.vocab_size))
        whole = (tokens.size - 1) // a.seq_len if tokens.size > 0 else 0
        n = min(a.batches * a.global_batch, whole)
        if n <= 0:
            raise BadInput("%s %s: %d tokens make no whole window of %d+1"
                           % (a.data, where, tokens.size, a.seq_len))
    except (BadInput, OSError) as e:
        print("eval_ref.py: %s" % e, file=sys.stderr)
        return 2
    dtype = torch.float32 if a.float32 else torch.float64
    params = G.to_torch(arrays, dtype, requires_grad=False)
    if a.documents:
        try:
            mask, docs = read_meta(a.data, a.split)
        except BadInput as e:
            print("eval_ref.py: %s" % e, file=sys.stderr)
            return 2
        loss, counted = eval_loss_documents(params, cfg, tokens, mask, docs, n, a.seq_len, M)
    else:
        loss = eval_loss(params, cfg, tokens, n, a.seq_len, max(1, a.global_batch), M)
        counted = n * a.seq_len
    print(json.dumps({"val_loss": loss, "val_tokens": counted, "windows": n}))
    if a.expect is not None:
        diff = abs(loss - a.expect)
        if not diff <= a.rtol * abs(loss):
            print("eval_ref.py: val_loss %.10g differs from expected %.10g (rel %.2e > rtol %.1e)"
                  % (loss, a.expect, diff / max(abs(loss), 1e-300), a.rtol), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
