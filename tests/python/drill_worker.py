"""One rank of the failure drills (tests/python/test_drills.py).

Each rank trains its own small model (no training collective: a hung or dead peer does not stop
the others' training, only laggard's side channel spans the ranks), with an Analyzer sampling
every step into OUT/logs/rank-<r>.jsonl. A fault is injected on one rank at one step: it stops
itself (SIGSTOP, a hung peer), kills itself (SIGKILL), or its sink blocks; with link_delay_s its
side channel's links start that much after the setup. Each rank that gets to
the end writes OUT/result-<rank>.json: steps trained, losses, training and close times, the
Analyzer's counters.
"""

import json
import os
import signal
import time


def main(cfg):
    import torch
    import torch.distributed as dist

    import laggard

    if cfg.get("fsize_limit"):  # a full disk where no small file system can be mounted
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    torch.set_num_threads(1)

    def blocking_sink(step, metrics):
        time.sleep(cfg.get("sink_block_s", 5.0))

    fault_here = rank == cfg.get("fault_rank", -1)
    if fault_here and cfg.get("link_delay_s"):
        # Its side channel's links start late (a rank starved of CPU after the setup): a fault
        # before then finds them not connected yet.
        from laggard import transport

        connect = transport.GlooTransport._connect

        def late_connect(self):
            time.sleep(cfg["link_delay_s"])
            connect(self)

        transport.GlooTransport._connect = late_connect
    sinks = [blocking_sink] if cfg.get("fault") == "block_sink" and fault_here else []
    an = laggard.Analyzer(interval=1, log_dir=cfg["log_dir"], sinks=sinks,
                          analysis_rank=cfg.get("analysis_rank", 0),
                          close_timeout_s=cfg.get("close_timeout_s", 3.0),
                          side_channel_timeout_s=cfg.get("side_channel_timeout_s", 300.0),
                          queue_capacity=cfg.get("queue_capacity", 256))
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    losses = []
    t0 = time.perf_counter()
    for step in range(cfg["steps"]):
        if fault_here and step == cfg.get("fault_step", -1):
            if cfg["fault"] == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)  # until the test sends SIGCONT
            elif cfg["fault"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif cfg["fault"] == "fork":
                child = os.fork()
                if child == 0:
                    forked_child(an, cfg, rank)  # never returns
        an.begin_step(step)
        with an.section("forward"):
            loss = ((model(x) - y) ** 2).mean()
            time.sleep(cfg.get("step_ms", 5.0) / 1000.0)
        with an.section("backward"):
            opt.zero_grad()
            loss.backward()
        with an.section("optimizer"):
            opt.step()
        an.end_step()
        losses.append(loss.item())
    train_s = time.perf_counter() - t0
    if fault_here and cfg.get("fault") == "fork":
        os.waitpid(child, 0)
    t1 = time.perf_counter()
    an.close()
    close_s = time.perf_counter() - t1
    result = {"rank": rank, "steps": len(losses), "losses": losses, "train_s": train_s,
              "close_s": close_s, "counters": an.counters()}
    path = os.path.join(cfg["out"], "result-%d.json" % rank)
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
    return 0


def forked_child(an, cfg, rank):
    """The forked child trains a few steps with the parent's Analyzer, then reports its counters."""
    code = 1
    try:
        for step in range(cfg["child_steps"]):
            an.begin_step(1000 + step)
            with an.section("forward"):
                pass
            an.end_step()
        c = an.counters()
        with open(os.path.join(cfg["out"], "child-%d.json" % rank), "w") as f:
            json.dump({"forked_steps_dropped": c.get("forked_steps_dropped"),
                       "report_errors": c["report_errors"]}, f)
        code = 0
    finally:
        os._exit(code)
