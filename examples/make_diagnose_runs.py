#!/usr/bin/env python3
"""Writes the example runs for `laggard diagnose` (deterministic), 4 ranks, 40 sampled steps,
each recording `loss`, `grad_norm` and `tokens` and the host's resource readings:

  diagnose/healthy/      nothing wrong.
  diagnose/nan-loss/     rank 2's loss is NaN from step 31; from step 33 its forward is slow too
                         (what a NaN often drags along): the chain stops at correctness.
  diagnose/thermal/      rank 1's GPU throttles (thermal) from step 10: its SM clock drops from
                         1,980 to 1,410 MHz and its forward and backward take 1.4x; the others
                         wait for it in the allreduce.
  diagnose/gc-pauses/    rank 3 pauses for Python's garbage collector (about 30 ms a step) inside
                         its backward from step 10.

Usage: python3 examples/make_diagnose_runs.py [OUT_DIR]   (default: examples/diagnose)
"""
import json
import os
import random
import sys

STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 30.0),
          ("backward", "compute", 45.0), ("allreduce", "communication", 4.0),
          ("optimizer", "compute", 3.0)]
WORLD, STEPS = 4, 40


def write_run(path, fault):
    os.makedirs(path, exist_ok=True)
    rng = random.Random(11)
    files = [open(os.path.join(path, f"rank-{r}.jsonl"), "w") for r in range(WORLD)]
    loss = [2.3] * WORLD
    for step in range(STEPS):
        ms = []
        for r in range(WORLD):
            own = {name: base * rng.gauss(1.0, 0.02) for name, _, base in STAGES}
            res = {"gpu_sm_clock_mhz": 1980, "gpu_sm_clock_max_mhz": 1980,
                   "gpu_throttle_thermal": 0, "gpu_temperature_c": round(rng.uniform(55, 60)),
                   "host_train_thread_cpu_pct": round(rng.uniform(55, 65), 1),
                   "host_top_thread_cpu_pct": round(rng.uniform(2, 6), 1),
                   "host_gc_pause_ms": round(rng.uniform(0.0, 0.4), 3),
                   "host_gc_collections": 0}
            if fault == "thermal" and r == 1 and step >= 10:
                res.update(gpu_sm_clock_mhz=1410, gpu_throttle_thermal=1,
                           gpu_temperature_c=round(rng.uniform(86, 89)))
                own["forward"] *= 1.4
                own["backward"] *= 1.4
            if fault == "gc-pauses" and r == 3 and step >= 10:
                pause = rng.uniform(25.0, 35.0)
                res.update(host_gc_pause_ms=round(pause, 3), host_gc_collections=2)
                own["backward"] += pause
            if fault == "nan-loss" and r == 2 and step >= 33:
                own["forward"] *= 1.5
            ms.append((own, res))
        # The allreduce ends when the last rank arrives: the others wait for it there.
        arrive = [sum(v for k, v in own.items() if k in ("dataloader", "forward", "backward"))
                  for own, _ in ms]
        last = max(arrive)
        for r, (own, res) in enumerate(ms):
            own["allreduce"] += last - arrive[r]
            grad_norm = rng.uniform(0.8, 1.2)
            loss[r] = loss[r] * 0.97 + 0.03 * (1.0 + 0.05 * grad_norm)
            value = loss[r]
            if fault == "nan-loss" and r == 2 and step >= 31:
                value = "NaN"
            stages = [{"name": name, "kind": kind, "ms": round(own[name], 3), "calls": 1}
                      for name, kind, _ in STAGES]
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": WORLD,
                      "step": step * 5, "host": f"node-{r // 2}",
                      "step_ms": round(sum(s["ms"] for s in stages) + 1.0, 3),
                      "stages": stages,
                      "values": {"loss": value, "grad_norm": round(grad_norm, 6),
                                 "tokens": 4096},
                      "resources": res}
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files:
        f.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                             "diagnose")
    for fault in ("healthy", "nan-loss", "thermal", "gc-pauses"):
        write_run(os.path.join(out, fault), fault)


if __name__ == "__main__":
    main()
