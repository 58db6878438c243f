#!/usr/bin/python3
"""The planner against published training runs it was not built from: each
row is the run as its source states it — model, grid, micro and
global batch, precision, recomputation, and which collectives that system
overlapped (--cluster-set links.overlap_dp / links.overlap_tp) — predicted
from the shipped cluster files; nothing is fitted per row. Sources and what
each row assumes where its source is silent: docs/plan.md ("Validation").

    /usr/bin/python3 tests/plan/validation.py build/trident [--markdown] [--check-doc FILE...]

Compares the source's own figure: hardware TFLOP/s per GPU (with the
recomputation: Narayanan et al. 2021, BigScience), model TFLOP/s or MFU
(Megatron-Core, torchtitan), or the published step time (MT-NLG,
Nemotron-4). The issue's goals: median absolute error <= 10%, maximum <=
20% — not met today (docs/plan.md says by how much and where); the test
fails beyond what the model reaches now (BOUND), so that it cannot get
worse unseen. The trident column is the same row with trident's own
overlap (its defaults). --check-doc demands that each FILE holds every row
of the markdown table.
"""
import json
import os
import statistics
import subprocess
import sys

GOAL = (0.10, 0.20)   # median, maximum absolute error
BOUND = (0.10, 0.28)  # what the model reaches today (8.6%, 27.4%): a regression fails
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

GPT = "megatron-gpt.yaml"
LLAMA = "llama3-405b.yaml"
A100, H100, JZ = "dgx-a100.yaml", "dgx-h100.yaml", "jean-zay-a100.yaml"


def narayanan(name, L, C, H, tp, pp, mb, gb, gpus, vp, tf, ddp):
    # Narayanan et al. 2021, Table 1 (Megatron-LM README image) and
    # examples/academic_paper_scripts/sc21/run_table_1.sh: full recomputation,
    # fp16, V 51,200, s 2048; DDP=torch overlaps the gradient all-reduce with
    # the backward pass, DDP=local reduces after it
    dp = gpus // (tp * pp)
    sets = ["model.layers=%d" % L, "model.dim=%d" % C, "model.heads=%d" % H,
            "parallel.dp=%d" % dp, "parallel.tp=%d" % tp, "parallel.pp=%d" % pp,
            "parallel.micro_batch=%d" % mb, "training.global_batch=%d" % gb]
    if vp > 1:
        sets += ["parallel.pp_schedule=interleaved", "parallel.virtual_stages=%d" % vp]
    return ("Narayanan 2021 T1 %s, %d A100 (tp %d, pp %d, mb %d)" % (name, gpus, tp, pp, mb),
            "N21", GPT, A100, sets, ["links.overlap_dp=" + ("grads" if ddp == "torch" else "none")],
            "hw_tflops_per_device", tf)


