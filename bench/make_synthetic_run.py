#!/usr/bin/env python3
"""Writes a large synthetic run directory (laggard.sample/1) for ingest and end-to-end timing.

Usage: python3 bench/make_synthetic_run.py OUT_DIR RANKS SAMPLED_STEPS [--values]
  e.g. python3 bench/make_synthetic_run.py /tmp/big64 64 4800    (~210 MB)
  --values: each line also records values (loss, grad_norm, tokens) and resource readings
  (clocks, throttling, host CPU), as laggard.sample/1's optional "values" and "resources".
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
    args = [a for a in sys.argv[1:] if a != "--values"]
    if len(args) != 3 or len(sys.argv) > 5:
        sys.exit(__doc__)
    out, ranks, steps = args[0], int(args[1]), int(args[2])
    values = "--values" in sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    for r in range(ranks):
        with open(os.path.join(out, "rank-%d.jsonl" % r), "w") as f:
            for s in range(steps):
                stages = ",".join('{"name":"%s","kind":"%s","ms":%.17g,"calls":1}'
                                  % (n, k, rng.uniform(1, 100)) for n, k in STAGES)
                extra = ""
                if values:
                    extra = (',"values":{"loss":%.17g,"grad_norm":%.17g,"tokens":32768},'
                             '"resources":{"gpu_sm_clock_mhz":1410,"gpu_temp_c":%d,'
                             '"gpu_throttle_thermal":0,"host_cpu_percent":%.17g}'
                             % (rng.uniform(1, 3), rng.uniform(0.1, 10), rng.randint(40, 80),
                                rng.uniform(0, 100)))
                f.write('{"schema":"laggard.sample/1","rank":%d,"world_size":%d,"step":%d,'
                        '"host":"node-%d","cohort":"dp","step_ms":%.17g,"stages":[%s]%s}\n'
                        % (r, ranks, s * 10, r // 8, rng.uniform(100, 200), stages, extra))


if __name__ == "__main__":
    main()
