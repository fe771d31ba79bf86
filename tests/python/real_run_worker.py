"""One rank of the real-run tests (test_real_runs.py): a small DDP model trained on the CPU over
gloo, with laggard's DEFAULT detector settings (nothing but interval and log_dir is passed to
the Analyzer, unless the LAGGARD_REAL_RUNS_PRESET environment variable names a preset: that is
for trying a preset by hand, never set by the tests), and one injected slowdown.

Every stage is the model's real work plus a stand-in of a few milliseconds (a sleep, as a GPU
kernel is a wait for the host; python/laggard/demo.py does the same), so that stage times are
those of a real job rather than the scheduler noise of a busy 2-core machine.

Stages:
  mode "sections": dataloader, forward (model + loss), backward (loss.backward(): DDP's
    all-reduce wait is inside it), optimizer, all written by hand with an.section();
  mode "instrument": dataloader by hand; forward, backward, communication and optimizer from
    laggard.torch.instrument (backward from the torch.autograd.backward call).

Injections (cfg["slow"], on cfg["slow_rank"], cfg["slow_ms"] more, from step 0):
  "optimizer"      the optimizer's step;
  "loss_backward"  an autograd op between the model output and the loss (backward_delay.Delay);
  "untimed"        a sleep after the optimizer, outside any section (in the step, not a stage);
  "dataloader"     the data loader.

run(rank, world, port, cfg) writes OUT/result-<rank>.json: the reports the analysis rank's sink
received (step, straggler/confirmed), its latest metrics and the counters.
"""

import datetime
import json
import os
import random
import time

# The demo's stand-ins (python/laggard/demo.py): with 10 ms forward and backward, the CPU work the
# analysis rank's background thread takes from its training thread on 2 shared cores made its
# forward a steady ~11 % slower in some healthy runs, which the default detector rightly saw.
STAND_IN_MS = {"dataloader": 10.0, "forward": 20.0, "backward": 20.0, "optimizer": 10.0}
WARMUP_STEPS = 3  # before step 0, not timed (DDP's bucket set-up, fresh processes)


def run(rank, world, port, cfg):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch
    from backward_delay import Delay

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    rng = random.Random(1000 + rank)
    slow = cfg["slow"] if rank == cfg["slow_rank"] else "none"
    extra_ms = float(cfg["slow_ms"])

    def stand_in(stage):
        ms = STAND_IN_MS[stage] + (extra_ms if slow == stage else 0.0)
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)  # 2 % jitter

    class StandIn(torch.autograd.Function):
        """Identity; its backward runs the backward stage's stand-in."""

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
            self.l1 = nn.Linear(64, 128)
            self.l2 = nn.Linear(128, 128)
            self.l3 = nn.Linear(128, 8)

        def forward(self, x):
            stand_in("forward")
            h = torch.relu(self.l1(x))
            h = StandIn.apply(torch.relu(self.l2(h)))
            return self.l3(h)

    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            stand_in("optimizer")
            return super().step(closure)

    seen = []

    def sink(step, metrics):
        seen.append({"step": int(step), "confirmed": metrics.get("straggler/confirmed", ""),
                     "bottleneck": metrics.get("straggler/likely_bottleneck", "")})

    kwargs = {}
    preset = os.environ.get("LAGGARD_REAL_RUNS_PRESET")
    if preset:
        kwargs["preset"] = preset
    an = laggard.Analyzer(enabled=True, interval=cfg["interval"], log_dir=cfg["log_dir"],
                          sinks=[sink], side_channel_timeout_s=60.0, close_timeout_s=30.0,
                          **kwargs)
    model = nn.parallel.DistributedDataParallel(MLP())
    opt = SGD(model.parameters(), lr=0.01)
    instrumented = cfg["mode"] == "instrument"
    if instrumented:
        laggard.torch.instrument(an, model=model, optimizer=opt)

    gen = torch.Generator().manual_seed(rank)
    w_true = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))

    def batch():
        stand_in("dataloader")
        x = torch.randn(32, 64, generator=gen)
        return x, x @ w_true

    def loss_of(out, y):
        if slow == "loss_backward":  # between the model output and the loss
            out = Delay.apply(out, extra_ms)
        return nn.functional.mse_loss(out, y)

    for _ in range(WARMUP_STEPS):
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        loss_of(model(x), y).backward()
        opt.step()

    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        an.begin_step(step)
        with an.section("dataloader"):
            x, y = batch()
        opt.zero_grad(set_to_none=True)
        if instrumented:
            loss = loss_of(model(x), y)
            loss.backward()
            opt.step()
        else:
            with an.section("forward"):
                loss = loss_of(model(x), y)
            with an.section("backward"):
                loss.backward()
            with an.section("optimizer"):
                opt.step()
        if slow == "untimed":  # e.g. logging or a checkpoint, outside any section
            time.sleep(extra_ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)
        an.end_step()
    train_s = time.perf_counter() - t0
    an.close()
    result = {"rank": rank, "seen": seen, "latest_metrics": an.latest_metrics(),
              "counters": an.counters(), "train_s": train_s, "options": an.options}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
