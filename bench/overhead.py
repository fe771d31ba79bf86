"""Overhead A/B: the same training run with the analyzer off and on (interval 10 and 1).

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/overhead.py
    ... bench/overhead.py --quick          # a short run (a smoke test, wide intervals)

One process trains three identical copies of a small MLP (same seed, same batches): one with the
analyzer off (`--straggler-analysis` not given: Analyzer(enabled=False), the calls still in the
loop), one on with interval 10 (the default), one on with interval 1, each with the automatic
stages of laggard.torch.instrument plus a `dataloader` section. The copies take turns in blocks
of `--block` steps (10: each block holds one sampled step of interval 10), the order rotated
every round (off/10/1, 10/1/off, 1/off/10), so that drift of a shared machine hits every mode
alike; each round gives one paired difference per "on" mode:
block time on / block time off - 1. The table shows the median of those differences with a 95 %
bootstrap interval (resampling rounds), in wall time (what training throughput sees) and in CPU
time of the training thread (which time spent waiting for a CPU on a busy machine does not
inflate).

The analyzer's own time on the training thread is then accounted from inside, in separate
copies whose laggard calls are wrapped with perf_counter_ns: Analyzer.begin_step/section
(enter and exit of what it returns)/end_step (which attach and detach instrument's hooks on
sampled steps), the calls laggard.torch.instrument makes around the model's forward and the
optimizer's step, and the recorder marks of its backward hooks (minus the timer's own cost, calibrated), with the median cost of
each kind of call (so that a preemption by another process that lands inside a timed call does
not count; the mean is shown too). Each "on" copy's background thread reports its own CPU time
and the part of it that held the GIL (Analyzer.counters()); that part is what the training
thread can have waited for (in this single process, at whichever copy's turn it fell). Finally
the loss sequences of all copies are compared bit for bit.

Targets (issue 4): interval 10: median <= 0.1 % and upper end of the interval <= 0.5 %;
interval 1: median <= 0.5 %.
"""

import argparse
import os
import platform
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import laggard  # noqa: E402
import laggard.torch  # noqa: E402

MODES = [("off", dict(enabled=False)),
         ("on, interval 10", dict(enabled=True, interval=10)),
         ("on, interval 1", dict(enabled=True, interval=1))]


