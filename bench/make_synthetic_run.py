#!/usr/bin/env python3
"""Writes a large synthetic run directory (laggard.sample/1) for ingest and end-to-end timing.

Usage: python3 bench/make_synthetic_run.py OUT_DIR RANKS SAMPLED_STEPS [--values]
           [--style full|laggard|other]
  e.g. python3 bench/make_synthetic_run.py /tmp/big64 64 4800    (~210 MB)
  --values: each line also records values (loss, grad_norm, tokens) and resource readings
  (clocks, throttling, host CPU), as laggard.sample/1's optional "values" and "resources".
  --style: how the numbers and keys are written.
    full     (default) laggard's key order, every time with 17 significant digits.
    laggard  what laggard's recorder writes: its key order, times taken in whole nanoseconds
             (so at most 6 decimals of a millisecond), each the shortest text of its double.
    other    another writer's line: other key order ("step" first, a stage's "ms" before its
             "name"), ", " and ": " between items (Python's json.dumps), 3 decimals, an extra
             field ("time") laggard does not read.
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
STYLES = ("full", "laggard", "other")


def number(x, style):
    if style == "full":
        return "%.17g" % x
    if style == "laggard":
        return repr(round(x * 1e6) / 1e6)  # whole nanoseconds; repr is the shortest text
    return "%.3f" % x


def line(r, ranks, s, rng, style, values):
    ms = [rng.uniform(1, 100) for _ in STAGES]
    extra = None
    if values:
        extra = (rng.uniform(1, 3), rng.uniform(0.1, 10), rng.randint(40, 80), rng.uniform(0, 100))
    step_ms = rng.uniform(100, 200)
    if style == "other":
        stages = ", ".join('{"ms": %s, "name": "%s", "kind": "%s", "calls": 1}'
                           % (number(t, style), n, k) for t, (n, k) in zip(ms, STAGES))
        tail = ""
        if values:
            tail = (', "values": {"loss": %s, "grad_norm": %s, "tokens": 32768}, "resources": '
                    '{"gpu_sm_clock_mhz": 1410, "gpu_temp_c": %d, "gpu_throttle_thermal": 0, '
                    '"host_cpu_percent": %s}' % (number(extra[0], style), number(extra[1], style),
                                                 extra[2], number(extra[3], style)))
        return ('{"step": %d, "rank": %d, "world_size": %d, "time": %.6f, "schema": '
                '"laggard.sample/1", "step_ms": %s, "host": "node-%d", "cohort": "dp", '
                '"stages": [%s]%s}\n' % (s * 10, r, ranks, 1.7e9 + s, number(step_ms, style),
                                         r // 8, stages, tail))
    stages = ",".join('{"name":"%s","kind":"%s","ms":%s,"calls":1}' % (n, k, number(t, style))
                      for t, (n, k) in zip(ms, STAGES))
    tail = ""
    if values:
        tail = (',"values":{"loss":%s,"grad_norm":%s,"tokens":32768},'
                '"resources":{"gpu_sm_clock_mhz":1410,"gpu_temp_c":%d,'
                '"gpu_throttle_thermal":0,"host_cpu_percent":%s}'
                % (number(extra[0], style), number(extra[1], style), extra[2],
                   number(extra[3], style)))
    return ('{"schema":"laggard.sample/1","rank":%d,"world_size":%d,"step":%d,'
            '"host":"node-%d","cohort":"dp","step_ms":%s,"stages":[%s]%s}\n'
            % (r, ranks, s * 10, r // 8, number(step_ms, style), stages, tail))


def main():
    argv = sys.argv[1:]
    values = "--values" in argv
    argv = [a for a in argv if a != "--values"]
    style = "full"
    if "--style" in argv:
        i = argv.index("--style")
        if i + 1 >= len(argv) or argv[i + 1] not in STYLES:
            sys.exit(__doc__)
        style = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) != 3:
        sys.exit(__doc__)
    out, ranks, steps = argv[0], int(argv[1]), int(argv[2])
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    for r in range(ranks):
        with open(os.path.join(out, "rank-%d.jsonl" % r), "w") as f:
            for s in range(steps):
                f.write(line(r, ranks, s, rng, style, values))


if __name__ == "__main__":
    main()
