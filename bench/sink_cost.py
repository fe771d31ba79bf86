"""What laggard's sinks cost the analysis rank, A/B between two laggard trees.

    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/sink_cost.py calls \
        [--reports 200] [--sinks jsonl,tensorboard,wandb,mlflow,prometheus]
    PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python bench/sink_cost.py ranks \
        [--base /path/to/other/python] [--new DIR] [--control] [--reps 4] [--sinks all] \
        [--burners 2]

`calls`: each sink in a process of its own (so that its first report pays what a real one
does: imports, a store, a run), called directly with a report like a live one (8 stages, one
confirmed straggler, the summary): the first report's wall and CPU time, then the median
[5th, 95th percentile] per report over --reports more. This is the work a sink does, wherever it
runs; it holds the interpreter's lock for most of it.

`ranks`: the trackers how-to's job (examples/docs/trackers.py) without a slow rank: --world
gloo ranks (real processes) of a small DDP model, 10 ms of data loading, interval 2, the sinks
on every rank (only the analysis rank, rank 0, gets reports). Each rank times its own steps
(begin_step to end_step). Printed per tree and run: the analysis rank's median step over the
other ranks' (its inflation), the reports written, and what the run confirmed (reports.jsonl);
and per tree the median inflation with its range over the runs, and how many runs named rank 0.
The arms ("new": this tree, or --new DIR; "base": --base, another checkout's python/ directory
with its _core built; with --control, "none": the new tree without sinks, the floor; with
--period-arm S, "pS": the new tree with every tracker's min_period_s at S) take turns
run by run, so that a shared machine's drift hits them alike. --burners N
starts N busy processes for the whole bench (`while True: pass`).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGES = ["dataloader", "forward", "backward", "communication", "optimizer", "attention", "moe",
          "other"]
ALL_SINKS = ["jsonl", "tensorboard", "wandb", "mlflow", "prometheus"]


def live_like_report(step, rng):
    """A report's metrics as the engine hands them to a sink: the seven per-stage metrics of 8
    stages, rank 1 confirmed in forward, and the summary."""
    m = {}
    for s in STAGES:
        mean = rng.uniform(1.0, 20.0)
        m.update({"straggler/%s/local_ms" % s: mean, "straggler/%s/mean_ms" % s: mean,
                  "straggler/%s/max_ms" % s: mean * 1.3, "straggler/%s/slowdown_ratio" % s: 1.3,
                  "straggler/%s/relative_score" % s: 0.8, "straggler/%s/top_rank" % s: 1.0,
                  "straggler/%s/num_stragglers" % s: 1.0 if s == "forward" else 0.0})
    m.update({"straggler/num_confirmed": 1.0, "straggler/confirmed": "1:forward",
              "straggler/likely_bottleneck": "forward", "straggler/hints": "rank 1 forward",
              "straggler/whatif_step_saving_ms": 3.2, "straggler/num_stragglers_total": 1.0,
              "straggler/num_waiting": 0.0, "straggler/ranks": 3.0,
              "straggler/report_errors": 0.0, "straggler/dropped_samples": 0.0,
              "straggler/incomplete_windows": 0.0, "straggler/step": float(step)})
    return m


def make_sink(kind, out, rank=0, period=None):
    from laggard import sinks

    if period is not None and kind != "jsonl":
        s = make_sink(kind, out, rank)
        s.min_period_s = float(period)
        return s
    if kind == "jsonl":
        return sinks.JsonlReportSink(os.path.join(out, "reports-sink.jsonl"))
    if kind == "tensorboard":
        return sinks.TensorBoardSink(os.path.join(out, "tb-%d" % rank))
    if kind == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        return sinks.WandbSink(dir=out, project="laggard-bench")
    if kind == "mlflow":
        return sinks.MLflowSink(tracking_uri="sqlite:///" + os.path.join(out, "mlflow.db"))
    if kind == "prometheus":
        import prometheus_client

        return sinks.PrometheusSink(port=0, registry=prometheus_client.CollectorRegistry())
    raise ValueError("unknown sink %r" % kind)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]


def calls_worker(kind, reports):
    """In its own process: the sink's first report, then `reports` more; JSON on stdout."""
    rng = random.Random(0)
    out = tempfile.mkdtemp(prefix="laggard-sinkcost-")
    sink = make_sink(kind, out)
    wall, cpu = [], []
    for step in range(reports + 1):
        m = live_like_report(step, rng)
        w0, c0 = time.perf_counter(), time.thread_time()
        sink(step, m)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    w0 = time.perf_counter()
    sink.close()
    close_s = time.perf_counter() - w0
    print(json.dumps({"kind": kind, "first_wall": wall[0], "first_cpu": cpu[0],
                      "wall": wall[1:], "cpu": cpu[1:], "close_s": close_s}))


