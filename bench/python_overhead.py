"""Training-thread cost of the Python section API (medians; not a test).

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/python_overhead.py

Targets (issue 3): section() on a step that is not sampled <= 150 ns; a sampled section with the
host clock <= 1.5 us; end_step() of a sampled step with 8 stages <= 30 us. Each figure is the
median over repetitions of a timed loop, minus the same loop with an empty body.
"""

import argparse
import statistics
import time

import laggard

STAGES = ["dataloader", "forward", "backward", "communication", "optimizer", "attention", "moe",
          "other"]


def per_call_ns(fn, n, reps):
    """Median ns per iteration of fn's loop, minus the empty loop's."""
    def empty(n):
        for _ in range(n):
            pass

    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        empty(n)
        t1 = time.perf_counter_ns()
        fn(n)
        t2 = time.perf_counter_ns()
        out.append(((t2 - t1) - (t1 - t0)) / n)
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200000)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--steps", type=int, default=3000)
    a = p.parse_args()
    rows = []

    # Disabled analyzer.
    off = laggard.Analyzer(enabled=False)

    def off_section(n, section=off.section):
        for _ in range(n):
            section("forward")

    def off_with(n, section=off.section):
        for _ in range(n):
            with section("forward"):
                pass

    def off_step(n, an=off):
        for i in range(n):
            an.begin_step(i)
            an.end_step()

    rows.append(("disabled: section() call", per_call_ns(off_section, a.n, a.reps), None))
    rows.append(("disabled: with section(): pass", per_call_ns(off_with, a.n, a.reps), None))
    rows.append(("disabled: begin_step + end_step", per_call_ns(off_step, a.n, a.reps), None))

    # Enabled, step not sampled.
    an = laggard.Analyzer(enabled=True, interval=1000000000, timing="host")
    an.begin_step(1)
    assert not an.sampled

    def unsampled_section(n, section=an.section):
        for _ in range(n):
            section("forward")

    def unsampled_with(n, section=an.section):
        for _ in range(n):
            with section("forward"):
                pass

    rows.append(("not sampled: section() call", per_call_ns(unsampled_section, a.n, a.reps), 150))
    rows.append(("not sampled: with section(): pass", per_call_ns(unsampled_with, a.n, a.reps),
                 None))

    def unsampled_step(n, an=an):
        for i in range(1, n + 1):
            an.begin_step(i)
            an.end_step()

    rows.append(("not sampled: begin_step + end_step", per_call_ns(unsampled_step, a.n, a.reps),
                 None))
    an.close()

    # Enabled, sampled step, host clock: a whole `with section(): pass`.
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", queue_capacity=1024)
    an.begin_step(0)
    assert an.sampled

    def sampled_with(n, section=an.section):
        for _ in range(n):
            with section("forward"):
                pass

    rows.append(("sampled (host clock): with section(): pass",
                 per_call_ns(sampled_with, a.n // 4, a.reps), 1500))
    an.end_step()

    # end_step of a sampled step with 8 stages; the background thread drains concurrently.
    end_ns, step_ns = [], []
    sections = [an.section(s) for s in STAGES]  # warm the name cache
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter_ns()
        an.begin_step(step)
        for name in STAGES:
            with an.section(name):
                pass
        t1 = time.perf_counter_ns()
        an.end_step()
        t2 = time.perf_counter_ns()
        end_ns.append(t2 - t1)
        step_ns.append(t2 - t0)
        if step % 16 == 0:
            time.sleep(0.001)  # let the drain thread keep up, as between real steps
    del sections
    rows.append(("sampled: end_step() with 8 stages", statistics.median(end_ns), 30000))
    rows.append(("sampled: begin_step + 8 sections + end_step", statistics.median(step_ns), None))
    c = an.counters()
    an.close()

    print("laggard Python overhead (median ns per call; %s)" % time.strftime("%Y-%m-%d"))
    for name, ns, target in rows:
        verdict = "" if target is None else ("  target <= %d ns: %s" % (
            target, "ok" if ns <= target else "OVER"))
        print("  %-48s %9.0f ns%s" % (name, ns, verdict))
    print("  samples emitted %d, dropped in queue %d" % (c["samples_emitted"], c["queue_dropped"]))


if __name__ == "__main__":
    main()
