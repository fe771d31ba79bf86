"""One rank of test_lightning.py: a PyTorch Lightning Trainer (strategy "ddp", gloo, CPU) fits a
small model with laggard.lightning.LaggardCallback at laggard's default settings (log_dir for
the offline check, and a PrometheusSink); its processes are started by the test with the
environment a launcher gives (LOCAL_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT), which Lightning
takes as processes created for it.

As in real_run_worker.py, each stage is the model's real work plus a stand-in of milliseconds
(a sleep: on a GPU the host waits for the kernels), so that stage times are a real job's, not
the scheduler noise of a busy 2-core machine. cfg["slow"] on cfg["slow_rank"] adds
cfg["slow_ms"] to that stage ("dataloader": the loader's collate_fn; "forward": training_step;
"backward": the autograd backward; "optimizer": the optimizer's step).

run(rank, world, cfg) writes OUT/result-<rank>.json.
"""

import json
import os
import random
import time
import urllib.request

STAND_IN_MS = {"dataloader": 5.0, "forward": 20.0, "backward": 20.0, "optimizer": 10.0}


def run(rank, world, cfg):
    import torch
    import torch.nn as nn

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from laggard.lightning import LaggardCallback
    from laggard.sinks import PrometheusSink

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = random.Random(100 + rank)
    slow = cfg["slow"] if rank == cfg["slow_rank"] else "none"

    def stand_in(stage):
        ms = STAND_IN_MS[stage] + (cfg["slow_ms"] if slow == stage else 0.0)
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    class StandIn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            stand_in("backward")
            return grad

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

        def training_step(self, batch, batch_idx):
            x, y = batch
            stand_in("forward")
            out = self.net(StandIn.apply(x.requires_grad_()))
            return nn.functional.mse_loss(out, y)

        def configure_optimizers(self):
            model = self

            class SGD(torch.optim.SGD):
                def step(self, closure=None):
                    loss = super().step(closure)  # the closure: training_step and backward
                    stand_in("optimizer")
                    return loss

            return SGD(model.parameters(), lr=0.01)

    gen = torch.Generator().manual_seed(1)
    # cfg["epoch_steps"] batches make an epoch (each rank's share, under DDP's sampler): a fit
    # crosses epochs' ends and first fetches
    n = cfg.get("epoch_steps", cfg["steps"]) * 8 * world
    data = torch.utils.data.TensorDataset(torch.randn(n, 32, generator=gen),
                                          torch.randn(n, 4, generator=gen))

    def collate(items):  # the batch's loading: reading and decoding, in a real job
        stand_in("dataloader")
        return torch.utils.data.default_collate(items)

    loader = torch.utils.data.DataLoader(data, batch_size=8, collate_fn=collate)
    # The live metrics served for Prometheus by the analysis rank, scraped over HTTP at the
    # end of training, before the callback closes the analyzer (and with it the server).
    prometheus = PrometheusSink(port=0, addr="127.0.0.1")
    scraped = {}

    class Scrape(L.Callback):
        def on_train_end(self, trainer, pl_module):
            if prometheus.port:  # started: the analysis rank, once a report came
                url = "http://127.0.0.1:%d/metrics" % prometheus.port
                scraped["body"] = urllib.request.urlopen(url, timeout=30).read().decode()

    callback = LaggardCallback(log_dir=cfg["log_dir"], sinks=[prometheus])
    trainer = L.Trainer(accelerator="cpu", devices=world, num_nodes=1, strategy="ddp",
                        max_steps=cfg["steps"],
                        logger=CSVLogger(cfg["out"], name="csv", version=0),
                        callbacks=[Scrape(), callback])
    trainer.fit(Model(), loader)
    an = callback.last_analyzer
    result = {"rank": rank, "world": trainer.world_size, "global_rank": trainer.global_rank,
              "ddp": callback._ddp, "stages": callback.instrumentation.stages
              if callback.instrumentation is not None else [],
              "counters": callback.counters(), "latest_metrics": an.latest_metrics(),
              "reports_logged": callback.reports_logged, "global_step": trainer.global_step,
              "prometheus": scraped.get("body")}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    return 0
