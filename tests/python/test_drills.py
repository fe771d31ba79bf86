"""Failure drills: real rank processes (gloo), one fault each. Every drill checks that training
finishes, that every sample of every rank that survives is in its rank log, and that every loss
is counted (docs/reference/failure-contract.md): a sample is in the log or in rank_log_lost, and it reached
the live analysis or is in gather_dropped.

The ranks train independent models (tests/python/drill_worker.py): only laggard's side channel
spans them, so a hung or dead peer stops no one's training, as with a peer that hangs outside the
training collectives (or a job whose data-parallel groups do not include it).
"""

import json
import os
import signal
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")

from laggard.launch import free_port  # noqa: E402
from ranks import rank_context  # noqa: E402

pytestmark = pytest.mark.multiproc

STEPS = 60


def _child(rank, world, port, cfg):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    code = 1
    try:
        import drill_worker

        code = drill_worker.main(cfg)
    finally:
        # No process-group teardown: it would wait for peers that are dead or stopped.
        os._exit(code or 0)


def start_ranks(n, cfg):
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, n, port, cfg)) for r in range(n)]
    for p in procs:
        p.start()
    return procs


def join(procs, timeout_s):
    """Waits for every process in `procs` up to timeout_s in all; kills and fails on a hang."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.join()
    assert not alive, "ranks still running after %.0f s: %s" % (timeout_s, [p.pid for p in alive])


def config(tmp_path, **kw):
    cfg = dict(out=str(tmp_path), log_dir=str(tmp_path / "logs"), steps=STEPS, step_ms=5.0,
               close_timeout_s=3.0)
    cfg.update(kw)
    return cfg


def result(cfg, rank):
    with open(os.path.join(cfg["out"], "result-%d.json" % rank)) as f:
        return json.load(f)


def logged_steps(log_dir, rank):
    """The steps of the whole, well-formed lines of rank-<rank>.jsonl."""
    path = os.path.join(log_dir, "rank-%d.jsonl" % rank)
    if not os.path.exists(path):
        return []
    steps = []
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            assert doc["rank"] == rank
            steps.append(doc["step"])
    return steps


def check_survivor(cfg, rank, steps=STEPS):
    """Training finished; every sample is in the rank log; every sample the live analysis did
    not get is counted."""
    r = result(cfg, rank)
    c = r["counters"]
    assert r["steps"] == steps, r
    assert logged_steps(cfg["log_dir"], rank) == list(range(steps))
    assert c["samples_emitted"] == c["queue_pushed"] == c["rank_log_written"] == steps, c
    assert c["queue_dropped"] == 0 and c["rank_log_lost"] == 0, c
    assert c["gather_sent"] + c["gather_dropped"] == steps, c
    return r


def test_blocking_sink_holds_up_neither_training_nor_the_rank_logs(tmp_path):
    # The analysis rank's sink blocks 30 s per call; close gives up after 3 s.
    cfg = config(tmp_path, fault="block_sink", fault_rank=0, sink_block_s=30.0)
    join(start_ranks(2, cfg), 60)
    for rank in (0, 1):
        r = check_survivor(cfg, rank)
        assert r["train_s"] < 15.0  # not one sink call's worth
        assert r["close_s"] < 3.0 + 5.0
    c0 = result(cfg, 0)["counters"]
    # The sinks have a thread of their own: rank 0's side channel and analysis went on (nothing
    # dropped, every window analysed), the reports the stuck sink could not take were dropped,
    # and at close the stuck sink was left behind: all counted.
    assert c0["gather_dropped"] == 0 and c0["windows"] == STEPS, c0
    assert c0["sink_writes"] == 0 and c0["sink_reports_dropped"] > 0, c0
    assert c0["report_errors"] >= 1, c0


def test_hung_peer_stops_neither_the_others_training_nor_their_logs(tmp_path):
    # Rank 2 stops itself (SIGSTOP) at step 10 with the default side-channel timeout (300 s).
    # Each rank sends to its parent in the gather tree (here rank 0, the analysis rank) without
    # waiting for anyone else: the others' training, logs and samples go on; the analysis rank
    # analyses the windows without rank 2 (incomplete_windows).
    cfg = config(tmp_path, fault="stop", fault_rank=2, fault_step=10)
    procs = start_ranks(3, cfg)
    try:
        join(procs[:2], 60)
        for rank in (0, 1):
            c = check_survivor(cfg, rank)["counters"]
            assert c["gather_dropped"] == 0, c
        c0 = result(cfg, 0)["counters"]
        assert c0["incomplete_windows"] > 0 and c0["windows"] == STEPS, c0
        # The stopped rank's log holds its samples up to the writer's last turn before the stop
        # (it writes every 100 ms).
        stopped = logged_steps(cfg["log_dir"], 2)
        assert stopped == list(range(len(stopped))) and len(stopped) <= 10
    finally:
        os.kill(procs[2].pid, signal.SIGCONT)
    join(procs[2:], 60)
    # Resumed, the hung rank finishes too, with its whole log; its parent is gone, so what it
    # sent is never acknowledged: counted.
    c = check_survivor(cfg, 2)["counters"]
    assert c["gather_dropped"] > 0 and c["report_errors"] >= 1, c


@pytest.mark.parametrize("victim,link_delay_s", [(2, 0.0), (0, 0.0), (2, 1.0)],
                         ids=["peer", "analysis_rank", "peer_before_its_links_connected"])
def test_killed_rank(tmp_path, victim, link_delay_s):
    # peer_before_its_links_connected: the victim's links start 1 s after the setup (as on a
    # rank starved of CPU), so it dies before they connect; of a pair gloo lets one side wait
    # for the other to connect, without a time limit, and the analysis rank, when it is that
    # side, learns of the death only because the link never said hello.
    cfg = config(tmp_path, fault="kill", fault_rank=victim, fault_step=10,
                 side_channel_timeout_s=20.0, close_timeout_s=30.0, link_delay_s=link_delay_s)
    procs = start_ranks(3, cfg)
    join(procs, 60)
    assert procs[victim].exitcode == -signal.SIGKILL
    for rank in (0, 1, 2):
        if rank == victim:
            continue
        c = check_survivor(cfg, rank)["counters"]
        if victim == 0:
            # Their parent in the gather tree died: what it did not acknowledge is counted, with
            # a warning (how much that is depends on how far ahead of it they were).
            assert c["gather_dropped"] == 0 or c["report_errors"] >= 1, c
        elif rank == 1:
            assert c["gather_dropped"] == 0, c  # a sibling's death costs it nothing
        else:
            # The analysis rank: its link to the dead rank broke (a counted warning) and the
            # windows after it are analysed without it.
            assert c["report_errors"] >= 1 and c["incomplete_windows"] > 0, c
            # ... and its close() does not wait for the dead rank's last batch, which never
            # comes (the broken link says so).
            assert check_survivor(cfg, rank)["close_s"] < 5.0
    # What the victim wrote before it died is whole lines, in order.
    steps = logged_steps(cfg["log_dir"], victim)
    assert steps == list(range(len(steps))) and len(steps) <= 10


def _mount_tiny_tmpfs(path):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", path],
                       capture_output=True)
    return r.returncode == 0


def test_full_disk_loses_only_what_does_not_fit_and_counts_it(tmp_path):
    # A 64 KiB tmpfs where one can be mounted (root with CAP_SYS_ADMIN); elsewhere the rank
    # process's file size limit (RLIMIT_FSIZE, 64 KiB: writes past it fail with EFBIG).
    logs = str(tmp_path / "logs")
    mounted = _mount_tiny_tmpfs(logs)
    steps = 600  # ~300 bytes a line: ~180 KB, far more than fits
    cfg = config(tmp_path, steps=steps, step_ms=0.5, log_dir=logs, fsize_limit=not mounted)
    try:
        join(start_ranks(1, cfg), 60)
        r = result(cfg, 0)
        c = r["counters"]
        assert r["steps"] == steps  # training finished
        written = logged_steps(logs, 0)
        assert 0 < len(written) < steps
        assert written == list(range(len(written)))  # the first ones, whole
        assert c["rank_log_written"] == len(written)
        assert c["rank_log_written"] + c["rank_log_lost"] == c["queue_pushed"] == steps, c
        assert c["queue_dropped"] == 0
        assert c["report_errors"] >= c["rank_log_lost"], c  # one count per line lost
    finally:
        if mounted:
            subprocess.run(["umount", logs])


def test_unwritable_log_dir_counts_every_line(tmp_path):
    # A log dir that cannot be created (its parent is a file): even root cannot write there.
    (tmp_path / "file").write_text("")
    cfg = config(tmp_path, steps=30, log_dir=str(tmp_path / "file" / "logs"))
    join(start_ranks(1, cfg), 60)
    r = result(cfg, 0)
    c = r["counters"]
    assert r["steps"] == 30
    assert c["rank_log_written"] == 0 and c["rank_log_lost"] == c["queue_pushed"] == 30, c
    assert c["report_errors"] >= 30, c


def test_fork_in_a_rank(tmp_path):
    # A rank forks at step 10 (a data-loader worker started late, say): the child records
    # nothing and counts its steps; the parent's log has every one of its samples.
    cfg = config(tmp_path, fault="fork", fault_rank=0, fault_step=10, child_steps=7)
    join(start_ranks(2, cfg), 60)
    for rank in (0, 1):
        check_survivor(cfg, rank)
    with open(os.path.join(cfg["out"], "child-0.json")) as f:
        child = json.load(f)
    assert child["forked_steps_dropped"] == 7 and child["report_errors"] == 1