def mcore(name, H, C, L, tp, pp, gpus, gb, tf):
    # Megatron-Core r0.8.0 (NVIDIA/Megatron-LM README, images/model_table.png):
    # V 131,072, s 4096, --overlap-grad-reduce --overlap-param-gather
    # --tp-comm-overlap; micro-batch, recomputation and precision not stated
    # (taken: 1, none, bf16, fused attention)
    return ("Megatron-Core %s, %d H100 (tp %d, pp %d)" % (name, gpus, tp, pp), "MC24", GPT, H100,
            ["model.vocab_size=131072", "model.seq_len=4096", "model.layers=%d" % L,
             "model.dim=%d" % C, "model.heads=%d" % H, "model.attention=fused",
             "training.recompute=none", "parallel.dp=%d" % (gpus // (tp * pp)),
             "parallel.tp=%d" % tp, "parallel.pp=%d" % pp, "parallel.zero=1",
             "parallel.sequence_parallel=%s" % ("true" if tp > 1 else "false"),
             "parallel.micro_batch=1", "training.global_batch=%d" % gb],
            ["links.overlap_dp=all", "links.overlap_tp=1"], "tflops_per_device", tf)


def torchtitan(name, how, L, C, H, F, recompute, mfu):
    return ("torchtitan Llama 3 %s, 64 A100 (FSDP, %s)" % (name, how), "TT", LLAMA, A100,
            ["model.layers=%d" % L, "model.dim=%d" % C, "model.heads=%d" % H, "model.kv_heads=8",
             "model.ffn_dim=%d" % F, "parallel.stage_layers=[]", "parallel.virtual_stages=1",
             "parallel.pp_schedule=1f1b", "parallel.dp=64", "parallel.tp=1", "parallel.pp=1",
             "parallel.zero=3", "parallel.sequence_parallel=false", "training.global_batch=64",
             "training.recompute=" + recompute], ["links.overlap_dp=trident"], "mfu", mfu)


def mtnlg(gpus, step):
    # MT-NLG 530B (Smith et al. 2022 §2.4, via cli99/llm-analysis): batch 1920,
    # tp 8, pp 35, V 50,272, s 2048, full recomputation; micro-batch 1
    # (not verified); overlap not stated (none taken)
    return ("MT-NLG 530B, %d A100 (tp 8, pp 35, dp %d)" % (gpus, gpus // 280), "MTNLG", GPT, A100,
            ["model.vocab_size=50272", "model.layers=105", "model.dim=20480", "model.heads=128",
             "parallel.dp=%d" % (gpus // 280), "parallel.tp=8", "parallel.pp=35",
             "parallel.micro_batch=1", "training.global_batch=1920"],
            ["links.overlap_dp=none"], "step_s", step)


ROWS = [
    narayanan("1.7B", 24, 2304, 24, 1, 1, 16, 512, 32, 1, 137, "torch"),
    narayanan("3.6B", 30, 3072, 32, 2, 1, 16, 512, 64, 1, 138, "torch"),
    narayanan("7.5B", 36, 4096, 32, 4, 1, 16, 512, 128, 1, 142, "torch"),
    narayanan("18B", 40, 6144, 48, 8, 1, 8, 1024, 256, 1, 135, "torch"),
    narayanan("39B", 48, 8192, 64, 8, 2, 4, 1536, 512, 1, 138, "local"),
    narayanan("76B", 60, 10240, 80, 8, 4, 2, 1792, 1024, 3, 140, "local"),
    narayanan("145B", 80, 12288, 96, 8, 8, 2, 2304, 1536, 2, 148, "local"),
    narayanan("310B", 96, 16384, 128, 8, 16, 1, 2160, 1920, 2, 155, "local"),
    narayanan("530B", 105, 20480, 128, 8, 35, 1, 2520, 2520, 3, 163, "local"),
    narayanan("1T", 128, 25600, 160, 8, 64, 1, 3072, 3072, 1, 163, "local"),
    # BLOOM 176B (bigscience tr11-176B-ml README and slurm script): 384 A100
    # on Jean Zay, tp 4, pp 12, dp 8, micro-batch 2, batch 2048, bf16, full
    # recomputation, V 250,880 (padded), s 2048; 104.70 s an iteration logged;
    # the embedding and the head counted as layers of the first and last
    # stage (--pp-partition-method type:transformer|embedding)
    ("BLOOM 176B, 384 A100 (tp 4, pp 12, dp 8)", "BLOOM", GPT, JZ,
     ["model.vocab_size=250880", "model.layers=70", "model.dim=14336", "model.heads=112",
      "parallel.dp=8", "parallel.tp=4", "parallel.pp=12", "parallel.micro_batch=2",
      "parallel.stage_layers=[5,6,6,6,6,6,6,6,6,6,6,5]",
      "training.global_batch=2048"], ["links.overlap_dp=none"], "step_s", 104.70),
    mtnlg(2240, 60.1), mtnlg(2800, 50.2), mtnlg(3360, 44.4),
    mcore("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8),
    mcore("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    mcore("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1),
    mcore("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    mcore("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7),
    mcore("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    mcore("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    mcore("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    mcore("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
    # torchtitan docs/performance.md: Llama 3 on 64 A100 (80 GB), FSDP2
    # (ZeRO-3 with prefetch), local batch 1, s 8192, bf16, SDPA (fused)
    torchtitan("8B", "op-level recompute", 32, 4096, 32, 14336, "none", 0.582),
    torchtitan("70B", "full recompute", 80, 8192, 64, 28672, "blocks", 0.517),
    # Nemotron-4 340B on 256 H100 (NVIDIA/dgxc-benchmarking nemotron4-340b
    # README): 96 layers, 18,432, 96 heads, 8 groups, squared-ReLU MLP 73,728
    # (as SwiGLU 49,152: the same products' FLOPs), V 256,000, s 4096; tp 8,
    # pp 8, dp 4, virtual 12, micro-batch 1, batch 64; 4.31 s a step
    ("Nemotron-4 340B, 256 H100 (tp 8, pp 8, dp 4, v 12)", "NEMO", LLAMA, H100,
     ["model.layers=96", "model.dim=18432", "model.heads=96", "model.kv_heads=8",
      "model.ffn_dim=49152", "model.vocab_size=256000", "model.seq_len=4096",
      "parallel.stage_layers=[]", "parallel.pp_schedule=interleaved",
      "parallel.virtual_stages=12", "parallel.dp=4", "parallel.tp=8", "parallel.pp=8",
      "training.global_batch=64"], ["links.overlap_dp=all", "links.overlap_tp=1"],
     "step_s", 4.31),
]


def predict(trident, deck, cluster, sets, csets):
    cmd = [trident, "plan", os.path.join(HERE, deck), "--cluster",
           os.path.join(ROOT, "inputs", "clusters", cluster), "--json"]
    for s in sets:
        cmd += ["--set", s]
    for s in csets:
        cmd += ["--cluster-set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("validation: %s failed:\n%s" % (" ".join(cmd), p.stderr))
    return json.loads(p.stdout)[0]


def error(x, key, pub):
    # step times: published / predicted − 1 (the throughput's error), others
    # predicted / published − 1: positive = the planner predicts faster
    return pub / x[key] - 1 if key == "step_s" else x[key] / pub - 1


def main():
    trident = sys.argv[1]
    md = "--markdown" in sys.argv
    docs = sys.argv[sys.argv.index("--check-doc") + 1:] if "--check-doc" in sys.argv else []
    table, errs = [], []
    for name, src, deck, cluster, sets, csets, key, pub in ROWS:
        x = predict(trident, deck, cluster, sets, csets)
        t = predict(trident, deck, cluster, sets, [])
        e, et = error(x, key, pub), error(t, key, pub)
        errs.append(e)
        c = x["comm"]
        exp = " / ".join("%.2f" % c[g]["exposed_s"] for g in ("tp", "dp", "pp", "cp"))
        fmt = "%.2f s" if key == "step_s" else "%.1f%%" if key == "mfu" else "%.0f"
        scale = 100 if key == "mfu" else 1
        table.append("| %s | %s | %s | %s | %+.1f%% | %s | %+.1f%% | %.3f | %s |" % (
            name, src, fmt % (pub * scale), fmt % (x[key] * scale), 100 * e,
            fmt % (t[key] * scale), 100 * et, x["bubble"], exp))
    ab = sorted(abs(e) for e in errs)
    med, mx = statistics.median(ab), ab[-1]
    if md:
        print("| run | source | published | predicted | error | trident | error | bubble "
              "| exposed tp / dp / pp / cp s |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        print("\n".join(table))
        print("\n%d rows: median absolute error %.1f%%, maximum %.1f%%" % (len(ab), 100 * med, 100 * mx))
    else:
        for row in table:
            print(row)
        print("%d rows from %d sources: median absolute error %.1f%% (goal <= %.0f%%: %s), "
              "maximum %.1f%% (goal <= %.0f%%: %s)" % (
                  len(ab), len({r[1] for r in ROWS}), 100 * med, 100 * GOAL[0],
                  "met" if med <= GOAL[0] else "NOT met", 100 * mx, 100 * GOAL[1],
                  "met" if mx <= GOAL[1] else "NOT met"))
    bad = 0
    for doc in docs:
        text = open(doc).read()
        for row in table:
            if row not in text:
                print("%s: this row of the validation table is not there (stale?):\n  %s" % (doc, row))
                bad += 1
    if med > BOUND[0] or mx > BOUND[1]:
        print("validation: worse than the model reached when the table was recorded "
              "(median %.0f%%, maximum %.0f%%)" % (100 * BOUND[0], 100 * BOUND[1]))
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
