"""Megatron-core's pipeline schedule with laggard as its config.timers.

4 ranks: 2 pipeline stages x 2 data-parallel ranks, Megatron's own 1F1B schedule
(get_forward_backward_func()), finalize_model_grads and FP32Optimizer on a tiny two-stage model;
one rank is made slow in forward (or --slow-stage backward / optimizer):

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 4 \
        examples/docs/megatron_pipeline.py --slow-rank 1

(torchrun of the venv with megatron-core, with PYTHONPATH=python in a source tree.) laggard's
default settings; rank 0 prints the confirmed stragglers at the end: rank 1 in forward,
compared with rank 0 only (its pipeline stage, the cohort "pp0"); rank 0 waits for it in
all-grads-sync, and stage 1 waits in pipeline-p2p. --megatron-log keeps Megatron's own Timers
inside laggard's (inner) and prints their table too: the verdict is the same, and the waits
move to Megatron's barriers (timers-barrier).

On a machine without CUDA, megatron-core 0.16 still allocates four things on the GPU (a token
counter, the pipeline's receive buffers, the FP32 optimizer's loss scale, and its own Timer's
synchronize); --cpu (the default when torch has no CUDA) points those at the CPU, for trying
this out. Nothing else of Megatron's is changed, and laggard itself needs none of it.
"""

import argparse
import logging
import os
import time
import warnings

import torch
import torch.distributed as dist

import laggard
import laggard.megatron

warnings.filterwarnings("ignore", module="megatron")
HIDDEN, SEQ, MICRO_BATCH = 16, 8, 2


class SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: stands in for the stage's backward compute."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.ms / 1000.0)
        return grad, None


class SleepingSGD(torch.optim.SGD):
    """SGD whose step also sleeps: stands in for a larger model's update."""

    def __init__(self, params, lr, ms):
        super().__init__(params, lr=lr)
        self.ms = ms

    def step(self, closure=None):
        time.sleep(self.ms / 1000.0)
        return super().step(closure)


class Stage(torch.nn.Module):
    """One pipeline stage of a tiny model: what Megatron's schedule needs of a model chunk."""

    def __init__(self, config, slow_ms, device):
        super().__init__()
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.enums import ModelType

        self.layer = torch.nn.Linear(HIDDEN, HIDDEN, device=device)
        self.config = config
        self.model_type = ModelType.encoder_or_decoder
        self.ddp_config = DistributedDataParallelConfig()
        self.pre_process = True
        self.share_embeddings_and_output_weights = False
        self.slow_ms = slow_ms
        self.input_tensor = None

    def set_input_tensor(self, tensors):
        self.input_tensor = tensors[0] if isinstance(tensors, list) else tensors

    def forward(self, x):
        time.sleep((5.0 + self.slow_ms["forward"]) / 1000.0)  # stands in for the stage's compute
        if self.input_tensor is not None:
            x = self.input_tensor
        return SlowBackward.apply(torch.tanh(self.layer(x)), 5.0 + self.slow_ms["backward"])

    def finish_grad_sync(self, force_all_reduce=False):
        # Megatron's DistributedDataParallel does this (in buckets, on CUDA streams): the
        # data-parallel gradient all-reduce inside finalize_model_grads' all-grads-sync timer.
        from megatron.core import parallel_state

        group = parallel_state.get_data_parallel_group()
        for p in self.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=group)
                p.grad /= dist.get_world_size(group)


