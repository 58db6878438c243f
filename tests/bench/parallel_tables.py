#!/usr/bin/python3
"""Tables of tests/bench/parallel_bench.sh from WORK/runs.tsv and the runs'
metrics.jsonl (markdown, for docs/benchmarks.md, "Parallelism").

    /usr/bin/python3 tests/bench/parallel_tables.py WORK

The model is inputs/small.yaml: V 256, T 256, L 6, C 384 (Ψ = 10,844,160).
Memory columns are the ZeRO engine's own accounting of what it allocated
(metrics param/grad/optim/work_bytes, max over ranks; parallel/zero.c
td_zero_bytes), checked against `trident check --json` (runs.tsv "check":
params, param, grad, optim, work, act bytes).
"""
import csv
import json
import math
import os
import statistics
import sys

V, T, L, C = 256, 256, 6, 384
BLOCK = 12 * C * C + 13 * C
PSI = V * C + T * C + L * BLOCK + 2 * C
MIB = 1048576.0


def engine(r):
    """(param, grad, optim, work, act) bytes of the run's last logged step."""
    last = [x for x in r["m"] if "param_bytes" in x]
    if not last:
        return None
    x = last[-1]
    return tuple(int(x[k]) for k in ("param_bytes", "grad_bytes", "optim_bytes", "work_bytes", "act_bytes"))


def check_cols(r):
    """[params, param, grad, optim, work, act] from `trident check --json`."""
    c = (r.get("check") or "").split(",")
    return [int(v) for v in c] if len(c) == 6 else None


def ideal(stage, dp, n=PSI):
    return {0: 16 * n, 1: 4 * n + 4 * n + 8 * n / dp, 2: 4 * n + 12 * n / dp, 3: 16 * n / dp}[stage]


