#!/usr/bin/env python3
"""Records real PyTorch profiler traces of a small DDP job on the CPU: gloo ranks as real
processes, torch.profiler over a few ProfilerStep steps, one trace per rank.

  python3 tests/data/record_cpu_traces.py OUT_DIR [--ranks 3] [--steps 12] [--slow-rank 1]
        [--slow-ms 15] [--handler]

--slow-rank R sleeps --slow-ms in R's forward (inside DistributedDataParallel.forward), so the
other ranks wait for it in the gradient all-reduce. Without --handler each rank writes
OUT_DIR/rank-<r>.json.gz (export_chrome_trace); with it, torch.profiler's
tensorboard_trace_handler names the files (<host>_<pid>.<time>.pt.trace.json.gz). tests/data/
trace-cpu-gloo was made with the defaults; tests/python/test_traces.py records its own.
"""
import argparse
import multiprocessing
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "python"))  # ranks.py
sys.path.append(os.path.join(_HERE, "..", "..", "python"))  # laggard, unless installed
from ranks import spawn_ranks  # noqa: E402


def _worker(rank, world, port, args):
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

        def forward(self, x):
            if rank == args.slow_rank:
                time.sleep(args.slow_ms / 1000.0)
            return self.body(x)

    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    loader = iter(torch.utils.data.DataLoader(data, batch_size=16))
    if args.handler:
        ready = tensorboard_trace_handler(args.out_dir, use_gzip=True)
    else:
        path = os.path.join(args.out_dir, "rank-%d.json.gz" % rank)
        ready = lambda p: p.export_chrome_trace(path)  # noqa: E731
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=args.steps),
                 on_trace_ready=ready) as prof:
        for _ in range(args.steps + 2):
            x, y = next(loader)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def record(out_dir, ranks=3, steps=12, slow_rank=1, slow_ms=15.0, handler=False, timeout_s=120):
    """Runs the ranks (forked from this process) and waits for them; raises when one fails."""
    import torch  # noqa: F401 — imported once, inherited by the forked ranks

    args = argparse.Namespace(out_dir=str(out_dir), steps=steps, slow_rank=slow_rank,
                              slow_ms=slow_ms, handler=handler)
    os.makedirs(str(out_dir), exist_ok=True)
    spawn_ranks(_worker, ranks, (args,), ctx=multiprocessing.get_context("fork"),
                timeout_s=timeout_s)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--slow-ms", type=float, default=15.0)
    p.add_argument("--handler", action="store_true")
    a = p.parse_args()
    record(a.out_dir, a.ranks, a.steps, a.slow_rank, a.slow_ms, a.handler)


if __name__ == "__main__":
    sys.exit(main())
