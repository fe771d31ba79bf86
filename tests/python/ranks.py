"""Starts real rank processes: for the multi-process tests, and for the recorders of real traces
in tests/data (which put this folder on sys.path).

Ranks are forked from a fork server (`rank_context()`): a clean process started once, with
torch and the trainers' libraries imported, which saves each rank seconds of import time on a
2-core machine. They are not forked from the pytest process itself: after earlier tests it holds
threads (gloo's loops, a tracker's service threads) whose locks a forked child can inherit held,
and ranks forked from it hung before training now and then. A program of its own (a recorder)
may fork them from itself instead (`spawn_ranks(..., ctx=multiprocessing.get_context("fork"))`).

spawn_ranks starts `world` processes with the environment a launcher gives (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each running worker(rank, world, port,
*args), waits for them and raises when one failed. run_ranks (ddp_worker.main(argv)) and
run_worker (`module`.run) are built on it; their results come back through the result-<r>.json
files the ranks write.
"""

import contextlib
import importlib
import json
import multiprocessing
import os
import subprocess
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


def _rank_main(worker, rank, world, port, args):
    """A rank process: the launcher's environment, then worker(rank, world, port, *args); exits
    with the worker's return value (None: 0), 1 when it raised (the traceback on stderr)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    code = 1
    try:
        code = worker(rank, world, port, *args)
    except BaseException:
        import traceback

        traceback.print_exc()  # the caller's captured output shows why the rank failed
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


def spawn_ranks(worker, world, args=(), ctx=None, timeout_s=120):
    """Runs worker(rank, world, port, *args) on `world` rank processes (the environment a
    launcher gives, a free MASTER_PORT) started from ctx (default: the fork server; a worker
    that is not a module-level function needs a fork context); waits up to timeout_s for each,
    kills what is left, raises RuntimeError when a rank failed or hung."""
    ctx = ctx or rank_context()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(worker, r, world, port, tuple(args)))
             for r in range(world)]
    wait_ranks(procs, timeout_s)


def _ddp_main(rank, world, port, argv):
    import ddp_worker

    return ddp_worker.main(argv)


def _module_run(rank, world, port, module, cfg):
    return importlib.import_module(module).run(rank, world, port, cfg)


def run_worker(module, world, cfg, out_dir, timeout_s=120):
    """Runs `module`.run(rank, world, port, cfg) on `world` ranks (the environment a launcher
    gives); returns the result-<r>.json dicts they wrote in out_dir."""
    spawn_ranks(_module_run, world, (module, cfg), timeout_s=timeout_s)
    return read_results(out_dir, world)


def run_ranks(n, argv, out_dir, timeout_s=90):
    """Runs ddp_worker on n ranks; returns the per-rank result dicts (rank order)."""
    os.makedirs(str(out_dir), exist_ok=True)
    spawn_ranks(_ddp_main, n, (["--out", str(out_dir)] + list(argv),), timeout_s=timeout_s)
    return read_results(out_dir, n)


def wait_ranks(procs, timeout_s):
    """Starts the rank processes (rank order), waits up to timeout_s for each, kills what is
    left; raises RuntimeError when a rank failed or hung."""
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
        raise RuntimeError("ranks failed: exit codes %s%s" % (
            codes, " (timed out)" if alive else ""))


def read_results(out_dir, world):
    """The result-<r>.json dicts the ranks wrote in out_dir (rank order)."""
    results = []
    for r in range(world):
        with open(os.path.join(str(out_dir), "result-%d.json" % r)) as f:
            results.append(json.load(f))
    return results


def join_ranks(procs, out_dir, timeout_s):
    """wait_ranks, then the result-<r>.json dicts the ranks wrote in out_dir."""
    wait_ranks(procs, timeout_s)
    return read_results(out_dir, len(procs))


@contextlib.contextmanager
def cpu_burners(n=2):
    """n processes spinning on the CPU (2: one per core of the 2-core machine the tests run on)
    for the length of the block, killed at its end."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
