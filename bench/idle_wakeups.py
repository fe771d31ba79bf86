"""Wake-ups of laggard's threads while there is nothing to do, A/B between two laggard trees.

    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/idle_wakeups.py \
        --base /path/to/other/python [--seconds 5]

An Analyzer (one rank, host clock, a rank log in a temporary directory) records 20 steps at
interval 10, then the training thread sleeps: nothing is pushed, nothing is due. Measured over
--seconds after 3 s of that (the log writer looks for samples at 10 Hz while they come, and
sleeps until the next push once it has found none for 2 s).
Each thread's voluntary context switches (/proc/self/task/*/status) over that sleep are its
wake-ups. Printed per tree, with resources off and on: wake-ups per second of each thread other
than the main one (by name where it has one) and their sum.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def snapshot():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
            with open("/proc/self/task/%s/status" % tid) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        out[tid] = (name, int(line.split()[1]))
        except OSError:
            pass
    return out


def worker(seconds, resources):
    import laggard

    a = laggard.Analyzer(interval=10, timing="host", resources=resources,
                         log_dir=tempfile.mkdtemp(prefix="laggard-idle-"), world_size=1, rank=0)
    for step in range(20):
        a.begin_step(step)
        with a.section("forward"):
            pass
        a.end_step()
    # The last samples written and analysed, and 2 s without a sample (the log writer polls at
    # 10 Hz until then, bench docstring).
    time.sleep(3.0)
    s0, t0 = snapshot(), time.monotonic()
    time.sleep(seconds)
    s1, dt = snapshot(), time.monotonic() - t0
    main = str(os.getpid())
    threads = [(s1[t][0], (s1[t][1] - s0[t][1]) / dt) for t in sorted(s1)
               if t != main and t in s0]
    a.close()
    json.dump(threads, sys.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other tree's python/ directory")
    p.add_argument("--new", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--worker", choices=("on", "off"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.seconds, a.worker == "on")
        return 0
    print("idle wake-ups per second (bench/idle_wakeups.py), %.0f s idle, load %s" %
          (a.seconds, " ".join(open("/proc/loadavg").read().split()[:3])))
    for res in ("off", "on"):
        for tree in ("base", "new"):
            env = dict(os.environ, PYTHONPATH=getattr(a, tree), OMP_NUM_THREADS="1")
            out = subprocess.run([sys.executable, HERE, "--base", a.base, "--seconds",
                                  str(a.seconds), "--worker", res], env=env, check=True,
                                 capture_output=True, text=True, cwd="/")
            threads = json.loads(out.stdout)
            print("resources %-3s %-4s total %5.1f/s   threads: %s" % (
                res, tree, sum(r for _, r in threads),
                ", ".join("%s %.1f" % (n, r) for n, r in threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
