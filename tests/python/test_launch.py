"""python -m laggard.launch: environment, worst exit code, signal forwarding."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from laggard.launch import worst_exit_code

import testenv

ENV = testenv.subprocess_env()

SCRIPT = r"""
import json, os, signal, sys, time
out = sys.argv[1]
rank = int(os.environ["RANK"])
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
with open(os.path.join(out, "env-%d.json" % rank), "w") as f:
    json.dump({k: os.environ.get(k) for k in keys} | {"argv": sys.argv[2:]}, f)
if sys.argv[2] == "exit":
    sys.exit(int(sys.argv[3 + rank]))
if sys.argv[2] == "one-fails" and rank == 0:
    sys.exit(5)
def on_int(signum, frame):
    open(os.path.join(out, "sigint-%d" % rank), "w").close()
    sys.exit(7)
signal.signal(signal.SIGINT, on_int)
open(os.path.join(out, "ready-%d" % rank), "w").close()
time.sleep(60)
sys.exit(1)
"""


def launch(tmp_path, *args):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    return [sys.executable, "-m", "laggard.launch", "-n", "2", str(script), str(tmp_path)] + \
        list(args)


def test_environment_and_worst_exit_code(tmp_path):
    out = subprocess.run(launch(tmp_path, "exit", "0", "3"), env=ENV, timeout=60)
    assert out.returncode == 3
    envs = [json.loads((tmp_path / ("env-%d.json" % r)).read_text()) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["LOCAL_WORLD_SIZE"] == "2" for e in envs)
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert envs[0]["MASTER_ADDR"] == "127.0.0.1"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and int(envs[0]["MASTER_PORT"]) > 0
    assert envs[0]["argv"] == ["exit", "0", "3"]


def test_all_ranks_succeed(tmp_path):
    assert subprocess.run(launch(tmp_path, "exit", "0", "0"), env=ENV, timeout=60).returncode == 0


def test_sigint_is_forwarded_to_every_rank(tmp_path):
    p = subprocess.Popen(launch(tmp_path, "wait"), env=ENV)
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / ("ready-%d" % r)).exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 7
        assert (tmp_path / "sigint-0").exists() and (tmp_path / "sigint-1").exists()
    finally:
        if p.poll() is None:
            p.kill()


def test_a_failed_rank_gets_the_others_stopped(tmp_path):
    t0 = time.monotonic()
    script = launch(tmp_path, "one-fails")
    script[5:5] = ["--kill-grace", "1"]
    out = subprocess.run(script, env=ENV, timeout=60)
    assert time.monotonic() - t0 < 30  # rank 1 would sleep 60 s
    assert out.returncode == 128 + signal.SIGTERM  # the worst: rank 1, terminated


def test_worst_exit_code():
    assert worst_exit_code([0, 0]) == 0
    assert worst_exit_code([0, 1, 3]) == 3
    assert worst_exit_code([0, -9, 1]) == 137  # killed by SIGKILL


# -- torchrun ------------------------------------------------------------------------------------

@pytest.mark.multiproc
def test_example_trains_under_torchrun_and_each_rank_logs(tmp_path):
    # torchrun (PyTorch >= 2.1) is the launcher the docs show: its environment reaches laggard,
    # each rank logs as itself, and the injected 30 ms of rank 1's forward is in its samples.
    import statistics

    pytest.importorskip("torch")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.access(torchrun, os.X_OK):
        pytest.skip("no torchrun beside %s" % sys.executable)
    import laggard

    log_dir = tmp_path / "logs"
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2",
           os.path.join(testenv.ROOT, "examples", "train_ddp.py"), "--steps", "30",
           "--slow-rank", "1", "--straggler-analysis", "--straggler-interval", "5",
           "--straggler-log-dir", str(log_dir)]
    out = subprocess.run(cmd, env=testenv.subprocess_env(OMP_NUM_THREADS="1"), cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in log_dir.glob("rank-*.jsonl")) == ["rank-0.jsonl",
                                                                    "rank-1.jsonl"]
    windows, stats = laggard.read_run(str(log_dir))
    assert stats["malformed"] == 0 and [step for step, _ in windows] == list(range(0, 30, 5))
    forward = {0: [], 1: []}
    for _, samples in windows:
        assert sorted((s.rank, s.world_size) for s in samples) == [(0, 2), (1, 2)]
        for s in samples:
            forward[s.rank].append(s.find("forward").ms)
    assert statistics.median(forward[1]) > statistics.median(forward[0]) + 20, forward
