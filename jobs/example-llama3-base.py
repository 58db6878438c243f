#!/usr/bin/env python3
"""jobs/example-llama3-base.py DIR [--seed S] — a stand-in for a released
LLaMA 3 model, to try fine-tuning without downloading one: a small random
LLaMA-3-shaped model (LLaMA 3's vocabulary of 128,256, RoPE theta 500,000,
grouped-query attention, an untied head; 2 layers of width 64) written as
Hugging Face files, DIR/config.json and DIR/model.safetensors (float32), the
layout `model.init_from` reads from a real one. inputs/llama3-chat.yaml is its
deck. The weights are random with magnitudes in [2^-7, 2^-6) and random signs
(norms 1), made from a seeded generator's bytes with whole-buffer integer
operations: Python's standard library only, about a second."""
import json
import os
import random
import struct
import sys


def weights(rnd, n):
    """n float32 (little-endian bytes): random sign and mantissa, exponent 2^-7."""
    raw = int.from_bytes(rnd.randbytes(4 * n), "little")
    keep = int.from_bytes(b"\xff\xff\x7f\x80" * n, "little")  # mantissa and sign
    expo = int.from_bytes(b"\x00\x00\x00\x3c" * n, "little")  # exponent 0x78: 2^-7
    return ((raw & keep) | expo).to_bytes(4 * n, "little")


def ones(n):
    return b"\x00\x00\x80\x3f" * n


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 3
    C, F, L, V, H, KV = 64, 176, 2, 128256, 4, 2
    HS = C // H
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
           "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HS,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
           "bos_token_id": 128000, "eos_token_id": 128009}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rnd = random.Random(seed)
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,),
              "lm_head.weight": (V, C)}
    for i in range(L):
        p = "model.layers.%d." % i
        shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                       p + "self_attn.q_proj.weight": (C, C), p + "self_attn.k_proj.weight": (KV * HS, C),
                       p + "self_attn.v_proj.weight": (KV * HS, C), p + "self_attn.o_proj.weight": (C, C),
                       p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                       p + "mlp.down_proj.weight": (C, F)})
    header, off, blobs, total = {}, 0, [], 0
    for k in sorted(shapes):
        n = 1
        for d in shapes[k]:
            n *= d
        b = ones(n) if k.endswith("norm.weight") else weights(rnd, n)
        header[k] = {"dtype": "F32", "shape": list(shapes[k]), "data_offsets": [off, off + len(b)]}
        off += len(b)
        total += n
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print("example-llama3-base: %s/config.json and model.safetensors (%d tensors, %.1f M parameters)"
          % (out, len(shapes), total / 1e6))


if __name__ == "__main__":
    main()
