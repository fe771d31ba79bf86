#!/usr/bin/env python3
"""Trims a real PyTorch profiler (Kineto) trace to a small test fixture: the steps asked for, and
of their events only what laggard reads (annotations, autograd ops, launch and copy calls,
kernels, copies and memsets, with the args laggard uses). Timing is kept exactly.

  python3 tests/data/trim_trace.py IN.json.gz OUT.json.gz --steps 551 552 553

tests/data/trace-torchrec/rank-0.json.gz: rank 0 of a 16-rank TorchRec job (NCCL, one GPU),
steps 551 to 553, trimmed from the MIT-licensed test data of Holistic Trace Analysis
(NOTICE beside it).
"""
import argparse
import gzip
import json

KEEP_ARGS = {"correlation", "stream", "device", "Collective name", "Process Group Name",
             "In msg nelems", "Out msg nelems"}
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("--steps", type=int, nargs="+", required=True)
    a = p.parse_args()
    with gzip.open(a.src, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#") and
             e.get("cat") == "user_annotation" and int(e["name"][13:]) in a.steps]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    keep = []
    for e in events:
        cat = e.get("cat")
        if e.get("ph") != "X":
            if e.get("ph") == "M":
                keep.append(e)  # process and thread names
            continue
        if cat == "cpu_op" and not e["name"].startswith("autograd::engine::evaluate_function"):
            continue
        if cat not in {"user_annotation", "gpu_user_annotation", "cpu_op", "cuda_runtime"} | DEVICE:
            continue
        if cat == "user_annotation" and e["name"].startswith("ProfilerStep#") and e not in steps:
            continue
        if cat == "cuda_runtime" and not any(w in e["name"] for w in ("Launch", "Memcpy", "Memset",
                                                                        "memcpy")):
            continue  # events, stream waits, synchronizations: laggard reads launches only
        # Host events inside the steps; device events whose launch is (by correlation, below).
        if cat not in DEVICE and not (lo <= e["ts"] < hi):
            continue
        e = dict(e)
        if "args" in e:
            e["args"] = {k: v for k, v in e["args"].items() if k in KEEP_ARGS}
        keep.append(e)
    launched = {e["args"]["correlation"] for e in keep
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    keep = [e for e in keep if e.get("cat") not in DEVICE or
            e.get("args", {}).get("correlation") in launched]
    out = {k: v for k, v in trace.items() if k in ("schemaVersion", "distributedInfo")}
    out["traceEvents"] = keep
    with gzip.GzipFile(a.out, "wb", mtime=0) as f:
        f.write(json.dumps(out, separators=(",", ":")).encode())


if __name__ == "__main__":
    main()
