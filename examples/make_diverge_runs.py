#!/usr/bin/env python3
"""Writes the example pair of runs for `laggard diverge` (deterministic).

  diverge/run-a/  2 ranks, 40 sampled steps, each recording `loss` and `grad_norm`.
  diverge/run-b/  the same job with the same seed, except that from step 23 on rank 1's gradient
                  reduction adds in another order: its `grad_norm` differs in the last bit at step
                  23, and the loss of both ranks drifts apart a little more each step after it.

Usage: python3 examples/make_diverge_runs.py [OUT_DIR]   (default: examples/diverge)
"""
import json
import math
import os
import random
import sys

STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 30.0),
          ("backward", "compute", 45.0), ("allreduce", "communication", 4.0),
          ("optimizer", "compute", 3.0)]
WORLD = 2


def write_run(path, reorder_from):
    os.makedirs(path, exist_ok=True)
    files = [open(os.path.join(path, f"rank-{r}.jsonl"), "w") for r in range(WORLD)]
    rng = random.Random(7)  # the same seed in both runs: the same data and timings
    loss = [2.302585092994046] * WORLD
    drift = 0.0
    for step in range(40):
        for r in range(WORLD):
            parts = [rng.uniform(0.01, 0.1) for _ in range(7)]
            grad_norm = sum(parts)
            if reorder_from is not None and step >= reorder_from and r == 1:
                grad_norm = sum(reversed(parts))  # another summation order
                if grad_norm == sum(parts):
                    grad_norm = math.nextafter(grad_norm, math.inf)
            if reorder_from is not None and step > reorder_from:
                drift += 1e-9 * (step - reorder_from)
            loss[r] = loss[r] * 0.98 + 0.01 * grad_norm + drift
            stages = []
            for name, kind, base in STAGES:
                stages.append({"name": name, "kind": kind,
                               "ms": round(base * rng.gauss(1.0, 0.02), 3), "calls": 1})
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": WORLD,
                      "step": step, "host": "node-0", "cohort": "dp",
                      "step_ms": round(sum(s["ms"] for s in stages) + 1.0, 3),
                      "stages": stages, "values": {"loss": loss[r], "grad_norm": grad_norm}}
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files:
        f.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "diverge")
    write_run(os.path.join(out, "run-a"), None)
    write_run(os.path.join(out, "run-b"), 23)


if __name__ == "__main__":
    main()
