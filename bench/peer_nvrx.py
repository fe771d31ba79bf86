"""laggard and NVIDIA resiliency-ext's straggler detector on the same injected DDP runs.

    PYTHONPATH=python OMP_NUM_THREADS=1 python bench/peer_nvrx.py [--ranks 3] [--steps 200]
        [--reps 3] [--base-ms 5] [--slowdown 2] [--scenarios healthy,forward,backward]

3 gloo ranks on the CPU train a small MLP under DistributedDataParallel. Every rank sleeps
--base-ms in its forward and in its backward (inside the model, standing in for compute) and
steps an SGD optimizer; a scenario makes rank 1's forward, or its backward, --slowdown times
slower, or none. For each scenario, repetition after repetition, the same rank processes train
--steps steps in each of these modes, one after the other (A/B interleaved):

  none     no instrumentation
  laggard  laggard.Analyzer(interval=10; --interval) and laggard.torch.instrument(model,
           optimizer)
           (forward, backward, DDP's communication wait, optimizer)
  nvrx     nvidia_resiliency_ext.straggler.Detector, profiling_interval=1 (its default), with
           detection_section(profile_cuda=False) around model(x), loss.backward() and
           optimizer.step(), and a report every --nvrx-report-every steps (all ranks)

and prints, per mode, the median step time over steps (the slowest rank's), its difference to
`none`, rank 0's CPU time per step, and the ranks each tool names: laggard's confirmed
stragglers (rank:stage) in any of its reports (with the slowdown of its last report),
resiliency-ext's sections whose relative score (fastest rank's median / this rank's median) is
under 0.75 (its identify_stragglers() default) in any of its reports (with the lowest score).

resiliency-ext on a CPU-only machine: its Detector.initialize() loads its CUPTI extension, which
needs libcupti.so.12: it is taken from the nvidia-cuda-cupti-cu12 wheel (loaded here before the
import). Its Detector.generate_report() first calls torch.cuda.synchronize() and then reads the
CUPTI kernel statistics; on a CPU-only torch both raise, so this script makes the same report
without them: its ReportGenerator.generate_report(section summaries, no kernels), as
Detector.generate_report() does after those two calls. Its gathers go over the default process
group, as they do in a real job; its GPU scores (CUPTI kernel timing) are not measured here.
"""

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

MODES = ("none", "laggard", "nvrx")
SLOW_RANK = 1


def load_cupti():
    """libcupti.so.12 from the nvidia-cuda-cupti-cu12 wheel, for the CUPTI extension's import;
    the error text when it cannot be loaded."""
    try:
        import nvidia.cuda_cupti

        base = list(nvidia.cuda_cupti.__path__)[0]
        libs = glob.glob(os.path.join(base, "lib", "libcupti.so.12*"))
        if not libs:
            return "no libcupti.so.12 in %s" % base
        ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)
        return None
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--steps", type=int, default=200, help="timed steps per mode (200)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (10)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every mode (3)")
    p.add_argument("--base-ms", type=float, default=5.0)
    p.add_argument("--slowdown", type=float, default=2.0)
    p.add_argument("--scenarios", default="healthy,forward,backward")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--interval", type=int, default=10, help="laggard's sampling interval (10)")
    p.add_argument("--nvrx-report-every", type=int, default=50)
    p.add_argument("--json", default=None, help="also write the results here")
    return p.parse_args(argv)


