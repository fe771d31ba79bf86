#!/usr/bin/env python3
"""A/B timing of `laggard analyze` end to end: two builds of the program on the same run directory.

Usage: python3 bench/analyze_ab.py OLD_PROGRAM NEW_PROGRAM RUN_DIR [--rounds 15]
           [--preset default] [--cpus 0 | 0,1 | all] [--cold] [--extra ARG ...]
  e.g. python3 bench/make_synthetic_run.py /tmp/big64 64 4800          (~210 MB)
       python3 bench/analyze_ab.py /tmp/old/laggard build/tools/laggard /tmp/big64 --cpus 0

Each round runs both programs once, in a random order (so that drifts of a shared machine hit
both alike), as `PROGRAM analyze -q [--preset P] RUN_DIR`, pinned with taskset to the CPUs given
(`all`: not pinned). It prints, per program, the median wall time, user CPU time and CPU time
(user + system), each with a 95 % bootstrap interval of the median, the throughput (the run's
bytes, rank logs or traces, over the median wall and CPU times: MB per CPU-second is the per-core
figure that load on a shared machine disturbs least), the main thread's blocked time (wall time
neither on a CPU nor queued for one: with --cold, mostly waiting for the disk), the median peak RSS, and the ratio new / old
of wall and CPU time (median of the per-round ratios, with its interval).
--cold: the page cache is dropped before every run (root only: /proc/sys/vm/drop_caches), so the
files are read from the disk.
The two programs' outputs must be identical (checked on every round); nothing is written.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run_measured(cmd, cold):
    """(wall s, user s, user + system s, peak RSS KB, blocked s, stdout) of one run.

    blocked: the main thread's wall time neither on a CPU nor waiting for one (reads from the
    disk, waits for the program's other threads), from its /proc/PID/schedstat read while it is
    a zombie; the figure that the load of a shared machine disturbs least when reads are cold."""
    if cold:
        drop_caches()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    err = proc.stderr.read()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    wall = time.perf_counter() - t0
    try:
        with open("/proc/%d/schedstat" % proc.pid) as f:
            on_cpu, queued = (int(x) / 1e9 for x in f.read().split()[:2])
        blocked = max(0.0, wall - on_cpu - queued)
    except OSError:
        blocked = float("nan")
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("%s failed (%d): %s" % (" ".join(cmd), code, err.decode()))
    return (wall, usage.ru_utime, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, blocked,
            out)


def median_interval(values, rng, resamples=2000):
    """Median and a 95 % percentile-bootstrap interval of the median."""
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def run_bytes(run_dir):
    total = 0
    for f in os.listdir(run_dir):
        if (f.startswith("rank-") and f.endswith(".jsonl")) or f.endswith((".json", ".json.gz")):
            total += os.path.getsize(os.path.join(run_dir, f))
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("run_dir")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--preset", default=None)
    p.add_argument("--cpus", default="all", help="taskset CPU list, or 'all' (not pinned)")
    p.add_argument("--cold", action="store_true", help="drop the page cache before every run")
    p.add_argument("--extra", nargs="*", default=[], help="more arguments for both programs")
    a = p.parse_args()

    size = run_bytes(a.run_dir)
    args = ["analyze", "-q"] + (["--preset", a.preset] if a.preset else []) + a.extra
    pin = [] if a.cpus == "all" else ["taskset", "-c", a.cpus]
    cmds = {"old": pin + [a.old] + args + [a.run_dir], "new": pin + [a.new] + args + [a.run_dir]}
    rng = random.Random(1)
    results = {"old": [], "new": []}
    load_before = os.getloadavg()
    for r in range(a.rounds):
        order = ["old", "new"]
        rng.shuffle(order)
        outputs = {}
        for name in order:
            *figures, out = run_measured(cmds[name], a.cold)
            results[name].append(figures)
            outputs[name] = out
        if outputs["old"] != outputs["new"]:
            sys.exit("the two programs print different results (round %d)" % (r + 1))
    load = os.getloadavg()
    print("laggard analyze A/B: %d rounds, %s, cpus %s, %s cache, %.1f MB in %s, load average "
          "%.1f %.1f %.1f before, %.1f %.1f %.1f after" % (
              a.rounds, "preset " + a.preset if a.preset else "defaults", a.cpus,
              "cold" if a.cold else "warm", size / 1e6, a.run_dir, *load_before, *load))
    for name in ("old", "new"):
        rows = results[name]
        wm, wl, wh = median_interval([x[0] for x in rows], rng)
        um, ul, uh = median_interval([x[1] for x in rows], rng)
        cm, cl, ch = median_interval([x[2] for x in rows], rng)
        bm, bl, bh = median_interval([x[4] for x in rows], rng)
        rss = statistics.median(x[3] for x in rows)
        print("  %-3s wall %.3f s [%.3f, %.3f]  user %.3f s [%.3f, %.3f]  cpu %.3f s [%.3f, %.3f]"
              "  blocked %.3f s [%.3f, %.3f]" % (name, wm, wl, wh, um, ul, uh, cm, cl, ch, bm, bl, bh))
        print("      %5.0f MB/s wall [%.0f, %.0f]  %5.0f MB per CPU-second [%.0f, %.0f]  "
              "peak RSS %.1f MB  (%s)" % (size / 1e6 / wm, size / 1e6 / wh, size / 1e6 / wl,
                                          size / 1e6 / cm, size / 1e6 / ch, size / 1e6 / cl,
                                          rss / 1024, cmds[name][len(pin)]))
    for i, what in ((0, "wall"), (2, "cpu"), (4, "blocked")):
        ratios = [n[i] / o[i] for o, n in zip(results["old"], results["new"]) if o[i] > 0]
        if not ratios:
            continue
        m, lo, hi = median_interval(ratios, rng)
        print("  new / old %s time: %.3f [%.3f, %.3f]" % (what, m, lo, hi))


if __name__ == "__main__":
    main()
