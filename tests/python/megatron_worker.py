"""One rank of test_megatron: Megatron-core's own pipeline schedule (1F1B,
get_forward_backward_func()) and finalize_model_grads on a tiny model, over gloo on the CPU,
with config.timers = laggard.megatron.Timers. Writes OUT/result-<rank>.json.

Megatron's data-parallel DistributedDataParallel keeps its gradient buffers on CUDA streams, so
the model chunk here does its data-parallel gradient all-reduce itself (finish_grad_sync, which
Megatron's finalize_model_grads calls inside its all-grads-sync timer), over Megatron's own
data-parallel group.
"""

import argparse
import json
import os
import threading
import time
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", module="megatron")

import laggard  # noqa: E402
import laggard.megatron  # noqa: E402
import megatron_cpu  # noqa: E402

HIDDEN, SEQ, MICRO_BATCH = 8, 4, 2


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--interval", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--base-ms", type=float, default=8.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=16.0)
    return p.parse_args(argv)


class Stage(torch.nn.Module):
    """One pipeline stage: a linear layer; the last stage's output is the loss's input."""

    def __init__(self, config, forward_ms):
        super().__init__()
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.enums import ModelType

        self.layer = torch.nn.Linear(HIDDEN, HIDDEN)
        self.config = config  # Megatron's schedule reads model.config (get_model_config)
        self.model_type = ModelType.encoder_or_decoder
        # What finalize_model_grads reads of a model chunk (Megatron's models have them too)
        self.ddp_config = DistributedDataParallelConfig()
        self.pre_process = True
        self.share_embeddings_and_output_weights = False
        self.forward_ms = forward_ms
        self.input_tensor = None

    def set_input_tensor(self, tensors):  # the schedule hands over the previous stage's output
        self.input_tensor = tensors[0] if isinstance(tensors, list) else tensors

    def forward(self, x):
        time.sleep(self.forward_ms / 1000.0)  # stands in for the stage's compute
        if self.input_tensor is not None:
            x = self.input_tensor
        return torch.tanh(self.layer(x))

    def finish_grad_sync(self, force_all_reduce=False):
        from megatron.core import parallel_state

        group = parallel_state.get_data_parallel_group()
        for p in self.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
                p.grad /= dist.get_world_size(group)


def main(argv):
    args = parse(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    from megatron.core import parallel_state
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=args.pp)
    cohort = laggard.megatron.pipeline_cohort()
    an = laggard.Analyzer(enabled=True, interval=args.interval, cohort=cohort,
                          log_dir=os.path.join(args.out, "logs"), close_timeout_s=30.0)
    timers = laggard.megatron.Timers(an)

    config = TransformerConfig(num_layers=args.pp, hidden_size=HIDDEN, num_attention_heads=1,
                               pipeline_model_parallel_size=args.pp,
                               pipeline_dtype=torch.float32)
    config.timers = timers
    config.finalize_model_grads_func = finalize_model_grads
    forward_ms = args.base_ms + (args.slow_ms if rank == args.slow_rank else 0.0)
    model = Stage(config, forward_ms)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + parallel_state.get_data_parallel_rank())

    def batches():
        while True:
            yield torch.randn(SEQ, MICRO_BATCH, HIDDEN, generator=gen)

    data = batches()

    def forward_step(data_iterator, model):
        timers("batch-generator", log_level=2).start()  # as Megatron-LM's pretrain_gpt does
        x = next(data_iterator)
        timers("batch-generator").stop()
        out = model(x)

        def loss_func(output):
            loss = output.pow(2).mean()
            return loss, {"loss": loss.detach()}

        return out, loss_func

    forward_backward = get_forward_backward_func()
    schedule_kwargs = dict(forward_step_func=forward_step, data_iterator=data, model=[model],
                           num_microbatches=args.microbatches, seq_length=SEQ,
                           micro_batch_size=MICRO_BATCH)

    # Megatron's schedule as it is, without a GPU: it gets as far as its first CUDA allocation.
    unpatched_error = None
    try:
        forward_backward(**schedule_kwargs)
    except Exception as e:
        unpatched_error = "%s: %s" % (type(e).__name__, e)
    timers("forward-backward").stop()  # the schedule left it running when it raised
    redirect_undo = megatron_cpu.redirect()

    barriers = []
    real_barrier = dist.barrier

    def counting_barrier(*a, **k):
        if threading.current_thread() is threading.main_thread():
            barriers.append(1)
        return real_barrier(*a, **k)

    dist.barrier = counting_barrier
    losses = []
    try:
        for step in range(args.steps):
            an.begin_step(step)
            opt.zero_grad()
            out = forward_backward(**schedule_kwargs)
            # Megatron-LM's train_step times the optimizer the same way
            timers("optimizer", log_level=1).start(barrier=config.barrier_with_L1_time)
            opt.step()
            timers("optimizer").stop()
            an.end_step()
            losses.extend(float(o["loss"]) for o in out)
    finally:
        dist.barrier = real_barrier
        redirect_undo()
    an.close()

    result = {
        "rank": rank,
        "cohort": cohort,
        "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
        "unpatched_error": unpatched_error,
        "losses": losses,
        "barriers_on_training_thread": len(barriers),
        "barrier_requests": timers.barrier_requests,
        "stage_names": timers.stage_names,
        "counters": an.counters(),
        "latest_report": an.latest_report(),
    }
    with open(os.path.join(args.out, "result-%d.json" % rank), "w") as f:
        json.dump(result, f)
    real_barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    return 0