def metrics(work, name):
    rows = []
    try:
        with open(os.path.join(work, name, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if "loss" in r:
                    rows.append(r)
    except OSError:
        pass
    return rows


def per_step(rows, key):
    """Differences of a cumulative metric between consecutive steps (2..N),
    leaving out steps that ran an evaluation (the last one always does: its
    forward pass's collectives are counted in that step's numbers)."""
    d = [rows[i][key] - rows[i - 1][key] for i in range(1, len(rows))
         if key in rows[i] and "val_loss" not in rows[i]]
    return statistics.median(d) if d else float("nan")


def tps(rows):
    v = [r["tokens_per_s"] for r in rows[1:]] or [r["tokens_per_s"] for r in rows]
    return statistics.median(v) if v else float("nan")


def mb(x):
    return "%.1f" % (x / MIB) if x == x else "–"


def main(work):
    runs = {}
    with open(os.path.join(work, "runs.tsv")) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            for k in ("np", "dp", "tp", "pp", "zero", "G", "B"):
                r[k] = int(r[k])
            r["m"] = metrics(work, r["name"])
            runs[r["name"]] = r
    print("Ψ = %d parameters (small: L %d, C %d, V %d, T %d); MiB = 2^20 bytes; per rank.\n" % (PSI, L, C, V, T))

    mem = [r for r in runs.values() if r["group"] == "mem"]
    if mem:
        print("### Memory per rank by ZeRO stage (global batch 4, micro-batch 1)\n")
        print("| dp | zero | params | grads | moments | **persistent** | ideal | persistent/ideal "
              "| work buffers | activations | `trident check` = run | peak RSS (mem_bytes) | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
        for r in sorted(mem, key=lambda r: (r["dp"], r["zero"])):
            e = engine(r)
            if e is None:
                print("| %d | %d | %s |" % (r["dp"], r["zero"], r["status"]))
                continue
            p, g, o, w, a = e
            idl = ideal(r["zero"], r["dp"])
            chk = check_cols(r)
            same = "–" if chk is None else ("yes" if tuple(chk[1:]) == e else "**no**: " + str(chk[1:]))
            rss = max((x.get("mem_bytes", 0) for x in r["m"]), default=float("nan"))
            print("| %d | %d | %s | %s | %s | **%s** | %s | %.3f | %s | %s | %s | %s | %s |" % (
                r["dp"], r["zero"], mb(p), mb(g), mb(o), mb(p + g + o), mb(idl), (p + g + o) / idl, mb(w),
                mb(a), same, mb(rss), r["load"]))
        print()

        print("### Communication per step per rank by ZeRO stage (same runs)\n")
        print("m = micro-batches per step on a rank. Ring volumes: DP all-reduce 2(dp−1)/dp·4Ψ; "
              "ZeRO-1 reduce-scatter + all-gather = the same; ZeRO-2 reduce-scatter every micro-batch "
              "(m·(dp−1)/dp·4Ψ) + all-gather (dp−1)/dp·4Ψ; ZeRO-3 reduce-scatter every micro-batch + "
              "all-gather of each block in forward and again in backward, except that the engine's "
              "two block slots keep the last two blocks gathered across the forward/backward turn "
              "(L + (2m−1)(L−2) block gathers per step), the persistent units (embeddings, ln_f) "
              "once per step: ≈ 1.5× DP at m = 1 (1.39× here with L = 6). Plus two 8-byte "
              "all-reduces (loss, gradient norm).\n")
        print("| dp | zero | m | measured MB/step | theory MB/step | measured/theory | ×DP theory | exposed comm ms/step | step ms | load |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(mem, key=lambda r: (r["dp"], r["zero"])):
            dp, z = r["dp"], r["zero"]
            if dp == 1:
                continue
            m = r["G"] // dp // r["B"]
            f = (dp - 1) / dp
            S = ((PSI + dp - 1) // dp + 15) // 16 * 16
            npad = S * dp
            persist = V * C + T * C + 2 * C
            th = {0: 2 * f * 4 * PSI, 1: f * 4 * PSI + f * 4 * npad, 2: m * f * 4 * PSI + f * 4 * npad,
                  3: m * f * 4 * PSI + f * 4 * persist + (L + (2 * m - 1) * (L - 2)) * f * 4 * BLOCK}[z]
            th += 2 * f * 8 * 2  # the loss and gradient-norm f64 all-reduces
            dp_th = 2 * f * 4 * PSI
            got = per_step(r["m"], "comm_bytes")
            cms = per_step(r["m"], "comm_ms")
            sms = statistics.median([x["step_ms"] for x in r["m"][1:]]) if len(r["m"]) > 1 else float("nan")
            print("| %d | %d | %d | %.2f | %.2f | %.3f | %.2f | %.0f | %.0f | %s |" % (
                dp, z, m, got / 1e6, th / 1e6, got / th, got / dp_th, cms, sms, r["load"]))
        print()

    sc = [runs[n] for n in ("scale_dp1", "scale_dp2") if n in runs]
    if sc:
        print("### Data-parallel scaling (global batch 4, 1 thread per rank)\n")
        print("| run | ranks | tok/s | speed-up vs dp 1 | step ms | load |")
        print("|---|---:|---:|---:|---:|---:|")
        base = tps(sc[0]["m"]) if sc[0]["name"] == "scale_dp1" else float("nan")
        for r in sc:
            t = tps(r["m"])
            sms = statistics.median([x["step_ms"] for x in r["m"][1:]]) if len(r["m"]) > 1 else float("nan")
            print("| trident dp %d (zero 0, micro-batch %d) | %d | %.0f | %.2f | %.0f | %s |" % (
                r["dp"], r["B"], r["np"], t, t / base, sms, r["load"]))
        tj = os.path.join(work, "torch_ddp.json")
        if os.path.exists(tj):
            d = json.load(open(tj))
            ld = open(os.path.join(work, "torch_ddp.load")).read().strip()
            print("| PyTorch %s DDP (gloo), 2 processes | 2 | %.0f | %.2f | %.0f | %s |" % (
                d["torch"], d["tokens_per_s"], d["tokens_per_s"] / base, d["step_ms_median"], ld))
        print()

    tp = [r for r in runs.values() if r["group"] == "tp"]
    if tp:
        print("### Tensor parallelism (dp 1, batch 4 × 256 tokens, one micro-batch)\n")
        print("Theory per step per rank: each block all-reduces B·T·C floats twice in forward "
              "(attention and MLP output) and twice in backward (the inputs' gradients), plus the "
              "embedding output (forward) and the LM head input gradient (backward), plus the "
              "vocabulary-parallel cross-entropy (row max, Σexp and target logit: 3·B·T floats); "
              "ring all-reduce 2(tp−1)/tp × bytes. The issue's per-layer formula 2·2·(B·T·C·4)·(tp−1)/tp "
              "counts each all-reduce at (tp−1)/tp; the ring moves twice that.\n")
        print("| tp | params/rank (formula) | `trident check` params / param MiB | measured MB/step | theory MB/step | measured/theory | exposed comm ms/step | tok/s | load |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in sorted(tp, key=lambda r: r["tp"]):
            k = r["tp"]
            B = r["B"]
            f = 2 * (k - 1) / k
            act = B * T * C * 4
            th = (4 * L + 2) * f * act + f * 3 * B * T * 4 + f * 8  # + the gradient-norm f64
            local = V // k * C + T * C + 2 * C + L * (4 * C + 12 * C * C // k + 7 * C // k + 2 * C)
            chk = check_cols(r)
            got = per_step(r["m"], "comm_bytes")
            cms = per_step(r["m"], "comm_ms")
            print("| %d | %d | %s | %.2f | %.2f | %s | %.0f | %.0f | %s |" % (
                k, local, ("%d / %s" % (chk[0], mb(chk[1]))) if chk else "–",
                got / 1e6, th / 1e6, ("%.3f" % (got / th)) if k > 1 else "–", cms, tps(r["m"]), r["load"]))
        print()

    pp = [runs[n] for n in ("pp4_gpipe", "pp4_1f1b", "dp2_pp2", "dp4") if n in runs]
    if pp:
        print("### Pipeline parallelism (4 ranks, global batch %d, micro-batch %d)\n" % (pp[0]["G"], pp[0]["B"]))
        print("Idle = time a stage waits in pipeline receives/sends over the step's forward+backward "
              "(pp_idle, median over steps 2..N); theory (pp−1)/(m+pp−1), m = micro-batches per pipeline.\n")
        print("| grid | schedule | m | tok/s | idle per stage | mean idle | theory bubble | live micro-batches (peak) | load |")
        print("|---|---|---:|---:|---|---:|---:|---|---:|")
        for r in pp:
            m = r["G"] // r["dp"] // r["B"]
            idle = [x.get("pp_idle") for x in r["m"][1:] if x.get("pp_idle")]
            if idle:
                med = [statistics.median(col) for col in zip(*idle)]
                idle_s = " / ".join("%.2f" % v for v in med)
                mean = "%.2f" % statistics.mean(med)
                theory = "%.2f" % r["m"][-1]["pp_bubble_theory"]
                live = " / ".join(str(v) for v in r["m"][-1].get("pp_live_peak", []))
            else:
                idle_s, mean, theory, live = "–", "–", "0", "–"
            print("| dp %d × pp %d | %s | %d | %.0f | %s | %s | %s | %s | %s |" % (
                r["dp"], r["pp"], r["sched"] if r["pp"] > 1 else "–", m, tps(r["m"]), idle_s, mean, theory,
                live, r["load"]))
        print()
    ba = [r for r in runs.values() if r["group"] in ("before", "after")]
    if ba:
        print("### ZeRO-2/3 gradient slots and working buffers: before and after (dp 2, global batch 8, "
              "micro-batch 1)\n")
        print("Each configuration run twice with each build, alternately; per run the median over its "
              "steps 2..N−1 of the exposed communication (comm_ms: rank 0's time waiting in collectives) "
              "and of step_ms; working buffers from the metrics (`before` builds that predate them: the "
              "same accounting, work_bytes).\n")
        print("| T | zero | build | working buffers MiB | exposed comm ms/step (runs) | step ms (runs) | load |")
        print("|---:|---:|---|---:|---|---|---|")
        seqs = sorted({r["name"].split("_T")[1].split("_")[0] for r in ba if "_T" in r["name"]}, key=int,
                      reverse=True)
        for seq, z, grp in ((q, z, g) for q in seqs for z in (2, 3) for g in ("before", "after")):
            rs = sorted((r for r in ba if r["group"] == grp and r["zero"] == z and "_T%s_" % seq in r["name"]),
                        key=lambda r: r["name"])
            if not rs:
                continue
            e = engine(rs[0])
            cms = [per_step(r["m"], "comm_ms") for r in rs]
            sms = [statistics.median([x["step_ms"] for x in r["m"][1:-1]]) if len(r["m"]) > 2
                   else float("nan") for r in rs]
            print("| %s | %d | %s | %s | %s | %s | %s |" % (
                seq, z, grp, mb(e[3]) if e else "–", " / ".join("%.0f" % c for c in cms),
                " / ".join("%.0f" % c for c in sms), " / ".join(r["load"] for r in rs)))
        print()
    bad = [r["name"] for r in runs.values() if r["status"] != "ok"]
    if bad:
        print("failed runs: " + ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build-par/parallel_bench"))
