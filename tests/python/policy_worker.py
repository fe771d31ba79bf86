"""One rank of test_policy.py's runs: a small model trained on the CPU over gloo with laggard's
default detector, one rank's forward slower by cfg["slow_ms"] (about 2x its forward), and the
policy under test.

cfg["trainer"]:
- "torch": a plain DDP loop that reads Analyzer.should_stop before each step and writes a
  checkpoint (torch.save, rank 0) at the step it stops at;
- "lightning": a Lightning fit with laggard.lightning.LaggardCallback and Lightning's own
  ModelCheckpoint (a checkpoint at the fit's end);
- "transformers": an HF Trainer run with laggard.transformers.LaggardCallback (the Trainer writes
  its checkpoint when it stops).
cfg["policy"]: "warn", "stop", or "callable" (a user callable recording the events); every run
also registers an on_straggler callback that records its verdicts and, with cfg["raising"], one
that raises.

run(rank, world, port, cfg) writes OUT/result-<rank>.json: the steps run, should_stop, stop_step,
stop_reason, the events' fields, the counters; stderr goes to OUT/stderr-<rank>.txt.
"""

import datetime
import json
import math
import os
import random
import sys
import time

STAND_IN_MS = {"dataloader": 4.0, "forward": 20.0, "backward": 15.0, "optimizer": 4.0}


