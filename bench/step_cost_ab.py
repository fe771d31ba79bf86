"""Training-thread cost of one step of the section API, cold, A/B between two laggard trees.

    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/step_cost_ab.py \
        --base /path/to/other/python [--rounds 400] [--turns 6]

The step timed is the training loop's whole use of laggard: begin_step, 8 `with
a.section(name):` blocks with empty bodies, end_step. Each is timed right after one real
training step (the MLP of bench/cold_calls.py: forward, backward, AdamW), which has pushed the
interpreter's and laggard's code and data out of the CPU caches. The Analyzer runs with interval
2 (even steps sampled, odd ones not), the host clock, no side channel, and the default resource
readings (resources=True) or none (--no-resources). A round also times an empty measurement
(the two clock reads alone, after the same training step); the figures printed are medians minus
that empty median.

The two trees (this one, "new", and --base, "base": another checkout's python/ directory with its
own _core built) run in separate processes that take turns (--turns each, alternating), so that
a shared machine's drift hits both alike. Printed per kind (unsampled step, sampled step): each
tree's median ns with a 95 % bootstrap interval, and the ratio new/base with its interval.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ["dataloader", "forward", "backward", "communication", "optimizer", "attention", "moe",
          "other"]


def worker(rounds, resources, dims):
    """Runs in the process whose PYTHONPATH holds the tree under test; prints JSON times."""
    import tempfile

    import torch
    import torch.nn as nn

    import laggard

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = []
    for i, (d0, d1) in enumerate(zip(dims[:-1], dims[1:])):
        layers += [nn.Linear(d0, d1)] + ([nn.ReLU()] if i < len(dims) - 2 else [])
    model = nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, dims[0]), torch.randn(32, dims[-1])
    mse = nn.functional.mse_loss
    log_dir = tempfile.mkdtemp(prefix="laggard-stepab-")
    a = laggard.Analyzer(interval=2, timing="host", resources=resources, log_dir=log_dir,
                         world_size=1, rank=0)
    s0, s1, s2, s3, s4, s5, s6, s7 = STAGES
    pc = time.perf_counter_ns
    times = {"empty": [], "unsampled": [], "sampled": []}
    step = 0
    for r in range(rounds + 20):
        for kind in ("empty", "unsampled", "sampled"):
            opt.zero_grad(set_to_none=True)
            mse(model(x), y).backward()
            opt.step()
            if kind == "empty":
                t0 = pc()
                t = pc() - t0
            else:
                if (step % 2 == 0) != (kind == "sampled"):
                    step += 1
                t0 = pc()
                a.begin_step(step)
                with a.section(s0):
                    pass
                with a.section(s1):
                    pass
                with a.section(s2):
                    pass
                with a.section(s3):
                    pass
                with a.section(s4):
                    pass
                with a.section(s5):
                    pass
                with a.section(s6):
                    pass
                with a.section(s7):
                    pass
                a.end_step()
                t = pc() - t0
                step += 1
            if r >= 20:
                times[kind].append(t)
    counters = a.counters()
    a.close()
    json.dump({"times": times, "samples_emitted": counters.get("samples_emitted")}, sys.stdout)


def bootstrap_median(xs, n=2000, rng=None):
    rng = rng or random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return statistics.median(xs), meds[int(0.025 * n)], meds[int(0.975 * n)]


def bootstrap_ratio(a, b, n=2000, rng=None):
    rng = rng or random.Random(2)
    rs = sorted(statistics.median(rng.choices(a, k=len(a))) /
                statistics.median(rng.choices(b, k=len(b))) for _ in range(n))
    return statistics.median(a) / statistics.median(b), rs[int(0.025 * n)], rs[int(0.975 * n)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other tree's python/ directory")
    p.add_argument("--new", default=os.path.join(os.path.dirname(HERE), "python"),
                   help="this tree's python/ directory (default)")
    p.add_argument("--rounds", type=int, default=400, help="timed rounds per turn (400)")
    p.add_argument("--turns", type=int, default=6, help="turns per tree, alternating (6)")
    p.add_argument("--no-resources", action="store_true", help="resources=False")
    p.add_argument("--dims", default="128,256,256,16")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    dims = [int(d) for d in a.dims.split(",")]
    if a.worker:
        worker(a.rounds, not a.no_resources, dims)
        return 0
    trees = {"new": a.new, "base": a.base}
    raw = {t: {"empty": [], "unsampled": [], "sampled": []} for t in trees}
    for turn in range(a.turns):
        for t in (("new", "base") if turn % 2 == 0 else ("base", "new")):
            env = dict(os.environ, PYTHONPATH=trees[t], OMP_NUM_THREADS="1")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--base", a.base,
                   "--rounds", str(a.rounds), "--dims", a.dims]
            if a.no_resources:
                cmd.append("--no-resources")
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True,
                                 cwd="/")
            got = json.loads(out.stdout)
            if not got.get("samples_emitted"):
                raise SystemExit("%s: no step recorded" % t)
            # Each turn's times minus that turn's empty median (the timer, cold).
            empty = statistics.median(got["times"]["empty"])
            raw[t]["empty"] += got["times"]["empty"]
            for kind in ("unsampled", "sampled"):
                raw[t][kind] += [v - empty for v in got["times"][kind]]
    print("step cost after a training step (bench/step_cost_ab.py): begin_step + 8 sections + "
          "end_step, resources=%s, %d turns x %d rounds per tree, MLP %s" %
          (not a.no_resources, a.turns, a.rounds, a.dims))
    print("load: %s" % (open("/proc/loadavg").read().split()[:3],))
    print("empty measurement (timer, cold), median ns: new %.0f, base %.0f" %
          (statistics.median(raw["new"]["empty"]), statistics.median(raw["base"]["empty"])))
    print("%-10s %-26s %-26s %s" % ("kind", "new ns [95%]", "base ns [95%]", "new/base [95%]"))
    for kind in ("unsampled", "sampled"):
        n = bootstrap_median(raw["new"][kind])
        b = bootstrap_median(raw["base"][kind])
        r = bootstrap_ratio(raw["new"][kind], raw["base"][kind])
        print("%-10s %6.0f [%6.0f, %6.0f]     %6.0f [%6.0f, %6.0f]     %.2f [%.2f, %.2f]" %
              ((kind,) + n + b + r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
