"""A test helper shared by the torch tests and the DDP worker: an autograd op whose backward
takes a known time."""

import time

import torch


class Delay(torch.autograd.Function):
    """Identity whose backward sleeps `ms` (a slow backward; 0: none). Delay.apply(x, ms)."""

    @staticmethod
    def forward(ctx, x, ms):
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.ms > 0:
            time.sleep(ctx.ms / 1000.0)
        return grad, None
