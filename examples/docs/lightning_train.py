"""PyTorch Lightning with laggard: one callback. Lightning's own DDP launcher starts the ranks
(gloo, on the CPU); rank 1's training_step is made slower, and laggard names it.

    PYTHONPATH=python OMP_NUM_THREADS=1 python examples/docs/lightning_train.py \
        --devices 3 --steps 60 --slow-rank 1 --log-dir /tmp/laggard-lightning

The straggler/* metrics of each report go to the Trainer's loggers (here a CSVLogger:
/tmp/laggard-lightning/csv/version_0/metrics.csv); with --log-dir, `laggard analyze DIR` reads
the run again afterwards. --slow-rank -1 is a healthy run.
"""

import argparse
import time

import torch
import torch.nn as nn

try:
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger
except ImportError:  # the older package name
    import pytorch_lightning as L
    from pytorch_lightning.loggers import CSVLogger

from laggard.lightning import LaggardCallback


class Model(L.LightningModule):
    def __init__(self, slow_rank, slow_ms, stand_in_ms=20.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        self.slow_rank, self.slow_ms, self.stand_in_ms = slow_rank, slow_ms, stand_in_ms

    def training_step(self, batch, batch_idx):
        x, y = batch
        # A stand-in for a GPU's milliseconds of forward work (the host waits on the device);
        # the slow rank waits longer.
        ms = self.stand_in_ms + (self.slow_ms if self.global_rank == self.slow_rank else 0.0)
        time.sleep(ms / 1000.0)
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--slow-ms", type=float, default=25.0)
    p.add_argument("--interval", type=int, default=2)
    p.add_argument("--log-dir", default="/tmp/laggard-lightning")
    args = p.parse_args()
    torch.set_num_threads(1)

    n = args.steps * 8 * args.devices
    data = torch.utils.data.TensorDataset(torch.randn(n, 32), torch.randn(n, 4))
    callback = LaggardCallback(interval=args.interval, log_dir=args.log_dir + "/laggard")
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp",
                        max_steps=args.steps, logger=CSVLogger(args.log_dir, name="csv"),
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, callbacks=[callback])
    trainer.fit(Model(args.slow_rank, args.slow_ms),
                torch.utils.data.DataLoader(data, batch_size=8))
    if trainer.global_rank == 0:
        m = callback.last_analyzer.latest_metrics()
        print("laggard: confirmed stragglers (rank:stage): %s" %
              (m.get("straggler/confirmed") or "none"))
        print("laggard: likely bottleneck: %s" % (m.get("straggler/likely_bottleneck") or "-"))
        print("laggard: per-rank logs and reports in %s/laggard (laggard analyze reads them)" %
              args.log_dir)


if __name__ == "__main__":
    main()
