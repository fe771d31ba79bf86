"""One rank of test_transformers.py: a Hugging Face Trainer trains a tiny GPT-2 built from a
config (2 layers, no download, no tokenizer: token ids are made here) on the CPU with
laggard.transformers.LaggardCallback, as docs/howto/huggingface.md shows it: laggard's default
settings (only log_dir, for the offline check) and default TrainingArguments but for what a
tiny run needs (output_dir, max_steps, the per-device batch, use_cpu on this CPU-only machine;
logging_steps when cfg gives it).
Started alone, or as one of several ranks with the environment torchrun gives (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): the Trainer then trains under DDP over gloo.

As in real_run_worker.py, each stage carries a stand-in of milliseconds (a sleep: the batch's
loading in the collator, the model's forward and backward, the optimizer's step), so that stage
times are a real job's rather than the scheduler noise of a busy 2-core machine;
cfg["slow_rank"] gets cfg["slow_ms"] more in its cfg["slow"] stage ("dataloader", "forward",
"backward" or "optimizer").

run(rank, world, cfg) writes OUT/result-<rank>.json.
"""

import json
import os
import random
import time

STAND_IN_MS = {"dataloader": 5.0, "forward": 20.0, "backward": 20.0, "optimizer": 10.0}
BATCH = 4


def run(rank, world, cfg):
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                              TrainingArguments, default_data_collator)

    from laggard.transformers import LaggardCallback

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
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            stand_in("backward")
            return grad

    class TinyGPT2(GPT2LMHeadModel):
        def forward(self, input_ids=None, labels=None, **kwargs):
            stand_in("forward")
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

    def collate(items):  # the batch's loading: reading and decoding, in a real job
        stand_in("dataloader")
        return default_data_collator(items)

    logging = {} if cfg.get("logging_steps") is None else {"logging_steps": cfg["logging_steps"]}
    args = TrainingArguments(output_dir=os.path.join(cfg["out"], "trainer"),
                             max_steps=cfg["steps"], per_device_train_batch_size=BATCH,
                             use_cpu=True, **logging)  # CPU ranks: DDP over gloo

    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            loss = super().step(closure)
            stand_in("optimizer")
            return loss

    optimizer = SGD(model.parameters(), lr=1e-3)
    callback = LaggardCallback(log_dir=cfg["log_dir"])

    class SeenLogs(TrainerCallback):
        """Stands for a tracker's callback that comes after laggard's: what its on_log gets."""

        logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    seen = SeenLogs()
    # cfg["epoch_steps"] updates make an epoch: the run crosses epochs' ends and first fetches
    dataset = Tokens(cfg.get("epoch_steps", cfg["steps"]) * BATCH * world)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate,
                      optimizers=(optimizer, None), callbacks=[callback, seen])
    # One untimed forward and backward of the model first: the first call's one-time costs vary
    # by tens of milliseconds between ranks on a busy machine (30 to 150 ms for a 25 ms forward),
    # which is start-up, not the stage times the test is about.
    warm = Tokens(1)[0]["input_ids"][None]
    model(input_ids=warm, labels=warm)["loss"].backward()
    model.zero_grad(set_to_none=True)
    t0 = time.monotonic()
    trainer.train()
    train_s = time.monotonic() - t0
    an = callback.last_analyzer
    result = {"rank": rank, "world": args.world_size, "process_index": args.process_index,
              "stages": callback.instrumentation.stages
              if callback.instrumentation is not None else [],
              "fetch_timed": callback.fetch_timed,
              "patched_after": "get_batch_samples" in vars(trainer) or
              "gather" in vars(trainer.accelerator),
              "counters": an.counters(), "latest_metrics": an.latest_metrics(),
              "reports_logged": callback.reports_logged,
              "log_history": trainer.state.log_history, "seen_logs": seen.logs,
              "global_step": trainer.state.global_step, "train_s": train_s,
              "defaults": {"average_tokens_across_devices": args.average_tokens_across_devices,
                           "logging_steps": args.logging_steps}}
    with open(os.path.join(cfg["out"], "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    return 0
