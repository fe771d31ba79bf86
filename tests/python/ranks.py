"""Starts real rank processes for the multi-process tests.

Ranks are forked from a fork server (`rank_context()`): a clean process started once, with
torch and the trainers' libraries imported, which saves each rank seconds of import time on a
2-core machine. They are not forked from the pytest process itself: after earlier tests it holds
threads (gloo's loops, a tracker's service threads) whose locks a forked child can inherit held,
and ranks forked from it hung before training now and then.

run_ranks starts `n` such processes with the environment a launcher gives (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each running ddp_worker.main(argv). Results come back
through the files the ranks write.
"""

import importlib
import json
import multiprocessing
import os
import sys

from laggard.launch import free_port

# Imported once by the fork server, inherited by every rank it forks (a module that is not
# installed is skipped by the server).
_PRELOAD = ["torch", "torch.distributed", "laggard", "laggard.torch", "transformers", "lightning",
            "megatron.core", "megatron.core.pipeline_parallel"]


def rank_context():
    """The multiprocessing context the rank processes start from: the fork server."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _child(rank, world, port, argv):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import ddp_worker

    code = 1
    try:
        code = ddp_worker.main(argv)
    finally:
        os._exit(code or 0)


def _worker_child(rank, world, port, module, cfg):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    code = 1
    try:
        code = importlib.import_module(module).run(rank, world, port, cfg)
    except BaseException:
        import traceback

        traceback.print_exc()  # the test's captured output shows why the rank failed
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


def run_worker(module, world, cfg, out_dir, timeout_s=120):
    """Runs `module`.run(rank, world, port, cfg) on `world` ranks (the environment a launcher
    gives); returns the result-<r>.json dicts they wrote in out_dir."""
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_worker_child, args=(r, world, port, module, cfg))
             for r in range(world)]
    return join_ranks(procs, out_dir, timeout_s)


def run_ranks(n, argv, out_dir, timeout_s=90):
    """Runs ddp_worker on n ranks; returns the per-rank result dicts (rank order)."""
    os.makedirs(str(out_dir), exist_ok=True)
    ctx = rank_context()
    port = free_port()
    argv = ["--out", str(out_dir)] + list(argv)
    procs = [ctx.Process(target=_child, args=(r, n, port, argv)) for r in range(n)]
    return join_ranks(procs, out_dir, timeout_s)


def join_ranks(procs, out_dir, timeout_s):
    """Starts the rank processes (rank order), waits up to timeout_s for each, kills what is
    left, raises when a rank failed; returns the result-<r>.json dicts they wrote in out_dir."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join()
    codes = [p.exitcode for p in procs]
    if alive or any(c != 0 for c in codes):
        raise AssertionError("ranks failed: exit codes %s%s" % (
            codes, " (timed out)" if alive else ""))
    results = []
    for r in range(len(procs)):
        with open(os.path.join(str(out_dir), "result-%d.json" % r)) as f:
            results.append(json.load(f))
    return results
