"""Megatron-core's schedules on a machine without CUDA, for the tests.

megatron-core 0.16 allocates four things on the GPU whatever the model's device: the
schedules' token counter (schedules.py: torch.zeros([], dtype=torch.int, device="cuda")), the
pipeline's receive buffers (p2p_communication.py: torch.empty(..., device=
torch.cuda.current_device())), the FP32 optimizer's loss scale (optimizer/optimizer.py:
torch.tensor([1.0], device="cuda")), and its Timer calls torch.cuda.synchronize() (timers.py).
With a CPU-only torch each raises "Torch not compiled with CUDA enabled". redirect() gives those
modules a `torch` whose device "cuda" is the CPU and whose synchronize() does nothing; everything
else in them is Megatron's own code.
"""

import torch

MODULES = ("megatron.core.pipeline_parallel.schedules",
           "megatron.core.pipeline_parallel.p2p_communication",
           "megatron.core.timers",
           "megatron.core.optimizer.optimizer")


class _Forward:
    """Every attribute of `real`, except the ones given."""

    def __init__(self, real, **replaced):
        self._real = real
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _cpu(device):
    return "cpu" if device is not None and str(device).startswith("cuda") else device


def _zeros(*args, device=None, **kwargs):
    return torch.zeros(*args, device=_cpu(device), **kwargs)


def _empty(*args, device=None, **kwargs):
    return torch.empty(*args, device=_cpu(device), **kwargs)


def _tensor(*args, device=None, **kwargs):
    return torch.tensor(*args, device=_cpu(device), **kwargs)


def _nothing(*args, **kwargs):
    return None


CPU_TORCH = _Forward(torch, zeros=_zeros, empty=_empty, tensor=_tensor,
                     cuda=_Forward(torch.cuda, current_device=lambda: "cpu",
                                   synchronize=_nothing))


def redirect():
    """Points MODULES at CPU_TORCH; returns a function that undoes it."""
    import importlib

    saved = []
    for name in MODULES:
        module = importlib.import_module(name)
        saved.append((module, module.torch))
        module.torch = CPU_TORCH

    def undo():
        for module, real in saved:
            module.torch = real

    return undo
