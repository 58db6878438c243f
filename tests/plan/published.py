#!/usr/bin/python3
"""Published large runs vs `trident plan`, from the shipped cluster files alone
(global constants; no per-row tuning). Each row is the paper's configuration
(grid, batch, recomputation, schedule) as --set overrides of a deck in this
folder; the predicted TFLOP/s per GPU must be within ±15% of the published
figure. Narayanan et al. 2021 count hardware FLOPs (with the recomputation,
their 96·B·s·l·h² formula): compared with hw_tflops_per_device; Llama 3
counts model FLOPs (no recomputation): tflops_per_device.

    /usr/bin/python3 tests/plan/published.py build/trident [--markdown] [--check-doc FILE...]

--markdown prints the table docs/plan.md and the README carry; --check-doc
also demands that each FILE holds every row of it verbatim (the tables
there stay what the planner predicts).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


ROWS = [
    # name, deck, cluster, sets, published TFLOP/s per GPU, MFU, key. The
    # Megatron rows as examples/academic_paper_scripts/sc21/run_table_1.sh
    # ran them (micro-batch 16 at 1.7B; 1T without interleaving)
    ("Megatron-LM 1.7B, 32 A100 (tp 1, pp 1, batch 512)", "megatron-gpt.yaml", "dgx-a100.yaml",
     ["parallel.dp=32", "parallel.micro_batch=16"], 137, 0.44, "hw_tflops_per_device"),
    ("Megatron-LM 1T, 3072 A100 (tp 8, pp 64, batch 3072)", "megatron-gpt.yaml", "dgx-a100.yaml",
     ["model.layers=128", "model.dim=25600", "model.heads=160", "parallel.dp=6", "parallel.tp=8",
      "parallel.pp=64", "training.global_batch=3072"], 163, 0.52, "hw_tflops_per_device"),
    ("Llama 3 405B, 8192 H100 (tp 8, pp 16, dp 64, s 8192)", "llama3-405b.yaml", "dgx-h100.yaml",
     ["parallel.dp=64"], 430, 0.43, "tflops_per_device"),
    ("Llama 3 405B, 16384 H100 (tp 8, pp 16, dp 128, s 8192)", "llama3-405b.yaml", "dgx-h100.yaml",
     ["parallel.dp=128"], 400, 0.41, "tflops_per_device"),
    ("Llama 3 405B, 16384 H100 (tp 8, cp 16, pp 16, dp 8, s 131072)", "llama3-405b.yaml",
     "dgx-h100.yaml",
     ["parallel.dp=8", "parallel.cp=16", "model.seq_len=131072", "training.global_batch=128"],
     380, 0.38, "tflops_per_device"),
]


# Rows the model misses by more than ±15%: name -> the largest error allowed
# and the term docs/plan.md names as missing (no constant is bent to fit).
KNOWN = {
    # the kernels Megatron ran in 2021 and trident does not have (attention
    # and hidden dropout over 16 sequences' scores, fp16 loss scaling):
    # predicted fast, as every such row of tests/plan/validation.py
    "Megatron-LM 1.7B, 32 A100 (tp 1, pp 1, batch 512)": 0.25,
}


def predict(trident, deck, cluster, sets):
    cmd = [trident, "plan", os.path.join(HERE, deck), "--cluster",
           os.path.join(ROOT, "inputs", "clusters", cluster), "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def main():
    trident = sys.argv[1]
    md = "--markdown" in sys.argv
    docs = sys.argv[sys.argv.index("--check-doc") + 1:] if "--check-doc" in sys.argv else []
    bad = 0
    table = []
    if md:
        print("| run | published TFLOP/s (MFU) | predicted | error | bubble | exposed tp / dp / pp / cp s | step s |")
        print("|---|---:|---:|---:|---:|---|---:|")
    for name, deck, cluster, sets, pub, mfu, key in ROWS:
        x = predict(trident, deck, cluster, sets)
        got = x[key]
        err = got / pub - 1
        ok = abs(err) <= 0.15 or (name in KNOWN and abs(err) <= KNOWN[name])
        bad += not ok
        c = x["comm"]
        exp = " / ".join("%.2f" % c[g]["exposed_s"] for g in ("tp", "dp", "pp", "cp"))
        row = "| %s | %d (%d%%) | %.0f (%.0f%%) | %+.1f%%%s | %.3f | %s | %.2f |" % (
            name, pub, round(100 * mfu), got, 100 * x["mfu"], 100 * err,
            " **(outside ±15%)**" if abs(err) > 0.15 else "", x["bubble"], exp, x["step_s"])
        table.append(row)
        if md:
            print(row)
        else:
            print("%-70s published %4d predicted %6.1f (%+5.1f%%) bubble %.3f exposed %s %s" % (
                name, pub, got, 100 * err, x["bubble"], exp, "ok" if ok else "OUTSIDE ±15%"))
    for doc in docs:
        text = open(doc).read()
        for row in table:
            if row not in text:
                print("%s: this row of the published-runs table is not there (stale?):\n  %s" % (doc, row))
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
