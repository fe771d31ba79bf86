"""One rank of test_mpi.py, started by mpirun: laggard.Analyzer(transport="mpi") over
MPI_COMM_WORLD, without torch.distributed. Every step's stages are given with add() (rank
`--slow-rank`'s forward `--slow-ms` longer, the others waiting for it in communication); the rank
writes OUT/result-<rank>.json: its counters and, on the analysis rank, its latest metrics."""

import argparse
import json
import os
import sys

import laggard


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    an = laggard.Analyzer(enabled=True, interval=1, transport="mpi", log_dir=a.out,
                          close_timeout_s=60.0, side_channel_timeout_s=60.0)
    for step in range(a.steps):
        an.begin_step(step)
        slow = a.slow_ms if an.rank == a.slow_rank else 0.0
        an.add("forward", 20.0 + slow + 0.1 * ((step * 7 + an.rank) % 5))
        an.add("backward", 30.0 + 0.1 * ((step * 3 + an.rank) % 5))
        an.add("communication", 2.0 + (a.slow_ms if a.slow_rank >= 0 else 0.0) - slow)
        an.end_step()
    an.close()
    result = {"rank": an.rank, "world_size": an.world_size, "counters": an.counters(),
              "latest_metrics": an.latest_metrics() if an.is_analysis_rank else None}
    with open(os.path.join(a.out, "result-%d.json" % an.rank), "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
