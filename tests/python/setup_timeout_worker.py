"""One rank of the side channel setup tests (test_setup_timeout.py): some ranks create their
Analyzer late or never, and nobody may wait for them.

cfg:
  "create"           {rank (str): seconds after init_process_group it creates its Analyzer};
                     a rank not named never creates one.
  "setup_timeout_s"  the Analyzer's setting; "close_timeout_s" too (default 30 s, the default).
  "steps", "step_ms" the training loop (no collectives in it: what a rank waits for is laggard's
                     own doing); "slow" {rank: factor}: that rank's forward takes longer.
  "wait_for_peers_s" the analysis rank waits (polling counters, at most this long) before close
                     until samples of every other rank have arrived (the live analysis works).

Each rank measures its Analyzer's construction, its training loop and its close separately, then
checks the user's own groups: dist.new_group over every rank and over ranks {0, 1}, each with an
all_reduce of rank+1 (a group counter advanced on some ranks only would pair the wrong groups,
hang or give a wrong sum). run(rank, world, port, cfg) writes OUT/result-<rank>.json.
"""

import datetime
import json
import logging
import os
import time


class _Warnings(logging.Handler):
    """The "laggard" logger's warnings of this rank (what a user would see on the console)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def run(rank, world, port, cfg):
    import torch
    import torch.distributed as dist

    import laggard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    warnings = _Warnings()
    logging.getLogger("laggard").addHandler(warnings)
    started = time.monotonic()
    out = {"rank": rank}
    delay = cfg["create"].get(str(rank))
    an = None
    if delay is not None:
        time.sleep(float(delay))
        t0 = time.monotonic()
        an = laggard.Analyzer(interval=1, setup_timeout_s=cfg["setup_timeout_s"],
                              close_timeout_s=cfg.get("close_timeout_s", 30.0),
                              log_dir=cfg.get("log_dir"), resources=False)
        out["create_s"] = time.monotonic() - t0
        out["created_at_s"] = t0 - started
    slow = float(cfg.get("slow", {}).get(str(rank), 1.0))
    t0 = time.monotonic()
    for step in range(cfg["steps"]):
        if an is not None:
            an.begin_step(step)
            with an.section("forward"):
                time.sleep(cfg["step_ms"] * slow / 1000.0)
            with an.section("backward"):
                time.sleep(cfg["step_ms"] / 1000.0)
            an.end_step()
        else:
            time.sleep(cfg["step_ms"] * (1.0 + slow) / 1000.0)
    out["train_s"] = time.monotonic() - t0
    if an is not None:
        wait_s = float(cfg.get("wait_for_peers_s", 0.0))
        if an.is_analysis_rank and wait_s > 0:
            # The live analysis: every other rank's samples reach the analysis rank.
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and (
                    an.counters().get("samples_received", 0) < (world - 1) * cfg["steps"]):
                time.sleep(0.05)
            out["report"] = an.latest_report()
        t0 = time.monotonic()
        an.close()
        out["close_s"] = time.monotonic() - t0
        out["counters"] = an.counters()
        gloo = an._gloo
        out["setup_state"] = gloo.setup_state if gloo is not None else None
        out["missing_ranks"] = gloo.missing_ranks if gloo is not None else None
        out["setup_s"] = gloo.setup_s if gloo is not None else None
    out["laggard_s"] = time.monotonic() - started - (float(delay) if delay is not None else 0.0)
    out["warnings"] = warnings.messages

    # The user's own groups, made after laggard's (on some ranks only).
    everyone = dist.new_group(list(range(world)))
    pair = dist.new_group([0, 1])
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x, group=everyone)
    out["sum_everyone"] = float(x[0])
    if rank in (0, 1):
        y = torch.tensor([float(rank + 1)])
        dist.all_reduce(y, group=pair)
        out["sum_pair"] = float(y[0])
    dist.barrier()  # the TCPStore (rank 0's) stays up until every rank is done with it
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(out, f)
    return 0
