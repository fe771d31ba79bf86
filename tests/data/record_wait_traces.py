#!/usr/bin/env python3
"""Records real PyTorch profiler traces of two small gloo jobs on the CPU, one per kind of wait
that a name could confuse: a slow DataLoader, and a collective whose name holds "data".

  python3 tests/data/record_wait_traces.py OUT_DIR {slow-loader,comm-named-data}
        [--ranks 2] [--steps 8] [--slow-rank 0] [--slow-ms 25]

slow-loader: each rank iterates a DataLoader whose dataset takes --slow-ms per batch on
--slow-rank (a few ms elsewhere), then runs a small model's forward, backward and optimizer step
under DDP. The slow rank's `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` is the
data wait.

comm-named-data: the same job with a fast DataLoader, and before the forward an all-to-all of
the batch's features inside `record_function("## sparse_data_dist ##")`, as TorchRec names its
input all-to-all. --slow-rank sleeps --slow-ms in its `## preprocess ##` region before the
all-to-all, so the other ranks wait for it inside `## sparse_data_dist ##`: a communication
wait, whatever the name says.

Each rank writes OUT_DIR/rank-<r>.json.gz. tests/data/trace-cpu-slow-loader and
tests/data/trace-cpu-comm-named-data were made with the defaults.
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
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    slow_loader = args.mode == "slow-loader"

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(64, generator=g), int(i % 10)

    class Sampler(torch.utils.data.Sampler):
        # One index per batch: the dataset's delay is paid once per batch.
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    def collate(items):
        if slow_loader and rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000.0)
        x = torch.stack([torch.randn(64) + items[0][0] for _ in range(16)])
        y = torch.tensor([items[0][1]] * 16)
        return x, y

    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = iter(torch.utils.data.DataLoader(Batches(), batch_size=1, sampler=Sampler(4096),
                                              collate_fn=collate))
    path = os.path.join(args.out_dir, "rank-%d.json.gz" % rank)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=args.steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(args.steps + 2):
            x, y = next(loader)
            if not slow_loader:
                with record_function("## preprocess ##"):
                    if rank == args.slow_rank:
                        time.sleep(args.slow_ms / 1000.0)
                    x = x * 1.0
                with record_function("## sparse_data_dist ##"):
                    out = torch.empty_like(x)
                    dist.all_to_all_single(out, x)
                    x = out
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def record(out_dir, mode, ranks=2, steps=8, slow_rank=0, slow_ms=25.0, timeout_s=120):
    """Runs the ranks (forked from this process) and waits for them; raises when one fails."""
    import torch  # noqa: F401 — imported once, inherited by the forked ranks

    args = argparse.Namespace(out_dir=str(out_dir), mode=mode, steps=steps, slow_rank=slow_rank,
                              slow_ms=slow_ms)
    os.makedirs(str(out_dir), exist_ok=True)
    spawn_ranks(_worker, ranks, (args,), ctx=multiprocessing.get_context("fork"),
                timeout_s=timeout_s)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("mode", choices=["slow-loader", "comm-named-data"])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=0)
    p.add_argument("--slow-ms", type=float, default=25.0)
    a = p.parse_args()
    record(a.out_dir, a.mode, a.ranks, a.steps, a.slow_rank, a.slow_ms)


if __name__ == "__main__":
    sys.exit(main())
