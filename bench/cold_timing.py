"""What bench/step_cost_ab.py, bench/cold_calls.py and bench/resources_overhead.py share: the
training step that evicts the caches before each timed call, and the statistics of the rounds.

A call that takes 0.1-0.5 µs in a loop takes microseconds right after a training step: the
step's tensors push the interpreter's and laggard's code and data out of the CPU caches. So each
timed call here comes right after one real training step of a small MLP (forward, backward,
AdamW, one thread), as in training.
"""

import math
import random
import statistics

DIMS = "128,256,256,16"


def training_step(dims=DIMS, seed=0):
    """One training step of an MLP with layer sizes `dims` ("128,256,256,16"), as a function
    without arguments; also returns the model and its input (the hook kinds of
    bench/cold_calls.py need them). torch runs on one thread."""
    import torch
    import torch.nn as nn

    torch.set_num_threads(1)
    dims = [int(d) for d in dims.split(",")] if isinstance(dims, str) else list(dims)
    torch.manual_seed(seed)
    layers = []
    for i, (d0, d1) in enumerate(zip(dims[:-1], dims[1:])):
        layers += [nn.Linear(d0, d1)] + ([nn.ReLU()] if i < len(dims) - 2 else [])
    model = nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, dims[0]), torch.randn(32, dims[-1])
    mse = nn.functional.mse_loss

    def step():
        opt.zero_grad(set_to_none=True)
        mse(model(x), y).backward()
        opt.step()

    step.model, step.opt, step.x, step.y, step.loss = model, opt, x, y, mse
    return step


def median_ci(xs, z=1.96):
    """The median and a ~95 % interval from order statistics (binomial)."""
    s = sorted(xs)
    n = len(s)
    lo = max(0, int(math.floor(n / 2 - z * math.sqrt(n) / 2)))
    hi = min(n - 1, int(math.ceil(n / 2 + z * math.sqrt(n) / 2)))
    return statistics.median(s), s[lo], s[hi]


def _bootstrap(stat, a, b, n, seed):
    rng = random.Random(seed)
    got = sorted(stat(statistics.median(rng.choices(a, k=len(a))),
                      statistics.median(rng.choices(b, k=len(b)))) for _ in range(n))
    return stat(statistics.median(a), statistics.median(b)), got[int(0.025 * n)], \
        got[int(0.975 * n)]


def bootstrap_median(xs, n=2000, seed=1):
    """The median and a 95 % bootstrap interval."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return statistics.median(xs), meds[int(0.025 * n)], meds[int(0.975 * n)]


def bootstrap_ratio(a, b, n=2000, seed=2):
    """median(a) / median(b) and a 95 % bootstrap interval."""
    return _bootstrap(lambda x, y: x / y, a, b, n, seed)


def bootstrap_diff(a, b, n=2000, seed=0):
    """median(a) - median(b) and a 95 % bootstrap interval."""
    return _bootstrap(lambda x, y: x - y, a, b, n, seed)


def load():
    """The load average (1, 5, 15 min), as /proc/loadavg has it."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def shuffled_rounds(kinds, rounds, warmup=20, seed=0):
    """(counted, kind) for each kind in each of warmup + rounds rounds, the kinds in an order
    shuffled every round. The training step between two measurements does not evict
    everything: a measurement is faster after one that ran the same code, so a fixed order
    favours the kinds that follow their like (by 15-20 % in bench/step_cost_ab.py)."""
    rng = random.Random(seed)
    order = list(kinds)
    for r in range(warmup + rounds):
        rng.shuffle(order)
        for kind in order:
            yield r >= warmup, kind
