"""A complete DDP training loop with laggard: flags, automatic stages, a tracker sink, logs.

Run 4 ranks on CPU (gloo), rank 2 made slow in forward by 30 ms:

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 4 \
        examples/train_ddp.py --steps 60 --slow-rank 2 \
        --straggler-analysis --straggler-interval 5 --straggler-log-dir /tmp/laggard-run

(torchrun of the venv where laggard is installed, or of .venv with PYTHONPATH=python in a source
tree.) Rank 0 prints each report's verdict as it arrives (a few steps after the step it describes);
afterwards `laggard analyze /tmp/laggard-run` reads the same run from the logs. Without
--straggler-analysis laggard does nothing at all. On GPUs (--device cuda, NCCL) stages are timed
with CUDA events on the current stream; nothing synchronizes the device.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import laggard
import laggard.torch


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, num_heads=2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attention(x, x, x, need_weights=False)[0]
        return x + self.mlp(x)


class TinyModel(nn.Module):
    def __init__(self, dim=16, slow_ms=0.0):
        super().__init__()
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.head = nn.Linear(dim, 1)
        self.slow_ms = slow_ms

    def forward(self, x):
        if self.slow_ms:
            time.sleep(self.slow_ms / 1000.0)  # an injected straggler (a slow GPU, say)
        return self.head(self.blocks(x)).squeeze(-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=30.0)
    parser.add_argument("--device", default="cpu")
    laggard.add_arguments(parser)  # --straggler-analysis, --straggler-interval, ...
    args = parser.parse_args()

    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(0)

    def tracker(step, metrics):
        # Stands in for the trainer's own metrics logger (wandb.log, tracking_utils.log, ...).
        print("[step %d] bottleneck=%r confirmed=%r ranks=%d hints: %s" % (
            step, metrics["straggler/likely_bottleneck"], metrics["straggler/confirmed"],
            metrics["straggler/ranks"], metrics["straggler/hints"][:160]), flush=True)

    # Every rank creates the Analyzer (the ranks join the side channel in the background; one
    # that does not leaves the others without it, never waiting); only the analysis rank (0)
    # calls the sinks.
    analyzer = laggard.Analyzer.from_args(args, sinks=[tracker])

    model = TinyModel(slow_ms=args.slow_ms if rank == args.slow_rank else 0.0).to(device)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    # forward, backward (own compute), communication (the wait for peers), optimizer, and with
    # --straggler-enable-module-stages attention (MultiheadAttention matches "attention").
    laggard.torch.instrument(analyzer, model=ddp, optimizer=opt)

    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        analyzer.begin_step(step)
        with analyzer.section("dataloader"):
            x = torch.randn(4, 4, 16, generator=gen).to(device)
            y = torch.randn(4, 4, generator=gen).to(device)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        analyzer.end_step()

    analyzer.close()  # flushes the last reports (bounded wait); every rank calls it
    if rank == 0:
        final = analyzer.latest_metrics()
        print("final: bottleneck=%r confirmed=%r forward max/mean = %.1f/%.1f ms" % (
            final.get("straggler/likely_bottleneck"), final.get("straggler/confirmed"),
            final.get("straggler/forward/max_ms", float("nan")),
            final.get("straggler/forward/mean_ms", float("nan"))))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
