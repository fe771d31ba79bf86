"""GPU overhead A/B: a transformer's training step with laggard off and on (interval 10 and 1).

    PYTHONPATH=python python3 bench/gpu_overhead.py                      # the full run (~2 min)
    PYTHONPATH=python python3 bench/gpu_overhead.py --json out.json      # the same, also as JSON
    PYTHONPATH=python python3 bench/gpu_overhead.py --quick              # a smoke run (~20 s)
    PYTHONPATH=python .venv/bin/python bench/gpu_overhead.py --device cpu --quick   # no GPU

What it measures: the wall time of a real GPU training step — a small decoder-only transformer
(torch.nn, built from code: 8 layers, d_model 1024, 16 heads, sequence 1024, batch 16, vocabulary
32768, tied embedding), bf16 autocast, fused AdamW, on synthetic token batches made once on the
device — with laggard in the loop as a user puts it there: laggard.Analyzer(timing="cuda"),
laggard.torch.instrument(an, model=model, optimizer=opt) (forward, backward, optimizer, and the
loss read on sampled steps that instrument does by default) and an `an.section("dataloader")`
around fetching the batch. The step time is printed (a warm-up measurement, laggard off, and
each mode's median).

The modes take turns, as in bench/overhead.py, only smaller: off (Analyzer(enabled=False), the
calls still in the loop), on with interval 10 (the default), on with interval 1, and off again
(the A/A mode: its "overhead" is the bench's own bias). `--loss-modes` adds interval 10 and 1 with
instrument(..., record_loss=False), which leave out the loss's `.item()` on sampled steps (the
one device synchronization laggard makes). Every mode trains the same model and optimizer (two
copies of a model differ in speed for as long as they live, which no number of rounds averages
out); each "on" mode has its own Analyzer, and its instrumentation is put in before each of its
blocks and taken out after (Instrumentation.remove()). A block is 3 untimed lead steps (every
timed step follows a step of its own mode, and at interval 1 the instrumentation put in for the
block is past its first backward calls) and `--block` timed steps (10: exactly one sampled step
of interval 10 per block); a round runs one block of every mode, in a random order. A block's
time is taken on the host: torch.cuda.synchronize() before its first timed step and after its
last (the bench's own synchronizations, at block boundaries only, outside laggard), with
time.perf_counter. Each round gives one paired difference per mode: block time of the mode /
block time of off - 1.

The table gives, per mode, the median paired overhead with a 95 % bootstrap interval over
rounds, the median step time, laggard's timing backend (an.backend_name: "cuda-event" on a GPU,
"host-clock" where CUDA event timing is unavailable) and an.counters() of each "on" analyzer
after close(): every dropped_* / *_lost / unbalanced / report_errors count must be 0 (checked
and printed). The number of rounds adapts to the measured step time so that the rounds take
about `--budget-s` seconds (at most `--rounds`).

Exit status: 0 normally, 1 if a check failed (a dropped or lost count, an error, or another
backend than "cuda-event" on --device cuda), 77 if --device cuda and no GPU is available.
With --device cpu the model is smaller (2 layers, d_model 128, sequence 64, batch 4, no autocast,
one torch thread) and laggard's timing falls back to the host clock: a smoke test of the bench.
"""

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import laggard  # noqa: E402
import laggard.torch  # noqa: E402

LEAD_STEPS = 3  # untimed steps at the start of each block (at most 9)
AA = "off, again (A/A)"

# name, Analyzer kwargs (None: off), instrument kwargs
MODES = [("off", None, {}),
         ("on, interval 10", dict(interval=10), {}),
         ("on, interval 1", dict(interval=1), {}),
         (AA, None, {})]
LOSS_MODES = [("on, interval 10, record_loss=False", dict(interval=10), dict(record_loss=False)),
              ("on, interval 1, record_loss=False", dict(interval=1), dict(record_loss=False))]

# Counters of an "on" analyzer that must be 0 after close().
MUST_BE_ZERO = ("dropped_stages", "dropped_intervals", "dropped_steps", "dropped_values",
                "queue_dropped", "rank_log_lost", "gather_dropped", "analysis_dropped",
                "forward_dropped", "unbalanced", "malformed_samples", "late_samples",
                "report_errors", "deferred_dropped")

SIZES = {  # (layers, d_model, heads, seq, batch, vocab)
    "cuda": (8, 1024, 16, 1024, 16, 32768),
    "cpu": (2, 128, 4, 64, 4, 1024),
}


