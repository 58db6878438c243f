#!/usr/bin/python3
"""The planner's bytes are the metrics' bytes: train tiny grids for a few
steps and demand that `trident plan --json` (td_plan_comm_bytes, the largest
stage's rank) equals the measured comm_step_bytes of a step without
evaluation (the busiest rank's; the difference of the cumulative comm_bytes
between two steps is not that when stages differ: the busiest rank of the
whole run need not be the busiest of each step).

    /usr/bin/python3 tests/plan/comm_bytes.py TRIDENT MPIEXEC WORK
"""
import json
import os
import shutil
import subprocess
import sys

GRIDS = [  # (ranks, overrides)
    (2, ["parallel.dp=2", "parallel.zero=0"]),
    (2, ["parallel.dp=2", "parallel.zero=1"]),
    (2, ["parallel.dp=2", "parallel.zero=2", "parallel.micro_batch=2"]),
    (2, ["parallel.dp=2", "parallel.zero=3", "parallel.micro_batch=2"]),
    (2, ["parallel.tp=2"]),
    (2, ["parallel.pp=2", "parallel.micro_batch=2"]),
    (2, ["parallel.tp=2", "parallel.sequence_parallel=true"]),
    (2, ["parallel.tp=2", "parallel.sequence_parallel=true", "training.precision=bf16",
         "training.recompute=blocks"]),
    (2, ["parallel.tp=2", "training.recompute=blocks"]),
    (2, ["parallel.cp=2"]),
    (2, ["parallel.pp=2", "parallel.micro_batch=1", "parallel.pp_schedule=zb-h1"]),
    # stage messages scattered over tp (1/tp each), all-gathered after the receive
    (4, ["parallel.tp=2", "parallel.pp=2", "parallel.micro_batch=2"]),
    (4, ["parallel.tp=2", "parallel.pp=2", "parallel.micro_batch=2",
         "parallel.sequence_parallel=true"]),
]


def main():
    trident, mpiexec, work = sys.argv[1:4]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "corpus.h5")
    if not os.path.exists(data):
        txt = os.path.join(work, "corpus.txt")
        with open(txt, "w") as f:
            f.write(open(os.path.join(root, "README.md")).read() * 4)
        subprocess.run([trident, "prepare", "--out", data, txt], check=True, capture_output=True)
    cluster = os.path.join(root, "inputs", "clusters", "cpu-2core.yaml")
    bad = 0
    for i, (n, sets) in enumerate(GRIDS):
        out = os.path.join(work, "g%d" % i)
        shutil.rmtree(out, ignore_errors=True)  # a fresh run (resume: never refuses an old one)
        args = sum([["--set", s] for s in sets + [
            "data.train=" + data, "training.steps=6", "schedule.warmup=1", "training.global_batch=8", "eval.every=100",
            "run.out_dir=" + out, "checkpoint.every=0", "checkpoint.resume=never"]], [])
        subprocess.run([mpiexec, "-n", str(n), trident, "train", os.path.join(root, "inputs", "tiny.yaml")] + args,
                       check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        rows = [r for r in rows if "loss" in r]
        meas = rows[2]["comm_step_bytes"]  # step 3's, the busiest rank's
        plan = json.loads(subprocess.run([trident, "plan", os.path.join(root, "inputs", "tiny.yaml"),
                                          "--cluster", cluster, "--json"] + args, check=True,
                                         capture_output=True, text=True).stdout)[0]["comm_bytes"]
        ok = abs(plan - meas) <= 1
        bad += not ok
        print("%-60s measured %12.0f planned %12.0f %s" % (" ".join(sets), meas, plan, "ok" if ok else "DIFFERENT (%+.4f)" % (plan / meas - 1 if meas else 0)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
