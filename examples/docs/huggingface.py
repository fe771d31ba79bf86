"""Hugging Face Trainer with laggard: one callback. A tiny GPT-2 built from a config (nothing
is downloaded) trains on the CPU; under torchrun every rank runs it with DDP over gloo, and the
rank given by --slow-rank gets a slower forward.

    PYTHONPATH=python OMP_NUM_THREADS=1 python examples/docs/huggingface.py --steps 40
    PYTHONPATH=python OMP_NUM_THREADS=1 torchrun --nproc-per-node 3 \
        examples/docs/huggingface.py --steps 60 --slow-rank 2 --log-dir /tmp/laggard-hf

The straggler/* metrics join the Trainer's log (printed at each logging step, and in every
report_to tracker when the callback comes before them: see docs/howto/huggingface.md); with --log-dir,
`laggard analyze DIR/laggard` reads the run again afterwards.
"""

import argparse
import os
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from laggard.transformers import LaggardCallback


class Tokens(torch.utils.data.Dataset):
    """Random token ids: the model is trained for its timings, not its text."""

    def __init__(self, n, vocab, length=16):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class StandInGPT2(GPT2LMHeadModel):
    """GPT-2 whose forward also sleeps: a stand-in for a GPU's milliseconds of work."""

    stand_in_ms = 20.0

    def forward(self, input_ids=None, labels=None, **kwargs):  # the Trainer keeps the batch
        time.sleep(self.stand_in_ms / 1000.0)                   # columns forward() names
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=25.0)
    p.add_argument("--interval", type=int, default=2)
    p.add_argument("--log-dir", default="/tmp/laggard-hf")
    args = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = StandInGPT2(config)
    if rank == args.slow_rank:
        model.stand_in_ms += args.slow_ms
    training = TrainingArguments(output_dir=os.path.join(args.log_dir, "trainer"),
                                 max_steps=args.steps, per_device_train_batch_size=4,
                                 logging_steps=10, report_to="none", save_strategy="no",
                                 use_cpu=True, disable_tqdm=True,
                                 ddp_backend="gloo" if world > 1 else None,
                                 ddp_find_unused_parameters=False)
    callback = LaggardCallback(interval=args.interval,
                               log_dir=os.path.join(args.log_dir, "laggard"))
    trainer = Trainer(model=model, args=training,
                      train_dataset=Tokens(args.steps * 4 * world, config.vocab_size),
                      callbacks=[callback])
    trainer.train()
    if rank == 0:
        m = callback.last_analyzer.latest_metrics()
        print("laggard: confirmed stragglers (rank:stage): %s" %
              (m.get("straggler/confirmed") or "none"))


if __name__ == "__main__":
    main()
