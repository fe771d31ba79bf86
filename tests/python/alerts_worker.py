"""One rank of test_alerts.py's live run: a small DDP model trained on the CPU over gloo with
laggard's default detector, rank cfg["slow_rank"]'s forward cfg["slow_ms"] slower, and on the
analysis rank (0) a PrometheusSink serving on 127.0.0.1 (a free port). Every stage is the
model's work plus a stand-in sleep (as in real_run_worker.py) so that times are milliseconds.

Once the analysis rank's latest report confirms a straggler (or the steps run out), rank 0
scrapes its own endpoint over HTTP, as Prometheus would, and writes the body to OUT/scrape.txt;
then every rank meets at a barrier and closes. Each rank writes OUT/result-<rank>.json.
"""

import datetime
import json
import os
import random
import time
import urllib.request


def run(rank, world, port, cfg):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch
    from laggard.sinks import PrometheusSink

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    rng = random.Random(1000 + rank)
    host = "node-%02d" % (rank + 1)

    def stand_in(ms):
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    forward_ms = 10.0 + (cfg["slow_ms"] if rank == cfg["slow_rank"] else 0.0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(32, 64)
            self.l2 = nn.Linear(64, 4)

        def forward(self, x):
            stand_in(forward_ms)
            return self.l2(torch.relu(self.l1(x)))

    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            stand_in(5.0)
            return super().step(closure)

    sink = PrometheusSink(port=0, addr="127.0.0.1", host=host) if rank == 0 else None
    an = laggard.Analyzer(enabled=True, interval=cfg["interval"], host=host,
                          sinks=[sink] if sink else [], side_channel_timeout_s=60.0,
                          close_timeout_s=30.0)
    model = nn.parallel.DistributedDataParallel(MLP())
    opt = SGD(model.parameters(), lr=0.01)
    laggard.torch.instrument(an, model=model, optimizer=opt)
    gen = torch.Generator().manual_seed(rank)
    for step in range(cfg["steps"]):
        an.begin_step(step)
        x = torch.randn(16, 32, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), x[:, :4])
        loss.backward()
        opt.step()
        an.end_step()

    body = ""
    if rank == 0:
        deadline = time.monotonic() + 30.0
        while (not an.latest_metrics().get("straggler/confirmed")
               and time.monotonic() < deadline):
            time.sleep(0.1)
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % sink.port,
                                      timeout=10).read().decode()
        with open(os.path.join(cfg["out"], "scrape.txt"), "w") as f:
            f.write(body)
    dist.barrier()
    an.close()
    result = {"rank": rank, "host": host, "latest_metrics": an.latest_metrics(),
              "counters": an.counters()}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0
