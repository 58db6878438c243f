#!/usr/bin/env python3
"""tensorboard.py TRIDENT MPIEXEC WORKDIR — TensorBoard event files, read by
an independent decoder.

Trains the tiny deck with `logging.tensorboard` and reads every event file
with Debian's protobuf (tb_event.proto compiled by protoc here, not trident's
encoder) and every record's two CRCs with crcmod's CRC-32C:
  - the framing: u64 length, masked CRC32C of it, payload, masked CRC32C of
    the payload; the first record of a file is file_version "brain.Event:2";
  - every metric of the JSONL file is a scalar at its step, equal to the
    JSONL's number (float32, after the unit conversion the tag names);
  - a run resumed from an earlier checkpoint than its last logged step adds
    a second file in the same folder whose second event is a SessionLog
    START (Event field 7 in TensorBoard's published event.proto) at the
    first step it logs; with TensorBoard's purge on START applied, the two
    files show every step once, the resumed run's points over the orphaned
    ones, and equal the JSONL file;
  - a pipelined run logs the measured and the predicted bubble;
  - no folder without the key; a folder that cannot be made fails the run on
    every rank (exit 3) naming it;
  - jobs/plot.py draws both runs into one PNG, and names a run it cannot read.
Prints 'N passed, M failed'."""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined

trident, mpiexec, work = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.makedirs(work, exist_ok=True)
os.chdir(work)
env = dict(os.environ, OMP_NUM_THREADS="1")
passed = failed = 0


def ok(msg):
    global passed
    passed += 1
    print("PASS", msg)


def bad(msg):
    global failed
    failed += 1
    print("FAIL", msg)


# the decoder: protoc's Python for the test's own .proto
gen = tempfile.mkdtemp(prefix="tbproto")
subprocess.run(["protoc", "-I", os.path.join(src, "tests/monitoring"), "--python_out", gen,
                "tb_event.proto"], check=True)
sys.path.insert(0, gen)
import tb_event_pb2  # noqa: E402

