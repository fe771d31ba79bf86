#!/usr/bin/env python3
"""Writes the run directories that the compare/report tests read (deterministic: fixed seeds).

Each run: 8 ranks on 4 hosts (unless said otherwise), 20 sampled steps (0, 10, ..., 190); the first
2 sampled steps are warm-up (1.5x slower); every stage time has 3% Gaussian noise; the all-reduce
('communication') ends when the slowest rank arrives, so the others wait in it.

  cmp-base/            the known-good baseline
  cmp-base-rerun/      the same job again (same distribution, another seed): nothing regressed
  cmp-slow-backward/   backward +15% on every rank, optimizer +10%: origin backward, victim optimizer
  cmp-rank5-backward/  only rank 5's backward +30%: the median rank waits longer in communication
  cmp-few-steps/       6 sampled steps: too few after the warm-up (UNKNOWN)
  cmp-world4/          4 ranks, backward +15%: per-rank comparison skipped
  cmp-other-stages/    no dataloader, an extra 'attention' stage: only the common stages compared
  cmp-disjoint/        2 ranks, stages 'load' and 'step' only: nothing in common with cmp-base
  run-html-escape/     4 ranks whose host names hold HTML ('<script>', quotes, '&'); rank 1's
                       forward 1.4x slower from step 60: for the report's escaping test

Usage: python3 tests/data/make_compare_runs.py [OUT_DIR]   (default: tests/data/)
"""
import json
import os
import random
import sys

STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 60.0),
          ("backward", "compute", 40.0), ("communication", "communication", 6.0),
          ("optimizer", "compute", 5.0)]


def write_run(path, seed, world=8, steps=20, factors=None, rank_factors=None, stages=STAGES,
              hosts=None, slow_from=0):
    """factors: stage -> multiplier for every rank; rank_factors: (rank, stage) -> multiplier."""
    factors = factors or {}
    rank_factors = rank_factors or {}
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    files = [open(os.path.join(path, f"rank-{r}.jsonl"), "w") for r in range(world)]
    for i in range(steps):
        step = 10 * i
        warm = 1.5 if i < 2 else 1.0
        own = []
        for r in range(world):
            t = {}
            for name, kind, base in stages:
                if kind == "communication":
                    continue
                ms = base * warm * rng.gauss(1.0, 0.03) * factors.get(name, 1.0)
                if step >= slow_from:
                    ms *= rank_factors.get((r, name), 1.0)
                t[name] = ms
            own.append(t)
        finish = [sum(t.values()) for t in own]
        latest = max(finish)
        for r in range(world):
            comm = [s for s in stages if s[1] == "communication"]
            for name, _, base in comm:
                own[r][name] = base * rng.gauss(1.0, 0.03) * factors.get(name, 1.0) + latest - finish[r]
            out = [{"name": n, "kind": k, "ms": round(own[r][n], 3), "calls": 1} for n, k, _ in stages]
            host = hosts[r] if hosts else f"node-{r // 2}"
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": world, "step": step,
                      "host": host, "cohort": "dp",
                      "step_ms": round(sum(s["ms"] for s in out) + 0.5, 3), "stages": out}
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files:
        f.close()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    j = lambda name: os.path.join(out, name)
    write_run(j("cmp-base"), seed=101)
    write_run(j("cmp-base-rerun"), seed=202)
    write_run(j("cmp-slow-backward"), seed=303, factors={"backward": 1.15, "optimizer": 1.10})
    write_run(j("cmp-rank5-backward"), seed=404, rank_factors={(5, "backward"): 1.30})
    write_run(j("cmp-few-steps"), seed=505, steps=6)
    write_run(j("cmp-world4"), seed=606, world=4, factors={"backward": 1.15})
    other = [("forward", "compute", 60.0), ("attention", "compute", 12.0),
             ("backward", "compute", 40.0), ("communication", "communication", 6.0),
             ("optimizer", "compute", 5.0)]
    write_run(j("cmp-other-stages"), seed=707, stages=other)
    write_run(j("cmp-disjoint"), seed=909, world=2, steps=6,
              stages=[("load", "data", 1.0), ("step", "compute", 10.0)])
    hosts = ["node-0", "<script>alert(\"x\")</script>", "o'brien & co", "node-3"]
    write_run(j("run-html-escape"), seed=808, world=4, steps=20, hosts=hosts,
              rank_factors={(1, "forward"): 1.4}, slow_from=60)


if __name__ == "__main__":
    main()
