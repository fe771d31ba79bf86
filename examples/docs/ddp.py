"""Plain PyTorch training with laggard: one script for a single process, DDP and FSDP2 under
torchrun (gloo on the CPU here; NCCL on GPUs). Set LAGGARD_EXAMPLE_SLOW_RANK=1 to make rank 1's
data loading 20 ms slower and watch laggard name it.

    python examples/docs/ddp.py                                       # one process
    torchrun --nproc-per-node 2 examples/docs/ddp.py                  # DDP
    torchrun --nproc-per-node 2 examples/docs/ddp.py --fsdp2          # FSDP2 (fully_shard)
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import laggard
import laggard.torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--fsdp2", action="store_true")
parser.add_argument("--log-dir", default=None)
args = parser.parse_args()

distributed = "RANK" in os.environ  # started by torchrun
if distributed:
    dist.init_process_group("gloo")
rank = dist.get_rank() if distributed else 0
slow = os.environ.get("LAGGARD_EXAMPLE_SLOW_RANK") == str(rank)
torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        time.sleep(0.020)  # stands in for a GPU's forward work
        return self.net(x)


model = Model()
if distributed and args.fsdp2:
    from torch.distributed.fsdp import fully_shard
    fully_shard(model)
elif distributed:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(16, 32), torch.randn(16, 1)) for _ in range(4)]  # your DataLoader

# Every rank creates the Analyzer, after init_process_group.
an = laggard.Analyzer(interval=2, log_dir=args.log_dir)
laggard.torch.instrument(an, model=model, optimizer=optimizer)  # forward, backward,
                                                                # communication, optimizer
for step in range(args.steps):
    an.begin_step(step)                   # first: the step includes loading its batch
    with an.section("dataloader"):
        x, y = batches[step % len(batches)]
        time.sleep(0.025 if slow else 0.005)  # stands in for reading and decoding a batch
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    an.end_step()                         # last: after the optimizer step

an.close()                                # every rank, before destroy_process_group()
if rank == 0:
    print("confirmed stragglers (rank:stage):",
          an.latest_metrics().get("straggler/confirmed") or "none")
if distributed:
    dist.destroy_process_group()
