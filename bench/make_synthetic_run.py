#!/usr/bin/env python3
"""Writes a large synthetic run directory (laggard.sample/1) for ingest and end-to-end timing.

Usage: python3 bench/make_synthetic_run.py OUT_DIR RANKS SAMPLED_STEPS
  e.g. python3 bench/make_synthetic_run.py /tmp/big64 64 4800    (~210 MB)
       /usr/bin/time -f "%e s %M KB" ./build/tools/laggard analyze -q /tmp/big64 > /dev/null
Eight stages per sample with random times (fixed seed): the figures measure reading and analysis,
not verdicts.
"""
import os
import random
import sys

STAGES = [("dataloader", "data"), ("forward", "compute"), ("backward", "compute"),
          ("communication", "communication"), ("optimizer", "compute"), ("embedding", "compute"),
          ("attention", "compute"), ("moe", "compute")]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    out, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    for r in range(ranks):
        with open(os.path.join(out, "rank-%d.jsonl" % r), "w") as f:
            for s in range(steps):
                stages = ",".join('{"name":"%s","kind":"%s","ms":%.17g,"calls":1}'
                                  % (n, k, rng.uniform(1, 100)) for n, k in STAGES)
                f.write('{"schema":"laggard.sample/1","rank":%d,"world_size":%d,"step":%d,'
                        '"host":"node-%d","cohort":"dp","step_ms":%.17g,"stages":[%s]}\n'
                        % (r, ranks, s * 10, r // 8, rng.uniform(100, 200), stages))


if __name__ == "__main__":
    main()
