"""One rank of the multi-process tests: a small DDP model on CPU/gloo, laggard.torch.instrument,
optional injected delays. Started by laggard.launch (RANK, WORLD_SIZE, ... in the environment).
Each rank writes OUT/result-<rank>.json: losses (float.hex, for bit-for-bit comparisons),
reports seen by the sink, latest metrics, counters, and call counts.
"""

import argparse
import json
import os
import random
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import laggard
import laggard.torch
from backward_delay import Delay


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--delay-rank", type=int, default=-1)
    p.add_argument("--delay-stage", choices=["none", "forward", "backward"], default="none")
    p.add_argument("--delay-ms", type=float, default=30.0)
    p.add_argument("--base-ms", type=float, default=4.0,
                   help="sleep in every rank's forward and backward (stands in for compute)")
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--raising-sink", action="store_true")
    p.add_argument("--count-calls", action="store_true")
    p.add_argument("--no-instrument", action="store_true")
    p.add_argument("--analysis-rank", type=int, default=0)
    laggard.add_arguments(p)
    return p.parse_args(argv)


class Net(nn.Module):
    def __init__(self, fwd_ms, bwd_ms, jitter_ms, rng):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)
        self.fwd_ms, self.bwd_ms, self.jitter_ms, self.rng = fwd_ms, bwd_ms, jitter_ms, rng

    def _ms(self, base):
        return base + (self.rng.uniform(0, self.jitter_ms) if self.jitter_ms else 0.0)

    def forward(self, x):
        time.sleep(self._ms(self.fwd_ms) / 1000.0)
        h = torch.relu(self.l1(x))
        h = Delay.apply(h, self._ms(self.bwd_ms))  # between the layers: before l1's grads
        return self.l2(h)


class CallCounter:
    """Counts device synchronizations and blocking collectives, per thread kind."""

    SYNC = [("torch.cuda", "synchronize"), ("torch.cuda.Event", "synchronize"),
            ("torch.cuda.Event", "elapsed_time"), ("torch.cuda.Stream", "synchronize")]
    COLLECTIVES = ["all_reduce", "all_gather", "gather", "broadcast", "barrier", "reduce",
                   "scatter", "all_to_all", "reduce_scatter", "send", "recv",
                   "monitored_barrier", "all_gather_object", "gather_object",
                   "broadcast_object_list", "scatter_object_list"]
    OBJECT = {"all_gather_object", "gather_object", "broadcast_object_list",
              "scatter_object_list", "barrier", "monitored_barrier", "send", "recv"}

    def __init__(self):
        self.active = False
        self.training_thread = threading.current_thread()
        self.training = {}
        self.other = {}
        self.lock = threading.Lock()

    def _wrap(self, name, fn, blocking):
        def wrapped(*args, **kwargs):
            if self.active:
                is_blocking = blocking(args, kwargs)
                book = self.training if threading.current_thread() is self.training_thread \
                    else self.other
                if is_blocking:
                    with self.lock:
                        book[name] = book.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapped

    def install(self):
        import torch.distributed.distributed_c10d as c10d

        for mod_name, attr in self.SYNC:
            owner = eval(mod_name)  # noqa: S307 — fixed names above
            if hasattr(owner, attr):
                setattr(owner, attr, self._wrap(mod_name + "." + attr, getattr(owner, attr),
                                                lambda a, k: True))
        for name in self.COLLECTIVES:
            always = name in self.OBJECT
            for owner in (dist, c10d):
                if hasattr(owner, name):
                    setattr(owner, name, self._wrap(
                        "dist." + name, getattr(owner, name),
                        lambda a, k, always=always: always or not k.get("async_op", False)))
        # laggard's side channel calls the send/recv of its own gloo process group directly
        # (the group is no new_group, so torch.distributed.send/recv do not take it): counted
        # under the same names.
        for name in ("send", "recv"):
            setattr(dist.ProcessGroupGloo, name, self._wrap(
                "dist." + name, getattr(dist.ProcessGroupGloo, name), lambda a, k: True))


