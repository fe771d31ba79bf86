#!/usr/bin/env python3
"""GPU check of the profiler-trace reader: records a real CUDA trace with torch.profiler (one
rank, a small model, 6 profiled steps, record_function annotations) and runs `laggard analyze
--json` and `laggard timeline --json` on it. Build and test machines have no GPU: there the
reader is tested on generated traces (tests/data/make_kineto_traces.py) and on real CPU traces.

  python3 tests/gpu/trace_check.py [--laggard build/tools/laggard] [--out DIR]

Exit status 0 passed, 1 failed (the message says which check), 77 skipped (no CUDA device).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--laggard", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "build", "tools", "laggard"))
    p.add_argument("--out", default="")
    a = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    out = a.out or tempfile.mkdtemp(prefix="laggard-gpu-trace-")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    data = torch.randn(64, 1024)  # on the host: a host-to-device copy per step
    path = os.path.join(out, "rank-0.json.gz")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=6),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(path)) as prof:
        for _ in range(8):
            with record_function("## forward ##"):
                loss = model(data.cuda(non_blocking=True)).square().mean()
            with record_function("## backward ##"):
                loss.backward()
            opt.step()
            opt.zero_grad()
            loss.item()
            prof.step()

    def run(*args):
        r = subprocess.run([a.laggard] + list(args) + ["--json", "-q", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if r.returncode != 0:
            raise SystemExit("FAILED: laggard %s exited %d: %s" % (args[0], r.returncode, r.stderr))
        return json.loads(r.stdout)

    analysis = run("analyze")
    assert analysis["windows"] == 6, analysis["windows"]
    timeline = run("timeline")
    rank = timeline["ranks"][0]
    assert rank["device_activity"], "no device activity read from a CUDA trace"
    for step in rank["steps"]:
        parts = (step["busy_ms"] + step["copy_ms"] + step["data_wait_ms"] +
                 step["launch_wait_ms"] + step["other_idle_ms"])
        assert abs(parts - step["window_ms"]) < 1e-6, step
        assert step["busy_ms"] > 0 and step["activities"] > 0, step
    # The stages laggard made of the kernels: forward, backward and optimizer device time.
    import gzip
    r = subprocess.run([a.laggard, "report", "-q", out, "-o", os.path.join(out, "r.html")],
                       stdout=subprocess.PIPE, universal_newlines=True)
    assert r.returncode == 0
    names = json.dumps(analysis["metrics"])
    for stage in ("forward", "backward", "optimizer"):
        assert "straggler/%s/" % stage in names, (stage, sorted(analysis["metrics"]))
    with gzip.open(path, "rt") as f:
        head = f.read(4096)
    print("OK: %d steps, %d activities in the first, trace %s (%s...)" % (
        len(rank["steps"]), rank["steps"][0]["activities"], path, head[:60].replace("\n", " ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
