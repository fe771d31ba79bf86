"""Overhead A/B: the same training run with the analyzer off and on (interval 10 and 1).

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/overhead.py
    ... bench/overhead.py --rounds 2000 --processes 4 --breakdown   # the figures of the docs
    ... bench/overhead.py --quick          # a short run (a smoke test, wide intervals)

The A/B trains one small MLP (fixed seed and batches) in four modes that take turns: the
analyzer off (`--straggler-analysis` not given: Analyzer(enabled=False), the calls still in the
loop), on with interval 10 (the default), on with interval 1, and off again (the A/A mode: its
"overhead" is the bench's own bias). Each "on" mode has its own Analyzer and
laggard.torch.instrument (forward, backward, optimizer) plus a `dataloader` section; its
instrumentation is put in for each of its blocks and taken out after. A block is 3 untimed
steps (so that every timed step follows a step of its own mode, as in real training, and the
instrumentation put in for the block is past its first steps) and `--block` timed ones (10:
one sampled step of interval 10 per block); a round runs one block of every mode, in a random
order. Each round gives one paired difference per mode: block time of the mode / block time
of off - 1.

All modes train the same model, because two identical copies of it (a model each) differ in
speed by a percent or more for as long as they live — where their tensors and Python objects
happen to lie in memory, most likely — which no number of rounds averages out. The rest of the memory layout is drawn
anew every `--layout-rounds` rounds (a new model and new Analyzers, made in a random order
between allocations of random sizes), in `--processes` fresh processes one after another. The
table gives the median of the paired differences over all rounds, with a 95 % interval from a
bootstrap that resamples whole layouts, in wall time (what training throughput sees) and in CPU
time of the training thread (which time spent waiting for a CPU on a busy machine does not
inflate); below it, each layout's median, and their mean with a t interval.

The analyzer's own time on the training thread is then accounted from inside, in separate
copies whose laggard calls are wrapped with perf_counter_ns: Analyzer.begin_step/section
(enter and exit of what it returns)/end_step (which attach and detach instrument's hooks on
sampled steps), the calls laggard.torch.instrument makes around the model's forward and the
optimizer's step, and the recorder marks of its backward hooks (minus the timer's own cost, calibrated), with the median cost of
each kind of call (so that a preemption by another process that lands inside a timed call does
not count; the mean is shown too). Each "on" copy's background thread reports its own CPU time
and the part of it that held the GIL (Analyzer.counters()); that part is what the training
thread can have waited for (in the A/B, at whichever mode's turn it fell). Finally the loss
sequences are compared bit for bit: the A/B's model in every layout (laggard on and off in turn)
and each accounted copy (one mode for good) train the same steps from the same start.

Targets (issue 4): interval 10: median <= 0.1 % and upper end of the interval <= 0.5 %;
interval 1: median <= 0.5 %.
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
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
AA = "off, second copy (A/A)"
LEAD_STEPS = 3  # untimed steps at the start of each block (at most 9)


def make_model(dims, seed=0):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(dims[:-2], dims[1:-1]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(dims[-2], dims[-1]))
    return nn.Sequential(*layers)


class Trainer:
    """A model, its optimizer, the batches, and the losses so far: one training run."""

    def __init__(self, dims, data):
        self.model = make_model(dims)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.data = data
        self.done = 0  # steps run (timed or not): the batch of the next step
        self.losses = []


class Copy:
    """One mode: an analyzer (on or off) and laggard.torch.instrument on a Trainer.

    Without `trainer`, the copy has a Trainer of its own, instrumented for good (the accounted
    copies). With one, several modes train that same model in turn, and this mode's
    instrumentation is put in for each of its blocks and taken out after it (the A/B): the modes
    then differ in nothing but laggard."""

    def __init__(self, name, kwargs, dims, data, account=False, trainer=None):
        self.name = name
        self.shared = trainer is not None
        self.t = trainer if trainer is not None else Trainer(dims, data)
        self.block = 0  # blocks run
        self.acc = Account() if account else None
        kwargs = dict(kwargs)
        self._flags = (kwargs.pop("hooks_always_attached", False),
                       kwargs.pop("forward_hooks", False), kwargs.pop("output_hook", False))
        self.an = laggard.Analyzer(timing="host", **kwargs)
        if self.acc is not None:
            self._wrap_before_instrument()
        self.inst = None if self.shared else self._instrument()
        if self.acc is not None:
            self._wrap_after_instrument()

    @property
    def losses(self):
        return self.t.losses

    def _instrument(self):
        # instrument() attaches its hooks on sampled steps only; --always-attached compares that
        # with hooks attached for good (private switches of laggard.torch, for this A/B).
        always_attached, forward_hooks, output_hook = self._flags
        laggard.torch._LAZY_HOOKS = not always_attached
        laggard.torch._FORWARD_WRAPPER = not forward_hooks
        laggard.torch._BACKWARD_CALL = not output_hook
        try:
            return laggard.torch.instrument(
                self.an, model=self.t.model, optimizer=self.t.opt,
                _wrap=self._timed_hook if self.acc is not None else None)
        finally:
            laggard.torch._LAZY_HOOKS = True
            laggard.torch._FORWARD_WRAPPER = True
            laggard.torch._BACKWARD_CALL = True

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
                  "backward_end": "backward end (a mark)",
                  "backward_cancel": "backward dropped (a mark)",
                  "optimizer_pre": "optimizer hook", "optimizer_post": "optimizer hook"}

    def _timed_hook(self, name, fn):
        """instrument()'s hooks, timed (attached on sampled steps only; attaching and detaching
        them is part of begin_step and end_step)."""
        return self.acc.timed(fn, self.HOOK_NAMES.get(name, name))

    # -- training ------------------------------------------------------------------------------

    def run(self, n, lead=LEAD_STEPS):
        if not self.shared:
            return self._run(n, lead)
        inst = self._instrument()  # (nothing for an analyzer that is off)
        try:
            return self._run(n, lead)
        finally:
            inst.remove()

    def _run(self, n, lead):
        """One block: `lead` untimed steps, then n timed training steps; returns (wall ns,
        training-thread CPU ns) of the n.

        The untimed steps put the model, optimizer and this mode's laggard state back into the
        caches after the other modes' blocks, so that every timed step follows a step of its
        own mode, as in real training; they also take the instrumentation put in for the block
        through its first steps (at interval 1 the anchor parameter's hook confirms the first 3
        backward calls, then goes: laggard.torch). Their step numbers precede a multiple of 10
        (not sampled at interval 10), so the n timed steps hold exactly n / 10 sampled steps of
        interval 10 whatever the block. Step numbers of consecutive blocks leave a gap (the
        analyzer needs them increasing, not contiguous); the batches follow the number of
        steps run, the same in every mode."""
        t = self.t
        an, model, opt, data, losses = self.an, t.model, t.opt, t.data, t.losses
        mse = nn.functional.mse_loss
        acc = self.acc
        interval = an.options["interval"] if an.enabled else 0
        first = self.block * (n + 10) + 10  # a multiple of 10
        self.block += 1
        steps = list(range(first - lead, first + n))
        w0 = c0 = None
        for step in steps:
            if step == first:
                w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            if acc is not None:  # accounted copies only: which kind of step this is
                acc.sampled = interval > 0 and step % interval == 0
                acc.paused = step < first
            an.begin_step(step)
            with an.section("dataloader"):
                x, y = data[t.done % len(data)]
            opt.zero_grad(set_to_none=True)
            loss = mse(model(x), y)
            loss.backward()
            opt.step()
            an.end_step()
            losses.append(loss.item())
            t.done += 1
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        return w1 - w0, c1 - c0

    def close(self):
        self.an.close()


class Account:
    """Time inside laggard calls on the training thread, per call and by kind (what was called,
    on a sampled step or not); outermost timed call only."""

    def __init__(self):
        self.durations = {}  # (name, sampled step?) -> [ns per call]
        self.sampled = False  # set by the training loop for the current step
        self.paused = False  # set by the training loop for a block's untimed step
        self.depth = 0

    def record(self, name, ns):
        if self.paused:
            return
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

# Student's t, two-sided 95 %, by degrees of freedom (1..30; 1.96 beyond)
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def across_layouts(medians):
    """(estimate, low, high): the mean of the per-layout medians with a 95 % t interval."""
    n = len(medians)
    m = statistics.fmean(medians)
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * statistics.stdev(medians) / n ** 0.5
    return m, m - half, m + half


def cluster_bootstrap_median(groups, resamples=2000, seed=12345, level=0.95):
    """(estimate, low, high): the median of all values pooled, with a 95 % interval from a
    bootstrap that resamples whole groups (layouts), so that what a layout shares (its memory
    layout, a stretch of machine noise) counts in the interval. Groups of one value each: the
    plain bootstrap over values."""
    rng = random.Random(seed)
    pooled = [x for g in groups for x in g]
    meds = []
    for _ in range(resamples):
        pick = [x for g in rng.choices(groups, k=len(groups)) for x in g]
        meds.append(statistics.median(pick))
    meds.sort()
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return statistics.median(pooled), lo, hi


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


def make_data(a):
    torch.set_num_threads(1)
    dims = [int(d) for d in a.dims.split(",")]
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(a.batch, dims[0], generator=gen),
             torch.randn(a.batch, dims[-1], generator=gen)) for _ in range(32)]
    return dims, data


def ab_worker(a, modes, seed, rounds):
    """One process's A/B, in layouts of `--layout-rounds` rounds each. A layout: every mode's copy,
    made in a random order between allocations of random sizes (so that where each copy's tensors
    and Python objects lie in memory differs from layout to layout), then its rounds, each running
    one block of every copy in a random order (after `--warmup-rounds` not counted); then the
    copies are closed and dropped, and the next layout makes new ones. Every layout trains from
    the same start on the same batches. Returns what the parent needs, as JSON-able data."""
    rng = random.Random(seed)
    dims, data = make_data(a)
    layouts = []
    background = {}  # name -> [CPU ms, GIL-held ms, steps] of the copies' background threads
    ref, differ = None, []
    left = rounds
    while left > 0:
        n = min(a.layout_rounds, left)
        if left - n < a.layout_rounds // 2:  # no short layout at the end
            n = left
        left -= n
        padding = [torch.empty(rng.randrange(1, 1 << 16)),
                   [object() for _ in range(rng.randrange(1, 4096))]]
        trainer = Trainer(dims, data)  # every mode trains this model in turn
        order = list(range(len(modes)))
        rng.shuffle(order)
        copies = [None] * len(modes)
        for i in order:
            padding.append([object() for _ in range(rng.randrange(1, 1024))])
            copies[i] = Copy(modes[i][0], modes[i][1], dims, data, trainer=trainer)
        walls = {c.name: [] for c in copies}
        cpus = {c.name: [] for c in copies}
        for r in range(a.warmup_rounds + n):
            turn = copies[:]
            rng.shuffle(turn)
            for c in turn:
                w, cpu = c.run(a.block)
                if r >= a.warmup_rounds:
                    walls[c.name].append(w)
                    cpus[c.name].append(cpu)
        for c in copies:
            c.close()
            if c.an._engine is not None:  # on (closed by now)
                counters = c.an.counters()
                if "background_cpu_ms" in counters:
                    bg = background.setdefault(c.name, [0.0, 0.0, 0])
                    bg[0] += counters["background_cpu_ms"]
                    bg[1] += counters["background_gil_ms"]
                    bg[2] += c.block * (a.block + LEAD_STEPS)
        # The same model trained from the same start on the same batches, laggard on or off
        # from block to block: the same bits in every layout.
        losses = [float(x).hex() for x in trainer.losses]
        if ref is None:
            ref = losses
        elif losses != ref:
            differ.append(len(layouts) + 1)
        layouts.append({"order": [modes[i][0] for i in order], "walls": walls, "cpus": cpus})
        del copies, trainer, padding
    return {"seed": seed, "layouts": layouts, "background": background, "losses": ref,
            "differ": differ}


def run_processes(a, argv):
    """Runs the A/B in a.processes processes one after another (each a fresh interpreter: a new
    memory layout), the rounds split between them; returns their results."""
    per = [a.rounds // a.processes + (1 if k < a.rounds % a.processes else 0)
           for k in range(a.processes)]
    results = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="laggard-overhead-") as tmp:
        for k, rounds in enumerate(per):
            out = os.path.join(tmp, "process-%d.json" % k)
            cmd = [sys.executable, os.path.abspath(__file__)] + list(argv) + [
                "--worker-seed", str(a.seed * 1000 + k), "--worker-rounds", str(rounds),
                "--worker-out", out]
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0 or not os.path.exists(out):
                raise SystemExit("bench/overhead.py: A/B process %d of %d failed (exit %d):\n%s" % (
                    k + 1, a.processes, p.returncode, p.stdout[-4000:]))
            with open(out) as f:
                results.append(json.load(f))
            done = time.monotonic() - t0
            print("A/B process %d/%d done (%d rounds, %.0f s so far, ~%.0f s to go)" % (
                k + 1, a.processes, rounds, done, done / (k + 1) * (a.processes - k - 1)),
                file=sys.stderr, flush=True)
    return results


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=400,
                   help="A/B rounds in all, split between the processes; each round runs one "
                        "block of every mode (default 400)")
    p.add_argument("--processes", type=int, default=2,
                   help="A/B processes, run one after another, the rounds split between them "
                        "(default 2)")
    p.add_argument("--block", type=int, default=10,
                   help="timed steps per block, a multiple of 10 (default 10: one sampled step "
                        "of interval 10 per block); each block starts with %d untimed steps" %
                        LEAD_STEPS)
    p.add_argument("--layout-rounds", type=int, default=50,
                   help="rounds per layout: the copies are made anew after so many rounds "
                        "(default 50)")
    p.add_argument("--warmup-rounds", type=int, default=2,
                   help="rounds not counted, at the start of each layout (2)")
    p.add_argument("--account-rounds", type=int, default=40,
                   help="rounds of the accounted copies (default 40)")
    p.add_argument("--seed", type=int, default=1,
                   help="seeds the processes' layouts and block orders (1)")
    p.add_argument("--dims", default="128,256,256,16", help="MLP layer sizes (128,256,256,16)")
    p.add_argument("--batch", type=int, default=32, help="batch size (32)")
    p.add_argument("--breakdown", action="store_true",
                   help="also print the accounted cost of each kind of laggard call")
    p.add_argument("--quick", action="store_true",
                   help="a short run: 30 rounds in 2 processes, 10 accounted")
    p.add_argument("--no-aa", action="store_true",
                   help="leave out the second copy with the analyzer off (the A/A test, whose "
                        "'overhead' is the bench's own bias between two identical copies)")
    p.add_argument("--aa", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.add_argument("--always-attached", action="store_true",
                   help="add a mode: interval 10 with instrument's hooks attached for good "
                        "instead of on sampled steps only")
    p.add_argument("--output-hook", action="store_true",
                   help="add a mode at interval 1 that finds the start of the backward with the "
                        "gradient hook on each step's output (as under DDP at interval 10) instead "
                        "of the torch.autograd.backward call")
    p.add_argument("--forward-hooks", action="store_true",
                   help="add modes at interval 10 and 1 that time the forward with forward hooks "
                        "instead of laggard.torch's forward wrapper")
    p.add_argument("--raw", metavar="FILE",
                   help="also write every layout's block times (ns, per mode) to FILE as JSON")
    p.add_argument("--worker-seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--worker-rounds", type=int, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    modes = list(MODES)
    if not a.no_aa:
        modes.append((AA, dict(enabled=False)))
    if a.forward_hooks:
        modes += [("on, interval 10, forward hooks", dict(enabled=True, interval=10,
                                                          forward_hooks=True)),
                  ("on, interval 1, forward hooks", dict(enabled=True, interval=1,
                                                         forward_hooks=True))]
    if a.output_hook:
        modes.append(("on, interval 1, output hook", dict(enabled=True, interval=1,
                                                           output_hook=True)))
    if a.always_attached:
        modes.append(("on, interval 10, hooks always attached",
                      dict(enabled=True, interval=10, hooks_always_attached=True)))
    if a.quick:
        a.rounds, a.processes, a.account_rounds, a.warmup_rounds = 40, 2, 10, 1
        a.layout_rounds = 10
    if a.block < 1 or a.block % 10:
        p.error("--block must be a positive multiple of 10")
    if a.processes < 1 or a.rounds < a.processes:
        p.error("--processes must be at least 1 and at most --rounds")
    if a.layout_rounds < 1:
        p.error("--layout-rounds must be at least 1")
    if a.worker_out is not None:  # one A/B process (started by the parent below)
        result = ab_worker(a, modes, a.worker_seed, a.worker_rounds)
        with open(a.worker_out, "w") as f:
            json.dump(result, f)
        return 0

    load0 = os.getloadavg()
    t_start = time.monotonic()
    procs = run_processes(a, argv)

    print("accounting from inside (%d rounds) ..." % a.account_rounds, file=sys.stderr, flush=True)
    dims, data = make_data(a)
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
    for c in accounted:
        c.close()
    elapsed = time.monotonic() - t_start
    load1 = os.getloadavg()

    # -- the table -------------------------------------------------------------------------------
    base = modes[0][0]
    print("laggard overhead A/B (bench/overhead.py)")
    print("  machine: %s, %d CPUs, load average %.2f at start, %.2f at end; Python %s, "
          "torch %s, 1 thread" % (cpu_model(), os.cpu_count(), load0[0], load1[0],
                                  platform.python_version(), torch.__version__))
    print("  training: MLP %s, batch %d, AdamW, stages dataloader/forward/backward/optimizer "
          "(instrument + a section); %d rounds x %d timed steps per mode in %d processes, "
          "%d layouts (each: copies made anew in a random order, blocks in a random order every "
          "round, %d warm-up rounds); %.0f s in all" % (
              "-".join(map(str, dims)), a.batch, a.rounds, a.block, a.processes,
              sum(len(r["layouts"]) for r in procs), a.warmup_rounds, elapsed))
    print()
    layouts = [lay for r in procs for lay in r["layouts"]]
    if a.raw:
        with open(a.raw, "w") as f:
            json.dump({"block": a.block, "lead_steps": LEAD_STEPS, "layouts": layouts}, f)
    across = len(layouts) >= 2
    ci = "median [95% CI]"
    hdr = ("mode", "step (median)", "wall overhead: " + ci, "train-thread CPU: " + ci,
           "laggard calls / step", "net of off", "background thread / step")
    widths = (max(22, max(len(n) for n, _ in modes)), 14, 43, 43, 28, 18, 24)
    line = "  ".join(h.ljust(w) for h, w in zip(hdr, widths))
    print(line)
    print("-" * len(line))
    results = {}
    per_layout = {}
    mean_of_medians = {}
    own = {}
    for (n, _), ac in zip(modes, accounted):
        step_ms = statistics.median(sum((r["walls"][n] for r in layouts), [])) / a.block / 1e6
        if n == base:
            wall_s = cpu_s = "(reference)"
        else:
            meds = []  # per layout: (wall median, CPU median) of the paired differences
            gw, gc = [], []  # per layout: the paired differences
            for r in layouts:
                dw = [x / y - 1 for x, y in zip(r["walls"][n], r["walls"][base])]
                dc = [x / y - 1 for x, y in zip(r["cpus"][n], r["cpus"][base])]
                gw.append(dw)
                gc.append(dc)
                meds.append((statistics.median(dw), statistics.median(dc)))
            per_layout[n] = meds
            if across:
                w = cluster_bootstrap_median(gw)
                c = cluster_bootstrap_median(gc)
                mean_of_medians[n] = across_layouts([m[0] for m in meds])
            else:  # one layout: the bootstrap over its rounds
                w = cluster_bootstrap_median([[x] for x in gw[0]], resamples=4000)
                c = cluster_bootstrap_median([[x] for x in gc[0]], resamples=4000)
            results[n] = w + c
            wall_s = "%s [%s, %s]" % tuple(pct(x) for x in w)
            cpu_s = "%s [%s, %s]" % tuple(pct(x) for x in c)
        acc_steps = a.account_rounds * a.block
        typical_ns, mean_ns = ac.acc.per_step_ns(acc_steps, timer_ns)
        acc_step_ns = statistics.median(acc_walls[n]) / a.block
        own_s = "%.1f us %.3f%% (%.3f%%)" % (typical_ns / 1e3, 100.0 * typical_ns / acc_step_ns,
                                             100.0 * mean_ns / acc_step_ns)
        own[n] = typical_ns, mean_ns, acc_step_ns
        net = typical_ns - own[base][0]
        net_s = "-" if n == base else "%.1f us %.3f%%" % (net / 1e3, 100.0 * net / acc_step_ns)
        bg = [r["background"][n] for r in procs if n in r["background"]]
        other_s = "-" if not bg else "%.1f us (GIL %.1f us)" % (
            sum(b[0] for b in bg) * 1e3 / sum(b[2] for b in bg),
            sum(b[1] for b in bg) * 1e3 / sum(b[2] for b in bg))
        print("  ".join(s.ljust(w) for s, w in zip(
            (n, "%.3f ms" % step_ms, wall_s, cpu_s, own_s, net_s, other_s), widths)))
    print()
    if across:
        print("overhead: the median of (block time of the mode / block time of off - 1) over all "
              "rounds of all %d layouts (a layout: the model and the Analyzers made anew, in a "
              "random order between allocations of random sizes; %d processes), with a 95%% "
              "interval from a bootstrap that resamples whole layouts. Per layout, the median "
              "over its rounds (wall), and the mean of those with a 95%% t interval:" % (
                  len(layouts), a.processes))
        for n, meds in per_layout.items():
            print("  %-*s %s [%s, %s]: %s" % (
                (widths[0], n) + tuple(pct(x) for x in mean_of_medians[n]) +
                (" ".join("%+.2f" % (100 * m[0]) for m in meds),)))
    else:
        print("overhead: the median over rounds of (block time of the mode / block time of off "
              "- 1) with a 95% bootstrap interval over rounds (one layout: its own bias between "
              "copies is not in the interval; use more rounds than --layout-rounds)")
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

    # Every run trains the same model from the same start on the same batches: the A/B's model
    # (laggard on and off in turn) in every layout of every process, and each accounted copy
    # (one mode for good): the losses must be the same bits.
    ref = procs[0]["losses"]
    same = True
    for k, r in enumerate(procs):
        for layout in r["differ"]:
            same = False
            print("losses: layout %d of A/B process %d differs from its layout 1" % (layout, k + 1))
        n = min(len(ref), len(r["losses"]))
        if r["losses"][:n] != ref[:n]:
            same = False
            print("losses: A/B process %d differs from process 1" % (k + 1))
    for c in accounted:
        mine = [float(x).hex() for x in c.losses]
        n = min(len(mine), len(ref))
        if mine[:n] != ref[:n]:
            same = False
            first = next(i for i in range(n) if mine[i] != ref[i])
            print("losses: %s (accounted) differs from the A/B at step %d" % (c.name, first))
    print("losses: %s (the A/B's model, laggard on and off in turn: %d steps per layout, in %d "
          "layouts; %d steps of each accounted copy, one per mode)" % (
              "bit-identical on and off" if same else "DIFFERENT", len(ref), len(layouts),
              len(accounted[0].losses)))

    on10, on1 = results[MODES[1][0]], results[MODES[2][0]]
    checks = [
        ("interval 10: median wall overhead <= 0.1%", on10[0] <= 0.001),
        ("interval 10: upper end of the 95% interval <= 0.5%", on10[2] <= 0.005),
        ("interval 1: median wall overhead <= 0.5%", on1[0] <= 0.005),
        ("losses bit-identical on and off", same),
    ]
    print("targets: " + "; ".join("%s: %s" % (t, "met" if ok else "NOT met") for t, ok in checks))
    if AA in results:
        aa = results[AA]
        print("A/A (two identical off copies): %s [%s, %s]: the interval %s zero" % (
            pct(aa[0]), pct(aa[1]), pct(aa[2]),
            "holds" if aa[1] <= 0 <= aa[2] else "does NOT hold (the bench is biased in this run)"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