# -- the model ---------------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention (scaled_dot_product_attention) and a
    GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Decoder(nn.Module):
    """Decoder-only language model: token and learned position embeddings, blocks, final norm,
    output head tied to the token embedding; forward returns the logits."""

    def __init__(self, layers, d, heads, seq, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class Trainer:
    """The one model, optimizer and batch list every mode trains in turn."""

    def __init__(self, a, device):
        layers, d, heads, seq, batch, vocab = a.layers, a.d_model, a.heads, a.seq, a.batch, a.vocab
        torch.manual_seed(0)
        self.device = device
        self.model = Decoder(layers, d, heads, seq, vocab).to(device)
        self.params = sum(p.numel() for p in self.model.parameters())
        cuda = device.type == "cuda"
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, weight_decay=0.1,
                                     **(dict(fused=True) if cuda else {}))
        self.autocast = cuda and not a.fp32  # bf16 autocast around the forward
        gen = torch.Generator(device="cpu").manual_seed(1)
        self.data = [torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
                     for _ in range(16)]
        self.done = 0  # steps run (the batch of the next step)
        self.last_loss = None  # the latest loss tensor (read once at the end: no sync)

    def step(self, an):
        """One training step with laggard's calls as a user writes them."""
        with an.section("dataloader"):
            tokens = self.data[self.done % len(self.data)]
            x, y = tokens[:, :-1], tokens[:, 1:]
        self.opt.zero_grad(set_to_none=True)
        if self.autocast:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = self.model(x)
        else:
            logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        self.opt.step()
        self.done += 1
        self.last_loss = loss.detach()


class Mode:
    """One mode: an analyzer (on or off) and, for each block, laggard.torch.instrument on the
    shared Trainer, taken out again after the block."""

    def __init__(self, name, an_kwargs, inst_kwargs, trainer, sync):
        self.name = name
        self.t = trainer
        self.sync = sync
        self.inst_kwargs = inst_kwargs
        if an_kwargs is None:
            self.an = laggard.Analyzer(enabled=False)
        else:
            self.an = laggard.Analyzer(enabled=True, timing="cuda", **an_kwargs)
        self.on = an_kwargs is not None
        self.block = 0

    def run(self, n, lead=LEAD_STEPS):
        """One block: `lead` untimed steps, then n timed ones; returns the n's wall seconds.

        Step numbers: the lead steps precede a multiple of 10 (not sampled at interval 10), so
        the n timed steps hold exactly n / 10 sampled steps of interval 10 in every block;
        consecutive blocks leave a gap (the analyzer needs steps increasing, not contiguous)."""
        an, t, sync = self.an, self.t, self.sync
        inst = laggard.torch.instrument(an, model=t.model, optimizer=t.opt, **self.inst_kwargs)
        try:
            first = self.block * (n + 10) + 10
            self.block += 1
            t0 = None
            for step in range(first - lead, first + n):
                if step == first:
                    sync()
                    t0 = time.perf_counter()
                an.begin_step(step)
                t.step(an)
                an.end_step()
            sync()
            return time.perf_counter() - t0
        finally:
            inst.remove()

    def close(self):
        self.an.close()


# -- statistics ----------------------------------------------------------------------------------