def megatron_on_cpu():
    """Megatron-core's schedule, p2p and timers modules see "cuda" as the CPU."""
    import importlib

    class Forward:
        def __init__(self, real, **replaced):
            self._real = real
            self.__dict__.update(replaced)

        def __getattr__(self, name):
            return getattr(self._real, name)

    def cpu(device):
        return "cpu" if device is not None and str(device).startswith("cuda") else device

    cpu_torch = Forward(torch,
                        zeros=lambda *a, device=None, **k: torch.zeros(*a, device=cpu(device), **k),
                        empty=lambda *a, device=None, **k: torch.empty(*a, device=cpu(device), **k),
                        tensor=lambda *a, device=None, **k: torch.tensor(*a, device=cpu(device),
                                                                         **k),
                        cuda=Forward(torch.cuda, current_device=lambda: "cpu",
                                     synchronize=lambda *a, **k: None))
    for name in ("megatron.core.pipeline_parallel.schedules",
                 "megatron.core.pipeline_parallel.p2p_communication", "megatron.core.timers",
                 "megatron.core.optimizer.optimizer"):
        importlib.import_module(name).torch = cpu_torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-stage", choices=("forward", "backward", "optimizer"),
                        default="forward")
    parser.add_argument("--slow-ms", type=float, default=10.0)
    parser.add_argument("--pipeline-stages", type=int, default=2)
    parser.add_argument("--cpu", action="store_true", default=not torch.cuda.is_available())
    parser.add_argument("--megatron-log", action="store_true",
                        help="also keep Megatron's own Timers (inner) and print its log")
    args = parser.parse_args()

    from megatron.core import parallel_state
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer.optimizer import FP32Optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.timers import Timers as MegatronTimers
    from megatron.core.transformer.transformer_config import TransformerConfig

    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank = dist.get_rank()
    device = "cpu" if args.cpu else "cuda"
    if args.cpu:
        megatron_on_cpu()
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    parallel_state.initialize_model_parallel(pipeline_model_parallel_size=args.pipeline_stages)

    # As docs/howto/megatron.md: the pipeline stage is the cohort (only ranks that run the same layers
    # are compared), laggard's default settings, Megatron's own Timers inside when wanted.
    an = laggard.Analyzer(cohort=laggard.megatron.pipeline_cohort())
    inner = MegatronTimers(log_level=2, log_option="minmax") if args.megatron_log else None
    timers = laggard.megatron.Timers(an, inner=inner)
    config = TransformerConfig(num_layers=args.pipeline_stages, hidden_size=HIDDEN,
                               num_attention_heads=1,
                               pipeline_model_parallel_size=args.pipeline_stages,
                               pipeline_dtype=torch.float32)
    config.timers = timers
    config.finalize_model_grads_func = finalize_model_grads
    slow = {stage: args.slow_ms if rank == args.slow_rank and stage == args.slow_stage else 0.0
            for stage in ("forward", "backward", "optimizer")}
    model = Stage(config, slow, device)
    opt = FP32Optimizer(SleepingSGD(model.parameters(), lr=0.05, ms=2.0 + slow["optimizer"]),
                        OptimizerConfig(optimizer="sgd", lr=0.05, clip_grad=0.0,
                                        barrier_with_L1_time=config.barrier_with_L1_time),
                        lambda _: None)
    opt.config.timers = timers  # its optimizer-* timers

    def batches():
        gen = torch.Generator().manual_seed(parallel_state.get_data_parallel_rank())
        while True:
            yield torch.randn(SEQ, MICRO_BATCH, HIDDEN, generator=gen).to(device)

    def forward_step(data_iterator, model):
        timers("batch-generator", log_level=2).start()
        x = next(data_iterator)
        timers("batch-generator").stop()

        def loss_func(output):
            loss = output.pow(2).mean()
            return loss, {"loss": loss.detach()}

        return model(x), loss_func

    forward_backward = get_forward_backward_func()
    data = batches()
    for step in range(args.steps):
        an.begin_step(step)
        opt.zero_grad()
        forward_backward(forward_step_func=forward_step, data_iterator=data, model=[model],
                         num_microbatches=4, seq_length=SEQ, micro_batch_size=MICRO_BATCH)
        # Megatron-LM's train_step times its optimizer step this way
        timers("optimizer", log_level=1).start(barrier=config.barrier_with_L1_time)
        opt.step()
        timers("optimizer").stop()
        an.end_step()
    an.close()  # the last samples are analysed
    report = an.latest_report()
    if args.megatron_log:  # Megatron's own Timers.log (its logger, on the last rank)
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("megatron.core.timers").setLevel(logging.INFO)
        timers.log(["forward-compute", "backward-compute", "all-grads-sync", "optimizer"],
                   normalizer=args.steps)  # ms per iteration
    if report is not None and rank == 0:
        found = ["rank %d (%s) in %s, %.2fx its cohort" % (f["rank"], f["cohort"], f["stage"],
                                                          f["slowdown"])
                 for f in report["stragglers"] if f["confirmed"]]
        waiting = sorted({"rank %d in %s" % (f["rank"], f["stage"]) for f in report["waiting"]
                          if f["confirmed"]})
        print("laggard: confirmed stragglers: %s" % ("; ".join(found) or "none"), flush=True)
        print("laggard: waiting for them: %s" % (", ".join(waiting) or "none"), flush=True)
        if inner is None:
            print("laggard: Megatron asked for %d barriers; laggard made none" %
                  timers.barrier_requests, flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
