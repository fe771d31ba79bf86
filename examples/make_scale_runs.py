#!/usr/bin/env python3
"""Writes the example scale study shipped in examples/scale/ (deterministic: fixed seeds).

The same data-parallel job (weak scaling: the same batch per rank) at 2, 4, 8 and 16 ranks, 4 ranks
per host. Within a host the gradient all-reduce barely grows with ranks; once the job spans two hosts its bytes cross the slower inter-host network and the all-reduce takes
1.8x longer; the compute stages do not change. `laggard scale` finds communication regressed at 8
ranks, the first size spanning more than one host; given only 2, 4 and 16 it suggests 8 next.

Usage: python3 examples/make_scale_runs.py [OUT_DIR]   (default: examples/scale/)
"""
import json
import os
import random
import sys

RANKS_PER_HOST = 4
STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 40.0),
          ("backward", "compute", 60.0), ("communication", "communication", None),
          ("optimizer", "compute", 5.0)]


def allreduce_ms(world):
    # Within a host (NVLink through a switch) the all-reduce barely grows with ranks; across
    # hosts its bytes go over the network.
    hosts = (world + RANKS_PER_HOST - 1) // RANKS_PER_HOST
    return 8.0 * (1.0 + 0.01 * (world.bit_length() - 1)) * (1.8 if hosts > 1 else 1.0)


def write_run(path, world, seed):
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    files = [open(os.path.join(path, f"rank-{r}.jsonl"), "w") for r in range(world)]
    for step in range(0, 200, 10):
        own = []
        for r in range(world):
            own.append({n: base * rng.gauss(1.0, 0.005) for n, k, base in STAGES if base})
        finish = [sum(t.values()) for t in own]
        latest = max(finish)
        comm = allreduce_ms(world) * rng.gauss(1.0, 0.02)
        for r in range(world):
            own[r]["communication"] = comm + (latest - finish[r])
            stages = [{"name": n, "kind": k, "ms": round(own[r][n], 3), "calls": 1}
                      for n, k, _ in STAGES]
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": world,
                      "step": step, "host": f"node-{r // RANKS_PER_HOST}", "cohort": "dp",
                      "step_ms": round(sum(s["ms"] for s in stages) + 0.4, 3),
                      "stages": stages}
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files:
        f.close()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "scale")
    for world in (2, 4, 8, 16):
        write_run(os.path.join(out, f"ws-{world}"), world, seed=100 + world)


if __name__ == "__main__":
    main()
