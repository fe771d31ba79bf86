"""Training-thread cost of one step of the section API, cold, A/B between two laggard trees.

    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/step_cost_ab.py \
        --base /path/to/other/python [--rounds 400] [--turns 6]

The step timed is the training loop's whole use of laggard: begin_step, 8 `with
a.section(name):` blocks with empty bodies, end_step. Each is timed right after one real
training step (bench/cold_timing.py: an MLP's forward, backward, AdamW), which has pushed the
interpreter's and laggard's code and data out of the CPU caches. The Analyzer runs with interval
2 (even steps sampled, odd ones not), the host clock, no side channel, and the default resource
readings (resources=True) or none (--no-resources). A round also times an empty measurement
(the two clock reads alone, after the same training step); the figures printed are medians minus
that empty median. And a round times the floor: the same lines of the training loop against an
object whose begin_step, section and end_step are C builtins that do nothing, the section a
context manager whose __enter__/__exit__ are C builtins that do nothing: what the interpreter
itself costs for those lines, cold, whatever laggard does (the same code in both trees, so its
ratio shows the spread between processes). The kinds run in an order shuffled every round
(cold_timing.shuffled_rounds; the same orders in both trees): the training step does not evict
everything, and a fixed order favoured the kind that followed its like.

The two trees (this one, "new", and --base, "base": another checkout's python/ directory with its
own _core built) run in separate processes that take turns (--turns each, alternating), so that
a shared machine's drift hits both alike. Printed per kind (unsampled step, sampled step): each
tree's median ns with a 95 % bootstrap interval, the ratio new/base with its interval, and each
kind's median above the floor (laggard's own share).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cold_timing  # noqa: E402

STAGES = ["dataloader", "forward", "backward", "communication", "optimizer", "attention", "moe",
          "other"]
KINDS = ("empty", "floor", "unsampled", "sampled")


class _Nothing:
    """A context manager whose __enter__ and __exit__ are C builtins that do nothing."""

    __slots__ = ()
    __enter__ = type(None)
    __exit__ = "".format


class _Floor:
    """The training loop's laggard calls, each a C builtin that does nothing."""

    def __init__(self):
        self.begin_step = "".format
        self.section = dict.fromkeys(STAGES, _Nothing()).get
        self.end_step = type(None)


def worker(rounds, resources, dims, seed):
    """Runs in the process whose PYTHONPATH holds the tree under test; prints JSON times."""
    import tempfile

    import laggard

    train = cold_timing.training_step(dims)
    log_dir = tempfile.mkdtemp(prefix="laggard-stepab-")
    a = laggard.Analyzer(interval=2, timing="host", resources=resources, log_dir=log_dir,
                         world_size=1, rank=0)
    floor = _Floor()
    s0, s1, s2, s3, s4, s5, s6, s7 = STAGES
    pc = time.perf_counter_ns
    times = {kind: [] for kind in KINDS}
    step = 0
    for counted, kind in cold_timing.shuffled_rounds(KINDS, rounds, 20, seed):
        an = a
        if kind == "floor":
            an = floor
        elif kind != "empty" and (step % 2 == 0) != (kind == "sampled"):
            step += 1
        train()
        if kind == "empty":
            t0 = pc()
            t = pc() - t0
        else:  # the training loop's use of laggard, as a user writes it
            t0 = pc()
            an.begin_step(step)
            with an.section(s0):
                pass
            with an.section(s1):
                pass
            with an.section(s2):
                pass
            with an.section(s3):
                pass
            with an.section(s4):
                pass
            with an.section(s5):
                pass
            with an.section(s6):
                pass
            with an.section(s7):
                pass
            an.end_step()
            t = pc() - t0
            if an is a:
                step += 1
        if counted:
            times[kind].append(t)
    counters = a.counters()
    a.close()
    json.dump({"times": times, "samples_emitted": counters.get("samples_emitted")}, sys.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other tree's python/ directory")
    p.add_argument("--new", default=os.path.join(os.path.dirname(HERE), "python"),
                   help="this tree's python/ directory (default)")
    p.add_argument("--rounds", type=int, default=400, help="timed rounds per turn (400)")
    p.add_argument("--turns", type=int, default=6, help="turns per tree, alternating (6)")
    p.add_argument("--no-resources", action="store_true", help="resources=False")
    p.add_argument("--dims", default=cold_timing.DIMS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.rounds, not a.no_resources, a.dims, a.seed)
        return 0
    trees = {"new": a.new, "base": a.base}
    raw = {t: {kind: [] for kind in KINDS} for t in trees}
    loads = [cold_timing.load()]
    for turn in range(a.turns):
        for t in (("new", "base") if turn % 2 == 0 else ("base", "new")):
            env = dict(os.environ, PYTHONPATH=trees[t], OMP_NUM_THREADS="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--base", a.base,
                   "--rounds", str(a.rounds), "--dims", a.dims, "--seed", str(turn)]
            if a.no_resources:
                cmd.append("--no-resources")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/")
            if out.returncode != 0:
                raise SystemExit("%s: the worker failed (exit %d):\n%s" %
                                 (t, out.returncode, out.stderr[-3000:]))
            got = json.loads(out.stdout)
            if not got.get("samples_emitted"):
                raise SystemExit("%s: no step recorded" % t)
            # Each turn's times minus that turn's empty median (the timer, cold).
            empty = statistics.median(got["times"]["empty"])
            raw[t]["empty"] += got["times"]["empty"]
            for kind in KINDS[1:]:
                raw[t][kind] += [v - empty for v in got["times"][kind]]
        loads.append(cold_timing.load())
    print("step cost after a training step (bench/step_cost_ab.py): begin_step + 8 sections + "
          "end_step, resources=%s, %d turns x %d rounds per tree, MLP %s" %
          (not a.no_resources, a.turns, a.rounds, a.dims))
    print("load (1, 5, 15 min) at the start and after each turn: %s" % "; ".join(loads))
    print("empty measurement (timer, cold), median ns: new %.0f, base %.0f" %
          (statistics.median(raw["new"]["empty"]), statistics.median(raw["base"]["empty"])))
    print("%-10s %-26s %-26s %s" % ("kind", "new ns [95%]", "base ns [95%]", "new/base [95%]"))
    for kind in KINDS[1:]:
        n = cold_timing.bootstrap_median(raw["new"][kind])
        b = cold_timing.bootstrap_median(raw["base"][kind])
        r = cold_timing.bootstrap_ratio(raw["new"][kind], raw["base"][kind])
        print("%-10s %6.0f [%6.0f, %6.0f]     %6.0f [%6.0f, %6.0f]     %.2f [%.2f, %.2f]" %
              ((kind,) + n + b + r))
    # The floor is the same code in both trees: a ratio away from 1 there is the spread between
    # processes, which the other ratios carry as well.
    print("above the floor (laggard's own share), median ns: " + ", ".join(
        "%s new %.0f base %.0f" % (kind, statistics.median(raw["new"][kind]) -
                                   statistics.median(raw["new"]["floor"]),
                                   statistics.median(raw["base"][kind]) -
                                   statistics.median(raw["base"]["floor"]))
        for kind in KINDS[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
