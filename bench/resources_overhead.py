"""What the resource readings cost the training thread: a sampled step with them on against off.

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/resources_overhead.py [--rounds 2000]

Two Analyzers (host clock, no side channel, no log): one with resources=True, one with
resources=False. Each round runs one small training step (bench/cold_timing.py), which evicts
the caches as a real step does, and then times `begin_step(k); end_step()` of one analyzer (they
take turns round by round, in an order shuffled every round, so that drift of a shared machine
and what the previous measurement left warm hit both alike), for a sampled step and for an
unsampled one. The analyzer with resources has its usual sources
(host: CPU, threads, context switches, GC; its sampler thread runs as in training, every
--period-s) and, with --gpu-readings (the default), also a source that publishes the 21 readings
of a GPU (NVML and the CUDA allocator: recorded values, since the cost on the training thread
is copying the published readings, whatever produced them), so that a sampled step carries the
full set of about 31 names.

Printed: per case the median ns and a 95 % confidence interval of the median (order statistics),
and the added cost (median on - median off) with a 95 % interval from a bootstrap of the rounds.
Target: <= 20 us added on a sampled step, 0 on an unsampled one (there the analyzer with
resources runs exactly the code of the one without: no reading, no callback).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import cold_timing  # noqa: E402
import laggard  # noqa: E402
from laggard import resources  # noqa: E402

# What NVML and the allocator report on a busy H100 (recorded values; only the count matters).
GPU_READINGS = {
    "gpu_sm_clock_mhz": 1755.0, "gpu_sm_clock_max_mhz": 1980.0, "gpu_throttle_reasons": 4.0,
    "gpu_throttle_thermal": 0.0, "gpu_throttle_power": 1.0, "gpu_throttle_hw_slowdown": 0.0,
    "gpu_temperature_c": 61.0, "gpu_power_w": 652.3, "gpu_power_limit_w": 700.0,
    "gpu_ecc_corrected": 0.0, "gpu_ecc_uncorrected": 0.0, "gpu_pcie_gen": 5.0,
    "gpu_pcie_gen_max": 5.0, "gpu_pcie_width": 16.0, "gpu_pcie_width_max": 16.0,
    "gpu_util_pct": 100.0, "gpu_mem_used_mib": 70123.0, "gpu_mem_total_mib": 81559.0,
    "cuda_allocated_mib": 50211.5, "cuda_reserved_mib": 68096.0, "cuda_alloc_retries": 0.0,
}


class RecordedGpu(resources._Source):
    name = "gpu"

    def read(self):
        return dict(GPU_READINGS)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2000, help="timed steps per case (2000)")
    p.add_argument("--dims", default=cold_timing.DIMS, help="MLP layer sizes (%s)" %
                   cold_timing.DIMS)
    p.add_argument("--period-s", type=float, default=1.0,
                   help="the sampler thread's refresh period (1 s, the shortest automatic)")
    p.add_argument("--no-gpu-readings", dest="gpu", action="store_false",
                   help="the host readings only (what a CPU machine records)")
    a = p.parse_args(argv)
    train = cold_timing.training_step(a.dims)

    interval = 2  # even steps sampled, odd ones not
    on = laggard.Analyzer(enabled=True, interval=interval, timing="host", resources=True,
                          resources_period_s=a.period_s)
    off = laggard.Analyzer(enabled=True, interval=interval, timing="host", resources=False)
    if a.gpu:
        on.resources._sources.append(RecordedGpu(on._errors))
    time.sleep(2.5 * a.period_s)  # two refreshes: the rates are there too
    names = set(on.resources.latest())
    if on.resources._gc is not None:
        names |= {"host_gc_pause_ms", "host_gc_collections"}

    cases = [("sampled", on), ("sampled", off), ("unsampled", on), ("unsampled", off)]
    times = {(kind, an is on): [] for kind, an in cases}
    steps = {id(on): 0, id(off): 0}
    pc = time.perf_counter_ns
    for counted, (kind, an) in cold_timing.shuffled_rounds(cases, a.rounds, 20):
        train()
        k = steps[id(an)]
        if (k % interval == 0) != (kind == "sampled"):
            k += 1
        steps[id(an)] = k + 1
        t0 = pc()
        an.begin_step(k)
        an.end_step()
        t = pc() - t0
        if counted:  # warm-up rounds not counted
            times[(kind, an is on)].append(t)
    res = on.resources
    refreshes, refresh_cpu_s = res.refreshes, res.refresh_cpu_s
    on.close()
    off.close()
    bad = on.counters()["report_errors"] + off.counters()["report_errors"]

    print("resources on vs off, training thread (bench/resources_overhead.py): %d rounds, MLP %s, "
          "torch %s, %d resource names per sampled step%s, load %s" % (
              a.rounds, a.dims, torch.__version__, len(names),
              " (21 of them recorded GPU and allocator readings)" if a.gpu else "",
              cold_timing.load()))
    print("%-44s %10s %22s" % ("begin_step + end_step, after a training step", "median ns",
                               "95% CI of the median"))
    for kind in ("sampled", "unsampled"):
        for with_res in (True, False):
            m, lo, hi = cold_timing.median_ci(times[(kind, with_res)])
            print("%-44s %10.0f %10.0f .. %-10.0f" % (
                "%s, resources %s" % (kind, "on" if with_res else "off"), m, lo, hi))
    for kind in ("sampled", "unsampled"):
        d, lo, hi = cold_timing.bootstrap_diff(times[(kind, True)], times[(kind, False)])
        print("added by resources, %-24s %+10.0f ns   95%% CI %+.0f .. %+.0f ns" % (
            kind + " step:", d, lo, hi))
    print("sampler thread: %d refreshes, %.0f us CPU each (off the training thread; it holds the "
          "GIL meanwhile)" % (refreshes, 1e6 * refresh_cpu_s / max(1, refreshes)))
    if bad:
        print("report_errors: %d" % bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
