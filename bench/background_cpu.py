"""CPU of laggard's own threads per sampled step, A/B between two code paths of laggard.

    .venv/bin/python bench/background_cpu.py --old OLD/python --new python
    ... --world 4 --steps 2000 --step-ms 10 --reps 3     # the defaults
    ... --quick                                            # a short smoke run

Real gloo ranks (torch.distributed, `--world` processes on this host) run a fixed step: 8
Analyzer sections, each a time.sleep of step_ms / 8, so the step takes the same wall time
whatever the machine's load (a busy machine lengthens a sleep only by a scheduling delay, the
same for every variant). Each code path is given by the PYTHONPATH of its ranks (`--old`,
`--new`), each rank uses the Analyzer API of its own version with the same options: the world
size from torch.distributed, the gloo side channel the Analyzer makes itself, a log dir in a
temporary directory, host-clock timing, and (new code) resources off, as the old code had none.

What is measured, on each rank, over the `--steps` steps after `--warmup` ones (Analyzer
construction and close are outside the window): the process's CPU time (CLOCK_PROCESS_CPUTIME_ID)
minus the training thread's (CLOCK_THREAD_CPUTIME_ID), i.e. the CPU of every other thread:
laggard's threads, and torch's and gloo's own. The same figure per wall second from the "off"
variant (the same ranks and steps, no Analyzer) times the variant's wall time is subtracted,
so that torch's and gloo's idle threads cancel; the rest, divided by the sampled steps, is
laggard's CPU per sampled step. A run gives the mean over its ranks (and rank 0's alone, the
analysis rank). Variants run in turn, `--reps` times (ABAB ...); the table gives the median
over runs with a 95 % bootstrap interval, and new/old with a bootstrap interval of the ratio of
medians.

Idle wake-ups: laggard's threads also wake on timers while nothing is to do, a cost per wall
second, so per step it grows with the step time. With `--slow-step-ms` (default 4x step_ms)
the interval-10 variants also run with that step time (steps scaled down to the same wall
time); CPU per sampled step = work + idle_rate * interval * step_ms, so the two step times
give idle_rate (CPU per wall second while training) and the idle share of the fast figure.

Per-thread breakdown (`--threads`): each rank also reads /proc/self/task/*/schedstat (ns of
CPU per thread) and reports the threads by name, summed over ranks and runs of a variant.
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SECTIONS = ("dataloader", "forward", "attention", "moe", "backward", "allreduce", "optimizer",
            "zero_grad")


# -- worker (one rank) ---------------------------------------------------------------------------

def _thread_cpu_ns():
    """{tid: (name, cpu ns)} of this process's threads (schedstat: ns, not clock ticks)."""
    out = {}
    base = "/proc/self/task"
    for tid in os.listdir(base):
        try:
            with open(os.path.join(base, tid, "schedstat")) as f:
                ns = int(f.read().split()[0])
            with open(os.path.join(base, tid, "comm")) as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread exited meanwhile
        out[int(tid)] = (name, ns)
    return out


def worker(args):
    import torch  # noqa: F401 (the Analyzer looks torch up in sys.modules)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    an = None
    tmp = tempfile.mkdtemp(prefix="laggard-bgcpu-")
    if args.variant != "off":
        import laggard
        import inspect

        kw = dict(enabled=True, interval=args.interval, log_dir=tmp, timing="host")
        if "resources" in inspect.signature(laggard.Analyzer.__init__).parameters:
            kw["resources"] = False  # the old code had no resource thread
        an = laggard.Analyzer(**kw)
    per_section = args.step_ms / 1000.0 / len(SECTIONS)

    def step(i):
        if an is None:
            for _ in SECTIONS:
                time.sleep(per_section)
            return
        an.begin_step(i)
        for name in SECTIONS:
            with an.section(name):
                time.sleep(per_section)
        an.end_step()

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    w0, p0, t0 = time.perf_counter(), time.process_time(), time.thread_time()
    th0 = _thread_cpu_ns() if args.threads else {}
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    w1, p1, t1 = time.perf_counter(), time.process_time(), time.thread_time()
    th1 = _thread_cpu_ns() if args.threads else {}
    counters = an.counters() if an is not None else {}
    dist.barrier()
    if an is not None:
        an.close()
    dist.barrier()
    dist.destroy_process_group()
    threads = {}
    main_tid = None
    import threading
    main_tid = threading.main_thread().native_id
    for tid, (name, ns) in th1.items():
        if tid == main_tid:
            continue
        before = th0.get(tid, (name, 0))[1]
        threads[name] = threads.get(name, 0) + (ns - before)
    interval = args.interval if args.variant != "off" else 0
    sampled = 0 if not interval else sum(1 for i in range(args.warmup, args.warmup + args.steps)
                                         if i % interval == 0)
    print("RESULT " + json.dumps(dict(
        rank=rank, wall_s=w1 - w0, other_cpu_s=(p1 - p0) - (t1 - t0), main_cpu_s=t1 - t0,
        sampled=sampled, threads_ns=threads,
        counters={k: v for k, v in counters.items() if isinstance(v, (int, float))})),
        flush=True)


