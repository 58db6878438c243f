#!/usr/bin/python3
"""malformed_h5.py ckpt GOOD.h5 OUTDIR | data GOOD.h5 OUTDIR

Makes malformed copies of a real trident checkpoint (`ckpt`) or token dataset
(`data`) with h5py, one file per case in OUTDIR, and prints one line per case
(tab-separated) for tests/e2e/malformed_h5.sh:

    NAME  FILE  EXPECT  REGEXES

EXPECT says, per command, what trident must do with the file: one letter
per command in the order the driver runs them -- for checkpoints train
(resume), eval, ckpt info; for datasets train, eval -- "2" (exit 2 with one
error naming the file and the object), "0" (accepted) or "-" (the command
does not read this file). REGEXES (';'-separated, extended, case-insensitive)
must all match the error line.

Tensors written with a correct `checksum` (see io/td_ckpt.h: the formula and
this NumPy version) where the case must be caught by something else than the
checksum (NaN, Inf, negative second moments, float64).
"""
import shutil
import sys

import h5py
import numpy as np

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x):
    """td_mix64 (common/td_rng.h) on a uint64 array; wraps mod 2^64."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def checksum(a):
    """The `checksum` attribute of float32 tensor a (io/td_ckpt.h)."""
    b = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    k = np.arange(b.size, dtype=np.uint64)
    return np.uint64(mix64(k ^ (b << np.uint64(32))).sum(dtype=np.uint64))


def replace(f, path, data=None, dtype=None, shape=None, chunks=None, keep_attrs=True,
            group=False):
    """Replace dataset `path` by a new one (or by a group)."""
    old = f[path]
    attrs = dict(old.attrs) if keep_attrs else {}
    del f[path]
    if group:
        g = f.create_group(path)
        g.attrs["note"] = "a group where a dataset belongs"
        return g
    if data is not None:
        d = f.create_dataset(path, data=data, dtype=dtype, chunks=chunks)
    else:
        d = f.create_dataset(path, shape=shape, dtype=dtype, chunks=chunks)
    for k, v in attrs.items():
        d.attrs[k] = v
    return d


def set_value(f, path, index, value):
    """Put `value` at flat `index` of float32 tensor `path`, with a correct
    checksum, so that only a value check can catch it."""
    d = f[path]
    a = d[()]
    a.reshape(-1)[index] = value
    d[...] = a
    d.attrs.modify("checksum", checksum(a))


def ckpt_cases():
    T = "2;2;2"  # train, eval, info
    # (name, expect, regexes, edit(f))
    return [
        ("dtype_int32", T, r"h\.0\.ln_1\.bias;float",
         lambda f: replace(f, "model/h.0.ln_1.bias", data=np.rint(f["model/h.0.ln_1.bias"][()]).astype(np.int32))),
        # float64 holding exactly the float32 values: trident converts on
        # read (HDF5, rounding to nearest) and verifies the checksum over the
        # converted float32 values, which are the saved ones: accepted.
        ("dtype_float64", "0;0;0", "",
         lambda f: replace(f, "model/h.0.ln_1.bias", data=f["model/h.0.ln_1.bias"][()].astype(np.float64))),
        ("rank_2d", T, r"h\.0\.ln_1\.bias;\(128, 1\);\(128\)",
         lambda f: replace(f, "model/h.0.ln_1.bias", data=f["model/h.0.ln_1.bias"][()].reshape(-1, 1))),
        ("dims_swapped", T, r"h\.0\.mlp\.c_fc\.weight;\(512, 128\);\(128, 512\)",
         lambda f: replace(f, "model/h.0.mlp.c_fc.weight", data=f["model/h.0.mlp.c_fc.weight"][()].reshape(512, 128))),
        ("missing_model_tensor", T, r"h\.3\.mlp\.c_proj\.bias;missing",
         lambda f: f.__delitem__("model/h.3.mlp.c_proj.bias")),
        # eval reads /model only
        ("missing_optim_tensor", "2;0;2", r"exp_avg_sq/wte\.weight;missing",
         lambda f: f.__delitem__("optim/exp_avg_sq/wte.weight")),
        ("format_missing", T, r"'?format'?",
         lambda f: f.attrs.__delitem__("format")),
        ("format_int", T, r"'?format'?;string",
         lambda f: f.attrs.create("format", np.int64(1))),
        ("format_version_missing", T, r"format_version",
         lambda f: f.attrs.__delitem__("format_version")),
        ("format_version_string", T, r"format_version",
         lambda f: f.attrs.create("format_version", "1")),
        ("step_missing", T, r"'?step'?",
         lambda f: f.attrs.__delitem__("step")),
        ("step_string", T, r"'?step'?",
         lambda f: f.attrs.create("step", "2")),
        ("step_negative", T, r"'?step'?;-5",
         lambda f: f.attrs.create("step", np.int64(-5))),
        ("saved_grid_missing", T, r"saved_grid",
         lambda f: f.attrs.__delitem__("saved_grid")),
        ("saved_grid_string", T, r"saved_grid",
         lambda f: f.attrs.create("saved_grid", "1,1,1")),
        ("saved_grid_short", T, r"saved_grid",
         lambda f: f.attrs.create("saved_grid", np.array([1, 1], dtype=np.int64))),
        ("checksum_missing", T, r"h\.1\.ln_2\.weight;checksum",
         lambda f: f["model/h.1.ln_2.weight"].attrs.__delitem__("checksum")),
        ("checksum_string", T, r"h\.1\.ln_2\.weight;checksum",
         lambda f: f["model/h.1.ln_2.weight"].attrs.create("checksum", "0x1234")),
        ("checksum_float", T, r"h\.1\.ln_2\.weight;checksum",
         lambda f: f["model/h.1.ln_2.weight"].attrs.create("checksum", np.float64(1.5))),
        ("config_missing", T, r"/config",
         lambda f: f.__delitem__("config")),
        ("config_not_string", T, r"/config;string",
         lambda f: replace(f, "config", data=np.arange(4, dtype=np.int32))),
        ("config_not_yaml", T, r"/config",
         lambda f: replace(f, "config", data=np.bytes_("model: {layers: [4, dim: 128\n  : - ]"))),
        # valid YAML, not a deck: `ckpt info` checks that /config is YAML
        # (io/ knows no deck schema); train and eval load it as the deck
        ("config_not_deck", "2;2;0", r"/config;deck",
         lambda f: replace(f, "config", data=np.bytes_("hello: world\n"))),
        ("config_group", T, r"/config",
         lambda f: replace(f, "config", group=True)),
        ("tensor_group", T, r"h\.0\.attn\.c_proj\.bias",
         lambda f: replace(f, "model/h.0.attn.c_proj.bias", group=True)),
        ("nan_param", T, r"h\.2\.mlp\.c_fc\.weight;(nan|non-finite|finite)",
         lambda f: set_value(f, "model/h.2.mlp.c_fc.weight", 777, np.nan)),
        ("inf_param", T, r"wte\.weight;(inf|non-finite|finite)",
         lambda f: set_value(f, "model/wte.weight", 12345, -np.inf)),
        # eval reads /model only
        ("inf_moment", "2;0;2", r"exp_avg/h\.1\.attn\.c_attn\.weight;(inf|non-finite|finite)",
         lambda f: set_value(f, "optim/exp_avg/h.1.attn.c_attn.weight", 4321, np.inf)),
        ("negative_second_moment", "2;0;2", r"exp_avg_sq/h\.0\.ln_2\.bias;negative",
         lambda f: set_value(f, "optim/exp_avg_sq/h.0.ln_2.bias", 3, -1.0)),
        # 2^40 elements claimed, no storage (chunked, nothing written)
        ("dims_2e40", T, r"ln_f\.bias;1099511627776",
         lambda f: replace(f, "model/ln_f.bias", shape=(1 << 40,), dtype=np.float32, chunks=(1 << 16,))),
        ("dims_2e40_2d", T, r"wpe\.weight;1048576",
         lambda f: replace(f, "model/wpe.weight", shape=(1 << 20, 1 << 20), dtype=np.float32,
                           chunks=(64, 128))),
    ]


def data_cases():
    T = "2;-"  # train, eval (eval reads data.val; data.train is this file)
    V = "2;2"  # the file as data.val (train evaluates; eval)
    return [
        ("tokens_float", T, r"/tokens;float",
         lambda f: replace(f, "tokens", data=f["tokens"][()].astype(np.float32), keep_attrs=True)),
        ("tokens_2d", T, r"/tokens;rank 2|2-d|1-d",
         lambda f: replace(f, "tokens", data=f["tokens"][: (f["tokens"].shape[0] // 2) * 2].reshape(-1, 2))),
        ("tokens_group", T, r"/tokens",
         lambda f: replace(f, "tokens", group=True)),
        ("tokens_missing", T, r"/tokens",
         lambda f: f.__delitem__("tokens")),
        ("vocab_string", T, r"vocab_size",
         lambda f: f.attrs.create("vocab_size", "256")),
        ("vocab_negative", T, r"vocab_size;-5",
         lambda f: f.attrs.create("vocab_size", np.int64(-5))),
        ("vocab_zero", T, r"vocab_size",
         lambda f: f.attrs.create("vocab_size", np.int64(0))),
        ("vocab_huge", T, r"vocab_size;4611686018427387904",
         lambda f: f.attrs.create("vocab_size", np.int64(1 << 62))),
        ("tokens_2e40", T, r"/tokens;1099511627776",
         lambda f: replace(f, "tokens", shape=(1 << 40,), dtype=np.uint16, chunks=(1 << 16,))),
        ("val_tokens_float", V, r"/val_tokens;float",
         lambda f: replace(f, "val_tokens", data=f["val_tokens"][()].astype(np.float64))),
        ("val_tokens_group", V, r"/val_tokens",
         lambda f: replace(f, "val_tokens", group=True)),
    ]


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("ckpt", "data"):
        sys.exit(__doc__)
    kind, good, out = sys.argv[1:]
    cases = ckpt_cases() if kind == "ckpt" else data_cases()
    for name, expect, regexes, edit in cases:
        path = f"{out}/{name}.h5"
        shutil.copyfile(good, path)
        with h5py.File(path, "r+") as f:
            edit(f)
        print(f"{name}\t{path}\t{expect}\t{regexes}")


if __name__ == "__main__":
    main()
