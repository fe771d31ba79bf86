"""One rank of test_verdict.py: a small DDP model trained on the CPU over gloo with laggard at its
defaults (no sink, no log_dir, no logging configuration: only `interval`, as the other real-run
tests), one rank's forward slower by cfg["slow_ms"] (none when cfg["slow_rank"] is -1).

The rank's stderr (fd 2, what a console shows) goes to OUT/stderr-<rank>.txt, so that the test
reads what a user would see. Each sampled step the rank reads latest_metrics() as a training
loop that acts on the verdict would; after the last step it waits (at most 20 s) until the
verdict about the last sampled window has arrived, then all ranks meet (a barrier) and close.

run(rank, world, port, cfg) writes OUT/result-<rank>.json: what latest_metrics() and
latest_report() said at the end, the verdict step seen at each sampled step, and the counters.
"""

import datetime
import json
import math
import os
import random
import sys
import time

STAND_IN_MS = {"dataloader": 5.0, "forward": 20.0, "backward": 20.0, "optimizer": 5.0}


def run(rank, world, port, cfg):
    err = os.open(os.path.join(cfg["out"], "stderr-%d.txt" % rank),
                  os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stderr.flush()
    os.dup2(err, 2)

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    rng = random.Random(2000 + rank)
    slow = rank == cfg["slow_rank"]

    def stand_in(stage):
        ms = STAND_IN_MS[stage] + (cfg["slow_ms"] if slow and stage == "forward" else 0.0)
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    class StandIn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            stand_in("backward")
            return grad

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(32, 64)
            self.l2 = nn.Linear(64, 4)

        def forward(self, x):
            stand_in("forward")
            return self.l2(StandIn.apply(torch.relu(self.l1(x))))

    an = laggard.Analyzer(enabled=True, interval=cfg["interval"])
    model = nn.parallel.DistributedDataParallel(MLP())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    w_true = torch.randn(32, 4, generator=torch.Generator().manual_seed(7))

    def train_step():
        with an.section("dataloader"):
            stand_in("dataloader")
            x = torch.randn(16, 32, generator=gen)
            y = x @ w_true
        opt.zero_grad(set_to_none=True)
        with an.section("forward"):
            loss = nn.functional.mse_loss(model(x), y)
        with an.section("backward"):
            loss.backward()
        with an.section("optimizer"):
            stand_in("optimizer")
            opt.step()

    for _ in range(3):  # warm-up, untimed (DDP's buckets, fresh processes)
        train_step()

    lags = []  # (step, verdict step) at each sampled step once a verdict has arrived
    last_sampled = 0
    for step in range(cfg["steps"]):
        an.begin_step(step)
        train_step()
        an.end_step()
        if step % cfg["interval"] == 0:
            last_sampled = step
            seen = an.latest_metrics().get("straggler/verdict_step")
            if seen is not None:
                lags.append((step, int(seen)))

    until = time.monotonic() + 20.0
    while time.monotonic() < until:
        if an.latest_metrics().get("straggler/verdict_step", -1) >= last_sampled:
            break
        time.sleep(0.05)
    metrics = an.latest_metrics()
    report = an.latest_report()
    dist.barrier()
    an.close()

    def plain(x):  # JSON: NaN as None
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list):
            return [plain(v) for v in x]
        return x

    result = {"rank": rank, "metrics": plain(metrics), "report": plain(report), "lags": lags,
              "last_sampled": last_sampled, "counters": plain(an.counters()),
              "is_analysis_rank": an.is_analysis_rank}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
