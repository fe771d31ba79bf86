"""The background thread under fast sampled steps: its CPU and GIL time, and dropped samples.

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/side_channel.py [--steps 3000]
        [--step-ms 1.5] [--interval 1]

One single-process Analyzer; each step opens four sections and then busy-waits `--step-ms`
holding the GIL (a Python training loop that never releases it is the worst case for a thread
that needs the GIL). Prints, per step, the background thread's CPU time and the part of it that
held the GIL (Analyzer.counters(): background_cpu_ms, background_gil_ms), and how many samples
were analysed and dropped (queue full).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import laggard  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000, help="training steps (3000)")
    p.add_argument("--step-ms", type=float, default=1.5, help="busy time per step (1.5 ms)")
    p.add_argument("--interval", type=int, default=1, help="sampling interval (1)")
    a = p.parse_args(argv)
    an = laggard.Analyzer(enabled=True, interval=a.interval, timing="host")
    for step in range(a.steps):
        an.begin_step(step)
        for name in ("dataloader", "forward", "backward", "optimizer"):
            with an.section(name):
                pass
        until = time.perf_counter() + a.step_ms / 1000.0
        while time.perf_counter() < until:
            pass
        an.end_step()
    an.close()
    c = an.counters()
    print("side channel (bench/side_channel.py): %d steps of %.1f ms, interval %d" % (
        a.steps, a.step_ms, a.interval))
    print("background thread per step: CPU %.1f us, GIL held %.1f us" % (
        c["background_cpu_ms"] * 1e3 / a.steps, c["background_gil_ms"] * 1e3 / a.steps))
    print("samples: %d analysed, %d dropped (queue full), %d emitted" % (
        c.get("reports", 0), c["queue_dropped"], c["samples_emitted"]))
    return 0 if c["queue_dropped"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
