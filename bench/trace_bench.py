#!/usr/bin/env python3
"""laggard and Holistic Trace Analysis (HTA) on the same profiler-trace directories: wall time,
CPU time, throughput and peak memory, side by side.

For each size (--steps) it makes a trace directory with tests/data/make_kineto_traces.py (8 ranks
of a simulated DDP job on GPUs, rank 5's forward 1.3x slower and rank 2's DataLoader stalled from
step 10; NCCL's legacy kernel names, which HTA's straggler analysis looks for), then times

  laggard analyze -q DIR      the detector over every step (reads every trace)
  laggard timeline -q DIR     the timeline bubbles (reads every trace)
  HTA                         TraceAnalysis(trace_dir=DIR) (load), get_idle_time_breakdown over
                              all ranks, get_temporal_breakdown, get_potential_stragglers

each --repeat times (HTA once: it takes minutes), sampling the resident memory of the process and
all its children every 50 ms (HTA parses in a pool of processes, which the parent's own peak
RSS would miss). HTA runs only up to --hta-max-steps and only when --hta-python can import it:

  python3 -m venv .venv-hta && .venv-hta/bin/pip install -r bench/requirements-hta.txt
  python3 bench/trace_bench.py --hta-python .venv-hta/bin/python [--steps 100,300,900]

docs/performance.md ("Profiler traces against HTA") has the figures and the machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = os.path.join(ROOT, "tests", "data", "make_kineto_traces.py")

HTA_SCRIPT = r"""
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
ranks = sorted(ta.t.get_all_traces().keys())
idle = ta.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]
t2 = time.perf_counter()
ta.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
try:
    stragglers = ta.get_potential_stragglers(num_candidates=2)
except Exception as e:  # reported, not fatal: the timing of the rest stands
    stragglers = "failed: %r" % (e,)
t4 = time.perf_counter()
host_wait = idle[idle["idle_category"] == "host_wait"].groupby("rank")["idle_time"].sum()
print(json.dumps({"load_s": t1 - t0, "idle_s": t2 - t1, "temporal_s": t3 - t2,
                  "stragglers_s": t4 - t3, "stragglers": str(stragglers),
                  "host_wait_ms": {str(k): v / 1000.0 for k, v in host_wait.items()}}))
"""


def tree_rss_kb(pid):
    """Resident memory of pid and its descendants (kB), from /proc."""
    parent = {}
    rss = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(entry)] = int(fields[1])
            with open("/proc/%s/statm" % entry) as f:
                rss[int(entry)] = int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, IndexError, ValueError):
            continue
    total = 0
    for p in rss:
        q = p
        while q and q != pid:
            q = parent.get(q, 0)
        if q == pid:
            total += rss[p]
    return total


def measure(cmd):
    """(wall s, CPU s of the tree, peak tree RSS MB, stdout) of one run."""
    start = time.perf_counter()
    before = os.times()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss_kb(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system -
                                                          before.children_system)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (cmd[0], proc.returncode, err[-2000:]))
    return wall, cpu, peak / 1024.0, out


def dir_mb(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) / 1e6


def make(out, steps, ranks, kernels, gzip):
    path = os.path.join(out, "ranks-%d-steps-%d%s" % (ranks, steps, "-gz" if gzip else ""))
    if not os.path.isdir(path):
        cmd = [sys.executable, GENERATOR, path, "--ranks", str(ranks), "--steps", str(steps),
               "--kernels", str(kernels), "--slow-rank", "5", "--data-stall-rank", "2",
               "--fault-from-step", "10", "--nccl-kernel", "legacy"]
        if gzip:
            cmd.append("--gzip")
        subprocess.run(cmd, check=True)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="/tmp/laggard-trace-bench")
    p.add_argument("--steps", default="100,300,900")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--kernels", type=int, default=40)
    p.add_argument("--gzip", action="store_true", help="also the same traces gzip-compressed")
    p.add_argument("--laggard", default=os.path.join(ROOT, "build", "tools", "laggard"))
    p.add_argument("--hta-python", default="", help="a Python that can import hta")
    p.add_argument("--hta-max-steps", type=int, default=300)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    hta = bool(args.hta_python) and subprocess.run(
        [args.hta_python, "-c", "import hta"], stderr=subprocess.DEVNULL).returncode == 0
    if args.hta_python and not hta:
        print("note: %s cannot import hta: HTA is left out" % args.hta_python)
    rows = []
    for steps in [int(s) for s in args.steps.split(",")]:
        for gz in ([False, True] if args.gzip else [False]):
            path = make(args.out, steps, args.ranks, args.kernels, gz)
            mb = dir_mb(path)
            for name, cmd in (("laggard analyze", [args.laggard, "analyze", "-q", path]),
                              ("laggard timeline", [args.laggard, "timeline", "-q", path])):
                runs = [measure(cmd) for _ in range(args.repeat)]
                walls = sorted(r[0] for r in runs)
                rows.append({"size_mb": mb, "steps": steps, "gzip": gz, "tool": name,
                             "wall_s": statistics.median(walls), "wall_min": walls[0],
                             "wall_max": walls[-1],
                             "cpu_s": statistics.median(r[1] for r in runs),
                             "peak_mb": max(r[2] for r in runs)})
                print(json.dumps(rows[-1]), flush=True)
            if hta and steps <= args.hta_max_steps and not gz:
                wall, cpu, peak, out = measure([args.hta_python, "-c", HTA_SCRIPT, path])
                detail = json.loads(out.strip().splitlines()[-1])
                rows.append({"size_mb": mb, "steps": steps, "gzip": gz, "tool": "HTA",
                             "wall_s": wall, "wall_min": wall, "wall_max": wall, "cpu_s": cpu,
                             "peak_mb": peak, "detail": detail})
                print(json.dumps(rows[-1]), flush=True)
    print("\n| traces | tool | wall s (median, min-max) | CPU s | MB/s (wall) | peak RSS MB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| %d ranks x %d steps, %.0f MB%s | %s | %.2f (%.2f-%.2f) | %.2f | %.0f | %.0f |" % (
            args.ranks, r["steps"], r["size_mb"], " gz" if r["gzip"] else "", r["tool"],
            r["wall_s"], r["wall_min"], r["wall_max"], r["cpu_s"], r["size_mb"] / r["wall_s"],
            r["peak_mb"]))
    base = {(r["steps"], r["gzip"]): r for r in rows if r["tool"] == "laggard analyze"}
    for r in rows:
        if r["tool"] == "HTA":
            b = base[(r["steps"], r["gzip"])]
            print("HTA / laggard analyze at %d steps: wall %.1fx, peak memory %.1fx" % (
                r["steps"], r["wall_s"] / b["wall_s"], r["peak_mb"] / b["peak_mb"]))


if __name__ == "__main__":
    main()
