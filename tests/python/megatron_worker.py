"""One rank of test_megatron: Megatron-core's own pipeline schedule (1F1B,
get_forward_backward_func()) and finalize_model_grads on a tiny model, over gloo on the CPU,
with config.timers = laggard.megatron.Timers, set up as docs/howto/megatron.md shows (--inner: with
Megatron's own Timers inside). One rank can be made slow in forward, backward or the optimizer
step (--slow-rank, --slow-stage). Writes OUT/result-<rank>.json.

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
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--base-ms", type=float, default=5.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-stage", choices=("forward", "backward", "optimizer"),
                   default="forward")
    p.add_argument("--slow-ms", type=float, default=16.0)
    p.add_argument("--inner", action="store_true",
                   help="Megatron's own Timers inside laggard's (docs/howto/megatron.md)")
    p.add_argument("--unpatched-check", action="store_true",
                   help="first run the schedule once as it is, to see it stop at its first "
                        "CUDA allocation (without --inner)")
    return p.parse_args(argv)


class _SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: the stage's backward compute, slower on one rank."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.ms / 1000.0)
        return grad, None


class _SleepingSGD(torch.optim.SGD):
    """SGD whose step also sleeps `ms`: a larger model's update (slower on one rank)."""

    def __init__(self, params, lr, ms):
        super().__init__(params, lr=lr)
        self.ms = ms

    def step(self, closure=None):
        time.sleep(self.ms / 1000.0)
        return super().step(closure)


class Stage(torch.nn.Module):
    """One pipeline stage: a linear layer; the last stage's output is the loss's input."""

    def __init__(self, config, forward_ms, backward_ms):
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
        self.backward_ms = backward_ms
        self.input_tensor = None

    def set_input_tensor(self, tensors):  # the schedule hands over the previous stage's output
        self.input_tensor = tensors[0] if isinstance(tensors, list) else tensors

    def forward(self, x):
        time.sleep(self.forward_ms / 1000.0)  # stands in for the stage's compute
        if self.input_tensor is not None:
            x = self.input_tensor
        out = torch.tanh(self.layer(x))
        return _SlowBackward.apply(out, self.backward_ms)  # stands in for its backward

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
    # As docs/howto/megatron.md: the pipeline stage is the cohort, Megatron's own Timers (if any) inside
    inner = None
    if args.inner:
        from megatron.core.timers import Timers as MegatronTimers

        inner = MegatronTimers(log_level=2, log_option="minmax")
    cohort = laggard.megatron.pipeline_cohort()
    # laggard's default settings (a step in 10 sampled); the rank logs kept for the test
    an = laggard.Analyzer(cohort=cohort, log_dir=os.path.join(args.out, "logs"))
    timers = laggard.megatron.Timers(an, inner=inner)

    config = TransformerConfig(num_layers=args.pp, hidden_size=HIDDEN, num_attention_heads=1,
                               pipeline_model_parallel_size=args.pp,
                               pipeline_dtype=torch.float32)
    config.timers = timers
    config.finalize_model_grads_func = finalize_model_grads
    slow = args.slow_ms if rank == args.slow_rank else 0.0
    forward_ms = args.base_ms + (slow if args.slow_stage == "forward" else 0.0)
    backward_ms = args.base_ms + (slow if args.slow_stage == "backward" else 0.0)
    optimizer_ms = args.base_ms / 2 + (slow if args.slow_stage == "optimizer" else 0.0)
    model = Stage(config, forward_ms, backward_ms)
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
    if args.unpatched_check and inner is None:
        try:
            forward_backward(**schedule_kwargs)
        except Exception as e:
            unpatched_error = "%s: %s" % (type(e).__name__, e)
        timers("forward-backward").stop()  # the schedule left it running when it raised
    redirect_undo = megatron_cpu.redirect()
    # Megatron's own optimizer wrapper, as Megatron-LM's get_megatron_optimizer builds it for
    # fp32 without the distributed optimizer: its optimizer-* timers (barrier=True) run inside
    # the training loop's `optimizer` timer.
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer.optimizer import FP32Optimizer

    opt_config = OptimizerConfig(optimizer="sgd", lr=0.05, clip_grad=0.0,
                                 barrier_with_L1_time=config.barrier_with_L1_time)
    opt = FP32Optimizer(_SleepingSGD(model.parameters(), lr=0.05, ms=optimizer_ms), opt_config,
                        lambda _: None)
    opt.config.timers = timers  # as docs/howto/megatron.md

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
        megatron_times = {}
        if inner is not None:  # Megatron's own timers, as its log() reads them (ms per step)
            for name in ("forward-compute", "backward-compute", "all-grads-sync", "optimizer"):
                megatron_times[name] = inner(name).elapsed(reset=False) * 1000.0 / args.steps
            megatron_log = timers.get_all_timers_string(list(megatron_times),
                                                        normalizer=args.steps / 1000.0,
                                                        reset=False)
        else:
            megatron_log = None
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
        "megatron_times": megatron_times,
        "megatron_log": megatron_log,
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