# -- driver ---------------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_variant(args, variant, path, interval, step_ms, steps):
    port = _free_port()
    procs = []
    for r in range(args.world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.world), LOCAL_RANK=str(r), OMP_NUM_THREADS="1",
                   PYTHONPATH=path or "")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--variant", variant,
               "--interval", str(interval), "--step-ms", str(step_ms), "--steps", str(steps),
               "--warmup", str(args.warmup)] + (["--threads"] if args.threads else [])
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=args.timeout_s)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            raise RuntimeError("%s rank failed (rc %s):\n%s" % (variant, p.returncode, err[-3000:]))
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return sorted(results, key=lambda r: r["rank"])


def bootstrap(values, stat=statistics.median, n=2000, rng=None):
    rng = rng or random.Random(1)
    draws = sorted(stat([rng.choice(values) for _ in values]) for _ in range(n))
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]


def ratio_interval(a, b, n=2000):
    rng = random.Random(2)
    draws = sorted(statistics.median([rng.choice(a) for _ in a]) /
                   statistics.median([rng.choice(b) for _ in b]) for _ in range(n))
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", help="PYTHONPATH of the old laggard (its python/ dir)")
    ap.add_argument("--new", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "python"), help="PYTHONPATH of the new laggard")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--slow-step-ms", type=float, default=None,
                    help="step time of the idle-share runs (default 4x --step-ms; 0: none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", action="store_true", help="per-thread breakdown")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write every run's results here")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="off", help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=int, default=10, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.steps, args.warmup, args.reps = 300, 20, 1
    slow = 4 * args.step_ms if args.slow_step_ms is None else args.slow_step_ms
    paths = {"new": os.path.abspath(args.new)}
    if args.old:
        paths["old"] = os.path.abspath(args.old)
    plan = [("off", None, 0, args.step_ms, args.steps)]
    for name in paths:
        for interval in (10, 1):
            plan.append((name, paths[name], interval, args.step_ms, args.steps))
        if slow:
            plan.append((name, paths[name], 10, slow,
                         max(10, int(round(args.steps * args.step_ms / slow)))))
    with open("/proc/loadavg") as f:
        print("load before: %s" % " ".join(f.read().split()[:3]))
    runs = {}
    for rep in range(args.reps):
        order = plan if rep % 2 == 0 else plan[::-1]  # ABAB: each variant early and late
        for variant, path, interval, step_ms, steps in order:
            key = (variant, interval, step_ms)
            t = time.time()
            res = run_variant(args, variant, path, interval, step_ms, steps)
            runs.setdefault(key, []).append(res)
            print("  rep %d %-3s interval %2d step %5.1f ms: %.1f s" %
                  (rep, variant, interval, step_ms, time.time() - t), flush=True)
    with open("/proc/loadavg") as f:
        print("load after: %s" % " ".join(f.read().split()[:3]))

    # The off variant's other-thread CPU per wall second, per rank position (rank 0 is no
    # different there): the median over its runs.
    off_runs = runs[("off", 0, args.step_ms)]
    off_rate = statistics.median(sum(r["other_cpu_s"] for r in res) / sum(r["wall_s"] for r in res)
                                 for res in off_runs)
    print("off: other threads' CPU %.2f ms per wall s per rank (torch/gloo's own), step %.2f ms"
          % (off_rate * 1e3, statistics.median(
              statistics.mean(r["wall_s"] for r in res) for res in off_runs) /
             args.steps * 1e3))

    def per_sampled_us(res, ranks=None):
        sel = [r for r in res if ranks is None or r["rank"] in ranks]
        net = sum(r["other_cpu_s"] - off_rate * r["wall_s"] for r in sel)
        return net / sum(r["sampled"] for r in sel) * 1e6

    table = {}
    print("\nlaggard's threads, CPU per sampled step (µs), net of off; median over %d runs "
          "[95 %% bootstrap]; world %d, %d steps" % (args.reps, args.world, args.steps))
    print("%-5s %8s %8s  %-24s %-24s %s" % ("code", "interval", "step ms", "mean of ranks",
                                            "rank 0 (analysis)", "training thread CPU/step"))
    for (variant, interval, step_ms), resl in runs.items():
        if variant == "off":
            continue
        allr = [per_sampled_us(res) for res in resl]
        r0 = [per_sampled_us(res, {0}) for res in resl]
        main_us = statistics.median(
            sum(r["main_cpu_s"] for r in res) / len(res) for res in resl)
        nsteps = [p for p in plan if p[0] == variant and p[2] == interval and p[3] == step_ms][0][4]
        table[(variant, interval, step_ms)] = allr
        lo, hi = bootstrap(allr)
        lo0, hi0 = bootstrap(r0)
        print("%-5s %8d %8.1f  %6.1f [%6.1f, %6.1f]   %6.1f [%6.1f, %6.1f]   %.1f µs" %
              (variant, interval, step_ms, statistics.median(allr), lo, hi,
               statistics.median(r0), lo0, hi0, main_us / nsteps * 1e6))
    if "old" in paths:
        print("\nnew / old (median of runs, 95 % bootstrap):")
        for interval, step_ms in ((10, args.step_ms), (1, args.step_ms), (10, slow)):
            a, b = table.get(("new", interval, step_ms)), table.get(("old", interval, step_ms))
            if a and b:
                lo, hi = ratio_interval(a, b)
                print("  interval %2d step %5.1f ms: %.2f [%.2f, %.2f]" %
                      (interval, step_ms, statistics.median(a) / statistics.median(b), lo, hi))
    if slow:
        print("\nidle wake-ups (from step %.0f vs %.0f ms, interval 10):" % (args.step_ms, slow))
        for name in paths:
            fast = statistics.median(table[(name, 10, args.step_ms)])
            slo = statistics.median(table[(name, 10, slow)])
            rate = (slo - fast) / (10 * (slow - args.step_ms) / 1e3)  # µs per wall s
            print("  %-3s %.0f µs CPU per wall s; at %.0f ms steps %.1f of %.1f µs per sampled "
                  "step (%.0f %%)" % (name, rate, args.step_ms, rate * 10 * args.step_ms / 1e3,
                                       fast, 100 * rate * 10 * args.step_ms / 1e3 / fast
                                       if fast else float("nan")))
    if args.threads:
        print("\nper thread (CPU µs per sampled step and rank, gross, pooled over runs; off: per step):")
        for (variant, interval, step_ms), resl in runs.items():
            tot, sampled = {}, 0
            for res in resl:
                for r in res:
                    sampled += r["sampled"] or args.steps
                    for name, ns in r["threads_ns"].items():
                        tot[name] = tot.get(name, 0) + ns
            items = sorted(tot.items(), key=lambda kv: -kv[1])[:8]
            print("  %-3s i%-2d %5.1f ms: %s" % (variant, interval, step_ms, ", ".join(
                "%s %.1f" % (n, ns / 1e3 / sampled) for n, ns in items)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(variant=k[0], interval=k[1], step_ms=k[2], runs=v)
                       for k, v in runs.items()], f)


if __name__ == "__main__":
    main()
