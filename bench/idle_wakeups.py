"""Wake-ups of laggard's threads while there is nothing to do, A/B between two laggard trees.

    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/idle_wakeups.py \
        --base /path/to/other/python [--seconds 5] [--channels none,local,gloo]

An Analyzer (host clock, a rank log in a temporary directory) records 20 steps at interval 10,
then the training thread sleeps: nothing is pushed, nothing is due. Measured over --seconds
after 3 s of that (the log writer looks for samples at 10 Hz while they come, and sleeps until
the next push once it has found none for 2 s; the last batches, acknowledgements and verdicts
have long been exchanged by then). Side channels (--channels):
  none   one rank (world size 1), no side channel;
  local  two ranks that are threads of one process (transport="local"), both counted;
  gloo   two processes over torch.distributed (the gloo side channel the Analyzer makes),
         the analysis rank's process counted (its gloo link threads wait in a blocking recv).
Each thread's voluntary context switches (/proc/self/task/*/status) over that sleep are its
wake-ups. Printed per tree and channel, with resources off and on: wake-ups per second of each
thread other than the main one (by name where it has one) and their sum.
"""

import argparse
import json
import os
import socket
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


def worker(seconds, resources, channel):
    import laggard

    def make(**kw):
        kw = dict(dict(interval=10, timing="host", log_dir=tempfile.mkdtemp(prefix="laggard-idle-")),
                  **kw)
        try:
            return laggard.Analyzer(resources=resources, **kw)
        except TypeError:  # a tree without resource readings
            return laggard.Analyzer(**kw)

    rank = 0
    if channel == "none":
        ans = [make(world_size=1, rank=0)]
    elif channel == "local":
        ans = [make(world_size=2, rank=r, transport="local", channel="idle-%d" % os.getpid())
               for r in range(2)]
    else:  # gloo: this process is one of two ranks (main() starts both)
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        ans = [make()]
    for step in range(20):
        for a in ans:
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
    for a in ans:
        a.close()
    if channel == "gloo":
        import torch.distributed as dist

        dist.barrier()
        if rank != 0:
            return
    json.dump(threads, sys.stdout)


def run_tree(path, seconds, res, channel, base):
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    cmd = [sys.executable, HERE, "--base", base, "--seconds", str(seconds), "--worker", res,
           "--channel", channel]
    if channel != "gloo":
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd="/")
        return json.loads(out.stdout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        e = dict(env, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd="/"))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError("gloo rank failed (rc %s):\n%s" % (p.returncode, err[-3000:]))
    return json.loads(outs[0][0])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the other tree's python/ directory")
    p.add_argument("--new", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--channels", default="none,local,gloo",
                   help="side channels to measure, of none, local, gloo (docstring)")
    p.add_argument("--resources", default="off,on", help="resource readings: off, on or both")
    p.add_argument("--worker", choices=("on", "off"), help=argparse.SUPPRESS)
    p.add_argument("--channel", default="none", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a.seconds, a.worker == "on", a.channel)
        return 0
    print("idle wake-ups per second (bench/idle_wakeups.py), %.0f s idle, load %s" %
          (a.seconds, " ".join(open("/proc/loadavg").read().split()[:3])))
    for channel in a.channels.split(","):
        for res in a.resources.split(","):
            for tree in ("base", "new"):
                threads = run_tree(getattr(a, tree), a.seconds, res, channel, a.base)
                print("%-5s resources %-3s %-4s total %5.1f/s   threads: %s" % (
                    channel, res, tree, sum(r for _, r in threads),
                    ", ".join("%s %.1f" % (n, r) for n, r in threads)))
    print("load after %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