crc32c = crcmod.predefined.mkCrcFun("crc-32c")
assert crc32c(b"123456789") == 0xE3069283, "crcmod's CRC-32C is not Castagnoli's"


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path):
    """Every record of one file, CRCs checked, decoded."""
    events = []
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"{path}: {len(data) - pos} stray bytes at offset {pos}")
        head = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hc != masked(head):
            raise ValueError(f"{path}: length CRC wrong at offset {pos}")
        payload = data[pos + 12:pos + 12 + n]
        (pc,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if len(payload) != n or pc != masked(payload):
            raise ValueError(f"{path}: payload CRC wrong at offset {pos}")
        ev = tb_event_pb2.Event()
        ev.ParseFromString(payload)
        events.append(ev)
        pos += 16 + n
    return events


GIB, MIB = float(1 << 30), float(1 << 20)
# JSONL key -> (tag, conversion); docs/monitoring.md's table ("TensorBoard"), written independently
TAGS = {
    "loss": ("loss_metrics/global_avg_loss", 1.0),
    "val_loss": ("loss_metrics/val_loss", 1.0),
    "lr": ("lr", 1.0),
    "grad_norm": ("grad_norm", 1.0),
    "tokens": ("tokens_seen", 1.0),
    "step_ms": ("time_metrics/step(ms)", 1.0),
    "tokens_per_s": ("throughput(tps)", 1.0),
    "mem_bytes": ("memory/max_rss(GiB)", 1 / GIB),
    "param_bytes": ("memory/params(GiB)", 1 / GIB),
    "grad_bytes": ("memory/grads(GiB)", 1 / GIB),
    "optim_bytes": ("memory/optimizer(GiB)", 1 / GIB),
    "work_bytes": ("memory/workspace(GiB)", 1 / GIB),
    "act_bytes": ("memory/activations(GiB)", 1 / GIB),
    "device_mem_bytes": ("memory/device_peak(GiB)", 1 / GIB),
    "host_optim_bytes": ("memory/host_optimizer(GiB)", 1 / GIB),
    "comm_bytes": ("comm/MiB", 1 / MIB),
    "comm_ms": ("comm/ms", 1.0),
    "comm_intra_bytes": ("comm/intra_node_MiB", 1 / MIB),
    "comm_inter_bytes": ("comm/inter_node_MiB", 1 / MIB),
    "comm_intra_ms": ("comm/intra_node_ms", 1.0),
    "comm_inter_ms": ("comm/inter_node_ms", 1.0),
    "comm_step_bytes": ("comm/step_MiB", 1 / MIB),
    "step_tokens": ("data/step_tokens", 1.0),
    "loss_tokens": ("data/loss_tokens", 1.0),
    "ckpt_bytes": ("memory/ckpt_staging(GiB)", 1 / GIB),
    "save_stall_ms": ("checkpoint/stall(ms)", 1.0),
    "save_write_ms": ("checkpoint/write(ms)", 1.0),
    "rank_step_ms_min": ("ranks/step_min(ms)", 1.0),
    "rank_step_ms_median": ("ranks/step_median(ms)", 1.0),
    "rank_step_ms_max": ("ranks/step_max(ms)", 1.0),
    "straggler_rank": ("ranks/straggler", 1.0),
    "choice_acc": ("eval/choice_acc", 1.0),
    "choice_acc_norm": ("eval/choice_acc_norm", 1.0),
    "pp_idle": ("pipeline/bubble", max),
    "pp_bubble_theory": ("pipeline/bubble_predicted", 1.0),
    "pp_live_peak": ("pipeline/live_peak", max),
    "pp_idle_ms": ("pipeline/idle(ms)", max),
    "pp_bubble": ("pipeline/bubble_measured", max),
}
NOT_SCALARS = {"step", "val_tokens"}
# digits the JSONL prints some keys with (%.3f, %.1f, %.4f, %.0f)
PRINTED = {"step_ms": 5e-4, "tokens_per_s": 5e-2, "comm_ms": 5e-4, "pp_idle": 5e-5,
           "pp_bubble_theory": 5e-5, "comm_bytes": 0.5, "pp_idle_ms": 5e-4, "pp_bubble": 5e-5,
           "comm_intra_ms": 5e-4, "comm_inter_ms": 5e-4, "save_stall_ms": 5e-4,
           "save_write_ms": 5e-4, "rank_step_ms_min": 5e-4, "rank_step_ms_median": 5e-4,
           "rank_step_ms_max": 5e-4}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def compare(jsonl, scalars, what):
    """Every JSONL number at every step equals the TensorBoard scalar."""
    n = 0
    for rec in jsonl:
        step = rec["step"]
        for key, val in rec.items():
            if key in NOT_SCALARS:
                continue
            if key not in TAGS:
                bad(f"{what}: JSONL key '{key}' has no TensorBoard tag")
                continue
            tag, conv = TAGS[key]
            want = conv(val) if callable(conv) else val * conv
            got = scalars.get((step, tag))
            if got is None:
                bad(f"{what}: step {step}: no scalar '{tag}' for JSONL '{key}'")
                continue
            # float32's rounding plus half a unit of the JSONL's last printed digit
            tol = abs(f32(want)) * 2.4e-7 + PRINTED.get(key, 0.0) * (
                conv if not callable(conv) else 1.0)
            if abs(got - f32(want)) > tol:
                bad(f"{what}: step {step}: '{tag}' = {got!r}, JSONL '{key}' gives {want!r}")
                continue
            n += 1
    return n


def scalars_of(events):
    out = {}
    for ev in events:
        if ev.WhichOneof("what") == "summary":
            for v in ev.summary.value:
                key = (ev.step, v.tag)
                if key in out:
                    raise ValueError(f"step {ev.step}: '{v.tag}' written twice")
                out[key] = v.simple_value
    return out


def run(ranks, *sets, check=True):
    cmd = [mpiexec, "-n", str(ranks), trident, "train", os.path.join(src, "inputs/tiny.yaml"),
           "--set", "data.train=corpus.h5", "--set", "schedule.warmup=1",
           "--set", "eval.batches=2"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and p.returncode != 0:
        print(p.stdout)
        raise SystemExit(f"trident train failed ({p.returncode}): {' '.join(cmd)}")
    return p


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


if not os.path.exists("corpus.h5"):
    subprocess.run([trident, "prepare", "--out", "corpus.h5", "--val-fraction", "0.1",
                    "/usr/share/common-licenses"], check=True, stdout=subprocess.DEVNULL)

# ---- dp 2: 6 steps (checkpoints at 4 and 6), then resumed from step 4 to 7 ----------
# The first run logged steps 5 and 6 after the checkpoint it is resumed from:
# the resumed run trains them again, and TensorBoard must show its points,
# not the orphaned ones, while keeping step 4's point.
shutil.rmtree("run", ignore_errors=True)
common = ["run.out_dir=run", "logging.tensorboard=true", "eval.every=2", "checkpoint.every=4",
          "parallel.dp=2"]
p = run(2, *common, "training.steps=6", "checkpoint.resume=never")
if "TensorBoard events in run/tb/events.out.tfevents." in p.stdout:
    ok("the log names the event file")
else:
    bad("the log does not name the event file")
files = sorted(glob.glob("run/tb/events.out.tfevents.*"))
if len(files) == 1:
    ok("one event file from 2 ranks")
else:
    bad(f"expected one event file, found {files}")
import time  # noqa: E402

time.sleep(1.1)  # the resumed run's file has a later time in its name
run(2, *common, "training.steps=7", "checkpoint.resume=run/ckpt/step_00000004.h5")
files = sorted(glob.glob("run/tb/events.out.tfevents.*"), key=os.path.getmtime)
if len(files) == 2:
    ok("the resumed run added a second event file in the same folder")
else:
    bad(f"expected two event files after the resume, found {files}")
try:
    evs = [read_events(f) for f in files]
    ok(f"{sum(len(e) for e in evs)} records in {len(files)} files: lengths and CRC32Cs check")
except ValueError as e:
    bad(str(e))
    evs = []
for f, e in zip(files, evs):
    if e and e[0].WhichOneof("what") == "file_version" and e[0].file_version == "brain.Event:2":
        ok(f"{os.path.basename(f)} starts with file_version brain.Event:2")
    else:
        bad(f"{os.path.basename(f)} does not start with the file version")
if len(evs) == 2:
    second = evs[1]
    steps = [sorted({ev.step for ev in e if ev.WhichOneof("what") == "summary"}) for e in evs]
    kinds = [ev.WhichOneof("what") for ev in second[:2]]
    if (len(second) > 1 and kinds[1] == "session_log" and
            second[1].session_log.status == tb_event_pb2.SessionLog.START and
            steps[1] and second[1].step == steps[1][0] == 5):
        ok("the resumed file's second event is a SessionLog START (Event field 7) at step 5, "
           "the first step the resumed run logs")
    else:
        bad(f"the resumed file does not start a session at its first logged step: events "
            f"{kinds}, step {second[1].step if len(second) > 1 else None}, its steps {steps[1]}")
    if steps[0] == [0, 1, 2, 3, 4, 5, 6] and steps[1] == [5, 6, 7]:
        ok("steps 0-6 in the first file, 5-7 in the second")
    else:
        bad(f"steps per file: {steps}")
    # what TensorBoard shows: its EventAccumulator, on a START at step S, drops
    # the points it read before with step >= S (_CheckForRestartAndMaybePurge)
    shown = {}
    for e in evs:
        for ev in e:
            if (ev.WhichOneof("what") == "session_log" and
                    ev.session_log.status == tb_event_pb2.SessionLog.START):
                shown = {k: v for k, v in shown.items() if k[0] < ev.step}
            elif ev.WhichOneof("what") == "summary":
                for v in ev.summary.value:
                    shown[(ev.step, v.tag)] = v.simple_value
    shown_steps = sorted({k[0] for k in shown})
    if shown_steps == list(range(8)):
        ok("after TensorBoard's purge on START: steps 0-7 once each, step 4 kept")
    else:
        bad(f"after TensorBoard's purge on START the steps shown are {shown_steps}")
    try:
        n = compare(jsonl("run/metrics.jsonl"), shown, "dp 2 resumed")
        if n > 100:
            ok(f"{n} JSONL numbers equal the scalars TensorBoard shows (steps 0-7, resumed "
               "points over orphaned ones)")
        else:
            bad(f"only {n} numbers compared")
    except ValueError as e:
        bad(str(e))

# ---- pp 2: the bubble; an explicit folder -----------------------------------------------
shutil.rmtree("runpp", ignore_errors=True)
run(2, "run.out_dir=runpp", "logging.tensorboard=runpp/events", "parallel.pp=2",
    "parallel.micro_batch=2", "training.steps=2", "checkpoint.resume=never")
files = glob.glob("runpp/events/events.out.tfevents.*")
if len(files) == 1:
    sc = scalars_of(read_events(files[0]))
    n = compare(jsonl("runpp/metrics.jsonl"), sc, "pp 2")
    if (2, "pipeline/bubble") in sc and (2, "pipeline/bubble_predicted") in sc and n > 20:
        ok(f"pp 2: bubble measured and predicted logged; {n} numbers equal the JSONL")
    else:
        bad("pp 2: pipeline scalars missing")
else:
    bad(f"pp 2: expected one file in runpp/events, found {files}")

# ---- off by default; a folder that cannot be made ------------------------------------------
shutil.rmtree("runoff", ignore_errors=True)
run(1, "run.out_dir=runoff", "training.steps=1", "checkpoint.resume=never")
if not os.path.exists("runoff/tb"):
    ok("no TensorBoard folder without the key")
else:
    bad("runoff/tb exists although logging.tensorboard was not set")
with open("blocker", "w") as f:
    f.write("a file, not a folder\n")
shutil.rmtree("runbad", ignore_errors=True)
p = run(2, "run.out_dir=runbad", "logging.tensorboard=blocker/tb", "training.steps=1",
        "checkpoint.resume=never", "parallel.dp=2", check=False)
if p.returncode == 3 and "blocker" in p.stdout and "TensorBoard" in p.stdout:
    ok("an unusable folder: exit 3 naming it")
else:
    bad(f"an unusable folder: exit {p.returncode}, output: {p.stdout[-400:]}")

# ---- the plot of both runs (jobs/plot.py) ------------------------------------------------
p = subprocess.run(["/usr/bin/python3", os.path.join(src, "jobs/plot.py"), "run", "runpp",
                    "-o", "plots/both.png", "--label", "dp 2 (resumed)", "--label", "pp 2"],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
if p.returncode == 0 and p.stdout.strip() == "plots/both.png":
    import matplotlib.image  # noqa: E402

    img = matplotlib.image.imread("plots/both.png")
    if img.ndim == 3 and img.shape[0] > 400 and img.shape[1] > 600 and img.std() > 0.05:
        ok(f"jobs/plot.py drew both runs: {img.shape[1]}x{img.shape[0]} PNG")
    else:
        bad(f"jobs/plot.py wrote an odd image: shape {img.shape}, std {img.std():.3f}")
else:
    bad(f"jobs/plot.py failed ({p.returncode}): {p.stdout[-300:]}")
p = subprocess.run(["/usr/bin/python3", os.path.join(src, "jobs/plot.py"), "no-such-run"],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
if p.returncode != 0 and "no-such-run" in p.stdout and "no metrics file" in p.stdout:
    ok("jobs/plot.py on a folder without metrics: an error naming it")
else:
    bad(f"jobs/plot.py on a missing run: exit {p.returncode}: {p.stdout[-200:]}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
