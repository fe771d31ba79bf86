"""Writes tests/data/run-early-rise: 2 ranks, 30 sampled steps (interval 10) whose step time goes
from about 1 ms to about 21 ms at step 30, the fourth sampled step: among the first 8, which set
the step-time onset's baseline, so `laggard analyze` finds no onset and says why."""
import json
import os
import random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run-early-rise")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(7)
    for rank in range(2):
        with open(os.path.join(OUT, "rank-%d.jsonl" % rank), "w") as f:
            for i in range(30):
                step = 10 * i
                work = (20.0 if i >= 3 else 0.0) + 0.9 * (1 + rng.uniform(-0.01, 0.01))
                sample = {"schema": "laggard.sample/1", "rank": rank, "world_size": 2,
                          "step": step, "host": "node-0", "cohort": "dp",
                          "step_ms": round(work + 0.1, 3),
                          "stages": [{"name": "forward", "kind": "compute",
                                      "ms": round(work, 3), "calls": 1}]}
                f.write(json.dumps(sample, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
