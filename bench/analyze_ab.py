#!/usr/bin/env python3
"""A/B timing of `laggard analyze` end to end: two builds of the program on the same run directory.

Usage: python3 bench/analyze_ab.py OLD_PROGRAM NEW_PROGRAM RUN_DIR [--rounds 15]
           [--preset default] [--cpus 0 | 0,1 | all] [--extra ARG ...]
  e.g. python3 bench/make_synthetic_run.py /tmp/big64 64 4800          (~210 MB)
       python3 bench/analyze_ab.py /tmp/old/laggard build/tools/laggard /tmp/big64 --cpus 0

Each round runs both programs once, in a random order (so that drifts of a shared machine hit
both alike), as `PROGRAM analyze -q [--preset P] RUN_DIR`, pinned with taskset to the CPUs given
(`all`: not pinned). It prints, per program, the median wall time and CPU time (user + system)
with 95 % bootstrap intervals of the median, the throughput (rank-file bytes / median wall time),
and the ratio new / old of wall and CPU time (median of the per-round ratios, with its interval).
The two programs' outputs must be identical (checked on the first round); nothing is written.
"""
import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import time


def run_once(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd), out.returncode, out.stderr.decode()))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def median_interval(values, rng, resamples=2000):
    """Median and a 95 % percentile-bootstrap interval of the median."""
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("run_dir")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--preset", default=None)
    p.add_argument("--cpus", default="all", help="taskset CPU list, or 'all' (not pinned)")
    p.add_argument("--extra", nargs="*", default=[], help="more arguments for both programs")
    a = p.parse_args()

    size = sum(os.path.getsize(os.path.join(a.run_dir, f)) for f in os.listdir(a.run_dir)
               if f.startswith("rank-") and f.endswith(".jsonl"))
    args = ["analyze", "-q"] + (["--preset", a.preset] if a.preset else []) + a.extra
    pin = [] if a.cpus == "all" else ["taskset", "-c", a.cpus]
    cmds = {"old": pin + [a.old] + args + [a.run_dir], "new": pin + [a.new] + args + [a.run_dir]}
    rng = random.Random(1)
    results = {"old": [], "new": []}
    outputs = {}
    for r in range(a.rounds):
        order = ["old", "new"]
        rng.shuffle(order)
        for name in order:
            wall, cpu, out = run_once(cmds[name])
            results[name].append((wall, cpu))
            outputs.setdefault(name, out)
        if r == 0 and outputs["old"] != outputs["new"]:
            sys.exit("the two programs print different results")
    load = os.getloadavg()
    print("laggard analyze A/B: %d rounds, %s, cpus %s, %.1f MB, load average %.1f %.1f %.1f" % (
        a.rounds, "preset " + a.preset if a.preset else "defaults", a.cpus, size / 1e6, *load))
    for name in ("old", "new"):
        wall = [w for w, _ in results[name]]
        cpu = [c for _, c in results[name]]
        wm, wl, wh = median_interval(wall, rng)
        cm, cl, ch = median_interval(cpu, rng)
        print("  %-3s wall %.3f s [%.3f, %.3f]  cpu %.3f s [%.3f, %.3f]  %4.0f MB/s wall, "
              "%4.0f MB/s cpu  (%s)" % (name, wm, wl, wh, cm, cl, ch, size / 1e6 / wm,
                                         size / 1e6 / cm, cmds[name][len(pin)]))
    for i, what in ((0, "wall"), (1, "cpu")):
        ratios = [n[i] / o[i] for o, n in zip(results["old"], results["new"])]
        m, lo, hi = median_interval(ratios, rng)
        print("  new / old %s time: %.3f [%.3f, %.3f]" % (what, m, lo, hi))


if __name__ == "__main__":
    main()
