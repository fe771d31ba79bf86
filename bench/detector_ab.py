#!/usr/bin/env python3
"""A/B of two builds of bench/detector_bench.cc in one run.

Usage: python3 bench/detector_ab.py OLD_BENCH NEW_BENCH [--filter REGEX] [--rounds 7]
           [--min-time 0.3]
  e.g. cp build/bench/detector_bench /tmp/detector_bench.old   (before a change)
       python3 bench/detector_ab.py /tmp/detector_bench.old build/bench/detector_bench

Each round runs both programs once, in a random order (drifts of a shared machine hit both
alike), with --benchmark_format=json. Per benchmark it prints the median CPU time of each program
with a 95 % bootstrap interval of the median, and the median of the per-round ratios new / old
with its interval. CPU time, not wall time: load on a shared machine disturbs it least.
"""
import argparse
import json
import random
import statistics
import subprocess


def interval(values, rng):
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return meds[50], meds[1949]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--filter", default="BM_Observe/[0123]/0$")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", default="0.3")
    args = ap.parse_args()
    cpu = {args.old: {}, args.new: {}}
    unit = {}
    rng = random.Random(1)
    for _ in range(args.rounds):
        order = [args.old, args.new]
        rng.shuffle(order)
        for prog in order:
            out = subprocess.run([prog, f"--benchmark_filter={args.filter}",
                                  f"--benchmark_min_time={args.min_time}",
                                  "--benchmark_format=json"],
                                 capture_output=True, text=True, check=True).stdout
            for b in json.loads(out)["benchmarks"]:
                cpu[prog].setdefault(b["name"], []).append(b["cpu_time"])
                unit[b["name"]] = b["time_unit"]
    print(f"detector_bench A/B: {args.rounds} rounds, CPU time per iteration, median [95 % interval]")
    for name, old in cpu[args.old].items():
        new = cpu[args.new][name]
        ratios = [n / o for o, n in zip(old, new)]
        (a, b), (c, d), (e, f) = interval(old, rng), interval(new, rng), interval(ratios, rng)
        print(f"  {name:20s} old {statistics.median(old):6.2f} [{a:.2f}, {b:.2f}]"
              f"  new {statistics.median(new):6.2f} [{c:.2f}, {d:.2f}]"
              f" {unit[name]}  new/old {statistics.median(ratios):.3f} [{e:.3f}, {f:.3f}]")


if __name__ == "__main__":
    main()
