#!/usr/bin/env python3
"""Writes the example runs shipped in examples/ (deterministic: fixed seed).

  run-slow-forward/  4 ranks on 2 hosts, 30 sampled steps; from step 100 on, rank 3's forward is
                     1.5x slower and the other ranks wait for it in the gradient all-reduce.
  run-healthy/       the same job with jitter only.

Usage: python3 examples/make_example_run.py [OUT_DIR]   (default: examples/)
"""
import json
import os
import random
import sys

STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 60.0),
          ("backward", "compute", 40.0), ("communication", "communication", 6.0),
          ("optimizer", "compute", 5.0)]


def write_run(path, slow_rank, slow_from_step, slowdown, seed):
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    world = 4
    files = [open(os.path.join(path, f"rank-{r}.jsonl"), "w") for r in range(world)]
    for step in range(0, 300, 10):
        own = []
        for r in range(world):
            t = {}
            for name, kind, base in STAGES:
                if kind == "communication":
                    continue
                ms = base * rng.gauss(1.0, 0.02)
                if r == slow_rank and name == "forward" and step >= slow_from_step:
                    ms *= slowdown
                t[name] = ms
            own.append(t)
        # The all-reduce ends when the slowest rank arrives: everyone else waits for it.
        finish = [sum(t.values()) for t in own]
        latest = max(finish)
        for r in range(world):
            wait = latest - finish[r]
            own[r]["communication"] = 6.0 * rng.gauss(1.0, 0.02) + wait
            stages = [{"name": n, "kind": k, "ms": round(own[r][n], 3), "calls": 4 if n == "forward" else 1}
                      for n, k, _ in STAGES]
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": world, "step": step,
                      "host": f"node-{r // 2}", "cohort": "dp", "step_ms": round(sum(s["ms"] for s in stages) + 0.5, 3),
                      "stages": stages}
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files:
        f.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    write_run(os.path.join(out, "run-slow-forward"), slow_rank=3, slow_from_step=100, slowdown=1.5, seed=7)
    write_run(os.path.join(out, "run-healthy"), slow_rank=-1, slow_from_step=0, slowdown=1.0, seed=11)


if __name__ == "__main__":
    main()