def plain(x):  # JSON: NaN as None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def run(rank, world, port, cfg):
    err = os.open(os.path.join(cfg["out"], "stderr-%d.txt" % rank),
                  os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stderr.flush()
    os.dup2(err, 2)

    import torch
    import torch.nn as nn

    import laggard

    torch.set_num_threads(1)
    rng = random.Random(3000 + rank)
    slow = rank == cfg["slow_rank"]

    def stand_in(stage):
        ms = STAND_IN_MS[stage] + (cfg["slow_ms"] if slow and stage == "forward" else 0.0)
        time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(16, 32)
            self.l2 = nn.Linear(32, 4)

        def forward(self, x):
            stand_in("forward")
            return self.l2(torch.relu(self.l1(x)))

    events = []  # every event a callback saw: (callback, fields)
    calls = {"raising": 0}

    def recorder(name):
        def fn(v):
            events.append((name, plain(v.as_dict())))
        return fn

    def raising(v):
        calls["raising"] += 1
        raise RuntimeError("a user callback that fails")

    if cfg["policy"] == "callable":
        policy = recorder("policy")
    else:
        policy = cfg["policy"]
    options = dict(interval=cfg["interval"], policy=policy,
                   stop_after_windows=cfg["stop_after_windows"])
    if cfg.get("log_dir"):
        options["log_dir"] = cfg["log_dir"]
    if cfg.get("fleet_store"):
        options["fleet_store"] = cfg["fleet_store"]

    def register(an):
        an.on_straggler(recorder("on_straggler"))
        an.on_clear(recorder("on_clear"))
        if cfg.get("raising"):
            an.on_straggler(raising)

    trainer = cfg["trainer"]
    result = {"rank": rank}
    if trainer == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=120))
        torch.manual_seed(0)
        an = laggard.Analyzer(**options)
        register(an)
        model = nn.parallel.DistributedDataParallel(MLP())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(rank)
        steps_run = 0
        stopped_by = None
        for step in range(cfg["steps"]):
            if an.should_stop:
                stopped_by = "should_stop"
                break
            an.begin_step(step)
            with an.section("dataloader"):
                stand_in("dataloader")
                x = torch.randn(8, 16, generator=gen)
            opt.zero_grad(set_to_none=True)
            with an.section("forward"):
                loss = model(x).pow(2).mean()
            with an.section("backward"):
                stand_in("backward")
                loss.backward()
            with an.section("optimizer"):
                stand_in("optimizer")
                opt.step()
            an.end_step()
            steps_run = step + 1
        if rank == 0:  # the checkpoint at the step it stopped at
            path = os.path.join(cfg["out"], "ckpt.pt")
            torch.save({"step": steps_run, "model": model.module.state_dict(),
                        "opt": opt.state_dict()}, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()  # every rank reaches here: none hangs in a collective the others left
        result.update(steps_run=steps_run, stopped_by=stopped_by)
        an_final = an
        an.close()
        dist.barrier()
        dist.destroy_process_group()
    elif trainer == "lightning":
        import lightning.pytorch as pl
        from torch.utils.data import DataLoader, TensorDataset

        import laggard.lightning

        class Module(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = MLP()

            def training_step(self, batch, batch_idx):
                (x,) = batch
                loss = self.net(x).pow(2).mean()
                self.log("train_loss", loss)
                return loss

            def on_after_backward(self):
                stand_in("backward")

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        torch.manual_seed(0)
        data = TensorDataset(torch.randn(8 * cfg["steps"] * world, 16))
        cb = laggard.lightning.LaggardCallback(**options)
        orig = cb.on_fit_start

        def on_fit_start(trainer, pl_module):
            orig(trainer, pl_module)
            register(cb.analyzer)
        cb.on_fit_start = on_fit_start
        ckpt = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(cfg["out"], "ckpt"),
                                            save_last=True, every_n_train_steps=0)
        logger = pl.loggers.CSVLogger(os.path.join(cfg["out"], "logs"), name="fit", version=0)
        t = pl.Trainer(accelerator="cpu", devices=world, num_nodes=1, strategy="ddp",
                       max_epochs=1, callbacks=[cb, ckpt], logger=logger,
                       enable_progress_bar=False, enable_model_summary=False,
                       log_every_n_steps=5, num_sanity_val_steps=0)
        t.fit(Module(), DataLoader(data, batch_size=8))
        an_final = getattr(cb, "last_analyzer", None) or cb.analyzer
        result.update(steps_run=t.global_step, lightning_should_stop=bool(t.should_stop),
                      stopped_step=cb.stopped_step, stop_reason_cb=cb.stop_reason,
                      ckpt=ckpt.last_model_path)
    elif trainer == "transformers":
        from torch.utils.data import Dataset
        from transformers import Trainer, TrainingArguments

        import laggard.transformers

        class Data(Dataset):
            def __init__(self, n):
                g = torch.Generator().manual_seed(0)
                self.x = torch.randn(n, 16, generator=g)

            def __len__(self):
                return len(self.x)

            def __getitem__(self, i):
                return {"x": self.x[i]}

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = MLP()

            def forward(self, x):
                return {"loss": self.net(x).pow(2).mean()}

        torch.manual_seed(0)
        cb = laggard.transformers.LaggardCallback(**options)
        orig = cb.on_train_begin

        def on_train_begin(args, state, control, **kw):
            r = orig(args, state, control, **kw)
            register(cb.analyzer)
            return r
        cb.on_train_begin = on_train_begin
        args = TrainingArguments(
            output_dir=os.path.join(cfg["out"], "hf"), per_device_train_batch_size=8,
            max_steps=cfg["steps"], save_strategy="steps", save_steps=10_000,
            logging_steps=5, report_to=[], use_cpu=True, dataloader_num_workers=0,
            disable_tqdm=True, learning_rate=0.01)
        tr = Trainer(model=Model(), args=args, train_dataset=Data(8 * cfg["steps"] * world),
                     callbacks=[cb])
        tr.train()
        an_final = cb.last_analyzer
        result.update(steps_run=tr.state.global_step, stopped_step=cb.stopped_step,
                      stop_reason_cb=cb.stop_reason,
                      log_history=plain(tr.state.log_history))
    else:
        raise ValueError(trainer)

    result.update(should_stop=an_final.should_stop, stop_step=an_final.stop_step,
                  stop_reason=an_final.stop_reason, events=events, raising=calls["raising"],
                  counters=plain(an_final.counters()),
                  is_analysis_rank=an_final.is_analysis_rank,
                  fleet_run=plain(getattr(an_final, "fleet_run", None)))
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    return 0