def rank_main(rank, world, port, args, scenario, out_path):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1", LOCAL_RANK=str(rank))
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    nvrx = None
    if "nvrx" in args.modes:
        from nvidia_resiliency_ext import straggler as nvrx

        nvrx.Detector.initialize(scores_to_compute="all", gather_on_rank0=True,
                                 profiling_interval=1, node_name="localhost")

    class Delay(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, ms):
            ctx.ms = ms
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            time.sleep(ctx.ms / 1000.0)
            return grad, None

    slow = rank == SLOW_RANK
    fwd_ms = args.base_ms * (args.slowdown if slow and scenario == "forward" else 1.0)
    bwd_ms = args.base_ms * (args.slowdown if slow and scenario == "backward" else 1.0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(32, 64)
            self.l2 = nn.Linear(64, 8)

        def forward(self, x):
            time.sleep(fwd_ms / 1000.0)
            h = Delay.apply(torch.relu(self.l1(x)), bwd_ms)
            return self.l2(h)

    torch.manual_seed(1234)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    batch = [(torch.randn(16, 32, generator=gen), torch.randn(16, 8, generator=gen))
             for _ in range(16)]
    results = []

    def segment(mode):
        an = inst = None
        found = {}  # rank:stage -> laggard's slowdown, or resiliency-ext's lowest score
        confirmed = set()  # rank:stage confirmed in any of laggard's reports (rank 0)

        def confirmed_sink(step, metrics):
            confirmed.update(filter(None, metrics.get("straggler/confirmed", "").split(",")))

        if mode == "laggard":
            an = laggard.Analyzer(enabled=True, interval=args.interval, sinks=[confirmed_sink])
            inst = laggard.torch.instrument(an, model=model, optimizer=opt)
        section = nvrx.Detector.detection_section if mode == "nvrx" else None
        times, cpu = [], []
        nvrx_ms = []
        process_cpu0 = None
        for i in range(args.warmup + args.steps):
            step = i - args.warmup
            x, y = batch[i % len(batch)]
            if step == 0:
                process_cpu0 = time.process_time()
            t0, c0 = time.perf_counter(), time.thread_time()
            if an is not None and step >= 0:
                an.begin_step(step)
            opt.zero_grad()
            if section is not None:
                with section("forward", profile_cuda=False):
                    out = model(x)
                loss = ((out - y) ** 2).mean()
                with section("backward", profile_cuda=False):
                    loss.backward()
                with section("optimizer", profile_cuda=False):
                    opt.step()
                if (i + 1) % args.nvrx_report_every == 0:
                    r0 = time.perf_counter()
                    # Detector.generate_report() without torch.cuda.synchronize() and CUPTI
                    report = nvrx.Detector.reporter.generate_report(
                        nvrx.Detector._get_section_summaries(), {})
                    nvrx.Detector._reset_sections_elapseds()
                    nvrx_ms.append((time.perf_counter() - r0) * 1e3)
                    if report is not None and step >= 0:
                        s = report.identify_stragglers()
                        for name, ids in s["straggler_sections_relative"].items():
                            scores = report.section_relative_perf_scores[name]
                            for sid in ids:  # its lowest score: fastest / this rank
                                key = "%d:%s" % (sid.rank, name)
                                found[key] = min(found.get(key, 1.0), scores[sid.rank])
            else:
                out = model(x)
                loss = ((out - y) ** 2).mean()
                loss.backward()
                opt.step()
            if an is not None and step >= 0:
                an.end_step()
            if step >= 0:
                times.append((time.perf_counter() - t0) * 1e3)
                cpu.append((time.thread_time() - c0) * 1e3)
        process_cpu_ms = (time.process_time() - process_cpu0) * 1e3 / args.steps
        if an is not None:
            an.close()  # the last samples are analysed
            report = an.latest_report()
            if report is not None:  # the slowdown of the last report's confirmed findings
                found.update(("%d:%s" % (f["rank"], f["stage"]), f["slowdown"])
                             for f in report["stragglers"] if f["confirmed"])
            for key in confirmed - set(found):  # confirmed earlier, not in the last report
                found[key] = float("nan")
        elif section is not None:
            nvrx.Detector._reset_sections_elapseds()
        return {"mode": mode, "times_ms": times, "cpu_ms": cpu, "process_cpu_ms": process_cpu_ms,
                "found": found, "nvrx_report_ms": nvrx_ms}

    modes = args.modes.split(",")
    segment("none")  # warms the processes up; not counted
    for rep in range(args.reps):
        for k in range(len(modes)):
            mode = modes[(k + rep) % len(modes)]  # a different order each repetition
            dist.barrier()
            results.append(dict(segment(mode), rep=rep))
    with open(out_path % rank, "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def run_scenario(args, scenario, tmp):
    import multiprocessing

    from laggard.launch import free_port

    ctx = multiprocessing.get_context("fork")
    port = free_port()
    out = os.path.join(tmp, scenario + "-%d.json")
    procs = [ctx.Process(target=_child, args=(r, args.ranks, port, args, scenario, out))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(1800)
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit("peer_nvrx: a rank failed in scenario %s (exit codes %s)" %
                         (scenario, [p.exitcode for p in procs]))
    per_rank = []
    for r in range(args.ranks):
        with open(out % r) as f:
            per_rank.append(json.load(f))
    return per_rank


def _child(rank, world, port, args, scenario, out):
    code = 1
    try:
        rank_main(rank, world, port, args, scenario, out)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def summarize(per_rank, modes):
    """{mode: (median step ms over steps and reps, per-rep medians, names found by rank 0)}"""
    out = {}
    for mode in modes:
        segments = [[s for s in rank if s["mode"] == mode] for rank in per_rank]
        rep_medians, steps = [], []
        for rep in range(len(segments[0])):
            # a step's time is the slowest rank's (DDP makes them wait for each other)
            step_ms = [max(seg[rep]["times_ms"][i] for seg in segments)
                       for i in range(len(segments[0][rep]["times_ms"]))]
            rep_medians.append(statistics.median(step_ms))
            steps.extend(step_ms)
        found = {}  # in how many repetitions, and the figure of the last one
        for seg in segments[0]:
            for key, value in seg["found"].items():
                count = found.get(key, (0, 0.0))[0]
                found[key] = (count + 1, value)
        report_ms = [ms for seg in segments[0] for ms in seg["nvrx_report_ms"]]
        # rank 0 (laggard's analysis rank): the training thread's CPU time per step (median
        # over steps), and the whole process's (its background threads too) per step
        thread_cpu = [ms for seg in segments[0] for ms in seg["cpu_ms"]]
        process_cpu = [seg["process_cpu_ms"] for seg in segments[0]]
        out[mode] = {"median_ms": statistics.median(steps), "rep_medians_ms": rep_medians,
                     "thread_cpu_ms": statistics.median(thread_cpu),
                     "process_cpu_ms": statistics.median(process_cpu),
                     "found": {k: found[k] for k in sorted(found)},
                     "nvrx_report_ms": statistics.median(report_ms) if report_ms else None}
    return out


def main(argv=None):
    args = parse(argv)
    modes = args.modes.split(",")
    if "nvrx" in modes:
        error = load_cupti()
        try:
            from nvidia_resiliency_ext import straggler  # noqa: F401
            import nvrx_cupti_module  # noqa: F401
        except Exception as e:
            raise SystemExit("peer_nvrx: resiliency-ext's straggler detector does not import "
                             "(%s: %s)%s" % (type(e).__name__, e,
                                             "; libcupti: " + error if error else ""))
    import torch  # noqa: F401 — imported once, before the ranks are forked

    import platform

    print("peer_nvrx: %d gloo ranks on the CPU, DDP, %d steps per mode (+%d warm-up), %d "
          "repetitions, base %.1f ms forward and backward, slowdown %.1fx on rank %d" % (
              args.ranks, args.steps, args.warmup, args.reps, args.base_ms, args.slowdown,
              SLOW_RANK))
    print("machine: %s, %d cores, Python %s, torch %s" % (
        platform.platform(), os.cpu_count(), platform.python_version(), torch.__version__))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in args.scenarios.split(","):
            t0 = time.time()
            summary = summarize(run_scenario(args, scenario, tmp), modes)
            results[scenario] = summary
            base = summary.get("none", {}).get("median_ms")
            print("\nscenario %s (%s; %.0f s)" % (
                scenario, "no slow rank" if scenario == "healthy" else
                "rank %d's %s %.1fx slower" % (SLOW_RANK, scenario, args.slowdown),
                time.time() - t0))
            for mode in modes:
                s = summary[mode]
                delta = "" if base is None or mode == "none" else \
                    "  %+.3f ms (%+.2f%%) vs none" % (s["median_ms"] - base,
                                                     100.0 * (s["median_ms"] / base - 1.0))
                extra = "" if s["nvrx_report_ms"] is None else \
                    "  report %.2f ms" % s["nvrx_report_ms"]
                names = "" if mode == "none" else "  names: %s" % (", ".join(
                    "%s (%s %.2f, %d/%d reps)" % (
                        k, "slowdown" if mode == "laggard" else "score", v[1], v[0], args.reps)
                    for k, v in s["found"].items()) or "nobody")
                print("  %-8s step %.3f ms (reps %s)%s; rank 0 CPU/step: training thread %.3f "
                      "ms, process %.3f ms%s%s" % (
                          mode, s["median_ms"],
                          " ".join("%.3f" % m for m in s["rep_medians_ms"]), delta,
                          s["thread_cpu_ms"], s["process_cpu_ms"], extra, names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
