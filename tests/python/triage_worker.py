"""One rank of the triage tests (test_triage.py): a small DDP model trained on the CPU over gloo
with laggard's default settings, recording its loss and tokens with an.record, and one injected
cause on cfg["rank"]:

  "healthy"     nothing;
  "nan"         the loss is multiplied by NaN from step cfg["step"] on (its gradients, all-reduced,
                make every rank's loss NaN a step later: the first is the injected one);
  "tokens"      1.5x the samples per step (its forward and backward stand-ins take 1.5x, as
                device time grows with the work), recorded as `tokens`;
  "dataloader"  the data loader takes cfg["ms"] more;
  "busy"        a Python thread spins beside the training loop (it holds the GIL whenever the
                training thread lets go of it: host- or GIL-bound);
  "gc"          each step's forward makes cyclic garbage and collects it (Python GC pauses).

The resource sampler reads every 0.2 s (resources_period_s), so a run of a few seconds has
readings in most of its samples.

Stage times are the model's work plus stand-ins of a few milliseconds (sleeps, as
real_run_worker.py does), so that they are those of a real job rather than the scheduler noise of
a busy 2-core machine. run(rank, world, port, cfg) writes OUT/result-<rank>.json.
"""

import datetime
import gc
import json
import os
import random
import threading
import time

STAND_IN_MS = {"dataloader": 2.0, "forward": 15.0, "backward": 15.0, "optimizer": 5.0}
WARMUP_STEPS = 3


def run(rank, world, port, cfg):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    rng = random.Random(1000 + rank)
    cause = cfg["cause"] if rank == cfg["rank"] else "healthy"
    work = 1.5 if cause == "tokens" else 1.0
    batch_size = int(32 * work)

    def stand_in(stage, scale=1.0):
        ms = STAND_IN_MS[stage] * scale
        if cause == "dataloader" and stage == "dataloader":
            ms += cfg["ms"]
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    w_true = torch.randn(32, 4, generator=torch.Generator().manual_seed(7))
    an = laggard.Analyzer(enabled=True, interval=cfg["interval"], log_dir=cfg["log_dir"],
                          side_channel_timeout_s=60.0, close_timeout_s=30.0,
                          resources_period_s=0.2)
    stop = threading.Event()
    if cause == "busy":
        def spin():
            x = 0
            while not stop.is_set():
                x += 1

        threading.Thread(target=spin, name="busy", daemon=True).start()

    def batch():
        stand_in("dataloader")
        x = torch.randn(batch_size, 32, generator=gen)
        return x, x @ w_true

    for _ in range(WARMUP_STEPS):
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for step in range(cfg["steps"]):
        an.begin_step(step)
        with an.section("dataloader", kind="data"):
            x, y = batch()
        opt.zero_grad(set_to_none=True)
        with an.section("forward"):
            stand_in("forward", work)
            if cause == "gc":
                garbage = []
                for _ in range(15000):
                    a, b = [], []
                    a.append(b)
                    b.append(a)
                    garbage.append(a)
                del garbage, a, b
                gc.collect()
            loss = nn.functional.mse_loss(model(x), y)
            if cause == "nan" and step >= cfg["step"]:
                loss = loss * float("nan")
        with an.section("backward"):
            stand_in("backward", work)
            loss.backward()
        with an.section("optimizer"):
            stand_in("optimizer")
            opt.step()
        an.record("loss", loss.item())  # on every step: the recorder keeps sampled ones only
        an.record("tokens", batch_size)
        an.end_step()
    stop.set()
    an.close()
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "latest_metrics": an.latest_metrics(),
                   "counters": an.counters()}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
