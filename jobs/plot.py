#!/usr/bin/env python3
"""plot.py RUN_DIR_OR_METRICS... [-o FILE.png] [--label NAME]... [--title TEXT]
   plot.py --scaling SCALING.json... [-o FILE.png] [--label NAME]... [--title TEXT]

Training curves of one or several trident runs, side by side: training and
validation loss, tokens/s and peak memory per rank against the step, and for
a mixture of experts (model.moe) the most and least loaded expert against
the mean and the load-balancing term. Each
argument is a run's folder (its metrics.jsonl) or a metrics file. A resumed
run is one curve (trident trims its metrics file to the checkpoint it
resumes from); runs on different grids drawn together show grid invariance:
their loss curves lie on each other.

With --scaling, the tables jobs/scaling.sh writes (scaling.json): tokens/s
and efficiency against the rank count, one line per table (e.g. one host
and two hosts).

Needs matplotlib (Debian: python3-matplotlib); run it with /usr/bin/python3.
Writes FILE.png (default: plot.png beside the first run's metrics) and prints
its path."""
import argparse
import json
import os
import sys


def load(arg):
    path = os.path.join(arg, "metrics.jsonl") if os.path.isdir(arg) else arg
    if not os.path.isfile(path):
        sys.exit(f"plot.py: {arg}: no metrics file (looked for {path})")
    train, val = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot.py: {path}:{n}: not JSON: {e}")
            step = rec.get("step")
            if "loss" in rec:
                train[step] = rec  # a step logged twice (a resume): the later line wins
            if "val_loss" in rec:
                val[step] = rec["val_loss"]
    if not train and not val:
        sys.exit(f"plot.py: {path}: no logged steps")
    return path, train, val


def scaling(a, plt):
    """Tokens/s and efficiency against ranks, one line per scaling.json."""
    fig, (at, ae) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, path in enumerate(a.runs):
        try:
            table = json.load(open(path))
            rows = table["rows"]
            n = [r["ranks"] for r in rows]
            tps = [r["tokens_per_s"] for r in rows]
            eff = [r["efficiency"] for r in rows]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"plot.py: {path}: not a jobs/scaling.sh table: {e}")
        name = a.label[i] if i < len(a.label) else f"{table.get('mode', '')} {path}"
        at.plot(n, tps, marker="o", color=f"C{i % 10}", label=name)
        ae.plot(n, eff, marker="o", color=f"C{i % 10}", label=name)
    at.set_title("tokens/s")
    ae.set_title("efficiency (tokens/s per rank against the first)")
    ae.axhline(1.0, color="grey", lw=0.8, ls="--")
    ticks = sorted({r["ranks"] for p in a.runs for r in json.load(open(p))["rows"]})
    for x in (at, ae):
        x.set_xlabel("ranks")
        x.set_xscale("log", base=2)
        x.set_xticks(ticks)
        x.set_xticklabels([str(t) for t in ticks])
        x.minorticks_off()
        x.grid(alpha=0.3)
        x.legend(fontsize=8)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(a.runs[0])), "scaling.png")
    fig.savefig(out, dpi=90)
    print(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders or metrics.jsonl files (with "
                    "--scaling: scaling.json files)")
    ap.add_argument("-o", "--out", help="the PNG to write")
    ap.add_argument("--label", action="append", default=[], help="a name per run, in order")
    ap.add_argument("--title", default=None)
    ap.add_argument("--scaling", action="store_true", help="draw jobs/scaling.sh tables")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: matplotlib is missing (Debian: apt-get install python3-matplotlib; "
                 "run with /usr/bin/python3)")
    if a.scaling:
        scaling(a, plt)
        return
    runs = [load(r) for r in a.runs]
    moe = any("moe_tokens_mean" in row for _, train, _ in runs for row in train.values())
    fig, ax = plt.subplots(3 if moe else 2, 2, figsize=(11, 11 if moe else 7.5))
    (al, av), (at, am) = ax[0], ax[1]
    ae, ax_aux = ax[2] if moe else (None, None)
    for i, (path, train, val) in enumerate(runs):
        name = a.label[i] if i < len(a.label) else os.path.basename(
            os.path.dirname(os.path.abspath(path))) or path
        steps = sorted(train)
        color = f"C{i % 10}"
        if steps:
            al.plot(steps, [train[s]["loss"] for s in steps], color=color, lw=1.2, label=name)
            at.plot(steps, [train[s].get("tokens_per_s", float("nan")) for s in steps],
                    color=color, lw=1.0, label=name)
            mem = [max(train[s].get("mem_bytes", 0), train[s].get("device_mem_bytes", 0)) / 2**20
                   for s in steps]
            am.plot(steps, mem, color=color, lw=1.0, label=name)
            ms = [s for s in steps if "moe_tokens_mean" in train[s]]
            if moe and ms:  # an expert's load over the mean: 1 is a perfect balance
                r = [train[s] for s in ms]
                ae.plot(ms, [x["moe_tokens_max"] / x["moe_tokens_mean"] for x in r], color=color,
                        lw=1.0, label=name + " most loaded")
                ae.plot(ms, [x["moe_tokens_min"] / x["moe_tokens_mean"] for x in r], color=color,
                        lw=1.0, ls="--", label=name + " least loaded")
                ax_aux.plot(ms, [x["moe_aux_loss"] for x in r], color=color, lw=1.0,
                            label=name + " balance E·Σf·P")
        if val:
            vs = sorted(val)
            av.plot(vs, [val[s] for s in vs], color=color, marker="o", ms=3, lw=1.2, label=name)
    al.set_title("training loss")
    av.set_title("validation loss")
    at.set_title("tokens/s")
    am.set_title("peak memory per rank (MiB)")
    panels = [al, av, at, am]
    if moe:
        ae.set_title("expert load: slots per sparse block / mean")
        ax_aux.set_title("load-balancing term (top_k when balanced)")
        panels += [ae, ax_aux]
    for x in panels:
        x.set_xlabel("step")
        x.grid(alpha=0.3)
        if x.lines:
            x.legend(fontsize=8)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(runs[0][0])), "plot.png")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=90)
    print(out)


if __name__ == "__main__":
    main()
