"""Run directories for the exclude and fleet tests: per-rank logs in the documented format
(docs/reference/formats.md, laggard.sample/1) of a data-parallel job on several hosts, analysed by the real
analysis (laggard.analyze_run) in the tests. Deterministic for a seed.

The model is examples/make_example_run.py's: every rank computes (dataloader, forward, backward,
optimizer with 2 % jitter), then all of them meet in the gradient all-reduce, which ends when
the slowest arrives, so every other rank waits there for a slow one.
"""

import json
import os
import random

STAGES = [("dataloader", "data", 2.0), ("forward", "compute", 60.0),
          ("backward", "compute", 40.0), ("communication", "communication", 6.0),
          ("optimizer", "compute", 5.0)]


def write_run(path, hosts, slow_ranks=(), seed=0, steps=300, slow_from=100, slowdown=1.5,
              slow_stage="forward", comm_extra=None, drop_ranks=(), host_field=True,
              own_stage=None):
    """Writes rank-<r>.jsonl for len(hosts) ranks (rank r on hosts[r]) into `path`.
    slow_ranks: ranks whose `slow_stage` is `slowdown` times slower from step `slow_from`;
    comm_extra: {rank: ms} added to a rank's communication alone (a wait with no slow rank);
    drop_ranks: ranks whose log is not written (a partial run); host_field False leaves
    `host` out of the samples; own_stage (rank, name, ms): from `slow_from`, that rank alone
    spends `ms` in a stage no other rank has (nothing to compare it with: the others' wait for
    it is the only finding). Returns `path`."""
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    world = len(hosts)
    files = {r: open(os.path.join(path, "rank-%d.jsonl" % r), "w")
             for r in range(world) if r not in drop_ranks}
    for step in range(0, steps, 10):
        own = []
        for r in range(world):
            t = {}
            for name, kind, base in STAGES:
                if kind == "communication":
                    continue
                ms = base * rng.gauss(1.0, 0.02)
                if r in slow_ranks and name == slow_stage and step >= slow_from:
                    ms *= slowdown
                t[name] = ms
            if own_stage and r == own_stage[0] and step >= slow_from:
                t[own_stage[1]] = own_stage[2] * rng.gauss(1.0, 0.02)
            own.append(t)
        latest = max(sum(t.values()) for t in own)
        for r in range(world):
            wait = latest - sum(own[r].values())
            own[r]["communication"] = (6.0 * rng.gauss(1.0, 0.02) + wait +
                                       ((comm_extra or {}).get(r, 0.0) if step >= slow_from
                                        else 0.0))
            if r not in files:
                continue
            stages = [{"name": n, "kind": k, "ms": round(own[r][n], 3), "calls": 1}
                      for n, k, _ in STAGES]
            if own_stage and own_stage[1] in own[r]:
                stages.append({"name": own_stage[1], "kind": "other",
                               "ms": round(own[r][own_stage[1]], 3), "calls": 1})
            sample = {"schema": "laggard.sample/1", "rank": r, "world_size": world,
                      "step": step, "cohort": "dp",
                      "step_ms": round(sum(s["ms"] for s in stages) + 0.5, 3), "stages": stages}
            if host_field:
                sample["host"] = hosts[r]
            files[r].write(json.dumps(sample, separators=(",", ":")) + "\n")
    for f in files.values():
        f.close()
    return str(path)


def hosts_of(names, ranks_per_host=2):
    """The per-rank host list of `names`, each with `ranks_per_host` consecutive ranks."""
    return [h for h in names for _ in range(ranks_per_host)]