class SlowSGD(torch.optim.SGD):
    """SGD whose step also sleeps (stands in for a real optimizer's milliseconds)."""

    sleep_ms = 0.0

    def step(self, closure=None):
        time.sleep(self.sleep_ms / 1000.0)
        return super().step(closure)


def main(argv=None):
    args = parse(argv)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = random.Random(args.seed * 100 + rank)

    counter = CallCounter() if args.count_calls else None
    if counter:
        counter.install()

    seen = []

    def record_sink(step, metrics):
        seen.append({"step": step, "metrics": metrics})

    def raising_sink(step, metrics):
        raise RuntimeError("sink failure injected at step %d" % step)

    sinks = [record_sink] + ([raising_sink] if args.raising_sink else [])
    new_group_calls = []
    real_new_group = dist.new_group

    def counting_new_group(*a, **k):
        new_group_calls.append(k.get("backend"))
        return real_new_group(*a, **k)

    # laggard makes its gloo group as a ProcessGroupGloo of its own (no new_group): counted.
    gloo_groups_made = []
    real_gloo_group = dist.ProcessGroupGloo

    def counting_gloo_group(*a, **k):
        gloo_groups_made.append("gloo")
        return real_gloo_group(*a, **k)

    dist.new_group = counting_new_group
    dist.ProcessGroupGloo = counting_gloo_group
    threads_before_analyzer = set(threading.enumerate())
    an = laggard.Analyzer.from_args(args, sinks=sinks, close_timeout_s=30.0,
                                    analysis_rank=args.analysis_rank)
    dist.new_group = real_new_group
    dist.ProcessGroupGloo = real_gloo_group

    delay = args.delay_ms if rank == args.delay_rank else 0.0
    fwd_ms = args.base_ms + (delay if args.delay_stage == "forward" else 0.0)
    bwd_ms = args.base_ms + (delay if args.delay_stage == "backward" else 0.0)
    net = Net(fwd_ms, bwd_ms, args.jitter_ms, rng)
    model = nn.parallel.DistributedDataParallel(net)
    opt = SlowSGD(model.parameters(), lr=0.05)
    opt.sleep_ms = args.base_ms
    if not args.no_instrument:
        laggard.torch.instrument(an, model=model, optimizer=opt)

    gen = torch.Generator().manual_seed(args.seed + rank)
    data = [(torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen))
            for _ in range(args.steps)]
    threads_before = threading.active_count()
    losses = []
    if counter:
        counter.active = True
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(data):
        an.begin_step(step)
        opt.zero_grad()
        out = model(x)
        loss = ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        an.end_step()
        losses.append(loss.item().hex())
    train_s = time.perf_counter() - t0
    # The Analyzer's threads once the side channel is set up (its setup thread has ended, having
    # started the links' threads): on a busy machine a short run can end before, so wait for it.
    gloo = an._gloo
    if gloo is not None:
        gloo._setup_thread.join(60.0)
    threads_started = len([t for t in threading.enumerate()
                           if t not in threads_before_analyzer and t.is_alive()])
    an.close()  # counted too: close() makes no collective on the training thread either
    if counter:
        counter.active = False

    result = {
        "rank": rank,
        "losses": losses,
        "params": [p.detach().flatten().tolist() for p in model.parameters()],
        "seen": seen,
        "latest_metrics": an.latest_metrics(),
        "latest_report": an.latest_report(),
        "counters": an.counters(),
        "threads_before": threads_before,
        "threads_started_by_analyzer": threads_started,
        "new_group_calls": new_group_calls,
        "gloo_groups_made": gloo_groups_made,
        "train_s": train_s,
        "calls_training_thread": counter.training if counter else None,
        "calls_other_threads": counter.other if counter else None,
    }
    with open(os.path.join(args.out, "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
