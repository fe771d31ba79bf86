"""One rank of test_transformers.py: a Hugging Face Trainer trains a tiny GPT-2 built from a
config (2 layers, no download, no tokenizer: token ids are made here) on the CPU with
laggard.transformers.LaggardCallback. Started alone, or as one of several ranks with the
environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): the Trainer
then trains under DDP over gloo.

As in real_run_worker.py, the model's forward and backward and the optimizer's step each carry a
stand-in of milliseconds (a sleep), so that stage times are a real job's rather than the
scheduler noise of a busy 2-core machine; cfg["slow_rank"] gets cfg["slow_ms"] more in its
cfg["slow"] stage ("forward" or "backward").

run(rank, world, cfg) writes OUT/result-<rank>.json.
"""

import json
import os
import random
import time

STAND_IN_MS = {"forward": 20.0, "backward": 20.0, "optimizer": 10.0}


def run(rank, world, cfg):
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                              TrainingArguments)

    from laggard.transformers import LaggardCallback

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = random.Random(100 + rank)
    slow = cfg.get("slow", "forward") if rank == cfg["slow_rank"] else "none"
    extra = cfg["slow_ms"]

    def stand_in(stage, more=0.0):
        time.sleep((STAND_IN_MS[stage] + more) * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)

    class StandIn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            stand_in("backward", extra if slow == "backward" else 0.0)
            return grad

    class TinyGPT2(GPT2LMHeadModel):
        def forward(self, input_ids=None, labels=None, **kwargs):
            stand_in("forward", extra if slow == "forward" else 0.0)
            out = super().forward(input_ids=input_ids, labels=labels, **kwargs)
            out["loss"] = StandIn.apply(out["loss"])
            return out

    # small enough that its real compute is little beside the stand-ins: 3 ranks share 2 cores
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = TinyGPT2(config)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n):
            gen = torch.Generator().manual_seed(1)
            self.ids = torch.randint(0, config.vocab_size, (n, 8), generator=gen)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    args = TrainingArguments(output_dir=os.path.join(cfg["out"], "trainer"),
                             max_steps=cfg["steps"], per_device_train_batch_size=4,
                             logging_steps=cfg["logging_steps"], report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, learning_rate=1e-3,
                             max_grad_norm=0.0,  # no clipping: less untimed CPU work per step
                             ddp_backend="gloo" if world > 1 else None,
                             ddp_find_unused_parameters=False)
    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            loss = super().step(closure)
            stand_in("optimizer")
            return loss

    optimizer = SGD(model.parameters(), lr=1e-3)
    callback = LaggardCallback(interval=cfg["interval"], log_dir=cfg["log_dir"],
                               close_timeout_s=30.0)
    class SeenLogs(TrainerCallback):
        """Stands for a tracker's callback that comes after laggard's: what its on_log gets."""

        logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    seen = SeenLogs()
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(cfg["steps"] * 4 * world),
                      optimizers=(optimizer, None), callbacks=[callback, seen])
    # One untimed forward and backward of the model first: the first call's one-time costs vary
    # by tens of milliseconds between ranks on a busy machine (30 to 150 ms for a 25 ms forward),
    # which is start-up, not the stage times the test is about.
    warm = Tokens(1)[0]["input_ids"][None]
    model(input_ids=warm, labels=warm)["loss"].backward()
    model.zero_grad(set_to_none=True)
    trainer.train()
    an = callback.last_analyzer
    result = {"rank": rank, "world": args.world_size, "process_index": args.process_index,
              "stages": callback.instrumentation.stages
              if callback.instrumentation is not None else [],
              "counters": an.counters(), "latest_metrics": an.latest_metrics(),
              "reports_logged": callback.reports_logged,
              "log_history": trainer.state.log_history, "seen_logs": seen.logs,
              "global_step": trainer.state.global_step}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    return 0