def bootstrap_median(values, resamples=4000, seed=12345, level=0.95):
    """(median, low, high): the median with a 95 % percentile bootstrap interval."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return statistics.median(values), lo, hi


def pct(x):
    return "%+.2f%%" % (100.0 * x)


# -- main ----------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="where the model trains (default cuda; cpu: a smaller model, a smoke "
                        "test of the bench)")
    p.add_argument("--quick", action="store_true",
                   help="a short run (~20 s): fewer rounds, one warm-up round")
    p.add_argument("--rounds", type=int, default=100,
                   help="at most so many counted rounds (default 100; --quick 12)")
    p.add_argument("--budget-s", type=float, default=100.0,
                   help="seconds the rounds should take; the rounds are cut to fit the measured "
                        "step time (default 100; --quick 12)")
    p.add_argument("--min-rounds", type=int, default=8,
                   help="counted rounds at least, unless 1.5 x --budget-s is spent (default 8)")
    p.add_argument("--warmup-rounds", type=int, default=2,
                   help="rounds not counted, at the start (default 2; --quick 1)")
    p.add_argument("--block", type=int, default=10,
                   help="timed steps per block, a multiple of 10 (default 10); each block starts "
                        "with %d untimed steps" % LEAD_STEPS)
    p.add_argument("--loss-modes", action="store_true",
                   help="add interval 10 and 1 with instrument(..., record_loss=False)")
    p.add_argument("--layers", type=int, help="transformer layers (cuda 8, cpu 2)")
    p.add_argument("--d-model", type=int, help="model width (cuda 1024, cpu 128)")
    p.add_argument("--heads", type=int, help="attention heads (cuda 16, cpu 4)")
    p.add_argument("--seq", type=int, help="sequence length (cuda 1024, cpu 64)")
    p.add_argument("--batch", type=int, help="batch size (cuda 16, cpu 4)")
    p.add_argument("--vocab", type=int, help="vocabulary size (cuda 32768, cpu 1024)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast on cuda")
    p.add_argument("--seed", type=int, default=1, help="seeds the block order (1)")
    p.add_argument("--json", metavar="PATH", help="also write the results to PATH as JSON")
    a = p.parse_args(argv)
    if a.block < 10 or a.block % 10:
        p.error("--block must be a positive multiple of 10")
    if a.quick:
        a.rounds, a.budget_s, a.warmup_rounds, a.min_rounds = 12, 12.0, 1, min(a.min_rounds, 6)
    for name, value in zip(("layers", "d_model", "heads", "seq", "batch", "vocab"),
                           SIZES[a.device]):
        if getattr(a, name) is None:
            setattr(a, name, value)
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")

    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu_overhead.py: --device cuda but torch.cuda.is_available() is False "
              "(torch %s); skipped (exit 77). --device cpu runs the smoke test." %
              torch.__version__, file=sys.stderr)
        return 77
    device = torch.device(a.device)
    if a.device == "cuda":
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

        def sync():
            torch.cuda.synchronize()
    else:
        torch.set_num_threads(1)  # the other core is left to laggard's threads

        def sync():
            pass

    t_start = time.monotonic()
    trainer = Trainer(a, device)
    specs = list(MODES) + (LOSS_MODES if a.loss_modes else [])
    rng = random.Random(a.seed)
    order = list(range(len(specs)))
    rng.shuffle(order)  # the analyzers made in a random order
    modes = [None] * len(specs)
    for i in order:
        modes[i] = Mode(specs[i][0], specs[i][1], specs[i][2], trainer, sync)
    off = modes[0]

    # Warm-up, laggard off: kernels chosen, allocator filled; then the step time.
    for _ in range(5):
        off.an.begin_step(0)
        trainer.step(off.an)
        off.an.end_step()
    first_loss = float(trainer.last_loss)
    sync()
    n_warm = 10 if a.device == "cuda" else 5
    t0 = time.perf_counter()
    for _ in range(n_warm):
        trainer.step(off.an)
    sync()
    warm_step_s = (time.perf_counter() - t0) / n_warm
    per_round_s = len(modes) * (a.block + LEAD_STEPS) * warm_step_s
    rounds = max(a.min_rounds, min(a.rounds, int(a.budget_s / per_round_s)))
    print("laggard GPU overhead A/B (bench/gpu_overhead.py): step %.2f ms (laggard off, warm-up); "
          "%d modes x (%d + %d) steps per round; %d warm-up + %d rounds, ~%.0f s" % (
              warm_step_s * 1e3, len(modes), LEAD_STEPS, a.block, a.warmup_rounds, rounds,
              (a.warmup_rounds + rounds) * per_round_s), file=sys.stderr, flush=True)

    # The rounds: one block of every mode each, in a random order.
    blocks = {m.name: [] for m in modes}
    t_rounds = time.monotonic()
    stopped = False
    r = 0
    while r < a.warmup_rounds + rounds:
        turn = modes[:]
        rng.shuffle(turn)
        for m in turn:
            s = m.run(a.block)
            if r >= a.warmup_rounds:
                blocks[m.name].append(s)
        r += 1
        counted = r - a.warmup_rounds
        if counted >= 3 and time.monotonic() - t_rounds > 1.5 * a.budget_s and \
                counted < rounds:
            stopped = True  # far slower than the warm-up said: stop here
            break
    rounds_done = max(0, r - a.warmup_rounds)
    rounds_s = time.monotonic() - t_rounds
    last_loss = float(trainer.last_loss)

    for m in modes:
        m.close()  # drains outstanding device timings and samples
    elapsed = time.monotonic() - t_start

    # -- the table -------------------------------------------------------------------------------
    if a.device == "cuda":
        dev_name = "%s, CUDA %s" % (torch.cuda.get_device_name(0), torch.version.cuda)
    else:
        dev_name = "CPU (%d cores), 1 torch thread" % os.cpu_count()
    print("laggard GPU overhead A/B (bench/gpu_overhead.py), laggard %s" % laggard.__version__)
    print("  device: %s; Python %s, torch %s" % (dev_name, platform.python_version(),
                                                  torch.__version__))
    print("  training: decoder-only transformer, %d layers, d_model %d, %d heads, seq %d, batch "
          "%d, vocab %d (%.1fM parameters), %s, %s; step %.2f ms at warm-up (laggard off)" % (
              a.layers, a.d_model, a.heads, a.seq, a.batch, a.vocab, trainer.params / 1e6,
              "bf16 autocast" if trainer.autocast else "fp32",
              "fused AdamW" if a.device == "cuda" else "AdamW", warm_step_s * 1e3))
    print("  A/B: %d modes, blocks of %d untimed + %d timed steps, %d rounds (+%d warm-up) in a "
          "random order each%s; rounds %.0f s, %.0f s in all; loss %.3f after warm-up, %.3f at the "
          "end" % (
              len(modes), LEAD_STEPS, a.block, rounds_done, a.warmup_rounds,
              " (stopped early: over 1.5 x --budget-s)" if stopped else "", rounds_s, elapsed,
              first_loss, last_loss))
    print()

    base = blocks[off.name]
    results = {}
    widths = (max(len(m.name) for m in modes), 10, 32, 12, 18)
    hdr = ("mode", "step", "overhead: median [95% CI]", "backend", "sampled / emitted")
    line = "  ".join(h.ljust(w) for h, w in zip(hdr, widths))
    print(line)
    print("-" * len(line))
    checks = []
    for m in modes:
        step_ms = statistics.median(blocks[m.name]) / a.block * 1e3 if blocks[m.name] else \
            float("nan")
        res = {"block_s": blocks[m.name], "step_ms_median": step_ms, "on": m.on}
        if m is off:
            ov = "(reference)"
        elif rounds_done >= 2:
            diffs = [x / y - 1 for x, y in zip(blocks[m.name], base)]
            med, lo, hi = bootstrap_median(diffs)
            res.update(paired_diffs=diffs, overhead_median=med, ci_low=lo, ci_high=hi)
            ov = "%s [%s, %s]" % (pct(med), pct(lo), pct(hi))
        else:
            ov = "(too few rounds)"
        backend = samp = "-"
        if m.on:
            c = m.an.counters()
            res["counters"] = c
            res["backend_name"] = m.an.backend_name
            backend = m.an.backend_name
            samp = "%d / %d" % (c.get("sampled_steps", 0), c.get("samples_emitted", 0))
            bad = {k: c[k] for k in MUST_BE_ZERO if c.get(k)}
            if c.get("side_channel_broken"):
                bad["side_channel_broken"] = True
            checks.append(("%s: dropped/lost/error counters all 0" % m.name, not bad,
                           ", ".join("%s=%s" % kv for kv in sorted(bad.items()))))
            if a.device == "cuda":
                checks.append(("%s: backend cuda-event" % m.name,
                               m.an.backend_name == "cuda-event", m.an.backend_name))
        results[m.name] = res
        print("  ".join(s.ljust(w) for s, w in zip(
            (m.name, "%.3f ms" % step_ms, ov, backend, samp), widths)))
    print()
    print("overhead: the median over rounds of (block time of the mode / block time of off - 1), "
          "with a 95%% bootstrap interval over rounds; a block's time is host wall time between "
          "torch.cuda.synchronize() calls at its ends (the bench's own; none on the CPU). "
          "step: the median block time / %d." % a.block)
    print()
    print("counters of each \"on\" analyzer after close():")
    for m in modes:
        if m.on:
            c = results[m.name]["counters"]
            print("  %s: %s" % (m.name, " ".join(
                "%s=%s" % (k, ("%.1f" % v) if isinstance(v, float) else v)
                for k, v in c.items())))
    print()
    ok = all(c[1] for c in checks)
    for what, good, detail in checks:
        print("check: %s: %s%s" % (what, "ok" if good else "FAILED",
                                    "" if good or not detail else " (%s)" % detail))
    if AA in results and "overhead_median" in results[AA]:
        aa = results[AA]
        print("A/A (off against off): %s [%s, %s]: the interval %s zero" % (
            pct(aa["overhead_median"]), pct(aa["ci_low"]), pct(aa["ci_high"]),
            "holds" if aa["ci_low"] <= 0 <= aa["ci_high"] else
            "does NOT hold (the bench is biased in this run)"))
    if not math.isfinite(last_loss):
        ok = False
        print("check: the loss is finite: FAILED (%r)" % last_loss)

    if a.json:
        out = {
            "bench": "bench/gpu_overhead.py", "laggard": laggard.__version__,
            "python": platform.python_version(), "torch": torch.__version__,
            "device": dev_name,
            "config": {k: getattr(a, k) for k in ("device", "layers", "d_model", "heads", "seq",
                                                  "batch", "vocab", "block", "warmup_rounds",
                                                  "seed", "quick", "fp32")},
            "lead_steps": LEAD_STEPS, "rounds": rounds_done, "stopped_early": stopped,
            "warmup_step_ms": warm_step_s * 1e3, "rounds_s": rounds_s, "elapsed_s": elapsed,
            "loss_first": first_loss, "loss_last": last_loss,
            "modes": results,
            "checks": [{"check": w, "ok": g, "detail": d} for w, g, d in checks],
            "ok": ok,
        }
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print("results written to %s" % a.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
