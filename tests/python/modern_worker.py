"""One rank of test_modern_dist: laggard.torch.instrument on FSDP2 (fully_shard), on a
torch.compile'd model under DDP, and on ranks that train in subgroups while laggard's side
channel spans them all. Writes OUT/result-<rank>.json.

--mode fsdp2       fully_shard on every layer and the root, gloo, CPU
--mode compile     torch.compile (inductor) of the model, wrapped in DDP
--mode subgroups   ranks {0,1} and {2,3} each train their own DDP model over their own group,
                   and every step all ranks also all-reduce a metric over the default group
"""

import argparse
import json
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import laggard
import laggard.torch


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--mode", choices=["fsdp2", "compile", "subgroups"], required=True)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--interval", type=int, default=2)
    p.add_argument("--base-ms", type=float, default=6.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=12.0)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    p.add_argument("--no-laggard", action="store_true")
    return p.parse_args(argv)


class Sleep(torch.autograd.Function):
    """Sleeps `ms` in the backward (stands in for backward compute)."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.ms / 1000.0)
        return grad, None


@torch._dynamo.disable  # a graph break under torch.compile: the sleep is not traced
def _sleep(ms):
    time.sleep(ms / 1000.0)


class Net(nn.Module):
    def __init__(self, forward_ms):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)
        self.forward_ms = forward_ms

    def forward(self, x):
        _sleep(self.forward_ms)  # stands in for forward compute
        return self.l2(torch.relu(self.l1(x)))


class CollectiveLog:
    """Which process group each collective on a thread other than the training thread used."""

    NAMES = ("gather_object", "all_gather_object", "broadcast_object_list", "all_gather",
             "gather", "all_reduce", "broadcast", "barrier", "send", "recv")

    def __init__(self):
        self.groups = []  # (name, "default" | "other")
        self.training = threading.current_thread()

    def install(self):
        # torch.distributed's names, and distributed_c10d's, which gather_object and the
        # other object collectives call inside
        for owner in (dist, dist.distributed_c10d):
            for name in self.NAMES:
                setattr(owner, name, self._wrap(name, getattr(owner, name)))
        # laggard's side channel calls the send/recv of its own gloo process group directly
        # (no torch.distributed function takes it: it is no new_group)
        for name in ("send", "recv"):
            setattr(dist.ProcessGroupGloo, name,
                    self._wrap_backend(name, getattr(dist.ProcessGroupGloo, name)))

    def _wrap(self, name, real):
        def wrapped(*a, **k):
            if threading.current_thread() is not self.training:
                group = k.get("group")
                default = group is None or group is dist.group.WORLD or \
                    group is dist.distributed_c10d._get_default_group()
                self.groups.append((name, "default" if default else "other"))
            return real(*a, **k)

        return wrapped

    def _wrap_backend(self, name, real):
        def wrapped(backend, *a, **k):
            if threading.current_thread() is not self.training:
                default = dist.distributed_c10d._get_default_group()._get_backend(
                    torch.device("cpu"))
                self.groups.append((name, "default" if backend is default else "other"))
            return real(backend, *a, **k)

        return wrapped


def main(argv):
    args = parse(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    log = CollectiveLog()
    log.install()

    cohort = ""
    train_group = None
    if args.mode == "subgroups":
        # Every rank creates every subgroup, in the same order (new_group is collective).
        halves = [dist.new_group([0, 1], backend="gloo"), dist.new_group([2, 3], backend="gloo")]
        train_group = halves[rank // 2]
        cohort = "sub%d" % (rank // 2)
    an = laggard.Analyzer(enabled=not args.no_laggard, interval=args.interval, cohort=cohort,
                          log_dir=os.path.join(args.out, "logs"), close_timeout_s=30.0)

    slow = args.slow_ms if rank == args.slow_rank else 0.0
    net = Net(args.base_ms + slow)
    if args.mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(net.l1)
        fully_shard(net.l2)
        model = fully_shard(net)
    elif args.mode == "compile":
        from torch._inductor import config as inductor_config

        inductor_config.compile_threads = 1  # no pool of compile workers on 2 cores
        model = nn.parallel.DistributedDataParallel(torch.compile(net))
    else:
        model = nn.parallel.DistributedDataParallel(net, process_group=train_group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    inst = laggard.torch.instrument(an, model=model, optimizer=opt)

    gen = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen))
            for _ in range(args.warmup + args.steps)]
    losses = []
    default_group_metric = []
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(data):
        step = i - args.warmup
        if step >= 0:
            an.begin_step(step)
        opt.zero_grad()
        out = model(x)
        out = Sleep.apply(out, args.base_ms)
        loss = ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        if step >= 0:
            an.end_step()
        losses.append(loss.item())
        if args.mode == "subgroups":
            # the training's own use of the default group, at a different moment than laggard's
            metric = torch.tensor([loss.item()])
            dist.all_reduce(metric)
            default_group_metric.append(metric.item())
    train_s = time.perf_counter() - t0
    stages, notes = list(inst.stages), list(inst.notes)
    an.close()

    result = {
        "rank": rank,
        "losses": losses,
        "default_group_metric": default_group_metric,
        "train_s": train_s,
        "side_thread_collectives": log.groups,
        "stages": stages,
        "notes": notes,
        "counters": an.counters(),
        "latest_report": an.latest_report(),
    }
    with open(os.path.join(args.out, "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