def make_model(dims, seed=0):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(dims[:-2], dims[1:-1]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    return nn.Sequential(*layers)


class Copy:
    """One training run: a model, its optimizer and analyzer, its losses so far."""

    def __init__(self, name, kwargs, dims, data, account=False):
        self.name = name
        self.model = make_model(dims)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.data = data
        self.step = 0
        self.losses = []
        self.acc = Account() if account else None
        kwargs = dict(kwargs)
        always_attached = kwargs.pop("hooks_always_attached", False)
        forward_hooks = kwargs.pop("forward_hooks", False)
        output_hook = kwargs.pop("output_hook", False)
        self.an = laggard.Analyzer(timing="host", **kwargs)
        if self.acc is not None:
            self._wrap_before_instrument()
        # instrument() attaches its hooks on sampled steps only; --always-attached compares that
        # with hooks attached for good (a private switch of laggard.torch, for this A/B).
        laggard.torch._LAZY_HOOKS = not always_attached
        laggard.torch._FORWARD_WRAPPER = not forward_hooks
        laggard.torch._BACKWARD_CALL = not output_hook
        try:
            self.inst = laggard.torch.instrument(
                self.an, model=self.model, optimizer=self.opt,
                _wrap=self._timed_hook if self.acc is not None else None)
        finally:
            laggard.torch._LAZY_HOOKS = True
            laggard.torch._FORWARD_WRAPPER = True
            laggard.torch._BACKWARD_CALL = True
        if self.acc is not None:
            self._wrap_after_instrument()

    # -- accounting from inside ----------------------------------------------------------------

    def _wrap_before_instrument(self):
        acc, an = self.acc, self.an
        if an.enabled:  # instrument's hooks capture the recorder's marks: give them timed ones
            an._recorder = RecorderProxy(an._recorder, acc)

    def _wrap_after_instrument(self):
        acc, an = self.acc, self.an
        an.begin_step = acc.timed(an.begin_step, "Analyzer.begin_step")
        an.end_step = acc.timed(an.end_step, "Analyzer.end_step")
        section = an.section

        def timed_section(name, kind=None):
            return TimedSection(acc.timed(section, "Analyzer.section")(name, kind), acc)

        an.section = timed_section

    HOOK_NAMES = {"forward_pre": "forward begin (a mark)",
                  "forward": "forward end (+ output's gradient hook)",
                  "forward_hook": "forward end (+ output's gradient hook)",
                  "backward_call": "backward call (a mark)",
                  "backward_return": "backward return",
                  "backward_anchor": "anchor parameter's hook",
                  "optimizer_pre": "optimizer hook", "optimizer_post": "optimizer hook"}

    def _timed_hook(self, name, fn):
        """instrument()'s hooks, timed (attached on sampled steps only; attaching and detaching
        them is part of begin_step and end_step)."""
        return self.acc.timed(fn, self.HOOK_NAMES.get(name, name))

    # -- training ------------------------------------------------------------------------------

    def run(self, n):
        """n training steps; returns (wall ns, training-thread CPU ns)."""
        an, model, opt, data, losses = self.an, self.model, self.opt, self.data, self.losses
        mse = nn.functional.mse_loss
        step = self.step
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        acc = self.acc
        interval = an.options["interval"] if an.enabled else 0
        for step in range(self.step, self.step + n):
            if acc is not None:  # accounted copies only: which kind of step this is
                acc.sampled = interval > 0 and step % interval == 0
            an.begin_step(step)
            with an.section("dataloader"):
                x, y = data[step % len(data)]
            opt.zero_grad(set_to_none=True)
            loss = mse(model(x), y)
            loss.backward()
            opt.step()
            an.end_step()
            losses.append(loss.item())
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        self.step += n
        return w1 - w0, c1 - c0

    def close(self):
        self.an.close()


class Account:
    """Time inside laggard calls on the training thread, per call and by kind (what was called,
    on a sampled step or not); outermost timed call only."""

    def __init__(self):
        self.durations = {}  # (name, sampled step?) -> [ns per call]
        self.sampled = False  # set by the training loop for the current step
        self.depth = 0

    def record(self, name, ns):
        self.durations.setdefault((name, self.sampled), []).append(ns)

    def timed(self, fn, name):
        pc = time.perf_counter_ns

        def wrapper(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            self.depth = 1
            t0 = pc()
            try:
                return fn(*args, **kwargs)
            finally:
                t = pc() - t0
                self.depth = 0
                self.record(name, t)

        return wrapper

    def per_step_ns(self, steps, timer):
        """(typical, mean) ns per step: sum over kinds of median (or mean) x calls, minus the
        timer's own cost per call (timer: (median, mean) of a timed no-op)."""
        calls = sum(len(v) for v in self.durations.values())
        typical = sum(statistics.median(v) * len(v) for v in self.durations.values())
        total = sum(sum(v) for v in self.durations.values())
        return (max(0.0, typical - calls * timer[0]) / steps,
                max(0.0, total - calls * timer[1]) / steps)


class TimedSection:
    __slots__ = ("inner", "acc")

    def __init__(self, inner, acc):
        self.inner = inner
        self.acc = acc

    def __enter__(self):
        t0 = time.perf_counter_ns()
        self.inner.__enter__()
        self.acc.record("section.__enter__", time.perf_counter_ns() - t0)

    def __exit__(self, *exc):
        t0 = time.perf_counter_ns()
        r = self.inner.__exit__(*exc)
        self.acc.record("section.__exit__", time.perf_counter_ns() - t0)
        return r


class RecorderProxy:
    """The recorder with timed marks (the stage begin/end builtins instrument's hooks call)."""

    def __init__(self, rec, acc):
        self._rec = rec
        self._acc = acc

    def marks(self, stage_id):
        begin, end = self._rec.marks(stage_id)
        return (self._acc.timed(begin, "recorder mark (backward hooks)"),
                self._acc.timed(end, "recorder mark (backward hooks)"))

    def __getattr__(self, name):
        return getattr(self._rec, name)


def timer_cost_ns(reps=100000):
    """(median, mean) of what one timed call of a no-op records (subtracted per call)."""
    acc = Account()
    f = acc.timed(lambda: None, "noop")
    for _ in range(reps):
        f()
    v = acc.durations[("noop", False)]
    return statistics.median(v), statistics.fmean(v)


# -- statistics ----------------------------------------------------------------------------------

def bootstrap_median_ci(values, resamples=4000, seed=12345, level=0.95):
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return statistics.median(values), lo, hi


def pct(x):
    return "%+.3f%%" % (100.0 * x)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=400,
                   help="A/B rounds; each runs every mode once (default 400)")
    p.add_argument("--block", type=int, default=10,
                   help="steps per block, a multiple of 10 (default 10: one sampled step of "
                        "interval 10 per block)")
    p.add_argument("--warmup-rounds", type=int, default=3, help="rounds not counted (3)")
    p.add_argument("--account-rounds", type=int, default=40,
                   help="rounds of the accounted copies (default 40)")
    p.add_argument("--dims", default="128,256,256,16", help="MLP layer sizes (128,256,256,16)")
    p.add_argument("--batch", type=int, default=32, help="batch size (32)")
    p.add_argument("--breakdown", action="store_true",
                   help="also print the accounted cost of each kind of laggard call")
    p.add_argument("--quick", action="store_true", help="a short run: 30 rounds, 10 accounted")
    p.add_argument("--always-attached", action="store_true",
                   help="add a fourth copy: interval 10 with instrument's hooks attached for good "
                        "instead of on sampled steps only")
    p.add_argument("--aa", action="store_true",
                   help="add a second copy with the analyzer off (an A/A test): its 'overhead' "
                        "is the bench's own bias between two identical copies")
    p.add_argument("--output-hook", action="store_true",
                   help="add a copy at interval 1 that finds the start of the backward with the "
                        "gradient hook on each step's output (as at interval 10) instead of the "
                        "torch.autograd.backward call")
    p.add_argument("--forward-hooks", action="store_true",
                   help="add copies at interval 10 and 1 that time the forward with forward hooks "
                        "instead of laggard.torch's forward wrapper")
    a = p.parse_args(argv)
    modes = list(MODES)
    if a.forward_hooks:
        modes += [("on, interval 10, forward hooks", dict(enabled=True, interval=10,
                                                          forward_hooks=True)),
                  ("on, interval 1, forward hooks", dict(enabled=True, interval=1,
                                                         forward_hooks=True))]
    if a.aa:
        modes.append(("off, second copy (A/A)", dict(enabled=False)))
    if a.output_hook:
        modes.append(("on, interval 1, output hook", dict(enabled=True, interval=1,
                                                           output_hook=True)))
    if a.always_attached:
        modes.append(("on, interval 10, hooks always attached",
                      dict(enabled=True, interval=10, hooks_always_attached=True)))
    if a.quick:
        a.rounds, a.account_rounds, a.warmup_rounds = 30, 10, 1
    if a.block < 1 or a.block % 10:
        p.error("--block must be a positive multiple of 10")
    torch.set_num_threads(1)
    dims = [int(d) for d in a.dims.split(",")]
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(a.batch, dims[0], generator=gen),
             torch.randn(a.batch, dims[-1], generator=gen)) for _ in range(32)]

    load0 = os.getloadavg()
    t_start = time.monotonic()
    copies = [Copy(name, kw, dims, data) for name, kw in modes]
    walls = {c.name: [] for c in copies}
    cpus = {c.name: [] for c in copies}
    for r in range(a.warmup_rounds + a.rounds):
        k = r % len(copies)
        for c in copies[k:] + copies[:k]:
            w, cpu = c.run(a.block)
            if r >= a.warmup_rounds:
                walls[c.name].append(w)
                cpus[c.name].append(cpu)

    accounted = [Copy(name, kw, dims, data, account=True) for name, kw in modes]
    timer_ns = timer_cost_ns()
    acc_walls = {c.name: [] for c in accounted}
    for c in accounted:
        c.run(a.block)  # warm-up
        c.acc.durations = {}
    for r in range(a.account_rounds):
        k = r % len(accounted)
        for c in accounted[k:] + accounted[:k]:
            acc_walls[c.name].append(c.run(a.block)[0])
    for c in copies + accounted:
        c.close()
    background = {}  # name -> (CPU ms, GIL-held ms) of the A/B copy's background thread
    for c in copies:
        if c.an._channel is not None:  # on (closed by now)
            counters = c.an.counters()
            if "background_cpu_ms" in counters:
                background[c.name] = (counters["background_cpu_ms"], counters["background_gil_ms"])
    elapsed = time.monotonic() - t_start
    load1 = os.getloadavg()

    # -- the table -------------------------------------------------------------------------------
    steps = a.rounds * a.block
    base = copies[0].name
    print("laggard overhead A/B (bench/overhead.py)")
    print("  machine: %s, %d CPUs, load average %.2f at start, %.2f at end; Python %s, "
          "torch %s, 1 thread" % (cpu_model(), os.cpu_count(), load0[0], load1[0],
                                  platform.python_version(), torch.__version__))
    print("  training: MLP %s, batch %d, AdamW, stages dataloader/forward/backward/optimizer "
          "(instrument + a section); %d rounds x %d steps per mode, interleaved, order rotated "
          "per round (%d warm-up rounds not counted); %.0f s in all" % (
              "-".join(map(str, dims)), a.batch, a.rounds, a.block, a.warmup_rounds, elapsed))
    print()
    hdr = ("mode", "step (median)", "wall overhead: median [95% CI]",
           "train-thread CPU: median [95% CI]", "laggard calls / step", "net of off",
           "background thread / step")
    widths = (max(16, max(len(n) for n, _ in modes)), 14, 33, 34, 28, 18, 24)
    line = "  ".join(h.ljust(w) for h, w in zip(hdr, widths))
    print(line)
    print("-" * len(line))
    results = {}
    own = {}
    for c, ac in zip(copies, accounted):
        n = c.name
        step_ms = statistics.median(walls[n]) / a.block / 1e6
        if n == base:
            wall_s = cpu_s = "(reference)"
        else:
            dw = [x / y - 1 for x, y in zip(walls[n], walls[base])]
            dc = [x / y - 1 for x, y in zip(cpus[n], cpus[base])]
            mw, lw, hw = bootstrap_median_ci(dw)
            mc, lc, hc = bootstrap_median_ci(dc)
            results[n] = (mw, lw, hw, mc, lc, hc)
            wall_s = "%s [%s, %s]" % (pct(mw), pct(lw), pct(hw))
            cpu_s = "%s [%s, %s]" % (pct(mc), pct(lc), pct(hc))
        acc_steps = a.account_rounds * a.block
        typical_ns, mean_ns = ac.acc.per_step_ns(acc_steps, timer_ns)
        acc_step_ns = statistics.median(acc_walls[n]) / a.block
        own_s = "%.1f us %.3f%% (%.3f%%)" % (typical_ns / 1e3, 100.0 * typical_ns / acc_step_ns,
                                             100.0 * mean_ns / acc_step_ns)
        own[n] = typical_ns, mean_ns, acc_step_ns
        net = typical_ns - own[base][0]
        net_s = "-" if n == base else "%.1f us %.3f%%" % (net / 1e3, 100.0 * net / acc_step_ns)
        bg = background.get(n)
        other_s = "-" if bg is None else "%.1f us (GIL %.1f us)" % (
            bg[0] * 1e3 / c.step, bg[1] * 1e3 / c.step)
        print("  ".join(s.ljust(w) for s, w in zip(
            (n, "%.3f ms" % step_ms, wall_s, cpu_s, own_s, net_s, other_s), widths)))
    print()
    print("laggard calls / step: time inside laggard calls on the training thread, accounted "
          "from inside (%d steps per mode): per kind of call (what, sampled step or not) the "
          "median duration x calls, minus the timer's own %.0f ns per call; as a share of the "
          "step; in parentheses the same with means instead of medians (includes preemptions "
          "by other processes that hit a timed call)." % (a.account_rounds * a.block,
                                                           timer_ns[0]))
    print("net of off: the same minus the off copy's (its disabled calls, and the bench's own "
          "wrapping of the optimizer step).")
    print("background thread / step: the CPU time of the copy's own laggard thread (gather, "
          "analysis, logs) over all its steps, and the part of it that held the GIL, i.e. "
          "could make the training thread wait; the rest ran in C++ with the GIL released "
          "(on another core when there is one).")

    if a.breakdown:
        print()
        print("accounted laggard calls, by kind: calls per step x median ns per call")
        for c in accounted:
            rows = sorted(c.acc.durations.items(), key=lambda kv: -statistics.median(kv[1]) *
                          len(kv[1]))
            print("  %s:" % c.name)
            for (what, sampled), v in rows:
                print("    %-36s %-12s %6.2f x %8.0f ns" % (
                    what, "sampled" if sampled else "not sampled",
                    len(v) / (a.account_rounds * a.block), statistics.median(v)))

    # Every copy trains the same model on the same batches: the losses must be the same bits.
    ref = [float(x).hex() for x in copies[0].losses]
    same = True
    for c in copies[1:] + accounted:
        mine = [float(x).hex() for x in c.losses]
        n = min(len(mine), len(ref))
        if mine[:n] != ref[:n]:
            same = False
            first = next(i for i in range(n) if mine[i] != ref[i])
            print("losses: %s%s differs from off at step %d" % (
                c.name, " (accounted)" if c.acc is not None else "", first))
    print("losses: %s (%d steps per A/B copy, %d per accounted copy: off, interval 10, "
          "interval 1)" % ("bit-identical on and off" if same else "DIFFERENT",
                           len(copies[0].losses), len(accounted[0].losses)))

    on10, on1 = results[MODES[1][0]], results[MODES[2][0]]
    checks = [
        ("interval 10: median wall overhead <= 0.1%", on10[0] <= 0.001),
        ("interval 10: upper end of the 95% interval <= 0.5%", on10[2] <= 0.005),
        ("interval 1: median wall overhead <= 0.5%", on1[0] <= 0.005),
        ("losses bit-identical on and off", same),
    ]
    print("targets: " + "; ".join("%s: %s" % (t, "met" if ok else "NOT met") for t, ok in checks))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