def run_calls(args):
    print("per report (ms): first report wall/CPU; then median [p5, p95] of %d more" %
          args.reports)
    for kind in args.sinks:
        r = subprocess.run([sys.executable, __file__, "_calls", kind, str(args.reports)],
                           capture_output=True, text=True, env=dict(os.environ))
        if r.returncode != 0:
            print("%-11s failed: %s" % (kind, r.stderr.strip().splitlines()[-1:]))
            continue
        d = json.loads(r.stdout.strip().splitlines()[-1])
        ms = lambda xs: "%7.2f [%6.2f, %6.2f]" % (  # noqa: E731
            1e3 * statistics.median(xs), 1e3 * pct(xs, 0.05), 1e3 * pct(xs, 0.95))
        print("%-11s first %8.1f wall %8.1f CPU | wall %s | CPU %s | close %.0f ms" % (
            kind, 1e3 * d["first_wall"], 1e3 * d["first_cpu"], ms(d["wall"]), ms(d["cpu"]),
            1e3 * d["close_s"]))


# -- ranks ----------------------------------------------------------------------------------

def rank_worker(cfg):
    """One rank of the trackers job (no slow rank); writes its step times to out/times-<r>."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = cfg["out"]
    sinks = [make_sink(k, out, rank, cfg.get("period")) for k in cfg["sinks"]]
    an = laggard.Analyzer(interval=cfg["interval"], log_dir=os.path.join(out, "logs"),
                          sinks=sinks)
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    laggard.torch.instrument(an, model=model, optimizer=optimizer)
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    times = []
    for step in range(cfg["steps"]):
        t0 = time.perf_counter()
        an.begin_step(step)
        with an.section("dataloader"):
            time.sleep(0.010)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        an.end_step()
        times.append(time.perf_counter() - t0)
    dist.barrier()
    t0 = time.perf_counter()
    an.close()
    close_s = time.perf_counter() - t0
    counters = an.counters()
    with open(os.path.join(out, "times-%d.json" % rank), "w") as f:
        json.dump({"times": times, "close_s": close_s,
                   "counters": {k: v for k, v in counters.items()
                                if isinstance(v, (int, float))}}, f)
    dist.destroy_process_group()
    return 0


def one_run(pythonpath, cfg, world, timeout_s):
    from laggard.launch import free_port

    out = tempfile.mkdtemp(prefix="laggard-sinkranks-")
    cfg = dict(cfg, out=out)
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, PYTHONPATH=pythonpath, RANK=str(r), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", WANDB_MODE="offline",
                   WANDB_SILENT="true")
        procs.append(subprocess.Popen([sys.executable, __file__, "_rank", json.dumps(cfg)],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(out, "err-%d" % r), "w")))
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    res = []
    for r in range(world):
        try:
            with open(os.path.join(out, "times-%d.json" % r)) as f:
                res.append(json.load(f))
        except OSError:
            with open(os.path.join(out, "err-%d" % r)) as f:
                tail = f.read().strip().splitlines()[-3:]
            raise RuntimeError("rank %d wrote no times: %s" % (r, tail))
    confirmed, reports = set(), 0
    path = os.path.join(out, "logs", "reports.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                reports += 1
                for item in filter(None, json.loads(line).get("straggler/confirmed", "")
                                   .split(",")):
                    confirmed.add(item)
    skip = cfg["steps"] // 6  # the first sixth: imports, connections, warm-up
    med = [statistics.median(d["times"][skip:]) for d in res]
    stages = own_time_ratios(os.path.join(out, "logs"), world)
    return {"inflation": stages.get("own", float("nan")), "stages": stages,
            "step_ms": [1e3 * m for m in med],
            "confirmed": sorted(confirmed), "reports": reports,
            "close_s": res[0]["close_s"], "counters": res[0]["counters"]}


def own_time_ratios(log_dir, world):
    """From the rank logs: per stage that is the rank's own work (compute, data, and untimed:
    step_ms minus the stages), the analysis rank's median ms over the other ranks' median; and
    "own", the same for the sum of them (the step less the time waiting in communication).
    Synchronous data parallelism makes every rank's step as long as the slowest's, so this,
    not the step, shows the rank that is slowed."""
    from laggard import _core

    windows, _ = _core.read_run(log_dir)
    per = {}
    for _, samples in windows[len(windows) // 6:]:
        for s in samples:
            own = 0.0
            total = 0.0
            for t in s.stages:
                total += t.ms
                if t.kind != _core.StageKind.communication:
                    per.setdefault((t.name, s.rank), []).append(t.ms)
                    own += t.ms
            untimed = max(0.0, s.step_ms - total)
            per.setdefault(("untimed", s.rank), []).append(untimed)
            per.setdefault(("own", s.rank), []).append(own + untimed)
    out = {}
    for stage in {k[0] for k in per}:
        meds = [statistics.median(per[(stage, r)]) for r in range(world) if (stage, r) in per]
        if len(meds) == world and statistics.median(meds[1:]) > 0:
            out[stage] = meds[0] / statistics.median(meds[1:])
    return out


def run_ranks(args):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(args.burners)]
    try:
        cfg = {"sinks": args.sinks, "interval": args.interval, "steps": args.steps}
        new = os.path.abspath(args.new or os.path.join(ROOT, "python"))
        trees = [] if args.no_new else [("new", new, cfg)]
        if args.base:
            trees.append(("base", os.path.abspath(args.base), cfg))
        if args.control:
            trees.append(("none", new, dict(cfg, sinks=[])))
        for period in args.period_arm or ():
            trees.append(("p%g" % period, new, dict(cfg, period=period)))
        print("ranks: world %d, interval %d, %d steps, sinks %s, burners %d; load %s" % (
            args.world, args.interval, args.steps, ",".join(args.sinks), args.burners,
            os.getloadavg()))
        got = {name: [] for name, _, _ in trees}
        for rep in range(args.reps):
            order = trees if rep % 2 == 0 else trees[::-1]
            for name, path, arm in order:
                r = one_run(path, arm, args.world, args.timeout)
                got[name].append(r)
                keys = ("sink_writes", "sink_reports_dropped", "sink_writes_skipped")
                extra = " ".join("%s=%s" % (k, r["counters"][k]) for k in keys
                                 if k in r["counters"])
                stages = " ".join("%s %.2f" % (k, v) for k, v in sorted(r["stages"].items())
                                  if k != "own")
                print("%-4s run %d: rank 0 / others, own time %.2fx (%s), step ms %s, %d "
                      "reports, confirmed %s, close %.1f s %s" % (
                          name, rep, r["inflation"], stages,
                          " ".join("%.1f" % m for m in r["step_ms"]),
                          r["reports"], ",".join(r["confirmed"]) or "-", r["close_s"], extra),
                      flush=True)
        for name, _, _ in trees:
            inf = [r["inflation"] for r in got[name]]
            named0 = sum(any(c.startswith("0:") for c in r["confirmed"]) for r in got[name])
            print("%-4s own-time inflation median %.2fx [min %.2f, max %.2f] over %d runs; "
                  "rank 0 named in %d" % (name, statistics.median(inf), min(inf), max(inf),
                                          len(inf), named0))
        print("load after: %s" % (os.getloadavg(),))
    finally:
        for p in burners:
            p.kill()
            p.wait()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_calls":
        return calls_worker(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "_rank":
        return rank_worker(json.loads(sys.argv[2]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("calls")
    c.add_argument("--reports", type=int, default=200)
    c.add_argument("--sinks", default=",".join(ALL_SINKS))
    r = sub.add_parser("ranks")
    r.add_argument("--base", help="another tree's python/ directory (A/B)")
    r.add_argument("--period-arm", type=float, action="append",
                   help="also runs the tree under test with every tracker sink's min_period_s "
                        "at this (arm \"pS\"); may repeat")
    r.add_argument("--no-new", action="store_true", help="leaves the default arm out")
    r.add_argument("--new", help="the tree under test's python/ directory (default: this one)")
    r.add_argument("--control", action="store_true",
                   help="also runs the tree under test without sinks (arm \"none\")")
    r.add_argument("--reps", type=int, default=4)
    r.add_argument("--world", type=int, default=3)
    r.add_argument("--interval", type=int, default=2)
    r.add_argument("--steps", type=int, default=240)
    r.add_argument("--sinks", default="all")
    r.add_argument("--burners", type=int, default=0)
    r.add_argument("--timeout", type=float, default=240.0)
    args = p.parse_args()
    args.sinks = ALL_SINKS if args.sinks == "all" else [
        s for s in args.sinks.split(",") if s and s != "none"]
    return run_calls(args) if args.mode == "calls" else run_ranks(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
