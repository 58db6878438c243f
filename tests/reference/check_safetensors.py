#!/usr/bin/python3
"""Read test_safetensors' output with json + numpy and check it exactly.

Usage: /usr/bin/python3 tests/reference/check_safetensors.py FILE"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_ref as G  # noqa: E402

path = sys.argv[1]
raw = open(path, "rb").read()
n = int.from_bytes(raw[:8], "little")
if (8 + n) % 8:
    sys.exit("check_safetensors: data does not start 8-byte aligned (header %d bytes)" % n)
hdr = json.loads(raw[8:8 + n].decode("utf-8"))
want_meta = {"format": "pt", 'note "quoted"': "line\nbreak"}
if hdr.get("__metadata__") != want_meta:
    sys.exit("check_safetensors: metadata %r" % hdr.get("__metadata__"))
t = G.load_safetensors(path, prefix="")
odd = 'quote"back\\slash\nnew\tline\x01 \u00e9'
want = {
    "plain.weight": (0.5 * np.arange(6, dtype=np.float32) - 1.0).reshape(2, 3),
    odd: (1.0 / np.arange(1, 6, dtype=np.float32)),
    "bf16.values": (3.0 * np.arange(4, dtype=np.float32) + 0.25).reshape(2, 2),
    "empty": np.zeros(0, dtype=np.float32),
}
if sorted(t) != sorted(want):
    sys.exit("check_safetensors: names %r" % sorted(t))
for k, v in want.items():
    if t[k].shape != v.shape or not np.array_equal(t[k], v.astype(np.float32)):
        sys.exit("check_safetensors: %r = %r, want %r" % (k, t[k], v))
if len(raw) != 8 + n + 6 * 4 + 5 * 4 + 4 * 2:
    sys.exit("check_safetensors: file is %d bytes" % len(raw))
print("check_safetensors: OK (4 tensors, escaped names and metadata read back by json)")
