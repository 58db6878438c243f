#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo, localhost) side of trident's
parallel benchmark (tests/bench/parallel_bench.sh, docs/benchmarks.md,
"Parallelism").

    /usr/bin/python3 tests/bench/torch_ddp_bench.py --ranks 2 --global-batch 4 \\
        --steps 3 --warmup-steps 1 --threads 1 [--layers 6 --dim 384 --heads 6 --vocab 256 --seq-len 256]

The model, initialisation, AdamW (weight decay on 2-D weights), gradient
clipping and the step are tests/bench/torch_gpt2_bench.py's (imported), wrapped
in an nn.Module for torch.nn.parallel.DistributedDataParallel: --ranks
processes started with torch.multiprocessing, gloo over 127.0.0.1, each with
--threads intra-op threads and global_batch / ranks sequences per step.

Output: ONE JSON line from rank 0:
  tokens_per_s   global_batch·seq_len / median timed step (rank 0's clock; DDP
                 synchronises every step in backward)
  step_ms_median, step_ms_all, peak_rss_bytes (max over ranks), params, ranks,
  threads, torch, first_loss, last_loss (rank 0's local loss).
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def parse(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch DDP (gloo) GPT-2 CPU benchmark")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=4)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    if a.global_batch % a.ranks:
        ap.error("--global-batch must be divisible by --ranks")
    return a


A = parse()
os.environ.setdefault("OMP_NUM_THREADS", str(A.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(A.threads))
os.environ.setdefault("MKL_NUM_THREADS", str(A.threads))

# torch_gpt2_bench parses its own arguments at import: hand it the model's.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_argv = sys.argv
sys.argv = [_argv[0], "--layers", str(A.layers), "--dim", str(A.dim), "--heads", str(A.heads),
            "--vocab", str(A.vocab), "--seq-len", str(A.seq_len),
            "--batch", str(A.global_batch // A.ranks), "--threads", str(A.threads)]
import torch_gpt2_bench as tb  # noqa: E402
sys.argv = _argv

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import resource  # noqa: E402


class GPT(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        P = tb.make_params(a, "linear")
        self.names = list(P.keys())
        self.p = torch.nn.ParameterList([torch.nn.Parameter(t.detach().clone()) for t in P.values()])
        self.fwd = tb.make_forward(a)

    def forward(self, idx, tgt):
        return self.fwd(dict(zip(self.names, self.p)), idx, tgt)


def worker(rank, a, port, q):
    tb.set_threads(a.threads)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=a.ranks)
    ma = tb.ARGS
    torch.manual_seed(ma.seed)
    model = GPT(ma)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    dec = [p for n, p in zip(model.names, model.p) if n.endswith(".weight") and p.dim() == 2]
    nodec = [p for n, p in zip(model.names, model.p) if not (n.endswith(".weight") and p.dim() == 2)]
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.1},
                             {"params": nodec, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    B = a.global_batch // a.ranks
    total = a.warmup_steps + a.steps
    g = torch.Generator().manual_seed(ma.seed + 1 + rank)
    data = torch.randint(0, a.vocab, (total, B, a.seq_len + 1), generator=g)
    times, losses = [], []
    dist.barrier()
    for s in range(total):
        idx = data[s, :, :-1].contiguous()
        tgt = data[s, :, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        losses.append(lv)
        if s >= a.warmup_steps:
            times.append(dt)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put({"tokens_per_s": a.global_batch * a.seq_len / statistics.median(times),
               "step_ms_median": 1e3 * statistics.median(times),
               "step_ms_all": [round(1e3 * t, 1) for t in times],
               "peak_rss_bytes": int(rss.item()),
               "params": sum(p.numel() for p in model.parameters()),
               "ranks": a.ranks, "threads": a.threads, "global_batch": a.global_batch,
               "torch": torch.__version__, "backend": "gloo",
               "first_loss": losses[0], "last_loss": losses[-1]})
    dist.destroy_process_group()


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(worker, args=(A, port, q), nprocs=A.ranks, join=True)
    print(json.dumps(q.get()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
